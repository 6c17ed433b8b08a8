//! The fusion-depth search of a `#[kernel]` launch (seeds §4.6): how many elementwise ops each
//! kernel's epilogue may hold. Every depth is a different plan — deeper saves the round trip
//! of each intermediate through memory, shallower keeps fewer temporaries live (on a GPU,
//! registers) — so the candidates are whole plans, timed end to end under their kernels'
//! default schedules, each checked against the deepest plan's output. Depths are few (one
//! per fusible op), so every one is timed (a grid); the cost model ([`plan_estimate`]) ranks
//! them for the report and prunes a plan whose registers would spill. The kernels of the
//! chosen plan are then tuned as usual, under cache keys that name the plan.
//!
//! [`plan_estimate`]: tessera_ir::cost::plan::plan_estimate

use super::engine::{self, Job, Runner};
use super::trial::TrialConfig;
use super::{Mode, Strategy, borrowed, fnv, generation, lookup, space_of, store, try_mode};
use crate::Result;
use std::sync::Mutex;
use tessera_ir::cost::Point;

/// Per-definition memo of decisions: (generation, shape) → depth.
pub(crate) struct FusionMemo(Mutex<Vec<(u64, Vec<u64>, usize)>>);

impl FusionMemo {
    pub const fn new() -> Self {
        FusionMemo(Mutex::new(Vec::new()))
    }
}

/// `fusion_depth=2`.
fn text(d: usize) -> String {
    format!("fusion_depth={d}")
}

fn parse(t: &str) -> Option<usize> {
    t.strip_prefix("fusion_depth=")?.parse().ok()
}

/// The depths to search for kernel `name` whose deepest plan fuses `natural` ops into one
/// epilogue: its search space's `fusion_depths` (capped at `natural`), else every depth from
/// 0 to `natural`; the natural depth first (the default plan and the reference).
pub(crate) fn candidate_depths(name: &str, natural: usize) -> Vec<usize> {
    let asked: Vec<usize> = space_of(name)
        .map(|s| s.fusion_depths.iter().map(|&d| d as usize).collect())
        .unwrap_or_default();
    let mut out = vec![natural];
    let all: Vec<usize> = if asked.is_empty() {
        (0..natural).collect()
    } else {
        asked.into_iter().map(|d| d.min(natural)).collect()
    };
    for d in all {
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

/// Chooses the fusion depth of a launch whose parameters have the dims `shape` and dtypes
/// `dtypes`: memo → cache → nearest shape → timing every depth (in `full` mode). `depths[0]`
/// is the default; `predict` gives the cost model's verdict on each depth and `runner` runs
/// the plan of `depths[i]`, both used only when tuning.
#[allow(clippy::too_many_arguments)]
pub(crate) fn select_fusion(
    memo: &FusionMemo,
    name: &str,
    graph_text: &str,
    depths: &[usize],
    shape: &[u64],
    dtypes: &[&str],
    predict: &dyn Fn() -> Vec<(f64, Option<String>)>,
    runner: &mut dyn Runner,
) -> Result<usize> {
    let m = try_mode()?;
    if m == Mode::Off || depths.len() < 2 {
        return Ok(depths[0]);
    }
    let generation_now = generation(m);
    {
        let d = memo.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = d.iter().find(|x| x.0 == generation_now && x.1 == shape) {
            return Ok(x.2);
        }
    }
    // Under the deterministic policy a shallower plan must give the same bits.
    let deterministic = tessera_ir::graph::parse(graph_text).is_ok_and(|g| {
        tessera_ir::graph::policies(&g).contains(&tessera_ir::NumericsPolicy::Deterministic)
    });
    let names: Vec<String> = depths.iter().map(|&d| text(d)).collect();
    let family = format!(
        "{name}#{:016x}.fusion/{}/t{}",
        fnv(graph_text.as_bytes()),
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
    let (hit, near) = lookup(&super::arch_id(), &key, &family, shape);
    let complete = hit
        .as_ref()
        .is_some_and(|e| names.iter().all(|n| e.record(n).is_some()));
    let known = |t: Option<&str>| t.and_then(parse).filter(|d| depths.contains(d));
    let chosen = match (&hit, m) {
        (Some(e), _) if complete || m == Mode::Cached => known(e.best.as_deref()),
        (None, Mode::Cached) => known(borrowed(&near)),
        _ => {
            let job = Job {
                kernel: name.to_string(),
                family,
                shape: shape.to_vec(),
                names,
                points: depths
                    .iter()
                    .map(|&d| Point::new([d as u32 + 1, 1, 1], 1, 1, 1))
                    .collect(),
                arch: super::cost_arch(),
                problem: None,
                predicted: Some(predict()),
                strategy: Strategy::Grid,
                cost_model: space_of(name).map(|s| s.cost_model).unwrap_or_default(),
                max_trials: None,
                trial: TrialConfig {
                    bitwise: deterministic,
                    ..space_of(name).map(|s| s.trial).unwrap_or_default()
                },
                prior: near.and_then(|e| e.best),
                known: hit,
            };
            let out = engine::tune(job, runner)?;
            store(&super::arch_id(), key, out.entry.clone());
            Some(depths[out.best])
        }
    };
    let chosen = chosen.unwrap_or(depths[0]);
    memo.0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((generation_now, shape.to_vec(), chosen));
    Ok(chosen)
}
