//! Search strategies: which candidate to time next.
//!
//! - [`Strategy::Grid`]: every valid candidate, in the space's order (exhaustive).
//! - [`Strategy::Random`]: a seeded shuffle of the valid candidates, up to `max_trials`.
//! - [`Strategy::Hybrid`] (the default, seeds table A.4 "Bayesian + grid hybrid with cost-model
//!   priors"): the cost model's ranking seeds the search (the default, the nearest tuned
//!   shape's winner, then the best-predicted candidates); after that a surrogate fitted to the
//!   measured times proposes each next trial. The surrogate is the cost model corrected by a
//!   kernel regression of the log residuals `ln(measured / predicted)` over the candidates'
//!   features (log2 of the tile dims, vector width, stages), with an uncertainty that grows
//!   with the distance to the nearest measured point; the next trial minimises the lower
//!   confidence bound `μ − κσ` (κ = 1). It stops at `max_trials` (by default a quarter of the
//!   valid candidates, at least 4) or when a measured time reaches the roofline bound (within
//!   10%). (It used to stop early once no untried candidate's bound beat the best time; with
//!   a machine's timing noise that gave up on regions one more trial would have found.) The
//!   surrogate's mean also carries a ridge-regressed linear trend of the residuals over the
//!   features, so it can walk toward a region the model misjudges. Proposals alternate
//!   between a *local* step — the lowest bound among the untried neighbours of the fastest
//!   candidate so far (one doubling in at most two features), a trust region in the manner
//!   of TuRBO — and a *global* step over every untried candidate: the local steps polish the
//!   incumbent, the global ones keep a misjudged region in reach.

/// How the tuner explores a space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// Exhaustive.
    Grid,
    /// Seeded random sample.
    Random {
        /// The seed of the sample: the same seed draws the same candidates.
        seed: u64,
    },
    /// Cost-model priors + surrogate (the default).
    #[default]
    Hybrid,
}

impl Strategy {
    /// Name in cache files and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Grid => "grid",
            Strategy::Random { .. } => "random",
            Strategy::Hybrid => "hybrid",
        }
    }
}

/// What the strategy knows about one candidate.
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    /// Cost-model prediction (seconds); infinite when pruned.
    pub predicted: f64,
    /// Features for the surrogate's distance.
    pub features: Vec<f64>,
    /// Measured median, once timed (or taken from the cache).
    pub measured: Option<f64>,
    /// Tried: timed, rejected or failed.
    pub tried: bool,
}

/// Drives a search: `measure(i)` runs candidate `i` (index 0 is the default and is always
/// measured first) and returns its time, or `None` when it was rejected. Returns the number of
/// calls made.
pub(crate) fn run(
    strategy: Strategy,
    cands: &mut [Cand],
    first: &[usize],
    max_trials: usize,
    bound: f64,
    mut measure: impl FnMut(usize, &mut [Cand]) -> Option<f64>,
) -> usize {
    let valid: Vec<usize> = (0..cands.len())
        .filter(|&i| i == 0 || cands[i].predicted.is_finite())
        .collect();
    let mut calls = 0;
    let mut step = |i: usize, cands: &mut [Cand], calls: &mut usize| {
        if cands[i].tried {
            return;
        }
        let t = measure(i, cands);
        cands[i].tried = true;
        cands[i].measured = t;
        *calls += 1;
    };
    step(0, cands, &mut calls);
    match strategy {
        Strategy::Grid => {
            for &i in &valid {
                step(i, cands, &mut calls);
            }
        }
        Strategy::Random { seed } => {
            let mut order = valid.clone();
            let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for i in (1..order.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                order.swap(i, (s % (i as u64 + 1)) as usize);
            }
            for i in order {
                if tried(cands) >= max_trials {
                    break;
                }
                step(i, cands, &mut calls);
            }
        }
        Strategy::Hybrid => {
            let budget = max_trials.min(valid.len());
            let mut ranked: Vec<usize> = valid.clone();
            ranked.sort_by(|&a, &b| cands[a].predicted.total_cmp(&cands[b].predicted));
            // Priors: the caller's picks, then the model's top quarter of the budget.
            let seeds = (budget / 4).max(2);
            for &i in first.iter().chain(ranked.iter().take(seeds)) {
                if tried(cands) >= budget || reached(cands, bound) {
                    break;
                }
                step(i, cands, &mut calls);
            }
            // Then the surrogate, alternating a local step (the best bound among the
            // incumbent's neighbours) with a global one (the best bound anywhere).
            let mut local = true;
            while tried(cands) < budget && !reached(cands, bound) {
                let near = neighbours_of_best(cands, &valid);
                let pick = if local && !near.is_empty() {
                    propose(cands, &near)
                } else {
                    propose(cands, &valid)
                };
                let Some((next, _)) = pick else {
                    break;
                };
                step(next, cands, &mut calls);
                local = !local;
            }
        }
    }
    calls
}

