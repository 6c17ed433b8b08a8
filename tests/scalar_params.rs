//! Scalar kernel parameters and rank-0 tensor parameters, on cpu and sim against f64.

use tessera::prelude::*;

/// `y = x · rsqrt(mean(x², last axis) + eps)` in f64.
fn rms_ref(x: &[f64], n: usize, eps: f64) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
            row.iter().map(move |v| v / (ms + eps).sqrt())
        })
        .collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

#[tessera::kernel]
fn rms_tensor_eps(x: Tensor<f32, (M, N)>, eps: Tensor<f32, ()>) -> Tensor<f32, (M, N)> {
    x * rsqrt(mean_keepdim(x * x, [1]) + eps)
}

/// A rank-0 tensor parameter read in a row-wise kernel (the row mean plus `eps`): the PTX
/// path once read it right in row 0 of each block only (a one-element tile relaid out as a
/// row tile went through shared memory, one element written and eight read).
fn rank0_param_in_a_rowwise_kernel(d: Device) {
    let (m, n) = (37, 61);
    let x = Tensor::<f32>::randn(&[m, n], 5);
    let eps = 0.37f32;
    let e = Tensor::<f32>::from_vec(vec![eps], &[]).unwrap();
    let y = rms_tensor_eps(&x.to(&d).unwrap(), &e.to(&d).unwrap()).unwrap();
    assert_eq!(y.device(), &d);
    let want = rms_ref(&x.to_f64_vec().unwrap(), n, eps as f64);
    assert_close(&format!("{d:?}"), &y.to_f64_vec().unwrap(), &want, 1e-5);
}

#[test]
fn rank0_tensor_param_in_a_rowwise_kernel_on_cpu() {
    rank0_param_in_a_rowwise_kernel(Device::cpu());
}

#[test]
fn rank0_tensor_param_in_a_rowwise_kernel_on_sim() {
    rank0_param_in_a_rowwise_kernel(Device::sim());
}
