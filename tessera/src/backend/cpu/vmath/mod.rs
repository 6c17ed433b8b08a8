//! Vectorised f32 elementwise math and reductions for the CPU backend.
//!
//! Every kernel is a branch-free scalar body (`#[inline(always)]`, generic
//! over an `Arith` flavour: fused or unfused multiply-add) applied in a simple loop that LLVM
//! auto-vectorises. Each is instantiated several times:
//!
//! * inside an `unsafe fn` with `#[target_feature(enable = "avx2,fma")]`
//!   (8-wide AVX2 with fused multiply-adds), chosen at run time through a
//!   cached `is_x86_feature_detected!`;
//! * element-wise kernels also with `avx512f,avx2,fma` (16-wide), preferred
//!   when the CPU has AVX-512F: on Zen 4 it measured 1.6-1.7x faster, because
//!   these kernels are limited by the number of instructions in flight;
//! * as a portable fallback (baseline ISA, e.g. SSE2 on x86_64, NEON on
//!   aarch64), which is also what non-x86 targets use.
//!
//! `gelu` and `exp` are the exceptions: their scalar bodies pick values from a table (`gelu`:
//! per-interval polynomial coefficients; `exp`: `2^(j/16)`), which the AVX2 and AVX-512
//! builds do with register permutes in explicit intrinsics (`gelu_simd.rs`, `exp_simd.rs`,
//! `exp16.rs`), `gelu` running the rare `exp` form only for vectors that need it; every lane
//! still gets the scalar body's operations, so the bits are the same.
//!
//! Accuracy (measured against f64 references on random inputs; see the
//! tests): `exp` within 0.99 ulp over every f32 of `[-104, 89]` at the AVX2 / AVX-512 levels
//! (0.999 at the portable level; 98 % correctly rounded),
//! `log`, `tanh`, `sigmoid`, `erf` within a few ulp, `gelu`
//! relative error below 1e-6 for all normal results including the negative
//! tail, `sqrt` correctly rounded, `rsqrt` within 1.5 ulp. Results of the two
//! instantiations may differ in the last bit (fused vs unfused operations).
//!
//! Only `std` is used.

// Polynomial coefficients are written with all the digits of their fit.
#![allow(clippy::excessive_precision, clippy::approx_constant)]

#[macro_use]
mod dispatch;
pub(crate) mod arith;
mod erf;
mod exp;
mod exp16;
mod exp_simd;
mod gelu;
#[cfg(target_arch = "x86_64")]
pub(crate) mod gelu512;
pub(crate) mod gelu_simd;
pub(crate) mod lanes;
mod log;
mod reduce;
mod sigmoid;
mod sqrt;
mod tanh;

#[cfg(test)]
mod exp_tests;
#[cfg(all(test, target_arch = "x86_64"))]
mod gelu512_tests;
#[cfg(test)]
mod tests;

#[cfg(target_arch = "x86_64")]
pub(crate) use exp16::{FAST_LO as EXP16_FAST_LO, exp16, exp16_in_range};

use exp_simd as k_exp;
elementwise!(k_log, log::log1);
elementwise!(k_tanh, tanh::tanh1);
elementwise!(k_sigmoid, sigmoid::sigmoid1);
elementwise!(k_erf, erf::erf1);
use gelu_simd as k_gelu;
elementwise!(k_sqrt, sqrt::sqrt1);
elementwise!(k_rsqrt, sqrt::rsqrt1);
reduction!(k_sum, reduce::sum_body);
reduction!(k_max, reduce::max_body);
reduction!(k_sum_kahan, reduce::sum_kahan_body);

/// In place `x[i] = e^x[i]`.
///
/// Overflows to `+inf` above ~88.72, underflows gradually through the
/// subnormals to `0` below ~-87.3 (exactly `0` below ~-103.98); NaN in gives
/// NaN out.
pub fn exp(x: &mut [f32]) {
    k_exp::run(x)
}

/// In place `x[i] = e^x[i]` by the canonical sequence of deterministic kernels
/// (`tessera_ir::canonical::exp`, fused multiply-adds on every CPU): bit for bit what a
/// deterministic kernel's PTX computes. [`exp`] is another sequence (a `2^(j/16)` table).
pub fn exp_fused(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if dispatch::has_avx512() {
            // SAFETY: AVX-512F, AVX2 and FMA were detected at run time.
            return unsafe { k_exp::canonical_avx512(x) };
        }
        if dispatch::has_avx2_fma() {
            // SAFETY: AVX2 and FMA were detected at run time.
            return unsafe { k_exp::canonical_avx2(x) };
        }
    }
    // `mul_add` is an instruction on aarch64, a correctly rounded library call elsewhere.
    dispatch::map(x, exp::exp1_canonical::<arith::Fused>)
}

/// In place natural logarithm: `log(0) = -inf`, `log(x<0) = NaN`,
/// `log(+inf) = +inf`, subnormal inputs handled exactly.
pub fn log(x: &mut [f32]) {
    k_log::run(x)
}

/// In place hyperbolic tangent; `tanh(±large) = ±1`, relative accuracy kept
/// for tiny arguments.
pub fn tanh(x: &mut [f32]) {
    k_tanh::run(x)
}

/// In place logistic sigmoid `1 / (1 + e^-x)`; `sigmoid(-large) = 0`
/// (never NaN), `sigmoid(+large) = 1`, relative accuracy in the negative tail.
pub fn sigmoid(x: &mut [f32]) {
    k_sigmoid::run(x)
}

/// In place error function `erf(x)`; `erf(±large) = ±1`.
pub fn erf(x: &mut [f32]) {
    k_erf::run(x)
}

/// In place exact GELU `0.5·x·(1 + erf(x/√2)) = 0.5·x·erfc(-x/√2)`, evaluated
/// through `erfc` so that the negative tail keeps relative accuracy.
/// `gelu(+inf) = +inf`, `gelu(-inf) = -0`.
pub fn gelu(x: &mut [f32]) {
    k_gelu::run(x)
}

/// `dst[i] = gelu(src[i])`: [`gelu`]'s bits, without first copying `src` into `dst`.
///
/// # Panics
/// If the lengths differ.
pub(crate) fn gelu_into(src: &[f32], dst: &mut [f32]) {
    k_gelu::run_into(src, dst)
}

/// In place IEEE square root (correctly rounded).
pub fn sqrt(x: &mut [f32]) {
    k_sqrt::run(x)
}

/// In place reciprocal square root `1 / sqrt(x)` (a true division, not the
/// 12-bit hardware estimate; two correctly rounded steps, < 1.5 ulp).
pub fn rsqrt(x: &mut [f32]) {
    k_rsqrt::run(x)
}

/// Sum of `x`, accumulated in f32 with 32 independent vector lanes that are
/// combined pairwise at the end (fast; error grows like `len/32` roundings).
/// Empty slice gives `0.0`.
pub fn sum(x: &[f32]) -> f32 {
    k_sum::run(x)
}

/// Maximum of `x`, NaN-propagating (any NaN gives NaN); `-inf` for an empty
/// slice.
pub fn max(x: &[f32]) -> f32 {
    k_max::run(x)
}

/// Compensated sum: 32 vector lanes each carrying a Kahan compensation term,
/// combined with Neumaier summation at the end. Error is about
/// `2·eps·|sum| + O(len·eps²)·Σ|x|`. Infinite/NaN inputs give the IEEE sum.
pub fn sum_kahan(x: &[f32]) -> f32 {
    k_sum_kahan::run(x)
}
