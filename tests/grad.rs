//! `tessera::grad`: the backward kernels of real `#[kernel]`s run on every backend and agree
//! with the f64 interpreter run on the same backward graphs (whose VJP rules
//! `tessera-ir/src/autodiff/tests.rs` checks against central finite differences); attention's
//! (plain and causal), conv2d's (stride 1 grouped and dilated; strided grouped; strided
//! depthwise) and the FFT's are checked against central finite differences of the forward
//! graph directly.

use tessera::ir::reference::{Tensor64, eval};
use tessera::prelude::*;
use tessera::{KernelDef, grad};
use tessera_workspace::reference::rel_error;

#[tessera::kernel]
fn linear_tanh(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    tanh(x.matmul(w) + b)
}

#[tessera::kernel]
fn softmax_scaled(x: Tensor<f32, (M, N)>, s: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    softmax(x * s)
}

#[tessera::kernel]
fn layer_norm(
    x: Tensor<f32, (M, N)>,
    g: Tensor<f32, (N,)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    layernorm(x, g, b, 1e-5)
}

#[tessera::kernel]
fn rms_norm(x: Tensor<f32, (M, N)>, g: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
    rmsnorm(x, g, 1e-5)
}

#[tessera::kernel]
fn row_stats(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    (x * x).sum(1) + exp(x).mean(1)
}

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

#[tessera::kernel]
fn relu_k(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    relu(x) * x
}

/// The piecewise ops: gelu, abs, elementwise max/min (with a broadcast operand) and a row max.
#[tessera::kernel]
fn piecewise(x: Tensor<f32, (M, N)>, r: Tensor<f32, (N,)>) -> Tensor<f32, (M,)> {
    (gelu(x) * abs(x) + maximum(x, r) - minimum(x * 0.5, r)).amax(1)
}

