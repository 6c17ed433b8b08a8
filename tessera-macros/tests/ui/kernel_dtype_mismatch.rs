#[tessera::kernel]
fn k(x: Tensor<bf16, (M, N)>, y: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    let z = exp(y);
    x + z
}

fn main() {}
