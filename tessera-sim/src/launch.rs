//! Launching an entry: the configuration and parameters are checked as a GPU driver would,
//! then CTAs run in parallel (rayon) and their findings, statistics and counters are merged in
//! launch order.

use crate::check::{Checks, Merged};
use crate::error::SimError;
use crate::exec::{Launch, run_cta};
use crate::memory::global::Global;
use crate::memory::{DevicePtr, Memory};
use crate::module::{Module, ParamType, Unsupported};
use crate::report::{Report, Stats};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Grid and block dimensions (x, y, z) and the dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// CTAs per grid dimension (x, y, z); each at least 1.
    pub grid: [u32; 3],
    /// Threads per CTA dimension (x, y, z); each at least 1.
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory (the `.extern .shared` array).
    pub dyn_smem: u32,
}

impl LaunchConfig {
    /// A 1-D launch: `grid` CTAs of `block` threads, no dynamic shared memory.
    pub fn linear(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            dyn_smem: 0,
        }
    }

    /// Threads per block.
    pub fn threads(&self) -> u64 {
        self.block.iter().map(|&b| b as u64).product()
    }

    /// CTAs in the grid.
    pub fn ctas(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }
}

/// How a launch runs and reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Optional checkers (all on by default).
    pub checks: Checks,
    /// Distinct findings kept (default 100); further occurrences are counted in
    /// [`Report::findings_dropped`].
    pub max_findings: usize,
    /// `Some(seed)`: results of `.approx` instructions are moved deterministically within
    /// their documented error bounds (see the crate docs). `None` (default): exact results
    /// rounded once.
    pub perturb_approx: Option<u64>,
    /// Warp instructions one CTA may execute before it is reported as not terminating
    /// (default 200 000 000).
    pub max_warp_instructions: u64,
    /// Run CTAs on rayon's thread pool (default); false runs them one after another.
    pub parallel: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            checks: Checks::default(),
            max_findings: 100,
            perturb_approx: None,
            max_warp_instructions: 200_000_000,
            parallel: true,
        }
    }
}

/// A kernel parameter value. Each is checked against the entry's declaration: the same
/// width, and a compatible kind (a `U32` fits `.u32` and `.b32`, a `Ptr` fits `.u64` and
/// `.b64`, an `F32` fits `.f32` and `.b32`, `Bytes` fits a `.b8` array of its length).
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// For `.u8` (and `.b8`).
    U8(u8),
    /// For `.u16` (and `.b16`).
    U16(u16),
    /// For `.u32` (and `.b32`).
    U32(u32),
    /// For `.u64` (and `.b64`).
    U64(u64),
    /// For `.s8` (and `.b8`).
    S8(i8),
    /// For `.s16` (and `.b16`).
    S16(i16),
    /// For `.s32` (and `.b32`).
    S32(i32),
    /// For `.s64` (and `.b64`).
    S64(i64),
    /// An f16 given by its bits.
    F16Bits(u16),
    /// For `.f32` (and `.b32`).
    F32(f32),
    /// For `.f64` (and `.b64`).
    F64(f64),
    /// A device pointer (a `.u64` / `.b64` parameter).
    Ptr(DevicePtr),
    /// A by-value array / struct (`.param .align A .b8 name[N]`).
    Bytes(Vec<u8>),
}

