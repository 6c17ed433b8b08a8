//! SPMD launch: one `#[tessera::kernel]` run over a mesh on [`DistTensor`] arguments.
//!
//! [`spmd`]`(&kernel::KERNEL).run::<Out>(&[&x, &w, …])` propagates the arguments' specs through
//! the kernel's Graph IR (`propagate.rs`, with the per-op rules of `rules.rs`), plans the
//! redistribution each argument needs (the cheapest plan, [`crate::plan_redistribute`]), and
//! then on every device concurrently (one thread per device of the local mesh, or one MPI rank
//! per process through [`Spmd::run_rank`]) redistributes its shards, runs the unchanged kernel
//! on them on its own device, and redistributes the result to the spec asked for with
//! [`Spmd::to`] (else it keeps the propagated spec, partial sums included).
//!
//! A reduction, softmax, layernorm or rmsnorm over a split axis runs one of two ways
//! ([`Statistics`]): the axis is gathered before the launch, or the launch is cut at that op
//! into stages ([`StatsPath`]: each device computes partial statistics of its shard, the
//! planner's plans combine them, each device normalises its shard, and the result keeps the
//! input's split). [`Statistics::Auto`] takes the cheaper under the α-β-γ model (collectives
//! plus the bytes the statistics ops read, [`LaunchPlan::modelled_seconds`]); the printed plan
//! shows both costs. Which argument's split wins where two disagree is chosen the same way.
//! Otherwise collectives run only before (the arguments) and after (the result) the launch.

mod erased;
mod propagate;
mod rules;
mod stats;

pub use erased::{AnyTensor, Erase};
pub use stats::{LocalKernel, Stage, StatsPath};

use propagate::Statistic;

use crate::DistError;
use crate::{
    CollectiveCounts, DistTensor, LocalWorld, Mesh, Plan, RankContext, RankShard, Result,
    ShardSpec, plan_redistribute,
};
use std::fmt;
use tessera::{DType, KernelDef, KernelFamily, TensorRef};

/// A kernel argument spread over a mesh: a [`DistTensor`] (every shard in this process) or a
/// [`RankShard`] (this rank's shard, under MPI or NCCL).
pub trait SpmdArg: Sync {
    /// The spec.
    fn spec(&self) -> &ShardSpec;
    /// The global shape.
    fn shape(&self) -> &[usize];
    /// The element type.
    fn dtype(&self) -> DType;
    /// The shard of `rank`, type-erased.
    fn local_any(&self, rank: usize) -> AnyTensor;
    /// The mesh, where the argument knows it.
    fn mesh(&self) -> Option<&Mesh>;
}

impl<T: Erase> SpmdArg for DistTensor<T> {
    fn spec(&self) -> &ShardSpec {
        DistTensor::spec(self)
    }
    fn shape(&self) -> &[usize] {
        DistTensor::shape(self)
    }
    fn dtype(&self) -> DType {
        T::DTYPE
    }
    fn local_any(&self, rank: usize) -> AnyTensor {
        T::wrap(self.shard(rank).clone())
    }
    fn mesh(&self) -> Option<&Mesh> {
        Some(DistTensor::mesh(self))
    }
}

impl<T: Erase> SpmdArg for RankShard<T> {
    fn spec(&self) -> &ShardSpec {
        RankShard::spec(self)
    }
    fn shape(&self) -> &[usize] {
        RankShard::shape(self)
    }
    fn dtype(&self) -> DType {
        T::DTYPE
    }
    fn local_any(&self, _rank: usize) -> AnyTensor {
        T::wrap(self.local().clone())
    }
    fn mesh(&self) -> Option<&Mesh> {
        None
    }
}

