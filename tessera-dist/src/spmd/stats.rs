//! The partial-statistics launch: a reduction, softmax, layernorm or rmsnorm whose reduced or
//! normalized axis stays split over mesh axes `A`.
//!
//! Every device computes the statistics of its own shard, the statistics are combined by the
//! planner's own plans (run by [`crate::execute_plan`], so the printed plan is what runs), and
//! every device finishes its own shard; the result keeps the input's placement.
//!
//! | op | local statistics | combined by | finish |
//! |---|---|---|---|
//! | `reduce.sum` / `reduce.max` | the same reduction of the shard | all-reduce (sum / max) over `A` | — |
//! | `reduce.mean` | the shard's sum × 1/N (N: the global count) | all-reduce (sum) over `A` | — |
//! | `softmax` | row max `m`; then `Σ exp(x − m)` with the global `m` | all-reduce (max), then all-reduce (sum) | `exp(x − m) / s` |
//! | `rmsnorm` | `Σ x²` | all-reduce (sum) | `x · rsqrt(Σx²/N + eps) · γ` |
//! | `layernorm` | count `nᵢ`, mean `μᵢ`, `M2ᵢ = Σ (x − μᵢ)²` | all-gather of `μᵢ` and `M2ᵢ` over `A` | Chan: `μ = Σ nᵢμᵢ/N`, `M2 = Σ M2ᵢ + Σ nᵢ(μᵢ − μ)²`, then `(x − μ)·rsqrt(M2/N + eps)·γ + β` |
//!
//! The kernel is cut at the statistics node: operands it does not take as parameters are
//! computed by a prefix kernel (the part of the graph that feeds them), and what follows the
//! node runs as a suffix kernel taking the node's result as one more parameter. Every piece is a
//! Graph IR kernel built here and launched on the device like any `#[tessera::kernel]`.
//!
//! Offered only where it applies exactly: an f32 data operand, and no empty shard along `A`.

use super::erased::AnyTensor;
use super::propagate::Propagated;
use crate::{DimSpec, Mesh, Plan, ReduceOp, Result, ShardSpec, chunk_range, plan_redistribute};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use tessera::ir::graph::{
    BinaryOp, Graph, GraphBuilder, Op, ReduceOp as GraphReduce, UnaryOp, Value,
};
use tessera::ir::{DType, Dim, Shape, TensorType};
use tessera::{KernelDef, NumericsPolicy};

/// A kernel built at plan time (a piece of the launched kernel, or a statistics kernel), one
/// definition per graph and process; a [`Stage::Kernel`] of a [`StatsPath`].
#[derive(Clone, Copy)]
pub struct LocalKernel(pub &'static KernelDef);

impl fmt::Debug for LocalKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl PartialEq for LocalKernel {
    fn eq(&self, o: &Self) -> bool {
        self.0.graph_text() == o.0.graph_text()
    }
}

/// One stage of a [`StatsPath`], on every device. Slots `0..n` are the kernel's
/// arguments (after their redistribution); every kernel and constant appends one slot.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// Runs a kernel on the device on the values of `inputs`; its result is a new slot.
    Kernel {
        /// What it computes.
        what: String,
        /// The kernel.
        kernel: LocalKernel,
        /// Its arguments, as slots.
        inputs: Vec<usize>,
    },
    /// Replaces slot `slot` by the result of a redistribution plan (the collectives).
    Combine {
        /// The slot.
        slot: usize,
        /// What it combines.
        what: String,
        /// The plan.
        plan: Plan,
    },
    /// An f32 host constant, identical on every device; a new slot.
    Constant {
        /// What it holds.
        what: String,
        /// The elements.
        data: Vec<f32>,
        /// The shape.
        shape: Vec<usize>,
    },
}

/// The stages that replace one statistics node's gather-first launch; a launch plan holds one
/// where the partial-statistics launch was chosen (see [`crate::Statistics`] for an example).
#[derive(Clone, Debug, PartialEq)]
pub struct StatsPath {
    /// The op (`softmax`, `layernorm`, `rmsnorm`, `reduce.sum` …).
    pub op: String,
    /// The node's value name in the kernel's graph.
    pub node: String,
    /// The mesh axes its reduced / normalized axis stays split over.
    pub axes: Vec<String>,
    /// The stages in order.
    pub stages: Vec<Stage>,
    /// The slot holding the launch's result.
    pub output: usize,
    /// Slots holding the kernel's arguments (`0..args`).
    pub args: usize,
}

