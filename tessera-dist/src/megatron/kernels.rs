//! The kernels a transformer block runs on each device: plain `#[tessera::kernel]`s, launched
//! unchanged on a device's shards (the parallel structure lives in `block.rs`).

/// `x · w` (the column- and row-parallel linear layers).
#[tessera::kernel]
pub fn linear(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

/// `gelu(x · w)` (the MLP's column-parallel first layer, Standard blocks).
#[tessera::kernel]
pub fn linear_gelu(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w))
}

/// `relu(x · w)` (the MLP's first layer, Exact blocks: integers stay integers).
#[tessera::kernel]
pub fn linear_relu(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    relu(x.matmul(w))
}

/// Layer normalisation over the model dim (eps 1e-5).
#[tessera::kernel]
pub fn layer_norm(
    x: Tensor<f32, (R, C)>,
    gamma: Tensor<f32, (C,)>,
    beta: Tensor<f32, (C,)>,
) -> Tensor<f32, (R, C)> {
    layernorm(x, gamma, beta, 1e-5)
}

/// One head of softmax attention, `softmax(q · kᵀ) · v` (the 1/√d scale is folded into `wq`).
#[tessera::kernel]
pub fn attention(
    q: Tensor<f32, (S, D)>,
    k: Tensor<f32, (S, D)>,
    v: Tensor<f32, (S, D)>,
) -> Tensor<f32, (S, D)> {
    softmax(q.matmul(k.t())).matmul(v)
}

/// One head of linear attention, `(q · kᵀ) · v` (Exact blocks).
#[tessera::kernel]
pub fn linear_attention(
    q: Tensor<f32, (S, D)>,
    k: Tensor<f32, (S, D)>,
    v: Tensor<f32, (S, D)>,
) -> Tensor<f32, (S, D)> {
    q.matmul(k.t()).matmul(v)
}

/// The residual add.
#[tessera::kernel]
pub fn residual(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    x + y
}
