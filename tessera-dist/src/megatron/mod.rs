//! Megatron-style tensor, sequence, pipeline and data parallelism of a transformer block
//! forward (seeds §7.5 and A.5) on a mesh with axes `tp`, `pp` and `dp`.
//!
//! * **Tensor parallel** (`tp`): attention heads and the MLP's hidden units are split over tp.
//!   The QKV projection and the MLP's first layer are column-parallel (each rank multiplies by
//!   its columns, no communication), the output projection and the MLP's second layer are
//!   row-parallel (each rank's product is a partial sum): one all-reduce over tp per
//!   sub-block, two per block.
//! * **Sequence parallel** ([`TpMode::Sequence`]): between sub-blocks the activations are split
//!   by token over tp, so layernorm and the residual add run on a shard; each all-reduce
//!   becomes a reduce-scatter, and an all-gather runs before each column-parallel layer (same
//!   bytes on the wire, a tp-th of the activation memory and of the layernorm work).
//! * **Pipeline parallel** (`pp`): stage `p` holds block `p`; each data-parallel shard of the
//!   batch is cut into microbatches that flow stage to stage by send/recv, so stage 0 works on
//!   microbatch `i + 1` while stage 1 works on microbatch `i`.
//! * **Data parallel** (`dp`): the batch's sequences are split over dp; weights are replicated.
//!
//! The collectives are the planner's redistribution plans ([`BlockPlans`]: `Partial(sum: tp)`
//! → whole is an all-reduce, → token-split a reduce-scatter; token-split → whole an
//! all-gather), run by [`crate::execute_plan`] through any [`RankContext`] (local threads, MPI,
//! NCCL). Each device runs unchanged `#[tessera::kernel]`s on its shards on its own device.
//!
//! [`BlockKind::Exact`] (no layernorm, linear attention, ReLU) keeps every value of
//! integer-valued inputs an integer, so a run equals the single-device run and the f64
//! reference bit for bit; [`BlockKind::Standard`] (layernorm, softmax attention, GELU) cannot
//! (its row-parallel sums add partial sums of non-integers in another order) and is checked
//! against the f64 reference with a tolerance.
//!
//! ```
//! use tessera_dist::Mesh;
//! use tessera_dist::megatron::{BlockConfig, BlockKind, BlockWeights, TpMode, Transformer};
//! let cfg = BlockConfig { seq: 4, d_model: 8, heads: 2, d_head: 4, d_ff: 16, kind: BlockKind::Exact };
//! let model = Transformer::new(cfg, vec![BlockWeights::random(&cfg, 1), BlockWeights::random(&cfg, 2)])
//!     .mode(TpMode::Sequence)
//!     .microbatches(2);
//! let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
//! let x = model.random_input(8, 3);                  // 8 sequences of 4 tokens
//! let (y, counts) = model.forward_local(&mesh, &x)?;
//! assert_eq!(y, model.forward_single(&x, &tessera::Device::Cpu)?);  // bit for bit
//! println!("{}", model.plan(&mesh, 8)?);
//! # Ok::<(), tessera_dist::DistError>(())
//! ```

mod block;
pub mod kernels;
mod pipeline;
mod reference;
mod weights;

pub use block::BlockPlans;
pub use pipeline::{OutputPiece, TpPlan, Transformer};
pub use reference::forward_f64;
pub use weights::BlockWeights;

#[allow(unused_imports)]
use crate::RankContext;

/// What a block computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// layernorm → softmax attention → residual → layernorm → GELU MLP → residual.
    Standard,
    /// No layernorm, linear attention (`(q·kᵀ)·v`), ReLU MLP: exact on integer inputs.
    Exact,
}

/// Whether activations between sub-blocks are whole on every tp rank or split by token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TpMode {
    /// Megatron tensor parallelism: one all-reduce per sub-block.
    Tensor,
    /// Sequence parallelism: reduce-scatter + all-gather instead of each all-reduce.
    Sequence,
}

/// A block's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockConfig {
    /// Tokens per sequence.
    pub seq: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Width of one head.
    pub d_head: usize,
    /// MLP hidden width.
    pub d_ff: usize,
    /// What the block computes.
    pub kind: BlockKind,
}
