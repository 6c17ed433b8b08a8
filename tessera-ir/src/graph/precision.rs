//! Applying a precision mode (seeds table A.3) to a graph: casts before each matmul's operands,
//! its accumulator, the result cast back, and the mode's numerics policy.

use super::{BinaryOp, Graph, GraphBuilder, Op, ReduceOp, UnaryOp, Value, with_policy};
use crate::{DType, Precision, fp8::Fp8};

/// `g` compiled under `mode` ([`Precision`] has the table): every matmul reads its operands
/// in the mode's input dtype and accumulates in its accumulator dtype, and its result is cast
/// back to the dtype the graph declared, so every other node keeps its type; then the mode's
/// policy applies to every reduction ([`with_policy`]).
///
/// Under `Aggressive` each operand `x` is quantised to fp8 e4m3 with a per-tensor scale from
/// its absolute maximum, as Transformer Engine does: `s = 448 / amax(|x|)`,
/// `q = cast<f8e4m3>(x·s)` (saturating), and the product is divided by `s_a·s_b`.
///
/// ```
/// use tessera_ir::{Precision, graph::{parse, with_precision}};
/// let g = parse("graph @mm(%x: f32[M, K], %w: f32[K, N]) -> f32[M, N] {\n  %2 = matmul %x, %w : f32[M, N]\n  return %2\n}").unwrap();
/// let s = with_precision(&g, Precision::Standard).unwrap().to_string();
/// assert!(s.contains("= cast %x : bf16[M, K]"), "{s}");
/// assert!(s.contains("acc=f32"), "{s}");
/// ```
pub fn with_precision(g: &Graph, mode: Precision) -> Result<Graph, String> {
    let mut b = Graph::builder(&g.name);
    let mut map: Vec<Value> = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let args: Vec<Value> = n.args.iter().map(|a| map[a.index()]).collect();
        let v = match &n.op {
            Op::Param { name, .. } => b.param(name, n.ty.clone()),
            Op::Matmul { acc, policy } => {
                let (mut x, mut y) = (args[0], args[1]);
                let scales = if mode == Precision::Aggressive && b.ty(x).dtype.is_float() {
                    let (qx, sx) = quantise(&mut b, x)?;
                    let (qy, sy) = quantise(&mut b, y)?;
                    (x, y) = (qx, qy);
                    Some((sx, sy))
                } else {
                    if let Some(d) = mode.input(b.ty(x).dtype) {
                        x = push(&mut b, Op::Cast(d), &[x])?;
                        y = push(&mut b, Op::Cast(d), &[y])?;
                    }
                    None
                };
                let acc_mode = if b.ty(x).dtype.is_float() {
                    mode.accumulator()
                } else {
                    *acc
                };
                let mut p = push(
                    &mut b,
                    Op::Matmul {
                        acc: acc_mode,
                        policy: *policy,
                    },
                    &[x, y],
                )?;
                if let Some((sx, sy)) = scales {
                    p = cast(&mut b, p, DType::F32)?;
                    let s = push(&mut b, Op::Binary(BinaryOp::Mul), &[sx, sy])?;
                    p = push(&mut b, Op::Binary(BinaryOp::Div), &[p, s])?;
                }
                cast(&mut b, p, *acc)?
            }
            op => b.push_typed(op.clone(), &args, n.ty.clone()),
        };
        map.push(v);
    }
    let out = b.finish(map[g.output.index()]);
    super::verify(&out).map_err(|e| format!("precision {mode}: {e}"))?;
    with_policy(&out, mode.policy())
}

fn push(b: &mut GraphBuilder, op: Op, args: &[Value]) -> Result<Value, String> {
    b.push(op, args).map_err(|e| e.to_string())
}

fn cast(b: &mut GraphBuilder, v: Value, to: DType) -> Result<Value, String> {
    if b.ty(v).dtype == to {
        Ok(v)
    } else {
        push(b, Op::Cast(to), &[v])
    }
}

/// `(cast<f8e4m3>(x·s), s)` with `s = 448 / max(amax(|x|), f32::MIN_POSITIVE)` (a scalar).
fn quantise(b: &mut GraphBuilder, x: Value) -> Result<(Value, Value), String> {
    let xf = cast(b, x, DType::F32)?;
    let mut m = push(b, Op::Unary(UnaryOp::Abs), &[xf])?;
    while b.ty(m).shape.rank() > 0 {
        let last = b.ty(m).shape.rank() - 1;
        m = push(
            b,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![last],
                keepdim: false,
                policy: Default::default(),
            },
            &[m],
        )?;
    }
    let tiny = push(
        b,
        Op::Const {
            value: f32::MIN_POSITIVE as f64,
            dtype: DType::F32,
        },
        &[],
    )?;
    let m = push(b, Op::Binary(BinaryOp::Max), &[m, tiny])?;
    let top = push(
        b,
        Op::Const {
            value: Fp8::E4M3.max(),
            dtype: DType::F32,
        },
        &[],
    )?;
    let s = push(b, Op::Binary(BinaryOp::Div), &[top, m])?;
    let xs = push(b, Op::Binary(BinaryOp::Mul), &[xf, s])?;
    let q = push(b, Op::Cast(DType::F8E4M3), &[xs])?;
    Ok((q, s))
}
