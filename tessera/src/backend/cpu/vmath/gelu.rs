//! Exact (erf-based) GELU: `gelu(x) = 0.5 x (1 + erf(x/√2)) = x Φ(x) = 0.5 x erfc(-x/√2)`.
//!
//! With `a = |x|` and `c = Φ(-a) = 0.5 erfc(a/√2)`: `x < 0 -> x c` (no cancellation, so the
//! negative tail keeps relative accuracy, e.g. gelu(-5) ~ -1.4e-6), `x >= 0 -> x - x c`.
//!
//! * `-4.5 < x < 8` (central range): `c` is a degree-7 polynomial in `u = 2a - (j + 1/2)`,
//!   `j = ⌊2a⌋`, with its own coefficients on each of the 16 intervals `[j/2, (j+1)/2)`
//!   (Chebyshev interpolants of `c`; with the coefficients rounded to f32, relative error
//!   below 1.6e-7 for `a < 4.5`, where a negative `x` needs it, and absolute error below
//!   1e-11 beyond, where `c < 4e-6` only moves `x - x c` by its absolute error). No division
//!   and no `exp`: 7 multiply-adds, and in the SIMD kernels ([`super::gelu_simd`]) one
//!   register permute per coefficient.
//! * `x >= 8` (also `+inf`): `x` itself (`c < 7e-16` rounds away).
//! * `x <= -4.5` (also `-inf`, NaN): `c = erfcx(a/√2) · exp(-a²/2)`, [`tail`]. `a²` is formed
//!   exactly (hi + lo) and fed into the Cody–Waite reduction; `erfcx` is evaluated directly
//!   in `a` (√2 folded into the coefficients); the prefactor is applied before the final
//!   `2^n` scale so subnormal results are rounded only once.
//!
//! Every instantiation computes the same IEEE operations per element, so the SIMD kernels
//! (which run the tail only for vectors with a lane at `x <= -4.5` or NaN) equal [`gelu1`]
//! bit for bit under the same [`Arith`] flavour.

use super::arith::Arith;
use super::erf::{Q, q_poly};
use super::exp::{exp_finish, exp_reduce};

/// The central range is `NEG_END < x < POS_END`.
pub(crate) const NEG_END: f32 = -4.5;
/// From here on `gelu(x) = x`.
pub(crate) const POS_END: f32 = 8.0;
/// Intervals per unit of `|x|` (a power of two, so `|x| * S` is exact).
pub(crate) const S: f32 = 2.0;
/// Central-range coefficients: `CT[k][j]` multiplies `u^k` on interval `j`
/// (`Φ(-a)` interpolated at the 8 Chebyshev nodes of `u ∈ [-1/2, 1/2]`).
pub(crate) const CT: [[f32; 16]; 8] = [
    [
        0.40129366517066956,
        0.22662734985351562,
        0.10564977675676346,
        0.040059156715869904,
        0.012224473059177399,
        0.0029797633178532124,
        0.0005770250572822988,
        8.84172841324471e-05,
        1.0688525435398333e-05,
        1.0170830364586436e-06,
        7.604955243323275e-08,
        4.462164859830864e-09,
        2.0522555876922866e-10,
        7.392198832223418e-12,
        2.0838260045459578e-13,
        4.594497711836931e-15,
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
        -2.3859318389440887e-05,
        -2.514753532523173e-06,
        -2.0642353604216623e-07,
        -1.3196213899391296e-08,
        -6.570006760853175e-10,
        -2.5474672718517333e-11,
        -7.69267895911474e-13,
        -1.8091424354698543e-14,
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
        2.5350589567096904e-05,
        2.986297658935655e-06,
        2.7093736321148754e-07,
        1.89705318121014e-08,
        1.0266650862789106e-09,
        4.29960789194439e-11,
        1.3947109526318835e-12,
        3.506880726024571e-14,
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
        -1.6962487279670313e-05,
        -2.259352640976431e-06,
        -2.2846478486826527e-07,
        -1.7629544046826595e-08,
        -1.0419896057101141e-09,
        -4.7302953221084465e-11,
        -1.6528649109115445e-12,
        -4.452810529694852e-14,
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
        7.953776730573736e-06,
        1.2165049838586128e-06,
        1.385113108653968e-07,
        1.1861278181868329e-08,
        7.692421699623253e-10,
        3.796844436076974e-11,
        1.4315040038764826e-12,
        4.134022903732118e-14,
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
        -2.7447545107861515e-06,
        -4.933041282129125e-07,
        -6.419457321271693e-08,
        -6.165804311564216e-09,
        -4.4242043362174854e-10,
        -2.3910623481171456e-11,
        -9.790328270309345e-13,
        -3.0502859217412456e-14,
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
        7.150947567424737e-07,
        1.5827903609988425e-07,
        2.429835888051457e-08,
        2.684133360020269e-09,
        2.1782851911122947e-10,
        1.3158564515780569e-11,
        5.969986874646005e-13,
        2.0474155140379202e-14,
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
        -1.332264929487792e-07,
        -3.828670003258594e-08,
        -7.046696115509121e-09,
        -8.966360431905684e-10,
        -8.179536908903273e-11,
        -5.462441263204276e-12,
        -2.706463525514735e-13,
        -1.0041132591468317e-14,
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

/// Element kernel for [`super::gelu`]: `x` from `POS_END` on, the central polynomial down
/// to `NEG_END` (exclusive), else [`tail`].
#[inline(always)]
pub(crate) fn gelu1<A: Arith>(x: f32) -> f32 {
    if x >= POS_END {
        x
    } else if x > NEG_END {
        central::<A>(x)
    } else {
        tail::<A>(x)
    }
}

/// `gelu(x)` for `NEG_END < x < POS_END`.
#[inline(always)]
pub(crate) fn central<A: Arith>(x: f32) -> f32 {
    let ax = f32::from_bits(x.to_bits() & 0x7FFF_FFFF);
    let v = ax * S;
    let j = (v as i32 & 15) as usize;
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

/// `gelu(x)` through `erfcx` and `exp` (any `x`; [`gelu1`] uses it for `x <= NEG_END` and NaN).
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
