//! The README's sharded `linear_gelu`: one SPMD launch over a 4-device mesh (dp=2, tp=2),
//! the printed plan, and a bit-for-bit check against the single-device launch.
//!
//! Run: `cargo run --release --example sharded_linear_gelu`

use tessera::prelude::*;
use tessera_dist::{DistTensor, Mesh, Replicate, Shard, ShardSpec, spmd};

#[tessera::kernel]
fn linear_gelu(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (x, w, b) = (
        Tensor::<bf16>::randn(&[256, 512], 1),
        Tensor::<bf16>::randn(&[512, 1024], 2),
        Tensor::<f32>::randn(&[1024], 3),
    );
    // README section "Running a kernel over a mesh" starts here.
    let mesh = Mesh::local([("dp", 2), ("tp", 2)])?;
    let x = DistTensor::distribute(&x, ShardSpec::new([Shard(["dp"])]), &mesh)?; // rows over dp
    let w = DistTensor::distribute(&w, ShardSpec::new([Replicate, Shard(["tp"])]), &mesh)?; // cols over tp
    let b = DistTensor::distribute(&b, ShardSpec::replicated(), &mesh)?;
    let launch = spmd(&linear_gelu::KERNEL).to(ShardSpec::new([Shard(["dp"])]));
    println!("{}", launch.plan(&[&x, &w, &b])?);
    let y = launch.run::<f32>(&[&x, &w, &b])?; // one call: 4 devices at once
    // README section ends here.

    let want = linear_gelu(&x.gather()?, &w.gather()?, &b.gather()?)?;
    assert_eq!(
        y.gather()?,
        want,
        "distributed result differs from the single-device one"
    );
    println!("y {:?} {} == single-device launch", y.shape(), y.spec());
    Ok(())
}
