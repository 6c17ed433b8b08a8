//! The `tessera-sim` command line on a hand-written PTX file with scalar parameters
//! (`tests/data/shift_race.ptx` + `.json`): the planted race and out-of-bounds read are both
//! reported, named by shared symbol / buffer and byte offset; the fixed kernel is clean and
//! computes the right values.

use std::process::Command;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn run(ptx: &str, json: &str, extra: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tessera-sim"))
        .args([
            "run", ptx, "--entry", "shift", "--grid", "5", "--block", "256",
        ])
        .args(["--smem", "1024", "--args", json])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.code().unwrap_or(-1), text)
}

#[test]
fn planted_race_and_overrun_are_reported_by_name_and_offset() {
    let (code, out) = run(
        &format!("{DATA}/shift_race.ptx"),
        &format!("{DATA}/shift_race.json"),
        &[],
    );
    eprintln!("{out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Shared-memory race in entry `shift`"), "{out}");
    assert!(out.contains("at `sbuf+512`"), "{out}");
    assert!(
        out.contains("Out-of-bounds access in entry `shift`"),
        "{out}"
    );
    assert!(out.contains("`x`+4100"), "{out}");
    // never an internal address
    assert!(!out.contains("0x"), "{out}");
    let summary = out
        .lines()
        .find_map(|l| l.strip_prefix("========= ERROR SUMMARY: "))
        .unwrap();
    let n: u64 = summary.trim_end_matches(" errors").parse().unwrap();
    assert!(n >= 2, "{summary}");
}

#[test]
fn fixed_kernel_is_clean_and_correct() {
    let dir = std::env::temp_dir().join(format!("tessera-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = std::fs::read_to_string(format!("{DATA}/shift_race.ptx"))
        .unwrap()
        .replace(
            "    // planted bug: the barrier that belongs here is missing\n",
            "    bar.sync 0;\n",
        );
    assert!(ptx.contains("bar.sync 0;"));
    let x: Vec<f32> = (0..1025)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 8.0)
        .collect();
    let json = format!(
        r#"{{"buffers": [{{"name": "x", "f32": {x:?}}}, {{"name": "out", "bytes": 5120}}],
            "params": [{{"ptr": "x"}}, {{"ptr": "out"}}, {{"u32": 1025}}, {{"f32": -0.5}}]}}"#
    );
    std::fs::write(dir.join("k.ptx"), ptx).unwrap();
    std::fs::write(dir.join("k.json"), json).unwrap();
    let (code, out) = run(
        dir.join("k.ptx").to_str().unwrap(),
        dir.join("k.json").to_str().unwrap(),
        &["--dump", "f32"],
    );
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ERROR SUMMARY: 0 errors"), "{out}");
    let line = out.lines().find(|l| l.starts_with("out: [")).unwrap();
    let got: Vec<f64> = line["out: [".len()..line.len() - 1]
        .split(", ")
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(got.len(), 1280);
    for (i, g) in got.iter().enumerate() {
        let j = i / 256 * 256 + (i % 256 + 128) % 256;
        let want = if i < 1025 {
            if j < 1025 { x[j] as f64 * -0.5 } else { 0.0 }
        } else {
            0.0
        };
        assert_eq!(*g, want, "out[{i}]");
    }
}
