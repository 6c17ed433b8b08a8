//! A transformer block's weights, whole and as one tensor-parallel rank's shard.

use super::BlockConfig;
use crate::{DistError, Result};

/// One block's weights, whole (row-major): attention `wq`, `wk`, `wv` `[d_model, heads·d_head]`
/// and `wo` `[heads·d_head, d_model]`; MLP `w1` `[d_model, d_ff]` and `w2` `[d_ff, d_model]`;
/// the two layernorms' scale and shift `[d_model]`. No biases.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockWeights {
    /// First layernorm's scale `[d_model]`.
    pub ln1_gamma: Vec<f32>,
    /// First layernorm's shift `[d_model]`.
    pub ln1_beta: Vec<f32>,
    /// Query projection `[d_model, heads·d_head]`.
    pub wq: Vec<f32>,
    /// Key projection `[d_model, heads·d_head]`.
    pub wk: Vec<f32>,
    /// Value projection `[d_model, heads·d_head]`.
    pub wv: Vec<f32>,
    /// Output projection `[heads·d_head, d_model]`.
    pub wo: Vec<f32>,
    /// Second layernorm's scale `[d_model]`.
    pub ln2_gamma: Vec<f32>,
    /// Second layernorm's shift `[d_model]`.
    pub ln2_beta: Vec<f32>,
    /// MLP up projection `[d_model, d_ff]`.
    pub w1: Vec<f32>,
    /// MLP down projection `[d_ff, d_model]`.
    pub w2: Vec<f32>,
}

/// A seeded xorshift stream of small integers in `[-r, r]`.
pub(crate) struct Ints(u64);

impl Ints {
    pub(crate) fn new(seed: u64) -> Self {
        Ints(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self, r: i64) -> f32 {
        let s = &mut self.0;
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        ((*s % (2 * r as u64 + 1)) as i64 - r) as f32
    }
    pub(crate) fn vec(&mut self, n: usize, r: i64, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next(r) * scale).collect()
    }
}

