//! `bf16 × bf16 → f32` GEMM: AVX-512 BF16 (`vdpbf16ps`) fast path, with a
//! fallback that widens to `f32` and reuses [`super::gemm_f32`].

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
/// Products are accumulated in `f32`. When [`dot_enabled`] this uses `vdpbf16ps`
/// on k-pairs (two products per step, which, per the ISA, treats bf16 denormal
/// inputs as zero; not the one-FMA-per-k order of [`super::gemm_f32`]);
/// otherwise `A` and `B` are widened to `f32` in blocks of k and
/// [`super::gemm_f32`] is used. Single-threaded.
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
    gemm_bf16_impl(dot_enabled(), m, n, k, a, lda, b, ldb, c, ldc)
}

/// [`gemm_bf16`] with the choice made by the caller: `dot` runs `vdpbf16ps` where the CPU
/// has it ([`has_vdpbf16ps`]), else the widening path. A launch decides on its launching
/// thread and passes that decision to the blocks its rayon workers run (`matmul::block`),
/// where this thread's [`without_dot`] may say otherwise.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_bf16_impl(
    dot: bool,
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
    if dot && has_vdpbf16ps() {
        // SAFETY: bounds checked by `check_args`; AVX-512 BF16 detected.
        unsafe {
            super::x86::bf16::gemm(
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
    let _ = dot;
    widen_fallback(m, n, k, a, lda, b, ldb, c, ldc);
}

thread_local! {
    /// Set by [`without_dot`] on this thread.
    static DOT_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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

/// Whether bf16 products on this thread use `vdpbf16ps`: the CPU has it
/// ([`has_vdpbf16ps`]), the active SIMD level is AVX-512 (`simd::active`) and no
/// [`without_dot`] is in force.
///
/// ```
/// use tessera::backend::cpu::gemm;
/// assert!(!gemm::without_dot(gemm::dot_enabled));
/// ```
pub fn dot_enabled() -> bool {
    use super::super::simd::{SimdLevel, active};
    has_vdpbf16ps() && active() >= SimdLevel::Avx512 && !DOT_OFF.with(|c| c.get())
}

/// Runs `f` with `vdpbf16ps` disabled on this thread: bf16 products take the path that
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

/// `vdpbf16ps` GEMM on raw pointers: `C += A·B` for bf16 `A`/`B`, every dimension non-zero;
/// with `overwrite`, `C = A·B` without reading C (the bits adding to a zeroed C gives).
///
/// # Safety
/// The pointers address matrices of the given shapes and strides (`lda >= k`, `ldb >= n`,
/// `ldc >= n`), no other thread accesses this `C` block meanwhile, and
/// [`has_vdpbf16ps`] is true.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_bf16_dot_raw(
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
    // SAFETY: the caller's contract.
    unsafe { super::x86::bf16::gemm(m, n, k, a, lda, b, ldb, c, ldc, overwrite) }
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
