//! Rebuilding a graph with matches replaced, then removing nodes nothing uses.

use super::{Match, RewriteError, Rule};
use crate::graph::{Graph, Op, Value};

/// Copies `g` node by node; at each accepted match's root, builds the rule's replacement from
/// the renumbered inputs instead. Nodes left without a use are then removed (parameters stay).
pub(super) fn apply(g: &Graph, accepted: &[(&Rule, Match)]) -> Result<Graph, RewriteError> {
    let mut b = Graph::builder(&g.name);
    let mut map: Vec<Option<Value>> = vec![None; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let v = Value(i as u32);
        let new = match &n.op {
            Op::Param { name, .. } => b.param(name, n.ty.clone()),
            _ => match accepted.iter().find(|(_, m)| m.root == v) {
                Some((r, m)) => {
                    let inputs: Vec<Value> = m
                        .inputs
                        .iter()
                        .map(|x| map[x.index()].expect("inputs precede the root"))
                        .collect();
                    let err = |message: String| RewriteError {
                        rule: r.name.into(),
                        value: g.value_name(v),
                        message,
                    };
                    let out = (r.replace)(&mut b, m, &inputs).map_err(|e| err(e.to_string()))?;
                    if *b.ty(out) != n.ty {
                        return Err(err(format!(
                            "the replacement has type {} but the root has {} (a rule bug)",
                            b.ty(out),
                            n.ty
                        )));
                    }
                    out
                }
                None => {
                    let args: Vec<Value> = n
                        .args
                        .iter()
                        .map(|x| map[x.index()].expect("operands precede their use"))
                        .collect();
                    b.push_typed(n.op.clone(), &args, n.ty.clone())
                }
            },
        };
        map[i] = Some(new);
    }
    let out = map[g.output.index()].expect("the output is defined");
    Ok(dead_code(&b.finish(out)))
}

/// `g` without the nodes the output does not depend on (parameters are kept, in order).
pub(crate) fn dead_code(g: &Graph) -> Graph {
    let mut live = vec![false; g.nodes.len()];
    live[g.output.index()] = true;
    for i in (0..g.nodes.len()).rev() {
        if live[i] {
            for a in &g.nodes[i].args {
                live[a.index()] = true;
            }
        }
    }
    let mut b = Graph::builder(&g.name);
    let mut map: Vec<Option<Value>> = vec![None; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        map[i] = match &n.op {
            Op::Param { name, .. } => Some(b.param(name, n.ty.clone())),
            _ if live[i] => {
                let args: Vec<Value> = n.args.iter().map(|x| map[x.index()].unwrap()).collect();
                Some(b.push_typed(n.op.clone(), &args, n.ty.clone()))
            }
            _ => None,
        };
    }
    let out = map[g.output.index()].unwrap();
    b.finish(out)
}
