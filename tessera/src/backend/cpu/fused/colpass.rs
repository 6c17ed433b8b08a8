//! The whole-launch pass of a column reduction: before a launch's programs run, each
//! column's accumulator after the whole loop is computed for all the tensor's columns at
//! once, walking whole tensor rows (sequential reads) instead of each program's `BC`-column
//! strip of every row (short runs 4 KiB or more apart, which the hardware prefetchers follow
//! poorly). Per column it is what a program's loop computes (`super::colreduce`): the
//! accumulator starts at the reduction's identity and, for each `rows`-row tile in order,
//! takes `acc = acc ⊕ part`, `part` the identity combined with the tile's rows in order
//! (`other` for rows past the tensor). On several threads the tiles are split into runs,
//! [`RUNS`] per thread: the first run folds its tiles into the accumulators as it goes, the
//! others keep each tile's partial in a table, folded in tile order as the runs finish
//! (see [`fill`]). A program whose loop is the one folded here (its row index the loop counter
//! from 0 in steps of the tile height over every tile, its accumulator starting at the
//! identity: `colreduce::folded` checks) copies its columns' accumulators instead of
//! running the loop, so every operation and its order per column are the interpreter's.
//!
//! The accumulators and partials are laid out so that a vector of them starts at a cache line
//! where a vector of the tensor's row does (`super::colreduce::combine` starts its vectors at
//! the first such column, so neither its loads nor its stores split a cache line).

use super::colreduce::{ColReduce, max_nan};
use crate::backend::Buffer;
use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tessera_ir::tile::TileReduce;

thread_local! {
    /// The launching thread's accumulators and partials, reused across launches.
    static TABLE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Columns per strip of an f32 tensor's pass (8 KiB of partials and 8 KiB of each row: the
/// partials and a pass's four row segments fit in L1 together; measured at `[1024, 4096]`,
/// one thread, the fastest launch of each of 25 rounds: 153–166 µs against 169–180 for strips of
/// 4096, whose 16 KiB of partials and 64 KiB of rows per pass do not).
///
/// On a 2-vCPU KVM Intel Xeon (family 6 model 207: L1D 48 KiB, L2 2 MiB; 2026-11-27, cm17)
/// this pass at `[1024, 4096]` reads as fast as a plain sequential AVX-512 read of the same
/// 16 MiB, so there the 16 KiB rows cost nothing and no reordering has room: `RAYON_NUM_THREADS=T
/// chrt -f 50 cpu_profile col_mean 1024 4096 300 --pool`, fastest launch, 19:45 UTC, load 4.3:
/// one thread 628–645 µs, two 349–353, against 620–666 and 328–359 for the read (a C loop of
/// eight accumulators, its halves on two threads) and 628–664 for this access order emulated in
/// the same C (`[4096, 1024]`: 593–635 µs, one thread). Tried on the pass itself, one thread,
/// three interleaved rounds, 19:57 UTC, load 18–21 (two-thread rounds there timed the scheduler):
/// these strips 667–689 µs (`main` 689–717), strips of 1024 666–695, of 4096 710–727, eight rows
/// per pass 675–726 (`[8192, 4096]`: 9.2–10.6 ms against 10.2–10.9, no clear gain), a T0
/// software prefetch of the rows 4 or 8 ahead 753–886 (also slower in the C read: the hardware
/// prefetchers already keep up); none kept.
const STRIP: usize = 2048;

/// Columns per strip of a bf16 tensor's pass (4 KiB of each row: eight rows per pass of
/// `colreduce`'s bf16 sum fit in L1; measured at `[1024, 4096]`, one thread: 97–98 → 86 µs
/// against strips of 4096, 84–88 at 1024).
const STRIP_BF16: usize = 2048;

/// Runs of tiles per thread of a multi-thread pass: one, a contiguous share of the rows per
/// thread (two threads, `chrt -f 50`, fastest launch, `[1024, 4096]` bf16 sum 61–63 µs with
/// four runs per thread against 50–60 with one; the runs after the first write every tile's
/// partial to the table and the launching thread folds what is left after the join, so
/// fewer runs write and fold less; splitting the columns among the threads instead, each
/// walking every row's share, measured slower: 63–77 µs for 2048-column halves).
const RUNS: usize = 1;

/// The largest tensor, in bytes, whose whole tiles [`tile_sum`] takes: the last-level cache.
/// Beyond it the tile sums from zero measured slower than filling, permuting and folding
/// `part` around [`super::colreduce::combine`] (`[8192, 4096]` bf16, one thread, 64 MiB:
/// 1.81–1.92 → 1.94–2.06 ms, five interleaved rounds; starting from zero with a separate
/// fold, 1.97–2.16 ms), while inside it they measured faster (`[1024, 4096]` bf16, one
/// thread: 85 → 82 µs). The cause was not found.
fn from_zero_max() -> usize {
    crate::backend::cpu::cache::last_level_bytes()
}

/// Tensors of fewer elements than this run the pass on the calling thread.
const PAR_MIN: usize = 1 << 16;

/// The folded accumulators of one launch: `cols` f32, column `j` the fold over every
/// `rows`-row tile of parameter `param` (an `[r, cols]` tensor), in tile order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts {
    ptr: usize,
    param: usize,
    /// The tensor's buffer address (the table is of this tensor only).
    data: usize,
    r: usize,
    cols: usize,
    rows: usize,
}

