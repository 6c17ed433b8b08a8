#[tessera::kernel(tile = (64, 64, 32))]
fn k(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

fn main() {}
