//! Specs, the uneven rule, distribute/gather and redistribute round trips (proptest), and the
//! planner's counts against the collectives observed.

use proptest::prelude::*;
use tessera::Tensor;
use tessera_dist::{
    CollectiveKind, DimSpec, DistError, DistTensor, Mesh, ReduceOp, Replicate, Shard, ShardSpec,
    Step, chunk_range, plan_redistribute, redistribute_edges,
};

fn iota(shape: &[usize]) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n).map(|i| ((i * 37) % 101) as f32 - 50.0).collect(),
        shape,
    )
    .unwrap()
}

fn mesh3() -> Mesh {
    Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)]).unwrap()
}

#[test]
fn mesh_validation() {
    assert!(
        matches!(Mesh::local([("a", 2), ("a", 3)]), Err(DistError::DuplicateMeshAxis(a)) if a == "a")
    );
    assert!(matches!(
        Mesh::new([("a", 2), ("b", 3)], vec![tessera::Device::cpu(); 5]),
        Err(DistError::MeshSize {
            product: 6,
            devices: 5,
            ..
        })
    ));
    assert!(matches!(
        Mesh::local([("a", 0)]),
        Err(DistError::ZeroMeshAxis(_))
    ));
    let m = mesh3();
    assert!(matches!(m.axis("zz"), Err(DistError::UnknownAxis { .. })));
    // every device in exactly one group per axis, groups of the axis size
    for a in ["tp", "pp", "dp"] {
        let g = m.axis(a).unwrap();
        assert_eq!(g.groups().len(), 4);
        let mut all: Vec<usize> = g.groups().concat();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        for r in 0..8 {
            assert_eq!(g.group_of(r)[g.position(r)], r);
        }
    }
}

#[test]
fn spec_errors_name_the_problem() {
    let m = mesh3();
    let e = ShardSpec::new([Shard(["nope"])])
        .validate(&m, 2)
        .unwrap_err();
    assert!(
        matches!(&e, DistError::UnknownAxis { axis, .. } if axis == "nope"),
        "{e}"
    );
    let e = ShardSpec::new([Shard(["tp"]), Shard(["pp", "tp"])])
        .validate(&m, 2)
        .unwrap_err();
    assert_eq!(e, DistError::AxisUsedTwice("tp".into()));
    let e = ShardSpec::new([Shard(["tp"])])
        .partial(["tp"], ReduceOp::Sum)
        .validate(&m, 2)
        .unwrap_err();
    assert_eq!(e, DistError::AxisUsedTwice("tp".into()));
    let e = ShardSpec::new([Replicate, Replicate, Replicate])
        .validate(&m, 2)
        .unwrap_err();
    assert_eq!(
        e,
        DistError::TooManyEntries {
            entries: 3,
            rank: 2
        }
    );
    // partial where a value must be whole
    let p = ShardSpec::replicated().partial(["dp"], ReduceOp::Sum);
    assert!(
        matches!(p.require_whole("matmul input"), Err(DistError::PartialNotAllowed(m)) if m.contains("matmul input"))
    );
    let d = DistTensor::distribute(&iota(&[4, 4]), ShardSpec::replicated(), &m).unwrap();
    assert!(matches!(
        d.redistribute(&p),
        Err(DistError::PartialNotAllowed(_))
    ));
    assert_eq!(Shard(Vec::<&str>::new()), DimSpec::Replicated);
}

