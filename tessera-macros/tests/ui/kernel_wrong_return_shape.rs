#[tessera::kernel]
fn k(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M, N)> {
    gelu(x)
}

fn main() {}
