//! `#[kernel(tile = (BM, BN, BK))]` (seeds §7.2): the pinned tile is the schedule the matmul
//! runs under on every backend, with the autotuner in `full` mode, and results agree with f64.

use tessera::prelude::*;
use tessera::{autotune, last_launch};
use tessera_workspace::reference::{self, rel_error};

#[tessera::kernel(tile = (64, 64, 32))]
fn pinned_mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    relu(x.matmul(w))
}

#[tessera::kernel(tile = (128, 128, 64))]
fn pinned_mm_table(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

/// Tests set the process-wide tuner mode: one at a time.
static MODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` on random `[m, k] × [k, n]` inputs on `device` with the autotuner in `full` mode
/// (a private cache dir); checks the result against f64 and that the matmul kernel ran
/// under `tile`.
fn case(
    device: &Device,
    tile: &[u32],
    relu: bool,
    f: impl Fn(&Tensor<f32>, &Tensor<f32>) -> tessera::Result<Tensor<f32>>,
) {
    let _one = MODE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("tessera-pinned-tile-{}", std::process::id()));
    autotune::set_cache_dir(Some(dir));
    autotune::set_mode(Some(autotune::Mode::Full));
    for (i, &(m, k, n)) in [(37, 61, 29), (129, 67, 131)].iter().enumerate() {
        let x = Tensor::<f32>::randn(&[m, k], 7 + i as u64)
            .to(device)
            .unwrap();
        let w = Tensor::<f32>::randn(&[k, n], 70 + i as u64)
            .to(device)
            .unwrap();
        let y = f(&x, &w).unwrap();
        let ran = last_launch();
        let mm: Vec<_> = ran
            .iter()
            .filter_map(|r| r.schedule.as_ref())
            .filter(|s| s.class == tessera::ir::schedule::KernelClass::Matmul)
            .collect();
        assert_eq!(mm.len(), 1, "{device:?}: one matmul kernel ran: {ran:?}");
        assert_eq!(mm[0].tile, tile, "{device:?}: {ran:?}");
        let mut want =
            reference::matmul(&x.to_f64_vec().unwrap(), &w.to_f64_vec().unwrap(), m, k, n);
        if relu {
            want.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        let e = rel_error(&y.to_f64_vec().unwrap(), &want);
        assert!(e < 1e-5, "{device:?} {m}x{k}x{n}: relative error {e:e}");
    }
}

#[test]
fn pinned_tile_runs_on_cpu() {
    // (64, 64, 32) and (128, 128, 64) both differ from the CPU's default (128, 256, 64).
    case(&Device::cpu(), &[64, 64, 32], true, |x, w| pinned_mm(x, w));
    case(&Device::cpu(), &[128, 128, 64], false, |x, w| {
        pinned_mm_table(x, w)
    });
}

#[test]
fn pinned_tile_runs_on_sim() {
    let sim = Device::sim();
    case(&sim, &[64, 64, 32], true, |x, w| pinned_mm(x, w));
    case(&sim, &[128, 128, 64], false, |x, w| pinned_mm_table(x, w));
    // The PTX the simulator ran is the pinned schedule's, embedded by the macro.
    let ptx = pinned_mm::KERNEL
        .ptx(0, tessera::ir::target::ptx::Arch::Sm80)
        .unwrap();
    let manifest = pinned_mm::KERNEL.compiled().unwrap();
    assert_eq!(manifest.kernels[0].schedule.tile, vec![64, 64, 32]);
    assert!(!ptx.is_empty());
}

#[test]
fn unpinned_kernels_report_their_defaults() {
    #[tessera::kernel]
    fn plain_mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
        x.matmul(w)
    }
    let x = Tensor::<f32>::randn(&[5, 3], 1);
    let w = Tensor::<f32>::randn(&[3, 4], 2);
    // Without the tuner the CPU runs its own default tile, which the pinned tests differ from.
    let _one = MODE.lock().unwrap_or_else(|e| e.into_inner());
    autotune::set_mode(Some(autotune::Mode::Off));
    plain_mm(&x, &w).unwrap();
    let ran = last_launch();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].schedule.as_ref().unwrap().tile, vec![128, 256, 64]);
}

/// The PTX of the pinned schedules (embedded by the macro, never among the library's
/// precompiled modules): every fused kernel, every arch. When `TESSERA_PTXAS` names a ptxas
/// binary (`scripts/ptxas-check` sets it), ptxas must accept each with 0 spills and no
/// inserted-wait (C75xx) warning; without it the PTX is only emitted.
#[test]
fn pinned_tile_ptx_passes_ptxas() {
    use tessera::ir::target::ptx::Arch;
    let ptxas = std::env::var("TESSERA_PTXAS").ok();
    let dir = std::env::temp_dir().join(format!("tessera-pinned-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for (def, tile) in [
        (&pinned_mm::KERNEL, [64, 64, 32]),
        (&pinned_mm_table::KERNEL, [128, 128, 64]),
    ] {
        let kernels = &def.compiled().unwrap().kernels;
        assert!(!kernels.is_empty());
        for i in 0..kernels.len() {
            for arch in Arch::ALL {
                let text = def.ptx(i, arch).unwrap();
                assert!(text.contains(&format!(".target {}", arch.target())));
                let Some(ptxas) = &ptxas else { continue };
                let f = dir.join(format!("{}_{i}_{arch}.ptx", def.name()));
                std::fs::write(&f, &text).unwrap();
                let out = std::process::Command::new(ptxas)
                    .args(["-v", &format!("-arch={}", arch.target())])
                    .arg(&f)
                    .args(["-o", "/dev/null"])
                    .output()
                    .unwrap();
                let log = String::from_utf8_lossy(&out.stderr).to_string();
                let what = format!("{} kernel {i} (tile {tile:?}, {arch})", def.name());
                assert!(out.status.success(), "ptxas rejected {what}:\n{log}");
                assert!(
                    log.contains("0 bytes spill stores"),
                    "{what} spills:\n{log}"
                );
                assert!(log.contains("0 bytes spill loads"), "{what} spills:\n{log}");
                assert!(
                    !log.contains("(C75"),
                    "{what}: ptxas inserted waits:\n{log}"
                );
                checked += 1;
            }
        }
    }
    match ptxas {
        Some(_) => eprintln!("ptxas accepted {checked} pinned-tile modules, 0 spills"),
        None => eprintln!("TESSERA_PTXAS not set: pinned-tile PTX emitted, ptxas not run"),
    }
}
