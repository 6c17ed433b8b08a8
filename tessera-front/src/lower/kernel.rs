//! Builds a kernel body's Graph IR with `GraphBuilder`, then verifies and compiles it.

use crate::KernelAttr;
use crate::parse::err;
use crate::parse::kernel::{Instance, KBin, KBody, KExpr, KernelItem, TyArg};
use proc_macro2::TokenStream;
use std::collections::HashMap;
use tessera_ir::graph::{
    self, BinaryOp, Conv2d, Graph, GraphBuilder, Op, ReduceOp, UnaryOp, Value,
};
use tessera_ir::pipeline;
use tessera_ir::scalar::ScalarRule;
use tessera_ir::{DType, NumericsPolicy};

/// The ops a kernel body may call, by name, as the `#[kernel]` docs list them (a test in
/// `tessera-macros` compares those docs with this table; a test here checks that the
/// lowering accepts exactly these names). Besides calls, bodies use `+ - * /`, unary `-` and
/// number literals.
///
/// ```
/// assert!(tessera_front::lower::kernel::KERNEL_OPS.contains(&"softmax"));
/// ```
pub const KERNEL_OPS: &[&str] = &[
    "matmul",
    "matmul_acc::<T>",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "abs",
    "maximum",
    "minimum",
    "sum",
    "mean",
    "amax",
    "sum_keepdim",
    "mean_keepdim",
    "amax_keepdim",
    "softmax",
    "layernorm",
    "rmsnorm",
    "transpose",
    "t",
    "cast::<T>",
    "causal_mask",
    "attention",
    "causal_attention",
    "conv2d",
    "fft",
    "ifft",
    "fft2",
    "ifft2",
    "complex",
    "real",
    "pad",
    "spectral_mul",
];

/// [`KERNEL_OPS`] as a list in prose, for error messages.
fn ops_list() -> String {
    KERNEL_OPS.join(", ")
}

/// The compiled texts a kernel embeds.
pub struct Compiled {
    /// The Graph IR text.
    pub graph: String,
    /// The Tile IR text of each fused kernel, in launch order.
    pub tiles: Vec<String>,
    /// The whole compilation (plan, kernels, bindings), for emitters.
    pub compiled: pipeline::Compiled,
    /// Per scalar parameter (`eps: f32`), in signature order, what its value must meet at
    /// launch.
    pub scalar_rules: Vec<(String, ScalarRule)>,
}

/// Builds, verifies and compiles one instantiation of the kernel (`item` already instantiated,
/// `inst` resolving type parameters named in the body) under the attribute's numerics policy
/// and precision mode, with the rewrites it switches; errors point at the offending source.
pub fn compile(
    item: &KernelItem,
    body: &KBody,
    attr: &KernelAttr,
    inst: &Instance,
) -> syn::Result<Compiled> {
    let (mut g, scalar_rules) = build_with_rules(item, body, attr.policy, inst)?;
    graph::verify(&g).map_err(|e| {
        err(
            &item.name,
            format!("internal error: the kernel's graph does not verify:\n{e}"),
        )
    })?;
    if let Some(mode) = attr.precision {
        g = graph::with_precision(&g, mode).map_err(|e| {
            err(
                &item.name,
                format!(
                    "cannot compile `{}` under precision `{mode}`: {e}",
                    item.name
                ),
            )
        })?;
    }
    let c = pipeline::compile(&g, &attr.compile_options()).map_err(|e| match (&e, &attr.tile) {
        // A pinned tile that fits no kernel (or does not lower) points at the tile.
        (pipeline::CompileError::Tile(m), Some(t)) => err(&t.written, m),
        _ => err(
            &item.name,
            format!("cannot compile kernel `{}`: {e}", item.name),
        ),
    })?;
    Ok(Compiled {
        graph: g.to_string(),
        tiles: c.tile_texts(),
        compiled: c,
        scalar_rules,
    })
}

/// Builds the Graph IR of a kernel body (graph `@name` plus the instance's suffix), every
/// reduction under `policy`.
pub fn build(
    item: &KernelItem,
    body: &KBody,
    policy: NumericsPolicy,
    inst: &Instance,
) -> syn::Result<Graph> {
    build_with_rules(item, body, policy, inst).map(|(g, _)| g)
}