#[tessera::kernel]
fn linear_gelu(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

/// `linear_gelu` under `kahan_sum`: its backward kernels' reductions (the bias sum included)
/// carry the policy.
#[tessera::kernel(numerics = "kahan_sum")]
fn linear_gelu_kahan(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

#[tessera::kernel]
fn attn(
    q: Tensor<f32, (B, S, D)>,
    k: Tensor<f32, (B, T, D)>,
    v: Tensor<f32, (B, T, E)>,
) -> Tensor<f32, (B, S, E)> {
    softmax(q.matmul(k.t()) * 0.5).matmul(v)
}

#[tessera::kernel]
fn attn_causal(
    q: Tensor<f32, (B, S, D)>,
    k: Tensor<f32, (B, T, D)>,
    v: Tensor<f32, (B, T, E)>,
) -> Tensor<f32, (B, S, E)> {
    softmax(causal_mask(q.matmul(k.t()) * 0.5)).matmul(v)
}

/// A grouped, dilated, padded 3×3 convolution (stride 1) with a bias and ReLU: the implicit
/// GEMM forward and its backward graph (the transposed convolution for the input, tap-by-tap weight gradients) as kernels.
#[tessera::kernel]
fn conv_bias_relu(
    x: Tensor<f32, (N, Const<6>, Const<7>, Const<4>)>,
    w: Tensor<f32, (Const<3>, Const<3>, Const<2>, Const<6>)>,
    b: Tensor<f32, (Const<6>,)>,
) -> Tensor<f32, (N, Const<6>, Const<5>, Const<6>)> {
    relu(conv2d(x, w, [1, 1], [1, 1], [1, 2], 2) + b)
}

/// FFT along a middle axis, an elementwise map of the spectrum, the inverse transform: the
/// `fft`/`ifft`/`complex`/`real` gradients as kernels.
#[tessera::kernel]
fn spectrum(
    x: Tensor<f32, (B, Const<16>, Const<3>)>,
    w: Tensor<f32, (B, Const<16>, Const<3>)>,
) -> Tensor<f32, (B, Const<16>, Const<3>)> {
    let f = fft(complex(x * w), 1);
    real(ifft(tanh(f) * f, 1))
}

/// A strided, grouped convolution (stride 2, padding 1, 2 groups): its input gradient is the
/// transposed convolution (`pad` with interior padding, then a stride-1 conv2d).
#[tessera::kernel]
fn conv_strided(
    x: Tensor<f32, (N, Const<9>, Const<8>, Const<4>)>,
    w: Tensor<f32, (Const<3>, Const<3>, Const<2>, Const<6>)>,
) -> Tensor<f32, (N, Const<5>, Const<4>, Const<6>)> {
    tanh(conv2d(x, w, [2, 2], [1, 1], [1, 1], 2))
}

/// Depthwise at strides [3, 2] with dilation [2, 1] and padding [1, 0].
#[tessera::kernel]
fn conv_depthwise_strided(
    x: Tensor<f32, (N, Const<10>, Const<9>, Const<3>)>,
    w: Tensor<f32, (Const<2>, Const<2>, Const<1>, Const<3>)>,
) -> Tensor<f32, (N, Const<4>, Const<4>, Const<3>)> {
    tanh(conv2d(x, w, [3, 2], [1, 0], [2, 1], 3))
}

/// Mean pooling over the middle axes: its backward broadcasts `[B, 1, 1, C]` to
/// `[B, H, W, C]`, an elementwise kernel over a `[B, H·W, C]` view.
#[tessera::kernel]
fn pool_middle(
    x: Tensor<f32, (B, Const<4>, Const<5>, Const<3>)>,
) -> Tensor<f32, (B, Const<1>, Const<1>, Const<3>)> {
    tanh(mean_keepdim(x, [1, 2]))
}

thread_local! {
    static DEVICE: std::cell::RefCell<Device> = const { std::cell::RefCell::new(Device::Cpu) };
}

/// Runs every backward kernel of `k` at random inputs of `shapes` on the backend under test
/// and compares each gradient with the f64 interpreter on the same backward graph.
fn case(k: &'static KernelDef, shapes: &[&[usize]], seed: u64) {
    let dev = DEVICE.with(|d| d.borrow().clone());
    let xs: Vec<Tensor<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Tensor::randn(s, seed + i as u64))
        .collect();
    let on: Vec<Tensor<f32>> = xs.iter().map(|x| x.to(&dev).unwrap()).collect();
    let args: Vec<_> = on.iter().map(|x| x.arg()).collect();
    let y = k.launch::<f32>(&args).unwrap();
    let dy = Tensor::<f32>::randn(y.shape(), seed + 50);
    let g = grad(k).unwrap();
    let got = g.backward::<f32>(&args, &dy.to(&dev).unwrap()).unwrap();
    assert_eq!(got.len(), shapes.len());
    let mut inputs: Vec<Tensor64> = xs
        .iter()
        .map(|x| Tensor64::new(x.shape().to_vec(), x.to_f64_vec().unwrap()))
        .collect();
    inputs.push(Tensor64::new(dy.shape().to_vec(), dy.to_f64_vec().unwrap()));
    for (p, dp) in g.params().iter().zip(&got) {
        let bw = g.kernel(p).unwrap();
        let graph = &bw.compiled().unwrap().graph;
        let want = eval(graph, &inputs).unwrap();
        assert_eq!(dp.shape(), &want.shape[..], "{}: d{p}", k.name());
        let e = rel_error(&dp.to_f64_vec().unwrap(), &want.data);
        assert!(e < 1e-4, "{} d{p}: relative error {e:e}", k.name());
    }
}

/// Runs every backward kernel of `k` at random inputs of `shapes` on the backend under test
/// and compares each gradient with central finite differences of the forward graph in f64:
/// `(⟨dy, f(x + h·e_j)⟩ − ⟨dy, f(x − h·e_j)⟩) / 2h` for every element `j`.
fn case_fd(k: &'static KernelDef, shapes: &[&[usize]], seed: u64) {
    let dev = DEVICE.with(|d| d.borrow().clone());
    let fwd = tessera::ir::graph::parse(k.graph_text()).unwrap();
    let xs: Vec<Tensor<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Tensor::randn(s, seed + i as u64))
        .collect();
    let on: Vec<Tensor<f32>> = xs.iter().map(|x| x.to(&dev).unwrap()).collect();
    let args: Vec<_> = on.iter().map(|x| x.arg()).collect();
    let y = k.launch::<f32>(&args).unwrap();
    let dy = Tensor::<f32>::randn(y.shape(), seed + 50);
    let g = grad(k).unwrap();
    let got = g.backward::<f32>(&args, &dy.to(&dev).unwrap()).unwrap();
    let inputs: Vec<Tensor64> = xs
        .iter()
        .map(|x| Tensor64::new(x.shape().to_vec(), x.to_f64_vec().unwrap()))
        .collect();
    let dy = dy.to_f64_vec().unwrap();
    let loss = |inputs: &[Tensor64]| -> f64 {
        let y = eval(&fwd, inputs).unwrap().data;
        y.iter().zip(&dy).map(|(a, b)| a * b).sum()
    };
    for (p, dp) in g.params().iter().zip(&got) {
        let i = fwd
            .params
            .iter()
            .position(|v| fwd.value_name(*v) == format!("%{p}"))
            .unwrap();
        let h = 1e-5;
        let want: Vec<f64> = (0..inputs[i].data.len())
            .map(|j| {
                let mut plus = inputs.to_vec();
                plus[i].data[j] += h;
                let mut minus = inputs.to_vec();
                minus[i].data[j] -= h;
                (loss(&plus) - loss(&minus)) / (2.0 * h)
            })
            .collect();
        assert_eq!(dp.shape(), &inputs[i].shape[..], "{}: d{p}", k.name());
        let e = rel_error(&dp.to_f64_vec().unwrap(), &want);
        assert!(
            e < 1e-4,
            "{} d{p}: relative error {e:e} against finite differences",
            k.name()
        );
    }
}

