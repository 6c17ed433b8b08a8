//! The occupancy calculator: how many blocks of a schedule fit on one SM at once, and which
//! resource limits it.

use super::Arch;

/// The resource that caps resident blocks per SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    Warps,
    Registers,
    SharedMemory,
    Blocks,
}

/// Resident blocks per SM and the resulting occupancy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Occupancy {
    pub blocks_per_unit: u32,
    /// Active warps ÷ the SM's maximum (0 when nothing fits).
    pub fraction: f64,
    pub limiter: Limiter,
}

/// Blocks of `warps` warps using `regs_per_thread` registers and `smem` bytes of shared memory:
/// how many fit per SM of `arch` (registers are allocated per warp in units of 256, as on
/// sm_80/sm_90). On the CPU a core runs one block at a time: occupancy 1.
///
/// ```
/// use tessera_ir::cost::{Arch, occupancy::{occupancy, Limiter}};
/// // 8 warps, 64 regs, 96 KB: two blocks fit in H100's 228 KB → 16 of 64 warps.
/// let o = occupancy(&Arch::H100, 8, 64, 96 * 1024);
/// assert_eq!(o.blocks_per_unit, 2);
/// assert_eq!(o.limiter, Limiter::SharedMemory);
/// assert!((o.fraction - 0.25).abs() < 1e-9);
/// ```
pub fn occupancy(arch: &Arch, warps: u32, regs_per_thread: u32, smem: u64) -> Occupancy {
    if arch.kind == super::ArchKind::Cpu {
        return Occupancy {
            blocks_per_unit: 1,
            fraction: 1.0,
            limiter: Limiter::Blocks,
        };
    }
    let warps = warps.max(1);
    let by_warps = arch.max_warps_per_unit / warps;
    let regs_per_warp = (regs_per_thread.max(1) as u64 * 32).div_ceil(256) * 256;
    let by_regs = (arch.regs_per_unit as u64 / (regs_per_warp * warps as u64)) as u32;
    let by_smem = (arch.smem_per_unit as u64)
        .checked_div(smem)
        .map_or(u32::MAX, |b| b as u32);
    let candidates = [
        (by_warps, Limiter::Warps),
        (by_regs, Limiter::Registers),
        (by_smem, Limiter::SharedMemory),
        (arch.max_blocks_per_unit, Limiter::Blocks),
    ];
    let (blocks, limiter) = candidates
        .into_iter()
        .min_by_key(|c| c.0)
        .expect("four limits");
    Occupancy {
        blocks_per_unit: blocks,
        fraction: (blocks * warps) as f64 / arch.max_warps_per_unit as f64,
        limiter,
    }
}