/// [`build`], also returning per scalar parameter (in signature order) the rule its value
/// must meet at launch: [`ScalarRule::FinitePositive`] when it is the `eps` of `rmsnorm` or
/// `layernorm`, else [`ScalarRule::Any`].
///
/// ```
/// use tessera_front::lower::kernel::build_with_rules;
/// use tessera_front::parse::kernel::{KernelItem, body, Instance};
/// use tessera_ir::scalar::ScalarRule;
/// let k: KernelItem = syn::parse2(quote::quote!(
///     fn norm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, eps: f32, alpha: f32)
///         -> Tensor<f32, (R, C)> { rmsnorm(x, g, eps) * alpha }
/// )).unwrap();
/// let inst = Instance { suffix: String::new(), subst: vec![] };
/// let (_, rules) = build_with_rules(&k, &body(&k.block).unwrap(), Default::default(), &inst).unwrap();
/// assert_eq!(rules, [("eps".to_string(), ScalarRule::FinitePositive), ("alpha".to_string(), ScalarRule::Any)]);
/// ```
pub fn build_with_rules(
    item: &KernelItem,
    body: &KBody,
    policy: NumericsPolicy,
    inst: &Instance,
) -> syn::Result<(Graph, Vec<(String, ScalarRule)>)> {
    let mut cx = Cx {
        b: Graph::builder(&format!("{}{}", item.name, inst.suffix)),
        env: HashMap::new(),
        policy,
        inst: inst.clone(),
        scalars: HashMap::new(),
    };
    for (n, t) in &item.params {
        let v = cx.b.param(&n.to_string(), t.ty.clone());
        if cx.env.insert(n.to_string(), v).is_some() {
            return Err(err(n, format!("parameter `{n}` is declared twice")));
        }
        if t.scalar {
            cx.scalars.insert(v, ScalarRule::Any);
        }
    }
    for (n, e) in &body.lets {
        let v = cx.expr(e)?;
        let v = cx.tensor(e, v)?;
        cx.env.insert(n.to_string(), v);
    }
    let out = cx.expr(&body.result)?;
    let out = cx.tensor(&body.result, out)?;
    let got = cx.b.ty(out).clone();
    if got != item.ret.ty {
        return Err(err(
            body.result.tokens(),
            format!(
                "the kernel body gives {got} but the signature declares {} (`-> Tensor<..>`)",
                item.ret.ty
            ),
        ));
    }
    let rules = item
        .params
        .iter()
        .filter(|(_, t)| t.scalar)
        .map(|(n, _)| (n.to_string(), cx.scalars[&cx.env[&n.to_string()]]))
        .collect();
    Ok((cx.b.finish(out), rules))
}

/// A value during building: a graph value or a number not yet given a dtype.
#[derive(Clone, Copy)]
enum V {
    T(Value),
    Num(f64),
}

struct Cx {
    b: GraphBuilder,
    env: HashMap<String, Value>,
    policy: NumericsPolicy,
    inst: Instance,
    /// The scalar parameters' values and the rule each must meet so far.
    scalars: HashMap<Value, ScalarRule>,
}

impl Cx {
    fn push(&mut self, at: &TokenStream, op: Op, args: &[Value]) -> syn::Result<Value> {
        self.b.push(op, args).map_err(|e| err(at, e))
    }

    fn tensor(&mut self, e: &KExpr, v: V) -> syn::Result<Value> {
        match v {
            V::T(t) => Ok(t),
            V::Num(_) => Err(err(e.tokens(), "expected a tensor, found a number")),
        }
    }

    fn constant(&mut self, at: &TokenStream, value: f64, dtype: DType) -> syn::Result<Value> {
        self.push(at, Op::Const { value, dtype }, &[])
    }