macro_rules! backend_tests {
    ($($backend:ident => $device:expr),* $(,)?) => {$(
        mod $backend {
            use super::*;
            fn device() {
                DEVICE.with(|x| *x.borrow_mut() = $device);
            }
            #[test] fn matmul_bias_tanh() { device(); case(&linear_tanh::KERNEL, &[&[37, 19], &[19, 23], &[23]], 1); }
            #[test] fn softmax() { device(); case(&softmax_scaled::KERNEL, &[&[9, 70], &[9, 70]], 2); }
            #[test] fn layernorm() { device(); case(&layer_norm::KERNEL, &[&[13, 40], &[40], &[40]], 3); }
            #[test] fn rmsnorm() { device(); case(&rms_norm::KERNEL, &[&[13, 40], &[40]], 4); }
            #[test] fn reductions() { device(); case(&row_stats::KERNEL, &[&[11, 33]], 5); }
            #[test] fn relu() { device(); case(&relu_k::KERNEL, &[&[9, 40]], 7); }
            #[test] fn gelu_abs_max_min_amax() { device(); case(&piecewise::KERNEL, &[&[13, 37], &[37]], 8); }
            #[test] fn mlp() { device(); case(&mlp_loss::KERNEL, &[&[16, 5], &[5, 12], &[12], &[12, 3], &[3], &[16, 3]], 6); }
            #[test] fn matmul_bias_gelu() { device(); case(&linear_gelu::KERNEL, &[&[70, 9], &[9, 21], &[21]], 9); }
            #[test] fn matmul_bias_gelu_ordered_policies() {
                device();
                // The fused column reduction's row-by-row path (deterministic, kahan_sum).
                for p in [tessera::NumericsPolicy::Deterministic, tessera::NumericsPolicy::KahanSum] {
                    tessera::numerics::policy(p, || case(&linear_gelu::KERNEL, &[&[70, 9], &[9, 21], &[21]], 12));
                }
            }
            #[test] fn attention() { device(); case_fd(&attn::KERNEL, &[&[2, 5, 4], &[2, 7, 4], &[2, 7, 3]], 10); }
            #[test] fn matmul_bias_gelu_kahan_kernel() { device(); case(&linear_gelu_kahan::KERNEL, &[&[70, 9], &[9, 21], &[21]], 15); }
            #[test] fn mean_over_middle_axes() { device(); case(&pool_middle::KERNEL, &[&[3, 4, 5, 3]], 16); }
            #[test] fn conv2d_strided_grouped() { device(); case_fd(&conv_strided::KERNEL, &[&[2, 9, 8, 4], &[3, 3, 2, 6]], 13); }
            #[test] fn conv2d_strided_depthwise() { device(); case_fd(&conv_depthwise_strided::KERNEL, &[&[2, 10, 9, 3], &[2, 2, 1, 3]], 14); }
            #[test] fn attention_causal() { device(); case_fd(&attn_causal::KERNEL, &[&[2, 5, 4], &[2, 7, 4], &[2, 7, 3]], 11); }
            #[test] fn conv2d() { device(); case_fd(&conv_bias_relu::KERNEL, &[&[2, 6, 7, 4], &[3, 3, 2, 6], &[6]], 17); }
            #[test] fn fft_ifft() { device(); case_fd(&spectrum::KERNEL, &[&[2, 16, 3], &[2, 16, 3]], 18); }
        }
    )*};
}

