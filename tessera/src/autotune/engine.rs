//! One tuning job: cost-model estimates, the reference run, the strategy's trials with the
//! correctness check, and the merged cache entry.

use super::TRIALS;
use super::cache::{Entry, TrialRecord};
use super::progress::Progress;
use super::search::{self, Cand, Strategy};
use super::space::CostModel;
use super::trial::{TrialConfig, outputs_match_with, race, time_median};
use crate::Result;
use std::sync::atomic::Ordering;
use tessera_ir::DType;
use tessera_ir::cost::{Point, Problem, estimate, roofline_bound};

/// Runs candidates of one kernel into scratch outputs.
pub(crate) trait Runner {
    /// Runs candidate `i` once (index 0 is the default).
    fn run(&mut self, i: usize) -> Result<()>;
    /// Zeroes the scratch outputs.
    fn clear(&mut self);
    /// The scratch outputs: dtype and bytes of each.
    fn outputs(&self) -> Vec<(DType, &[u8])>;
    /// Runs candidate `i` once and returns how long it took, seconds: the wall clock by
    /// default, a device's own timer (CUDA events) where it has one, `None` where a device has
    /// no clock (the simulator: its candidates are checked, and ranked by the cost model).
    fn sample(&mut self, i: usize) -> Result<Option<f64>> {
        let t = std::time::Instant::now();
        self.run(i)?;
        Ok(Some(t.elapsed().as_secs_f64()))
    }
}

/// The note of a candidate that passed the check on a device without a clock.
pub(crate) const UNTIMED: &str =
    "checked on the device, not timed (no clock): ranked by the cost model";

/// What to tune.
pub(crate) struct Job {
    pub kernel: String,
    pub family: String,
    pub shape: Vec<u64>,
    /// Candidate texts; `[0]` is the default.
    pub names: Vec<String>,
    pub points: Vec<Point>,
    pub problem: Option<Problem>,
    /// The cost model's arch: the CPU's ([`super::cost_arch`]) or the device's.
    pub arch: tessera_ir::cost::Arch,
    /// Predictions (seconds, and why a candidate is pruned) made by the caller instead of
    /// from `problem` and `points` (a fusion plan's cost).
    pub predicted: Option<Vec<(f64, Option<String>)>>,
    pub strategy: Strategy,
    /// `Off`: every runnable candidate ranks equal, and there is no roofline stop.
    pub cost_model: CostModel,
    pub max_trials: Option<usize>,
    pub trial: TrialConfig,
    /// The nearest tuned shape's winner, tried early.
    pub prior: Option<String>,
    /// The existing entry: its candidates are not timed again.
    pub known: Option<Entry>,
}

/// The result of a tuning job.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Index of the winner among the job's candidates.
    pub best: usize,
    /// Candidates run by this job (timed or rejected).
    pub trials: usize,
    /// The merged cache entry.
    pub entry: Entry,
}

