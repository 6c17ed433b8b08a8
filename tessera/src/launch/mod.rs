//! Launching kernels: bind shapes, allocate intermediates, run each fused kernel in order.

pub(crate) mod gpu;

use crate::autotune::{self, TileSpace};
use crate::backend::{Buffer, cpu};
use crate::tensor::{Element, Tensor, TensorMut, TensorRef};
use crate::{Device, Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ir::graph::{self, Graph, Op};
use tessera_ir::lower::{Binding, view_shape};
use tessera_ir::pipeline::{CompileOptions, Compiled, compile};
use tessera_ir::tile::{self, dsl};
use tessera_ir::{DType, Dim};

/// The static definition `#[tessera::kernel]` emits: the Graph IR text and the Tile IR text of
/// each fused kernel (default schedules), compiled and checked at build time.
pub struct KernelDef {
    name: &'static str,
    graph: &'static str,
    tiles: &'static [&'static str],
    ready: OnceLock<std::result::Result<Ready, String>>,
    /// PTX of each kernel's default schedule for every arch, embedded by the macro
    /// (kernel-major, `Arch::ALL` order); empty when built without it.
    ptx: &'static [&'static str],
    /// The autotuner's fusion-depth decisions for this definition.
    fusion: autotune::FusionMemo,
    /// `#[kernel(rewrites(..))]`: rules switched off (`false`) or forced (`true`).
    rewrites: &'static [(&'static str, bool)],
}

/// A definition prepared for running: the default (deepest) plan, and the shallower plans
/// the fusion-depth search asked for.
struct Ready {
    base: Arc<Plan>,
    shallow: Mutex<Vec<(usize, Arc<Plan>)>>,
}

