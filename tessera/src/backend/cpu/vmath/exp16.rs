//! `exp` of 16 lanes in AVX-512 registers, bit for bit [`super::exp`] (`exp1::<Fused>`), for
//! loops that keep their values in registers (the softmax row loop, `vmath::exp`'s AVX-512
//! slice kernel). `T[j] = 2^(j/16)` comes from one register by `vpermps` indexed by the
//! reduction's `k` (its low 4 bits are `m mod 16`). When every lane lies in `[-86, 87]` the
//! result and `T[j]·2^n` are normal, so scaling the table value by `2^n` before the last
//! multiply-add (one integer add: the register holds `bits(T[j]) − (j << 19)`, and `k << 19`
//! is `(16n + j) << 19`) equals `exp1`'s two-step scale after it, and the clamps are no-ops:
//! that form runs; any other vector (a lane out of range, `±inf` or NaN) runs `exp1` op for op.

#[cfg(target_arch = "x86_64")]
use super::exp::{
    EXP_HI, EXP_LO, SHIFTER, T_BITS, T_C2, T_C3, T_LN2_HI, T_LN2_LO, T_LOG2E, T_SCALE_BIAS,
};
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// Lowest argument of the single-add form: `n ≥ −125` and the result is above `e^-86`, so
/// `T[j]·2^n` and the result are normal.
#[cfg(target_arch = "x86_64")]
pub(crate) const FAST_LO: f32 = -86.0;
/// Highest argument of the single-add form (`e^87` and `T[j]·2^n <= 2^126` are finite).
#[cfg(target_arch = "x86_64")]
const FAST_HI: f32 = 87.0;

/// `bits(T[j]) − (j << 19)`: adding `m << 19` (`m = 16n + j`) gives `bits(T[j]·2^n)`.
#[cfg(target_arch = "x86_64")]
const T_ADJ: [u32; 16] = {
    let mut a = [0u32; 16];
    let mut j = 0;
    while j < 16 {
        a[j] = T_BITS[j].wrapping_sub((j as u32) << 19);
        j += 1;
    }
    a
};

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
    let (r, k) = reduce(x);
    // SAFETY: `T_ADJ` holds 16 values.
    let adj = unsafe { _mm512_loadu_si512(T_ADJ.as_ptr() as *const _) };
    let ts = _mm512_add_epi32(_mm512_permutexvar_epi32(k, adj), _mm512_slli_epi32::<19>(k));
    poly(r, _mm512_castsi512_ps(ts))
}

/// `exp1::<Fused>` lane by lane: the clamps (a NaN lane passes), then the `2^n` scale in two
/// multiplies.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn full(x: __m512) -> __m512 {
    let lo = _mm512_set1_ps(EXP_LO);
    let x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo), lo);
    let hi = _mm512_set1_ps(EXP_HI);
    let x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi), hi);
    let (r, k) = reduce(x);
    // SAFETY: `T_BITS` holds 16 values.
    let tab = unsafe { _mm512_loadu_ps(T_BITS.as_ptr() as *const f32) };
    let y = poly(r, _mm512_permutexvar_ps(k, tab));
    let a = _mm512_sub_epi32(k, _mm512_set1_epi32(T_SCALE_BIAS));
    let p1 = _mm512_srai_epi32::<5>(a);
    let p2 = _mm512_sub_epi32(_mm512_srai_epi32::<4>(a), p1);
    let y = _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(p1)));
    _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(p2)))
}

/// `exp_t_reduce`: `r` and `k`'s bits (`m + 0x4B40_0000`, with `x = m·ln2/16 + r`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn reduce(x: __m512) -> (__m512, __m512i) {
    let shifter = _mm512_set1_ps(SHIFTER);
    let k = _mm512_fmadd_ps(x, _mm512_set1_ps(T_LOG2E), shifter);
    let m = _mm512_sub_ps(k, shifter);
    let r = _mm512_fmadd_ps(m, _mm512_set1_ps(-T_LN2_HI), x);
    let r = _mm512_fmadd_ps(m, _mm512_set1_ps(-T_LN2_LO), r);
    (r, _mm512_castps_si512(k))
}

/// `exp_t_poly`: `t·(1 + q(r))`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn poly(r: __m512, t: __m512) -> __m512 {
    let q = _mm512_fmadd_ps(_mm512_set1_ps(T_C3), r, _mm512_set1_ps(T_C2));
    let e = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), r);
    _mm512_fmadd_ps(t, e, t)
}
