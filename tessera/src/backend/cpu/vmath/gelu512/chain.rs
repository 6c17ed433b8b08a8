//! The operand chains of [`super`]'s gelu ([`after`], [`after_rows`]): [`Pre`] ops run on
//! each value before gelu. [`after`]'s loop ([`lanes_run`]) runs its ops in registers (one
//! instruction each, the kinds of ops a constant of the loop: [`Lanes`]), then takes four
//! vectors per step ([`gelu_w`]), tests the four at once for lanes outside the central range
//! ([`outside`]: two integer maxima, two compares), blends `x` in from `POS_END` on in a vector
//! that has such lanes, and holds the vectors with a lane at `x <= NEG_END` or NaN in a
//! [`Pending`] list whose tail lanes are gathered and computed 16 at a time. Longer chains, and
//! chains with a `div`, take [`after_any`].

use super::{AHEAD, ahead, central_w, far_blend, first, gelu16, map_with, put, table};
use crate::backend::cpu::vmath::arith::Fused;
use crate::backend::cpu::vmath::gelu::{NEG_END, POS_END, gelu1};
use core::arch::x86_64::*;
use core::mem::MaybeUninit;
use tessera_ir::graph::BinaryOp;

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

/// [`Lanes`] kinds of op, two bits per op in a kind code (op `q` at bits `2q`): `v · k`.
const MUL: u32 = 0;
/// `v + k` (`k` a row, a constant, or for `v − c` the constant `−c`).
const ADD: u32 = 1;
/// `fma(v, m, k ^ flip)` (`m` and `k` each a row or 64 copies of a constant).
const GEN: u32 = 2;
/// The kind code of three ops, each [`GEN`] (three-op chains take one loop).
const GEN3: u32 = GEN | GEN << 2 | GEN << 4;
// `after_rows` matches kind codes as literals: `MUL`, `ADD`, `GEN` are 0, 1, 2.
const _: () = assert!(MUL == 0 && ADD == 1 && GEN == 2 && GEN3 == 42);

/// 64 copies of each constant operand of [`Lanes`] (two per op): a four-vector step
/// ([`Lanes::v4`]) reads vector `w` of every operand `16 w` floats on from one address,
/// rows and constants alike.
type Copies = [[f32; 64]; 2 * LIN_MAX];

/// `N` [`Pre`] ops without `Div`, each rounded once as the op itself, signed zeros
/// included (a NaN constant in `v − c` comes back with its sign flipped), each op one
/// instruction of its kind (the code from [`Lanes::new`]; the loops take it as a constant,
/// so that no op is dispatched per vector):
/// - [`MUL`] `v · k` (`mul` by a row or a constant);
/// - [`ADD`] `v + k` (`add` of a row or a constant, `v − c` as `v + (−c)`);
/// - [`GEN`] `fma(v, m, k ^ flip)`: `k − v` (`m = −1`), `v − row` (`m = 1`, `flip` the sign
///   bit), and every op of a three-op chain (`mul` as `fma(v, k, −0)`, `add` as
///   `fma(v, 1, k)`).
///
/// An operand is read through a pointer and a step mask: a row from column `col` on (the
/// value at `i` reads `row[i]`: mask `!0`), or 64 copies of a constant (mask 0, so every
/// step reads the same copies), with no branch on which.
#[derive(Clone, Copy)]
struct Lanes<const N: usize> {
    /// `k` (and [`MUL`]'s factor): pointer and step mask.
    k: [(*const f32, usize); N],
    /// [`GEN`]'s `m`.
    m: [(*const f32, usize); N],
    flip: [__m512i; N],
}

