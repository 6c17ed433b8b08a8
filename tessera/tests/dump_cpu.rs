//! `TESSERA_DUMP=schedule,tile` shows the schedule and Tile IR the CPU runs where they are not
//! the compiled default's: `<kernel>.cpu`. One test in its own binary: the environment is
//! process-wide.

mod common;

use common::set;
use tessera::{Tensor, f16};

#[tessera::kernel]
fn dump_softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

/// A `[B, R, C]` softmax: its launches view it as `[B·R, C]` and run the row loop.
#[tessera::kernel]
fn dump_softmax3(x: Tensor<f32, (B, R, C)>) -> Tensor<f32, (B, R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn dump_rmsnorm3(x: Tensor<f32, (B, R, C)>, g: Tensor<f32, (C,)>) -> Tensor<f32, (B, R, C)> {
    rmsnorm(x, g, 1e-6)
}

#[tessera::kernel]
fn dump_rmsnorm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    rmsnorm(x, g, 1e-6)
}

/// Softmax under `deterministic`: the row loop's match declines the policy.
#[tessera::kernel(numerics = "deterministic")]
fn dump_softmax_det(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

/// An f16 softmax: the row loop's match declines the dtype.
#[tessera::kernel]
fn dump_softmax_f16(x: Tensor<f16, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn dump_softmax_x2(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x) * 2.0
}

/// The dumped text of `level` for the one kernel whose name starts with `kernel`, at the CPU
/// (`.cpu`) or the compiled default.
fn dumped(dir: &std::path::Path, kernel: &str, cpu: bool, level: &str) -> String {
    let want = |n: &str| {
        n.starts_with(kernel) && n.ends_with(&format!(".{level}.txt")) && n.contains(".cpu.") == cpu
    };
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| want(n))
        .collect();
    assert_eq!(files.len(), 1, "{kernel} {level} (cpu: {cpu}): {files:?}");
    std::fs::read_to_string(dir.join(&files[0])).unwrap()
}

#[test]
fn the_cpu_schedule_and_tile_ir_are_dumped() {
    let dir = tempfile::tempdir().unwrap();
    set("TESSERA_CACHE_DIR", Some(dir.path().to_str().unwrap()));
    let out = dir.path().join("dump");
    set("TESSERA_DUMP", Some("schedule,tile"));
    set("TESSERA_DUMP_DIR", Some(out.to_str().unwrap()));
    let x = Tensor::<f32>::randn(&[6, 300], 1);
    let g = Tensor::<f32>::randn(&[300], 2);
    let x3 = Tensor::from_vec(x.to_vec().unwrap(), &[2, 3, 300]).unwrap();
    let sm = dump_softmax(&x).unwrap();
    let rms = dump_rmsnorm(&x, &g).unwrap();
    // A launch of a kernel the row loops matched runs them (they compute a row's own columns,
    // not the `[8, 4096]` tile's padding): `[B, R, C]` tensors included. The values are the
    // `[B·R, C]` launch's.
    use tessera::backend::cpu::fused::{norm_programs, softmax_programs};
    let (s0, n0) = (softmax_programs(), norm_programs());
    let sm3 = dump_softmax3(&x3).unwrap();
    let rms3 = dump_rmsnorm3(&x3, &g).unwrap();
    assert_eq!((softmax_programs() - s0, norm_programs() - n0), (1, 1));
    let bits = |t: &Tensor<f32>| {
        t.to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&sm3), bits(&sm));
    assert_eq!(bits(&rms3), bits(&rms));
    dump_softmax_x2(&x).unwrap();
    dump_softmax_det(&x).unwrap();
    dump_softmax_f16(&Tensor::<f16>::randn(&[6, 300], 3)).unwrap();
    set("TESSERA_DUMP", None);
    let rows = tessera::ir::schedule::CPU_ROW_COLS;
    let general = tessera::ir::schedule::CPU_ROW_COLS_GENERAL;
    // The row loops' kernels take the `[8, 4096]` tile; a kernel they decline at compile time
    // (an epilogue op, another policy, another dtype) the `[8, 1024]` one.
    for (kernel, cols) in [
        ("dump_softmax_k", rows),
        ("dump_softmax3_k", rows),
        ("dump_rmsnorm_k", rows),
        ("dump_rmsnorm3_k", rows),
        ("dump_softmax_x2_k", general),
        ("dump_softmax_det_k", general),
        ("dump_softmax_f16_k", general),
    ] {
        let s = dumped(&out, kernel, true, "schedule");
        assert!(s.contains(&format!("tile=[8, {cols}]")), "{kernel}: {s}");
        let t = dumped(&out, kernel, true, "tile");
        assert!(t.contains(&format!("{cols}")), "{kernel}: {t}");
        // The compiled default (the GPU's) is dumped apart.
        let d = dumped(&out, kernel, false, "schedule");
        assert!(!d.contains(&format!("tile=[8, {cols}]")), "{kernel}: {d}");
    }
}
