//! Block loads and stores between tensors and tiles, masked by bounds and an optional mask.

use super::value::{Data, Tile};
use crate::Result;
use crate::backend::Buffer;
use half::{bf16, f16};
use tessera_ir::DType;

/// Where a tile lands in a tensor view: element offset of the fixed leading indices, the tile's
/// row/column origin and the view's row/column extents.
struct Window {
    base: usize,
    rows: usize,
    cols: usize,
    row0: i64,
    col0: i64,
    trows: usize,
    tcols: usize,
    /// Leading indices out of range: nothing is accessed.
    outside: bool,
}

fn window(buf: &Buffer, idx: &[i64], tile: &[usize]) -> Window {
    let dims = buf.dims();
    let (r, t) = (dims.len(), tile.len());
    let mut strides = vec![1usize; r];
    // Saturating: a view's element count fits its bytes, so strides and offsets of indices
    // in range are exact; they can only saturate when some dim is 0, and then every index
    // of that axis is outside and nothing is accessed.
    for a in (0..r.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1].saturating_mul(dims[a + 1]);
    }
    let mut base = 0usize;
    let mut outside = false;
    for a in 0..r.saturating_sub(t) {
        if idx[a] < 0 || idx[a] >= dims[a] as i64 {
            outside = true;
        } else {
            base = base.saturating_add((idx[a] as usize).saturating_mul(strides[a]));
        }
    }
    // Tile axes: the last `t` view axes. A rank-1 tile is one row; a scalar one element.
    let (rows, cols, row0, col0, trows, tcols) = match t {
        2 => (
            dims[r - 2],
            dims[r - 1],
            idx[r - 2],
            idx[r - 1],
            tile[0],
            tile[1],
        ),
        1 => (1, dims[r - 1], 0, idx[r - 1], 1, tile[0]),
        _ => (1, 1, 0, 0, 1, 1),
    };
    let row_stride_base = if t == 2 { strides[r - 2] } else { 0 };
    let _ = row_stride_base;
    Window {
        base,
        rows,
        cols,
        row0,
        col0,
        trows,
        tcols,
        outside,
    }
}

/// Row stride (elements) of the view for a rank-2 tile window.
fn row_stride(buf: &Buffer) -> usize {
    *buf.dims().last().unwrap_or(&1)
}

/// Column range `[c0, c1)` of tile row that lies inside the tensor.
fn col_range(w: &Window) -> (usize, usize) {
    let lo = (-w.col0).clamp(0, w.tcols as i64) as usize;
    let hi = (w.cols as i64 - w.col0).clamp(0, w.tcols as i64) as usize;
    (lo, hi.max(lo))
}

fn mask_at(mask: Option<&Tile>, r: usize, c: usize) -> bool {
    match mask {
        None => true,
        Some(m) => {
            let (mr, mc) = match m.rank {
                2 => (m.shape[0], m.shape[1]),
                1 => (1, m.shape[0]),
                _ => (1, 1),
            };
            m.b()[(r % mr) * mc + (c % mc)]
        }
    }
}

