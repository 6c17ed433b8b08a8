//! The autotuner's cost model: roofline time per schedule, an occupancy calculator, a
//! register-pressure estimate, and the pruning of schedules that cannot run well.
//!
//! For one [`Problem`] (a matmul, a depthwise convolution, or a streaming kernel, with its
//! sizes) and one schedule [`Point`] (tile, warps, stages, vector width), [`estimate`] works out
//!
//! - **FLOPs executed**, padded to whole tiles (masked edge lanes still compute);
//! - **bytes moved** from memory *with re-reads*: a `BM × BN` matmul tile re-reads its `A` rows
//!   once per column block and its `B` columns once per row block, so smaller tiles move more;
//!   plus the on-chip traffic of staging tiles (and, on the CPU, the accumulator's round trips);
//! - **occupancy** on GPUs from the per-arch tables ([`Arch`], [`occupancy::occupancy`]) and
//!   the wave quantisation of the grid over the SMs (or cores);
//! - **time** = max(compute, memory) + per-block and per-step overheads, where compute runs at
//!   the arch's peak scaled by how well latency is hidden (occupancy ≥ 50% counts as full, the
//!   seeds' rule of thumb) and how evenly the blocks fill the last wave.
//!
//! Limits are the hardware's ([`arch::HwLimits`], CUDA's tables and occupancy rules); the seeds'
//! table A.2 values are [`arch::Guidelines`]: a schedule over one is reported
//! ([`Estimate::over_guidelines`]) and ranked behind close competitors, never pruned. The model
//! *prunes* (`Estimate::pruned`) a schedule whose pipeline stages do not fit the hardware's
//! shared memory per block ([`Prune::Stages`], naming how many would fit: the schedule is
//! rejected, not silently run with fewer stages), whose single stage does not fit
//! ([`Prune::SharedMemory`]), whose registers exceed the hardware cap (it would spill) or that
//! fits no block per SM, and [`rank`] orders the rest by predicted time. [`Estimate::bound_s`] is the roofline bound of
//! the problem itself (compulsory bytes, unpadded FLOPs): no schedule can beat it, and the
//! hybrid search stops once a measured time gets close to it.
//!
//! ```
//! use tessera_ir::cost::{Arch, Point, Problem, Prune, estimate, rank};
//! let p = Problem::matmul(1, 4096, 4096, 4096, 2, 4);
//! let pts = vec![
//!     Point::new([128, 128, 64], 8, 3, 8),
//!     Point::new([32, 32, 32], 4, 2, 8),
//!     Point::new([256, 256, 128], 8, 3, 8),  // 3 stages of 128 KB: only one fits H100's 227 KB
//! ];
//! let order = rank(&Arch::H100, &p, &pts);
//! assert_eq!(order, vec![0, 1]);
//! assert_eq!(
//!     estimate(&Arch::H100, &p, &pts[2]).pruned,
//!     Some(Prune::Stages { requested: 3, fit: 1, stage_bytes: 128 * 1024, limit: 227 * 1024 })
//! );
//! ```

pub mod arch;
pub mod graph;
pub mod occupancy;
pub mod plan;
pub mod resources;

#[cfg(test)]
mod tests;

pub use arch::Arch;
pub use arch::{Guidelines, HwLimits};
pub use occupancy::Occupancy;

use crate::schedule::{KernelClass, Schedule, Target};
use std::fmt;

