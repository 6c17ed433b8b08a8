//! One transformer block on one tensor-parallel rank (Megatron-LM's layout):
//!
//! ```text
//! x ─ layernorm ─[all-gather]─ x·Wqkv (column-parallel: this rank's heads) ─ attention per head
//!   ─ ·Wo (row-parallel: a partial sum over tp) ─ all-reduce | reduce-scatter ─ + x
//!   ─ layernorm ─[all-gather]─ act(x·W1) (column-parallel) ─ ·W2 (row-parallel)
//!   ─ all-reduce | reduce-scatter ─ + x
//! ```
//!
//! Tensor parallel: activations are whole on every tp rank; each sub-block ends in one
//! all-reduce. Sequence parallel: activations are split by token over tp between sub-blocks
//! (layernorm and the residual run on the shard); each sub-block starts with an all-gather and
//! ends with a reduce-scatter. The collectives are redistribution plans from the planner
//! ([`BlockPlans`]) run by [`crate::execute_plan`].

use super::weights::LocalBlock;
use super::{BlockConfig, BlockKind, TpMode, kernels};
use crate::{
    Mesh, Plan, RankContext, ReduceOp, Replicate, Result, Shard, ShardSpec, plan_redistribute,
};
use tessera::{Device, Tensor};

/// The redistributions of one block's activations `[tokens, d_model]` over tp.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockPlans {
    /// Partial(sum: tp) → whole (tensor parallel).
    pub all_reduce: Plan,
    /// Partial(sum: tp) → tokens split over tp (sequence parallel).
    pub reduce_scatter: Plan,
    /// Tokens split over tp → whole (sequence parallel).
    pub all_gather: Plan,
}

impl BlockPlans {
    /// The cheapest plans on `mesh` for `tokens × d_model` f32 activations.
    pub fn new(mesh: &Mesh, tokens: usize, d_model: usize) -> Result<BlockPlans> {
        let shape = [tokens, d_model];
        let partial = ShardSpec::new([Replicate, Replicate]).partial(["tp"], ReduceOp::Sum);
        let split = ShardSpec::new([Shard(["tp"]), Replicate]);
        let whole = ShardSpec::new([Replicate, Replicate]);
        Ok(BlockPlans {
            all_reduce: plan_redistribute(mesh, &shape, 4, &partial, &whole)?,
            reduce_scatter: plan_redistribute(mesh, &shape, 4, &partial, &split)?,
            all_gather: plan_redistribute(mesh, &shape, 4, &split, &whole)?,
        })
    }
}

/// Where a block's collectives go: a rank context and the plans, or none (a single device).
pub(crate) struct Collectives<'a, X> {
    pub ctx: &'a X,
    pub plans: &'a BlockPlans,
}

fn tensor(data: Vec<f32>, shape: &[usize], dev: &Device) -> Result<Tensor<f32>> {
    crate::host::on(crate::host::tensor(data, shape)?, dev)
}

fn host(t: &Tensor<f32>) -> Result<Vec<f32>> {
    crate::host::to_vec(t)
}

/// Columns `c0..c0+w` of rows `r0..r0+h` of a row-major `[_, n]` matrix.
fn block_of(m: &[f32], n: usize, r0: usize, h: usize, c0: usize, w: usize) -> Vec<f32> {
    (r0..r0 + h)
        .flat_map(|r| m[r * n + c0..r * n + c0 + w].iter().copied())
        .collect()
}

