//! Trials: warm-up, then repeated timing with the median taken; and the correctness check
//! every candidate passes before its time counts.

use half::{bf16, f16};
use std::time::{Duration, Instant};
use tessera_ir::DType;

/// How a candidate is timed.
///
/// The seeds (table A.4) warm up with 50 samples, fewer when the cache is warm. A sample here is
/// one whole launch, so the warm-up also stops after [`warmup_budget`](Self::warmup_budget),
/// and timing takes `samples` runs (at least 3) or as many as fit in `sample_budget`.
///
/// ```
/// let t = tessera::autotune::TrialConfig::default();
/// assert_eq!(t.warmup, 50);
/// assert!(t.warm_cache().warmup < t.warmup);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrialConfig {
    pub warmup: usize,
    pub warmup_budget: Duration,
    pub samples: usize,
    pub sample_budget: Duration,
}

impl Default for TrialConfig {
    fn default() -> Self {
        TrialConfig {
            warmup: 50,
            warmup_budget: Duration::from_millis(20),
            samples: 7,
            sample_budget: Duration::from_millis(150),
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

/// Median time of `f` after warming up, seconds.
pub(crate) fn time_median<E>(
    cfg: &TrialConfig,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<f64, E> {
    let start = Instant::now();
    for i in 0..cfg.warmup.max(1) {
        f()?;
        if i > 0 && start.elapsed() > cfg.warmup_budget {
            break;
        }
    }
    let mut ts = Vec::with_capacity(cfg.samples.max(3));
    let start = Instant::now();
    while ts.len() < 3 || (ts.len() < cfg.samples && start.elapsed() < cfg.sample_budget) {
        let t = Instant::now();
        f()?;
        ts.push(t.elapsed().as_secs_f64());
    }
    ts.sort_by(f64::total_cmp);
    Ok(ts[ts.len() / 2])
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
