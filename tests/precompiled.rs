//! Build-time PTX is what runs: launches of library kernels (generic ones at each element
//! type they are instantiated for), of a `#[kernel]`'s default
//! schedule and of a `tile!` kernel's default knobs on a PTX device make no compiler call; a
//! `tile!` kernel under other knobs compiles once (JIT), then comes from memory, then from the
//! disk cache in a second cache instance and in a second process; a corrupt cache file is
//! rebuilt with a warning.
//!
//! The compiler counters (`tessera::ir::invocations`) count every thread of the process, so
//! this file holds one test that does the in-process checks in order (a second test in the same
//! binary, compiling on the CPU in parallel, would disturb them), plus an ignored test the main
//! one runs in a child process.

use tessera::ir::invocations;
use tessera::ir::target::ptx::Arch;
use tessera::prelude::*;
use tessera_workspace::reference::{self, rel_error};

#[tessera::kernel]
/// A kernel of this crate: its default schedule's PTX is embedded by the macro.
fn scaled_softmax(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    softmax(x * 0.5)
}

/// Knobs other than `softmax_rows`' defaults (BR = 4, BC = 256): not precompiled.
const KNOBS: &[(&str, i64)] = &[("BR", 2), ("BC", 64)];

/// `softmax_rows` under `knobs` on `dev`, checked against f64.
fn tile_softmax(dev: &Device, knobs: &[(&str, i64)], seed: u64) {
    let (m, n) = (7, 90);
    let x = Tensor::<f32>::randn(&[m, n], seed).to(dev).unwrap();
    let mut y = Tensor::<f32>::zeros_on(&[m, n], dev).unwrap();
    tessera_kernels::tiled::softmax_rows::launch_with(knobs, &x, &mut y).unwrap();
    let want = reference::softmax(&x.to_f64_vec().unwrap(), n);
    let e = rel_error(&y.to_f64_vec().unwrap(), &want);
    assert!(e < 1e-5, "{knobs:?} on {dev}: {e:e}");
}

fn cache_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-precompiled-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

