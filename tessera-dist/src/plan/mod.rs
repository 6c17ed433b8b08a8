//! The redistribution planner: the cheapest sequence of single collectives and local slices
//! between two specs under the α-β-γ cost model, inspectable before it runs.
//!
//! `edges.rs` lists every single step out of a spec (its validity checked on the actual shape,
//! so uneven splits are handled exactly); `search.rs` runs Dijkstra over specs with those edges.

mod edges;
mod search;

use crate::{Algorithm, CollectiveCounts, CollectiveKind, Mesh, ReduceOp, Result, ShardSpec};
use std::fmt;

pub(crate) use edges::padded as padded_extents;
pub use edges::redistribute_edges;

/// One transition.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Each device keeps its part of `dim` when the dim is further split over `axes` (appended
    /// as the minor axes of the dim's list; no communication).
    Slice {
        /// The tensor dim.
        dim: usize,
        /// The mesh axes it is further split over.
        axes: Vec<String>,
    },
    /// Reduces the partial contributions along `axes` (the partial state loses them).
    AllReduce {
        /// The mesh axes reduced over.
        axes: Vec<String>,
        /// The reduction.
        op: ReduceOp,
        /// The all-reduce algorithm the cost model chose.
        algo: Algorithm,
    },
    /// Reduces the partial contributions along `axes` and splits `dim` over them (appended as
    /// the dim's minor axes).
    ReduceScatter {
        /// The mesh axes reduced over.
        axes: Vec<String>,
        /// The reduction.
        op: ReduceOp,
        /// The tensor dim split over `axes`.
        dim: usize,
    },
    /// Concatenates `dim` over `axes` (the minor axes of the dim's list; they are removed).
    AllGather {
        /// The mesh axes gathered over.
        axes: Vec<String>,
        /// The tensor dim concatenated.
        dim: usize,
    },
    /// Moves `axes` (the minor axes of `from_dim`'s list) to the end of `to_dim`'s list.
    AllToAll {
        /// The mesh axes moved.
        axes: Vec<String>,
        /// The tensor dim they leave.
        from_dim: usize,
        /// The tensor dim they join.
        to_dim: usize,
    },
}

impl Step {
    /// The collective this step runs (`None` for a local slice).
    pub fn kind(&self) -> Option<CollectiveKind> {
        match self {
            Step::Slice { .. } => None,
            Step::AllReduce { .. } => Some(CollectiveKind::AllReduce),
            Step::ReduceScatter { .. } => Some(CollectiveKind::ReduceScatter),
            Step::AllGather { .. } => Some(CollectiveKind::AllGather),
            Step::AllToAll { .. } => Some(CollectiveKind::AllToAll),
        }
    }

    /// The mesh axes whose groups run it (for a slice: the axes it splits over).
    pub fn axes(&self) -> &[String] {
        match self {
            Step::Slice { axes, .. }
            | Step::AllReduce { axes, .. }
            | Step::ReduceScatter { axes, .. }
            | Step::AllGather { axes, .. }
            | Step::AllToAll { axes, .. } => axes,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Slice { dim, axes } => write!(f, "slice dim {dim} over [{}]", axes.join(",")),
            Step::AllReduce { axes, op, algo } => {
                write!(f, "all-reduce({op}, {algo}) over [{}]", axes.join(","))
            }
            Step::ReduceScatter { axes, op, dim } => write!(
                f,
                "reduce-scatter({op}) dim {dim} over [{}]",
                axes.join(",")
            ),
            Step::AllGather { axes, dim } => {
                write!(f, "all-gather dim {dim} over [{}]", axes.join(","))
            }
            Step::AllToAll {
                axes,
                from_dim,
                to_dim,
            } => write!(
                f,
                "all-to-all dim {from_dim}→{to_dim} over [{}]",
                axes.join(",")
            ),
        }
    }
}

/// A step with the specs around it and its cost.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedStep {
    /// The transition.
    pub step: Step,
    /// The spec before it (every dim listed).
    pub from: ShardSpec,
    /// The spec after it (every dim listed).
    pub to: ShardSpec,
    /// Ranks per group.
    pub group_size: usize,
    /// Groups that run it concurrently.
    pub groups: usize,
    /// Bytes per rank in nccl-tests terms (the all-reduce buffer, or the total buffer of
    /// reduce-scatter / all-gather / all-to-all), padded shards included; 0 for a slice.
    pub bytes: usize,
    /// Predicted seconds (the slowest group).
    pub seconds: f64,
}

