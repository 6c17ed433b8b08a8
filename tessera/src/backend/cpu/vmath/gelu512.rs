//! The AVX-512 kernels of [`super::gelu()`]: [`map`] (`dst[i] = gelu(src[i])`) and [`after`]
//! (`add`/`sub`/`mul`/`div` ops, then gelu), both giving every lane
//! [`gelu1::<Fused>`](super::gelu::gelu1)'s bits, a NaN's sign and payload aside (as
//! everywhere in the CPU backend: [`after`]'s `v − k` with a NaN `k` is `v·1 + (−k)`, which
//! returns `−k`'s NaN where `subss` returns `k`'s). They need AVX-512F and AVX-512DQ
//! ([`available`]).
//!
//! Per 16 lanes ([`central`]): `j = ⌊2|x|⌋` by `vcvttps2dq`, `u = (2|x| − ⌊2|x|⌋) − ½` from
//! `vreduceps` (the fraction is exact, so the one rounding is that of `2|x| − (j + ½)`), each
//! coefficient picked by one `vpermps`, seven FMAs, and one more FMA for the result:
//! `fma(−|x|, c, b)` with `b = x` for a positive sign (`x − x·c`, rounded once) and `b = −0`
//! for a negative sign (`x·c + (−0)`, which is `x·c` rounded, signed zeros included). Lanes
//! outside `|x| < 4.5` (`j ≥ 9` as an unsigned integer, which NaN and huge `|x|` also give)
//! may need [`fix`]: `x` itself from `POS_END` on, [`tail`] lane by lane (out of line) for
//! `x <= NEG_END` and NaN. Loops take two vectors per step ([`gelu32`]: a pair skips `fix`
//! when no lane has `|x| >= 4.5`, until the first pair that has one; then each vector is
//! tested for `fix`'s own lanes, [`special`]), then one, then a masked last one. [`after`]'s
//! loop ([`lanes_run`]) runs its ops in registers, then takes four vectors per step
//! ([`gelu_far_w`]: `x` blended in from `POS_END` on without a branch), and recomputes the
//! vectors with a lane at `x <= NEG_END` or NaN after each block of 1024 values.

use super::arith::Fused;
use super::gelu::{CT, NEG_END, POS_END, S, gelu1, tail};
use core::arch::x86_64::*;
use tessera_ir::graph::BinaryOp;

// `2|x|` is formed as `|x| + |x|`.
const _: () = assert!(S == 2.0);

/// Whether [`map`] and [`after`] may run: the active level is AVX-512 and the CPU has
/// AVX-512DQ (`vreduceps`).
#[inline]
pub(crate) fn available() -> bool {
    super::dispatch::has_avx512() && std::arch::is_x86_feature_detected!("avx512dq")
}

/// The coefficient table: `CT[k]`'s 16 interval values in one register each.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn table() -> [__m512; 8] {
    // SAFETY: `CT[k]` holds 16 floats.
    core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr()) })
}

/// The central form on 16 lanes (right for lanes with `NEG_END < x < POS_END`), and `j`
/// ([`odd`] marks the lanes [`fix`] must see).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn central(x: __m512, tab: &[__m512; 8]) -> (__m512, __m512i) {
    let ax = _mm512_abs_ps(x);
    let v = _mm512_add_ps(ax, ax);
    let j = _mm512_cvttps_epi32(v);
    // v − ⌊v⌋, exact (imm: M = 0, round down, no precision exception).
    let f = _mm512_reduce_ps::<0x09>(v);
    let u = _mm512_sub_ps(f, _mm512_set1_ps(0.5));
    let mut c = _mm512_permutexvar_ps(j, tab[7]);
    for k in (0..7).rev() {
        c = _mm512_fmadd_ps(c, u, _mm512_permutexvar_ps(j, tab[k]));
    }
    let xi = _mm512_castps_si512(x);
    let sign = _mm512_set1_epi32(i32::MIN);
    let nax = _mm512_castsi512_ps(_mm512_or_si512(xi, sign));
    // x for a clear sign bit, −0 (0x8000_0000) for a set one.
    let b = _mm512_castsi512_ps(_mm512_min_epu32(xi, sign));
    (_mm512_fmadd_ps(nax, c, b), j)
}

