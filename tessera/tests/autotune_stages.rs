//! A schedule whose pipeline stages do not fit the device's shared memory is rejected by the
//! autotuner with the reason recorded, never timed as a shallower pipeline under its own name.

use tessera::autotune::{self, SearchSpace, Strategy};
use tessera::ir::target::ptx::Arch;
use tessera::{Device, Tensor};

#[tessera::kernel]
fn smm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

#[test]
fn stages_that_do_not_fit_are_rejected_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    // f32 64×128×64 tiles: 48 KB per stage; three stages (144 KB) exceed Ada's 99 KB per
    // block, two would fit. 32×32×32 tiles (12 KB per stage) fit with three.
    autotune::search_space(
        "smm",
        SearchSpace::new()
            .tiles([(32, 32, 32), (64, 128, 64)])
            .stages([3])
            .strategy(Strategy::Grid),
    );
    autotune::enable(true);
    let dev = Device::sim_arch(Arch::Sm89);
    let a = Tensor::<f32>::randn(&[40, 24], 5);
    let b = Tensor::<f32>::randn(&[24, 36], 6);
    let got = smm(&a.clone().to(&dev).unwrap(), &b.clone().to(&dev).unwrap()).unwrap();
    let e = autotune::entries_for("sim-sm_89")
        .into_values()
        .find(|e| e.kernel == "smm")
        .expect("a sim-sm_89 entry");
    let big = e
        .trials
        .iter()
        .find(|t| t.candidate.contains("tile=[64, 128, 64]"))
        .unwrap_or_else(|| panic!("no record of the 64x128x64 candidate: {:?}", e.trials));
    assert!(
        big.note
            .contains("3 pipeline stages of 49152 B exceed the 101376 B")
            && big.note.contains("2 would fit"),
        "{}",
        big.note
    );
    assert!(big.measured_s.is_none());
    assert_ne!(e.best.as_deref(), Some(big.candidate.as_str()));
    // The winner's result is right.
    let (a, b) = (a.to_vec().unwrap(), b.to_vec().unwrap());
    let y = got.to(&Device::Cpu).unwrap();
    for i in 0..40 {
        for j in 0..36 {
            let want: f64 = (0..24)
                .map(|k| a[i * 24 + k] as f64 * b[k * 36 + j] as f64)
                .sum();
            let v = y.as_slice().unwrap()[i * 36 + j] as f64;
            assert!(
                (v - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "{v} vs {want}"
            );
        }
    }
    autotune::clear_search_space("smm");
    autotune::set_mode(None);
}
