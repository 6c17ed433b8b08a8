//! `flash_attention`: `softmax(scale · q·kᵀ [causal_mask]) [cast] · v` → one `attention` node.
//!
//! Pattern, from the root (the second matmul) inwards: `matmul(p, v)` where `p` is
//! `softmax(s)` or `cast::<T>(softmax(s))` with `T` the dtype of `v`; `s` peels any order of
//! one `causal_mask` and multiplications / divisions by scalar constants (the scale) down to
//! `matmul(q, transpose(k))`. `q`, `k`, `v` must share their rank and dtype (so the cast, when
//! there is one, rounds the probabilities to the inputs' dtype exactly as `attention` does).
//!
//! Legal when every intermediate has no other use (else the scores must reach memory anyway)
//! and the head dims are constants ≤ 256 (the fused kernel keeps a query block's row of the
//! head dim in registers). The scale must be positive under a causal mask (a negative factor
//! would turn the mask's −∞ into +∞).

use super::{Match, Rule, single_use};
use crate::cost::graph::{Sizes, Work};
use crate::graph::{BinaryOp, Graph, GraphBuilder, Op, TypeError, Value};
use crate::{DType, NumericsPolicy};

/// The largest head dim the fused kernel takes.
pub const MAX_HEAD_DIM: u64 = 256;

pub(super) const FLASH_ATTENTION: Rule = Rule {
    name: "flash_attention",
    summary: "softmax(scale · q·kᵀ [causal_mask]) · v as one online-softmax kernel",
    pattern,
    legal,
    cost,
    replace,
};

/// The value of a rank-0 constant node.
fn scalar(g: &Graph, v: Value) -> Option<f64> {
    match g.node(v).op {
        Op::Const { value, .. } if g.ty(v).shape.rank() == 0 => Some(value),
        _ => None,
    }
}

fn pattern(g: &Graph, root: Value) -> Option<Match> {
    let n = g.node(root);
    if !matches!(n.op, Op::Matmul { .. }) {
        return None;
    }
    let (p, v) = (n.args[0], n.args[1]);
    let mut nodes = Vec::new();
    // Only a softmax over the scores' last axis (the keys) is an attention.
    let last_axis_softmax = |s: Value| match g.node(s).op {
        Op::Softmax { axis, .. } => axis + 1 == g.ty(s).shape.rank(),
        _ => false,
    };
    let sm = match g.node(p).op {
        Op::Softmax { .. } if last_axis_softmax(p) => p,
        Op::Cast(d) if d == g.ty(v).dtype && last_axis_softmax(g.node(p).args[0]) => {
            nodes.push(p);
            g.node(p).args[0]
        }
        _ => return None,
    };
    nodes.push(sm);
    let (mut x, mut scale, mut causal) = (g.node(sm).args[0], 1.0f64, false);
    loop {
        let xn = g.node(x);
        match xn.op {
            Op::CausalMask if !causal => {
                causal = true;
                nodes.push(x);
                x = xn.args[0];
            }
            Op::Binary(BinaryOp::Mul) => {
                let (a, b) = (xn.args[0], xn.args[1]);
                let (c, other) = match (scalar(g, a), scalar(g, b)) {
                    (_, Some(c)) => (c, a),
                    (Some(c), None) => (c, b),
                    _ => break,
                };
                scale *= c;
                nodes.push(x);
                x = other;
            }
            Op::Binary(BinaryOp::Div) => match scalar(g, xn.args[1]) {
                Some(c) if c != 0.0 => {
                    scale /= c;
                    nodes.push(x);
                    x = xn.args[0];
                }
                _ => break,
            },
            _ => break,
        }
    }
    let qk = g.node(x);
    if !matches!(qk.op, Op::Matmul { .. }) {
        return None;
    }
    let (q, kt) = (qk.args[0], qk.args[1]);
    if g.node(kt).op != Op::Transpose {
        return None;
    }
    let k = g.node(kt).args[0];
    let r = g.ty(q).shape.rank();
    let (tq, tk, tv) = (g.ty(q), g.ty(k), g.ty(v));
    if tk.shape.rank() != r || tv.shape.rank() != r || tq.dtype != tk.dtype || tq.dtype != tv.dtype
    {
        return None;
    }
    // Without a cast the probabilities meet `v` in f32, so the inputs must be f32.
    if !nodes.iter().any(|n| matches!(g.node(*n).op, Op::Cast(_))) && tv.dtype != DType::F32 {
        return None;
    }
    nodes.push(x);
    nodes.push(kt);
    nodes.reverse();
    nodes.push(root);
    Some(Match {
        root,
        nodes,
        inputs: vec![q, k, v],
        op: Op::Attention {
            scale,
            causal,
            policy: NumericsPolicy::Fast,
        },
    })
}

