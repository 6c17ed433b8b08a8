//! Single-threaded, cache-blocked SIMD GEMM for the Tessera CPU backend.
//!
//! Design follows BLIS / faer: `B` is packed into `NR`-column panels (k-major) with
//! `KC`/`MC`/`NC` cache blocking. `A` is read in place, its elements broadcast from its
//! rows by the micro-kernel (as faer's kernels do), except when it has more rows than one
//! micro-tile (`MR`) and all of them fit one block (`MC`): then it is packed into `MR`-row
//! panels once per k-block, and the micro-tiles pack the next chunk of `B` as they compute
//! (see `driver`).
//!
//! A register-blocked micro-kernel is selected once at runtime:
//!
//! * x86_64 with AVX-512F: 8×32 kernel on `zmm` registers (6×64 for products of more rows
//!   than one block on a CPU that is not AMD, see `wide_tile`),
//! * x86_64 with AVX2+FMA: 6×16 kernel on `ymm` registers,
//! * anything else: a portable kernel written in plain Rust.
//!
//! Products of at most eight rows on AVX-512 (`x86::rows`), at most two elsewhere (`rows`),
//! skip packing: `B` is streamed in place.
//!
//! The packing buffer lives in a `thread_local!` scratch and is reused, so a
//! steady-state call performs no heap allocation. The module depends only on
//! `std`.
//!
//! The entry points always *accumulate* (`C += A·B`), which is what the block
//! programs of the CPU backend need when they loop over K in chunks.

mod ahead;
mod bf16;
mod driver;
mod pack;
mod portable;
mod rows;
mod scratch;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

pub(crate) use bf16::gemm_bf16_impl;
pub use bf16::{
    Bf16Path, bf16_path, bf16_to_f32, dot_enabled, f32_to_bf16, gemm_bf16, has_amx, has_vdpbf16ps,
    prefers_vdpbf16ps, with_bf16_path, without_dot,
};
#[cfg(target_arch = "x86_64")]
pub(crate) use bf16::{gemm_bf16_dot_raw, pair_path};

/// Instruction-set level picked at runtime for the micro-kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust kernel (any architecture).
    Portable,
    /// x86_64 AVX2 + FMA, 6×16 micro-kernel.
    Avx2,
    /// x86_64 AVX-512F (+FMA), 8×32 micro-kernel.
    Avx512,
}

/// The best micro-kernel ISA supported by the running CPU (detected once, cached).
pub fn detected_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        x86::detected()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Isa::Portable
    }
}

/// The micro-kernel ISA of the active SIMD level ([`super::simd::active`]): what
/// [`gemm_f32`] runs.
pub fn active_isa() -> Isa {
    use super::simd::{SimdLevel, active};
    clamp_isa(match active() {
        SimdLevel::Portable => Isa::Portable,
        SimdLevel::Avx2 => Isa::Avx2,
        SimdLevel::Avx512 => Isa::Avx512,
    })
}

/// `C (m×n, row stride ldc) += A (m×k, row stride lda) · B (k×n, row stride ldb)`,
/// all `f32`, row-major.
///
/// Single-threaded: callers parallelise over output blocks themselves.
/// Works for every shape (including zero-sized ones) and any strides that are
/// at least the row length.
///
/// # Panics
/// Only on invalid arguments: a stride shorter than its row, or a slice too
/// short for the described matrix.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    gemm_f32_with(active_isa(), m, n, k, a, lda, b, ldb, c, ldc)
}

/// Same as [`gemm_f32`] but with an explicitly chosen kernel ISA (tests and
/// benchmarks). An ISA the CPU does not support is downgraded to one it does.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32_with(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    check_args(m, n, k, a.len(), lda, b.len(), ldb, c.len(), ldc);
    if k == 0 {
        return;
    }
    // SAFETY: `check_args` bounds every access.
    unsafe {
        gemm_f32_raw(
            isa,
            m,
            n,
            k,
            a.as_ptr(),
            lda,
            b.as_ptr(),
            ldb,
            c.as_mut_ptr(),
            ldc,
            false,
        )
    }
}

/// [`gemm_f32_with`] on raw pointers, for callers that split one `C` among threads
/// (`super::matmul`): `C += A·B` with every dimension non-zero; with `overwrite`,
/// `C = A·B` without reading C (bit for bit what zeroing C and accumulating gives).
///
/// # Safety
/// The pointers address matrices of the given shapes and strides (`lda >= k`, `ldb >= n`,
/// `ldc >= n`), and no other thread accesses this `C` block meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f32_raw(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    let isa = clamp_isa(isa);
    #[cfg(target_arch = "x86_64")]
    if streams_rows_on(isa, m) {
        // SAFETY: the caller's contract; the CPU has what the kernel needs (`usable`).
        unsafe { x86::rows::gemm_f32(m, n, k, a, lda, b, ldb, c, ldc, overwrite) };
        return;
    }
    if m <= rows::ROWS_MAX {
        // SAFETY: the caller's contract; the ISA is supported (`clamp_isa`).
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::Avx512 => {
                    rows::gemm_avx2(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
                }
                _ => rows::gemm_portable(m, n, k, a, lda, b, ldb, c, ldc, overwrite),
            }
        }
        return;
    }
    // SAFETY: the caller's contract; the kernel's ISA is supported by the running CPU
    // (`clamp_isa`).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 if wide_tile(m) => {
                driver::gemm::<x86::Avx512Wide>(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                driver::gemm::<x86::Avx512Kernel>(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                driver::gemm::<x86::Avx2Kernel>(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
            }
            _ => {
                driver::gemm::<portable::PortableKernel>(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
            }
        }
    }
}

