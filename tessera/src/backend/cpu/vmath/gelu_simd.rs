//! The slice kernels of [`super::gelu`] (`portable`, `avx2`, `avx512`, `run`, as the
//! `elementwise!` modules of the other functions) and [`block`] for `vmath::lanes`. The
//! AVX-512 loops live in [`super::gelu512`].
//!
//! The AVX2 kernel evaluates [`gelu1`]'s central polynomial on a whole vector, each
//! coefficient picked per lane from one of two registers holding 8 interval values each (one
//! permute when no lane has `|x| >= 4`, else two and a blend), puts `x` itself in the lanes
//! at `x >= POS_END`, and runs [`tail`] (lane by lane, built with the same features) only for
//! a vector with a lane at `x <= NEG_END` or NaN, blending it into those lanes. Every lane
//! gets `gelu1::<Fused>`'s IEEE operations, so the result is its bits.

#[cfg(target_arch = "x86_64")]
use super::arith::Fused;
use super::arith::{Arith, Plain};
use super::gelu::gelu1;
#[cfg(target_arch = "x86_64")]
use super::gelu::{CT, NEG_END, POS_END, S, tail};
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// Portable instantiation (baseline ISA, separate mul/add).
#[inline(never)]
pub(crate) fn portable(x: &mut [f32]) {
    super::dispatch::map(x, gelu1::<Plain>)
}

/// [`portable`] from `src` into `dst` (same lengths).
#[inline(never)]
fn portable_into(src: &[f32], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = gelu1::<Plain>(*s);
    }
}

/// AVX-512 instantiation ([`super::gelu512::map`]), or [`avx2`] on a CPU without AVX-512DQ.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn avx512(x: &mut [f32]) {
    if !std::arch::is_x86_feature_detected!("avx512dq") {
        // SAFETY: AVX2 and FMA (this function's contract).
        return unsafe { avx2(x) };
    }
    // SAFETY: AVX-512F/DQ, AVX2 and FMA; `x` is `n` floats, read before written at each index.
    unsafe { super::gelu512::map(x.as_ptr(), x.as_mut_ptr(), x.len()) }
}

/// AVX2+FMA instantiation: 8 lanes per step.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn avx2(x: &mut [f32]) {
    // SAFETY: `x` is `n` floats, read before written at each index.
    unsafe { avx2_map(x.as_ptr(), x.as_mut_ptr(), x.len()) }
}

/// `dst[i] = gelu1::<Fused>(src[i])` for `i < n`, 8 lanes per step.
///
/// # Safety
/// As [`avx2`]; `src` readable and `dst` writable for `n` floats, either the same pointer or
/// not overlapping.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_map(src: *const f32, dst: *mut f32, n: usize) {
    // SAFETY: `CT[k]` holds 16 floats.
    let tab: [[__m256; 2]; 8] = core::array::from_fn(|k| unsafe {
        [
            _mm256_loadu_ps(CT[k].as_ptr()),
            _mm256_loadu_ps(CT[k].as_ptr().add(8)),
        ]
    });
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` (the caller's contract).
        unsafe { _mm256_storeu_ps(dst.add(i), gelu8(_mm256_loadu_ps(src.add(i)), &tab)) };
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`.
        unsafe { *dst.add(i) = gelu1::<Fused>(*src.add(i)) };
        i += 1;
    }
}

/// `gelu1::<Fused>` on 8 lanes; `tab[k]` holds `CT[k]`'s two halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn gelu8(x: __m256, tab: &[[__m256; 2]; 8]) -> __m256 {
    let ax = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF)));
    let v = _mm256_mul_ps(ax, _mm256_set1_ps(S));
    let j = _mm256_cvttps_epi32(v);
    let u = _mm256_sub_ps(v, _mm256_add_ps(_mm256_cvtepi32_ps(j), _mm256_set1_ps(0.5)));
    let c = if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(v, _mm256_set1_ps(8.0))) == 0 {
        // Every lane's interval is below 8 (or its lane is dropped below).
        let mut c = _mm256_permutevar8x32_ps(tab[7][0], j);
        for k in (0..7).rev() {
            c = _mm256_fmadd_ps(c, u, _mm256_permutevar8x32_ps(tab[k][0], j));
        }
        c
    } else {
        // Bit 3 of `j`, moved into the sign bit, picks the upper half.
        let hi = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(j));
        let pick = |t: &[__m256; 2]| {
            _mm256_blendv_ps(
                _mm256_permutevar8x32_ps(t[0], j),
                _mm256_permutevar8x32_ps(t[1], j),
                hi,
            )
        };
        let mut c = pick(&tab[7]);
        for k in (0..7).rev() {
            c = _mm256_fmadd_ps(c, u, pick(&tab[k]));
        }
        c
    };
    // `fma(-|x|, c, b)`: `b = x` for a clear sign bit (`x - x c`, rounded once), `b = -0`
    // (0x8000_0000, the unsigned minimum) for a set one (`x c + (-0)`: `x c` rounded).
    let xi = _mm256_castps_si256(x);
    let sign = _mm256_set1_epi32(i32::MIN);
    let nax = _mm256_castsi256_ps(_mm256_or_si256(xi, sign));
    let b = _mm256_castsi256_ps(_mm256_min_epu32(xi, sign));
    let r = _mm256_fmadd_ps(nax, c, b);
    let big = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(POS_END));
    let r = _mm256_blendv_ps(r, x, big);
    let far = _mm256_cmp_ps::<_CMP_NGT_UQ>(x, _mm256_set1_ps(NEG_END));
    if _mm256_movemask_ps(far) == 0 {
        return r;
    }
    let mut t = [0f32; 8];
    // SAFETY: `t` holds 8 floats.
    unsafe { _mm256_storeu_ps(t.as_mut_ptr(), x) };
    for e in t.iter_mut() {
        *e = tail::<Fused>(*e);
    }
    // SAFETY: as above.
    _mm256_blendv_ps(r, unsafe { _mm256_loadu_ps(t.as_ptr()) }, far)
}

