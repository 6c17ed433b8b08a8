//! Tuning on PTX devices: the kernels of a `#[kernel]` launch on a GPU or the simulator.
//!
//! The candidates are Schedule IR points (the kernel's search space, else the class's GPU
//! space [`Schedule::space`]); each is lowered, emitted as PTX for the device's arch and run
//! on the device into scratch memory, and its output is checked against the default
//! schedule's — the same gate as on the CPU, on the very PTX the device runs. The cost model
//! uses the device's row ([`CostArch::for_target`]). Timing:
//!
//! - **CUDA**: CUDA events around each launch (the kernel alone, not the copies), warm-up,
//!   median and the final race as on the CPU.
//! - **Simulator**: no clock. Every candidate tried is still run and checked on the simulator
//!   (a wrong schedule is caught before a GPU ever sees it), and the winner is the
//!   best-predicted candidate that passed. Its entries go to `sim-<arch>.json`, never to the
//!   GPU's `<arch>.json`, so a cost-model ranking never passes for a GPU measurement.

use super::engine::{self, Job, Runner};
use super::kernel::sizes;
use super::trial::TrialConfig;
use super::{
    Mode, SearchSpace, borrowed, device_arch_id, fnv, generation, lookup, space_of, store, try_mode,
};
use crate::Device;
use crate::Result;
use crate::backend::gpu::DeviceArg;
use crate::launch::gpu;
use crate::tensor::DeviceBuffer;
use std::sync::{Arc, Mutex};
use tessera_ir::DType;
use tessera_ir::cost::{Arch as CostArch, Point};
use tessera_ir::graph::Graph;
use tessera_ir::manifest::KernelManifest;
use tessera_ir::schedule::{self, Schedule};
use tessera_ir::target::ptx::PtxKernel;

/// Per-definition memo of device decisions.
pub(crate) struct DeviceMemo(Mutex<Vec<Decision>>);

/// (generation, arch id, kernel index, shape) → the PTX to run (`None`: the default).
type Decision = (u64, String, usize, Vec<u64>, Option<Arc<PtxKernel>>);

