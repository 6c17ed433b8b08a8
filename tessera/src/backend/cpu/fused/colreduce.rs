//! Direct column reductions: the fast-policy loop a column sum, mean or max lowers to,
//!
//! ```text
//! for r in (lo..hi).step_by(step) {   // acc: [C], carried
//!     part = reduce(axis 0, cast f32(load x[.., r, j] : [R, C]))
//!     acc = acc + part                // (max for a max)
//! }
//! ```
//!
//! runs as one streaming pass over the program's rows: each row of the tensor is combined
//! into a column strip `part` (the reduction's own materialised `[C]`, in L1) straight from
//! the tensor, in row order, then `part` into `acc`, so no tile is loaded into a chunk or
//! materialised. The order of every addition is the interpreter's (rows one at a time from
//! the reduction's identity, rows outside the tensor reading the load's `other`, then
//! `acc + part`), so the result is bit for bit the same.

use super::colpass::Parts;
use super::plan::{COp, Copy, Group, Kind, Src, Step};
use super::rect::rect;
use super::uses::mat_uses;
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::graph::BinaryOp;
use tessera_ir::tile::{Kernel, TileReduce};

thread_local! {
    /// Program loops run on this thread that took the column pass's folded accumulators.
    static FOLDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many program loops on this thread took the column pass's folded accumulators
/// (`super::folded_column_loops`).
pub(crate) fn folded_loops() -> u64 {
    FOLDED.with(|c| c.get())
}

/// A recognised column-reduction loop (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct ColReduce {
    pub iv: u32,
    pub lo: u32,
    pub hi: u32,
    pub step: i64,
    /// Materialised offsets: the accumulator's initial value, the accumulator, the
    /// per-iteration partial (each `cols` values).
    pub init: usize,
    pub acc: usize,
    pub part: usize,
    pub param: usize,
    pub idx: Vec<u32>,
    /// The value read outside the tensor: the load's `other`, unrounded, as the interpreter fills it.
    pub other: f32,
    pub rows: usize,
    pub cols: usize,
    pub op: TileReduce,
    pub bf16: bool,
}

/// Replaces each top-level loop of the shape above whose partial and next accumulator
/// nothing else reads by one [`Step::ColReduce`].
pub(crate) fn fuse(k: &Kernel, mut steps: Vec<Step>) -> Vec<Step> {
    let uses = mat_uses(&steps);
    for s in steps.iter_mut() {
        if let Some(c) = recognise(k, s, &uses) {
            *s = Step::ColReduce(c);
        }
    }
    steps
}

fn recognise(
    k: &Kernel,
    s: &Step,
    uses: &std::collections::HashMap<usize, usize>,
) -> Option<ColReduce> {
    let Step::For {
        iv,
        lo,
        hi,
        step,
        inits,
        body,
        yields,
    } = s
    else {
        return None;
    };
    let ([Copy::Mat(init, acc, n0)], [Copy::Mat(next, acc2, n1)], [Step::Group(g), Step::Group(h)]) =
        (inits.as_slice(), yields.as_slice(), body.as_slice())
    else {
        return None;
    };
    let (load, red) = load_reduce(g)?;
    let COp::Load {
        param,
        idx,
        other,
        rank: 2,
        ..
    } = &load.op
    else {
        return None;
    };
    let COp::Reduce {
        op,
        along_cols: false,
        out: part,
        scalar: None,
        ..
    } = &red.op
    else {
        return None;
    };
    let [add] = h.members.as_slice() else {
        return None;
    };
    let cols = g.cols;
    let comb = match op {
        TileReduce::Sum => BinaryOp::Add,
        TileReduce::Max => BinaryOp::Max,
    };
    let vec = |s: &Src, off: usize| matches!(s, Src::Mat { off: o, rows: 1, cols: c } if *o == off && *c == cols);
    let COp::Binary {
        op: bop,
        kind: Kind::F,
        a,
        b,
        ..
    } = &add.op
    else {
        return None;
    };
    let dtype = k.params[*param].dtype;
    let ok = *bop == comb
        && vec(a, *acc)
        && vec(b, *part)
        && add.mat == Some(*next)
        && !add.round_bf16
        && !red.round_bf16
        && (h.rows, h.cols) == (1, cols)
        && acc2 == acc
        && *n0 == cols
        && *n1 == cols
        && uses.get(part) == Some(&2)
        && uses.get(next) == Some(&2)
        && matches!(dtype, DType::F32 | DType::BF16)
        && !load.round_bf16;
    if !ok {
        return None;
    }
    let bf16 = dtype == DType::BF16;
    Some(ColReduce {
        iv: *iv,
        lo: *lo,
        hi: *hi,
        step: *step,
        init: *init,
        acc: *acc,
        part: *part,
        param: *param,
        idx: idx.clone(),
        // A load widens bf16 exactly and fills with `other` unrounded, as the interpreter's.
        other: *other,
        rows: g.rows,
        cols,
        op: *op,
        bf16,
    })
}

/// The load and the reduction of a group `load → (cast to f32)? → reduce`, the load's value
/// read by nothing else.
fn load_reduce(g: &Group) -> Option<(&super::plan::Member, &super::plan::Member)> {
    let (load, red, cast) = match g.members.as_slice() {
        [l, r] => (l, r, None),
        [l, c, r] => (l, r, Some(c)),
        _ => return None,
    };
    let COp::Load { dst: s0, .. } = &load.op else {
        return None;
    };
    let mut s = *s0;
    if let Some(c) = cast {
        let COp::Cast {
            a: Src::Chunk(a),
            to: DType::F32,
            from: Kind::F,
            dst,
        } = &c.op
        else {
            return None;
        };
        if *a != s || c.round_bf16 || c.mat.is_some() {
            return None;
        }
        s = *dst;
    }
    match &red.op {
        COp::Reduce {
            a: Src::Chunk(a), ..
        } if *a == s && load.mat.is_none() => Some((load, red)),
        _ => None,
    }
}

/// Runs one program's loop.
pub(crate) fn run(
    c: &ColReduce,
    sc: &mut [f64],
    mat: &mut [f32],
    parts: Option<&Parts>,
    args: &[Buffer],
) {
    let n = c.cols;
    mat.copy_within(c.init..c.init + n, c.acc);
    let (lo, hi) = (sc[c.lo as usize] as i64, sc[c.hi as usize] as i64);
    // The two strips are distinct materialised tiles (`plan::Compiler::mat_slot`).
    assert!(c.acc.max(c.part) + n <= mat.len() && c.acc.abs_diff(c.part) >= n);
    if let Some(p) = parts
        && folded(c, sc, &mut mat[c.acc..c.acc + n], p, args, lo, hi)
    {
        return;
    }
    let mut x = lo;
    while x < hi {
        sc[c.iv as usize] = x as i32 as f64;
        // SAFETY: both strips are in `mat` and do not overlap (asserted).
        let (acc, part) = unsafe {
            let p = mat.as_mut_ptr();
            (
                std::slice::from_raw_parts_mut(p.add(c.acc), n),
                std::slice::from_raw_parts_mut(p.add(c.part), n),
            )
        };
        block(c, sc, args, acc, part);
        x += c.step;
    }
}

/// Whether a program's loop (`lo..hi`, accumulator `acc` holding its initial value) is the
/// one [`colpass`](super::colpass) folded, as far as the program can tell: the row index is
/// the loop counter, the column index is not, the loop runs from 0 in steps of the tile
/// height over exactly the pass's tiles, every accumulator starts at the reduction's
/// identity (bits), and the program's columns inside the tensor are in the table. Then the
/// loop's result is written into `acc` without running it: the table's accumulators for
/// those columns and, for columns past the tensor's edge (every row reads `other`), the same
/// fold computed once; the loop counter is left at its last value. Otherwise nothing changes.
fn folded(
    c: &ColReduce,
    sc: &mut [f64],
    acc: &mut [f32],
    p: &Parts,
    args: &[Buffer],
    lo: i64,
    hi: i64,
) -> bool {
    let id = super::colpass::identity(c.op);
    let shaped = c.idx.len() == 2
        && c.idx[0] == c.iv
        && c.idx[1] != c.iv
        && lo == 0
        && hi > 0
        && c.step == c.rows as i64
        && (hi as usize).div_ceil(c.rows) == p.blocks()
        && identities(acc, id);
    if !shaped {
        return false;
    }
    let buf = &args[c.param];
    let before = sc[c.iv as usize];
    sc[c.iv as usize] = 0.0;
    let w = rect(buf, &c.idx, sc, c.rows, c.cols);
    let c_pos = sc[c.idx[1] as usize] as i64;
    let table = if w.is_empty() || w.r.0 != 0 {
        None
    } else {
        p.part_of(c, buf, c_pos + w.c.0 as i64, w.c.1 - w.c.0)
    };
    let Some(t) = table else {
        sc[c.iv as usize] = before;
        return false;
    };
    let (c0, c1) = w.c;
    acc[c0..c1].copy_from_slice(t);
    if c0 > 0 || c1 < c.cols {
        let f = |a: f32, x: f32| match c.op {
            TileReduce::Sum => a + x,
            TileReduce::Max => max_nan(a, x),
        };
        let mut v = id;
        let mut q = id;
        for _ in 0..repeats(c.op, c.other, c.rows) {
            q = f(q, c.other);
        }
        for _ in 0..repeats(c.op, q, p.blocks()) {
            v = f(v, q);
        }
        acc[..c0].fill(v);
        acc[c1..].fill(v);
    }
    sc[c.iv as usize] = ((p.blocks() - 1) * c.rows) as i32 as f64;
    FOLDED.with(|c| c.set(c.get() + 1));
    true
}

