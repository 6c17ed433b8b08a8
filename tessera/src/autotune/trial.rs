//! Trials: warm-up, then repeated timing with the median taken; and the correctness check
//! every candidate passes before its time counts.

use half::{bf16, f16};
use std::time::{Duration, Instant};
use tessera_ir::DType;

/// How a candidate is timed.
///
/// The seeds (table A.4) warm up with 50 samples, fewer when the cache is warm. A sample here is
/// one whole launch, so the warm-up also stops after [`warmup_budget`](Self::warmup_budget),
/// and timing takes `samples` runs (at least 5) or as many as fit in `sample_budget`.
///
/// **The final race.** One median per candidate still carries the machine's noise, and the
/// fastest of many noisy medians is biased low (the winner's curse). So once the search is
/// over, the measured candidates within `race_margin` of the best (at most `race`, the best
/// first) are timed again in `race_rounds` interleaved rounds — every round runs each of them
/// `samples / 3` (at least 3) times, in a rotated order, so a slow spell of the machine hits
/// them all alike. Each round's medians are divided by that round's mean over the entrants, so
/// a slow spell spanning a round cancels, and the winner has the lowest median of its
/// normalised times. The raced times are then scaled back to the level of the same entrants'
/// search times, so a machine slower during the race than during the search cannot let a
/// candidate left out of the race (timed in the search only) win. The race re-times
/// candidates already tried: it adds no trials; one that fails in it is rejected.
///
/// ```
/// let t = tessera::autotune::TrialConfig::default();
/// assert_eq!(t.warmup, 50);
/// assert!(t.warm_cache().warmup < t.warmup);
/// assert_eq!(t.race, 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrialConfig {
    /// Warm-up launches at most (at least one runs).
    pub warmup: usize,
    /// The warm-up stops once it has run this long (after its first launch).
    pub warmup_budget: Duration,
    /// Timed launches wanted (at least 5 run); the median is the candidate's time.
    pub samples: usize,
    /// Timing stops after this long once 5 launches are timed.
    pub sample_budget: Duration,
    /// Most candidates in the final race (0 or 1: no race).
    pub race: usize,
    /// Candidates within this fraction of the best measured time enter the race.
    pub race_margin: f64,
    /// Interleaved rounds of the race.
    pub race_rounds: usize,
    /// Candidates must reproduce the default's output bit for bit (set for kernels under the
    /// `deterministic` numerics policy, whose results may not depend on the schedule).
    pub bitwise: bool,
}

impl Default for TrialConfig {
    fn default() -> Self {
        TrialConfig {
            warmup: 50,
            warmup_budget: Duration::from_millis(20),
            samples: 15,
            sample_budget: Duration::from_millis(200),
            race: 8,
            race_margin: 0.25,
            race_rounds: 5,
            bitwise: false,
        }
    }
}

impl TrialConfig {
    /// The settings used when the cache already holds the entry (only new candidates are
    /// timed): a tenth of the warm-up.
    pub fn warm_cache(self) -> Self {
        TrialConfig {
            warmup: (self.warmup / 10).max(1),
            ..self
        }
    }
}

/// Median of the times `sample` reports after warming up, seconds; `None` at once when the
/// device has no clock (`sample` returns `None`).
pub(crate) fn time_median<E>(
    cfg: &TrialConfig,
    mut sample: impl FnMut() -> Result<Option<f64>, E>,
) -> Result<Option<f64>, E> {
    let start = Instant::now();
    for i in 0..cfg.warmup.max(1) {
        if sample()?.is_none() {
            return Ok(None);
        }
        if i > 0 && start.elapsed() > cfg.warmup_budget {
            break;
        }
    }
    let mut ts = Vec::with_capacity(cfg.samples.max(5));
    let start = Instant::now();
    while ts.len() < 5 || (ts.len() < cfg.samples && start.elapsed() < cfg.sample_budget) {
        match sample()? {
            Some(t) => ts.push(t),
            None => return Ok(None),
        }
    }
    Ok(Some(median(&mut ts)))
}

