//! Statistics over a split axis: a layernorm whose model dim is split over tp runs either from
//! partial statistics (each device's count, mean and M2, all-gathered over tp and combined with
//! Chan's formula; the result stays split) or by gathering the dim first. The planner's choice
//! and both modelled costs are printed for a narrow and a wide model dim (partial statistics
//! wins both on the local mesh: gathering first all-gathers x, γ and β, three collectives against
//! two of per-row statistics, and each device then normalises whole rows); both launches, forced
//! in turn, are checked against the single-device launch.
//!
//! Run: `cargo run --release --example sharded_layernorm`

use tessera::prelude::*;
use tessera_dist::{DistTensor, Mesh, Shard, ShardSpec, Statistics, spmd};

#[tessera::kernel]
fn ln(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    layernorm(x, g, b, 1e-5)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mesh = Mesh::local([("dp", 2), ("tp", 2)])?;
    for c in [64usize, 16384] {
        let (x, g, b) = (
            Tensor::<f32>::randn(&[64, c], 1),
            Tensor::<f32>::randn(&[c], 2),
            Tensor::<f32>::randn(&[c], 3),
        );
        let single = ln(&x, &g, &b)?.to_vec()?;
        let xd = DistTensor::distribute(&x, ShardSpec::new([Shard(["dp"]), Shard(["tp"])]), &mesh)?;
        let gd = DistTensor::distribute(&g, ShardSpec::new([Shard(["tp"])]), &mesh)?;
        let bd = DistTensor::distribute(&b, ShardSpec::new([Shard(["tp"])]), &mesh)?;
        let launch = spmd(&ln::KERNEL);
        println!("{}\n", launch.plan(&[&xd, &gd, &bd])?);
        for how in [Statistics::Partial, Statistics::GatherFirst] {
            let y = launch
                .clone()
                .statistics(how)
                .run::<f32>(&[&xd, &gd, &bd])?;
            let got = y.gather()?.to_vec()?;
            let worst = got
                .iter()
                .zip(&single)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            println!(
                "C = {c}, {how}: result {}, max |Δ| vs single device {worst:.2e}",
                y.spec()
            );
            assert!(worst < 1e-4);
        }
        println!();
    }
    Ok(())
}
