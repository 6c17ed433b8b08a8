//! Reverse-mode automatic differentiation of Graph IR.
//!
//! [`grad`] turns a forward graph `@f(%x, %w, ..) -> T` into one **backward graph per
//! parameter**, `@f_grad_w(%x, %w, .., %dy: T) -> dtype(w)[shape(w)]`, computing the
//! vector–Jacobian product `dy · ∂f/∂w`. A backward graph is ordinary Graph IR: it prints,
//! parses, verifies and compiles like any kernel, and the compiler's passes (rewrites, fusion,
//! scheduling) apply to it unchanged.
//!
//! How a graph is built: the forward nodes that `w` reaches are copied (recomputation: the
//! backward graph does not read saved activations), then the cotangents are propagated from
//! `%dy` through those nodes in reverse topological order, each op contributing its VJP rule
//! (`rules.rs`) in terms of other Graph IR ops, and contributions to a value used more than
//! once are summed. Cotangents of a value carry the value's dtype; a broadcast operand's
//! cotangent is summed back to its shape. Reductions follow the numerics policy of the
//! forward op they differentiate (a matmul's products and batch sum, a softmax's or norm's row
//! sums); the sums no forward op orders (broadcast operands' cotangents, conv2d's taps) follow
//! the kernel's policy: the one non-fast policy the forward graph's reductions name, else
//! `fast`.
//!
//! The VJP rules: every unary op (`neg exp log sqrt rsqrt tanh sigmoid relu gelu abs`; the
//! piecewise ones take the one-sided derivative 0 at 0), binary ops (`add sub mul div max
//! min`, with broadcasting; a tie of `max`/`min` splits the cotangent evenly), `cast`,
//! `broadcast`, `reduce.sum` / `reduce.mean` / `reduce.max`, `matmul` (plain and batched),
//! `transpose`, `softmax`, `layernorm`, `rmsnorm`, `attention` (recomputed from its unfused
//! form), `causal_mask`, `conv2d` (`conv.rs`: the weight gradient tap by tap, the input
//! gradient as a transposed convolution, any stride), `fft` / `ifft`, `complex`, `real` and
//! `pad` (`linear.rs`: adjoints of linear maps; interior padding has none, an error naming it).
//! Any other op on the path from the parameter to the output (`spectral_mul`) is an error naming
//! it.
//!
//! ```
//! use tessera_ir::{autodiff, graph};
//! let g = graph::parse("graph @lin(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {
//!   %3 = matmul %x, %w : f32[M, N]
//!   %4 = add %3, %b : f32[M, N]
//!   %5 = tanh %4 : f32[M, N]
//!   return %5
//! }").unwrap();
//! let dw = autodiff::grad_wrt(&g, "w").unwrap();
//! graph::verify(&dw).unwrap();
//! assert_eq!(dw.ty(dw.output).to_string(), "f32[K, N]");
//! assert!(dw.to_string().contains("%dy: f32[M, N]"));
//! ```

mod conv;
mod linear;
mod rules;
#[cfg(test)]
mod tests;

use crate::graph::{Graph, GraphBuilder, Op, Value};
use crate::{DType, NumericsPolicy, TensorType};

/// A gradient graph: the parameter it differentiates and the backward graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradient {
    /// The forward parameter's name.
    pub param: String,
    /// `@<forward>_grad_<param>(<forward params>, %dy) -> <param's type>`.
    pub graph: Graph,
}

/// Why a graph cannot be differentiated: the value and op at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("@{graph}: {value} ({op}): {message}")]
pub struct GradError {
    /// The graph's name.
    pub graph: String,
    /// The value whose gradient cannot be built.
    pub value: String,
    /// The op that defines it.
    pub op: String,
    /// Why, in words.
    pub message: String,
}

/// The backward graph of every floating-point parameter of `g`, in parameter order.
///
/// ```
/// let g = tessera_ir::graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {
///   %1 = softmax %x : f32[R, C]
///   return %1
/// }").unwrap();
/// let grads = tessera_ir::autodiff::grad(&g).unwrap();
/// assert_eq!(grads[0].param, "x");
/// assert_eq!(grads[0].graph.name, "sm_grad_x");
/// ```
pub fn grad(g: &Graph) -> Result<Vec<Gradient>, GradError> {
    let mut out = Vec::new();
    for p in &g.params {
        let Op::Param { name, .. } = &g.node(*p).op else {
            continue;
        };
        if !g.ty(*p).dtype.is_float() {
            continue;
        }
        out.push(Gradient {
            param: name.clone(),
            graph: grad_wrt(g, name)?,
        });
    }
    Ok(out)
}