/// The work a kernel does, with its sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Problem {
    /// `batch` products of `m × k` by `k × n`.
    Matmul {
        /// Independent products (1 for a plain matmul).
        batch: u64,
        /// Rows of the result.
        m: u64,
        /// Columns of the result.
        n: u64,
        /// The summed dim.
        k: u64,
        /// Bytes per input element.
        in_bytes: u32,
        /// Bytes per output element.
        out_bytes: u32,
    },
    /// Depthwise 2-D convolution, stride 1, no padding: output `oh × ow × c` (channels last),
    /// a `kh × kw` filter per channel. Tile `[BH, BW, BC]`.
    Depthwise {
        /// Output rows.
        oh: u64,
        /// Output columns.
        ow: u64,
        /// Channels.
        c: u64,
        /// Filter rows.
        kh: u64,
        /// Filter columns.
        kw: u64,
        /// Bytes per input element.
        in_bytes: u32,
    },
    /// Fused attention (online softmax): `batch` (batch·heads) problems of `sq` queries of
    /// head dim `d` against `sk` keys, values of dim `dv`. Tile `[BM, BN]`: `BM` query rows
    /// per block, `BN` keys per step; each block streams every key and value it can see once
    /// (under `causal`, query `i` sees keys `j ≤ i + sk − sq`).
    Attention {
        /// Independent problems (batch × heads).
        batch: u64,
        /// Queries.
        sq: u64,
        /// Keys (and values).
        sk: u64,
        /// Head dim of queries and keys.
        d: u64,
        /// Head dim of values (and of the output).
        dv: u64,
        /// Whether query `i` sees only keys `j ≤ i + sk − sq`.
        causal: bool,
        /// Bytes per input element.
        in_bytes: u32,
        /// Bytes per output element.
        out_bytes: u32,
    },
    /// A kernel that streams a `rows × cols` view once (elementwise, row-wise, reductions,
    /// transposes): `bytes` per element read and written, `flops` per element. Tile
    /// `[rows, cols]`.
    Stream {
        /// Rows of the view.
        rows: u64,
        /// Columns of the view.
        cols: u64,
        /// Bytes read and written per element.
        bytes: u32,
        /// FLOPs per element.
        flops: u32,
    },
}

impl Problem {
    /// A matmul problem.
    pub fn matmul(batch: u64, m: u64, n: u64, k: u64, in_bytes: u32, out_bytes: u32) -> Self {
        Problem::Matmul {
            batch: batch.max(1),
            m,
            n,
            k,
            in_bytes,
            out_bytes,
        }
    }

    /// Bytes per input element.
    pub fn in_bytes(&self) -> u32 {
        match *self {
            Problem::Matmul { in_bytes, .. }
            | Problem::Depthwise { in_bytes, .. }
            | Problem::Attention { in_bytes, .. } => in_bytes,
            Problem::Stream { bytes, .. } => bytes,
        }
    }

    /// FLOPs of the problem itself (no padding).
    pub fn flops(&self) -> f64 {
        match *self {
            Problem::Matmul { batch, m, n, k, .. } => 2.0 * (batch * m * n * k) as f64,
            Problem::Depthwise {
                oh, ow, c, kh, kw, ..
            } => 2.0 * (oh * ow * c * kh * kw) as f64,
            Problem::Attention {
                batch,
                sq,
                sk,
                d,
                dv,
                causal,
                ..
            } => {
                // Causal: query i sees i + 1 + sk − sq keys when positive (never more than sk).
                let pairs = match causal {
                    false => sq * sk,
                    true if sq >= sk => sk * (sk + 1) / 2,
                    true => sq * (2 * sk - sq + 1) / 2,
                };
                2.0 * (batch * pairs * (d + dv)) as f64
            }
            Problem::Stream {
                rows, cols, flops, ..
            } => (rows * cols) as f64 * flops as f64,
        }
    }

    /// Compulsory bytes: every input read once, the output written once.
    pub fn min_bytes(&self) -> f64 {
        match *self {
            Problem::Matmul {
                batch,
                m,
                n,
                k,
                in_bytes,
                out_bytes,
            } => (batch * ((m * k + k * n) * in_bytes as u64 + m * n * out_bytes as u64)) as f64,
            Problem::Depthwise {
                oh,
                ow,
                c,
                kh,
                kw,
                in_bytes,
            } => {
                let inp = (oh + kh - 1) * (ow + kw - 1) * c;
                ((inp + kh * kw * c) * in_bytes as u64 + oh * ow * c * 4) as f64
            }
            Problem::Attention {
                batch,
                sq,
                sk,
                d,
                dv,
                in_bytes,
                out_bytes,
                ..
            } => {
                let eb = in_bytes as u64;
                (batch * ((sq * d + sk * (d + dv)) * eb + sq * dv * out_bytes as u64)) as f64
            }
            Problem::Stream {
                rows, cols, bytes, ..
            } => (rows * cols * bytes as u64) as f64,
        }
    }

    fn uses_16bit(&self) -> bool {
        self.in_bytes() <= 2
    }
}

/// One schedule point as the cost model sees it: tile dims (unused trailing dims are 1), warps,
/// pipeline stages, vector width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Point {
    /// The tile dims (unused trailing dims are 1).
    pub tile: [u32; 3],
    /// Warps per block.
    pub warps: u32,
    /// Pipeline stages.
    pub stages: u32,
    /// Vector width, in elements.
    pub vector: u32,
}

