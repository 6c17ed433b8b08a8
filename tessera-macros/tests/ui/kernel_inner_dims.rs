#[tessera::kernel]
fn k(a: Tensor<f32, (M, K)>, b: Tensor<f32, (J, N)>) -> Tensor<f32, (M, N)> {
    a.matmul(b)
}

fn main() {}
