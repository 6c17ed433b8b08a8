//! Dijkstra over specs: the cheapest path of single steps, fewest steps among equal costs.

use super::PlannedStep;
use super::edges::{Edges, canonical, unreachable};
use crate::{DistError, Mesh, Result, ShardSpec};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// Most specs one search may visit before it gives up with an error (a mesh of many axes times
/// a tensor of many dims); far above what any mesh of up to 4 axes and rank-4 tensor reaches.
const MAX_STATES: usize = 200_000;

#[derive(PartialEq)]
struct Entry {
    cost: f64,
    steps: usize,
    seq: usize,
    state: usize,
}

impl Eq for Entry {}

impl Ord for Entry {
    // A min-heap on (cost, steps, insertion order).
    fn cmp(&self, o: &Self) -> Ordering {
        o.cost
            .total_cmp(&self.cost)
            .then(o.steps.cmp(&self.steps))
            .then(o.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The cheapest steps from `from` to `to`.
pub(crate) fn cheapest(
    mesh: &Mesh,
    shape: &[usize],
    eb: usize,
    from: &ShardSpec,
    to: &ShardSpec,
) -> Result<Vec<PlannedStep>> {
    let rank = shape.len();
    from.validate(mesh, rank)?;
    to.validate(mesh, rank)?;
    let (src, dst) = (canonical(from, mesh, rank), canonical(to, mesh, rank));
    // Partial axes can only be reduced away, never created.
    if let Some((t, op)) = dst.partial_state() {
        match src.partial_state() {
            Some((s, op2)) if op == op2 && t.iter().all(|a| s.contains(a)) => {}
            _ => return Err(unreachable(from, to)),
        }
    }
    let mut edges = Edges::new(mesh, shape, eb);
    let mut states: Vec<ShardSpec> = vec![src.clone()];
    let mut index: HashMap<ShardSpec, usize> = HashMap::from([(src, 0)]);
    let mut best: Vec<(f64, usize)> = vec![(0.0, 0)];
    let mut prev: Vec<Option<(usize, PlannedStep)>> = vec![None];
    let mut done: Vec<bool> = vec![false];
    let mut heap = BinaryHeap::from([Entry {
        cost: 0.0,
        steps: 0,
        seq: 0,
        state: 0,
    }]);
    let mut seq = 1;
    while let Some(Entry {
        cost, steps, state, ..
    }) = heap.pop()
    {
        if done[state] {
            continue;
        }
        done[state] = true;
        if states[state] == dst {
            let mut path = Vec::new();
            let mut at = state;
            while let Some((p, step)) = prev[at].take() {
                path.push(step);
                at = p;
            }
            path.reverse();
            return Ok(path);
        }
        for e in edges.from(&states[state].clone())? {
            let (c, n) = (cost + e.seconds, steps + 1);
            let next = match index.get(&e.to) {
                Some(&i) => i,
                None => {
                    if states.len() >= MAX_STATES {
                        return Err(DistError::Shape(format!(
                            "redistribute {from} → {to}: more than {MAX_STATES} specs to search"
                        )));
                    }
                    states.push(e.to.clone());
                    index.insert(e.to.clone(), states.len() - 1);
                    best.push((f64::INFINITY, usize::MAX));
                    prev.push(None);
                    done.push(false);
                    states.len() - 1
                }
            };
            if done[next] {
                continue;
            }
            // Costs within rounding of each other are equal; then fewer steps win.
            let (b, bn) = best[next];
            let tol = 1e-15 + 1e-9 * b.abs().min(1e300);
            let better = c < b - tol || (c <= b + tol && n < bn);
            if better {
                best[next] = (c, n);
                prev[next] = Some((state, e));
                heap.push(Entry {
                    cost: c,
                    steps: n,
                    seq,
                    state: next,
                });
                seq += 1;
            }
        }
    }
    Err(DistError::Shape(format!(
        "redistribute {from} → {to} on shape {shape:?}: no sequence of collectives reaches the target"
    )))
}
