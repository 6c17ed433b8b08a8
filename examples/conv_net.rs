//! A small convolutional network written in algebraic form: `conv2d` 3×3 + bias + ReLU, a
//! second `conv2d` (stride 2) + bias + ReLU, global mean pooling, a linear layer. The example
//! prints the fusion trace (bias and ReLU fused into each implicit-GEMM convolution), runs the
//! network on the default device (`TESSERA_DEVICE`, else the best available) against a direct
//! f64 loop, then takes SGD steps on a loss kernel of the same network with `tessera::grad` —
//! whose second convolution's input gradient is a transposed convolution (`dy` with zeros
//! inserted, `pad … interior=[0, 1, 1, 0]`, then a stride-1 `conv2d`).
//!
//!     cargo run --release --example conv_net
//!     TESSERA_DEVICE=sim cargo run --release --example conv_net   # the PTX, on the simulator

use tessera::prelude::*;

const N: usize = 8;
const STEPS: usize = 40;
const LR: f32 = 0.1;

/// Logits `[N, 1, 1, 4]` of 8 × 8 RGB images.
#[tessera::kernel]
fn conv_net(
    x: Tensor<f32, (B, Const<8>, Const<8>, Const<3>)>,
    w1: Tensor<f32, (Const<3>, Const<3>, Const<3>, Const<8>)>,
    b1: Tensor<f32, (Const<8>,)>,
    w2: Tensor<f32, (Const<3>, Const<3>, Const<8>, Const<8>)>,
    b2: Tensor<f32, (Const<8>,)>,
    wl: Tensor<f32, (Const<8>, Const<4>)>,
    bl: Tensor<f32, (Const<4>,)>,
) -> Tensor<f32, (B, Const<1>, Const<1>, Const<4>)> {
    let h = relu(conv2d(x, w1, [1, 1], [1, 1]) + b1);
    let h = relu(conv2d(h, w2, [2, 2], [1, 1]) + b2);
    mean_keepdim(h, [1, 2]).matmul(wl) + bl
}

/// The mean squared error of [`conv_net`]'s logits against targets `t`.
#[tessera::kernel]
fn conv_net_loss(
    x: Tensor<f32, (B, Const<8>, Const<8>, Const<3>)>,
    w1: Tensor<f32, (Const<3>, Const<3>, Const<3>, Const<8>)>,
    b1: Tensor<f32, (Const<8>,)>,
    w2: Tensor<f32, (Const<3>, Const<3>, Const<8>, Const<8>)>,
    b2: Tensor<f32, (Const<8>,)>,
    wl: Tensor<f32, (Const<8>, Const<4>)>,
    bl: Tensor<f32, (Const<4>,)>,
    t: Tensor<f32, (B, Const<1>, Const<1>, Const<4>)>,
) -> Tensor<f32, ()> {
    let h = relu(conv2d(x, w1, [1, 1], [1, 1]) + b1);
    let h = relu(conv2d(h, w2, [2, 2], [1, 1]) + b2);
    let e = mean_keepdim(h, [1, 2]).matmul(wl) + bl - t;
    (e * e).mean([0, 1, 2, 3])
}

/// `y[n, oh, ow, f] = Σ x[n, oh·s + kh − 1, ow·s + kw − 1, c] · w[kh, kw, c, f]` (3 × 3,
/// padding 1), plus `b[f]`, then ReLU: in f64.
fn conv_relu(
    x: &[f64],
    [h, wd, c]: [usize; 3],
    w: &[f64],
    b: &[f64],
    f: usize,
    s: usize,
) -> Vec<f64> {
    let (oh, ow) = ((h - 1) / s + 1, (wd - 1) / s + 1);
    let mut y = vec![0.0; N * oh * ow * f];
    for n in 0..N {
        for i in 0..oh {
            for j in 0..ow {
                for o in 0..f {
                    let mut acc = b[o];
                    for kh in 0..3 {
                        for kw in 0..3 {
                            let (r, q) = ((i * s + kh) as i64 - 1, (j * s + kw) as i64 - 1);
                            if r < 0 || q < 0 || r >= h as i64 || q >= wd as i64 {
                                continue;
                            }
                            for ci in 0..c {
                                let xv = x[((n * h + r as usize) * wd + q as usize) * c + ci];
                                acc += xv * w[((kh * 3 + kw) * c + ci) * f + o];
                            }
                        }
                    }
                    y[((n * oh + i) * ow + j) * f + o] = acc.max(0.0);
                }
            }
        }
    }
    y
}

