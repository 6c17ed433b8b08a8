//! `exp` of 16 lanes in AVX-512 registers, bit for bit [`super::exp`]'s AVX-512 build, for
//! loops that keep their values in registers (the softmax row loop). When every lane lies in
//! `[-86, 87]` the result is normal, so the two-step `2^n` scale of `exp_finish` equals one
//! exponent-field add (both are exact) and the clamps are no-ops: that single-add form runs;
//! any other vector (a lane out of range, `±inf` or NaN) runs `exp_core` op for op.

#[cfg(target_arch = "x86_64")]
use super::exp::{EXP_HI, EXP_LO, LN2_HI, LN2_LO, LOG2E, POLY, SHIFTER};
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// Lowest argument of the single-add form: `n ≥ −124` and `e^r ≥ 0.7`, so the result is normal.
#[cfg(target_arch = "x86_64")]
pub(crate) const FAST_LO: f32 = -86.0;
/// Highest argument of the single-add form (`e^87` is finite).
#[cfg(target_arch = "x86_64")]
const FAST_HI: f32 = 87.0;

/// `e^x` lane by lane, the bits of [`super::exp`] at the AVX-512 level.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(crate) unsafe fn exp16(x: __m512) -> __m512 {
    let inside = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(FAST_LO))
        & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, _mm512_set1_ps(FAST_HI));
    if inside != 0xFFFF {
        return full(x);
    }
    // SAFETY: every lane is in range (checked above); the level is the caller's.
    unsafe { exp16_in_range(x) }
}

/// [`exp16`] where the caller knows every lane lies in `[FAST_LO, FAST_HI]` = `[-86, 87]`.
///
/// # Safety
/// As [`exp16`]; a lane out of that range (or NaN) gives an unspecified value.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(crate) unsafe fn exp16_in_range(x: __m512) -> __m512 {
    let (p, ni) = reduce_poly(x);
    _mm512_castsi512_ps(_mm512_add_epi32(
        _mm512_castps_si512(p),
        _mm512_slli_epi32::<23>(ni),
    ))
}

/// `exp_core(x, -0.0)` lane by lane: the clamps (a NaN lane passes), then the `2^n` scale in
/// two halves (an exponent-field add, then a multiply).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn full(x: __m512) -> __m512 {
    let lo = _mm512_set1_ps(EXP_LO);
    let x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo), lo);
    let hi = _mm512_set1_ps(EXP_HI);
    let x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi), hi);
    let (p, ni) = reduce_poly(x);
    let n1 = _mm512_srai_epi32::<1>(ni);
    let n2 = _mm512_sub_epi32(ni, n1);
    let scaled = _mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32::<23>(n1));
    let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(n2, _mm512_set1_epi32(127)));
    _mm512_mul_ps(_mm512_castsi512_ps(scaled), _mm512_castsi512_ps(pow2))
}

/// `exp_reduce` and `exp_poly`: the polynomial `p ≈ e^r` and `n` (with `x = n ln2 + r`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn reduce_poly(x: __m512) -> (__m512, __m512i) {
    let shifter = _mm512_set1_ps(SHIFTER);
    let k = _mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), shifter);
    let n = _mm512_sub_ps(k, shifter);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    let mut p = _mm512_set1_ps(POLY[0]);
    for c in &POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let p = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    let ni = _mm512_sub_epi32(_mm512_castps_si512(k), _mm512_set1_epi32(0x4B40_0000));
    (p, ni)
}
