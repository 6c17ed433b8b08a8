//! Sharding propagation through a kernel's Graph IR.
//!
//! Every `(value, dim)` of the graph is a node; each op's rule ([`super::rules`]) unifies the
//! nodes that share one of its factors, so a **class** is one loop index of the whole kernel
//! (e.g. `linear_gelu`'s rows, hidden and output columns). A class is split over mesh axes or
//! not; an axis splits at most one class, so no value is ever split twice over one axis.
//!
//! [`propagate`] assigns classes from the arguments' specs (in a given priority order), then
//! walks the graph in order: a split reduction factor makes its result `Partial(op)` over those
//! axes, and partial values flow only through ops that are linear in them. Where a partial value
//! reaches a non-linear op, or a normalized axis (softmax, layernorm, `reduce.mean`) is split,
//! the class responsible is unsplit and the walk starts again: the arguments are then
//! redistributed before the launch ("redistribute first"), so each device runs the kernel
//! unchanged on its shards. Under [`Statistic::Partial`]`(v)` node `v` keeps its split
//! statistics axes instead (the launch combines its partial statistics, `stats.rs`).

use super::rules::{Family, Kind, Linear, family, rule};
use crate::{DimSpec, DistError, Mesh, ReduceOp, Result, ShardSpec};
use std::collections::HashMap;
use tessera::ir::Dim;
use tessera::ir::graph::{Graph, Op};

/// The outcome: the spec every argument must have at launch and the output's spec.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Propagated {
    pub args: Vec<ShardSpec>,
    pub output: ShardSpec,
    /// Global shape of the output.
    pub out_shape: Vec<usize>,
    /// The placement of every value (partial states dropped).
    pub values: Vec<ShardSpec>,
    /// Per value, per dim: its class (the kernel's loop index it iterates over).
    pub classes: Vec<Vec<usize>>,
    /// Classes some op reduces or normalizes over.
    pub reduced: Vec<usize>,
}

/// How the statistics ops (reductions, softmax, layernorm, rmsnorm) treat a split reduced or
/// normalized axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Statistic {
    /// The rules as tabled: a split `reduce.sum`/`reduce.max` axis leaves a partial result;
    /// a split normalized axis is gathered first.
    Tabled,
    /// Every statistics op's reduced or normalized axes are gathered first.
    GatherFirst,
    /// Node `v` keeps its split axes: its result is whole and placed as the rules say (the
    /// launch computes it from partial statistics combined by collectives); the other
    /// statistics ops follow the table.
    Partial(usize),
}

/// Nodes that compute statistics over axes (reductions, softmax, layernorm, rmsnorm).
pub(crate) fn statistics_nodes(g: &Graph, kernel: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for (v, n) in g.nodes.iter().enumerate() {
        if matches!(family(&n.op, kernel)?, Family::Reduce | Family::Normalize) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Global shapes of every value, from the arguments' shapes.
pub(crate) fn global_shapes(g: &Graph, kernel: &str, args: &[&[usize]]) -> Result<Vec<Vec<usize>>> {
    let mut syms: HashMap<&str, usize> = HashMap::new();
    for (i, p) in g.params.iter().enumerate() {
        let dims = &g.ty(*p).shape.0;
        let got = args[i];
        if dims.len() != got.len() {
            return Err(DistError::Launch {
                kernel: kernel.into(),
                message: format!(
                    "argument `{}` has rank {}, the kernel takes rank {}",
                    g.value_name(*p),
                    got.len(),
                    dims.len()
                ),
            });
        }
        for (d, &n) in dims.iter().zip(got) {
            let ok = match d {
                Dim::Const(c) => *c as usize == n,
                Dim::Sym(s) => *syms.entry(s.as_str()).or_insert(n) == n,
            };
            if !ok {
                return Err(DistError::Launch {
                    kernel: kernel.into(),
                    message: format!(
                        "argument `{}` of global shape {got:?} does not fit {}",
                        g.value_name(*p),
                        g.ty(*p).shape
                    ),
                });
            }
        }
    }
    g.nodes
        .iter()
        .map(|n| {
            n.ty.shape
                .0
                .iter()
                .map(|d| match d {
                    Dim::Const(c) => Ok(*c as usize),
                    Dim::Sym(s) => syms
                        .get(s.as_str())
                        .copied()
                        .ok_or_else(|| DistError::Launch {
                            kernel: kernel.into(),
                            message: format!("symbol `{s}` bound by no argument"),
                        }),
                })
                .collect()
        })
        .collect()
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, x: usize) -> usize {
        let mut r = x;
        while self.0[r] != r {
            r = self.0[r];
        }
        self.0[x] = r;
        r
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.0[b] = a;
        }
    }
}

