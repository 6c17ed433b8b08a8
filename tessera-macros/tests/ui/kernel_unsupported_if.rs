#[tessera::kernel]
fn k(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    if true { x } else { relu(x) }
}

fn main() {}
