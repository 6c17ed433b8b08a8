//! # Tessera — GPU kernels as annotated Rust functions
//!
//! Write a kernel in algebraic form and call it like a function:
//!
//! ```
//! use tessera::prelude::*;
//!
//! #[tessera::kernel]
//! fn linear_gelu(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
//!     gelu(x.matmul(w) + b)
//! }
//!
//! let x = Tensor::<f32>::randn(&[5, 7], 1);
//! let w = Tensor::<f32>::randn(&[7, 3], 2);
//! let b = Tensor::<f32>::randn(&[3], 3);
//! let y = linear_gelu(&x, &w, &b)?;           // one fused kernel on the default device
//! assert_eq!(y.shape(), &[5, 3]);
//! assert!(linear_gelu(&x, &x, &b).is_err());   // K = 7 but `w` has 5 rows: an error, not a panic
//! # Ok::<(), tessera::Error>(())
//! ```
//!
//! A parameter typed `f32` instead of `Tensor<..>` is a **scalar parameter**, passed by value:
//!
//! ```
//! use tessera::prelude::*;
//!
//! #[tessera::kernel]
//! fn norm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, eps: f32, alpha: f32) -> Tensor<f32, (R, C)> {
//!     rmsnorm(x, g, eps) * alpha
//! }
//!
//! let x = Tensor::<f32>::randn(&[4, 6], 1);
//! let g = Tensor::<f32>::from_vec(vec![1.0; 6], &[6])?;
//! let y = norm(&x, &g, 1e-5, 0.5)?;
//! assert_eq!(y.shape(), &[4, 6]);
//! let e = norm(&x, &g, -1.0, 0.5).unwrap_err();   // an eps must be finite and > 0
//! assert!(e.to_string().contains("scalar `eps` is -1"));
//! # Ok::<(), tessera::Error>(())
//! ```
//!
//! It is a rank-0 `f32` tensor in the graph, placed on the device of the first tensor argument
//! at each call ([`scalar_arg`]; one 4-byte upload on a GPU or the simulator), and takes the
//! element type of the tensor it meets, as a number literal does. As the `eps` of `rmsnorm` /
//! `layernorm` it must be finite and > 0 (checked at each call, and by `KERNEL.launch` for a
//! rank-0 tensor passed in its place); there the op is built from its primitives
//! (`mean_keepdim`, `rsqrt`, ...), which fusion runs as one row-wise kernel (a *row program*,
//! `tessera_ir::fuse::row_programs`), as it does the same norms written by hand. Anywhere else
//! any `f32` is accepted, NaN and infinities included.
//!
//! A constant dim is written `Const<64>` (Rust's parser takes no integer in a type tuple);
//! a tensor whose size differs is an error naming the parameter, the dim and both sizes:
//!
//! ```
//! use tessera::prelude::*;
//!
//! #[tessera::kernel]
//! fn head(x: Tensor<f32, (M, Const<4>)>, w: Tensor<f32, (Const<4>, N)>) -> Tensor<f32, (M, N)> {
//!     x.matmul(w)
//! }
//!
//! let w = Tensor::<f32>::randn(&[4, 2], 2);
//! assert_eq!(head(&Tensor::randn(&[3, 4], 1), &w)?.shape(), &[3, 2]);
//! let e = head(&Tensor::randn(&[3, 5], 1), &w).unwrap_err();
//! assert_eq!(e.to_string(), "kernel `head`: `x` must have shape [M, 4]: dim 1 must be 4, got 5 (shape [3, 5])");
//! # Ok::<(), tessera::Error>(())
//! ```
//!
//! The pipeline: `#[kernel]` body → Graph IR → fusion → Schedule IR → Tile IR (all in
//! [`ir`], at compile time) → a backend at run time. The CPU backend runs Tile IR on a rayon
//! grid with SIMD micro-kernels.
//!
//! **Architecture invariant:** semantics live in `tessera-ir`; this crate binds shapes, owns
//! memory and runs kernels.

#![deny(missing_docs)]

pub mod autotune;
pub mod backend;
mod device;
mod env;
mod error;
mod grad;
mod launch;
pub mod numerics;
pub mod tensor;

/// The JIT PTX cache: modules of schedules nothing precompiled, compiled once and kept in
/// memory and in `<cache dir>/ptx/`.
pub mod ptx_cache {
    pub use crate::launch::jit::{PtxCacheStats, clear_memory, dir, stats};
}

/// The bounded cache of large freed host blocks that CPU launches take their outputs from
/// (`TESSERA_HOST_CACHE`, default 1/8 of the process's memory, at least 1 GiB).
pub mod host_cache {
    pub use crate::tensor::host_cache::{
        HostCacheStats, MIN_BLOCK, MIN_DEFAULT_CAPACITY, capacity, default_capacity, release,
        set_capacity, stats,
    };
}

pub use backend::gpu::stats::{DeviceStats, MemoryStats, TransferStats};
pub use device::{Device, Event};
pub use env::reload_env;
pub use error::{Error, Result};
pub use grad::{Grad, grad, grad_wrt};
pub use half::{bf16, f16};
pub use launch::{
    Arg, EmbeddedPtx, KernelDef, KernelFamily, KernelInstance, LaunchedKernel, PrecompiledPtx,
    TileDef, TileParam, last_launch, scalar_arg,
};
pub use tensor::{
    Data, DataMut, DeviceBuffer, Element, Float, Fp8, Tensor, TensorMut, TensorRef, f8e4m3, f8e5m2,
};
pub use tessera_ir as ir;
pub use tessera_ir::{DType, NumericsPolicy, Precision};
pub use tessera_macros::{kernel, tile};

/// Everything a kernel author needs in scope.
pub mod prelude {
    pub use crate::{Device, Element, Float, Fp8, Tensor, bf16, f8e4m3, f8e5m2, f16};
}
