//! `bf16 × bf16 → f32` GEMM: an AMX path (`tdpbf16ps` on tiles), an AVX-512 BF16 path
//! (`vdpbf16ps`), and a fallback that widens to `f32` and reuses [`super::gemm_f32`]; which one
//! runs is [`bf16_path`], decided at run time (see [`Bf16Path`] for the order and its figures).

/// Widen one bf16 bit pattern to `f32` (exact).
#[inline(always)]
pub fn bf16_to_f32(x: u16) -> f32 {
    f32::from_bits((x as u32) << 16)
}

/// Convert `f32` to the nearest bf16 bit pattern (round to nearest even; NaN stays NaN).
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let round = 0x7FFF + ((bits >> 16) & 1);
    ((bits.wrapping_add(round)) >> 16) as u16
}

/// `C (m×n, f32, row stride ldc) += A (m×k) · B (k×n)` where `A` and `B` hold
/// bf16 bit patterns (`u16`), row-major with strides `lda` / `ldb`.
///
/// Products are accumulated in `f32`, on this thread's [`bf16_path`] (for AMX, fewer rows
/// than it takes are widened as on [`Bf16Path::Widen`]: `pair_path`): AMX and `vdpbf16ps`
/// add the products of k-pairs (two products per step, which, per the ISA, treats bf16
/// denormal inputs as zero; not the one-FMA-per-k order of [`super::gemm_f32`]); the
/// widening path widens `A` and `B` to `f32` in blocks of k and uses [`super::gemm_f32`].
/// Single-threaded.
///
/// # Panics
/// Only on invalid arguments (stride shorter than its row, slice too short).
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16(
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: &[u16],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    gemm_bf16_impl(bf16_path(), m, n, k, a, lda, b, ldb, c, ldc)
}

/// The paths of a bf16 product (`bf16 × bf16 → f32`), in the order [`bf16_path`] prefers them
/// where the CPU has them and the SIMD level is AVX-512:
///
/// 1. [`Bf16Path::Amx`]: AMX tiles (`tdpbf16ps`), where CPUID, XCR0 and the kernel allow it.
///    On that Emerald Rapids, 2026-11-27 20:30-20:55 UTC, load 5-18, interleaved with main's
///    build (`RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile matmul_bf16 N N R`, GFLOP/s, base
///    → AMX): 1024: 57-80 → 256-787 (bimodal: 256-290 in some rounds, 670-787 in others, the
///    f32 `matmul` 85-105 throughout); 256: 64-77 → 363-682; 512: 65-71 → 317-338; 2048:
///    60-66 → 234-626; `[64, 4096]·[4096, 4096]`: 54-61 → 121-251; `[8, 4096]`: 27-39 →
///    23-55; `[1, 4096]` ran `vdpbf16ps` (`AMX_MIN_ROWS`; since gv18 fewer than 9 rows stream B
///    widened, `x86::rows`): 5.5-7.2 → 6.4-6.6. Two threads:
///    1024: 120-124 → 551-595 (f32 181-185), 2048: 123-127 → 492-511, `[64, 4096]`: 74-102 →
///    203-582, `[1, 4096]`: 10.7-11.1 → 10.9-11.3.
/// 2. [`Bf16Path::Dot`]: AVX-512 BF16 (`vdpbf16ps`), only where it is faster than widening and
///    f32 FMAs: on AMD (Zen 5, earlier sessions: 518 GFLOP/s a core, where f32 FMAs peak at
///    half of that), not on Intel. On the Intel Xeon (Emerald Rapids, family 6 model 207, KVM)
///    of 2026-11-27 a throw-away `asm!` loop of 12 (and 24) independent accumulators ran
///    0.83-1.14 G `vdpbf16ps zmm`/s (53-73 GFLOP/s) against 3.3-4.8 G `vfmadd231ps zmm`/s
///    (104-154 GFLOP/s, 4 rounds under `chrt -f 50`, 20:13 UTC, load 17-18 on 2 vCPUs): a
///    `vdpbf16ps` does two multiply-adds a lane at a quarter of the FMA's rate, half the
///    FLOP/s; `cpu_profile matmul_bf16 1024 1024 20` (base, one thread, same time) ran 57-59
///    GFLOP/s on it against 74-79 widened (`matmul_bf16_widen`).
/// 3. [`Bf16Path::Widen`]: operands widened to f32, products on the f32 GEMM.
///
/// [`with_bf16_path`] forces one (tests, benchmarks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Path {
    /// AMX tiles (`tdpbf16ps`), k-pair products.
    Amx,
    /// AVX-512 BF16 (`vdpbf16ps`), k-pair products.
    Dot,
    /// Widened to f32, the f32 GEMM's one FMA per k.
    Widen,
}

