//! The whole-launch pass of a column reduction: before a launch's programs run, the partial
//! of every `rows`-row tile (`part` of [`super::colreduce`], from the identity over the tile's
//! rows, `other` for rows past the tensor) is computed for all the tensor's columns at once,
//! walking whole tensor rows (sequential reads) instead of each program's `BC`-column strip
//! of every row (short runs 4 KiB or more apart, which the hardware prefetchers follow
//! poorly), runs of tile rows split among threads. A program's iteration whose tile starts at a multiple of `rows` then copies its
//! columns' partials from the table ([`Parts::part`]) and adds them into its accumulator as
//! before, so every operation and its order per column are the interpreter's.

use super::colreduce::{ColReduce, max_nan};
use crate::backend::Buffer;
use std::cell::RefCell;
use tessera_ir::tile::TileReduce;

thread_local! {
    /// The launching thread's partials table, reused across launches.
    static TABLE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows ahead the pass prefetches in a bf16 tensor beyond the last-level cache (two passes of
/// four rows).
const AHEAD: usize = 8;

/// Columns per strip of the pass (16 KiB of f32 partials: the strip stays in L1).
const STRIP: usize = 4096;

/// The partials of one launch: `blocks × cols` f32, block `k` the tile of rows
/// `k · rows ..` of parameter `param` (an `[r, cols]` tensor).
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
    /// The partials of columns `c0 .. c0 + n` of the tile whose first row is `r0` (its
    /// window `w.r.0 == 0` in the caller's terms), when the table holds that tile: `r0` a
    /// multiple of the tile height inside the tensor, the columns inside the tensor.
    pub(crate) fn part(
        &self,
        c: &ColReduce,
        buf: &Buffer,
        r0: i64,
        c0: i64,
        n: usize,
    ) -> Option<&[f32]> {
        let ok = c.param == self.param
            && buf.ptr as usize == self.data
            && c.rows == self.rows
            && r0 >= 0
            && (r0 as usize) < self.r
            && (r0 as usize).is_multiple_of(self.rows)
            && c0 >= 0
            && c0 as usize + n <= self.cols;
        if !ok {
            return None;
        }
        let at = r0 as usize / self.rows * self.cols + c0 as usize;
        // SAFETY: the table holds `blocks · cols` values (`run`), block `r0 / rows` <
        // `blocks`, columns inside `cols`; it lives until the launch that made it returns.
        Some(unsafe { std::slice::from_raw_parts((self.ptr as *const f32).add(at), n) })
    }
}

/// Computes the table for a launch of `total` programs whose plan has the one column
/// reduction `c` (see the module docs) and runs `f` with it (`None`: no pass, the programs
/// read their rows themselves).
pub(crate) fn with<R>(
    c: &ColReduce,
    args: &[Buffer],
    total: usize,
    f: impl FnOnce(Option<Parts>) -> R,
) -> R {
    let buf = &args[c.param];
    let dims = buf.dims();
    let size = if c.bf16 { 2 } else { 4 };
    // Only when the programs split the columns (one program already walks whole rows).
    let shaped = dims.len() == 2
        && total > 1
        && dims[0] > 0
        && dims[1] > c.cols
        && dims[0] * dims[1] * size == buf.len
        && c.idx.len() == 2;
    if !shaped {
        return f(None);
    }
    let (r, cols) = (dims[0], dims[1]);
    let blocks = r.div_ceil(c.rows);
    TABLE.with(|t| match t.try_borrow_mut() {
        Ok(mut t) => {
            if t.len() < blocks * cols {
                t.resize(blocks * cols, 0.0);
            }
            let p = Parts {
                ptr: t.as_mut_ptr() as usize,
                param: c.param,
                data: buf.ptr as usize,
                r,
                cols,
                rows: c.rows,
            };
            fill(c, buf, &p);
            f(Some(p))
        }
        Err(_) => f(None),
    })
}

/// Fills the table: runs of blocks (tile rows) split among rayon's threads, four runs per
/// thread (a late thread's share is taken by the others), each run walking its rows whole,
/// in strips of at most [`STRIP`] columns.
fn fill(c: &ColReduce, buf: &Buffer, p: &Parts) {
    let blocks = p.r.div_ceil(p.rows);
    let threads = rayon::current_num_threads();
    let per = if threads == 1 || p.r * p.cols < 1 << 16 {
        blocks
    } else {
        blocks.div_ceil(4 * threads)
    };
    let go = |i: usize| {
        for k in i * per..((i + 1) * per).min(blocks) {
            for j in (0..p.cols).step_by(STRIP) {
                strip(c, buf, p, k, j, (j + STRIP).min(p.cols));
            }
        }
    };
    let n = blocks.div_ceil(per);
    if n == 1 {
        go(0);
    } else {
        use rayon::prelude::*;
        (0..n).into_par_iter().for_each(go);
    }
}

/// Columns `j0 .. j1` of block `k` of the table.
fn strip(c: &ColReduce, buf: &Buffer, p: &Parts, k: usize, j0: usize, j1: usize) {
    let id = match c.op {
        TileReduce::Sum => 0.0,
        TileReduce::Max => f32::NEG_INFINITY,
    };
    let u0 = k * p.rows;
    let n = p.rows.min(p.r - u0);
    // SAFETY: block k < blocks, columns j0..j1 ≤ cols of the table (`with`), which no
    // other thread writes (threads take disjoint blocks).
    let part = unsafe {
        std::slice::from_raw_parts_mut((p.ptr as *mut f32).add(k * p.cols + j0), j1 - j0)
    };
    part.fill(id);
    let at = u0 * p.cols + j0;
    // A bf16 tensor past the LLC: the rows two passes on are prefetched into L2 (measured at
    // `[8192, 4096]`, one thread: 2.8–3.3 → 2.2–2.6 ms; an f32 one measured both faster and
    // slower, an L3-resident one slower).
    let ahead = if c.bf16 && buf.len > crate::backend::cpu::cache::last_level_bytes() {
        AHEAD
    } else {
        0
    };
    // SAFETY: rows u0..u0 + n and columns j0..j1 lie inside the `[r, cols]` tensor (its
    // length checked in `with`; rows to `r` prefetched); loaded tensors are not written
    // during a launch.
    unsafe { super::colreduce::combine(c, buf, at, p.cols, n, part, ahead, p.r - u0) };
    match c.op {
        TileReduce::Sum => (n..p.rows).for_each(|_| part.iter_mut().for_each(|v| *v += c.other)),
        TileReduce::Max => {
            (n..p.rows).for_each(|_| part.iter_mut().for_each(|v| *v = max_nan(*v, c.other)))
        }
    }
}
