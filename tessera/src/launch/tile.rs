//! `tile!` definitions: the CPU runs the block program lowered for the chosen knobs; a PTX
//! device runs the PTX the macro embedded for the default knobs (no compiler), or the JIT
//! cache's for other knobs.

use super::gpu::{self, EmbeddedPtx};
use super::host_block::HostBlock;
use super::jit::{self, JitKey};
use super::{Arg, ArgCopy, buffer, host_input, host_output, launch_device, refine_key};
use crate::autotune::{self, TileSpace};
use crate::backend::Buffer;
use crate::backend::cpu;
use crate::tensor::TensorRef;
use crate::{Device, Element, Error, Result, Tensor};
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ir::DType;
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch, PtxKernel};
use tessera_ir::tile::{self, dsl};

/// A `tile!` parameter as the macro declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileParam {
    /// The parameter's name.
    pub name: &'static str,
    /// Its element type.
    pub dtype: DType,
    /// Its rank.
    pub rank: usize,
}

/// The static definition `tile!` emits: the block program's front-end form and its knobs,
/// and the PTX of its default knobs for every arch.
pub struct TileDef {
    name: &'static str,
    program: fn() -> dsl::Program,
    knobs: &'static [(&'static str, i64)],
    /// The parameters, as declared (empty when built without them).
    params: &'static [TileParam],
    /// PTX of the default knobs per arch (`Arch::ALL` order); empty when built without it.
    ptx: &'static [EmbeddedPtx],
    parsed: Mutex<Vec<(Arch, Arc<PtxKernel>)>>,
    cache: Mutex<Vec<(autotune::Knobs, Arc<cpu::Program>)>>,
    tuned: autotune::TileMemo,
    /// Hash of the program, part of the autotuner's and the JIT cache's keys.
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
            params: &[],
            ptx: &[],
            parsed: Mutex::new(Vec::new()),
            cache: Mutex::new(Vec::new()),
            tuned: autotune::TileMemo::new(),
            sig: OnceLock::new(),
        }
    }

    /// Attaches the declared parameters and the PTX the macro emitted for the default knobs
    /// (one module per arch, `tessera_ir::target::ptx::Arch::ALL` order, under
    /// [`Schedule::block_program`]): launches with the default knobs on a PTX device then run
    /// without the compiler.
    pub const fn with_embedded(
        mut self,
        params: &'static [TileParam],
        ptx: &'static [EmbeddedPtx],
    ) -> Self {
        self.params = params;
        self.ptx = ptx;
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Tile IR for the given knob overrides (defaults for the rest).
    pub fn tile_ir(&self, knobs: &[(&str, i64)]) -> Result<tile::Kernel> {
        Ok(self.program_for(knobs)?.kernel.clone())
    }

    /// Every knob's value: the override if given, else the default; an unknown knob is an
    /// error naming it.
    fn knob_values(&self, knobs: &[(&str, i64)]) -> Result<Vec<(String, i64)>> {
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
        Ok(self
            .knobs
            .iter()
            .map(|(n, d)| {
                (
                    n.to_string(),
                    knobs.iter().find(|(k, _)| k == n).map_or(*d, |x| x.1),
                )
            })
            .collect())
    }

    fn program_for(&self, knobs: &[(&str, i64)]) -> Result<Arc<cpu::Program>> {
        // A compiled assignment is found without building the full one (no allocation).
        let value = |n: &str, d: i64| knobs.iter().find(|(k, _)| *k == n).map_or(d, |x| x.1);
        let same = |v: &[(String, i64)]| {
            v.len() == self.knobs.len()
                && v.iter()
                    .zip(self.knobs)
                    .all(|((n, x), (m, d))| n == m && *x == value(m, *d))
        };
        let known = knobs
            .iter()
            .all(|(k, _)| self.knobs.iter().any(|(n, _)| n == k));
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if known && let Some((_, p)) = cache.iter().find(|(v, _)| same(v)) {
            return Ok(p.clone());
        }
        let values = self.knob_values(knobs)?;
        let refs: Vec<(&str, i64)> = values.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let kernel = dsl::lower(&(self.program)(), &refs).map_err(|e| Error::Compile {
            kernel: self.name.into(),
            message: e.to_string(),
        })?;
        let p = Arc::new(cpu::Program::new(kernel));
        cache.push((values, p.clone()));
        Ok(p)
    }

    /// `(name, dtype, rank)` of every parameter: as declared, else from the lowered program.
    fn param_list(&self) -> Result<Vec<(String, DType, usize)>> {
        if !self.params.is_empty() {
            return Ok(self
                .params
                .iter()
                .map(|p| (p.name.to_string(), p.dtype, p.rank))
                .collect());
        }
        Ok(self
            .program_for(&[])?
            .kernel
            .params
            .iter()
            .map(|p| (p.name.clone(), p.dtype, p.rank))
            .collect())
    }

    fn sig(&self) -> u64 {
        *self
            .sig
            .get_or_init(|| autotune::fnv(format!("{:?}", (self.program)()).as_bytes()))
    }

    /// Runs the block program over its grid with the given knob overrides, on the arguments'
    /// device. Outputs are written in place (their tensors' memory on that device). When every
    /// argument is in host memory the launch runs on [`Device::default`]: on a GPU or the
    /// simulator the arguments are uploaded, and the outputs downloaded back in place.
    pub fn launch(&'static self, knobs: &[(&str, i64)], args: &mut [Arg<'_>]) -> Result<()> {
        let values = self.knob_values(knobs)?;
        let params = self.param_list()?;
        let device = launch_device(
            self.name,
            args.iter().map(|a| match a {
                Arg::In(t) => t.device(),
                Arg::Out(t) => t.device(),
            }),
            |i| {
                params
                    .get(i)
                    .map_or_else(|| format!("argument {i}"), |p| p.0.clone())
            },
        )?;
        check_args(self.name, &params, args)?;
        if device.is_cpu() && !args.is_empty() {
            // Every argument is in host memory: run on the default device when it is not the
            // CPU (inputs and outputs uploaded, outputs downloaded back in place).
            let target = Device::try_default()?;
            if !target.is_cpu() {
                return self.launch_moved(knobs, args, &target);
            }
        }
        if device.is_cpu() {
            let program = self.program_for(knobs)?;
            let bufs = self.bind(&program, args)?;
            return cpu::launch(&program, &bufs);
        }
        let arch = gpu::device_arch(&device)?;
        let k = self.device_ptx(&values, arch)?;
        let mut dargs = Vec::with_capacity(args.len());
        for (a, p) in args.iter().zip(&params) {
            dargs.push(match a {
                Arg::In(t) => gpu::device_arg(
                    t.dtype(),
                    t.shape(),
                    gpu::device_input(self.name, &p.0, t.data())?,
                    false,
                ),
                Arg::Out(t) => gpu::device_arg(
                    t.dtype(),
                    t.shape(),
                    gpu::device_output(self.name, &p.0, t.data())?,
                    true,
                ),
            });
        }
        gpu::run(&device, &k, &dargs)
    }

    /// Runs a launch of host arguments on `device`: uploads every argument (an output's current
    /// contents too: a kernel may leave parts of it unwritten), launches, and downloads each
    /// output back into its host memory.
    fn launch_moved(
        &'static self,
        knobs: &[(&str, i64)],
        args: &mut [Arg<'_>],
        device: &Device,
    ) -> Result<()> {
        let mut blocks = Vec::with_capacity(args.len());
        for a in args.iter() {
            let bytes: &[u8] = match a {
                Arg::In(t) => host_input(self.name, "argument", t.data())?,
                Arg::Out(t) => match t.data() {
                    crate::tensor::DataMut::Host(b) => b,
                    crate::tensor::DataMut::Device(b) => {
                        return Err(super::device_arg_on_cpu(self.name, "argument", b.device()));
                    }
                },
            };
            blocks.push(Arc::new(crate::tensor::DeviceBuffer::upload(
                device, bytes,
            )?));
        }
        let mut moved: Vec<Arg<'_>> = args
            .iter()
            .zip(&blocks)
            .map(|(a, b)| match a {
                Arg::In(t) => Arg::In(TensorRef::new_unchecked(
                    device,
                    t.dtype(),
                    t.shape(),
                    crate::tensor::Data::Device(b),
                )),
                Arg::Out(t) => Arg::Out(crate::tensor::TensorMut::new_unchecked(
                    device,
                    t.dtype(),
                    t.shape(),
                    crate::tensor::DataMut::Device(b),
                )),
            })
            .collect();
        self.launch(knobs, &mut moved)?;
        drop(moved);
        for (a, b) in args.iter_mut().zip(&blocks) {
            if let Arg::Out(t) = a
                && let crate::tensor::DataMut::Host(h) = t.data_mut()
            {
                b.download(h)?;
            }
        }
        Ok(())
    }

    /// The PTX for these knob values: embedded for the defaults, else the JIT cache's.
    fn device_ptx(&self, values: &[(String, i64)], arch: Arch) -> Result<Arc<PtxKernel>> {
        let defaults = self.knobs.iter().zip(values).all(|((_, d), (_, v))| d == v);
        let a = Arch::ALL.iter().position(|x| *x == arch).unwrap_or(0);
        if defaults && let Some(e) = self.ptx.get(a) {
            let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, p)) = parsed.iter().find(|(a, _)| *a == arch) {
                return Ok(p.clone());
            }
            let p = Arc::new(e.parse(self.name)?);
            if p.arch != arch {
                return Err(Error::Compile {
                    kernel: self.name.into(),
                    message: format!("embedded PTX for {arch} targets {}", p.arch),
                });
            }
            parsed.push((arch, p.clone()));
            return Ok(p);
        }
        let knobs: Vec<String> = values.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let s = Schedule::block_program();
        let key = JitKey {
            ir: format!("tile {}#{:016x} {}", self.name, self.sig(), knobs.join(",")),
            schedule: s.to_string(),
            arch,
        };
        jit::get(&key, || {
            let refs: Vec<(&str, i64)> = values.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            let program = self.program_for(&refs)?;
            ptx::emit(&program.kernel, &s, arch).map_err(|e| jit::compile_error(self.name, e))
        })
    }

    /// Runs the block program with the knobs the autotuner picks from `space` for these
    /// argument shapes (see [`crate::autotune`] for the modes: in the default `cached` mode a
    /// cached or nearby-shape winner, else the defaults; in `full` mode a miss is tuned on
    /// these arguments, every candidate checked against the default knobs' output). Returns
    /// the knobs used. Tuning runs on the CPU: arguments on another device are an error.
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
    /// let mut y = Tensor::<f32>::zeros(&[33, 100])?;
    /// let space = TileSpace::grid(&[("BR", &[1, 4, 16]), ("BC", &[32, 128])]);
    /// let knobs = scale::DEF.launch_tuned(&space, &mut [Arg::In(x.arg()), Arg::Out(y.arg_mut()?)])?;
    /// assert_eq!(knobs.len(), 2);
    /// assert_eq!(y.as_slice()?[5], 2.0 * x.as_slice()?[5]);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn launch_tuned(
        &'static self,
        space: &TileSpace,
        args: &mut [Arg<'_>],
    ) -> Result<Vec<(String, i64)>> {
        let default = self.program_for(&[])?;
        if let Some(d) = args
            .iter()
            .map(|a| match a {
                Arg::In(t) => t.device(),
                Arg::Out(t) => t.device(),
            })
            .find(|d| !d.is_cpu())
        {
            return Err(Error::Unsupported {
                device: d.to_string(),
                message: format!(
                    "`{}`: tile! knobs are tuned on the CPU; on a device, launch with explicit knobs",
                    self.name
                ),
            });
        }
        let bufs = self.bind(&default, args)?;
        let (knobs, program) = self.pick(space, &bufs)?;
        cpu::launch(&program, &bufs)?;
        if autotune::take_borrowed() {
            let views: Vec<TensorRef<'_>> = args
                .iter()
                .map(|a| match a {
                    Arg::In(t) => *t,
                    Arg::Out(t) => TensorRef::new_unchecked(
                        t.device(),
                        t.dtype(),
                        t.shape(),
                        match t.data() {
                            crate::tensor::DataMut::Host(b) => crate::tensor::Data::Host(b),
                            crate::tensor::DataMut::Device(_) => {
                                unreachable!("tuning runs on host tensors (checked above)")
                            }
                        },
                    ),
                })
                .collect();
            let outputs: Vec<bool> = args.iter().map(|a| matches!(a, Arg::Out(_))).collect();
            self.refine(space, &views, outputs);
        }
        Ok(knobs)
    }

    /// [`Self::launch_tuned`] for a kernel whose last parameter is its only output: the
    /// launch allocates that output itself, with shape `out` and `T`'s element type, runs the
    /// autotuner's knobs on `inputs` (the other parameters, in order, in host memory) and
    /// returns the output with the knobs used. The output's memory is not cleared first when
    /// the chosen program provably writes every element of it (`cpu::Program::covers`, checked
    /// for the knobs that run: tuning trials run on scratch outputs of their own); otherwise
    /// it is zeroed before the launch, so the result is [`Self::launch_tuned`]'s into a
    /// zeroed tensor, bit for bit, and no element is ever read before it is written.
    ///
    /// ```
    /// use tessera::{Arg, Tensor, autotune::TileSpace};
    /// tessera::tile! {
    ///     fn twice<const BR: i64 = 4, const BC: i64 = 64>(x: In<f32, 2>, y: Out<f32, 2>)
    ///         grid = (cdiv(x.dim(0), BR), cdiv(x.dim(1), BC))
    ///     {
    ///         let i = program_id(0) * BR;
    ///         let j = program_id(1) * BC;
    ///         store(y, [i, j], load(x, [i, j], [BR, BC]) * 2.0);
    ///     }
    /// }
    /// let x = Tensor::<f32>::randn(&[33, 100], 1);
    /// let space = TileSpace::grid(&[("BR", &[1, 4]), ("BC", &[32, 128])]);
    /// let (y, knobs) = twice::DEF.launch_tuned_new::<f32>(&space, &[x.arg()], &[33, 100])?;
    /// assert_eq!(knobs.len(), 2);
    /// let mut want = Tensor::<f32>::zeros(&[33, 100])?;
    /// twice::DEF.launch_tuned(&space, &mut [Arg::In(x.arg()), Arg::Out(want.arg_mut()?)])?;
    /// assert_eq!(y, want);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn launch_tuned_new<T: Element>(
        &'static self,
        space: &TileSpace,
        inputs: &[TensorRef<'_>],
        out: &[usize],
    ) -> Result<(Tensor<T>, Vec<(String, i64)>)> {
        let default = self.program_for(&[])?;
        let k = &default.kernel;
        let params: Vec<(String, DType, usize)> = k
            .params
            .iter()
            .map(|p| (p.name.clone(), p.dtype, p.rank))
            .collect();
        if let Some(d) = inputs.iter().map(|a| a.device()).find(|d| !d.is_cpu()) {
            return Err(Error::Unsupported {
                device: d.to_string(),
                message: format!(
                    "`{}`: tile! knobs are tuned on the CPU; on a device, launch with explicit knobs",
                    self.name
                ),
            });
        }
        let shapes: Vec<(DType, &[usize])> = inputs
            .iter()
            .map(|t| (t.dtype(), t.shape()))
            .chain(std::iter::once((T::DTYPE, out)))
            .collect();
        check_shapes(self.name, &params, &shapes)?;
        let last = params.len() - 1;
        let size = std::mem::size_of::<T>();
        let bytes = crate::tensor::size::byte_len(&params[last].0, out, size)?;
        let mut mem = HostBlock::uninit(bytes, std::mem::align_of::<T>())?;
        let mut bufs = Vec::with_capacity(params.len());
        for (p, t) in params.iter().zip(inputs) {
            let b = host_input(self.name, &p.0, t.data())?;
            bufs.push(buffer(
                t.dtype(),
                t.shape(),
                b.as_ptr() as *mut u8,
                b.len(),
                false,
            ));
        }
        bufs.push(buffer(T::DTYPE, out, mem.as_mut_ptr(), bytes, true));
        let (knobs, program) = self.pick(space, &bufs)?;
        // An empty output has nothing to write (its block is initialised as allocated).
        if bytes > 0 {
            let covered = program.covers(&bufs, last);
            if !covered {
                mem.zero();
            }
            cpu::launch(&program, &bufs)?;
            if covered {
                // SAFETY: `Program::covers` holds only when the path `cpu::launch` takes writes
                // every element of the last parameter (whose buffer is this whole block): the
                // fused path proven to cover it, or a K loop that writes the whole output
                // (`matmul::writes_whole`, run by `matmul::whole` or the interpreter).
                unsafe { mem.assume_init() };
                cpu::fused::count_covered();
            }
        }
        let numel = crate::tensor::size::elements(out);
        let data = mem.into_storage::<T>(numel)?;
        let y = Tensor::from_host(out.to_vec(), data);
        if autotune::take_borrowed() {
            let views: Vec<TensorRef<'_>> = inputs
                .iter()
                .copied()
                .chain(std::iter::once(y.arg()))
                .collect();
            let mut outputs = vec![false; inputs.len()];
            outputs.push(true);
            self.refine(space, &views, outputs);
        }
        Ok((y, knobs))
    }

    /// The knobs the autotuner picks from `space` for `bufs` (see [`Self::launch_tuned`]) and
    /// their program; clears the autotuner's borrowed-pick flag first, so
    /// `autotune::take_borrowed` afterwards says whether this pick was borrowed.
    #[allow(clippy::type_complexity)]
    fn pick(
        &'static self,
        space: &TileSpace,
        bufs: &[Buffer],
    ) -> Result<(Vec<(String, i64)>, Arc<cpu::Program>)> {
        autotune::take_borrowed();
        let knobs = autotune::tune_tile(
            &self.tuned,
            self.name,
            self.sig(),
            self.knobs,
            space,
            bufs,
            &|k| self.program_for(k),
        )?;
        let refs: Vec<(&str, i64)> = knobs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let program = self.program_for(&refs)?;
        Ok((knobs, program))
    }

    /// Queues a launch whose knobs were borrowed from a nearby shape for refinement
    /// (`autotune::defer`) with a copy of its arguments `views` (`outputs`: which are
    /// outputs, each written by the launch, so its copy reads initialised memory).
    fn refine(&'static self, space: &TileSpace, views: &[TensorRef<'_>], outputs: Vec<bool>) {
        let key = refine_key(self.name, &Device::Cpu, views);
        let bytes = views.iter().map(|a| a.len()).sum();
        autotune::defer(key, bytes, || {
            let mut copies: Vec<ArgCopy> = views.iter().map(ArgCopy::of).collect();
            let space = space.clone();
            move || {
                let mut args = Vec::with_capacity(copies.len());
                for (c, &out) in copies.iter_mut().zip(&outputs) {
                    args.push(if out {
                        Arg::Out(c.arg_mut()?)
                    } else {
                        Arg::In(c.arg())
                    });
                }
                self.launch_tuned(&space, &mut args).map(drop)
            }
        });
    }

    /// Makes CPU backend buffers of `args` (checked against `program`'s parameters).
    fn bind(&self, program: &cpu::Program, args: &mut [Arg<'_>]) -> Result<Vec<Buffer>> {
        let k = &program.kernel;
        let params: Vec<(String, DType, usize)> = k
            .params
            .iter()
            .map(|p| (p.name.clone(), p.dtype, p.rank))
            .collect();
        check_args(self.name, &params, args)?;
        let mut bufs = Vec::with_capacity(args.len());
        for (p, a) in params.iter().zip(args.iter_mut()) {
            bufs.push(match a {
                Arg::In(t) => {
                    let b = host_input(self.name, &p.0, t.data())?;
                    buffer(t.dtype(), t.shape(), b.as_ptr() as *mut u8, b.len(), false)
                }
                Arg::Out(t) => {
                    let (dtype, shape) = (t.dtype(), t.shape());
                    let b = host_output(self.name, &p.0, t.data_mut())?;
                    buffer(dtype, shape, b.as_mut_ptr(), b.len(), true)
                }
            });
        }
        Ok(bufs)
    }
}

