//! The whole forward: data parallel over `dp`, microbatched pipeline over `pp`, each stage's
//! block tensor/sequence parallel over `tp`.

use super::block::{self, BlockPlans, Collectives};
use super::weights::Ints;
use super::{BlockConfig, BlockWeights, TpMode};
use crate::{
    CollectiveCounts, CollectiveKind, Communicator, DistError, LocalWorld, Mesh, RankContext,
    Result, chunk_range,
};
use std::fmt;
use tessera::{Device, Tensor};

/// A stack of transformer blocks run Megatron-style; see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct Transformer {
    cfg: BlockConfig,
    blocks: Vec<BlockWeights>,
    mode: TpMode,
    microbatches: usize,
}

/// Rows of the output one rank holds: rows `row..row + data.len() / d_model` of `[tokens,
/// d_model]`.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputPiece {
    /// First global row.
    pub row: usize,
    /// The rows, row-major.
    pub data: Vec<f32>,
}

/// Where each rank sits and what it works on.
struct Place {
    t: usize,
    tp: usize,
    p: usize,
    pp: usize,
    /// Sequences of this dp rank, cut into microbatches.
    micro: Vec<std::ops::Range<usize>>,
}

impl Transformer {
    /// Blocks `blocks` (one per pipeline stage), tensor parallel, one microbatch.
    pub fn new(cfg: BlockConfig, blocks: Vec<BlockWeights>) -> Transformer {
        Transformer {
            cfg,
            blocks,
            mode: TpMode::Tensor,
            microbatches: 1,
        }
    }

    /// Tensor or sequence parallel.
    pub fn mode(mut self, mode: TpMode) -> Transformer {
        self.mode = mode;
        self
    }

    /// Microbatches per data-parallel shard.
    pub fn microbatches(mut self, n: usize) -> Transformer {
        self.microbatches = n;
        self
    }

    /// The block sizes.
    pub fn config(&self) -> &BlockConfig {
        &self.cfg
    }

    /// Seeded integer-valued input, in `[-1, 1]` for an Exact block and `[-2, 2]` for a
    /// Standard one: `sequences` sequences, `[sequences·seq, d_model]`.
    pub fn random_input(&self, sequences: usize, seed: u64) -> Tensor<f32> {
        let rows = sequences * self.cfg.seq;
        let r = if self.cfg.kind == super::BlockKind::Exact {
            1
        } else {
            2
        };
        let data = Ints::new(seed).vec(rows * self.cfg.d_model, r, 1.0);
        Tensor::from_vec(data, &[rows, self.cfg.d_model]).expect("shape matches")
    }

    fn sequences(&self, x: &Tensor<f32>) -> Result<usize> {
        let s = x.shape();
        if s.len() != 2 || s[1] != self.cfg.d_model || s[0] % self.cfg.seq != 0 {
            return Err(DistError::Shape(format!(
                "transformer input is {s:?}, expected [sequences·{}, {}]",
                self.cfg.seq, self.cfg.d_model
            )));
        }
        Ok(s[0] / self.cfg.seq)
    }

    fn place(&self, mesh: &Mesh, rank: usize, sequences: usize) -> Result<Place> {
        let along = |a: &str| mesh.index_along(rank, &[a.to_string()]);
        let ((t, tp), (p, pp), (d, dp)) = (along("tp")?, along("pp")?, along("dp")?);
        if pp != self.blocks.len() {
            return Err(DistError::Shape(format!(
                "{} blocks for a pipeline of pp={pp} stages (one block per stage)",
                self.blocks.len()
            )));
        }
        let m = self.microbatches;
        if m == 0 || sequences % (dp * m) != 0 {
            return Err(DistError::Shape(format!(
                "{sequences} sequences do not split into dp={dp} × {m} microbatches"
            )));
        }
        let mine = chunk_range(sequences, dp, d);
        let per = mine.len() / m;
        let micro = (0..m)
            .map(|i| mine.start + i * per..mine.start + (i + 1) * per)
            .collect();
        Ok(Place {
            t,
            tp,
            p,
            pp,
            micro,
        })
    }

    fn tokens_per_micro(&self, mesh: &Mesh, sequences: usize) -> Result<usize> {
        let dp = mesh.axis_size("dp")?;
        Ok(sequences / (dp * self.microbatches.max(1)) * self.cfg.seq)
    }

