//! f64 references for checking kernels.

/// `max |got − want| / max |want|` (normwise relative error; 0 for empty inputs).
pub fn rel_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |m, (g, w)| {
        if g.is_nan() != w.is_nan() {
            f64::INFINITY
        } else {
            m.max((g - w).abs())
        }
    });
    if scale == 0.0 { err } else { err / scale }
}

/// Row-major `[m, k] × [k, n]` in f64.
pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p];
            for j in 0..n {
                c[i * n + j] += x * b[p * n + j];
            }
        }
    }
    c
}

/// Exact GELU in f64.
pub fn gelu(x: f64) -> f64 {
    tessera::ir::graph::UnaryOp::Gelu.eval_f64(x)
}

/// Row softmax in f64 over rows of length `n`.
pub fn softmax(x: &[f64], n: usize) -> Vec<f64> {
    x.chunks(n.max(1))
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
        })
        .collect()
}
