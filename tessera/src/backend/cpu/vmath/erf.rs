//! Error function and the shared `erfc` pieces.
//!
//! * `|x| < 1`: `erf(x) = x * P(x^2)`, degree-6 polynomial in `x^2`
//!   (Chebyshev fit, relative error ~1e-9 before rounding).
//! * otherwise, and for `erfc(z)`, `z >= 0`:
//!   `erfc(z) = exp(-z^2) * erfcx(z)` with
//!   `erfcx(z) = Q(t) / (z + 3)`, `t = (z - 3) / (z + 3)`, `Q` a degree-9
//!   polynomial (Chebyshev fit on `z in [0, 12]`, abs error 8e-9 on
//!   `Q in [0.56, 3]`). `z^2` is carried as an exact hi+lo pair into the
//!   Cody–Waite reduction of `exp`, so the tail keeps full relative accuracy
//!   (a single rounded `z^2` would cost `z^2 * 6e-8` relative, ~6e-6 at z=10).
//!
//! Coefficients were fitted with `mpmath.chebyfit` (40 digits).

use super::arith::Arith;
use super::exp::exp_unclamped;

/// `erf(x)` rounds to ±1 for |x| >= 3.92; the erfc argument is clamped here.
const ERF_ZMAX: f32 = 4.5;

/// `Q(t)` coefficients, constant term first.
pub(crate) const Q: [f32; 10] = [
    1.074_006_9,
    -8.833_944_9e-1,
    5.902_285_3e-1,
    -3.104_658_8e-1,
    1.195_268_3e-1,
    -2.684_176_2e-2,
    -1.220_494_7e-3,
    3.086_792_5e-3,
    -4.859_588_5e-4,
    -3.288_561_9e-4,
];

/// `Q(t)`: even and odd halves by Horner in `t^2` (two independent chains,
/// one extra multiply).
#[inline(always)]
pub(crate) fn q_poly<A: Arith>(c: &[f32; 10], t: f32) -> f32 {
    let t2 = t * t;
    let mut e = c[8];
    e = A::fma(e, t2, c[6]);
    e = A::fma(e, t2, c[4]);
    e = A::fma(e, t2, c[2]);
    e = A::fma(e, t2, c[0]);
    let mut o = c[9];
    o = A::fma(o, t2, c[7]);
    o = A::fma(o, t2, c[5]);
    o = A::fma(o, t2, c[3]);
    o = A::fma(o, t2, c[1]);
    A::fma(o, t, e)
}

/// Element kernel for [`super::erf`].
#[inline(always)]
pub(crate) fn erf1<A: Arith>(x: f32) -> f32 {
    let sign = x.to_bits() & 0x8000_0000;
    let ax = f32::from_bits(x.to_bits() & 0x7FFF_FFFF);
    // |x| < 1: odd polynomial.
    let s = x * x;
    let mut p = 7.875_875e-5;
    p = A::fma(p, s, -8.016_864_3e-4);
    p = A::fma(p, s, 5.189_087_4e-3);
    p = A::fma(p, s, -2.685_421_2e-2);
    p = A::fma(p, s, 1.128_359_5e-1);
    p = A::fma(p, s, -3.761_262_7e-1);
    p = A::fma(p, s, 1.128_379_2);
    let small = x * p;
    // |x| >= 1: 1 - erfc(|x|) (NaN passes the clamp).
    let z = if ax > ERF_ZMAX { ERF_ZMAX } else { ax };
    let r = 1.0 / (z + 3.0);
    let t = (z - 3.0) * r;
    let cx = q_poly::<A>(&Q, t) * r;
    let (h, l) = A::two_prod(z, z);
    let big = 1.0 - cx * exp_unclamped::<A>(-h, -l);
    let big = f32::from_bits(big.to_bits() | sign);
    if ax < 1.0 { small } else { big }
}
