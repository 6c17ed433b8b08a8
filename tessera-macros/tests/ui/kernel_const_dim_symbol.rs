#[tessera::kernel]
fn k(x: Tensor<f32, (M, Const<N>)>) -> Tensor<f32, (M, Const<N>)> {
    x
}

fn main() {}