#[test]
fn uneven_rule() {
    let rows = |s, n| {
        (0..n)
            .map(|i| chunk_range(s, n, i).len())
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(5, 4), vec![2, 2, 1, 0]);
    assert_eq!(rows(1, 8), vec![1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(rows(0, 3), vec![0, 0, 0]);
    assert_eq!(rows(7, 3), vec![3, 3, 1]);
    assert_eq!(rows(9, 4), vec![3, 3, 3, 0]);
}

#[test]
fn uneven_shards_round_trip() {
    for (axes, shape) in [
        (vec![("x", 4)], vec![5usize, 3]),
        (vec![("x", 8)], vec![1, 2]),
        (vec![("x", 3)], vec![0, 4]),
        (vec![("x", 4)], vec![3, 0]),
        (vec![("x", 2), ("y", 3)], vec![5, 7]),
    ] {
        let m = Mesh::local(axes.clone()).unwrap();
        let names: Vec<&str> = axes.iter().map(|a| a.0).collect();
        let x = iota(&shape);
        for spec in [
            ShardSpec::new([Shard(names.clone())]),
            ShardSpec::new([Replicate, Shard(names.clone())]),
            ShardSpec::new([Shard([names[0]]), Shard(names[1..].to_vec())]),
        ] {
            let d = DistTensor::distribute(&x, spec.clone(), &m).unwrap();
            let total: usize = (0..m.size()).map(|r| d.shard(r).numel()).sum();
            assert!(total >= x.numel());
            assert_eq!(d.gather().unwrap(), x, "{spec}");
            for to in [
                ShardSpec::replicated(),
                ShardSpec::new([Replicate, Shard(names.clone())]),
                ShardSpec::new([Shard(names.clone())]),
            ] {
                let (r, plan, seen) = d.redistribute_traced(&to).unwrap();
                assert_eq!(r.gather().unwrap(), x, "{spec} → {to}\n{plan}");
                assert_eq!(plan.counts(), seen, "{plan}");
                for rank in 0..m.size() {
                    assert_eq!(
                        r.shard(rank).shape(),
                        to.local_shape(&shape, &m, rank).unwrap().as_slice()
                    );
                }
            }
        }
    }
}

#[test]
fn five_rows_on_four_devices_shapes() {
    let m = Mesh::local([("x", 4)]).unwrap();
    let d = DistTensor::distribute(&iota(&[5, 2]), ShardSpec::new([Shard(["x"])]), &m).unwrap();
    let shapes: Vec<_> = d.shards().iter().map(|s| s.shape().to_vec()).collect();
    assert_eq!(shapes, vec![vec![2, 2], vec![2, 2], vec![1, 2], vec![0, 2]]);
}

#[test]
fn partial_to_replicate_and_shard() {
    let m = mesh3();
    // Contributions: device r holds (r+1)·x on a [Shard(tp)] layout, partial over (pp, dp).
    let x = iota(&[6, 5]);
    let spec = ShardSpec::new([Shard(["tp"])]).partial(["pp", "dp"], ReduceOp::Sum);
    let base = DistTensor::distribute(&x, ShardSpec::new([Shard(["tp"])]), &m).unwrap();
    let shards: Vec<Tensor<f32>> = base
        .shards()
        .iter()
        .enumerate()
        .map(|(r, s)| {
            Tensor::from_vec(
                s.as_slice()
                    .unwrap()
                    .iter()
                    .map(|v| v * (r as f32 + 1.0))
                    .collect(),
                s.shape(),
            )
            .unwrap()
        })
        .collect();
    let p = DistTensor::from_shards(shards, spec, &m, &[6, 5]).unwrap();
    let want = p.gather().unwrap();
    // sum over pp,dp of (r+1) for each tp: tp0 ranks 0..4 → 10, tp1 ranks 4..8 → 26
    assert_eq!(want.as_slice().unwrap()[0], x.as_slice().unwrap()[0] * 10.0);
    assert_eq!(
        want.as_slice().unwrap()[29],
        x.as_slice().unwrap()[29] * 26.0
    );
    let (r, plan, seen) = p
        .redistribute_traced(&ShardSpec::new([Shard(["tp"])]))
        .unwrap();
    // At 60 bytes per rank every plan is latency-bound: the planner's is no dearer than one
    // all-reduce over (pp, dp).
    let one = tessera_dist::choose_all_reduce(60, &[0, 1, 2, 3], m.topology()).1;
    assert!(plan.seconds() <= one, "{plan}");
    assert_eq!(plan.counts(), seen);
    assert_eq!(r.gather().unwrap(), want);
    // partial → shard over the partial axes: one reduce-scatter per group
    let to = ShardSpec::new([Shard(["tp"]), Shard(["pp", "dp"])]);
    let (r, plan, seen) = p.redistribute_traced(&to).unwrap();
    assert_eq!(
        plan.counts().get(CollectiveKind::ReduceScatter),
        2,
        "{plan}"
    );
    assert_eq!(plan.counts(), seen);
    assert_eq!(r.gather().unwrap(), want);
    // max partial
    let pm = DistTensor::distribute(
        &x,
        ShardSpec::replicated().partial(["dp"], ReduceOp::Max),
        &m,
    )
    .unwrap();
    assert_eq!(
        pm.redistribute(&ShardSpec::replicated())
            .unwrap()
            .gather()
            .unwrap(),
        x
    );
}

#[test]
fn gather_detects_diverged_replicas() {
    let m = Mesh::local([("x", 2)]).unwrap();
    let mut shards = vec![iota(&[2, 2]), iota(&[2, 2])];
    shards[1].as_mut_slice().unwrap()[3] += 1.0;
    let d = DistTensor::from_shards(shards, ShardSpec::replicated(), &m, &[2, 2]).unwrap();
    assert!(matches!(d.gather(), Err(DistError::ReplicaMismatch(_))));
}

#[test]
fn shard_to_shard_uses_all_to_all() {
    let m = Mesh::local([("tp", 4)]).unwrap();
    let x = iota(&[9, 7]);
    let d = DistTensor::distribute(&x, ShardSpec::new([Shard(["tp"])]), &m).unwrap();
    let (r, plan, seen) = d
        .redistribute_traced(&ShardSpec::new([Replicate, Shard(["tp"])]))
        .unwrap();
    assert_eq!(plan.steps.len(), 1, "{plan}");
    assert_eq!(seen.get(CollectiveKind::AllToAll), 1);
    assert_eq!(r.gather().unwrap(), x);
}

/// Random specs over a random mesh: each dim gets a subset of the unused axes, plus a partial
/// state over some of the remaining ones.
fn arb_case() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, u64, u64)> {
    (
        prop::collection::vec(1usize..=3, 1..=3), // mesh axis sizes
        prop::collection::vec(0usize..=7, 1..=3), // tensor shape (0-size dims included)
        any::<u64>(),
        any::<u64>(),
    )
}

const NAMES: [&str; 3] = ["a", "b", "c"];

fn spec_from(seed: u64, naxes: usize, rank: usize, allow_partial: bool) -> ShardSpec {
    let mut s = seed;
    let mut next = |k: u64| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) % k
    };
    let mut dims: Vec<Vec<&str>> = vec![vec![]; rank];
    let mut partial = vec![];
    // a random permutation of the axes, each put on a dim, left replicated, or partial
    let mut axes: Vec<&str> = NAMES[..naxes].to_vec();
    for i in (1..axes.len()).rev() {
        axes.swap(i, next(i as u64 + 1) as usize);
    }
    for a in axes {
        let c = next(rank as u64 + 2) as usize;
        if c < rank {
            dims[c].push(a);
        } else if c == rank && allow_partial {
            partial.push(a);
        }
    }
    let op = if next(2) == 0 {
        ReduceOp::Sum
    } else {
        ReduceOp::Max
    };
    ShardSpec::new(dims.into_iter().map(Shard)).partial(partial, op)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]
    #[test]
    fn redistribute_round_trip((sizes, shape, sa, sb) in arb_case()) {
        let naxes = sizes.len();
        let mesh = Mesh::local(NAMES[..naxes].iter().copied().zip(sizes.iter().copied())).unwrap();
        let x = iota(&shape);
        let a = spec_from(sa, naxes, shape.len(), true);
        let b = spec_from(sb, naxes, shape.len(), false);
        let d = DistTensor::distribute(&x, a.clone(), &mesh).unwrap();
        prop_assert_eq!(d.gather().unwrap(), x.clone());
        let (r, plan, seen) = d.redistribute_traced(&b).unwrap();
        prop_assert_eq!(r.gather().unwrap(), x.clone(), "{} → {}\n{}", a, b, plan);
        prop_assert_eq!(plan.counts(), seen, "{}", plan);
        for rank in 0..mesh.size() {
            let want = b.local_shape(&shape, &mesh, rank).unwrap();
            prop_assert_eq!(r.shard(rank).shape(), want.as_slice());
        }
        // and back (b is whole, so any a without partial is reachable)
        let back = a.without_partial();
        let (r2, plan2, seen2) = r.redistribute_traced(&back).unwrap();
        prop_assert_eq!(r2.gather().unwrap(), x, "{} → {}\n{}", b, back, plan2);
        prop_assert_eq!(plan2.counts(), seen2);
    }
}

