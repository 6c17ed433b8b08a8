//! Dispatch on the active SIMD level ([`crate::backend::cpu::simd`]) and the macros that
//! instantiate each generic kernel body several times: inside
//! `#[target_feature]` wrappers for `avx2,fma` and (element-wise kernels
//! only) `avx512f,avx2,fma`, and once as the portable fallback.

/// True when the active SIMD level ([`crate::backend::cpu::simd::active`]) is AVX2+FMA or
/// higher.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline]
pub(crate) fn has_avx2_fma() -> bool {
    crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2
}

/// True when the active SIMD level is AVX-512F.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline]
pub(crate) fn has_avx512() -> bool {
    crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
}

/// Never true off x86.
#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
#[inline]
#[allow(dead_code)]
pub(crate) fn has_avx2_fma() -> bool {
    false
}

/// Applies `f` to every element in place. `#[inline(always)]` so that the
/// whole loop, including `f`, is compiled with the caller's target features
/// and auto-vectorised.
#[inline(always)]
pub(crate) fn map<F: Fn(f32) -> f32>(x: &mut [f32], f: F) {
    for v in x.iter_mut() {
        *v = f(*v);
    }
}

/// Defines a module `$m` with `portable(x)` and (on x86) `unsafe avx2(x)` /
/// `unsafe avx512(x)` entry points for the element-wise kernel `$k::<A>`, plus a dispatching
/// `run(x)`.
macro_rules! elementwise {
    ($m:ident, $($k:ident)::+) => {
        pub(crate) mod $m {
            #[allow(unused_imports)]
            use super::arith::{Fused, Plain};

            /// Portable instantiation (baseline ISA, separate mul/add).
            #[inline(never)]
            pub(crate) fn portable(x: &mut [f32]) {
                super::dispatch::map(x, super::$($k)::+::<Plain>)
            }

            /// AVX2+FMA instantiation.
            ///
            /// # Safety
            /// The CPU must support AVX2 and FMA.
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            #[target_feature(enable = "avx2,fma")]
            pub(crate) unsafe fn avx2(x: &mut [f32]) {
                super::dispatch::map(x, super::$($k)::+::<Fused>)
            }

            /// AVX-512F instantiation (16 lanes; also halves the instructions
            /// in flight, which these latency-heavy kernels benefit from).
            ///
            /// # Safety
            /// The CPU must support AVX-512F, AVX2 and FMA.
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            #[target_feature(enable = "avx512f,avx2,fma")]
            pub(crate) unsafe fn avx512(x: &mut [f32]) {
                super::dispatch::map(x, super::$($k)::+::<Fused>)
            }

            /// Best available instantiation for this CPU.
            #[inline]
            pub(crate) fn run(x: &mut [f32]) {
                #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
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
        }
    };
}

/// Same as [`elementwise!`] for reductions `fn(&[f32]) -> f32` that are
/// generic over the arithmetic flavour.
macro_rules! reduction {
    ($m:ident, $($k:ident)::+) => {
        pub(crate) mod $m {
            #[allow(unused_imports)]
            use super::arith::{Fused, Plain};

            /// Portable instantiation.
            #[inline(never)]
            pub(crate) fn portable(x: &[f32]) -> f32 {
                super::$($k)::+::<Plain>(x)
            }

            /// AVX2+FMA instantiation.
            ///
            /// # Safety
            /// The CPU must support AVX2 and FMA.
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            #[target_feature(enable = "avx2,fma")]
            pub(crate) unsafe fn avx2(x: &[f32]) -> f32 {
                super::$($k)::+::<Fused>(x)
            }

            /// Best available instantiation for this CPU.
            #[inline]
            pub(crate) fn run(x: &[f32]) -> f32 {
                #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
                {
                    if super::dispatch::has_avx2_fma() {
                        // SAFETY: AVX2 and FMA were detected at run time.
                        return unsafe { avx2(x) };
                    }
                }
                portable(x)
            }
        }
    };
}
