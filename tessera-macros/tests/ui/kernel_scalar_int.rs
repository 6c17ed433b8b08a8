#[tessera::kernel]
fn shift(x: Tensor<i32, (N,)>, k: i32) -> Tensor<i32, (N,)> {
    x + k
}

fn main() {}
