//! Exact (erf-based) GELU: `gelu(x) = 0.5 x (1 + erf(x/√2)) = x Φ(x) = 0.5 x erfc(-x/√2)`.
//!
//! With `a = |x|` and `c = Φ(-a) = 0.5 erfc(a/√2)`: `x < 0 -> x c` (no cancellation, so the
//! negative tail keeps relative accuracy, e.g. gelu(-5) ~ -1.4e-6), `x >= 0 -> x - x c`.
//!
//! * Central range `a < 4`: `c` is a degree-7 polynomial in `u = 2a - (j + 1/2)`,
//!   `j = ⌊2a⌋`, with its own coefficients on each of the 8 intervals `[j/2, (j+1)/2)`
//!   (Chebyshev interpolants of `c`, relative error below 1.2e-7 with the coefficients
//!   rounded to f32). No division and no `exp`: 7 multiply-adds, and in the SIMD kernels
//!   ([`super::gelu_simd`]) one 8-entry register permute per coefficient.
//! * Tail `a >= 4` (also `±inf`, NaN): `c = erfcx(a/√2) · exp(-a²/2)`, [`tail`]. `a²` is
//!   formed exactly (hi + lo) and fed into the Cody–Waite reduction; `erfcx` is evaluated
//!   directly in `a` (√2 folded into the coefficients); on the negative side the prefactor is
//!   applied before the final `2^n` scale so subnormal results are rounded only once.
//!
//! Every instantiation computes the same IEEE operations per element, so the SIMD kernels
//! (which run the tail only for vectors with a lane outside the central range) equal
//! [`gelu1`] bit for bit under the same [`Arith`] flavour.

use super::arith::Arith;
use super::erf::{Q, q_poly};
use super::exp::{exp_finish, exp_reduce};

/// End of the central range: `|x| < A0` takes the per-interval polynomial.
pub(crate) const A0: f32 = 4.0;
/// Intervals per unit of `|x|` (a power of two, so `|x| * S` is exact).
pub(crate) const S: f32 = 2.0;
/// Central-range coefficients: `CT[k][j]` multiplies `u^k` on interval `j`
/// (`Φ(-a)` interpolated at the 8 Chebyshev nodes of `u ∈ [-1/2, 1/2]`).
pub(crate) const CT: [[f32; 8]; 8] = [
    [
        0.40129366517066956,
        0.22662734985351562,
        0.10564977675676346,
        0.040059156715869904,
        0.012224473059177399,
        0.0029797633178532124,
        0.0005770250572822988,
        8.84172841324471e-05,
    ],
    [
        -0.19333405792713165,
        -0.15056870877742767,
        -0.09132454544305801,
        -0.04313866049051285,
        -0.015869826078414917,
        -0.004546781070530415,
        -0.0010145240230485797,
        -0.0001762978354236111,
    ],
    [
        0.01208337489515543,
        0.028231630101799965,
        0.028538919985294342,
        0.018873166292905807,
        0.00892677716910839,
        0.00312591134570539,
        0.0008243003976531327,
        0.00016527922707609832,
    ],
    [
        0.007552111055701971,
        0.0027447426691651344,
        -0.002140418393537402,
        -0.0037072286941111088,
        -0.002686298917979002,
        -0.0012432605726644397,
        -0.00040422435267828405,
        -9.595375013304874e-05,
    ],
    [
        -0.0007394063286483288,
        -0.0014335488667711616,
        -0.000854700745549053,
        2.451965156069491e-05,
        0.00038356249569915235,
        0.00029713931144215167,
        0.00012987831723876297,
        3.8091737224021927e-05,
    ],
    [
        -0.00026470443117432296,
        4.586274371831678e-06,
        0.0001870902196969837,
        0.00013472310092765838,
        1.4437502613873221e-05,
        -3.508655936457217e-05,
        -2.7050660719396546e-05,
        -1.0686571840778925e-05,
    ],
    [
        2.970672539959196e-05,
        4.693104710895568e-05,
        9.125641554419417e-06,
        -2.011461947404314e-05,
        -1.542841891932767e-05,
        -1.9587787392083555e-06,
        2.9455875392159214e-06,
        2.06948175218713e-06,
    ],
    [
        7.2575867307023145e-06,
        -2.6254811018588953e-06,
        -6.303841473709326e-06,
        -1.4677401622975594e-06,
        2.0275065253372304e-06,
        1.407753188686911e-06,
        1.172138155425273e-07,
        -2.3345359068116522e-07,
    ],
];

/// |x| clamp of the tail: x^2/2 = 103.68 keeps `exp` in range, and |gelu(x)| < 4e-46
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

/// Element kernel for [`super::gelu`]: the central polynomial for `|x| < A0`, else [`tail`].
#[inline(always)]
pub(crate) fn gelu1<A: Arith>(x: f32) -> f32 {
    let ax = f32::from_bits(x.to_bits() & 0x7FFF_FFFF);
    if ax < A0 {
        central::<A>(x, ax)
    } else {
        tail::<A>(x)
    }
}

/// `gelu(x)` for `ax = |x| < A0`.
#[inline(always)]
pub(crate) fn central<A: Arith>(x: f32, ax: f32) -> f32 {
    let v = ax * S;
    let j = (v as i32 & 7) as usize;
    let u = v - (j as f32 + 0.5);
    let mut c = CT[7][j];
    for k in (0..7).rev() {
        c = A::fma(c, u, CT[k][j]);
    }
    if x.is_sign_negative() {
        x * c
    } else {
        A::fma(-x, c, x)
    }
}

/// `gelu(x)` through `erfcx` and `exp` (any `x`; [`gelu1`] uses it for `|x| >= A0`).
#[inline(always)]
pub(crate) fn tail<A: Arith>(x: f32) -> f32 {
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
