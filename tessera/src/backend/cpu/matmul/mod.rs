//! The direct GEMM path of matmul kernels: a kernel's whole K loop as one packed GEMM.
//!
//! The interpreter runs a matmul kernel's K loop one `[BK]` step at a time: each step copies
//! an `[BM, BK]` tile of A and a `[BK, BN]` tile of B out of the tensors, and `dot` packs both
//! again for the micro-kernel. When [`pattern::recognise`] finds the loop (a plain K loop of
//! f32, bf16 or f16 operands with an elementwise epilogue), the interpreter instead computes the
//! block's accumulator here with one [`super::gemm::gemm_f32`] call over the whole K range,
//! reading A and B straight from the tensors (bf16/f16 operands are widened to f32 once per
//! launch, exactly as a load widens them); only the epilogue runs op by op.
//!
//! Results are bit for bit the interpreter's, under every policy the pattern admits: `dot`
//! adds products one FMA at a time in increasing k, and so does every micro-kernel, whatever
//! the blocking; lanes of padded k steps add `+0.0` to an accumulator that, started at
//! `+0.0`, is never `-0.0`. `kahan_sum` loops do not match the pattern and stay on the
//! interpreter.
//!
//! ```
//! // Launches on this thread count here when they took the direct path.
//! let n = tessera::backend::cpu::matmul::launches();
//! assert!(tessera::backend::cpu::matmul::launches() >= n);
//! ```

mod pattern;

pub(crate) use pattern::{KLoop, recognise};

use super::gemm;
use crate::backend::Buffer;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;
use std::cell::Cell;
use tessera_ir::DType;

thread_local! {
    static LAUNCHES: Cell<u64> = const { Cell::new(0) };
}

/// How many launches made on this thread computed their matmul K loops on the direct path.
///
/// ```
/// let n = tessera::backend::cpu::matmul::launches();
/// assert!(tessera::backend::cpu::matmul::launches() >= n);
/// ```
pub fn launches() -> u64 {
    LAUNCHES.with(|c| c.get())
}

/// A launch's A (`[m, k]`) and B (`[k, n]`) as f32, row-major.
pub(crate) struct Operands<'a> {
    a: Cow<'a, [f32]>,
    b: Cow<'a, [f32]>,
    m: usize,
    k: usize,
    n: usize,
}

/// The operands of `lp` in `args`, or `None` when this launch needs the interpreter (forced
/// by `fused::with_interpreter`, an argument whose dtype or rank differs from the loop's
/// loads, or A and B disagreeing on K: then the interpreter's padding semantics apply).
pub(crate) fn operands<'a>(lp: &KLoop, args: &'a [Buffer]) -> Option<Operands<'a>> {
    if super::fused::interpreting() {
        return None;
    }
    let (a, b) = (&args[lp.pa], &args[lp.pb]);
    if a.dtype != lp.dtype || b.dtype != lp.dtype || a.rank != 2 || b.rank != 2 {
        return None;
    }
    let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
    let size = lp.dtype.size_bytes();
    if b.shape[0] != k || a.len < m * k * size || b.len < k * n * size {
        return None;
    }
    LAUNCHES.with(|c| c.set(c.get() + 1));
    Some(Operands {
        a: widen(a, m * k),
        b: widen(b, k * n),
        m,
        k,
        n,
    })
}

/// The `len` elements of `buf` as f32: borrowed when they are f32, else widened (exact).
fn widen(buf: &Buffer, len: usize) -> Cow<'_, [f32]> {
    /// Elements widened per task.
    const PART: usize = 1 << 16;
    // SAFETY: a Buffer addresses `len` bytes of its dtype for the launch (the launcher checks
    // shapes against bytes), aligned to the element size, and inputs are not written.
    unsafe {
        match buf.dtype {
            DType::BF16 => {
                let s = std::slice::from_raw_parts(buf.ptr as *const bf16, len);
                let mut v = vec![0.0f32; len];
                v.par_chunks_mut(PART)
                    .zip(s.par_chunks(PART))
                    .for_each(|(d, s)| s.convert_to_f32_slice(d));
                Cow::Owned(v)
            }
            DType::F16 => {
                let s = std::slice::from_raw_parts(buf.ptr as *const f16, len);
                let mut v = vec![0.0f32; len];
                v.par_chunks_mut(PART)
                    .zip(s.par_chunks(PART))
                    .for_each(|(d, s)| s.convert_to_f32_slice(d));
                Cow::Owned(v)
            }
            _ => Cow::Borrowed(std::slice::from_raw_parts(buf.ptr as *const f32, len)),
        }
    }
}

/// The K loop's result for one block: `acc` (`[BM, BN]`, holding the loop's `+0.0` initial
/// value) `+= A[row.., k] · B[k, col..]` over the k the loop visits (`lo..hi` in steps of
/// `BK`, whole steps), restricted to the rows, columns and k inside the tensors. Lanes
/// outside keep `+0.0` (the pattern guarantees they are never stored).
pub(crate) fn block(lp: &KLoop, ops: &Operands, acc: &mut [f32], at: [i64; 4]) {
    let [row, col, lo, hi] = at;
    if hi <= lo {
        return;
    }
    let clip = |x: i64, len: usize| x.clamp(0, len as i64) as usize;
    let steps = (hi as i128 - lo as i128 + lp.bk as i128 - 1) / lp.bk as i128;
    let end = (lo as i128 + steps * lp.bk as i128).min(i64::MAX as i128) as i64;
    let (k0, k1) = (clip(lo, ops.k), clip(end, ops.k));
    let (r0, r1) = (clip(row, ops.m), clip(row.saturating_add(lp.bm as i64), ops.m));
    let (c0, c1) = (clip(col, ops.n), clip(col.saturating_add(lp.bn as i64), ops.n));
    if k1 <= k0 || r1 <= r0 || c1 <= c0 {
        return;
    }
    let (tr, tc) = ((r0 as i64 - row) as usize, (c0 as i64 - col) as usize);
    gemm::gemm_f32(
        r1 - r0,
        c1 - c0,
        k1 - k0,
        &ops.a[r0 * ops.k + k0..],
        ops.k,
        &ops.b[k0 * ops.n + c0..],
        ops.n,
        &mut acc[tr * lp.bn + tc..],
        lp.bn,
    );
}
