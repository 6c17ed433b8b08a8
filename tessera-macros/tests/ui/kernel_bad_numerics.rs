#[tessera::kernel(numerics = "fastest")]
fn k(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.sum(1)
}

fn main() {}
