//! Software prefetch of the operand chunk a GEMM packs next, spread over the micro-tiles
//! of the block it computes now.
//!
//! With few rows of `A`, packing a chunk of `B` is a pass over memory that the packed
//! micro-kernels wait for; issuing its loads into L2 while the previous chunk computes
//! overlaps the two.

/// A strided region (`rows` rows of `row_bytes` bytes, `stride` bytes apart) to prefetch.
#[derive(Clone, Copy)]
pub(crate) struct Ahead {
    base: *const u8,
    rows: usize,
    row_bytes: usize,
    stride: usize,
}

impl Ahead {
    /// The region of `rows × cols` elements of `T` at `base` with row stride `ld` elements.
    /// Only addresses are formed: nothing is read through them.
    pub(crate) fn new<T>(base: *const T, rows: usize, cols: usize, ld: usize) -> Self {
        let size = std::mem::size_of::<T>();
        Ahead {
            base: base as *const u8,
            rows,
            row_bytes: cols * size,
            stride: ld * size,
        }
    }

    /// Nothing to prefetch.
    pub(crate) const NONE: Ahead = Ahead {
        base: std::ptr::null(),
        rows: 0,
        row_bytes: 0,
        stride: 0,
    };

    /// Prefetch part `t` of `parts` (a contiguous range of rows) into L2.
    #[inline(always)]
    pub(crate) fn part(&self, t: usize, parts: usize) {
        if self.rows == 0 || self.row_bytes == 0 {
            return;
        }
        let (r0, r1) = (t * self.rows / parts, (t + 1) * self.rows / parts);
        for r in r0..r1 {
            let row = self.base.wrapping_add(r * self.stride);
            let first = row as usize & !63;
            let last = (row as usize + self.row_bytes - 1) & !63;
            let mut line = first;
            while line <= last {
                prefetch_l2(line as *const u8);
                line += 64;
            }
        }
    }
}

impl Ahead {
    /// The walk over the cache lines of part `t` of `parts` (as [`Ahead::part`]), to be
    /// issued a few at a time over `steps` calls of [`Walk::step`]; an empty walk when
    /// `t >= parts`.
    #[inline(always)]
    pub(crate) fn walk(&self, t: usize, parts: usize, steps: usize) -> Walk {
        if t >= parts || self.rows == 0 || self.row_bytes == 0 {
            return Walk::NONE;
        }
        let (r0, r1) = (t * self.rows / parts, (t + 1) * self.rows / parts);
        if r0 == r1 {
            return Walk::NONE;
        }
        let row = self.base.wrapping_add(r0 * self.stride) as usize;
        let (line, end) = (row & !63, (row + self.row_bytes - 1) & !63);
        let lines = (r1 - r0) * ((end - line) / 64 + 1);
        Walk {
            row,
            line,
            end,
            row_bytes: self.row_bytes,
            stride: self.stride,
            rows: r1 - r0,
            per: lines.div_ceil(steps.max(1)),
        }
    }
}

/// The cache lines of some rows of an [`Ahead`] region, prefetched into L2 in order a few
/// per [`Walk::step`] (a micro-kernel steps it once per unrolled k iteration, so the
/// requests reach memory spread over the tile's run instead of in one burst).
#[derive(Clone, Copy)]
pub(crate) struct Walk {
    /// The current row's first byte.
    row: usize,
    /// The next line to prefetch.
    line: usize,
    /// The current row's last line.
    end: usize,
    row_bytes: usize,
    stride: usize,
    /// Rows left, the current one included.
    rows: usize,
    /// Lines per step.
    per: usize,
}

impl Walk {
    /// Nothing to prefetch.
    pub(crate) const NONE: Walk = Walk {
        row: 0,
        line: 0,
        end: 0,
        row_bytes: 0,
        stride: 0,
        rows: 0,
        per: 0,
    };

    /// Prefetch the next `per` lines (fewer at the end).
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        for _ in 0..self.per {
            if self.rows == 0 {
                return;
            }
            prefetch_l2(self.line as *const u8);
            if self.line == self.end {
                self.rows -= 1;
                self.row = self.row.wrapping_add(self.stride);
                self.line = self.row & !63;
                self.end = (self.row + self.row_bytes - 1) & !63;
            } else {
                self.line += 64;
            }
        }
    }

    /// Prefetch every line left.
    #[inline(always)]
    pub(crate) fn rest(&mut self) {
        while self.rows > 0 {
            self.per = usize::MAX;
            self.step();
        }
    }
}

/// Prefetch the `rows × cols` elements of `T` at `p` (row stride `ld` elements), a C tile
/// that a micro-kernel reads later, into L1 (`l1`) or L2. Only addresses are formed.
#[inline(always)]
pub(crate) fn tile<T>(p: *const T, rows: usize, cols: usize, ld: usize, l1: bool) {
    let size = std::mem::size_of::<T>();
    for r in 0..rows {
        let row = p.wrapping_add(r * ld) as usize;
        let (first, last) = (row & !63, (row + cols * size - 1) & !63);
        let mut line = first;
        while line <= last {
            if l1 {
                prefetch_l1(line as *const u8);
            } else {
                prefetch_l2(line as *const u8);
            }
            line += 64;
        }
    }
}

/// Ask for the cache line at `p` in L1 (a hint: never faults, reads nothing).
#[inline(always)]
fn prefetch_l1(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as `prefetch_l2`.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for the cache line at `p` in L2 (a hint: never faults, reads nothing).
#[inline(always)]
fn prefetch_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that does not access memory architecturally (SSE is
    // part of the x86_64 baseline).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
