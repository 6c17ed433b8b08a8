//! Tuning `tessera_kernels::attention` over its tile space (`Schedule::space` of the attention
//! class: `[BM, BN]` = query rows × keys per step) on the CPU and on the simulator: every
//! candidate is run and checked against the default schedule's output before it can win, and
//! the tuned launch still agrees with the f64 reference.
//!
//! (Its own test binary: it switches the process-wide autotune mode on.)

use tessera::ir::schedule::{KernelClass, Schedule};
use tessera::{Device, Float, Tensor, autotune, bf16};

fn reference<T: Float>(q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>, causal: bool) -> Vec<f64> {
    let (qs, ks) = (q.shape(), k.shape());
    tessera::ir::reference::ops::attention(
        &q.to_f64_vec().unwrap(),
        &k.to_f64_vec().unwrap(),
        &v.to_f64_vec().unwrap(),
        qs[0] * qs[1],
        qs[2],
        ks[2],
        qs[3],
        qs[3],
        1.0 / (qs[3] as f64).sqrt(),
        causal,
    )
}

fn max_rel(got: &[f64], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .fold(0f64, |m, (g, w)| m.max((g - w).abs()))
        / scale
}

/// Tunes `d64_causal` for `T` on `device` and checks the entry it leaves: every point of the
/// space was a candidate, every one ran and matched the default's output (on the simulator
/// with 16-bit inputs: every tile of the tensor-core template).
fn tune_on<T: Float>(device: Device, tol: f64) {
    let q = Tensor::<T>::randn(&[1, 2, 70, 64], 1).to(&device).unwrap();
    let k = Tensor::<T>::randn(&[1, 2, 45, 64], 2).to(&device).unwrap();
    let v = Tensor::<T>::randn(&[1, 2, 45, 64], 3).to(&device).unwrap();
    let before = autotune::trials_run();
    let y = tessera_kernels::attention(&q, &k, &v, true).unwrap();
    assert!(autotune::trials_run() > before, "nothing was tuned");
    let e = max_rel(&y.to_f64_vec().unwrap(), &reference(&q, &k, &v, true));
    assert!(
        e < tol,
        "tuned attention {}: relative error {e:e}",
        T::DTYPE
    );

    let space = Schedule::space(KernelClass::Attention, T::DTYPE);
    let entries = autotune::entries_for(&autotune::device_arch_id(&device));
    let name = format!("d64_causal_{}", T::DTYPE);
    let entry = entries
        .values()
        .find(|e| e.kernel == name)
        .unwrap_or_else(|| panic!("no entry for {name} among {:?}", entries.keys()));
    for s in &space {
        let r = entry
            .record(&s.to_string())
            .unwrap_or_else(|| panic!("{s} was not a candidate: {:?}", entry.trials));
        assert!(r.ok, "{s} failed the output check: {r:?}");
    }
    assert!(entry.best.is_some(), "no winner: {entry:?}");
}

#[test]
fn every_tile_of_the_space_is_checked_and_a_winner_chosen() {
    let dir = std::env::temp_dir().join(format!("tessera-attn-autotune-{}", std::process::id()));
    autotune::set_cache_dir(Some(dir.clone()));
    autotune::enable(true);
    tune_on::<f32>(Device::cpu(), 1e-5);
    tune_on::<f32>(Device::sim(), 1e-5);
    tune_on::<bf16>(Device::sim(), 1e-2);
    autotune::set_mode(None);
    let _ = std::fs::remove_dir_all(dir);
}
