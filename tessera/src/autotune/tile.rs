//! The tuner behind `TileDef::launch_tuned`: knob assignments of a `tile!` kernel.

use super::engine::{self, Job, Runner};
use super::{Mode, TileSpace, borrowed, generation, lookup, store, try_mode};
use crate::Result;
use crate::backend::{Buffer, cpu::Program};
use std::sync::{Arc, Mutex};
use tessera_ir::DType;

/// A full knob assignment: every knob's name and value.
pub(crate) type Knobs = Vec<(String, i64)>;

/// Compiles the program for knob overrides (defaults for the rest).
type ProgramFor<'a> = &'a dyn Fn(&[(&str, i64)]) -> Result<Arc<Program>>;

/// A memoised decision: (generation, shape, [`space_key`]) → knobs.
type Decision = (u64, Vec<u64>, u64, Knobs);

/// Per-definition memo of decisions.
pub(crate) struct TileMemo(Mutex<Vec<Decision>>);

impl TileMemo {
    pub const fn new() -> Self {
        TileMemo(Mutex::new(Vec::new()))
    }
}

/// `BM=64,BN=64,BK=32`.
fn text(k: &[(String, i64)]) -> String {
    k.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse(t: &str) -> Option<Vec<(String, i64)>> {
    t.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A hash of the defaults and the space's points (names and values, in order): what the
/// candidate list is built from, without building it, so a memoised launch allocates no
/// candidate names. A knob's name is taken eight bytes at a time, and each point is hashed
/// on its own chain seeded by its index, the points' hashes summed: a launch hashes every
/// point of the space, and one byte-at-a-time chain through the depthwise 64-point space
/// measured ≈ 2 µs per launch.
fn space_key(defaults: &[(&'static str, i64)], space: &TileSpace) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    fn step(h: u64, w: u64) -> u64 {
        (h ^ w).wrapping_mul(K)
    }
    // The final mix of a chain (its high bits into the low ones).
    fn fmix(h: u64) -> u64 {
        let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
    fn knob(mut h: u64, n: &str, v: i64) -> u64 {
        let b = n.as_bytes();
        let word = |c: &[u8]| c.iter().rev().fold(0u64, |w, &x| (w << 8) | x as u64);
        if b.len() < 8 {
            // The name's bytes and its length in the top byte: one word per name.
            h = step(h, word(b) | (b.len() as u64) << 56);
        } else {
            for c in b.chunks(8) {
                h = step(h, word(c));
            }
            h = step(h, b.len() as u64);
        }
        step(h, v as u64)
    }
    let point = |seed: u64, p: &[(String, i64)]| {
        let h = p.iter().fold(seed, |h, (n, v)| knob(h, n, *v));
        fmix(step(h, p.len() as u64))
    };
    let d = defaults
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, (n, v)| knob(h, n, *v));
    space
        .points
        .iter()
        .enumerate()
        .fold(fmix(step(d, space.points.len() as u64)), |acc, (i, p)| {
            acc.wrapping_add(point(i as u64 + 1, p))
        })
}

/// Chooses the knobs of a `tile!` launch on `bufs` (its real arguments; outputs writable):
/// memo → cache → nearest shape → tuning (in `full` mode). Returns the full assignment.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tune_tile(
    memo: &TileMemo,
    name: &str,
    sig: u64,
    defaults: &[(&'static str, i64)],
    space: &TileSpace,
    bufs: &[Buffer],
    program_for: ProgramFor<'_>,
) -> Result<Knobs> {
    let full = |over: &[(String, i64)]| -> Vec<(String, i64)> {
        defaults
            .iter()
            .map(|(n, d)| {
                let v = over.iter().find(|k| k.0 == *n).map_or(*d, |k| k.1);
                (n.to_string(), v)
            })
            .collect()
    };
    let m = try_mode()?;
    if m == Mode::Off {
        return Ok(full(&[]));
    }
    let space_hash = space_key(defaults, space);
    let mut shape: Vec<u64> = Vec::with_capacity(bufs.iter().map(|b| b.dims().len()).sum());
    shape.extend(bufs.iter().flat_map(|b| b.dims().iter().map(|&d| d as u64)));
    let generation_now = generation(m);
    {
        let d = memo.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = d
            .iter()
            .find(|x| x.0 == generation_now && x.1 == shape && x.2 == space_hash)
        {
            return Ok(x.3.clone());
        }
    }
    let default = full(&[]);
    let mut cands = vec![default.clone()];
    for p in &space.points {
        let f = full(p);
        if !cands.contains(&f) {
            cands.push(f);
        }
    }
    let names: Vec<String> = cands.iter().map(|c| text(c)).collect();
    let dtypes: Vec<&str> = bufs.iter().map(|b| b.dtype.name()).collect();
    let family = format!(
        "{name}#{sig:016x}/{}/t{}",
        dtypes.join(","),
        rayon::current_num_threads()
    );
    let key = format!(
        "{family}/{}",
        shape
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("x")
    );
    let (hit, near) = lookup(&super::arch_id(), &key, &family, &shape);
    let complete = hit
        .as_ref()
        .is_some_and(|e| names.iter().all(|n| e.record(n).is_some()));
    let chosen = match (&hit, m) {
        (Some(e), _) if complete || m == Mode::Cached => e.best.as_deref().and_then(parse),
        (None, Mode::Cached) => borrowed(&near).and_then(parse),
        _ => {
            let shapes: Vec<Vec<usize>> = bufs.iter().map(|b| b.dims().to_vec()).collect();
            let job = Job {
                kernel: name.to_string(),
                family,
                shape: shape.clone(),
                names: names.clone(),
                points: cands.iter().map(|c| space.point(c)).collect(),
                arch: super::cost_arch(),
                problem: space.problem.map(|f| f(&shapes)),
                strategy: space.strategy,
                cost_model: super::CostModel::Roofline,
                max_trials: space.max_trials,
                trial: space.trial,
                predicted: None,
                prior: near.and_then(|e| e.best),
                known: hit,
            };
            let mut runner = TileRunner::new(&cands, bufs, program_for);
            let out = engine::tune(job, &mut runner)?;
            store(&super::arch_id(), key, out.entry.clone());
            Some(cands[out.best].clone())
        }
    };
    let chosen = chosen.map(|c| full(&c)).unwrap_or(default);
    memo.0.lock().unwrap_or_else(|e| e.into_inner()).push((
        generation_now,
        shape,
        space_hash,
        chosen.clone(),
    ));
    Ok(chosen)
}

struct TileRunner<'a> {
    cands: &'a [Knobs],
    program_for: ProgramFor<'a>,
    bufs: Vec<Buffer>,
    /// Scratch memory of each writable argument: (argument index, memory, dtype, bytes).
    scratch: Vec<(usize, Vec<u64>, DType, usize)>,
}

impl<'a> TileRunner<'a> {
    fn new(cands: &'a [Knobs], bufs: &[Buffer], program_for: ProgramFor<'a>) -> Self {
        let mut bufs = bufs.to_vec();
        let mut scratch = Vec::new();
        for (j, b) in bufs.iter_mut().enumerate() {
            if b.writable {
                let mut mem = vec![0u64; b.len.div_ceil(8)];
                b.ptr = mem.as_mut_ptr() as *mut u8;
                scratch.push((j, mem, b.dtype, b.len));
            }
        }
        TileRunner {
            cands,
            program_for,
            bufs,
            scratch,
        }
    }
}

impl Runner for TileRunner<'_> {
    fn run(&mut self, i: usize) -> Result<()> {
        let knobs: Vec<(&str, i64)> = self.cands[i]
            .iter()
            .map(|(n, v)| (n.as_str(), *v))
            .collect();
        let p = (self.program_for)(&knobs)?;
        crate::backend::cpu::launch(&p, &self.bufs)
    }

    fn clear(&mut self) {
        for s in &mut self.scratch {
            s.1.fill(0);
        }
    }

    fn outputs(&self) -> Vec<(DType, &[u8])> {
        self.scratch
            .iter()
            .map(|(_, m, d, len)| (*d, &bytemuck::cast_slice::<u64, u8>(m)[..*len]))
            .collect()
    }
}
