//! Fused attention: one online-softmax kernel (FlashAttention). The `[Sq, Sk]` scores never
//! reach memory.
//!
//! Views (rank 3, leading dims merged): `q [BH, Sq, D]`, `k [BH, Sk, D]`, `v [BH, Sk, Dv]`,
//! out `[BH, Sq, Dv]`. Program `(i, ·, b)` owns query rows `i·BM ..` of batch·head `b`:
//!
//! ```text
//! q  = load q[b, i, 0] : T[BM, D']                  (D' = D rounded up to 16; zeros beyond)
//! m, l, acc = −∞, 0, 0
//! for j = 0 to hi step BN:                          (hi = Sk, or the causal diagonal's end)
//!     s     = dot(q, trans(load k[b, j, 0]), 0) · scale          f32[BM, BN]
//!     s     = select(col ≤ limit(row), s, −∞)       (col < Sk, and col ≤ row + Sk − Sq if causal)
//!     m'    = max(m, rowmax(s));  ms = (m' = −∞) ? 0 : m'   (fully masked rows stay NaN-free)
//!     α     = exp(m − ms);  p = exp(s − ms)
//!     l'    = l·α + rowsum(p)                       (the `fast` numerics policy only)
//!     acc'  = dot(cast::<T>(p), load v[b, j, 0], acc·α)
//! out = acc / l, then the epilogue, stored masked to [Sq, Dv]
//! ```

use super::{Axis, Lower, LowerError, view_groups};
use crate::graph::{BinaryOp, Op as G, UnaryOp};
use crate::schedule::Schedule;
use crate::tile::{CmpOp, GridDim, Op, TileReduce, TileType};
use crate::{DType, Dim, NumericsPolicy};

