//! The autotuner never trades a numerics policy away: a `deterministic` kernel tuned over
//! its whole search space gives the bits of its default schedule (candidates must reproduce
//! them bit for bit, and every candidate is lowered under the kernel's policy), and a
//! `kahan_sum` kernel stays compensated. The issue measured 3976 with the default schedule and
//! 3984 after tuning for `deterministic` on the row `1e8`, 4000 ones, `−1e8`.
//!
//! (Its own test binary: it switches the process-wide autotune mode on.)

use tessera::Tensor;
use tessera::autotune;
use tessera::numerics::{self, NumericsPolicy};

#[tessera::kernel(numerics = "deterministic", autotune(tiles = [(1, 256), (4, 128), (8, 512), (16, 128), (2, 64), (8, 1024)], strategy = "grid", cost_model = "none"))]
fn det_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    sum(x, 1)
}

#[tessera::kernel(numerics = "kahan_sum", autotune(tiles = [(1, 256), (4, 128), (8, 512), (16, 128), (2, 64)], strategy = "grid", cost_model = "none"))]
fn kahan_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    sum(x, 1)
}

#[tessera::kernel(autotune(tiles = [(32, 32, 32), (64, 64, 32), (128, 128, 64), (32, 64, 128)], strategy = "grid", cost_model = "none"))]
fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

fn bits(t: &Tensor<f32>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn tuning_keeps_the_policy() {
    let dir =
        std::env::temp_dir().join(format!("tessera-numerics-autotune-{}", std::process::id()));
    autotune::set_cache_dir(Some(dir.clone()));
    let mut row = vec![1f32; 4002];
    row[0] = 1e8;
    row[4001] = -1e8;
    let issue = Tensor::from_vec(row.repeat(5), &[5, 4002]).unwrap();
    let mixed = Tensor::<f32>::randn(&[33, 5000], 7);
    let x = Tensor::<f32>::randn(&[40, 700], 8);
    let w = Tensor::<f32>::randn(&[700, 50], 9);

    autotune::enable(false);
    let want_issue = bits(&det_sum(&issue).unwrap());
    let want_mixed = bits(&det_sum(&mixed).unwrap());
    let want_mm = numerics::policy(NumericsPolicy::Deterministic, || mm(&x, &w)).unwrap();

    autotune::enable(true);
    let before = autotune::trials_run();
    assert_eq!(bits(&det_sum(&issue).unwrap()), want_issue);
    assert_eq!(bits(&det_sum(&mixed).unwrap()), want_mixed);
    assert_eq!(kahan_sum(&issue).unwrap().to_vec().unwrap(), [4000.0; 5]);
    let tuned_mm = numerics::policy(NumericsPolicy::Deterministic, || mm(&x, &w)).unwrap();
    assert_eq!(bits(&tuned_mm), bits(&want_mm));
    let trials = autotune::trials_run() - before;
    assert!(trials >= 10, "only {trials} trials: nothing was tuned");

    // The tuned winners, now from the cache.
    autotune::set_mode(Some(autotune::Mode::Cached));
    assert_eq!(bits(&det_sum(&issue).unwrap()), want_issue);
    assert_eq!(kahan_sum(&issue).unwrap().to_vec().unwrap(), [4000.0; 5]);
    autotune::set_mode(None);
    let _ = std::fs::remove_dir_all(dir);
}
