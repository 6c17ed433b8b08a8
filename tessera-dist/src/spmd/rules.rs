//! Sharding rules per Graph IR op, as data.
//!
//! Every op is described by **factors** (its loop indices, as in Shardy's op sharding rules):
//! each operand dim and result dim names the factor it iterates over, or none (a broadcast dim
//! of size 1, or a kept reduced dim). A factor sharded over some mesh axes shards every dim that
//! names it. What a sharded factor means depends on its kind:
//!
//! | kind | when sharded | ops |
//! |---|---|---|
//! | parallel | the result dim is split the same way | every non-contracted dim |
//! | reduce(op) | each device reduces its part: the result is `Partial(op)` over those axes (for a reduction, optionally all-reduced at once by the partial-statistics launch) | matmul's `k`, `reduce.sum`/`reduce.max` axes |
//! | normalize | gathered before the launch, or (the cheaper, see [`super::Statistics`]) partial statistics combined by collectives, the result split like the input | softmax / layernorm / rmsnorm's last axis, `reduce.mean` axes |
//!
//! So `matmul`: `S(m)×R → S(m)`, `R×S(n) → S(n)`, `S(k)×S(k) → Partial(sum)`; elementwise ops and
//! broadcasts follow their operands. **Linearity** says which operands may stay partial (a
//! partial sum passes through `add` of two partials, `mul`/`div` by a whole value, `matmul` with
//! a whole operand, `neg`, `transpose`, `broadcast`, `reduce.sum`); anything else needs whole
//! values. An op without a row in [`TABLE`] is an error naming it, so new ops fail loudly until
//! they get a rule.

use crate::{DistError, ReduceOp, Result};
use tessera::ir::graph::{Op, ReduceOp as GraphReduce};

/// How a sharded factor behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Parallel,
    Reduce(ReduceOp),
    Normalize,
}

/// Which operands may stay partial (sum), and with what result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Linear {
    /// No operand may be partial.
    None,
    /// The single operand's partial state (any op) passes through unchanged.
    Structural,
    /// Every operand partial over the same axes with `sum`: the result is too (`add`, `sub`).
    AllSame,
    /// Exactly one of these operands partial (`sum`), the others whole.
    OneOf(&'static [usize]),
}

/// The op families of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    Param,
    Const,
    Elementwise(Linear),
    Broadcast,
    Transpose,
    /// `permute`: each result dim follows the operand dim it came from.
    Permute,
    Reduce,
    Matmul,
    /// Normalizes over one axis (softmax's; layernorm and rmsnorm the last, with their `[C]`
    /// params).
    Normalize,
}

/// Op name → family: the sharding rules of every Graph IR op.
pub(crate) const TABLE: &[(&str, Family)] = &[
    ("param", Family::Param),
    ("const", Family::Const),
    ("add", Family::Elementwise(Linear::AllSame)),
    ("sub", Family::Elementwise(Linear::AllSame)),
    ("mul", Family::Elementwise(Linear::OneOf(&[0, 1]))),
    ("div", Family::Elementwise(Linear::OneOf(&[0]))),
    ("max", Family::Elementwise(Linear::None)),
    ("min", Family::Elementwise(Linear::None)),
    ("neg", Family::Elementwise(Linear::OneOf(&[0]))),
    ("exp", Family::Elementwise(Linear::None)),
    ("log", Family::Elementwise(Linear::None)),
    ("sqrt", Family::Elementwise(Linear::None)),
    ("rsqrt", Family::Elementwise(Linear::None)),
    ("tanh", Family::Elementwise(Linear::None)),
    ("sigmoid", Family::Elementwise(Linear::None)),
    ("relu", Family::Elementwise(Linear::None)),
    ("gelu", Family::Elementwise(Linear::None)),
    ("abs", Family::Elementwise(Linear::None)),
    ("cast", Family::Elementwise(Linear::None)),
    ("broadcast", Family::Broadcast),
    ("transpose", Family::Transpose),
    ("permute", Family::Permute),
    ("reduce.sum", Family::Reduce),
    ("reduce.max", Family::Reduce),
    ("reduce.mean", Family::Reduce),
    ("matmul", Family::Matmul),
    ("softmax", Family::Normalize),
    ("layernorm", Family::Normalize),
    ("rmsnorm", Family::Normalize),
];

/// The family of `op`, or an error naming it.
pub(crate) fn family(op: &Op, kernel: &str) -> Result<Family> {
    let name = op.name();
    TABLE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| DistError::NoShardingRule {
            op: name,
            kernel: kernel.to_string(),
        })
}

/// One op's factors at concrete shapes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rule {
    pub kinds: Vec<Kind>,
    /// Per operand, per dim: its factor.
    pub operands: Vec<Vec<Option<usize>>>,
    /// Per result dim: its factor.
    pub result: Vec<Option<usize>>,
    pub linear: Linear,
}

