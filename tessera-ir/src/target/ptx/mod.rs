//! PTX emission: Tile IR → PTX text for `sm_80`, `sm_89` and `sm_90a`.
//!
//! Two emitters share one ABI (`abi`):
//! - `gemm`: the tensor-core matmul template (ldmatrix + `mma.sync`, `cp.async` pipeline) for
//!   kernels of the matmul class, with the epilogue applied per accumulator element;
//! - `generic`: any verified Tile IR, with a fixed row-per-warp layout for tiles, warp shuffles
//!   for row reductions and shared memory for layout changes.
//!
//! The emitter takes the verifier's result ([`crate::tile::verify`] is run first), so
//! unverified IR is never emitted.

mod abi;
mod arch;
pub(crate) mod asm;
mod gemm;
mod launch;
pub(crate) mod math;

pub use abi::{PtxKernel, entry_signature, header, ident, params_of};
pub use arch::Arch;
pub use launch::{parse_launch, print_launch};

/// Why a kernel could not be emitted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kernel}: {message}")]
pub struct EmitError {
    /// The kernel's name.
    pub kernel: String,
    /// Why it cannot be emitted, in words.
    pub message: String,
}

mod generic;

use crate::schedule::Schedule;
use crate::tile::{self, Kernel};

/// Emits PTX for a kernel: the tensor-core template where it applies, else the generic
/// emitter. The kernel is verified first; unverified IR is never emitted.
///
/// ```
/// use tessera_ir::{graph, pipeline, target::ptx};
/// let g = graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}").unwrap();
/// let c = pipeline::compile(&g, &Default::default()).unwrap();
/// let k = &c.kernels[0];
/// let p = ptx::emit(&k.lowered.kernel, &k.schedule, ptx::Arch::Sm80).unwrap();
/// assert!(p.text.contains(".target sm_80") && p.text.contains("shfl.sync.bfly"));
/// // A CPU-only schedule (the CPU's row-wise `[8, 4096]`) is refused, naming the PTX limit.
/// let s = tessera_ir::schedule::Schedule::cpu_default(k.fused.class, pipeline::kernel_dtype(&c.graph, &k.fused));
/// let l = c.lower_on(0, &s, tessera_ir::schedule::Target::Cpu).unwrap();
/// let e = ptx::emit(&l.kernel, &s, ptx::Arch::Sm80).unwrap_err().to_string();
/// assert!(e.contains("is not a PTX schedule: tile[1] = 4096 exceeds the PTX limit 1024"), "{e}");
/// ```
pub fn emit(k: &Kernel, s: &Schedule, arch: Arch) -> Result<PtxKernel, EmitError> {
    crate::invocations::emitted();
    tile::verify(k).map_err(|e| EmitError {
        kernel: k.name.clone(),
        message: format!("unverified Tile IR:\n{e}"),
    })?;
    // A CPU-only schedule (a tile past the PTX limit) never reaches a GPU.
    crate::schedule::verify(s).map_err(|e| EmitError {
        kernel: k.name.clone(),
        message: format!("`{s}` is not a PTX schedule: {}", e.join("; ")),
    })?;
    supports(k, arch)?;
    if let Some(p) = gemm::emit(k, s, arch)? {
        return Ok(p);
    }
    generic::emit(k, s.warps, s.vector, arch)
}

/// Whether kernel `k` can run on `arch`: fp8 tensors and tiles need `sm_89` or newer (the fp8
/// `cvt` and `mma.sync` forms). The error names the kernel, the dtype and the arch.
///
/// ```
/// use tessera_ir::{graph, pipeline, target::ptx::{Arch, supports}};
/// let g = graph::parse("graph @q(%x: f32[R, C]) -> f8e4m3[R, C] {\n  %1 = cast %x : f8e4m3[R, C]\n  return %1\n}").unwrap();
/// let k = &pipeline::compile(&g, &Default::default()).unwrap().kernels[0].lowered.kernel;
/// assert!(supports(k, Arch::Sm89).is_ok());
/// assert!(supports(k, Arch::Sm80).unwrap_err().to_string().contains("sm_89"));
/// ```
pub fn supports(k: &Kernel, arch: Arch) -> Result<(), EmitError> {
    let fp8 = k
        .params
        .iter()
        .map(|p| p.dtype)
        .chain(k.types.iter().map(|t| t.dtype))
        .find(|d| crate::fp8::Fp8::of(*d).is_some());
    match fp8 {
        Some(d) if arch < Arch::Sm89 => Err(EmitError {
            kernel: k.name.clone(),
            message: format!("{d} needs sm_89 or newer (fp8 `cvt` and `mma`); {arch} has no fp8"),
        }),
        _ => Ok(()),
    }
}
