//! The direct GEMM path of matmul kernels: a kernel's whole K loop as one packed GEMM.
//!
//! The interpreter runs a matmul kernel's K loop one `[BK]` step at a time: each step copies
//! an `[BM, BK]` tile of A and a `[BK, BN]` tile of B out of the tensors, and `dot` packs both
//! again for the micro-kernel. When `pattern::recognise` finds the loop (a plain K loop of
//! f32, bf16 or f16 operands with an elementwise epilogue), the interpreter instead computes the
//! block's accumulator here with one [`super::gemm::gemm_f32`] call over the whole K range,
//! reading A and B straight from the tensors (bf16/f16 operands are widened to f32 once per
//! launch, exactly as a load widens them); only the epilogue runs op by op.
//!
//! bf16 operands of a `fast` kernel (the default policy) on a thread where
//! [`gemm::dot_enabled`] (AMX or AVX-512 BF16 CPU, AVX-512 level: [`gemm::bf16_path`]) are not
//! widened: the product runs on AMX tiles or `vdpbf16ps` (as [`gemm::gemm_bf16`] does), which
//! add two products of consecutive k per step, so
//! its results differ from the interpreter's in rounding (within `(k + 2)·ε_f32·Σ|a·b|` for
//! inputs and partial sums outside the subnormal range: the instruction reads subnormal bf16
//! inputs as zero and flushes subnormal results to ±0); [`dot_launches`] counts those
//! launches. Products of fewer rows than AMX takes (`gemm::pair_path`) on an AMX CPU are
//! widened as B is streamed instead (one FMA per k: the interpreter's bits, within that bound).
//!
//! Every other result is bit for bit the interpreter's: `dot` adds products one FMA at a time
//! in increasing k, and so does every f32 micro-kernel, whatever the blocking; lanes of padded
//! k steps add `+0.0` to an accumulator that, started at `+0.0`, is never `-0.0`.
//! `deterministic` bf16 kernels keep that path; `kahan_sum` loops do not match the pattern and
//! stay on the interpreter.
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
    static DOT_LAUNCHES: Cell<u64> = const { Cell::new(0) };
}

/// How many launches made on this thread computed their bf16 matmul K loops with
/// `vdpbf16ps` (the direct path of a `fast` bf16 kernel on a CPU that has it, see
/// [`gemm::dot_enabled`]).
///
/// ```
/// let n = tessera::backend::cpu::matmul::dot_launches();
/// assert!(tessera::backend::cpu::matmul::dot_launches() >= n);
/// ```
pub fn dot_launches() -> u64 {
    DOT_LAUNCHES.with(|c| c.get())
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

/// A launch's A (`[m, k]`) and B (`[k, n]`) as f32, row-major, or, for the `vdpbf16ps`
/// path, as bf16 bit patterns (`a`, `b` then empty).
pub(crate) struct Operands<'a> {
    a: Cow<'a, [f32]>,
    b: Cow<'a, [f32]>,
    bf16: Option<(&'a [u16], &'a [u16])>,
    /// The launching thread's [`gemm::bf16_path`] for `bf16` (AMX or `vdpbf16ps`).
    path: gemm::Bf16Path,
    m: usize,
    k: usize,
    n: usize,
}

