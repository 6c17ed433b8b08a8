#[tessera::kernel]
fn k(x: Tensor<f32, (M, N)>) -> Tensor<f32, (N,)> {
    x[0]
}

fn main() {}
