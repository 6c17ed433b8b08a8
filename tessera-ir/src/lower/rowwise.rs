//! Row-wise kernels over the last axes: softmax (online max/sum), layernorm (mean, variance,
//! normalise), rmsnorm, and sum/max/mean reductions. `BR` rows per program, columns in chunks
//! of `BC`.
//!
//! Under `deterministic` and `kahan_sum` every row sum is taken in one fixed order that no
//! schedule changes ([`LANES`] lane partials, see [`crate::NumericsPolicy`]): each chunk is
//! read as `BC/32` slices of 32 columns that are added elementwise, in column order, into a
//! carried `[BR, 32]` partial (compensated under `kahan_sum`: `Lower::two_sum_step`); after the row, one
//! reduction of the partials (the fixed pairwise tree) gives the sum. Softmax then takes
//! three passes (max, sum of exponentials, write) instead of the online two.

use super::{Axis, Lower, LowerError, view_groups};
use crate::graph::{BinaryOp, Op as G, ReduceOp, UnaryOp};
use crate::schedule::Schedule;
use crate::tile::{CmpOp, GridDim, Op, TValue, TileReduce, TileType};
use crate::{DType, NumericsPolicy};

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (br, bc) = (s.tile[0] as usize, s.tile[1] as usize);
    let root = l.g.node(l.k.root).clone();
    let x = root.args[0];
    let xs = l.g.ty(x).shape.0.clone();
    // How many trailing axes one "row" spans.
    let t = match &root.op {
        G::Reduce { axes, .. } => axes.len(),
        _ => 1,
    };
    // The rows as the rank-2 view groups them (a 1-D input is one row: `[1]`).
    let lead = super::view_groups(&xs[..xs.len() - t + 1], 2)[0].clone();
    let px = l.param(x, 2);
    l.set_grid([
        GridDim {
            dims: vec![(px, 0)],
            tile: br as u32,
        },
        GridDim::one(),
        GridDim::one(),
    ]);
    let pid = l.pid(0);
    let cbr = l.c_i32(br as i64);
    let i = l.mul(pid, cbr);
    let zero = l.c_i32(0);
    let n = l.dim(px, 1);
    let nf = l.cast(n, DType::F32);
    let f32s = |shape: &[usize]| TileType::tile(DType::F32, shape);
    let row = [br];
    let chunk = [br, bc];

    // A chunk of rows, as f32, reading `other` outside the tensor.
    let load = |l: &mut Lower, c: TValue, other: f64| {
        let v = l.load(px, vec![i, c], &chunk, other);
        l.cast(v, DType::F32)
    };
    // `true` where the `width` columns from `c` are inside the row.
    let col_mask = |l: &mut Lower, c: TValue, width: usize| {
        let ar = l.b.op(Op::Arange, TileType::tile(DType::I32, &[width]));
        let cols = l.bin(BinaryOp::Add, ar, c);
        let m = l.b.op(
            Op::Cmp(CmpOp::Lt, cols, n),
            TileType::tile(DType::Bool, &[width]),
        );
        l.expand(m, 0)
    };
    let sum_rows = |l: &mut Lower, acc: TValue, v: TValue| {
        let r = l.reduce(TileReduce::Sum, v, 1);
        l.bin(BinaryOp::Add, acc, r)
    };
    let ordered = l.policy != NumericsPolicy::Fast;
    // The fixed-order sum of a row's terms (see the module docs): `term` maps a `[BR, 32]`
    // slice of the row (loaded with `other` outside it) at column `c` to what is summed.
    let lane_sum = |l: &mut Lower,
                    other: f64,
                    term: &mut dyn FnMut(&mut Lower, TValue, TValue) -> TValue|
     -> TValue {
        let step = bc.max(LANES).next_multiple_of(LANES);
        lane_sum(l, px, i, zero, n, br, step, other, term)
    };

    match root.op {
        G::Reduce { op, .. } if ordered && op != ReduceOp::Max => {
            let mut y = lane_sum(l, 0.0, &mut |_, v, _| v);
            if op == ReduceOp::Mean {
                y = l.bin(BinaryOp::Div, y, nf);
            }
            let y = l.cast(y, root.ty.dtype);
            let groups = view_groups(&l.g.ty(l.k.output).shape.0, 1);
            let axes = [Axis {
                origin: i,
                extent: Some(br),
            }];
            let y = l.epilogue(y, &groups, &axes)?;
            let y = l.fit(y, &row);
            let po = l.output_param(1);
            l.store(po, vec![i], y);
            Ok(())
        }
        G::Softmax { .. } if ordered => {
            // Pass 1: the row max (exact in any order).
            let m0 = l.b.op(Op::Full(f64::NEG_INFINITY), f32s(&row));
            let (c, m) = l.b.begin_for(zero, n, bc as i64, &[m0]);
            let v = load(l, c, f64::NEG_INFINITY);
            let cm = l.reduce(TileReduce::Max, v, 1);
            let mn = l.bin(BinaryOp::Max, m[0], cm);
            let m = l.b.end_for(&[mn])[0];
            let m2 = l.expand(m, 1);
            // Pass 2: Σ exp(x − max) in the fixed order.
            let total = lane_sum(l, f64::NEG_INFINITY, &mut |l, v, _| {
                let xm = l.bin(BinaryOp::Sub, v, m2);
                l.unary(UnaryOp::Exp, xm)
            });
            let one = l.c(1.0, DType::F32);
            let inv = l.bin(BinaryOp::Div, one, total);
            let inv2 = l.expand(inv, 1);
            write_pass(l, px, i, zero, n, bc, &lead, &chunk, |l, c| {
                let v = load(l, c, 0.0);
                let xm = l.bin(BinaryOp::Sub, v, m2);
                let e = l.unary(UnaryOp::Exp, xm);
                Ok(l.bin(BinaryOp::Mul, e, inv2))
            })
        }
        G::Reduce { op, .. } => {
            let (init, other) = if op == ReduceOp::Max {
                (f64::NEG_INFINITY, f64::NEG_INFINITY)
            } else {
                (0.0, 0.0)
            };
            let acc0 = l.b.op(Op::Full(init), f32s(&row));
            let (c, acc) = l.b.begin_for(zero, n, bc as i64, &[acc0]);
            let v = load(l, c, other);
            let next = if op == ReduceOp::Max {
                let r = l.reduce(TileReduce::Max, v, 1);
                l.bin(BinaryOp::Max, acc[0], r)
            } else {
                sum_rows(l, acc[0], v)
            };
            let mut y = l.b.end_for(&[next])[0];
            if op == ReduceOp::Mean {
                y = l.bin(BinaryOp::Div, y, nf);
            }
            let y = l.cast(y, root.ty.dtype);
            let groups = view_groups(&l.g.ty(l.k.output).shape.0, 1);
            let axes = [Axis {
                origin: i,
                extent: Some(br),
            }];
            let y = l.epilogue(y, &groups, &axes)?;
            let y = l.fit(y, &row);
            let po = l.output_param(1);
            l.store(po, vec![i], y);
            Ok(())
        }
        G::Softmax { .. } => {
            let m0 = l.b.op(Op::Full(f64::NEG_INFINITY), f32s(&row));
            let s0 = l.b.op(Op::Full(0.0), f32s(&row));
            let (c, ms) = l.b.begin_for(zero, n, bc as i64, &[m0, s0]);
            let v = load(l, c, f64::NEG_INFINITY);
            let cm = l.reduce(TileReduce::Max, v, 1);
            let mn = l.bin(BinaryOp::Max, ms[0], cm);
            let d = l.bin(BinaryOp::Sub, ms[0], mn);
            let scale = l.unary(UnaryOp::Exp, d);
            let mn2 = l.expand(mn, 1);
            let xm = l.bin(BinaryOp::Sub, v, mn2);
            let e = l.unary(UnaryOp::Exp, xm);
            let s1 = l.bin(BinaryOp::Mul, ms[1], scale);
            let s2 = sum_rows(l, s1, e);
            let r = l.b.end_for(&[mn, s2]);
            let one = l.c(1.0, DType::F32);
            let inv = l.bin(BinaryOp::Div, one, r[1]);
            let (m2, inv2) = (l.expand(r[0], 1), l.expand(inv, 1));
            write_pass(l, px, i, zero, n, bc, &lead, &chunk, |l, c| {
                let v = load(l, c, 0.0);
                let xm = l.bin(BinaryOp::Sub, v, m2);
                let e = l.unary(UnaryOp::Exp, xm);
                Ok(l.bin(BinaryOp::Mul, e, inv2))
            })
        }
        G::LayerNorm { eps, .. } | G::RmsNorm { eps, .. } => {
            let layer = matches!(root.op, G::LayerNorm { .. });
            let pg = l.param(root.args[1], 1);
            let pbeta = if layer {
                Some(l.param(root.args[2], 1))
            } else {
                None
            };
            let mean = if !layer {
                None
            } else if ordered {
                let total = lane_sum(l, 0.0, &mut |_, v, _| v);
                let mean = l.bin(BinaryOp::Div, total, nf);
                Some(l.expand(mean, 1))
            } else {
                let acc0 = l.b.op(Op::Full(0.0), f32s(&row));
                let (c, acc) = l.b.begin_for(zero, n, bc as i64, &[acc0]);
                let v = load(l, c, 0.0);
                let next = sum_rows(l, acc[0], v);
                let total = l.b.end_for(&[next])[0];
                let mean = l.bin(BinaryOp::Div, total, nf);
                Some(l.expand(mean, 1))
            };
            // Second pass: sum of squared deviations (layernorm) or of squares (rmsnorm).
            let square = |l: &mut Lower, v: TValue, c: TValue, width: usize| {
                let d = match mean {
                    Some(m) => {
                        let d = l.bin(BinaryOp::Sub, v, m);
                        let mask = col_mask(l, c, width);
                        let z = l.c(0.0, DType::F32);
                        l.b.op(Op::Select(mask, d, z), f32s(&[br, width]))
                    }
                    None => v,
                };
                l.bin(BinaryOp::Mul, d, d)
            };
            let ss = if ordered {
                lane_sum(l, 0.0, &mut |l, v, c| square(l, v, c, LANES))
            } else {
                let acc0 = l.b.op(Op::Full(0.0), f32s(&row));
                let (c, acc) = l.b.begin_for(zero, n, bc as i64, &[acc0]);
                let v = load(l, c, 0.0);
                let sq = square(l, v, c, bc);
                let next = sum_rows(l, acc[0], sq);
                l.b.end_for(&[next])[0]
            };
            let var = l.bin(BinaryOp::Div, ss, nf);
            let ceps = l.c(eps, DType::F32);
            let ve = l.bin(BinaryOp::Add, var, ceps);
            let rstd = l.unary(UnaryOp::Rsqrt, ve);
            let rstd2 = l.expand(rstd, 1);
            write_pass(l, px, i, zero, n, bc, &lead, &chunk, |l, c| {
                let v = load(l, c, 0.0);
                let centered = match mean {
                    Some(m) => l.bin(BinaryOp::Sub, v, m),
                    None => v,
                };
                let y = l.bin(BinaryOp::Mul, centered, rstd2);
                let gv = l.load(pg, vec![c], &[bc], 0.0);
                let gv = l.cast(gv, DType::F32);
                let gv = l.expand(gv, 0);
                let y = l.bin(BinaryOp::Mul, y, gv);
                Ok(match pbeta {
                    Some(pb) => {
                        let bv = l.load(pb, vec![c], &[bc], 0.0);
                        let bv = l.cast(bv, DType::F32);
                        let bv = l.expand(bv, 0);
                        l.bin(BinaryOp::Add, y, bv)
                    }
                    None => y,
                })
            })
        }
        ref op => Err(l.err(l.k.root, format!("{} is not a row-wise op", op.name()))),
    }
}