/// [`gemm_bf16`] on the path the caller chose. A launch decides on its launching thread and
/// passes that decision to the blocks its rayon workers run (`matmul::block`). A path the CPU
/// lacks falls back as [`with_bf16_path`] says.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_bf16_impl(
    path: Bf16Path,
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: &[u16],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    super::check_args(m, n, k, a.len(), lda, b.len(), ldb, c.len(), ldc);
    if k == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if clamp(path) != Bf16Path::Widen {
        // SAFETY: bounds checked by `check_args`; the path is supported (`clamp`).
        // `pair_path` on the clamped path: an `Amx` the CPU lacks is `vdpbf16ps` whatever the
        // rows (not widened below `AMX_MIN_ROWS`, as `pair_path` does for a real `Amx`).
        unsafe {
            gemm_bf16_dot_raw(
                pair_path(clamp(path), m),
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
            );
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::streams_rows(m) {
        // SAFETY: bounds checked by `check_args`; the CPU has what the kernel needs.
        unsafe {
            super::x86::rows::gemm_bf16(
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
        };
        return;
    }
    widen_fallback(m, n, k, a, lda, b, ldb, c, ldc);
}

thread_local! {
    /// Set by [`without_dot`] on this thread.
    static DOT_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set by [`with_bf16_path`] on this thread.
    static FORCED: std::cell::Cell<Option<Bf16Path>> = const { std::cell::Cell::new(None) };
}

/// Whether the running CPU has AVX-512F and AVX-512 BF16 (`vdpbf16ps`), detected once.
///
/// ```
/// let _ = tessera::backend::cpu::gemm::has_vdpbf16ps();
/// ```
pub fn has_vdpbf16ps() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::has_bf16()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this process can run AMX-BF16 tiles: the CPU has AMX-TILE and AMX-BF16 (CPUID),
/// the OS enabled their state (XCR0) and, on Linux, granted it to this process
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), and the CPU has AVX-512F (used to pack). Detected once.
///
/// ```
/// let _ = tessera::backend::cpu::gemm::has_amx();
/// ```
pub fn has_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::has_bf16() && super::x86::amx::usable()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether `vdpbf16ps` is preferred to widening on this CPU (it has it and is an AMD CPU, see
/// [`Bf16Path`] for the figures).
///
/// ```
/// use tessera::backend::cpu::gemm;
/// assert!(!gemm::prefers_vdpbf16ps() || gemm::has_vdpbf16ps());
/// ```
pub fn prefers_vdpbf16ps() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        has_vdpbf16ps() && crate::backend::cpu::simd::is_amd()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `path`, or the next path down ([`Bf16Path`]) that the CPU has.
fn clamp(path: Bf16Path) -> Bf16Path {
    match path {
        Bf16Path::Amx if has_amx() => Bf16Path::Amx,
        Bf16Path::Amx | Bf16Path::Dot if has_vdpbf16ps() => Bf16Path::Dot,
        _ => Bf16Path::Widen,
    }
}

/// The path bf16 products take on this thread: the one [`with_bf16_path`] forces (where the CPU
/// has it, else the next one down), else [`Bf16Path::Widen`] under [`without_dot`] or below the
/// AVX-512 SIMD level (`simd::active`), else AMX where [`has_amx`], else `vdpbf16ps` where
/// [`prefers_vdpbf16ps`], else widening.
///
/// ```
/// use tessera::backend::cpu::gemm::{self, Bf16Path};
/// assert_eq!(gemm::without_dot(gemm::bf16_path), Bf16Path::Widen);
/// ```
pub fn bf16_path() -> Bf16Path {
    use super::super::simd::{SimdLevel, active};
    if let Some(p) = FORCED.with(|c| c.get()) {
        return clamp(p);
    }
    if DOT_OFF.with(|c| c.get()) || active() < SimdLevel::Avx512 {
        Bf16Path::Widen
    } else if has_amx() {
        Bf16Path::Amx
    } else if prefers_vdpbf16ps() {
        Bf16Path::Dot
    } else {
        Bf16Path::Widen
    }
}

/// Whether bf16 products on this thread add k-pairs ([`bf16_path`] is AMX or `vdpbf16ps`)
/// rather than widening to f32.
///
/// ```
/// use tessera::backend::cpu::gemm;
/// assert!(!gemm::without_dot(gemm::dot_enabled));
/// ```
pub fn dot_enabled() -> bool {
    bf16_path() != Bf16Path::Widen
}

/// Runs `f` with bf16 products on this thread on `path` (where the CPU has it, else the next
/// one down: AMX, `vdpbf16ps`, widening), whatever the SIMD level, vendor or [`without_dot`].
/// Decisions are made on the launching thread, so this covers a whole launch.
///
/// ```
/// use tessera::backend::cpu::gemm::{self, Bf16Path};
/// let (a, b) = ([0x3F80u16; 2], [0x4000u16; 2]); // [1, 1] · [2, 2]ᵀ
/// for path in [Bf16Path::Amx, Bf16Path::Dot, Bf16Path::Widen] {
///     let mut c = [0.0f32];
///     gemm::with_bf16_path(path, || gemm::gemm_bf16(1, 1, 2, &a, 2, &b, 1, &mut c, 1));
///     assert_eq!(c[0], 4.0);
/// }
/// ```
pub fn with_bf16_path<R>(path: Bf16Path, f: impl FnOnce() -> R) -> R {
    let old = FORCED.with(|c| c.replace(Some(path)));
    struct Restore(Option<Bf16Path>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORCED.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

/// Runs `f` with k-pair products disabled on this thread: bf16 products take the path that
/// widens them to f32 (on AVX-512F, AVX2 or portable, per the SIMD level). Decisions are
/// made on the launching thread, so this covers a whole launch.
///
/// ```
/// use tessera::backend::cpu::gemm;
/// let (a, b) = ([0x3F80u16; 2], [0x4000u16; 2]); // [1, 1] · [2, 2]ᵀ
/// let mut c = [0.0f32];
/// gemm::without_dot(|| gemm::gemm_bf16(1, 1, 2, &a, 2, &b, 1, &mut c, 1));
/// assert_eq!(c[0], 4.0);
/// ```
pub fn without_dot<R>(f: impl FnOnce() -> R) -> R {
    let old = DOT_OFF.with(|c| c.replace(true));
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DOT_OFF.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

/// Fewer rows of A than this do not run on AMX on the AMX path: the AMX GEMM packs all of B
/// into k-pair strips and computes 32 rows a tile, so a product of few rows spends its time
/// packing. They run on `x86::rows` instead (B streamed and widened as it is read, one f32
/// FMA per k: [`Bf16Path::Widen`]'s bits), or on `vdpbf16ps` on a CPU without it.
/// `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile matmul_bf16 M 4096 20 --pool` (GFLOP/s), base
/// (AMX from 8 rows, `vdpbf16ps` below) against `x86::rows`, 2026-11-27 23:30-23:33 UTC, load
/// 8-19 on 2 vCPUs: M = 1 one thread 6.5 → 13.9, two 6.5 → 19.4; M = 2 7.0-10.9 → 35.4;
/// M = 4 19.8-21.6 → 49.1; M = 8 19.6-22.7 → 56-77. Earlier (20:30 UTC, load 8-11): AMX
/// against `vdpbf16ps` at 8 rows 26-55 / 27-39, at 16 rows 51-67 / 38-48, at 32 rows 159-191
/// / 59-61.
#[cfg(target_arch = "x86_64")]
pub(super) const AMX_MIN_ROWS: usize = super::x86::rows::ROWS_MAX + 1;

/// The path for a product of `m` rows of A on `path`: [`Bf16Path::Amx`] with fewer than
/// `AMX_MIN_ROWS` rows is [`Bf16Path::Widen`] (`x86::rows`, where the CPU has AVX-512BW/VL),
/// else [`Bf16Path::Dot`]. A product split into row strips decides it
/// on all its rows (`matmul::whole`), not on each strip's: AMX and `vdpbf16ps` round
/// differently, so a short last strip on the other path would make the bits depend on the
/// thread count.
#[cfg(target_arch = "x86_64")]
pub(crate) fn pair_path(path: Bf16Path, m: usize) -> Bf16Path {
    if path == Bf16Path::Amx && m < AMX_MIN_ROWS {
        if super::x86::rows::usable() {
            Bf16Path::Widen
        } else {
            Bf16Path::Dot
        }
    } else {
        path
    }
}

/// The bf16 GEMM on raw pointers: `C += A·B` for bf16 `A`/`B`, every dimension non-zero, on
/// AMX for [`Bf16Path::Amx`] where [`has_amx`] (whatever the rows: callers apply
/// [`pair_path`]), widened to f32 for [`Bf16Path::Widen`] (streamed by `x86::rows` up to its
/// rows), else on `vdpbf16ps`; with `overwrite`, `C = A·B` without reading C (the
/// bits adding to a zeroed C gives).
///
/// # Safety
/// The pointers address matrices of the given shapes and strides (`lda >= k`, `ldb >= n`,
/// `ldc >= n`), no other thread accesses this `C` block meanwhile, and
/// [`has_vdpbf16ps`] is true.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_bf16_dot_raw(
    path: Bf16Path,
    m: usize,
    n: usize,
    k: usize,
    a: *const u16,
    lda: usize,
    b: *const u16,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    debug_assert!(has_vdpbf16ps());
    // SAFETY: the caller's contract; AMX only where `has_amx`.
    unsafe {
        if path == Bf16Path::Widen {
            if m <= super::x86::rows::ROWS_MAX && super::x86::rows::usable() {
                super::x86::rows::gemm_bf16(m, n, k, a, lda, b, ldb, c, ldc, overwrite);
            } else {
                if overwrite {
                    for i in 0..m {
                        std::ptr::write_bytes(c.add(i * ldc), 0, n);
                    }
                }
                let a = std::slice::from_raw_parts(a, (m - 1) * lda + k);
                let b = std::slice::from_raw_parts(b, (k - 1) * ldb + n);
                let c = std::slice::from_raw_parts_mut(c, (m - 1) * ldc + n);
                widen_fallback(m, n, k, a, lda, b, ldb, c, ldc);
            }
        } else if path == Bf16Path::Amx && has_amx() {
            super::x86::amx::gemm(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
        } else {
            super::x86::bf16::gemm(m, n, k, a, lda, b, ldb, c, ldc, overwrite)
        }
    }
}

/// Widen `A`/`B` to dense `f32` (in blocks of k, to bound memory) and call `gemm_f32`.
#[allow(clippy::too_many_arguments)]
fn widen_fallback(
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: &[u16],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    const KB: usize = 256;
    let kb = k.min(KB);
    let mut aw = vec![0.0f32; m * kb];
    let mut bw = vec![0.0f32; kb * n];
    let mut p0 = 0;
    while p0 < k {
        let kc = kb.min(k - p0);
        for i in 0..m {
            let src = &a[i * lda + p0..i * lda + p0 + kc];
            for (d, s) in aw[i * kc..(i + 1) * kc].iter_mut().zip(src) {
                *d = bf16_to_f32(*s);
            }
        }
        for p in 0..kc {
            let src = &b[(p0 + p) * ldb..(p0 + p) * ldb + n];
            for (d, s) in bw[p * n..(p + 1) * n].iter_mut().zip(src) {
                *d = bf16_to_f32(*s);
            }
        }
        super::gemm_f32(m, n, kc, &aw, kc, &bw, n, c, ldc);
        p0 += kc;
    }
}