/// The operands of `lp` in `args`, or `None` when this launch needs the interpreter (forced
/// by `fused::with_interpreter`, an argument whose dtype or rank differs from the loop's
/// loads, or A and B disagreeing on K: then the interpreter's padding semantics apply).
pub(crate) fn operands<'a>(lp: &KLoop, args: &'a [Buffer]) -> Option<Operands<'a>> {
    let (m, k, n) = dims(lp, args)?;
    let (a, b) = (&args[lp.pa], &args[lp.pb]);
    LAUNCHES.with(|c| c.set(c.get() + 1));
    let path = gemm::bf16_path();
    if lp.pairwise && path != gemm::Bf16Path::Widen {
        DOT_LAUNCHES.with(|c| c.set(c.get() + 1));
        // SAFETY: bf16 buffers of at least `m × k` and `k × n` elements (checked above),
        // aligned to 2 bytes, not written during the launch.
        let (a16, b16) = unsafe {
            (
                std::slice::from_raw_parts(a.ptr as *const u16, m * k),
                std::slice::from_raw_parts(b.ptr as *const u16, k * n),
            )
        };
        return Some(Operands {
            a: Cow::Borrowed(&[]),
            b: Cow::Borrowed(&[]),
            bf16: Some((a16, b16)),
            path,
            m,
            k,
            n,
        });
    }
    Some(Operands {
        bf16: None,
        path,
        a: widen(a, m * k),
        b: widen(b, k * n),
        m,
        k,
        n,
    })
}

/// `(m, k, n)` of a launch that takes the direct path ([`operands`] is `Some`), else `None`.
fn dims(lp: &KLoop, args: &[Buffer]) -> Option<(usize, usize, usize)> {
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
    Some((m, k, n))
}

/// Whether [`whole`] can write `out` as the `[m, n]` product (f32, writable, that shape).
fn fits(out: &Buffer, m: usize, n: usize) -> bool {
    out.dtype == DType::F32
        && out.writable
        && out.dims() == [m, n]
        && out.len >= m * n * std::mem::size_of::<f32>()
}

/// Whether launching `lp`'s kernel with `args` (one per parameter) computes it with [`whole`],
/// which writes every element of the output parameter [`KLoop::plain`]: `cpu::launch` takes
/// that path whenever the kernel has no fused path, its grid is not empty and this holds.
pub(crate) fn writes_whole(lp: &KLoop, args: &[Buffer]) -> bool {
    lp.plain
        .is_some_and(|out| dims(lp, args).is_some_and(|(m, _, n)| fits(&args[out], m, n)))
}

/// The `len` elements of `buf` as f32: borrowed when they are f32, else widened (exact).
fn widen(buf: &Buffer, len: usize) -> Cow<'_, [f32]> {
    /// Elements widened per task.
    const PART: usize = 1 << 16;
    if len == 0 {
        return Cow::Borrowed(&[]);
    }
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

