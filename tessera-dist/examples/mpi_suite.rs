//! The collective and redistribution suite under MPI: run as
//! `mpirun --allow-run-as-root --oversubscribe -np 4 target/.../examples/mpi_suite`.
//! Every rank checks its own results bit for bit; rank 0 prints `N passed, M failed` and the
//! process exits non-zero on any failure.

use tessera::Tensor;
use tessera_dist::mpi_backend::MpiWorld;
use tessera_dist::testing::check_all;
use tessera_dist::{
    Algorithm, Communicator, Mesh, RankContext, RankShard, ReduceOp, Replicate, Shard, ShardSpec,
    Statistics, spmd,
};

#[tessera::kernel]
fn linear_gelu(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

#[tessera::kernel]
fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

#[tessera::kernel]
fn ln(x: Tensor<f32, (M, N)>, g: Tensor<f32, (N,)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
    layernorm(x, g, b, 1e-5)
}

#[tessera::kernel]
fn row_sum(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.sum(1)
}

/// Statistics over the split axis, each launch forced once: the partial-statistics launch
/// (per-rank statistics combined by MPI collectives) and the gather-first launch. Row sums of
/// integer values equal the single-device launch bit for bit; layernorm (7 columns: uneven
/// shards, Chan's combination) is within 1e-5 of the f64 reference.
fn stats_checks<X: RankContext>(ctx: &X) -> tessera_dist::Result<usize> {
    let (m, n) = (5, 7);
    let x = ints(&[m, n], 4);
    let g = Tensor::<f32>::randn(&[n], 5);
    let b = Tensor::<f32>::randn(&[n], 6);
    let split = ShardSpec::new([Shard(["a"]), Shard(["b"])]);
    let xs = RankShard::from_global(ctx, &x, &split)?;
    let cols = ShardSpec::new([Shard(["b"])]);
    let gs = RankShard::from_global(ctx, &g, &cols)?;
    let bs = RankShard::from_global(ctx, &b, &cols)?;
    let (xv, gv, bv) = (x.to_vec()?, g.to_vec()?, b.to_vec()?);
    let mut want_ln = Vec::new();
    for row in xv.chunks(n) {
        let row: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        for (j, v) in row.iter().enumerate() {
            want_ln.push((v - mean) / (var + 1e-5).sqrt() * gv[j] as f64 + bv[j] as f64);
        }
    }
    let want_sum = row_sum(&x)?.to_vec()?;
    let fail = |what: String| Err(tessera_dist::DistError::ReplicaMismatch(what));
    let mut checks = 0;
    for how in [Statistics::Partial, Statistics::GatherFirst] {
        let launch = spmd(&row_sum::KERNEL).statistics(how);
        if launch.plan_on(ctx.mesh(), &[&xs])?.stats.is_some() != (how == Statistics::Partial) {
            return fail(format!(
                "row_sum {how}: the plan's launch is not the one asked"
            ));
        }
        let y = launch
            .run_rank::<f32, _>(ctx, &[&xs])?
            .gather(ctx)?
            .to_vec()?;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if bits(&y) != bits(&want_sum) {
            return fail(format!(
                "row_sum {how}: differs from the single-device launch"
            ));
        }
        let z = spmd(&ln::KERNEL)
            .statistics(how)
            .run_rank::<f32, _>(ctx, &[&xs, &gs, &bs])?;
        if how == Statistics::Partial && z.spec() != &split {
            return fail(format!("layernorm {how}: result spec {}", z.spec()));
        }
        let z = z.gather(ctx)?.to_vec()?;
        let worst = z
            .iter()
            .zip(&want_ln)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        let scale = want_ln.iter().fold(1.0f64, |a, v| a.max(v.abs()));
        if worst > 1e-5 * scale {
            return fail(format!("layernorm {how}: max error {worst:e} vs f64"));
        }
        checks += 2;
    }
    Ok(checks)
}

/// Integer-valued inputs, so every sum is exact in any order.
fn ints(shape: &[usize], seed: usize) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 9) as f32 - 4.0)
            .collect(),
        shape,
    )
    .unwrap()
}

