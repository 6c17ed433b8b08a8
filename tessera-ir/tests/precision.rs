//! Precision modes (seeds table A.3) map onto input dtype, accumulation dtype, loss scaling
//! and numerics policy exactly as the table says, and a graph compiled under a mode shows its
//! casts and accumulator in Graph IR text.

use tessera_ir::graph::{parse, verify, with_precision};
use tessera_ir::{DType, LossScaling, NumericsPolicy, Precision};

/// Table A.3, row by row: mode, input compute (for f32 and for f16 operands; `None` = as
/// written), accumulation, loss scaling, policy.
#[test]
fn modes_map_as_table_a3_says() {
    use DType::*;
    let table = [
        (
            Precision::Safe,
            Some(F32),
            Some(F32),
            F32,
            LossScaling::None,
            NumericsPolicy::Fast,
        ),
        (
            Precision::Standard,
            Some(BF16),
            Some(F16),
            F32,
            LossScaling::Dynamic,
            NumericsPolicy::Fast,
        ),
        (
            Precision::Aggressive,
            Some(F8E4M3),
            Some(F8E4M3),
            BF16,
            LossScaling::Dynamic,
            NumericsPolicy::Fast,
        ),
        (
            Precision::Deterministic,
            None,
            None,
            F32,
            LossScaling::None,
            NumericsPolicy::Deterministic,
        ),
    ];
    for (mode, from_f32, from_f16, acc, scaling, policy) in table {
        let want = |from: DType, to: Option<DType>| to.filter(|t| *t != from);
        assert_eq!(mode.input(F32), want(F32, from_f32), "{mode} input of f32");
        assert_eq!(mode.input(F16), want(F16, from_f16), "{mode} input of f16");
        assert_eq!(mode.input(I32), None, "{mode} leaves integers alone");
        assert_eq!(mode.accumulator(), acc, "{mode} accumulation");
        assert_eq!(mode.loss_scaling(), scaling, "{mode} loss scaling");
        assert_eq!(mode.policy(), policy, "{mode} policy");
        assert_eq!(Precision::parse(mode.name()), Some(mode));
    }
}

const SRC: &str = "graph @blk(%x: f32[M, K], %w: f32[K, N]) -> f32[M, N] {
  %2 = matmul %x, %w : f32[M, N]
  %3 = softmax %2 : f32[M, N]
  return %3
}";

/// The Graph IR text of `SRC` under `mode`, after a print/parse round trip.
fn text(mode: Precision) -> String {
    let g = with_precision(&parse(SRC).unwrap(), mode).unwrap();
    verify(&g).unwrap();
    let s = g.to_string();
    assert_eq!(parse(&s).unwrap().to_string(), s, "round trip under {mode}");
    s
}

#[test]
fn casts_and_accumulators_show_in_graph_ir() {
    let safe = text(Precision::Safe);
    assert!(!safe.contains("cast"), "{safe}");
    assert!(
        safe.contains("matmul %x, %w acc=f32 policy=fast : f32[M, N]"),
        "{safe}"
    );

    let std = text(Precision::Standard);
    for needle in [
        "= cast %x : bf16[M, K]",
        "= cast %w : bf16[K, N]",
        "acc=f32 policy=fast : f32[M, N]",
        "softmax",
    ] {
        assert!(
            std.contains(needle),
            "standard: `{needle}` missing in\n{std}"
        );
    }

    let aggr = text(Precision::Aggressive);
    for needle in [
        ": f8e4m3[M, K]",
        ": f8e4m3[K, N]",
        "abs",
        "reduce.max",
        "448",
        "acc=bf16",
        ": bf16[M, N]",
        "div",
    ] {
        assert!(
            aggr.contains(needle),
            "aggressive: `{needle}` missing in\n{aggr}"
        );
    }
    // The bf16 product is widened, unscaled by `s_x·s_w` and feeds the softmax as the f32
    // the graph declared.
    let sm = aggr.lines().find(|l| l.contains("softmax")).unwrap();
    assert!(sm.ends_with(": f32[M, N]"), "{aggr}");
    assert!(
        aggr.lines()
            .any(|l| l.contains("= cast %") && l.ends_with(": f32[M, N]")),
        "{aggr}"
    );

    let det = text(Precision::Deterministic);
    assert!(!det.contains("cast"), "{det}");
    assert!(det.contains("acc=f32 policy=deterministic"), "{det}");
    assert!(
        det.contains("softmax %") && det.contains("policy=deterministic : f32[M, N]"),
        "{det}"
    );
    assert!(!det.contains("policy=fast"), "{det}");
}

/// f16 operands stay f16 under Standard (the table's "BF16/FP16").
#[test]
fn standard_keeps_f16() {
    let src = "graph @h(%x: f16[M, K], %w: f16[K, N]) -> f32[M, N] {\n  %2 = matmul %x, %w : f32[M, N]\n  return %2\n}";
    let s = with_precision(&parse(src).unwrap(), Precision::Standard)
        .unwrap()
        .to_string();
    assert!(!s.contains("cast"), "{s}");
    assert!(s.contains("acc=f32"), "{s}");
}