impl StatsPath {
    /// The combine plans.
    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.stages.iter().filter_map(|s| match s {
            Stage::Combine { plan, .. } => Some(plan),
            _ => None,
        })
    }

    /// Runs the stages on one device: `slots` are its redistributed arguments.
    pub(crate) fn run<X: crate::RankContext>(
        &self,
        ctx: &X,
        mut slots: Vec<AnyTensor>,
    ) -> Result<AnyTensor> {
        let device = ctx.mesh().devices()[ctx.rank()].clone();
        for st in &self.stages {
            match st {
                Stage::Kernel { kernel, inputs, .. } => {
                    let out = {
                        let refs: Vec<_> = inputs.iter().map(|&i| slots[i].arg()).collect();
                        let dt = kernel
                            .0
                            .compiled()?
                            .graph
                            .ty(kernel.0.compiled()?.graph.output);
                        AnyTensor::launch(kernel.0, &refs, dt.dtype)?
                    };
                    slots.push(out);
                }
                Stage::Combine { slot, plan, .. } => {
                    let v = std::mem::replace(
                        &mut slots[*slot],
                        AnyTensor::F32(tessera::Tensor::from_vec(vec![], &[0])?),
                    );
                    slots[*slot] = v.redistribute(ctx, plan)?.on(&device)?;
                }
                Stage::Constant { data, shape, .. } => {
                    let t = tessera::Tensor::from_vec(data.clone(), shape)?;
                    slots.push(AnyTensor::F32(t).on(&device)?);
                }
            }
        }
        Ok(slots.swap_remove(self.output))
    }
}

impl fmt::Display for StatsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "partial statistics of `{}` {} over [{}]",
            self.op,
            self.node,
            self.axes.join(",")
        )?;
        let mut next = self.args;
        for st in &self.stages {
            match st {
                Stage::Kernel {
                    what,
                    kernel,
                    inputs,
                } => {
                    let ins: Vec<String> = inputs.iter().map(|i| format!("#{i}")).collect();
                    write!(
                        f,
                        "\n  #{next} = {what}: kernel `{}`({})",
                        kernel.0.name(),
                        ins.join(", ")
                    )?;
                    next += 1;
                }
                Stage::Constant { what, shape, .. } => {
                    write!(f, "\n  #{next} = {what}: constant {shape:?}")?;
                    next += 1;
                }
                Stage::Combine { slot, what, plan } => {
                    write!(
                        f,
                        "\n  #{slot} ← {what}: {}",
                        plan.to_string().replace('\n', "\n    ")
                    )?;
                }
            }
        }
        write!(f, "\n  result #{}", self.output)
    }
}