/// SPMD launches of `mm` and `linear_gelu` (one rank per process) against the single-device
/// launch, bit for bit; returns the number of checks.
fn spmd_checks<X: RankContext>(ctx: &X) -> tessera_dist::Result<usize> {
    let (m, k, n) = (13, 10, 9);
    let (x, w, b) = (ints(&[m, k], 1), ints(&[k, n], 2), ints(&[n], 3));
    let s = |a: &[&str], c: &[&str]| {
        let d = |v: &[&str]| {
            if v.is_empty() {
                Replicate
            } else {
                Shard(v.iter().copied())
            }
        };
        ShardSpec::new([d(a), d(c)])
    };
    let cases = [
        (s(&["a"], &[]), s(&[], &["b"])),
        (s(&["a"], &["b"]), s(&["b"], &[])),
        (s(&[], &["a", "b"]), s(&["a", "b"], &[])),
        (s(&["b"], &["a"]), s(&["a"], &["b"])),
    ];
    let mut checks = 0;
    for (sx, sw) in cases {
        let xs = RankShard::from_global(ctx, &x, &sx)?;
        let ws = RankShard::from_global(ctx, &w, &sw)?;
        let bs = RankShard::from_global(ctx, &b, &ShardSpec::replicated())?;
        let y = spmd(&mm::KERNEL).run_rank::<f32, _>(ctx, &[&xs, &ws])?;
        let want = mm(&x, &w)?;
        let to = ShardSpec::new([Shard(["b"])]);
        let z = spmd(&linear_gelu::KERNEL)
            .to(to.clone())
            .run_rank::<f32, _>(ctx, &[&xs, &ws, &bs])?;
        let want_z = linear_gelu(&x, &w, &b)?;
        let bits = |t: &Tensor<f32>| {
            t.as_slice()
                .expect("a host tensor")
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        if bits(&y.gather(ctx)?) != bits(&want)
            || z.spec() != &to
            || bits(&z.gather(ctx)?) != bits(&want_z)
        {
            return Err(tessera_dist::DistError::ReplicaMismatch(format!(
                "spmd launch with x {sx}, w {sw}: differs from the single-device launch"
            )));
        }
        checks += 2;
    }
    Ok(checks)
}

/// The Megatron transformer forward with this process as one device: Exact blocks equal the
/// single-device run bit for bit on every piece of the output this rank holds, and Standard
/// blocks are within 1e-4 (relative) of the f64 reference, in tensor- and sequence-parallel mode.
/// The mesh is tp=2 × pp=2 × dp=n/4 when 4 divides the process count, else dp=n (tp=pp=1).
fn transformer_checks(world: &MpiWorld) -> tessera_dist::Result<usize> {
    use tessera_dist::megatron::{
        BlockConfig, BlockKind, BlockWeights, TpMode, Transformer, forward_f64,
    };
    let n = world.size();
    let (tp, pp, dp) = if n % 4 == 0 { (2, 2, n / 4) } else { (1, 1, n) };
    let mesh = Mesh::local([("tp", tp), ("pp", pp), ("dp", dp)])?;
    let ctx = world.rank_context(&mesh)?;
    let mut checks = 0;
    for kind in [BlockKind::Exact, BlockKind::Standard] {
        let cfg = BlockConfig {
            seq: 8,
            d_model: 16,
            heads: 4,
            d_head: 4,
            d_ff: 32,
            kind,
        };
        let blocks: Vec<BlockWeights> = (0..pp as u64)
            .map(|i| BlockWeights::random(&cfg, 50 + i))
            .collect();
        for mode in [TpMode::Tensor, TpMode::Sequence] {
            let model = Transformer::new(cfg, blocks.clone())
                .mode(mode)
                .microbatches(2);
            let x = model.random_input(2 * dp * 2, 7);
            let pieces = model.forward_rank(&ctx, &x)?;
            let single = model.forward_single(&x, &tessera::Device::Cpu)?;
            let single = single.as_slice()?;
            let reference = forward_f64(&cfg, &blocks, x.as_slice()?);
            let scale = reference.iter().fold(0f64, |a, v| a.max(v.abs()));
            let d = cfg.d_model;
            let (stage, _) = mesh.index_along(ctx.rank(), &["pp".to_string()])?;
            if (stage + 1 == pp) == pieces.is_empty() {
                return Err(tessera_dist::DistError::Shape(format!(
                    "transformer: rank {} on stage {stage} holds {} output pieces",
                    ctx.rank(),
                    pieces.len()
                )));
            }
            for p in &pieces {
                let at = p.row * d..p.row * d + p.data.len();
                let ok = match kind {
                    BlockKind::Exact => p
                        .data
                        .iter()
                        .zip(&single[at.clone()])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    BlockKind::Standard => p
                        .data
                        .iter()
                        .zip(&reference[at])
                        .all(|(a, r)| (*a as f64 - r).abs() <= 1e-4 * scale),
                };
                if !ok {
                    return Err(tessera_dist::DistError::ReplicaMismatch(format!(
                        "transformer {kind:?} {mode:?}: rows from {} differ from the single-device run",
                        p.row
                    )));
                }
                checks += 1;
            }
        }
    }
    Ok(checks)
}

fn main() {
    let world = MpiWorld::init().expect("MPI init");
    let comm = world.comm();
    let (rank, n) = (world.rank(), world.size());
    let mut passed = 0usize;
    let mut failed = 0usize;
    let mut record = |name: &str, r: tessera_dist::Result<usize>| match r {
        Ok(k) => passed += k,
        Err(e) => {
            failed += 1;
            eprintln!("rank {rank}: FAILED {name}: {e}");
        }
    };
    let algos = [Algorithm::Ring, Algorithm::Tree];
    let ops = [ReduceOp::Sum, ReduceOp::Max];
    record(
        "f32 collectives",
        check_all::<f32, _>(&comm, &[0, 1, 2, 7, 1000, 4099, 1 << 20], &algos, &ops),
    );
    record(
        "i32 collectives",
        check_all::<i32, _>(&comm, &[0, 1, 33, 5000], &algos, &ops),
    );

    // Redistribution round trips on a 2-D mesh over the processes.
    let mesh = if n % 2 == 0 {
        Mesh::local([("a", 2), ("b", n / 2)])
    } else {
        Mesh::local([("a", 1), ("b", n)])
    }
    .unwrap();
    let ctx = world.rank_context(&mesh).unwrap();
    let specs = [
        ShardSpec::replicated(),
        ShardSpec::new([Shard(["a"])]),
        ShardSpec::new([Shard(["a"]), Shard(["b"])]),
        ShardSpec::new([Shard(["b"]), Shard(["a"])]),
        ShardSpec::new([Replicate, Shard(["a", "b"])]),
        ShardSpec::new([Shard(["b", "a"])]),
        ShardSpec::new([Shard(["a"])]).partial(["b"], ReduceOp::Sum),
        ShardSpec::replicated().partial(["a", "b"], ReduceOp::Max),
    ];
    for shape in [vec![5usize, 3], vec![1, 8], vec![0, 4], vec![13, 7]] {
        let numel: usize = shape.iter().product();
        let x = Tensor::from_vec(
            (0..numel).map(|i| ((i * 37) % 101) as f32 - 50.0).collect(),
            &shape,
        )
        .unwrap();
        for a in &specs {
            for b in specs.iter().filter(|s| !s.is_partial()) {
                let r = (|| {
                    let d = RankShard::from_global(&ctx, &x, a)?;
                    let moved = d.redistribute(&ctx, b)?;
                    let want = b.local_shape(&shape, &mesh, rank)?;
                    if moved.local().shape() != want.as_slice() {
                        return Err(tessera_dist::DistError::Shape(format!(
                            "{a} → {b}: local {:?} want {want:?}",
                            moved.local().shape()
                        )));
                    }
                    let g = moved.gather(&ctx)?;
                    if g != x {
                        return Err(tessera_dist::DistError::ReplicaMismatch(format!(
                            "{a} → {b} {shape:?}: gathered tensor differs"
                        )));
                    }
                    Ok(1)
                })();
                record(&format!("redistribute {a} → {b} {shape:?}"), r);
            }
        }
    }

    record("spmd launch", spmd_checks(&ctx));
    record("spmd statistics", stats_checks(&ctx));
    record("megatron transformer", transformer_checks(&world));

    let mut totals = [passed as i32, failed as i32];
    comm.all_reduce(&mut totals, ReduceOp::Sum, Algorithm::Auto)
        .expect("totals");
    if rank == 0 {
        println!("mpi suite on {n} ranks (checks counted on every rank, summed)");
        println!("{} passed, {} failed", totals[0], totals[1]);
    }
    comm.barrier().unwrap();
    drop(world);
    if totals[1] > 0 {
        std::process::exit(1);
    }
}
