//! Overlap inside the SPMD launch: a launch in microbatches starts each piece's output
//! redistribution (non-blocking, on the group's async lane) as soon as the piece's kernel
//! finishes and waits on it only to assemble the result. It equals the one-piece launch bit for
//! bit (integer-valued inputs), runs exactly the collectives it prints, and a relay that only a
//! non-blocking start lets finish proves the start does not wait (the same relay with the
//! serialised launch hangs, so the test can fail).

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera::{Device, Tensor};
use tessera_dist::{
    CollectiveKind, DistTensor, LocalWorld, Mesh, RankContext, Replicate, Result, Shard, ShardSpec,
    spmd,
};

#[tessera::kernel]
fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

/// The output's leading dim is the normalized one.
#[tessera::kernel]
fn softmax_t(x: Tensor<f32, (M, N)>) -> Tensor<f32, (N, M)> {
    softmax(x).t()
}

/// Integer-valued uniform values in [-4, 4], seeded.
fn ints(shape: &[usize], seed: u64) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 9) as f32 - 4.0
        })
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

fn bits(t: &Tensor<f32>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
}

fn spec(s: &[&[&str]]) -> ShardSpec {
    ShardSpec::new(s.iter().map(|a| {
        if a.is_empty() {
            Replicate
        } else {
            Shard(a.iter().copied())
        }
    }))
}

/// Row-parallel matmul (contraction over tp, rows over dp) in 1, 2, 3 and 5 pieces of the 7
/// local rows (cut as `chunk_range` cuts: 5 asked gives 4 of 2, 2, 2, 1), overlapped and
/// serialised, to a replicated and to a column-split result: always
/// the single-device result bit for bit, with one collective per piece and group, as printed.
fn microbatches_equal_one_launch(dev: &Device) {
    let mesh = Mesh::new([("dp", 2), ("tp", 2)], vec![dev.clone(); 4]).unwrap();
    let (m, k, n) = (14, 6, 5);
    let (x, w) = (ints(&[m, k], 1), ints(&[k, n], 2));
    let want = mm(&x.clone().to(dev).unwrap(), &w.clone().to(dev).unwrap()).unwrap();
    let xd = DistTensor::distribute(&x, spec(&[&["dp"], &["tp"]]), &mesh).unwrap();
    let wd = DistTensor::distribute(&w, spec(&[&["tp"]]), &mesh).unwrap();
    for to in [spec(&[&["dp"]]), spec(&[&["dp"], &["tp"]])] {
        for pieces in [1usize, 2, 3, 5] {
            for overlap in [true, false] {
                let launch = spmd(&mm::KERNEL)
                    .to(to.clone())
                    .microbatches(pieces)
                    .overlap(overlap);
                let (y, plan, seen) = launch.run_traced::<f32>(&[&xd, &wd]).unwrap();
                assert_eq!(plan.counts(), seen, "{plan}");
                assert_eq!(y.spec(), &to, "{plan}");
                assert!(bits(&y.gather().unwrap()) == bits(&want), "{plan}");
                // 7 local rows per device, one collective per tp group (2 of them) and piece.
                let got = match &plan.pieces {
                    Some(mb) => mb.plans.len(),
                    None => 1,
                };
                let cut = (0..pieces)
                    .filter(|&j| !tessera_dist::chunk_range(7, pieces, j).is_empty())
                    .count();
                assert_eq!(got, cut, "{plan}");
                let per_piece = if to.dim_axes(1).is_empty() {
                    seen.get(CollectiveKind::AllReduce)
                } else {
                    seen.get(CollectiveKind::ReduceScatter)
                };
                assert_eq!(per_piece, 2 * got as u64, "{plan}");
            }
        }
    }
}