/// Builds the partial-statistics stages of node `v` under the propagation `p` (which kept `v`'s
/// statistics axes split), or `None` where the path does not apply (see the module docs).
pub(crate) fn build(
    g: &Graph,
    kernel: &str,
    mesh: &Mesh,
    shapes: &[Vec<usize>],
    p: &Propagated,
    v: usize,
) -> Result<Option<StatsPath>> {
    let node = &g.nodes[v];
    let x = node.args[0];
    let xs = &shapes[x.index()];
    let r = xs.len();
    if g.ty(x).dtype != DType::F32 || r == 0 {
        return Ok(None);
    }
    // The softmax stages below normalise the last axis; another axis is gathered first.
    if matches!(node.op, Op::Softmax { axis, .. } if axis + 1 != r) {
        return Ok(None);
    }
    let xspec = full(&p.values[x.index()], r);
    let reduced: Vec<usize> = match &node.op {
        Op::Reduce { axes, .. } => axes.clone(),
        _ => vec![r - 1],
    };
    let mut axes: Vec<String> = Vec::new();
    for &d in &reduced {
        let a = xspec.dim_axes(d);
        if !a.is_empty() {
            let (_, n) = mesh.index_along(0, a)?;
            if chunk_range(xs[d], n, n - 1).is_empty() {
                return Ok(None);
            }
            axes.extend(a.iter().cloned());
        }
    }
    if axes.is_empty() {
        return Ok(None);
    }
    let n_params = g.params.len();
    let mut stages = Vec::new();
    // Appends a stage; returns the slot of its result.
    let push = |stages: &mut Vec<Stage>, st: Stage| {
        stages.push(st);
        n_params
            + stages
                .iter()
                .filter(|s| !matches!(s, Stage::Combine { .. }))
                .count()
            - 1
    };
    let push_kernel = |stages: &mut Vec<Stage>, what: &str, def, inputs: Vec<usize>| {
        push(
            stages,
            Stage::Kernel {
                what: what.into(),
                kernel: LocalKernel(def),
                inputs,
            },
        )
    };
    let all_params: Vec<usize> = (0..n_params).collect();
    // The operands, as slots: parameters as given, other values by a prefix kernel.
    let mut operand = Vec::new();
    for a in &node.args {
        match g.params.iter().position(|p| p == a) {
            Some(i) => operand.push(i),
            None => {
                let def = kernel_def(Ok(prefix(g, *a, &format!("{kernel}_part_{}", a.0))))?;
                let what = format!("{} (prefix)", g.value_name(*a));
                operand.push(push_kernel(&mut stages, &what, def, all_params.clone()));
            }
        }
    }
    let xs_slot = operand[0];
    let whole_row = {
        let mut s = xspec.clone();
        s = set_dim(&s, r - 1, DimSpec::Replicated);
        s
    };
    let row_shape = {
        let mut s = xs.clone();
        s[r - 1] = 1;
        s
    };
    let elem = 4usize;
    let combine = |from: &ShardSpec, to: &ShardSpec, shape: &[usize]| {
        plan_redistribute(mesh, shape, elem, from, to)
    };
    let op_name = node.op.name();
    let output = match &node.op {
        Op::Reduce {
            op,
            axes: rax,
            keepdim,
            policy,
        } => {
            let (gop, dop) = match op {
                GraphReduce::Sum | GraphReduce::Mean => (GraphReduce::Sum, ReduceOp::Sum),
                GraphReduce::Max => (GraphReduce::Max, ReduceOp::Max),
            };
            let scale = match op {
                GraphReduce::Mean => Some(1.0 / rax.iter().map(|&d| xs[d] as f64).product::<f64>()),
                _ => None,
            };
            let def = kernel_def(reduce_graph(
                &format!("{kernel}_local_{}", op.name()),
                r,
                gop,
                rax,
                *keepdim,
                *policy,
                scale,
            ))?;
            let s = push_kernel(&mut stages, "local statistics", def, vec![xs_slot]);
            let whole = &p.values[v];
            let plan = combine(&whole.clone().partial(&axes, dop), whole, &shapes[v])?;
            stages.push(Stage::Combine {
                slot: s,
                what: format!("combine ({dop})"),
                plan,
            });
            s
        }
        Op::Softmax { policy, .. } => {
            let m_def = kernel_def(row_graph(
                &format!("{kernel}_row_max"),
                r,
                Box::new(|b, x, ()| b.push(reduce(GraphReduce::Max, r - 1, *policy), &[x])),
            ))?;
            let m = push_kernel(&mut stages, "row max", m_def, vec![xs_slot]);
            stages.push(Stage::Combine {
                slot: m,
                what: "global max".into(),
                plan: combine(
                    &whole_row.clone().partial(&axes, ReduceOp::Max),
                    &whole_row,
                    &row_shape,
                )?,
            });
            let s_def = kernel_def(with_rows(
                &format!("{kernel}_row_sum_exp"),
                r,
                &["m"],
                |b, x, rows| {
                    let d = b.push(Op::Binary(BinaryOp::Sub), &[x, rows[0]])?;
                    let e = b.push(Op::Unary(UnaryOp::Exp), &[d])?;
                    b.push(reduce(GraphReduce::Sum, r - 1, *policy), &[e])
                },
            ))?;
            let s = push_kernel(&mut stages, "row Σ exp(x − m)", s_def, vec![xs_slot, m]);
            stages.push(Stage::Combine {
                slot: s,
                what: "global Σ exp".into(),
                plan: combine(
                    &whole_row.clone().partial(&axes, ReduceOp::Sum),
                    &whole_row,
                    &row_shape,
                )?,
            });
            let f_def = kernel_def(with_rows(
                &format!("{kernel}_softmax_finish"),
                r,
                &["m", "s"],
                |b, x, rows| {
                    let d = b.push(Op::Binary(BinaryOp::Sub), &[x, rows[0]])?;
                    let e = b.push(Op::Unary(UnaryOp::Exp), &[d])?;
                    b.push(Op::Binary(BinaryOp::Div), &[e, rows[1]])
                },
            ))?;
            push_kernel(&mut stages, "normalise", f_def, vec![xs_slot, m, s])
        }
        Op::RmsNorm { eps, policy } => {
            let ss_def = kernel_def(row_graph(
                &format!("{kernel}_row_sum_sq"),
                r,
                Box::new(|b, x, ()| {
                    let sq = b.push(Op::Binary(BinaryOp::Mul), &[x, x])?;
                    b.push(reduce(GraphReduce::Sum, r - 1, *policy), &[sq])
                }),
            ))?;
            let ss = push_kernel(&mut stages, "row Σ x²", ss_def, vec![xs_slot]);
            stages.push(Stage::Combine {
                slot: ss,
                what: "global Σ x²".into(),
                plan: combine(
                    &whole_row.clone().partial(&axes, ReduceOp::Sum),
                    &whole_row,
                    &row_shape,
                )?,
            });
            let (n, eps) = (xs[r - 1] as f64, *eps);
            let f_def = kernel_def(with_rows_gamma(
                &format!("{kernel}_rmsnorm_finish"),
                r,
                &["ss"],
                |b, x, rows| {
                    let ms = scalar_op(b, rows[0], BinaryOp::Mul, 1.0 / n)?;
                    let v = scalar_op(b, ms, BinaryOp::Add, eps)?;
                    b.push(Op::Unary(UnaryOp::Rsqrt), &[v])
                        .and_then(|q| b.push(Op::Binary(BinaryOp::Mul), &[x, q]))
                },
            ))?;
            push_kernel(
                &mut stages,
                "normalise",
                f_def,
                vec![xs_slot, ss, operand[1]],
            )
        }
        Op::LayerNorm { eps, policy } => {
            let (_, parts) = mesh.index_along(0, &axes)?;
            let mean_def = kernel_def(row_graph(
                &format!("{kernel}_row_mean"),
                r,
                Box::new(|b, x, ()| b.push(reduce(GraphReduce::Mean, r - 1, *policy), &[x])),
            ))?;
            let mean = push_kernel(&mut stages, "row mean μᵢ", mean_def, vec![xs_slot]);
            let m2_def = kernel_def(with_rows(
                &format!("{kernel}_row_m2"),
                r,
                &["mean"],
                |b, x, rows| {
                    let d = b.push(Op::Binary(BinaryOp::Sub), &[x, rows[0]])?;
                    let sq = b.push(Op::Binary(BinaryOp::Mul), &[d, d])?;
                    b.push(reduce(GraphReduce::Sum, r - 1, *policy), &[sq])
                },
            ))?;
            let m2 = push_kernel(&mut stages, "row M2ᵢ", m2_def, vec![xs_slot, mean]);
            // The per-shard statistics as columns of a [.., P] tensor split over `A`.
            let mut gshape = xs.clone();
            gshape[r - 1] = parts;
            let split = set_dim(&xspec, r - 1, DimSpec::Sharded(axes.clone()));
            for (slot, what) in [(mean, "all μᵢ"), (m2, "all M2ᵢ")] {
                stages.push(Stage::Combine {
                    slot,
                    what: what.into(),
                    plan: combine(&split, &whole_row, &gshape)?,
                });
            }
            let counts: Vec<f32> = (0..parts)
                .map(|i| chunk_range(xs[r - 1], parts, i).len() as f32)
                .collect();
            let counts_slot = push(
                &mut stages,
                Stage::Constant {
                    what: "counts nᵢ".into(),
                    data: counts,
                    shape: vec![parts],
                },
            );
            let (n, eps) = (xs[r - 1] as f64, *eps);
            let f_def = kernel_def(layernorm_finish(
                &format!("{kernel}_layernorm_finish"),
                r,
                n,
                eps,
                *policy,
            ))?;
            push_kernel(
                &mut stages,
                "Chan's combination, normalise",
                f_def,
                vec![xs_slot, mean, m2, counts_slot, operand[1], operand[2]],
            )
        }
        _ => return Ok(None),
    };
    // What follows the node.
    let output = if g.output.index() == v {
        output
    } else {
        let def = kernel_def(Ok(suffix(g, Value(v as u32), &format!("{kernel}_rest"))))?;
        let mut inputs = all_params;
        inputs.push(output);
        push_kernel(&mut stages, "the rest of the kernel", def, inputs)
    };
    Ok(Some(StatsPath {
        op: op_name,
        node: g.value_name(Value(v as u32)),
        axes,
        stages,
        output,
        args: n_params,
    }))
}

