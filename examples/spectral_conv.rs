//! A convolution written in algebraic form, `conv2d(x, w)`, with a filter large enough (31 × 31
//! over 32 × 32 images, 8 channels) that the `spectral_conv` rewrite's cost guard sends it to
//! the frequency domain: `pad → complex → fft → spectral_mul → ifft → real → crop`, each a
//! kernel (radix-2/4 Stockham for the transforms). The example prints the fusion trace (the
//! rule's decision with both estimates, then the kernels), runs the kernel on the default
//! device and checks it against a direct f64 convolution loop.
//!
//! Run: `cargo run --release --example spectral_conv`
//! (`TESSERA_DUMP=fusion` prints the same trace when the kernel is compiled;
//! `TESSERA_DEVICE=sim` runs it on the PTX simulator).

use tessera::prelude::*;
use tessera_workspace::reference::rel_error;

/// `y = conv2d(x, w)`, stride 1, padding 15 ("same" size).
#[tessera::kernel]
fn conv31(
    x: Tensor<f32, (N, Const<32>, Const<32>, Const<8>)>,
    w: Tensor<f32, (Const<31>, Const<31>, Const<8>, Const<8>)>,
) -> Tensor<f32, (N, Const<32>, Const<32>, Const<8>)> {
    conv2d(x, w, [1, 1], [15, 15])
}

fn main() -> tessera::Result<()> {
    println!("{}", conv31::KERNEL.compiled()?.trace());
    let x = Tensor::<f32>::randn(&[2, 32, 32, 8], 1);
    let w = Tensor::<f32>::randn(&[31, 31, 8, 8], 2);
    let y = conv31(&x, &w)?;
    let c = tessera::ir::graph::Conv2d {
        padding: [15, 15],
        ..Default::default()
    };
    let (want, _) = tessera::ir::reference::ops::conv2d(
        &x.to_f64_vec()?,
        [2, 32, 32, 8],
        &w.to_f64_vec()?,
        [31, 31, 8, 8],
        &c,
    );
    let err = rel_error(&y.to_f64_vec()?, &want);
    println!(
        "on {:?}: relative error against the direct f64 loop {err:.2e}",
        y.device()
    );
    assert!(
        err < 1e-4,
        "spectral convolution disagrees with the direct loop"
    );
    Ok(())
}