fn tried(c: &[Cand]) -> usize {
    c.iter().filter(|c| c.tried).count()
}

fn best_time(c: &[Cand]) -> Option<f64> {
    c.iter().filter_map(|c| c.measured).min_by(f64::total_cmp)
}

fn reached(c: &[Cand], bound: f64) -> bool {
    bound > 0.0 && best_time(c).is_some_and(|t| t <= bound * 1.1)
}

/// Untried valid candidates next to the fastest measured one: at most one doubling away in
/// each of at most two features (squared feature distance ≤ 2).
fn neighbours_of_best(c: &[Cand], valid: &[usize]) -> Vec<usize> {
    let Some(best) = (0..c.len())
        .filter(|&i| c[i].measured.is_some())
        .min_by(|&a, &b| c[a].measured.unwrap().total_cmp(&c[b].measured.unwrap()))
    else {
        return Vec::new();
    };
    valid
        .iter()
        .copied()
        .filter(|&i| !c[i].tried)
        .filter(|&i| {
            let d2: f64 = c[i]
                .features
                .iter()
                .zip(&c[best].features)
                .map(|(a, b)| (a - b).powi(2))
                .sum();
            d2 <= 2.0 + 1e-9
        })
        .collect()
}

/// The surrogate's pick: the untried valid candidate with the lowest `μ − σ` (log seconds).
/// `μ` = log prediction + a ridge-regressed linear trend of the residuals over the features +
/// a kernel-smoothed correction of what the trend leaves; `σ` grows with the distance to the
/// nearest measured point.
fn propose(c: &[Cand], valid: &[usize]) -> Option<(usize, f64)> {
    let measured: Vec<(&Cand, f64)> = c
        .iter()
        .filter(|x| x.predicted.is_finite() && x.predicted > 0.0)
        .filter_map(|x| x.measured.map(|m| (x, m.ln() - x.predicted.ln())))
        .collect();
    let trend = ridge(&measured);
    let lin = |f: &[f64]| trend[0] + f.iter().zip(&trend[1..]).map(|(a, b)| a * b).sum::<f64>();
    let rest: Vec<(&Cand, f64)> = measured
        .iter()
        .map(|(x, r)| (*x, r - lin(&x.features)))
        .collect();
    let n = rest.len().max(1) as f64;
    let spread = (rest.iter().map(|m| m.1.powi(2)).sum::<f64>() / n)
        .sqrt()
        .max(0.1);
    valid
        .iter()
        .filter(|&&i| !c[i].tried && c[i].predicted > 0.0)
        .map(|&i| {
            let x = &c[i];
            let (mut wsum, mut rsum, mut near) = (0.3, 0.0, 0.0f64);
            for (m, r) in &rest {
                let d2: f64 = x
                    .features
                    .iter()
                    .zip(&m.features)
                    .map(|(a, b)| (a - b).powi(2))
                    .sum();
                let w = (-d2 / 2.0).exp();
                wsum += w;
                rsum += w * r;
                near = near.max(w);
            }
            let mu = x.predicted.ln() + lin(&x.features) + rsum / wsum;
            let sigma = spread * (1.0 - near).sqrt() + 0.02;
            (i, mu - sigma)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Ridge regression (λ = 0.5) of residuals on `[1, features…]`; zeros when nothing is measured.
fn ridge(m: &[(&Cand, f64)]) -> Vec<f64> {
    let d = m.first().map_or(0, |x| x.0.features.len()) + 1;
    let mut a = vec![vec![0.0; d + 1]; d];
    for (x, r) in m {
        let row: Vec<f64> = std::iter::once(1.0)
            .chain(x.features.iter().copied())
            .collect();
        for i in 0..d {
            for j in 0..d {
                a[i][j] += row[i] * row[j];
            }
            a[i][d] += row[i] * r;
        }
    }
    for (i, r) in a.iter_mut().enumerate() {
        r[i] += if i == 0 { 1e-6 } else { 0.5 };
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..d {
        let piv = (col..d)
            .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
            .unwrap_or(col);
        a.swap(col, piv);
        let p = a[col][col];
        if p.abs() < 1e-12 {
            continue;
        }
        for r in 0..d {
            if r != col {
                let f = a[r][col] / p;
                for k in col..=d {
                    a[r][k] -= f * a[col][k];
                }
            }
        }
    }
    (0..d)
        .map(|i| {
            if a[i][i].abs() < 1e-12 {
                0.0
            } else {
                a[i][d] / a[i][i]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(pred: &[f64]) -> Vec<Cand> {
        pred.iter()
            .enumerate()
            .map(|(i, &p)| Cand {
                predicted: p,
                features: vec![i as f64],
                measured: None,
                tried: false,
            })
            .collect()
    }

    #[test]
    fn grid_tries_every_valid_candidate() {
        let mut c = cands(&[1.0, 2.0, f64::INFINITY, 3.0]);
        let n = run(Strategy::Grid, &mut c, &[], 50, 0.0, |i, _| {
            Some(i as f64 + 1.0)
        });
        assert_eq!(n, 3);
        assert!(!c[2].tried);
    }

    #[test]
    fn random_respects_max_trials_and_seed() {
        let pick = |seed| {
            let mut c = cands(&[1.0; 20]);
            run(Strategy::Random { seed }, &mut c, &[], 5, 0.0, |_, _| {
                Some(1.0)
            });
            c.iter().map(|c| c.tried).collect::<Vec<_>>()
        };
        assert_eq!(pick(3).iter().filter(|t| **t).count(), 5);
        assert_eq!(pick(3), pick(3));
        assert_ne!(pick(3), pick(4));
    }

    #[test]
    fn hybrid_finds_a_minimum_the_model_misjudges() {
        // The model thinks candidate 5 is best; the truth has its minimum at 14, a region the
        // model ranks mid-pack. The surrogate must walk there within a quarter of the space.
        // (A minimum the model ranks near the bottom — 30 here — is not reached in 16 trials:
        // a known limit of a model-seeded search.)
        let n = 64;
        let pred: Vec<f64> = (0..n)
            .map(|i| 1.0 + ((i as f64) - 5.0).abs() * 0.01)
            .collect();
        let truth = |i: usize| 1.0 + ((i as f64) - 14.0).abs() * 0.05;
        let mut c = cands(&pred);
        let calls = run(Strategy::Hybrid, &mut c, &[], n / 4, 0.0, |i, _| {
            Some(truth(i))
        });
        assert!(calls <= n / 4);
        let best = c
            .iter()
            .filter_map(|c| c.measured)
            .fold(f64::INFINITY, f64::min);
        assert!(best <= truth(14) * 1.03, "best {best}");
    }

    #[test]
    fn hybrid_stops_at_the_roofline() {
        let mut c = cands(&[1.0; 40]);
        let calls = run(Strategy::Hybrid, &mut c, &[], 10, 1.0, |_, _| Some(1.0));
        assert_eq!(calls, 1);
    }

    #[test]
    fn rejected_candidates_never_win() {
        let mut c = cands(&[1.0, 0.5, 2.0]);
        run(Strategy::Grid, &mut c, &[], 50, 0.0, |i, _| {
            if i == 1 { None } else { Some(1.0) }
        });
        assert!(c[1].tried && c[1].measured.is_none());
    }
}
