#[tessera::kernel]
fn k(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    loop {}
    x
}

fn main() {}