/// One op's non-parallel factors, as classes.
struct OpInfo {
    /// (class, kind) of each reduce / normalize factor.
    special: Vec<(usize, Kind)>,
    linear: Linear,
}

/// Classes of every `(value, dim)` node and each op's special factors.
struct Classes {
    /// `class[v][d]`.
    of: Vec<Vec<usize>>,
    ops: Vec<OpInfo>,
}

fn classes(g: &Graph, kernel: &str, shapes: &[Vec<usize>]) -> Result<Classes> {
    let mut base = Vec::with_capacity(shapes.len());
    let mut n = 0;
    for s in shapes {
        base.push(n);
        n += s.len();
    }
    let mut uf = UnionFind((0..n).collect());
    let mut pending = Vec::new();
    for (v, node) in g.nodes.iter().enumerate() {
        let fam = family(&node.op, kernel)?;
        let operand_shapes: Vec<&[usize]> = node
            .args
            .iter()
            .map(|a| shapes[a.index()].as_slice())
            .collect();
        let r = rule(&node.op, fam, &operand_shapes, &shapes[v])?;
        // factor → first node naming it
        let mut rep: Vec<Option<usize>> = vec![None; r.kinds.len()];
        let mut name = |f: usize, node_id: usize, uf: &mut UnionFind| match rep[f] {
            Some(x) => uf.union(x, node_id),
            None => rep[f] = Some(node_id),
        };
        for (i, a) in node.args.iter().enumerate() {
            for (d, f) in r.operands[i].iter().enumerate() {
                if let Some(f) = f {
                    name(*f, base[a.index()] + d, &mut uf);
                }
            }
        }
        for (d, f) in r.result.iter().enumerate() {
            if let Some(f) = f {
                name(*f, base[v] + d, &mut uf);
            }
        }
        let special: Vec<(usize, Kind)> = r
            .kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| **k != Kind::Parallel)
            .filter_map(|(f, k)| rep[f].map(|x| (x, *k)))
            .collect();
        pending.push((special, r.linear));
    }
    let of = shapes
        .iter()
        .enumerate()
        .map(|(v, s)| (0..s.len()).map(|d| uf.find(base[v] + d)).collect())
        .collect();
    let ops = pending
        .into_iter()
        .map(|(special, linear)| OpInfo {
            special: special.into_iter().map(|(x, k)| (uf.find(x), k)).collect(),
            linear,
        })
        .collect();
    Ok(Classes { of, ops })
}

/// A value's unreduced state: the axes, the op, and the classes whose split made it.
#[derive(Clone, Debug, PartialEq)]
struct PartialState {
    axes: Vec<String>,
    op: ReduceOp,
    classes: Vec<usize>,
}

/// Propagates the arguments' specs (the earlier in `priority`, the stronger its claim on a
/// class) through `g`; see the module docs.
pub(crate) fn propagate(
    g: &Graph,
    kernel: &str,
    mesh: &Mesh,
    shapes: &[Vec<usize>],
    arg_specs: &[&ShardSpec],
    priority: &[usize],
    mode: Statistic,
) -> Result<Option<Propagated>> {
    for (i, s) in arg_specs.iter().enumerate() {
        s.validate(mesh, shapes[g.params[i].index()].len())?;
    }
    let cls = classes(g, kernel, shapes)?;
    let stats = statistics_nodes(g, kernel)?;
    // class → axes
    let mut split: HashMap<usize, Vec<String>> = HashMap::new();
    let mut used: Vec<String> = Vec::new();
    for &i in priority {
        let p = g.params[i].index();
        for d in 0..shapes[p].len() {
            let axes = arg_specs[i].dim_axes(d);
            let c = cls.of[p][d];
            if axes.is_empty() || split.contains_key(&c) || axes.iter().any(|a| used.contains(a)) {
                continue;
            }
            used.extend(axes.iter().cloned());
            split.insert(c, axes.to_vec());
        }
    }
    // Walk; unsplit the class behind each violation until none is left.
    let partial = loop {
        match walk(g, &cls, &split, mode, &stats) {
            Ok(p) => break p,
            Err(bad) => {
                for c in bad {
                    split.remove(&c);
                }
            }
        }
    };
    let spec_of = |v: usize, partial: Option<&PartialState>| {
        let dims = cls.of[v]
            .iter()
            .map(|c| match split.get(c) {
                Some(a) => DimSpec::Sharded(a.clone()),
                None => DimSpec::Replicated,
            })
            .collect::<Vec<_>>();
        let s = ShardSpec::new(dims);
        match partial {
            Some(p) => s.partial(&p.axes, p.op),
            None => s,
        }
    };
    if let Statistic::Partial(v) = mode {
        // Nothing of `v`'s statistics is split: no partial-statistics launch to offer.
        if !cls.ops[v]
            .special
            .iter()
            .any(|(c, _)| split.contains_key(c))
        {
            return Ok(None);
        }
    }
    let args = g.params.iter().map(|p| spec_of(p.index(), None)).collect();
    let out = g.output.index();
    Ok(Some(Propagated {
        args,
        output: spec_of(out, partial[out].as_ref()),
        out_shape: shapes[out].clone(),
        values: (0..g.nodes.len()).map(|v| spec_of(v, None)).collect(),
        classes: cls.of.clone(),
        reduced: cls
            .ops
            .iter()
            .flat_map(|o| o.special.iter().map(|(c, _)| *c))
            .collect(),
    }))
}