/// Checks `args` against the parameters: count, then each one's dtype and rank.
fn check_args(kernel: &str, params: &[(String, DType, usize)], args: &[Arg<'_>]) -> Result<()> {
    let shapes: Vec<(DType, &[usize])> = args
        .iter()
        .map(|a| match a {
            Arg::In(t) => (t.dtype(), t.shape()),
            Arg::Out(t) => (t.dtype(), t.shape()),
        })
        .collect();
    check_shapes(kernel, params, &shapes)
}

/// Checks the arguments' `(dtype, shape)` against the parameters: count, then each one's
/// dtype and rank.
fn check_shapes(
    kernel: &str,
    params: &[(String, DType, usize)],
    args: &[(DType, &[usize])],
) -> Result<()> {
    if args.len() != params.len() {
        return Err(Error::ArgCount {
            kernel: kernel.into(),
            expected: params.len(),
            got: args.len(),
        });
    }
    for ((name, dtype, rank), &(d, shape)) in params.iter().zip(args) {
        if d != *dtype {
            return Err(Error::DTypeMismatch {
                kernel: kernel.into(),
                param: name.clone(),
                expected: dtype.to_string(),
                got: d.to_string(),
            });
        }
        if shape.len() != *rank {
            return Err(Error::ShapeMismatch {
                kernel: kernel.into(),
                param: name.clone(),
                message: format!("must have rank {rank}, got shape {shape:?}"),
            });
        }
    }
    Ok(())
}
