//! Dynamic loss scaling for mixed-precision training (the `Standard` and `Aggressive`
//! precision modes of seeds table A.3 ask for it).

use crate::{Error, Float, Result, Tensor};
use rayon::prelude::*;

/// Dynamic loss scaling: multiply the loss by [`LossScaler::scale`] before back-propagation
/// so small gradients survive bf16/f16/fp8, then [`LossScaler::unscale`] the gradients — one
/// fused pass over every gradient that divides by the scale and checks that every element is
/// finite — and [`LossScaler::update`]:
///
/// - a step whose gradients hold an inf or a NaN is **skipped** (the optimizer must not apply
///   it) and the scale is multiplied by `backoff` (default 0.5);
/// - after `growth_interval` consecutive finite steps (default 2000) the scale is multiplied
///   by `growth_factor` (default 2.0); a growth that would overflow f32 is not taken.
///
/// [`LossScaler::step`] does the three in order and calls the optimizer only on finite
/// gradients.
///
/// ```
/// use tessera::{Tensor, numerics::{LossScaler, Step}};
/// let mut s = LossScaler::new(1024.0)?.growth_interval(2)?;
/// let mut g = Tensor::from_vec(vec![1024.0f32, -2048.0], &[2])?;
/// let applied = s.step(&mut [&mut g], |g| assert_eq!(g[0].as_slice().unwrap(), [1.0, -2.0]))?;
/// assert_eq!(applied, Step::Applied);
/// let mut bad = Tensor::from_vec(vec![f32::INFINITY, 1.0], &[2])?;
/// assert_eq!(s.step(&mut [&mut bad], |_| unreachable!())?, Step::Skipped);
/// assert_eq!(s.scale(), 512.0);
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaler {
    scale: f32,
    growth_factor: f32,
    backoff: f32,
    growth_interval: u32,
    good_steps: u32,
    skipped: u64,
}

/// What [`LossScaler::update`] did with a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The gradients were finite: the optimizer applies them.
    Applied,
    /// An inf or NaN was found: the step is skipped and the scale backed off.
    Skipped,
}

fn invalid(setting: &str, message: String) -> Error {
    Error::InvalidSetting {
        setting: setting.into(),
        message,
    }
}

impl LossScaler {
    /// A scaler starting at `initial_scale` (finite and positive; 2^16 is a common start)
    /// with growth factor 2, growth interval 2000 and backoff 0.5.
    pub fn new(initial_scale: f32) -> Result<Self> {
        if !(initial_scale.is_finite() && initial_scale > 0.0) {
            return Err(invalid(
                "initial_scale",
                format!("must be finite and positive, got {initial_scale}"),
            ));
        }
        Ok(LossScaler {
            scale: initial_scale,
            growth_factor: 2.0,
            backoff: 0.5,
            growth_interval: 2000,
            good_steps: 0,
            skipped: 0,
        })
    }

    /// Sets the factor the scale grows by (finite, greater than 1).
    pub fn growth_factor(mut self, factor: f32) -> Result<Self> {
        if !(factor.is_finite() && factor > 1.0) {
            return Err(invalid(
                "growth_factor",
                format!("must be finite and greater than 1, got {factor}"),
            ));
        }
        self.growth_factor = factor;
        Ok(self)
    }

    /// Sets how many consecutive finite steps grow the scale (at least 1).
    pub fn growth_interval(mut self, steps: u32) -> Result<Self> {
        if steps == 0 {
            return Err(invalid(
                "growth_interval",
                "must be at least 1, got 0".into(),
            ));
        }
        self.growth_interval = steps;
        Ok(self)
    }

    /// Sets the factor the scale shrinks by on an overflow (strictly between 0 and 1).
    pub fn backoff(mut self, factor: f32) -> Result<Self> {
        if !(factor > 0.0 && factor < 1.0) {
            return Err(invalid(
                "backoff",
                format!("must be strictly between 0 and 1, got {factor}"),
            ));
        }
        self.backoff = factor;
        Ok(self)
    }

    /// The current scale.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The number of steps skipped so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// `loss · scale` (what back-propagation starts from).
    pub fn scale_loss(&self, loss: f32) -> f32 {
        loss * self.scale
    }

    /// Divides every gradient by the scale and checks every result is finite, in one fused
    /// pass over all the gradients (in parallel); returns `true` when all are finite. A
    /// gradient that is not finite leaves its tensor's values unspecified (the step must be
    /// skipped: see [`Self::update`]). The pass runs on the host: a gradient in device memory
    /// is an error naming its device, and no gradient is touched.
    pub fn unscale<T: Float>(&self, grads: &mut [&mut Tensor<T>]) -> Result<bool> {
        let inv = 1.0 / self.scale as f64;
        let mut slices = Vec::with_capacity(grads.len());
        for g in grads.iter_mut() {
            slices.push(g.as_mut_slice()?);
        }
        Ok(slices.into_par_iter().all(|g| {
            g.par_chunks_mut(1 << 14)
                .map(|c| {
                    c.iter_mut().fold(true, |ok, x| {
                        let y = x.to_f64() * inv;
                        *x = T::from_f64_round(y);
                        // The unscaled value rounded to T must be finite too.
                        ok & x.to_f64().is_finite()
                    })
                })
                .reduce(|| true, |a, b| a & b)
        }))
    }

    /// Records a step whose gradients were finite (`finite`) or not: updates the scale as
    /// the type's docs say and tells whether the step is applied or skipped.
    pub fn update(&mut self, finite: bool) -> Step {
        if !finite {
            self.scale = (self.scale * self.backoff).max(f32::MIN_POSITIVE);
            self.good_steps = 0;
            self.skipped += 1;
            return Step::Skipped;
        }
        self.good_steps += 1;
        if self.good_steps >= self.growth_interval {
            self.good_steps = 0;
            let grown = self.scale * self.growth_factor;
            if grown.is_finite() {
                self.scale = grown;
            }
        }
        Step::Applied
    }

