//! Training a two-layer MLP with `tessera::grad`: regression onto a fixed random teacher
//! network of the same shape, plain SGD, the loss curve printed.
//!
//! The loss is one `#[tessera::kernel]` written in algebraic form; `tessera::grad_wrt` builds
//! its backward Graph IR for the four weights (reverse-mode autodiff in `tessera_ir::autodiff`)
//! and compiles each gradient as a kernel. `TESSERA_DUMP=fusion` prints the backward kernels'
//! fusion traces: the bias gradients are column sums of the pre-activation's cotangent, each
//! fused into the kernel that computes that cotangent (`.. as column reduction (pipeline
//! fusion)`), so the cotangent is never written to memory.
//!
//!     cargo run --release --example train_mlp            # cpu
//!     cargo run --release --example train_mlp -- sim     # the PTX, on the simulator

use tessera::prelude::*;

const BATCH: usize = 256;
const IN: usize = 8;
const HIDDEN: usize = 32;
const OUT: usize = 4;
const STEPS: usize = 300;
const LR: f32 = 0.05;

/// Mean over the batch of the squared error of `tanh(x·w1 + b1)·w2 + b2` against `t`.
#[tessera::kernel]
fn mlp_loss(
    x: Tensor<f32, (B, I)>,
    w1: Tensor<f32, (I, H)>,
    b1: Tensor<f32, (H,)>,
    w2: Tensor<f32, (H, O)>,
    b2: Tensor<f32, (O,)>,
    t: Tensor<f32, (B, O)>,
) -> Tensor<f32, ()> {
    let e = tanh(x.matmul(w1) + b1).matmul(w2) + b2 - t;
    (e * e).sum(1).mean(0)
}

/// The teacher: `tanh(x·w1 + b1)·w2 + b2`.
#[tessera::kernel]
fn mlp(
    x: Tensor<f32, (B, I)>,
    w1: Tensor<f32, (I, H)>,
    b1: Tensor<f32, (H,)>,
    w2: Tensor<f32, (H, O)>,
    b2: Tensor<f32, (O,)>,
) -> Tensor<f32, (B, O)> {
    tanh(x.matmul(w1) + b1).matmul(w2) + b2
}

/// `randn · scale` (fan-in scaling keeps the tanh out of saturation).
fn init(shape: &[usize], seed: u64, scale: f32) -> tessera::Result<Tensor<f32>> {
    let v: Vec<f32> = Tensor::<f32>::randn(shape, seed)
        .to_vec()?
        .into_iter()
        .map(|x| x * scale)
        .collect();
    Tensor::from_vec(v, shape)
}

fn main() -> tessera::Result<()> {
    let dev = match std::env::args().nth(1).as_deref() {
        Some("sim") => Device::sim(),
        _ => Device::cpu(),
    };
    let shapes: [&[usize]; 4] = [&[IN, HIDDEN], &[HIDDEN], &[HIDDEN, OUT], &[OUT]];
    let fan_in = [IN, 1, HIDDEN, 1];
    // Teacher and student: same architecture, different seeds.
    let teacher: Vec<Tensor<f32>> = (0..4)
        .map(|i| init(shapes[i], 100 + i as u64, 1.5 / (fan_in[i] as f32).sqrt()))
        .collect::<tessera::Result<_>>()?;
    let mut params: Vec<Tensor<f32>> = (0..4)
        .map(|i| init(shapes[i], 200 + i as u64, 0.5 / (fan_in[i] as f32).sqrt()))
        .collect::<tessera::Result<_>>()?;
    let x = Tensor::<f32>::randn(&[BATCH, IN], 7).to(&dev)?;
    let teacher: Vec<Tensor<f32>> = teacher
        .iter()
        .map(|t| t.to(&dev))
        .collect::<tessera::Result<_>>()?;
    let t = mlp(&x, &teacher[0], &teacher[1], &teacher[2], &teacher[3])?;
    let grads = tessera::grad_wrt(&mlp_loss::KERNEL, &["w1", "b1", "w2", "b2"])?;
    let one = Tensor::from_vec(vec![1.0f32], &[])?.to(&dev)?;
    println!("device: {dev:?}; {BATCH} samples, {IN} → {HIDDEN} (tanh) → {OUT}, SGD lr {LR}");
    let start = std::time::Instant::now();
    let mut first = None;
    let mut last = 0.0;
    for step in 0..=STEPS {
        let on: Vec<Tensor<f32>> = params
            .iter()
            .map(|p| p.to(&dev))
            .collect::<tessera::Result<_>>()?;
        let args = [
            x.arg(),
            on[0].arg(),
            on[1].arg(),
            on[2].arg(),
            on[3].arg(),
            t.arg(),
        ];
        let loss = mlp_loss::KERNEL.launch::<f32>(&args)?.to_vec()?[0];
        first.get_or_insert(loss);
        last = loss;
        if step % 25 == 0 {
            println!("step {step:>4}  loss {loss:.6}");
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
    let first = first.unwrap_or(0.0);
    println!(
        "loss {first:.6} → {last:.6} ({:.1}× lower) in {STEPS} steps, {:.2} s",
        first / last,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