impl<const N: usize> Lanes<N> {
    /// The ops of `pre` (`N` of them), rows read from column `col`, constants from `cp`
    /// (filled here), and their kind code.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn new(pre: &[Pre], col: usize, cp: &mut Copies) -> (Self, u32) {
        use BinaryOp as B;
        let mut l = Lanes {
            k: [(core::ptr::null(), 0); N],
            m: [(core::ptr::null(), 0); N],
            flip: [_mm512_setzero_si512(); N],
        };
        let mut code = 0;
        for (q, &(op, left, s, c)) in pre.iter().take(N).enumerate() {
            let back = op == B::Sub && !left;
            // The op as GEN: `m` (row when `mrow`) and `k` (row when `krow`), and its kind.
            let (m, mrow, k, krow, kind) = match (op, s) {
                (B::Mul, None) => (c, false, -0.0, false, MUL),
                (B::Mul, Some(_)) => (0.0, true, -0.0, false, MUL),
                (B::Sub, None) if left => (1.0, false, -c, false, ADD),
                (_, None) => (if back { -1.0 } else { 1.0 }, false, c, false, ADD),
                (_, Some(_)) => (if back { -1.0 } else { 1.0 }, false, 0.0, true, ADD),
            };
            let kind = if N == 3 || back || (op == B::Sub && s.is_some()) {
                GEN
            } else {
                kind
            };
            cp[2 * q] = [k; 64];
            cp[2 * q + 1] = [m; 64];
            let row = s.map(|s| s[col..].as_ptr());
            let at = |r: bool, p: &[f32; 64]| match row {
                Some(r0) if r => (r0, !0),
                _ => (p.as_ptr(), 0),
            };
            let (kp, mp) = (at(krow, &cp[2 * q]), at(mrow, &cp[2 * q + 1]));
            (l.k[q], l.m[q]) = match kind {
                MUL => (mp, (core::ptr::null(), 0)),
                _ => (kp, mp),
            };
            if op == B::Sub && left && s.is_some() {
                l.flip[q] = _mm512_set1_epi32(i32::MIN);
            }
            code |= kind << (2 * q);
        }
        (l, code)
    }

    /// The same ops with every row read from `h` values further on.
    fn at(&self, h: usize) -> Self {
        let mut l = *self;
        for (p, s) in l.k.iter_mut().chain(l.m.iter_mut()) {
            *p = p.wrapping_add(h & *s);
        }
        l
    }

    /// The ops (kind code `K`) on the 16 values at `i` of `src` (rows read at `i` too; `k`
    /// masks the lanes read, all 16 when `k` is `0xFFFF`).
    ///
    /// # Safety
    /// [`available`](super::available); `src` and every row readable at the lanes of `k` from `i`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn v<const K: u32>(&self, src: *const f32, i: usize, k: __mmask16) -> __m512 {
        // SAFETY (every load): the caller's contract; a constant's copies are read at 0.
        let mut v = unsafe { load(src, i, k) };
        for q in 0..N {
            let (kp, ks) = self.k[q];
            let kv = unsafe { load(kp, i & ks, k) };
            v = match K >> (2 * q) & 3 {
                MUL => _mm512_mul_ps(v, kv),
                ADD => _mm512_add_ps(v, kv),
                _ => {
                    let (mp, ms) = self.m[q];
                    let a = _mm512_xor_si512(_mm512_castps_si512(kv), self.flip[q]);
                    _mm512_fmadd_ps(v, unsafe { load(mp, i & ms, k) }, _mm512_castsi512_ps(a))
                }
            };
        }
        v
    }
}

impl<const N: usize> Lanes<N> {
    /// [`Lanes::v`] on the four vectors of the 64 values at `i` of `src`, the rows read
    /// from column `col` (`col` ops on a row read from `row[col]`): each operand's address
    /// formed once per step (the column masked by its step mask), its four vectors read
    /// 16 floats apart from there (a constant's 64 copies), so that a step spends no
    /// scalar work per vector on its operands.
    ///
    /// # Safety
    /// [`available`](super::available); `src` readable for 64 floats from `i`, every row
    /// for 64 from `col`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn v4<const K: u32>(&self, src: *const f32, i: usize, col: usize) -> [__m512; 4] {
        // SAFETY (every load): the caller's contract; a constant's 64 copies are read from 0.
        let mut v: [__m512; 4] =
            core::array::from_fn(|w| unsafe { _mm512_loadu_ps(src.add(i + 16 * w)) });
        for q in 0..N {
            let (kp, ks) = self.k[q];
            let kb = kp.wrapping_add(col & ks);
            match K >> (2 * q) & 3 {
                MUL => {
                    for (w, v) in v.iter_mut().enumerate() {
                        *v = _mm512_mul_ps(*v, unsafe { _mm512_loadu_ps(kb.add(16 * w)) });
                    }
                }
                ADD => {
                    for (w, v) in v.iter_mut().enumerate() {
                        *v = _mm512_add_ps(*v, unsafe { _mm512_loadu_ps(kb.add(16 * w)) });
                    }
                }
                _ => {
                    let (mp, ms) = self.m[q];
                    let mb = mp.wrapping_add(col & ms);
                    for (w, v) in v.iter_mut().enumerate() {
                        let kv = unsafe { _mm512_loadu_ps(kb.add(16 * w)) };
                        let a = _mm512_xor_si512(_mm512_castps_si512(kv), self.flip[q]);
                        let m = unsafe { _mm512_loadu_ps(mb.add(16 * w)) };
                        *v = _mm512_fmadd_ps(*v, m, _mm512_castsi512_ps(a));
                    }
                }
            }
        }
        v
    }
}