/// One fusion plan, compiled.
struct Plan {
    compiled: Compiled,
    /// Per fused kernel: the CPU program (CPU default schedule), the default schedule's Tile IR
    /// (what PTX devices run; the embedded text when present) and the parameter bindings.
    programs: Vec<(cpu::Program, tile::Kernel, Vec<Binding>)>,
    /// PTX of each kernel (default schedule) per arch, emitted on first use.
    ptx: gpu::PtxCache,
    /// The autotuner's decisions and tuned programs for this plan's kernels, on the CPU and
    /// on PTX devices.
    tuned: autotune::KernelMemo,
    tuned_device: autotune::DeviceMemo,
    /// Cache-key tag of the plan's kernels: empty for the default plan, `.f1` for depth 1 ….
    tag: String,
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
            ready: OnceLock::new(),
            ptx: &[],
            fusion: autotune::FusionMemo::new(),
            rewrites: &[],
        }
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

    /// Attaches the PTX the macro precompiled for each kernel's default schedule, per arch
    /// (kernel-major, in `tessera_ir::target::ptx::Arch::ALL` order).
    pub const fn with_ptx(mut self, ptx: &'static [&'static str]) -> Self {
        self.ptx = ptx;
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The embedded PTX of kernel `i` for the device's arch, if the macro embedded it.
    fn embedded_ptx(&self, i: usize, device: &crate::Device) -> Option<&'static str> {
        let arch = device.arch()?;
        let a = tessera_ir::target::ptx::Arch::ALL
            .iter()
            .position(|x| *x == arch)?;
        self.ptx
            .get(i * tessera_ir::target::ptx::Arch::ALL.len() + a)
            .copied()
    }

    /// The PTX module of fused kernel `i` (default schedule) for `arch`: what a GPU of that
    /// arch (or the simulator) runs.
    pub fn ptx(&self, i: usize, arch: tessera_ir::target::ptx::Arch) -> Result<String> {
        let base = &self.ready()?.base;
        let (_, program, _) = base.programs.get(i).ok_or_else(|| Error::Compile {
            kernel: self.name.into(),
            message: format!("no fused kernel #{i}"),
        })?;
        let s = &base.compiled.kernels[i].schedule;
        tessera_ir::target::ptx::emit(program, s, arch)
            .map(|p| p.text)
            .map_err(|e| Error::Compile {
                kernel: self.name.into(),
                message: e.to_string(),
            })
    }

    /// The compiled form (graph, fusion plan, kernels) of the default, deepest plan; compiles
    /// on first use.
    pub fn compiled(&self) -> Result<&Compiled> {
        Ok(&self.ready()?.base.compiled)
    }

    fn ready(&self) -> Result<&Ready> {
        self.ready
            .get_or_init(|| {
                Ok(Ready {
                    base: Arc::new(self.prepare(None)?),
                    shallow: Mutex::new(Vec::new()),
                })
            })
            .as_ref()
            .map_err(|m| Error::Compile {
                kernel: self.name.into(),
                message: m.clone(),
            })
    }

    /// The plan of fusion depth `depth` (`None`: the deepest, with the embedded texts).
    fn prepare(&self, depth: Option<usize>) -> std::result::Result<Plan, String> {
        let g = graph::parse(self.graph).map_err(|e| format!("graph text: {e}"))?;
        let opts = self.options(depth);
        let compiled = compile(&g, &opts).map_err(|e| e.to_string())?;
        let mut programs = Vec::new();
        for (i, k) in compiled.kernels.iter().enumerate() {
            // The embedded Tile IR is what the build checked; use it when it is present.
            let kernel = match self.tiles.get(i).filter(|_| depth.is_none()) {
                Some(text) => {
                    let t = tile::parse(text)
                        .map_err(|e| format!("embedded tile IR of {}: {e}", k.fused.name))?;
                    tile::verify(&t).map_err(|e| e.to_string())?;
                    t
                }
                None => k.lowered.kernel.clone(),
            };
            // The CPU runs its own default tile shapes (see `Schedule::cpu_default`).
            let dtype = tessera_ir::pipeline::kernel_dtype(&compiled.graph, &k.fused);
            let cpu_schedule = tessera_ir::schedule::Schedule::cpu_default(k.fused.class, dtype);
            let cpu_kernel = if cpu_schedule == k.schedule {
                kernel.clone()
            } else {
                compiled
                    .lower_with(i, &cpu_schedule)
                    .map_err(|e| e.to_string())?
                    .kernel
            };
            programs.push((
                cpu::Program::new(cpu_kernel),
                kernel,
                k.lowered.bindings.clone(),
            ));
        }
        Ok(Plan {
            compiled,
            programs,
            ptx: gpu::PtxCache::default(),
            tuned: autotune::KernelMemo::new(),
            tuned_device: autotune::DeviceMemo::new(),
            tag: depth.map_or(String::new(), |d| format!(".f{d}")),
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
        let p = Arc::new(self.prepare(Some(depth)).map_err(|m| Error::Compile {
            kernel: self.name.into(),
            message: m,
        })?);
        shallow.push((depth, p.clone()));
        Ok(p)
    }

    /// Runs the kernel on `args` (in signature order) and returns its output.
    pub fn launch<T: Element>(&'static self, args: &[TensorRef<'_>]) -> Result<Tensor<T>> {
        let (shape, mem, device) = self.execute(args, T::DTYPE)?;
        let numel: usize = shape.iter().product();
        let data: Vec<T> = bytemuck::cast_slice::<u64, u8>(&mem)
            [..numel * std::mem::size_of::<T>()]
            .chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect();
        Ok(Tensor::from_vec(data, &shape)?.to(&device))
    }

    /// [`Self::launch`] with the output's element type `out` as a value: the output's shape,
    /// its memory and the device it was computed on. A launch that ran a schedule borrowed
    /// from a nearby shape is queued for refinement ([`autotune::refine`]) with a copy of
    /// `args`.
    fn execute(
        &'static self,
        args: &[TensorRef<'_>],
        out: DType,
    ) -> Result<(Vec<usize>, Vec<u64>, Device)> {
        let ready = self.ready()?;
        let g = &ready.base.compiled.graph;
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
                param: "return value".into(),
                expected: out_dtype.to_string(),
                got: out.to_string(),
            });
        }
        let syms = bind_symbols(name, g, args)?;
        let device = launch_device(
            name,
            args.iter().map(|a| a.device),
            g.params.iter().map(|p| g.value_name(*p)),
        )?;
        autotune::take_borrowed();
        let plan = if device.is_cpu() {
            self.fusion_choice(ready, args, &syms)?
        } else {
            ready.base.clone()
        };
        let (shape, mem) = self.run_plan(&plan, args, &syms, &device, true)?;
        if autotune::take_borrowed() {
            let bytes = args.iter().map(|a| a.bytes.len()).sum();
            autotune::defer(refine_key(name, &device, args), bytes, || {
                let copies: Vec<ArgCopy> = args.iter().map(ArgCopy::of).collect();
                move || {
                    let refs: Vec<TensorRef<'_>> = copies.iter().map(ArgCopy::arg).collect();
                    self.execute(&refs, out).map(drop)
                }
            });
        }
        Ok((shape, mem, device))
    }

    /// The plan the autotuner picks for these arguments (the default plan unless a fusion
    /// depth was tuned for them, or is being tuned now).
    fn fusion_choice(
        &self,
        ready: &Ready,
        args: &[TensorRef<'_>],
        syms: &Syms,
    ) -> Result<Arc<Plan>> {
        let natural = ready.base.compiled.plan.depth();
        if natural == 0 || autotune::mode() == autotune::Mode::Off {
            return Ok(ready.base.clone());
        }
        let depths = autotune::candidate_depths(self.name, natural);
        let shape: Vec<u64> = args
            .iter()
            .flat_map(|a| a.shape.iter().map(|&d| d as u64))
            .collect();
        let dtypes: Vec<&str> = args.iter().map(|a| a.dtype.name()).collect();
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
            out: Vec::new(),
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

    /// Runs every kernel of `plan` in order; returns the output's shape and memory. With
    /// `tune`, each CPU kernel runs the autotuner's pick for its shapes.
    fn run_plan(
        &self,
        plan: &Plan,
        args: &[TensorRef<'_>],
        syms: &Syms,
        device: &crate::Device,
        tune: bool,
    ) -> Result<(Vec<usize>, Vec<u64>)> {
        let g = &plan.compiled.graph;
        // Memory for each kernel's output (u64 storage keeps every dtype aligned).
        let mut owned: HashMap<u32, (Vec<usize>, Vec<u64>)> = HashMap::new();
        for k in &plan.compiled.kernels {
            let v = k.fused.output;
            let shape = eval_shape(&g.ty(v).shape.0, syms);
            let bytes = shape.iter().product::<usize>() * g.ty(v).dtype.size_bytes();
            owned.insert(v.0, (shape, vec![0u64; bytes.div_ceil(8)]));
        }
        for (i, (program, default_kernel, bindings)) in plan.programs.iter().enumerate() {
            let n = bindings.len();
            let mut bufs = Vec::with_capacity(n);
            for (j, b) in bindings.iter().enumerate() {
                let dtype = g.ty(b.value).dtype;
                let (shape, ptr, len) = match &g.node(b.value).op {
                    Op::Param { index, .. } => {
                        let a = &args[*index];
                        (a.shape.to_vec(), a.bytes.as_ptr() as *mut u8, a.bytes.len())
                    }
                    _ => {
                        let (shape, mem) = owned
                            .get_mut(&b.value.0)
                            .expect("kernel input produced earlier");
                        (
                            shape.clone(),
                            mem.as_mut_ptr() as *mut u8,
                            shape.iter().product::<usize>() * dtype.size_bytes(),
                        )
                    }
                };
                bufs.push(buffer(
                    dtype,
                    &view_shape(&shape, b.view_rank),
                    ptr,
                    len,
                    j == n - 1,
                ));
            }
            if device.is_cpu() {
                // The autotuner's pick for these shapes (`None`: the default schedule).
                let tuned = if tune {
                    autotune::select_kernel(
                        &plan.tuned,
                        self.name,
                        self.graph,
                        &plan.tag,
                        &plan.compiled,
                        i,
                        &bufs,
                    )?
                } else {
                    None
                };
                match tuned {
                    Some(tuned) => cpu::launch(&tuned, &bufs)?,
                    None => cpu::launch(program, &bufs)?,
                }
            } else {
                // GPU and simulator: the autotuner's pick for this device, else the default
                // schedule's PTX.
                let tuned = if tune {
                    autotune::select_device_kernel(
                        &plan.tuned_device,
                        self.name,
                        self.graph,
                        &plan.tag,
                        &plan.compiled,
                        i,
                        &bufs,
                        device,
                    )?
                } else {
                    None
                };
                if let Some(p) = tuned {
                    gpu::run(device, &p, &bufs)?;
                    continue;
                }
                let ck = &plan.compiled.kernels[i];
                let embedded = if plan.tag.is_empty() {
                    self.embedded_ptx(i, device)
                } else {
                    None
                };
                let ptx = plan.ptx.get(
                    device,
                    i,
                    || (default_kernel.clone(), ck.schedule.clone()),
                    embedded,
                )?;
                gpu::run(device, &ptx, &bufs)?;
            }
        }
        Ok(owned.remove(&g.output.0).expect("output buffer"))
    }
}

/// A launch argument copied for a later refinement.
struct ArgCopy {
    device: Device,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl ArgCopy {
    fn of(a: &TensorRef<'_>) -> Self {
        ArgCopy {
            device: a.device.clone(),
            dtype: a.dtype,
            shape: a.shape.to_vec(),
            bytes: a.bytes.to_vec(),
        }
    }

    fn arg(&self) -> TensorRef<'_> {
        TensorRef {
            device: &self.device,
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.bytes,
        }
    }

    fn arg_mut(&mut self) -> TensorMut<'_> {
        TensorMut {
            device: &self.device,
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &mut self.bytes,
        }
    }
}

/// What a refinement is queued under: `name(f32[64x48],f32[48x40])@cpu-x86_64-avx512`.
fn refine_key(name: &str, device: &Device, args: &[TensorRef<'_>]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            let dims: Vec<String> = a.shape.iter().map(|d| d.to_string()).collect();
            format!("{}[{}]", a.dtype, dims.join("x"))
        })
        .collect();
    format!(
        "{name}({})@{}",
        args.join(","),
        autotune::device_arch_id(device)
    )
}

