//! The `sim` backend: runs the emitted PTX text on the `tessera-sim` simulator and checks it
//! for GPU bugs. This module is one client of the [`tessera_sim`] crate (parser, executor,
//! checkers, counters live there); it only maps the kernel ABI onto the simulator's API.
//!
//! `run` has the CUDA backend's contract: it parses `k.text` (the exact bytes the driver
//! would get; parsed once per text, cached by hash), evaluates the grid on the buffers' dims,
//! allocates one simulated device buffer per argument (named after its parameter, read-only
//! unless writable), passes parameters per the kernel ABI (`tessera_ir::target::ptx` `abi`: per
//! tensor `<name>_ptr` then `<name>_d<axis>`), launches `k.threads` threads per CTA with
//! `k.dyn_smem` bytes of dynamic shared memory, and copies the writable buffers back.
//!
//! Checkers are on by default. The first finding of a launch is returned as
//! [`crate::Error::SimCheck`] with kernel, PTX line, CTA, thread and the place it touched
//! (buffer or shared symbol and byte offset), and the number of findings in all; see
//! [`tessera_sim::FindingKind`] for what is checked.

pub(crate) mod device;
#[cfg(test)]
mod tests;

pub use tessera_sim::{Checks, Report, Stats as SimStats};

use crate::backend::Buffer;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ir::target::ptx::PtxKernel;
use tessera_sim::{LaunchConfig, Memory, Module, Options, Param, SimError};

fn device_err(k: &PtxKernel, m: impl std::fmt::Display) -> Error {
    Error::Unsupported {
        device: "sim".into(),
        message: format!("{}: {m}", k.entry),
    }
}

/// The parsed module of `k`, from the cache when this text was parsed before.
fn module(k: &PtxKernel) -> Result<Arc<Module>> {
    type Parsed = Mutex<HashMap<(u64, usize), Arc<Module>>>;
    static CACHE: OnceLock<Parsed> = OnceLock::new();
    let h = k.text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let key = (h, k.text.len());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(m) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(m.clone());
    }
    let m = Arc::new(Module::parse(&k.text).map_err(|e| device_err(k, e))?);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, m.clone());
    Ok(m)
}

/// Runs `k` on host buffers with every checker on.
#[cfg(test)]
pub(crate) fn run(k: &PtxKernel, args: &[Buffer]) -> Result<SimStats> {
    run_with(k, args, Checks::default()).map(|r| r.stats)
}

/// The host↔device transfers a simulated device's memory counted itself (`None` for a
/// device that is not the simulator). The device layer counts the same transfers
/// ([`crate::Device::transfer_stats`]); the two agree.
pub fn memory_transfers(device: &crate::Device) -> Option<crate::TransferStats> {
    match device {
        crate::Device::Sim(h) => Some(h.0.api().transfers()),
        _ => None,
    }
}

/// Simulates `k` over `args` (the public entry for benches and tools; launches go through
/// `Device::sim()`). Same contract as the CUDA backend: `args` follow the kernel ABI, the
/// writable buffers receive the stores. Returns the launch's [`Report`] (statistics and
/// performance counters). A checker finding is an [`Error::SimCheck`]; an instruction the
/// simulator does not implement is an [`Error::Unsupported`] naming its line.
pub fn simulate(k: &PtxKernel, args: &[Buffer], checks: Checks) -> Result<Report> {
    run_with(k, args, checks)
}

/// [`run`] with a choice of checkers, returning the whole report.
pub(crate) fn run_with(k: &PtxKernel, args: &[Buffer], checks: Checks) -> Result<Report> {
    let module = module(k)?;
    if args.len() != k.params.len() {
        return Err(Error::ArgCount {
            kernel: k.entry.clone(),
            expected: k.params.len(),
            got: args.len(),
        });
    }
    for (a, (name, rank)) in args.iter().zip(&k.params) {
        if a.rank != *rank {
            return Err(Error::ShapeMismatch {
                kernel: k.entry.clone(),
                param: name.clone(),
                message: format!("has view rank {} but the kernel takes rank {rank}", a.rank),
            });
        }
    }
    let shapes: Vec<Vec<usize>> = args.iter().map(|a| a.dims().to_vec()).collect();
    let mut grid = vec![1u32; 3];
    for (g, e) in grid.iter_mut().zip(&k.grid) {
        let n = e.try_eval(&shapes).map_err(|m| Error::ShapeMismatch {
            kernel: k.entry.clone(),
            param: "grid".into(),
            message: m,
        })?;
        *g = u32::try_from(n).map_err(|_| Error::Unsupported {
            device: "sim".into(),
            message: format!("{}: a grid of {n} blocks in one dimension", k.entry),
        })?;
    }
    if grid.contains(&0) {
        return Ok(Report::default());
    }
    let sim_err = |e: SimError| match e {
        // The host refused the simulated device memory: out of memory, as on a GPU.
        SimError::Alloc { bytes, .. } => Error::OutOfMemory { bytes },
        e => device_err(k, e),
    };
    // Device memory: one allocation per argument, named after its parameter.
    let mut mem = Memory::new();
    let mut params = Vec::new();
    let mut ptrs = Vec::with_capacity(args.len());
    for (a, (name, _)) in args.iter().zip(&k.params) {
        let p = mem.alloc_named(name, a.len).map_err(sim_err)?;
        if a.len > 0 {
            // SAFETY: a Buffer views `len` readable bytes at `ptr` for the launch.
            let host = unsafe { std::slice::from_raw_parts(a.ptr as *const u8, a.len) };
            mem.upload(p, host).map_err(sim_err)?;
        }
        if !a.writable {
            mem.set_read_only(p, true).map_err(sim_err)?;
        }
        params.push(Param::Ptr(p));
        for &d in a.dims() {
            let d = u32::try_from(d).map_err(|_| Error::ShapeMismatch {
                kernel: k.entry.clone(),
                param: name.clone(),
                message: format!("dim {d} does not fit the ABI's 32-bit dims"),
            })?;
            params.push(Param::U32(d));
        }
        ptrs.push(p);
    }
    let cfg = LaunchConfig {
        grid: [grid[0], grid[1], grid[2]],
        block: [k.threads, 1, 1],
        dyn_smem: k.dyn_smem,
    };
    let opts = Options {
        checks,
        ..Options::default()
    };
    let report = module
        .launch(&mut mem, &k.entry, cfg, &params, &opts)
        .map_err(sim_err)?;
    if let Some(f) = report.findings.first() {
        return Err(Error::SimCheck {
            kernel: k.entry.clone(),
            line: f.line,
            cta: f.cta,
            thread: f.thread[0],
            location: f.location.as_ref().map(|l| l.to_string()),
            message: f.message.clone(),
            findings: report.error_count(),
        });
    }
    for (a, p) in args.iter().zip(&ptrs) {
        if a.writable && a.len > 0 {
            // SAFETY: a writable Buffer views `len` writable bytes at `ptr` for the launch.
            let host = unsafe { std::slice::from_raw_parts_mut(a.ptr, a.len) };
            mem.download(*p, host).map_err(sim_err)?;
        }
    }
    Ok(report)
}