fn legal(g: &Graph, m: &Match) -> Result<(), String> {
    for n in &m.nodes[..m.nodes.len() - 1] {
        if !single_use(g, *n) {
            return Err(format!(
                "{} ({}) has other uses, so the scores must be written to memory anyway",
                g.value_name(*n),
                g.node(*n).op.name()
            ));
        }
    }
    // The fused kernel accumulates both products and the row sums in f32 in the order its
    // tiles give (the `fast` policy); a softmax or matmul asking for another policy or
    // accumulator keeps its own kernel.
    for n in &m.nodes {
        match g.node(*n).op {
            Op::Matmul { acc, policy } if acc != DType::F32 || policy != NumericsPolicy::Fast => {
                return Err(format!(
                    "{} (matmul) accumulates in {acc} under policy `{policy}`; the fused kernel runs f32 under `fast`",
                    g.value_name(*n)
                ));
            }
            Op::Softmax { policy, .. } if policy != NumericsPolicy::Fast => {
                return Err(format!(
                    "{} (softmax) runs under policy `{policy}`; the fused kernel runs under `fast`",
                    g.value_name(*n)
                ));
            }
            _ => {}
        }
    }
    if let Op::Attention {
        scale,
        causal: true,
        ..
    } = m.op
        && scale <= 0.0
    {
        return Err(format!(
            "the scale {scale} is not positive under a causal mask"
        ));
    }
    let (q, v) = (g.ty(m.inputs[0]), g.ty(m.inputs[2]));
    for (what, t) in [("D", q), ("Dv", v)] {
        match t.shape.0.last() {
            Some(crate::Dim::Const(d)) if *d <= MAX_HEAD_DIM => {}
            Some(d) => {
                return Err(format!(
                    "the head dim {what} = {d} is not a constant ≤ {MAX_HEAD_DIM} (the fused kernel holds a row of it per query)"
                ));
            }
            None => return Err("rank-0 operands".into()),
        }
    }
    Ok(())
}

/// Before: the kernels fusion would run — `transpose`, `q·kᵀ` (the scale fused in its
/// epilogue) writing the f32 scores, `causal_mask` re-writing them, `softmax` reading them
/// twice and writing the probabilities (the cast in its epilogue), then `p·v`. After: `q`, `k`,
/// `v` read once and the output written; the same products plus the online rescaling.
fn cost(g: &Graph, m: &Match, s: &Sizes) -> (Work, Work) {
    let (q, k, v) = (m.inputs[0], m.inputs[1], m.inputs[2]);
    let out = g.ty(m.root);
    let half = g.ty(q).dtype != DType::F32;
    let r = g.ty(q).shape.rank();
    let dims = |t: Value, i: usize| s.dim(&g.ty(t).shape.0[i]) as f64;
    let batch: f64 = g.ty(q).shape.0[..r - 2]
        .iter()
        .map(|d| s.dim(d) as f64)
        .product();
    let (sq, sk, d, dv) = (
        dims(q, r - 2),
        dims(k, r - 2),
        dims(q, r - 1),
        dims(v, r - 1),
    );
    let scores = batch * sq * sk;
    let products = 2.0 * scores * (d + dv);
    let mut before = 0.0;
    for n in &m.nodes {
        let node = g.node(*n);
        let t = &node.ty;
        before += match node.op {
            Op::Transpose => s.bytes(g.ty(node.args[0])) + s.bytes(t),
            Op::Matmul { .. } => {
                s.bytes(g.ty(node.args[0])) + s.bytes(g.ty(node.args[1])) + s.bytes(t)
            }
            Op::CausalMask => 2.0 * s.bytes(t),
            // Two passes over the scores; the (possibly cast) probabilities written once.
            Op::Softmax { .. } => 2.0 * s.bytes(g.ty(node.args[0])) + s.bytes(t),
            // A cast in softmax's epilogue writes its narrower type instead.
            Op::Cast(_) => s.bytes(t) - s.bytes(g.ty(node.args[0])),
            _ => 0.0,
        };
    }
    let before = Work {
        bytes: before,
        flops: products + 5.0 * scores,
        half,
    };
    let after = Work {
        bytes: s.bytes(g.ty(q)) + s.bytes(g.ty(k)) + s.bytes(g.ty(v)) + s.bytes(out),
        flops: products + 5.0 * scores + 2.0 * batch * sq * dv * (sk / 64.0).ceil(),
        half,
    };
    (before, after)
}

fn replace(b: &mut GraphBuilder, m: &Match, inputs: &[Value]) -> Result<Value, TypeError> {
    b.push(m.op.clone(), inputs)
}
