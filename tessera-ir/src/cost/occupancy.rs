//! The occupancy calculator: how many blocks of a schedule are resident on one SM at once,
//! and which resource limits it — by CUDA's own rules (`cuda_occupancy.h`,
//! `cudaOccMaxActiveBlocksPerMultiprocessor`, default carve-out, no partitioned global caching):
//!
//! - **warps**: `⌊max_threads_per_sm / 32 ÷ warps_per_block⌋`; a block over
//!   `max_threads_per_block` threads fits nowhere;
//! - **registers**: each warp gets `regs_per_thread × 32` registers rounded up to the
//!   allocation unit (256); the register file is split over 4 sub-partitions and a warp's
//!   registers come from one, so `warps_per_sm = ⌊(regs_per_sm / 4) ÷ regs_per_warp⌋ × 4` and
//!   blocks = `⌊warps_per_sm ÷ warps_per_block⌋`. A block fits nowhere when its registers
//!   exceed `regs_per_block`, counting its warps rounded up to a multiple of 4 (the hardware's
//!   check), or when `regs_per_thread` exceeds the per-thread maximum;
//! - **shared memory**: each block is charged its static + dynamic bytes plus the 1 KB the
//!   driver reserves per block, rounded up to 128 bytes; blocks = `⌊smem_per_sm ÷ charge⌋`;
//!   a block whose charge exceeds the opt-in maximum plus the reserve fits nowhere;
//! - **blocks**: `max_blocks_per_sm`.
//!
//! The resident blocks are the minimum of the four; every resource at that minimum is a
//! limiter (CUDA reports all of them too).

use super::Arch;
use crate::schedule::Target;

/// A resource that caps resident blocks per SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limiter {
    /// Warps per SM.
    Warps,
    /// Registers per SM.
    Registers,
    /// Shared memory per SM.
    SharedMemory,
    /// Resident blocks per SM.
    Blocks,
}

/// Resident blocks per SM allowed by each resource on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLimits {
    /// As the SM's warp slots allow.
    pub warps: u32,
    /// As its register file allows.
    pub registers: u32,
    /// As its shared memory allows.
    pub shared_memory: u32,
    /// As its cap on resident blocks allows.
    pub blocks: u32,
}

/// Resident blocks per SM and the resulting occupancy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Occupancy {
    /// Resident blocks per SM (CPU: one per core).
    pub blocks_per_unit: u32,
    /// Resident warps per SM.
    pub warps_per_unit: u32,
    /// Resident warps ÷ the SM's maximum (0 when nothing fits).
    pub fraction: f64,
    /// The first resource at the minimum, in CUDA's order (warps, registers, shared memory,
    /// blocks); [`Occupancy::limiters`] lists every one.
    pub limiter: Limiter,
    /// What each resource allows on its own.
    pub limits: BlockLimits,
    /// Registers allocated to one block (warp allocation unit applied).
    pub regs_per_block: u64,
    /// Shared memory charged to one block (reserve and allocation unit applied), bytes.
    pub smem_per_block: u64,
}

impl Occupancy {
    /// Every resource that caps the resident blocks at [`Occupancy::blocks_per_unit`].
    pub fn limiters(&self) -> Vec<Limiter> {
        let l = &self.limits;
        [
            (l.warps, Limiter::Warps),
            (l.registers, Limiter::Registers),
            (l.shared_memory, Limiter::SharedMemory),
            (l.blocks, Limiter::Blocks),
        ]
        .into_iter()
        .filter(|(n, _)| *n == self.blocks_per_unit)
        .map(|(_, r)| r)
        .collect()
    }
}

