//! Elementwise operators (broadcasting a row vector over a matrix where shapes say so).

/// `x + y`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn add(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    x + y
}

/// `x * y` with `y` a row vector broadcast over the rows.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn mul(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    x * y
}

/// Exact GELU.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn gelu(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    gelu(x)
}
