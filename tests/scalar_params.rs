//! Scalar kernel parameters and rank-0 tensor parameters, on cpu and sim against f64.

use tessera::Element;
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

/// Fresh seeded values in `[lo, hi)`.
fn uniform(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 11) as f32 / (1u64 << 53) as f32)
        })
        .collect()
}

fn as_t<T: Element>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64_round(x as f64)).collect()
}

/// `rmsnorm` with its `eps` a scalar parameter.
#[tessera::kernel]
fn rms(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, eps: f32) -> Tensor<f32, (R, C)> {
    rmsnorm(x, g, eps)
}

/// `layernorm` with a scalar `eps`, generic over the element type, and a scalar scale that
/// takes the tensors' element type.
#[tessera::kernel]
fn ln_scaled<T: Float>(
    x: Tensor<T, (R, C)>,
    g: Tensor<T, (C,)>,
    b: Tensor<T, (C,)>,
    eps: f32,
    alpha: f32,
) -> Tensor<f32, (R, C)> {
    layernorm(x, g, b, eps) * alpha
}

/// Scalars in elementwise arithmetic over a rank-3 tensor.
#[tessera::kernel]
fn affine(x: Tensor<f32, (B, S, D)>, alpha: f32, beta: f32) -> Tensor<f32, (B, S, D)> {
    maximum(x * alpha + beta, beta - 1.0)
}

/// A scalar in a matmul epilogue.
#[tessera::kernel]
fn scaled_mm<T: Float>(
    x: Tensor<T, (M, K)>,
    w: Tensor<T, (K, N)>,
    alpha: f32,
) -> Tensor<f32, (M, N)> {
    x.matmul(w) * alpha
}

fn rms_case(d: Device) {
    for (i, (r, c)) in [(37, 61), (5, 300), (1, 1)].into_iter().enumerate() {
        let seed = 11 + i as u64;
        let x = Tensor::<f32>::randn(&[r, c], seed);
        let g = Tensor::<f32>::from_vec(uniform(c, seed, 0.5, 2.0), &[c]).unwrap();
        let eps = uniform(1, seed, 1e-6, 0.5)[0];
        let y = rms(&x.to(&d).unwrap(), &g.to(&d).unwrap(), eps).unwrap();
        assert_eq!(y.device(), &d);
        let gv = g.to_f64_vec().unwrap();
        let want: Vec<f64> = rms_ref(&x.to_f64_vec().unwrap(), c, eps as f64)
            .iter()
            .enumerate()
            .map(|(k, v)| v * gv[k % c])
            .collect();
        assert_close(
            &format!("rms {d:?} [{r}, {c}] eps={eps}"),
            &y.to_f64_vec().unwrap(),
            &want,
            2e-5,
        );
    }
}

fn ln_ref(x: &[f64], g: &[f64], b: &[f64], n: usize, eps: f64, alpha: f64) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let mu = row.iter().sum::<f64>() / n as f64;
            let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
            row.iter()
                .enumerate()
                .map(move |(k, v)| ((v - mu) / (var + eps).sqrt() * g[k] + b[k]) * alpha)
        })
        .collect()
}

fn ln_case<T: Float>(d: Device, tol: f64) {
    let (r, c) = (19, 130);
    let x = Tensor::<T>::randn(&[r, c], 21);
    let g = Tensor::<T>::from_vec(as_t(&uniform(c, 22, 0.5, 2.0)), &[c]).unwrap();
    let b = Tensor::<T>::from_vec(as_t(&uniform(c, 23, -1.0, 1.0)), &[c]).unwrap();
    for (eps, alpha) in [(1e-5f32, 0.75f32), (0.3, -2.5)] {
        let y = ln_scaled(
            &x.to(&d).unwrap(),
            &g.to(&d).unwrap(),
            &b.to(&d).unwrap(),
            eps,
            alpha,
        )
        .unwrap();
        // The reference reads the inputs as the kernel does (rounded to T); the norm and the
        // scale run in f32 (`layernorm` gives f32, and `alpha` takes that type).
        let want = ln_ref(
            &x.to_f64_vec().unwrap(),
            &g.to_f64_vec().unwrap(),
            &b.to_f64_vec().unwrap(),
            c,
            eps as f64,
            alpha as f64,
        );
        assert_close(
            &format!("layernorm {:?} {d:?} eps={eps}", T::DTYPE),
            &y.to_f64_vec().unwrap(),
            &want,
            tol,
        );
    }
}