/// `x` (this step's values) and `next` (the next step's) through an empty `asm` block, so
/// that the code computes `next` (its loads and ops) before this step's central form reads
/// `x`: the compiler otherwise schedules the next step's loads and ops after the central
/// form, where the out-of-order window reaches them only once most of this step has issued.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn order(x: &mut [__m512; 4], next: &mut [__m512; 4]) {
    // SAFETY: an empty instruction sequence; the registers come back unchanged.
    unsafe {
        core::arch::asm!(
            "/* {0} {1} {2} {3} {4} {5} {6} {7} */",
            inout(zmm_reg) x[0],
            inout(zmm_reg) x[1],
            inout(zmm_reg) x[2],
            inout(zmm_reg) x[3],
            inout(zmm_reg) next[0],
            inout(zmm_reg) next[1],
            inout(zmm_reg) next[2],
            inout(zmm_reg) next[3],
            options(pure, nomem, nostack, preserves_flags)
        )
    };
}

/// The 16 floats at `p + i` in the lanes of `k` (zeros elsewhere): one plain load when `k`
/// is `0xFFFF`.
///
/// # Safety
/// [`available`](super::available); `p + i` readable at the lanes of `k`.
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
/// [`available`](super::available).
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
        unsafe { after_rows(pre, src, dst, 0, n, false, false) }
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
/// rows, and the vectors with a lane that needs [`tail`](super::tail) wait in one [`Pending`]
/// across rows. With `stream`, whole vectors are stored non-temporally where 64-byte aligned
/// ([`put`]; not for chains of [`after_any`]'s form); the caller orders them (`sfence`).
/// With `far` (data past the cache) the input is asked for [`AHEAD`] floats ahead of the
/// loop (not in [`after_any`]).
///
/// # Safety
/// [`available`](super::available).
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
    far: bool,
) {
    use BinaryOp as B;
    let d = if far { AHEAD } else { 0 };
    let n = src.len();
    assert!(dst.len() == n && col < c && pre.iter().all(|p| p.2.is_none_or(|s| s.len() >= c)));
    assert!(
        pre.iter()
            .all(|p| matches!(p.0, B::Add | B::Sub | B::Mul | B::Div))
    );
    let (x, y) = (src.as_ptr(), dst.as_mut_ptr());
    let tab = table();
    let mut cp: Copies = [[0.0; 64]; 2 * LIN_MAX];
    let mut pend = Pending::new(stream);
    // `run!(N; codes)`: every row through the loop for `N` ops, the kind code a constant.
    macro_rules! run {
        ($n:literal; $($k:literal),*) => {{
            let (l, code) = Lanes::<$n>::new(pre, 0, &mut cp);
            match code {
                // SAFETY: this function's contract: `src` and `dst` hold `n` floats
                // (asserted) and do not overlap (`&mut` and `&`); every row `c`.
                $($k => unsafe { rows_run::<$n, { $k }>(&l, x, y, n, col, c, &tab, stream, &mut pend, d) },)*
                _ => unreachable!(),
            }
        }};
    }
    match pre.len() {
        _ if !streams(pre) => {}
        0 => {}
        1 => return run!(1; 0, 1, 2),
        2 => return run!(2; 0, 1, 2, 4, 5, 6, 8, 9, 10),
        _ => return run!(3; 42),
    }
    let (mut i, mut col) = (0, col);
    while i < n {
        let m = (n - i).min(c - col);
        // SAFETY: as above; every row holds `c >= col + m` floats.
        unsafe {
            let (x, y) = (x.add(i), y.add(i));
            match pre.len() {
                0 if stream => map_with::<true>(x, y, m, &tab, &mut true, d),
                0 => map_with::<false>(x, y, m, &tab, &mut true, d),
                _ => after_any(pre, col, &src[i..i + m], &mut dst[i..i + m], &tab),
            }
        }
        i += m;
        col = 0;
    }
}

