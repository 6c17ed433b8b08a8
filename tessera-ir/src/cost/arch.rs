//! Architecture tables: the hardware limits the occupancy calculator and the pruner check, the
//! seeds' guideline values (preferences, never limits), and the peak rates the roofline uses.
//!
//! Two kinds of numbers live here and are kept apart on purpose:
//!
//! - [`HwLimits`]: what the hardware enforces, per CUDA compute capability, as the CUDA
//!   programming guide's "technical specifications per compute capability" table and
//!   `cuda_occupancy.h` state them (resident threads, blocks and registers per SM, the
//!   register allocation unit of 256 per warp and the 4 SM sub-partitions, shared memory per
//!   SM and the opt-in maximum per block, the 1 KB the driver reserves per block since
//!   Ampere, the 128-byte shared-memory allocation unit). A schedule over a hardware limit
//!   cannot run: it is pruned.
//! - [`Guidelines`]: the seeds' table A.2 (≤ 64 registers per thread ideal on H100, ≤ 96 KB of
//!   shared memory per block, ≥ 50% occupancy is enough). They are preferences: the ranking
//!   leans on them where predictions are close, and [`crate::cost::Estimate`] reports which a
//!   schedule exceeds, but a schedule over a guideline still runs and may win.
//!
//! The seeds' GB200 row gives 96 resident warps per SM; CUDA's table for compute capability
//! 10.0 gives 64 (2,048 threads), which is what the hardware enforces, so the hardware row
//! here says 64 and the seeds' figure is not used.
//!
//! The CPU row is this project's measured machine (DESIGN.md): f32 FMA ≈ 113 GFLOP/s per Zen 4
//! core, bf16 `vdpbf16ps` ≈ 228 GFLOP/s per core, ≈ 20 GB/s from memory for one core and
//! ≈ 30 GB/s for two.

use crate::schedule::Target;

/// Hardware limits of one CUDA compute capability (per SM unless named per block).
///
/// ```
/// use tessera_ir::cost::arch::HwLimits;
/// let h = HwLimits::SM90;
/// assert_eq!(h.max_warps_per_sm(), 64);
/// assert_eq!(h.smem_per_block_optin, 227 * 1024);   // the hardware's opt-in limit per block
/// assert_eq!(h.smem_reserved_per_block, 1024);      // reserved by the driver for every block
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HwLimits {
    /// `(major, minor)`.
    pub compute_capability: (u32, u32),
    /// Resident threads per SM (`maxThreadsPerMultiProcessor`).
    pub max_threads_per_sm: u32,
    /// Threads per block (`maxThreadsPerBlock`).
    pub max_threads_per_block: u32,
    /// Resident blocks per SM (`maxBlocksPerMultiProcessor`).
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM (`regsPerMultiprocessor`).
    pub regs_per_sm: u32,
    /// 32-bit registers one block may hold (`regsPerBlock`).
    pub regs_per_block: u32,
    /// Registers per thread a kernel may use; more spills to local memory.
    pub max_regs_per_thread: u32,
    /// Registers are allocated per warp in units of this many.
    pub reg_alloc_unit: u32,
    /// The register file is split evenly over this many sub-partitions (warp schedulers); a
    /// warp's registers come from one of them.
    pub sub_partitions: u32,
    /// Shared memory per SM at the largest carve-out (`sharedMemPerMultiprocessor`).
    pub smem_per_sm: u32,
    /// Shared memory one block may use after opting in (`sharedMemPerBlockOptin`).
    pub smem_per_block_optin: u32,
    /// Shared memory the driver reserves for every resident block (`reservedSharedMemPerBlock`).
    pub smem_reserved_per_block: u32,
    /// Shared memory is allocated per block in units of this many bytes.
    pub smem_alloc_unit: u32,
}

impl HwLimits {
    /// Compute capability 8.0 (A100).
    pub const SM80: HwLimits = HwLimits {
        compute_capability: (8, 0),
        max_threads_per_sm: 2048,
        max_threads_per_block: 1024,
        max_blocks_per_sm: 32,
        regs_per_sm: 65536,
        regs_per_block: 65536,
        max_regs_per_thread: 255,
        reg_alloc_unit: 256,
        sub_partitions: 4,
        smem_per_sm: 164 * 1024,
        smem_per_block_optin: 163 * 1024,
        smem_reserved_per_block: 1024,
        smem_alloc_unit: 128,
    };

    /// Compute capability 8.9 (Ada: L40S, RTX 40): 1,536 threads and 24 blocks per SM,
    /// 100 KB of shared memory per SM, 99 KB per block.
    pub const SM89: HwLimits = HwLimits {
        compute_capability: (8, 9),
        max_threads_per_sm: 1536,
        max_blocks_per_sm: 24,
        smem_per_sm: 100 * 1024,
        smem_per_block_optin: 99 * 1024,
        ..HwLimits::SM80
    };