/// An SPMD launch of one kernel; see the module docs.
///
/// ```
/// use tessera::Tensor;
/// use tessera_dist::{DistTensor, Mesh, Replicate, Shard, ShardSpec, spmd};
///
/// #[tessera::kernel]
/// fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
///     x.matmul(w)
/// }
///
/// let mesh = Mesh::local([("dp", 2), ("tp", 2)])?;
/// let x = Tensor::from_vec((0..24).map(|i| (i % 5) as f32).collect(), &[4, 6])?;
/// let w = Tensor::from_vec((0..18).map(|i| (i % 3) as f32 - 1.0).collect(), &[6, 3])?;
/// // rows of x over dp, the contraction over tp: the result is a partial sum over tp.
/// let xd = DistTensor::distribute(&x, ShardSpec::new([Shard(["dp"]), Shard(["tp"])]), &mesh)?;
/// let wd = DistTensor::distribute(&w, ShardSpec::new([Shard(["tp"])]), &mesh)?;
/// let launch = spmd(&mm::KERNEL).to(ShardSpec::new([Shard(["dp"]), Shard(["tp"])]));
/// println!("{}", launch.plan(&[&xd, &wd])?);
/// let y = launch.run::<f32>(&[&xd, &wd])?;
/// assert_eq!(y.gather()?, mm(&x, &w)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Spmd {
    kernel: SpmdKernel,
    to: Option<ShardSpec>,
    statistics: Statistics,
    microbatches: usize,
    overlap: bool,
}

/// How a reduction, softmax, layernorm or rmsnorm over a split axis runs (see [`StatsPath`]).
///
/// ```
/// use tessera::Tensor;
/// use tessera_dist::{CollectiveKind, DistTensor, Mesh, Shard, ShardSpec, Statistics, spmd};
///
/// #[tessera::kernel]
/// fn sm(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
///     softmax(x)
/// }
///
/// let mesh = Mesh::local([("tp", 2)])?;
/// let x = Tensor::<f32>::randn(&[4, 6], 1);
/// let split = ShardSpec::new([tessera_dist::Replicate, Shard(["tp"])]);
/// let xd = DistTensor::distribute(&x, split.clone(), &mesh)?;
/// let launch = spmd(&sm::KERNEL).statistics(Statistics::Partial);
/// let plan = launch.plan(&[&xd])?;
/// println!("{plan}"); // both costs, the stages and their all-reduces
/// assert_eq!(plan.counts().get(CollectiveKind::AllReduce), 2); // row max, then row Σ exp
/// let y = launch.run::<f32>(&[&xd])?;
/// assert_eq!(y.spec(), &split); // the columns stay split
/// let (got, want) = (y.gather()?.to_vec()?, sm(&x)?.to_vec()?);
/// assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Statistics {
    /// The cheaper of the two under the α-β-γ model ([`LaunchPlan::modelled_seconds`]).
    #[default]
    Auto,
    /// Partial statistics combined by collectives; the result keeps the input's split. An
    /// error where no statistics op has a split axis it applies to.
    Partial,
    /// The split axis is gathered before the launch.
    GatherFirst,
}

impl fmt::Display for Statistics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Statistics::Auto => "auto",
            Statistics::Partial => "partial statistics",
            Statistics::GatherFirst => "gather first",
        })
    }
}

/// The two ways a launch's statistics could run, with their modelled seconds (collectives + γ).
#[derive(Clone, Debug, PartialEq)]
pub struct StatsChoice {
    /// The cheapest partial-statistics launch.
    pub partial_seconds: f64,
    /// The cheapest launch that gathers (or, for `reduce.sum`/`reduce.max` at the end of a
    /// kernel, returns a partial result as the table says), if one was considered.
    pub gather_first_seconds: Option<f64>,
    /// What was asked.
    pub asked: Statistics,
}