    /// Unscales and checks `grads` ([`Self::unscale`]), calls `apply` with them when they are
    /// finite, and updates the scale ([`Self::update`]). A gradient in device memory is an
    /// error (see [`Self::unscale`]).
    pub fn step<T: Float>(
        &mut self,
        grads: &mut [&mut Tensor<T>],
        apply: impl FnOnce(&mut [&mut Tensor<T>]),
    ) -> Result<Step> {
        let finite = self.unscale(grads)?;
        if finite {
            apply(grads);
        }
        Ok(self.update(finite))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16;

    /// An overflow sequence: the scale grows every `interval` finite steps, backs off on each
    /// overflow (skipping that step and restarting the growth count), and the applied
    /// gradients are the unscaled ones, against an f64 model of the same rules.
    #[test]
    fn overflow_sequence() {
        let mut s = LossScaler::new(65536.0)
            .unwrap()
            .growth_factor(2.0)
            .unwrap()
            .growth_interval(3)
            .unwrap()
            .backoff(0.25)
            .unwrap();
        // Per step: does a gradient overflow (inf) or hold a NaN?
        let events = [
            "ok", "ok", "ok", "inf", "ok", "nan", "ok", "ok", "ok", "ok", "ok", "ok", "inf", "inf",
            "ok",
        ];
        let (mut scale, mut good, mut skipped) = (65536.0f64, 0, 0u64);
        let mut applied = 0;
        for (t, e) in events.iter().enumerate() {
            // True gradients, scaled as back-propagation from the scaled loss would give them.
            let want: Vec<f64> = (0..300)
                .map(|i| ((i * 7 + t) as f64 - 1000.0) / 64.0)
                .collect();
            let mut raw: Vec<f32> = want.iter().map(|g| (g * scale) as f32).collect();
            match *e {
                "inf" => raw[123] = f32::INFINITY,
                "nan" => raw[7] = f32::NAN,
                _ => {}
            }
            let mut g0 = Tensor::from_vec(raw[..100].to_vec(), &[100]).unwrap();
            let mut g1 = Tensor::from_vec(raw[100..].to_vec(), &[10, 20]).unwrap();
            let mut seen = None;
            let step = s
                .step(&mut [&mut g0, &mut g1], |g| {
                    seen = Some([g[0].to_vec().unwrap(), g[1].to_vec().unwrap()].concat());
                })
                .unwrap();
            // The model.
            let finite = *e == "ok";
            if finite {
                good += 1;
                if good == 3 {
                    good = 0;
                    scale *= 2.0;
                }
            } else {
                good = 0;
                skipped += 1;
                scale *= 0.25;
            }
            assert_eq!(step == Step::Applied, finite, "step {t} ({e})");
            assert_eq!(s.scale() as f64, scale, "step {t} ({e})");
            assert_eq!(s.skipped(), skipped);
            match seen {
                Some(got) => {
                    applied += 1;
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (*g as f64 - w).abs() <= 1e-6 * w.abs(),
                            "step {t}: {g} vs {w}"
                        );
                    }
                }
                None => assert!(!finite, "step {t}: finite gradients not applied"),
            }
        }
        assert_eq!(applied, 11);
        assert_eq!(skipped, 4);
    }

    /// bf16 gradients: an unscaled value is finite only if it is finite in bf16.
    #[test]
    fn unscale_bf16_checks_every_tensor() {
        let s = LossScaler::new(8.0).unwrap();
        let mut a = Tensor::from_vec(vec![bf16::from_f32(16.0); 5000], &[5000]).unwrap();
        let mut b = Tensor::from_vec(vec![bf16::from_f32(-4.0); 3], &[3]).unwrap();
        assert!(s.unscale(&mut [&mut a, &mut b]).unwrap());
        assert!(a.as_slice().unwrap().iter().all(|x| x.to_f32() == 2.0));
        assert_eq!(b.as_slice().unwrap()[0].to_f32(), -0.5);
        let mut c = a.clone();
        c.as_mut_slice().unwrap()[4999] = bf16::NAN;
        assert!(!s.unscale(&mut [&mut b, &mut c]).unwrap());
        // A gradient in device memory is an error naming the device; the host one is untouched.
        let mut d = b.to(&crate::Device::sim()).unwrap();
        let e = s.unscale(&mut [&mut a, &mut d]).unwrap_err().to_string();
        assert!(e.contains("sim:sm_80"), "{e}");
        assert!(a.as_slice().unwrap().iter().all(|x| x.to_f32() == 2.0));
    }

    #[test]
    fn bad_settings_are_errors_naming_the_setting() {
        for (r, name) in [
            (LossScaler::new(0.0).map(drop), "initial_scale"),
            (LossScaler::new(f32::INFINITY).map(drop), "initial_scale"),
            (
                LossScaler::new(1.0).unwrap().growth_factor(1.0).map(drop),
                "growth_factor",
            ),
            (
                LossScaler::new(1.0).unwrap().growth_interval(0).map(drop),
                "growth_interval",
            ),
            (
                LossScaler::new(1.0).unwrap().backoff(1.0).map(drop),
                "backoff",
            ),
        ] {
            assert!(r.unwrap_err().to_string().contains(name));
        }
    }

    /// The scale never grows past f32's range.
    #[test]
    fn growth_stops_at_the_top_of_f32() {
        let mut s = LossScaler::new(f32::MAX / 1.5)
            .unwrap()
            .growth_interval(1)
            .unwrap();
        assert_eq!(s.update(true), Step::Applied);
        assert_eq!(s.scale(), f32::MAX / 1.5);
    }
}
