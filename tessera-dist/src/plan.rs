//! The redistribution planner: the cheapest sequence of transitions between two specs under the
//! α-β-γ cost model, inspectable before it runs.

use crate::{
    Algorithm, AxisRole, CollectiveCounts, CollectiveKind, DistError, Mesh, ReduceOp, Result,
    ShardSpec, choose_all_reduce, chunk_len, collective_time,
};
use std::fmt;

/// One transition.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// replicate → shard: each device keeps its chunk of `dim` (no communication).
    Slice { dim: usize, axes: Vec<String> },
    /// partial → replicate.
    AllReduce {
        axes: Vec<String>,
        op: ReduceOp,
        algo: Algorithm,
    },
    /// partial → shard `dim`.
    ReduceScatter {
        axes: Vec<String>,
        op: ReduceOp,
        dim: usize,
    },
    /// shard `dim` → replicate.
    AllGather { axes: Vec<String>, dim: usize },
    /// shard `from_dim` → shard `to_dim` over the same axes.
    AllToAll {
        axes: Vec<String>,
        from_dim: usize,
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

    /// The mesh axes whose groups run it.
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
            } => {
                write!(
                    f,
                    "all-to-all dim {from_dim}→{to_dim} over [{}]",
                    axes.join(",")
                )
            }
        }
    }
}

/// A step with its cost.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedStep {
    /// The transition.
    pub step: Step,
    /// Ranks per group.
    pub group_size: usize,
    /// Groups that run it concurrently.
    pub groups: usize,
    /// Bytes per rank in nccl-tests terms (the all-reduce buffer, or the total buffer of
    /// reduce-scatter / all-gather / all-to-all), padded shards included.
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
                "  {:<48} groups {}×{}  {} B/rank  {:.2} µs",
                s.step.to_string(),
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

/// Dims' axis lists + partial state, as the planner tracks them.
#[derive(Clone)]
struct State {
    dims: Vec<Vec<String>>,
    partial: Option<(Vec<String>, ReduceOp)>,
}

