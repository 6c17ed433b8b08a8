//! Axis legalisation, run after the rules (always, whatever the options): puts every
//! reduction and softmax into a form some kernel class runs.
//!
//! - A softmax along an inner axis `k` of a rank-`r` tensor becomes `permute` (axis `k` moved
//!   last) → softmax along the last axis → `permute` back: the row-wise softmax kernel between
//!   two transpose-class kernels (each a read and a write of the tensor).
//! - A reduction over several axes becomes one reduction per axis, the highest first (a mean
//!   of means is the mean: every group has the same size).
//!
//! A reduction over one axis needs nothing: the last axis runs row-wise, any other axis `k` as
//! a column reduction over the view `[d0·..·dk−1, dk, dk+1·..·dr−1]` (`lower::view_shape_merged`).

use super::{Applied, RewriteError};
use crate::graph::{Graph, Op, Value};

/// The permutation that moves axis `k` of a rank-`r` tensor last.
///
/// ```
/// assert_eq!(tessera_ir::rewrite::axis_last(1, 4), vec![0, 2, 3, 1]);
/// ```
pub fn axis_last(k: usize, r: usize) -> Vec<usize> {
    (0..r).filter(|&a| a != k).chain([k]).collect()
}

/// The inverse permutation of [`axis_last`]: moves the last axis back to position `k`.
///
/// ```
/// assert_eq!(tessera_ir::rewrite::axis_back(1, 4), vec![0, 3, 1, 2]);
/// ```
pub fn axis_back(k: usize, r: usize) -> Vec<usize> {
    (0..r)
        .map(|a| match a.cmp(&k) {
            std::cmp::Ordering::Less => a,
            std::cmp::Ordering::Equal => r - 1,
            std::cmp::Ordering::Greater => a - 1,
        })
        .collect()
}

/// `g` with its softmaxes along inner axes and its multi-axis reductions legalised (see the
/// module docs), and one [`Applied`] record per node rewritten.
pub(super) fn legalize(g: &Graph) -> Result<(Graph, Vec<Applied>), RewriteError> {
    let mut b = Graph::builder(&g.name);
    let mut map: Vec<Value> = Vec::with_capacity(g.nodes.len());
    let mut notes = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let v = Value(i as u32);
        let args: Vec<Value> = n.args.iter().map(|a| map[a.index()]).collect();
        let err = |rule: &str, e: crate::graph::TypeError| RewriteError {
            rule: rule.into(),
            value: g.value_name(v),
            message: e.to_string(),
        };
        let rank = n.args.first().map_or(0, |a| g.ty(*a).shape.rank());
        let new = match &n.op {
            Op::Param { name, .. } => b.param(name, n.ty.clone()),
            Op::Softmax { axis, policy } if *axis + 1 < rank => {
                let rule = "softmax_axis";
                let (k, policy) = (*axis, *policy);
                let t = b
                    .push(Op::Permute(axis_last(k, rank)), &args)
                    .map_err(|e| err(rule, e))?;
                let s = b
                    .push(
                        Op::Softmax {
                            axis: rank - 1,
                            policy,
                        },
                        &[t],
                    )
                    .map_err(|e| err(rule, e))?;
                notes.push(note(
                    g,
                    rule,
                    v,
                    format!("axis {k} moved last by `permute` and back"),
                ));
                b.push(Op::Permute(axis_back(k, rank)), &[s])
                    .map_err(|e| err(rule, e))?
            }
            Op::Reduce {
                op,
                axes,
                keepdim,
                policy,
            } if axes.len() > 1 => {
                let rule = "reduce_axes";
                let mut sorted = axes.clone();
                sorted.sort_unstable_by(|a, b| b.cmp(a));
                let mut x = args[0];
                for a in &sorted {
                    let one = Op::Reduce {
                        op: *op,
                        axes: vec![*a],
                        keepdim: *keepdim,
                        policy: *policy,
                    };
                    x = b.push(one, &[x]).map_err(|e| err(rule, e))?;
                }
                notes.push(note(
                    g,
                    rule,
                    v,
                    format!("one reduction per axis, in the order {sorted:?}"),
                ));
                x
            }
            _ => b.push_typed(n.op.clone(), &args, n.ty.clone()),
        };
        map.push(new);
    }
    Ok((b.finish(map[g.output.index()]), notes))
}

fn note(g: &Graph, rule: &'static str, v: Value, why: String) -> Applied {
    Applied {
        rule,
        root: g.value_name(v),
        matched: vec![g.value_name(v)],
        inputs: g.node(v).args.iter().map(|a| g.value_name(*a)).collect(),
        before: None,
        after: None,
        times: None,
        applied: true,
        forced: false,
        reason: Some(why),
        arch: "",
        nominal: 0,
    }
}
