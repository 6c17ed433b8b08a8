//! Per-block resources of a schedule: registers per thread (estimated) and shared memory.

use super::{Point, Problem};

/// What one block of a schedule needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Resources {
    /// Estimated 32-bit registers per thread on a GPU: the f32 accumulator fragment, one
    /// MMA k-slice of operand fragments per pipeline stage in flight (2), the epilogue's
    /// temporaries and ~24 for addresses, loop counters and predicates.
    pub regs_per_thread: u32,
    /// Shared memory (GPU: `stages` buffers of the operand tiles) or the tile working set
    /// (CPU: operand tiles + accumulator, f32, must stay in L2), bytes.
    pub smem_bytes: u64,
}

/// Estimates a block's registers and shared memory.
///
/// ```
/// use tessera_ir::cost::{Point, Problem, resources::resources};
/// let p = Problem::matmul(1, 4096, 4096, 4096, 2, 4);
/// // The seeds' bf16 default 128×128×64, 8 warps, 3 stages: 96 KB of shared memory.
/// let r = resources(&p, &Point::new([128, 128, 64], 8, 3, 8), false);
/// assert_eq!(r.smem_bytes, 96 * 1024);
/// assert!(r.regs_per_thread > 64 && r.regs_per_thread < 255);
/// ```
pub fn resources(p: &Problem, s: &Point, cpu: bool) -> Resources {
    let threads = (s.warps.max(1) * 32) as u64;
    let [t0, t1, t2] = s.tile.map(|x| x.max(1) as u64);
    let eb = p.in_bytes() as u64;
    match *p {
        Problem::Matmul { .. } => {
            let acc = t0 * t1 / threads;
            // One 16-deep k-slice of A and B fragments, double-buffered, packed 32-bit.
            let frags = 2 * (t0 * 16 + 16 * t1) * eb / 4 / threads;
            let smem = if cpu {
                (t0 * t2 + t2 * t1 + t0 * t1) * 4
            } else {
                s.stages.max(1) as u64 * (t0 * t2 + t2 * t1) * eb
            };
            Resources {
                regs_per_thread: (acc + frags + 24) as u32,
                smem_bytes: smem,
            }
        }
        Problem::Depthwise { kh, kw, .. } => {
            // Tile [BH, BW, BC]; the input halo tile is staged, the accumulator lives in
            // registers, `vector` values per load.
            let halo = (t0 + kh - 1) * (t1 + kw - 1) * t2;
            let acc = (t0 * t1 * t2).div_ceil(threads);
            let smem = if cpu {
                (halo + t0 * t1 * t2 + kh * kw * t2) * 4
            } else {
                s.stages.max(1) as u64 * halo * eb
            };
            Resources {
                regs_per_thread: (acc + 2 * s.vector as u64 + kh * kw + 24) as u32,
                smem_bytes: smem,
            }
        }
        Problem::Attention { d, dv, .. } => {
            // Per thread: its share of the query tile (packed 32-bit), the f32 score tile and
            // the f32 output accumulator, plus the row statistics. Shared memory: the K and V
            // tiles of a step (GPU, per stage); the whole working set in f32 on the CPU.
            let d = d.next_multiple_of(16);
            let dv = dv.next_multiple_of(16);
            let live = (t0 * d * eb / 4 + t0 * t1 + t0 * dv).div_ceil(threads);
            let smem = if cpu {
                (t0 * d + t1 * (d + dv) + 2 * t0 * t1 + t0 * dv) * 4
            } else {
                s.stages.max(1) as u64 * t1 * (d + dv) * eb
            };
            Resources {
                regs_per_thread: (live + 24) as u32,
                smem_bytes: smem,
            }
        }
        Problem::Stream { .. } => {
            let per = (t0 * t1).div_ceil(threads);
            Resources {
                regs_per_thread: (2 * per + 16) as u32,
                smem_bytes: if cpu { t0 * t1 * 8 } else { 0 },
            }
        }
    }
}
