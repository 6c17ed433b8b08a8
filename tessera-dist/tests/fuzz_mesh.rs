//! Fuzzing `Mesh` and `ShardSpec` construction (proptest, stable Rust): random axis names
//! (duplicates and unknown ones included), sizes from 0 to huge, random specs with shards,
//! replicas and partial axes, and random global shapes. Construction and every query must
//! return `Ok` or an `Err` — never panic or abort; an `Ok` shard shape must tile the global
//! shape by the uneven-split rule.
//!
//! 10,000 cases by default (CI); `FUZZ_CASES=1000000 cargo test --release -p tessera-dist --test
//! fuzz_mesh` runs longer. A failure prints the shrunk input: add it as a regression test with
//! the fix.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use tessera_dist::{DimSpec, Mesh, ReduceOp, ShardSpec, chunk_range};

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

const NAMES: &[&str] = &["dp", "tp", "pp", "", "x"];

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 1usize..4,
        1 => Just(0usize),
        1 => prop_oneof![Just(1usize << 40), Just(usize::MAX)],
    ]
}

fn axes() -> impl Strategy<Value = Vec<(String, usize)>> {
    prop::collection::vec((prop::sample::select(NAMES), size()), 0..4)
        .prop_map(|v| v.into_iter().map(|(n, s)| (n.to_string(), s)).collect())
}

fn dim_spec() -> impl Strategy<Value = DimSpec> {
    prop_oneof![
        Just(DimSpec::Replicated),
        prop::collection::vec(prop::sample::select(NAMES), 1..3)
            .prop_map(|a| DimSpec::Sharded(a.into_iter().map(String::from).collect())),
    ]
}

fn spec() -> impl Strategy<Value = ShardSpec> {
    (
        prop::collection::vec(dim_spec(), 0..4),
        prop::option::of(prop::collection::vec(prop::sample::select(NAMES), 1..3)),
    )
        .prop_map(|(dims, partial)| {
            let s = ShardSpec::new(dims);
            match partial {
                Some(p) => s.partial(p, ReduceOp::Sum),
                None => s,
            }
        })
}

fn global() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![4 => 0usize..9, 1 => Just(usize::MAX), 1 => Just(1usize << 40)],
        0..4,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn meshes_and_specs_never_panic(axes in axes(), spec in spec(), global in global(), rank in 0usize..10) {
        let Ok(mesh) = Mesh::local(axes.clone()) else { return Ok(()); };
        prop_assert_eq!(mesh.size(), axes.iter().map(|a| a.1).product::<usize>());
        let _ = spec.to_string();
        let _ = spec.validate(&mesh, global.len());
        let rank = rank % mesh.size();
        if let Ok(local) = spec.local_shape(&global, &mesh, rank) {
            prop_assert_eq!(local.len(), global.len());
            for (d, (&l, &g)) in local.iter().zip(&global).enumerate() {
                let (i, n) = mesh.index_along(rank, spec.dim_axes(d)).unwrap();
                prop_assert_eq!(l, chunk_range(g, n, i).len());
                prop_assert!(l <= g);
            }
            let _ = spec.normalized(&mesh, global.len());
        }
        for a in &axes {
            let _ = mesh.axis(&a.0);
            let _ = spec.role(&a.0);
        }
    }
}

/// Regression: axis sizes whose product overflows (a debug-build panic before) or that would
/// need a huge device list (an aborting allocation before) are errors.
#[test]
fn huge_meshes_are_errors() {
    assert!(Mesh::local([("a", usize::MAX), ("b", 2)]).is_err());
    assert!(Mesh::local([("a", 1usize << 40)]).is_err());
    assert!(Mesh::new([("a", usize::MAX), ("b", 2)], vec![]).is_err());
    assert_eq!(chunk_range(usize::MAX, 2, 1).end, usize::MAX);
    assert_eq!(chunk_range(5, 4, usize::MAX), 5..5);
}
