//! Megatron-style tensor / sequence / pipeline / data parallelism of a transformer block forward
//! on an 8-device local mesh (tp=2, pp=2, dp=2), against the single-device run and an f64
//! reference. Exact blocks (integer-valued everywhere) must match bit for bit; Standard blocks
//! (layernorm, softmax, GELU: no longer integers, and the row-parallel sums add partial sums in
//! another order) match the f64 reference within a tolerance. Each body runs on cpu and sim.

use tessera::{Device, Tensor};
use tessera_dist::megatron::{
    BlockConfig, BlockKind, BlockWeights, TpMode, Transformer, forward_f64,
};
use tessera_dist::{CollectiveKind, Mesh};

fn mesh(dev: &Device) -> Mesh {
    Mesh::new([("tp", 2), ("pp", 2), ("dp", 2)], vec![dev.clone(); 8]).unwrap()
}

fn cfg(kind: BlockKind) -> BlockConfig {
    BlockConfig {
        seq: 8,
        d_model: 16,
        heads: 4,
        d_head: 4,
        d_ff: 32,
        kind,
    }
}

fn model(kind: BlockKind, mode: TpMode, seed: u64) -> Transformer {
    let c = cfg(kind);
    Transformer::new(
        c,
        vec![
            BlockWeights::random(&c, seed),
            BlockWeights::random(&c, seed + 1),
        ],
    )
    .mode(mode)
    .microbatches(2)
}

fn bits(t: &Tensor<f32>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Exact blocks: the 8-device run equals the single-device run and the f64 reference bit for
/// bit, in both modes, with exactly the planned collectives (all-reduce for tensor parallel,
/// reduce-scatter + all-gather for sequence parallel, send/recv between the stages).
fn exact_block_matches_single_device(dev: &Device) {
    let mesh = mesh(dev);
    for (mode, seed) in [(TpMode::Tensor, 11), (TpMode::Sequence, 21)] {
        let m = model(BlockKind::Exact, mode, seed);
        let x = m.random_input(4, seed + 5);
        let (y, seen) = m.forward_local(&mesh, &x).unwrap();
        let single = m.forward_single(&x, dev).unwrap();
        let reference = forward_f64(
            m.config(),
            &[
                BlockWeights::random(m.config(), seed),
                BlockWeights::random(m.config(), seed + 1),
            ],
            x.as_slice().unwrap(),
        );
        // The premise: every value is an integer f32 holds exactly, and not all are zero.
        assert!(
            reference
                .iter()
                .all(|v| v.fract() == 0.0 && v.abs() < (1 << 24) as f64)
        );
        assert!(reference.iter().filter(|v| **v != 0.0).count() > reference.len() / 2);
        let want: Vec<u32> = reference.iter().map(|&v| (v as f32).to_bits()).collect();
        assert_eq!(bits(&single), want, "{mode:?}: single device vs f64");
        assert_eq!(bits(&y), want, "{mode:?}: tp×pp×dp vs f64");
        let plan = m.plan(&mesh, 4).unwrap();
        assert_eq!(seen, plan.total, "{mode:?}\n{plan}");
        let (ar, rs, ag) = (
            seen.get(CollectiveKind::AllReduce),
            seen.get(CollectiveKind::ReduceScatter),
            seen.get(CollectiveKind::AllGather),
        );
        // 2 blocks × 2 dp ranks × 2 microbatches, two reductions each.
        match mode {
            TpMode::Tensor => assert_eq!((ar, rs, ag), (16, 0, 0), "{plan}"),
            TpMode::Sequence => assert_eq!((ar, rs, ag), (0, 16, 16), "{plan}"),
        }
        assert_eq!(seen.get(CollectiveKind::SendRecv), 8, "{plan}");
    }
}

/// Standard blocks (layernorm → softmax attention → residual → layernorm → GELU MLP →
/// residual): the 8-device run and the single-device run both within 1e-4 (relative to the
/// output's largest magnitude) of the f64 reference, in both modes.
fn standard_block_matches_reference(dev: &Device) {
    let mesh = mesh(dev);
    for (mode, seed) in [(TpMode::Tensor, 31), (TpMode::Sequence, 41)] {
        let m = model(BlockKind::Standard, mode, seed);
        let x = m.random_input(4, seed + 5);
        let (y, _) = m.forward_local(&mesh, &x).unwrap();
        let single = m.forward_single(&x, dev).unwrap();
        let reference = forward_f64(
            m.config(),
            &[
                BlockWeights::random(m.config(), seed),
                BlockWeights::random(m.config(), seed + 1),
            ],
            x.as_slice().unwrap(),
        );
        let scale = reference.iter().fold(0f64, |a, v| a.max(v.abs()));
        assert!(scale > 1.0);
        for (name, t) in [("tp×pp×dp", &y), ("single", &single)] {
            let err = t
                .to_vec()
                .unwrap()
                .iter()
                .zip(&reference)
                .fold(0f64, |a, (g, r)| a.max((*g as f64 - r).abs()));
            assert!(
                err <= 1e-4 * scale,
                "{mode:?} {name}: max error {err} (scale {scale})"
            );
        }
    }
}

/// A pipeline depth other than the block count, or a batch that does not split into dp ×
/// microbatches, is an error naming the sizes.
#[test]
fn bad_layouts_are_errors() {
    let mesh = mesh(&Device::Cpu);
    let c = cfg(BlockKind::Exact);
    let one = Transformer::new(c, vec![BlockWeights::random(&c, 1)]);
    let x = one.random_input(4, 2);
    let e = one.forward_local(&mesh, &x).unwrap_err();
    assert!(e.to_string().contains("pp=2"), "{e}");
    let m = model(BlockKind::Exact, TpMode::Tensor, 1).microbatches(3);
    let e = m.forward_local(&mesh, &x).unwrap_err();
    assert!(e.to_string().contains("3 microbatches"), "{e}");
    let bad = Tensor::from_vec(vec![0f32; 5 * 16], &[5, 16]).unwrap();
    let e = m.forward_local(&mesh, &bad).unwrap_err();
    assert!(e.to_string().contains("[5, 16]"), "{e}");
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

backend_tests!(
    exact_block_matches_single_device,
    standard_block_matches_reference
);