impl Point {
    /// A point.
    pub fn new(tile: [u32; 3], warps: u32, stages: u32, vector: u32) -> Self {
        Point {
            tile,
            warps,
            stages,
            vector,
        }
    }

    /// The point of a Schedule IR schedule.
    ///
    /// ```
    /// use tessera_ir::{DType, cost::Point, schedule::{KernelClass, Schedule}};
    /// let p = Point::from_schedule(&Schedule::default_for(KernelClass::Matmul, DType::F32));
    /// assert_eq!(p.tile, [128, 128, 64]);
    /// ```
    pub fn from_schedule(s: &Schedule) -> Self {
        let mut tile = [1u32; 3];
        for (t, v) in tile.iter_mut().zip(&s.tile) {
            *t = *v;
        }
        Point::new(tile, s.warps, s.stages, s.vector)
    }
}

/// Why a schedule was pruned.
#[derive(Clone, Debug, PartialEq)]
pub enum Prune {
    /// Shared memory (CPU: tile working set) of one pipeline stage over the per-block limit.
    SharedMemory {
        /// Bytes one stage needs.
        need: u64,
        /// Bytes per block the target has.
        limit: u64,
    },
    /// The schedule's pipeline stages do not fit the hardware's shared memory per block; `fit`
    /// would (at least one does). The schedule is rejected rather than run with fewer stages
    /// than it names; the space should hold the variant that fits.
    Stages {
        /// Stages the schedule names.
        requested: u32,
        /// Stages that would fit.
        fit: u32,
        /// Bytes of one stage.
        stage_bytes: u64,
        /// Bytes of shared memory per block the target has.
        limit: u64,
    },
    /// Registers per thread over the hardware cap: the kernel would spill.
    Registers {
        /// Registers per thread the schedule needs.
        need: u32,
        /// The hardware's cap per thread.
        cap: u32,
    },
    /// No block fits on an SM (too many warps).
    NoBlockFits,
    /// A tile dim of zero.
    EmptyTile,
}

impl fmt::Display for Prune {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prune::SharedMemory { need, limit } => {
                write!(f, "shared memory {need} B over the {limit} B limit")
            }
            Prune::Registers { need, cap } => {
                write!(f, "{need} registers/thread over the cap of {cap} (spills)")
            }
            Prune::Stages {
                requested,
                fit,
                stage_bytes,
                limit,
            } => write!(
                f,
                "{requested} pipeline stages of {stage_bytes} B exceed the {limit} B of shared memory per block ({fit} would fit)"
            ),
            Prune::NoBlockFits => f.write_str("no block fits on an SM"),
            Prune::EmptyTile => f.write_str("empty tile"),
        }
    }
}

/// The cost model's verdict on one schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Predicted time, seconds (infinite when pruned).
    pub time_s: f64,
    /// Time of the FLOPs at the arch's peak derated by the tile's efficiency, seconds.
    pub compute_s: f64,
    /// Time of the memory traffic (DRAM and on-chip), seconds; unless pruned, `time_s` is
    /// `max(compute_s, memory_s) + overhead_s`.
    pub memory_s: f64,
    /// Per-block and per-loop-step overheads over the waves of blocks, seconds.
    pub overhead_s: f64,
    /// FLOPs executed (padded to whole tiles).
    pub flops: f64,
    /// Bytes moved from memory, re-reads included.
    pub bytes: f64,
    /// The problem's roofline bound (unpadded FLOPs, compulsory bytes at peak).
    pub bound_s: f64,
    /// Blocks (CTAs) in the grid.
    pub blocks: u64,
    /// Blocks and warps resident per SM.
    pub occupancy: Occupancy,
    /// Registers per thread the model expects.
    pub regs_per_thread: u32,
    /// Shared memory per block the schedule needs, bytes.
    pub smem_bytes: u64,
    /// Set when the schedule is invalid on this arch.
    pub pruned: Option<Prune>,
    /// The seeds' guidelines (table A.2) this schedule exceeds: preferences, reported here and
    /// used by [`rank`] to break near-ties, never a reason to prune.
    pub over_guidelines: Vec<Guideline>,
}