fn median(ts: &mut [f64]) -> f64 {
    ts.sort_by(f64::total_cmp);
    ts[ts.len() / 2]
}

/// The final race (see [`TrialConfig`]): `entrants` are re-timed in interleaved rounds by
/// `sample(i)`; returns each entrant's time, in the entrants' order, `None` for one whose run
/// failed or reported no time.
///
/// The rounds are paired: each round's medians are divided by their geometric mean over the
/// entrants, an entrant's score is the median of its normalised times over the rounds, and its
/// time is that score times the median round mean. A slow spell of the machine that spans a
/// round scales every entrant of that round alike, and cancels.
pub(crate) fn race<E>(
    cfg: &TrialConfig,
    entrants: &[usize],
    mut sample: impl FnMut(usize) -> Result<Option<f64>, E>,
) -> Vec<Option<f64>> {
    let n = entrants.len();
    let per_round = (cfg.samples / 3).max(3);
    let mut alive = vec![true; n];
    // rounds[r][j]: entrant j's median in round r.
    let mut rounds: Vec<Vec<f64>> = Vec::new();
    for round in 0..cfg.race_rounds.max(1) {
        let mut meds = vec![f64::NAN; n];
        for k in 0..n {
            let j = (k + round) % n;
            if !alive[j] {
                continue;
            }
            // One untimed run so the entrant's data is in cache like its rivals' was.
            let mut ts = Vec::with_capacity(per_round);
            let ok = matches!(sample(entrants[j]), Ok(Some(_)))
                && (0..per_round).all(|_| match sample(entrants[j]) {
                    Ok(Some(t)) => {
                        ts.push(t);
                        true
                    }
                    _ => false,
                });
            if ok {
                meds[j] = median(&mut ts);
            } else {
                alive[j] = false;
            }
        }
        rounds.push(meds);
    }
    let live: Vec<usize> = (0..n).filter(|&j| alive[j]).collect();
    if live.is_empty() {
        return vec![None; n];
    }
    let mut means: Vec<f64> = rounds
        .iter()
        .map(|m| (live.iter().map(|&j| m[j].ln()).sum::<f64>() / live.len() as f64).exp())
        .collect();
    let scores: Vec<Option<f64>> = (0..n)
        .map(|j| {
            alive[j].then(|| {
                let mut r: Vec<f64> = rounds.iter().zip(&means).map(|(m, g)| m[j] / g).collect();
                median(&mut r)
            })
        })
        .collect();
    let scale = median(&mut means);
    scores.into_iter().map(|s| s.map(|s| s * scale)).collect()
}

fn to_f64(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let n = dtype.size_bytes().max(1);
    bytes
        .chunks_exact(n)
        .map(|c| match dtype {
            DType::F32 => f32::from_ne_bytes(c.try_into().unwrap()) as f64,
            DType::BF16 => bf16::from_bits(u16::from_ne_bytes(c.try_into().unwrap())).to_f64(),
            DType::F16 => f16::from_bits(u16::from_ne_bytes(c.try_into().unwrap())).to_f64(),
            DType::I32 => i32::from_ne_bytes(c.try_into().unwrap()) as f64,
            _ => c.iter().fold(0.0, |a, b| a * 256.0 + *b as f64),
        })
        .collect()
}

/// Whether a candidate's output matches the reference (the default schedule's): every element
/// within `tol · (|ref| + max|ref|)` — summation order differs with the tile's K step — where
/// `tol` is 1e-4 for f32 and 2⁻⁷ for 16-bit types; NaNs must match, integers exactly. Returns
/// the first mismatch (index, got, want) otherwise.
///
/// ```
/// use tessera::autotune::outputs_match;
/// use tessera::DType;
/// let a: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
/// let b: Vec<u8> = [1.0f32, 2.5].iter().flat_map(|x| x.to_ne_bytes()).collect();
/// assert!(outputs_match(DType::F32, &a, &a).is_ok());
/// assert_eq!(outputs_match(DType::F32, &b, &a).unwrap_err().0, 1);
/// ```
pub fn outputs_match(dtype: DType, got: &[u8], want: &[u8]) -> Result<(), (usize, f64, f64)> {
    outputs_match_with(dtype, got, want, false)
}