/// The symbol bindings of a launch: each dim's size and the parameter that bound it.
type Syms = HashMap<String, (usize, String)>;

/// The cost model's verdict on a plan for these sizes (its kernels under their default
/// schedules, on the CPU with the current thread pool).
fn plan_cost(plan: &Plan, syms: &Syms) -> (f64, Option<String>) {
    use tessera_ir::cost::plan::{PlanKernel, plan_estimate};
    use tessera_ir::cost::{Point, Problem};
    use tessera_ir::schedule::{KernelClass, Schedule};
    let c = &plan.compiled;
    let g = &c.graph;
    let dims = |v: tessera_ir::graph::Value| eval_shape(&g.ty(v).shape.0, syms);
    let kernels: Vec<PlanKernel> = c
        .kernels
        .iter()
        .map(|k| {
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
                let batch: usize = out[..r - 2].iter().product();
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
                let rows: usize = src[..n.saturating_sub(1)].iter().product();
                vec![rows as u64, cols as u64]
            };
            PlanKernel {
                problem: Problem::for_class(f.class, &sizes, din, dout),
                point: Point::from_schedule(&Schedule::cpu_default(f.class, din)),
                epilogue_ops: f.epilogue.len() as u32,
            }
        })
        .collect();
    let (t, pruned) = plan_estimate(&autotune::cost_arch(), &kernels);
    (t, pruned.map(|p| p.to_string()))
}

