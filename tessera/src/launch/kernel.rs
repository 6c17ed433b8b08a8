//! `#[kernel]` definitions: the CPU runs the compiled plan's Tile IR; a PTX device runs the
//! PTX the macro embedded, launched from the embedded manifests without the compiler.

use super::gpu::{self, EmbeddedPtx};
use super::host_block::HostBlock;
use super::jit::{self, JitKey};
use super::precompiled::{self, PrecompiledPtx};
use super::{
    ArgCopy, Syms, bind_symbols, buffer, eval_shape, host_input, launch_device, refine_key,
};
use crate::autotune;
use crate::backend::cpu;
use crate::backend::gpu::DeviceArg;
use crate::tensor::{Data, DeviceBuffer, Element, Tensor, TensorRef, size};
use crate::{Device, Error, Result};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ir::DType;
use tessera_ir::graph::{self, Graph, Op};
use tessera_ir::lower::Binding;
use tessera_ir::manifest::KernelManifest;
use tessera_ir::pipeline::{CompileOptions, Compiled, compile};
use tessera_ir::scalar::ScalarRule;
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch, PtxKernel};
use tessera_ir::tile;

/// The static definition `#[tessera::kernel]` emits: the Graph IR text, and per fused kernel
/// (default schedules) its Tile IR text, its launch manifest and its PTX for every arch, all
/// produced and checked at build time.
pub struct KernelDef {
    name: &'static str,
    graph: &'static str,
    tiles: &'static [&'static str],
    /// One [`KernelManifest`] text per fused kernel; empty when built without them.
    manifests: &'static [&'static str],
    /// PTX of each kernel's default schedule for every arch (kernel-major, `Arch::ALL` order);
    /// empty when built without it.
    ptx: &'static [EmbeddedPtx],
    /// A library's precompiled modules for other schedules (`precompiled = ...`).
    library: &'static [PrecompiledPtx],
    /// What launches on PTX devices need, from the embedded texts (no compiler).
    launchable: OnceLock<std::result::Result<Launchable, String>>,
    /// The compiled plans (CPU launches, JIT compiles); compiled on first use.
    ready: OnceLock<std::result::Result<Ready, String>>,
    /// The autotuner's fusion-depth decisions for this definition.
    fusion: autotune::FusionMemo,
    /// The precision mode the kernel was compiled under (`#[kernel(precision = ..)]`).
    precision: Option<tessera_ir::Precision>,
    /// `#[kernel(rewrites(..))]`: rules switched off (`false`) or forced (`true`).
    rewrites: &'static [(&'static str, bool)],
    /// `#[kernel(tile = (BM, BN, BK))]`: the pinned tile of matmul and convolution kernels.
    tile: Option<&'static [u32]>,
    /// The scalar parameters (`eps: f32`) by name, and the rule each value must meet.
    scalars: &'static [(&'static str, ScalarRule)],
}

/// The graph and the manifests of a plan launched on PTX devices, and what those launches
/// cache: the default plan (from the embedded texts), or a numerics scope's plan.
struct Launchable {
    graph: Graph,
    kernels: Vec<KernelManifest>,
    /// The scope's compiled plan (`None`: the default plan, with the embedded PTX).
    scope: Option<Arc<Plan>>,
    /// Embedded and library modules, parsed on first use.
    parsed: Mutex<HashMap<(usize, String, Arch), Arc<PtxKernel>>>,
    /// The autotuner's decisions on PTX devices.
    tuned_device: autotune::DeviceMemo,
}

/// A definition prepared for running on the CPU: the default (deepest) plan, the shallower
/// plans the fusion-depth search asked for, and the plans of numerics scopes
/// (`tessera::numerics`).
struct Ready {
    base: Arc<Plan>,
    shallow: Mutex<Vec<(usize, Arc<Plan>)>>,
    scoped: Mutex<Vec<Arc<Scoped>>>,
}

/// The plan of one numerics scope (policy and/or precision mode), and its device form.
struct Scoped {
    plan: Arc<Plan>,
    device: OnceLock<Launchable>,
}

/// One fusion plan, compiled.
struct Plan {
    compiled: Compiled,
    /// Per fused kernel: the CPU program, the parameter bindings and the schedule the
    /// program was lowered under (the CPU default, or the pinned tile).
    programs: Vec<(cpu::Program, Vec<Binding>, Schedule)>,
    /// The autotuner's decisions and tuned programs for this plan's kernels on the CPU.
    tuned: autotune::KernelMemo,
    /// Cache-key tag of the plan's kernels: empty for the default plan, `.f1` for depth 1 ….
    tag: String,
}

/// The outputs of a CPU plan's kernels, in kernel order: `(value, shape, memory, empty)`.
type Outputs = SmallVec<[(u32, Vec<usize>, HostBlock, bool); 4]>;

/// A launch's result: host memory (CPU), a device block, or the caller's tensor
/// ([`KernelDef::launch_into`] on the CPU: the result is already there).
enum Output {
    Host(Vec<usize>, HostBlock),
    Device(Vec<usize>, DeviceBuffer),
    Into,
}

/// The tensor [`KernelDef::launch_into`] writes into: its shape (checked against the
/// launch's result) and its elements' bytes when it is in host memory.
struct Dest<'o> {
    shape: &'o [usize],
    host: Option<&'o mut [u8]>,
}

