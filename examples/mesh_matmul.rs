//! Tensor-parallel matmul on an 8-device local mesh (tp=2, pp=2, dp=2).
//!
//! `Y = X · W` with X `[M, K]` sharded rows over dp and K over tp, W `[K, N]` sharded K over tp
//! and N over pp. Each device multiplies its shards with `tessera_kernels::matmul`, giving a
//! partial sum over tp (spec `[S(dp), S(pp)] Partial(sum: tp)`); the planner reduces it with a
//! reduce-scatter, the result is gathered and compared bit for bit with the single-device matmul
//! (inputs are small integers, so every sum is exact in any order).
//!
//! Run: `cargo run --release --example mesh_matmul`

use tessera::Tensor;
use tessera_dist::{DistTensor, Mesh, ReduceOp, Replicate, Shard, ShardSpec};

fn ints(shape: &[usize], seed: usize) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n)
            .map(|i| ((i * 7 + seed * 13) % 9) as f32 - 4.0)
            .collect(),
        shape,
    )
    .unwrap()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
    let (m, k, n) = (37, 64, 50); // uneven on purpose: 37 rows over dp, 50 cols over pp
    let x = ints(&[m, k], 1);
    let w = ints(&[k, n], 2);
    let xd = DistTensor::distribute(&x, ShardSpec::new([Shard(["dp"]), Shard(["tp"])]), &mesh)?;
    let wd = DistTensor::distribute(&w, ShardSpec::new([Shard(["tp"]), Shard(["pp"])]), &mesh)?;

    // One local matmul per device (tessera's CPU kernel), on one thread per device.
    let shards: Vec<Tensor<f32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..mesh.size())
            .map(|r| {
                let (a, b) = (xd.shard(r), wd.shard(r));
                s.spawn(move || tessera_kernels::matmul(a, b))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Result<_, _>>()
    })?;
    let partial = ShardSpec::new([Shard(["dp"]), Shard(["pp"])]).partial(["tp"], ReduceOp::Sum);
    let yd = DistTensor::from_shards(shards, partial, &mesh, &[m, n])?;

    let target = ShardSpec::new([Shard(["dp"]), Shard(["pp", "tp"])]);
    let (y, plan, seen) = yd.redistribute_traced(&target)?;
    println!("{plan}");
    println!("observed collectives: {seen}");
    let y = y.gather()?;

    let want = tessera_kernels::matmul(&x, &w)?;
    let same = y
        .as_slice()?
        .iter()
        .zip(want.as_slice()?)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    println!(
        "Y [{m}x{n}] on 8 devices (tp=2, pp=2, dp=2) == single-device matmul bit for bit: {same}"
    );
    let replicated = DistTensor::distribute(&y, ShardSpec::new([Replicate]), &mesh)?;
    assert_eq!(replicated.gather()?, want);
    assert!(
        same,
        "distributed result differs from the single-device one"
    );
    Ok(())
}