/// Passes over its data operand a statistics op makes (reading it once each).
fn passes(op: &Op) -> f64 {
    match op {
        Op::Softmax { .. } | Op::LayerNorm { .. } => 3.0,
        Op::RmsNorm { .. } => 2.0,
        _ => 1.0,
    }
}

/// The γ term of a launch: seconds the statistics ops of `g` spend reading their data operands
/// on the busiest device, under the placements of `p` (split statistics read a shard; gathered
/// ones the whole axis).
pub(crate) fn compute_seconds(
    g: &Graph,
    kernel: &str,
    mesh: &Mesh,
    shapes: &[Vec<usize>],
    p: &Propagated,
) -> Result<f64> {
    let mut bytes = 0.0;
    for v in super::propagate::statistics_nodes(g, kernel)? {
        let x = g.nodes[v].args[0];
        let elems = local_elems(mesh, &shapes[x.index()], &p.values[x.index()])?;
        bytes += passes(&g.nodes[v].op) * (elems * g.ty(x).dtype.size_bytes()) as f64;
    }
    Ok(bytes * mesh.topology().gamma_s_per_byte)
}

/// Elements of the largest shard of a tensor of `shape` under `spec`.
pub(crate) fn local_elems(mesh: &Mesh, shape: &[usize], spec: &ShardSpec) -> Result<usize> {
    let mut most = 0;
    for rank in 0..mesh.size() {
        most = most.max(spec.local_shape(shape, mesh, rank)?.iter().product());
    }
    Ok(most)
}