// ---------------------------------------------------------------------------------------------
// The planner: the two plans the old per-transition planner missed, and optimality against
// brute force.

#[test]
fn partial_to_finer_shard_is_one_reduce_scatter() {
    // [S(dp), S(pp)] Partial(sum: tp) → [S(dp), S(pp,tp)] at 4096 × 4096 f32: the old planner
    // ran all-reduce + all-gather + slice (≈ 3.8 ms under its own model); one reduce-scatter
    // over tp costs ≈ 1.3 ms.
    let m = mesh3();
    let from = ShardSpec::new([Shard(["dp"]), Shard(["pp"])]).partial(["tp"], ReduceOp::Sum);
    let to = ShardSpec::new([Shard(["dp"]), Shard(["pp", "tp"])]);
    let plan = plan_redistribute(&m, &[4096, 4096], 4, &from, &to).unwrap();
    assert_eq!(plan.steps.len(), 1, "{plan}");
    assert_eq!(
        plan.steps[0].step,
        Step::ReduceScatter {
            axes: vec!["tp".into()],
            op: ReduceOp::Sum,
            dim: 1
        }
    );
    assert!(plan.seconds() < 1.4e-3 && plan.seconds() > 1.2e-3, "{plan}");
    // and it runs: bit-identical to the direct scatter of the reduced tensor (16 columns nest:
    // pp chunks of 8 split into (pp,tp) chunks of 4; with 14 they would not, see below).
    let x = iota(&[9, 16]);
    let d = DistTensor::distribute(&x, from, &m).unwrap();
    let (r, plan, seen) = d.redistribute_traced(&to).unwrap();
    assert_eq!(seen.get(CollectiveKind::ReduceScatter), 4, "{plan}");
    assert_eq!(seen.total(), 4);
    assert_eq!(r, DistTensor::distribute(&x, to, &m).unwrap());
}

