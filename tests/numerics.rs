//! Numerics policies as a user meets them: `#[kernel(numerics = "..")]` and the scoped
//! run-time setting `tessera::numerics::policy`, on every backend (cpu and sim).
//!
//! - `kahan_sum` measurably beats `fast` on an ill-conditioned sum (the error ratio against an
//!   f64 reference is asserted);
//! - the issue's row (`1e8`, 4000 ones, `−1e8`; exact sum 4000) gives 4000 under `kahan_sum`;
//! - `deterministic` gives the same bits on 1 and 2 threads and on cpu and sim;
//! - a kernel's own policy and a conflicting scope is an error naming both.

use tessera::numerics::{self, NumericsPolicy};
use tessera::{Device, Tensor};

#[tessera::kernel]
fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    sum(x, 1)
}

#[tessera::kernel(numerics = "kahan_sum")]
fn row_sum_kahan(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    sum(x, 1)
}

#[tessera::kernel(numerics = "deterministic")]
fn row_sum_det(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    sum(x, 1)
}

#[tessera::kernel(numerics = "deterministic")]
fn softmax_det(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    sum(x, 0)
}

#[tessera::kernel]
fn linear(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

thread_local! {
    static DEVICE: std::cell::RefCell<Device> = const { std::cell::RefCell::new(Device::Cpu) };
}

fn on_device(t: Tensor<f32>) -> Tensor<f32> {
    t.to(&DEVICE.with(|d| d.borrow().clone())).unwrap()
}

/// A small seeded generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `rows` rows of `cols` terms of mixed magnitude (`±u·2^e`, `e` in `[-12, 12]`) that nearly
/// cancel: each row is pairs `(a, −a·(1 + δ))` with small `δ`, shuffled, so `Σ|x|` is about
/// a thousand times `|Σx|`.
fn ill_conditioned(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut v = Vec::with_capacity(rows * cols);
    for _ in 0..rows {
        let mut row = Vec::with_capacity(cols);
        while row.len() < cols {
            let e = (rng.unit() * 24.0) as i32 - 12;
            let a = ((0.5 + rng.unit()) * 2f64.powi(e)) as f32;
            let a = if rng.next() & 1 == 0 { a } else { -a };
            row.push(a);
            if row.len() < cols {
                row.push((-(a as f64) * (1.0 + 1e-3 * (rng.unit() - 0.3))) as f32);
            }
        }
        for i in (1..row.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            row.swap(i, j);
        }
        v.extend(row);
    }
    v
}

/// Max relative error per row against the f64 sum.
fn row_error(x: &[f32], cols: usize, got: &[f32]) -> f64 {
    x.chunks(cols)
        .zip(got)
        .map(|(row, g)| {
            let exact: f64 = row.iter().map(|v| *v as f64).sum();
            (*g as f64 - exact).abs() / exact.abs()
        })
        .fold(0.0, f64::max)
}

fn kahan_beats_fast_case(rows: usize, cols: usize, min_ratio: f64) {
    let data = ill_conditioned(rows, cols, 0x5EED);
    let x = on_device(Tensor::from_vec(data.clone(), &[rows, cols]).unwrap());
    let fast = row_error(&data, cols, &row_sum(&x).unwrap().to_vec().unwrap());
    let kahan = row_error(&data, cols, &row_sum_kahan(&x).unwrap().to_vec().unwrap());
    let scoped = numerics::policy(NumericsPolicy::KahanSum, || row_sum(&x)).unwrap();
    let scoped = row_error(&data, cols, &scoped.to_vec().unwrap());
    eprintln!(
        "{rows}x{cols}: max rel error fast {fast:.3e}, kahan_sum {kahan:.3e} (scope {scoped:.3e}), ratio {:.0}",
        fast / kahan.max(f64::MIN_POSITIVE)
    );
    assert!(
        kahan < 1e-6,
        "kahan_sum error {kahan:e}: not about f32 rounding"
    );
    assert!(
        fast >= min_ratio * kahan,
        "kahan_sum ({kahan:e}) does not beat fast ({fast:e}) by {min_ratio}x"
    );
    assert_eq!(scoped, kahan, "the scope and the attribute differ");
}

fn issue_row_case() {
    let mut row = vec![1f32; 4002];
    row[0] = 1e8;
    row[4001] = -1e8;
    let x = on_device(Tensor::from_vec(row.repeat(3), &[3, 4002]).unwrap());
    assert_eq!(row_sum_kahan(&x).unwrap().to_vec().unwrap(), [4000.0; 3]);
    let scoped = numerics::policy(NumericsPolicy::KahanSum, || row_sum(&x)).unwrap();
    assert_eq!(scoped.to_vec().unwrap(), [4000.0; 3]);
    // The column sum of the transpose, under the scope.
    let mut t = vec![1f32; 4002 * 2];
    t[..2].fill(1e8);
    t[4001 * 2..].fill(-1e8);
    let xt = on_device(Tensor::from_vec(t, &[4002, 2]).unwrap());
    let cs = numerics::policy(NumericsPolicy::KahanSum, || col_sum(&xt)).unwrap();
    assert_eq!(cs.to_vec().unwrap(), [4000.0; 2]);
}

/// The deterministic kernels give the same bits with 1 and 2 rayon threads, by attribute and
/// by scope; `bits` collects them so the test can compare backends.
fn deterministic_bits() -> Vec<u32> {
    let data = ill_conditioned(37, 3001, 9);
    let x = on_device(Tensor::from_vec(data, &[37, 3001]).unwrap());
    let w = on_device(Tensor::randn(&[3001, 19], 3));
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                let mut v = row_sum_det(&x).unwrap().to_vec().unwrap();
                v.extend(softmax_det(&x).unwrap().to_vec().unwrap());
                let scoped = numerics::policy(NumericsPolicy::Deterministic, || {
                    (row_sum(&x).unwrap(), linear(&x, &w).unwrap())
                });
                v.extend(scoped.0.to_vec().unwrap());
                v.extend(scoped.1.to_vec().unwrap());
                v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>()
            })
    };
    let one = run(1);
    assert!(one == run(2), "1 and 2 threads differ");
    one
}