#[test]
fn precompiled_launches_make_no_compiler_call_and_jit_modules_are_cached() {
    let dir = cache_dir("main");
    tessera::autotune::set_cache_dir(Some(dir.clone()));
    for arch in [Arch::Sm80, Arch::Sm90a] {
        let dev = Device::new_sim(arch);
        let before = invocations::get();
        // Library kernels (the build script's modules) and this crate's `#[kernel]`.
        let x = Tensor::<f32>::randn(&[9, 70], 1).to(&dev).unwrap();
        let w = Tensor::<f32>::randn(&[70, 33], 2).to(&dev).unwrap();
        let g = Tensor::<f32>::randn(&[33], 3).to(&dev).unwrap();
        let h = tessera_kernels::matmul(&x, &w).unwrap();
        let h = tessera_kernels::rmsnorm(&h, &g).unwrap();
        let h = tessera_kernels::gelu(&h).unwrap();
        let y = scaled_softmax(&h).unwrap();
        // Generic library kernels at their bf16 and f16 instances (each its own embedded PTX).
        let xb = Tensor::<bf16>::randn(&[9, 70], 11).to(&dev).unwrap();
        let wb = Tensor::<bf16>::randn(&[70, 33], 12).to(&dev).unwrap();
        let hb = tessera_kernels::matmul(&xb, &wb).unwrap();
        let xf = Tensor::<f16>::randn(&[9, 70], 13).to(&dev).unwrap();
        let yf = tessera_kernels::gelu(&xf).unwrap();
        // A `tile!` kernel with its default knobs.
        tile_softmax(&dev, &[], 4);
        let after = invocations::get();
        assert_eq!(
            after, before,
            "{arch}: precompiled launches called the compiler"
        );
        // The f32 chain's four calls launch five fused kernels; bf16 matmul, f16 gelu and the
        // `tile!` kernel one each.
        assert_eq!(dev.stats().launches, 8);
        // The results are right (checked after the counters: the checks run no compiler
        // either, but keep the window tight).
        let hv = tessera_kernels::gelu(
            &tessera_kernels::rmsnorm(&tessera_kernels::matmul(&x, &w).unwrap(), &g).unwrap(),
        )
        .unwrap()
        .to_f64_vec()
        .unwrap();
        let scaled: Vec<f64> = hv.iter().map(|v| v * 0.5).collect();
        let e = rel_error(&y.to_f64_vec().unwrap(), &reference::softmax(&scaled, 33));
        assert!(e < 1e-5, "{e:e}");
        // bf16 operands, f32 accumulation, one rounding to bf16; f16 GELU rounded once.
        let want = reference::matmul(
            &xb.to_f64_vec().unwrap(),
            &wb.to_f64_vec().unwrap(),
            9,
            70,
            33,
        );
        let e = rel_error(&hb.to_f64_vec().unwrap(), &want);
        assert!(e < 1e-2, "bf16 matmul on {arch}: {e:e}");
        let want: Vec<f64> = xf
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|v| reference::gelu(*v))
            .collect();
        let e = rel_error(&yf.to_f64_vec().unwrap(), &want);
        assert!(e < 2e-3, "f16 gelu on {arch}: {e:e}");
    }

    // Other knobs: compiled once, then from memory.
    let dev = Device::new_sim(Arch::Sm80);
    let s0 = tessera::ptx_cache::stats();
    let i0 = invocations::get();
    tile_softmax(&dev, KNOBS, 5);
    let s1 = tessera::ptx_cache::stats();
    let i1 = invocations::get();
    assert_eq!(s1.compiled - s0.compiled, 1);
    assert_eq!(i1.emits - i0.emits, 1, "one PTX emission for the new knobs");
    tile_softmax(&dev, KNOBS, 6);
    let s2 = tessera::ptx_cache::stats();
    assert_eq!(s2.compiled, s1.compiled);
    assert_eq!(s2.memory_hits - s1.memory_hits, 1);
    assert_eq!(invocations::get().emits, i1.emits);
    let files: Vec<_> = std::fs::read_dir(tessera::ptx_cache::dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ptx"))
        .collect();
    assert_eq!(files.len(), 1, "one cache file, next to the autotune cache");
    let file = files[0].path();
    assert!(file.starts_with(&dir));

    // A second cache instance (memory forgotten): the file serves it, no emission.
    tessera::ptx_cache::clear_memory();
    tile_softmax(&dev, KNOBS, 7);
    let s3 = tessera::ptx_cache::stats();
    assert_eq!(s3.disk_hits - s2.disk_hits, 1);
    assert_eq!(s3.compiled, s2.compiled);
    assert_eq!(invocations::get().emits, i1.emits);

    // A second process with the same cache dir hits the disk too.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "second_process_reads_the_disk_cache",
            "--ignored",
            "--nocapture",
        ])
        .env("TESSERA_CACHE_DIR", &dir)
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("1 passed"), "{log}");

    // A corrupt (truncated) file: rejected with a warning, rebuilt, rewritten; the launch still succeeds.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, &text[..text.len() / 2]).unwrap(); // truncated
    tessera::ptx_cache::clear_memory();
    let warnings = tessera::autotune::warnings();
    tile_softmax(&dev, KNOBS, 8);
    let s4 = tessera::ptx_cache::stats();
    assert_eq!(s4.rejected - s3.rejected, 1);
    assert_eq!(s4.compiled - s3.compiled, 1);
    assert!(
        tessera::autotune::warnings() > warnings,
        "the rejection is warned about"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "the file is rewritten"
    );
    tessera::autotune::set_cache_dir(None);
    std::fs::remove_dir_all(&dir).ok();
}

/// Run by the test above in a child process (`TESSERA_CACHE_DIR` set to its cache).
#[test]
#[ignore = "run by precompiled_launches_make_no_compiler_call_and_jit_modules_are_cached"]
fn second_process_reads_the_disk_cache() {
    assert!(std::env::var_os("TESSERA_CACHE_DIR").is_some());
    let dev = Device::new_sim(Arch::Sm80);
    let i0 = invocations::get();
    tile_softmax(&dev, KNOBS, 9);
    let s = tessera::ptx_cache::stats();
    assert_eq!((s.disk_hits, s.compiled, s.rejected), (1, 0, 0), "{s:?}");
    assert_eq!(invocations::get().emits, i0.emits);
}