/// Whether a lane of `j` (from [`central`]) is outside `|x| < 4.5` (`j ≥ 9` unsigned; NaN
/// and huge `|x|` give `j = 0x8000_0000`).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn odd(j: __m512i) -> bool {
    _mm512_cmpge_epu32_mask(j, _mm512_set1_epi32(9)) != 0
}

/// `r` with `x` in the lanes at `x >= POS_END` and [`tail`] in those at `x <= NEG_END` or NaN.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn fix(x: __m512, r: __m512) -> __m512 {
    let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(POS_END));
    let r = _mm512_mask_mov_ps(r, big, x);
    let far = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x, _mm512_set1_ps(NEG_END));
    if far == 0 { r } else { far_blend(x, r, far) }
}

/// `r` with [`tail`] in the lanes of `far`; out of line, so that the loops keep their
/// registers for the central form.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline(never)]
#[cold]
fn far_blend(x: __m512, r: __m512, far: __mmask16) -> __m512 {
    let mut t = [0f32; 16];
    // SAFETY: `t` holds 16 floats.
    unsafe { _mm512_storeu_ps(t.as_mut_ptr(), x) };
    for e in t.iter_mut() {
        *e = tail::<Fused>(*e);
    }
    // SAFETY: as above.
    _mm512_mask_blend_ps(far, r, unsafe { _mm512_loadu_ps(t.as_ptr()) })
}

/// Whether a lane of `x` needs [`fix`] (`x >= POS_END`, `x <= NEG_END` or NaN): the bits of
/// `|x|` against those of `POS_END` for a clear sign bit, of `-NEG_END` for a set one
/// (unsigned; NaN's bits are above both).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn special(x: __m512) -> bool {
    let xi = _mm512_castps_si512(x);
    let ax = _mm512_castps_si512(_mm512_abs_ps(x));
    let neg = _mm512_srai_epi32::<31>(xi);
    let lo = _mm512_set1_epi32((-NEG_END).to_bits() as i32);
    let hi = _mm512_set1_epi32(POS_END.to_bits() as i32);
    // neg ? lo : hi, bit by bit.
    let t = _mm512_ternarylogic_epi32::<0xCA>(neg, lo, hi);
    _mm512_cmpge_epu32_mask(ax, t) != 0
}

/// `gelu1::<Fused>` on 16 lanes.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn gelu16(x: __m512, tab: &[__m512; 8]) -> __m512 {
    let r = central(x, tab).0;
    if special(x) { fix(x, r) } else { r }
}

/// `gelu1::<Fused>` on two vectors of 16 lanes. While `test` holds, the pair skips [`fix`]
/// when every lane has `|x| < 4.5` (one compare and one branch per pair); the first pair with
/// a lane outside clears `test`, and from then on each vector takes [`fix`] when [`special`]
/// (one compare and one branch per vector, on a condition that holds more rarely), so that
/// data often outside `|x| < 4.5` (such as `x · y + 1` of two normal samples) does not pay
/// a mispredicted branch per pair.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn gelu32(x0: __m512, x1: __m512, tab: &[__m512; 8], test: &mut bool) -> (__m512, __m512) {
    let ((r0, j0), (r1, j1)) = (central(x0, tab), central(x1, tab));
    if *test {
        if !odd(_mm512_max_epu32(j0, j1)) {
            return (r0, r1);
        }
        *test = false;
    }
    let r0 = if special(x0) { fix(x0, r0) } else { r0 };
    let r1 = if special(x1) { fix(x1, r1) } else { r1 };
    (r0, r1)
}

