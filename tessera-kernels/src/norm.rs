//! Row-wise normalisations over the last axis, one generic definition each for f32, bf16 and
//! f16. Whatever `T` is, the op computes and accumulates in f32 (its Graph IR result type:
//! `softmax %x : f32[R, C]` for a bf16 `%x`) and the result is rounded once to `T` by a cast
//! fused into the kernel's epilogue (`cast %1 : bf16[R, C]`).

/// Softmax over the last axis.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn softmax<T: Float>(x: Tensor<T, (R, C)>) -> Tensor<T, (R, C)> {
    softmax(x).cast::<T>()
}

/// Layer normalisation over the last axis with scale and shift, `eps = 1e-5`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn layernorm<T: Float>(
    x: Tensor<T, (R, C)>,
    gamma: Tensor<T, (C,)>,
    beta: Tensor<T, (C,)>,
) -> Tensor<T, (R, C)> {
    layernorm(x, gamma, beta, 1e-5).cast::<T>()
}

/// RMS normalisation over the last axis with scale, `eps = 1e-6`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn rmsnorm<T: Float>(x: Tensor<T, (R, C)>, gamma: Tensor<T, (C,)>) -> Tensor<T, (R, C)> {
    rmsnorm(x, gamma, 1e-6).cast::<T>()
}