fn conflicting_scope_case() {
    let x = on_device(Tensor::randn(&[4, 50], 1));
    let e = numerics::policy(NumericsPolicy::Deterministic, || row_sum_kahan(&x))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kahan_sum") && e.contains("deterministic"),
        "{e}"
    );
    // A fast scope asks nothing and changes nothing.
    let a = numerics::policy(NumericsPolicy::Fast, || row_sum_kahan(&x)).unwrap();
    assert_eq!(
        a.to_vec().unwrap(),
        row_sum_kahan(&x).unwrap().to_vec().unwrap()
    );
}

macro_rules! backend_tests {
    ($($backend:ident => $device:expr, $rows:expr, $cols:expr, $ratio:expr);* $(;)?) => {$(
        mod $backend {
            use super::*;
            fn device() {
                DEVICE.with(|x| *x.borrow_mut() = $device);
            }
            #[test] fn kahan_beats_fast() { device(); kahan_beats_fast_case($rows, $cols, $ratio); }
            #[test] fn issue_row() { device(); issue_row_case(); }
            #[test] fn conflicting_scope() { device(); conflicting_scope_case(); }
        }
    )*};
}

// The CPU sums 10^7 terms (100 rows of 10^5); the simulator, which interprets every PTX
// instruction, 2·10^5.
backend_tests!(
    cpu => Device::cpu(), 100, 100_000, 1000.0;
    sim => Device::sim(), 4, 50_000, 1000.0;
);

#[test]
fn deterministic_bitwise_across_threads_and_backends() {
    let cpu = deterministic_bits();
    DEVICE.with(|x| *x.borrow_mut() = Device::sim());
    let sim = deterministic_bits();
    let at = cpu.iter().zip(&sim).position(|(a, b)| a != b);
    assert!(at.is_none(), "cpu and sim differ at {at:?}");
    assert_eq!(cpu.len(), sim.len());
}