/// Runs whole plans of one launch (each candidate fusion depth) into their own memory.
struct PlanRunner<'a> {
    def: &'a KernelDef,
    ready: &'a Ready,
    depths: &'a [usize],
    args: &'a [TensorRef<'a>],
    syms: &'a Syms,
    out: Vec<u64>,
    out_bytes: usize,
}

impl autotune::Runner for PlanRunner<'_> {
    fn run(&mut self, i: usize) -> Result<()> {
        let plan = self.def.plan(self.ready, self.depths[i])?;
        let (shape, mem) =
            self.def
                .run_plan(&plan, self.args, self.syms, &crate::Device::Cpu, false)?;
        let g = &plan.compiled.graph;
        self.out_bytes = shape.iter().product::<usize>() * g.ty(g.output).dtype.size_bytes();
        self.out = mem;
        Ok(())
    }

    fn clear(&mut self) {
        self.out.clear();
        self.out_bytes = 0;
    }

    fn outputs(&self) -> Vec<(DType, &[u8])> {
        let g = &self.ready.base.compiled.graph;
        vec![(
            g.ty(g.output).dtype,
            &bytemuck::cast_slice::<u64, u8>(&self.out)[..self.out_bytes],
        )]
    }
}

/// The device of a launch: the first argument's; every other argument must agree.
fn launch_device<'a>(
    kernel: &str,
    mut devices: impl Iterator<Item = &'a crate::Device>,
    mut names: impl Iterator<Item = String>,
) -> Result<crate::Device> {
    let first = devices.next().cloned().unwrap_or_default();
    let _ = names.next();
    for (d, n) in devices.zip(names) {
        if *d != first {
            return Err(Error::DeviceMismatch {
                kernel: kernel.into(),
                param: n.trim_start_matches('%').into(),
                expected: first.to_string(),
                got: d.to_string(),
            });
        }
    }
    Ok(first)
}