/// A head dim as a tile extent: a constant rounded up to a multiple of 16 (the tensor-core k
/// step); symbolic head dims are an error naming the dim.
pub(crate) fn head_tile(l: &Lower, d: &Dim, what: &str) -> Result<usize, LowerError> {
    match d {
        Dim::Const(n) if *n <= 256 => Ok((*n as usize).max(1).next_multiple_of(16)),
        _ => Err(l.err(
            l.k.root,
            format!("attention needs a constant head dim {what} ≤ 256, got {d}"),
        )),
    }
}

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (bm, bn) = (s.tile[0] as usize, s.tile[1] as usize);
    let root = l.g.node(l.k.root).clone();
    let G::Attention {
        scale,
        causal,
        policy,
    } = root.op
    else {
        return Err(l.err(l.k.root, "not an attention node"));
    };
    // The online softmax rescales partial sums tile by tile: its association order depends
    // on the tile shape, which `deterministic` and `kahan_sum` promise not to.
    if policy != NumericsPolicy::Fast || l.policy != NumericsPolicy::Fast {
        return Err(l.err(
            l.k.root,
            format!(
                "the online-softmax attention kernel runs under the `fast` numerics policy only, not `{}` (write the unfused softmax(q·kᵀ)·v for an ordered reduction)",
                if policy != NumericsPolicy::Fast { policy } else { l.policy }
            ),
        ));
    }
    let (q, k, v) = (root.args[0], root.args[1], root.args[2]);
    let dtype = l.g.ty(q).dtype;
    let d = head_tile(l, l.g.ty(q).shape.0.last().unwrap(), "D")?;
    let dv = head_tile(l, l.g.ty(v).shape.0.last().unwrap(), "Dv")?;
    let (pq, pk, pv) = (l.param(q, 3), l.param(k, 3), l.param(v, 3));
    l.set_grid([
        GridDim {
            dims: vec![(pq, 1)],
            tile: bm as u32,
        },
        GridDim::one(),
        GridDim {
            dims: vec![(pq, 0)],
            tile: 1,
        },
    ]);
    let f32s = |shape: &[usize]| TileType::tile(DType::F32, shape);
    let pid = l.pid(0);
    let b = l.pid(2);
    let cbm = l.c_i32(bm as i64);
    let i = l.mul(pid, cbm);
    let zero = l.c_i32(0);
    let sq = l.dim(pq, 1);
    let sk = l.dim(pk, 1);
    // Key `col` is visible to query `row` when col ≤ row + off (causal) and col < Sk.
    let off = l.bin(BinaryOp::Sub, sk, sq);
    let one = l.c_i32(1);
    let last = l.bin(BinaryOp::Sub, sk, one);
    let hi = if causal {
        let end = l.bin(BinaryOp::Add, i, cbm);
        let end = l.bin(BinaryOp::Add, end, off);
        l.bin(BinaryOp::Min, sk, end)
    } else {
        sk
    };
    let limit = if causal {
        let ar = l.b.op(Op::Arange, TileType::tile(DType::I32, &[bm]));
        let rows = l.bin(BinaryOp::Add, ar, i);
        let rows = l.bin(BinaryOp::Add, rows, off);
        let lim = l.bin(BinaryOp::Min, rows, last);
        l.expand(lim, 1)
    } else {
        last
    };
    let qt = l.load(pq, vec![b, i, zero], &[bm, d], 0.0);
    let m0 = l.b.op(Op::Full(f64::NEG_INFINITY), f32s(&[bm]));
    let l0 = l.b.op(Op::Full(0.0), f32s(&[bm]));
    let a0 = l.b.op(Op::Full(0.0), f32s(&[bm, dv]));
    let (j, carried) = l.b.begin_for(zero, hi, bn as i64, &[m0, l0, a0]);
    let (m, lsum, acc) = (carried[0], carried[1], carried[2]);
    let kt = l.load(pk, vec![b, j, zero], &[bn, d], 0.0);
    let ktt = l.b.op(Op::Trans(kt), TileType::tile(dtype, &[d, bn]));
    let z = l.b.op(Op::Full(0.0), f32s(&[bm, bn]));
    let sc = l.b.op(
        Op::Dot {
            a: qt,
            b: ktt,
            acc: z,
        },
        f32s(&[bm, bn]),
    );
    let cscale = l.c(scale, DType::F32);
    let sc = l.bin(BinaryOp::Mul, sc, cscale);
    let ar = l.b.op(Op::Arange, TileType::tile(DType::I32, &[bn]));
    let cols = l.bin(BinaryOp::Add, ar, j);
    let cols = l.expand(cols, 0);
    let lim_shape = if causal { vec![bm, bn] } else { vec![1, bn] };
    let ok = l.b.op(
        Op::Cmp(CmpOp::Le, cols, limit),
        TileType::tile(DType::Bool, &lim_shape),
    );
    let ninf = l.c(f64::NEG_INFINITY, DType::F32);
    let sc = l.b.op(Op::Select(ok, sc, ninf), f32s(&[bm, bn]));
    let mj = l.reduce(TileReduce::Max, sc, 1);
    let mn = l.bin(BinaryOp::Max, m, mj);
    let dead = l.b.op(
        Op::Cmp(CmpOp::Eq, mn, ninf),
        TileType::tile(DType::Bool, &[bm]),
    );
    let fzero = l.c(0.0, DType::F32);
    let ms = l.b.op(Op::Select(dead, fzero, mn), f32s(&[bm]));
    let dm = l.bin(BinaryOp::Sub, m, ms);
    let alpha = l.unary(UnaryOp::Exp, dm);
    let ms2 = l.expand(ms, 1);
    let sm = l.bin(BinaryOp::Sub, sc, ms2);
    let p = l.unary(UnaryOp::Exp, sm);
    let rs = l.reduce(TileReduce::Sum, p, 1);
    let la = l.bin(BinaryOp::Mul, lsum, alpha);
    let ln = l.bin(BinaryOp::Add, la, rs);
    let pc = l.cast(p, dtype);
    let vt = l.load(pv, vec![b, j, zero], &[bn, dv], 0.0);
    let alpha2 = l.expand(alpha, 1);
    let accs = l.bin(BinaryOp::Mul, acc, alpha2);
    let an = l.b.op(
        Op::Dot {
            a: pc,
            b: vt,
            acc: accs,
        },
        f32s(&[bm, dv]),
    );
    let r = l.b.end_for(&[mn, ln, an]);
    let l2 = l.expand(r[1], 1);
    let o = l.bin(BinaryOp::Div, r[2], l2);
    let o = l.cast(o, root.ty.dtype);
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let groups = view_groups(&out_shape, 3);
    let axes = [
        Axis {
            origin: b,
            extent: None,
        },
        Axis {
            origin: i,
            extent: Some(bm),
        },
        Axis {
            origin: zero,
            extent: Some(dv),
        },
    ];
    let y = l.epilogue(o, &groups, &axes)?;
    let y = l.fit(y, &[bm, dv]);
    let po = l.output_param(3);
    l.store(po, vec![b, i, zero], y);
    Ok(())
}
