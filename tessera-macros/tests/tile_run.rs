//! `tile!` end to end: programs lowered at compile time, launched on the CPU backend.

use tessera::prelude::*;

tessera::tile! {
    /// Row-major tiled matmul C = A·B.
    pub fn matmul_tiled<const BM: i64 = 32, const BN: i64 = 32, const BK: i64 = 16>(a: In<f32, 2>, b: In<f32, 2>, c: Out<f32, 2>)
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
    /// Softmax of each row; columns past the end read `-inf` and are not written.
    fn softmax_rows<const BN: i64 = 64>(x: In<f32, 2>, y: Out<f32, 2>) grid = (x.dim(0)) {
        let row = program_id(0);
        let cols = arange(BN);
        let mask = cols < x.dim(1);
        let v = load(x, [row, 0], [BN], mask = mask, other = -inf);
        let e = (v - max(v, 0)).exp();
        let s = e.sum(0);
        store(y, [row, 0], where_(mask, e / s, 0.0), mask = mask);
    }
}

tessera::tile! {
    /// y = relu(x)·2 + 1 in bf16 through an f32 computation, with `+=` carried in a loop.
    fn relu_affine<const B: i64 = 16>(x: In<bf16, 1>, y: Out<bf16, 1>) grid = (cdiv(x.dim(0), B)) {
        let i = program_id(0) * B;
        let v = load(x, [i], [B]).cast::<f32>();
        let mut acc = zeros::<f32>([B]);
        for r in 0..2 {
            acc += relu(v);
        }
        store(y, [i], (acc + 1.0).cast::<bf16>());
    }
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
        }
    }
    c
}

#[test]
fn tiled_matmul_with_ragged_edges_and_knobs() {
    let (m, k, n) = (45, 37, 70);
    let a = Tensor::<f32>::randn(&[m, k], 1);
    let b = Tensor::<f32>::randn(&[k, n], 2);
    let want = matmul_ref(&a.to_vec().unwrap(), &b.to_vec().unwrap(), m, k, n);
    for knobs in [&[][..], &[("BM", 16), ("BN", 64), ("BK", 8)][..]] {
        let mut c = Tensor::<f32>::zeros(&[m, n]).unwrap();
        matmul_tiled::launch_with(knobs, &a, &b, &mut c).unwrap();
        for (i, (g, w)) in c.to_vec().unwrap().iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - w).abs() < 1e-4 * (1.0 + w.abs()),
                "{knobs:?} element {i}: {g} vs {w}"
            );
        }
    }
    let mut c = Tensor::<f32>::zeros(&[m, n]).unwrap();
    matmul_tiled::launch(&a, &b, &mut c).unwrap();
    assert!(
        c.to_vec()
            .unwrap()
            .iter()
            .zip(&want)
            .all(|(g, w)| (*g as f64 - w).abs() < 1e-3)
    );
    assert!(
        matmul_tiled::launch_with(&[("BX", 1)], &a, &b, &mut c).is_err(),
        "unknown knobs are rejected"
    );
    assert_eq!(matmul_tiled::program().knobs.len(), 3);
}

#[test]
fn masked_softmax_rows() {
    let (m, n) = (3, 50);
    let x = Tensor::<f32>::randn(&[m, n], 4);
    let mut y = Tensor::<f32>::zeros(&[m, n]).unwrap();
    softmax_rows::launch(&x, &mut y).unwrap();
    let (xv, yv) = (x.to_vec().unwrap(), y.to_vec().unwrap());
    for i in 0..m {
        let row = &xv[i * n..(i + 1) * n];
        let mx = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let s: f64 = row.iter().map(|v| (*v as f64 - mx).exp()).sum();
        for j in 0..n {
            let w = (row[j] as f64 - mx).exp() / s;
            assert!((yv[i * n + j] as f64 - w).abs() < 1e-6, "({i}, {j})");
        }
    }
}

#[test]
fn casts_and_compound_assignment_in_loops() {
    let x = Tensor::from_vec(
        (0..20).map(|v| bf16::from_f32(v as f32 - 10.0)).collect(),
        &[20],
    )
    .unwrap();
    let mut y = Tensor::<bf16>::zeros(&[20]).unwrap();
    relu_affine::launch(&x, &mut y).unwrap();
    let want: Vec<f32> = (0..20)
        .map(|v| 2.0 * (v as f32 - 10.0).max(0.0) + 1.0)
        .collect();
    assert_eq!(
        y.to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect::<Vec<_>>(),
        want
    );
}