impl Parts {
    /// How many tiles the pass folded: `r / rows` rounded up.
    pub(crate) fn blocks(&self) -> usize {
        self.r.div_ceil(self.rows)
    }

    /// The folded accumulators of columns `c0 .. c0 + n` of `buf` for reduction `c`, when the
    /// table is of that tensor and tile height and the columns lie inside the tensor.
    pub(crate) fn part_of(&self, c: &ColReduce, buf: &Buffer, c0: i64, n: usize) -> Option<&[f32]> {
        let ok = c.param == self.param
            && buf.ptr as usize == self.data
            && c.rows == self.rows
            && c0 >= 0
            && c0 as usize + n <= self.cols;
        // SAFETY: the table holds `cols` accumulators from `ptr` (`with`), columns inside
        // `cols` (checked); it lives until the launch that made it returns.
        ok.then(|| unsafe {
            std::slice::from_raw_parts((self.ptr as *const f32).add(c0 as usize), n)
        })
    }
}

/// Whether a launch of `c` on `args` runs the pass (see [`with`]): a rank-2 index, a
/// contiguous `[r, cols]` input of more columns than one program's tile, more than one
/// program.
fn shaped(c: &ColReduce, args: &[Buffer], total: usize) -> bool {
    let buf = &args[c.param];
    let dims = buf.dims();
    let size = if c.bf16 { 2 } else { 4 };
    dims.len() == 2
        && total > 1
        && dims[0] > 0
        && dims[1] > c.cols
        && dims[0] * dims[1] * size == buf.len
        && c.idx.len() == 2
}

/// Computes the folded accumulators for a launch of `total` programs whose plan has the one
/// column reduction `c` (see the module docs) and runs `f` with them (`None`: no pass, the
/// programs read their rows themselves).
pub(crate) fn with<R>(
    c: &ColReduce,
    args: &[Buffer],
    total: usize,
    f: impl FnOnce(Option<Parts>) -> R,
) -> R {
    if !shaped(c, args, total) {
        return f(None);
    }
    let buf = &args[c.param];
    let (r, cols) = (buf.dims()[0], buf.dims()[1]);
    let blocks = r.div_ceil(c.rows);
    let threads = rayon::current_num_threads();
    let runs = if threads == 1 || r * cols < PAR_MIN {
        1
    } else {
        (RUNS * threads).min(blocks)
    };
    let per = blocks.div_ceil(runs);
    let runs = blocks.div_ceil(per);
    // Rows of the table, `stride` floats apart: the accumulators, run 0's partial strip, then
    // the partials of the tiles of runs 1 and on.
    let stride = cols.next_multiple_of(16);
    let len = 16 + stride * (2 + blocks - per);
    TABLE.with(|t| match t.try_borrow_mut() {
        Ok(mut t) => {
            if t.len() < len {
                t.resize(len, 0.0);
            }
            // The first float whose offset within 64 bytes is the tensor's first element's.
            let size = if c.bf16 { 2 } else { 4 };
            let phase = (buf.ptr as usize % (16 * size)) / size;
            let base = t.as_mut_ptr() as usize;
            let skip = (phase + 16 - (base / 4) % 16) % 16;
            let l = Layout {
                base: base + 4 * skip,
                stride,
                per,
                r,
                cols,
            };
            fill(c, buf, &l, runs);
            f(Some(Parts {
                ptr: l.base,
                param: c.param,
                data: buf.ptr as usize,
                r,
                cols,
                rows: c.rows,
            }))
        }
        Err(_) => f(None),
    })
}

