#[tessera::kernel]
fn k(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.sum(2)
}

fn main() {}
