//! The SIMD level the CPU backend's hot loops run at: detected once at run time
//! (`is_x86_feature_detected!`), optionally lowered by `TESSERA_CPU_SIMD` or [`force`].
//!
//! Every dispatching loop reads [`active`]: the fused executor's chunk loops
//! (`fused::run`), the transcendental kernels ([`super::vmath`]) and the GEMM micro-kernels
//! ([`super::gemm`]). Each hot loop is compiled twice or three times — inside
//! `#[target_feature(enable = "avx2,fma")]` (and, for `vmath` and the GEMM, `avx512f`)
//! functions, and as the portable baseline build — so one binary built for generic x86-64
//! runs AVX2+FMA code on CPUs that have it.
//!
//! `TESSERA_CPU_SIMD` accepts `auto` (the default: the best level detected), `portable`,
//! `avx2` or `avx512`. A value that is not one of those, or a level the CPU lacks, makes every
//! CPU launch fail with an error naming the variable (never a silent fallback).
//!
//! ```
//! use tessera::backend::cpu::simd::{self, SimdLevel};
//! // Every level this CPU supports, portable first; the best is the detected one.
//! let levels = simd::supported();
//! assert_eq!(levels[0], SimdLevel::Portable);
//! assert_eq!(*levels.last().unwrap(), simd::detected());
//! // Forcing a supported level is allowed; `None` goes back to the default.
//! simd::force(Some(SimdLevel::Portable)).unwrap();
//! assert_eq!(simd::active(), SimdLevel::Portable);
//! simd::force(None).unwrap();
//! ```

use crate::{Error, Result};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level of the CPU backend's hot loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// The build's baseline (SSE2 on generic x86-64, NEON on aarch64).
    Portable,
    /// x86-64 AVX2 with FMA (8 f32 lanes, fused multiply-add).
    Avx2,
    /// x86-64 AVX-512F (+AVX2, FMA): used by `vmath`, the f32 GEMM micro-kernel and the f32
    /// passes of the norm row loops, and (where AVX-512BW is also present, checked at run
    /// time) the softmax row loop; the fused executor's other loops run their AVX2 build at
    /// this level.
    Avx512,
}

impl SimdLevel {
    /// Its name as `TESSERA_CPU_SIMD` spells it.
    ///
    /// ```
    /// assert_eq!(tessera::backend::cpu::simd::SimdLevel::Avx2.name(), "avx2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> SimdLevel {
        match c {
            2 => SimdLevel::Avx2,
            3 => SimdLevel::Avx512,
            _ => SimdLevel::Portable,
        }
    }
}

/// The variable that lowers the level.
pub const ENV: &str = "TESSERA_CPU_SIMD";
const ACCEPTED: &str = "auto, portable, avx2 or avx512";

/// The best level the running CPU supports (detected once).
///
/// ```
/// let best = tessera::backend::cpu::simd::detected();
/// assert!(tessera::backend::cpu::simd::supported().contains(&best));
/// ```
pub fn detected() -> SimdLevel {
    static BEST: OnceLock<SimdLevel> = OnceLock::new();
    *BEST.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            if avx2 {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Portable
    })
}

/// Every level the running CPU supports, lowest first.
///
/// ```
/// assert!(!tessera::backend::cpu::simd::supported().is_empty());
/// ```
pub fn supported() -> Vec<SimdLevel> {
    [SimdLevel::Portable, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .filter(|l| *l <= detected())
        .collect()
}

/// The level from `TESSERA_CPU_SIMD`, read once: `Ok(None)` for unset or `auto`.
fn env_level() -> &'static std::result::Result<Option<SimdLevel>, String> {
    static ENV_LEVEL: OnceLock<std::result::Result<Option<SimdLevel>, String>> = OnceLock::new();
    ENV_LEVEL.get_or_init(|| {
        let v = match tessera_ir::env::var(ENV, ACCEPTED) {
            Ok(None) => return Ok(None),
            Ok(Some(v)) => v,
            Err(e) => return Err(e.to_string()),
        };
        let level = match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => return Ok(None),
            "portable" => SimdLevel::Portable,
            "avx2" => SimdLevel::Avx2,
            "avx512" => SimdLevel::Avx512,
            _ => return Err(tessera_ir::env::EnvError::new(ENV, &v, ACCEPTED).to_string()),
        };
        if level > detected() {
            return Err(format!(
                "{ENV}={v:?}: this CPU supports at most {}",
                detected().name()
            ));
        }
        Ok(Some(level))
    })
}

/// 0: not yet initialised; else `SimdLevel::code`.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The level hot loops run at now: the one [`force`]d, else `TESSERA_CPU_SIMD`'s, else
/// [`detected`]. (An invalid `TESSERA_CPU_SIMD` reads as the detected level here; launches
/// report it through `check_env`.)
///
/// ```
/// use tessera::backend::cpu::simd;
/// assert!(simd::active() <= simd::detected());
/// ```
#[inline]
pub fn active() -> SimdLevel {
    match ACTIVE.load(Ordering::Relaxed) {
        0 => {
            let l = match env_level() {
                Ok(Some(l)) => *l,
                _ => detected(),
            };
            // A concurrent `force` wins over this first initialisation.
            let _ = ACTIVE.compare_exchange(0, l.code(), Ordering::Relaxed, Ordering::Relaxed);
            SimdLevel::from_code(ACTIVE.load(Ordering::Relaxed))
        }
        c => SimdLevel::from_code(c),
    }
}