/// What [`spmd`] launches: a kernel's `name::KERNEL` — a [`KernelDef`], or for a generic
/// kernel a [`KernelFamily`], whose instantiation is picked by the arguments' element types.
///
/// ```
/// use tessera::Tensor;
/// use tessera_dist::{DistTensor, Mesh, Replicate, Shard, ShardSpec, spmd};
///
/// #[tessera::kernel]
/// fn mm<T: Float>(x: Tensor<T, (M, K)>, w: Tensor<T, (K, N)>) -> Tensor<T, (M, N)> {
///     x.matmul(w).cast::<T>()
/// }
///
/// let mesh = Mesh::local([("tp", 2)])?;
/// let x = Tensor::from_vec((0..12).map(|i| (i % 5) as f32).collect(), &[3, 4])?;
/// let w = Tensor::from_vec((0..8).map(|i| (i % 3) as f32 - 1.0).collect(), &[4, 2])?;
/// let xd = DistTensor::distribute(&x, ShardSpec::new([Replicate, Shard(["tp"])]), &mesh)?;
/// let wd = DistTensor::distribute(&w, ShardSpec::new([Shard(["tp"])]), &mesh)?;
/// // the f32 instantiation of the generic kernel, picked from the arguments
/// let y = spmd(&mm::KERNEL).to(ShardSpec::replicated()).run::<f32>(&[&xd, &wd])?;
/// assert_eq!(y.gather()?, mm(&x, &w)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy)]
pub enum SpmdKernel {
    /// A non-generic kernel.
    Def(&'static KernelDef),
    /// A generic kernel's instantiations.
    Family(&'static KernelFamily),
}

impl From<&'static KernelDef> for SpmdKernel {
    fn from(d: &'static KernelDef) -> Self {
        SpmdKernel::Def(d)
    }
}

impl From<&'static KernelFamily> for SpmdKernel {
    fn from(f: &'static KernelFamily) -> Self {
        SpmdKernel::Family(f)
    }
}

impl SpmdKernel {
    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        match self {
            SpmdKernel::Def(d) => d.name(),
            SpmdKernel::Family(f) => f.name(),
        }
    }

    /// The definition that runs on arguments of these element types.
    pub fn resolve(&self, dtypes: &[DType]) -> Result<&'static KernelDef> {
        match self {
            SpmdKernel::Def(d) => Ok(d),
            SpmdKernel::Family(f) => f.for_params(dtypes).map_err(|e| DistError::Launch {
                kernel: f.name().into(),
                message: e.to_string(),
            }),
        }
    }
}

/// Starts an SPMD launch of `kernel` (a kernel's `name::KERNEL`, generic or not).
pub fn spmd(kernel: impl Into<SpmdKernel>) -> Spmd {
    Spmd {
        kernel: kernel.into(),
        to: None,
        statistics: Statistics::Auto,
        microbatches: 1,
        overlap: true,
    }
}

/// What an SPMD launch will do: each argument's redistribution, the spec the kernel's output has
/// on the mesh, and the output's redistribution to the spec asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// The kernel.
    pub kernel: String,
    /// Per argument (signature order): its name and its redistribution before the launch.
    pub args: Vec<(String, Plan)>,
    /// The output's spec as the local kernels leave it (propagated).
    pub output: ShardSpec,
    /// The output's global shape.
    pub out_shape: Vec<usize>,
    /// The output's element type.
    pub out_dtype: DType,
    /// The output's redistribution to the spec asked for, if one was.
    pub out_plan: Option<Plan>,
    /// The partial-statistics stages that replace the single kernel launch, if chosen.
    pub stats: Option<StatsPath>,
    /// Modelled seconds the statistics ops spend reading their operands (the γ term).
    pub compute_seconds: f64,
    /// The two ways of running a statistics op over a split axis, where both were possible.
    pub choice: Option<StatsChoice>,
    /// The launch in microbatches, each piece's output redistribution started as soon as its
    /// kernel finishes ([`Spmd::microbatches`]); replaces `out_plan` when running.
    pub pieces: Option<Microbatches>,
}

/// A launch run in pieces along the output's leading dim: every device runs the kernel on rows
/// `rows[j]` of its shards, starts piece `j`'s output redistribution without waiting (the
/// collectives run on the group's async lane while pieces `j + 1 …` compute), and waits on the
/// pieces only to assemble its result. See [`Spmd::microbatches`].
#[derive(Clone, Debug, PartialEq)]
pub struct Microbatches {
    /// Per argument: the dim cut into pieces (`None`: every piece reads it whole).
    pub arg_dims: Vec<Option<usize>>,
    /// Per piece: its rows of each device's local shard (leading dim of the output).
    pub rows: Vec<std::ops::Range<usize>>,
    /// Per piece: its output's redistribution (empty when no output spec was asked for).
    pub plans: Vec<Plan>,
    /// `true`: each redistribution is waited on only at assembly (overlapped); `false`: right
    /// after it starts (serialised, for comparison).
    pub overlap: bool,
}