/// Where the pass writes (see `with`): addresses, so the runs can share it.
#[derive(Clone, Copy)]
struct Layout {
    /// The accumulators' first float; run 0's partial strip is the next row, the partials of
    /// tile `per + i` row `2 + i`.
    base: usize,
    stride: usize,
    /// Tiles per run.
    per: usize,
    r: usize,
    cols: usize,
}

impl Layout {
    /// `n` floats of table row `row` from column `j`.
    ///
    /// # Safety
    /// `row` and `j + n` inside the table `with` sized; no other live slice of them.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, row: usize, j: usize, n: usize) -> &mut [f32] {
        unsafe {
            std::slice::from_raw_parts_mut((self.base as *mut f32).add(row * self.stride + j), n)
        }
    }
}

/// Runs the pass: `runs` runs of `per` tiles (rayon's threads take them); run 0 folds its
/// tiles into the accumulators as it goes, the others write their tiles' partials. The fold
/// of the other runs' partials moves forward in run order as they finish: a run that finishes
/// folds every finished run after the last folded one, unless another run is doing so (then
/// the one folding may miss it: the launching thread folds whatever is left after the join).
fn fill(c: &ColReduce, buf: &Buffer, l: &Layout, runs: usize) {
    let blocks = l.r.div_ceil(c.rows);
    // SAFETY: row 0 of the table (`with` sized it), nothing else uses it yet.
    unsafe { l.row(0, 0, l.cols) }.fill(identity(c.op));
    // Run `i`'s tiles: run 0 folds them into the accumulators as it goes, the others write
    // their partials.
    let tiles = |i: usize| {
        for k in i * l.per..((i + 1) * l.per).min(blocks) {
            let w = if c.bf16 { STRIP_BF16 } else { STRIP };
            for j in (0..l.cols).step_by(w) {
                let n = w.min(l.cols - j);
                if i == 0 {
                    // SAFETY: rows 0 and 1 are run 0's only until it is done (runs write
                    // disjoint rows; the fold reads row 0 after run 0 is done).
                    let (acc, part) = unsafe { (l.row(0, j, n), l.row(1, 0, n)) };
                    if !tile_sum(c, buf, l, k, j, part, Some(&mut *acc)) {
                        strip(c, buf, l, k, j, part);
                        fold(c.op, acc, part);
                    }
                } else {
                    // SAFETY: tile k's row is run i's only until it is done.
                    let part = unsafe { l.row(2 + k - l.per, j, n) };
                    if !tile_sum(c, buf, l, k, j, part, None) {
                        strip(c, buf, l, k, j, part);
                    }
                }
            }
        }
    };
    // One run (one thread, or a tensor under `PAR_MIN`) folds every tile itself: no
    // bookkeeping of finished runs (whose `Vec` was a heap allocation per launch; a small
    // launch's share of its gain is not separated from `colreduce`'s register and edge sums,
    // measured with it: see `colreduce::REGS_MAX`).
    if runs == 1 {
        return tiles(0);
    }
    let done: Vec<AtomicBool> = (0..runs).map(|_| AtomicBool::new(false)).collect();
    // How many runs are folded into the accumulators.
    let folded = Mutex::new(0usize);
    let advance = |f: &mut usize| {
        while *f < runs && done[*f].load(Ordering::Acquire) {
            // Run 0 folded its own tiles.
            for k in (*f * l.per..((*f + 1) * l.per).min(blocks)).filter(|_| *f > 0) {
                // SAFETY: run 0 is done (no other writer of row 0: the fold holds `folded`),
                // and so is the run of tile k (its row is complete: `done` was stored with
                // release and loaded with acquire).
                let (acc, part) = unsafe { (l.row(0, 0, l.cols), l.row(2 + k - l.per, 0, l.cols)) };
                fold(c.op, acc, part);
            }
            *f += 1;
        }
    };
    let go = |i: usize| {
        tiles(i);
        done[i].store(true, Ordering::Release);
        if let Ok(mut f) = folded.try_lock() {
            advance(&mut f);
        }
    };
    use rayon::prelude::*;
    (0..runs).into_par_iter().for_each(go);
    advance(&mut folded.lock().unwrap_or_else(|e| e.into_inner()));
}