/// Sets the level for the whole process (every thread); `None` returns to
/// `TESSERA_CPU_SIMD` or the detected level. A level this CPU does not support is an
/// [`Error::InvalidSetting`].
///
/// ```
/// use tessera::backend::cpu::simd::{self, SimdLevel};
/// if simd::detected() < SimdLevel::Avx512 {
///     assert!(simd::force(Some(SimdLevel::Avx512)).is_err());
/// }
/// ```
pub fn force(level: Option<SimdLevel>) -> Result<()> {
    let l = match level {
        Some(l) if l > detected() => {
            return Err(Error::InvalidSetting {
                setting: format!("cpu simd level {}", l.name()),
                message: format!(
                    "is not supported: this CPU has at most {}",
                    detected().name()
                ),
            });
        }
        Some(l) => l,
        None => match env_level() {
            Ok(Some(l)) => *l,
            _ => detected(),
        },
    };
    ACTIVE.store(l.code(), Ordering::Relaxed);
    Ok(())
}

/// `Err` when `TESSERA_CPU_SIMD` is set to something it does not accept (checked by every CPU
/// launch).
pub(crate) fn check_env() -> Result<()> {
    match env_level() {
        Err(message) => Err(Error::InvalidSetting {
            setting: ENV.into(),
            message: message.clone(),
        }),
        Ok(_) => Ok(()),
    }
}

/// 0 = not yet detected, 1 = no, 2 = yes.
#[cfg(target_arch = "x86_64")]
static AMD: AtomicU8 = AtomicU8::new(0);

/// Whether the CPU's vendor is AMD (CPUID leaf 0 says "AuthenticAMD"), cached: the paths
/// tuned per vendor (`gemm::prefers_vdpbf16ps`, the bf16 transpose's `zen_tuned`) ask it.
#[cfg(target_arch = "x86_64")]
pub(crate) fn is_amd() -> bool {
    match AMD.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let l0 = core::arch::x86_64::__cpuid(0);
            // "Auth" "enti" "cAMD" in EBX, EDX, ECX.
            let yes = l0.ebx == 0x6874_7541 && l0.edx == 0x6974_6E65 && l0.ecx == 0x444D_4163;
            AMD.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

/// 0 = not yet read, else the CPU's family + 1 (CPUID leaf 1: base family, plus the extended
/// family when the base is 15; at most 15 + 255, so the cached read is the first one's).
#[cfg(target_arch = "x86_64")]
static FAMILY: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether the CPU is an AMD Zen 4 (family 0x19 with AVX-512: Genoa, Raphael, …), cached.
/// Zen 4 runs 512-bit operations on 256-bit units and its L1D is 32 KiB, so choices measured
/// on the Zen 5 (family 0x1A, two 512-bit FMA pipes) that [`is_amd`] gates may ask this too.
#[cfg(target_arch = "x86_64")]
pub(crate) fn is_zen4() -> bool {
    is_amd() && family() == 0x19 && std::arch::is_x86_feature_detected!("avx512f")
}

/// The CPU's family (CPUID leaf 1), cached.
#[cfg(target_arch = "x86_64")]
pub(crate) fn family() -> u32 {
    match FAMILY.load(Ordering::Relaxed) {
        0 => {
            let eax = core::arch::x86_64::__cpuid(1).eax;
            let base = (eax >> 8) & 0xF;
            let f = if base == 0xF {
                base + ((eax >> 20) & 0xFF)
            } else {
                base
            };
            FAMILY.store(f + 1, Ordering::Relaxed);
            f
        }
        c => c - 1,
    }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    /// The family read from CPUID agrees with the kernel's `/proc/cpuinfo`, and
    /// [`super::is_zen4`] holds exactly on an AMD family 0x19 with AVX-512F by
    /// `/proc/cpuinfo` (its vendor, family and flags).
    #[test]
    fn family_matches_proc_cpuinfo() {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let field = |name: &str| {
            let line = info.lines().find(|l| l.starts_with(name)).unwrap();
            line.split(':').nth(1).unwrap().trim().to_string()
        };
        let want: u32 = field("cpu family").parse().unwrap();
        assert_eq!(super::family(), want);
        assert_eq!(super::family(), want, "the cached read");
        let amd = field("vendor_id") == "AuthenticAMD";
        let avx512f = field("flags").split_whitespace().any(|f| f == "avx512f");
        assert_eq!(super::is_amd(), amd);
        assert_eq!(super::is_zen4(), amd && want == 0x19 && avx512f);
    }
}
