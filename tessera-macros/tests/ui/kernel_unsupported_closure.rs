#[tessera::kernel]
fn k(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    let f = |v| v * 2.0;
    x
}

fn main() {}
