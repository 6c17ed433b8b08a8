//! Fuzzing autotune cache files (proptest, stable Rust): a real cache (written by tuning a
//! small kernel once) cut short at random points, overwritten with random bytes, with its JSON
//! values swapped for others (wrong types, huge and negative numbers, garbage candidate
//! text), and random JSON of the wrong schema. `load_cache` must return `Ok` or an `Err`, and
//! a launch in `cached` mode that reads what was loaded must return `Ok` or an `Err` — never
//! panic. When it is `Ok`, its output must equal the default schedule's within the tuner's
//! tolerance (a corrupted winner may change the schedule, never the answer).
//!
//! 10,000 cases by default (CI); `FUZZ_CASES=100000 cargo test --release -p tessera --test
//! fuzz_cache` runs longer. Its own binary: the autotune mode and cache are process-wide.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::Value;
use tessera::Tensor;
use tessera::autotune::{self, Mode};

#[tessera::kernel]
fn fz(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    relu(x.matmul(w))
}

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

/// JSON values worth putting anywhere in a cache file.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(i64::MAX),
            Just(i64::MIN),
            any::<i64>()
        ]
        .prop_map(Value::from),
        prop_oneof![Just(1e308f64), Just(-0.0), Just(5e-324), any::<f64>()].prop_map(Value::from),
        prop_oneof![
            Just(String::new()),
            Just("schedule matmul tile=[0, 0, 0]".to_string()),
            Just("schedule matmul tile=[4294967296, 1, 1] stages=0".to_string()),
            Just("BM=-1,BN=99999999999".to_string()),
            ".{0,40}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every scalar (leaf) of `v`, by path, so one can be replaced.
fn replace_nth(v: &mut Value, n: &mut usize, with: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter_mut().any(|x| replace_nth(x, n, with)),
        Value::Object(m) => m.values_mut().any(|x| replace_nth(x, n, with)),
        _ if *n == 0 => {
            *v = with.clone();
            true
        }
        _ => {
            *n -= 1;
            false
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Bytes(usize, Vec<u8>),
    Swap(usize, Value),
    Schema(Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, b)| Mutation::Bytes(at, b)),
        4 => (any::<usize>(), value()).prop_map(|(n, v)| Mutation::Swap(n, v)),
        1 => value().prop_map(Mutation::Schema),
    ]
}

fn apply(valid: &str, m: &Mutation) -> Vec<u8> {
    let mut bytes = valid.as_bytes().to_vec();
    match m {
        Mutation::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
        Mutation::Bytes(at, b) => {
            let at = at % bytes.len();
            let end = (at + b.len()).min(bytes.len());
            bytes.splice(at..end, b.iter().copied());
        }
        Mutation::Swap(n, with) => {
            let mut v: Value = serde_json::from_str(valid).unwrap();
            let leaves = {
                let mut count = usize::MAX;
                replace_nth(&mut v.clone(), &mut count, &Value::Null);
                usize::MAX - count
            };
            let mut n = n % leaves.max(1);
            replace_nth(&mut v, &mut n, with);
            bytes = serde_json::to_vec(&v).unwrap();
        }
        Mutation::Schema(v) => bytes = serde_json::to_vec(v).unwrap(),
    }
    bytes
}

#[test]
fn cache_files_never_panic_the_loader_or_a_cached_launch() {
    let dir = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    let x = Tensor::<f32>::randn(&[24, 16], 1);
    let w = Tensor::<f32>::randn(&[16, 20], 2);
    autotune::set_mode(Some(Mode::Off));
    let want = fz(&x, &w).unwrap().to_vec().unwrap();
    // One real tuning run writes the corpus: a cache with this launch's entries.
    autotune::set_mode(Some(Mode::Full));
    fz(&x, &w).unwrap();
    let file = dir.path().join("saved.json");
    assert!(autotune::save_cache(&file).unwrap() > 0);
    let valid = std::fs::read_to_string(&file).unwrap();
    autotune::set_mode(Some(Mode::Cached));

    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&mutation(), |m| {
            let bytes = apply(&valid, &m);
            std::fs::write(&file, &bytes).unwrap();
            if autotune::load_cache(&file).is_ok()
                && let Ok(y) = fz(&x, &w)
            {
                let y = y.to_vec().unwrap();
                let same = autotune::outputs_match(
                    tessera::DType::F32,
                    bytemuck::cast_slice(&y),
                    bytemuck::cast_slice(&want),
                );
                prop_assert!(same.is_ok(), "{:?}", same);
            }
            Ok(())
        })
        .unwrap();
    // The broken cache never stopped the default schedule from running.
    autotune::set_mode(Some(Mode::Off));
    assert_eq!(fz(&x, &w).unwrap().to_vec().unwrap(), want);
}
