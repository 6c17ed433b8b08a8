//! Fused attention (the `flash_attention` rewrite: one online-softmax kernel) against the f64
//! reference and against the same kernel compiled with the rewrite switched off, on cpu and
//! the simulator, for f32, bf16 and f16 inputs, with and without the causal mask, on lengths
//! that are not multiples of the tile (and S = 1).

use tessera::{Device, Element, Tensor, bf16, f16};
use tessera_workspace::reference::rel_error;

#[tessera::kernel(dims(D = 64, E = 32))]
fn attn(
    q: Tensor<f32, (B, H, S, D)>,
    k: Tensor<f32, (B, H, T, D)>,
    v: Tensor<f32, (B, H, T, E)>,
) -> Tensor<f32, (B, H, S, E)> {
    softmax(q.matmul(k.t()) * 0.125).matmul(v)
}

#[tessera::kernel(dims(D = 64, E = 32), rewrites(flash_attention = false))]
fn attn_unfused(
    q: Tensor<f32, (B, H, S, D)>,
    k: Tensor<f32, (B, H, T, D)>,
    v: Tensor<f32, (B, H, T, E)>,
) -> Tensor<f32, (B, H, S, E)> {
    softmax(q.matmul(k.t()) * 0.125).matmul(v)
}

#[tessera::kernel(dims(D = 64, E = 32))]
fn attn_causal(
    q: Tensor<f32, (B, H, S, D)>,
    k: Tensor<f32, (B, H, T, D)>,
    v: Tensor<f32, (B, H, T, E)>,
) -> Tensor<f32, (B, H, S, E)> {
    softmax(causal_mask(q.matmul(k.t()) * 0.125)).matmul(v)
}

#[tessera::kernel(dims(D = 64, E = 32), rewrites(flash_attention = false))]
fn attn_causal_unfused(
    q: Tensor<f32, (B, H, S, D)>,
    k: Tensor<f32, (B, H, T, D)>,
    v: Tensor<f32, (B, H, T, E)>,
) -> Tensor<f32, (B, H, S, E)> {
    softmax(causal_mask(q.matmul(k.t()) * 0.125)).matmul(v)
}

#[tessera::kernel(dims(D = 64))]
fn attn_bf16(
    q: Tensor<bf16, (B, S, D)>,
    k: Tensor<bf16, (B, T, D)>,
    v: Tensor<bf16, (B, T, D)>,
) -> Tensor<f32, (B, S, D)> {
    softmax(q.matmul(k.t()) * 0.125).cast::<bf16>().matmul(v)
}

#[tessera::kernel(dims(D = 64))]
fn attn_f16_causal(
    q: Tensor<f16, (B, S, D)>,
    k: Tensor<f16, (B, T, D)>,
    v: Tensor<f16, (B, T, D)>,
) -> Tensor<f32, (B, S, D)> {
    softmax(causal_mask(q.matmul(k.t()) * 0.125))
        .cast::<f16>()
        .matmul(v)
}

thread_local! {
    static DEVICE: std::cell::RefCell<Device> = const { std::cell::RefCell::new(Device::Cpu) };
}

fn randn<T: Element>(shape: &[usize], seed: u64) -> Tensor<T> {
    Tensor::randn(shape, seed)
        .to(&DEVICE.with(|d| d.borrow().clone()))
        .unwrap()
}

/// `(batch, heads, Sq, Sk)`: S = 1, lengths straddling the tiles, Sq ≠ Sk both ways.
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (1, 1, 1, 1),
    (1, 2, 1, 40),
    (2, 3, 37, 45),
    (1, 1, 70, 33),
    (1, 2, 129, 129),
];

type Attn4 = fn(&Tensor<f32>, &Tensor<f32>, &Tensor<f32>) -> tessera::Result<Tensor<f32>>;

/// `unfused`: the same body with the rewrite off, where given (the causal case compares with
/// f64 alone; `tests/ops.rs` checks an unabsorbed `causal_mask` on its own).
fn f32_case(causal: bool, fused: Attn4, unfused: Option<Attn4>) {
    for (i, &(b, h, s, t)) in SHAPES.iter().enumerate() {
        let seed = 10 * i as u64 + causal as u64;
        let q = randn::<f32>(&[b, h, s, 64], seed);
        let k = randn::<f32>(&[b, h, t, 64], seed + 100);
        let v = randn::<f32>(&[b, h, t, 32], seed + 200);
        let y = fused(&q, &k, &v).unwrap();
        assert_eq!(y.shape(), &[b, h, s, 32]);
        let want = tessera::ir::reference::ops::attention(
            &q.to_f64_vec().unwrap(),
            &k.to_f64_vec().unwrap(),
            &v.to_f64_vec().unwrap(),
            b * h,
            s,
            t,
            64,
            32,
            0.125,
            causal,
        );
        let ey = rel_error(&y.to_f64_vec().unwrap(), &want);
        let what = format!("attention causal={causal} {b}x{h}x{s}x{t}");
        assert!(ey < 1e-5, "{what}: fused relative error {ey:e}");
        if let Some(unfused) = unfused {
            let z = unfused(&q, &k, &v).unwrap();
            let ez = rel_error(&z.to_f64_vec().unwrap(), &want);
            assert!(ez < 1e-5, "{what}: unfused relative error {ez:e}");
            let e = rel_error(&y.to_f64_vec().unwrap(), &z.to_f64_vec().unwrap());
            assert!(e < 1e-5, "{what}: fused vs unfused {e:e}");
        }
    }
}

type Attn3<T> = fn(&Tensor<T>, &Tensor<T>, &Tensor<T>) -> tessera::Result<Tensor<f32>>;

fn half_case<T: Element>(causal: bool, f: Attn3<T>) {
    for (i, &(b, h, s, t)) in SHAPES.iter().enumerate() {
        let bh = b * h;
        let seed = 500 + 10 * i as u64;
        let q = randn::<T>(&[bh, s, 64], seed);
        let k = randn::<T>(&[bh, t, 64], seed + 1);
        let v = randn::<T>(&[bh, t, 64], seed + 2);
        let y = f(&q, &k, &v).unwrap();
        let want = tessera::ir::reference::ops::attention(
            &q.to_f64_vec().unwrap(),
            &k.to_f64_vec().unwrap(),
            &v.to_f64_vec().unwrap(),
            bh,
            s,
            t,
            64,
            64,
            0.125,
            causal,
        );
        // Inputs are exact in f64; the probabilities are rounded to T before the second
        // product, so the error is T's rounding.
        let e = rel_error(&y.to_f64_vec().unwrap(), &want);
        assert!(
            e < 1e-2,
            "attention {} causal={causal} {bh}x{s}x{t}: relative error {e:e}",
            T::DTYPE
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
            #[test] fn attention_f32() { device(); f32_case(false, attn, Some(attn_unfused)); }
            #[test] fn attention_f32_causal() { device(); f32_case(true, attn_causal, Some(attn_causal_unfused)); }
            #[test] fn attention_bf16() { device(); half_case::<bf16>(false, attn_bf16); }
            #[test] fn attention_f16_causal() { device(); half_case::<f16>(true, attn_f16_causal); }
        }
    )*};
}

backend_tests!(
    cpu => Device::cpu(),
    sim_sm80 => Device::sim(),
    sim_sm90a => Device::sim_arch(tessera::ir::target::ptx::Arch::Sm90a),
);