/// A guideline value of the seeds' table A.2 that a schedule exceeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Guideline {
    /// More registers per thread than the ideal.
    Registers {
        /// Registers per thread the schedule needs.
        need: u32,
        /// The guideline's ideal.
        ideal: u32,
    },
    /// More shared memory per block than preferred.
    SharedMemory {
        /// Bytes per block the schedule needs.
        need: u64,
        /// The guideline's preferred bound.
        preferred: u64,
    },
    /// Occupancy below the fraction that is enough.
    Occupancy {
        /// The occupancy reached (fraction of the SM's warp slots).
        fraction: f64,
        /// The fraction the guideline deems enough.
        enough: f64,
    },
}

impl fmt::Display for Guideline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Guideline::Registers { need, ideal } => {
                write!(f, "{need} registers/thread above the ideal {ideal}")
            }
            Guideline::SharedMemory { need, preferred } => {
                write!(
                    f,
                    "{need} B of shared memory above the preferred {preferred} B"
                )
            }
            Guideline::Occupancy { fraction, enough } => write!(
                f,
                "occupancy {:.0}% below {:.0}%",
                fraction * 100.0,
                enough * 100.0
            ),
        }
    }
}

/// The number of pipeline stages of `stage_bytes` each that fit `limit` bytes, at most
/// `requested`; `None` if not even one does. The PTX emitter and the cost model use this one
/// function, so they agree on what fits.
///
/// ```
/// use tessera_ir::cost::stages_that_fit;
/// assert_eq!(stages_that_fit(64 * 1024, 3, 163 * 1024), Some(2));
/// assert_eq!(stages_that_fit(64 * 1024, 2, 163 * 1024), Some(2));
/// assert_eq!(stages_that_fit(200 * 1024, 3, 163 * 1024), None);
/// ```
pub fn stages_that_fit(stage_bytes: u64, requested: u32, limit: u64) -> Option<u32> {
    let fit = limit.checked_div(stage_bytes).unwrap_or(u64::MAX);
    (fit >= 1).then(|| (requested.max(1) as u64).min(fit) as u32)
}

/// The roofline bound of a problem on an arch: no schedule runs faster.
///
/// ```
/// use tessera_ir::cost::{Arch, Problem, roofline_bound};
/// let p = Problem::matmul(1, 1024, 1024, 1024, 4, 4);
/// let t = roofline_bound(&Arch::cpu(1), &p);
/// assert!((t - 2.0 * 1024f64.powi(3) / 113e9).abs() / t < 1e-9);   // compute-bound
/// ```
pub fn roofline_bound(arch: &Arch, p: &Problem) -> f64 {
    let peak = if p.uses_16bit() {
        arch.peak_16
    } else {
        arch.peak_f32
    };
    (p.flops() / peak).max(p.min_bytes() / arch.bandwidth)
}