macro_rules! backend_tests {
    ($($name:ident),*) => {
        mod cpu {
            $(#[test] fn $name() { super::$name(&tessera::Device::Cpu) })*
        }
        mod sim {
            $(#[test] fn $name() { super::$name(&tessera::Device::sim()) })*
        }
    };
}

backend_tests!(microbatches_equal_one_launch);

/// What cannot be cut: a leading dim that is reduced, one the redistribution moves, and
/// microbatches with partial statistics are errors naming the reason.
#[test]
fn uncuttable_launches_are_errors() {
    let mesh = Mesh::local([("dp", 2), ("tp", 2)]).unwrap();
    let x = ints(&[8, 6], 3);
    let w = ints(&[6, 4], 4);
    let xd = DistTensor::distribute(&x, spec(&[&["dp"], &["tp"]]), &mesh).unwrap();
    let wd = DistTensor::distribute(&w, spec(&[&["tp"]]), &mesh).unwrap();
    let e = spmd(&mm::KERNEL)
        .to(spec(&[&[], &["dp"]]))
        .microbatches(2)
        .plan(&[&xd, &wd])
        .unwrap_err();
    assert!(e.to_string().contains("leading dim moves"), "{e}");
    let e = spmd(&softmax_t::KERNEL)
        .microbatches(2)
        .plan(&[&xd])
        .unwrap_err();
    assert!(e.to_string().contains("reduced or normalized"), "{e}");
    let e = spmd(&mm::KERNEL)
        .statistics(tessera_dist::Statistics::Partial)
        .microbatches(2)
        .plan(&[&xd, &wd])
        .unwrap_err();
    assert!(e.to_string().contains("partial statistics"), "{e}");
}

/// A rank context that runs a relay around the launch's starts: rank `r` may start piece 0's
/// collective only after rank `r − 1` has sent it a token, and rank `r − 1` sends that token
/// only when it starts piece 1, i.e. after its own piece-0 start returned and its piece-1
/// kernel ran. If starting piece 0's collective waited for it to complete, rank 0 would never
/// send its token and no rank could finish.
/// One rank's ends of the relay: the sender to the next rank, the receiver from the previous.
type Link = (Option<Sender<()>>, Option<Receiver<()>>);

struct Relay<'a, X> {
    inner: &'a X,
    starts: Mutex<usize>,
    from_prev: Option<Mutex<Receiver<()>>>,
    to_next: Option<Mutex<Sender<()>>>,
}

impl<X: RankContext> RankContext for Relay<'_, X> {
    type Comm = X::Comm;
    fn mesh(&self) -> &Mesh {
        self.inner.mesh()
    }
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn comm(&self, axes: &[String]) -> Result<Arc<X::Comm>> {
        let mut n = self.starts.lock().unwrap();
        match *n {
            0 => {
                if let Some(rx) = &self.from_prev {
                    rx.lock().unwrap().recv().expect("token");
                }
            }
            1 => {
                if let Some(tx) = &self.to_next {
                    tx.lock().unwrap().send(()).expect("token");
                }
            }
            _ => {}
        }
        *n += 1;
        self.inner.comm(axes)
    }
}

/// `true` when the relayed launch (2 pieces, overlapped or not) finishes within `limit` with
/// the right result on every rank.
fn relay_finishes(overlap: bool, limit: Duration) -> bool {
    let (done_tx, done_rx) = channel();
    std::thread::spawn(move || {
        let n = 4;
        let mesh = Mesh::local([("tp", n)]).unwrap();
        let (x, w) = (ints(&[8, 8], 5), ints(&[8, 3], 6));
        let want = bits(&mm(&x, &w).unwrap());
        // The arguments already in their launch specs: the only starts are the pieces'.
        let xd = DistTensor::distribute(&x, spec(&[&[], &["tp"]]), &mesh).unwrap();
        let wd = DistTensor::distribute(&w, spec(&[&["tp"]]), &mesh).unwrap();
        let mut senders: Vec<Option<Sender<()>>> = Vec::new();
        let mut receivers: Vec<Option<Receiver<()>>> = vec![None];
        for _ in 1..n {
            let (t, r) = channel();
            senders.push(Some(t));
            receivers.push(Some(r));
        }
        senders.push(None);
        let links: Vec<Mutex<Link>> = senders.into_iter().zip(receivers).map(Mutex::new).collect();
        let launch = spmd(&mm::KERNEL)
            .to(ShardSpec::replicated())
            .microbatches(2)
            .overlap(overlap);
        let out = LocalWorld::run(&mesh, |ctx| {
            let (tx, rx) = std::mem::take(&mut *links[ctx.rank()].lock().unwrap());
            let relay = Relay {
                inner: ctx,
                starts: Mutex::new(0),
                from_prev: rx.map(Mutex::new),
                to_next: tx.map(Mutex::new),
            };
            let y = launch.run_rank::<f32, _>(&relay, &[&xd, &wd])?;
            Ok(bits(y.local()) == want)
        });
        let _ = done_tx.send(out.map(|(oks, _)| oks.iter().all(|&ok| ok)));
    });
    matches!(done_rx.recv_timeout(limit), Ok(Ok(true)))
}

#[test]
fn microbatch_start_does_not_block() {
    assert!(
        relay_finishes(true, Duration::from_secs(60)),
        "starting a piece's redistribution waited for it: the relay deadlocked"
    );
}

#[test]
fn relay_detects_a_serialised_launch() {
    // The serialised launch waits on each start at once: the relay must hang. This is what
    // makes `microbatch_start_does_not_block` able to fail.
    assert!(!relay_finishes(false, Duration::from_secs(2)));
}
