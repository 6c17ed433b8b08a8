//! Recognising the library's depthwise convolution (`tessera_kernels::depthwise_conv2d`) in
//! Tile IR: a program owns `BH` output rows of `BW` pixels × `BC` channels of a channels-last
//! `y [OH, OW, C]`; per row `r` it starts a `[BW, BC]` accumulator at `+0.0` and, for
//! `i < dim(f, 0)`, `j < dim(f, 1)` (in that nesting), adds `x[h0 + r + i, w0 + j, c0..] ·
//! f[i, j, c0..]` (the filter row expanded on axis 0), then stores it at `y[h0 + r, w0, c0]`,
//! with `h0, w0, c0 = program_id(0..3) · (BH, BW, BC)` and the grid `cdiv` of `y`'s axes by the
//! tile. Every op is checked (operands and their order, f32 dtypes, unmasked loads, loop
//! bounds and steps, the index arithmetic as affine forms of the program ids and loop
//! counters, the grid, the `fast` policy); a kernel that matches computes per element
//! `acc = acc + x·f` over the taps in `(i, j)` order from `+0.0`, which is what
//! [`super::depthwise`] computes. Anything else does not match.

use super::rowmatch::{Def, Ir};
use tessera_ir::graph::BinaryOp;
use tessera_ir::tile::{Inst, Kernel, Op, TValue};
use tessera_ir::{DType, NumericsPolicy};

/// A matched depthwise kernel: its parameters.
#[derive(Clone, Debug)]
pub(crate) struct Depthwise {
    /// The input `[H, W, C]`.
    pub x: usize,
    /// The filter `[KH, KW, C]`.
    pub f: usize,
    /// The output `[OH, OW, C]`.
    pub y: usize,
}

/// Affine form over `[1, pid0, pid1, pid2, r, i, j]`.
type Form = [i64; 7];

fn unit(n: usize) -> Form {
    let mut f = [0; 7];
    f[n] = 1;
    f
}

/// The scalar index `v` as an affine form of the program ids and the counters of loops
/// `ivs = [r, i, j]`: constants, program ids, those counters, `+`, `-`, and `·` by a constant.
fn affine(ir: &Ir, v: TValue, ivs: [Inst; 3]) -> Option<Form> {
    if !ir.k.ty(v).shape.is_empty() {
        return None;
    }
    match ir.def.get(&v)? {
        Def::Iv(l) => ivs.iter().position(|x| x == l).map(|n| unit(4 + n)),
        Def::Res(i, 0) => match &ir.k.inst(*i).op {
            Op::Const(c) if c.fract() == 0.0 && c.abs() < (1u64 << 31) as f64 => {
                let mut f = [0; 7];
                f[0] = *c as i64;
                Some(f)
            }
            Op::ProgramId(a) if *a < 3 => Some(unit(1 + *a as usize)),
            Op::Binary(op, a, b) => {
                let (p, q) = (affine(ir, *a, ivs)?, affine(ir, *b, ivs)?);
                let konst = |f: &Form| f[1..].iter().all(|&x| x == 0);
                let mut out = [0; 7];
                for n in 0..7 {
                    out[n] = match op {
                        BinaryOp::Add => p[n] + q[n],
                        BinaryOp::Sub => p[n] - q[n],
                        BinaryOp::Mul if konst(&q) => p[n] * q[0],
                        BinaryOp::Mul if konst(&p) => q[n] * p[0],
                        _ => return None,
                    };
                }
                Some(out)
            }
            _ => None,
        },
        _ => None,
    }
}

/// Loop `l` runs `for iv = 0 to hi step 1` with `hi` satisfying `bound`; returns its body,
/// inits and yields.
fn counted<'k>(
    ir: &Ir<'k>,
    l: Inst,
    bound: impl Fn(&Op) -> bool,
) -> Option<(&'k [Inst], &'k [TValue], &'k [TValue])> {
    let Op::For {
        lo,
        hi,
        step: 1,
        inits,
        body,
        ..
    } = &ir.k.inst(l).op
    else {
        return None;
    };
    let yields = match &ir.k.inst(*body.last()?).op {
        Op::Yield(y) => y.as_slice(),
        _ => return None,
    };
    let ok = ir.konst(*lo) == Some(0.0) && bound(ir.op(*hi)?);
    ok.then_some((body.as_slice(), inits.as_slice(), yields))
}

/// `v` is an unmasked f32 load of a rank-3 parameter with tile shape `shape`: the parameter
/// and its index.
fn load<'k>(ir: &Ir<'k>, v: TValue, shape: &[usize]) -> Option<(usize, &'k [TValue])> {
    let Some(Def::Res(i, 0)) = ir.def.get(&v) else {
        return None;
    };
    match &ir.k.inst(*i).op {
        Op::Load {
            param,
            index,
            mask: None,
            ..
        } if ir.k.ty(v).shape == shape
            && ir.k.ty(v).dtype == DType::F32
            && ir.k.params[*param].dtype == DType::F32
            && index.len() == 3 =>
        {
            Some((*param, index.as_slice()))
        }
        _ => None,
    }
}

/// The loop and carried value whose final value `v` is (no aliases looked through).
fn result(ir: &Ir, v: TValue) -> Option<(Inst, usize)> {
    match ir.def.get(&v)? {
        Def::Res(i, n) if matches!(ir.k.inst(*i).op, Op::For { .. }) => Some((*i, *n)),
        _ => None,
    }
}