    fn expr(&mut self, e: &KExpr) -> syn::Result<V> {
        match e {
            KExpr::Var(i) => self
                .env
                .get(&i.to_string())
                .map(|v| V::T(*v))
                .ok_or_else(|| err(i, format!("unknown variable `{i}`"))),
            KExpr::Num { value, .. } => Ok(V::Num(*value)),
            KExpr::Neg { a, tokens } => match self.expr(a)? {
                V::Num(x) => Ok(V::Num(-x)),
                V::T(t) => Ok(V::T(self.push(tokens, Op::Unary(UnaryOp::Neg), &[t])?)),
            },
            KExpr::Bin { op, a, b, tokens } => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                let bop = match op {
                    KBin::Add => BinaryOp::Add,
                    KBin::Sub => BinaryOp::Sub,
                    KBin::Mul => BinaryOp::Mul,
                    KBin::Div => BinaryOp::Div,
                };
                self.binary(tokens, bop, x, y)
            }
            KExpr::List { tokens, .. } => Err(err(
                tokens,
                "a list `[..]` is only allowed as reduction axes or op attributes (conv2d, pad)",
            )),
            KExpr::Call {
                name,
                ty,
                args,
                tokens,
            } => self.call(name, ty.as_ref(), args, tokens),
        }
    }

    fn binary(&mut self, at: &TokenStream, op: BinaryOp, x: V, y: V) -> syn::Result<V> {
        let (a, b) = match (x, y) {
            (V::Num(p), V::Num(q)) => return Ok(V::Num(op.eval_f64(p, q))),
            // A scalar parameter takes the other operand's element type, as a literal does.
            (V::T(a), V::T(b))
                if self.scalars.contains_key(&a) && !self.scalars.contains_key(&b) =>
            {
                (self.adapt(at, a, self.b.ty(b).dtype)?, b)
            }
            (V::T(a), V::T(b))
                if self.scalars.contains_key(&b) && !self.scalars.contains_key(&a) =>
            {
                (a, self.adapt(at, b, self.b.ty(a).dtype)?)
            }
            (V::T(a), V::T(b)) => (a, b),
            (V::T(a), V::Num(q)) => (a, self.constant(at, q, self.b.ty(a).dtype)?),
            (V::Num(p), V::T(b)) => (self.constant(at, p, self.b.ty(b).dtype)?, b),
        };
        Ok(V::T(self.push(at, Op::Binary(op), &[a, b])?))
    }

    fn call(
        &mut self,
        name: &syn::Ident,
        ty: Option<&TyArg>,
        args: &[KExpr],
        at: &TokenStream,
    ) -> syn::Result<V> {
        let f = name.to_string();
        let ty = match ty {
            None => None,
            Some(TyArg::D(d)) => Some(*d),
            Some(TyArg::Param(p)) => Some(self.inst.get(&p.to_string()).ok_or_else(|| {
                err(
                    p,
                    format!("unknown type `{p}`: declare it as a type parameter (`<{p}: Float>`) or name a dtype"),
                )
            })?),
        };
        let arity = |n: usize| -> syn::Result<()> {
            if args.len() == n {
                Ok(())
            } else {
                Err(err(
                    at,
                    format!(
                        "`{f}` takes {n} operand{} (counting the receiver), got {}",
                        if n == 1 { "" } else { "s" },
                        args.len()
                    ),
                ))
            }
        };
        if ty.is_some() && f != "cast" && f != "matmul_acc" {
            return Err(err(at, format!("`{f}` takes no type argument")));
        }
        let tensors = |cx: &mut Self, n: usize| -> syn::Result<Vec<Value>> {
            args[..n]
                .iter()
                .map(|a| {
                    let v = cx.expr(a)?;
                    cx.tensor(a, v)
                })
                .collect()
        };
        if let Some(u) = UnaryOp::parse(&f).filter(|u| *u != UnaryOp::Neg) {
            arity(1)?;
            let x = tensors(self, 1)?;
            return Ok(V::T(self.push(at, Op::Unary(u), &x)?));
        }
        let reduce = match f.strip_suffix("_keepdim").unwrap_or(&f) {
            "sum" => Some(ReduceOp::Sum),
            "mean" => Some(ReduceOp::Mean),
            "amax" => Some(ReduceOp::Max),
            _ => None,
        };
        if let Some(op) = reduce {
            arity(2)?;
            let x = tensors(self, 1)?;
            let rank = self.b.ty(x[0]).shape.rank();
            let axes = axes(&args[1], rank)?;
            let r = Op::Reduce {
                op,
                axes,
                keepdim: f.ends_with("_keepdim"),
                policy: self.policy,
            };
            return Ok(V::T(self.push(at, r, &x)?));
        }
        let v = match f.as_str() {
            "matmul" | "matmul_acc" => {
                arity(2)?;
                let x = tensors(self, 2)?;
                let acc = match ty {
                    Some(d) => d,
                    None if f == "matmul_acc" => {
                        return Err(err(
                            at,
                            "`matmul_acc` needs the accumulator type: `x.matmul_acc::<bf16>(w)`",
                        ));
                    }
                    None => self.b.ty(x[0]).dtype.accumulator(),
                };
                let op = Op::Matmul {
                    acc,
                    policy: self.policy,
                };
                self.push(at, op, &x)?
            }
            "maximum" | "minimum" => {
                arity(2)?;
                let (x, y) = (self.expr(&args[0])?, self.expr(&args[1])?);
                let op = if f == "maximum" {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                return self.binary(at, op, x, y);
            }
            "softmax" => {
                // `softmax(x)`: the last axis; `softmax(x, axis)`: one axis, as reductions
                // name theirs (negative counts from the end).
                if args.len() != 1 {
                    arity(2)?;
                }
                let x = tensors(self, 1)?;
                let rank = self.b.ty(x[0]).shape.rank();
                let axis = match args.get(1) {
                    None => rank.saturating_sub(1),
                    Some(a) => match axes(a, rank)?.as_slice() {
                        [axis] => *axis,
                        _ => return Err(err(a.tokens(), "softmax runs along one axis")),
                    },
                };
                let op = Op::Softmax {
                    axis,
                    policy: self.policy,
                };
                self.push(at, op, &x)?
            }
            "transpose" | "t" => {
                arity(1)?;
                let x = tensors(self, 1)?;
                self.push(at, Op::Transpose, &x)?
            }
            "cast" => {
                arity(1)?;
                let to =
                    ty.ok_or_else(|| err(at, "`cast` needs a target type: `x.cast::<bf16>()`"))?;
                let x = tensors(self, 1)?;
                if self.b.ty(x[0]).dtype == to {
                    // A cast to the type a value already has (`cast::<T>()` in a generic
                    // kernel instantiated at that type) is no node at all.
                    x[0]
                } else {
                    self.push(at, Op::Cast(to), &x)?
                }
            }
            "causal_mask" => {
                arity(1)?;
                let x = tensors(self, 1)?;
                self.push(at, Op::CausalMask, &x)?
            }
            "attention" | "causal_attention" => {
                arity(4)?;
                let x = tensors(self, 3)?;
                let scale = self.number(&args[3], "the scale")?;
                let op = Op::Attention {
                    scale,
                    causal: f == "causal_attention",
                    policy: self.policy,
                };
                self.push(at, op, &x)?
            }
            "conv2d" => {
                if ![2, 4, 6].contains(&args.len()) {
                    return Err(err(
                        at,
                        format!(
                            "`conv2d` takes (x, w), (x, w, stride, padding) or (x, w, stride, padding, dilation, groups), got {} operands",
                            args.len()
                        ),
                    ));
                }
                let x = tensors(self, 2)?;
                let mut c = Conv2d::default();
                if args.len() >= 4 {
                    c.stride = pair(&args[2], "stride", 1)?;
                    c.padding = pair(&args[3], "padding", 0)?;
                }
                if args.len() == 6 {
                    c.dilation = pair(&args[4], "dilation", 1)?;
                    c.groups = count(&args[5], "groups", 1)?;
                }
                self.push(at, Op::Conv2d(c), &x)?
            }
            "fft" | "ifft" => {
                arity(2)?;
                let x = tensors(self, 1)?;
                let rank = self.b.ty(x[0]).shape.rank();
                let axis = axes(&args[1], rank.saturating_sub(1).max(1))?;
                let [axis] = axis.as_slice() else {
                    return Err(err(args[1].tokens(), "an FFT runs along one axis"));
                };
                let op = Op::Fft {
                    axis: *axis,
                    inverse: f == "ifft",
                };
                self.push(at, op, &x)?
            }
            "fft2" | "ifft2" => {
                arity(1)?;
                let x = tensors(self, 1)?;
                let rank = self.b.ty(x[0]).shape.rank();
                if rank < 3 {
                    return Err(err(
                        at,
                        format!(
                            "`{f}` transforms the last two logical axes of a complex tensor [.., H, W, 2], got {}",
                            self.b.ty(x[0])
                        ),
                    ));
                }
                let inverse = f == "ifft2";
                let y = self.push(
                    at,
                    Op::Fft {
                        axis: rank - 3,
                        inverse,
                    },
                    &x,
                )?;
                self.push(
                    at,
                    Op::Fft {
                        axis: rank - 2,
                        inverse,
                    },
                    &[y],
                )?
            }
            "complex" | "real" => {
                arity(1)?;
                let x = tensors(self, 1)?;
                let op = if f == "complex" {
                    Op::Complex
                } else {
                    Op::Real
                };
                self.push(at, op, &x)?
            }
            "pad" => {
                arity(3)?;
                let x = tensors(self, 1)?;
                let lo = ints(&args[1], "pad's `lo`")?;
                let hi = ints(&args[2], "pad's `hi`")?;
                self.push(at, Op::pad(lo, hi), &x)?
            }
            "spectral_mul" => {
                arity(3)?;
                let x = tensors(self, 2)?;
                let groups = count(&args[2], "groups", 1)?;
                self.push(at, Op::SpectralMul { groups }, &x)?
            }
            "layernorm" | "rmsnorm" => {
                let n = if f == "layernorm" { 4 } else { 3 };
                arity(n)?;
                let x = tensors(self, n - 1)?;
                let eps = match self.expr(&args[n - 1])? {
                    V::Num(e) => e,
                    V::T(e)
                        if matches!(args[n - 1], KExpr::Var(_))
                            && self.scalars.contains_key(&e) =>
                    {
                        let rule = self.scalars[&e].and(ScalarRule::FinitePositive);
                        self.scalars.insert(e, rule);
                        return Ok(V::T(self.norm_with_scalar_eps(
                            at,
                            f == "layernorm",
                            &x,
                            e,
                        )?));
                    }
                    V::T(_) => {
                        return Err(err(
                            args[n - 1].tokens(),
                            "`eps` must be a number literal or a scalar parameter of the kernel (`eps: f32`)",
                        ));
                    }
                };
                let policy = self.policy;
                let op = if f == "layernorm" {
                    Op::LayerNorm { eps, policy }
                } else {
                    Op::RmsNorm { eps, policy }
                };
                self.push(at, op, &x)?
            }
            _ => {
                return Err(err(
                    name,
                    format!("unknown op `{f}`; kernels can call {}", ops_list()),
                ));
            }
        };
        Ok(V::T(v))
    }
}

