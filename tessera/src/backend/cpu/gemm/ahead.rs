//! Software prefetch and packing of the operand chunk a GEMM packs next, spread over the
//! micro-tiles of the block it computes now, and prefetch of C tiles.
//!
//! With few rows of `A`, packing a chunk of `B` is a pass over memory that the packed
//! micro-kernels wait for; issuing its loads into L2 a little ahead ([`Walk`]) and copying
//! it into its packed layout ([`Copy16`]) inside the micro-kernels' k loops overlaps the
//! two (see `driver::Pipe`).
use crate::backend::cpu::prefetch;

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
                prefetch::l2(line as *const u8);
                line += 64;
            }
        }
    }

    /// The walk over the cache lines of part `t` of `parts` (rows `t·rows/parts ..
    /// (t+1)·rows/parts`), to be issued a few at a time over `steps` calls of
    /// [`Walk::step`]; an empty walk when `t >= parts`.
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
            prefetch::l2(self.line as *const u8);
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
                prefetch::l1(line as *const u8);
            } else {
                prefetch::l2(line as *const u8);
            }
            line += 64;
        }
    }
}

/// Rows `p0..p1` of the full `NR`-column panels of a `kc × nc` chunk of `B` (in place, row
/// stride `ldb`) copied into their places in its packed layout (`pack::pack_b`), sixteen
/// floats per unit, a few units per [`Copy16::step`]: a micro-kernel steps it once per
/// unrolled k iteration, so the packing of the next chunk runs inside its loop.
#[derive(Clone, Copy)]
pub(crate) struct Copy16 {
    /// The next unit's source and destination.
    src: *const f32,
    dst: *mut f32,
    /// The current row's first unit, source and destination.
    src_row: *const f32,
    dst_row: *mut f32,
    /// Units left in the current row, and per row.
    left: usize,
    units: usize,
    /// Units left in the current panel row, and per panel row (`NR / 16`).
    in_panel: usize,
    per_panel: usize,
    /// Destination distance from a panel row's last unit to the next panel's first.
    jump: usize,
    ldb: usize,
    nr: usize,
    /// Rows left, the current one included.
    rows: usize,
    /// Units per step.
    per: usize,
}

impl Copy16 {
    /// Nothing to copy.
    pub(crate) const NONE: Copy16 = Copy16 {
        src: std::ptr::null(),
        dst: std::ptr::null_mut(),
        src_row: std::ptr::null(),
        dst_row: std::ptr::null_mut(),
        left: 0,
        units: 0,
        in_panel: 0,
        per_panel: 0,
        jump: 0,
        ldb: 0,
        nr: 0,
        rows: 0,
        per: 0,
    };

    /// The copy of rows `p0..p1` of the `full` full panels (`nr` columns each, a multiple
    /// of 16) of the chunk at `src` (row stride `ldb`, depth `kc`) packed at `dst`, spread
    /// over `steps` steps. Only addresses are formed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        src: *const f32,
        dst: *mut f32,
        (p0, p1): (usize, usize),
        full: usize,
        ldb: usize,
        kc: usize,
        nr: usize,
        steps: usize,
    ) -> Self {
        let units = full * nr / 16;
        if p1 <= p0 || units == 0 {
            return Copy16::NONE;
        }
        let (s, d) = (src.wrapping_add(p0 * ldb), dst.wrapping_add(p0 * nr));
        Copy16 {
            src: s,
            dst: d,
            src_row: s,
            dst_row: d,
            left: units,
            units,
            in_panel: nr / 16,
            per_panel: nr / 16,
            jump: nr * kc - (nr - 16),
            ldb,
            nr,
            rows: p1 - p0,
            per: ((p1 - p0) * units).div_ceil(steps.max(1)),
        }
    }

    /// Copy the next `per` units (fewer at the end).
    ///
    /// # Safety
    /// The addresses given to [`Copy16::new`] describe the chunk and its packed buffer.
    #[inline(always)]
    pub(crate) unsafe fn step(&mut self) {
        for _ in 0..self.per {
            if self.rows == 0 {
                return;
            }
            // SAFETY: a unit of the chunk and of its packed buffer (the caller's contract).
            unsafe { core::ptr::copy_nonoverlapping(self.src, self.dst, 16) };
            self.left -= 1;
            if self.left == 0 {
                self.rows -= 1;
                self.left = self.units;
                self.in_panel = self.per_panel;
                self.src_row = self.src_row.wrapping_add(self.ldb);
                self.dst_row = self.dst_row.wrapping_add(self.nr);
                self.src = self.src_row;
                self.dst = self.dst_row;
            } else {
                self.src = self.src.wrapping_add(16);
                self.in_panel -= 1;
                if self.in_panel == 0 {
                    self.in_panel = self.per_panel;
                    self.dst = self.dst.wrapping_add(self.jump);
                } else {
                    self.dst = self.dst.wrapping_add(16);
                }
            }
        }
    }

    /// Copy every unit left.
    ///
    /// # Safety
    /// As [`Copy16::step`].
    #[inline(always)]
    pub(crate) unsafe fn rest(&mut self) {
        self.per = self.rows * self.units;
        unsafe { self.step() }
    }
}