    /// Compute capability 9.0 (H100): 228 KB of shared memory per SM, 227 KB per block.
    pub const SM90: HwLimits = HwLimits {
        compute_capability: (9, 0),
        smem_per_sm: 228 * 1024,
        smem_per_block_optin: 227 * 1024,
        ..HwLimits::SM80
    };

    /// Compute capability 10.0 (B200 / GB200): the same per-SM limits as 9.0.
    pub const SM100: HwLimits = HwLimits {
        compute_capability: (10, 0),
        ..HwLimits::SM90
    };

    /// Resident warps per SM.
    pub fn max_warps_per_sm(&self) -> u32 {
        self.max_threads_per_sm / 32
    }

    /// The most shared memory one block can be given (opt-in limit), bytes.
    pub fn max_smem_per_block(&self) -> u32 {
        self.smem_per_block_optin
    }
}

/// The seeds' guideline values (table A.2): what a schedule should aim for, not what the
/// hardware enforces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Guidelines {
    /// "Registers/thread (ideal)": above it fewer warps fit and latency hiding suffers.
    pub ideal_regs_per_thread: u32,
    /// "Shared memory/block": the size a block should stay within.
    pub preferred_smem_per_block: u32,
    /// "≥ 50% occupancy is enough if arithmetic intensity is high".
    pub enough_occupancy: f64,
}

/// One architecture's limits, guidelines and peak rates.
///
/// ```
/// use tessera_ir::cost::Arch;
/// assert_eq!(Arch::H100.hw.max_warps_per_sm(), 64);
/// assert_eq!(Arch::H100.hw.smem_per_block_optin, 227 * 1024);         // hardware
/// assert_eq!(Arch::H100.guide.preferred_smem_per_block, 96 * 1024);    // table A.2
/// assert_eq!(Arch::by_name("a100").unwrap().name, "a100");
/// assert!(Arch::cpu(2).peak_f32 > Arch::cpu(1).peak_f32);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    /// Short name; also the cache file's stem (`h100`, `a100`, `l40s`, `gb200`, `cpu`).
    pub name: &'static str,
    /// The target the row describes ([`Target::Ptx`] for a GPU, or [`Target::Cpu`]): what the
    /// occupancy and overhead rules follow.
    pub target: Target,
    /// SMs, or CPU cores in use.
    pub units: u32,
    /// What the hardware enforces (GPU rows; the CPU row fills it so that one block runs per
    /// core and the working-set limit is the per-core L2).
    pub hw: HwLimits,
    /// The seeds' guideline values: preferences for ranking, never limits.
    pub guide: Guidelines,
    /// Whole-chip peak FLOP/s with f32 inputs (CUDA cores / FMA units).
    pub peak_f32: f64,
    /// Whole-chip peak FLOP/s with 16-bit inputs (tensor cores / `vdpbf16ps`), dense.
    pub peak_16: f64,
    /// Memory bandwidth, bytes/s.
    pub bandwidth: f64,
    /// On-chip (shared memory / L1–L2) bandwidth, whole chip, bytes/s.
    pub onchip_bandwidth: f64,
    /// Fixed cost of one block (CPU: interpreting a program; GPU: block scheduling), seconds.
    pub block_overhead_s: f64,
    /// Fixed cost of one loop step inside a block (CPU: the interpreter's per-op work).
    pub step_overhead_s: f64,
}

/// The seeds' A.2 guidelines for Hopper-class parts (also used for Ampere and Ada, which the
/// table does not list).
const HOPPER_GUIDE: Guidelines = Guidelines {
    ideal_regs_per_thread: 64,
    preferred_smem_per_block: 96 * 1024,
    enough_occupancy: 0.5,
};

impl Arch {
    /// NVIDIA H100 SXM (sm_90a): 132 SMs; 989 TFLOP/s bf16 dense, 67 TFLOP/s f32, 3.35 TB/s.
    pub const H100: Arch = Arch {
        name: "h100",
        target: Target::Ptx,
        units: 132,
        hw: HwLimits::SM90,
        guide: HOPPER_GUIDE,
        peak_f32: 67e12,
        peak_16: 989e12,
        bandwidth: 3.35e12,
        onchip_bandwidth: 33e12,
        block_overhead_s: 1e-7,
        step_overhead_s: 2e-8,
    };

    /// NVIDIA A100 SXM (sm_80): 108 SMs; 312 TFLOP/s bf16 dense, 19.5 TFLOP/s f32, 2.04 TB/s.
    pub const A100: Arch = Arch {
        name: "a100",
        target: Target::Ptx,
        units: 108,
        hw: HwLimits::SM80,
        guide: HOPPER_GUIDE,
        peak_f32: 19.5e12,
        peak_16: 312e12,
        bandwidth: 2.04e12,
        onchip_bandwidth: 19e12,
        block_overhead_s: 1e-7,
        step_overhead_s: 2e-8,
    };

