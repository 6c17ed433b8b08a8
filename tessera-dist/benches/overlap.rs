//! Compute/communication overlap on the local mesh: a tensor-parallel MLP chain (column-parallel
//! `W1`, row-parallel `W2`, one all-reduce per layer) over micro-batches, run twice:
//!
//! * **overlapped**: each micro-batch's partial sum is started (`start_all_reduce`) as soon as
//!   its matmul finishes and waited on only by the next layer's matmul of that micro-batch, so
//!   the reduction runs while the other micro-batches compute;
//! * **serialised**: the same operations, each all-reduce waited on right after it starts.
//!
//! Both runs must give bit-identical results (integer-valued inputs); the table prints the
//! median wall time of each and the ratio.
//!
//! Then the same comparison through the SPMD launch itself: the row-parallel layer
//! (`x: [batch, 4·hidden]` split over tp by columns, `W2` by rows, the partial sum all-reduced)
//! as one `spmd(&mm::KERNEL).to(replicated).microbatches(micro)` launch, overlapped (each
//! piece's all-reduce started when its kernel finishes, waited on at assembly) vs
//! `.overlap(false)`.
//!
//! Run: `cargo bench -p tessera-dist --bench overlap` (`-- --tp 4 --layers 4 --batch 512`)

use std::time::Instant;
use tessera::Tensor;
use tessera_dist::{
    Algorithm, Communicator, DistTensor, LocalWorld, Mesh, RankContext, ReduceOp, Replicate, Shard,
    ShardSpec, spmd,
};

#[tessera::kernel]
fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

fn ints(shape: &[usize], seed: usize) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 3) as f32 - 1.0)
            .collect(),
        shape,
    )
    .unwrap()
}

fn arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs the chain on every rank; returns rank 0's output and the wall time.
fn chain(
    mesh: &Mesh,
    x: &Tensor<f32>,
    w1: &DistTensor<f32>,
    w2: &DistTensor<f32>,
    layers: usize,
    micro: usize,
    overlap: bool,
) -> (Vec<f32>, f64) {
    let t = Instant::now();
    let (outs, _) = LocalWorld::run(mesh, |ctx| {
        let tp = ctx.comm(&["tp".to_string()])?;
        let (b, h) = (x.shape()[0], x.shape()[1]);
        let rows = b / micro;
        let w1 = w1.shard(ctx.rank());
        let w2 = w2.shard(ctx.rank());
        // Per micro-batch: its value, or the reduction producing it (started, not waited).
        let mut pending: Vec<Option<tessera_dist::Pending<Vec<f32>>>> =
            (0..micro).map(|_| None).collect();
        let xs = x.as_slice()?;
        let mut cur: Vec<Vec<f32>> = (0..micro)
            .map(|i| xs[i * rows * h..(i + 1) * rows * h].to_vec())
            .collect();
        for _ in 0..layers {
            for (c, p) in cur.iter_mut().zip(pending.iter_mut()) {
                // The consumer waits on its producer's reduction, and only now.
                if let Some(p) = p.take() {
                    *c = p.wait()?;
                }
                let xi = Tensor::from_vec(std::mem::take(c), &[rows, h])?;
                let z = mm(&mm(&xi, w1)?, w2)?; // partial sum over tp
                let started = tp.start_all_reduce(z.to_vec()?, ReduceOp::Sum, Algorithm::Ring);
                if overlap {
                    *p = Some(started);
                } else {
                    *c = started.wait()?;
                }
            }
        }
        for (c, p) in cur.iter_mut().zip(pending.iter_mut()) {
            if let Some(p) = p.take() {
                *c = p.wait()?;
            }
        }
        Ok(cur.concat())
    })
    .unwrap();
    (outs.into_iter().next().unwrap(), t.elapsed().as_secs_f64())
}

fn main() {
    let tp = arg("--tp", 4);
    let layers = arg("--layers", 4);
    let b = arg("--batch", 256);
    let h = arg("--hidden", 256);
    let micro = arg("--micro", 4);
    let reps = arg("--reps", 5);
    let mesh = Mesh::local([("tp", tp)]).unwrap();
    let x = ints(&[b, h], 1);
    let w1 = DistTensor::distribute(
        &ints(&[h, 4 * h], 2),
        ShardSpec::new([Replicate, Shard(["tp"])]),
        &mesh,
    )
    .unwrap();
    let w2 = DistTensor::distribute(
        &ints(&[4 * h, h], 3),
        ShardSpec::new([Shard(["tp"])]),
        &mesh,
    )
    .unwrap();
    let mut times = [Vec::new(), Vec::new()];
    let mut outs = [Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (k, overlap) in [false, true].into_iter().enumerate() {
            let (o, t) = chain(&mesh, &x, &w1, &w2, layers, micro, overlap);
            times[k].push(t);
            outs[k] = o;
        }
    }
    assert_eq!(
        outs[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        outs[1].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "overlapped and serialised runs differ"
    );
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (s, o) = (med(&mut times[0]), med(&mut times[1]));
    println!(
        "TP MLP chain: tp={tp}, {layers} layers, batch {b} in {micro} micro-batches, hidden {h} (ffn {})",
        4 * h
    );
    println!("| run | median wall ms ({reps} reps) |");
    println!("|---|---|");
    println!("| serialised | {:.2} |", s * 1e3);
    println!("| overlapped | {:.2} |", o * 1e3);
    println!("serialised / overlapped = {:.2}", s / o);

    // The SPMD launch in microbatches.
    let xr = DistTensor::distribute(
        &ints(&[b, 4 * h], 4),
        ShardSpec::new([Replicate, Shard(["tp"])]),
        &mesh,
    )
    .unwrap();
    let mut times = [Vec::new(), Vec::new()];
    let mut outs = [Vec::new(), Vec::new()];
    let mut shown = String::new();
    for _ in 0..reps {
        for (k, overlap) in [false, true].into_iter().enumerate() {
            let launch = spmd(&mm::KERNEL)
                .to(ShardSpec::replicated())
                .microbatches(micro)
                .overlap(overlap);
            let t = Instant::now();
            let (y, plan, _) = launch.run_traced::<f32>(&[&xr, &w2]).unwrap();
            times[k].push(t.elapsed().as_secs_f64());
            outs[k] = y.shard(0).to_vec().unwrap();
            if overlap {
                shown = plan.to_string();
            }
        }
    }
    assert_eq!(
        outs[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        outs[1].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "overlapped and serialised SPMD launches differ"
    );
    let (s, o) = (med(&mut times[0]), med(&mut times[1]));
    println!();
    println!(
        "SPMD launch, row-parallel layer: tp={tp}, x [{b}, {}] in {micro} microbatches",
        4 * h
    );
    println!("{shown}");
    println!("| SPMD launch | median wall ms ({reps} reps) |");
    println!("|---|---|");
    println!("| serialised (.overlap(false)) | {:.2} |", s * 1e3);
    println!("| overlapped | {:.2} |", o * 1e3);
    println!("serialised / overlapped = {:.2}", s / o);
}
