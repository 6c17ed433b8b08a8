//! Hand-written block programs with `tile!`: what the compiler generates, written out.

tessera::tile! {
    /// Row-major tiled matmul `c = a · b` (f32): each program owns a `BM × BN` tile of `c` and
    /// walks K in steps of `BK`; edges are masked by the tensors' bounds.
    pub fn matmul_tiled<const BM: i64 = 64, const BN: i64 = 64, const BK: i64 = 32>(a: In<f32, 2>, b: In<f32, 2>, c: Out<f32, 2>)
        grid = (cdiv(a.dim(0), BM), cdiv(b.dim(1), BN), 1)
    {
        let i = program_id(0) * BM;
        let j = program_id(1) * BN;
        let mut acc = zeros::<f32>([BM, BN]);
        for k in range(0, a.dim(1), BK) {
            acc = dot(load(a, [i, k], [BM, BK]), load(b, [k, j], [BK, BN]), acc);
        }
        store(c, [i, j], acc);
    }
}

tessera::tile! {
    /// Softmax of each row, any width: `BR` rows per program, columns in chunks of `BC`; a
    /// first pass keeps a running max and rescaled sum (online softmax), a second writes.
    pub fn softmax_rows<const BR: i64 = 4, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 2>)
        grid = (cdiv(x.dim(0), BR))
    {
        let i = program_id(0) * BR;
        let mut m = full::<f32>([BR], -inf);
        let mut s = zeros::<f32>([BR]);
        for c in range(0, x.dim(1), BC) {
            let v = load(x, [i, c], [BR, BC], other = -inf);
            let mn = maximum(m, max(v, 1));
            s = s * exp(m - mn) + sum(exp(v - expand(mn, 1)), 1);
            m = mn;
        }
        for c in range(0, x.dim(1), BC) {
            let v = load(x, [i, c], [BR, BC]);
            store(y, [i, c], exp(v - expand(m, 1)) / expand(s, 1));
        }
    }
}
