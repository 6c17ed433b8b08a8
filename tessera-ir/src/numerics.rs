//! Numerics policies for reductions (seeds table A.7) and precision modes (table A.3).

use crate::DType;
use std::fmt;

/// How a reduction accumulates: every sum, mean, softmax, layernorm, rmsnorm, column reduction
/// and matmul K loop names one (Graph IR `policy=..`; a kernel's `numerics = ".."` attribute or
/// the run-time scope `tessera::numerics::policy` sets them). Every backend (cpu, PTX, the
/// simulator) implements all three; a policy a kernel cannot honour is an error.
///
/// - **`Fast`**: any association order (SIMD lanes, warp shuffles, tensor-core `mma`); results
///   may differ between tile shapes, thread counts and backends in the last bits.
/// - **`Deterministic`**: one association order fixed by the math, not by the schedule, and the
///   same IEEE operations on every backend, so results are **bit-identical across threads,
///   every tile shape and vector width, and cpu vs PTX (sim)**:
///   * a row sum of `n` terms adds term `c` into lane `c mod 32`, in increasing `c`, starting
///     from `+0.0`; the 32 lanes are then combined by the fixed pairwise tree
///     `l += l + 16`, `+ 8`, `+ 4`, `+ 2`, `+ 1` (the lane-0 result of a warp butterfly);
///   * a column sum (over the leading axis) adds the rows one at a time, in order;
///   * a matmul adds the products of each output one `k` at a time, in increasing `k`, each
///     as one fused multiply-add (so PTX runs FFMA, never tensor-core `mma`, whose internal
///     order is the hardware's: slower, by design);
///   * softmax takes three passes (max, sum of `exp(x − max)`, write) instead of the online
///     two, and `exp` is the same Cody–Waite + polynomial sequence with fused multiply-adds on
///     both the CPU and PTX (not `ex2.approx`); `sqrt`/`rsqrt` and division are correctly
///     rounded everywhere; bf16/f16/fp8 rounding is round-to-nearest-even everywhere.
///   * `log`, `tanh`, `sigmoid` and `gelu` are bit-identical across threads and tiles on one
///     backend, not promised across backends (each backend has its own approximation).
/// - **`KahanSum`**: the same fixed partitions as `Deterministic`, with each partial carried
///   as a pair (sum, compensation) updated by Knuth's TwoSum (Ogita–Rump–Oishi `Sum2`, the
///   branch-free Kahan–Babuška–Neumaier step: unlike Kahan's original it keeps the low part
///   when a large term follows small ones) and the partials combined with compensation, so an
///   ill-conditioned sum is about as accurate as if summed in twice the working precision; a
///   matmul compensates across K tiles. Bitwise identity across backends is not promised (the
///   final combination of the 32 lane partials differs: a TwoSum butterfly in PTX, Neumaier
///   summation on the CPU).
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

/// Loss scaling a precision mode asks of training (table A.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossScaling {
    /// No scaling.
    None,
    /// Dynamic loss scaling (`tessera::numerics::LossScaler`).
    Dynamic,
}

/// A precision mode (seeds table A.3): what a kernel's matmuls read and accumulate, the loss
/// scaling training should use, and the numerics policy.
///
/// | mode | input compute | accumulation | loss scaling | policy |
/// |---|---|---|---|---|
/// | `Safe` | f32 | f32 | none | fast |
/// | `Standard` | bf16 (f16 inputs stay f16) | f32 | dynamic | fast |
/// | `Aggressive` | fp8 e4m3, per-tensor amax scales | bf16 | dynamic | fast |
/// | `Deterministic` | any (as written) | f32 | none | deterministic |
///
/// A kernel compiled under a mode (`#[kernel(precision = "standard")]`, or the run-time scope
/// `tessera::numerics::precision`) has casts inserted before each matmul's operands, its
/// accumulator set, and the result cast back to the type the body declared; the casts show in
/// its Graph IR text ([`crate::graph::with_precision`]).
///
/// ```
/// use tessera_ir::{DType, Precision, LossScaling};
/// assert_eq!(Precision::parse("aggressive"), Some(Precision::Aggressive));
/// assert_eq!(Precision::Aggressive.accumulator(), DType::BF16);
/// assert_eq!(Precision::Standard.input(DType::F32), Some(DType::BF16));
/// assert_eq!(Precision::Standard.loss_scaling(), LossScaling::Dynamic);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 inputs and accumulation (see the table).
    Safe,
    /// bf16 inputs, f32 accumulation, dynamic loss scaling.
    Standard,
    /// fp8 e4m3 inputs with per-tensor scales, bf16 accumulation, dynamic loss scaling.
    Aggressive,
    /// Inputs as written, f32 accumulation, the deterministic policy.
    Deterministic,
}

impl Precision {
    /// Every mode.
    pub const ALL: [Precision; 4] = [
        Precision::Safe,
        Precision::Standard,
        Precision::Aggressive,
        Precision::Deterministic,
    ];

    /// The name used in attributes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Safe => "safe",
            Precision::Standard => "standard",
            Precision::Aggressive => "aggressive",
            Precision::Deterministic => "deterministic",
        }
    }

    /// Parses a mode name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The dtype a matmul operand of dtype `d` is cast to (`None`: left as it is).
    pub fn input(self, d: DType) -> Option<DType> {
        if !d.is_float() {
            return None;
        }
        let want = match self {
            Precision::Safe => DType::F32,
            Precision::Standard if d == DType::F16 => DType::F16,
            Precision::Standard => DType::BF16,
            Precision::Aggressive => DType::F8E4M3,
            Precision::Deterministic => return None,
        };
        (want != d).then_some(want)
    }

    /// The accumulation dtype of matmuls.
    pub fn accumulator(self) -> DType {
        match self {
            Precision::Aggressive => DType::BF16,
            _ => DType::F32,
        }
    }

    /// The loss scaling training should use.
    pub fn loss_scaling(self) -> LossScaling {
        match self {
            Precision::Standard | Precision::Aggressive => LossScaling::Dynamic,
            Precision::Safe | Precision::Deterministic => LossScaling::None,
        }
    }

    /// The numerics policy of every reduction.
    pub fn policy(self) -> NumericsPolicy {
        match self {
            Precision::Deterministic => NumericsPolicy::Deterministic,
            _ => NumericsPolicy::Fast,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