/// The [`Lanes`] ops `l` (rows from column 0, kind code `K`) then gelu over the `n` values
/// at `src` that start at column `col` of rows `c` long, into `dst`: where `c` and `col`
/// are multiples of 64 (and `dst` 64-byte aligned when `stream`), [`flat_run`] over the
/// whole 64-value steps of all rows in one loop; else (and for the last `n % 64` values)
/// [`lanes_run`] per row segment, from `dst`'s first 64-byte boundary on when `stream`
/// (plain stores before it); one [`Pending`] for all rows, flushed at the end; the input
/// asked for `d` floats ahead ([`ahead`]).
///
/// # Safety
/// [`available`](super::available); `src` readable and `dst` writable for `n` floats, not
/// overlapping; every row of `l` readable for `c` floats; `col < c`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_run<const N: usize, const K: u32>(
    l: &Lanes<N>,
    src: *const f32,
    dst: *mut f32,
    n: usize,
    col: usize,
    c: usize,
    tab: &[__m512; 8],
    stream: bool,
    pend: &mut Pending,
    d: usize,
) {
    let (mut i, mut col) = (0, col);
    if c.is_multiple_of(64)
        && col.is_multiple_of(64)
        && (!stream || (dst as usize).is_multiple_of(64))
    {
        let m = n - n % 64;
        // SAFETY: this function's contract; `m <= n` a multiple of 64, `dst` 64-byte
        // aligned when streamed.
        unsafe {
            if stream {
                flat_run::<N, K, true>(l, src, dst, m, col, c, tab, pend, d)
            } else {
                flat_run::<N, K, false>(l, src, dst, m, col, c, tab, pend, d)
            }
        }
        i = m;
        col = (col + m) % c;
    }
    while i < n {
        let m = (n - i).min(c - col);
        // SAFETY: this function's contract; `h <= m`, each segment's rows read from its
        // first value's column on (`l.at`).
        unsafe {
            let (x, y) = (src.add(i), dst.add(i));
            let h = if stream { y.align_offset(64).min(m) } else { m };
            for (a, b, s) in [(0, h, false), (h, m, stream)] {
                if a < b {
                    lanes_run::<N, K>(&l.at(col + a), x.add(a), y.add(a), b - a, tab, s, pend, d);
                }
            }
        }
        i += m;
        col = 0;
    }
    // SAFETY: the pending vectors' outputs are within `dst`.
    unsafe { pend.flush(tab) };
}