    /// NVIDIA L40S (sm_89, Ada): 142 SMs; 362 TFLOP/s bf16 dense, 91.6 TFLOP/s f32,
    /// 864 GB/s.
    pub const L40S: Arch = Arch {
        name: "l40s",
        target: Target::Ptx,
        units: 142,
        hw: HwLimits::SM89,
        guide: HOPPER_GUIDE,
        peak_f32: 91.6e12,
        peak_16: 362e12,
        bandwidth: 0.864e12,
        onchip_bandwidth: 20e12,
        block_overhead_s: 1e-7,
        step_overhead_s: 2e-8,
    };

    /// NVIDIA GB200 (one Blackwell GPU of the superchip, compute capability 10.0): 148 SMs,
    /// 2.5 PFLOP/s bf16 dense, 80 TFLOP/s f32, 8 TB/s. Guidelines from table A.2: ≤ 48
    /// registers per thread, ≤ 128 KB of shared memory per block.
    pub const GB200: Arch = Arch {
        name: "gb200",
        target: Target::Ptx,
        units: 148,
        hw: HwLimits::SM100,
        guide: Guidelines {
            ideal_regs_per_thread: 48,
            preferred_smem_per_block: 128 * 1024,
            enough_occupancy: 0.5,
        },
        peak_f32: 80e12,
        peak_16: 2.5e15,
        bandwidth: 8e12,
        onchip_bandwidth: 40e12,
        block_overhead_s: 1e-7,
        step_overhead_s: 2e-8,
    };

    /// The CPU this project measures on, with `cores` cores busy (DESIGN.md): 113 GFLOP/s f32
    /// and 228 GFLOP/s bf16 per core, 20 GB/s for one core (30 GB/s for two or more), a 1 MB L2
    /// per core for a block's tiles. The per-block and per-step overheads are the CPU backend's
    /// interpreter costs, fitted to `cargo bench --bench autotune` sweeps.
    pub fn cpu(cores: u32) -> Arch {
        let cores = cores.max(1);
        Arch {
            name: "cpu",
            target: Target::Cpu,
            units: cores,
            hw: HwLimits {
                compute_capability: (0, 0),
                max_threads_per_sm: 32,
                max_threads_per_block: u32::MAX,
                max_blocks_per_sm: 1,
                regs_per_sm: u32::MAX,
                regs_per_block: u32::MAX,
                max_regs_per_thread: u32::MAX,
                reg_alloc_unit: 1,
                sub_partitions: 1,
                smem_per_sm: 1024 * 1024,
                smem_per_block_optin: 1024 * 1024,
                smem_reserved_per_block: 0,
                smem_alloc_unit: 1,
            },
            guide: Guidelines {
                ideal_regs_per_thread: u32::MAX,
                preferred_smem_per_block: 1024 * 1024,
                enough_occupancy: 1.0,
            },
            peak_f32: 113e9 * cores as f64,
            peak_16: 228e9 * cores as f64,
            bandwidth: if cores == 1 { 20e9 } else { 30e9 },
            onchip_bandwidth: 150e9 * cores as f64,
            block_overhead_s: 2e-6,
            step_overhead_s: 0.4e-6,
        }
    }

    /// The row the cost model uses for a PTX target: A100 for `sm_80`, L40S for `sm_89`,
    /// H100 for `sm_90a`.
    ///
    /// ```
    /// use tessera_ir::cost::Arch;
    /// use tessera_ir::target::ptx::Arch as Ptx;
    /// assert_eq!(Arch::for_target(Ptx::Sm90a).name, "h100");
    /// assert_eq!(Arch::for_target(Ptx::Sm89).name, "l40s");
    /// assert_eq!(Arch::for_target(Ptx::Sm80).name, "a100");
    /// ```
    pub fn for_target(t: crate::target::ptx::Arch) -> Arch {
        match t {
            crate::target::ptx::Arch::Sm90a => Arch::H100,
            crate::target::ptx::Arch::Sm89 => Arch::L40S,
            crate::target::ptx::Arch::Sm80 => Arch::A100,
        }
    }

    /// The GPU rows plus a one-core CPU.
    pub fn all() -> Vec<Arch> {
        vec![
            Arch::H100,
            Arch::A100,
            Arch::L40S,
            Arch::GB200,
            Arch::cpu(1),
        ]
    }

    /// Looks a row up by name (`h100`, `a100`, `l40s`, `gb200`, `cpu`; the CPU with one core).
    pub fn by_name(name: &str) -> Option<Arch> {
        Arch::all().into_iter().find(|a| a.name == name)
    }

    /// The most shared memory (CPU: tile working set) one block can use, bytes: the
    /// hardware's opt-in limit on GPUs, the per-core L2 on the CPU.
    pub fn block_smem_limit(&self) -> u64 {
        self.hw.smem_per_block_optin as u64
    }
}
