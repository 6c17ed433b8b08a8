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
//! tested for `fix`'s own lanes, [`special`]), then one, then a masked last one.

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
    unsafe { map_with(src, dst, n, &table(), &mut true) }
}

/// [`map`] with the table and [`gelu32`]'s `test` from the caller.
///
/// # Safety
/// As [`map`].
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn map_with(src: *const f32, dst: *mut f32, n: usize, tab: &[__m512; 8], test: &mut bool) {
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
            _mm512_storeu_ps(dst.add(i), r0);
            _mm512_storeu_ps(dst.add(i + 16), r1);
        }
        i += 32;
    }
    if i + 16 <= n {
        unsafe { _mm512_storeu_ps(dst.add(i), gelu16(_mm512_loadu_ps(src.add(i)), tab)) };
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
/// `k op v`, with `k` the slice's element at the value's index, or the constant when the
/// slice is `None`. Only `Add`, `Sub`, `Mul` and `Div`.
pub(crate) type Pre<'a> = (BinaryOp, bool, Option<&'a [f32]>, f32);

/// A [`Pre`] op without `Div` as one FMA, `v = fma(v, m, a ^ flip)`: `add` is `v·1 + k`,
/// `k − v` is `v·(−1) + k`, `v − k` is `v·1 + (−k)` (`flip` the sign bit of a row, or the
/// constant negated), `mul` is `v·k + (−0)`. Each is the op rounded once, signed zeros
/// included (a NaN `k` in `v − k` comes back with its sign flipped). `m` and `a` point at a row (`*_step` 1) or at 16 copies of a constant (0).
#[derive(Clone, Copy)]
struct Lin {
    m: *const f32,
    m_step: usize,
    a: *const f32,
    a_step: usize,
    flip: i32,
}

/// Most [`Pre`] ops [`after`] runs as FMAs ([`Lin`]); longer chains, and chains with a
/// `div`, take [`after_any`].
const LIN_MAX: usize = 3;

/// `dst[i] = gelu1::<Fused>(pre(src[i]))`, every [`Pre`] op in order (each rounded to f32),
/// 16 lanes per step: the inputs are loaded inside the gelu loop.
///
/// # Safety
/// [`available`].
///
/// # Panics
/// If the lengths differ, a [`Pre`] slice is shorter than `src`, or an op is not one of
/// the four.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn after(pre: &[Pre], src: &[f32], dst: &mut [f32]) {
    use BinaryOp as B;
    let n = src.len();
    assert!(dst.len() == n && pre.iter().all(|p| p.2.is_none_or(|s| s.len() >= n)));
    assert!(
        pre.iter()
            .all(|p| matches!(p.0, B::Add | B::Sub | B::Mul | B::Div))
    );
    if pre.len() > LIN_MAX || pre.iter().any(|p| p.0 == B::Div) {
        // SAFETY: this function's contract; lengths asserted.
        return unsafe { after_any(pre, src, dst) };
    }
    // 16 copies of each constant: `1`, `−1`, `−0`, and per op its `k` or `−k`.
    let mut splat = [[0f32; 16]; 3 + LIN_MAX];
    splat[0] = [1.0; 16];
    splat[1] = [-1.0; 16];
    splat[2] = [-0.0; 16];
    for (q, p) in pre.iter().enumerate() {
        let neg = p.0 == B::Sub && p.1;
        splat[3 + q] = [if neg { -p.3 } else { p.3 }; 16];
    }
    let k = |q: usize| -> (*const f32, usize, i32) {
        let (op, left, s, _) = pre[q];
        match s {
            Some(s) => (
                s.as_ptr(),
                1,
                if op == B::Sub && left { i32::MIN } else { 0 },
            ),
            None => (splat[3 + q].as_ptr(), 0, 0),
        }
    };
    let lin = |q: usize| -> Lin {
        let (kp, ks, flip) = k(q);
        let c = |i: usize| (splat[i].as_ptr(), 0);
        let ((m, m_step), (a, a_step), flip) = match pre[q].0 {
            B::Mul => ((kp, ks), c(2), 0),
            B::Sub if !pre[q].1 => (c(1), (kp, ks), flip),
            _ => (c(0), (kp, ks), flip),
        };
        Lin {
            m,
            m_step,
            a,
            a_step,
            flip,
        }
    };
    let (x, y) = (src.as_ptr(), dst.as_mut_ptr());
    // SAFETY: this function's contract; every slice holds at least `n` floats (asserted),
    // `splat` outlives the call, `dst` does not overlap `src` (`&mut` and `&`).
    unsafe {
        match pre.len() {
            0 => map(x, y, n),
            1 => after_n(&[lin(0)], x, y, n),
            2 => after_n(&[lin(0), lin(1)], x, y, n),
            _ => after_n(&[lin(0), lin(1), lin(2)], x, y, n),
        }
    }
}

