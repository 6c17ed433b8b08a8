//! Every single step out of a spec: the planner's edges, each checked against the actual shape
//! (an uneven split makes some of them impossible) and costed on the mesh's topology.

use super::{PlannedStep, Step};
use crate::{
    Algorithm, AxisGroups, CollectiveKind, DistError, Mesh, Result, Shard, ShardSpec,
    choose_all_reduce, chunk_len, collective_time,
};
use std::collections::HashMap;
use std::ops::Range;

/// The spec with exactly one entry per dim and its partial axes in mesh order.
pub(crate) fn canonical(spec: &ShardSpec, mesh: &Mesh, rank: usize) -> ShardSpec {
    spec.normalized(mesh, rank)
}

/// The padded extent of every dim under `spec`: the chunk every shard is padded to on the wire.
pub(crate) fn padded(mesh: &Mesh, shape: &[usize], spec: &ShardSpec) -> Result<Vec<usize>> {
    shape
        .iter()
        .enumerate()
        .map(|(d, &s)| Ok(chunk_len(s, mesh.index_along(0, spec.dim_axes(d))?.1)))
        .collect()
}

/// Every single step out of `from` (slices, all-gathers, reduce-scatters, all-reduces and
/// all-to-alls over any subset of mesh axes that the shape allows), with its cost. These are
/// the edges [`crate::plan_redistribute`] searches.
///
/// ```
/// use tessera_dist::{Mesh, Shard, ShardSpec, redistribute_edges};
/// let mesh = Mesh::local([("a", 2), ("b", 2)])?;
/// let edges = redistribute_edges(&mesh, &[8, 8], 4, &ShardSpec::new([Shard(["a", "b"])]))?;
/// let names: Vec<String> = edges.iter().map(|e| e.step.to_string()).collect();
/// assert!(names.contains(&"all-gather dim 0 over [b]".to_string()));     // the minor axis alone
/// assert!(names.contains(&"all-gather dim 0 over [a,b]".to_string()));
/// assert!(!names.contains(&"all-gather dim 0 over [a]".to_string()));    // not a suffix
/// assert!(names.contains(&"all-to-all dim 0→1 over [b]".to_string()));
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
pub fn redistribute_edges(
    mesh: &Mesh,
    shape: &[usize],
    elem_bytes: usize,
    from: &ShardSpec,
) -> Result<Vec<PlannedStep>> {
    from.validate(mesh, shape.len())?;
    let mut e = Edges::new(mesh, shape, elem_bytes);
    e.from(&canonical(from, mesh, shape.len()))
}

/// Edge generation with memoised axis groups.
pub(crate) struct Edges<'a> {
    mesh: &'a Mesh,
    shape: &'a [usize],
    eb: usize,
    groups: HashMap<Vec<String>, AxisGroups>,
}

impl<'a> Edges<'a> {
    pub(crate) fn new(mesh: &'a Mesh, shape: &'a [usize], eb: usize) -> Self {
        Edges {
            mesh,
            shape,
            eb,
            groups: HashMap::new(),
        }
    }

    fn group(&mut self, axes: &[String]) -> Result<&AxisGroups> {
        if !self.groups.contains_key(axes) {
            let g = self.mesh.group(axes)?;
            self.groups.insert(axes.to_vec(), g);
        }
        Ok(&self.groups[axes])
    }

    /// Dim `d`'s range on every device under `axes`.
    fn ranges(&self, d: usize, axes: &[String]) -> Result<Vec<Range<usize>>> {
        (0..self.mesh.size())
            .map(|r| {
                let (i, n) = self.mesh.index_along(r, axes)?;
                Ok(crate::chunk_range(self.shape[d], n, i))
            })
            .collect()
    }