/// Lane partials of the fixed-order row sum: the row's column `c` is added into lane
/// `c mod 32`, in increasing `c`.
pub(crate) const LANES: usize = 32;

/// The fixed-order sum of each of `br` rows (see the module docs): chunks of `step` columns
/// (a multiple of [`LANES`]), each read as `step/32` slices `[br, 32]` loaded with `other`
/// outside the tensor and mapped by `term`, added in column order into the carried lane
/// partials (Kahan-compensated under `kahan_sum`), then reduced by the fixed tree.
#[allow(clippy::too_many_arguments)]
fn lane_sum(
    l: &mut Lower,
    px: usize,
    i: TValue,
    zero: TValue,
    n: TValue,
    br: usize,
    step: usize,
    other: f64,
    term: &mut dyn FnMut(&mut Lower, TValue, TValue) -> TValue,
) -> TValue {
    let lanes = TileType::tile(DType::F32, &[br, LANES]);
    let kahan = l.policy == NumericsPolicy::KahanSum;
    let s0 = l.b.op(Op::Full(0.0), lanes.clone());
    let inits = if kahan { vec![s0, s0] } else { vec![s0] };
    let (c, carried) = l.b.begin_for(zero, n, step as i64, &inits);
    let (mut s, mut comp) = (carried[0], carried.get(1).copied());
    for u in 0..step / LANES {
        let off = l.c_i32((u * LANES) as i64);
        let cu = l.bin(BinaryOp::Add, c, off);
        let v = l.load(px, vec![i, cu], &[br, LANES], other);
        let v = l.cast(v, DType::F32);
        let x = term(l, v, cu);
        match comp {
            None => s = l.bin(BinaryOp::Add, s, x),
            Some(k) => {
                let (t, k) = l.two_sum_step(s, k, x);
                comp = Some(k);
                s = t;
            }
        }
    }
    let next: Vec<TValue> = std::iter::once(s).chain(comp).collect();
    let r = l.b.end_for(&next);
    let total = l.reduce(TileReduce::Sum, r[0], 1);
    match r.get(1) {
        // The sum is Σ s + Σ c (each lane's c holds its lost low parts).
        Some(k) => {
            let lost = l.reduce(TileReduce::Sum, *k, 1);
            l.bin(BinaryOp::Add, total, lost)
        }
        None => total,
    }
}

/// The final pass of softmax and the norms: compute each chunk, run the epilogue, store.
#[allow(clippy::too_many_arguments)]
fn write_pass(
    l: &mut Lower,
    _px: usize,
    i: TValue,
    zero: TValue,
    n: TValue,
    bc: usize,
    lead: &[crate::Dim],
    chunk: &[usize],
    mut body: impl FnMut(&mut Lower, TValue) -> Result<TValue, LowerError>,
) -> Result<(), LowerError> {
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let groups = view_groups(&out_shape, 2);
    debug_assert_eq!(groups[0], lead.to_vec());
    let (c, _) = l.b.begin_for(zero, n, bc as i64, &[]);
    let y = body(l, c)?;
    let y = l.cast(y, l.g.ty(l.k.root).dtype);
    let axes = [
        Axis {
            origin: i,
            extent: Some(chunk[0]),
        },
        Axis {
            origin: c,
            extent: Some(bc),
        },
    ];
    let y = l.epilogue(y, &groups, &axes)?;
    let y = l.fit(y, chunk);
    let po = l.output_param(2);
    l.store(po, vec![i, c], y);
    l.b.end_for(&[]);
    Ok(())
}
