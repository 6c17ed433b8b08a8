//! The `sim` backend: runs the emitted PTX text on the CPU and checks it for GPU bugs.
//!
//! [`run`] has the CUDA backend's contract: it parses `k.text` (the exact bytes the driver
//! would get; parsed once per text, cached by hash), evaluates the grid on the buffers' dims,
//! launches `k.threads` threads per CTA with `k.dyn_smem` bytes of dynamic shared memory,
//! passes parameters per the kernel ABI (`tessera_ir::target::ptx` `abi`: per tensor
//! `<name>_ptr` then `<name>_d<axis>`), and writes stores to the writable buffers.
//!
//! - [`parse`]/[`decode`]: text → [`ir::Program`]; an instruction the simulator does not know is
//!   an error naming it and its line, never skipped.
//! - [`exec`]: CTAs in parallel on rayon; in a CTA, warps of 32 lanes in lockstep with per-lane
//!   PCs and min-PC scheduling (see [`exec`] for why), `bar.sync` epochs.
//! - [`memory`]: the launch's buffers at simulated global addresses (bounds per buffer) and
//!   shared memory with per-byte writer/reader tracking per barrier epoch.
//! - [`mma`], [`convert`]: tensor-core fragments and bit-exact conversions.
//!
//! Checkers (on by default, reported as [`crate::Error::SimCheck`] with kernel, PTX line, CTA,
//! thread and address): out-of-bounds global access (against the launch's buffers) and writes
//! to read-only buffers, out-of-bounds shared access, reads of shared memory no thread wrote,
//! shared-memory races (two threads of a CTA touch a byte, at least one writes, no `bar.sync`
//! between them — lanes of one warp included, as on Volta and later), misaligned accesses,
//! `bar.sync` not reached by all non-exited threads (or reached at different barriers),
//! `bra.uni` with a divergent predicate, collectives (`shfl.sync`, `vote.sync`, `ldmatrix`,
//! `mma`) executed by the wrong set of lanes, and use of `cp.async` destinations before their
//! wait.

mod check;
pub(crate) mod convert;
mod decode;
pub(crate) mod device;
pub(crate) mod exec;
pub(crate) mod ir;
mod memory;
mod mma;
pub(crate) mod parse;
#[cfg(test)]
mod tests;

pub use check::Checks;

use crate::backend::Buffer;
use crate::{Error, Result};
use exec::{Launch, run_cta};
use ir::{Program, Ty};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ir::target::ptx::PtxKernel;

/// What a simulated launch executed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Warp instructions issued (one per warp step, whatever the number of active lanes).
    pub warp_instructions: u64,
    /// Lane instructions (active lanes after the guard predicate, summed over steps).
    pub thread_instructions: u64,
    /// CTAs run.
    pub ctas: u64,
    /// CTA-wide barriers released.
    pub barriers: u64,
}

fn device_err(k: &PtxKernel, m: impl std::fmt::Display) -> Error {
    Error::Unsupported {
        device: "sim".into(),
        message: format!("{}: {m}", k.entry),
    }
}

/// The parsed program of `k`, from the cache when this text was parsed before.
fn program(k: &PtxKernel) -> Result<Arc<Program>> {
    type Parsed = Mutex<HashMap<(u64, String), Arc<Program>>>;
    static CACHE: OnceLock<Parsed> = OnceLock::new();
    let h = k.text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let key = (h ^ k.text.len() as u64, k.entry.clone());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(p.clone());
    }
    let p = parse::parse(&k.text, &k.entry)
        .map_err(|e| device_err(k, format!("line {}: {}", e.line, e.message)))?;
    let p = Arc::new(p);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, p.clone());
    Ok(p)
}