impl Param {
    /// Little-endian bytes, if the value fits type `t`.
    fn bytes_for(&self, t: ParamType) -> Option<Vec<u8>> {
        use ParamType as T;
        let ok = match self {
            Param::U8(_) => matches!(t, T::U8 | T::B8),
            Param::S8(_) => matches!(t, T::S8 | T::B8),
            Param::U16(_) => matches!(t, T::U16 | T::B16),
            Param::S16(_) => matches!(t, T::S16 | T::B16),
            Param::F16Bits(_) => matches!(t, T::F16 | T::B16),
            Param::U32(_) => matches!(t, T::U32 | T::B32),
            Param::S32(_) => matches!(t, T::S32 | T::B32),
            Param::F32(_) => matches!(t, T::F32 | T::B32),
            Param::U64(_) | Param::Ptr(_) => matches!(t, T::U64 | T::B64),
            Param::S64(_) => matches!(t, T::S64 | T::B64),
            Param::F64(_) => matches!(t, T::F64 | T::B64),
            Param::Bytes(v) => matches!(t, T::Bytes { size, .. } if size as usize == v.len()),
        };
        if !ok {
            return None;
        }
        Some(match self {
            Param::U8(v) => v.to_le_bytes().to_vec(),
            Param::S8(v) => v.to_le_bytes().to_vec(),
            Param::U16(v) | Param::F16Bits(v) => v.to_le_bytes().to_vec(),
            Param::S16(v) => v.to_le_bytes().to_vec(),
            Param::U32(v) => v.to_le_bytes().to_vec(),
            Param::S32(v) => v.to_le_bytes().to_vec(),
            Param::F32(v) => v.to_le_bytes().to_vec(),
            Param::U64(v) => v.to_le_bytes().to_vec(),
            Param::Ptr(p) => p.0.to_le_bytes().to_vec(),
            Param::S64(v) => v.to_le_bytes().to_vec(),
            Param::F64(v) => v.to_le_bytes().to_vec(),
            Param::Bytes(v) => v.clone(),
        })
    }

    /// How the value reads in an error message.
    fn describe(&self) -> String {
        match self {
            Param::Bytes(v) => format!("Bytes({} bytes)", v.len()),
            p => format!("{p:?}"),
        }
    }
}

/// The most shared memory (static + dynamic) one block may use on `target`, in bytes: the
/// opt-in maximum of each architecture (CUDA C Programming Guide, compute capability table).
/// Targets not listed get sm_90's limit.
pub fn max_shared_per_block(target: Option<&str>) -> u32 {
    let t = target.unwrap_or("");
    let t = t.trim_end_matches('a').trim_end_matches('f');
    match t {
        "sm_70" | "sm_72" => 96 * 1024,
        "sm_75" => 64 * 1024,
        "sm_80" | "sm_87" => 163 * 1024,
        "sm_86" | "sm_89" | "sm_120" | "sm_121" => 99 * 1024,
        _ => 227 * 1024,
    }
}

/// Static shared memory above this is rejected (ptxas: "too much shared data").
const STATIC_SMEM_LIMIT: u32 = 48 * 1024;