impl LaunchPlan {
    /// Predicted seconds of every collective of the launch (α-β-γ model).
    pub fn seconds(&self) -> f64 {
        self.plans().map(Plan::seconds).sum()
    }

    /// [`LaunchPlan::seconds`] plus the γ term of the statistics ops: what the planner
    /// minimises.
    pub fn modelled_seconds(&self) -> f64 {
        self.seconds() + self.compute_seconds
    }

    /// Every redistribution plan the launch runs: the arguments', the statistics' and the
    /// output's.
    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.args
            .iter()
            .map(|(_, p)| p)
            .chain(self.stats.iter().flat_map(StatsPath::plans))
            .chain(match &self.pieces {
                Some(m) => m.plans.iter().chain(None),
                None => [].iter().chain(self.out_plan.as_ref()),
            })
    }

    /// The collectives the launch runs.
    pub fn counts(&self) -> CollectiveCounts {
        let mut c = CollectiveCounts::default();
        for p in self.plans() {
            let pc = p.counts();
            for k in crate::CollectiveKind::ALL {
                c.add(k, pc.get(k));
            }
        }
        c
    }

    /// The spec of the launch's result.
    pub fn result_spec(&self) -> &ShardSpec {
        self.out_plan.as_ref().map_or(&self.output, |p| &p.to)
    }
}

impl fmt::Display for LaunchPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "spmd launch `{}`", self.kernel)?;
        for (name, p) in &self.args {
            if p.steps.is_empty() {
                writeln!(f, "  {name}: {} as given", p.from)?;
            } else {
                writeln!(f, "  {name}: {}", p.to_string().replace('\n', "\n    "))?;
            }
        }
        match &self.stats {
            Some(st) => writeln!(
                f,
                "  {}\n  → {:?} {} {}",
                st.to_string().replace('\n', "\n  "),
                self.out_shape,
                self.out_dtype,
                self.output
            )?,
            None => writeln!(
                f,
                "  local kernel on every device → {:?} {} {}",
                self.out_shape, self.out_dtype, self.output
            )?,
        }
        if let Some(c) = &self.choice {
            let gf = c
                .gather_first_seconds
                .map_or("—".to_string(), |s| format!("{:.2} µs", s * 1e6));
            writeln!(
                f,
                "  statistics ({}): partial {:.2} µs, gather first {gf} → {}",
                c.asked,
                c.partial_seconds * 1e6,
                if self.stats.is_some() {
                    "partial"
                } else {
                    "gather first"
                }
            )?;
        }
        match (&self.pieces, &self.out_plan) {
            (Some(m), _) => {
                let rows: Vec<String> = m.rows.iter().map(|r| format!("{r:?}")).collect();
                writeln!(
                    f,
                    "  in {} microbatches (rows {} of each shard), each output redistribution {}",
                    m.rows.len(),
                    rows.join(", "),
                    if m.overlap {
                        "started when its kernel finishes, waited on at assembly (overlapped)"
                    } else {
                        "waited on as soon as it starts (serialised)"
                    }
                )?;
                for (j, p) in m.plans.iter().enumerate() {
                    writeln!(f, "  piece {j}: {}", p.to_string().replace('\n', "\n    "))?;
                }
            }
            (None, Some(p)) => {
                writeln!(f, "  output: {}", p.to_string().replace('\n', "\n    "))?;
            }
            (None, None) => {}
        }
        write!(f, "  total {:.2} µs of collectives", self.seconds() * 1e6)?;
        if self.compute_seconds > 0.0 {
            write!(
                f,
                ", {:.2} µs modelled with the statistics' compute",
                self.modelled_seconds() * 1e6
            )?;
        }
        Ok(())
    }
}

impl Spmd {
    /// Asks for the result in `spec` (else the propagated spec).
    pub fn to(mut self, spec: ShardSpec) -> Spmd {
        self.to = Some(spec);
        self
    }

