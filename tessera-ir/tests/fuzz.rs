//! Fuzzing of the three IR text forms on stable Rust (proptest): structure-aware mutations of
//! valid printed IR (token-level edits with interesting values: 0, huge and negative numbers,
//! NaN, unbalanced brackets, unknown names) and random bytes. For every input the parser and,
//! when it parses, the verifier must return — never panic; verified IR must print and parse
//! back to itself, a verified graph must compile (or fail with an error), and every verified
//! Tile IR kernel must emit PTX for every arch (or fail with an error).
//!
//! Cases per target: 10,000 by default (CI); `FUZZ_CASES=1000000 cargo test --release -p
//! tessera-ir --test fuzz` runs longer. A failure prints the shrunk input: add it to
//! `tests/limits.rs` as a regression test with the fix.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use tessera_ir::pipeline::{CompileOptions, compile};
use tessera_ir::schedule::{self, KernelClass, Schedule};
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::{DType, graph, tile};

fn config() -> Config {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        max_shrink_iters: 10_000,
        ..Config::default()
    }
}

const GRAPHS: &[&str] = &[
    "graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> f32[M, N] {
  %3 = matmul %x, %w : f32[M, N]
  %4 = add %3, %b : f32[M, N]
  %5 = gelu %4 : f32[M, N]
  return %5
}
",
    "graph @norms(%x: f32[B, T, D], %g: f32[D], %b: f32[D]) -> f32[B, T, D] {
  %3 = layernorm %x, %g, %b eps=1e-5 : f32[B, T, D]
  %4 = rmsnorm %3, %g eps=1e-6 : f32[B, T, D]
  %5 = softmax %4 : f32[B, T, D]
  %6 = const 0.5 : f32[]
  %7 = mul %5, %6 : f32[B, T, D]
  return %7
}
",
    "graph @reductions(%x: f32[M, N]) -> f32[N] {
  %1 = reduce.sum %x axes=[1] keepdim=true policy=kahan_sum : f32[M, 1]
  %2 = sub %x, %1 : f32[M, N]
  %3 = reduce.max %2 axes=[0] keepdim=false policy=fast : f32[N]
  %4 = cast %3 : bf16[N]
  %5 = cast %4 : f32[N]
  return %5
}
",
    "graph @batched(%a: f16[B, M, K], %b: f16[B, K, N]) -> f32[B, N, M] {
  %2 = matmul %a, %b : f32[B, M, N]
  %3 = transpose %2 : f32[B, N, M]
  %4 = tanh %3 : f32[B, N, M]
  return %4
}
",
    "graph @bcast(%x: f32[M, 4], %v: f32[4]) -> f32[M, 4] {
  %2 = broadcast %v : f32[M, 4]
  %3 = sub %x, %2 : f32[M, 4]
  %4 = reduce.mean %3 axes=[1] keepdim=true policy=deterministic : f32[M, 1]
  %5 = sqrt %4 : f32[M, 1]
  %6 = div %3, %5 : f32[M, 4]
  return %6
}
",
];

/// Valid Schedule IR: every class's search space.
fn schedules() -> Vec<String> {
    KernelClass::ALL
        .into_iter()
        .flat_map(|c| Schedule::space(c, DType::BF16))
        .map(|s| s.to_string())
        .collect()
}