pub(crate) fn tune(job: Job, runner: &mut dyn Runner) -> Result<Outcome> {
    let arch = job.arch.clone();
    let n = job.names.len();
    // Per candidate: the cost model's prediction and, when pruned, why.
    let model: Vec<(f64, Option<String>)> = match &job.predicted {
        Some(p) => p.clone(),
        None => job
            .points
            .iter()
            .map(|p| match job.problem {
                Some(pr) => {
                    let e = estimate(&arch, &pr, p);
                    (e.time_s, e.pruned.map(|p| p.to_string()))
                }
                None => (1.0, None),
            })
            .collect(),
    };
    let predicted: Vec<f64> = model.iter().map(|m| m.0).collect();
    let (ranking, bound) = match job.cost_model {
        CostModel::Roofline => (
            predicted.clone(),
            job.problem.map_or(0.0, |p| roofline_bound(&arch, &p)),
        ),
        CostModel::Off => (
            predicted
                .iter()
                .map(|&p| if p.is_finite() { 1.0 } else { p })
                .collect(),
            0.0,
        ),
    };
    let mut cands: Vec<Cand> = (0..n)
        .map(|i| {
            let rec = job.known.as_ref().and_then(|e| e.record(&job.names[i]));
            Cand {
                predicted: ranking[i],
                features: super::space::features(&job.points[i]),
                measured: rec.and_then(|r| r.measured_s),
                tried: rec.is_some(),
            }
        })
        .collect();
    let trial = if job.known.is_some() {
        job.trial.warm_cache()
    } else {
        job.trial
    };
    let valid = (0..n).filter(|&i| i == 0 || ranking[i].is_finite()).count();
    let max_trials = job
        .max_trials
        .unwrap_or(match job.strategy {
            Strategy::Grid => usize::MAX,
            _ => (valid / 4).clamp(4, 50),
        })
        .max(1);
    // The reference: the default schedule's output.
    runner.clear();
    runner.run(0)?;
    let reference: Vec<(DType, Vec<u8>)> = runner
        .outputs()
        .into_iter()
        .map(|(d, b)| (d, b.to_vec()))
        .collect();
    let first: Vec<usize> = job
        .prior
        .iter()
        .filter_map(|p| job.names.iter().position(|n| n == p))
        .collect();
    let mut new: Vec<Option<TrialRecord>> = vec![None; n];
    let progress = Progress::new(max_trials.min(valid), &job.kernel);
    let calls = search::run(
        job.strategy,
        &mut cands,
        &first,
        max_trials,
        bound,
        |i, _| {
            progress.inc();
            TRIALS.fetch_add(1, Ordering::SeqCst);
            let (measured, ok, note) = measure(runner, i, &reference, &trial);
            tracing::debug!(
                target: "tessera::autotune",
                kernel = %job.kernel,
                candidate = %job.names[i],
                predicted_s = predicted[i],
                measured_s = ?measured,
                ok,
                note = %note,
            );
            new[i] = Some(TrialRecord {
                candidate: job.names[i].clone(),
                predicted_s: predicted[i],
                measured_s: measured,
                ok,
                note,
            });
            measured
        },
    );
    drop(progress);
    // The final race among the best few measured candidates (see `TrialConfig`).
    let entrants = race_entrants(&cands, &trial);
    if entrants.len() > 1 {
        let mut times = race(&trial, &entrants, |i| runner.sample(i));
        // The race ranks its entrants; their level is brought back to the search's (the
        // geometric mean of the same entrants' search times), so a machine slower or faster
        // during the race than during the search cannot hand the win to a candidate left
        // out of the race, whose time is the search's.
        let (mut search_log, mut race_log, mut live) = (0.0, 0.0, 0usize);
        for (&i, t) in entrants.iter().zip(&times) {
            if let (Some(t), Some(m)) = (t, cands[i].measured) {
                search_log += m.ln();
                race_log += t.ln();
                live += 1;
            }
        }
        let level = if live > 0 {
            ((search_log - race_log) / live as f64).exp()
        } else {
            1.0
        };
        for t in times.iter_mut().flatten() {
            *t *= level;
        }
        for (&i, t) in entrants.iter().zip(times) {
            let rec = new[i].get_or_insert_with(|| {
                let old = job.known.as_ref().and_then(|e| e.record(&job.names[i]));
                old.cloned().unwrap_or_else(|| TrialRecord {
                    candidate: job.names[i].clone(),
                    predicted_s: predicted[i],
                    measured_s: None,
                    ok: true,
                    note: String::new(),
                })
            });
            let Some(t) = t else {
                // It ran in the search but failed in the race: never trust it.
                cands[i].measured = None;
                rec.measured_s = None;
                rec.ok = false;
                rec.note = "failed in the final race".into();
                continue;
            };
            tracing::debug!(
                target: "tessera::autotune",
                kernel = %job.kernel,
                candidate = %job.names[i],
                first_s = ?cands[i].measured,
                raced_s = t,
                "race"
            );
            cands[i].measured = Some(t);
            rec.measured_s = Some(t);
            rec.note = format!("raced against {} others", entrants.len() - 1);
        }
    }
    // Pruned candidates are recorded too, with the reason.
    for i in 0..n {
        if let Some(p) = model[i].1.clone()
            && new[i].is_none()
            && i != 0
        {
            new[i] = Some(TrialRecord {
                candidate: job.names[i].clone(),
                predicted_s: f64::INFINITY,
                measured_s: None,
                ok: true,
                note: format!("pruned: {p}"),
            });
        }
    }
    let mut trials = job.known.as_ref().map_or(Vec::new(), |e| e.trials.clone());
    for r in new.into_iter().flatten() {
        match trials.iter_mut().find(|t| t.candidate == r.candidate) {
            Some(t) => *t = r,
            None => trials.push(r),
        }
    }
    // JSON has no infinity: store pruned predictions as -1.
    for t in &mut trials {
        if !t.predicted_s.is_finite() {
            t.predicted_s = -1.0;
        }
    }
    let best_rec = trials
        .iter()
        .filter(|t| t.ok && t.measured_s.is_some())
        .filter(|t| job.names.contains(&t.candidate))
        .min_by(|a, b| a.measured_s.unwrap().total_cmp(&b.measured_s.unwrap()))
        .map(|t| t.candidate.clone())
        .or_else(|| {
            // A device without a clock: the best-predicted candidate that passed the check.
            trials
                .iter()
                .filter(|t| t.ok && t.note == UNTIMED && t.predicted_s > 0.0)
                .filter(|t| job.names.contains(&t.candidate))
                .min_by(|a, b| a.predicted_s.total_cmp(&b.predicted_s))
                .map(|t| t.candidate.clone())
        });
    let best = best_rec
        .as_ref()
        .and_then(|b| job.names.iter().position(|n| n == b))
        .unwrap_or(0);
    tracing::info!(
        target: "tessera::autotune",
        kernel = %job.kernel,
        shape = ?job.shape,
        chosen = %job.names[best],
        predicted_s = predicted[best],
        measured_s = ?cands[best].measured,
        default_s = ?cands[0].measured,
        trials = calls,
        strategy = job.strategy.name(),
        "decision"
    );
    Ok(Outcome {
        best,
        trials: calls,
        entry: Entry {
            kernel: job.kernel.clone(),
            family: job.family.clone(),
            shape: job.shape.clone(),
            default: job.names[0].clone(),
            best: best_rec.or_else(|| Some(job.names[0].clone())),
            strategy: job.strategy.name().to_string(),
            trials,
        },
    })
}

