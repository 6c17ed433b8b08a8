//! Matmul kernels: a K loop of tile loads and `dot`s into the accumulator (the matmul's `acc`
//! dtype), then the epilogue. `dot` adds products in increasing K on every backend except the
//! tensor-core path of a fast kernel, so `deterministic` needs nothing more here; `kahan_sum`
//! compensates across K tiles.

use super::{Axis, Lower, LowerError, view_groups};
use crate::graph::BinaryOp;
use crate::schedule::Schedule;
use crate::tile::{GridDim, Op, TileType};
use crate::{DType, NumericsPolicy};

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (bm, bn, bk) = (s.tile[0] as usize, s.tile[1] as usize, s.tile[2] as usize);
    let root = l.g.node(l.k.root).clone();
    let (a, b) = (root.args[0], root.args[1]);
    let (ra, rb) = (l.g.ty(a).shape.rank(), l.g.ty(b).shape.rank());
    let batched = ra >= 3 && rb >= 3;
    // [B, M, K] × [K, N] is a plain matmul of the [B·M, K] view.
    let r = if batched { 3 } else { 2 };
    let pa = l.param(a, r);
    let pb = l.param(b, r);
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let groups = view_groups(&out_shape, r);
    let mut grid = [
        GridDim {
            dims: vec![(pa, r - 2)],
            tile: bm as u32,
        },
        GridDim {
            dims: vec![(pb, r - 1)],
            tile: bn as u32,
        },
        GridDim::one(),
    ];
    if batched {
        grid[2] = GridDim {
            dims: vec![(pa, 0)],
            tile: 1,
        };
    }
    l.set_grid(grid);

    let pm = l.pid(0);
    let pn = l.pid(1);
    let cbm = l.c_i32(bm as i64);
    let cbn = l.c_i32(bn as i64);
    let i = l.mul(pm, cbm);
    let j = l.mul(pn, cbn);
    let batch = if batched { Some(l.pid(2)) } else { None };
    let zero = l.c_i32(0);
    let kdim = l.dim(pa, r - 1);
    // The accumulator dtype is the matmul's result dtype (`acc=..`; i32 inputs sum in f32
    // tiles and round at the end).
    let root_dtype = root.ty.dtype;
    let acc_dtype = if root_dtype.is_float() {
        root_dtype
    } else {
        DType::F32
    };
    let acc_ty = TileType::tile(acc_dtype, &[bm, bn]);
    let acc0 = l.b.op(Op::Full(0.0), acc_ty.clone());
    let kahan = l.policy == NumericsPolicy::KahanSum;
    let inits = if kahan { vec![acc0, acc0] } else { vec![acc0] };
    let (kk, carried) = l.b.begin_for(zero, kdim, bk as i64, &inits);
    let ia: Vec<_> = batch.into_iter().chain([i, kk]).collect();
    let ib: Vec<_> = batch.into_iter().chain([kk, j]).collect();
    let ta = l.load(pa, ia, &[bm, bk], 0.0);
    let tb = l.load(pb, ib, &[bk, bn], 0.0);
    let next = if kahan {
        // Compensated across K tiles: each tile's products are summed from zero, then added
        // to the running sum with its rounding error carried (`Lower::two_sum_step`).
        let z = l.b.op(Op::Full(0.0), acc_ty.clone());
        let p = l.b.op(
            Op::Dot {
                a: ta,
                b: tb,
                acc: z,
            },
            acc_ty.clone(),
        );
        let (t, k) = l.two_sum_step(carried[0], carried[1], p);
        vec![t, k]
    } else {
        vec![l.b.op(
            Op::Dot {
                a: ta,
                b: tb,
                acc: carried[0],
            },
            acc_ty.clone(),
        )]
    };
    let out = l.b.end_for(&next);
    let acc = if kahan {
        l.bin(BinaryOp::Add, out[0], out[1])
    } else {
        out[0]
    };
    let acc = l.cast(acc, root_dtype);
    let mut axes = Vec::new();
    if let Some(bv) = batch {
        axes.push(Axis {
            origin: bv,
            extent: None,
        });
    }
    axes.push(Axis {
        origin: i,
        extent: Some(bm),
    });
    axes.push(Axis {
        origin: j,
        extent: Some(bn),
    });
    let y = l.epilogue(acc, &groups, &axes)?;
    let y = l.fit(y, &[bm, bn]);
    let po = l.output_param(r);
    let idx: Vec<_> = batch.into_iter().chain([i, j]).collect();
    l.store(po, idx, y);
    Ok(())
}
