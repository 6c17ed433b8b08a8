//! Architecture tables: the limits the occupancy calculator and the pruner check, and the peak
//! rates the roofline uses.
//!
//! GPU rows follow the seeds' table A.2 (max warps per SM, the ideal registers per thread, the
//! shared memory a block may use) completed with the vendors' public figures (SM count, register
//! file, dense peak FLOP/s, HBM bandwidth). The CPU row is this project's measured machine
//! (DESIGN.md): f32 FMA ≈ 113 GFLOP/s per Zen 4 core, bf16 `vdpbf16ps` ≈ 228 GFLOP/s per core,
//! ≈ 20 GB/s from memory for one core and ≈ 30 GB/s for two.

/// What kind of machine a row describes; decides which limits apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArchKind {
    /// SMs with warps, a register file and shared memory.
    Gpu,
    /// Cores running one block at a time from a rayon pool; the "shared memory" limit is the
    /// per-core L2 a block's tiles should fit in.
    Cpu,
}

/// One architecture's limits and peak rates.
///
/// ```
/// use tessera_ir::cost::Arch;
/// assert_eq!(Arch::H100.max_warps_per_unit, 64);       // table A.2
/// assert_eq!(Arch::GB200.smem_per_block, 128 * 1024);  // table A.2
/// assert_eq!(Arch::by_name("a100").unwrap().name, "a100");
/// assert!(Arch::cpu(2).peak_f32 > Arch::cpu(1).peak_f32);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    /// Short name; also the cache file's stem (`h100`, `a100`, `gb200`, `cpu`).
    pub name: &'static str,
    pub kind: ArchKind,
    /// SMs, or CPU cores in use.
    pub units: u32,
    /// Resident warps per SM (CPU: 1, one block per core at a time).
    pub max_warps_per_unit: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_unit: u32,
    /// 32-bit registers per SM.
    pub regs_per_unit: u32,
    /// Hard cap per thread; more spills to local memory (the pruner rejects it).
    pub max_regs_per_thread: u32,
    /// Table A.2's "registers/thread (ideal)": above it occupancy suffers.
    pub ideal_regs_per_thread: u32,
    /// Shared memory one block may use, bytes (CPU: the per-core L2 its tiles should fit in).
    pub smem_per_block: u32,
    /// Shared memory per SM, bytes.
    pub smem_per_unit: u32,
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

impl Arch {
    /// NVIDIA H100 SXM (sm_90a): 132 SMs, 64 warps/SM, ≤ 64 regs/thread ideal, ≤ 96 KB shared
    /// memory per block (table A.2); 989 TFLOP/s bf16 dense, 67 TFLOP/s f32, 3.35 TB/s.
    pub const H100: Arch = Arch {
        name: "h100",
        kind: ArchKind::Gpu,
        units: 132,
        max_warps_per_unit: 64,
        max_blocks_per_unit: 32,
        regs_per_unit: 65536,
        max_regs_per_thread: 255,
        ideal_regs_per_thread: 64,
        smem_per_block: 96 * 1024,
        smem_per_unit: 228 * 1024,
        peak_f32: 67e12,
        peak_16: 989e12,
        bandwidth: 3.35e12,
        onchip_bandwidth: 33e12,
        block_overhead_s: 1e-7,
        step_overhead_s: 2e-8,
    };

    /// NVIDIA A100 SXM (sm_80): 108 SMs, 64 warps/SM, 164 KB shared memory per SM (up to
    /// 163 KB per block); 312 TFLOP/s bf16 dense, 19.5 TFLOP/s f32, 2.04 TB/s.
    pub const A100: Arch = Arch {
        name: "a100",
        kind: ArchKind::Gpu,
        units: 108,
        max_warps_per_unit: 64,
        max_blocks_per_unit: 32,
        regs_per_unit: 65536,
        max_regs_per_thread: 255,
        ideal_regs_per_thread: 64,
        smem_per_block: 163 * 1024,
        smem_per_unit: 164 * 1024,
        peak_f32: 19.5e12,
        peak_16: 312e12,
        bandwidth: 2.04e12,
        onchip_bandwidth: 19e12,
        block_overhead_s: 1e-7,
        step_overhead_s: 2e-8,
    };

    /// NVIDIA GB200 (one Blackwell GPU of the superchip): 96 warps/SM, ≤ 48 regs/thread
    /// ideal, ≤ 128 KB shared memory per block (table A.2); 148 SMs, 2.5 PFLOP/s bf16 dense,
    /// 80 TFLOP/s f32, 8 TB/s. The register file is the one table A.2 implies (96 warps × 32
    /// lanes × 48 registers = 147,456), not the 65,536 of earlier parts.
    pub const GB200: Arch = Arch {
        name: "gb200",
        kind: ArchKind::Gpu,
        units: 148,
        max_warps_per_unit: 96,
        max_blocks_per_unit: 32,
        regs_per_unit: 96 * 32 * 48,
        max_regs_per_thread: 255,
        ideal_regs_per_thread: 48,
        smem_per_block: 128 * 1024,
        smem_per_unit: 228 * 1024,
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
            kind: ArchKind::Cpu,
            units: cores,
            max_warps_per_unit: 1,
            max_blocks_per_unit: 1,
            regs_per_unit: u32::MAX,
            max_regs_per_thread: u32::MAX,
            ideal_regs_per_thread: u32::MAX,
            smem_per_block: 1024 * 1024,
            smem_per_unit: 1024 * 1024,
            peak_f32: 113e9 * cores as f64,
            peak_16: 228e9 * cores as f64,
            bandwidth: if cores == 1 { 20e9 } else { 30e9 },
            onchip_bandwidth: 150e9 * cores as f64,
            block_overhead_s: 2e-6,
            step_overhead_s: 0.4e-6,
        }
    }

    /// The row the cost model uses for a PTX target: A100 for `sm_80`, H100 for `sm_90a`, and
    /// for `sm_89` (Ada, which table A.2 lacks) the A100 row, the nearest in SMs, registers
    /// and shared memory per SM — its bandwidth is about half an A100's, so memory-bound
    /// predictions there are optimistic.
    ///
    /// ```
    /// use tessera_ir::cost::Arch;
    /// use tessera_ir::target::ptx::Arch as Ptx;
    /// assert_eq!(Arch::for_target(Ptx::Sm90a).name, "h100");
    /// assert_eq!(Arch::for_target(Ptx::Sm80).name, "a100");
    /// ```
    pub fn for_target(t: crate::target::ptx::Arch) -> Arch {
        match t {
            crate::target::ptx::Arch::Sm90a => Arch::H100,
            crate::target::ptx::Arch::Sm80 | crate::target::ptx::Arch::Sm89 => Arch::A100,
        }
    }

    /// The GPU rows plus a one-core CPU.
    pub fn all() -> Vec<Arch> {
        vec![Arch::H100, Arch::A100, Arch::GB200, Arch::cpu(1)]
    }

    /// Looks a row up by name (`h100`, `a100`, `gb200`, `cpu`; the CPU with one core).
    pub fn by_name(name: &str) -> Option<Arch> {
        Arch::all().into_iter().find(|a| a.name == name)
    }
}