/// Valid Tile IR: every kernel the seed graphs compile to.
fn kernels() -> Vec<String> {
    GRAPHS
        .iter()
        .flat_map(|src| {
            let g = graph::parse(src).unwrap();
            let c = compile(&g, &CompileOptions::default()).unwrap();
            c.kernels
                .into_iter()
                .map(|k| k.lowered.kernel.to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Words and numbers that stress parsers and size checks.
const INTERESTING: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "65536",
    "65537",
    "1e400",
    "-0.0",
    "nan",
    "inf",
    "-inf",
    "1e-30",
    "%0",
    "%x",
    "%999999",
    "@k",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ",",
    ":",
    "=",
    "->",
    "<",
    ">",
    "*",
    ";",
    "\n",
    " ",
    "f32",
    "bf16",
    "i32",
    "bool",
    "f8e4m3",
    "M",
    "axes=[]",
    "axes=[7]",
    "eps=-1",
    "return",
    "yield",
    "for",
    "load",
    "store",
    "dot",
    "trans",
    "cdiv",
    "dim",
    "matmul",
    "broadcast",
    "reduce.sum",
    "é",
    "\u{0}",
];

/// One edit of a text, as chars so the result stays valid UTF-8.
#[derive(Clone, Debug)]
enum Edit {
    Delete(prop::sample::Index, usize),
    Duplicate(prop::sample::Index, usize),
    Insert(prop::sample::Index, prop::sample::Index),
    ReplaceNumber(prop::sample::Index, prop::sample::Index),
    Swap(prop::sample::Index, prop::sample::Index, usize),
    Byte(prop::sample::Index, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    use prop::sample::Index;
    prop_oneof![
        (any::<Index>(), 1usize..12).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<Index>(), 1usize..40).prop_map(|(i, n)| Edit::Duplicate(i, n)),
        (any::<Index>(), any::<Index>()).prop_map(|(i, w)| Edit::Insert(i, w)),
        (any::<Index>(), any::<Index>()).prop_map(|(i, w)| Edit::ReplaceNumber(i, w)),
        (any::<Index>(), any::<Index>(), 1usize..20).prop_map(|(a, b, n)| Edit::Swap(a, b, n)),
        (any::<Index>(), 0x20u8..0x7f).prop_map(|(i, b)| Edit::Byte(i, b)),
    ]
}

fn apply(src: &str, edits: &[Edit]) -> String {
    let mut t: Vec<char> = src.chars().collect();
    for e in edits {
        let len = t.len().max(1);
        match e {
            Edit::Delete(i, n) => {
                let a = i.index(len).min(t.len());
                let b = (a + n).min(t.len());
                t.drain(a..b);
            }
            Edit::Duplicate(i, n) => {
                let a = i.index(len).min(t.len());
                let b = (a + n).min(t.len());
                let piece: Vec<char> = t[a..b].to_vec();
                t.splice(b..b, piece);
            }
            Edit::Insert(i, w) => {
                let a = i.index(len).min(t.len());
                let word = INTERESTING[w.index(INTERESTING.len())];
                t.splice(a..a, word.chars());
            }
            Edit::ReplaceNumber(i, w) => {
                // Replace the run of digits nearest after a random point.
                let start = i.index(len).min(t.len());
                if let Some(a) = (start..t.len()).find(|&j| t[j].is_ascii_digit()) {
                    let b = (a..t.len())
                        .find(|&j| !t[j].is_ascii_digit())
                        .unwrap_or(t.len());
                    let word = INTERESTING[w.index(INTERESTING.len())];
                    t.splice(a..b, word.chars());
                }
            }
            Edit::Swap(a, b, n) => {
                let (a, b) = (a.index(len).min(t.len()), b.index(len).min(t.len()));
                let (a, b) = (a.min(b), a.max(b));
                let n = (*n).min(b - a).min(t.len() - b);
                for k in 0..n {
                    t.swap(a + k, b + k);
                }
            }
            Edit::Byte(i, c) => {
                if !t.is_empty() {
                    let a = i.index(t.len());
                    t[a] = *c as char;
                }
            }
        }
    }
    t.into_iter().collect()
}

fn check_graph(src: &str) {
    let Ok(g) = graph::parse(src) else { return };
    if graph::verify(&g).is_err() {
        return;
    }
    let printed = g.to_string();
    let again = graph::parse(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(again.to_string(), printed);
    if let Ok(c) = compile(&g, &CompileOptions::default()) {
        for k in &c.kernels {
            tile::verify(&k.lowered.kernel)
                .unwrap_or_else(|e| panic!("compile made unverified Tile IR:\n{e}"));
            let _ = ptx::emit(&k.lowered.kernel, &k.schedule, Arch::Sm90a);
        }
    }
}

fn check_schedule(src: &str) {
    let Ok(s) = schedule::parse(src) else { return };
    if schedule::verify(&s).is_ok() {
        assert_eq!(schedule::parse(&s.to_string()).unwrap(), s);
    }
}

fn check_tile(src: &str) {
    let Ok(k) = tile::parse(src) else { return };
    if tile::verify(&k).is_err() {
        return;
    }
    let printed = k.to_string();
    let again = tile::parse(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(again.to_string(), printed);
    for class in KernelClass::ALL {
        let s = Schedule::default_for(class, DType::F32);
        for arch in [Arch::Sm80, Arch::Sm89, Arch::Sm90a] {
            let _ = ptx::emit(&k, &s, arch);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn graph_text_mutations(seed in 0..GRAPHS.len(), edits in prop::collection::vec(edit(), 1..6)) {
        check_graph(&apply(GRAPHS[seed], &edits));
    }

    #[test]
    fn schedule_text_mutations(seed in any::<prop::sample::Index>(), edits in prop::collection::vec(edit(), 1..5)) {
        let seeds = schedules();
        check_schedule(&apply(&seeds[seed.index(seeds.len())], &edits));
    }

    #[test]
    fn tile_text_mutations(seed in any::<prop::sample::Index>(), edits in prop::collection::vec(edit(), 1..6)) {
        thread_local!(static SEEDS: Vec<String> = kernels());
        let src = SEEDS.with(|s| s[seed.index(s.len())].clone());
        check_tile(&apply(&src, &edits));
    }

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        check_graph(&text);
        check_schedule(&text);
        check_tile(&text);
    }
}