/// Loads a tile of `dims` at `idx`.
pub(crate) fn load(
    buf: &Buffer,
    idx: &[i64],
    dims: &[usize],
    other: f64,
    mask: Option<&Tile>,
    dtype: DType,
) -> Result<Tile> {
    let w = window(buf, idx, dims);
    let n = w.trows * w.tcols;
    let rs = if dims.len() == 2 { row_stride(buf) } else { 0 };
    let (c_lo, c_hi) = col_range(&w);
    macro_rules! rows {
        ($out:ident, $src:ty, $conv:expr) => {{
            let src: &[$src] = unsafe {
                std::slice::from_raw_parts(
                    buf.ptr as *const $src,
                    buf.len / std::mem::size_of::<$src>(),
                )
            };
            if !w.outside {
                for tr in 0..w.trows {
                    let row = w.row0 + tr as i64;
                    if row < 0 || row >= w.rows as i64 || c_lo >= c_hi {
                        continue;
                    }
                    let start = w.base + row as usize * rs + (w.col0 + c_lo as i64) as usize;
                    let s = &src[start..start + (c_hi - c_lo)];
                    let d = &mut $out[tr * w.tcols + c_lo..tr * w.tcols + c_hi];
                    for (o, x) in d.iter_mut().zip(s) {
                        *o = $conv(*x);
                    }
                }
            }
        }};
    }
    let mut tile = match dtype {
        DType::F32 | DType::BF16 | DType::F16 | DType::F8E4M3 | DType::F8E5M2 => {
            let mut out = vec![other as f32; n];
            match dtype {
                DType::F32 => rows!(out, f32, |x: f32| x),
                DType::BF16 => rows!(out, bf16, |x: bf16| x.to_f32()),
                DType::F16 => rows!(out, f16, |x: f16| x.to_f32()),
                _ => {
                    let lut = super::value::fp8_decode_table(dtype);
                    rows!(out, u8, |x: u8| lut[x as usize])
                }
            }
            Tile::new_f(dtype, dims, out)
        }
        DType::I32 => {
            let mut out = vec![other as i32; n];
            rows!(out, i32, |x: i32| x);
            Tile::new_i(dims, out)
        }
        DType::Bool => {
            let mut out = vec![other != 0.0; n];
            rows!(out, u8, |x: u8| x != 0);
            Tile::new_b(dims, out)
        }
    };
    // Rows past the tensor's last row hold `other`: known `+0.0` rows for `dot` (see
    // `Tile::zero_rows_from`) when `other` is `+0.0` and no mask changes anything.
    if dims.len() == 2 && mask.is_none() && other.to_bits() == 0 && matches!(tile.data, Data::F(_))
    {
        tile.zero_rows_from = if w.outside || c_lo >= c_hi {
            0
        } else if w.row0 >= 0 {
            (w.rows as i64 - w.row0).clamp(0, w.trows as i64) as usize
        } else {
            w.trows
        };
    }
    if mask.is_some() {
        for r in 0..w.trows {
            for c in 0..w.tcols {
                if !mask_at(mask, r, c) {
                    match &mut tile.data {
                        Data::F(v) => v[r * w.tcols + c] = other as f32,
                        Data::I(v) => v[r * w.tcols + c] = other as i32,
                        Data::B(v) => v[r * w.tcols + c] = other != 0.0,
                    }
                }
            }
        }
    }
    Ok(tile)
}

/// Stores `tile` at `idx`, skipping lanes outside the tensor or masked off.
pub(crate) fn store(buf: &Buffer, idx: &[i64], tile: &Tile, mask: Option<&Tile>) -> Result<()> {
    let w = window(buf, idx, tile.dims());
    if w.outside {
        return Ok(());
    }
    let rs = if tile.rank == 2 { row_stride(buf) } else { 0 };
    let (c_lo, c_hi) = col_range(&w);
    macro_rules! rows {
        ($dst:ty, $vals:expr, $conv:expr) => {{
            let dst: &mut [$dst] = unsafe {
                std::slice::from_raw_parts_mut(
                    buf.ptr as *mut $dst,
                    buf.len / std::mem::size_of::<$dst>(),
                )
            };
            let vals = $vals;
            for tr in 0..w.trows {
                let row = w.row0 + tr as i64;
                if row < 0 || row >= w.rows as i64 || c_lo >= c_hi {
                    continue;
                }
                let start = w.base + row as usize * rs + (w.col0 + c_lo as i64) as usize;
                let d = &mut dst[start..start + (c_hi - c_lo)];
                let s = &vals[tr * w.tcols + c_lo..tr * w.tcols + c_hi];
                if mask.is_none() {
                    for (o, x) in d.iter_mut().zip(s) {
                        *o = $conv(*x);
                    }
                } else {
                    for (k, (o, x)) in d.iter_mut().zip(s).enumerate() {
                        if mask_at(mask, tr, c_lo + k) {
                            *o = $conv(*x);
                        }
                    }
                }
            }
        }};
    }
    match buf.dtype {
        DType::F32 => rows!(f32, tile.f(), |x: f32| x),
        DType::BF16 => rows!(bf16, tile.f(), bf16::from_f32),
        DType::F16 => rows!(f16, tile.f(), f16::from_f32),
        DType::F8E4M3 | DType::F8E5M2 => {
            let f = tessera_ir::fp8::Fp8::of(buf.dtype).expect("fp8 dtype");
            rows!(u8, tile.f(), |x: f32| f.encode(x as f64, true))
        }
        DType::I32 => rows!(i32, tile.i(), |x: i32| x),
        DType::Bool => rows!(u8, tile.b(), |x: bool| x as u8),
    }
    Ok(())
}