impl Cx {
    /// A scalar parameter `v` as `dtype` (a cast when it differs).
    fn adapt(&mut self, at: &TokenStream, v: Value, dtype: DType) -> syn::Result<Value> {
        if self.b.ty(v).dtype == dtype {
            Ok(v)
        } else {
            self.push(at, Op::Cast(dtype), &[v])
        }
    }

    /// `rmsnorm(x, g, eps)` / `layernorm(x, g, b, eps)` whose `eps` is a scalar parameter
    /// (a rank-0 value): the op's definition in f32 written with primitives, since the
    /// `rmsnorm` / `layernorm` nodes carry `eps` as a constant attribute. Over the last axis:
    /// `x · rsqrt(mean(x²) + eps) · g`, and `(x − μ) · rsqrt(mean((x − μ)²) + eps) · g + b`.
    /// Fusion runs them as one row-wise kernel (a row program,
    /// `tessera_ir::fuse::row_programs`), under the `fast` policy; under `deterministic` or
    /// `kahan_sum` each row mean stays its own kernel.
    fn norm_with_scalar_eps(
        &mut self,
        at: &TokenStream,
        layer: bool,
        args: &[Value],
        eps: Value,
    ) -> syn::Result<Value> {
        let x = args[0];
        let xt = self.b.ty(x).clone();
        if !xt.dtype.is_float() || xt.shape.rank() == 0 {
            // The op's own checks name the problem.
            let op = if layer {
                Op::LayerNorm {
                    eps: 1.0,
                    policy: self.policy,
                }
            } else {
                Op::RmsNorm {
                    eps: 1.0,
                    policy: self.policy,
                }
            };
            self.push(at, op, args)?;
        }
        let last = xt.shape.rank() - 1;
        for p in &args[1..] {
            let pt = self.b.ty(*p);
            if pt.shape.0.as_slice() != [xt.shape.0[last].clone()] {
                return Err(err(
                    at,
                    format!(
                        "scale/shift must have shape [{}], got {pt}",
                        xt.shape.0[last]
                    ),
                ));
            }
        }
        let f32v = |cx: &mut Self, v: Value| cx.adapt(at, v, DType::F32);
        let mean = |cx: &mut Self, v: Value| {
            let r = Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![last],
                keepdim: true,
                policy: cx.policy,
            };
            cx.push(at, r, &[v])
        };
        let bin =
            |cx: &mut Self, op: BinaryOp, a: Value, b: Value| cx.push(at, Op::Binary(op), &[a, b]);
        let mut xc = f32v(self, x)?;
        if layer {
            let mu = mean(self, xc)?;
            xc = bin(self, BinaryOp::Sub, xc, mu)?;
        }
        let sq = bin(self, BinaryOp::Mul, xc, xc)?;
        let ms = mean(self, sq)?;
        let eps = f32v(self, eps)?;
        let den = bin(self, BinaryOp::Add, ms, eps)?;
        let inv = self.push(at, Op::Unary(UnaryOp::Rsqrt), &[den])?;
        let y = bin(self, BinaryOp::Mul, xc, inv)?;
        let g = f32v(self, args[1])?;
        let mut y = bin(self, BinaryOp::Mul, y, g)?;
        if layer {
            let b = f32v(self, args[2])?;
            y = bin(self, BinaryOp::Add, y, b)?;
        }
        Ok(y)
    }

    /// A number literal argument.
    fn number(&mut self, e: &KExpr, what: &str) -> syn::Result<f64> {
        match self.expr(e)? {
            V::Num(x) => Ok(x),
            V::T(_) => Err(err(e.tokens(), format!("{what} must be a number literal"))),
        }
    }
}