    /// This rank's part of the forward (SPMD: every rank of the mesh calls it with the same
    /// `x`, `[sequences·seq, d_model]`); returns the output rows the last pipeline stage holds
    /// (none on other stages).
    pub fn forward_rank<X: RankContext>(
        &self,
        ctx: &X,
        x: &Tensor<f32>,
    ) -> Result<Vec<OutputPiece>> {
        let mesh = ctx.mesh();
        let sequences = self.sequences(x)?;
        let pl = self.place(mesh, ctx.rank(), sequences)?;
        let d = self.cfg.d_model;
        let tokens = self.tokens_per_micro(mesh, sequences)?;
        let plans = BlockPlans::new(mesh, tokens, d)?;
        let local = self.blocks[pl.p].shard(&self.cfg, pl.t, pl.tp)?;
        let dev = mesh.devices()[ctx.rank()].clone();
        // Both communicators up front, in the same order on every rank: creating one is
        // collective over the whole mesh under MPI, and a later stage is blocked in recv.
        let pp_comm = ctx.comm(&["pp".to_string()])?;
        ctx.comm(&["tp".to_string()])?;
        let xs = crate::host::slice(x)?;
        // This rank's rows of a microbatch: all of them, or its token shard.
        let rows = |first: usize| match self.mode {
            TpMode::Tensor => first..first + tokens,
            TpMode::Sequence => {
                let r = chunk_range(tokens, pl.tp, pl.t);
                first + r.start..first + r.end
            }
        };
        let coll = Collectives { ctx, plans: &plans };
        let mut out = Vec::new();
        for m in &pl.micro {
            let r = rows(m.start * self.cfg.seq);
            let input = if pl.p == 0 {
                xs[r.start * d..r.end * d].to_vec()
            } else {
                let mut buf = vec![0f32; r.len() * d];
                pp_comm.recv(&mut buf, pl.p - 1)?;
                buf
            };
            let y = block::forward(
                &self.cfg,
                self.mode,
                &local,
                input,
                tokens,
                Some(&coll),
                &dev,
            )?;
            if pl.p + 1 < pl.pp {
                pp_comm.send(&y, pl.p + 1)?;
            } else {
                out.push(OutputPiece {
                    row: r.start,
                    data: y,
                });
            }
        }
        Ok(out)
    }

    /// Runs the forward on the local mesh (one thread per device) and assembles the output from
    /// the last stage's pieces (replicas must agree bit for bit); also returns the collectives
    /// that ran.
    pub fn forward_local(
        &self,
        mesh: &Mesh,
        x: &Tensor<f32>,
    ) -> Result<(Tensor<f32>, CollectiveCounts)> {
        let (pieces, seen) = LocalWorld::run(mesh, |ctx| self.forward_rank(ctx, x))?;
        let y = self.assemble(x.shape(), pieces.iter().flatten())?;
        Ok((y, seen))
    }

    /// The output `[rows, d_model]` from pieces covering every row; a row given twice must be
    /// bit-identical.
    pub fn assemble<'a>(
        &self,
        shape: &[usize],
        pieces: impl IntoIterator<Item = &'a OutputPiece>,
    ) -> Result<Tensor<f32>> {
        let d = self.cfg.d_model;
        let mut out = vec![0f32; shape.iter().product()];
        let mut seen = vec![false; shape[0]];
        for p in pieces {
            for (i, row) in p.data.chunks(d).enumerate() {
                let r = p.row + i;
                let dst = &mut out[r * d..(r + 1) * d];
                if seen[r] {
                    if dst.iter().zip(row).any(|(a, b)| a.to_bits() != b.to_bits()) {
                        return Err(DistError::ReplicaMismatch(format!(
                            "output row {r} differs between tp replicas"
                        )));
                    }
                } else {
                    dst.copy_from_slice(row);
                    seen[r] = true;
                }
            }
        }
        if let Some(r) = seen.iter().position(|s| !s) {
            return Err(DistError::Shape(format!(
                "output row {r} was produced by no rank"
            )));
        }
        crate::host::tensor(out, shape)
    }

    /// The same blocks on one device, one after another on the whole input.
    pub fn forward_single(&self, x: &Tensor<f32>, dev: &Device) -> Result<Tensor<f32>> {
        self.sequences(x)?;
        let mut y = crate::host::to_vec(x)?;
        let tokens = x.shape()[0];
        for w in &self.blocks {
            let whole = w.shard(&self.cfg, 0, 1)?;
            y = block::forward::<crate::LocalRank<'_>>(
                &self.cfg, self.mode, &whole, y, tokens, None, dev,
            )?;
        }
        crate::host::tensor(y, x.shape())
    }

    /// The plan on `mesh` for `sequences` sequences: what each device holds and runs, the
    /// collectives of one block (the planner's plans) and the totals of a forward.
    pub fn plan(&self, mesh: &Mesh, sequences: usize) -> Result<TpPlan> {
        self.place(mesh, 0, sequences)?;
        let tokens = self.tokens_per_micro(mesh, sequences)?;
        let plans = BlockPlans::new(mesh, tokens, self.cfg.d_model)?;
        let (tp, pp, dp) = (
            mesh.axis_size("tp")?,
            mesh.axis_size("pp")?,
            mesh.axis_size("dp")?,
        );
        let per_block: Vec<&crate::Plan> = match self.mode {
            TpMode::Tensor => vec![&plans.all_reduce, &plans.all_reduce],
            TpMode::Sequence => vec![
                &plans.all_gather,
                &plans.reduce_scatter,
                &plans.all_gather,
                &plans.reduce_scatter,
            ],
        };
        // Every (block, dp rank, microbatch) runs the block's plans once in its one tp group; a
        // plan counts a collective once per group of the mesh (pp × dp tp groups).
        let runs = (self.blocks.len() * dp * self.microbatches) as u64;
        let tp_groups = (pp * dp) as u64;
        let mut total = CollectiveCounts::default();
        for p in &per_block {
            let c = p.counts();
            for k in CollectiveKind::ALL {
                total.add(k, c.get(k) / tp_groups * runs);
            }
        }
        if pp > 1 {
            // One message per stage boundary (pp − 1 of them) per microbatch in each of the
            // tp × dp pp groups: every send counts.
            total.add(
                CollectiveKind::SendRecv,
                ((pp - 1) * tp * dp * self.microbatches) as u64,
            );
        }
        let block_seconds = per_block.iter().map(|p| p.seconds()).sum();
        Ok(TpPlan {
            cfg: self.cfg,
            mode: self.mode,
            tp,
            pp,
            dp,
            sequences,
            microbatches: self.microbatches,
            tokens,
            plans,
            block_seconds,
            total,
        })
    }
}

