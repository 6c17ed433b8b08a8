//! Build-time PTX of a kernel library: a table of modules, one per (kernel, schedule, arch),
//! that a crate's `build.rs` generates (see `tessera-kernels/build.rs`) and hands to its
//! kernels with `#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]`. A launch on a PTX
//! device whose schedule is in the table (an autotuned winner, a candidate) loads the module
//! from it instead of compiling; schedules outside it go to the JIT cache.

use super::gpu::EmbeddedPtx;
use tessera_ir::target::ptx::Arch;

/// One precompiled module.
#[derive(Clone, Copy, Debug)]
pub struct PrecompiledPtx {
    /// The `#[kernel]` fn it belongs to.
    pub kernel: &'static str,
    /// The fused kernel inside it (`<fn>_k<i>`).
    pub fused: &'static str,
    /// The Schedule IR text of the candidate.
    pub schedule: &'static str,
    /// `sm_80`, `sm_89` or `sm_90a`.
    pub arch: &'static str,
    /// A file name unique to this module.
    pub file: &'static str,
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory bytes.
    pub dyn_smem: u32,
    /// The launch header (`tessera_ir::target::ptx::print_launch`).
    pub launch: &'static str,
    /// The module text.
    pub text: &'static str,
}

/// The entry of `table` for (kernel, fused kernel, schedule, arch), if any.
pub(crate) fn find(
    table: &'static [PrecompiledPtx],
    kernel: &str,
    fused: &str,
    schedule: &str,
    arch: Arch,
) -> Option<EmbeddedPtx> {
    table
        .iter()
        .find(|p| {
            p.kernel == kernel
                && p.fused == fused
                && p.schedule == schedule
                && p.arch == arch.target()
        })
        .map(|p| EmbeddedPtx {
            launch: p.launch,
            text: p.text,
        })
}