/// [`outputs_match`], or with `bitwise` every byte equal (the `deterministic` policy's check:
/// a candidate schedule must not change a single bit).
///
/// ```
/// use tessera::autotune::outputs_match_with;
/// use tessera::DType;
/// let a: Vec<u8> = 1.0f32.to_ne_bytes().to_vec();
/// let b: Vec<u8> = 1.000_000_1f32.to_ne_bytes().to_vec();
/// assert!(outputs_match_with(DType::F32, &b, &a, false).is_ok());
/// assert!(outputs_match_with(DType::F32, &b, &a, true).is_err());
/// ```
pub fn outputs_match_with(
    dtype: DType,
    got: &[u8],
    want: &[u8],
    bitwise: bool,
) -> Result<(), (usize, f64, f64)> {
    if bitwise {
        let n = dtype.size_bytes().max(1);
        if got.len() != want.len() {
            return Err((got.len().min(want.len()) / n, f64::NAN, f64::NAN));
        }
        return match got.chunks(n).zip(want.chunks(n)).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => {
                let (g, w) = (
                    to_f64(dtype, &got[i * n..][..n]),
                    to_f64(dtype, &want[i * n..][..n]),
                );
                Err((i, g[0], w[0]))
            }
        };
    }
    let (g, w) = (to_f64(dtype, got), to_f64(dtype, want));
    if g.len() != w.len() {
        return Err((g.len().min(w.len()), f64::NAN, f64::NAN));
    }
    let tol = match dtype {
        DType::F32 => 1e-4,
        DType::BF16 | DType::F16 => 1.0 / 128.0,
        DType::I32 => 0.0,
        _ => 1.0 / 8.0,
    };
    let scale = w
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |a, b| a.max(b.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = if b.is_nan() || a.is_nan() {
            a.is_nan() && b.is_nan()
        } else if b.is_infinite() || a.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= tol * (b.abs() + scale)
        };
        if !ok {
            return Err((i, *a, *b));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entrant `i` takes `base[i]` seconds times a drift that changes from round to round
    /// (×1, ×3, ×1.5, …): the race must still report the entrants' true ratios.
    #[test]
    fn the_race_cancels_drift_between_rounds() {
        let cfg = TrialConfig {
            samples: 9,
            race_rounds: 4,
            ..TrialConfig::default()
        };
        let base = [1.0, 1.05, 0.9];
        let per_round = cfg.samples / 3;
        let calls_per_round = base.len() * (per_round + 1);
        let mut calls = 0usize;
        let drift = [1.0, 3.0, 1.5, 0.7];
        let t = race(&cfg, &[0, 1, 2], |i| {
            let r = calls / calls_per_round;
            calls += 1;
            Ok::<_, ()>(Some(base[i] * drift[r]))
        });
        let t: Vec<f64> = t.into_iter().map(Option::unwrap).collect();
        assert!((t[1] / t[0] - 1.05).abs() < 1e-12, "{t:?}");
        assert!((t[2] / t[0] - 0.9).abs() < 1e-12, "{t:?}");
        assert_eq!(calls, calls_per_round * drift.len());
    }

    #[test]
    fn a_failing_or_untimed_entrant_drops_out() {
        let cfg = TrialConfig {
            race_rounds: 2,
            ..TrialConfig::default()
        };
        let t = race(&cfg, &[0, 1, 2], |i| match i {
            0 => Ok(Some(1.0)),
            1 => Err("broken"),
            _ => Ok(None),
        });
        assert_eq!(t, vec![Some(1.0), None, None]);
    }
}