/// [`lanes_run`] over `n` values (a multiple of 64) from column `col` of rows `c` long,
/// `c` and `col` multiples of 64, so that every 64-value step lies within one row: one loop
/// over all the steps (no call, no block and no pipeline start per row), the rows' column
/// advanced by 64 per step and wrapped at `c`, each step's operands read through
/// [`Lanes::v4`] and the next step's values formed ahead of this step's central form
/// ([`order`]); whole vectors stored non-temporally when `S` (`dst` 64-byte aligned), else
/// plainly. A step with a lane outside the central range is settled as in [`lanes_run`],
/// and `pend` is flushed after such a step once it holds 16 vectors.
///
/// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207; `chrt -f 50 env
/// RAYON_NUM_THREADS=T cpu_profile chain R C N --pool`, fastest launch, min / median over
/// 4–6 processes interleaved with the build before this change, load 3.7–5.8 from other
/// jobs, 2026-11-28 03:13–03:16 UTC): one thread `[4096, 1024]` 1554 / 1778 → 1498 / 1580
/// µs (gelu 1265 / 1311), `[1024, 4096]` 1486 / 1548 → 1447 / 1466 (gelu 1245 / 1249),
/// `--into` `[4096, 1024]` 1531 / 1594 → 1412 / 1485; two threads `[4096, 1024]` 822 / 897
/// → 767 / 933 (gelu 697 / 724), `[1024, 4096]` 830 / 1077 → 737 / 977 (gelu 695 / 778),
/// `--into` 837 / 1003 → 763 / 962; `[8192, 4096]` one thread (N = 20) 14.73 / 15.11 →
/// 14.99 / 15.01 ms. In L2 (`[128, 1024]`, one binary with the forms side by side, 12
/// processes, 03:05 UTC): 49.1 µs before, 46.8 with only the operand addresses and
/// [`order`] (now [`lanes_run`]'s loop), 44.9 with this loop; gelu 39.4, and 42.5 for
/// the ordered per-row loop without the `outside` test (timing only): the test and the mul
/// and add are the rest of the gap (see `ARCHITECTURE.md`).
///
/// # Safety
/// [`available`](super::available); `src` readable and `dst` writable for `n` floats, not
/// overlapping; every row of `l` readable for `c` floats; `dst` 64-byte aligned when `S`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn flat_run<const N: usize, const K: u32, const S: bool>(
    l: &Lanes<N>,
    src: *const f32,
    dst: *mut f32,
    n: usize,
    col: usize,
    c: usize,
    tab: &[__m512; 8],
    pend: &mut Pending,
    d: usize,
) {
    debug_assert!(
        n.is_multiple_of(64) && c.is_multiple_of(64) && col.is_multiple_of(64) && col < c
    );
    debug_assert!(!S || (dst as usize).is_multiple_of(64));
    if n == 0 {
        return;
    }
    let (mut i, mut cl) = (0, col);
    // SAFETY (every access): steps at `i < n` (64 values) and columns `cl < c` (64 values
    // of each row), the caller's contract; a streamed store's address is `dst` plus a
    // multiple of 64 floats.
    unsafe {
        let mut x = l.v4::<K>(src, i, cl);
        loop {
            ahead(src.wrapping_add(i), d);
            let more = i + 64 < n;
            let wrap = if cl + 64 == c { 0 } else { cl + 64 };
            // The next step (this step again after the last: read, not used).
            let (ni, ncl) = if more { (i + 64, wrap) } else { (i, cl) };
            let mut next = l.v4::<K>(src, ni, ncl);
            order(&mut x, &mut next);
            let r = gelu_w(&x, tab);
            let put = |p: *mut f32, r: __m512| {
                if S {
                    _mm512_stream_ps(p, r)
                } else {
                    _mm512_storeu_ps(p, r)
                }
            };
            if !outside(&x) {
                for (w, r) in r.iter().enumerate() {
                    put(dst.add(i + 16 * w), *r);
                }
            } else {
                for w in 0..4 {
                    let p = dst.add(i + 16 * w);
                    put(p, settle(x[w], r[w], p, 0xFFFF, pend));
                }
                if pend.n >= 16 {
                    pend.flush(tab);
                }
            }
            if !more {
                break;
            }
            (i, cl, x) = (ni, ncl, next);
        }
    }
}

/// Values per block of [`lanes_run`]: at most `BLOCK / 16` vectors join [`Pending`] between
/// two of its checks.
const BLOCK: usize = 64 * 16;

/// Most vectors [`Pending`] holds: it is flushed once it holds 16 after a block of
/// [`lanes_run`] (or after a step of [`flat_run`], at most 4 more).
const PEND: usize = 16 + BLOCK / 16;

/// Vectors whose result waits for [`tail`](super::tail) in some lanes (`x <= NEG_END` or NaN): the
/// value after the ops, the lanes to store and where (the loop has stored the vector
/// without its tail lanes, so that a streamed output is written line after line with no
/// gap: a gap left for later cost 15 % at `[8192, 4096]`). [`Pending::flush`] gathers the
/// tail lanes of all of them (`vcompressps`), runs [`tail`](super::tail) on 16 at a time, and
/// stores each vector again once complete, so that the rare tail lanes (about one value in 1500 of
/// `x · y + 1` for two normal samples) cost one `tail` call per 16 of them instead of one per
/// vector that holds one.
struct Pending {
    n: usize,
    /// [`after_rows`]'s `stream`: whole vectors are rewritten through [`put`] streamed (the
    /// loop streamed every whole vector then), whichever segment's loop flushes.
    stream: bool,
    x: [MaybeUninit<__m512>; PEND],
    dst: [*mut f32; PEND],
    keep: [__mmask16; PEND],
}

impl Pending {
    /// An empty list (its vectors unwritten until pushed: only the first `n` are read) for
    /// [`after_rows`] with `stream`.
    fn new(stream: bool) -> Self {
        Pending {
            n: 0,
            stream,
            x: [MaybeUninit::uninit(); PEND],
            dst: [core::ptr::null_mut(); PEND],
            keep: [0; PEND],
        }
    }