impl KernelDef {
    /// A definition from texts embedded by the macro.
    pub const fn new(
        name: &'static str,
        graph: &'static str,
        tiles: &'static [&'static str],
    ) -> Self {
        KernelDef {
            name,
            graph,
            tiles,
            manifests: &[],
            ptx: &[],
            library: &[],
            launchable: OnceLock::new(),
            ready: OnceLock::new(),
            fusion: autotune::FusionMemo::new(),
            precision: None,
            rewrites: &[],
            tile: None,
            scalars: &[],
        }
    }

    /// Names the kernel's scalar parameters (`eps: f32` in a `#[kernel]` signature) and the
    /// rule each value must meet ([`ScalarRule`]). [`Self::launch`] then checks the rank-0
    /// tensor passed for each of them as the typed call checks its `f32`: a value the rule
    /// refuses is [`Error::ScalarArg`] naming the parameter.
    ///
    /// ```
    /// use tessera::Tensor;
    ///
    /// #[tessera::kernel]
    /// fn norm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, eps: f32) -> Tensor<f32, (R, C)> {
    ///     rmsnorm(x, g, eps)
    /// }
    /// let x = Tensor::<f32>::randn(&[2, 3], 1);
    /// let g = Tensor::<f32>::from_vec(vec![1.0; 3], &[3])?;
    /// let eps = Tensor::<f32>::from_vec(vec![-1.0], &[])?;
    /// let e = norm::KERNEL.launch::<f32>(&[x.arg(), g.arg(), eps.arg()]).unwrap_err();
    /// assert!(matches!(e, tessera::Error::ScalarArg { .. }), "{e}");
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub const fn with_scalars(mut self, scalars: &'static [(&'static str, ScalarRule)]) -> Self {
        self.scalars = scalars;
        self
    }

    /// Checks the value passed for each scalar parameter against its rule (a 4-byte download
    /// for a tensor on a device). Arguments of the wrong count, rank or dtype are left to the
    /// launch, which names them.
    fn check_scalars(&self, args: &[TensorRef<'_>]) -> Result<()> {
        if self.scalars.is_empty() {
            return Ok(());
        }
        let g = &self.launchable()?.graph;
        if args.len() != g.params.len() {
            return Ok(());
        }
        for (name, rule) in self.scalars {
            let Some(i) = g
                .params
                .iter()
                .position(|p| matches!(&g.node(*p).op, Op::Param { name: n, .. } if n == name))
            else {
                continue;
            };
            let a = &args[i];
            if a.dtype() != DType::F32 || !a.shape().is_empty() {
                continue;
            }
            let mut b = [0u8; 4];
            match a.data() {
                Data::Host(h) => b.copy_from_slice(&h[..4]),
                Data::Device(d) => d.download_range(0, &mut b)?,
            }
            rule.check(f32::from_le_bytes(b) as f64)
                .map_err(|message| Error::ScalarArg {
                    kernel: self.name.into(),
                    param: name.to_string(),
                    message,
                })?;
        }
        Ok(())
    }

    /// Pins the `(BM, BN, BK)` tile of the kernel's matmul and convolution kernels, as
    /// `#[kernel(tile = (128, 128, 64))]` says (seeds §7.2): they run under it on every
    /// backend, the autotuner leaves them alone, and [`last_launch`] reports it. An illegal
    /// tile, or one that fits none of the kernels, makes every launch an error naming it.
    ///
    /// [`last_launch`]: crate::last_launch
    pub const fn with_tile(mut self, tile: &'static [u32]) -> Self {
        self.tile = Some(tile);
        self
    }

    /// Switches rewrite rules off (`false`) or forces them (`true`), as the kernel's
    /// `#[kernel(rewrites(..))]` attribute says (see `tessera_ir::rewrite`).
    pub const fn with_rewrites(mut self, rewrites: &'static [(&'static str, bool)]) -> Self {
        self.rewrites = rewrites;
        self
    }

    /// The compile options of this definition at fusion depth `depth`.
    fn options(&self, depth: Option<usize>) -> CompileOptions {
        let mut opts = CompileOptions {
            fusion_depth: depth,
            tile: self.tile.map(<[u32]>::to_vec),
            ..CompileOptions::default()
        };
        for (name, on) in self.rewrites {
            let list = if *on {
                &mut opts.rewrites.forced
            } else {
                &mut opts.rewrites.disabled
            };
            list.push(name.to_string());
        }
        opts
    }

    /// Records that the kernel was compiled under precision mode `mode`: a
    /// `tessera::numerics::precision` scope asking for another mode is then an error.
    pub const fn with_precision(mut self, mode: tessera_ir::Precision) -> Self {
        self.precision = Some(mode);
        self
    }

    /// Attaches what the macro precompiled for each fused kernel's default schedule: its
    /// launch manifest ([`KernelManifest`] text) and its PTX per arch (kernel-major, in
    /// `tessera_ir::target::ptx::Arch::ALL` order). Launches on PTX devices then run without
    /// the compiler.
    pub const fn with_embedded(
        mut self,
        manifests: &'static [&'static str],
        ptx: &'static [EmbeddedPtx],
    ) -> Self {
        self.manifests = manifests;
        self.ptx = ptx;
        self
    }

    /// Attaches a library's table of build-time PTX for the schedules of its search space:
    /// a launch whose schedule is in it (an autotuned winner) loads it instead of compiling.
    pub const fn with_precompiled(mut self, table: &'static [PrecompiledPtx]) -> Self {
        self.library = table;
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The kernel's Graph IR text as written (before the algebraic rewrites), with its
    /// numerics policy and precision mode applied.
    pub fn graph_text(&self) -> &'static str {
        self.graph
    }

    /// The PTX module of fused kernel `i` (default schedule) for `arch`: what a GPU of that
    /// arch (or the simulator) runs — the embedded text when the macro embedded it.
    pub fn ptx(&self, i: usize, arch: Arch) -> Result<String> {
        let l = self.launchable()?;
        let m = l.kernels.get(i).ok_or_else(|| Error::Compile {
            kernel: self.name.into(),
            message: format!("no fused kernel #{i}"),
        })?;
        Ok(self.schedule_ptx(l, i, &m.schedule, arch)?.text.clone())
    }

    /// The compiled form (graph, fusion plan, kernels) of the default, deepest plan; compiles
    /// on first use.
    pub fn compiled(&self) -> Result<&Compiled> {
        Ok(&self.ready()?.base.compiled)
    }

    fn compile_err(&self, message: String) -> Error {
        Error::Compile {
            kernel: self.name.into(),
            message,
        }
    }

    fn launchable(&self) -> Result<&Launchable> {
        self.launchable
            .get_or_init(|| {
                let graph = graph::parse(self.graph).map_err(|e| format!("graph text: {e}"))?;
                // The manifests name values of the graph after the algebraic rewrites (pure
                // Graph IR rewriting: no compilation).
                let (graph, _) = tessera_ir::rewrite::rewrite(&graph, &self.options(None).rewrites)
                    .map_err(|e| format!("rewriting the graph: {e}"))?;
                let kernels = if self.manifests.is_empty() {
                    // Built without manifests: derive them from the compiled plan.
                    let c = &self
                        .ready
                        .get_or_init(|| self.prepare_ready())
                        .as_ref()
                        .map_err(|m| m.clone())?
                        .base
                        .compiled;
                    KernelManifest::all(c)
                } else {
                    self.manifests
                        .iter()
                        .map(|t| {
                            KernelManifest::parse(t, &graph)
                                .map_err(|e| format!("embedded manifest `{t}`: {e}"))
                        })
                        .collect::<std::result::Result<_, _>>()?
                };
                Ok(Launchable {
                    graph,
                    kernels,
                    scope: None,
                    parsed: Mutex::new(HashMap::new()),
                    tuned_device: autotune::DeviceMemo::new(),
                })
            })
            .as_ref()
            .map_err(|m| self.compile_err(m.clone()))
    }

    fn ready(&self) -> Result<&Ready> {
        self.ready
            .get_or_init(|| self.prepare_ready())
            .as_ref()
            .map_err(|m| self.compile_err(m.clone()))
    }

    fn prepare_ready(&self) -> std::result::Result<Ready, String> {
        Ok(Ready {
            base: Arc::new(self.prepare(None)?),
            shallow: Mutex::new(Vec::new()),
            scoped: Mutex::new(Vec::new()),
        })
    }

    /// The plan of fusion depth `depth` (`None`: the deepest, with the embedded texts).
    fn prepare(&self, depth: Option<usize>) -> std::result::Result<Plan, String> {
        let g = graph::parse(self.graph).map_err(|e| format!("graph text: {e}"))?;
        let tag = depth.map_or(String::new(), |d| format!(".f{d}"));
        self.prepare_graph(&g, depth, tag, depth.is_none())
    }

    /// The numerics scope of the launching thread (`tessera::numerics::policy` /
    /// `precision`) as a tag and the rewrites it asks for, or `None` when it changes nothing
    /// for this kernel. A scope the kernel cannot honour (its own mode differs) is an error
    /// naming both. Needs no compiler.
    #[allow(clippy::type_complexity)]
    fn scope(
        &self,
    ) -> Result<
        Option<(
            String,
            Option<tessera_ir::NumericsPolicy>,
            Option<tessera_ir::Precision>,
        )>,
    > {
        use tessera_ir::NumericsPolicy;
        let policy = crate::numerics::current_policy().filter(|p| *p != NumericsPolicy::Fast);
        let mode = match (crate::numerics::current_precision(), self.precision) {
            (Some(m), Some(own)) if m != own => {
                return Err(self.compile_err(format!(
                    "compiled under precision `{own}`; it cannot run under a `{m}` precision scope"
                )));
            }
            (Some(_), Some(_)) => None,
            (m, _) => m,
        };
        if policy.is_none() && mode.is_none() {
            return Ok(None);
        }
        let tag = format!(
            "{}{}",
            policy.map_or(String::new(), |p| format!(".{p}")),
            mode.map_or(String::new(), |m| format!(".precision-{m}"))
        );
        Ok(Some((tag, policy, mode)))
    }

    /// The plan of the launching thread's numerics scope (see [`Self::scope`]), compiled on
    /// first use, or `None` when the scope changes nothing for this kernel.
    fn scoped_plan(&self) -> Result<Option<Arc<Scoped>>> {
        let Some((tag, policy, mode)) = self.scope()? else {
            return Ok(None);
        };
        let ready = self.ready()?;
        let mut scoped = ready.scoped.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = scoped.iter().find(|s| s.plan.tag == tag) {
            return Ok(Some(s.clone()));
        }
        let fail = |m: String| self.compile_err(m);
        // The kernel's graph as written (before the rewrites): a rule whose legality depends
        // on the policy (flash_attention needs `fast`) decides again under the scope.
        let mut g = graph::parse(self.graph).map_err(|e| fail(format!("graph text: {e}")))?;
        if let Some(m) = mode {
            g = graph::with_precision(&g, m).map_err(fail)?;
        }
        if let Some(p) = policy {
            g = graph::with_policy(&g, p).map_err(fail)?;
        }
        let plan = Arc::new(self.prepare_graph(&g, None, tag, false).map_err(fail)?);
        let s = Arc::new(Scoped {
            plan,
            device: OnceLock::new(),
        });
        scoped.push(s.clone());
        Ok(Some(s))
    }

    /// Compiles `g` into a plan (`embedded`: use the macro's Tile IR texts, which are those of
    /// the default graph and depth).
    fn prepare_graph(
        &self,
        g: &Graph,
        depth: Option<usize>,
        tag: String,
        embedded: bool,
    ) -> std::result::Result<Plan, String> {
        let opts = self.options(depth);
        let compiled = compile(g, &opts).map_err(|e| e.to_string())?;
        let mut programs = Vec::new();
        for (i, k) in compiled.kernels.iter().enumerate() {
            // The embedded Tile IR is what the build checked; use it when it is present.
            let kernel = match self.tiles.get(i).filter(|_| embedded) {
                Some(text) => {
                    let t = tile::parse(text)
                        .map_err(|e| format!("embedded tile IR of {}: {e}", k.fused.name))?;
                    tile::verify(&t).map_err(|e| e.to_string())?;
                    t
                }
                None => k.lowered.kernel.clone(),
            };
            // The CPU runs its own default tile shapes (see `Schedule::cpu_default`; lowered
            // under the CPU's tile limit), or the pinned tile; a kernel its row loops do not
            // run takes `Schedule::cpu_general` (a narrower row-wise tile).
            let dtype = tessera_ir::pipeline::kernel_dtype(&compiled.graph, &k.fused);
            let class = k.fused.class;
            let lower_cpu = |s: &Schedule, kernel: Option<tile::Kernel>| {
                let kernel = match kernel.filter(|_| *s == k.schedule) {
                    Some(t) => t,
                    None => {
                        compiled
                            .lower_on(i, s, tessera_ir::schedule::Target::Cpu)
                            .map_err(|e| e.to_string())?
                            .kernel
                    }
                };
                Ok::<_, String>(cpu::Program::new(kernel))
            };
            let mut cpu_schedule = opts.cpu_schedule_for(class, dtype);
            let mut program = lower_cpu(&cpu_schedule, Some(kernel.clone()))?;
            let general = Schedule::cpu_general(class, dtype);
            if !opts.pins(class) && general != cpu_schedule && !program.on_row_loop() {
                program = lower_cpu(&general, Some(kernel))?;
                cpu_schedule = general;
            }
            // `TESSERA_DUMP`: the CPU's schedule and Tile IR where they are not the compiled
            // default's (which `compile` dumped), as `<kernel><tag>.cpu`.
            if cpu_schedule != k.schedule {
                let name = format!("{}{tag}.cpu", k.fused.name);
                tessera_ir::pipeline::dump("schedule", &name, || format!("{cpu_schedule}\n"));
                tessera_ir::pipeline::dump("tile", &name, || program.kernel.to_string());
            }
            programs.push((program, k.lowered.bindings.clone(), cpu_schedule));
        }
        Ok(Plan {
            compiled,
            programs,
            tuned: autotune::KernelMemo::new(),
            tag,
        })
    }

    /// The plan of fusion depth `depth`: the default plan when that is its depth, else a
    /// shallower plan compiled on first use.
    fn plan(&self, ready: &Ready, depth: usize) -> Result<Arc<Plan>> {
        if depth >= ready.base.compiled.plan.depth() {
            return Ok(ready.base.clone());
        }
        let mut shallow = ready.shallow.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = shallow.iter().find(|(d, _)| *d == depth) {
            return Ok(p.clone());
        }
        let p = Arc::new(self.prepare(Some(depth)).map_err(|m| self.compile_err(m))?);
        shallow.push((depth, p.clone()));
        Ok(p)
    }

    /// Runs the kernel on `args` (in signature order) and returns its output, on the
    /// arguments' device: that device's memory for a GPU or the simulator (the output stays
    /// there). When every argument is in host memory the launch runs on
    /// [`Device::default`] (`TESSERA_DEVICE`, else a usable GPU, else the CPU): the arguments
    /// are uploaded there and the output stays there; on the CPU it is in host memory.
    ///
    /// A rank-0 tensor passed for a scalar parameter (`eps: f32`) must meet the parameter's
    /// rule, as the typed call's `f32` must (see [`Self::with_scalars`]).
    pub fn launch<T: Element>(&'static self, args: &[TensorRef<'_>]) -> Result<Tensor<T>> {
        self.check_scalars(args)?;
        self.launch_scalars_checked(args)
    }

    /// [`Self::launch`] writing its result into `out`, which must already have the result's
    /// shape and element type (else [`Error::ShapeMismatch`] or [`Error::DTypeMismatch`]
    /// naming the kernel and `out`, before anything runs).
    ///
    /// When the launch runs on the CPU and `out` is in host memory, the launch writes into
    /// `out`'s elements in place of a fresh output block: no allocation (a fresh block comes
    /// from the [host cache](crate::host_cache) when a freed one fits, else from the
    /// allocator, where a block of more than 32 MiB is a new `mmap` whose pages the OS maps
    /// and zeroes on first write). The result is bit for bit [`Self::launch`]'s: whatever `out` held is
    /// never read, and an output the kernel cannot prove it writes in full is zeroed first,
    /// as a fresh block is. Intermediate values of a multi-kernel plan are still allocated
    /// per launch. On error `out` keeps its shape and element type; its elements may have
    /// been partly written.
    ///
    /// When the launch runs on a device (a GPU or the simulator: arguments there, or
    /// [`Device::default`] is one), or `out` is in a device's memory while the launch runs on
    /// the CPU, nothing is reused: the launch runs as [`Self::launch`] does and its result
    /// replaces `out` (which then lives where the result does).
    ///
    /// ```
    /// use tessera::Tensor;
    ///
    /// #[tessera::kernel]
    /// fn axpy(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    ///     x * 2.0 + y
    /// }
    /// let x = Tensor::<f32>::randn(&[3, 5], 1);
    /// let y = Tensor::<f32>::randn(&[3, 5], 2);
    /// let mut out = Tensor::<f32>::full(&[3, 5], f32::NAN)?;
    /// axpy::KERNEL.launch_into(&[x.arg(), y.arg()], &mut out)?;
    /// assert_eq!(out, axpy(&x, &y)?);
    /// let mut wrong = Tensor::<f32>::zeros(&[5, 3])?;
    /// let e = axpy::KERNEL.launch_into(&[x.arg(), y.arg()], &mut wrong).unwrap_err();
    /// assert!(e.to_string().contains("[3, 5]"), "{e}");
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn launch_into<T: Element>(
        &'static self,
        args: &[TensorRef<'_>],
        out: &mut Tensor<T>,
    ) -> Result<()> {
        self.check_scalars(args)?;
        let (shape, host) = out.host_parts_mut();
        let dest = Dest {
            shape,
            host: host.map(bytemuck::cast_slice_mut::<T, u8>),
        };
        match self.execute(args, T::DTYPE, Some(dest))? {
            Output::Into => {}
            o => *out = Self::tensor_of(o)?,
        }
        Ok(())
    }

    /// [`Self::launch`] for the function `#[kernel]` generates, whose scalar arguments were
    /// checked on the host before their upload (`crate::scalar_arg`): no second check, so no
    /// download on a device.
    #[doc(hidden)]
    pub fn launch_scalars_checked<T: Element>(
        &'static self,
        args: &[TensorRef<'_>],
    ) -> Result<Tensor<T>> {
        Self::tensor_of(self.execute(args, T::DTYPE, None)?)
    }

    /// The tensor of a launch's fresh result.
    fn tensor_of<T: Element>(o: Output) -> Result<Tensor<T>> {
        match o {
            Output::Host(shape, mem) => {
                // The byte size was checked when the output was allocated.
                let numel = size::elements(&shape);
                // The output block becomes the tensor's storage as is.
                let data = mem.into_storage::<T>(numel)?;
                Ok(Tensor::from_host(shape, data))
            }
            Output::Device(shape, buf) => Ok(Tensor::from_device(shape, buf)),
            Output::Into => unreachable!("a launch without a destination writes a fresh output"),
        }
    }

    /// [`Self::launch`] with the output's element type `out` as a value, and with `dest`
    /// ([`Self::launch_into`]) the tensor whose shape the result must have and whose host
    /// bytes a CPU launch writes ([`Output::Into`]). A launch that ran a schedule borrowed from
    /// a nearby shape is queued for refinement ([`autotune::refine`]) with a copy of `args`.
    fn execute(
        &'static self,
        args: &[TensorRef<'_>],
        out: DType,
        dest: Option<Dest<'_>>,
    ) -> Result<Output> {
        let l = self.launchable()?;
        let g = &l.graph;
        let name = self.name;
        if args.len() != g.params.len() {
            return Err(Error::ArgCount {
                kernel: name.into(),
                expected: g.params.len(),
                got: args.len(),
            });
        }
        let out_dtype = g.ty(g.output).dtype;
        if out_dtype != out {
            return Err(Error::DTypeMismatch {
                kernel: name.into(),
                param: if dest.is_some() {
                    "out"
                } else {
                    "return value"
                }
                .into(),
                expected: out_dtype.to_string(),
                got: out.to_string(),
            });
        }
        let syms = bind_symbols(name, g, args)?;
        if let Some(d) = &dest {
            let want = eval_shape(&g.ty(g.output).shape.0, &syms);
            if d.shape != want.as_slice() {
                return Err(Error::ShapeMismatch {
                    kernel: name.into(),
                    param: "out".into(),
                    message: format!("must have the result's shape {want:?}, got {:?}", d.shape),
                });
            }
        }
        let device = launch_device(name, args.iter().map(|a| a.device()), |i| {
            g.value_name(g.params[i])
        })?;
        if device.is_cpu() && !args.is_empty() {
            // Every argument is in host memory: the launch runs on the default device, with
            // the arguments uploaded there (its result stays there).
            let target = Device::try_default()?;
            if !target.is_cpu() {
                return self.execute_on(&target, args, out);
            }
        }
        autotune::take_borrowed();
        super::report::begin();
        let scoped = self.scoped_plan()?;
        let result = if device.is_cpu() {
            let plan = match &scoped {
                Some(s) => s.plan.clone(),
                None => {
                    let ready = self.ready()?;
                    self.fusion_choice(ready, args, &syms)?
                }
            };
            let into = dest.and_then(|d| d.host);
            let (shape, mem) = self.run_plan(&plan, args, &syms, true, into)?;
            if mem.is_borrowed() {
                Output::Into
            } else {
                Output::Host(shape, mem)
            }
        } else {
            let l = match &scoped {
                Some(s) => s.device.get_or_init(|| Launchable {
                    graph: s.plan.compiled.graph.clone(),
                    kernels: KernelManifest::all(&s.plan.compiled),
                    scope: Some(s.plan.clone()),
                    parsed: Mutex::new(HashMap::new()),
                    tuned_device: autotune::DeviceMemo::new(),
                }),
                None => l,
            };
            let (shape, buf) = self.run_device(l, args, &syms, &device)?;
            Output::Device(shape, buf)
        };
        if autotune::take_borrowed() {
            let ran = super::report::take();
            let bytes = args.iter().map(|a| a.len()).sum();
            autotune::defer(refine_key(name, &device, args), bytes, || {
                let copies: Vec<ArgCopy> = args.iter().map(ArgCopy::of).collect();
                move || {
                    let refs: Vec<TensorRef<'_>> = copies.iter().map(ArgCopy::arg).collect();
                    self.execute(&refs, out, None).map(drop)
                }
            });
            super::report::restore(ran);
        }
        Ok(result)
    }

    /// Uploads the host arguments `args` to `device` and runs the launch there.
    fn execute_on(
        &'static self,
        device: &Device,
        args: &[TensorRef<'_>],
        out: DType,
    ) -> Result<Output> {
        let mut blocks = Vec::with_capacity(args.len());
        for a in args {
            let bytes = super::host_input(self.name, "argument", a.data())?;
            blocks.push(Arc::new(DeviceBuffer::upload(device, bytes)?));
        }
        let moved: Vec<TensorRef<'_>> = args
            .iter()
            .zip(&blocks)
            .map(|(a, b)| {
                TensorRef::new_unchecked(
                    device,
                    a.dtype(),
                    a.shape(),
                    crate::tensor::Data::Device(b),
                )
            })
            .collect();
        self.execute(&moved, out, None)
    }

    /// The plan the autotuner picks for these arguments (the default plan unless a fusion
    /// depth was tuned for them, or is being tuned now).
    fn fusion_choice(
        &self,
        ready: &Ready,
        args: &[TensorRef<'_>],
        syms: &Syms<'_>,
    ) -> Result<Arc<Plan>> {
        let natural = ready.base.compiled.plan.depth();
        if natural == 0 || autotune::mode() == autotune::Mode::Off {
            return Ok(ready.base.clone());
        }
        let depths = autotune::candidate_depths(self.name, natural);
        let shape: Vec<u64> = args
            .iter()
            .flat_map(|a| a.shape().iter().map(|&d| d as u64))
            .collect();
        let dtypes: Vec<&str> = args.iter().map(|a| a.dtype().name()).collect();
        let predict = || {
            depths
                .iter()
                .map(|&d| match self.plan(ready, d) {
                    Ok(p) => plan_cost(&p, syms),
                    Err(e) => (f64::INFINITY, Some(e.to_string())),
                })
                .collect()
        };
        let mut runner = PlanRunner {
            def: self,
            ready,
            depths: &depths,
            args,
            syms,
            out: None,
            out_bytes: 0,
        };
        let depth = autotune::select_fusion(
            &self.fusion,
            self.name,
            self.graph,
            &depths,
            &shape,
            &dtypes,
            &predict,
            &mut runner,
        )?;
        self.plan(ready, depth)
    }

    /// Runs every kernel of `plan` on the CPU in order; returns the output's shape and memory.
    /// With `tune`, each kernel runs the autotuner's pick for its shapes. With `into` (the
    /// result's bytes, `launch_into`), the final output is written there
    /// ([`HostBlock::borrowed`]) instead of a fresh block.
    fn run_plan(
        &self,
        plan: &Plan,
        args: &[TensorRef<'_>],
        syms: &Syms<'_>,
        tune: bool,
        mut into: Option<&mut [u8]>,
    ) -> Result<(Vec<usize>, HostBlock)> {
        let g = &plan.compiled.graph;
        // Memory for each kernel's output, aligned to its element size (the final one becomes
        // the returned tensor's storage); sizes checked, allocation fallible. Allocated
        // uninitialised: before a kernel runs, its output is zeroed unless the program proves
        // it writes every element (`cpu::Program::covers`), so no byte is ever read before it
        // is written (`HostBlock` checks this before handing the bytes out). Kept inline, in
        // kernel order (a plan has a few kernels): `(value, shape, memory, empty)`.
        let mut owned: Outputs = SmallVec::new();
        for k in &plan.compiled.kernels {
            let v = k.fused.output;
            let shape = eval_shape(&g.ty(v).shape.0, syms);
            let size = g.ty(v).dtype.size_bytes();
            let bytes = self.value_bytes(g, v, &shape)?;
            let mem = match into.take_if(|b| v == g.output && b.len() == bytes) {
                // SAFETY: `launch_into` holds the tensor these bytes belong to mutably
                // borrowed until this launch's result (this block) is dropped, and its
                // elements are `size`-aligned (the output's element type, checked).
                Some(b) => unsafe { HostBlock::borrowed(b, size)? },
                None => HostBlock::uninit(bytes, size)?,
            };
            owned.push((v.0, shape, mem, bytes == 0));
        }
        let find = |owned: &Outputs, v: u32| {
            owned
                .iter()
                .position(|o| o.0 == v)
                .expect("kernel value allocated")
        };
        for (i, (program, bindings, schedule)) in plan.programs.iter().enumerate() {
            // A kernel with an empty output has nothing to write (its grid may still be
            // huge: a `[2^40, 0]` input).
            if owned.get(i).is_some_and(|o| o.3) {
                continue;
            }
            let n = bindings.len();
            let mut bufs: SmallVec<[crate::backend::Buffer; 4]> = SmallVec::with_capacity(n);
            for (j, b) in bindings.iter().enumerate() {
                let dtype = g.ty(b.value).dtype;
                let (shape, ptr, len): (&[usize], *mut u8, usize) = match &g.node(b.value).op {
                    Op::Param { index, .. } => {
                        let a = &args[*index];
                        let bytes = match a.data() {
                            crate::tensor::Data::Host(bytes) => bytes,
                            // Only the error needs the value's name.
                            d => host_input(self.name, &g.value_name(b.value), d)?,
                        };
                        (a.shape(), bytes.as_ptr() as *mut u8, bytes.len())
                    }
                    _ => {
                        let at = find(&owned, b.value.0);
                        let ptr = owned[at].2.as_mut_ptr();
                        let o = &owned[at];
                        (&o.1, ptr, size::elements(&o.1) * dtype.size_bytes())
                    }
                };
                let (view, rank) = b
                    .view_array::<3>(shape)
                    .map_err(|m| self.too_large(g, b.value, shape, m))?;
                bufs.push(buffer(dtype, &view[..rank], ptr, len, j == n - 1));
            }
            // The autotuner's pick for these shapes (`None`: the plan's program, which the
            // tuner times as its default); a pinned kernel runs its pinned schedule.
            let pinned = plan
                .compiled
                .options
                .pins(plan.compiled.kernels[i].fused.class);
            let tuned = if tune && !pinned {
                autotune::select_kernel(
                    &plan.tuned,
                    self.name,
                    self.graph,
                    &plan.tag,
                    &plan.compiled,
                    i,
                    &bufs,
                    program,
                )?
            } else {
                None
            };
            let runs: &cpu::Program = tuned.as_deref().unwrap_or(program);
            let out = plan.compiled.kernels[i].fused.output;
            let at = find(&owned, out.0);
            let mem = &mut owned[at].2;
            let last = bufs.len() - 1;
            let whole = bufs[last].ptr == mem.as_mut_ptr() && bufs[last].len == mem.as_bytes_len();
            let covered = !mem.is_init() && whole && runs.covers(&bufs, last);
            if !covered {
                mem.zero();
            }
            cpu::launch(runs, &bufs)?;
            if covered {
                // SAFETY: the launch ran the fused path, which wrote every element of its
                // last parameter (`Program::covers`), and that parameter's buffer spans the
                // whole block (`whole`).
                unsafe { mem.assume_init() };
                cpu::fused::count_covered();
            }
            let ran = match tuned {
                Some(_) => None,
                None => Some(schedule),
            };
            // Only the run whose output the launch returns (not fusion-depth trials).
            if tune {
                super::report::ran(&plan.compiled.kernels[i].fused.name, ran);
            }
        }
        let at = find(&owned, g.output.0);
        let (_, shape, mem, _) = owned.swap_remove(at);
        Ok((shape, mem))
    }

    /// Runs every kernel of the default plan on a PTX device, each output allocated on the
    /// device (intermediates go back to its caching allocator when the launch ends); returns
    /// the final output's shape and block.
    fn run_device(
        &self,
        l: &Launchable,
        args: &[TensorRef<'_>],
        syms: &Syms<'_>,
        device: &Device,
    ) -> Result<(Vec<usize>, DeviceBuffer)> {
        let g = &l.graph;
        let arch = gpu::device_arch(device)?;
        // What the autotuner's cache keys name: a scope's plan is another graph.
        let scoped_text;
        let graph_text = match &l.scope {
            Some(p) => {
                scoped_text = p.compiled.graph.to_string();
                scoped_text.as_str()
            }
            None => self.graph,
        };
        let mut owned: HashMap<u32, (Vec<usize>, DeviceBuffer)> = HashMap::new();
        for (i, m) in l.kernels.iter().enumerate() {
            let ty = g.ty(m.output);
            let shape = eval_shape(&ty.shape.0, syms);
            let bytes = self.value_bytes(g, m.output, &shape)?;
            let out = DeviceBuffer::alloc(device, bytes)?;
            if bytes == 0 {
                // Nothing to write (see `run_plan`).
                owned.insert(m.output.0, (shape, out));
                continue;
            }
            let n = m.bindings.len();
            let mut dargs: Vec<DeviceArg> = Vec::with_capacity(n);
            for (j, b) in m.bindings.iter().enumerate() {
                let (dims, buf): (&[usize], &DeviceBuffer) = match &g.node(b.value).op {
                    Op::Param { index, .. } => {
                        let a = &args[*index];
                        let name = g.value_name(b.value);
                        (a.shape(), gpu::device_input(self.name, &name, a.data())?)
                    }
                    _ if b.value == m.output => (&shape, &out),
                    _ => owned
                        .get(&b.value.0)
                        .map(|(s, buf)| (s.as_slice(), buf))
                        .ok_or_else(|| {
                            self.compile_err(format!(
                                "{}: {} is read before a kernel writes it",
                                m.name,
                                g.value_name(b.value)
                            ))
                        })?,
                };
                let view = b
                    .view(dims)
                    .map_err(|e| self.too_large(g, b.value, dims, e))?;
                dargs.push(gpu::device_arg(g.ty(b.value).dtype, &view, buf, j == n - 1));
            }
            let source = |s: &Schedule| self.schedule_ptx(l, i, s, arch);
            // A pinned kernel runs its pinned schedule (the manifest's): no tuning.
            let pinned = self.tile.is_some() && self.options(None).pins(m.class());
            let tuned = if pinned {
                None
            } else {
                autotune::select_device_kernel(
                    &l.tuned_device,
                    self.name,
                    graph_text,
                    &l.graph,
                    m,
                    i,
                    &dargs,
                    device,
                    &source,
                )?
            };
            let k = match tuned {
                Some(k) => {
                    super::report::ran(&m.name, None);
                    k
                }
                None => {
                    super::report::ran(&m.name, Some(&m.schedule));
                    self.schedule_ptx(l, i, &m.schedule, arch)?
                }
            };
            gpu::run(device, &k, &dargs)?;
            owned.insert(m.output.0, (shape, out));
        }
        owned
            .remove(&g.output.0)
            .ok_or_else(|| self.compile_err("no kernel writes the output".into()))
    }

    /// The checked byte size of value `v` of shape `shape`: [`Error::TooLarge`] naming the
    /// kernel and the value when it overflows.
    fn value_bytes(&self, g: &Graph, v: graph::Value, shape: &[usize]) -> Result<usize> {
        let elem = g.ty(v).dtype.size_bytes();
        // The checked size without formatting the value's name (this runs on every launch);
        // `size::byte_len` names it in the error.
        if let Some(b) = shape
            .iter()
            .try_fold(elem, |n, &d| n.checked_mul(d))
            .filter(|&b| b <= isize::MAX as usize)
        {
            return Ok(b);
        }
        size::byte_len(
            &format!("kernel `{}`: {}", self.name, g.value_name(v)),
            shape,
            g.ty(v).dtype.size_bytes(),
        )
    }

    fn too_large(&self, g: &Graph, v: graph::Value, shape: &[usize], reason: String) -> Error {
        Error::TooLarge {
            what: format!("kernel `{}`: {}", self.name, g.value_name(v)),
            shape: shape.to_vec(),
            reason,
        }
    }

    /// The PTX of fused kernel `i` of `l`'s plan under schedule `s` for `arch`: for the default
    /// plan, the embedded module for the default schedule and the library's precompiled one
    /// for a schedule of its table; else (a numerics scope's plan, another schedule, an arch
    /// nothing was built for) the JIT cache (memory, disk, then the compiler).
    fn schedule_ptx(
        &self,
        l: &Launchable,
        i: usize,
        s: &Schedule,
        arch: Arch,
    ) -> Result<Arc<PtxKernel>> {
        let m = &l.kernels[i];
        let text = s.to_string();
        let a = Arch::ALL.iter().position(|x| *x == arch).unwrap_or(0);
        let found = if l.scope.is_some() {
            None
        } else if *s == m.schedule {
            self.ptx.get(i * Arch::ALL.len() + a).copied()
        } else {
            precompiled::find(self.library, self.name, &m.name, &text, arch)?
        }
        // An arch the kernel cannot run on has no module (fp8 before sm_89): the compiler
        // says why.
        .filter(|e| !e.text.is_empty());
        if let Some(e) = found {
            let key = (i, text, arch);
            let mut parsed = l.parsed.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = parsed.get(&key) {
                return Ok(p.clone());
            }
            let p = Arc::new(e.parse(self.name)?);
            if p.arch != arch || p.params.len() != m.bindings.len() {
                return Err(self.compile_err(format!(
                    "the build-time PTX of {} for {arch} does not fit its manifest",
                    m.name
                )));
            }
            parsed.insert(key, p.clone());
            return Ok(p);
        }
        // The fused kernel's manifest is part of the key: the same graph text fuses into other
        // kernels when fusion changes (a module cached by an older build must not be reused).
        let manifest = m.display(&l.graph).to_string();
        let key = JitKey {
            ir: format!(
                "kernel {}#{:016x}{}.k{i}#{:016x}",
                self.name,
                autotune::fnv(self.graph.as_bytes()),
                l.scope.as_ref().map_or("", |p| p.tag.as_str()),
                autotune::fnv(manifest.as_bytes())
            ),
            schedule: text,
            arch,
        };
        jit::get(&key, || {
            let c = match &l.scope {
                Some(p) => &p.compiled,
                None => self.compiled()?,
            };
            let k = &c.kernels[i];
            let lowered = if *s == k.schedule {
                k.lowered.clone()
            } else {
                c.lower_with(i, s)
                    .map_err(|e| jit::compile_error(&k.fused.name, e))?
            };
            if lowered.bindings != k.lowered.bindings {
                return Err(jit::compile_error(
                    &k.fused.name,
                    format!("{s} binds other tensors than the default"),
                ));
            }
            ptx::emit(&lowered.kernel, s, arch).map_err(|e| jit::compile_error(&k.fused.name, e))
        })
    }
}

/// The cost model's verdict on a plan for these sizes (its kernels under the CPU schedules its
/// programs run, `Plan::programs`, on the CPU with the current thread pool).
fn plan_cost(plan: &Plan, syms: &Syms) -> (f64, Option<String>) {
    use tessera_ir::cost::plan::{PlanKernel, plan_estimate};
    use tessera_ir::cost::{Point, Problem};
    use tessera_ir::schedule::KernelClass;
    let c = &plan.compiled;
    let g = &c.graph;
    let dims = |v: tessera_ir::graph::Value| eval_shape(&g.ty(v).shape.0, syms);
    let kernels: Vec<PlanKernel> = c
        .kernels
        .iter()
        .zip(&plan.programs)
        .map(|(k, (_, _, schedule))| {
            let f = &k.fused;
            let din = tessera_ir::pipeline::kernel_dtype(g, f);
            let dout = g.ty(f.output).dtype;
            let out = dims(f.output);
            let r = out.len();
            let sizes: Vec<u64> = if f.class == KernelClass::Matmul && r >= 2 {
                let kdim = g
                    .node(f.root)
                    .args
                    .first()
                    .and_then(|a| dims(*a).last().copied())
                    .unwrap_or(1);
                let batch = size::elements(&out[..r - 2]);
                vec![batch, out[r - 2], out[r - 1], kdim]
                    .into_iter()
                    .map(|x| x as u64)
                    .collect()
            } else {
                // The 2-D view the kernel streams: its root's input for reductions.
                let src = match f.class {
                    KernelClass::Elementwise => out.clone(),
                    _ => g
                        .node(f.root)
                        .args
                        .first()
                        .map_or(out.clone(), |a| dims(*a)),
                };
                let n = src.len();
                let cols = src.last().copied().unwrap_or(1);
                let rows = size::elements(&src[..n.saturating_sub(1)]);
                vec![rows as u64, cols as u64]
            };
            PlanKernel {
                problem: Problem::for_class(f.class, &sizes, din, dout),
                point: Point::from_schedule(schedule),
                epilogue_ops: (f.epilogue.len() + f.prologue.len()) as u32,
            }
        })
        .collect();
    let (t, pruned) = plan_estimate(&autotune::cost_arch(), &kernels);
    (t, pruned.map(|p| p.to_string()))
}

/// Runs whole plans of one launch (each candidate fusion depth) into their own memory.
struct PlanRunner<'a, 'g> {
    def: &'a KernelDef,
    ready: &'a Ready,
    depths: &'a [usize],
    args: &'a [TensorRef<'a>],
    syms: &'a Syms<'g>,
    out: Option<HostBlock>,
    out_bytes: usize,
}

impl autotune::Runner for PlanRunner<'_, '_> {
    fn run(&mut self, i: usize) -> Result<()> {
        let plan = self.def.plan(self.ready, self.depths[i])?;
        let (shape, mem) = self
            .def
            .run_plan(&plan, self.args, self.syms, false, None)?;
        let g = &plan.compiled.graph;
        self.out_bytes = size::elements(&shape) * g.ty(g.output).dtype.size_bytes();
        self.out = Some(mem);
        Ok(())
    }

    fn clear(&mut self) {
        self.out = None;
        self.out_bytes = 0;
    }

    fn outputs(&self) -> Vec<(DType, &[u8])> {
        let g = &self.ready.base.compiled.graph;
        vec![(
            g.ty(g.output).dtype,
            self.out
                .as_ref()
                .map_or(&[][..], |m| &m.as_bytes()[..self.out_bytes]),
        )]
    }
}