/// Checks candidate `i` against the reference, then times it.
fn measure(
    runner: &mut dyn Runner,
    i: usize,
    reference: &[(DType, Vec<u8>)],
    trial: &TrialConfig,
) -> (Option<f64>, bool, String) {
    runner.clear();
    if let Err(e) = runner.run(i) {
        return (None, false, format!("failed: {e}"));
    }
    for (j, ((d, got), (_, want))) in runner.outputs().iter().zip(reference).enumerate() {
        if let Err((at, g, w)) = outputs_match_with(*d, got, want, trial.bitwise) {
            let note = format!("wrong output {j} at element {at}: {g} instead of {w}");
            tracing::warn!(target: "tessera::autotune", "rejected a candidate: {note}");
            return (None, false, note);
        }
    }
    match time_median(trial, || runner.sample(i)) {
        Ok(Some(t)) => (Some(t), true, String::new()),
        Ok(None) => (None, true, UNTIMED.to_string()),
        Err(e) => (None, false, format!("failed: {e}")),
    }
}

/// The candidates of the final race: measured ones within the margin of the best, best first,
/// at most `trial.race` of them.
fn race_entrants(cands: &[Cand], trial: &TrialConfig) -> Vec<usize> {
    let mut timed: Vec<(usize, f64)> = cands
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.measured.map(|m| (i, m)))
        .collect();
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let Some(&(_, best)) = timed.first() else {
        return Vec::new();
    };
    timed
        .into_iter()
        .take_while(|(_, t)| *t <= best * (1.0 + trial.race_margin))
        .take(trial.race)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates that all compute the same output; candidate `i` takes `times[i]` seconds,
    /// times `race_slowdown` once the final race has begun.
    struct Fake {
        times: Vec<f64>,
        first_runs: Vec<usize>,
        out: Vec<u8>,
        /// The candidate last run for the output check.
        checked: usize,
        racing: bool,
        race_slowdown: f64,
    }

    impl Fake {
        fn new(times: Vec<f64>) -> Self {
            Fake {
                times,
                first_runs: Vec::new(),
                out: Vec::new(),
                checked: 0,
                racing: false,
                race_slowdown: 1.0,
            }
        }
    }

    impl Runner for Fake {
        fn run(&mut self, i: usize) -> Result<()> {
            if !self.first_runs.contains(&i) {
                self.first_runs.push(i);
            }
            self.checked = i;
            self.out = 3.5f32.to_ne_bytes().to_vec();
            Ok(())
        }
        fn clear(&mut self) {
            self.out = vec![0; 4];
        }
        fn outputs(&self) -> Vec<(DType, &[u8])> {
            vec![(DType::F32, &self.out)]
        }
        fn sample(&mut self, i: usize) -> Result<Option<f64>> {
            // The search samples the candidate it just checked; the race samples others.
            self.racing |= i != self.checked;
            let slow = if self.racing { self.race_slowdown } else { 1.0 };
            Ok(Some(self.times[i] * slow))
        }
    }

    fn job(cost_model: CostModel, predicted: Vec<f64>) -> Job {
        let n = predicted.len();
        Job {
            kernel: "k".into(),
            family: "k/f32".into(),
            shape: vec![64],
            names: (0..n).map(|i| format!("c{i}")).collect(),
            points: (0..n)
                .map(|i| Point::new([16 << i, 16, 16], 1, 1, 1))
                .collect(),
            problem: None,
            arch: tessera_ir::cost::Arch::cpu(1),
            predicted: Some(predicted.into_iter().map(|p| (p, None)).collect()),
            strategy: Strategy::Hybrid,
            cost_model,
            max_trials: Some(3),
            trial: TrialConfig {
                warmup: 1,
                samples: 5,
                race: 0,
                ..TrialConfig::default()
            },
            prior: None,
            known: None,
        }
    }

    #[test]
    fn the_cost_model_orders_the_hybrid_priors_unless_it_is_off() {
        // The model's favourite is the last candidate; the last candidate is also fastest.
        let predicted: Vec<f64> = (0..8).map(|i| 8.0 - i as f64).collect();
        let times: Vec<f64> = (0..8).map(|i| 1e-3 * (9.0 - i as f64)).collect();
        let run = |model| {
            let mut fake = Fake::new(times.clone());
            let out = tune(job(model, predicted.clone()), &mut fake).unwrap();
            (fake.first_runs, out)
        };
        let (order, out) = run(CostModel::Roofline);
        assert_eq!(order[..2], [0, 7], "the default, then the model's pick");
        assert_eq!(out.best, 7);
        let (order, out) = run(CostModel::Off);
        assert_eq!(order[..2], [0, 1], "no ranking: the space's order");
        assert_eq!(out.trials, 3);
        assert!(out.best != 7, "three trials in space order cannot reach it");
        // The recorded predictions are the model's either way (for reports).
        let rec = out.entry.record("c1").unwrap();
        assert_eq!(rec.predicted_s, 7.0);
    }

    #[test]
    fn a_machine_slower_during_the_race_cannot_hand_the_win_to_a_candidate_left_out() {
        // c1 is fastest, c2 within the race margin, c3 outside it; the machine runs twice as
        // slow during the race, so raced times alone would lose to c3's search time.
        let mut fake = Fake::new(vec![2e-3, 1.0e-3, 1.1e-3, 1.4e-3]);
        fake.race_slowdown = 2.0;
        let mut j = job(CostModel::Roofline, vec![4.0, 3.0, 2.0, 1.0]);
        j.strategy = Strategy::Grid;
        j.max_trials = None;
        j.trial.race = 8;
        j.trial.race_rounds = 3;
        let out = tune(j, &mut fake).unwrap();
        assert!(fake.racing, "the race ran");
        assert_eq!(out.best, 1);
        let raced = out.entry.record("c1").unwrap();
        assert!(raced.note.starts_with("raced"), "{raced:?}");
        assert!(
            (raced.measured_s.unwrap() - 1.0e-3).abs() < 1e-9,
            "{raced:?}"
        );
        let left_out = out.entry.record("c3").unwrap();
        assert_eq!(left_out.measured_s, Some(1.4e-3));
        assert!(left_out.note.is_empty());
    }
}
