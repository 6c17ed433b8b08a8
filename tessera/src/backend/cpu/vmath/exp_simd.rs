//! The slice kernels of [`super::exp`] (`portable`, `avx2`, `avx512`, `run`, as the
//! `elementwise!` modules of the other functions). The AVX-512 kernel runs
//! [`super::exp16`] on 16 lanes per step (a masked step for the tail); the AVX2 kernel looks
//! up `T[j]` with two `vpermps` (one per half of the table) and a blend on bit 3 of `j`. Every
//! lane gets `exp1::<Fused>`'s IEEE operations (`exp1::<Plain>`'s in `portable`), so the
//! results are those bits.

#[cfg(target_arch = "x86_64")]
use super::arith::Fused;
use super::arith::{Arith, Plain};
use super::exp::exp1;
#[cfg(target_arch = "x86_64")]
use super::exp::{
    EXP_HI, EXP_LO, SHIFTER, T_BITS, T_C2, T_C3, T_LN2_HI, T_LN2_LO, T_LOG2E, T_SCALE_BIAS,
};
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// Portable instantiation (baseline ISA, separate mul/add).
#[inline(never)]
pub(crate) fn portable(x: &mut [f32]) {
    super::dispatch::map(x, exp1::<Plain>)
}

/// AVX2+FMA instantiation: 8 lanes per step.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn avx2(x: &mut [f32]) {
    // SAFETY: `T_BITS` holds 16 values.
    let tab = unsafe {
        [
            _mm256_loadu_ps(T_BITS.as_ptr() as *const f32),
            _mm256_loadu_ps((T_BITS.as_ptr() as *const f32).add(8)),
        ]
    };
    let mut c = x.chunks_exact_mut(8);
    for v in &mut c {
        // SAFETY: `v` holds 8 floats.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), exp8(_mm256_loadu_ps(v.as_ptr()), &tab)) };
    }
    for v in c.into_remainder() {
        *v = exp1::<Fused>(*v);
    }
}

/// AVX-512F instantiation: [`super::exp16`] on 16 lanes per step.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn avx512(x: &mut [f32]) {
    let mut c = x.chunks_exact_mut(16);
    for v in &mut c {
        // SAFETY: `v` holds 16 floats; the level is the caller's.
        unsafe { _mm512_storeu_ps(v.as_mut_ptr(), super::exp16(_mm512_loadu_ps(v.as_ptr()))) };
    }
    let t = c.into_remainder();
    if !t.is_empty() {
        let k = ((1u32 << t.len()) - 1) as __mmask16;
        // SAFETY: the masked load and store touch only `t`'s `t.len()` floats.
        unsafe {
            let v = super::exp16(_mm512_maskz_loadu_ps(k, t.as_ptr()));
            _mm512_mask_storeu_ps(t.as_mut_ptr(), k, v);
        }
    }
}

/// `exp1_canonical::<Fused>` (`vmath::exp_fused`) at the AVX-512 level.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn canonical_avx512(x: &mut [f32]) {
    super::dispatch::map(x, super::exp::exp1_canonical::<Fused>)
}

/// `exp1_canonical::<Fused>` (`vmath::exp_fused`) at the AVX2 level.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn canonical_avx2(x: &mut [f32]) {
    super::dispatch::map(x, super::exp::exp1_canonical::<Fused>)
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

/// `v[k] = exp1::<A>(v[k])` for a block of lanes (`vmath::lanes`): with the FMA flavour (the
/// one the AVX2 and AVX-512 levels use) through [`run`]'s vector kernels (an auto-vectorised
/// `exp1` would gather `T[j]`), else lane by lane.
#[inline(always)]
pub(crate) fn block<A: Arith, const L: usize>(v: &mut [f32; L]) {
    #[cfg(target_arch = "x86_64")]
    if A::FUSED && super::dispatch::has_avx2_fma() {
        // `run` picks AVX-512 or AVX2; both give `exp1::<Fused>`'s bits.
        return run(v);
    }
    for e in v.iter_mut() {
        *e = exp1::<A>(*e);
    }
}

/// `exp1::<Fused>` on 8 lanes; `tab` holds `T[0..8]` and `T[8..16]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp8(x: __m256, tab: &[__m256; 2]) -> __m256 {
    // `max(lo, x)` / `min(hi, x)` return `x` when it is NaN, as `exp1`'s compares do.
    let x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), x);
    let x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), x);
    let shifter = _mm256_set1_ps(SHIFTER);
    let kf = _mm256_fmadd_ps(x, _mm256_set1_ps(T_LOG2E), shifter);
    let m = _mm256_sub_ps(kf, shifter);
    let r = _mm256_fmadd_ps(m, _mm256_set1_ps(-T_LN2_HI), x);
    let r = _mm256_fmadd_ps(m, _mm256_set1_ps(-T_LN2_LO), r);
    let k = _mm256_castps_si256(kf);
    // `vpermps` reads index bits 0-2; bit 3 (moved to the sign) picks the half.
    let t = _mm256_blendv_ps(
        _mm256_permutevar8x32_ps(tab[0], k),
        _mm256_permutevar8x32_ps(tab[1], k),
        _mm256_castsi256_ps(_mm256_slli_epi32::<28>(k)),
    );
    let q = _mm256_fmadd_ps(_mm256_set1_ps(T_C3), r, _mm256_set1_ps(T_C2));
    let e = _mm256_fmadd_ps(q, _mm256_mul_ps(r, r), r);
    let y = _mm256_fmadd_ps(t, e, t);
    let a = _mm256_sub_epi32(k, _mm256_set1_epi32(T_SCALE_BIAS));
    let p1 = _mm256_srai_epi32::<5>(a);
    let p2 = _mm256_sub_epi32(_mm256_srai_epi32::<4>(a), p1);
    let y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(p1)));
    _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(p2)))
}