/// Occupancy of blocks of `warps` warps using `regs_per_thread` registers and `smem` bytes of
/// shared memory (static + dynamic) on `arch`, by CUDA's rules (module docs). On the CPU a core
/// runs one block at a time: occupancy 1.
///
/// ```
/// use tessera_ir::cost::{Arch, occupancy::{occupancy, Limiter}};
/// // 8 warps, 128 registers, 96 KB: registers allow 2 blocks (16 warps ÷ 8), shared memory
/// // 2 (228 KB ÷ 97 KB): 16 of 64 warps.
/// let o = occupancy(&Arch::H100, 8, 128, 96 * 1024);
/// assert_eq!(o.blocks_per_unit, 2);
/// assert_eq!(o.limiters(), vec![Limiter::Registers, Limiter::SharedMemory]);
/// assert!((o.fraction - 0.25).abs() < 1e-12);
/// ```
pub fn occupancy(arch: &Arch, warps: u32, regs_per_thread: u32, smem: u64) -> Occupancy {
    if arch.target == Target::Cpu {
        return Occupancy {
            blocks_per_unit: 1,
            warps_per_unit: 1,
            fraction: 1.0,
            limiter: Limiter::Blocks,
            limits: BlockLimits {
                warps: 1,
                registers: 1,
                shared_memory: 1,
                blocks: 1,
            },
            regs_per_block: 0,
            smem_per_block: smem,
        };
    }
    let hw = &arch.hw;
    let warps = warps.max(1) as u64;
    // Warps.
    let by_warps = if warps * 32 > hw.max_threads_per_block as u64 {
        0
    } else {
        hw.max_warps_per_sm() as u64 / warps
    };
    // Registers.
    let unit = hw.reg_alloc_unit.max(1) as u64;
    let parts = hw.sub_partitions.max(1) as u64;
    let regs_per_warp = (regs_per_thread as u64 * 32).div_ceil(unit) * unit;
    let regs_per_block = regs_per_warp * warps;
    let regs_assumed = regs_per_warp * warps.div_ceil(parts) * parts;
    let by_regs = if regs_per_thread > hw.max_regs_per_thread
        || regs_assumed > hw.regs_per_block as u64
        || regs_per_block > hw.regs_per_block as u64
    {
        0
    } else if regs_per_warp == 0 {
        u64::MAX
    } else {
        (hw.regs_per_sm as u64 / parts / regs_per_warp) * parts / warps
    };
    // Shared memory.
    let sunit = hw.smem_alloc_unit.max(1) as u64;
    let charge = (smem + hw.smem_reserved_per_block as u64).div_ceil(sunit) * sunit;
    let by_smem = if charge > hw.smem_per_block_optin as u64 + hw.smem_reserved_per_block as u64 {
        0
    } else if charge == 0 {
        u64::MAX
    } else {
        hw.smem_per_sm as u64 / charge
    };
    let clamp = |x: u64| x.min(u32::MAX as u64) as u32;
    let limits = BlockLimits {
        warps: clamp(by_warps),
        registers: clamp(by_regs),
        shared_memory: clamp(by_smem),
        blocks: hw.max_blocks_per_sm,
    };
    let (blocks, limiter) = [
        (limits.warps, Limiter::Warps),
        (limits.registers, Limiter::Registers),
        (limits.shared_memory, Limiter::SharedMemory),
        (limits.blocks, Limiter::Blocks),
    ]
    .into_iter()
    .min_by_key(|c| c.0)
    .expect("four limits");
    let resident_warps = blocks as u64 * warps;
    Occupancy {
        blocks_per_unit: blocks,
        warps_per_unit: clamp(resident_warps),
        fraction: resident_warps as f64 / hw.max_warps_per_sm() as f64,
        limiter,
        limits,
        regs_per_block,
        smem_per_block: charge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(arch, warps, regs/thread, smem bytes) → (blocks, warps, limiters)`, each worked out by
    /// hand from the rules in the module docs (the arithmetic is in the comment).
    #[test]
    fn matches_cuda_rules_computed_by_hand() {
        use Limiter::*;
        let kb = 1024u64;
        #[rustfmt::skip]
        let cases: &[(&Arch, u32, u32, u64, u32, &[Limiter])] = &[
            // H100: 8 warps × 32 regs: 1024 regs/warp → 16 warps per sub-partition → 64 → 8
            // blocks; warps 64/8 = 8; smem 1 KB reserve → 228 blocks; blocks 32.
            (&Arch::H100, 8, 32, 0, 8, &[Warps, Registers]),
            // 64 regs: 2048/warp → 8 per sub-partition → 32 warps → 4 blocks.
            (&Arch::H100, 8, 64, 0, 4, &[Registers]),
            // 128 regs: 4096/warp → 4 per sub → 16 → 2 blocks; smem 96 KB + 1 KB = 99,328
            // → 233,472 / 99,328 = 2.35 → 2.
            (&Arch::H100, 8, 128, 96 * kb, 2, &[Registers, SharedMemory]),
            // 255 regs: 8160 → 8192/warp → 2 per sub → 8 warps → 1 block; the hardware check
            // 8192 × round_up(8, 4) = 65,536 ≤ 65,536 passes.
            (&Arch::H100, 8, 255, 0, 1, &[Registers]),
            // 32 warps × 64 regs: 2048 × 32 = 65,536 per block (fits); 8 per sub → 32 → 1.
            (&Arch::H100, 32, 64, 0, 1, &[Registers]),
            // 32 warps × 65 regs: 2080 → 2304/warp × 32 = 73,728 > 65,536: fits nowhere.
            (&Arch::H100, 32, 65, 0, 0, &[Registers]),
            // 3 warps × 40 regs: 1280/warp → 12 per sub → 48 warps → 16 blocks; warps 21.
            (&Arch::H100, 3, 40, 0, 16, &[Registers]),
            // 1 warp × 32 regs: warps 64, regs 64, blocks 32 → 32 blocks, 50%.
            (&Arch::H100, 1, 32, 0, 32, &[Blocks]),
            // 4 warps, 48 KB: 49,152 + 1,024 = 50,176 → 233,472 / 50,176 = 4.65 → 4.
            (&Arch::H100, 4, 32, 48 * kb, 4, &[SharedMemory]),
            // The opt-in maximum exactly: 227 KB + 1 KB = 233,472 ≤ 227 KB + 1 KB → 1 block.
            (&Arch::H100, 4, 32, 227 * kb, 1, &[SharedMemory]),
            // One byte more: 233,473 → 233,600 > 233,472: fits nowhere.
            (&Arch::H100, 4, 32, 227 * kb + 1, 0, &[SharedMemory]),
            // A100: 8 warps, 64 KB: 65,536 + 1,024 = 66,560 → 167,936 / 66,560 = 2.52 → 2.
            (&Arch::A100, 8, 32, 64 * kb, 2, &[SharedMemory]),
            // L40S (sm_89, 48 warps): 8 warps × 32 regs → warps 48/8 = 6; regs 8; smem 100.
            (&Arch::L40S, 8, 32, 0, 6, &[Warps]),
            // 4 warps × 24 regs: 768/warp → 21 per sub → 84 warps → 21 blocks; warps 12.
            (&Arch::L40S, 4, 24, 0, 12, &[Warps]),
            // 1 warp × 16 regs: 24 blocks (the sm_89 block limit), 24 of 48 warps.
            (&Arch::L40S, 1, 16, 0, 24, &[Blocks]),
            // 33 warps = 1,056 threads > 1,024 per block: fits nowhere.
            (&Arch::H100, 33, 16, 0, 0, &[Warps]),
        ];
        for &(arch, warps, regs, smem, blocks, limiters) in cases {
            let o = occupancy(arch, warps, regs, smem);
            let what = format!("{} {warps} warps {regs} regs {smem} B: {o:?}", arch.name);
            assert_eq!(o.blocks_per_unit, blocks, "{what}");
            assert_eq!(o.warps_per_unit, blocks * warps, "{what}");
            let frac = (blocks * warps) as f64 / arch.hw.max_warps_per_sm() as f64;
            assert!((o.fraction - frac).abs() < 1e-12, "{what}");
            assert_eq!(o.limiters(), limiters, "{what}");
        }
    }

    #[test]
    fn charges_include_the_reserve_and_the_allocation_units() {
        let o = occupancy(&Arch::A100, 8, 33, 1000);
        // 1000 + 1024 = 2024 → 2048 bytes; 33 × 32 = 1056 → 1280 registers per warp.
        assert_eq!(o.smem_per_block, 2048);
        assert_eq!(o.regs_per_block, 1280 * 8);
    }

    #[test]
    fn cpu_runs_one_block_per_core() {
        let o = occupancy(&Arch::cpu(2), 8, 1000, 1 << 20);
        assert_eq!((o.blocks_per_unit, o.fraction), (1, 1.0));
    }
}