/// `spec` with an entry for each of `r` dims.
fn full(spec: &ShardSpec, r: usize) -> ShardSpec {
    let dims = (0..r).map(|d| match spec.dim_axes(d) {
        [] => DimSpec::Replicated,
        a => DimSpec::Sharded(a.to_vec()),
    });
    ShardSpec::new(dims)
}

fn set_dim(spec: &ShardSpec, d: usize, to: DimSpec) -> ShardSpec {
    let mut dims = spec.entries().to_vec();
    dims[d] = to;
    ShardSpec::new(dims)
}

fn reduce(op: GraphReduce, axis: usize, policy: NumericsPolicy) -> Op {
    Op::Reduce {
        op,
        axes: vec![axis],
        keepdim: true,
        policy,
    }
}

fn scalar_op(
    b: &mut GraphBuilder,
    x: Value,
    op: BinaryOp,
    c: f64,
) -> std::result::Result<Value, tessera::ir::graph::TypeError> {
    let k = b.push(
        Op::Const {
            value: c,
            dtype: DType::F32,
        },
        &[],
    )?;
    b.push(Op::Binary(op), &[x, k])
}

/// `f32[D0, …, C]`.
fn x_type(r: usize) -> TensorType {
    let mut dims: Vec<Dim> = (0..r - 1).map(|i| Dim::sym(&format!("D{i}"))).collect();
    dims.push(Dim::sym("C"));
    TensorType::new(DType::F32, Shape(dims))
}

/// `f32[D0, …, 1]`: per-row statistics.
fn row_type(r: usize, last: Dim) -> TensorType {
    let mut dims: Vec<Dim> = (0..r - 1).map(|i| Dim::sym(&format!("D{i}"))).collect();
    dims.push(last);
    TensorType::new(DType::F32, Shape(dims))
}

