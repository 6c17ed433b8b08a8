//! Constant dims in a kernel's types (`Tensor<f32, (M, Const<8>)>`): compiled in, checked at
//! launch; on cpu and sim against f64.

use tessera::prelude::*;

/// A projection whose inner dim is fixed at 8, and whose result keeps a constant dim.
#[tessera::kernel]
fn proj8(
    x: Tensor<f32, (M, Const<8>)>,
    w: Tensor<f32, (Const<8>, Const<3>)>,
) -> Tensor<f32, (M, Const<3>)> {
    x.matmul(w)
}

/// A row reduction over a constant width, on a rank-3 tensor.
#[tessera::kernel]
fn sum16(x: Tensor<f32, (B, R, Const<16>)>) -> Tensor<f32, (B, R)> {
    sum(x, [2])
}

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what} [{i}]: {g} vs {w}"
        );
    }
}

fn const_dims(d: Device) {
    let m = 37;
    let x = Tensor::<f32>::randn(&[m, 8], 1);
    let w = Tensor::<f32>::randn(&[8, 3], 2);
    let y = proj8(&x.to(&d).unwrap(), &w.to(&d).unwrap()).unwrap();
    assert_eq!(y.shape(), &[m, 3]);
    let (xv, wv) = (x.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
    let want: Vec<f64> = (0..m * 3)
        .map(|i| (0..8).map(|k| xv[i / 3 * 8 + k] * wv[k * 3 + i % 3]).sum())
        .collect();
    close(&format!("proj8 {d:?}"), &y.to_f64_vec().unwrap(), &want);

    let x = Tensor::<f32>::randn(&[3, 5, 16], 3);
    let y = sum16(&x.to(&d).unwrap()).unwrap();
    assert_eq!(y.shape(), &[3, 5]);
    let want: Vec<f64> = x
        .to_f64_vec()
        .unwrap()
        .chunks(16)
        .map(|r| r.iter().sum())
        .collect();
    close(&format!("sum16 {d:?}"), &y.to_f64_vec().unwrap(), &want);
}

/// A size other than the constant is an `Err` naming the parameter, the dim and both sizes.
fn mismatch_is_an_error(d: Device) {
    let x = Tensor::<f32>::randn(&[4, 7], 4).to(&d).unwrap();
    let w = Tensor::<f32>::randn(&[8, 3], 5).to(&d).unwrap();
    let e = proj8(&x, &w).unwrap_err();
    assert!(
        matches!(&e, tessera::Error::ShapeMismatch { param, .. } if param == "x"),
        "{e}"
    );
    assert!(e.to_string().contains("dim 1 must be 8, got 7"), "{e}");
    let e = sum16(&Tensor::<f32>::randn(&[2, 2, 15], 6).to(&d).unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .contains("`x` must have shape [B, R, 16]: dim 2 must be 16, got 15"),
        "{e}"
    );
}

#[test]
fn const_dims_on_cpu() {
    const_dims(Device::cpu());
}

#[test]
fn const_dims_on_sim() {
    const_dims(Device::sim());
}

#[test]
fn const_dim_mismatch_on_cpu() {
    mismatch_is_an_error(Device::cpu());
}

#[test]
fn const_dim_mismatch_on_sim() {
    mismatch_is_an_error(Device::sim());
}
