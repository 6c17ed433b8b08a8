//! `conv2d` kernels as **implicit GEMM**: the convolution of `x: [N, H, W, C]` by the HWIO
//! weight `w: [KH, KW, Cg, F]` (`Cg = C / groups`) is, per group `g`, the GEMM
//! `Y_g[M, Fg] = A_g[M, K] · W_g[K, Fg]` with `M = N·OH·OW` output pixels, `Fg = F / groups`
//! output channels and `K = KH·KW·Cg`, where `A_g` (im2col) is never built: each K step's
//! `[BM, BK]` tile of it is gathered from `x` on the fly by the Tile IR op
//! [`Op::Im2col`](crate::tile::Op::Im2col) (zero padding, stride and dilation included) and the
//! `[BK, BN]` tile of `W_g` is a plain block load of the `[KH·KW·Cg, F]` view of `w`. The loop
//! is the matmul's (`lower::matmul`): `full` accumulator, `for` over K of two loads and a
//! `dot`, then the fused elementwise epilogue (bias, activation, residual), so the backends
//! run it with their GEMM machinery: the CPU's packed micro-kernels and the PTX GEMM template
//! (`mma.sync` for bf16/f16, FFMA for f32), whose A copy gathers through the same geometry.
//!
//! The grid is `[cdiv(M, BM), cdiv(Fg, BN), groups]`; a group's output columns start at
//! `g·Fg`. When `groups > 1` and `BN` does not divide `Fg`, the last column tile of a group
//! would reach into the next group's columns, so the store is masked to `col < Fg` (the
//! columns past it read the next group's weights and are never written). Depthwise is
//! `groups = C`: `K = KH·KW`, `Fg = F / C`.
//!
//! The accumulator is f32 (the conv's result type); under `kahan_sum` the K tiles are summed
//! with compensation as in the matmul. The weight's input channels `Cg` and (for
//! `groups > 1`) `F` must be constants: they fix the gather and the grid.
use super::{Axis, Lower, LowerError, view_groups};
use crate::graph::{BinaryOp, Op as GOp};
use crate::schedule::Schedule;
use crate::tile::{CmpOp, GridDim, Im2colGeom, Op, TileType};
use crate::{DType, Dim, NumericsPolicy};

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (bm, bn, bk) = (s.tile[0] as usize, s.tile[1] as usize, s.tile[2] as usize);
    let root = l.g.node(l.k.root).clone();
    let GOp::Conv2d(c) = root.op else {
        return Err(l.err(l.k.root, "a conv kernel's root must be conv2d"));
    };
    let (x, w) = (root.args[0], root.args[1]);
    let (xs, ws) = (l.g.ty(x).shape.0.clone(), l.g.ty(w).shape.0.clone());
    let konst = |l: &Lower, d: &Dim, what: &str| match d {
        Dim::Const(n) if *n <= u32::MAX as u64 => Ok(*n as u32),
        _ => Err(l.err(
            w,
            format!("the implicit-GEMM conv2d needs a constant {what} below 2^32, got {d}"),
        )),
    };
    let height = konst(l, &xs[1], "H")?;
    let kernel = [konst(l, &ws[0], "KH")?, konst(l, &ws[1], "KW")?];
    let cg = konst(l, &ws[2], "Cg (w's input channels)")?;
    let groups = c.groups as usize;
    let fg = if groups > 1 {
        konst(l, &ws[3], "F (grouped)")? as usize / groups
    } else {
        0
    };
    let u = |v: [u64; 2]| [v[0] as u32, v[1] as u32];
    let geom = Im2colGeom {
        height,
        kernel,
        cg,
        stride: u(c.stride),
        padding: u(c.padding),
        dilation: u(c.dilation),
    };
    let px = l.param(x, 3);
    let pw = l.param(w, 2);
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let vgroups = view_groups(&out_shape, 2);

    let pm = l.pid(0);
    let pn = l.pid(1);
    let cbm = l.c_i32(bm as i64);
    let cbn = l.c_i32(bn as i64);
    let i = l.mul(pm, cbm);
    let j = l.mul(pn, cbn);
    let (chan, col0) = if groups > 1 {
        let pg = l.pid(2);
        let ccg = l.c_i32(cg as i64);
        let cfg = l.c_i32(fg as i64);
        let chan = l.mul(pg, ccg);
        let g0 = l.mul(pg, cfg);
        (chan, l.bin(BinaryOp::Add, g0, j))
    } else {
        (l.c_i32(0), j)
    };
    let zero = l.c_i32(0);
    let kdim = l.dim(pw, 0);
    let acc_ty = TileType::tile(DType::F32, &[bm, bn]);
    let acc0 = l.b.op(Op::Full(0.0), acc_ty.clone());
    let kahan = l.policy == NumericsPolicy::KahanSum;
    let inits = if kahan { vec![acc0, acc0] } else { vec![acc0] };
    let (kk, carried) = l.b.begin_for(zero, kdim, bk as i64, &inits);
    let xdt = l.g.ty(x).dtype;
    let ta = l.b.op(
        Op::Im2col {
            param: px,
            row: i,
            col: kk,
            chan,
            geom,
        },
        TileType::tile(xdt, &[bm, bk]),
    );
    let tb = l.load(pw, vec![kk, col0], &[bk, bn], 0.0);
    let next = if kahan {
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
    let acc = l.cast(acc, root.ty.dtype);
    let axes = [
        Axis {
            origin: i,
            extent: Some(bm),
        },
        Axis {
            origin: col0,
            extent: Some(bn),
        },
    ];
    let y = l.epilogue(acc, &vgroups, &axes)?;
    let y = l.fit(y, &[bm, bn]);
    // A group's last column tile stops at its own columns.
    let mask = if groups > 1 && fg % bn != 0 {
        let ar = l.b.op(Op::Arange, TileType::tile(DType::I32, &[bn]));
        let cfg = l.c_i32(fg as i64);
        let lim = l.bin(BinaryOp::Sub, cfg, j);
        let m1 = l.b.op(
            Op::Cmp(CmpOp::Lt, ar, lim),
            TileType::tile(DType::Bool, &[bn]),
        );
        Some(l.expand(m1, 0))
    } else {
        None
    };
    let po = l.output_param(2);
    l.b.effect(Op::Store {
        param: po,
        index: vec![i, col0],
        value: y,
        mask,
    });
    let wcols = GridDim {
        dims: vec![(pw, 1)],
        tile: (bn * groups) as u32,
    };
    let gaxis = if groups > 1 {
        GridDim {
            dims: vec![(pw, 1)],
            tile: fg as u32,
        }
    } else {
        GridDim::one()
    };
    l.set_grid([
        GridDim {
            dims: vec![(po, 0)],
            tile: bm as u32,
        },
        wcols,
        gaxis,
    ]);
    Ok(())
}
