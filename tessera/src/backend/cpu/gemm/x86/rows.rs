//! AVX-512 few-row products that stream `B` in its own row-major order: `C (m×n) += A (m×k) ·
//! B (k×n)` for `m <= ROWS_MAX` (8), `B` f32 or bf16 (widened to f32 on the fly, `A` too).
//!
//! `B` is read a block of [`KB`] of its rows at a time: a chunk of `16·W` columns of all `m`
//! rows of C is held in `m·W` `zmm` accumulators while the block's rows of B at those columns
//! are multiplied in, then the chunk walks along the rows. Each row of B is so read in
//! sequential pieces (the hardware prefetchers follow [`KB`] sequential streams), instead of
//! one strip of columns walked down all k rows (a new 4 KiB page per row of B at `ldb` = 4096).
//! C is loaded and stored once per block of k (it stays in L1/L2: `m·n·4` bytes).
//!
//! Every element is one fused multiply-add chain over k in increasing order starting from C's
//! value (`+0.0` with `overwrite`): bit for bit the packed micro-kernels' f32 result, and for
//! bf16 operands the f32 GEMM's on the operands widened (exact), `Bf16Path::Widen`'s bits.

use core::arch::x86_64::*;

/// Rows of B per block (C's chunk is loaded and stored once per block). 8 against 16 and 32
/// (`TESSERA_ROWS_KB`, a throw-away knob), 2026-11-27 23:30-23:33 UTC, load 8-19 on 2 vCPUs,
/// `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile matmul M 4096 20 --pool`, GFLOP/s, one run each:
/// f32 M = 1 one thread 10.3 / 9.6 / 6.3, two 4.2 / 6.3 / 7.5; M = 8 one thread 36.6-40.5 /
/// 33.5-35.6 / 37.0, two 39.1 / 37.3 / 22.4; `matmul_bf16` M = 1 one thread 13.9 / 9.2 / 11.0,
/// two 19.4 / 17.6 / 12.6; M = 8 one thread 76.9 / 56.4; M = 2 f32 7.0 / 10.0, bf16 35.4 / 23.2.
pub(crate) const KB: usize = 8;

/// Most rows of A this path takes: at 8 rows it still beat the packed f32 GEMM (one thread,
/// same runs as [`KB`]: 36.6-40.5 against 17.5-23.8 GFLOP/s) and AMX for bf16 (56-77 against
/// 19.6-22.7); beyond it the accumulators no longer fit the registers beside B's vectors.
pub(crate) const ROWS_MAX: usize = 8;

/// An operand element: f32, or a bf16 bit pattern widened to f32.
trait Elem: Copy {
    /// 16 consecutive elements at `p` as f32 (lanes past `mask` are zero, not read).
    unsafe fn load(p: *const Self, mask: __mmask16) -> __m512;
    /// One element as f32.
    fn f32(self) -> f32;
}

impl Elem for f32 {
    #[inline(always)]
    unsafe fn load(p: *const f32, mask: __mmask16) -> __m512 {
        unsafe {
            if mask == 0xFFFF {
                _mm512_loadu_ps(p)
            } else {
                _mm512_maskz_loadu_ps(mask, p)
            }
        }
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

impl Elem for u16 {
    #[inline(always)]
    unsafe fn load(p: *const u16, mask: __mmask16) -> __m512 {
        unsafe {
            let h = if mask == 0xFFFF {
                _mm256_loadu_si256(p as *const __m256i)
            } else {
                _mm256_maskz_loadu_epi16(mask, p as *const i16)
            };
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        f32::from_bits((self as u32) << 16)
    }
}

/// One chunk: columns `j..j + 16·W` of the `M` rows of C (the last vector masked by `mask`)
/// `+=` rows `p0..p0 + kb` of A·B; with `first`, C is not read (chains start at `+0.0`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn chunk<const M: usize, const W: usize, T: Elem>(
    kb: usize,
    a: *const T,
    lda: usize,
    b: *const T,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    first: bool,
    mask: __mmask16,
) {
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); W]; M];
        if !first {
            for (i, row) in acc.iter_mut().enumerate() {
                for (w, v) in row.iter_mut().enumerate() {
                    let m = if w + 1 == W { mask } else { 0xFFFF };
                    *v = _mm512_maskz_loadu_ps(m, c.add(i * ldc + 16 * w));
                }
            }
        }
        for p in 0..kb {
            let br = b.add(p * ldb);
            let mut bv = [_mm512_setzero_ps(); W];
            for (w, v) in bv.iter_mut().enumerate() {
                let m = if w + 1 == W { mask } else { 0xFFFF };
                *v = T::load(br.add(16 * w), m);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps((*a.add(i * lda + p)).f32());
                for (v, bw) in row.iter_mut().zip(&bv) {
                    *v = _mm512_fmadd_ps(x, *bw, *v);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (w, v) in row.iter().enumerate() {
                let m = if w + 1 == W { mask } else { 0xFFFF };
                _mm512_mask_storeu_ps(c.add(i * ldc + 16 * w), m, *v);
            }
        }
    }
}