/// The backward graph of `g` with respect to its parameter `param`: parameters `g`'s, then
/// `%dy` (the output's cotangent, of the output's type); result of `param`'s type. A name
/// that is no parameter, or an op on the way from `param` to the output without a VJP rule,
/// is an error naming it.
pub fn grad_wrt(g: &Graph, param: &str) -> Result<Graph, GradError> {
    let fail = |v: Value, message: String| GradError {
        graph: g.name.clone(),
        value: g.value_name(v),
        op: g.node(v).op.name(),
        message,
    };
    let Some(&wrt) = g
        .params
        .iter()
        .find(|p| matches!(&g.node(**p).op, Op::Param { name, .. } if name == param))
    else {
        let names: Vec<String> = g.params.iter().map(|p| g.value_name(*p)).collect();
        return Err(GradError {
            graph: g.name.clone(),
            value: format!("%{param}"),
            op: "param".into(),
            message: format!("no such parameter; the parameters are {}", names.join(", ")),
        });
    };
    if !g.ty(wrt).dtype.is_float() {
        return Err(fail(
            wrt,
            format!("a {} parameter has no gradient", g.ty(wrt).dtype),
        ));
    }
    // Which nodes depend on `wrt` (only those carry a cotangent).
    let mut live = vec![false; g.nodes.len()];
    live[wrt.index()] = true;
    for (i, n) in g.nodes.iter().enumerate() {
        if n.args.iter().any(|a| live[a.index()]) {
            live[i] = true;
        }
    }
    let mut b = Graph::builder(&format!("{}_grad_{param}", g.name));
    // Parameters first (the forward's, then `%dy`), so the text numbers values as it parses.
    let mut map = vec![Value(0); g.nodes.len()];
    for p in &g.params {
        if let Op::Param { name, .. } = &g.node(*p).op {
            map[p.index()] = b.param(name, g.ty(*p).clone());
        }
    }
    let dy = b.param("dy", g.ty(g.output).clone());
    for (i, n) in g.nodes.iter().enumerate() {
        if !matches!(n.op, Op::Param { .. }) {
            let args: Vec<Value> = n.args.iter().map(|a| map[a.index()]).collect();
            map[i] = b.push_typed(n.op.clone(), &args, n.ty.clone());
        }
    }
    let mut cot: Vec<Option<Value>> = vec![None; g.nodes.len()];
    if live[g.output.index()] {
        cot[g.output.index()] = Some(dy);
    }
    let mut d = Diff {
        b,
        fwd: g,
        map,
        policy: kernel_policy(g),
    };
    for i in (0..g.nodes.len()).rev() {
        let v = Value(i as u32);
        let Some(ct) = cot[i] else { continue };
        if !live[i] || v == wrt {
            continue;
        }
        let n = g.node(v);
        let wanted: Vec<bool> = n.args.iter().map(|a| live[a.index()]).collect();
        let grads = rules::vjp(&mut d, v, ct, &wanted).map_err(|m| fail(v, m))?;
        for ((a, want), ga) in n.args.iter().zip(&wanted).zip(grads) {
            let (true, Some(ga)) = (*want, ga) else {
                continue;
            };
            cot[a.index()] = Some(match cot[a.index()] {
                None => ga,
                Some(prev) => d
                    .bin(crate::graph::BinaryOp::Add, prev, ga)
                    .map_err(|m| fail(v, m))?,
            });
        }
    }
    let result = match cot[wrt.index()] {
        Some(r) => r,
        // The output does not depend on the parameter: its gradient is zero.
        None => {
            let z = d.konst(0.0, g.ty(wrt).dtype);
            d.b.push_typed(Op::Broadcast, &[z], g.ty(wrt).clone())
        }
    };
    let graph = crate::rewrite::edit::dead_code(&d.b.finish(result));
    crate::graph::verify(&graph).map_err(|e| GradError {
        graph: g.name.clone(),
        value: format!("%{param}"),
        op: "param".into(),
        message: format!("the backward graph does not verify (a rule bug):\n{e}"),
    })?;
    Ok(graph)
}

/// The numerics policy of the kernel `g` is: the one non-fast policy its reductions name
/// (a `#[kernel(numerics = ..)]` attribute stamps every reduction), else `fast` — also when
/// they name several, as no single policy is the kernel's then.
fn kernel_policy(g: &Graph) -> NumericsPolicy {
    match crate::graph::policies(g).as_slice() {
        [p] => *p,
        _ => NumericsPolicy::Fast,
    }
}

/// The backward graph under construction: the builder, the forward graph with the map from
/// its values to their copies, and the kernel's numerics policy.
pub(crate) struct Diff<'g> {
    pub b: GraphBuilder,
    pub fwd: &'g Graph,
    pub map: Vec<Value>,
    /// The policy of the reductions the rules add that no forward op orders (the sums of
    /// broadcast operands' cotangents, conv2d's tap products and sums): [`kernel_policy`].
    pub policy: NumericsPolicy,
}

impl Diff<'_> {
    /// The copy of forward value `v`.
    pub fn f(&self, v: Value) -> Value {
        self.map[v.index()]
    }

    pub fn ty(&self, v: Value) -> TensorType {
        self.b.ty(v).clone()
    }

    pub fn push(&mut self, op: Op, args: &[Value]) -> Result<Value, String> {
        self.b.push(op, args).map_err(|e| e.to_string())
    }

    pub fn bin(&mut self, op: crate::graph::BinaryOp, x: Value, y: Value) -> Result<Value, String> {
        self.push(Op::Binary(op), &[x, y])
    }

    pub fn konst(&mut self, value: f64, dtype: DType) -> Value {
        self.b
            .push(Op::Const { value, dtype }, &[])
            .expect("a constant always types")
    }
}