/// The mask of the first `n < 16` lanes.
#[inline]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// `dst[i] = gelu1::<Fused>(src[i])` for `i < n`: 32 lanes per step, then 16, then a masked
/// vector for the last `n % 16`.
///
/// # Safety
/// [`available`]; `src` readable and `dst` writable for `n` floats, either the same pointer
/// or not overlapping.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn map(src: *const f32, dst: *mut f32, n: usize) {
    // SAFETY: this function's contract.
    unsafe { map_with::<false>(src, dst, n, &table(), &mut true) }
}

/// [`map`] with non-temporal stores ([`put`]) into `dst`, which must not be `src`; the
/// caller orders them (`sfence`) before the output is read.
///
/// # Safety
/// As [`map`], `dst` not overlapping `src`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn map_stream(src: *const f32, dst: *mut f32, n: usize) {
    let tab = table();
    // Plain stores up to the first 64-byte boundary of `dst`, so that the rest streams.
    let h = dst.align_offset(64).min(n);
    // SAFETY: this function's contract; `h <= n`.
    unsafe {
        map_with::<false>(src, dst, h, &tab, &mut true);
        map_with::<true>(src.add(h), dst.add(h), n - h, &tab, &mut true)
    }
}

/// Stores the 16 floats of `r` at `p`: non-temporally (`vmovntps`) when `S` and `p` is
/// 64-byte aligned, else a plain store.
///
/// # Safety
/// [`available`]; `p` writable for 16 floats.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn put<const S: bool>(p: *mut f32, r: __m512) {
    // SAFETY: the caller's contract; the streaming store's address is 64-byte aligned.
    unsafe {
        if S && (p as usize).is_multiple_of(64) {
            _mm512_stream_ps(p, r)
        } else {
            _mm512_storeu_ps(p, r)
        }
    }
}

/// [`map`] with the table and [`gelu32`]'s `test` from the caller.
///
/// # Safety
/// As [`map`].
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn map_with<const S: bool>(
    src: *const f32,
    dst: *mut f32,
    n: usize,
    tab: &[__m512; 8],
    test: &mut bool,
) {
    let mut i = 0;
    // SAFETY (every access): within the first `n` floats, masked lanes not accessed.
    while i + 32 <= n {
        unsafe {
            let (r0, r1) = gelu32(
                _mm512_loadu_ps(src.add(i)),
                _mm512_loadu_ps(src.add(i + 16)),
                tab,
                test,
            );
            put::<S>(dst.add(i), r0);
            put::<S>(dst.add(i + 16), r1);
        }
        i += 32;
    }
    if i + 16 <= n {
        unsafe { put::<S>(dst.add(i), gelu16(_mm512_loadu_ps(src.add(i)), tab)) };
        i += 16;
    }
    if i < n {
        let k = first(n - i);
        unsafe {
            let x = _mm512_maskz_loadu_ps(k, src.add(i));
            _mm512_mask_storeu_ps(dst.add(i), k, gelu16(x, tab));
        }
    }
}

/// One binary op run on a value before gelu ([`after`]): `v = v op k` when `left`, else
/// `k op v`, with `k` the slice's element at the value's index (at its column, for
/// [`after_rows`]), or the constant when the slice is `None`. Only `Add`, `Sub`, `Mul` and
/// `Div`.
pub(crate) type Pre<'a> = (BinaryOp, bool, Option<&'a [f32]>, f32);

/// `pre`'s ops on one value `v` at column `j` of its row (a slice operand read at `j`),
/// each op rounded once, in order: the scalar tail of the vector loops over [`Pre`] ops.
#[inline(always)]
pub(crate) fn pre_one(pre: &[Pre], v: f32, j: usize) -> f32 {
    pre.iter().fold(v, |v, &(op, left, s, c)| {
        let k = s.map_or(c, |s| s[j]);
        let (a, b) = if left { (v, k) } else { (k, v) };
        match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            _ => a / b,
        }
    })
}

