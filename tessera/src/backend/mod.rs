//! Backends that run Tile IR. `cpu` is always available.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod gpu;
pub mod sim;

/// True when a CUDA driver library is present (always false without the `cuda` feature).
pub fn cuda_driver_present() -> bool {
    #[cfg(feature = "cuda")]
    {
        cuda::driver_present()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

use tessera_ir::DType;

/// A kernel argument as the CPU backend (and the simulator's executor) sees it: a view shape
/// over raw host bytes.
///
/// Inputs are read-only; the launcher guarantees outputs do not alias inputs.
#[derive(Clone, Copy, Debug)]
pub struct Buffer {
    /// The element type.
    pub dtype: DType,
    /// The shape at the kernel parameter's view rank.
    pub shape: [usize; 3],
    /// How many of `shape`'s dims are the view's (at most 3); the rest are 1.
    pub rank: usize,
    /// Host address of the first element (valid for `len` bytes for the launch).
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    /// True for an output (the kernel may write it).
    pub writable: bool,
}

// SAFETY: a Buffer is a view handed to kernel programs; programs of one launch write disjoint
// elements (the lowering guarantees it for compiled kernels; for `tile!` kernels overlapping
// stores are a bug, as on a GPU).
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    /// The view's dims.
    pub fn dims(&self) -> &[usize] {
        &self.shape[..self.rank]
    }
}