/// The rule of `op` with operands of `shapes` and a result of `out` (global shapes).
pub(crate) fn rule(op: &Op, family: Family, shapes: &[&[usize]], out: &[usize]) -> Result<Rule> {
    let r = out.len();
    let follow = |shape: &[usize]| -> Vec<Option<usize>> {
        // Trailing dims aligned; a dim of another size (a broadcast 1) has no factor.
        let k = shape.len();
        (0..k)
            .map(|j| {
                let rd = j + r - k;
                (shape[j] == out[rd]).then_some(rd)
            })
            .collect()
    };
    Ok(match family {
        Family::Param | Family::Const => Rule {
            kinds: vec![Kind::Parallel; r],
            operands: vec![],
            result: (0..r).map(Some).collect(),
            linear: Linear::None,
        },
        Family::Elementwise(linear) => Rule {
            kinds: vec![Kind::Parallel; r],
            operands: shapes.iter().map(|s| follow(s)).collect(),
            result: (0..r).map(Some).collect(),
            linear,
        },
        Family::Broadcast => Rule {
            kinds: vec![Kind::Parallel; r],
            operands: shapes.iter().map(|s| follow(s)).collect(),
            result: (0..r).map(Some).collect(),
            linear: Linear::Structural,
        },
        Family::Transpose => {
            let mut result: Vec<Option<usize>> = (0..r).map(Some).collect();
            result.swap(r - 1, r - 2);
            Rule {
                kinds: vec![Kind::Parallel; r],
                operands: vec![(0..r).map(Some).collect()],
                result,
                linear: Linear::Structural,
            }
        }
        Family::Permute => {
            let Op::Permute(perm) = op else {
                unreachable!("the table maps only permute to Family::Permute")
            };
            Rule {
                kinds: vec![Kind::Parallel; r],
                operands: vec![(0..r).map(Some).collect()],
                result: perm.iter().map(|&a| Some(a)).collect(),
                linear: Linear::Structural,
            }
        }
        Family::Reduce => {
            let Op::Reduce {
                op: red,
                axes,
                keepdim,
                ..
            } = op
            else {
                unreachable!("the table maps only reduce ops to Family::Reduce")
            };
            let k = shapes[0].len();
            let kind = match red {
                GraphReduce::Sum => Kind::Reduce(ReduceOp::Sum),
                GraphReduce::Max => Kind::Reduce(ReduceOp::Max),
                GraphReduce::Mean => Kind::Normalize,
            };
            let kinds = (0..k)
                .map(|d| {
                    if axes.contains(&d) {
                        kind
                    } else {
                        Kind::Parallel
                    }
                })
                .collect();
            let result = (0..k)
                .filter_map(|d| match (axes.contains(&d), keepdim) {
                    (false, _) => Some(Some(d)),
                    (true, true) => Some(None),
                    (true, false) => None,
                })
                .collect();
            Rule {
                kinds,
                operands: vec![(0..k).map(Some).collect()],
                result,
                linear: if *red == GraphReduce::Sum {
                    Linear::OneOf(&[0])
                } else {
                    Linear::None
                },
            }
        }
        Family::Matmul => {
            let (ra, rb) = (shapes[0].len(), shapes[1].len());
            // factors: [batch,] m, k, n
            let (b, m, kk, n) = (0, 1, 2, 3);
            let kinds = vec![
                Kind::Parallel,
                Kind::Parallel,
                Kind::Reduce(ReduceOp::Sum),
                Kind::Parallel,
            ];
            let (a, bb, res) = match (ra, rb) {
                (2, 2) => (
                    vec![Some(m), Some(kk)],
                    vec![Some(kk), Some(n)],
                    vec![Some(m), Some(n)],
                ),
                (3, 3) => (
                    vec![Some(b), Some(m), Some(kk)],
                    vec![Some(b), Some(kk), Some(n)],
                    vec![Some(b), Some(m), Some(n)],
                ),
                (3, 2) => (
                    vec![Some(b), Some(m), Some(kk)],
                    vec![Some(kk), Some(n)],
                    vec![Some(b), Some(m), Some(n)],
                ),
                _ => {
                    return Err(DistError::Shape(format!(
                        "matmul of ranks {ra} and {rb} has no sharding rule"
                    )));
                }
            };
            Rule {
                kinds,
                operands: vec![a, bb],
                result: res,
                linear: Linear::OneOf(&[0, 1]),
            }
        }
        Family::Normalize => {
            let mut kinds = vec![Kind::Parallel; r];
            // softmax normalises its axis; layernorm and rmsnorm the last.
            let axis = match op {
                Op::Softmax { axis, .. } => *axis,
                _ => r - 1,
            };
            kinds[axis] = Kind::Normalize;
            let mut operands = vec![(0..r).map(Some).collect::<Vec<_>>()];
            // layernorm / rmsnorm scale and shift: `[C]`, the normalized axis.
            for _ in 1..shapes.len() {
                operands.push(vec![Some(r - 1)]);
            }
            Rule {
                kinds,
                operands,
                result: (0..r).map(Some).collect(),
                linear: Linear::None,
            }
        }
    })
}
