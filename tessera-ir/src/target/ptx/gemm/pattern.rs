//! Recognising a matmul-class kernel in Tile IR, structurally.
//!
//! The shape we accept (what `lower::matmul` produces, but matched by structure, not names):
//! top-level scalar `i32` index arithmetic (`program_id`, `const`, `dim`, binary ops), one
//! `full` accumulator initialiser, one `for` whose body is exactly `load A`, `load B`,
//! `dot A, B, acc`, `yield`, where A is indexed `[lead.., x, iv]` with tile `[BM, BK]` and B
//! `[lead.., iv, y]` with tile `[BK, BN]`; then epilogue ops; then one `store` as the last
//! instruction. A may instead be an `im2col` gather (`[row, iv]` with the input channel offset
//! `chan`): the implicit-GEMM convolution of `lower::conv`, whose A copy gathers from the NHWC
//! input ([`super::copy`]). Anything else is "not ours" (`None`) and goes to the generic
//! emitter.

use crate::DType;
use crate::tile::{Im2colGeom, Inst, Kernel, Op, TValue};

/// A recognised GEMM: where its pieces are in the kernel.
pub(super) struct Gemm<'k> {
    pub k: &'k Kernel,
    /// Parameter indices of A and B.
    pub pa: usize,
    pub pb: usize,
    /// Input element type (A and B agree): bf16, f16, f32, e4m3 or e5m2.
    pub dtype: DType,
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    /// When A is an `im2col` gather: its geometry and channel-offset scalar.
    pub a_gather: Option<(Im2colGeom, TValue)>,
    /// Full index of the A load (`[lead.., x, iv]`, a gather's `[row, iv]`) and the B load
    /// (`[lead.., iv, y]`).
    pub a_index: Vec<TValue>,
    pub b_index: Vec<TValue>,
    /// Loop bounds.
    pub lo: TValue,
    pub hi: TValue,
    /// Initial accumulator value (`full`).
    pub acc_init: f64,
    /// The loop's result (the final accumulator).
    pub acc: TValue,
    /// Top-level instructions before the loop (scalars, the `full`), and after it (epilogue).
    pub pre: Vec<Inst>,
    pub post: Vec<Inst>,
    /// The final store.
    pub store: Inst,
}

/// Matches `k` against the GEMM shape; `None` when it is something else.
pub(super) fn recognise(k: &Kernel) -> Option<Gemm<'_>> {
    let pos = k
        .body
        .iter()
        .position(|i| matches!(k.inst(*i).op, Op::For { .. }))?;
    let for_data = k.inst(k.body[pos]);
    let Op::For {
        iv,
        lo,
        hi,
        step,
        inits,
        args,
        body,
    } = &for_data.op
    else {
        return None;
    };
    if inits.len() != 1 || args.len() != 1 || body.len() != 4 || for_data.results.len() != 1 {
        return None;
    }
    // A second loop anywhere at top level: not ours.
    if k.body[pos + 1..]
        .iter()
        .any(|i| matches!(k.inst(*i).op, Op::For { .. }))
    {
        return None;
    }
    let dot = body.iter().find_map(|i| match &k.inst(*i).op {
        Op::Dot { a, b, acc } => Some((*a, *b, *acc, k.inst(*i).results[0])),
        _ => None,
    })?;
    let (da, db, dacc, dres) = dot;
    if dacc != args[0] {
        return None;
    }
    match &k.inst(*body.last()?).op {
        Op::Yield(v) if v.as_slice() == [dres] => {}
        _ => return None,
    }
    let load_of = |v: TValue| {
        body.iter().find_map(|i| {
            let d = k.inst(*i);
            match &d.op {
                Op::Load {
                    param,
                    index,
                    mask: None,
                    other,
                } if d.results == [v] && *other == 0.0 => Some((*param, index.clone())),
                _ => None,
            }
        })
    };
    let gather = body.iter().find_map(|i| {
        let d = k.inst(*i);
        match &d.op {
            Op::Im2col {
                param,
                row,
                col,
                chan,
                geom,
            } if d.results == [da] => Some((*param, vec![*row, *col], (*geom, *chan))),
            _ => None,
        }
    });
    let (pa, a_index, a_gather) = match gather {
        Some((p, ix, g)) => (p, ix, Some(g)),
        None => {
            let (p, ix) = load_of(da)?;
            (p, ix, None)
        }
    };
    let (pb, b_index) = load_of(db)?;
    let (ta, tb) = (k.ty(da), k.ty(db));
    if ta.shape.len() != 2 || tb.shape.len() != 2 || ta.shape[1] != tb.shape[0] {
        return None;
    }
    let (bm, bk, bn) = (ta.shape[0], ta.shape[1], tb.shape[1]);
    if *step != bk as i64 || k.ty(dres).shape != [bm, bn] || k.ty(dres).dtype != DType::F32 {
        return None;
    }
    let dtype = ta.dtype;
    if tb.dtype != dtype
        || !matches!(
            dtype,
            DType::BF16 | DType::F16 | DType::F32 | DType::F8E4M3 | DType::F8E5M2
        )
    {
        return None;
    }
    // A: [lead.., x, iv]; B: [lead.., iv, y]; iv nowhere else.
    let (na, nb) = (a_index.len(), b_index.len());
    if na < 2 || nb < 2 || a_index[na - 1] != *iv || b_index[nb - 2] != *iv {
        return None;
    }
    let uses_iv =
        |ix: &[TValue], skip: usize| ix.iter().enumerate().any(|(n, v)| n != skip && v == iv);
    if uses_iv(&a_index, na - 1) || uses_iv(&b_index, nb - 2) {
        return None;
    }
    let init = k.body[..pos]
        .iter()
        .find(|i| k.inst(**i).results == [inits[0]])?;
    let acc_init = match k.inst(*init).op {
        Op::Full(x) => x,
        _ => return None,
    };
    let store = *k.body.last()?;
    if !matches!(k.inst(store).op, Op::Store { .. }) || k.body.len() < pos + 2 {
        return None;
    }
    // Before the loop: scalars only (plus the accumulator's `full`).
    let pre: Vec<Inst> = k.body[..pos].to_vec();
    for i in &pre {
        let d = k.inst(*i);
        let scalar = d.results.iter().all(|r| k.ty(*r).shape.is_empty());
        if !(scalar || *i == *init) {
            return None;
        }
    }
    let post = k.body[pos + 1..k.body.len() - 1].to_vec();
    if post
        .iter()
        .any(|i| matches!(k.inst(*i).op, Op::Store { .. }))
    {
        return None;
    }
    Some(Gemm {
        k,
        pa,
        pb,
        dtype,
        bm,
        bn,
        bk,
        a_gather,
        a_index,
        b_index,
        lo: *lo,
        hi: *hi,
        acc_init,
        acc: for_data.results[0],
        pre,
        post,
        store,
    })
}
