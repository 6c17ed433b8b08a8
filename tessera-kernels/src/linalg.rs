//! Matrix products, plain and with fused epilogues. The generic ones take f32, bf16 or f16
//! operands and accumulate in f32 (Graph IR: `matmul .. acc=f32`), rounding the result once
//! to `T` in the epilogue.

/// `x · w`, accumulated in f32, returned as `T`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn matmul<T: Float>(x: Tensor<T, (M, K)>, w: Tensor<T, (K, N)>) -> Tensor<T, (M, N)> {
    x.matmul(w).cast::<T>()
}

/// `x · w` with bf16 inputs, accumulated and returned in f32.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn matmul_bf16_f32(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

/// Batched `a[b] · c[b]`, accumulated in f32, returned as `T`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn matmul_batched<T: Float>(
    a: Tensor<T, (B, M, K)>,
    c: Tensor<T, (B, K, N)>,
) -> Tensor<T, (B, M, N)> {
    a.matmul(c).cast::<T>()
}

/// `gelu(x · w + b)` as one fused kernel: `T` operands, f32 accumulation and bias, the result
/// rounded once to `T`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn linear_bias_gelu<T: Float>(
    x: Tensor<T, (M, K)>,
    w: Tensor<T, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<T, (M, N)> {
    gelu(x.matmul(w) + b).cast::<T>()
}

/// `gelu(x · w + b)` as one fused kernel: bf16 inputs, f32 accumulation and output.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn linear_bias_gelu_bf16_f32(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}