impl BlockWeights {
    /// Seeded integer-valued weights (small, so that an [`super::BlockKind::Exact`] block's
    /// every value is an integer well inside f32's exact range; scaled by powers of two for a
    /// Standard block, with attention's `1/√d_head` folded into `wq`).
    ///
    /// ```
    /// use tessera_dist::megatron::{BlockConfig, BlockKind, BlockWeights};
    /// let cfg = BlockConfig { seq: 8, d_model: 16, heads: 4, d_head: 4, d_ff: 32, kind: BlockKind::Exact };
    /// let w = BlockWeights::random(&cfg, 7);
    /// assert_eq!(w.wq.len(), 16 * 16);
    /// assert!(w.w1.iter().all(|v| v.fract() == 0.0));
    /// ```
    pub fn random(cfg: &BlockConfig, seed: u64) -> BlockWeights {
        let mut g = Ints::new(seed);
        let (d, hd, f) = (cfg.d_model, cfg.heads * cfg.d_head, cfg.d_ff);
        let exact = cfg.kind == super::BlockKind::Exact;
        // Exact: ±1 at about one entry in nine (linear attention is cubic in its input, so
        // this keeps two blocks' values and partial sums of [-1, 1] inputs far below 2^24);
        // Standard: a draw of [-1, 1] where a second draw is non-zero.
        let mut sparse = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    let (a, b) = (g.next(1), g.next(4));
                    match (exact, a, b) {
                        (true, _, b) if b != 0.0 => 0.0,
                        (true, a, _) => {
                            if a < 0.0 {
                                -1.0
                            } else {
                                1.0
                            }
                        }
                        (false, _, 0.0) => 0.0,
                        (false, a, _) => a * scale,
                    }
                })
                .collect()
        };
        let s = if exact { 1.0 } else { 0.25 };
        let q_scale = if exact {
            1.0
        } else {
            s / (cfg.d_head as f32).sqrt()
        };
        let (wq, wk, wv, wo) = (
            sparse(d * hd, q_scale),
            sparse(d * hd, s),
            sparse(d * hd, s),
            sparse(hd * d, s),
        );
        let (w1, w2) = (sparse(d * f, s), sparse(f * d, s));
        let mut g = Ints::new(seed ^ 0xABCD);
        BlockWeights {
            ln1_gamma: (0..d).map(|_| 1.0 + g.next(1).abs()).collect(),
            ln1_beta: g.vec(d, 1, 0.5),
            wq,
            wk,
            wv,
            wo,
            ln2_gamma: (0..d).map(|_| 1.0 + g.next(1).abs()).collect(),
            ln2_beta: g.vec(d, 1, 0.5),
            w1,
            w2,
        }
    }

    /// Checks every length against `cfg`; the error names the weight.
    pub fn check(&self, cfg: &BlockConfig) -> Result<()> {
        let (d, hd, f) = (cfg.d_model, cfg.heads * cfg.d_head, cfg.d_ff);
        let want = [
            ("ln1_gamma", &self.ln1_gamma, d),
            ("ln1_beta", &self.ln1_beta, d),
            ("wq", &self.wq, d * hd),
            ("wk", &self.wk, d * hd),
            ("wv", &self.wv, d * hd),
            ("wo", &self.wo, hd * d),
            ("ln2_gamma", &self.ln2_gamma, d),
            ("ln2_beta", &self.ln2_beta, d),
            ("w1", &self.w1, d * f),
            ("w2", &self.w2, f * d),
        ];
        for (name, v, n) in want {
            if v.len() != n {
                return Err(DistError::Shape(format!(
                    "block weight `{name}` has {} elements, the config needs {n}",
                    v.len()
                )));
            }
        }
        Ok(())
    }

    /// Tensor-parallel rank `t` of `tp`'s shard: the columns of its heads of `wq`, `wk`, `wv`
    /// (as one `[d_model, 3·heads/tp·d_head]` matrix: column-parallel), the matching rows of
    /// `wo` (row-parallel), its `d_ff/tp` columns of `w1` and rows of `w2`.
    pub(crate) fn shard(&self, cfg: &BlockConfig, t: usize, tp: usize) -> Result<LocalBlock> {
        self.check(cfg)?;
        if cfg.heads % tp != 0 || cfg.d_ff % tp != 0 {
            return Err(DistError::Shape(format!(
                "tp={tp} must divide heads ({}) and d_ff ({})",
                cfg.heads, cfg.d_ff
            )));
        }
        let (d, hd, f) = (cfg.d_model, cfg.heads * cfg.d_head, cfg.d_ff);
        let hl = hd / tp;
        let fl = f / tp;
        let cols = |m: &[f32], n: usize, c0: usize, w: usize| -> Vec<Vec<f32>> {
            (0..m.len() / n)
                .map(|r| m[r * n + c0..r * n + c0 + w].to_vec())
                .collect()
        };
        let (q, k, v) = (
            cols(&self.wq, hd, t * hl, hl),
            cols(&self.wk, hd, t * hl, hl),
            cols(&self.wv, hd, t * hl, hl),
        );
        let wqkv = (0..d)
            .flat_map(|r| [q[r].clone(), k[r].clone(), v[r].clone()].concat())
            .collect();
        Ok(LocalBlock {
            heads: cfg.heads / tp,
            ln1: (self.ln1_gamma.clone(), self.ln1_beta.clone()),
            wqkv,
            wo: self.wo[t * hl * d..(t + 1) * hl * d].to_vec(),
            ln2: (self.ln2_gamma.clone(), self.ln2_beta.clone()),
            w1: cols(&self.w1, f, t * fl, fl).concat(),
            w2: self.w2[t * fl * d..(t + 1) * fl * d].to_vec(),
            d_ff: fl,
        })
    }
}

/// One tensor-parallel rank's part of a block.
pub(crate) struct LocalBlock {
    /// Heads on this rank.
    pub heads: usize,
    pub ln1: (Vec<f32>, Vec<f32>),
    /// `[d_model, 3·heads·d_head]`: this rank's q, k, v columns side by side.
    pub wqkv: Vec<f32>,
    /// `[heads·d_head, d_model]`.
    pub wo: Vec<f32>,
    pub ln2: (Vec<f32>, Vec<f32>),
    /// `[d_model, d_ff]`.
    pub w1: Vec<f32>,
    /// `[d_ff, d_model]`.
    pub w2: Vec<f32>,
    /// This rank's hidden width.
    pub d_ff: usize,
}
