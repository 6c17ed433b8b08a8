//! Reference semantics in f64: the oracle every backend and every rewrite is tested against.
//!
//! [`ops`] holds one function per op on row-major `f64` data with explicit shapes (attention,
//! convolution, the DFT, …); [`eval()`] runs a whole Graph IR on concrete inputs with them. The
//! reference computes exactly in f64: casts between float types are the identity (the
//! mathematical value, not its rounding), so a gradient checker can difference it.
//!
//! ```
//! use tessera_ir::reference::{Tensor64, eval};
//! let g = tessera_ir::graph::parse("graph @k(%x: f32[M, K], %w: f32[K, N]) -> f32[M, N] {
//!   %2 = matmul %x, %w : f32[M, N]
//!   %3 = relu %2 : f32[M, N]
//!   return %3
//! }").unwrap();
//! let x = Tensor64::new(vec![1, 2], vec![1.0, -2.0]);
//! let w = Tensor64::new(vec![2, 2], vec![1.0, 0.0, 1.0, 1.0]);
//! let y = eval(&g, &[x, w]).unwrap();
//! assert_eq!((y.shape, y.data), (vec![1, 2], vec![0.0, 0.0]));
//! ```

mod eval;
pub mod ops;

pub use eval::{Tensor64, eval, eval_all};

/// Complementary error function in f64 (from `libm`).
pub fn erfc(x: f64) -> f64 {
    libm::erfc(x)
}
