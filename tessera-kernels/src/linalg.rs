//! Matrix products, plain and with fused epilogues.

/// `x · w` in f32.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn matmul(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

/// `x · w` with bf16 inputs, accumulated and returned in f32.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn matmul_bf16(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

/// Batched `a[b] · c[b]` in f32.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn matmul_batched(
    a: Tensor<f32, (B, M, K)>,
    c: Tensor<f32, (B, K, N)>,
) -> Tensor<f32, (B, M, N)> {
    a.matmul(c)
}

/// `gelu(x · w + b)` as one fused kernel, f32.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn linear_bias_gelu(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

/// `gelu(x · w + b)` as one fused kernel: bf16 inputs, f32 accumulation and output.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn linear_bias_gelu_bf16(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}