    /// Holds the vector of values `x` (after the ops) to store at `dst` in the lanes of
    /// `keep`.
    #[inline]
    fn push(&mut self, x: __m512, dst: *mut f32, keep: __mmask16) {
        let e = self.n;
        self.x[e] = MaybeUninit::new(x);
        self.dst[e] = dst;
        self.keep[e] = keep;
        self.n = e + 1;
    }

    /// Stores every held vector again, now complete: `gelu1::<Fused>` of its values, the
    /// [`tail`](super::tail) lanes computed 16 at a time, after the loop's stores to the same
    /// addresses. A whole vector goes through [`put`] with the list's `stream` (the loop's own
    /// store, so that a line the loop streamed is streamed again rather than read back for a
    /// plain store, also when the flush comes from a row's plain head segment), the lanes of
    /// a partial `keep` through a masked plain store.
    ///
    /// # Safety
    /// [`available`](super::available); every held `dst` writable at the lanes of its `keep`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline(never)]
    #[cold]
    unsafe fn flush(&mut self, tab: &[__m512; 8]) {
        let (n, stream) = (self.n, self.stream);
        if n == 0 {
            return;
        }
        // SAFETY: the first `n` entries were written by `push`.
        let xs = unsafe { &*(&self.x[..n] as *const [MaybeUninit<__m512>] as *const [__m512]) };
        // The tail lanes, gathered, each written before it is read (the last 16 padded).
        let mut buf = [MaybeUninit::<f32>::uninit(); PEND * 16 + 16];
        let p = buf.as_mut_ptr() as *mut f32;
        let mut far = [0 as __mmask16; PEND];
        let mut at = 0;
        let neg = _mm512_set1_ps(NEG_END);
        for (e, &x) in xs.iter().enumerate() {
            far[e] = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x, neg) & self.keep[e];
            // SAFETY: at most 16 lanes per vector, `buf` holds 16 per entry and 16 more.
            unsafe { _mm512_mask_compressstoreu_ps(p.add(at) as *mut _, far[e], x) };
            at += far[e].count_ones() as usize;
        }
        for t in (0..at).step_by(16) {
            // SAFETY: within `buf` (16 floats from `t < at`); the lanes from `at` on are
            // written (zeros) before the load.
            unsafe {
                if t + 16 > at {
                    _mm512_mask_storeu_ps(p.add(t), !first(at - t), _mm512_setzero_ps());
                }
                let v = _mm512_loadu_ps(p.add(t));
                _mm512_storeu_ps(p.add(t), far_blend(v, v, 0xFFFF));
            }
        }
        let mut at = 0;
        for (e, &x) in xs.iter().enumerate() {
            let [r] = gelu_w(&[x], tab);
            let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(POS_END));
            let r = _mm512_mask_mov_ps(r, big, x);
            // SAFETY: `buf` holds the tail lanes of every entry in order; the caller's
            // contract for `dst`.
            unsafe {
                let r = _mm512_mask_expandloadu_ps(r, far[e], p.add(at) as *const _);
                at += far[e].count_ones() as usize;
                if self.keep[e] == 0xFFFF {
                    put(self.dst[e], r, stream);
                } else {
                    _mm512_mask_storeu_ps(self.dst[e], self.keep[e], r);
                }
            }
        }
        self.n = 0;
    }
}