fn buffer(dtype: DType, dims: &[usize], ptr: *mut u8, len: usize, writable: bool) -> Buffer {
    let mut shape = [1usize; 3];
    shape[..dims.len()].copy_from_slice(dims);
    Buffer {
        dtype,
        shape,
        rank: dims.len(),
        ptr,
        len,
        writable,
    }
}

/// Binds every symbolic dim of the signature to the argument sizes; the error names the dim,
/// both sizes and the parameters that disagree.
fn bind_symbols(kernel: &str, g: &Graph, args: &[TensorRef<'_>]) -> Result<Syms> {
    let mut syms: HashMap<String, (usize, String)> = HashMap::new();
    for (p, a) in g.params.iter().zip(args) {
        let (ty, pname) = (
            g.ty(*p),
            g.value_name(*p).trim_start_matches('%').to_string(),
        );
        if a.dtype != ty.dtype {
            return Err(Error::DTypeMismatch {
                kernel: kernel.into(),
                param: pname,
                expected: ty.dtype.to_string(),
                got: a.dtype.to_string(),
            });
        }
        if a.shape.len() != ty.shape.rank() {
            return Err(Error::ShapeMismatch {
                kernel: kernel.into(),
                param: pname,
                message: format!(
                    "must have rank {} ({}), got shape {:?}",
                    ty.shape.rank(),
                    ty.shape,
                    a.shape
                ),
            });
        }
        for (d, &got) in ty.shape.0.iter().zip(a.shape) {
            match d {
                Dim::Const(c) if *c as usize != got => {
                    return Err(Error::ShapeMismatch {
                        kernel: kernel.into(),
                        param: pname,
                        message: format!("must have shape {}, got {:?}", ty.shape, a.shape),
                    });
                }
                Dim::Const(_) => {}
                Dim::Sym(s) => match syms.get(s) {
                    Some((want, by)) if *want != got => {
                        return Err(Error::DimMismatch {
                            kernel: kernel.into(),
                            dim: s.clone(),
                            param: pname,
                            bound_by: format!("`{by}`"),
                            expected: *want,
                            got,
                        });
                    }
                    Some(_) => {}
                    None => {
                        syms.insert(s.clone(), (got, pname.clone()));
                    }
                },
            }
        }
    }
    Ok(syms)
}

fn eval_shape(dims: &[Dim], syms: &Syms) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Const(c) => *c as usize,
            Dim::Sym(s) => syms
                .get(s)
                .map(|x| x.0)
                .expect("result dims are bound by the parameters (verified)"),
        })
        .collect()
}

/// A `tile!` kernel argument: an input or an output tensor.
#[derive(Debug)]
pub enum Arg<'a> {
    In(TensorRef<'a>),
    Out(TensorMut<'a>),
}

/// The static definition `tile!` emits: the block program's front-end form and its knobs.
pub struct TileDef {
    name: &'static str,
    program: fn() -> dsl::Program,
    knobs: &'static [(&'static str, i64)],
    cache: Mutex<Vec<(autotune::Knobs, std::sync::Arc<cpu::Program>)>>,
    tuned: autotune::TileMemo,
    /// Hash of the program, part of the autotuner's cache keys.
    sig: OnceLock<u64>,
}