impl State {
    fn of(spec: &ShardSpec, rank: usize) -> State {
        State {
            dims: (0..rank).map(|d| spec.dim_axes(d).to_vec()).collect(),
            partial: spec.partial_state().map(|(a, op)| (a.to_vec(), op)),
        }
    }
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Plans `from → to` for a tensor of `shape` with `elem_bytes`-byte elements.
///
/// Candidates: partial → shard by reduce-scatter or by all-reduce + slice; shard(a) → shard(b)
/// by all-to-all or by all-gather + slice. Slices whose axes are free in the source run first
/// (less data to move). Every combination is costed and the cheapest kept.
pub fn plan_redistribute(
    mesh: &Mesh,
    shape: &[usize],
    elem_bytes: usize,
    from: &ShardSpec,
    to: &ShardSpec,
) -> Result<Plan> {
    let rank = shape.len();
    from.validate(mesh, rank)?;
    to.validate(mesh, rank)?;
    let keep_partial = match (from.partial_state(), to.partial_state()) {
        (_, None) => false,
        (Some((a, op)), Some((b, op2))) if same_set(a, b) && op == op2 => true,
        (_, Some(_)) => {
            return Err(DistError::PartialNotAllowed(format!(
                "redistribute target {to} is partial; only reductions out of a partial state are planned (source {from})"
            )));
        }
    };
    let src = State::of(from, rank);
    let dst = State::of(to, rank);

    // Binary choices.
    let rs_dim = match (&src.partial, keep_partial) {
        (Some((p, _)), false) => {
            (0..rank).find(|&e| src.dims[e].is_empty() && same_set(&dst.dims[e], p))
        }
        _ => None,
    };
    let moves: Vec<(usize, usize)> = (0..rank)
        .filter(|&d| !src.dims[d].is_empty() && src.dims[d] != dst.dims[d])
        .filter_map(|d| {
            (0..rank)
                .find(|&e| e != d && src.dims[e].is_empty() && dst.dims[e] == src.dims[d])
                .map(|e| (d, e))
        })
        .collect();
    let nchoices = moves.len() + usize::from(rs_dim.is_some());
    let mut best: Option<Plan> = None;
    for mask in 0..(1u32 << nchoices) {
        // bit set = the direct collective (reduce-scatter / all-to-all); mask 0 tried last.
        let mask = ((1u32 << nchoices) - 1) ^ mask;
        let use_rs = rs_dim.filter(|_| mask & 1 == 1);
        let bit0 = usize::from(rs_dim.is_some());
        let chosen: Vec<(usize, usize)> = moves
            .iter()
            .enumerate()
            .filter(|(i, _)| mask >> (i + bit0) & 1 == 1)
            .map(|(_, m)| *m)
            .collect();
        let steps = build(mesh, from, &src, &dst, keep_partial, use_rs, &chosen);
        let plan = cost(mesh, shape, elem_bytes, from, to, steps)?;
        if best
            .as_ref()
            .is_none_or(|b| plan.seconds() < b.seconds() - 1e-15)
        {
            best = Some(plan);
        }
    }
    Ok(best.expect("at least one candidate"))
}

fn build(
    _mesh: &Mesh,
    from: &ShardSpec,
    src: &State,
    dst: &State,
    keep_partial: bool,
    use_rs: Option<usize>,
    moves: &[(usize, usize)],
) -> Vec<Step> {
    let rank = src.dims.len();
    let mut cur = src.clone();
    let mut steps = Vec::new();
    // 1. Slices on axes free in the source.
    for e in 0..rank {
        if cur.dims[e].is_empty()
            && !dst.dims[e].is_empty()
            && dst.dims[e]
                .iter()
                .all(|a| from.role(a) == AxisRole::Replicated)
        {
            steps.push(Step::Slice {
                dim: e,
                axes: dst.dims[e].clone(),
            });
            cur.dims[e] = dst.dims[e].clone();
        }
    }
    // 2. The partial state.
    if !keep_partial && let Some((p, op)) = cur.partial.take() {
        match use_rs {
            Some(e) => {
                steps.push(Step::ReduceScatter {
                    axes: dst.dims[e].clone(),
                    op,
                    dim: e,
                });
                cur.dims[e] = dst.dims[e].clone();
            }
            None => steps.push(Step::AllReduce {
                axes: p,
                op,
                algo: Algorithm::Auto,
            }),
        }
    }
    // 3. Moves.
    for &(d, e) in moves {
        steps.push(Step::AllToAll {
            axes: cur.dims[d].clone(),
            from_dim: d,
            to_dim: e,
        });
        cur.dims[e] = std::mem::take(&mut cur.dims[d]);
    }
    // 4. Gathers.
    for d in 0..rank {
        if !cur.dims[d].is_empty() && cur.dims[d] != dst.dims[d] {
            steps.push(Step::AllGather {
                axes: std::mem::take(&mut cur.dims[d]),
                dim: d,
            });
        }
    }
    // 5. Remaining slices.
    for d in 0..rank {
        if cur.dims[d].is_empty() && !dst.dims[d].is_empty() {
            steps.push(Step::Slice {
                dim: d,
                axes: dst.dims[d].clone(),
            });
            cur.dims[d] = dst.dims[d].clone();
        }
    }
    debug_assert_eq!(cur.dims, dst.dims);
    steps
}

/// Padded local shape per dim given the current axis lists.
fn padded(mesh: &Mesh, shape: &[usize], dims: &[Vec<String>]) -> Result<Vec<usize>> {
    shape
        .iter()
        .zip(dims)
        .map(|(&s, axes)| Ok(chunk_len(s, mesh.index_along(0, axes)?.1)))
        .collect()
}

fn cost(
    mesh: &Mesh,
    shape: &[usize],
    eb: usize,
    from: &ShardSpec,
    to: &ShardSpec,
    steps: Vec<Step>,
) -> Result<Plan> {
    let rank = shape.len();
    let mut dims: Vec<Vec<String>> = (0..rank).map(|d| from.dim_axes(d).to_vec()).collect();
    let mut out = Vec::with_capacity(steps.len());
    for mut step in steps {
        let groups = mesh.group(step.axes())?;
        let n = groups.group_size();
        let local = padded(mesh, shape, &dims)?;
        let elems: usize = local.iter().product();
        let (bytes, kind) = match &step {
            Step::Slice { dim, axes } => {
                dims[*dim] = axes.clone();
                (0, None)
            }
            Step::AllReduce { .. } => (elems * eb, Some(CollectiveKind::AllReduce)),
            Step::ReduceScatter { dim, axes, .. } => {
                let c = chunk_len(shape[*dim], n);
                dims[*dim] = axes.clone();
                (
                    rest(&local, *dim) * c * n * eb,
                    Some(CollectiveKind::ReduceScatter),
                )
            }
            Step::AllGather { dim, .. } => {
                dims[*dim].clear();
                (elems * n * eb, Some(CollectiveKind::AllGather))
            }
            Step::AllToAll {
                from_dim, to_dim, ..
            } => {
                let ce = chunk_len(shape[*to_dim], n);
                let block = rest(&local, *to_dim) * ce;
                dims[*to_dim] = std::mem::take(&mut dims[*from_dim]);
                (block * n * eb, Some(CollectiveKind::AllToAll))
            }
        };
        let mut seconds = 0.0f64;
        if let Some(k) = kind {
            let mut al = Algorithm::Ring;
            if let Step::AllReduce { algo, .. } = &mut step {
                // One algorithm for every group: the one best for the first group.
                al = choose_all_reduce(bytes, &groups.groups()[0], mesh.topology()).0;
                *algo = al;
            }
            for g in groups.groups() {
                seconds = seconds.max(collective_time(k, al, bytes, g, mesh.topology()));
            }
        }
        out.push(PlannedStep {
            step,
            group_size: n,
            groups: groups.groups().len(),
            bytes,
            seconds,
        });
    }
    Ok(Plan {
        from: from.clone(),
        to: to.clone(),
        shape: shape.to_vec(),
        elem_bytes: eb,
        steps: out,
    })
}

/// Product of the dims other than `dim`.
fn rest(shape: &[usize], dim: usize) -> usize {
    shape
        .iter()
        .enumerate()
        .filter(|(d, _)| *d != dim)
        .map(|(_, &s)| s)
        .product()
}