/// The plan of a [`Transformer`] forward on a mesh; `Display` prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct TpPlan {
    cfg: BlockConfig,
    mode: TpMode,
    tp: usize,
    pp: usize,
    dp: usize,
    sequences: usize,
    microbatches: usize,
    tokens: usize,
    /// One block's redistribution plans.
    pub plans: BlockPlans,
    /// Modelled seconds of one block's collectives for one microbatch.
    pub block_seconds: f64,
    /// The collectives of the whole forward, as the local backend counts them (once per group).
    pub total: CollectiveCounts,
}

impl fmt::Display for TpPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.cfg;
        let (tp, d) = (self.tp, c.d_model);
        let seq_par = self.mode == TpMode::Sequence;
        let indent = |p: &crate::Plan| p.to_string().replace('\n', "\n      ");
        writeln!(
            f,
            "transformer forward: {} blocks on tp={} × pp={} × dp={}, {}",
            self.pp,
            tp,
            self.pp,
            self.dp,
            if seq_par {
                "sequence parallel"
            } else {
                "tensor parallel"
            }
        )?;
        writeln!(
            f,
            "  dp: {} sequences of {} tokens, {} per dp rank in {} microbatches of {} tokens",
            self.sequences,
            c.seq,
            self.sequences / self.dp,
            self.microbatches,
            self.tokens
        )?;
        writeln!(
            f,
            "  pp: stage p runs block p; each microbatch's activations [{}, {d}] go stage → stage by send/recv",
            if seq_par {
                self.tokens / tp
            } else {
                self.tokens
            }
        )?;
        writeln!(f, "  one block, one microbatch, in each tp group of {tp}:")?;
        let act = if seq_par { "[S(tp), R]" } else { "[R, R]" };
        let ln = if c.kind == super::BlockKind::Standard {
            "layernorm"
        } else {
            "(no layernorm)"
        };
        writeln!(f, "    {ln} on {act}")?;
        if seq_par {
            writeln!(f, "    all-gather: {}", indent(&self.plans.all_gather))?;
        }
        writeln!(
            f,
            "    x·Wqkv column-parallel ({} of {} heads per rank), attention per head, ·Wo row-parallel → Partial(sum: tp)",
            c.heads / tp,
            c.heads
        )?;
        let red = if seq_par {
            ("reduce-scatter", &self.plans.reduce_scatter)
        } else {
            ("all-reduce", &self.plans.all_reduce)
        };
        writeln!(f, "    {}: {}", red.0, indent(red.1))?;
        writeln!(f, "    + residual, {ln} on {act}")?;
        if seq_par {
            writeln!(f, "    all-gather (as above)")?;
        }
        writeln!(
            f,
            "    act(x·W1) column-parallel ({} of {} hidden per rank), ·W2 row-parallel → Partial(sum: tp)",
            c.d_ff / tp,
            c.d_ff
        )?;
        writeln!(f, "    {} (as above), + residual", red.0)?;
        writeln!(
            f,
            "  per block and microbatch: {}, {:.2} µs modelled",
            if seq_par {
                "2 all-gather + 2 reduce-scatter over tp"
            } else {
                "2 all-reduce over tp"
            },
            self.block_seconds * 1e6
        )?;
        write!(
            f,
            "  whole forward (counted once per group): {}",
            self.total
        )
    }
}
