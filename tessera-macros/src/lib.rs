//! # tessera-macros — `#[tessera::kernel]` and `tile!`
//!
//! Thin by design: `tessera-front` turns syn trees into front-end ASTs and hands them to
//! `tessera-ir` (which owns every typing rule); `generate` quotes the static kernel
//! definitions. Errors are spanned `syn::Error`s; on error the macros still emit a stand-in item
//! with the same name so that one mistake does not cascade into "cannot find function" errors.
//!
//! Use these through the `tessera` crate (`tessera::kernel`, `tessera::tile!`): generated code
//! refers to `::tessera::...` paths only.

#![deny(missing_docs)]

mod generate;

use proc_macro::TokenStream;

/// Compiles an algebraic tensor function into a launchable kernel.
///
/// ```ignore
/// #[tessera::kernel]
/// fn linear_gelu(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>)
///     -> Tensor<f32, (M, N)>
/// {
///     gelu(x.matmul(w) + b)
/// }
/// // becomes: fn linear_gelu(x: &Tensor<bf16>, w: &Tensor<bf16>, b: &Tensor<f32>)
/// //              -> tessera::Result<Tensor<f32>>
/// // and  mod linear_gelu { pub static KERNEL: tessera::KernelDef = ...; }
/// //      (the definition: Graph IR, fused kernels, PTX; used by SPMD launches)
/// ```
///
/// A parameter typed `f32` (`eps: f32`) is a scalar parameter: the generated function takes it
/// by value, the graph sees a rank-0 `f32` tensor (see `tessera::scalar_arg`); as the `eps` of
/// `rmsnorm` / `layernorm` it is checked finite and > 0 at each call. Another type is a compile
/// error pointing at it.
///
/// A dim is a symbol (`M`, bound at launch; one name, one size) or a constant `Const<64>`
/// (`Tensor<f32, (M, 64)>` is not Rust syntax); a size that differs is an `Err` naming the
/// parameter, the dim and both sizes.
///
/// The generated function's docs state its shape contract (`x: f32[M, K]`, `w: f32[K, N]` →
/// `f32[M, N]`).
///
/// # Ops
///
/// Bodies are `let` bindings and a final expression of `+ - * /`, unary `-`, number literals
/// and calls (free or method form, receiver first) of these ops:
///
/// matmul, matmul_acc::\<T>, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu, abs, maximum,
/// minimum, sum, mean, amax, sum_keepdim, mean_keepdim, amax_keepdim, softmax, layernorm,
/// rmsnorm, transpose, t, cast::\<T>, causal_mask, attention, causal_attention, conv2d, fft,
/// ifft, fft2, ifft2, complex, real, pad, spectral_mul
///
/// (`tessera_front::lower::kernel::KERNEL_OPS`; `tests/ops_doc.rs` checks this list against it).
///
/// **Axes.** The reductions (`sum`, `mean`, `amax` and their `_keepdim` forms) take an axis
/// or a list of axes, `softmax` takes one axis or none (the last): `x.sum(0)`,
/// `mean_keepdim(x, [0, 2])`, `x.softmax(1)`, `softmax(x, -2)` — negative axes count from the
/// end; any axis of any rank. A reduction over one axis that is not the last runs as one
/// column-reduction kernel; a softmax along an inner axis runs as three kernels (a transpose-class
/// `permute` that moves the axis last, the row-wise softmax, the `permute` back); a reduction
/// over several axes runs one axis at a time.
///
/// `conv2d(x, w[, stride, padding[, dilation, groups]])` (NHWC input, HWIO weight, constant
/// spatial dims) runs as an implicit GEMM on every backend, with its elementwise epilogue
/// fused, f32 accumulation and output (not on PTX: fp8 inputs, and `deterministic` 16-bit
/// or `kahan_sum` convolutions, which are compile errors naming `im2col`).
///
/// The spectral ops run on every backend: `fft(x, axis)` / `ifft(x, axis)` (complex `x` as
/// interleaved `(re, im)` pairs in a last axis of 2; a constant power-of-two length up to 4096;
/// radix-2/4 Stockham on the CPU and a shared-memory Stockham in PTX), `fft2`/`ifft2`,
/// `complex`, `real`, `pad(x, [lo..], [hi..])`, `spectral_mul(x, w, groups)` and
/// `causal_mask` (also where no attention absorbs it). The `spectral_conv`
/// rewrite turns a `conv2d` into those ops where the cost model says so (large filters, stride
/// and dilation 1); every other `conv2d` runs as the implicit GEMM above.
///
/// # Options
///
/// Options: `#[tessera::kernel(numerics = "kahan_sum")]` (`fast`, `deterministic`, `kahan_sum`);
/// `precision = ".."`; `autotune(..)`; `precompiled = path`; `rewrites(..)`; `dims(D = 64)`;
/// `tile = (128, 128, 64)` pins the `(BM, BN, BK)` tile of the kernel's matmul and convolution
/// kernels (no autotuning for them). See `tessera_front::kernel_attr`.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    generate::kernel::expand(attr.into(), item.into()).into()
}

/// Defines an explicit block program (Triton-style) and a module to launch it.
///
/// See `tessera_ir::tile::dsl` for the grammar and the built-in functions.
#[proc_macro]
pub fn tile(input: TokenStream) -> TokenStream {
    generate::tile::expand(input.into()).into()
}
