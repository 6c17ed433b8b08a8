//! Row-wise normalisations over the last axis.

/// Softmax over the last axis.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

/// Layer normalisation over the last axis with scale and shift, `eps = 1e-5`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn layernorm(
    x: Tensor<f32, (R, C)>,
    gamma: Tensor<f32, (C,)>,
    beta: Tensor<f32, (C,)>,
) -> Tensor<f32, (R, C)> {
    layernorm(x, gamma, beta, 1e-5)
}

/// RMS normalisation over the last axis with scale, `eps = 1e-6`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn rmsnorm(x: Tensor<f32, (R, C)>, gamma: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    rmsnorm(x, gamma, 1e-6)
}