/// Runs a [`KLoop::plain`] kernel: `out = A·B` as one GEMM over the whole output, split into
/// column strips (or row strips when `m > n`), one per rayon thread, each written by the
/// GEMM's first k-block without being read (the bits of zeroing it, then accumulating; two
/// strips per thread measured slower: each strip packs all of the other operand). `false`
/// (nothing written) when `out` is not `[m, n]` f32 writable.
pub(crate) fn whole(ops: &Operands, out: &Buffer) -> bool {
    let (m, k, n) = (ops.m, ops.k, ops.n);
    if !fits(out, m, n) {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    /// Products smaller than this many multiply-adds run as one job.
    const JOB_MIN: usize = 1 << 18;
    /// Few-row products streamed by `gemm::streams_rows` with fewer elements of B than this
    /// run as one job: on two threads they lost to one at `k·n = 300²`, were even at `2^18`
    /// and won from `2^19`
    /// (`RAYON_NUM_THREADS=T chrt -f 50 cpu_profile matmul M N R --pool`, 2026-11-27 23:45
    /// UTC, load 8-13, GFLOP/s, one thread / two: M = 8, N = 300 79-91 / 32-35; N = 512
    /// 70-93 / 83-93; N = 1024 64-71 / 79-80; M = 1, N = 300 20-24 / 21-25; N = 724 15-19 /
    /// 24-29; N = 1024 11 / 20-23).
    const FEW_JOB_MIN: usize = 1 << 19;
    #[cfg(target_arch = "x86_64")]
    let path = gemm::pair_path(ops.path, m);
    #[cfg(target_arch = "x86_64")]
    let few = gemm::streams_rows(m) && (ops.bf16.is_none() || path == gemm::Bf16Path::Widen);
    #[cfg(not(target_arch = "x86_64"))]
    let few = false;
    let threads = rayon::current_num_threads();
    let jobs = if threads == 1 || m * n * k < JOB_MIN || (few && k * n < FEW_JOB_MIN) {
        1
    } else {
        threads
    };
    // Strips aligned to 32 columns (the 8×32 tile's width, half the 6×64 tile's that
    // `gemm::wide_tile` picks: a strip may end in a partial panel of it) and 24 =
    // lcm(6, 8, 12) rows.
    let by_cols = n >= m;
    let (len, align) = if by_cols { (n, 32) } else { (m, 24) };
    let step = len.div_ceil(jobs).div_ceil(align) * align;
    let c = SendPtr(out.ptr as *mut f32);
    let isa = gemm::active_isa();
    // (`path`: the k-pair path from all m rows, not a strip's: a short last row strip on
    // `vdpbf16ps` beside AMX strips would round differently from the same rows on one thread.)
    let strip = |s: usize| {
        let (lo, hi) = (s * step, ((s + 1) * step).min(len));
        let ((r0, r1), (c0, c1)) = if by_cols {
            ((0, m), (lo, hi))
        } else {
            ((lo, hi), (0, n))
        };
        // The closure captures the whole `SendPtr` (which is `Send`), not its raw pointer field.
        #[allow(clippy::redundant_locals)]
        let c = c;
        // SAFETY: `out` holds `m × n` f32 (checked above) that no input aliases; strips are
        // disjoint, so each job alone accesses its rows `r0..r1` and columns `c0..c1`; A and
        // B hold `m × k` and `k × n` elements (`operands`).
        unsafe {
            let base = c.0.add(r0 * n + c0);
            if k == 0 {
                for r in 0..r1 - r0 {
                    std::ptr::write_bytes(base.add(r * n), 0, c1 - c0);
                }
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if let Some((a16, b16)) = ops.bf16 {
                gemm::gemm_bf16_dot_raw(
                    path,
                    r1 - r0,
                    c1 - c0,
                    k,
                    a16.as_ptr().add(r0 * k),
                    k,
                    b16.as_ptr().add(c0),
                    n,
                    base,
                    n,
                    true,
                );
                return;
            }
            gemm::gemm_f32_raw(
                isa,
                r1 - r0,
                c1 - c0,
                k,
                ops.a.as_ptr().add(r0 * k),
                k,
                ops.b.as_ptr().add(c0),
                n,
                base,
                n,
                true,
            );
        }
    };
    let strips = len.div_ceil(step);
    if strips == 1 {
        strip(0);
    } else {
        (0..strips).into_par_iter().for_each(strip);
    }
    true
}

/// The output pointer, shared by jobs that write disjoint strips.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: each job writes only its own strip (`whole`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

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
    let (r0, r1) = (
        clip(row, ops.m),
        clip(row.saturating_add(lp.bm as i64), ops.m),
    );
    let (c0, c1) = (
        clip(col, ops.n),
        clip(col.saturating_add(lp.bn as i64), ops.n),
    );
    if k1 <= k0 || r1 <= r0 || c1 <= c0 {
        return;
    }
    let (tr, tc) = ((r0 as i64 - row) as usize, (c0 as i64 - col) as usize);
    if let Some((a16, b16)) = ops.bf16 {
        // `ops.path` is the launching thread's decision (AMX or `vdpbf16ps`): this block may
        // run on another thread.
        gemm::gemm_bf16_impl(
            ops.path,
            r1 - r0,
            c1 - c0,
            k1 - k0,
            &a16[r0 * ops.k + k0..],
            ops.k,
            &b16[k0 * ops.n + c0..],
            ops.n,
            &mut acc[tr * lp.bn + tc..],
            lp.bn,
        );
        return;
    }
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