/// Each value's partial state under `split`, or the classes to unsplit.
fn walk(
    g: &Graph,
    cls: &Classes,
    split: &HashMap<usize, Vec<String>>,
    mode: Statistic,
    stats: &[usize],
) -> std::result::Result<Vec<Option<PartialState>>, Vec<usize>> {
    let mut state: Vec<Option<PartialState>> = Vec::with_capacity(g.nodes.len());
    for (v, node) in g.nodes.iter().enumerate() {
        let info = &cls.ops[v];
        let designated = mode == Statistic::Partial(v);
        // A split normalized axis (or, gathering first, any split statistics axis): unsplit.
        let gather_all = mode == Statistic::GatherFirst && stats.contains(&v);
        let normalized: Vec<usize> = info
            .special
            .iter()
            .filter(|(c, k)| (*k == Kind::Normalize || gather_all) && split.contains_key(c))
            .map(|(c, _)| *c)
            .collect();
        if !normalized.is_empty() && !designated {
            return Err(normalized);
        }
        let ins: Vec<Option<&PartialState>> = node
            .args
            .iter()
            .map(|a| state[a.index()].as_ref())
            .collect();
        let partial_in: Vec<usize> = (0..ins.len()).filter(|&i| ins[i].is_some()).collect();
        let blame = |idx: &[usize]| -> Vec<usize> {
            idx.iter()
                .flat_map(|&i| ins[i].map(|p| p.classes.clone()).unwrap_or_default())
                .collect()
        };
        let mut out: Option<PartialState> = if partial_in.is_empty() {
            None
        } else {
            let first = ins[partial_in[0]].expect("partial");
            let ok = match info.linear {
                // The partial-statistics node reads whole values.
                _ if designated => false,
                Linear::None => false,
                Linear::Structural => partial_in.len() == 1,
                Linear::AllSame => {
                    partial_in.len() == ins.len()
                        && ins.iter().all(|p| {
                            p.is_some_and(|p| p.op == ReduceOp::Sum && p.axes == first.axes)
                        })
                }
                Linear::OneOf(allowed) => {
                    partial_in.len() == 1
                        && allowed.contains(&partial_in[0])
                        && first.op == ReduceOp::Sum
                }
            };
            if !ok {
                return Err(blame(&partial_in));
            }
            Some(first.clone())
        };
        // A split reduction factor: this op's result is partial over its axes (unless the
        // launch combines the partial statistics itself).
        for (c, k) in info.special.iter().filter(|_| !designated) {
            let (Kind::Reduce(op), Some(axes)) = (k, split.get(c)) else {
                continue;
            };
            out = match out {
                None => Some(PartialState {
                    axes: axes.clone(),
                    op: *op,
                    classes: vec![*c],
                }),
                Some(mut p) if p.op == *op && *op == ReduceOp::Sum => {
                    p.axes.extend(axes.iter().cloned());
                    p.classes.push(*c);
                    Some(p)
                }
                Some(p) => {
                    let mut bad = p.classes;
                    bad.push(*c);
                    return Err(bad);
                }
            };
        }
        if matches!(node.op, Op::Param { .. } | Op::Const { .. }) {
            out = None;
        }
        state.push(out);
    }
    Ok(state)
}
