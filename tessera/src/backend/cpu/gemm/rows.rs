//! Few-row products without packing: `C (m×n) += A (m×k) · B (k×n)` for `m <= ROWS_MAX`.
//!
//! With one or two rows of `A`, packing `B` into panels costs as much as the whole product
//! (every element of `B` is used `m` times); here each row of `C` is held in registers
//! [`COLS`] columns at a time while `B` is streamed row by row in its own layout. Every
//! element is one fused multiply-add chain over `k` in increasing order starting from `C`'s
//! value — the same sequence as the packed micro-kernels, so results are bit for bit theirs.

/// Most rows of `A` that take this path.
pub(crate) const ROWS_MAX: usize = 2;

/// Columns of `C` one pass keeps in registers (four AVX2 vectors).
const COLS: usize = 32;

/// With `overwrite`, `C = A·B`: C is not read, the chains start at `+0.0`.
///
/// # Safety
/// Pointers address matrices of the given shapes and strides; `m <= ROWS_MAX`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn body(
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
    unsafe {
        for i in 0..m {
            let ar = a.add(i * lda);
            let cr = c.add(i * ldc);
            let mut j = 0;
            while j + COLS <= n {
                let mut acc = [0.0f32; COLS];
                if !overwrite {
                    for (t, v) in acc.iter_mut().enumerate() {
                        *v = *cr.add(j + t);
                    }
                }
                for p in 0..k {
                    let x = *ar.add(p);
                    let br = &*(b.add(p * ldb + j) as *const [f32; COLS]);
                    for t in 0..COLS {
                        acc[t] = x.mul_add(br[t], acc[t]);
                    }
                }
                for (t, v) in acc.iter().enumerate() {
                    *cr.add(j + t) = *v;
                }
                j += COLS;
            }
            // Ragged columns: one at a time, same chain.
            while j < n {
                let mut v = if overwrite { 0.0 } else { *cr.add(j) };
                for p in 0..k {
                    v = (*ar.add(p)).mul_add(*b.add(p * ldb + j), v);
                }
                *cr.add(j) = v;
                j += 1;
            }
        }
    }
}

/// The AVX2+FMA build (`mul_add` is `vfmadd`).
///
/// # Safety
/// As [`body`]; the CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemm_avx2(
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
    unsafe { body(m, n, k, a, lda, b, ldb, c, ldc, overwrite) }
}

/// The baseline build (`mul_add` is an instruction where the target has FMA, a correctly
/// rounded library call elsewhere).
///
/// # Safety
/// As [`body`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_portable(
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
    unsafe { body(m, n, k, a, lda, b, ldb, c, ldc, overwrite) }
}
