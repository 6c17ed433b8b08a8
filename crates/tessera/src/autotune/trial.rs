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
/// them all alike — and the winner is the lowest median over all rounds. The race re-times
/// candidates already tried: it adds no trials.
///
/// ```
/// let t = tessera::autotune::TrialConfig::default();
/// assert_eq!(t.warmup, 50);
/// assert!(t.warm_cache().warmup < t.warmup);
/// assert_eq!(t.race, 6);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrialConfig {
    pub warmup: usize,
    pub warmup_budget: Duration,
    pub samples: usize,
    pub sample_budget: Duration,
    /// Most candidates in the final race (0 or 1: no race).
    pub race: usize,
    /// Candidates within this fraction of the best measured time enter the race.
    pub race_margin: f64,
    /// Interleaved rounds of the race.
    pub race_rounds: usize,
}

impl Default for TrialConfig {
    fn default() -> Self {
        TrialConfig {
            warmup: 50,
            warmup_budget: Duration::from_millis(20),
            samples: 15,
            sample_budget: Duration::from_millis(200),
            race: 6,
            race_margin: 0.15,
            race_rounds: 5,
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
/// `sample(i)`; returns each entrant's median over every round, in the entrants' order. A run
/// that fails or reports no time drops its entrant (`None`).
pub(crate) fn race<E>(
    cfg: &TrialConfig,
    entrants: &[usize],
    mut sample: impl FnMut(usize) -> Result<Option<f64>, E>,
) -> Vec<Option<f64>> {
    let n = entrants.len();
    let per_round = (cfg.samples / 3).max(3);
    let mut samples: Vec<Option<Vec<f64>>> = vec![Some(Vec::new()); n];
    for round in 0..cfg.race_rounds.max(1) {
        for k in 0..n {
            let j = (k + round) % n;
            let Some(ts) = samples[j].as_mut() else {
                continue;
            };
            // One untimed run so the entrant's data is in cache like its rivals' was.
            if !matches!(sample(entrants[j]), Ok(Some(_))) {
                samples[j] = None;
                continue;
            }
            for _ in 0..per_round {
                match sample(entrants[j]) {
                    Ok(Some(t)) => ts.push(t),
                    _ => {
                        samples[j] = None;
                        break;
                    }
                }
            }
        }
    }
    samples
        .into_iter()
        .map(|s| s.map(|mut ts| median(&mut ts)))
        .collect()
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
