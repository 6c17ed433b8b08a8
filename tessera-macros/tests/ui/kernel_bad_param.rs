#[tessera::kernel]
fn k(x: Vec<f32>) -> Tensor<f32, (N,)> {
    x
}

fn main() {}
