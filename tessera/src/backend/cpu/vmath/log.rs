//! Natural logarithm: exponent/mantissa split with the mantissa folded into
//! `[sqrt(1/2), sqrt(2))`, degree-8 polynomial for `log1p(f)` (Cephes `logf`
//! coefficients), `e * ln2` added in two parts. Subnormal inputs are
//! pre-scaled by 2^23. Branch-free; specials fixed by final selects.

use super::arith::Arith;

const SQRT_HALF: f32 = core::f32::consts::FRAC_1_SQRT_2;
const LN2_HI: f32 = 0.693_359_375;
const LN2_LO: f32 = -2.121_944_4e-4;

/// Element kernel for [`super::log`].
#[inline(always)]
pub(crate) fn log1<A: Arith>(x: f32) -> f32 {
    // Subnormals: scale into the normal range and correct the exponent.
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bias: i32 = if sub { 126 + 23 } else { 126 };
    let bits = xs.to_bits();
    // xs = m * 2^e with m in [0.5, 1).
    let mut e = ((bits >> 23) & 0xFF) as i32 - bias;
    let m = f32::from_bits((bits & 0x007F_FFFF) | 0x3F00_0000);
    let lowm = m < SQRT_HALF;
    e -= lowm as i32;
    let f = if lowm { m + m } else { m } - 1.0; // exact
    let z = f * f;
    // Degree-8 polynomial, Estrin's scheme.
    let p01 = A::fma(-2.499_999_4e-1, f, 3.333_333_1e-1);
    let p23 = A::fma(-1.666_805_8e-1, f, 2.000_071_4e-1);
    let p45 = A::fma(-1.242_014_1e-1, f, 1.424_932_3e-1);
    let p67 = A::fma(-1.151_461e-1, f, 1.167_699_9e-1);
    let z2 = z * z;
    let p03 = A::fma(p23, z, p01);
    let p47 = A::fma(p67, z, p45);
    let p07 = A::fma(p47, z2, p03);
    let p = A::fma(7.037_683_6e-2, z2 * z2, p07);
    let fe = e as f32;
    let mut y = p * f * z;
    y = A::fma(fe, LN2_LO, y);
    y = A::fma(z, -0.5, y);
    let mut r = f + y;
    r = A::fma(fe, LN2_HI, r);
    // Specials: +inf and NaN map to themselves, 0 -> -inf, negative -> NaN.
    let r = if x < f32::INFINITY { r } else { x };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    if x < 0.0 { f32::NAN } else { r }
}
