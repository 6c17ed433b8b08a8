//! Exact (erf-based) GELU: `gelu(x) = 0.5 x (1 + erf(x/√2)) = 0.5 x erfc(-x/√2)`.
//!
//! With `a = |x|`, `c = erfc(a/√2) = erfcx(a/√2) * exp(-a²/2)`:
//! `x < 0 -> 0.5 x c` (no cancellation, so the negative tail keeps relative
//! accuracy, e.g. gelu(-5) ~ -1.4e-6), `x >= 0 -> 0.5 x (2 - c)`.
//! `a²` is formed exactly (hi + lo) and fed into the Cody–Waite reduction;
//! `erfcx` is evaluated directly in `a` (√2 folded into the coefficients);
//! on the negative side the prefactor is applied before the final `2^n`
//! scale so subnormal results are rounded only once.

use super::arith::Arith;
use super::erf::{Q, q_poly};
use super::exp::{exp_finish, exp_reduce};

/// |x| clamp: x^2/2 = 103.68 keeps `exp` in range, and |gelu(x)| < 4e-46
/// (rounds to 0) for x <= -14.4.
const XMAX: f32 = 14.4;
/// 3·√2: `t = (z-3)/(z+3) = (a - 3√2)/(a + 3√2)` for `z = a/√2`.
const C: f32 = 3.0 * core::f32::consts::SQRT_2;
/// `√2·Q`, so that `erfcx(a/√2) = QG(t) / (a + 3√2)`.
const QG: [f32; 10] = {
    let mut q = Q;
    let mut i = 0;
    while i < 10 {
        q[i] *= core::f32::consts::SQRT_2;
        i += 1;
    }
    q
};

/// Element kernel for [`super::gelu`].
#[inline(always)]
pub(crate) fn gelu1<A: Arith>(x: f32) -> f32 {
    let ax = f32::from_bits(x.to_bits() & 0x7FFF_FFFF);
    let a = if ax > XMAX { XMAX } else { ax }; // NaN passes through
    // erfcx(a/√2)
    let r = 1.0 / (a + C);
    let t = (a - C) * r;
    let cx = q_poly::<A>(&QG, t) * r;
    // exp(-a²/2), a² = h + l exactly.
    let (h, l) = A::two_prod(a, a);
    let (e_r, e_k) = exp_reduce::<A>(-0.5 * h);
    let e_r = A::fma(l, -0.5, e_r);
    // Clamped x on the negative side so that -inf * 0 never happens.
    let xc = if x < -XMAX { -XMAX } else { x };
    let half = 0.5 * xc;
    let neg = x < 0.0;
    let pre = if neg { half * cx } else { cx };
    let c = exp_finish::<A>(e_r, e_k, pre); // neg: gelu itself; else erfc
    if neg { c } else { half * (2.0 - c) }
}