/// An inspectable redistribution plan.
///
/// ```
/// use tessera_dist::{CollectiveKind, Mesh, ReduceOp, Replicate, Shard, ShardSpec, plan_redistribute};
/// let mesh = Mesh::local([("tp", 4)])?;
/// let partial = ShardSpec::new([Replicate, Replicate]).partial(["tp"], ReduceOp::Sum);
/// let rows = ShardSpec::new([Shard(["tp"])]);
/// // partial → shard: one reduce-scatter, cheaper than all-reduce + slice.
/// let plan = plan_redistribute(&mesh, &[1024, 1024], 4, &partial, &rows)?;
/// assert_eq!(plan.steps.len(), 1);
/// assert_eq!(plan.counts().get(CollectiveKind::ReduceScatter), 1);
/// println!("{plan}");
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Source spec.
    pub from: ShardSpec,
    /// Target spec.
    pub to: ShardSpec,
    /// Global shape.
    pub shape: Vec<usize>,
    /// Bytes per element.
    pub elem_bytes: usize,
    /// The steps in order.
    pub steps: Vec<PlannedStep>,
}

impl Plan {
    /// Collectives it launches, counted once per group.
    pub fn counts(&self) -> CollectiveCounts {
        let mut c = CollectiveCounts::default();
        for s in &self.steps {
            if let Some(k) = s.step.kind() {
                c.add(k, s.groups as u64);
            }
        }
        c
    }

    /// Predicted seconds in total.
    pub fn seconds(&self) -> f64 {
        self.steps.iter().map(|s| s.seconds).sum()
    }

    /// Bytes per rank over all steps.
    pub fn bytes(&self) -> usize {
        self.steps.iter().map(|s| s.bytes).sum()
    }

    /// True when no step communicates (slices only, or nothing).
    pub fn is_local(&self) -> bool {
        self.steps.iter().all(|s| s.step.kind().is_none())
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "redistribute {:?} {} → {}",
            self.shape, self.from, self.to
        )?;
        for s in &self.steps {
            writeln!(
                f,
                "  {:<40} → {:<24} groups {}×{}  {} B/rank  {:.2} µs",
                s.step.to_string(),
                s.to.to_string(),
                s.groups,
                s.group_size,
                s.bytes,
                s.seconds * 1e6
            )?;
        }
        write!(
            f,
            "  total {:.2} µs, {} B/rank",
            self.seconds() * 1e6,
            self.bytes()
        )
    }
}

/// Plans `from → to` for a tensor of `shape` with `elem_bytes`-byte elements: the cheapest
/// sequence of steps (fewest steps among equally cheap ones) found by Dijkstra over specs, whose
/// edges are every single collective — all-gather, reduce-scatter, all-reduce, all-to-all over
/// any subset of mesh axes — and every local slice ([`redistribute_edges`]), each costed by
/// [`crate::collective_time`] on the mesh's topology.
///
/// The target may keep a subset of the source's partial axes; a target partial over axes the
/// source does not hold partially is an error.
///
/// ```
/// use tessera_dist::{Mesh, ReduceOp, Shard, ShardSpec, plan_redistribute};
/// let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
/// // Partial over tp → split over (pp, tp): one reduce-scatter over tp, no all-reduce.
/// let from = ShardSpec::new([Shard(["dp"]), Shard(["pp"])]).partial(["tp"], ReduceOp::Sum);
/// let to = ShardSpec::new([Shard(["dp"]), Shard(["pp", "tp"])]);
/// let plan = plan_redistribute(&mesh, &[4096, 4096], 4, &from, &to)?;
/// assert_eq!(plan.steps.len(), 1);
/// assert_eq!(plan.steps[0].step.to_string(), "reduce-scatter(sum) dim 1 over [tp]");
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
pub fn plan_redistribute(
    mesh: &Mesh,
    shape: &[usize],
    elem_bytes: usize,
    from: &ShardSpec,
    to: &ShardSpec,
) -> Result<Plan> {
    let steps = search::cheapest(mesh, shape, elem_bytes, from, to)?;
    Ok(Plan {
        from: from.clone(),
        to: to.clone(),
        shape: shape.to_vec(),
        elem_bytes,
        steps,
    })
}
