//! Fuzzing the simulator's PTX parser (proptest, stable Rust): token-level mutations of real
//! modules (the kernel library's precompiled PTX and the simulator's hand-written test
//! kernel) — tokens replaced by interesting ones (huge, zero and negative numbers, other
//! opcodes, registers and types, brackets), lines deleted or duplicated, the text cut short —
//! and random bytes. `tessera_sim::Module::parse` must return `Ok` or an `Err`, never panic.
//!
//! 10,000 cases by default (CI); `FUZZ_CASES=1000000 cargo test --release --test
//! fuzz_sim_ptx` runs longer. A failure prints the shrunk input: add it as a regression test
//! with the fix.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use std::sync::OnceLock;

fn config() -> Config {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    }
}

/// The twelve shortest library modules (one per fused kernel and arch, default schedule), the
/// largest one, and the simulator's hand-written kernel.
fn corpus() -> &'static [String] {
    static C: OnceLock<Vec<String>> = OnceLock::new();
    C.get_or_init(|| {
        let mut seen = std::collections::HashSet::new();
        let mut all: Vec<&str> = tessera_kernels::ptx::PRECOMPILED
            .iter()
            .filter(|p| seen.insert((p.fused, p.arch)))
            .map(|p| p.text().expect("a library module inflates"))
            .collect();
        // The shortest modules (every instruction family of the library still appears among
        // them, and each parse stays cheap enough for 10,000 cases in CI).
        all.sort_by_key(|t| t.len());
        let mut out: Vec<String> = all.iter().take(12).map(|t| t.to_string()).collect();
        // And the largest one: the tensor-core GEMM's `mma`/`ldmatrix`/`cp.async` forms.
        out.extend(all.last().map(|t| t.to_string()));
        out.push(include_str!("../tessera-sim/tests/data/shift_race.ptx").to_string());
        out
    })
}

const TOKENS: &[&str] = &[
    "0",
    "-1",
    "4294967296",
    "18446744073709551616",
    "0x",
    "0xffffffffffffffff",
    "1e999",
    "0f7FC00000",
    "%r1",
    "%r999999",
    "%rd",
    "%p1",
    "%f0",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    ",",
    ";",
    ":",
    ".u32",
    ".b128",
    ".f64",
    ".shared",
    ".param",
    "ld.global.f32",
    "st.shared.v4.f32",
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "bra",
    "@%p1",
    "bar.sync",
    "ret",
    ".reg .b32 %r<4294967295>;",
    ".maxntid 0",
    ".entry",
    "",
    "\u{0}",
    "é",
];

#[derive(Debug, Clone)]
enum Edit {
    Token(usize, usize),
    DeleteLine(usize),
    DuplicateLine(usize),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Edit::Token(a, t)),
        1 => any::<usize>().prop_map(Edit::DeleteLine),
        1 => any::<usize>().prop_map(Edit::DuplicateLine),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn mutate(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for e in edits {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match *e {
            Edit::Token(at, t) => {
                let line = &mut lines[at % n];
                let mut words: Vec<&str> = line.split_whitespace().collect();
                if words.is_empty() {
                    *line = TOKENS[t].to_string();
                } else {
                    let i = (at / n) % words.len();
                    words[i] = TOKENS[t];
                    *line = words.join(" ");
                }
            }
            Edit::DeleteLine(at) => {
                lines.remove(at % n);
            }
            Edit::DuplicateLine(at) => {
                let l = lines[at % n].clone();
                lines.insert(at % n, l);
            }
            Edit::Truncate(at) => lines.truncate(at % n),
        }
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_ptx_never_panics_the_parser(
        which in any::<usize>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let c = corpus();
        let text = mutate(&c[which % c.len()], &edits);
        let _ = tessera_sim::Module::parse(&text);
    }

    #[test]
    fn random_bytes_never_panic_the_parser(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = tessera_sim::Module::parse(&String::from_utf8_lossy(&bytes));
    }
}
