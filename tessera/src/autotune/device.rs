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
use crate::backend::Buffer;
use crate::launch::gpu;
use crate::{Device, Error, Result};
use std::sync::{Arc, Mutex};
use tessera_ir::DType;
use tessera_ir::cost::{Arch as CostArch, Point};
use tessera_ir::pipeline::{Compiled, kernel_dtype};
use tessera_ir::schedule::{self, Schedule};
use tessera_ir::target::ptx::{self, PtxKernel};

/// Per-plan memo of device decisions and emitted candidates.
pub(crate) struct DeviceMemo(Mutex<DeviceInner>);

type Decision = (u64, String, usize, Vec<u64>, Option<Arc<PtxKernel>>);

struct DeviceInner {
    /// (generation, arch id, kernel index, shape) → the PTX to run (`None`: the default).
    decisions: Vec<Decision>,
    /// (arch id, kernel index, schedule text) → emitted PTX.
    programs: Vec<(String, usize, String, Arc<PtxKernel>)>,
}

impl DeviceMemo {
    pub const fn new() -> Self {
        DeviceMemo(Mutex::new(DeviceInner {
            decisions: Vec::new(),
            programs: Vec::new(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DeviceInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Lowers kernel `i` under `s` and emits it for the device's arch (memoised).
fn ptx_for(
    memo: &DeviceMemo,
    compiled: &Compiled,
    i: usize,
    s: &Schedule,
    device: &Device,
) -> Result<Arc<PtxKernel>> {
    let id = device_arch_id(device);
    let text = s.to_string();
    if let Some(p) = memo
        .lock()
        .programs
        .iter()
        .find(|p| p.0 == id && p.1 == i && p.2 == text)
    {
        return Ok(p.3.clone());
    }
    let name = compiled.kernels[i].fused.name.clone();
    let compile_err = |m: String| Error::Compile {
        kernel: name.clone(),
        message: m,
    };
    let arch = gpu::device_arch(device)?;
    let lowered = compiled
        .lower_with(i, s)
        .map_err(|e| compile_err(e.to_string()))?;
    if lowered.bindings != compiled.kernels[i].lowered.bindings {
        return Err(compile_err(format!(
            "{s} binds other tensors than the default"
        )));
    }
    let p = Arc::new(
        ptx::emit(&lowered.kernel, s, arch).map_err(|e| compile_err(format!("{s}: {e}")))?,
    );
    // A candidate runs as written or not at all: one whose stages do not fit is rejected (the
    // cost model prunes it too), never timed as a shallower pipeline under its own name.
    if let Some((requested, used)) = p.lowered_stages
        && *s != compiled.kernels[i].schedule
    {
        return Err(compile_err(format!(
            "{s}: {requested} pipeline stages do not fit {arch}'s shared memory per block ({used} would)"
        )));
    }
    memo.lock().programs.push((id, i, text, p.clone()));
    Ok(p)
}

/// The PTX to run for fused kernel `i` of a launch on a PTX `device` (`None`: the default
/// schedule's): memo → the device arch's cache → nearest shape → tuning (in `full` mode).
#[allow(clippy::too_many_arguments)]
pub(crate) fn select_device_kernel(
    memo: &DeviceMemo,
    name: &str,
    graph_text: &str,
    tag: &str,
    compiled: &Compiled,
    i: usize,
    bufs: &[Buffer],
    device: &Device,
) -> Result<Option<Arc<PtxKernel>>> {
    let m = try_mode()?;
    let Some(target) = device.arch() else {
        return Ok(None);
    };
    if m == Mode::Off {
        return Ok(None);
    }
    let arch_id = device_arch_id(device);
    let (shape, problem) = sizes(compiled, i, bufs);
    let generation_now = generation(m);
    if let Some(d) = memo
        .lock()
        .decisions
        .iter()
        .find(|d| d.0 == generation_now && d.1 == arch_id && d.2 == i && d.3 == shape)
    {
        return Ok(d.4.clone());
    }
    let k = &compiled.kernels[i];
    let dtypes: Vec<&str> = bufs.iter().map(|b| b.dtype.name()).collect();
    let family = format!(
        "{name}#{:016x}.k{i}{tag}/{}/{arch_id}",
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
    let dtype = kernel_dtype(&compiled.graph, &k.fused);
    let (cands, space) = match space_of(name) {
        Some(sp) => (sp.schedules(&k.schedule), sp),
        None => (Schedule::space(k.fused.class, dtype), SearchSpace::new()),
    };
    let names: Vec<String> = cands.iter().map(|s| s.to_string()).collect();
    let (hit, near) = lookup(&arch_id, &key, &family, &shape);
    let pick = |text: &str| -> Option<Arc<PtxKernel>> {
        let s = schedule::parse(text).ok()?;
        if s == k.schedule {
            return None;
        }
        ptx_for(memo, compiled, i, &s, device).ok()
    };
    let complete = hit
        .as_ref()
        .is_some_and(|e| names.iter().all(|n| e.record(n).is_some()));
    let chosen = match (&hit, m) {
        (Some(e), _) if complete || m == Mode::Cached => e.best.as_deref().and_then(pick),
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
                    bitwise: super::deterministic(compiled),
                    ..space.trial
                },
                prior: near.and_then(|e| e.best),
                known: hit,
            };
            let mut runner = DeviceRunner::new(memo, compiled, i, &cands, bufs, device);
            let out = engine::tune(job, &mut runner)?;
            store(&arch_id, key, out.entry.clone());
            if out.best == 0 {
                None
            } else {
                Some(ptx_for(memo, compiled, i, &cands[out.best], device)?)
            }
        }
    };
    memo.lock()
        .decisions
        .push((generation_now, arch_id, i, shape, chosen.clone()));
    Ok(chosen)
}

/// Runs schedules of one fused kernel on a device into a scratch output.
struct DeviceRunner<'a> {
    memo: &'a DeviceMemo,
    compiled: &'a Compiled,
    i: usize,
    cands: &'a [Schedule],
    device: &'a Device,
    bufs: Vec<Buffer>,
    scratch: Vec<u64>,
    out_dtype: DType,
    out_len: usize,
}

impl<'a> DeviceRunner<'a> {
    fn new(
        memo: &'a DeviceMemo,
        compiled: &'a Compiled,
        i: usize,
        cands: &'a [Schedule],
        bufs: &[Buffer],
        device: &'a Device,
    ) -> Self {
        let out = *bufs.last().expect("a kernel writes one output");
        let mut scratch = vec![0u64; out.len.div_ceil(8)];
        let mut bufs = bufs.to_vec();
        let last = bufs.len() - 1;
        bufs[last].ptr = scratch.as_mut_ptr() as *mut u8;
        DeviceRunner {
            memo,
            compiled,
            i,
            cands,
            device,
            bufs,
            scratch,
            out_dtype: out.dtype,
            out_len: out.len,
        }
    }
}

impl Runner for DeviceRunner<'_> {
    fn run(&mut self, j: usize) -> Result<()> {
        self.sample(j).map(|_| ())
    }

    fn sample(&mut self, j: usize) -> Result<Option<f64>> {
        let p = ptx_for(
            self.memo,
            self.compiled,
            self.i,
            &self.cands[j],
            self.device,
        )?;
        gpu::run_timed(self.device, &p, &self.bufs)
    }

    fn clear(&mut self) {
        self.scratch.fill(0);
    }

    fn outputs(&self) -> Vec<(DType, &[u8])> {
        vec![(
            self.out_dtype,
            &bytemuck::cast_slice::<u64, u8>(&self.scratch)[..self.out_len],
        )]
    }
}
