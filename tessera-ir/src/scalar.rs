//! Scalar kernel parameters (`eps: f32` in a `#[kernel]` signature): what a value must satisfy,
//! decided from how the kernel uses it and checked at every launch.
//!
//! A scalar parameter is a rank-0 `f32` tensor in the Graph IR; the generated function takes it
//! by value and uploads it next to its tensor arguments. Used in arithmetic it may be any `f32`
//! (a NaN or an infinity propagates as IEEE says, as it would from a tensor element). Used as
//! the `eps` of `rmsnorm` or `layernorm` it must be finite and > 0, as a literal `eps` must be.

/// The condition a scalar parameter's value must meet at launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScalarRule {
    /// Any `f32`, NaN and infinities included.
    #[default]
    Any,
    /// Finite and > 0: the `eps` of `rmsnorm` / `layernorm`.
    FinitePositive,
}

impl ScalarRule {
    /// The stricter of two rules (a parameter used in several places meets all of them).
    ///
    /// ```
    /// use tessera_ir::scalar::ScalarRule;
    /// assert_eq!(ScalarRule::Any.and(ScalarRule::FinitePositive), ScalarRule::FinitePositive);
    /// ```
    pub fn and(self, other: ScalarRule) -> ScalarRule {
        if self == ScalarRule::FinitePositive || other == ScalarRule::FinitePositive {
            ScalarRule::FinitePositive
        } else {
            ScalarRule::Any
        }
    }

    /// `Ok` when `value` meets the rule, else why not (without the parameter's name, which the
    /// caller adds).
    ///
    /// ```
    /// use tessera_ir::scalar::ScalarRule;
    /// assert!(ScalarRule::FinitePositive.check(1e-5).is_ok());
    /// assert_eq!(
    ///     ScalarRule::FinitePositive.check(-1.0).unwrap_err(),
    ///     "is -1 but must be finite and > 0 (it is the eps of rmsnorm/layernorm)"
    /// );
    /// assert!(ScalarRule::FinitePositive.check(f64::NAN).is_err());
    /// assert!(ScalarRule::Any.check(f64::INFINITY).is_ok());
    /// ```
    pub fn check(self, value: f64) -> Result<(), String> {
        match self {
            ScalarRule::Any => Ok(()),
            ScalarRule::FinitePositive if value.is_finite() && value > 0.0 => Ok(()),
            ScalarRule::FinitePositive => Err(format!(
                "is {value} but must be finite and > 0 (it is the eps of rmsnorm/layernorm)"
            )),
        }
    }
}
