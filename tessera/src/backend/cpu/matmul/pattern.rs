//! Recognising a matmul kernel's K loop in Tile IR, structurally.
//!
//! Accepted: one top-level `for` (no other loop anywhere) whose body is exactly `load A`,
//! `load B`, `dot A, B, acc`, `yield`, with A loaded at `[x, iv]` as `[BM, BK]` and B at
//! `[iv, y]` as `[BK, BN]` (rank-2 parameters, no mask, `other = 0`, f32/bf16/f16 of one
//! dtype), the loop stepping by `BK`, carrying one f32 `[BM, BN]` accumulator initialised by
//! `full(+0.0)`. After the loop only elementwise ops, loads, broadcasts and stores may follow:
//! element `(r, c)` of anything stored then depends on accumulator element `(r, c)` alone, so
//! accumulator lanes outside the tensors (never stored) may hold any value. Kahan-compensated
//! loops (two carried values) and batched or gathered operands do not match.

use tessera_ir::graph::BinaryOp;
use tessera_ir::tile::{GridDim, Inst, Kernel, Op, TValue};
use tessera_ir::{DType, NumericsPolicy};

/// A recognised K loop: what [`super::block`] needs to compute its result directly.
#[derive(Clone, Debug)]
pub(crate) struct KLoop {
    /// The `for` instruction.
    pub for_inst: Inst,
    /// Parameters of A and B, and their (common) element type.
    pub pa: usize,
    pub pb: usize,
    pub dtype: DType,
    /// Accumulator tile `[BM, BN]` and the loop step `BK`.
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    /// The scalars: A's first row and B's first column.
    pub row: TValue,
    pub col: TValue,
    /// When the whole kernel is `C = A·B` into an f32 parameter (see [`plain`]): that
    /// parameter.
    pub plain: Option<usize>,
    /// bf16 operands under the `fast` numerics policy: the product may sum pairs of k per
    /// step (`vdpbf16ps`, see `super::operands`) instead of one FMA per k.
    pub pairwise: bool,
}

/// Matches `k`; `None` when the kernel is anything else.
pub(crate) fn recognise(k: &Kernel) -> Option<KLoop> {
    let loops: Vec<usize> = (0..k.body.len())
        .filter(|&p| matches!(k.inst(k.body[p]).op, Op::For { .. }))
        .collect();
    let [pos] = loops[..] else { return None };
    let for_inst = k.body[pos];
    let d = k.inst(for_inst);
    let Op::For {
        iv,
        step,
        inits,
        args,
        body,
        ..
    } = &d.op
    else {
        return None;
    };
    if inits.len() != 1 || args.len() != 1 || body.len() != 4 || d.results.len() != 1 {
        return None;
    }
    let op = |n: usize| &k.inst(body[n]).op;
    let (Op::Dot { a, b, acc }, Op::Yield(y)) = (op(2), op(3)) else {
        return None;
    };
    let dres = k.inst(body[2]).results[0];
    if *acc != args[0] || y.as_slice() != [dres] {
        return None;
    }
    let load = |n: usize, v: TValue| match op(n) {
        Op::Load {
            param,
            index,
            mask: None,
            other,
        } if k.inst(body[n]).results == [v] && *other == 0.0 && index.len() == 2 => {
            Some((*param, index[0], index[1]))
        }
        _ => None,
    };
    let (pa, row, ka) = load(0, *a)?;
    let (pb, kb, col) = load(1, *b)?;
    if ka != *iv || kb != *iv || row == *iv || col == *iv {
        return None;
    }
    let (ta, tb, tc) = (k.ty(*a), k.ty(*b), k.ty(dres));
    if ta.shape.len() != 2 || tb.shape.len() != 2 || ta.shape[1] != tb.shape[0] {
        return None;
    }
    let (bm, bk, bn) = (ta.shape[0], ta.shape[1], tb.shape[1]);
    let dtype = ta.dtype;
    if *step != bk as i64
        || tc.shape != [bm, bn]
        || tc.dtype != DType::F32
        || tb.dtype != dtype
        || !matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
        || k.params[pa].rank != 2
        || k.params[pb].rank != 2
    {
        return None;
    }
    // The accumulator starts at +0.0: with increasing-k FMA chains it is then never -0.0, so
    // the zero products of padded k steps cannot change a bit of it.
    let init = k.body[..pos]
        .iter()
        .find(|i| k.inst(**i).results == [inits[0]])?;
    if !matches!(k.inst(*init).op, Op::Full(x) if x.to_bits() == 0) {
        return None;
    }
    let elementwise = k.body[pos + 1..].iter().all(|i| {
        matches!(
            k.inst(*i).op,
            Op::ProgramId(_)
                | Op::Const(_)
                | Op::Dim { .. }
                | Op::Arange
                | Op::Full(_)
                | Op::Unary(..)
                | Op::Binary(..)
                | Op::Cmp(..)
                | Op::Select(..)
                | Op::Cast(_)
                | Op::Expand { .. }
                | Op::Broadcast(_)
                | Op::Load { .. }
                | Op::Store { .. }
        )
    });
    if !elementwise {
        return None;
    }
    let mut lp = KLoop {
        for_inst,
        pa,
        pb,
        dtype,
        bm,
        bn,
        bk,
        row,
        col,
        plain: None,
        pairwise: dtype == DType::BF16 && k.policy == NumericsPolicy::Fast,
    };
    lp.plain = plain(k, &lp, pos);
    Some(lp)
}

