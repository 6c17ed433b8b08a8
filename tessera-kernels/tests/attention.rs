//! `tessera_kernels::attention` against the f64 reference on cpu and the simulator: f32, bf16
//! and f16, head dims 64 and 128, causal and not, query and key lengths that are not multiples
//! of any tile of the space (and S = 1), with batch and head dims.

use tessera::{Device, Element, Float, Tensor, bf16, f16};

thread_local! {
    static DEVICE: std::cell::RefCell<Device> = const { std::cell::RefCell::new(Device::Cpu) };
}

fn randn<T: Element>(shape: &[usize], seed: u64) -> Tensor<T> {
    Tensor::randn(shape, seed)
        .to(&DEVICE.with(|d| d.borrow().clone()))
        .unwrap()
}

/// `max |got − want| / max |want|`.
fn rel_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (g, w)| {
        if g.is_nan() != w.is_nan() {
            f64::INFINITY
        } else {
            m.max((g - w).abs())
        }
    });
    err / scale.max(f64::MIN_POSITIVE)
}

/// `(batch, heads, S, L)`: S = 1, lengths straddling every tile of the space (32, 64, 128),
/// S ≠ L both ways.
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (1, 1, 1, 1),
    (1, 2, 1, 40),
    (2, 1, 37, 45),
    (1, 1, 70, 33),
    (1, 1, 129, 131),
];

fn case<T: Float>(d: usize, causal: bool) {
    // f32 accumulates in f32 (1e-5); 16-bit inputs are exact in f64, the probabilities and
    // the output are rounded to T (8 or 11 significant bits).
    let tol = if T::DTYPE == tessera::DType::F32 {
        1e-5
    } else {
        1e-2
    };
    for (i, &(b, h, s, l)) in SHAPES.iter().enumerate() {
        let seed = 1000 * d as u64 + 10 * i as u64 + causal as u64;
        let q = randn::<T>(&[b, h, s, d], seed);
        let k = randn::<T>(&[b, h, l, d], seed + 1);
        let v = randn::<T>(&[b, h, l, d], seed + 2);
        let y = tessera_kernels::attention(&q, &k, &v, causal).unwrap();
        assert_eq!(y.shape(), &[b, h, s, d]);
        let want = tessera::ir::reference::ops::attention(
            &q.to_f64_vec().unwrap(),
            &k.to_f64_vec().unwrap(),
            &v.to_f64_vec().unwrap(),
            b * h,
            s,
            l,
            d,
            d,
            1.0 / (d as f64).sqrt(),
            causal,
        );
        let e = rel_error(&y.to_f64_vec().unwrap(), &want);
        assert!(
            e < tol,
            "attention {} d={d} causal={causal} {b}x{h}x{s}x{l}: relative error {e:e}",
            T::DTYPE
        );
    }
}

#[test]
fn head_dim_without_a_kernel_is_an_error_naming_the_shape() {
    let x = Tensor::<f32>::randn(&[1, 1, 4, 48], 1);
    let e = tessera_kernels::attention(&x, &x, &x, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[1, 1, 4, 48]") && e.contains("48"), "{e}");
    let y = Tensor::<f32>::randn(&[4, 64], 1);
    let e = tessera_kernels::attention(&y, &y, &y, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[4, 64]"), "{e}");
}

#[test]
fn mismatched_key_length_is_an_error() {
    let q = Tensor::<f32>::randn(&[1, 1, 4, 64], 1);
    let k = Tensor::<f32>::randn(&[1, 1, 5, 64], 2);
    let v = Tensor::<f32>::randn(&[1, 1, 6, 64], 3);
    assert!(tessera_kernels::attention(&q, &k, &v, false).is_err());
}

/// The simulator (16-bit: the tensor-core template) against the CPU backend on the same
/// inputs: both round the probabilities and the output to T; only the f32 accumulation order
/// and `exp`'s last bits differ, so they agree to within two units in T's last place.
fn sim_agrees_with_cpu<T: Float>(d: usize, causal: bool, ulps: f64) {
    for (i, &(b, h, s, l)) in SHAPES.iter().enumerate() {
        let seed = 7000 + 10 * i as u64;
        let q = Tensor::<T>::randn(&[b, h, s, d], seed);
        let k = Tensor::<T>::randn(&[b, h, l, d], seed + 1);
        let v = Tensor::<T>::randn(&[b, h, l, d], seed + 2);
        let cpu = tessera_kernels::attention(&q, &k, &v, causal).unwrap();
        let sim = Device::sim();
        let (qs, ks, vs) = (
            q.to(&sim).unwrap(),
            k.to(&sim).unwrap(),
            v.to(&sim).unwrap(),
        );
        let got = tessera_kernels::attention(&qs, &ks, &vs, causal).unwrap();
        let e = rel_error(&got.to_f64_vec().unwrap(), &cpu.to_f64_vec().unwrap());
        assert!(
            e <= ulps,
            "attention {} d={d} causal={causal} {b}x{h}x{s}x{l}: sim vs cpu {e:e}",
            T::DTYPE
        );
    }
}

#[test]
fn sim_tensor_cores_agree_with_cpu_bf16() {
    sim_agrees_with_cpu::<bf16>(64, true, 2.0 * 2f64.powi(-8));
    sim_agrees_with_cpu::<bf16>(128, false, 2.0 * 2f64.powi(-8));
}

#[test]
fn sim_tensor_cores_agree_with_cpu_f16() {
    sim_agrees_with_cpu::<f16>(64, false, 2.0 * 2f64.powi(-11));
    sim_agrees_with_cpu::<f16>(128, true, 2.0 * 2f64.powi(-11));
}

macro_rules! backend_tests {
    ($($backend:ident => $device:expr),* $(,)?) => {$(
        mod $backend {
            use super::*;
            fn device() {
                DEVICE.with(|x| *x.borrow_mut() = $device);
            }
            #[test] fn f32_d64() { device(); case::<f32>(64, false); }
            #[test] fn f32_d64_causal() { device(); case::<f32>(64, true); }
            #[test] fn f32_d128_causal() { device(); case::<f32>(128, true); }
            #[test] fn bf16_d64() { device(); case::<bf16>(64, false); }
            #[test] fn bf16_d128_causal() { device(); case::<bf16>(128, true); }
            #[test] fn f16_d64_causal() { device(); case::<f16>(64, true); }
            #[test] fn f16_d128() { device(); case::<f16>(128, false); }
        }
    )*};
}

backend_tests!(
    cpu => Device::cpu(),
    sim => Device::sim(),
);
