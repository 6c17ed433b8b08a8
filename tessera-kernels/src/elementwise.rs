//! Elementwise operators (broadcasting a row vector over a matrix where shapes say so), one
//! generic definition each for f32, bf16 and f16. Each op computes in f32 and rounds its result
//! once to `T`.

/// `x + y`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn add<T: Float>(x: Tensor<T, (R, C)>, y: Tensor<T, (R, C)>) -> Tensor<T, (R, C)> {
    x + y
}

/// `x * y` with `y` a row vector broadcast over the rows.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn mul<T: Float>(x: Tensor<T, (R, C)>, y: Tensor<T, (C,)>) -> Tensor<T, (R, C)> {
    x * y
}

/// Exact GELU.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn gelu<T: Float>(x: Tensor<T, (R, C)>) -> Tensor<T, (R, C)> {
    gelu(x)
}
