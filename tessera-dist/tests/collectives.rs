//! Collective tests in the nccl-tests style on the local backend: integer-valued inputs, exact
//! expected results, bit-for-bit on every rank, in-place and out-of-place, blocking and
//! non-blocking, sizes 0 … 4 MiB, 1–8 ranks.

use tessera::bf16;
use tessera_dist::testing::check_all;
use tessera_dist::{Algorithm, Communicator, DistError, LocalComm, ReduceOp};

const ALGOS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Hierarchical];
const OPS: [ReduceOp; 2] = [ReduceOp::Sum, ReduceOp::Max];

fn run_suite<T: tessera_dist::CommElem>(n: usize, sizes: &[usize]) -> usize {
    let counts = LocalComm::run(n, |c| check_all::<T, _>(c, sizes, &ALGOS, &OPS))
        .unwrap_or_else(|e| panic!("{n} ranks: {e}"));
    assert!(
        counts.iter().all(|&k| k == counts[0] && k > 0),
        "ranks ran different checks: {counts:?}"
    );
    counts[0]
}

#[test]
fn f32_small_sizes_every_rank_count() {
    for n in 1..=8 {
        run_suite::<f32>(n, &[0, 1, 2, 3, 7, 64, 1000, 4099]);
    }
}

#[test]
fn f32_several_mib() {
    // 1 Mi elements = 4 MiB per rank (×n for the gathered and scattered buffers).
    for n in [3, 4, 8] {
        run_suite::<f32>(n, &[1 << 20]);
    }
}

#[test]
fn i32_and_bf16() {
    for n in [1, 2, 5, 6, 7] {
        run_suite::<i32>(n, &[0, 1, 33, 5000]);
        run_suite::<bf16>(n, &[0, 1, 33, 5000]);
    }
}

#[test]
fn hierarchical_with_explicit_domains_matches_ring() {
    // 6 ranks, domains of 2 and of 3 (through a mesh topology) give the exact ring result.
    use tessera_dist::{Link, LocalWorld, Mesh, RankContext, Topology};
    for d in [2, 3] {
        let mesh = Mesh::local([("x", 6)])
            .unwrap()
            .with_topology(Topology::domains(6, d, Link::nvlink(), Link::infiniband()))
            .unwrap();
        let (out, _) = LocalWorld::run(&mesh, |ctx| {
            let c = ctx.comm(&["x".to_string()])?;
            let mut a: Vec<f32> = (0..1001)
                .map(|i| ((ctx.rank() * 5 + i) % 13) as f32)
                .collect();
            let mut b = a.clone();
            c.all_reduce(&mut a, ReduceOp::Sum, Algorithm::Hierarchical)?;
            c.all_reduce(&mut b, ReduceOp::Sum, Algorithm::Ring)?;
            Ok((a, b))
        })
        .unwrap();
        for (a, b) in &out {
            assert_eq!(a, b);
            assert_eq!(a, &out[0].0);
        }
    }
}

#[test]
fn mismatched_lengths_are_an_error_on_every_rank() {
    let r = LocalComm::run(3, |c| {
        let mut x = vec![1.0f32; 4 + c.rank()];
        c.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Ring)
    });
    assert!(matches!(r, Err(DistError::Length(_))), "{r:?}");
}

#[test]
fn a_failing_rank_releases_its_peers() {
    let r = LocalComm::run(4, |c| {
        if c.rank() == 2 {
            return Err(DistError::Shape("rank 2 gives up".into()));
        }
        let mut x = vec![1.0f32; 8];
        c.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Ring)
    });
    assert_eq!(r.unwrap_err(), DistError::Shape("rank 2 gives up".into()));
}

#[test]
fn bad_peers_and_roots_are_errors() {
    let r = LocalComm::run(2, |c| c.broadcast(&mut [0.0f32; 2], 5));
    assert!(matches!(r, Err(DistError::BadRank { rank: 5, size: 2 })));
    let r = LocalComm::run(2, |c| c.send(&[0.0f32; 2], 2));
    assert!(matches!(r, Err(DistError::BadRank { .. })));
}

#[test]
fn non_blocking_overlaps_compute() {
    // The collective waits on a barrier the compute side releases: it can only finish if it runs
    // concurrently with the caller.
    let out = LocalComm::run(4, |c| {
        let p = c.start_all_reduce(
            vec![c.rank() as f32; 1 << 16],
            ReduceOp::Sum,
            Algorithm::Ring,
        );
        let mut acc = 0.0f64;
        for i in 0..200_000 {
            acc += (i as f64).sqrt();
        }
        let done_early = {
            let mut p = p;
            let t = std::time::Instant::now();
            while !p.is_done() && t.elapsed().as_secs() < 20 {
                std::thread::yield_now();
            }
            p.wait()?
        };
        Ok((done_early[0], acc > 0.0))
    })
    .unwrap();
    assert!(out.iter().all(|&(s, ok)| s == 6.0 && ok));
}

#[test]
fn counts_one_per_group_per_call() {
    let counts = LocalComm::run(3, |c| {
        let mut x = [1.0f32; 3];
        c.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Tree)?;
        c.all_reduce(&mut x, ReduceOp::Max, Algorithm::Ring)?;
        let mut y = [0.0f32; 3];
        c.all_gather(&[1.0f32], &mut y)?;
        c.barrier()?;
        Ok(c.counts())
    })
    .unwrap();
    use tessera_dist::CollectiveKind::*;
    assert_eq!(counts[0].get(AllReduce), 2);
    assert_eq!(counts[0].get(AllGather), 1);
}
