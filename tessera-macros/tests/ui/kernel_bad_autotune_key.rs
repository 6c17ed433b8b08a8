#[tessera::kernel(autotune(tiles = [(64, 64, 32)], unroll = [2]))]
fn k(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

fn main() {}
