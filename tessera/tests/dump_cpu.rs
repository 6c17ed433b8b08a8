//! `TESSERA_DUMP=schedule,tile` shows the schedule and Tile IR the CPU runs where they are not
//! the compiled default's: `<kernel>.cpu`. One test in its own binary: the environment is
//! process-wide.

use tessera::Tensor;

#[tessera::kernel]
fn dump_softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn dump_softmax_x2(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x) * 2.0
}

fn set(var: &str, value: Option<&str>) {
    // SAFETY (edition 2024): the only test of this binary; no other thread reads the
    // environment while it changes.
    unsafe {
        match value {
            Some(v) => std::env::set_var(var, v),
            None => std::env::remove_var(var),
        }
    }
    tessera::reload_env();
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
    let x = Tensor::<f32>::randn(&[5, 300], 1);
    dump_softmax(&x).unwrap();
    dump_softmax_x2(&x).unwrap();
    set("TESSERA_DUMP", None);
    let rows = tessera::ir::schedule::CPU_ROW_COLS;
    let general = tessera::ir::schedule::CPU_ROW_COLS_GENERAL;
    for (kernel, cols) in [("dump_softmax_k", rows), ("dump_softmax_x2_k", general)] {
        let s = dumped(&out, kernel, true, "schedule");
        assert!(s.contains(&format!("tile=[8, {cols}]")), "{kernel}: {s}");
        let t = dumped(&out, kernel, true, "tile");
        assert!(t.contains(&format!("{cols}")), "{kernel}: {t}");
        // The compiled default (the GPU's) is dumped apart.
        let d = dumped(&out, kernel, false, "schedule");
        assert!(!d.contains(&format!("tile=[8, {cols}]")), "{kernel}: {d}");
    }
}