backend_tests!(
    cpu => Device::cpu(),
    sim_sm80 => Device::sim(),
);

#[test]
fn bias_and_gamma_gradients_fuse_into_their_producers_in_the_fusion_trace() {
    // The bias gradient's column sum takes over the kernel computing dY·gelu'(x·w + b): the
    // operand is never written to memory.
    for (k, p) in [(&linear_gelu::KERNEL, "b"), (&linear_tanh::KERNEL, "b")] {
        let c = grad(k).unwrap().kernel(p).unwrap().compiled().unwrap();
        let trace = c.trace();
        let line = trace
            .lines()
            .find(|l| l.contains("(reduce.sum) fused into"))
            .unwrap_or_else(|| panic!("{}: no pipeline fusion\n{trace}", k.name()));
        assert!(
            line.contains("as column reduction (pipeline fusion)"),
            "{line}"
        );
        assert!(c.graph.to_string().contains("%dy: f32[M, N]"));
        assert!(
            c.kernels.iter().any(|k| !k.fused.prologue.is_empty()),
            "{}: no kernel has a prologue",
            k.name()
        );
    }
    // Layernorm's dγ: x̂ and dY·x̂ are one row program (the row statistics recomputed inside
    // it), then the column sum, which pipeline fusion does not take over from a row program.
    let c = grad(&layer_norm::KERNEL)
        .unwrap()
        .kernel("g")
        .unwrap()
        .compiled()
        .unwrap();
    assert_eq!(c.kernels.len(), 2, "{}", c.trace());
    assert!(c.trace().contains("a row program of"), "{}", c.trace());
}

#[test]
fn a_kahan_kernels_backward_reductions_are_kahan() {
    let g = grad(&linear_gelu_kahan::KERNEL).unwrap();
    for p in g.params() {
        let c = g.kernel(p).unwrap().compiled().unwrap();
        let policies: Vec<_> = c.graph.nodes.iter().filter_map(|n| n.op.policy()).collect();
        // dx, dw: the matmuls; db: the bias sum over the rows (and no reduction left `fast`).
        assert!(!policies.is_empty(), "d{p}: no reduction\n{}", c.graph);
        assert!(
            policies
                .iter()
                .all(|q| *q == tessera::NumericsPolicy::KahanSum),
            "d{p}: {policies:?}\n{}",
            c.graph
        );
    }
}
