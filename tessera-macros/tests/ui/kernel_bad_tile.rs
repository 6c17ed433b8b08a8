#[tessera::kernel(tile = (128, 96, 64))]
fn k(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

fn main() {}
