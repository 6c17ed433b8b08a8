#[tessera::kernel(autotune(fusion_depth = [0, 100]))]
fn lin(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    relu(x.matmul(w))
}

fn main() {}
