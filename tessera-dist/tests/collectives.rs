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

/// A relay only a non-blocking start lets finish: rank `r` joins the all-reduce only after rank
/// `r − 1` has *started* it and then sent a token on the blocking lane. If `start` blocked until
/// the all-reduce completed, rank 0 would never send its token and no rank could finish.
/// `true` when every rank got the sum within `limit`.
fn relay_finishes(
    start: fn(&LocalComm, Vec<f32>) -> Box<dyn FnOnce() -> tessera_dist::Result<Vec<f32>> + Send>,
    limit: std::time::Duration,
) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let out = LocalComm::run(4, |c| {
            let r = c.rank();
            let mut token = [0i32];
            if r > 0 {
                c.recv(&mut token, r - 1)?;
            }
            let wait = start(c, vec![r as f32 + 1.0; 1 << 12]);
            if r + 1 < c.size() {
                c.send(&[token[0] + 1], r + 1)?;
            }
            wait()
        });
        let _ = tx.send(out);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v.iter().all(|x| x.iter().all(|&e| e == 10.0)),
        _ => false,
    }
}

#[test]
fn non_blocking_start_does_not_block() {
    let started = |c: &LocalComm, x: Vec<f32>| {
        let p = c.start_all_reduce(x, ReduceOp::Sum, Algorithm::Ring);
        Box::new(move || p.wait()) as Box<dyn FnOnce() -> _ + Send>
    };
    assert!(
        relay_finishes(started, std::time::Duration::from_secs(60)),
        "start_all_reduce blocked: the relay deadlocked"
    );
}

#[test]
fn relay_detects_a_blocking_start() {
    // The same relay with a start that completes the collective before returning must hang:
    // this is what makes `non_blocking_start_does_not_block` able to fail.
    let blocking = |c: &LocalComm, mut x: Vec<f32>| {
        let r = c
            .all_reduce(&mut x, ReduceOp::Sum, Algorithm::Ring)
            .map(|()| x);
        Box::new(move || r) as Box<dyn FnOnce() -> _ + Send>
    };
    assert!(!relay_finishes(blocking, std::time::Duration::from_secs(2)));
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

/// A pipeline of more than two stages: every stage but the last sends once, and every send
/// counts (the collectives count once per group; point-to-point messages count one each).
#[test]
fn counts_every_send_of_a_pipeline() {
    for n in [2usize, 3, 5] {
        let counts = LocalComm::run(n, |c| {
            let r = c.rank();
            let mut token = [0.0f32];
            if r > 0 {
                c.recv(&mut token, r - 1)?;
            }
            if r + 1 < n {
                c.send(&[token[0] + 1.0], r + 1)?;
            }
            c.barrier()?;
            Ok((c.counts(), token[0]))
        })
        .unwrap();
        assert_eq!(counts[n - 1].1, (n - 1) as f32);
        for (c, _) in &counts {
            assert_eq!(
                c.get(tessera_dist::CollectiveKind::SendRecv),
                (n - 1) as u64
            );
        }
    }
}