/// `dst[i] = gelu1::<Fused>(pre(src[i]))` for values from column `col` of rows `c` long,
/// as [`super::gelu512::after_rows`] (the same [`Pre`](super::gelu512::Pre) ops, each row
/// operand one row of `c` values read at the value's column), 8 lanes per step: the ops on
/// the vector in registers (each op's own instruction, dispatched per vector), then
/// [`gelu8`]; the last `n % 8` values of each row segment one by one.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
///
/// # Panics
/// If the lengths differ, `col >= c`, a row is shorter than `c`, or an op is not `add`,
/// `sub`, `mul` or `div`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn avx2_after_rows(
    pre: &[super::gelu512::Pre],
    src: &[f32],
    dst: &mut [f32],
    col: usize,
    c: usize,
) {
    use tessera_ir::graph::BinaryOp as B;
    let n = src.len();
    assert!(dst.len() == n && col < c && pre.iter().all(|p| p.2.is_none_or(|s| s.len() >= c)));
    assert!(
        pre.iter()
            .all(|p| matches!(p.0, B::Add | B::Sub | B::Mul | B::Div))
    );
    // SAFETY: `CT[k]` holds 16 floats.
    let tab: [[__m256; 2]; 8] = core::array::from_fn(|k| unsafe {
        [
            _mm256_loadu_ps(CT[k].as_ptr()),
            _mm256_loadu_ps(CT[k].as_ptr().add(8)),
        ]
    });
    let (mut at, mut col) = (0, col);
    while at < n {
        let m = (n - at).min(c - col);
        let mut i = 0;
        while i + 8 <= m {
            // SAFETY: `at + i + 8 <= n` and `col + i + 8 <= c` (asserted lengths).
            unsafe {
                let mut v = _mm256_loadu_ps(src.as_ptr().add(at + i));
                for &(op, left, s, k) in pre {
                    let k = match s {
                        Some(s) => _mm256_loadu_ps(s.as_ptr().add(col + i)),
                        None => _mm256_set1_ps(k),
                    };
                    let (a, b) = if left { (v, k) } else { (k, v) };
                    v = match op {
                        B::Add => _mm256_add_ps(a, b),
                        B::Sub => _mm256_sub_ps(a, b),
                        B::Mul => _mm256_mul_ps(a, b),
                        _ => _mm256_div_ps(a, b),
                    };
                }
                _mm256_storeu_ps(dst.as_mut_ptr().add(at + i), gelu8(v, &tab));
            }
            i += 8;
        }
        for j in i..m {
            dst[at + j] = gelu1::<Fused>(super::gelu512::pre_one(pre, src[at + j], col + j));
        }
        at += m;
        col = 0;
    }
}

/// Best available instantiation for this CPU.
#[inline]
pub(crate) fn run(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::dispatch::has_avx512() {
            // SAFETY: AVX-512F, AVX2 and FMA were detected at run time.
            return unsafe { avx512(x) };
        }
        if super::dispatch::has_avx2_fma() {
            // SAFETY: AVX2 and FMA were detected at run time.
            return unsafe { avx2(x) };
        }
    }
    portable(x)
}

/// `dst[i] = gelu(src[i])`, [`run`]'s bits, reading `src` in the loop (no copy first).
///
/// # Panics
/// If the lengths differ.
pub(crate) fn run_into(src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "gelu_into lengths");
    #[cfg(target_arch = "x86_64")]
    {
        if super::gelu512::available() {
            // SAFETY: AVX-512F/DQ, AVX2 and FMA were detected at run time; two distinct
            // slices of `n` floats (a `&mut` never overlaps a `&`).
            return unsafe { super::gelu512::map(src.as_ptr(), dst.as_mut_ptr(), src.len()) };
        }
        if super::dispatch::has_avx2_fma() {
            // SAFETY: AVX2 and FMA were detected at run time; as above.
            return unsafe { avx2_map(src.as_ptr(), dst.as_mut_ptr(), src.len()) };
        }
    }
    portable_into(src, dst)
}

/// `v[k] = gelu1::<A>(v[k])` for a block of lanes (`vmath::lanes`): with the FMA flavour
/// (the one the AVX2 and AVX-512 levels use) through [`run`]'s vector kernels, else lane by lane.
#[inline(always)]
pub(crate) fn block<A: Arith, const L: usize>(v: &mut [f32; L]) {
    #[cfg(target_arch = "x86_64")]
    if A::FUSED && super::dispatch::has_avx2_fma() {
        // `run` picks AVX-512 or AVX2; both give `gelu1::<Fused>`'s bits.
        return run(v);
    }
    for e in v.iter_mut() {
        *e = gelu1::<A>(*e);
    }
}