/// Whether an AVX-512 f32 product of `m` rows runs on the 6×64 micro-kernel
/// (`x86::Avx512Wide`) instead of the 8×32 one: on a CPU that is not AMD, where `A` has more
/// rows than one block (`driver::MC_TARGET`: `A` read in place, `B` packed by the driver's
/// large-`m` loop). The 8×32 tile was tuned on Zen 5 and stays there, and for products whose
/// rows fit one block (`m = 64`, `k = n = 4096`: packed `A`, `B` packed ahead by the
/// micro-tiles, `driver::Pipe`).
///
/// On this Xeon (Emerald Rapids, KVM, 2 vCPUs; 2026-11-28 13:01-13:04 UTC, load 3.8-9 from
/// other helpers; `RAYON_NUM_THREADS=T chrt -f 50 gemm_race 20 256x256x256 512x512x512
/// 1024x1024x1024 2048x2048x2048`, main bc6447d's binary and this one alternating, ratio
/// faer time / ours, CPU time on one thread, wall on two): one thread `256³` 0.962-0.978 →
/// 0.980-1.000, `1024³` 0.978-1.065 → 0.990-1.148, `2048³` 1.003-1.076 → 1.040-1.091, `512³`
/// 0.994-1.167 → 0.866-1.019 (noisy rounds on both sides); two threads `256³` 0.945-1.013 →
/// 1.050-1.291, `512³` 0.994-1.094 → 1.127-1.154, `2048³` 0.952-1.265 → 1.164-1.341. A C
/// loop of the same kernels over a `1152 × 1024 × 1024` product (A in place, `kc = 512`,
/// 144-row blocks, B packed) ran 6×64 at 137-156 GFLOP/s against 117-150 for 8×32 in the
/// same runs, all shapes within 1 % of each other with L1-resident operands: the 8×32
/// tile's extra broadcasts (eight per 16 FMAs, against six per 24) cost where operands come
/// from L2. ARCHITECTURE.md, "f32 GEMM: a 6×64 micro-tile on Intel", has the rounds.
#[cfg(target_arch = "x86_64")]
fn wide_tile(m: usize) -> bool {
    m > driver::MC_TARGET && !super::simd::is_amd()
}

/// Whether an f32 product of `m` rows on [`active_isa`] takes the streamed few-row path
/// (`x86::rows`: AVX-512, `m <= 8`), as do bf16 ones widened there (`pair_path`).
pub(crate) fn streams_rows(m: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        streams_rows_on(active_isa(), m)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = m;
        false
    }
}

/// [`streams_rows`] at `isa`.
#[cfg(target_arch = "x86_64")]
fn streams_rows_on(isa: Isa, m: usize) -> bool {
    isa == Isa::Avx512 && m <= x86::rows::ROWS_MAX && x86::rows::usable()
}

/// Downgrade `isa` to the best level the running CPU actually supports.
fn clamp_isa(isa: Isa) -> Isa {
    let best = detected_isa();
    match (isa, best) {
        (Isa::Portable, _) => Isa::Portable,
        (Isa::Avx2, Isa::Avx2 | Isa::Avx512) => Isa::Avx2,
        (Isa::Avx512, Isa::Avx512) => Isa::Avx512,
        (_, best) => best,
    }
}

/// Validate strides and slice lengths. Always on (O(1)), because the kernels
/// use raw pointers and a safe public function must not read out of bounds.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn check_args(
    m: usize,
    n: usize,
    k: usize,
    a_len: usize,
    lda: usize,
    b_len: usize,
    ldb: usize,
    c_len: usize,
    ldc: usize,
) {
    debug_assert!(m > 0 && n > 0);
    assert!(ldc >= n, "gemm: ldc ({ldc}) < n ({n})");
    assert!(c_len >= (m - 1) * ldc + n, "gemm: c slice too short");
    if k > 0 {
        assert!(lda >= k, "gemm: lda ({lda}) < k ({k})");
        assert!(ldb >= n, "gemm: ldb ({ldb}) < n ({n})");
        assert!(a_len >= (m - 1) * lda + k, "gemm: a slice too short");
        assert!(b_len >= (k - 1) * ldb + n, "gemm: b slice too short");
    }
}