/// The op that defines `v` directly (no aliases looked through).
fn def_op<'k>(ir: &Ir<'k>, v: TValue) -> Option<&'k Op> {
    match ir.def.get(&v)? {
        Def::Res(i, 0) => Some(&ir.k.inst(*i).op),
        _ => None,
    }
}

/// Matches the depthwise kernel (see the module docs).
pub(crate) fn depthwise(k: &Kernel) -> Option<Depthwise> {
    let ir = Ir::new(k);
    if k.policy != NumericsPolicy::Fast {
        return None;
    }
    let [st] = ir.stores.as_slice() else {
        return None;
    };
    let Op::Store {
        param: y,
        index: sidx,
        value,
        mask: None,
    } = &k.inst(*st).op
    else {
        return None;
    };
    let y = *y;
    if k.params[y].dtype != DType::F32 || sidx.len() != 3 {
        return None;
    }
    // The grid: `cdiv(dim(y, a), tile_a)` programs on axis `a`.
    let mut tile = [0usize; 3];
    for (a, g) in k.grid.iter().enumerate() {
        if g.dims.as_slice() != [(y, a)] || g.tile < 1 {
            return None;
        }
        tile[a] = g.tile as usize;
    }
    let [bh, bw, bc] = tile;
    // The row loop `r`: a top-level loop carrying nothing, whose body holds the store.
    let r = *k.body.iter().find(|&&l| match &k.inst(l).op {
        Op::For { body, .. } => body.contains(st),
        _ => false,
    })?;
    let (rbody, rinits, _) = counted(&ir, r, |o| matches!(o, Op::Const(c) if *c == bh as f64))?;
    if !rinits.is_empty() {
        return None;
    }
    // The tap loops: `i` in the row loop's body, `j` in `i`'s, carrying the accumulator.
    let acc_shape = [bw, bc];
    if k.ty(*value).shape != acc_shape || k.ty(*value).dtype != DType::F32 {
        return None;
    }
    let (li, 0) = result(&ir, *value)? else {
        return None;
    };
    if !rbody.contains(&li) {
        return None;
    }
    let dim_of = |axis: usize| move |o: &Op| matches!(o, Op::Dim { axis: a, .. } if *a == axis);
    let (ibody, [z], [yi]) = counted(&ir, li, dim_of(0))? else {
        return None;
    };
    if !ir.full(*z, 0.0) || k.ty(*z).shape != acc_shape {
        return None;
    }
    let (lj, 0) = result(&ir, *yi)? else {
        return None;
    };
    if !ibody.contains(&lj) {
        return None;
    }
    let (_, [zj], [yj]) = counted(&ir, lj, dim_of(1))? else {
        return None;
    };
    if !matches!(ir.def.get(zj), Some(Def::Arg(l, 0)) if *l == li) {
        return None;
    }
    // acc = acc + x · expand(f, 0).
    let Some(Op::Binary(BinaryOp::Add, acc, prod)) = def_op(&ir, *yj) else {
        return None;
    };
    if !matches!(ir.def.get(acc), Some(Def::Arg(l, 0)) if *l == lj)
        || k.ty(*yj).shape != acc_shape
        || k.ty(*yj).dtype != DType::F32
    {
        return None;
    }
    let Some(Op::Binary(BinaryOp::Mul, xv, fe)) = def_op(&ir, *prod) else {
        return None;
    };
    if k.ty(*prod).shape != acc_shape || k.ty(*prod).dtype != DType::F32 {
        return None;
    }
    let mut fe = *fe;
    if let Some(Op::Broadcast(a)) = def_op(&ir, fe) {
        fe = *a;
    }
    let Some(Op::Expand { a: fv, axis: 0 }) = def_op(&ir, fe) else {
        return None;
    };
    let (x, xidx) = load(&ir, *xv, &acc_shape)?;
    let (f, fidx) = load(&ir, *fv, &[bc])?;
    // Both tap loops run over `f`'s first two axes.
    let bound = |l: Inst, axis: usize| {
        let Op::For { hi, .. } = &k.inst(l).op else {
            return false;
        };
        matches!(ir.op(*hi), Some(Op::Dim { param, axis: a }) if *param == f && *a == axis)
    };
    if !bound(li, 0) || !bound(lj, 1) || x == y || f == y {
        return None;
    }
    // Indices as affine forms over [1, pid0, pid1, pid2, r, i, j].
    let (h, w, c) = (bh as i64, bw as i64, bc as i64);
    let want: [(&[TValue], [Form; 3]); 3] = [
        (
            sidx,
            [
                [0, h, 0, 0, 1, 0, 0],
                [0, 0, w, 0, 0, 0, 0],
                [0, 0, 0, c, 0, 0, 0],
            ],
        ),
        (
            xidx,
            [
                [0, h, 0, 0, 1, 1, 0],
                [0, 0, w, 0, 0, 0, 1],
                [0, 0, 0, c, 0, 0, 0],
            ],
        ),
        (
            fidx,
            [
                [0, 0, 0, 0, 0, 1, 0],
                [0, 0, 0, 0, 0, 0, 1],
                [0, 0, 0, c, 0, 0, 0],
            ],
        ),
    ];
    let ivs = [r, li, lj];
    let ok = want.iter().all(|(idx, forms)| {
        idx.iter()
            .zip(forms)
            .all(|(v, f)| affine(&ir, *v, ivs).as_ref() == Some(f))
    });
    ok.then_some(Depthwise { x, f, y })
}