impl TileDef {
    /// A definition with default knob values.
    pub const fn new(
        name: &'static str,
        program: fn() -> dsl::Program,
        knobs: &'static [(&'static str, i64)],
    ) -> Self {
        TileDef {
            name,
            program,
            knobs,
            cache: Mutex::new(Vec::new()),
            tuned: autotune::TileMemo::new(),
            sig: OnceLock::new(),
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Tile IR for the given knob overrides (defaults for the rest).
    pub fn tile_ir(&self, knobs: &[(&str, i64)]) -> Result<tile::Kernel> {
        Ok(self.program_for(knobs)?.kernel.clone())
    }

    fn program_for(&self, knobs: &[(&str, i64)]) -> Result<std::sync::Arc<cpu::Program>> {
        for (k, _) in knobs {
            if !self.knobs.iter().any(|(n, _)| n == k) {
                return Err(Error::Compile {
                    kernel: self.name.into(),
                    message: format!(
                        "unknown knob `{k}`; knobs are {:?}",
                        self.knobs.iter().map(|k| k.0).collect::<Vec<_>>()
                    ),
                });
            }
        }
        let values: Vec<(String, i64)> = self
            .knobs
            .iter()
            .map(|(n, d)| {
                (
                    n.to_string(),
                    knobs.iter().find(|(k, _)| k == n).map_or(*d, |x| x.1),
                )
            })
            .collect();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = cache.iter().find(|(v, _)| *v == values) {
            return Ok(p.clone());
        }
        let refs: Vec<(&str, i64)> = values.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let kernel = dsl::lower(&(self.program)(), &refs).map_err(|e| Error::Compile {
            kernel: self.name.into(),
            message: e.to_string(),
        })?;
        let p = std::sync::Arc::new(cpu::Program::new(kernel));
        cache.push((values, p.clone()));
        Ok(p)
    }

    /// Runs the block program over its grid with the given knob overrides.
    pub fn launch(&'static self, knobs: &[(&str, i64)], args: &mut [Arg<'_>]) -> Result<()> {
        let program = self.program_for(knobs)?;
        let device = launch_device(
            self.name,
            args.iter().map(|a| match a {
                Arg::In(t) => t.device,
                Arg::Out(t) => t.device,
            }),
            program.kernel.params.iter().map(|p| p.name.clone()),
        )?;
        let bufs = self.bind(&program, args)?;
        if device.is_cpu() {
            return cpu::launch(&program, &bufs);
        }
        // Block programs run with 4 warps on PTX devices.
        let s = tessera_ir::schedule::Schedule {
            warps: 4,
            ..tessera_ir::schedule::Schedule::default_for(
                tessera_ir::schedule::KernelClass::Elementwise,
                DType::F32,
            )
        };
        let arch = gpu::device_arch(&device)?;
        let ptx = tessera_ir::target::ptx::emit(&program.kernel, &s, arch).map_err(|e| {
            Error::Compile {
                kernel: self.name.into(),
                message: e.to_string(),
            }
        })?;
        gpu::run(&device, &ptx, &bufs)
    }

    /// Runs the block program with the knobs the autotuner picks from `space` for these
    /// argument shapes (see [`crate::autotune`] for the modes: in the default `cached` mode a
    /// cached or nearby-shape winner, else the defaults; in `full` mode a miss is tuned on
    /// these arguments, every candidate checked against the default knobs' output). Returns
    /// the knobs used.
    ///
    /// ```
    /// use tessera::{Arg, Tensor, autotune::{self, TileSpace}};
    /// tessera::tile! {
    ///     fn scale<const BR: i64 = 4, const BC: i64 = 64>(x: In<f32, 2>, y: Out<f32, 2>)
    ///         grid = (cdiv(x.dim(0), BR), cdiv(x.dim(1), BC))
    ///     {
    ///         let i = program_id(0) * BR;
    ///         let j = program_id(1) * BC;
    ///         store(y, [i, j], load(x, [i, j], [BR, BC]) * 2.0);
    ///     }
    /// }
    /// let x = Tensor::<f32>::randn(&[33, 100], 1);
    /// let mut y = Tensor::<f32>::zeros(&[33, 100]);
    /// let space = TileSpace::grid(&[("BR", &[1, 4, 16]), ("BC", &[32, 128])]);
    /// let knobs = scale::DEF.launch_tuned(&space, &mut [Arg::In(x.arg()), Arg::Out(y.arg_mut())])?;
    /// assert_eq!(knobs.len(), 2);
    /// assert_eq!(y.as_slice()[5], 2.0 * x.as_slice()[5]);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn launch_tuned(
        &'static self,
        space: &TileSpace,
        args: &mut [Arg<'_>],
    ) -> Result<Vec<(String, i64)>> {
        let default = self.program_for(&[])?;
        let bufs = self.bind(&default, args)?;
        let sig = *self
            .sig
            .get_or_init(|| autotune::fnv(format!("{:?}", (self.program)()).as_bytes()));
        autotune::take_borrowed();
        let knobs = autotune::tune_tile(
            &self.tuned,
            self.name,
            sig,
            self.knobs,
            space,
            &bufs,
            &|k| self.program_for(k),
        )?;
        let refs: Vec<(&str, i64)> = knobs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let program = self.program_for(&refs)?;
        cpu::launch(&program, &bufs)?;
        if autotune::take_borrowed() {
            let views: Vec<TensorRef<'_>> = args
                .iter()
                .map(|a| match a {
                    Arg::In(t) => *t,
                    Arg::Out(t) => TensorRef {
                        device: t.device,
                        dtype: t.dtype,
                        shape: t.shape,
                        bytes: &t.bytes[..],
                    },
                })
                .collect();
            let key = refine_key(self.name, &Device::Cpu, &views);
            let bytes = views.iter().map(|a| a.bytes.len()).sum();
            autotune::defer(key, bytes, || {
                let outputs: Vec<bool> = args.iter().map(|a| matches!(a, Arg::Out(_))).collect();
                let mut copies: Vec<ArgCopy> = views.iter().map(ArgCopy::of).collect();
                let space = space.clone();
                move || {
                    let mut args: Vec<Arg<'_>> = copies
                        .iter_mut()
                        .zip(&outputs)
                        .map(|(c, &out)| {
                            if out {
                                Arg::Out(c.arg_mut())
                            } else {
                                Arg::In(c.arg())
                            }
                        })
                        .collect();
                    self.launch_tuned(&space, &mut args).map(drop)
                }
            });
        }
        Ok(knobs)
    }

    /// Checks `args` against the program's parameters and makes backend buffers of them.
    fn bind(&self, program: &cpu::Program, args: &mut [Arg<'_>]) -> Result<Vec<Buffer>> {
        let k = &program.kernel;
        if args.len() != k.params.len() {
            return Err(Error::ArgCount {
                kernel: self.name.into(),
                expected: k.params.len(),
                got: args.len(),
            });
        }
        let mut bufs = Vec::with_capacity(args.len());
        for (p, a) in k.params.iter().zip(args.iter_mut()) {
            let (dtype, shape, ptr, len, writable) = match a {
                Arg::In(t) => (
                    t.dtype,
                    t.shape,
                    t.bytes.as_ptr() as *mut u8,
                    t.bytes.len(),
                    false,
                ),
                Arg::Out(t) => (t.dtype, t.shape, t.bytes.as_mut_ptr(), t.bytes.len(), true),
            };
            if dtype != p.dtype {
                return Err(Error::DTypeMismatch {
                    kernel: self.name.into(),
                    param: p.name.clone(),
                    expected: p.dtype.to_string(),
                    got: dtype.to_string(),
                });
            }
            if shape.len() != p.rank {
                return Err(Error::ShapeMismatch {
                    kernel: self.name.into(),
                    param: p.name.clone(),
                    message: format!("must have rank {}, got shape {shape:?}", p.rank),
                });
            }
            bufs.push(buffer(dtype, shape, ptr, len, writable));
        }
        Ok(bufs)
    }
}
