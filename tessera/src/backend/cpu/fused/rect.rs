//! Where a rank-2 tile lies in a tensor: the direct kernels ([`super::transpose`],
//! [`super::colreduce`]) walk the in-bounds part of a tile with plain strides.

use crate::backend::Buffer;

/// The in-bounds part of a `rows × cols` tile at a load's or store's index: tile element
/// `(u, v)` with `u` in `r` and `v` in `c` is tensor element `base + u · stride + v`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rect {
    pub base: i64,
    pub stride: usize,
    pub r: (usize, usize),
    pub c: (usize, usize),
}

impl Rect {
    /// Whether no element of the tile is in bounds.
    pub fn is_empty(&self) -> bool {
        self.r.0 >= self.r.1 || self.c.0 >= self.c.1
    }
}

/// The in-bounds part of the `rows × cols` tile at index slots `idx` (one per axis of `buf`,
/// the tile on the last two) of `buf`; empty when a leading index is outside its axis.
pub(crate) fn rect(buf: &Buffer, idx: &[u32], sc: &[f64], rows: usize, cols: usize) -> Rect {
    let dims = buf.dims();
    let n = dims.len();
    let empty = Rect {
        base: 0,
        stride: 0,
        r: (0, 0),
        c: (0, 0),
    };
    if n < 2 || idx.len() != n {
        return empty;
    }
    let mut base = 0i64;
    for a in 0..n - 2 {
        let pos = sc[idx[a] as usize] as i64;
        if pos < 0 || pos >= dims[a] as i64 {
            return empty;
        }
        base = base * dims[a] as i64 + pos;
    }
    let (nr, nc) = (dims[n - 2] as i64, dims[n - 1] as i64);
    let (r0, c0) = (
        sc[idx[n - 2] as usize] as i64,
        sc[idx[n - 1] as usize] as i64,
    );
    let clip = |lo: i64, n: i64, ext: usize| {
        (
            (-lo).clamp(0, ext as i64) as usize,
            (n - lo).clamp(0, ext as i64) as usize,
        )
    };
    Rect {
        base: (base * nr + r0) * nc + c0,
        stride: dims[n - 1],
        r: clip(r0, nr, rows),
        c: clip(c0, nc, cols),
    }
}