fn affine_case(d: Device) {
    let x = Tensor::<f32>::randn(&[3, 7, 45], 31);
    let (alpha, beta) = (uniform(1, 32, -3.0, 3.0)[0], uniform(1, 33, -1.0, 1.0)[0]);
    let y = affine(&x.to(&d).unwrap(), alpha, beta).unwrap();
    let want: Vec<f64> = x
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| (v * alpha as f64 + beta as f64).max(beta as f64 - 1.0))
        .collect();
    assert_close(
        &format!("affine {d:?}"),
        &y.to_f64_vec().unwrap(),
        &want,
        1e-6,
    );
}

fn scaled_mm_case<T: Float>(d: Device, tol: f64) {
    let (m, k, n) = (33, 40, 70);
    let x = Tensor::<T>::randn(&[m, k], 41);
    let w = Tensor::<T>::randn(&[k, n], 42);
    let alpha = uniform(1, 43, -2.0, 2.0)[0];
    let y = scaled_mm(&x.to(&d).unwrap(), &w.to(&d).unwrap(), alpha).unwrap();
    let (xv, wv) = (x.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
    let want: Vec<f64> = (0..m * n)
        .map(|i| {
            (0..k)
                .map(|p| xv[i / n * k + p] * wv[p * n + i % n])
                .sum::<f64>()
                * alpha as f64
        })
        .collect();
    assert_close(
        &format!("scaled matmul {:?} {d:?}", T::DTYPE),
        &y.to_f64_vec().unwrap(),
        &want,
        tol,
    );
}

/// Values the kernel refuses are an `Err` naming the parameter, before anything runs.
fn rejects_bad_eps(d: Device) {
    let x = Tensor::<f32>::randn(&[4, 8], 51).to(&d).unwrap();
    let g = Tensor::<f32>::from_vec(vec![1.0; 8], &[8])
        .unwrap()
        .to(&d)
        .unwrap();
    for eps in [0.0f32, -1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let e = rms(&x, &g, eps).unwrap_err();
        assert!(
            matches!(&e, tessera::Error::ScalarArg { param, kernel, .. } if param == "eps" && kernel == "rms"),
            "{e}"
        );
        assert!(e.to_string().contains("scalar `eps` is"), "{e}");
    }
    // A scalar used in arithmetic may be anything an f32 holds.
    let y = affine(&x.reshape(&[1, 4, 8]).unwrap(), f32::NAN, 0.0)
        .unwrap()
        .to_f64_vec()
        .unwrap();
    assert!(y.iter().all(|v| v.is_nan() || *v == -1.0));
}

/// rmsnorm written from primitives with a scalar `eps`.
#[tessera::kernel]
fn rms_primitives(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, eps: f32) -> Tensor<f32, (R, C)> {
    x * rsqrt(mean_keepdim(x * x, -1) + eps) * g
}

/// layernorm written from primitives with a scalar `eps` (two statistics: mean, variance).
#[tessera::kernel]
fn ln_primitives(
    x: Tensor<f32, (B, S, D)>,
    g: Tensor<f32, (D,)>,
    b: Tensor<f32, (D,)>,
    eps: f32,
) -> Tensor<f32, (B, S, D)> {
    let d = x - mean_keepdim(x, 2);
    d * rsqrt(mean_keepdim(d * d, 2) + eps) * g + b
}

/// Norms from primitives (and `rmsnorm` / `layernorm` with a scalar `eps`, which the front end
/// writes as primitives) run as one row-wise kernel and agree with f64.
fn norms_from_primitives_are_one_kernel(d: Device) {
    for (i, (r, c)) in [(37, 61), (3, 300), (1, 1), (9, 1029)]
        .into_iter()
        .enumerate()
    {
        let seed = 90 + i as u64;
        let x = Tensor::<f32>::randn(&[r, c], seed);
        let g = Tensor::<f32>::from_vec(uniform(c, seed, 0.5, 2.0), &[c]).unwrap();
        let b = Tensor::<f32>::from_vec(uniform(c, seed + 1, -1.0, 1.0), &[c]).unwrap();
        let eps = uniform(1, seed, 1e-6, 0.5)[0];
        let (xd, gd, bd) = (x.to(&d).unwrap(), g.to(&d).unwrap(), b.to(&d).unwrap());
        let (xv, gv, bv) = (
            x.to_f64_vec().unwrap(),
            g.to_f64_vec().unwrap(),
            b.to_f64_vec().unwrap(),
        );
        let rms_want: Vec<f64> = rms_ref(&xv, c, eps as f64)
            .iter()
            .enumerate()
            .map(|(k, v)| v * gv[k % c])
            .collect();
        for (name, y) in [
            ("rms_primitives", rms_primitives(&xd, &gd, eps).unwrap()),
            ("rmsnorm(x, g, eps)", rms(&xd, &gd, eps).unwrap()),
        ] {
            let ran = tessera::last_launch();
            assert_eq!(ran.len(), 1, "{name} {d:?}: {ran:?}");
            let what = format!("{name} {d:?} [{r}, {c}]");
            assert_close(&what, &y.to_f64_vec().unwrap(), &rms_want, 2e-5);
        }
        let ln_want = ln_ref(&xv, &gv, &bv, c, eps as f64, 1.0);
        let x3 = xd.reshape(&[1, r, c]).unwrap();
        let y = ln_primitives(&x3, &gd, &bd, eps).unwrap();
        assert_eq!(tessera::last_launch().len(), 1, "ln_primitives {d:?}");
        assert_close(
            &format!("ln_primitives {d:?} [{r}, {c}]"),
            &y.to_f64_vec().unwrap(),
            &ln_want,
            2e-5,
        );
    }
}

/// A rank-0 tensor passed straight to `KERNEL.launch` for a scalar parameter meets the same
/// rule as the typed call's `f32` (generic kernels too, through their `KernelFamily`), and a
/// value it accepts gives the typed call's result.
fn launch_checks_rank0_scalars(d: Device) {
    let (r, c) = (6, 45);
    let x = Tensor::<f32>::randn(&[r, c], 61).to(&d).unwrap();
    let g = Tensor::<f32>::from_vec(uniform(c, 62, 0.5, 2.0), &[c])
        .unwrap()
        .to(&d)
        .unwrap();
    let scalar = |v: f32| {
        Tensor::<f32>::from_vec(vec![v], &[])
            .unwrap()
            .to(&d)
            .unwrap()
    };
    for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        let e = rms::KERNEL
            .launch::<f32>(&[x.arg(), g.arg(), scalar(bad).arg()])
            .unwrap_err();
        assert!(
            matches!(&e, tessera::Error::ScalarArg { param, kernel, .. } if param == "eps" && kernel == "rms"),
            "{d:?} eps={bad}: {e}"
        );
        let typed = rms(&x, &g, bad).unwrap_err();
        assert_eq!(e.to_string(), typed.to_string());
        let b = Tensor::<f32>::from_vec(vec![0.0; c], &[c])
            .unwrap()
            .to(&d)
            .unwrap();
        let e = ln_scaled::KERNEL
            .for_params(&[tessera::DType::F32; 5])
            .unwrap()
            .launch::<f32>(&[
                x.arg(),
                g.arg(),
                b.arg(),
                scalar(bad).arg(),
                scalar(1.0).arg(),
            ])
            .unwrap_err();
        assert!(
            matches!(&e, tessera::Error::ScalarArg { param, .. } if param == "eps"),
            "{d:?} eps={bad}: {e}"
        );
    }
    let eps = uniform(1, 63, 1e-6, 0.5)[0];
    let direct = rms::KERNEL
        .launch::<f32>(&[x.arg(), g.arg(), scalar(eps).arg()])
        .unwrap();
    let typed = rms(&x, &g, eps).unwrap();
    assert_eq!(direct.to_vec().unwrap(), typed.to_vec().unwrap());
    // A scalar used in arithmetic has no rule: NaN goes through.
    let y = affine::KERNEL
        .launch::<f32>(&[
            x.reshape(&[1, r, c]).unwrap().arg(),
            scalar(f32::NAN).arg(),
            scalar(0.0).arg(),
        ])
        .unwrap();
    assert!(
        y.to_f64_vec()
            .unwrap()
            .iter()
            .all(|v| v.is_nan() || *v == -1.0)
    );
}

macro_rules! on_cpu_and_sim {
    ($($name:ident: $body:expr;)*) => {
        mod cpu {
            use super::*;
            $(#[test] fn $name() { let d = Device::cpu(); $body(d) })*
        }
        mod sim {
            use super::*;
            $(#[test] fn $name() { let d = Device::sim(); $body(d) })*
        }
    };
}

on_cpu_and_sim! {
    rmsnorm_with_a_scalar_eps: rms_case;
    layernorm_with_a_scalar_eps_f32: |d| ln_case::<f32>(d, 2e-5);
    layernorm_with_a_scalar_eps_bf16: |d| ln_case::<bf16>(d, 1e-4);
    scalars_in_elementwise_arithmetic: affine_case;
    scalar_in_a_matmul_epilogue_f32: |d| scaled_mm_case::<f32>(d, 1e-5);
    scalar_in_a_matmul_epilogue_bf16: |d| scaled_mm_case::<bf16>(d, 1e-4);
    bad_eps_is_an_error_naming_it: rejects_bad_eps;
    launch_checks_rank0_tensors_for_scalars: launch_checks_rank0_scalars;
    norms_from_primitives_are_one_row_kernel: norms_from_primitives_are_one_kernel;
}
