#[tessera::kernel]
fn k(x: Tensor<f64, (N,)>) -> Tensor<f32, (N,)> {
    x
}

fn main() {}