impl DeviceMemo {
    pub const fn new() -> Self {
        DeviceMemo(Mutex::new(Vec::new()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Decision>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a candidate's PTX comes from: the launcher's build-time modules, else its JIT cache.
pub(crate) type PtxSource<'a> = dyn Fn(&Schedule) -> Result<Arc<PtxKernel>> + 'a;

/// `source`, except that a candidate other than the default whose pipeline stages did not fit
/// (emitted with fewer) is an error: a candidate runs as written or not at all, never timed as
/// a shallower pipeline under its own name (the cost model prunes it too).
fn as_written(source: &PtxSource<'_>, default: &Schedule, s: &Schedule) -> Result<Arc<PtxKernel>> {
    let p = source(s)?;
    if let Some((requested, used)) = p.lowered_stages
        && s != default
    {
        return Err(crate::Error::Compile {
            kernel: p.entry.clone(),
            message: format!(
                "{s}: {requested} pipeline stages do not fit {}'s shared memory per block ({used} would)",
                p.arch
            ),
        });
    }
    Ok(p)
}

/// The PTX to run for fused kernel `i` (manifest `m`) of a launch on a PTX `device` with
/// arguments `args` (`None`: the default schedule's): memo → the device arch's cache →
/// nearest shape → tuning (in `full` mode). Candidates' modules come from `source`. In the
/// default `cached` mode, with no cache entry for the kernel, nothing is compiled.
#[allow(clippy::too_many_arguments)]
pub(crate) fn select_device_kernel(
    memo: &DeviceMemo,
    name: &str,
    graph_text: &str,
    g: &Graph,
    m: &KernelManifest,
    i: usize,
    args: &[DeviceArg],
    device: &Device,
    source: &PtxSource<'_>,
) -> Result<Option<Arc<PtxKernel>>> {
    let mode_now = try_mode()?;
    let checked = |s: &Schedule| as_written(source, &m.schedule, s);
    let source: &PtxSource<'_> = &checked;
    let Some(target) = device.arch() else {
        return Ok(None);
    };
    if mode_now == Mode::Off {
        return Ok(None);
    }
    let arch_id = device_arch_id(device);
    let dims: Vec<&[usize]> = args.iter().map(|a| a.dims()).collect();
    let (shape, problem) = sizes(g, m, &dims);
    let generation_now = generation(mode_now);
    if let Some(d) = memo
        .lock()
        .iter()
        .find(|d| d.0 == generation_now && d.1 == arch_id && d.2 == i && d.3 == shape)
    {
        return Ok(d.4.clone());
    }
    let dtypes: Vec<&str> = args.iter().map(|b| b.dtype.name()).collect();
    let family = format!(
        "{name}#{:016x}.k{i}/{}/{arch_id}",
        fnv(graph_text.as_bytes()),
        dtypes.join(",")
    );
    let key = format!(
        "{family}/{}",
        shape
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("x")
    );
    let (cands, space) = match space_of(name) {
        Some(sp) => (sp.schedules(&m.schedule), sp),
        None => (Schedule::space(m.class(), m.dtype), SearchSpace::new()),
    };
    let names: Vec<String> = cands.iter().map(|s| s.to_string()).collect();
    let (hit, near) = lookup(&arch_id, &key, &family, &shape);
    let pick = |text: &str| -> Option<Arc<PtxKernel>> {
        let s = schedule::parse(text).ok()?;
        if s == m.schedule {
            return None;
        }
        source(&s).ok()
    };
    let complete = hit
        .as_ref()
        .is_some_and(|e| names.iter().all(|n| e.record(n).is_some()));
    let chosen = match (&hit, mode_now) {
        (Some(e), _) if complete || mode_now == Mode::Cached => e.best.as_deref().and_then(pick),
        (None, Mode::Cached) => borrowed(&near).and_then(pick),
        _ => {
            let job = Job {
                kernel: name.to_string(),
                family,
                shape: shape.clone(),
                names,
                points: cands.iter().map(Point::from_schedule).collect(),
                arch: CostArch::for_target(target),
                problem,
                predicted: None,
                strategy: space.strategy,
                cost_model: space.cost_model,
                max_trials: space.max_trials,
                trial: TrialConfig {
                    bitwise: tessera_ir::graph::policies(g)
                        .contains(&tessera_ir::NumericsPolicy::Deterministic),
                    ..space.trial
                },
                prior: near.and_then(|e| e.best),
                known: hit,
            };
            let mut runner = DeviceRunner::new(&cands, args, device, source)?;
            let out = engine::tune(job, &mut runner)?;
            store(&arch_id, key, out.entry.clone());
            if out.best == 0 {
                None
            } else {
                Some(source(&cands[out.best])?)
            }
        }
    };
    memo.lock()
        .push((generation_now, arch_id, i, shape, chosen.clone()));
    Ok(chosen)
}

/// Runs schedules of one fused kernel on a device into a scratch output block, and copies
/// that block back after each checked run.
struct DeviceRunner<'a> {
    cands: &'a [Schedule],
    device: &'a Device,
    source: &'a PtxSource<'a>,
    args: Vec<DeviceArg>,
    /// Keeps the scratch block alive (and hands it back to the allocator after tuning).
    scratch: DeviceBuffer,
    host: Vec<u64>,
    out_dtype: DType,
    out_len: usize,
}

impl<'a> DeviceRunner<'a> {
    fn new(
        cands: &'a [Schedule],
        args: &[DeviceArg],
        device: &'a Device,
        source: &'a PtxSource<'a>,
    ) -> Result<Self> {
        let out = *args.last().expect("a kernel writes one output");
        let scratch = DeviceBuffer::zeros(device, out.len)?;
        let mut args = args.to_vec();
        let last = args.len() - 1;
        args[last].addr = scratch.address();
        Ok(DeviceRunner {
            cands,
            device,
            source,
            args,
            scratch,
            host: vec![0u64; out.len.div_ceil(8)],
            out_dtype: out.dtype,
            out_len: out.len,
        })
    }
}

impl Runner for DeviceRunner<'_> {
    fn run(&mut self, j: usize) -> Result<()> {
        let p = (self.source)(&self.cands[j])?;
        gpu::run(self.device, &p, &self.args)?;
        let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.host)[..self.out_len];
        self.scratch.download(bytes)
    }

    fn sample(&mut self, j: usize) -> Result<Option<f64>> {
        let p = (self.source)(&self.cands[j])?;
        gpu::run_timed(self.device, &p, &self.args, true)
    }

    fn clear(&mut self) {
        self.host.fill(0);
        // A candidate that skips elements must not inherit the last one's: zero the block.
        if let Some(g) = self.device.gpu() {
            let _ = g.zero(self.scratch.address(), self.out_len);
        }
    }

    fn outputs(&self) -> Vec<(DType, &[u8])> {
        vec![(
            self.out_dtype,
            &bytemuck::cast_slice::<u64, u8>(&self.host)[..self.out_len],
        )]
    }
}