    /// True when, in every group along `axes`, the members' `parts` (in group order) tile each
    /// member's `whole` exactly: consecutive, starting at its start and ending at its end.
    fn tiles(
        &mut self,
        axes: &[String],
        parts: &[Range<usize>],
        whole: &[Range<usize>],
    ) -> Result<bool> {
        let g = self.group(axes)?;
        for members in g.groups() {
            let w = &whole[members[0]];
            if members.iter().any(|&m| whole[m] != *w) {
                return Ok(false);
            }
            let mut at = w.start;
            for &m in members {
                if parts[m].start != at {
                    return Ok(false);
                }
                at = parts[m].end;
            }
            if at != w.end {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every edge out of the canonical spec `s`.
    pub(crate) fn from(&mut self, s: &ShardSpec) -> Result<Vec<PlannedStep>> {
        let rank = self.shape.len();
        let mesh = self.mesh;
        let names = mesh.axis_names();
        let dims: Vec<Vec<String>> = (0..rank).map(|d| s.dim_axes(d).to_vec()).collect();
        let partial = s.partial_state().map(|(a, op)| (a.to_vec(), op));
        let used = |a: &String| {
            dims.iter().any(|d| d.contains(a))
                || partial.as_ref().is_some_and(|(p, _)| p.contains(a))
        };
        let free: Vec<String> = names.iter().filter(|a| !used(a)).cloned().collect();
        let with_dims = |dims: &[Vec<String>], partial: Option<(Vec<String>, crate::ReduceOp)>| {
            let spec = ShardSpec::new(dims.iter().map(Shard));
            match partial {
                Some((p, op)) if !p.is_empty() => spec.partial(p, op),
                _ => spec,
            }
        };
        let mut out = Vec::new();
        for d in 0..rank {
            let old = self.ranges(d, &dims[d])?;
            // Slices: append free axes (ordered) when every new part lies inside the old one.
            for add in arrangements(&free) {
                let mut nd = dims[d].clone();
                nd.extend(add.iter().cloned());
                let new = self.ranges(d, &nd)?;
                if new
                    .iter()
                    .zip(&old)
                    .all(|(n, o)| n.is_empty() || (n.start >= o.start && n.end <= o.end))
                {
                    let mut all = dims.clone();
                    all[d] = nd;
                    let to = with_dims(&all, partial.clone());
                    out.push(self.step(Step::Slice { dim: d, axes: add }, s, &to)?);
                }
            }
            // All-gathers of a suffix of the dim's axes.
            for l in 1..=dims[d].len() {
                let keep = dims[d][..dims[d].len() - l].to_vec();
                let axes = dims[d][dims[d].len() - l..].to_vec();
                let new = self.ranges(d, &keep)?;
                if self.tiles(&axes, &old, &new)? {
                    let mut all = dims.clone();
                    all[d] = keep;
                    let to = with_dims(&all, partial.clone());
                    out.push(self.step(Step::AllGather { axes, dim: d }, s, &to)?);
                }
                // All-to-all: the same suffix moves to the end of another dim.
                for e in (0..rank).filter(|&e| e != d) {
                    let old_e = self.ranges(e, &dims[e])?;
                    let mut ne = dims[e].clone();
                    ne.extend(dims[d][dims[d].len() - l..].iter().cloned());
                    let new_e = self.ranges(e, &ne)?;
                    let axes = dims[d][dims[d].len() - l..].to_vec();
                    if self.tiles(&axes, &old, &new)? && self.tiles(&axes, &new_e, &old_e)? {
                        let mut all = dims.clone();
                        all[d] = dims[d][..dims[d].len() - l].to_vec();
                        all[e] = ne;
                        let to = with_dims(&all, partial.clone());
                        let step = Step::AllToAll {
                            axes,
                            from_dim: d,
                            to_dim: e,
                        };
                        out.push(self.step(step, s, &to)?);
                    }
                }
            }
            // Reduce-scatters: partial axes (ordered) appended to this dim.
            if let Some((p, op)) = &partial {
                for add in arrangements(p) {
                    let mut nd = dims[d].clone();
                    nd.extend(add.iter().cloned());
                    let new = self.ranges(d, &nd)?;
                    if self.tiles(&add, &new, &old)? {
                        let mut all = dims.clone();
                        all[d] = nd;
                        let rest: Vec<String> =
                            p.iter().filter(|a| !add.contains(a)).cloned().collect();
                        let to = with_dims(&all, Some((rest, *op)));
                        let step = Step::ReduceScatter {
                            axes: add,
                            op: *op,
                            dim: d,
                        };
                        out.push(self.step(step, s, &to)?);
                    }
                }
            }
        }
        // All-reduces over any subset of the partial axes.
        if let Some((p, op)) = &partial {
            for mask in 1u32..(1 << p.len()) {
                let axes: Vec<String> = (0..p.len())
                    .filter(|i| mask >> i & 1 == 1)
                    .map(|i| p[i].clone())
                    .collect();
                let rest: Vec<String> = p.iter().filter(|a| !axes.contains(a)).cloned().collect();
                let to = with_dims(&dims, Some((rest, *op)));
                let step = Step::AllReduce {
                    axes,
                    op: *op,
                    algo: Algorithm::Auto,
                };
                out.push(self.step(step, s, &to)?);
            }
        }
        Ok(out)
    }

    /// Costs one step from `from` to `to` (both canonical).
    pub(crate) fn step(
        &mut self,
        mut step: Step,
        from: &ShardSpec,
        to: &ShardSpec,
    ) -> Result<PlannedStep> {
        let (mesh, shape, eb) = (self.mesh, self.shape, self.eb);
        let pf = padded(mesh, shape, from)?;
        let pt = padded(mesh, shape, to)?;
        let numel = |p: &[usize]| p.iter().product::<usize>();
        let g = self.group(step.axes())?.clone();
        let n = g.group_size();
        let (bytes, kind) = match &step {
            Step::Slice { .. } => (0, None),
            Step::AllReduce { .. } => (numel(&pf) * eb, Some(CollectiveKind::AllReduce)),
            Step::ReduceScatter { .. } => {
                (numel(&pt) * n * eb, Some(CollectiveKind::ReduceScatter))
            }
            Step::AllGather { .. } => (numel(&pf) * n * eb, Some(CollectiveKind::AllGather)),
            Step::AllToAll { to_dim, .. } => {
                let mut b = pf.clone();
                b[*to_dim] = pt[*to_dim];
                (numel(&b) * n * eb, Some(CollectiveKind::AllToAll))
            }
        };
        let mut seconds = 0.0f64;
        if let Some(k) = kind {
            let mut al = Algorithm::Ring;
            if let Step::AllReduce { algo, .. } = &mut step {
                // One algorithm for every group: the one best for the first group.
                al = choose_all_reduce(bytes, &g.groups()[0], mesh.topology()).0;
                *algo = al;
            }
            for grp in g.groups() {
                seconds = seconds.max(collective_time(k, al, bytes, grp, mesh.topology()));
            }
        }
        Ok(PlannedStep {
            step,
            from: from.clone(),
            to: to.clone(),
            group_size: n,
            groups: g.groups().len(),
            bytes,
            seconds,
        })
    }
}

/// Every non-empty ordered selection of distinct items (all permutations of all subsets).
fn arrangements(items: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    fn rec(items: &[String], cur: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for it in items {
            if cur.contains(it) {
                continue;
            }
            cur.push(it.clone());
            out.push(cur.clone());
            rec(items, cur, out);
            cur.pop();
        }
    }
    rec(items, &mut cur, &mut out);
    out
}

/// An error for a target the planner cannot reach.
pub(crate) fn unreachable(from: &ShardSpec, to: &ShardSpec) -> DistError {
    DistError::PartialNotAllowed(format!(
        "redistribute target {to} is partial over axes the source {from} does not hold partially (or with another op); only reductions out of a partial state are planned"
    ))
}