/// All of C's `M` rows: blocks of [`KB`] rows of B in order, each walked along its columns in
/// chunks of `16·W` (then single vectors, then a masked one).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<const M: usize, const W: usize, T: Elem>(
    n: usize,
    k: usize,
    a: *const T,
    lda: usize,
    b: *const T,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        let mut p0 = 0;
        while p0 < k {
            let kb = KB.min(k - p0);
            let first = overwrite && p0 == 0;
            let (ap, bp) = (a.add(p0), b.add(p0 * ldb));
            let mut j = 0;
            while j + 16 * W <= n {
                chunk::<M, W, T>(kb, ap, lda, bp.add(j), ldb, c.add(j), ldc, first, 0xFFFF);
                j += 16 * W;
            }
            while j + 16 <= n {
                chunk::<M, 1, T>(kb, ap, lda, bp.add(j), ldb, c.add(j), ldc, first, 0xFFFF);
                j += 16;
            }
            if j < n {
                let mask = ((1u32 << (n - j)) - 1) as __mmask16;
                chunk::<M, 1, T>(kb, ap, lda, bp.add(j), ldb, c.add(j), ldc, first, mask);
            }
            p0 += kb;
        }
    }
}

/// `m` rows, each count with the widest chunk its accumulators and B's vectors leave room for
/// in the 32 `zmm` registers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn dispatch<T: Elem>(
    m: usize,
    n: usize,
    k: usize,
    a: *const T,
    lda: usize,
    b: *const T,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        match m {
            1 => rows::<1, 8, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            2 => rows::<2, 8, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            3 => rows::<3, 6, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            4 => rows::<4, 4, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            5 => rows::<5, 4, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            6 => rows::<6, 4, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            7 => rows::<7, 3, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            8 => rows::<8, 3, T>(n, k, a, lda, b, ldb, c, ldc, overwrite),
            _ => unreachable!("rows: {m} > ROWS_MAX"),
        }
    }
}

/// f32 `C += A·B` (with `overwrite`, `C = A·B` without reading C) for `1 <= m <= ROWS_MAX`.
///
/// # Safety
/// Pointers address matrices of the given shapes and strides, every dimension non-zero,
/// `m <= ROWS_MAX`; the CPU has AVX-512F, AVX-512BW, AVX-512VL and FMA ([`usable`]).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
pub(crate) unsafe fn gemm_f32(
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
    unsafe { dispatch(m, n, k, a, lda, b, ldb, c, ldc, overwrite) }
}

/// [`gemm_f32`] for bf16 `A` and `B` (bit patterns), widened to f32 as they are read: the
/// bits of the f32 GEMM on the widened operands.
///
/// # Safety
/// As [`gemm_f32`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
pub(crate) unsafe fn gemm_bf16(
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
    unsafe { dispatch(m, n, k, a, lda, b, ldb, c, ldc, overwrite) }
}

/// Whether the CPU has what [`gemm_f32`] and [`gemm_bf16`] need (AVX-512F/BW/VL, FMA).
pub(crate) fn usable() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("fma")
}
