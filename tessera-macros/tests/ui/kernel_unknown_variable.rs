use tessera::prelude::*;

#[tessera::kernel]
fn k(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    let y = exp(x);
    y + z
}

fn main() {
    let x = Tensor::<f32>::zeros(&[2]).unwrap();
    let _ = k(&x);
}
