//! Type inference for Graph IR nodes: the one place the typing rules live.

use super::{BinaryOp, Op};
use crate::{DType, Dim, Shape, TensorType};

/// Infers the result type of `op` applied to arguments of types `args`.
/// The error says which rule was broken, naming the dims or dtypes involved.
pub fn infer(op: &Op, args: &[&TensorType]) -> Result<TensorType, String> {
    let arity = |n: usize| -> Result<(), String> {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("expects {n} operand(s), got {}", args.len()))
        }
    };
    match op {
        Op::Param { .. } => Err("parameters are declared in the signature, not built".into()),
        Op::Const { dtype, .. } => {
            arity(0)?;
            Ok(TensorType::new(*dtype, Shape::scalar()))
        }
        Op::Unary(_) => {
            arity(1)?;
            float_only(op, args[0].dtype)?;
            Ok(args[0].clone())
        }
        Op::Binary(b) => {
            arity(2)?;
            let (x, y) = (args[0], args[1]);
            if x.dtype != y.dtype {
                return Err(format!(
                    "dtype mismatch: {} of {} and {} (insert a cast)",
                    b.name(),
                    x.dtype,
                    y.dtype
                ));
            }
            if matches!(b, BinaryOp::Div) {
                float_only(op, x.dtype)?;
            }
            Ok(TensorType::new(x.dtype, x.shape.broadcast(&y.shape)?))
        }
        Op::Cast(to) => {
            arity(1)?;
            Ok(TensorType::new(*to, args[0].shape.clone()))
        }
        Op::Broadcast => Err("broadcast takes its target type explicitly".into()),
        Op::Reduce { axes, keepdim, .. } => {
            arity(1)?;
            let x = args[0];
            let rank = x.shape.rank();
            let mut seen = vec![false; rank];
            for &a in axes {
                if a >= rank {
                    return Err(format!("axis {a} out of range for rank-{rank} operand {x}"));
                }
                if std::mem::replace(&mut seen[a], true) {
                    return Err(format!("axis {a} listed twice"));
                }
            }
            if axes.is_empty() {
                return Err("no axes to reduce".into());
            }
            let dims = x
                .shape
                .0
                .iter()
                .enumerate()
                .filter_map(|(i, d)| match (seen[i], keepdim) {
                    (false, _) => Some(d.clone()),
                    (true, true) => Some(Dim::Const(1)),
                    (true, false) => None,
                });
            Ok(TensorType::new(
                x.dtype.accumulator(),
                Shape(dims.collect()),
            ))
        }
        Op::Matmul { acc, .. } => {
            arity(2)?;
            let (a, b) = (args[0], args[1]);
            if a.dtype != b.dtype {
                return Err(format!(
                    "dtype mismatch: matmul of {} and {}",
                    a.dtype, b.dtype
                ));
            }
            let accs: &[DType] = if a.dtype.is_float() {
                &[DType::F32, DType::BF16, DType::F16]
            } else {
                &[DType::I32]
            };
            if a.dtype == DType::Bool || !accs.contains(acc) {
                let names: Vec<&str> = accs.iter().map(|d| d.name()).collect();
                return Err(format!(
                    "a matmul of {} cannot accumulate in {acc}: the accumulator is one of {}",
                    a.dtype,
                    names.join(", ")
                ));
            }
            let (ra, rb) = (a.shape.rank(), b.shape.rank());
            if ra < 2 || rb < 2 {
                return Err(format!(
                    "operands must have rank ≥ 2 (leading dims are batch dims), got {a} and {b}"
                ));
            }
            let (m, k1) = (&a.shape.0[ra - 2], &a.shape.0[ra - 1]);
            let (k2, n) = (&b.shape.0[rb - 2], &b.shape.0[rb - 1]);
            if k1 != k2 {
                return Err(format!(
                    "inner dims differ: {a} × {b} contracts {k1} with {k2}"
                ));
            }
            // A rank-2 right operand is shared by every batch of the left one; otherwise
            // both carry the same batch dims.
            if rb > 2 {
                if ra == 2 {
                    return Err(format!(
                        "a rank-2 left operand cannot multiply a batched right operand {b}"
                    ));
                }
                if a.shape.0[..ra - 2] != b.shape.0[..rb - 2] {
                    return Err(format!(
                        "batch dims differ: [{}] vs [{}]",
                        join(&a.shape.0[..ra - 2]),
                        join(&b.shape.0[..rb - 2])
                    ));
                }
            }
            let mut dims = a.shape.0[..ra - 2].to_vec();
            dims.push(m.clone());
            dims.push(n.clone());
            Ok(TensorType::new(*acc, Shape(dims)))
        }
        Op::Transpose => {
            arity(1)?;
            let x = args[0];
            let r = x.shape.rank();
            if r < 2 {
                return Err(format!("needs rank ≥ 2, got {x}"));
            }
            let mut d = x.shape.0.clone();
            d.swap(r - 1, r - 2);
            Ok(TensorType::new(x.dtype, Shape(d)))
        }
        Op::Softmax { axis, .. } => {
            arity(1)?;
            float_only(op, args[0].dtype)?;
            rank_at_least_1(args[0])?;
            let rank = args[0].shape.rank();
            if *axis >= rank {
                return Err(format!(
                    "axis {axis} out of range for rank-{rank} operand {}",
                    args[0]
                ));
            }
            Ok(TensorType::new(DType::F32, args[0].shape.clone()))
        }
        Op::Permute(perm) => {
            arity(1)?;
            let x = args[0];
            let rank = x.shape.rank();
            if perm.len() != rank {
                return Err(format!(
                    "perm {perm:?} has {} axes but the operand {x} has rank {rank}",
                    perm.len()
                ));
            }
            let mut seen = vec![false; rank];
            for &a in perm {
                if a >= rank {
                    return Err(format!("axis {a} out of range for rank-{rank} operand {x}"));
                }
                if std::mem::replace(&mut seen[a], true) {
                    return Err(format!("axis {a} listed twice in perm {perm:?}"));
                }
            }
            let dims = perm.iter().map(|&a| x.shape.0[a].clone()).collect();
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => {
            if !(eps.is_finite() && *eps > 0.0) {
                return Err(format!("eps must be finite and > 0, got {eps}"));
            }
            let n_params = if matches!(op, Op::LayerNorm { .. }) {
                3
            } else {
                2
            };
            arity(n_params)?;
            let x = args[0];
            float_only(op, x.dtype)?;
            rank_at_least_1(x)?;
            let last = x.shape.0.last().unwrap();
            for p in &args[1..] {
                if p.shape.0.as_slice() != [last.clone()] {
                    return Err(format!("scale/shift must have shape [{last}], got {p}"));
                }
            }
            Ok(TensorType::new(DType::F32, x.shape.clone()))
        }
        Op::CausalMask => {
            arity(1)?;
            float_only(op, args[0].dtype)?;
            if args[0].shape.rank() < 2 {
                return Err(format!(
                    "needs rank ≥ 2 (scores [.., Sq, Sk]), got {}",
                    args[0]
                ));
            }
            Ok(args[0].clone())
        }
        Op::Attention { scale, .. } => {
            arity(3)?;
            attention(args, *scale)
        }
        Op::Conv2d(c) => {
            arity(2)?;
            conv2d(args[0], args[1], c)
        }
        Op::Fft { axis, .. } => {
            arity(1)?;
            let x = complex_operand(args[0])?;
            let r = x.shape.rank();
            if *axis + 1 >= r {
                return Err(format!(
                    "axis {axis} is not a logical axis of {x} (the last axis holds (re, im))"
                ));
            }
            fft_length(&x.shape.0[*axis], *axis)?;
            Ok(x.clone())
        }
        Op::Complex => {
            arity(1)?;
            float_only(op, args[0].dtype)?;
            let mut d = args[0].shape.0.clone();
            d.push(Dim::Const(2));
            Ok(TensorType::new(DType::F32, Shape(d)))
        }
        Op::Real => {
            arity(1)?;
            let x = complex_operand(args[0])?;
            let r = x.shape.rank();
            Ok(TensorType::new(
                DType::F32,
                Shape(x.shape.0[..r - 1].to_vec()),
            ))
        }
        Op::Pad { lo, hi, interior } => {
            arity(1)?;
            let x = args[0];
            let r = x.shape.rank();
            if lo.len() != r || hi.len() != r || interior.len() != r {
                return Err(format!(
                    "needs {r} lo, hi and interior amounts for {x}, got {}, {} and {}",
                    lo.len(),
                    hi.len(),
                    interior.len()
                ));
            }
            let mut dims = Vec::with_capacity(r);
            for (a, d) in x.shape.0.iter().enumerate() {
                let grow = lo[a] + hi[a];
                let int = interior[a] as i64;
                dims.push(match d {
                    _ if lo[a] == 0 && hi[a] == 0 && int == 0 => d.clone(),
                    Dim::Const(n) if padded_extent(*n as i64, int) + grow >= 1 => {
                        Dim::Const((padded_extent(*n as i64, int) + grow) as u64)
                    }
                    Dim::Const(n) => {
                        return Err(format!(
                            "axis {a} of extent {n} padded by {} and {} (interior {int}) leaves nothing",
                            lo[a], hi[a]
                        ));
                    }
                    Dim::Sym(s) => {
                        return Err(format!(
                            "axis {a} has symbolic extent {s}: padding needs a constant extent"
                        ));
                    }
                });
            }
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::SpectralMul { groups } => {
            arity(2)?;
            spectral_mul(args[0], args[1], *groups)
        }
    }
}

fn float_only(op: &Op, d: DType) -> Result<(), String> {
    if d.is_float() {
        Ok(())
    } else {
        Err(format!("{} needs a float operand, got {d}", op.name()))
    }
}

fn rank_at_least_1(x: &TensorType) -> Result<(), String> {
    if x.shape.rank() >= 1 {
        Ok(())
    } else {
        Err(format!("needs rank ≥ 1, got {x}"))
    }
}

fn join(d: &[Dim]) -> String {
    d.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `q, k, v` of an attention: same rank ≥ 2, dtype and leading dims; `k` and `q` share the
/// head dim, `k` and `v` the key count.
fn attention(args: &[&TensorType], scale: f64) -> Result<TensorType, String> {
    let (q, k, v) = (args[0], args[1], args[2]);
    if !scale.is_finite() {
        return Err(format!("scale must be finite, got {scale}"));
    }
    if q.dtype != k.dtype || q.dtype != v.dtype || !q.dtype.is_float() {
        return Err(format!(
            "q, k and v need one float dtype, got {}, {} and {}",
            q.dtype, k.dtype, v.dtype
        ));
    }
    let r = q.shape.rank();
    if r < 2 || k.shape.rank() != r || v.shape.rank() != r {
        return Err(format!(
            "q, k and v need one rank ≥ 2 ([.., S, D]), got {q}, {k} and {v}"
        ));
    }
    if q.shape.0[..r - 2] != k.shape.0[..r - 2] || q.shape.0[..r - 2] != v.shape.0[..r - 2] {
        return Err(format!("batch/head dims differ: {q}, {k} and {v}"));
    }
    if q.shape.0[r - 1] != k.shape.0[r - 1] {
        return Err(format!(
            "head dims differ: q {q} and k {k} (q·kᵀ contracts {} with {})",
            q.shape.0[r - 1],
            k.shape.0[r - 1]
        ));
    }
    if k.shape.0[r - 2] != v.shape.0[r - 2] {
        return Err(format!(
            "key counts differ: k {k} and v {v} ({} vs {})",
            k.shape.0[r - 2],
            v.shape.0[r - 2]
        ));
    }
    let mut d = q.shape.0[..r - 1].to_vec();
    d.push(v.shape.0[r - 1].clone());
    Ok(TensorType::new(DType::F32, Shape(d)))
}

fn constant(d: &Dim, what: &str) -> Result<u64, String> {
    match d {
        Dim::Const(n) => Ok(*n),
        Dim::Sym(s) => Err(format!(
            "{what} is the symbolic dim {s}; conv2d needs constant spatial dims"
        )),
    }
}

/// `x: [N, H, W, C]` by `w: [KH, KW, C/groups, F]` → `f32[N, OH, OW, F]`.
fn conv2d(x: &TensorType, w: &TensorType, c: &super::Conv2d) -> Result<TensorType, String> {
    if x.dtype != w.dtype || !x.dtype.is_float() {
        return Err(format!(
            "x and w need one float dtype, got {} and {}",
            x.dtype, w.dtype
        ));
    }
    if x.shape.rank() != 4 || w.shape.rank() != 4 {
        return Err(format!(
            "x must be [N, H, W, C] and w [KH, KW, C/groups, F], got {x} and {w}"
        ));
    }
    if c.stride.contains(&0) || c.dilation.contains(&0) || c.groups == 0 {
        return Err(format!(
            "stride {:?}, dilation {:?} and groups {} must be ≥ 1",
            c.stride, c.dilation, c.groups
        ));
    }
    let (xs, ws) = (&x.shape.0, &w.shape.0);
    let (h, wd) = (constant(&xs[1], "H")?, constant(&xs[2], "W")?);
    let (kh, kw) = (constant(&ws[0], "KH")?, constant(&ws[1], "KW")?);
    if c.groups == 1 {
        if ws[2] != xs[3] {
            return Err(format!(
                "w's input channels {} differ from x's {} (groups = 1)",
                ws[2], xs[3]
            ));
        }
    } else {
        let (cin, cg) = (
            constant(&xs[3], "C (grouped)")?,
            constant(&ws[2], "C/groups")?,
        );
        let f = constant(&ws[3], "F (grouped)")?;
        if cin % c.groups != 0 || f % c.groups != 0 || cg * c.groups != cin {
            return Err(format!(
                "groups = {} must divide C = {cin} and F = {f}, and w must hold C/groups = {} input channels, got {cg}",
                c.groups,
                cin / c.groups.max(1),
            ));
        }
    }
    let oh = c.out_extent(0, h, kh).ok_or_else(|| {
        format!(
            "the {kh}-tall kernel (dilation {}) does not fit H = {h} padded by {}",
            c.dilation[0], c.padding[0]
        )
    })?;
    let ow = c.out_extent(1, wd, kw).ok_or_else(|| {
        format!(
            "the {kw}-wide kernel (dilation {}) does not fit W = {wd} padded by {}",
            c.dilation[1], c.padding[1]
        )
    })?;
    Ok(TensorType::new(
        DType::F32,
        Shape(vec![
            xs[0].clone(),
            Dim::Const(oh),
            Dim::Const(ow),
            ws[3].clone(),
        ]),
    ))
}

/// The FFT lengths the backends support: powers of two up to this.
pub const FFT_MAX_LENGTH: u64 = 4096;

/// Checks an FFT length: a constant power of two ≤ [`FFT_MAX_LENGTH`].
fn fft_length(d: &Dim, axis: usize) -> Result<u64, String> {
    match d {
        Dim::Const(n) if n.is_power_of_two() && *n <= FFT_MAX_LENGTH => Ok(*n),
        Dim::Const(n) => Err(format!(
            "length {n} of axis {axis} is not supported: FFT lengths are powers of two from 1 to {FFT_MAX_LENGTH}"
        )),
        Dim::Sym(s) => Err(format!(
            "axis {axis} has symbolic length {s}: FFT lengths must be constants (powers of two ≤ {FFT_MAX_LENGTH})"
        )),
    }
}

/// A complex operand: f32 with a last axis of size 2.
fn complex_operand(x: &TensorType) -> Result<&TensorType, String> {
    if x.dtype != DType::F32 || x.shape.0.last() != Some(&Dim::Const(2)) || x.shape.rank() < 2 {
        return Err(format!(
            "needs a complex operand (f32 with (re, im) pairs in a last axis of size 2), got {x}"
        ));
    }
    Ok(x)
}

/// `X: [N, P, Q, C, 2]` by `W: [P, Q, C/groups, F, 2]` → `f32[N, P, Q, F, 2]`.
fn spectral_mul(x: &TensorType, w: &TensorType, groups: u64) -> Result<TensorType, String> {
    let (x, w) = (complex_operand(x)?, complex_operand(w)?);
    if x.shape.rank() != 5 || w.shape.rank() != 5 {
        return Err(format!(
            "X must be [N, P, Q, C, 2] and W [P, Q, C/groups, F, 2], got {x} and {w}"
        ));
    }
    let (xs, ws) = (&x.shape.0, &w.shape.0);
    if xs[1] != ws[0] || xs[2] != ws[1] {
        return Err(format!(
            "frequency grids differ: X has [{}, {}], W [{}, {}]",
            xs[1], xs[2], ws[0], ws[1]
        ));
    }
    if groups == 0 {
        return Err("groups must be ≥ 1".into());
    }
    if groups == 1 {
        if xs[3] != ws[2] {
            return Err(format!("channels differ: X has {}, W {}", xs[3], ws[2]));
        }
    } else {
        match (&xs[3], &ws[2], &ws[3]) {
            (Dim::Const(c), Dim::Const(cg), Dim::Const(f))
                if c % groups == 0 && f % groups == 0 && cg * groups == *c => {}
            _ => {
                return Err(format!(
                    "groups = {groups} must divide constant C = {} and F = {}, with W holding C/groups channels ({})",
                    xs[3], ws[3], ws[2]
                ));
            }
        }
    }
    let d = vec![
        xs[0].clone(),
        xs[1].clone(),
        xs[2].clone(),
        ws[3].clone(),
        Dim::Const(2),
    ];
    Ok(TensorType::new(DType::F32, Shape(d)))
}

/// The extent of an axis of `n` elements with `interior` zeros inserted between neighbours.
fn padded_extent(n: i64, interior: i64) -> i64 {
    if n == 0 { 0 } else { n + (n - 1) * interior }
}