/// Most [`Pre`] ops [`after`] runs in registers ([`Lanes`]); longer chains, and chains with
/// a `div`, take [`after_any`].
const LIN_MAX: usize = 3;

/// `N` [`Pre`] ops without `Div`, each rounded once as the op itself, signed zeros
/// included (a NaN `k` in `v − k` comes back with its sign flipped):
/// - a constant `k`: `v = fma(v, m, a)`, `add` with `m = 1, a = k`, `v − k` with
///   `m = 1, a = −k`, `k − v` with `m = −1, a = k`, `mul` with `m = k, a = −0`;
/// - a row and `mul`: `v = v · row[j]`;
/// - a row and `add`/`sub`: `v = fma(v, m, row[j] ^ flip)`, `m = −1` for `k − v`, else 1,
///   `flip` the sign bit for `v − k`, else 0.
///
/// `row[q]` is null for a constant.
#[derive(Clone, Copy)]
struct Lanes<const N: usize> {
    row: [*const f32; N],
    mul: [bool; N],
    m: [__m512; N],
    a: [__m512; N],
    flip: [__m512i; N],
}

impl<const N: usize> Lanes<N> {
    /// The registers of `pre`'s first `N` ops, rows read from column `col`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn new(pre: &[Pre], col: usize) -> Self {
        use BinaryOp as B;
        let mut l = Lanes {
            row: [core::ptr::null(); N],
            mul: [false; N],
            m: [_mm512_set1_ps(1.0); N],
            a: [_mm512_set1_ps(-0.0); N],
            flip: [_mm512_setzero_si512(); N],
        };
        for (q, &(op, left, s, c)) in pre.iter().take(N).enumerate() {
            let back = op == B::Sub && !left;
            let (m, a) = match op {
                B::Mul => (c, -0.0),
                B::Sub if left => (1.0, -c),
                _ => (if back { -1.0 } else { 1.0 }, c),
            };
            match s {
                Some(s) => {
                    l.row[q] = s[col..].as_ptr();
                    l.mul[q] = op == B::Mul;
                    l.m[q] = _mm512_set1_ps(if back { -1.0 } else { 1.0 });
                    let neg = op == B::Sub && left;
                    l.flip[q] = _mm512_set1_epi32(if neg { i32::MIN } else { 0 });
                }
                None => {
                    l.m[q] = _mm512_set1_ps(m);
                    l.a[q] = _mm512_set1_ps(a);
                }
            }
        }
        l
    }

    /// The same ops with every row read from `h` values further on.
    fn at(&self, h: usize) -> Self {
        let mut l = *self;
        for r in l.row.iter_mut().filter(|r| !r.is_null()) {
            *r = r.wrapping_add(h);
        }
        l
    }

    /// The ops on the 16 values at `i` of `src` (rows read at `i` too; `k` masks the lanes
    /// read, all 16 when `k` is `0xFFFF`).
    ///
    /// # Safety
    /// [`available`]; `src` and every row readable at the lanes of `k` from `i`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn v(&self, src: *const f32, i: usize, k: __mmask16) -> __m512 {
        // SAFETY (every load): the caller's contract.
        let mut v = unsafe { load(src, i, k) };
        for q in 0..N {
            v = if self.row[q].is_null() {
                _mm512_fmadd_ps(v, self.m[q], self.a[q])
            } else if self.mul[q] {
                _mm512_mul_ps(v, unsafe { load(self.row[q], i, k) })
            } else {
                let r = _mm512_castps_si512(unsafe { load(self.row[q], i, k) });
                let a = _mm512_castsi512_ps(_mm512_xor_si512(r, self.flip[q]));
                _mm512_fmadd_ps(v, self.m[q], a)
            };
        }
        v
    }
}

/// The 16 floats at `p + i` in the lanes of `k` (zeros elsewhere): one plain load when `k`
/// is `0xFFFF`.
///
/// # Safety
/// [`available`]; `p + i` readable at the lanes of `k`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn load(p: *const f32, i: usize, k: __mmask16) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe {
        if k == 0xFFFF {
            _mm512_loadu_ps(p.add(i))
        } else {
            _mm512_maskz_loadu_ps(k, p.add(i))
        }
    }
}

