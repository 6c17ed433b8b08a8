//! PTX file tests: each `tests/golden/ptx/*.tir` holds a header `; emit-ptx <arch> warps=<n>`
//! and a Tile IR kernel; the emitted PTX must equal the `.ptx` file beside it. Run with
//! `TESSERA_TEST_BLESS=1` to rewrite the expected files after an intended change (then review
//! the diff).

use tessera_ir::schedule::{KernelClass, Schedule};
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::tile;

#[test]
fn golden_ptx() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/ptx");
    let bless = std::env::var_os("TESSERA_TEST_BLESS").is_some();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tir"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 2,
        "golden inputs missing in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        let header = src.lines().next().unwrap();
        let words: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(
            &words[..2],
            &[";", "emit-ptx"],
            "{}: bad header",
            f.display()
        );
        let arch = Arch::parse(words[2]).unwrap();
        let warps: u32 = words[3].trim_start_matches("warps=").parse().unwrap();
        let k = tile::parse(&src).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let s = Schedule {
            warps,
            ..Schedule::default_for(KernelClass::Elementwise, tessera_ir::DType::F32)
        };
        let got = ptx::emit(&k, &s, arch)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .text;
        let want_path = f.with_extension("ptx");
        if bless {
            std::fs::write(&want_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&want_path).unwrap_or_default();
        if want != got {
            failures.push(format!(
                "{} differs from {} (TESSERA_TEST_BLESS=1 rewrites it)",
                f.display(),
                want_path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