#[test]
fn coarser_shard_gathers_only_the_minor_axis() {
    // [S(tp,dp)] → [S(tp)]: an all-gather over dp alone moves a quarter of the bytes of
    // gathering over all 8 devices (and then slicing).
    let m = mesh3();
    let from = ShardSpec::new([Shard(["tp", "dp"])]);
    let to = ShardSpec::new([Shard(["tp"])]);
    let plan = plan_redistribute(&m, &[4096, 4096], 4, &from, &to).unwrap();
    assert_eq!(plan.steps.len(), 1, "{plan}");
    assert_eq!(
        plan.steps[0].step,
        Step::AllGather {
            axes: vec!["dp".into()],
            dim: 0
        }
    );
    // 2 × (4096/4 × 4096) × 4 bytes, against 8 × (4096/4 × 4096) × 4 for the full gather.
    assert_eq!(plan.bytes(), 2 * 1024 * 4096 * 4);
    let x = iota(&[16, 3]);
    let d = DistTensor::distribute(&x, from, &m).unwrap();
    let (r, _, seen) = d.redistribute_traced(&to).unwrap();
    assert_eq!(seen.get(CollectiveKind::AllGather), 4);
    assert_eq!(seen.total(), 4);
    assert_eq!(r, DistTensor::distribute(&x, to, &m).unwrap());
}

