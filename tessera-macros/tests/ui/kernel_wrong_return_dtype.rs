#[tessera::kernel]
fn k(x: Tensor<bf16, (M, N)>) -> Tensor<f32, (M, N)> {
    relu(x)
}

fn main() {}
