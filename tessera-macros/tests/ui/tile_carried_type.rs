tessera::tile! {
    fn k<const B: i64 = 64>(x: In<bf16, 1>, y: Out<f32, 1>) grid = (cdiv(x.dim(0), B)) {
        let i = program_id(0) * B;
        let mut acc = zeros::<f32>([B]);
        for k in range(0, 4) {
            acc = load(x, [i], [B]);
        }
        store(y, [i], acc);
    }
}

fn main() {}
