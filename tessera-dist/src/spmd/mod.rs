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
//! Collectives run only between launches (before: the arguments; after: the result); a kernel
//! whose reduction or normalization runs over a split axis has that axis gathered first.
//! Which argument's split wins where two disagree is chosen by the plans' modelled cost.

mod erased;
mod propagate;
mod rules;

pub use erased::{AnyTensor, Erase};

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
}

impl LaunchPlan {
    /// Predicted seconds of every collective of the launch (α-β-γ model).
    pub fn seconds(&self) -> f64 {
        self.args.iter().map(|(_, p)| p.seconds()).sum::<f64>()
            + self.out_plan.as_ref().map_or(0.0, Plan::seconds)
    }

    /// The collectives the launch runs.
    pub fn counts(&self) -> CollectiveCounts {
        let mut c = CollectiveCounts::default();
        for p in self.args.iter().map(|(_, p)| p).chain(&self.out_plan) {
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
        writeln!(
            f,
            "  local kernel on every device → {:?} {} {}",
            self.out_shape, self.out_dtype, self.output
        )?;
        if let Some(p) = &self.out_plan {
            writeln!(f, "  output: {}", p.to_string().replace('\n', "\n    "))?;
        }
        write!(f, "  total {:.2} µs of collectives", self.seconds() * 1e6)
    }
}

impl Spmd {
    /// Asks for the result in `spec` (else the propagated spec).
    pub fn to(mut self, spec: ShardSpec) -> Spmd {
        self.to = Some(spec);
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
        let mut best: Option<LaunchPlan> = None;
        // Each argument in turn has the first claim on the classes it splits.
        for first in 0..n.max(1) {
            let priority: Vec<usize> = (0..n).map(|i| (first + i) % n).collect();
            let p = propagate::propagate(g, name, mesh, &shapes, &specs, &priority)?;
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
            let lp = LaunchPlan {
                kernel: name.into(),
                args: arg_plans,
                output: p.output,
                out_shape: p.out_shape,
                out_dtype,
                out_plan,
            };
            if best.as_ref().is_none_or(|b| lp.seconds() < b.seconds()) {
                best = Some(lp);
            }
        }
        Ok(best.expect("at least one candidate"))
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
        let refs: Vec<TensorRef<'_>> = moved.iter().map(AnyTensor::arg).collect();
        let out = AnyTensor::launch(def, &refs, lp.out_dtype)?;
        match &lp.out_plan {
            Some(p) => out.redistribute(ctx, p),
            None => Ok(out),
        }
    }
}