/// The reduction's identity.
pub(crate) fn identity(op: TileReduce) -> f32 {
    match op {
        TileReduce::Sum => 0.0,
        TileReduce::Max => f32::NEG_INFINITY,
    }
}

/// `acc[j] = acc[j] ⊕ part[j]` (`+`, or [`max_nan`] for a max), built with AVX-512F where
/// it is active (16 columns per add instead of baseline SSE's 4; the same add per column).
fn fold(op: TileReduce, acc: &mut [f32], part: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512 {
        // SAFETY: the active level is at most the detected one: AVX-512F is present.
        return unsafe { fold_avx512(op, acc, part) };
    }
    fold_body(op, acc, part)
}

/// [`fold_body`] built with AVX-512F.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fold_avx512(op: TileReduce, acc: &mut [f32], part: &[f32]) {
    fold_body(op, acc, part)
}

#[inline(always)]
fn fold_body(op: TileReduce, acc: &mut [f32], part: &[f32]) {
    match op {
        TileReduce::Sum => acc.iter_mut().zip(part).for_each(|(a, p)| *a += *p),
        TileReduce::Max => acc
            .iter_mut()
            .zip(part)
            .for_each(|(a, p)| *a = max_nan(*a, *p)),
    }
}

/// [`strip`] for a sum whose tile `k` lies inside the tensor (no rows past it), and with
/// `acc` then [`fold`] into it, in one call of `colreduce::sum_tile` (the same adds in the
/// same order per column; `part` is then scratch): no fill of `part` (for bf16 no permute of
/// it on entry), no separate fold. `false` (nothing done) for a max, a tile with rows past
/// the tensor, a tensor larger than the last-level cache ([`from_zero_max`]), or below the
/// AVX-512 level.
fn tile_sum(
    c: &ColReduce,
    buf: &Buffer,
    l: &Layout,
    k: usize,
    j0: usize,
    part: &mut [f32],
    acc: Option<&mut [f32]>,
) -> bool {
    let u0 = k * c.rows;
    if c.op != TileReduce::Sum || u0 + c.rows > l.r || buf.len > from_zero_max() {
        return false;
    }
    let at = u0 * l.cols + j0;
    // SAFETY: rows u0..u0 + c.rows (inside the tensor: checked) and columns j0..j0 +
    // part.len() of the `[r, cols]` tensor (its length checked in `shaped`); loaded tensors
    // are not written during a launch; `acc` is as long as `part` (`go`).
    unsafe { super::colreduce::sum_tile(c.bf16, buf, at, l.cols, c.rows, part, acc) }
}

/// `part` (`part.len()` columns from `j0`) = the partial of tile `k`: the identity combined
/// with its rows in order, then `other` for each row past the tensor (combined once where
/// that gives the same bits: `colreduce::repeats`).
fn strip(c: &ColReduce, buf: &Buffer, l: &Layout, k: usize, j0: usize, part: &mut [f32]) {
    let u0 = k * c.rows;
    let n = c.rows.min(l.r - u0);
    part.fill(identity(c.op));
    let at = u0 * l.cols + j0;
    // The rows are read without a software prefetch, for any tensor (`colreduce` has none;
    // measured at `[8192, 4096]` bf16, one thread: four-row passes prefetching the rows 8 on
    // into L2, 2.29–2.47 ms; eight-row passes with that prefetch, 2.12–2.28 ms; without it,
    // 1.84–2.01 ms).
    // SAFETY: rows u0..u0 + n and columns j0..j0 + part.len() lie inside the `[r, cols]`
    // tensor (its length checked in `shaped`); loaded tensors are not written during a launch.
    unsafe { super::colreduce::combine(c, buf, at, l.cols, n, part) };
    // The rows past the tensor each combine `other` into every column (once where that is
    // idempotent: `colreduce::repeats`).
    let pad = super::colreduce::repeats(c.op, c.other, c.rows - n);
    match c.op {
        TileReduce::Sum => (0..pad).for_each(|_| part.iter_mut().for_each(|v| *v += c.other)),
        TileReduce::Max => {
            (0..pad).for_each(|_| part.iter_mut().for_each(|v| *v = max_nan(*v, c.other)))
        }
    }
}