/// Estimates one schedule of a problem on an arch. See the module docs for the model.
pub fn estimate(arch: &Arch, p: &Problem, s: &Point) -> Estimate {
    let cpu = arch.target == Target::Cpu;
    let [t0, t1, t2] = s.tile.map(|x| x as u64);
    let res = resources::resources(p, s, cpu);
    let limit = arch.block_smem_limit();
    let stages = if cpu { 1 } else { s.stages.max(1) };
    let stage_bytes = res.smem_bytes / stages as u64;
    let bound_s = roofline_bound(arch, p);
    // Blocks, loop steps per block, padded FLOPs, memory bytes with re-reads, on-chip bytes.
    let (blocks, steps, flops, bytes, onchip) = match *p {
        Problem::Matmul {
            batch,
            m,
            n,
            k,
            in_bytes,
            out_bytes,
        } => {
            let (t0, t1, t2) = (t0.max(1), t1.max(1), t2.max(1));
            let (gm, gn, ks) = (m.div_ceil(t0), n.div_ceil(t1), k.div_ceil(t2));
            let blocks = batch * gm * gn;
            let flops = 2.0 * (blocks * t0 * t1 * ks * t2) as f64;
            let eb = in_bytes as u64;
            let bytes =
                (batch * ((m * k * gn + k * n * gm) * eb + m * n * out_bytes as u64)) as f64;
            // Staging the operand tiles each step; on the CPU also packing them and the f32
            // accumulator's read and write around every `dot`.
            let per_step = if cpu {
                (2 * (t0 * t2 + t2 * t1) + 2 * t0 * t1) * 4
            } else {
                (t0 * t2 + t2 * t1) * eb
            };
            (blocks, ks, flops, bytes, (blocks * ks * per_step) as f64)
        }
        Problem::Depthwise {
            oh,
            ow,
            c,
            kh,
            kw,
            in_bytes,
        } => {
            let (t0, t1, t2) = (t0.max(1), t1.max(1), t2.max(1));
            let (gh, gw, gc) = (oh.div_ceil(t0), ow.div_ceil(t1), c.div_ceil(t2));
            let blocks = gh * gw * gc;
            let flops = 2.0 * (blocks * t0 * t1 * t2 * kh * kw) as f64;
            let halo = (t0 + kh - 1) * (t1 + kw - 1) * t2;
            let eb = in_bytes as u64;
            let bytes = (blocks * (halo + kh * kw * t2) * eb + oh * ow * c * 4) as f64;
            // CPU: every (row, kh, kw) step loads a [BW, BC] window and does a multiply-add.
            let steps = if cpu { t0 * kh * kw } else { kh * kw };
            let per_step = t1 * t2 * 4 * 3;
            (
                blocks,
                steps,
                flops,
                bytes,
                (blocks * steps * per_step) as f64,
            )
        }
        Problem::Attention {
            batch,
            sq,
            sk,
            d,
            dv,
            causal,
            in_bytes,
            out_bytes,
        } => {
            let (t0, t1) = (t0.max(1), t1.max(1));
            let gq = sq.div_ceil(t0);
            // Key steps of each query block: up to the last key its last row sees.
            let block_steps = |i: u64| {
                let last_row = ((i + 1) * t0).min(sq.max(1)) - 1;
                visible_keys(last_row, sq, sk, causal).div_ceil(t1)
            };
            let total: u64 = (0..gq).map(block_steps).sum();
            let steps = (0..gq).map(block_steps).max().unwrap_or(0);
            let eb = in_bytes as u64;
            let blocks = batch * gq;
            let flops = 2.0 * (batch * total * t0 * t1 * (d + dv)) as f64;
            let bytes = (batch
                * ((sq * d + total * t1 * (d + dv)) * eb + sq * dv * out_bytes as u64))
                as f64;
            // Per step: the K and V tiles staged; on the CPU also the f32 score tile's passes
            // (scale, mask, max, exp, sum, cast) and the accumulator's rescale.
            let per_step = if cpu {
                (2 * t1 * (d + dv) + 8 * t0 * t1 + 2 * t0 * dv) * 4
            } else {
                t1 * (d + dv) * eb
            };
            (
                blocks,
                steps,
                flops,
                bytes,
                (batch * total * per_step) as f64,
            )
        }
        Problem::Stream {
            rows,
            cols,
            bytes,
            flops,
        } => {
            let (t0, t1) = (t0.max(1), t1.max(1));
            let blocks = rows.div_ceil(t0) * cols.div_ceil(t1);
            let n = (blocks * t0 * t1) as f64;
            (
                blocks,
                1,
                n * flops as f64,
                (rows * cols * bytes as u64) as f64,
                0.0,
            )
        }
    };
    let occ = occupancy::occupancy(arch, s.warps, res.regs_per_thread, res.smem_bytes);
    let pruned = if s.tile.contains(&0) {
        Some(Prune::EmptyTile)
    } else if res.smem_bytes > limit {
        match stages_that_fit(stage_bytes, stages, limit) {
            Some(fit) => Some(Prune::Stages {
                requested: stages,
                fit,
                stage_bytes,
                limit,
            }),
            None => Some(Prune::SharedMemory {
                need: stage_bytes,
                limit,
            }),
        }
    } else if !cpu && res.regs_per_thread > arch.hw.max_regs_per_thread {
        Some(Prune::Registers {
            need: res.regs_per_thread,
            cap: arch.hw.max_regs_per_thread,
        })
    } else if occ.blocks_per_unit == 0 {
        Some(Prune::NoBlockFits)
    } else {
        None
    };
    let slots = (arch.units as u64 * occ.blocks_per_unit.max(1) as u64).max(1);
    let waves = blocks.div_ceil(slots).max(1);
    let wave_eff = blocks as f64 / (waves * slots) as f64;
    let peak = if p.uses_16bit() {
        arch.peak_16
    } else {
        arch.peak_f32
    };
    // Latency hiding: ≥ 50% occupancy counts as full (seeds A.2), less scales down; registers
    // above the ideal cost a little more; tiles off the 16×16 MMA grid waste tensor-core lanes.
    let enough = arch.guide.enough_occupancy;
    let mut eff = wave_eff.max(1e-3) * (occ.fraction / enough).clamp(0.05, 1.0);
    let mut over_guidelines = Vec::new();
    if !cpu {
        let ideal = arch.guide.ideal_regs_per_thread;
        if res.regs_per_thread > ideal {
            eff *= ideal as f64 / res.regs_per_thread as f64 * 0.25 + 0.75;
            over_guidelines.push(Guideline::Registers {
                need: res.regs_per_thread,
                ideal,
            });
        }
        let preferred = arch.guide.preferred_smem_per_block as u64;
        if res.smem_bytes > preferred {
            over_guidelines.push(Guideline::SharedMemory {
                need: res.smem_bytes,
                preferred,
            });
        }
        if occ.fraction < enough && occ.blocks_per_unit > 0 {
            over_guidelines.push(Guideline::Occupancy {
                fraction: occ.fraction,
                enough,
            });
        }
        if matches!(p, Problem::Matmul { .. }) && (t0 % 16 != 0 || t1 % 16 != 0) {
            eff *= 0.5;
        }
    }
    let compute_s = flops / (peak * eff);
    let memory_s = bytes / arch.bandwidth + onchip / (arch.onchip_bandwidth * wave_eff.max(1e-3));
    let per_slot = blocks.div_ceil(slots) as f64;
    let overhead_s = per_slot * (arch.block_overhead_s + steps as f64 * arch.step_overhead_s);
    let time_s = if pruned.is_some() {
        f64::INFINITY
    } else {
        compute_s.max(memory_s) + overhead_s
    };
    Estimate {
        time_s,
        compute_s,
        memory_s,
        overhead_s,
        flops,
        bytes,
        bound_s,
        blocks,
        occupancy: occ,
        regs_per_thread: res.regs_per_thread,
        smem_bytes: res.smem_bytes,
        pruned,
        over_guidelines,
    }
}