/// The [`Lin`] ops on the 16 floats at `i` (`k` masks the lanes read).
///
/// # Safety
/// [`available`]; `src` and every row of `lin` readable at the lanes of `k` from `i`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn lin_v<const N: usize>(
    lin: &[Lin; N],
    flip: &[__m512i; N],
    src: *const f32,
    i: usize,
    k: __mmask16,
) -> __m512 {
    // SAFETY: the caller's contract; a constant's 16 copies are read at offset 0.
    unsafe {
        let mut v = _mm512_maskz_loadu_ps(k, src.add(i));
        for q in 0..N {
            let o = &lin[q];
            let m = _mm512_maskz_loadu_ps(k, o.m.add(i * o.m_step));
            let a = _mm512_maskz_loadu_ps(k, o.a.add(i * o.a_step));
            let a = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), flip[q]));
            v = _mm512_fmadd_ps(v, m, a);
        }
        v
    }
}

/// Floats per block of [`after_n`].
const BLOCK: usize = 128;

/// [`after`] for `N` [`Lin`] ops, in blocks of [`BLOCK`] floats: the ops of each whole block
/// run into one of two L1 buffers in the same loop as gelu of the block before (from the
/// other buffer), so the input's loads wait on memory beside gelu's arithmetic without
/// holding up gelu's chain of dependent FMAs; a last partial block runs its ops, then
/// [`map_with`]. Every vector is tested with [`special`] (operand chains such as `x · y + 1`
/// leave `|x| < 4.5` often).
///
/// # Safety
/// [`available`]; `src`, and every row of `lin`, readable and `dst` writable for `n`
/// floats; `dst` does not overlap them.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn after_n<const N: usize>(lin: &[Lin; N], src: *const f32, dst: *mut f32, n: usize) {
    let tab = table();
    let flip: [__m512i; N] = core::array::from_fn(|q| _mm512_set1_epi32(lin[q].flip));
    let mut bufs = [[0f32; BLOCK]; 2];
    let whole = n / BLOCK;
    // SAFETY (every access): within the first `n` floats of the operands and `dst`, within
    // `bufs`; masked lanes not accessed.
    unsafe {
        if whole > 0 {
            let b0 = bufs[0].as_mut_ptr();
            for q in (0..BLOCK).step_by(16) {
                _mm512_storeu_ps(b0.add(q), lin_v(lin, &flip, src, q, 0xFFFF));
            }
        }
        for blk in 0..whole {
            let (at, next) = (blk * BLOCK, (blk + 1) * BLOCK);
            let cur = bufs[blk % 2].as_ptr();
            let nb = bufs[(blk + 1) % 2].as_mut_ptr();
            let more = blk + 1 < whole;
            for q in (0..BLOCK).step_by(32) {
                if more {
                    _mm512_storeu_ps(nb.add(q), lin_v(lin, &flip, src, next + q, 0xFFFF));
                    let x1 = lin_v(lin, &flip, src, next + q + 16, 0xFFFF);
                    _mm512_storeu_ps(nb.add(q + 16), x1);
                }
                let (r0, r1) = gelu32(
                    _mm512_loadu_ps(cur.add(q)),
                    _mm512_loadu_ps(cur.add(q + 16)),
                    &tab,
                    &mut false,
                );
                _mm512_storeu_ps(dst.add(at + q), r0);
                _mm512_storeu_ps(dst.add(at + q + 16), r1);
            }
        }
        let (i, m) = (whole * BLOCK, n % BLOCK);
        if m > 0 {
            let b = bufs[0].as_mut_ptr();
            let mut q = 0;
            while q + 16 <= m {
                _mm512_storeu_ps(b.add(q), lin_v(lin, &flip, src, i + q, 0xFFFF));
                q += 16;
            }
            if q < m {
                let k = first(m - q);
                _mm512_mask_storeu_ps(b.add(q), k, lin_v(lin, &flip, src, i + q, k));
            }
            map_with(b, dst.add(i), m, &tab, &mut false);
        }
    }
}

/// [`after`] for any [`Pre`] ops: each op dispatched per vector, the last `n % 16` elements
/// one by one.
///
/// # Safety
/// [`available`]; lengths as [`after`] asserts.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn after_any(pre: &[Pre], src: &[f32], dst: &mut [f32]) {
    use BinaryOp as B;
    let n = src.len();
    let tab = table();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: `i + 16 <= n`, and every slice holds at least `n` floats.
        unsafe {
            let mut v = _mm512_loadu_ps(src.as_ptr().add(i));
            for &(op, left, s, c) in pre {
                let k = match s {
                    Some(s) => _mm512_loadu_ps(s.as_ptr().add(i)),
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
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), gelu16(v, &tab));
        }
        i += 16;
    }
    for j in i..n {
        let mut v = src[j];
        for &(op, left, s, c) in pre {
            let k = s.map_or(c, |s| s[j]);
            let (a, b) = if left { (v, k) } else { (k, v) };
            v = match op {
                B::Add => a + b,
                B::Sub => a - b,
                B::Mul => a * b,
                _ => a / b,
            };
        }
        dst[j] = gelu1::<Fused>(v);
    }
}