/// The network in f64, by direct loops.
fn reference(x: &[f64], p: &[Vec<f64>]) -> Vec<f64> {
    let h1 = conv_relu(x, [8, 8, 3], &p[0], &p[1], 8, 1);
    let h2 = conv_relu(&h1, [8, 8, 8], &p[2], &p[3], 8, 2);
    let mut y = vec![0.0; N * 4];
    for n in 0..N {
        for o in 0..4 {
            let mut acc = p[5][o];
            for c in 0..8 {
                let pooled: f64 = (0..16).map(|k| h2[(n * 16 + k) * 8 + c]).sum::<f64>() / 16.0;
                acc += pooled * p[4][c * 4 + o];
            }
            y[n * 4 + o] = acc;
        }
    }
    y
}

/// `randn · scale`.
fn init(shape: &[usize], seed: u64, scale: f32) -> tessera::Result<Tensor<f32>> {
    let v: Vec<f32> = Tensor::<f32>::randn(shape, seed)
        .to_vec()?
        .into_iter()
        .map(|x| x * scale)
        .collect();
    Tensor::from_vec(v, shape)
}

fn main() -> tessera::Result<()> {
    println!("{}", conv_net::KERNEL.compiled()?.trace());
    let shapes: [&[usize]; 6] = [&[3, 3, 3, 8], &[8], &[3, 3, 8, 8], &[8], &[8, 4], &[4]];
    let fan_in = [27.0f32, 1.0, 72.0, 1.0, 8.0, 1.0];
    let make = |seed: u64, gain: f32| -> tessera::Result<Vec<Tensor<f32>>> {
        (0..6)
            .map(|i| init(shapes[i], seed + i as u64, gain / fan_in[i].sqrt()))
            .collect()
    };
    let x = Tensor::<f32>::randn(&[N, 8, 8, 3], 1);
    let teacher = make(100, 1.5)?;
    let mut params = make(200, 1.0)?;

    // The forward network on the default device against the direct f64 loop.
    let y = conv_net(
        &x, &params[0], &params[1], &params[2], &params[3], &params[4], &params[5],
    )?;
    let p64: Vec<Vec<f64>> = params
        .iter()
        .map(|p| p.to_f64_vec())
        .collect::<tessera::Result<_>>()?;
    let want = reference(&x.to_f64_vec()?, &p64);
    let got = y.to_f64_vec()?;
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!(
        "conv_net on {:?}: logits {:?}, max |error| against the f64 loop {err:.2e}",
        y.device(),
        y.shape()
    );
    assert!(err < 1e-4, "conv_net disagrees with the direct loop");

    // SGD on the squared error against a teacher network's logits.
    let t = conv_net(
        &x,
        &teacher[0],
        &teacher[1],
        &teacher[2],
        &teacher[3],
        &teacher[4],
        &teacher[5],
    )?
    // back to host memory: every argument stays on the host, each launch runs on the default
    // device
    .to(&Device::cpu())?;
    let grads = tessera::grad_wrt(
        &conv_net_loss::KERNEL,
        &["w1", "b1", "w2", "b2", "wl", "bl"],
    )?;
    let one = Tensor::from_vec(vec![1.0f32], &[])?;
    let (mut first, mut last) = (None, 0.0);
    for step in 0..=STEPS {
        let args = [
            x.arg(),
            params[0].arg(),
            params[1].arg(),
            params[2].arg(),
            params[3].arg(),
            params[4].arg(),
            params[5].arg(),
            t.arg(),
        ];
        let loss = conv_net_loss::KERNEL.launch::<f32>(&args)?.to_vec()?[0];
        first.get_or_insert(loss);
        last = loss;
        if step % 10 == 0 {
            println!("step {step:>3}  loss {loss:.6}");
        }
        if step == STEPS {
            break;
        }
        let g = grads.backward::<f32>(&args, &one)?;
        for (p, gp) in params.iter_mut().zip(&g) {
            let v: Vec<f32> = p
                .to_vec()?
                .iter()
                .zip(gp.to_vec()?)
                .map(|(w, d)| w - LR * d)
                .collect();
            *p = Tensor::from_vec(v, p.shape())?;
        }
    }
    println!(
        "loss {:.6} → {last:.6} in {STEPS} SGD steps (lr {LR})",
        first.unwrap_or(0.0)
    );
    Ok(())
}
