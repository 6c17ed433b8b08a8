//! A Megatron-style transformer forward on 8 local devices (tp=2, pp=2, dp=2): two blocks, one
//! per pipeline stage, 2 microbatches per data-parallel shard; tensor parallel and sequence
//! parallel. Prints each plan (the collectives of one block) and the checks:
//!
//! * Exact blocks (no layernorm, linear attention, ReLU; integer-valued inputs and weights):
//!   the 8-device output equals the single-device output and the f64 reference bit for bit.
//! * Standard blocks (layernorm, softmax attention, GELU): no longer integer-valued, and the
//!   row-parallel sums add partial sums in another order, so the check is the largest error
//!   against the f64 reference, for the 8-device and the single-device run.
//!
//! Run: `cargo run --release --example transformer_tp`

use tessera::{Device, Tensor};
use tessera_dist::Mesh;
use tessera_dist::megatron::{
    BlockConfig, BlockKind, BlockWeights, TpMode, Transformer, forward_f64,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
    let sequences = 8;
    for kind in [BlockKind::Exact, BlockKind::Standard] {
        // Small enough that an Exact block's values (linear attention is cubic in its input)
        // stay integers below 2^24, which the bit-for-bit check needs.
        let cfg = BlockConfig {
            seq: 8,
            d_model: 16,
            heads: 4,
            d_head: 4,
            d_ff: 32,
            kind,
        };
        let blocks = vec![BlockWeights::random(&cfg, 1), BlockWeights::random(&cfg, 2)];
        for mode in [TpMode::Tensor, TpMode::Sequence] {
            let model = Transformer::new(cfg, blocks.clone())
                .mode(mode)
                .microbatches(2);
            let x = model.random_input(sequences, 3);
            println!("== {kind:?} blocks ==");
            println!("{}", model.plan(&mesh, sequences)?);
            let (y, seen) = model.forward_local(&mesh, &x)?;
            let single = model.forward_single(&x, &Device::Cpu)?;
            let reference = forward_f64(&cfg, &blocks, x.as_slice()?);
            println!("  ran: {seen}");
            let err = |t: &Tensor<f32>| -> Result<f64, tessera::Error> {
                Ok(t.as_slice()?
                    .iter()
                    .zip(&reference)
                    .fold(0f64, |a, (g, r)| a.max((*g as f64 - r).abs())))
            };
            let bits = |t: &Tensor<f32>| -> Result<Vec<u32>, tessera::Error> {
                Ok(t.as_slice()?.iter().map(|v| v.to_bits()).collect())
            };
            let same = bits(&y)? == bits(&single)?;
            match kind {
                BlockKind::Exact => {
                    let want: Vec<u32> = reference.iter().map(|&v| (v as f32).to_bits()).collect();
                    let exact = bits(&y)? == want;
                    println!(
                        "  check: 8 devices == single device bit for bit: {same}; == f64 reference: {exact}"
                    );
                    if !(same && exact) {
                        return Err("exact transformer check failed".into());
                    }
                }
                BlockKind::Standard => {
                    let scale = reference.iter().fold(0f64, |a, v| a.max(v.abs()));
                    let (e8, e1) = (err(&y)?, err(&single)?);
                    println!(
                        "  check: max |error| vs f64 (output scale {scale:.2}): 8 devices {e8:.2e}, single device {e1:.2e}; bit-identical to single device: {same}"
                    );
                    if e8 > 1e-4 * scale {
                        return Err("transformer output beyond tolerance".into());
                    }
                }
            }
            println!();
        }
    }
    Ok(())
}
