//! Autotuning: a fused linear + bias + GELU tuned for its shape — the fusion depth, then each
//! kernel's tile — with every candidate checked against the default schedule's output; the
//! cache makes the second call free and can be shipped to another machine; a nearby shape
//! borrows the tuned shape's winner at once and is refined in the background; the same kernel
//! tuned for an sm_90a GPU on the simulator (checked on the PTX it would run, ranked by the
//! cost model, since the simulator has no clock).
//!
//! Run: `cargo run --release --example autotune`. It keeps its cache in a temporary folder
//! unless `TESSERA_CACHE_DIR` is set; with `TESSERA_AUTOTUNE` set it makes one call in that
//! mode instead of walking through every mode.

use std::time::Instant;
use tessera::autotune::{self, Entry, Mode};
use tessera::ir::target::ptx::Arch;
use tessera::prelude::*;
use tessera_workspace::reference::{self, rel_error};

/// `gelu(x · w + b)`, with the space the tuner searches: four tiles and every fusion depth.
#[tessera::kernel(autotune(
    tiles = [(64, 64, 64), (128, 128, 64), (128, 256, 64), (256, 128, 128)],
    fusion_depth = [0, 1, 2],
    max_trials = 4
))]
fn linear_gelu(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

fn show(what: &str, e: &Entry) {
    let best = e.best.as_deref().unwrap_or("?");
    println!(
        "  {what}: {} candidates recorded, chosen `{best}`",
        e.trials.len()
    );
    for t in &e.trials {
        let m = t
            .measured_s
            .map_or(t.note.clone(), |s| format!("{:.3} ms", s * 1e3));
        let p = if t.predicted_s < 0.0 {
            "pruned".to_string()
        } else {
            format!("{:.3} ms", t.predicted_s * 1e3)
        };
        println!("    {:<62} predicted {p:>10}  measured {m}", t.candidate);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A private cache folder, so the example starts cold and leaves the tree alone — unless
    // TESSERA_CACHE_DIR names one, which is then used (and kept).
    let tmp = std::env::temp_dir().join(format!("tessera-autotune-example-{}", std::process::id()));
    let user_dir = std::env::var_os("TESSERA_CACHE_DIR").is_some_and(|d| !d.is_empty());
    if user_dir {
        println!(
            "using TESSERA_CACHE_DIR={}",
            autotune::cache_dir().display()
        );
    } else {
        autotune::set_cache_dir(Some(tmp.clone()));
    }
    let (m, k, n) = (384, 512, 768);
    let x = Tensor::<f32>::randn(&[m, k], 1);
    let w = Tensor::<f32>::randn(&[k, n], 2);
    let b = Tensor::<f32>::randn(&[n], 3);
    let mut want = reference::matmul(&x.to_f64_vec()?, &w.to_f64_vec()?, m, k, n);
    let bv = b.to_f64_vec()?;
    want.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = reference::gelu(*v + bv[i % n]));

    // The walk-through below switches modes to show each one; a user's TESSERA_AUTOTUNE is
    // honoured instead: one call under it, checked against f64.
    if let Some(v) = std::env::var_os("TESSERA_AUTOTUNE") {
        let mode = autotune::try_mode()?;
        println!(
            "TESSERA_AUTOTUNE={v:?} is set: one call in mode {mode:?} (unset it for the walk-through)"
        );
        let before = autotune::trials_run();
        let y = linear_gelu(&x, &w, &b)?;
        let err = rel_error(&y.to_f64_vec().unwrap(), &want);
        println!(
            "  {} trials; rel. error vs f64: {err:.2e}",
            autotune::trials_run() - before
        );
        assert!(err < 1e-5, "the result disagrees with the f64 reference");
        autotune::wait_background();
        if !user_dir {
            std::fs::remove_dir_all(&tmp).ok();
        }
        return Ok(());
    }

    autotune::set_mode(Some(Mode::Off));
    let (y0, t_default) = timed(|| linear_gelu(&x, &w, &b));
    let y0 = y0?;

    println!("1. first call with tuning on: every fusion depth, then the chosen plan's tiles");
    autotune::enable(true);
    let before = autotune::trials_run();
    let (y1, t_tune) = timed(|| linear_gelu(&x, &w, &b));
    let y1 = y1?;
    println!(
        "  {} trials in {:.2} s",
        autotune::trials_run() - before,
        t_tune
    );
    let entries = autotune::entries();
    for e in entries.values().filter(|e| e.kernel == "linear_gelu") {
        let what = if e.family.contains(".fusion/") {
            "fusion depth".to_string()
        } else {
            format!("kernel {}", e.family.split('/').next().unwrap_or(""))
        };
        show(&what, e);
    }

    println!("2. second call: a cache hit, zero trials");
    let before = autotune::trials_run();
    let (y2, t_tuned) = timed(|| linear_gelu(&x, &w, &b));
    let y2 = y2?;
    assert_eq!(autotune::trials_run(), before);
    println!(
        "  default schedule {:.3} ms, tuned {:.3} ms (one call each; `cargo bench --bench autotune` measures properly)",
        t_default * 1e3,
        t_tuned * 1e3
    );
    for (name, y) in [("default", &y0), ("tuning", &y1), ("tuned", &y2)] {
        let err = rel_error(&y.to_f64_vec()?, &want);
        println!("  {name:<8} rel. error vs f64: {err:.2e}");
        assert!(err < 1e-5, "{name} disagrees with the f64 reference");
    }

    println!("3. a nearby shape in cached mode: runs 384's winner now, refined in the background");
    autotune::set_mode(Some(Mode::Cached));
    autotune::set_background(Some(true));
    let m2 = 320;
    let x2 = Tensor::<f32>::randn(&[m2, k], 7);
    let before = autotune::trials_run();
    let (y3, t_borrowed) = timed(|| linear_gelu(&x2, &w, &b));
    let y3 = y3?;
    println!(
        "  {m2}x{n}x{k} ran at once ({:.3} ms) on the borrowed winner",
        t_borrowed * 1e3
    );
    autotune::wait_background();
    autotune::set_background(None);
    autotune::enable(true);
    let own = autotune::entries()
        .into_values()
        .filter(|e| e.kernel == "linear_gelu" && e.shape.contains(&(m2 as u64)))
        .count();
    println!(
        "  the background worker ran {} trials; {m2} now has {own} entries of its own",
        autotune::trials_run() - before
    );
    let mut want3 = reference::matmul(&x2.to_f64_vec()?, &w.to_f64_vec()?, m2, k, n);
    want3
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = reference::gelu(*v + bv[i % n]));
    let err = rel_error(&y3.to_f64_vec()?, &want3);
    println!("  borrowed-schedule result rel. error vs f64: {err:.2e}");
    assert!(err < 1e-5);

    println!("4. ship the cache to another machine of the same arch");
    let file = tmp.join("shipped.json");
    let saved = autotune::save_cache(&file)?;
    println!("  saved {saved} entries to {}", file.display());

    println!("5. the same kernel for an sm_90a GPU, on the simulator");
    let sim = Device::sim_arch(Arch::Sm90a);
    let (xs, ws, bs) = (
        Tensor::<f32>::randn(&[48, 64], 4).to(&sim)?,
        Tensor::<f32>::randn(&[64, 40], 5).to(&sim)?,
        Tensor::<f32>::randn(&[40], 6).to(&sim)?,
    );
    let ys = linear_gelu(&xs, &ws, &bs)?;
    let id = autotune::device_arch_id(&sim);
    for e in autotune::entries_for(&id).values() {
        show(
            &format!("{id} {}", e.family.split('/').next().unwrap_or("")),
            e,
        );
    }
    let (xh, wh, bh) = (
        xs.to(&Device::Cpu)?,
        ws.to(&Device::Cpu)?,
        bs.to(&Device::Cpu)?,
    );
    let mut want_s = reference::matmul(&xh.to_f64_vec()?, &wh.to_f64_vec()?, 48, 64, 40);
    let bsv = bh.to_f64_vec()?;
    want_s
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = reference::gelu(*v + bsv[i % 40]));
    let err = rel_error(&ys.to(&Device::Cpu)?.to_f64_vec()?, &want_s);
    println!("  simulator result rel. error vs f64: {err:.2e}");
    assert!(err < 1e-5);
    autotune::set_mode(None);
    if user_dir {
        std::fs::remove_file(&file).ok();
    } else {
        std::fs::remove_dir_all(&tmp).ok();
    }
    Ok(())
}
