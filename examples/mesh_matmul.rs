//! A `#[tessera::kernel]` run over an 8-device local mesh (tp=2, pp=2, dp=2) in one call.
//!
//! `Y = X · W` with X `[M, K]` split rows over dp and K over tp, W `[K, N]` split K over tp and
//! N over pp. The SPMD launch propagates the specs through the kernel's Graph IR: the split
//! contraction makes each device's local matmul a partial sum over tp (`[S(dp), S(pp)]
//! Partial(sum: tp)`); asked for `[S(dp), S(pp, tp)]`, the planner reduces it with the cheapest
//! collective it finds. The plan and the collectives that actually ran are printed, and the
//! result is compared bit for bit with the single-device launch (small integer inputs, so every
//! sum is exact in any order).
//!
//! Run: `cargo run --release --example mesh_matmul`

use tessera::Tensor;
use tessera_dist::{DistTensor, Mesh, Shard, ShardSpec, spmd};

#[tessera::kernel]
fn matmul(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

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

    let target = ShardSpec::new([Shard(["dp"]), Shard(["pp", "tp"])]);
    let (y, plan, seen) = spmd(&matmul::KERNEL)
        .to(target)
        .run_traced::<f32>(&[&xd, &wd])?;
    println!("{plan}");
    println!("observed collectives: {seen}");
    assert_eq!(
        plan.counts(),
        seen,
        "the plan and the collectives that ran differ"
    );

    let y = y.gather()?;
    let want = matmul(&x, &w)?;
    let same = y
        .as_slice()?
        .iter()
        .zip(want.as_slice()?)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    println!(
        "Y [{m}x{n}] on 8 devices (tp=2, pp=2, dp=2) == single-device launch bit for bit: {same}"
    );
    assert!(
        same,
        "distributed result differs from the single-device one"
    );
    Ok(())
}
