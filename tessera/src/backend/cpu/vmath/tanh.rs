//! Hyperbolic tangent: odd minimax polynomial for `|x| < 0.625` (Cephes
//! `tanhf` coefficients, keeps relative accuracy for tiny `x`), otherwise
//! `1 - 2 / (exp(2|x|) + 1)` with the sign restored. Both are evaluated and
//! blended (branch-free).

use super::arith::Arith;
use super::exp::exp_mid;

/// Element kernel for [`super::tanh`].
#[inline(always)]
pub(crate) fn tanh1<A: Arith>(x: f32) -> f32 {
    let sign = x.to_bits() & 0x8000_0000;
    let ax = f32::from_bits(x.to_bits() & 0x7FFF_FFFF);
    // Small |x|.
    let z = x * x;
    let mut p = -5.704_988_7e-3;
    p = A::fma(p, z, 2.063_908_9e-2);
    p = A::fma(p, z, -5.373_971_6e-2);
    p = A::fma(p, z, 1.333_144_2e-1);
    p = A::fma(p, z, -3.333_328_2e-1);
    // Built on |x| and the sign restored, so tanh(-0) = -0.
    let small = A::fma(p * z, ax, ax);
    let small = f32::from_bits(small.to_bits() | sign);
    // Large |x|: tanh(10) rounds to 1, so clamp there (NaN passes through).
    let a = if ax > 10.0 { 10.0 } else { ax };
    let e = exp_mid::<A>(a + a);
    let big = 1.0 - 2.0 / (e + 1.0);
    let big = f32::from_bits(big.to_bits() | sign);
    if ax < 0.625 { small } else { big }
}
