//! Quickstart: a fused linear + bias + GELU and a row softmax on the default device, each
//! checked against an f64 reference, with time and GFLOP/s.
//!
//! Run: `cargo run --release --example quickstart`

use std::time::Instant;
use tessera::prelude::*;
use tessera_workspace::reference::{self, rel_error};

/// `gelu(x · w + b)`: the compiler fuses the bias and GELU into the matmul's epilogue.
#[tessera::kernel]
fn linear_gelu(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

/// Softmax over the last axis.
#[tessera::kernel]
fn row_softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (T, f64) {
    let mut best = f64::INFINITY;
    let mut out = f();
    for _ in 0..runs {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (out, best)
}

fn main() -> tessera::Result<()> {
    let dev = Device::default();
    println!("device: {dev}  ({} rayon threads)", rayon_threads());
    let (m, k, n) = (512, 768, 1024);
    let x = Tensor::<bf16>::randn(&[m, k], 1);
    let w = Tensor::<bf16>::randn(&[k, n], 2);
    let b = Tensor::<f32>::randn(&[n], 3);

    let (y, secs) = best_of(5, || linear_gelu(&x, &w, &b));
    let y = y?;
    let mut want = reference::matmul(&x.to_f64_vec()?, &w.to_f64_vec()?, m, k, n);
    let bv = b.to_f64_vec()?;
    want.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = reference::gelu(*v + bv[i % n]));
    let err = rel_error(&y.to_f64_vec()?, &want);
    let gflops = 2.0 * (m * k * n) as f64 / secs / 1e9;
    println!(
        "linear+bias+gelu  bf16 [{m}x{k}]·[{k}x{n}]  rel.err {err:.2e}  {:.3} ms  {gflops:.1} GFLOP/s",
        secs * 1e3
    );

    let (r, c) = (4096, 1000);
    let s = Tensor::<f32>::randn(&[r, c], 4);
    let (p, secs) = best_of(5, || row_softmax(&s));
    let p = p?;
    let err2 = rel_error(&p.to_f64_vec()?, &reference::softmax(&s.to_f64_vec()?, c));
    let gbs = (2 * r * c * 4) as f64 / secs / 1e9;
    println!(
        "softmax           f32 [{r}x{c}]  rel.err {err2:.2e}  {:.3} ms  {gbs:.1} GB/s",
        secs * 1e3
    );

    // Shapes are checked at run time: a mistake is an error naming the dim, never a panic.
    match linear_gelu(&x, &x, &b) {
        Err(e) => println!("a shape mistake is reported: {e}"),
        Ok(_) => unreachable!("K mismatch must be rejected"),
    }
    assert!(
        err < 1e-5 && err2 < 1e-5,
        "results disagree with the f64 reference"
    );
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
