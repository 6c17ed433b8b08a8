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
            if !(2..=3).contains(&ra) || !(2..=3).contains(&rb) {
                return Err(format!(
                    "operands must be rank 2 or 3 (batched), got {a} and {b}"
                ));
            }
            let (m, k1) = (&a.shape.0[ra - 2], &a.shape.0[ra - 1]);
            let (k2, n) = (&b.shape.0[rb - 2], &b.shape.0[rb - 1]);
            if k1 != k2 {
                return Err(format!(
                    "inner dims differ: {a} × {b} contracts {k1} with {k2}"
                ));
            }
            let mut dims = Vec::new();
            match (ra, rb) {
                (3, 3) => {
                    if a.shape.0[0] != b.shape.0[0] {
                        return Err(format!(
                            "batch dims differ: {} vs {}",
                            a.shape.0[0], b.shape.0[0]
                        ));
                    }
                    dims.push(a.shape.0[0].clone());
                }
                (3, 2) => dims.push(a.shape.0[0].clone()),
                (2, 3) => {
                    return Err(format!(
                        "a rank-2 left operand cannot multiply a batched right operand {b}"
                    ));
                }
                _ => {}
            }
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
        Op::Softmax { .. } => {
            arity(1)?;
            float_only(op, args[0].dtype)?;
            rank_at_least_1(args[0])?;
            Ok(TensorType::new(DType::F32, args[0].shape.clone()))
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