/// The implicit-GEMM gather ([`tessera_ir::tile::Op::Im2col`]): a `[rows, cols]` tile of the
/// im2col matrix of the `[N·H, W, C]` view `buf`, GEMM rows from `row`, columns from `col`,
/// input channels from `chan`. Each tile row is one output pixel; its columns are runs of
/// consecutive channels of one filter tap, copied (and widened) as slices; taps outside the
/// input, rows past `N·OH·OW` and columns past `KH·KW·cg` stay 0.
pub(crate) fn im2col(
    buf: &Buffer,
    [row, col, chan]: [i64; 3],
    g: &tessera_ir::tile::Im2colGeom,
    [rows, cols]: [usize; 2],
    dtype: DType,
) -> Tile {
    let d = buf.dims();
    let (h, wd, c) = (g.height as i64, d[1] as i64, d[2] as i64);
    let n = d[0] as i64 / h;
    let (oh, ow) = (g.out_extent(0, h), g.out_extent(1, wd));
    let (m_end, k_end) = (n * oh * ow, g.k() as i64);
    let cg = g.cg as i64;
    let mut out = vec![0f32; rows * cols];
    macro_rules! gather {
        ($src:ty, $conv:expr) => {{
            // SAFETY: the buffer holds `len` bytes of its dtype for the launch.
            let src: &[$src] = unsafe {
                std::slice::from_raw_parts(
                    buf.ptr as *const $src,
                    buf.len / std::mem::size_of::<$src>(),
                )
            };
            for r in 0..rows {
                let m = row + r as i64;
                if m < 0 || m >= m_end {
                    continue;
                }
                let (b, p) = (m / (oh * ow), m % (oh * ow));
                let (y0, x0) = ((p / ow) * g.stride[0] as i64, (p % ow) * g.stride[1] as i64);
                let dst = &mut out[r * cols..(r + 1) * cols];
                let mut cc = 0usize;
                while cc < cols {
                    let k = col + cc as i64;
                    if k < 0 || k >= k_end {
                        cc += 1;
                        continue;
                    }
                    let (dy, dx, ci) = g.tap(k as usize);
                    // The run of this tap's channels inside the tile.
                    let run = ((cg - ci as i64) as usize).min(cols - cc);
                    let (iy, ix) = (y0 + dy, x0 + dx);
                    let c0 = chan + ci as i64;
                    if iy >= 0 && iy < h && ix >= 0 && ix < wd && c0 >= 0 {
                        let valid = (c - c0).clamp(0, run as i64) as usize;
                        let start = (((b * h + iy) * wd + ix) * c + c0) as usize;
                        for (o, x) in dst[cc..cc + valid]
                            .iter_mut()
                            .zip(&src[start..start + valid])
                        {
                            *o = $conv(*x);
                        }
                    }
                    cc += run;
                }
            }
        }};
    }
    match dtype {
        DType::F32 => gather!(f32, |x: f32| x),
        DType::BF16 => gather!(bf16, |x: bf16| x.to_f32()),
        DType::F16 => gather!(f16, |x: f16| x.to_f32()),
        _ => {
            let lut = super::value::fp8_decode_table(dtype);
            gather!(u8, |x: u8| lut[x as usize])
        }
    }
    let mut t = Tile::new_f(dtype, &[rows, cols], out);
    // Rows past the last output pixel are `+0.0` (see `Tile::zero_rows_from`).
    t.zero_rows_from = (m_end - row).clamp(0, rows as i64) as usize;
    t
}