/// `dst[i] = gelu1::<Fused>(ops(src[i]))` for `i < n` with the [`Lanes`] ops (kind code
/// `K`): [`gelu_w`] on four vectors per step (their values from [`Lanes::v4`], the next
/// step's formed ahead of this step's central form: [`order`]), then one, then a masked
/// vector for the last `n % 16`. A step whose vectors all have `NEG_END < x < POS_END` in every lane
/// ([`outside`], one branch per step) stores them; else each vector gets `x` in its
/// lanes at `x >= POS_END` ([`settle`]) and, when it has lanes at `x <= NEG_END` or NaN,
/// also joins `pend`; `pend` is flushed after a block of [`BLOCK`] values once it holds 16
/// vectors, so that the loop calls nothing. Whole vectors are stored through [`put`]
/// (streamed where aligned when `stream`). Each step asks for the input `d` floats on
/// ([`ahead`]; none when `d` is 0).
///
/// # Safety
/// [`available`](super::available); `src` and every row of `l` readable and `dst` writable for `n`
/// floats; `dst` does not overlap them.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn lanes_run<const N: usize, const K: u32>(
    l: &Lanes<N>,
    src: *const f32,
    dst: *mut f32,
    n: usize,
    tab: &[__m512; 8],
    stream: bool,
    pend: &mut Pending,
    d: usize,
) {
    for b0 in (0..n).step_by(BLOCK) {
        let end = n.min(b0 + BLOCK);
        let mut i = b0;
        // SAFETY (every access): within the first `n` floats, masked lanes not accessed.
        unsafe {
            if i + 64 <= end {
                let last = end - 64;
                let mut x = l.v4::<K>(src, i, i);
                loop {
                    ahead(src.wrapping_add(i), d);
                    let more = i + 64 <= last;
                    // The next step's values ahead of this step's central form (at the
                    // last step, the block's last 64 values again: read, not used).
                    let nx = (i + 64).min(last);
                    let mut next = l.v4::<K>(src, nx, nx);
                    order(&mut x, &mut next);
                    let r = gelu_w(&x, tab);
                    if !outside(&x) {
                        for (w, r) in r.iter().enumerate() {
                            put(dst.add(i + 16 * w), *r, stream);
                        }
                    } else {
                        for w in 0..4 {
                            let p = dst.add(i + 16 * w);
                            put(p, settle(x[w], r[w], p, 0xFFFF, pend), stream);
                        }
                    }
                    i += 64;
                    if !more {
                        break;
                    }
                    x = next;
                }
            }
            while i + 16 <= end {
                let x = l.v::<K>(src, i, 0xFFFF);
                let [r] = gelu_w(&[x], tab);
                let p = dst.add(i);
                if !outside(&[x]) {
                    put(p, r, stream);
                } else {
                    put(p, settle(x, r, p, 0xFFFF, pend), stream);
                }
                i += 16;
            }
            if i < end {
                let k = first(end - i);
                let x = l.v::<K>(src, i, k);
                let [r] = gelu_w(&[x], tab);
                let p = dst.add(i);
                if !outside(&[x]) {
                    _mm512_mask_storeu_ps(p, k, r);
                } else {
                    _mm512_mask_storeu_ps(p, k, settle(x, r, p, k, pend));
                }
            }
        }
        if pend.n >= 16 {
            // SAFETY: the held vectors' outputs are within `dst` of this or an earlier call
            // of the caller's.
            unsafe { pend.flush(tab) };
        }
    }
}

/// `r` (the central form of `x`) with `x` in the lanes at `x >= POS_END`; when a lane of
/// `keep` has `x <= NEG_END` or NaN, `x` is also held in `pend`, to be stored again at
/// `dst`, complete, later.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn settle(x: __m512, r: __m512, dst: *mut f32, keep: __mmask16, pend: &mut Pending) -> __m512 {
    let far = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x, _mm512_set1_ps(NEG_END)) & keep;
    if far != 0 {
        pend.push(x, dst, keep);
    }
    let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(POS_END));
    _mm512_mask_mov_ps(r, big, x)
}

/// Whether a lane of the `W` vectors is outside `NEG_END < x < POS_END` or NaN, from the
/// bits: `x >= POS_END` (and `+inf`, `+NaN`) is `bits >= POS_END`'s as signed integers,
/// `x <= NEG_END` (and `−inf`, `−NaN`) `bits >= NEG_END`'s as unsigned ones; the largest
/// of each over the vectors, then two compares.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn outside<const W: usize>(x: &[__m512; W]) -> bool {
    let mut s = _mm512_castps_si512(x[0]);
    let mut u = s;
    for x in &x[1..] {
        let xi = _mm512_castps_si512(*x);
        s = _mm512_max_epi32(s, xi);
        u = _mm512_max_epu32(u, xi);
    }
    let hi = _mm512_cmpge_epi32_mask(s, _mm512_set1_epi32(POS_END.to_bits() as i32));
    let lo = _mm512_cmpge_epu32_mask(u, _mm512_set1_epi32(NEG_END.to_bits() as i32));
    hi | lo != 0
}

/// [`central_w`]'s results on `W` vectors of 16 lanes.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn gelu_w<const W: usize>(x: &[__m512; W], tab: &[__m512; 8]) -> [__m512; W] {
    central_w(x, tab).0
}

/// [`after`] for any [`Pre`] ops on values from column `col` of one row: each op
/// dispatched per vector, the last `n % 16` elements one by one.
///
/// # Safety
/// [`available`](super::available); every [`Pre`] slice holds at least `col + src.len()` floats,
/// `dst` as many as `src`.
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