impl Module {
    /// Runs entry `entry` with `cfg` and `params` on `mem`. Kernel bugs are findings in the
    /// [`Report`]; what stops the launch itself (an unsupported instruction, a bad
    /// configuration or parameter) is a [`SimError`].
    pub fn launch(
        &self,
        mem: &mut Memory,
        entry: &str,
        cfg: LaunchConfig,
        params: &[Param],
        opts: &Options,
    ) -> Result<Report, SimError> {
        let Some(idx) = self.index(entry) else {
            return Err(SimError::NoEntry {
                name: entry.to_string(),
                available: self.entries().map(|e| e.name.clone()).collect(),
            });
        };
        let e = self.entry_at(idx);
        let Some(prog) = self.programs[idx].as_deref() else {
            return Err(SimError::Unsupported {
                entry: entry.to_string(),
                unsupported: e.unsupported.clone().unwrap_or(Unsupported {
                    line: 0,
                    instruction: String::new(),
                    reason: "the entry did not decode".into(),
                }),
            });
        };
        // parameters
        if params.len() != prog.params.len() {
            return Err(SimError::ParamCount {
                entry: entry.to_string(),
                expected: prog.params.len(),
                got: params.len(),
            });
        }
        let mut block = vec![0u8; prog.param_bytes as usize];
        for (i, (p, (name, ty, off))) in params.iter().zip(&prog.params).enumerate() {
            let Some(b) = p.bytes_for(*ty) else {
                return Err(SimError::ParamMismatch {
                    entry: entry.to_string(),
                    index: i,
                    param: name.clone(),
                    expected: *ty,
                    got: p.describe(),
                });
            };
            block[*off as usize..*off as usize + b.len()].copy_from_slice(&b);
        }
        // configuration
        let bad = |m: String| SimError::LaunchConfig {
            entry: entry.to_string(),
            message: m,
        };
        let (g, b) = (cfg.grid, cfg.block);
        if g.contains(&0) || b.contains(&0) {
            return Err(bad(format!(
                "grid {g:?} and block {b:?} must have every dimension at least 1"
            )));
        }
        if g[0] > i32::MAX as u32 || g[1] > 65535 || g[2] > 65535 {
            return Err(bad(format!(
                "grid {g:?} exceeds (2147483647, 65535, 65535)"
            )));
        }
        if b[0] > 1024 || b[1] > 1024 || b[2] > 64 || cfg.threads() > 1024 {
            return Err(bad(format!(
                "block {b:?} has {} threads; the limits are 1024 per block and (1024, 1024, 64) per dimension",
                cfg.threads()
            )));
        }
        if let Some(m) = prog.maxntid
            && (b.iter().zip(m).any(|(x, y)| *x > y)
                || cfg.threads() > m.iter().map(|&x| x as u64).product())
        {
            return Err(bad(format!("block {b:?} exceeds .maxntid {m:?}")));
        }
        if let Some(r) = prog.reqntid
            && b != r
        {
            return Err(bad(format!("block {b:?} differs from .reqntid {r:?}")));
        }
        if prog.static_smem > STATIC_SMEM_LIMIT {
            return Err(bad(format!(
                "{} bytes of static shared memory exceed 48 KiB (larger needs dynamic shared memory)",
                prog.static_smem
            )));
        }
        let smem = if cfg.dyn_smem > 0 {
            prog.dyn_offset as u64 + cfg.dyn_smem as u64
        } else {
            prog.static_smem as u64
        };
        let limit = max_shared_per_block(self.target());
        if smem > limit as u64 {
            return Err(bad(format!(
                "{smem} bytes of shared memory ({} static + {} dynamic) exceed the {limit} bytes a block may use on {}",
                prog.static_smem,
                cfg.dyn_smem,
                self.target().unwrap_or("this target")
            )));
        }
        let launch = Launch {
            prog,
            global: Global::new(&mut mem.slots),
            params: block,
            grid: g,
            block: b,
            threads: cfg.threads() as u32,
            smem_bytes: smem as usize,
            opts,
        };
        let total = cfg.ctas() as usize;
        let abort = AtomicBool::new(false);
        let one = |i: usize| {
            if abort.load(Ordering::Relaxed) {
                return None;
            }
            let id = [
                (i % g[0] as usize) as u32,
                ((i / g[0] as usize) % g[1] as usize) as u32,
                (i / (g[0] as usize * g[1] as usize)) as u32,
            ];
            let r = run_cta(&launch, id);
            if r.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            Some(r)
        };
        let results: Vec<_> = if total == 1 || !opts.parallel || rayon::current_num_threads() == 1 {
            (0..total).map(one).collect()
        } else {
            (0..total).into_par_iter().map(one).collect()
        };
        let mut report = Report::default();
        let mut merged = Merged::default();
        let mut stats = Stats::default();
        for r in results.into_iter().flatten() {
            match r {
                Ok(c) => {
                    stats.ctas += 1;
                    stats.warp_instructions += c.stats.warp_insts;
                    stats.thread_instructions += c.stats.lane_insts;
                    stats.barriers += c.stats.barriers;
                    report.counters.add(&c.counters);
                    merged.add(c.findings, opts.max_findings);
                }
                Err((line, reason)) => {
                    let instruction = prog
                        .insts
                        .iter()
                        .find(|i| i.line == line)
                        .map(|i| i.text.to_string())
                        .unwrap_or_default();
                    return Err(SimError::Unsupported {
                        entry: entry.to_string(),
                        unsupported: Unsupported {
                            line,
                            instruction,
                            reason,
                        },
                    });
                }
            }
        }
        report.stats = stats;
        report.findings = merged.list;
        report.findings_dropped = merged.dropped;
        Ok(report)
    }
}
