//! Numerics policies for reductions (seeds table A.7).

use std::fmt;

/// How a reduction accumulates.
///
/// `Fast` is the only policy the backends implement today; `Deterministic` and `KahanSum` parse,
/// print and verify so that kernels can name them, and a backend that lacks one reports it.
///
/// ```
/// use tessera_ir::NumericsPolicy;
/// assert_eq!(NumericsPolicy::parse("kahan_sum"), Some(NumericsPolicy::KahanSum));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NumericsPolicy {
    /// Maximum speed: any association order.
    #[default]
    Fast,
    /// Reproducible: a fixed association order independent of threads and schedule.
    Deterministic,
    /// Compensated summation.
    KahanSum,
}

impl NumericsPolicy {
    /// The name used in IR text and attributes.
    pub fn name(self) -> &'static str {
        match self {
            NumericsPolicy::Fast => "fast",
            NumericsPolicy::Deterministic => "deterministic",
            NumericsPolicy::KahanSum => "kahan_sum",
        }
    }

    /// Parses a policy name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Fast, Self::Deterministic, Self::KahanSum]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

impl fmt::Display for NumericsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