#[test]
fn uneven_splits_forbid_nested_slices() {
    // 5 rows over a: [0,3) [3,5); over (a,b): chunks of 2 → [0,2) [2,4) [4,5) [5,5): the second
    // device of a-group 0 would need row 3, which it does not hold, so no local slice exists.
    let m = Mesh::local([("a", 2), ("b", 2)]).unwrap();
    let from = ShardSpec::new([Shard(["a"])]);
    let edges = redistribute_edges(&m, &[5, 2], 4, &from).unwrap();
    assert!(
        !edges.iter().any(|e| e.step
            == Step::Slice {
                dim: 0,
                axes: vec!["b".into()]
            }),
        "an invalid nested slice was offered"
    );
    // With 8 rows the nesting holds and the slice is free.
    let edges = redistribute_edges(&m, &[8, 2], 4, &from).unwrap();
    assert!(edges.iter().any(|e| e.step
        == Step::Slice {
            dim: 0,
            axes: vec!["b".into()]
        }
        && e.seconds == 0.0));
    // Either way the planner reaches the target and the result is exact.
    let to = ShardSpec::new([Shard(["a", "b"])]);
    for rows in [5, 8] {
        let x = iota(&[rows, 2]);
        let d = DistTensor::distribute(&x, from.clone(), &m).unwrap();
        assert_eq!(
            d.redistribute(&to).unwrap(),
            DistTensor::distribute(&x, to.clone(), &m).unwrap()
        );
    }
}

/// The cheapest cost of any plan of at most `depth` steps, by exhaustive enumeration.
fn brute_force(
    mesh: &Mesh,
    shape: &[usize],
    from: &ShardSpec,
    to: &ShardSpec,
    depth: usize,
) -> f64 {
    use std::collections::HashMap;
    let rank = shape.len();
    let target = to.normalized(mesh, rank);
    let mut memo: HashMap<ShardSpec, Vec<tessera_dist::PlannedStep>> = HashMap::new();
    let mut frontier = vec![(from.normalized(mesh, rank), 0.0f64)];
    let mut best = if frontier[0].0 == target {
        0.0
    } else {
        f64::INFINITY
    };
    for _ in 0..depth {
        let mut next = Vec::new();
        for (s, c) in frontier {
            let edges = memo
                .entry(s.clone())
                .or_insert_with(|| redistribute_edges(mesh, shape, 4, &s).unwrap());
            for e in edges.iter() {
                let c2 = c + e.seconds;
                if e.to == target {
                    best = best.min(c2);
                }
                next.push((e.to.clone(), c2));
            }
        }
        // keep the cheapest way to each spec (the rest cannot lead anywhere cheaper)
        let mut cheapest: HashMap<ShardSpec, f64> = HashMap::new();
        for (s, c) in next {
            let e = cheapest.entry(s).or_insert(f64::INFINITY);
            *e = e.min(c);
        }
        frontier = cheapest.into_iter().collect();
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn planner_beats_every_short_plan((sizes, shape, sa, sb) in arb_case()) {
        let naxes = sizes.len();
        let mesh = Mesh::local(NAMES[..naxes].iter().copied().zip(sizes.iter().copied())).unwrap();
        let a = spec_from(sa, naxes, shape.len(), true);
        let b = spec_from(sb, naxes, shape.len(), false);
        let plan = plan_redistribute(&mesh, &shape, 4, &a, &b).unwrap();
        let brute = brute_force(&mesh, &shape, &a, &b, 3);
        prop_assert!(
            plan.seconds() <= brute * (1.0 + 1e-9) + 1e-15,
            "planner {} s > brute force {} s\n{}", plan.seconds(), brute, plan
        );
        // Executing it gives exactly the shards of the direct scatter of the (reduced) tensor.
        let x = iota(&shape);
        let d = DistTensor::distribute(&x, a.clone(), &mesh).unwrap();
        let (r, plan, seen) = d.redistribute_traced(&b).unwrap();
        prop_assert_eq!(plan.counts(), seen, "{}", plan);
        let direct = DistTensor::distribute(&x, b.clone(), &mesh).unwrap();
        for rank in 0..mesh.size() {
            let (got, want) = (r.shard(rank), direct.shard(rank));
            prop_assert_eq!(got.shape(), want.shape(), "{} → {}\n{}", a, b, plan);
            let bits = |t: &Tensor<f32>| t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(got), bits(want), "{} → {} rank {}\n{}", a, b, rank, plan);
        }
    }
}