/// Runs `k` on host buffers with every checker on.
#[cfg(test)]
pub(crate) fn run(k: &PtxKernel, args: &[Buffer]) -> Result<SimStats> {
    run_with(k, args, Checks::default())
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
/// writable buffers receive the stores. A checker finding is an [`Error::SimCheck`]; an
/// instruction the simulator does not implement is an [`Error::Unsupported`] naming its line.
pub fn simulate(k: &PtxKernel, args: &[Buffer], checks: Checks) -> Result<SimStats> {
    run_with(k, args, checks)
}

/// [`run`] with a choice of checkers.
pub(crate) fn run_with(k: &PtxKernel, args: &[Buffer], checks: Checks) -> Result<SimStats> {
    let prog = program(k)?;
    if args.len() != k.params.len() {
        return Err(Error::ArgCount {
            kernel: k.entry.clone(),
            expected: k.params.len(),
            got: args.len(),
        });
    }
    // The parameter block, per the ABI.
    let mut values: Vec<(Ty, u64)> = Vec::new();
    for (i, (a, (name, rank))) in args.iter().zip(&k.params).enumerate() {
        if a.rank != *rank {
            return Err(Error::ShapeMismatch {
                kernel: k.entry.clone(),
                param: name.clone(),
                message: format!("has view rank {} but the kernel takes rank {rank}", a.rank),
            });
        }
        values.push((Ty::U64, memory::global_base(i)));
        for d in a.dims() {
            values.push((Ty::U32, *d as u64));
        }
    }
    if values.len() != prog.params.len()
        || values
            .iter()
            .zip(&prog.params)
            .any(|(v, p)| v.0.bits() != p.1.bits())
    {
        return Err(device_err(
            k,
            format!(
                "the entry's {} .param(s) do not follow the kernel ABI for {} tensor argument(s)",
                prog.params.len(),
                args.len()
            ),
        ));
    }
    let mut params = vec![0u8; prog.param_bytes as usize];
    for ((t, v), (_, _, off)) in values.iter().zip(&prog.params) {
        let n = t.bytes() as usize;
        params[*off as usize..*off as usize + n].copy_from_slice(&v.to_le_bytes()[..n]);
    }
    let shapes: Vec<Vec<usize>> = args.iter().map(|a| a.dims().to_vec()).collect();
    let grid: Vec<u32> = k.grid.iter().map(|g| g.eval(&shapes) as u32).collect();
    let grid = [grid[0], grid[1], grid[2]];
    let total = grid.iter().map(|&g| g as usize).product::<usize>();
    if total == 0 {
        return Ok(SimStats::default());
    }
    if k.threads == 0 || k.threads > 1024 {
        return Err(device_err(k, format!("{} threads per block", k.threads)));
    }
    if let Some(m) = prog.maxntid.filter(|&m| k.threads > m) {
        return Err(device_err(
            k,
            format!("launch with {} threads exceeds .maxntid {m}", k.threads),
        ));
    }
    if let Some(m) = prog.reqntid.filter(|&m| k.threads != m) {
        return Err(device_err(
            k,
            format!("launch with {} threads but .reqntid is {m}", k.threads),
        ));
    }
    let smem_bytes = if k.dyn_smem > 0 {
        prog.dyn_offset + k.dyn_smem
    } else {
        prog.static_smem
    } as usize;
    let names: Vec<String> = k.params.iter().map(|p| p.0.clone()).collect();
    let launch = Launch {
        prog: &prog,
        global: memory::Global {
            bufs: args,
            names: &names,
        },
        params,
        grid,
        threads: k.threads,
        smem_bytes,
        checks,
    };
    let first_err = AtomicUsize::new(usize::MAX);
    let one = |i: usize| {
        if i > first_err.load(Ordering::Relaxed) {
            return None;
        }
        let id = [
            (i % grid[0] as usize) as u32,
            ((i / grid[0] as usize) % grid[1] as usize) as u32,
            (i / (grid[0] as usize * grid[1] as usize)) as u32,
        ];
        Some(run_cta(&launch, id).map_err(|f| {
            first_err.fetch_min(i, Ordering::Relaxed);
            (i, id, f)
        }))
    };
    let results: Vec<_> = if total == 1 || rayon::current_num_threads() == 1 {
        (0..total).map(one).collect()
    } else {
        (0..total).into_par_iter().map(one).collect()
    };
    let mut stats = SimStats::default();
    let mut err: Option<(usize, [u32; 3], check::Fault)> = None;
    for r in results.into_iter().flatten() {
        match r {
            Ok(s) => {
                stats.ctas += 1;
                stats.warp_instructions += s.warp_insts;
                stats.thread_instructions += s.lane_insts;
                stats.barriers += s.barriers;
            }
            Err(e) => {
                if err.as_ref().is_none_or(|x| e.0 < x.0) {
                    err = Some(e);
                }
            }
        }
    }
    if let Some((_, cta, f)) = err {
        return Err(if f.check {
            Error::SimCheck {
                kernel: k.entry.clone(),
                line: f.line,
                cta,
                thread: f.thread,
                address: f.address,
                message: f.message,
            }
        } else {
            device_err(k, format!("line {}: {}", f.line, f.message))
        });
    }
    Ok(stats)
}