/// Indices of the points that survive pruning, fastest predicted first (stable on ties).
/// Guidelines break near-ties: each guideline a schedule exceeds counts as 2% of predicted
/// time, so of two schedules predicted within a few percent the one within the seeds'
/// guidelines ranks first, while a clearly faster one still wins.
pub fn rank(arch: &Arch, p: &Problem, points: &[Point]) -> Vec<usize> {
    let est: Vec<Estimate> = points.iter().map(|s| estimate(arch, p, s)).collect();
    let key = |e: &Estimate| e.time_s * (1.0 + 0.02 * e.over_guidelines.len() as f64);
    let mut idx: Vec<usize> = (0..points.len())
        .filter(|&i| est[i].pruned.is_none())
        .collect();
    idx.sort_by(|&a, &b| key(&est[a]).total_cmp(&key(&est[b])));
    idx
}

/// Keys query `i` of `sq` sees among `sk`: all, or under a causal mask `j ≤ i + sk − sq`.
fn visible_keys(i: u64, sq: u64, sk: u64, causal: bool) -> u64 {
    if causal {
        (i + 1 + sk).saturating_sub(sq).min(sk)
    } else {
        sk
    }
}

impl Problem {
    /// The problem a Schedule IR kernel class does, from its sizes: matmul
    /// `[batch, m, n, k]`, every other class `[rows, cols]` of its 2-D view.
    ///
    /// ```
    /// use tessera_ir::{DType, cost::Problem, schedule::KernelClass};
    /// let p = Problem::for_class(KernelClass::Matmul, &[1, 64, 32, 16], DType::F32, DType::F32);
    /// assert_eq!(p.flops(), 2.0 * 64.0 * 32.0 * 16.0);
    /// ```
    pub fn for_class(
        class: KernelClass,
        sizes: &[u64],
        input: crate::DType,
        output: crate::DType,
    ) -> Problem {
        let ib = input.size_bytes() as u32;
        let ob = output.size_bytes() as u32;
        let at = |i: usize| sizes.get(i).copied().unwrap_or(1);
        match class {
            KernelClass::Matmul => Problem::matmul(at(0), at(1), at(2), at(3), ib, ob),
            KernelClass::Rowwise => Problem::Stream {
                rows: at(0),
                cols: at(1),
                bytes: ib + ob,
                flops: 8,
            },
            _ => Problem::Stream {
                rows: at(0),
                cols: at(1),
                bytes: ib + ob,
                flops: 1,
            },
        }
    }
}