    /// Runs the launch in `k` pieces along the output's leading dim (a parallel loop index:
    /// every argument that iterates over it is cut the same way): each piece's output
    /// redistribution to the spec asked for with [`Spmd::to`] starts, non-blocking, as soon as
    /// the piece's kernel finishes, and is waited on only when the result is assembled, so the
    /// collectives overlap the later pieces' compute. An error where the leading dim is reduced
    /// or normalized, cut unevenly over the mesh, or moved by the redistribution, or where a
    /// piece's plan spans several groups; not combined with [`Statistics::Partial`].
    ///
    /// ```
    /// use tessera::Tensor;
    /// use tessera_dist::{DistTensor, Mesh, Replicate, Shard, ShardSpec, spmd};
    ///
    /// #[tessera::kernel]
    /// fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    ///     x.matmul(w)
    /// }
    ///
    /// let mesh = Mesh::local([("tp", 2)])?;
    /// let x = Tensor::from_vec((0..48).map(|i| (i % 7) as f32 - 3.0).collect(), &[8, 6])?;
    /// let w = Tensor::from_vec((0..18).map(|i| (i % 3) as f32 - 1.0).collect(), &[6, 3])?;
    /// // row-parallel: the contraction over tp, a partial sum all-reduced per microbatch
    /// let xd = DistTensor::distribute(&x, ShardSpec::new([Replicate, Shard(["tp"])]), &mesh)?;
    /// let wd = DistTensor::distribute(&w, ShardSpec::new([Shard(["tp"])]), &mesh)?;
    /// let launch = spmd(&mm::KERNEL).to(ShardSpec::replicated()).microbatches(4);
    /// let plan = launch.plan(&[&xd, &wd])?;
    /// assert_eq!(plan.pieces.as_ref().unwrap().plans.len(), 4);
    /// println!("{plan}");
    /// assert_eq!(launch.run::<f32>(&[&xd, &wd])?.gather()?, mm(&x, &w)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn microbatches(mut self, k: usize) -> Spmd {
        self.microbatches = k.max(1);
        self
    }

    /// With [`Spmd::microbatches`]: `false` waits on each piece's redistribution right after
    /// starting it (the same operations, serialised: the baseline overlap is measured against).
    pub fn overlap(mut self, on: bool) -> Spmd {
        self.overlap = on;
        self
    }

    /// How statistics over a split axis run ([`Statistics::Auto`] unless asked).
    pub fn statistics(mut self, how: Statistics) -> Spmd {
        self.statistics = how;
        self
    }

    /// The launch plan on `mesh` for these arguments, without running it.
    pub fn plan_on(&self, mesh: &Mesh, args: &[&dyn SpmdArg]) -> Result<LaunchPlan> {
        let def = self.def_for(args)?;
        let name = def.name();
        let g = &def.compiled()?.graph;
        if args.len() != g.params.len() {
            return Err(DistError::Launch {
                kernel: name.into(),
                message: format!(
                    "{} arguments, the kernel takes {}",
                    args.len(),
                    g.params.len()
                ),
            });
        }
        for (a, p) in args.iter().zip(&g.params) {
            let want = g.ty(*p).dtype;
            if a.dtype() != want {
                return Err(DistError::Launch {
                    kernel: name.into(),
                    message: format!(
                        "argument `{}` is {}, the kernel takes {want}",
                        g.value_name(*p),
                        a.dtype()
                    ),
                });
            }
        }
        let arg_shapes: Vec<&[usize]> = args.iter().map(|a| a.shape()).collect();
        let shapes = propagate::global_shapes(g, name, &arg_shapes)?;
        let specs: Vec<&ShardSpec> = args.iter().map(|a| a.spec()).collect();
        let out_dtype = g.ty(g.output).dtype;
        let n = args.len();
        let stat_nodes = propagate::statistics_nodes(g, name)?;
        let pieces = self.microbatches > 1;
        if pieces && self.statistics == Statistics::Partial {
            return Err(DistError::Launch {
                kernel: name.into(),
                message: "microbatches with partial statistics: not supported".into(),
            });
        }
        let modes: Vec<Statistic> = match self.statistics {
            Statistics::GatherFirst => vec![Statistic::GatherFirst],
            Statistics::Auto if pieces => vec![Statistic::Tabled, Statistic::GatherFirst],
            Statistics::Partial => stat_nodes.iter().map(|&v| Statistic::Partial(v)).collect(),
            Statistics::Auto => [Statistic::Tabled, Statistic::GatherFirst]
                .into_iter()
                .chain(stat_nodes.iter().map(|&v| Statistic::Partial(v)))
                .collect(),
        };
        let mut best: Option<(LaunchPlan, propagate::Propagated)> = None;
        let (mut best_partial, mut best_gather) = (None::<f64>, None::<f64>);
        for mode in modes {
            // Each argument in turn has the first claim on the classes it splits.
            for first in 0..n.max(1) {
                let priority: Vec<usize> = (0..n).map(|i| (first + i) % n).collect();
                let Some(p) =
                    propagate::propagate(g, name, mesh, &shapes, &specs, &priority, mode)?
                else {
                    continue;
                };
                let stats = match mode {
                    Statistic::Partial(v) => match stats::build(g, name, mesh, &shapes, &p, v)? {
                        Some(st) => Some(st),
                        None => continue,
                    },
                    _ => None,
                };
                let mut arg_plans = Vec::with_capacity(n);
                for (i, a) in args.iter().enumerate() {
                    let plan = plan_redistribute(
                        mesh,
                        a.shape(),
                        a.dtype().size_bytes(),
                        a.spec(),
                        &p.args[i],
                    )?;
                    arg_plans.push((g.value_name(g.params[i]), plan));
                }
                let out_plan = match &self.to {
                    Some(to) => Some(plan_redistribute(
                        mesh,
                        &p.out_shape,
                        out_dtype.size_bytes(),
                        &p.output,
                        to,
                    )?),
                    None => None,
                };
                let compute_seconds = stats::compute_seconds(g, name, mesh, &shapes, &p)?;
                let lp = LaunchPlan {
                    kernel: name.into(),
                    args: arg_plans,
                    output: p.output.clone(),
                    out_shape: p.out_shape.clone(),
                    out_dtype,
                    out_plan,
                    stats,
                    compute_seconds,
                    choice: None,
                    pieces: None,
                };
                let t = lp.modelled_seconds();
                let family = if lp.stats.is_some() {
                    &mut best_partial
                } else {
                    &mut best_gather
                };
                if family.is_none_or(|b| t < b) {
                    *family = Some(t);
                }
                if best.as_ref().is_none_or(|(b, _)| t < b.modelled_seconds()) {
                    best = Some((lp, p));
                }
            }
        }
        let (mut best, prop) = best.ok_or_else(|| DistError::Launch {
            kernel: name.into(),
            message: format!(
                "{} asked, but no reduction, softmax, layernorm or rmsnorm of the kernel has a \
                 split axis it applies to (an f32 operand with no empty shard)",
                self.statistics
            ),
        })?;
        if let Some(partial_seconds) = best_partial {
            best.choice = Some(StatsChoice {
                partial_seconds,
                gather_first_seconds: best_gather,
                asked: self.statistics,
            });
        }
        if pieces {
            best.pieces = Some(self.cut(g, mesh, &best, &prop)?);
        }
        Ok(best)
    }

    /// The microbatches of `lp` (see [`Spmd::microbatches`]).
    fn cut(
        &self,
        g: &tessera::ir::graph::Graph,
        mesh: &Mesh,
        lp: &LaunchPlan,
        p: &propagate::Propagated,
    ) -> Result<Microbatches> {
        let fail = |message: String| DistError::Launch {
            kernel: lp.kernel.clone(),
            message: format!("{} microbatches: {message}", self.microbatches),
        };
        let out = g.output.index();
        let Some(&c) = p.classes[out].first() else {
            return Err(fail("the output has no leading dim".into()));
        };
        if p.reduced.contains(&c) {
            return Err(fail(
                "the output's leading dim is reduced or normalized".into(),
            ));
        }
        let mut arg_dims = Vec::with_capacity(g.params.len());
        for prm in &g.params {
            let dims: Vec<usize> = (0..p.classes[prm.index()].len())
                .filter(|&d| p.classes[prm.index()][d] == c)
                .collect();
            if dims.len() > 1 {
                return Err(fail(format!(
                    "argument `{}` iterates over the leading dim twice",
                    g.value_name(*prm)
                )));
            }
            arg_dims.push(dims.first().copied());
        }
        let axes = lp.output.dim_axes(0);
        let (_, parts) = mesh.index_along(0, axes)?;
        if !lp.out_shape[0].is_multiple_of(parts) {
            return Err(fail(format!(
                "{} rows do not split evenly over [{}]",
                lp.out_shape[0],
                axes.join(",")
            )));
        }
        if let Some(op) = &lp.out_plan
            && op.to.dim_axes(0) != axes
        {
            return Err(fail(format!(
                "the output's leading dim moves ({} → {})",
                op.from, op.to
            )));
        }
        let local = lp.out_shape[0] / parts;
        let rows: Vec<_> = (0..self.microbatches)
            .map(|j| crate::chunk_range(local, self.microbatches, j))
            .filter(|r| !r.is_empty())
            .collect();
        let mut plans = Vec::new();
        if let Some(to) = &self.to {
            for r in &rows {
                let mut shape = lp.out_shape.clone();
                shape[0] = r.len() * parts;
                let plan =
                    plan_redistribute(mesh, &shape, lp.out_dtype.size_bytes(), &lp.output, to)?;
                if crate::exec::single_group(&plan).is_none() {
                    return Err(fail(format!(
                        "a piece's redistribution spans several groups:\n{plan}"
                    )));
                }
                plans.push(plan);
            }
        }
        Ok(Microbatches {
            arg_dims,
            rows,
            plans,
            overlap: self.overlap,
        })
    }

    /// The definition these arguments launch (a generic kernel's instantiation by their types).
    fn def_for(&self, args: &[&dyn SpmdArg]) -> Result<&'static KernelDef> {
        let dtypes: Vec<DType> = args.iter().map(|a| a.dtype()).collect();
        self.kernel.resolve(&dtypes)
    }

    /// The launch plan for these [`DistTensor`]-like arguments (their mesh).
    pub fn plan(&self, args: &[&dyn SpmdArg]) -> Result<LaunchPlan> {
        self.plan_on(self.mesh_of(args)?, args)
    }

    fn mesh_of<'a>(&self, args: &[&'a dyn SpmdArg]) -> Result<&'a Mesh> {
        let mut mesh: Option<&Mesh> = None;
        for a in args {
            if let Some(m) = a.mesh() {
                match mesh {
                    Some(prev) if prev != m => {
                        return Err(DistError::Launch {
                            kernel: self.kernel.name().into(),
                            message: "arguments live on different meshes".into(),
                        });
                    }
                    _ => mesh = Some(m),
                }
            }
        }
        mesh.ok_or_else(|| DistError::Launch {
            kernel: self.kernel.name().into(),
            message: "no argument knows its mesh (use run_rank under MPI/NCCL)".into(),
        })
    }

    /// Runs the launch on the local mesh: one thread per device, concurrently.
    pub fn run<T: Erase>(&self, args: &[&dyn SpmdArg]) -> Result<DistTensor<T>> {
        Ok(self.run_traced(args)?.0)
    }

    /// [`Spmd::run`], also returning the plan and the collectives observed.
    pub fn run_traced<T: Erase>(
        &self,
        args: &[&dyn SpmdArg],
    ) -> Result<(DistTensor<T>, LaunchPlan, CollectiveCounts)> {
        let mesh = self.mesh_of(args)?;
        let lp = self.plan_on(mesh, args)?;
        self.check_out::<T>(&lp)?;
        let def = self.def_for(args)?;
        let (shards, seen) = LocalWorld::run(mesh, |ctx| {
            let locals = args.iter().map(|a| a.local_any(ctx.rank())).collect();
            Self::execute(def, ctx, &lp, locals)?.typed::<T>("spmd output")
        })?;
        let out = DistTensor::from_shards(shards, lp.result_spec().clone(), mesh, &lp.out_shape)?;
        Ok((out, lp, seen))
    }

    /// Runs the launch as this rank of an SPMD program (MPI or NCCL: every rank calls it with
    /// its own shards); returns this rank's shard of the result.
    pub fn run_rank<T: Erase, X: RankContext>(
        &self,
        ctx: &X,
        args: &[&dyn SpmdArg],
    ) -> Result<RankShard<T>> {
        let lp = self.plan_on(ctx.mesh(), args)?;
        self.check_out::<T>(&lp)?;
        let locals = args.iter().map(|a| a.local_any(ctx.rank())).collect();
        let local =
            Self::execute(self.def_for(args)?, ctx, &lp, locals)?.typed::<T>("spmd output")?;
        Ok(RankShard::from_parts(
            lp.result_spec().clone(),
            lp.out_shape.clone(),
            local,
        ))
    }

    fn check_out<T: Erase>(&self, lp: &LaunchPlan) -> Result<()> {
        if lp.out_dtype != T::DTYPE {
            return Err(DistError::Launch {
                kernel: self.kernel.name().into(),
                message: format!("returns {}, asked for {}", lp.out_dtype, T::DTYPE),
            });
        }
        Ok(())
    }

    /// One rank's part: redistribute the arguments, run the kernel on this rank's device,
    /// redistribute the result.
    fn execute<X: RankContext>(
        def: &'static KernelDef,
        ctx: &X,
        lp: &LaunchPlan,
        locals: Vec<AnyTensor>,
    ) -> Result<AnyTensor> {
        let device = ctx.mesh().devices()[ctx.rank()].clone();
        let moved = locals
            .into_iter()
            .zip(&lp.args)
            .map(|(a, (_, plan))| a.redistribute(ctx, plan)?.on(&device))
            .collect::<Result<Vec<_>>>()?;
        if let Some(m) = &lp.pieces {
            return Self::execute_pieces(def, ctx, lp, m, moved, &device);
        }
        let out = match &lp.stats {
            Some(st) => st.run(ctx, moved)?,
            None => {
                let refs: Vec<TensorRef<'_>> = moved.iter().map(AnyTensor::arg).collect();
                AnyTensor::launch(def, &refs, lp.out_dtype)?
            }
        };
        match &lp.out_plan {
            Some(p) => out.redistribute(ctx, p),
            None => Ok(out),
        }
    }

    /// [`Spmd::execute`] in microbatches: piece `j`'s redistribution is started as soon as its
    /// kernel finishes and waited on only at assembly (or at once, serialised).
    fn execute_pieces<X: RankContext>(
        def: &'static KernelDef,
        ctx: &X,
        lp: &LaunchPlan,
        m: &Microbatches,
        moved: Vec<AnyTensor>,
        device: &tessera::Device,
    ) -> Result<AnyTensor> {
        let mut started = Vec::with_capacity(m.rows.len());
        for (j, rows) in m.rows.iter().enumerate() {
            let args = moved
                .iter()
                .zip(&m.arg_dims)
                .map(|(a, d)| match d {
                    Some(d) => a.slice_dim(*d, rows.clone())?.on(device),
                    None => Ok(a.clone()),
                })
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<TensorRef<'_>> = args.iter().map(AnyTensor::arg).collect();
            let out = AnyTensor::launch(def, &refs, lp.out_dtype)?;
            let mut pending = match m.plans.get(j) {
                Some(plan) => out.start_redistribute(ctx, plan)?,
                None => crate::Pending::ready(Ok(out)),
            };
            if !m.overlap {
                pending = crate::Pending::ready(pending.wait());
            }
            started.push(pending);
        }
        let pieces = started
            .into_iter()
            .map(crate::Pending::wait)
            .collect::<Result<Vec<_>>>()?;
        AnyTensor::concat_rows(pieces)
    }
}