type Body<'a, A> = Box<
    dyn FnOnce(
            &mut GraphBuilder,
            Value,
            A,
        ) -> std::result::Result<Value, tessera::ir::graph::TypeError>
        + 'a,
>;

/// A kernel of `x: f32[D0, …, C]` alone.
fn row_graph(name: &str, r: usize, body: Body<'_, ()>) -> Result<Graph> {
    let mut b = Graph::builder(name);
    let x = b.param("x", x_type(r));
    let out = body(&mut b, x, ())?;
    Ok(b.finish(out))
}

/// A kernel of `x` and per-row statistics named `rows` (`f32[D0, …, 1]`).
fn with_rows(
    name: &str,
    r: usize,
    rows: &[&str],
    body: impl FnOnce(
        &mut GraphBuilder,
        Value,
        &[Value],
    ) -> std::result::Result<Value, tessera::ir::graph::TypeError>,
) -> Result<Graph> {
    let mut b = Graph::builder(name);
    let x = b.param("x", x_type(r));
    let rs: Vec<Value> = rows
        .iter()
        .map(|n| b.param(n, row_type(r, Dim::Const(1))))
        .collect();
    let out = body(&mut b, x, &rs)?;
    Ok(b.finish(out))
}

/// [`with_rows`], the result then scaled by `gamma: f32[C]` (rmsnorm); `gamma` is the last
/// parameter.
fn with_rows_gamma(
    name: &str,
    r: usize,
    rows: &[&str],
    body: impl FnOnce(
        &mut GraphBuilder,
        Value,
        &[Value],
    ) -> std::result::Result<Value, tessera::ir::graph::TypeError>,
) -> Result<Graph> {
    with_rows(name, r, rows, |b, x, rs| {
        let gamma = b.param(
            "gamma",
            TensorType::new(DType::F32, Shape(vec![Dim::sym("C")])),
        );
        let y = body(b, x, rs)?;
        b.push(Op::Binary(BinaryOp::Mul), &[y, gamma])
    })
}

/// `(x, μᵢ[.., P], M2ᵢ[.., P], nᵢ[P], γ, β) → (x − μ)·rsqrt(M2/N + eps)·γ + β` with Chan's
/// combination `μ = Σ nᵢμᵢ / N`, `M2 = Σ M2ᵢ + Σ nᵢ(μᵢ − μ)²`.
fn layernorm_finish(
    name: &str,
    r: usize,
    n: f64,
    eps: f64,
    policy: NumericsPolicy,
) -> Result<Graph> {
    let mut b = Graph::builder(name);
    let x = b.param("x", x_type(r));
    let means = b.param("means", row_type(r, Dim::sym("P")));
    let m2s = b.param("m2s", row_type(r, Dim::sym("P")));
    let counts = b.param(
        "counts",
        TensorType::new(DType::F32, Shape(vec![Dim::sym("P")])),
    );
    let gamma = b.param(
        "gamma",
        TensorType::new(DType::F32, Shape(vec![Dim::sym("C")])),
    );
    let beta = b.param(
        "beta",
        TensorType::new(DType::F32, Shape(vec![Dim::sym("C")])),
    );
    let bin = |b: &mut GraphBuilder, op, x, y| b.push(Op::Binary(op), &[x, y]);
    let weighted = bin(&mut b, BinaryOp::Mul, means, counts)?;
    let total = b.push(reduce(GraphReduce::Sum, r - 1, policy), &[weighted])?;
    let mean = scalar_op(&mut b, total, BinaryOp::Mul, 1.0 / n)?;
    let d = bin(&mut b, BinaryOp::Sub, means, mean)?;
    let d2 = bin(&mut b, BinaryOp::Mul, d, d)?;
    let nd2 = bin(&mut b, BinaryOp::Mul, d2, counts)?;
    let between = b.push(reduce(GraphReduce::Sum, r - 1, policy), &[nd2])?;
    let within = b.push(reduce(GraphReduce::Sum, r - 1, policy), &[m2s])?;
    let m2 = bin(&mut b, BinaryOp::Add, within, between)?;
    let var = scalar_op(&mut b, m2, BinaryOp::Mul, 1.0 / n)?;
    let ve = scalar_op(&mut b, var, BinaryOp::Add, eps)?;
    let inv = b.push(Op::Unary(UnaryOp::Rsqrt), &[ve])?;
    let xc = bin(&mut b, BinaryOp::Sub, x, mean)?;
    let xn = bin(&mut b, BinaryOp::Mul, xc, inv)?;
    let xg = bin(&mut b, BinaryOp::Mul, xn, gamma)?;
    let out = bin(&mut b, BinaryOp::Add, xg, beta)?;
    Ok(b.finish(out))
}