/// An integer literal ≥ `min`.
fn count(e: &KExpr, what: &str, min: u64) -> syn::Result<u64> {
    match value_of(e) {
        Some(v) if v >= min as i64 => Ok(v as u64),
        _ => Err(err(
            e.tokens(),
            format!("{what} must be an integer literal ≥ {min}"),
        )),
    }
}

/// `n` (both axes) or `[h, w]`, each an integer literal ≥ `min`.
fn pair(e: &KExpr, what: &str, min: u64) -> syn::Result<[u64; 2]> {
    match e {
        KExpr::List { items, tokens } => match items.as_slice() {
            [a, b] => Ok([count(a, what, min)?, count(b, what, min)?]),
            _ => Err(err(
                tokens,
                format!("{what} takes one value or two `[h, w]`"),
            )),
        },
        _ => {
            let v = count(e, what, min)?;
            Ok([v, v])
        }
    }
}

/// A list of integer literals `[a, b, ..]` (negative allowed).
fn ints(e: &KExpr, what: &str) -> syn::Result<Vec<i64>> {
    let KExpr::List { items, .. } = e else {
        return Err(err(
            e.tokens(),
            format!("{what} takes a list of integers, one per axis: `[0, 1, 1, 0]`"),
        ));
    };
    items
        .iter()
        .map(|x| {
            value_of(x).ok_or_else(|| err(x.tokens(), format!("{what} takes integer literals")))
        })
        .collect()
}

/// Reduction axes: an integer or `[a, b]`; negative axes count from the end.
fn axes(e: &KExpr, rank: usize) -> syn::Result<Vec<usize>> {
    let one = |e: &KExpr| -> syn::Result<usize> {
        let v = value_of(e).ok_or_else(|| {
            err(
                e.tokens(),
                "expected an axis (an integer) or a list of axes `[0, 1]`",
            )
        })?;
        let a = if v < 0 { v + rank as i64 } else { v };
        if (0..rank as i64).contains(&a) {
            Ok(a as usize)
        } else {
            Err(err(
                e.tokens(),
                format!("axis {v} out of range for rank {rank}"),
            ))
        }
    };
    match e {
        KExpr::List { items, .. } => items.iter().map(one).collect(),
        _ => Ok(vec![one(e)?]),
    }
}

/// The integer value of a literal or a negated literal.
fn value_of(e: &KExpr) -> Option<i64> {
    match e {
        KExpr::Num { value, .. } if value.fract() == 0.0 => Some(*value as i64),
        KExpr::Neg { a, .. } => value_of(a).map(|v| -v),
        _ => None,
    }
}