/// `dst[i] = gelu1::<Fused>(pre(src[i]))`, every [`Pre`] op in order (each rounded to f32),
/// with the ops in gelu's vector loop: the input, the rows and the output are each read or
/// written once, in registers in between.
///
/// # Safety
/// [`available`].
///
/// # Panics
/// If the lengths differ, a [`Pre`] slice is shorter than `src`, or an op is not one of
/// the four.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn after(pre: &[Pre], src: &[f32], dst: &mut [f32]) {
    let n = src.len();
    assert!(pre.iter().all(|p| p.2.is_none_or(|s| s.len() >= n)));
    if n > 0 {
        // SAFETY: this function's contract; one row of `n` values.
        unsafe { after_rows(pre, src, dst, 0, n, false) }
    }
}

/// Whether [`after_rows`] with `stream` streams its stores for this chain: up to
/// `LIN_MAX` ops, none a division (longer chains and divisions take `after_any`'s plain
/// stores).
pub(crate) fn streams(pre: &[Pre]) -> bool {
    pre.len() <= LIN_MAX && pre.iter().all(|p| p.0 != BinaryOp::Div)
}

/// [`after`] over values that start at column `col` of rows `c` long (row-major: the
/// value at `i` has column `(col + i) % c`), each [`Pre`] slice one row of `c` values
/// read at the value's column: the table and the ops' registers are set up once for all
/// rows. With `stream`, whole vectors are stored non-temporally where 64-byte aligned
/// ([`put`]; not for chains of [`after_any`]'s form); the caller orders them (`sfence`).
///
/// # Safety
/// [`available`].
///
/// # Panics
/// If the lengths differ, `col >= c`, a [`Pre`] slice is shorter than `c`, or an op is not
/// one of the four.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn after_rows(
    pre: &[Pre],
    src: &[f32],
    dst: &mut [f32],
    col: usize,
    c: usize,
    stream: bool,
) {
    use BinaryOp as B;
    let n = src.len();
    assert!(dst.len() == n && col < c && pre.iter().all(|p| p.2.is_none_or(|s| s.len() >= c)));
    assert!(
        pre.iter()
            .all(|p| matches!(p.0, B::Add | B::Sub | B::Mul | B::Div))
    );
    let (x, y) = (src.as_ptr(), dst.as_mut_ptr());
    let tab = table();
    let (mut i, mut col) = (0, col);
    while i < n {
        let m = (n - i).min(c - col);
        // SAFETY: this function's contract: `src` and `dst` hold `n` floats (asserted) and
        // do not overlap (`&mut` and `&`); every row holds `c >= col + m` floats.
        unsafe {
            match pre.len() {
                _ if !streams(pre) => after_any(pre, col, &src[i..i + m], &mut dst[i..i + m], &tab),
                0 if stream => map_with::<true>(x.add(i), y.add(i), m, &tab, &mut true),
                0 => map_with::<false>(x.add(i), y.add(i), m, &tab, &mut true),
                1 => run_n(
                    &Lanes::<1>::new(pre, col),
                    x.add(i),
                    y.add(i),
                    m,
                    &tab,
                    stream,
                ),
                2 => run_n(
                    &Lanes::<2>::new(pre, col),
                    x.add(i),
                    y.add(i),
                    m,
                    &tab,
                    stream,
                ),
                _ => run_n(
                    &Lanes::<3>::new(pre, col),
                    x.add(i),
                    y.add(i),
                    m,
                    &tab,
                    stream,
                ),
            }
        }
        i += m;
        col = 0;
    }
}