/// `reduce(x)` over `axes` under the node's numerics policy (× `scale`).
fn reduce_graph(
    name: &str,
    r: usize,
    op: GraphReduce,
    axes: &[usize],
    keepdim: bool,
    policy: NumericsPolicy,
    scale: Option<f64>,
) -> Result<Graph> {
    let mut b = Graph::builder(name);
    let dims: Vec<Dim> = (0..r).map(|i| Dim::sym(&format!("D{i}"))).collect();
    let x = b.param("x", TensorType::new(DType::F32, Shape(dims)));
    let mut out = b.push(
        Op::Reduce {
            op,
            axes: axes.to_vec(),
            keepdim,
            policy,
        },
        &[x],
    )?;
    if let Some(c) = scale {
        out = scalar_op(&mut b, out, BinaryOp::Mul, c)?;
    }
    Ok(b.finish(out))
}

/// Copies the nodes of `g` that `out` needs into `b`, where `map` already holds the values
/// given (parameters, a value replaced by a parameter), returning the value `out` maps to.
fn copy(g: &Graph, b: &mut GraphBuilder, out: Value, map: &mut HashMap<usize, Value>) -> Value {
    let mut need = vec![false; g.nodes.len()];
    need[out.index()] = true;
    for v in (0..g.nodes.len()).rev() {
        if need[v] && !map.contains_key(&v) {
            for a in &g.nodes[v].args {
                need[a.index()] = true;
            }
        }
    }
    for (v, n) in g.nodes.iter().enumerate() {
        if !need[v] || map.contains_key(&v) {
            continue;
        }
        let args: Vec<Value> = n.args.iter().map(|a| map[&a.index()]).collect();
        let nv = b.push_typed(n.op.clone(), &args, n.ty.clone());
        map.insert(v, nv);
    }
    map[&out.index()]
}

fn with_params(g: &Graph, name: &str) -> (GraphBuilder, HashMap<usize, Value>) {
    let mut b = Graph::builder(name);
    let mut map = HashMap::new();
    for p in &g.params {
        let Op::Param { name, .. } = &g.node(*p).op else {
            unreachable!("params are Param nodes")
        };
        map.insert(p.index(), b.param(name, g.ty(*p).clone()));
    }
    (b, map)
}

/// The part of `g` computing `value`, over all of `g`'s parameters.
fn prefix(g: &Graph, value: Value, name: &str) -> Graph {
    let (mut b, mut map) = with_params(g, name);
    let out = copy(g, &mut b, value, &mut map);
    b.finish(out)
}

/// `g` with `value` as one more parameter (`stat`), computing `g`'s output.
fn suffix(g: &Graph, value: Value, name: &str) -> Graph {
    let (mut b, mut map) = with_params(g, name);
    map.insert(value.index(), b.param("stat", g.ty(value).clone()));
    let out = copy(g, &mut b, g.output, &mut map);
    b.finish(out)
}

/// One definition per graph text and process (the texts live as long as the definitions, as
/// `tessera::grad` does for backward kernels).
fn kernel_def(g: Result<Graph>) -> Result<&'static KernelDef> {
    let g = g?;
    static BUILT: OnceLock<Mutex<HashMap<String, &'static KernelDef>>> = OnceLock::new();
    let text = g.to_string();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(d) = built.get(&text) {
        return Ok(d);
    }
    let name: &'static str = Box::leak(g.name.clone().into_boxed_str());
    let leaked: &'static str = Box::leak(text.clone().into_boxed_str());
    let def: &'static KernelDef = Box::leak(Box::new(KernelDef::new(name, leaked, &[])));
    def.compiled()?;
    built.insert(text, def);
    Ok(def)
}
