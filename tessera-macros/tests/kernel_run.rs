//! `#[tessera::kernel]` end to end: compile-time lowering, then launch on the CPU backend and
//! compare with an f64 reference.

use tessera::prelude::*;

#[tessera::kernel]
/// Dense layer with exact GELU.
pub fn linear_gelu(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

#[tessera::kernel]
fn shifted_softmax(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    let y = (x * 0.5 - 1.0).maximum(-3.0);
    softmax(y)
}

#[tessera::kernel(numerics = "kahan_sum")]
fn row_sums(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.sum(-1)
}

fn gelu_ref(v: f64) -> f64 {
    tessera::ir::graph::UnaryOp::Gelu.eval_f64(v)
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn linear_gelu_matches_reference() {
    let (m, k, n) = (37, 50, 29);
    let x = Tensor::<bf16>::randn(&[m, k], 1);
    let w = Tensor::<bf16>::randn(&[k, n], 2);
    let b = Tensor::<f32>::randn(&[n], 3);
    let y = linear_gelu(&x, &w, &b).unwrap();
    assert_eq!(y.shape(), &[m, n]);
    let (xv, wv, bv) = (
        x.to_vec().unwrap(),
        w.to_vec().unwrap(),
        b.to_vec().unwrap(),
    );
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| xv[i * k + p].to_f64() * wv[p * n + j].to_f64())
                .sum();
            want[i * n + j] = gelu_ref(s + bv[j] as f64);
        }
    }
    close(&y.to_vec().unwrap(), &want, 1e-4);
}

#[test]
fn runtime_shapes_are_checked() {
    let x = Tensor::<bf16>::randn(&[4, 8], 1);
    let w = Tensor::<bf16>::randn(&[9, 3], 2);
    let b = Tensor::<f32>::randn(&[3], 3);
    let e = linear_gelu(&x, &w, &b).unwrap_err().to_string();
    assert!(e.contains('K') && e.contains('8') && e.contains('9'), "{e}");
}

#[test]
fn literals_let_and_softmax() {
    let (m, n) = (5, 13);
    let x = Tensor::<f32>::randn(&[m, n], 9);
    let y = shifted_softmax(&x).unwrap().to_vec().unwrap();
    let xv = x.to_vec().unwrap();
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        let row: Vec<f64> = (0..n)
            .map(|j| (xv[i * n + j] as f64 * 0.5 - 1.0).max(-3.0))
            .collect();
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for j in 0..n {
            want[i * n + j] = (row[j] - mx).exp() / s;
        }
    }
    close(&y, &want, 1e-5);
}

#[test]
fn reductions_over_negative_axes() {
    let x = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[3, 4]).unwrap();
    let r = row_sums(&x);
    match r {
        Ok(t) => assert_eq!(t.to_vec().unwrap(), vec![6.0, 22.0, 38.0]),
        // The CPU backend may not implement Kahan summation yet; it must say so, not compute wrong.
        Err(e) => assert!(e.to_string().contains("kahan"), "{e}"),
    }
}