/// [`lanes_run`] with streaming stores or without.
///
/// # Safety
/// As [`lanes_run`].
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn run_n<const N: usize>(
    l: &Lanes<N>,
    src: *const f32,
    dst: *mut f32,
    n: usize,
    tab: &[__m512; 8],
    stream: bool,
) {
    // SAFETY: the caller's contract; `h <= n`, the rows read from `h` on by `l.at(h)`.
    unsafe {
        if stream {
            // Plain stores up to the first 64-byte boundary of `dst`, so that the rest
            // streams.
            let h = dst.align_offset(64).min(n);
            lanes_run::<N, false>(l, src, dst, h, tab);
            lanes_run::<N, true>(&l.at(h), src.add(h), dst.add(h), n - h, tab)
        } else {
            lanes_run::<N, false>(l, src, dst, n, tab)
        }
    }
}

/// Values per block of [`lanes_run`]: one bit of a `u64` per vector of 16.
const BLOCK: usize = 64 * 16;

/// `dst[i] = gelu1::<Fused>(ops(src[i]))` for `i < n` with the [`Lanes`] ops, in blocks of
/// [`BLOCK`]: [`gelu_far_w`] on four vectors per step, then one, then a masked vector for
/// the last `n % 16`; vectors with a lane at `x <= NEG_END` or NaN are marked and, after the
/// block, recomputed with [`tail`] in those lanes ([`far_blend`]), so that the loop calls
/// nothing and keeps its registers. With `S` every whole vector is stored through [`put`]
/// (streamed where aligned), and a marked vector is fixed ([`far_fix`]) before its store
/// instead, as a streamed line is not read back.
///
/// # Safety
/// [`available`]; `src` and every row of `l` readable and `dst` writable for `n` floats;
/// `dst` does not overlap them.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn lanes_run<const N: usize, const S: bool>(
    l: &Lanes<N>,
    src: *const f32,
    dst: *mut f32,
    n: usize,
    tab: &[__m512; 8],
) {
    for b0 in (0..n).step_by(BLOCK) {
        let end = n.min(b0 + BLOCK);
        let mut far = 0u64;
        let mut i = b0;
        // SAFETY (every access): within the first `n` floats, masked lanes not accessed.
        unsafe {
            while i + 64 <= end {
                let x = [
                    l.v(src, i, 0xFFFF),
                    l.v(src, i + 16, 0xFFFF),
                    l.v(src, i + 32, 0xFFFF),
                    l.v(src, i + 48, 0xFFFF),
                ];
                let (mut r, f) = gelu_far_w(&x, tab);
                if S && f != 0 {
                    for w in 0..4 {
                        if f >> w & 1 != 0 {
                            r[w] = far_fix(x[w], r[w]);
                        }
                    }
                }
                for (w, r) in r.iter().enumerate() {
                    put::<S>(dst.add(i + 16 * w), *r);
                }
                if !S {
                    far |= (f as u64) << ((i - b0) / 16);
                }
                i += 64;
            }
            while i + 16 <= end {
                let x = l.v(src, i, 0xFFFF);
                let ([r], f) = gelu_far_w(&[x], tab);
                let r = if S && f != 0 { far_fix(x, r) } else { r };
                put::<S>(dst.add(i), r);
                if !S {
                    far |= (f as u64) << ((i - b0) / 16);
                }
                i += 16;
            }
            if i < end {
                let k = first(end - i);
                let x = l.v(src, i, k);
                let ([r], f) = gelu_far_w(&[x], tab);
                let r = if S && f != 0 { far_fix(x, r) } else { r };
                _mm512_mask_storeu_ps(dst.add(i), k, r);
                if !S {
                    far |= (f as u64) << ((i - b0) / 16);
                }
            }
            while far != 0 {
                let i = b0 + far.trailing_zeros() as usize * 16;
                far &= far - 1;
                let k = if i + 16 <= end {
                    0xFFFF
                } else {
                    first(end - i)
                };
                let x = l.v(src, i, k);
                let f = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x, _mm512_set1_ps(NEG_END));
                let r = far_blend(x, _mm512_maskz_loadu_ps(k, dst.add(i)), f & k);
                _mm512_mask_storeu_ps(dst.add(i), k, r);
            }
        }
    }
}

