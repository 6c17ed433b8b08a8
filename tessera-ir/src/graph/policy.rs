//! Applying a numerics policy to a whole graph (a kernel's `numerics = ..` attribute, or a
//! scoped run-time setting).

use super::Graph;
use crate::NumericsPolicy;

/// `g` with every reduction that runs under `fast` (the default, which asks nothing of the
/// association order) switched to `policy`. A reduction that already names another non-fast
/// policy cannot honour both: that is an error naming the value. `policy = fast` returns `g`
/// unchanged.
///
/// ```
/// use tessera_ir::{NumericsPolicy as P, graph::{parse, with_policy}};
/// let g = parse("graph @s(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}").unwrap();
/// let d = with_policy(&g, P::Deterministic).unwrap();
/// assert!(d.to_string().contains("softmax %x policy=deterministic"));
/// assert!(with_policy(&d, P::KahanSum).unwrap_err().contains("%1"));
/// ```
pub fn with_policy(g: &Graph, policy: NumericsPolicy) -> Result<Graph, String> {
    let mut out = g.clone();
    if policy == NumericsPolicy::Fast {
        return Ok(out);
    }
    for (i, n) in out.nodes.iter_mut().enumerate() {
        let name = n.op.name();
        if let Some(p) = n.op.policy_mut() {
            if *p == NumericsPolicy::Fast {
                *p = policy;
            } else if *p != policy {
                return Err(format!(
                    "%{i}: {name} runs under numerics policy `{p}` and cannot also honour `{policy}`"
                ));
            }
        }
    }
    Ok(out)
}

/// The non-fast policies a graph's reductions name (sorted, without repeats).
pub fn policies(g: &Graph) -> Vec<NumericsPolicy> {
    let mut v: Vec<NumericsPolicy> = g
        .nodes
        .iter()
        .filter_map(|n| n.op.policy())
        .filter(|p| *p != NumericsPolicy::Fast)
        .collect();
    v.sort_by_key(|p| p.name());
    v.dedup();
    v
}