/// One iteration: `part` from the identity over the block's rows, then into `acc`.
fn block(c: &ColReduce, sc: &[f64], args: &[Buffer], acc: &mut [f32], part: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if c.bf16 && crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
    {
        // SAFETY: the active level is at most the detected one: AVX-512F, AVX2 and FMA are
        // present.
        return unsafe { block_avx512(c, sc, args, acc, part) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        return unsafe { block_avx2(c, sc, args, acc, part) };
    }
    block_body(c, sc, args, acc, part)
}

/// [`block_body`] built with AVX-512F, for bf16 tensors (16 columns per vector: a row is
/// widened 16 lanes at a time; an f32 block measured no faster than its AVX2 build).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn block_avx512(
    c: &ColReduce,
    sc: &[f64],
    args: &[Buffer],
    acc: &mut [f32],
    part: &mut [f32],
) {
    block_body(c, sc, args, acc, part)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2(
    c: &ColReduce,
    sc: &[f64],
    args: &[Buffer],
    acc: &mut [f32],
    part: &mut [f32],
) {
    block_body(c, sc, args, acc, part)
}

#[inline(always)]
fn block_body(c: &ColReduce, sc: &[f64], args: &[Buffer], acc: &mut [f32], part: &mut [f32]) {
    match c.op {
        TileReduce::Sum => rows(c, sc, args, part, 0.0, |p, x| p + x),
        TileReduce::Max => rows(c, sc, args, part, f32::NEG_INFINITY, max_nan),
    }
    match c.op {
        TileReduce::Sum => acc.iter_mut().zip(&*part).for_each(|(a, p)| *a += *p),
        TileReduce::Max => acc
            .iter_mut()
            .zip(&*part)
            .for_each(|(a, p)| *a = max_nan(*a, *p)),
    }
}

/// `part` = the identity combined with each row of the block in order (`other` outside the
/// tensor).
#[inline(always)]
fn rows(
    c: &ColReduce,
    sc: &[f64],
    args: &[Buffer],
    part: &mut [f32],
    id: f32,
    f: impl Fn(f32, f32) -> f32 + std::marker::Copy,
) {
    let buf = &args[c.param];
    let w = rect(buf, &c.idx, sc, c.rows, c.cols);
    part.fill(id);
    let other = |part: &mut [f32], n: usize| {
        (0..repeats(c.op, c.other, n))
            .for_each(|_| part.iter_mut().for_each(|p| *p = f(*p, c.other)))
    };
    if w.is_empty() {
        other(part, c.rows);
        return;
    }
    let ((r0, r1), (c0, c1)) = (w.r, w.c);
    let size = if c.bf16 { 2 } else { 4 };
    let last = w.base + ((r1 - 1) * w.stride + c1) as i64;
    assert!(
        last as usize * size <= buf.len && w.base + (r0 * w.stride + c0) as i64 >= 0,
        "fused load out of bounds"
    );
    other(part, r0);
    let (pl, pm, pr) = {
        let (l, rest) = part.split_at_mut(c0);
        let (m, r) = rest.split_at_mut(c1 - c0);
        (l, m, r)
    };
    let at = (w.base + (r0 * w.stride + c0) as i64) as usize;
    // SAFETY: rows r0..r1, columns c0..c1 of the window are in bounds (asserted above);
    // loaded tensors are not written during a launch.
    unsafe { combine(c, buf, at, w.stride, r1 - r0, pm) };
    if c0 > 0 || c1 < c.cols {
        other(pl, r1 - r0);
        other(pr, r1 - r0);
    }
    other(part, c.rows - r1);
}

/// How many of `n` successive combines of a value with `x` must run for the same bits as
/// all `n`: one (or none for `n = 0`) where the combine is idempotent in `x` — a max
/// (`max_nan(max_nan(a, x), x) = max_nan(a, x)`), or a sum with `x` a zero (`a + 0 + 0 =
/// a + 0`: only `-0 + +0` changes a value, to `+0`, which adding a zero keeps) — else `n`.
pub(crate) fn repeats(op: TileReduce, x: f32, n: usize) -> usize {
    match op {
        TileReduce::Max => n.min(1),
        TileReduce::Sum if x == 0.0 => n.min(1),
        TileReduce::Sum => n,
    }
}

/// Whether every value of `acc` has the bits of `id` (no early exit: the compares vectorise).
fn identities(acc: &[f32], id: f32) -> bool {
    let id = id.to_bits();
    acc.chunks(16)
        .all(|c| c.iter().fold(true, |ok, v| ok & (v.to_bits() == id)))
}

/// The max of two values, NaN if either is NaN (the interpreter's rule).
#[inline(always)]
pub(crate) fn max_nan(a: f32, x: f32) -> f32 {
    let m = a.max(x);
    if a.is_nan() | x.is_nan() { f32::NAN } else { m }
}

/// `part[j] = f(part[j], x[u][j])` for rows `u < n` of the tensor `buf` starting at element
/// `at` (rows `stride` elements apart), `j < part.len()`, rows in order, four rows per pass
/// over `part` (eight in the AVX-512 bf16 sum's pair blocks of at most 2048 columns), at the
/// active SIMD level (`f` the reduction's combine: `+` or [`max_nan`]).
///
/// # Safety
/// Those rows and columns are inside `buf`, which nothing writes meanwhile.
pub(crate) unsafe fn combine(
    c: &ColReduce,
    buf: &Buffer,
    at: usize,
    stride: usize,
    n: usize,
    part: &mut [f32],
) {
    let size = if c.bf16 { 2 } else { 4 };
    let x = (buf.ptr as *const u8).wrapping_add(at * size);
    #[cfg(target_arch = "x86_64")]
    if c.op == TileReduce::Sum
        && crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
    {
        // SAFETY: AVX-512F present (the active level is at most the detected one); the
        // caller's contract.
        return unsafe {
            if c.bf16 {
                x86::sum_bf16_avx512(x, stride * size, n, part)
            } else if buf.len <= REGS_MAX && part.len() >= 16 {
                x86::sum_regs_f32(x, stride * size, n, part)
            } else {
                x86::sum_avx512::<false>(x, stride * size, n, part)
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: AVX2 and FMA present; the caller's contract.
        return unsafe { combine_avx2(c, x, stride, n, part) };
    }
    unsafe { combine_body(c, x, stride, n, part) }
}

/// The largest f32 tensor, in bytes, whose column sums [`combine`] takes with every row's
/// additions into accumulators held in registers (`x86::sum_regs_f32`) instead of four-row
/// passes over `part` in memory: 64 KiB (a tensor that sits in L1 or L2, where the passes'
/// stores and reloads of `part`, not the reads, set the pace). Larger tensors keep the passes
/// (their strips' rows are what `colpass`'s strip widths were measured for).
///
/// At `[37, 300]` (44 KiB; `perf record -e cpu-clock` of main f8958b1 put a third of the
/// launch in `sum_avx512`'s four-row passes, its samples on the store of `part` and the adds
/// that reload it) on the 2-vCPU KVM Intel Xeon (family 6 model 207), interleaved with
/// f8958b1's binary, `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile col_mean 37 300 20000
/// --pool`, fastest launch, 2026-11-28 19:38, 19:48 and 19:58 UTC, `uptime` 2.3–2.9, eight
/// rounds (with the one-run pass of `colpass::fill`): one thread 1.82–1.96 µs → 1.59–1.71
/// (a round under load 2.48 → 2.16), two threads 1.81–1.98 → 1.59–1.78. `[4096, 1024]`, `[1024,
/// 4096]` (one and two threads) and `[8192, 4096]` (one thread) do not take this path:
/// three interleaved rounds there (19:49 UTC) overlapped main's.
const REGS_MAX: usize = 1 << 16;

/// The partial of one tile of a column sum from the identity, `+0.0`: `part[j] = ((+0.0 +
/// x[0][j]) + x[1][j]) + … + x[n − 1][j]` over rows `u < n` of `buf` (f32, or bf16 widened
/// exactly) from element `at` (rows `stride` elements apart), `j < part.len()`; with `acc`,
/// instead `acc[j] = acc[j] + part[j]` (`part` left as scratch). What `part.fill(+0.0)`,
/// [`combine`] and an add into `acc` compute, per column in the same order, but the
/// AVX-512 passes start from zero registers instead of loading a filled (for bf16, also
/// permuted) `part`, and the last adds into `acc` instead of storing `part` for a separate
/// fold. `false` (nothing done) below the AVX-512 level.
///
/// # Safety
/// As [`combine`]; `acc`, when given, is `part.len()` long.
pub(crate) unsafe fn sum_tile(
    bf16: bool,
    buf: &Buffer,
    at: usize,
    stride: usize,
    n: usize,
    part: &mut [f32],
    acc: Option<&mut [f32]>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512 {
        let size = if bf16 { 2 } else { 4 };
        let x = (buf.ptr as *const u8).wrapping_add(at * size);
        let acc = match acc {
            Some(a) => {
                assert_eq!(a.len(), part.len(), "column sum accumulators");
                a.as_mut_ptr()
            }
            None => std::ptr::null_mut(),
        };
        // SAFETY: AVX-512F present (the active level is at most the detected one); the
        // caller's contract; `acc` null or `part.len()` floats (asserted).
        unsafe {
            if bf16 {
                x86::sum_bf16_tile_avx512(x, stride * 2, n, part, acc)
            } else {
                x86::sum_f32_tile_avx512(x, stride * 4, n, part, acc)
            }
        };
        return true;
    }
    let _ = (bf16, buf, at, stride, n, part, acc);
    false
}

/// [`combine_body`] built with AVX2.
///
/// # Safety
/// AVX2 and FMA present; as [`combine`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn combine_avx2(c: &ColReduce, x: *const u8, stride: usize, n: usize, part: &mut [f32]) {
    unsafe { combine_body(c, x, stride, n, part) }
}

/// [`combine`] over the rows at `x` (its first element's address).
///
/// # Safety
/// As [`combine`].
#[inline(always)]
unsafe fn combine_body(c: &ColReduce, x: *const u8, stride: usize, n: usize, pm: &mut [f32]) {
    let m = pm.len();
    let mut u = 0;
    // Four rows per pass over the strip: ((p + x0) + x1) + x2) + x3, the order row by row.
    macro_rules! pass {
        ($t:ty, $widen:expr, $f:expr) => {{
            let f = $f;
            let row = |u: usize| -> &[$t] {
                // SAFETY: the caller's contract.
                unsafe { std::slice::from_raw_parts((x as *const $t).add(u * stride), m) }
            };
            while u + 4 <= n {
                let (x0, x1, x2, x3) = (row(u), row(u + 1), row(u + 2), row(u + 3));
                for j in 0..m {
                    let p = f(f(pm[j], $widen(x0[j])), $widen(x1[j]));
                    pm[j] = f(f(p, $widen(x2[j])), $widen(x3[j]));
                }
                u += 4;
            }
            while u < n {
                let x0 = row(u);
                for j in 0..m {
                    pm[j] = f(pm[j], $widen(x0[j]));
                }
                u += 1;
            }
        }};
    }
    let bf = |x: u16| f32::from_bits((x as u32) << 16);
    let id = |x: f32| x;
    match (c.op, c.bf16) {
        (TileReduce::Sum, true) => pass!(u16, bf, |p: f32, x: f32| p + x),
        (TileReduce::Sum, false) => pass!(f32, id, |p: f32, x: f32| p + x),
        (TileReduce::Max, true) => pass!(u16, bf, max_nan),
        (TileReduce::Max, false) => pass!(f32, id, max_nan),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    /// [`super::combine`] of a sum with AVX-512F: 16 columns per vector (from the first
    /// column whose row vectors start cache lines, see below), four rows per pass over `part`;
    /// f32 rows (`BF` false) or bf16 rows widened exactly (`BF`).
    ///
    /// # Safety
    /// AVX-512F present; rows `u < n` at `x + u · sb` bytes hold `part.len()` readable
    /// elements each.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sum_avx512<const BF: bool>(
        x: *const u8,
        sb: usize,
        n: usize,
        part: &mut [f32],
    ) {
        let m = part.len();
        let pp = part.as_mut_ptr();
        // Vectors start at the first column where a row's vector starts a cache line (32
        // bytes of bf16, 64 of f32) when every row shares that offset; the columns before it
        // and after the last whole vector run one at a time.
        let line = if BF { 32 } else { 64 };
        let j0 = if sb.is_multiple_of(line) {
            ((line - x as usize % line) % line / if BF { 2 } else { 4 }).min(m)
        } else {
            0
        };
        let m16 = j0 + ((m - j0) & !15);
        macro_rules! ld {
            ($r:expr, $j:expr) => {
                if BF {
                    let v = _mm256_loadu_si256($r.add(2 * $j) as *const __m256i);
                    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
                } else {
                    _mm512_loadu_ps($r.add(4 * $j) as *const f32)
                }
            };
        }
        macro_rules! sc {
            ($r:expr, $j:expr) => {
                if BF {
                    f32::from_bits((*($r.add(2 * $j) as *const u16) as u32) << 16)
                } else {
                    *($r.add(4 * $j) as *const f32)
                }
            };
        }
        // The columns before `j0` and from `m16` as one vector each, overlapping the row's
        // first or last 16 columns, whose other lanes are added nothing (stored back as
        // loaded); one column at a time in a row of fewer than 16.
        let wide = m >= 16;
        let head = (1u16 << j0.min(15)) - 1;
        let tail = if wide && m16 < m {
            !0u16 << (m16 - (m - 16))
        } else {
            0
        };
        macro_rules! edge {
            ($rows:expr, $at:expr, $mask:expr) => {{
                let mut v = _mm512_loadu_ps(pp.add($at));
                for r in $rows {
                    v = _mm512_mask_add_ps(v, $mask, v, ld!(r, $at));
                }
                _mm512_storeu_ps(pp.add($at), v);
            }};
        }
        let mut u = 0;
        // SAFETY (all accesses): rows u < n, columns j < m (the caller's contract); `pp`
        // holds m values.
        unsafe {
            while u + 4 <= n {
                let r0 = x.add(u * sb);
                let (r1, r2, r3) = (r0.add(sb), r0.add(2 * sb), r0.add(3 * sb));
                if wide {
                    if j0 > 0 {
                        edge!([r0, r1, r2, r3], 0, head);
                    }
                } else {
                    for j in 0..j0 {
                        *pp.add(j) =
                            (((*pp.add(j) + sc!(r0, j)) + sc!(r1, j)) + sc!(r2, j)) + sc!(r3, j);
                    }
                }
                quad::<BF>([r0, r1, r2, r3], pp, j0, m16);
                if wide {
                    if m16 < m {
                        edge!([r0, r1, r2, r3], m - 16, tail);
                    }
                } else {
                    for j in m16..m {
                        *pp.add(j) =
                            (((*pp.add(j) + sc!(r0, j)) + sc!(r1, j)) + sc!(r2, j)) + sc!(r3, j);
                    }
                }
                u += 4;
            }
            while u < n {
                let r0 = x.add(u * sb);
                if wide {
                    if j0 > 0 {
                        edge!([r0], 0, head);
                    }
                } else {
                    for j in 0..j0 {
                        *pp.add(j) += sc!(r0, j);
                    }
                }
                let mut j = j0;
                while j < m16 {
                    let v = _mm512_add_ps(_mm512_loadu_ps(pp.add(j)), ld!(r0, j));
                    _mm512_storeu_ps(pp.add(j), v);
                    j += 16;
                }
                if wide {
                    if m16 < m {
                        edge!([r0], m - 16, tail);
                    }
                } else {
                    for j in m16..m {
                        *pp.add(j) += sc!(r0, j);
                    }
                }
                u += 1;
            }
        }
    }

    /// Rows per call from which [`sum_bf16_avx512`] runs its pair kernel.
    const PAIR_MIN: usize = 8;

    /// [`super::combine`] of a sum of bf16 rows with AVX-512F: with at least [`PAIR_MIN`]
    /// rows, the columns from the first whose row vectors start cache lines (64 bytes, when
    /// every row shares that offset) in blocks of 32 run [`pairs`]; the columns before and
    /// after those blocks, and calls of fewer rows, run [`sum_avx512`]. Each column still
    /// adds its rows in order, so the sums are [`sum_avx512`]'s.
    ///
    /// # Safety
    /// As [`sum_avx512`].
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sum_bf16_avx512(x: *const u8, sb: usize, n: usize, part: &mut [f32]) {
        let m = part.len();
        let j0 = if sb.is_multiple_of(64) {
            ((64 - x as usize % 64) % 64 / 2).min(m)
        } else {
            0
        };
        let m32 = j0 + ((m - j0) & !31);
        // SAFETY (all three): the caller's contract, on sub-ranges of its columns.
        unsafe {
            if n < PAIR_MIN || m32 == j0 {
                return sum_avx512::<true>(x, sb, n, part);
            }
            let pp = part.as_mut_ptr();
            let cols = |a: usize, b: usize| std::slice::from_raw_parts_mut(pp.add(a), b - a);
            // Fewer than 16 columns before or after the pair blocks: one vector over the
            // row's first or last 16 columns (m >= 32 here), adding into those columns only
            // (`sum_avx512` would take them one at a time: at `[37, 300]` the last 12
            // columns' 444 scalar adds were 4 % of a `cpu_profile col_sum_bf16` loop's
            // samples, a quarter of the pass's). With `colpass::fill`'s one-run pass,
            // `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile col_sum_bf16 37 300 20000 --pool`
            // against main f8958b1, interleaved, fastest launch, 2026-11-28 19:38, 19:48 and
            // 19:58 UTC, `uptime` 2.3–2.9, eight rounds: one thread 1.55–1.59 µs → 1.32–1.41
            // (a round under load 2.10 → 1.88), two threads 1.54–1.59 → 1.31–1.39 (2.10 →
            // 1.76).
            if j0 >= 16 {
                sum_avx512::<true>(x, sb, n, cols(0, j0));
            } else if j0 > 0 {
                edge_bf16(x, sb, n, pp, !(!0u16 << j0));
            }
            pairs(x.add(2 * j0), sb, n, cols(j0, m32));
            if m - m32 >= 16 {
                sum_avx512::<true>(x.add(2 * m32), sb, n, cols(m32, m));
            } else if m32 < m {
                edge_bf16(
                    x.add(2 * (m - 16)),
                    sb,
                    n,
                    pp.add(m - 16),
                    !0u16 << (m32 - (m - 16)),
                );
            }
        }
    }

    /// `p[j] = ((p[j] + r0[j]) + r1[j]) + …` for the 16 columns from `x` (rows `u < n`,
    /// `sb` bytes apart, bf16 widened exactly) whose lanes are set in `mask`, `p` the 16
    /// floats at `pp`; the other lanes of `pp` are neither added to nor stored.
    ///
    /// # Safety
    /// AVX-512F present; rows `u < n` at `x + u · sb` hold 16 readable bf16 values, `pp`
    /// 16 floats.
    #[inline(always)]
    unsafe fn edge_bf16(x: *const u8, sb: usize, n: usize, pp: *mut f32, mask: __mmask16) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut v = _mm512_loadu_ps(pp);
            for u in 0..n {
                let w = _mm256_loadu_si256(x.add(u * sb) as *const __m256i);
                let y = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(w)));
                v = _mm512_mask_add_ps(v, mask, v, y);
            }
            _mm512_mask_storeu_ps(pp, mask, v);
        }
    }

    /// Most vectors of 16 columns [`sum_regs_f32`] keeps in registers at once.
    const REGS: usize = 16;

    /// [`sum_avx512`] of f32 rows (`part.len()` at least 16) with each column's additions
    /// in a register over all `n` rows: the columns in groups of at most [`REGS`] vectors,
    /// each group's accumulators loaded from `part`, every row added in order, stored once
    /// (the same adds per column in the same order; no store and reload of `part` every four
    /// rows). A last vector past the row's end is taken over its last 16 columns, adding and
    /// storing only the columns after the vector before it.
    ///
    /// # Safety
    /// As [`sum_avx512`]; `part.len() >= 16`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sum_regs_f32(x: *const u8, sb: usize, n: usize, part: &mut [f32]) {
        let m = part.len();
        assert!(m >= 16, "register column sum of fewer than 16 columns");
        let pp = part.as_mut_ptr();
        let v = m.div_ceil(16);
        let per = v.div_ceil(v.div_ceil(REGS));
        let mut g = 0;
        while g < v {
            let k = per.min(v - g);
            macro_rules! go {
                ($($k:literal)*) => {
                    match k {
                        // SAFETY: the caller's contract; vectors g .. g + k start inside the
                        // row (16 · (g + k − 1) < m).
                        $($k => unsafe { regs::<$k>(x, sb, n, pp, m, 16 * g) },)*
                        _ => unreachable!(),
                    }
                };
            }
            go!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
            g += k;
        }
    }

    /// `K` vectors of [`sum_regs_f32`] from column `j0` (vector `i` at `j0 + 16 i`; only the
    /// last may pass `m − 16`, then taken at `m − 16`, its columns before `j0 + 16 (K − 1)`
    /// masked off).
    ///
    /// # Safety
    /// As [`sum_regs_f32`]; `j0 + 16 (K − 1) < m`, `m >= 16`, `pp` holds `m` floats.
    #[inline(always)]
    unsafe fn regs<const K: usize>(
        x: *const u8,
        sb: usize,
        n: usize,
        pp: *mut f32,
        m: usize,
        j0: usize,
    ) {
        let last = (j0 + 16 * (K - 1)).min(m - 16);
        let mask: __mmask16 = !0u16 << (j0 + 16 * (K - 1) - last);
        let at = |i: usize| if i + 1 == K { last } else { j0 + 16 * i };
        // SAFETY: columns `at(i) .. at(i) + 16` lie inside the rows and `part` (the caller's
        // contract: vectors before the last end at most at its start, which is inside).
        unsafe {
            let mut acc: [__m512; K] = core::array::from_fn(|i| _mm512_loadu_ps(pp.add(at(i))));
            for u in 0..n {
                let r = x.add(u * sb) as *const f32;
                for (i, a) in acc.iter_mut().enumerate() {
                    let y = _mm512_loadu_ps(r.add(at(i)));
                    *a = if i + 1 == K {
                        _mm512_mask_add_ps(*a, mask, *a, y)
                    } else {
                        _mm512_add_ps(*a, y)
                    };
                }
            }
            for (i, a) in acc.iter().enumerate() {
                if i + 1 == K {
                    _mm512_mask_storeu_ps(pp.add(at(i)), mask, *a);
                } else {
                    _mm512_storeu_ps(pp.add(at(i)), *a);
                }
            }
        }
    }

    /// [`super::sum_tile`] of f32 rows (`acc` null: no accumulators): the columns from the
    /// first whose row vectors start cache lines in vectors of 16, four rows per pass (then
    /// one), the first pass from zero registers, the last storing `part` or adding into
    /// `acc`; the columns before and after those vectors from a zero-filled `part` by
    /// [`sum_avx512`] (then added into `acc`).
    ///
    /// # Safety
    /// As [`sum_avx512`]; `acc` null or `part.len()` writable floats not inside `part`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sum_f32_tile_avx512(
        x: *const u8,
        sb: usize,
        n: usize,
        part: &mut [f32],
        acc: *mut f32,
    ) {
        let m = part.len();
        let j0 = if sb.is_multiple_of(64) {
            ((64 - x as usize % 64) % 64 / 4).min(m)
        } else {
            0
        };
        let m16 = j0 + ((m - j0) & !15);
        let pp = part.as_mut_ptr();
        // Columns `a .. b` from zero by `sum_avx512`, added into `acc`.
        let plain = |a: usize, b: usize| {
            // SAFETY: columns a..b of the caller's rows, `part` and `acc`.
            unsafe {
                let p = std::slice::from_raw_parts_mut(pp.add(a), b - a);
                p.fill(0.0);
                sum_avx512::<false>(x.add(4 * a), sb, n, p);
                if !acc.is_null() {
                    let q = std::slice::from_raw_parts_mut(acc.add(a), b - a);
                    q.iter_mut().zip(p.iter()).for_each(|(q, p)| *q += *p);
                }
            }
        };
        if m16 == j0 || n == 0 {
            return plain(0, m);
        }
        if j0 > 0 {
            plain(0, j0);
        }
        let (x, pm, am) = (x.wrapping_add(4 * j0), pp.wrapping_add(j0), m16 - j0);
        let acc_mid = if acc.is_null() {
            acc
        } else {
            acc.wrapping_add(j0)
        };
        let mut u = 0;
        macro_rules! go {
            ($k:literal, $first:expr, $last:expr) => {
                // SAFETY: rows u..u + $k (at most n) and columns j0..m16 of the caller's,
                // `part` and `acc`.
                match ($first, $last) {
                    (true, true) => unsafe {
                        pass_f32::<$k, true, true>(x.add(u * sb), sb, am, pm, acc_mid)
                    },
                    (true, false) => unsafe {
                        pass_f32::<$k, true, false>(x.add(u * sb), sb, am, pm, acc_mid)
                    },
                    (false, true) => unsafe {
                        pass_f32::<$k, false, true>(x.add(u * sb), sb, am, pm, acc_mid)
                    },
                    (false, false) => unsafe {
                        pass_f32::<$k, false, false>(x.add(u * sb), sb, am, pm, acc_mid)
                    },
                }
            };
        }
        while u < n {
            let k = if u + 4 <= n { 4 } else { 1 };
            let (first, last) = (u == 0, u + k == n);
            match k {
                4 => go!(4, first, last),
                _ => go!(1, first, last),
            }
            u += k;
        }
        if m16 < m {
            plain(m16, m);
        }
    }

    /// One pass of [`sum_f32_tile_avx512`] over `K` f32 rows from `r0` (`sb` bytes apart) and
    /// `m` columns (a multiple of 16): `v = (((p + x0) + x1) + …)` per column, `p` zero with
    /// `FIRST` else `pp`'s; `LAST` stores `v` to `pp`, or adds it into `acc` (`acc + v`) when
    /// `acc` is not null; otherwise `v` goes back to `pp`.
    ///
    /// # Safety
    /// AVX-512F present; `K` rows of `m` columns readable, `m` floats at `pp` (and `acc`).
    #[inline(always)]
    unsafe fn pass_f32<const K: usize, const FIRST: bool, const LAST: bool>(
        r0: *const u8,
        sb: usize,
        m: usize,
        pp: *mut f32,
        acc: *mut f32,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut j = 0;
            while j < m {
                let l: [__m512; K] =
                    core::array::from_fn(|i| _mm512_loadu_ps(r0.add(i * sb + 4 * j) as *const f32));
                let mut v = if FIRST {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(pp.add(j))
                };
                for r in l {
                    v = _mm512_add_ps(v, r);
                }
                if LAST && !acc.is_null() {
                    let a = acc.add(j);
                    _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), v));
                } else {
                    _mm512_storeu_ps(pp.add(j), v);
                }
                j += 16;
            }
        }
    }

    /// [`super::sum_tile`] of bf16 rows (`acc` null: no accumulators): the columns from the first
    /// whose row vectors start cache lines in blocks of 32 by [`zero_pairs`], the others
    /// from a zero-filled `part` by [`sum_avx512`] (then added into `acc`); fewer than
    /// [`PAIR_MIN`] rows all by [`sum_avx512`].
    ///
    /// # Safety
    /// As [`sum_avx512`]; `acc` null or `part.len()` writable floats not inside `part`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sum_bf16_tile_avx512(
        x: *const u8,
        sb: usize,
        n: usize,
        part: &mut [f32],
        acc: *mut f32,
    ) {
        // SAFETY: the caller's contract.
        unsafe { sum_bf16_tile_as(x, sb, n, part, acc, fma_odd()) }
    }

    /// Whether [`pass`] adds the odd columns by FMA (`x · 1.0 + acc`: one rounding of `x +
    /// acc`, the same bits) instead of `vaddps`, two blocks of 32 columns per step: on a Zen 4
    /// (AMD family 0x19, `simd::is_zen4`). There (2-vCPU KVM EPYC family 25 model 17, 3.67
    /// GHz) a zmm `vaddps` and a zmm `vpslld` share pipes: asm loops of 8 independent ops,
    /// 4 `vaddps` + 4 `vpslld` 8.1 cycles, 4 `vaddps` + 4 `vpandd` 6.4, 2 `vaddps` + 2
    /// `vfmadd231ps` + 2 `vpslld` + 2 `vpandd` 4.1. So a block's 16 adds + 8 shifts + 8 ands
    /// took ≈ 24.5 cycles per 8 rows (a C copy of the loop, L2-resident strip) and ≈ 22 with
    /// the odd chain on the FMA pipes, ≈ 21.6 with two blocks per step (L3-resident `[4096,
    /// 1024]`: 114 → 112 → 108.6 µs). In the pass, A/B against `/work/wt/base25/cpu_profile`
    /// (a362c42), interleaved, three rounds, 23:12–23:13 UTC 2026-11-28, load 6.9–7.1
    /// (`RAYON_NUM_THREADS=T chrt -f 50 cpu_profile col_sum_bf16 R C 300 --pool`, fastest
    /// launch, ratio to the same-run yardstick): one thread `[4096, 1024]` 118.0–118.8 →
    /// 110.9–112.4 µs (0.74 → 0.78–0.79), `[1024, 4096]` 124.5–126.1 → 117.8–119.3 (0.69–0.74
    /// → 0.74); two threads `[4096, 1024]` 65.7–65.9 → 62.5–63.2 (0.69 → 0.72–0.73), `[1024,
    /// 4096]` 75.0–78.6 → 71.2–78.4. Not measured on the Zen 5 or the Intel Xeon: they keep
    /// `vaddps` and one block per step.
    fn fma_odd() -> bool {
        crate::backend::cpu::simd::is_zen4()
    }

    /// [`sum_bf16_tile_avx512`] with the odd columns' adds by FMA or not (`fma`, see
    /// [`fma_odd`]; the tests run both).
    ///
    /// # Safety
    /// As [`sum_bf16_tile_avx512`].
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sum_bf16_tile_as(
        x: *const u8,
        sb: usize,
        n: usize,
        part: &mut [f32],
        acc: *mut f32,
        fma: bool,
    ) {
        let m = part.len();
        let j0 = if sb.is_multiple_of(64) {
            ((64 - x as usize % 64) % 64 / 2).min(m)
        } else {
            0
        };
        let m32 = j0 + ((m - j0) & !31);
        let pp = part.as_mut_ptr();
        // Columns `a .. b` from zero by `sum_avx512`, added into `acc`.
        let plain = |a: usize, b: usize| {
            // SAFETY: columns a..b of the caller's rows, `part` and `acc`.
            unsafe {
                let p = std::slice::from_raw_parts_mut(pp.add(a), b - a);
                p.fill(0.0);
                sum_avx512::<true>(x.add(2 * a), sb, n, p);
                if !acc.is_null() {
                    let q = std::slice::from_raw_parts_mut(acc.add(a), b - a);
                    q.iter_mut().zip(p.iter()).for_each(|(q, p)| *q += *p);
                }
            }
        };
        if n < PAIR_MIN || m32 == j0 {
            return plain(0, m);
        }
        if j0 > 0 {
            plain(0, j0);
        }
        // SAFETY: columns j0..m32 (a multiple of 32 of them) of the caller's rows, `part`
        // and `acc`.
        unsafe {
            let mid = std::slice::from_raw_parts_mut(pp.add(j0), m32 - j0);
            let acc = if acc.is_null() { acc } else { acc.add(j0) };
            if fma {
                zero_pairs::<true>(x.add(2 * j0), sb, n, mid, acc);
            } else {
                zero_pairs::<false>(x.add(2 * j0), sb, n, mid, acc);
            }
        }
        if m32 < m {
            plain(m32, m);
        }
    }

    /// [`pairs`] from `part` all `+0.0` without reading it: the first pass starts its even and
    /// odd vectors at zero (so no permute on entry), and the last puts each block's columns
    /// back in order in registers and stores them to `part`, or with `acc` (not null) adds
    /// them into `acc` (`acc[j] + part[j]`) and leaves `part` as scratch. The same passes in
    /// the same order as [`pairs`].
    ///
    /// # Safety
    /// As [`pairs`]; `acc` null or `part.len()` writable floats not inside `part`.
    #[inline(always)]
    unsafe fn zero_pairs<const F: bool>(
        x: *const u8,
        sb: usize,
        n: usize,
        part: &mut [f32],
        acc: *mut f32,
    ) {
        let m = part.len();
        let pp = part.as_mut_ptr();
        let eight = m <= 2048;
        let mut u = 0;
        macro_rules! go {
            ($k:literal, $first:expr, $last:expr) => {
                // SAFETY: rows u..u + $k (< n) of the caller's, `part` and `acc`.
                match ($first, $last) {
                    (true, true) => unsafe {
                        pass::<$k, true, true, F>(x.add(u * sb), sb, m, pp, acc)
                    },
                    (true, false) => unsafe {
                        pass::<$k, true, false, F>(x.add(u * sb), sb, m, pp, acc)
                    },
                    (false, true) => unsafe {
                        pass::<$k, false, true, F>(x.add(u * sb), sb, m, pp, acc)
                    },
                    (false, false) => unsafe {
                        pass::<$k, false, false, F>(x.add(u * sb), sb, m, pp, acc)
                    },
                }
            };
        }
        while u < n {
            let k = if eight && u + 8 <= n {
                8
            } else if u + 4 <= n {
                4
            } else {
                1
            };
            let (first, last) = (u == 0, u + k == n);
            match k {
                8 => go!(8, first, last),
                4 => go!(4, first, last),
                _ => go!(1, first, last),
            }
            u += k;
        }
    }

    /// One pass of [`zero_pairs`] over `K` rows from `r0` (`sb` bytes apart) and `m` columns
    /// (a multiple of 32): `FIRST` starts from zero instead of `pp`'s even and odd vectors,
    /// `LAST` puts the columns back in order and stores them to `pp`, or adds them into `acc`
    /// when it is not null.
    ///
    /// # Safety
    /// As [`zero_pairs`]: `K` rows of `m` columns readable, `m` floats at `pp` (and `acc`).
    #[inline(always)]
    unsafe fn pass<const K: usize, const FIRST: bool, const LAST: bool, const F: bool>(
        r0: *const u8,
        sb: usize,
        m: usize,
        pp: *mut f32,
        acc: *mut f32,
    ) {
        // SAFETY: the caller's contract (AVX-512F present).
        unsafe {
            // 1.0 the compiler cannot see (it folds an FMA by a constant 1.0 into an add).
            let one = std::hint::black_box(_mm512_set1_ps(1.0));
            let mut j = 0;
            if F {
                // Two blocks per step on a Zen 4 (see `fma_odd`): four add chains in flight.
                while j + 64 <= m {
                    blocks::<K, FIRST, LAST, F, 2>(r0, sb, j, pp, acc, one);
                    j += 64;
                }
            }
            while j < m {
                blocks::<K, FIRST, LAST, F, 1>(r0, sb, j, pp, acc, one);
                j += 32;
            }
        }
    }

    /// [`pass`] over the `W` blocks of 32 columns from column `j`, row by row (each block's
    /// rows in order), the odd columns' adds by FMA by `one` (1.0) when `F`.
    ///
    /// # Safety
    /// As [`pass`], columns `j .. j + 32 · W` inside its `m`.
    #[inline(always)]
    unsafe fn blocks<
        const K: usize,
        const FIRST: bool,
        const LAST: bool,
        const F: bool,
        const W: usize,
    >(
        r0: *const u8,
        sb: usize,
        j: usize,
        pp: *mut f32,
        acc: *mut f32,
        one: __m512,
    ) {
        // SAFETY: the caller's contract (AVX-512F present).
        unsafe {
            let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            let hi =
                _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            let mask = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
            let ld = |r: *const u8, j: usize| _mm512_loadu_si512(r.add(2 * j) as *const _);
            let ev = |v: __m512i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
            let od = |v: __m512i| _mm512_castsi512_ps(_mm512_and_si512(v, mask));
            let mut e: [__m512; W] = core::array::from_fn(|w| {
                if FIRST {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(pp.add(j + 32 * w))
                }
            });
            let mut o: [__m512; W] = core::array::from_fn(|w| {
                if FIRST {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(pp.add(j + 32 * w + 16))
                }
            });
            for i in 0..K {
                for w in 0..W {
                    let v = ld(r0.add(i * sb), j + 32 * w);
                    e[w] = _mm512_add_ps(e[w], ev(v));
                    // `od(v) · 1.0 + o` rounds `od(v) + o` once: the same bits as the add.
                    o[w] = if F {
                        _mm512_fmadd_ps(od(v), one, o[w])
                    } else {
                        _mm512_add_ps(o[w], od(v))
                    };
                }
            }
            for w in 0..W {
                let j = j + 32 * w;
                if LAST {
                    let a = _mm512_permutex2var_ps(e[w], lo, o[w]);
                    let b = _mm512_permutex2var_ps(e[w], hi, o[w]);
                    if acc.is_null() {
                        _mm512_storeu_ps(pp.add(j), a);
                        _mm512_storeu_ps(pp.add(j + 16), b);
                    } else {
                        let (p, q) = (acc.add(j), acc.add(j + 16));
                        _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), a));
                        _mm512_storeu_ps(q, _mm512_add_ps(_mm512_loadu_ps(q), b));
                    }
                } else {
                    _mm512_storeu_ps(pp.add(j), e[w]);
                    _mm512_storeu_ps(pp.add(j + 16), o[w]);
                }
            }
        }
    }

    /// `part[j] += x[u][j]` over rows `u < n` in order, bf16 rows of `part.len()` (a multiple
    /// of 32) columns: each 64-byte load holds 32 columns as 16 pairs, widened without a
    /// shuffle (the even columns `<< 16`, the odd ones `& 0xFFFF_0000`) and added into `part`
    /// held as even and odd columns per block of 32 (permuted once on entry and back on
    /// exit), eight rows per pass over at most 2048 columns, else four.
    ///
    /// # Safety
    /// As [`sum_avx512`]; `part.len()` a multiple of 32.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn pairs(x: *const u8, sb: usize, n: usize, part: &mut [f32]) {
        let m = part.len();
        let pp = part.as_mut_ptr();
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        let hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        let mask = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        // SAFETY (all accesses): rows u < n hold m columns (the caller's contract); `pp`
        // holds m values.
        unsafe {
            let mut j = 0;
            while j < m {
                let (a, b) = (_mm512_loadu_ps(pp.add(j)), _mm512_loadu_ps(pp.add(j + 16)));
                _mm512_storeu_ps(pp.add(j), _mm512_permutex2var_ps(a, even, b));
                _mm512_storeu_ps(pp.add(j + 16), _mm512_permutex2var_ps(a, odd, b));
                j += 32;
            }
            let ld = |r: *const u8, j: usize| _mm512_loadu_si512(r.add(2 * j) as *const _);
            let ev = |v: __m512i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
            let od = |v: __m512i| _mm512_castsi512_ps(_mm512_and_si512(v, mask));
            // Eight rows per pass where eight rows of the strip fit in 32 KiB (measured at
            // `[4096, 1024]`, one thread: 85–95 → 78–80 µs; no faster over 8 KiB rows).
            let eight = m <= 2048;
            let mut u = 0;
            while eight && u + 8 <= n {
                let r0 = x.add(u * sb);
                let r: [*const u8; 8] = core::array::from_fn(|i| r0.add(i * sb));
                let mut j = 0;
                while j < m {
                    let l: [__m512i; 8] = core::array::from_fn(|i| ld(r[i], j));
                    let mut e = _mm512_loadu_ps(pp.add(j));
                    let mut o = _mm512_loadu_ps(pp.add(j + 16));
                    for v in l {
                        e = _mm512_add_ps(e, ev(v));
                        o = _mm512_add_ps(o, od(v));
                    }
                    _mm512_storeu_ps(pp.add(j), e);
                    _mm512_storeu_ps(pp.add(j + 16), o);
                    j += 32;
                }
                u += 8;
            }
            while u + 4 <= n {
                let r0 = x.add(u * sb);
                let (r1, r2, r3) = (r0.add(sb), r0.add(2 * sb), r0.add(3 * sb));
                let mut j = 0;
                while j < m {
                    let (v0, v1, v2, v3) = (ld(r0, j), ld(r1, j), ld(r2, j), ld(r3, j));
                    let mut e = _mm512_loadu_ps(pp.add(j));
                    let mut o = _mm512_loadu_ps(pp.add(j + 16));
                    e = _mm512_add_ps(e, ev(v0));
                    o = _mm512_add_ps(o, od(v0));
                    e = _mm512_add_ps(e, ev(v1));
                    o = _mm512_add_ps(o, od(v1));
                    e = _mm512_add_ps(e, ev(v2));
                    o = _mm512_add_ps(o, od(v2));
                    e = _mm512_add_ps(e, ev(v3));
                    o = _mm512_add_ps(o, od(v3));
                    _mm512_storeu_ps(pp.add(j), e);
                    _mm512_storeu_ps(pp.add(j + 16), o);
                    j += 32;
                }
                u += 4;
            }
            while u < n {
                let r0 = x.add(u * sb);
                let mut j = 0;
                while j < m {
                    let v = ld(r0, j);
                    let e = _mm512_add_ps(_mm512_loadu_ps(pp.add(j)), ev(v));
                    let o = _mm512_add_ps(_mm512_loadu_ps(pp.add(j + 16)), od(v));
                    _mm512_storeu_ps(pp.add(j), e);
                    _mm512_storeu_ps(pp.add(j + 16), o);
                    j += 32;
                }
                u += 1;
            }
            let mut j = 0;
            while j < m {
                let (e, o) = (_mm512_loadu_ps(pp.add(j)), _mm512_loadu_ps(pp.add(j + 16)));
                _mm512_storeu_ps(pp.add(j), _mm512_permutex2var_ps(e, lo, o));
                _mm512_storeu_ps(pp.add(j + 16), _mm512_permutex2var_ps(e, hi, o));
                j += 32;
            }
        }
    }

    /// `part[j] = (((part[j] + r0[j]) + r1[j]) + r2[j]) + r3[j]` for the vectors of columns
    /// `j0 .. m16` (`pp`: `part`'s first value).
    ///
    /// # Safety
    /// As [`sum_avx512`]: the rows hold those columns, `pp` holds `m16` values; AVX-512F.
    #[inline(always)]
    unsafe fn quad<const BF: bool>(r: [*const u8; 4], pp: *mut f32, j0: usize, m16: usize) {
        let [r0, r1, r2, r3] = r;
        let mut j = j0;
        // SAFETY: the caller's contract.
        unsafe {
            while j < m16 {
                let ld = |r: *const u8| {
                    if BF {
                        let v = _mm256_loadu_si256(r.add(2 * j) as *const __m256i);
                        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
                    } else {
                        _mm512_loadu_ps(r.add(4 * j) as *const f32)
                    }
                };
                let mut v = _mm512_loadu_ps(pp.add(j));
                v = _mm512_add_ps(v, ld(r0));
                v = _mm512_add_ps(v, ld(r1));
                v = _mm512_add_ps(v, ld(r2));
                v = _mm512_add_ps(v, ld(r3));
                _mm512_storeu_ps(pp.add(j), v);
                j += 16;
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// The register column sum of f32 rows (`sum_regs_f32`: groups of up to 16 vectors, a
    /// last vector over the row's last 16 columns) and the bf16 pair sum's single-vector
    /// head and tail columns (fewer than 16 on either side of its 32-column blocks) against
    /// a scalar sum of the same rows in order onto random starting values: fresh random
    /// bits (a clock seed) with NaN/±inf/-0.0 among them, 16 to 40 columns and wider ones
    /// (more than one group), 1 to 40 rows, row pitches of whole lines and not, start
    /// offsets inside a line. Equal bits (NaNs as NaNs).
    #[test]
    fn register_and_edge_sums_match_row_order() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let seed = crate::backend::cpu::clock_seed();
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let widths: Vec<usize> = (16..=40)
            .chain([63, 100, 255, 256, 257, 300, 301, 530])
            .collect();
        for &m in &widths {
            for pitch in [m, m.next_multiple_of(32), m + 5] {
                for n in (1..=40).filter(|n| n % 3 == 1 || *n == 37 || m < 24) {
                    let off = (next() % 34) as usize;
                    let len = off + n * pitch + 64;
                    let mut block = vec![0u64; len + 16];
                    let base = block.as_mut_ptr() as usize;
                    let lead = (64 - base % 64) % 64 / 4;
                    // SAFETY: `lead + len` f32 fit in the block (`lead` < 16; the block holds
                    // 2 (len + 16) f32).
                    let xs = unsafe {
                        std::slice::from_raw_parts_mut((base as *mut u32).add(lead), len)
                    };
                    for v in xs.iter_mut() {
                        let r = next();
                        *v = match r % 53 {
                            0 => 0x7FC0_0001,
                            1 => 0xFF80_0000,
                            2 => 0x7F80_0000,
                            3 => 0x8000_0000,
                            _ => ((r >> 20) as u32 & 0x3FFF_FFFF) | ((r as u32) & 0x8000_0000),
                        };
                    }
                    let init: Vec<f32> = (0..m).map(|_| (next() % 1000) as f32 - 500.0).collect();
                    let same = |got: &[f32], want: &[f32], what: &str| {
                        for (j, (g, w)) in got.iter().zip(want).enumerate() {
                            assert!(
                                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                                "{what} seed {seed} m {m} pitch {pitch} n {n} off {off} \
                                 column {j}: {g} vs {w}"
                            );
                        }
                    };
                    // `init` plus rows `0..n` of `at(u, j)` (row `u`, column `j`), in row order.
                    let row_order = |at: &dyn Fn(usize, usize) -> f32| {
                        let mut want = init.clone();
                        for u in 0..n {
                            for (j, w) in want.iter_mut().enumerate() {
                                *w += at(u, j);
                            }
                        }
                        want
                    };
                    let want = row_order(&|u, j| f32::from_bits(xs[off + u * pitch + j]));
                    let mut got = init.clone();
                    // SAFETY: AVX-512F detected; rows u < n hold m elements from `off`
                    // inside the slice; m >= 16.
                    unsafe {
                        super::x86::sum_regs_f32(
                            xs.as_ptr().add(off) as *const u8,
                            4 * pitch,
                            n,
                            &mut got,
                        )
                    };
                    same(&got, &want, "f32 registers");
                    // The same bits read as bf16 rows (the low halves of each word), pitch
                    // in bf16 elements.
                    // SAFETY: the slice's bytes as 2 len u16.
                    let hs =
                        unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const u16, 2 * len) };
                    let want =
                        row_order(&|u, j| f32::from_bits((hs[off + u * pitch + j] as u32) << 16));
                    let mut got = init.clone();
                    // SAFETY: as above, u16 rows inside the slice.
                    unsafe {
                        super::x86::sum_bf16_avx512(
                            hs.as_ptr().add(off) as *const u8,
                            2 * pitch,
                            n,
                            &mut got,
                        )
                    };
                    same(&got, &want, "bf16 pairs");
                }
            }
        }
    }

    /// The AVX-512 bf16 sum (32-column pair blocks, eight- and four-row passes, head and tail
    /// columns around them) against a scalar sum of the same
    /// rows in order, over start offsets of 0 to 33 elements inside a 64-byte line, row
    /// pitches of whole lines and not, ragged row counts and widths; bf16 inputs of random
    /// bits with NaN/±inf/-0.0 among them. Equal bits (NaNs as NaNs). The four-row passes run
    /// for 4–7 rows (`sum_avx512`), for the last 4–7 rows after the eight-row passes (12, 77
    /// rows), and over every row of pair blocks wider than 2048 columns (4133 columns). The
    /// same rows through `sum_bf16_tile_avx512` (from +0.0, its first, last and only passes
    /// of eight, four and one rows) against the scalar tile sum, alone and added into
    /// accumulators.
    #[test]
    fn bf16_pair_sum_matches_row_order_at_every_offset() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for &m in &[1usize, 15, 16, 31, 32, 33, 64, 100, 2053, 4133] {
            for pitch in [
                m,
                m.next_multiple_of(32),
                m.next_multiple_of(32) + 32,
                m + 7,
            ] {
                for &n in &[1usize, 3, 4, 7, 8, 9, 12, 17, 64, 77] {
                    for off in [0usize, 1, 7, 16, 24, 31, 33] {
                        // A 64-byte-aligned block: element `off` starts the rows.
                        let len = off + n * pitch + 64;
                        let mut block = vec![0u64; len.div_ceil(4) + 8];
                        let base = block.as_mut_ptr() as usize;
                        let lead = (64 - base % 64) % 64 / 2;
                        // SAFETY: `lead + len` u16 fit in the block (`lead` < 32, 32 spare).
                        let xs = unsafe {
                            std::slice::from_raw_parts_mut((base as *mut u16).add(lead), len)
                        };
                        for v in xs.iter_mut() {
                            let r = next();
                            *v = match r % 61 {
                                0 => 0x7FC1,
                                1 => 0xFF80,
                                2 => 0x7F80,
                                3 => 0x8000,
                                _ => ((r >> 16) as u16 & 0x3FFF) | ((r as u16) & 0x8000),
                            };
                        }
                        let init: Vec<f32> =
                            (0..m).map(|_| (next() % 1000) as f32 - 500.0).collect();
                        let mut want = init.clone();
                        for u in 0..n {
                            for (j, w) in want.iter_mut().enumerate() {
                                *w += f32::from_bits((xs[off + u * pitch + j] as u32) << 16);
                            }
                        }
                        let mut got = init.clone();
                        // SAFETY: AVX-512F detected; rows u < n hold m elements from `off`
                        // inside the slice.
                        unsafe {
                            super::x86::sum_bf16_avx512(
                                xs.as_ptr().add(off) as *const u8,
                                2 * pitch,
                                n,
                                &mut got,
                            )
                        };
                        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                                "m {m} pitch {pitch} n {n} off {off} column {j}: {g} vs {w}"
                            );
                        }
                        // The tile sum from +0.0 (`sum_tile`): its partial alone, and
                        // added into accumulators (`part` then scratch, filled with garbage
                        // first: the kernel must not read it).
                        let mut tile = vec![0.0f32; m];
                        for u in 0..n {
                            for (j, t) in tile.iter_mut().enumerate() {
                                *t += f32::from_bits((xs[off + u * pitch + j] as u32) << 16);
                            }
                        }
                        let folded: Vec<f32> = init.iter().zip(&tile).map(|(a, t)| a + t).collect();
                        let x = xs[off..].as_ptr() as *const u8;
                        // The machine's choice, then the odd columns' adds by FMA and by
                        // `vaddps` (`fma_odd`), whichever this CPU takes.
                        for fma in [None, Some(true), Some(false)] {
                            let tile_sum = |part: &mut [f32], acc: *mut f32| {
                                // SAFETY: AVX-512F detected; rows u < n hold m elements from
                                // `off` inside the slice; `acc` null or m floats apart from
                                // `part`.
                                unsafe {
                                    match fma {
                                        None => super::x86::sum_bf16_tile_avx512(
                                            x,
                                            2 * pitch,
                                            n,
                                            part,
                                            acc,
                                        ),
                                        Some(f) => super::x86::sum_bf16_tile_as(
                                            x,
                                            2 * pitch,
                                            n,
                                            part,
                                            acc,
                                            f,
                                        ),
                                    }
                                }
                            };
                            let mut part = vec![f32::NAN; m];
                            tile_sum(&mut part, std::ptr::null_mut());
                            let mut acc = init.clone();
                            let mut scratch: Vec<f32> = (0..m).map(|j| j as f32 - 7.5).collect();
                            tile_sum(&mut scratch, acc.as_mut_ptr());
                            for (what, got, want) in
                                [("tile", &part, &tile), ("fold", &acc, &folded)]
                            {
                                for (j, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                                    assert!(
                                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                                        "{what} (fma {fma:?}): m {m} pitch {pitch} n {n} off \
                                         {off} column {j}: {g} vs {w}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// `sum_f32_tile_avx512` and `sum_bf16_tile_avx512` (passes of one, four and eight rows
    /// from zero registers, head and tail columns from a zero-filled `part`) against a scalar
    /// sum from +0.0 of the same rows in order, at start offsets inside a 64-byte line and row
    /// pitches of whole lines and not, where every third column holds only -0.0: its partial
    /// must be +0.0 (`+0.0 + -0.0`; a start from -0.0 or from the first row gives -0.0), and
    /// added into accumulators that hold -0.0 among other values, +0.0 again. Other columns
    /// random with NaN/±inf/-0.0 among them. Equal bits (NaNs as NaNs).
    #[test]
    fn tile_sums_start_from_positive_zero() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for bf16 in [false, true] {
            let size = if bf16 { 2 } else { 4 };
            for &m in &[1usize, 16, 33, 64, 100, 2053] {
                for pitch in [m, m.next_multiple_of(32), m + 7] {
                    for &n in &[1usize, 4, 5, 8, 9, 13, 64] {
                        for off in [0usize, 1, 7, 16] {
                            let len = off + n * pitch + 64;
                            // `len` elements from `off` past a 64-byte line in the block.
                            let mut block = vec![0u64; (len * size).div_ceil(8) + 8];
                            let base = block.as_mut_ptr() as usize;
                            let at = base + (64 - base % 64) % 64 + off * size;
                            let mut vals = vec![0.0f32; len - off];
                            for (i, v) in vals.iter_mut().enumerate() {
                                let r = next();
                                *v = if i % pitch < m && (i % pitch) % 3 == 0 {
                                    -0.0
                                } else {
                                    match r % 41 {
                                        0 => f32::NAN,
                                        1 => f32::NEG_INFINITY,
                                        2 => -0.0,
                                        _ => (r >> 40) as f32 / 4096.0 - 2048.0,
                                    }
                                };
                                if bf16 {
                                    // Exactly representable: the high half of the bits.
                                    *v = f32::from_bits(v.to_bits() & 0xFFFF_0000);
                                }
                            }
                            // SAFETY: the block holds at least `len · size + 64` bytes and
                            // `at` is at most `63 + off · size` bytes into it.
                            unsafe {
                                for (i, v) in vals.iter().enumerate() {
                                    if bf16 {
                                        *((at as *mut u16).add(i)) = (v.to_bits() >> 16) as u16;
                                    } else {
                                        *((at as *mut f32).add(i)) = *v;
                                    }
                                }
                            }
                            let mut tile = vec![0.0f32; m];
                            for u in 0..n {
                                for (j, t) in tile.iter_mut().enumerate() {
                                    *t += vals[u * pitch + j];
                                }
                            }
                            let init: Vec<f32> = (0..m)
                                .map(|j| if j % 2 == 0 { -0.0 } else { j as f32 - 9.5 })
                                .collect();
                            let folded: Vec<f32> =
                                init.iter().zip(&tile).map(|(a, t)| a + t).collect();
                            // bf16: the machine's choice, then the odd columns' adds by
                            // FMA and by `vaddps` (`fma_odd`).
                            for fma in [None, Some(true), Some(false)] {
                                let run = |part: &mut [f32], acc: *mut f32| {
                                    let x = at as *const u8;
                                    // SAFETY: AVX-512F detected; rows u < n hold m elements
                                    // from `at`; `acc` null or m floats apart from `part`.
                                    unsafe {
                                        match (bf16, fma) {
                                            (true, None) => super::x86::sum_bf16_tile_avx512(
                                                x,
                                                2 * pitch,
                                                n,
                                                part,
                                                acc,
                                            ),
                                            (true, Some(f)) => super::x86::sum_bf16_tile_as(
                                                x,
                                                2 * pitch,
                                                n,
                                                part,
                                                acc,
                                                f,
                                            ),
                                            _ => super::x86::sum_f32_tile_avx512(
                                                x,
                                                4 * pitch,
                                                n,
                                                part,
                                                acc,
                                            ),
                                        }
                                    }
                                };
                                let mut part = vec![f32::NAN; m];
                                run(&mut part, std::ptr::null_mut());
                                let mut acc = init.clone();
                                let mut scratch = vec![-0.0f32; m];
                                run(&mut scratch, acc.as_mut_ptr());
                                for (what, got, want) in
                                    [("tile", &part, &tile), ("fold", &acc, &folded)]
                                {
                                    for (j, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                                        assert!(
                                            g.to_bits() == w.to_bits()
                                                || (g.is_nan() && w.is_nan()),
                                            "{what} (fma {fma:?}): bf16 {bf16} m {m} pitch \
                                             {pitch} n {n} off {off} column {j}: {g:?} vs {w:?}"
                                        );
                                    }
                                }
                            }
                            drop(block);
                        }
                    }
                }
            }
        }
    }
}