/// One block on this rank. `x` is `[tokens, d_model]` (tensor parallel) or this rank's token
/// shard of it (sequence parallel); `tokens` is a whole number of sequences. The result has
/// `x`'s shape. Without collectives (`None`), `w` must be the whole block (tp = 1).
pub(crate) fn forward<X: RankContext>(
    cfg: &BlockConfig,
    mode: TpMode,
    w: &LocalBlock,
    x: Vec<f32>,
    tokens: usize,
    comm: Option<&Collectives<'_, X>>,
    dev: &Device,
) -> Result<Vec<f32>> {
    let d = cfg.d_model;
    let local_rows = x.len() / d;
    let seq_split = mode == TpMode::Sequence && comm.is_some();
    let norm = |x: &[f32], (g, b): &(Vec<f32>, Vec<f32>)| -> Result<Vec<f32>> {
        match cfg.kind {
            BlockKind::Standard => host(&kernels::layer_norm(
                &tensor(x.to_vec(), &[local_rows, d], dev)?,
                &tensor(g.clone(), &[d], dev)?,
                &tensor(b.clone(), &[d], dev)?,
            )?),
            BlockKind::Exact => Ok(x.to_vec()),
        }
    };
    // Before a column-parallel layer: the whole activation on every tp rank.
    let gather = |h: Vec<f32>| -> Result<Vec<f32>> {
        match comm {
            Some(c) if seq_split => {
                let t = crate::host::tensor(h, &[local_rows, d])?;
                host(&crate::execute_plan(c.ctx, &c.plans.all_gather, t)?)
            }
            _ => Ok(h),
        }
    };
    // After a row-parallel layer: reduce the partial sums over tp.
    let reduce = |p: Vec<f32>| -> Result<Vec<f32>> {
        match comm {
            Some(c) => {
                let plan = if seq_split {
                    &c.plans.reduce_scatter
                } else {
                    &c.plans.all_reduce
                };
                let t = crate::host::tensor(p, &[tokens, d])?;
                host(&crate::execute_plan(c.ctx, plan, t)?)
            }
            None => Ok(p),
        }
    };
    let residual = |x: &[f32], y: Vec<f32>| -> Result<Vec<f32>> {
        host(&kernels::residual(
            &tensor(x.to_vec(), &[local_rows, d], dev)?,
            &tensor(y, &[local_rows, d], dev)?,
        )?)
    };

    // Attention: column-parallel QKV (this rank's heads), attention per (sequence, head),
    // row-parallel output projection.
    let h = gather(norm(&x, &w.ln1)?)?;
    let (hl, dh, s) = (w.heads, cfg.d_head, cfg.seq);
    let qkv_w = 3 * hl * dh;
    let qkv = host(&kernels::linear(
        &tensor(h, &[tokens, d], dev)?,
        &tensor(w.wqkv.clone(), &[d, qkv_w], dev)?,
    )?)?;
    let mut o = vec![0f32; tokens * hl * dh];
    for seq in 0..tokens / s {
        for head in 0..hl {
            let part = |which: usize| {
                tensor(
                    block_of(&qkv, qkv_w, seq * s, s, (which * hl + head) * dh, dh),
                    &[s, dh],
                    dev,
                )
            };
            let (q, k, v) = (part(0)?, part(1)?, part(2)?);
            let a = match cfg.kind {
                BlockKind::Standard => kernels::attention(&q, &k, &v)?,
                BlockKind::Exact => kernels::linear_attention(&q, &k, &v)?,
            };
            let a = host(&a)?;
            for r in 0..s {
                let dst = (seq * s + r) * hl * dh + head * dh;
                o[dst..dst + dh].copy_from_slice(&a[r * dh..(r + 1) * dh]);
            }
        }
    }
    let partial = host(&kernels::linear(
        &tensor(o, &[tokens, hl * dh], dev)?,
        &tensor(w.wo.clone(), &[hl * dh, d], dev)?,
    )?)?;
    let x = residual(&x, reduce(partial)?)?;

    // MLP: column-parallel W1 with the activation, row-parallel W2.
    let h = tensor(gather(norm(&x, &w.ln2)?)?, &[tokens, d], dev)?;
    let w1 = tensor(w.w1.clone(), &[d, w.d_ff], dev)?;
    let u = match cfg.kind {
        BlockKind::Standard => kernels::linear_gelu(&h, &w1)?,
        BlockKind::Exact => kernels::linear_relu(&h, &w1)?,
    };
    let partial = host(&kernels::linear(
        &u,
        &tensor(w.w2.clone(), &[w.d_ff, d], dev)?,
    )?)?;
    residual(&x, reduce(partial)?)
}
