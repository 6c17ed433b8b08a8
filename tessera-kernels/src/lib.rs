//! # tessera-kernels — the operator library
//!
//! Every operator here is written with `#[tessera::kernel]`: the body is algebra, the compiler
//! fuses and tiles it, and the call checks shapes at run time.
//!
//! ```
//! use tessera::Tensor;
//! let x = Tensor::<f32>::randn(&[3, 4], 1);
//! let w = Tensor::<f32>::randn(&[4, 5], 2);
//! let y = tessera_kernels::matmul(&x, &w)?;
//! assert_eq!(y.shape(), &[3, 5]);
//! # Ok::<(), tessera::Error>(())
//! ```

#![deny(missing_docs)]

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod fft;
pub mod linalg;
pub mod norm;
pub mod ptx;
pub mod tiled;

pub use attention::attention;
pub use conv::{conv2d, depthwise_conv2d};
pub use elementwise::{add, gelu, mul};
pub use fft::{fft, ifft};
pub use linalg::{
    linear_bias_gelu, linear_bias_gelu_bf16_f32, matmul, matmul_batched, matmul_bf16_f32,
};
pub use norm::{layernorm, rmsnorm, softmax};