/// `r` with [`tail`] in the lanes at `x <= NEG_END` or NaN ([`far_blend`]).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn far_fix(x: __m512, r: __m512) -> __m512 {
    let far = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x, _mm512_set1_ps(NEG_END));
    far_blend(x, r, far)
}

/// `gelu1::<Fused>` on `W` vectors of 16 lanes, except in the lanes at `x <= NEG_END` or
/// NaN, which need [`tail`]: the central form ([`central`]'s steps, each on all `W` vectors
/// before the next, so that their chains of dependent FMAs interleave), with `x` blended in
/// the lanes at `x >= POS_END` (no branch). Bit `w` of the mask returned is set when vector
/// `w` has a lane that needs [`tail`].
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn gelu_far_w<const W: usize>(x: &[__m512; W], tab: &[__m512; 8]) -> ([__m512; W], u32) {
    let z = _mm512_setzero_ps();
    let (mut ax, mut u, mut c) = ([z; W], [z; W], [z; W]);
    let mut j = [_mm512_setzero_si512(); W];
    for w in 0..W {
        ax[w] = _mm512_abs_ps(x[w]);
        let v = _mm512_add_ps(ax[w], ax[w]);
        j[w] = _mm512_cvttps_epi32(v);
        let f = _mm512_reduce_ps::<0x09>(v);
        u[w] = _mm512_sub_ps(f, _mm512_set1_ps(0.5));
        c[w] = _mm512_permutexvar_ps(j[w], tab[7]);
    }
    for k in (0..7).rev() {
        for w in 0..W {
            c[w] = _mm512_fmadd_ps(c[w], u[w], _mm512_permutexvar_ps(j[w], tab[k]));
        }
    }
    let mut r = [z; W];
    let mut bits = 0u32;
    let sign = _mm512_set1_epi32(i32::MIN);
    for w in 0..W {
        let xi = _mm512_castps_si512(x[w]);
        let nax = _mm512_castsi512_ps(_mm512_or_si512(xi, sign));
        let b = _mm512_castsi512_ps(_mm512_min_epu32(xi, sign));
        let rr = _mm512_fmadd_ps(nax, c[w], b);
        let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x[w], _mm512_set1_ps(POS_END));
        let far = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x[w], _mm512_set1_ps(NEG_END));
        r[w] = _mm512_mask_mov_ps(rr, big, x[w]);
        bits |= ((far != 0) as u32) << w;
    }
    (r, bits)
}

/// [`after`] for any [`Pre`] ops on values from column `col` of one row: each op
/// dispatched per vector, the last `n % 16` elements one by one.
///
/// # Safety
/// [`available`]; every [`Pre`] slice holds at least `col + src.len()` floats, `dst` as
/// many as `src`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn after_any(pre: &[Pre], col: usize, src: &[f32], dst: &mut [f32], tab: &[__m512; 8]) {
    use BinaryOp as B;
    let n = src.len();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: `i + 16 <= n`; `src` holds `n` floats, every slice `col + n`.
        unsafe {
            let mut v = _mm512_loadu_ps(src.as_ptr().add(i));
            for &(op, left, s, c) in pre {
                let k = match s {
                    Some(s) => _mm512_loadu_ps(s.as_ptr().add(col + i)),
                    None => _mm512_set1_ps(c),
                };
                let (a, b) = if left { (v, k) } else { (k, v) };
                v = match op {
                    B::Add => _mm512_add_ps(a, b),
                    B::Sub => _mm512_sub_ps(a, b),
                    B::Mul => _mm512_mul_ps(a, b),
                    _ => _mm512_div_ps(a, b),
                };
            }
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), gelu16(v, tab));
        }
        i += 16;
    }
    for j in i..n {
        dst[j] = gelu1::<Fused>(pre_one(pre, src[j], col + j));
    }
}