/// The output parameter when the kernel computes exactly `C = A·B` with `C` f32: block
/// `(p, q)` of a `[cdiv(M, BM), cdiv(N, BN), 1]` grid runs its loop from `0` to `dim A.1`
/// for A rows from `p·BM` and B columns from `q·BN`, and stores the accumulator (through
/// f32→f32 casts only) unmasked at `[p·BM, q·BN]`. Every output element is then stored once,
/// with the FMA chain of its row and column over all of K: the launch may compute the
/// product in one GEMM with its own blocking (`super::whole`).
fn plain(k: &Kernel, lp: &KLoop, pos: usize) -> Option<usize> {
    let def = |v: TValue| {
        k.body
            .iter()
            .map(|i| k.inst(*i))
            .find(|d| d.results.first() == Some(&v))
            .map(|d| &d.op)
    };
    let is_const = |v: TValue, x: f64| matches!(def(v), Some(Op::Const(c)) if *c == x);
    let scaled_pid = |v: TValue, axis: u8, tile: usize| match def(v) {
        Some(Op::Binary(BinaryOp::Mul, x, y)) => {
            let pid = |v: TValue| matches!(def(v), Some(Op::ProgramId(a)) if *a == axis);
            (pid(*x) && is_const(*y, tile as f64)) || (pid(*y) && is_const(*x, tile as f64))
        }
        _ => false,
    };
    let Op::For { lo, hi, .. } = &k.inst(lp.for_inst).op else {
        return None;
    };
    let grid = |param: usize, axis: usize, tile: usize| GridDim {
        dims: vec![(param, axis)],
        tile: tile as u32,
    };
    if !scaled_pid(lp.row, 0, lp.bm)
        || !scaled_pid(lp.col, 1, lp.bn)
        || !is_const(*lo, 0.0)
        || !matches!(def(*hi), Some(Op::Dim { param, axis: 1 }) if *param == lp.pa)
        || k.grid[0] != grid(lp.pa, 0, lp.bm)
        || k.grid[1] != grid(lp.pb, 1, lp.bn)
        || !k.grid[2].dims.is_empty()
    {
        return None;
    }
    let mut value = k.inst(lp.for_inst).results[0];
    let (last, casts) = k.body[pos + 1..].split_last()?;
    for i in casts {
        let d = k.inst(*i);
        match d.op {
            Op::Cast(x) if x == value && k.ty(d.results[0]).dtype == DType::F32 => {
                value = d.results[0]
            }
            _ => return None,
        }
    }
    match &k.inst(*last).op {
        Op::Store {
            param,
            index,
            value: v,
            mask: None,
        } if *v == value
            && index.as_slice() == [lp.row, lp.col]
            && k.params[*param].dtype == DType::F32
            && k.params[*param].rank == 2
            && *param != lp.pa
            && *param != lp.pb =>
        {
            Some(*param)
        }
        _ => None,
    }
}
