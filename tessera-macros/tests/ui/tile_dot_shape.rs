tessera::tile! {
    fn k<const BM: i64 = 64, const BK: i64 = 32>(a: In<f32, 2>, c: Out<f32, 2>) grid = (cdiv(a.dim(0), BM), 1, 1) {
        let i = program_id(0) * BM;
        let x = load(a, [i, 0], [BM, BK]);
        let acc = dot(x, x);
        store(c, [i, 0], acc);
    }
}

fn main() {}
