use tessera::prelude::*;

#[tessera::kernel]
fn k(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    x.frobnicate()
}

fn main() {
    let x = Tensor::<f32>::zeros(&[2, 2]).unwrap();
    let _ = k(&x);
}
