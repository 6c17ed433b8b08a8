use tessera::prelude::*;

tessera::tile! {
    fn k<const B: i64 = 64>(x: In<f32, 1>, y: Out<f32, 1>) grid = (cdiv(x.dim(0), B)) {
        let i = program_id(0) * B;
        let v = load(x, [i], [B]);
        store(y, [i], frobnicate(v));
    }
}

fn main() {
    let x = Tensor::<f32>::zeros(&[8]).unwrap();
    let mut y = Tensor::<f32>::zeros(&[8]).unwrap();
    let _ = k::launch(&x, &mut y);
}
