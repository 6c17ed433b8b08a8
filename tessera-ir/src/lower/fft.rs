//! `fft` / `ifft` kernels: the Tile IR `fft` op over blocks of whole transforms.
//!
//! A transform along logical axis `a` of `x: f32[d0.., L, e.., 2]` views input and output as
//! `[outer, L, I]` (leading dims merged; the dims after `a` and the `(re, im)` pair merged into
//! `I` floats, [`super::Binding::view`]), so one transform is a column pair of that matrix and
//! `W / 2` neighbouring transforms are one contiguous `f32[L, W]` block. Program `(i, j)` loads
//! column block `j` (`W` floats) of outer positions `i·T .. i·T + T` one at a time, transforms it
//! (`fft` / `ifft`: radix-2/4 Stockham, on the CPU in the `tessera` crate's `backend/cpu/fft.rs`
//! and in PTX in shared memory) and stores it. Schedule `tile = [T, C]`: `T` outer positions per
//! program, `C` complex columns per block (clamped to the transform batch and to
//! `L·W ≤ 8192` floats, the tile the PTX emitter keeps in 2 × 32 KiB of shared memory).
//! Edge blocks read zeros past `I` (transforms of zeros) and their stores are masked.
use super::{Lower, LowerError};
use crate::graph::Op;
use crate::schedule::Schedule;
use crate::tile::{self, GridDim, TileType};
use crate::{DType, Dim};

/// The most floats in one transform block (`L · W`).
pub const FFT_BLOCK_FLOATS: usize = 8192;

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let root = l.k.root;
    let Op::Fft { axis, inverse } = l.g.node(root).op else {
        return Err(l.err(root, "an fft kernel's root must be fft or ifft"));
    };
    let x = l.g.node(root).args[0];
    let ty = l.g.ty(x).clone();
    let len = match &ty.shape.0[axis] {
        Dim::Const(n) => *n as usize,
        d => return Err(l.err(x, format!("FFT length {d} is not a constant"))),
    };
    let tail = ty.shape.rank() - 1 - axis;
    // floats per transform position: the dims after the axis times the pair
    let inner: Option<usize> = ty.shape.0[axis + 1..]
        .iter()
        .map(|d| match d {
            Dim::Const(n) => Some(*n as usize),
            Dim::Sym(_) => None,
        })
        .product();
    let t_per = s.tile[0].max(1) as usize;
    let mut w = (2 * s.tile.get(1).copied().unwrap_or(1).max(1) as usize).next_power_of_two();
    if let Some(i) = inner {
        w = w.min(i.next_power_of_two().max(2));
    }
    w = w.min((FFT_BLOCK_FLOATS / len).max(2));
    let xp = l.param_merged(x, 3, [1, tail]);
    let op = l.output_param_merged(3, [1, tail]);
    l.set_grid([
        GridDim {
            dims: vec![(xp, 0)],
            tile: t_per as u32,
        },
        GridDim {
            dims: vec![(xp, 2)],
            tile: w as u32,
        },
        GridDim::one(),
    ]);
    let (p0, p1) = (l.pid(0), l.pid(1));
    let tpc = l.c_i32(t_per as i64);
    let wc = l.c_i32(w as i64);
    let o0 = l.mul(p0, tpc);
    let col = l.mul(p1, wc);
    let zero = l.c_i32(0);
    let (b, _) = l.b.begin_for(zero, tpc, 1, &[]);
    let o = l.bin(crate::graph::BinaryOp::Add, o0, b);
    let z = l.c_i32(0);
    let t = l.load(xp, vec![o, z, col], &[len, w], 0.0);
    let y = l.b.op(
        tile::Op::Fft { a: t, inverse },
        TileType::tile(DType::F32, &[len, w]),
    );
    l.store(op, vec![o, z, col], y);
    l.b.end_for(&[]);
    Ok(())
}
