//! x86_64 micro-kernels and cached runtime feature detection.

pub(crate) mod amx;
mod avx2;
mod avx512;
pub(crate) mod bf16;
pub(crate) mod rows;

pub(crate) use avx2::Avx2Kernel;
pub(crate) use avx512::{Avx512Kernel, Avx512Wide};

use super::Isa;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0 = not yet detected, otherwise `1 + Isa as u8`.
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// Best supported ISA, detected on first use and cached in an atomic.
#[inline]
pub(crate) fn detected() -> Isa {
    match DETECTED.load(Ordering::Relaxed) {
        1 => Isa::Portable,
        2 => Isa::Avx2,
        3 => Isa::Avx512,
        _ => {
            let isa = if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                Isa::Avx512
            } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                Isa::Avx2
            } else {
                Isa::Portable
            };
            let code = match isa {
                Isa::Portable => 1,
                Isa::Avx2 => 2,
                Isa::Avx512 => 3,
            };
            DETECTED.store(code, Ordering::Relaxed);
            isa
        }
    }
}

/// 0 = not yet detected, 1 = absent, 2 = present.
static HAS_BF16: AtomicU8 = AtomicU8::new(0);

/// Whether AVX-512F + AVX-512 BF16 are available (cached).
#[inline]
pub(crate) fn has_bf16() -> bool {
    match HAS_BF16.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let yes = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16");
            HAS_BF16.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}
