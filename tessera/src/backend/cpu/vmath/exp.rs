//! Two `exp` sequences, branch-free, both applying the `2^n` scale as two multiplies (the
//! first exact, the result normal), so results in the subnormal range are rounded once and
//! correctly and a NaN keeps its payload:
//!
//! * [`exp1`] (`vmath::exp`): `x = (16n + j)·ln2/16 + r` with `|r| <= ln2/32` (Cody–Waite,
//!   `ln2/16` split in two), `e^x = 2^n · T[j]·(1 + q(r))` with `T[j] = 2^(j/16)` from a
//!   16-entry table and `q` a degree-3 polynomial; within 1 ulp (tests).
//! * [`exp1_canonical`] (`vmath::exp_fused`, `tessera_ir::canonical::exp`) and the pieces the
//!   other functions build on ([`exp_core`], [`exp_mid`], [`exp_reduce`] / [`exp_finish`]):
//!   `x = n·ln2 + r` with `|r| <= ln2/2`, a degree-5 minimax polynomial (Cephes `expf`
//!   coefficients).

use super::arith::Arith;

pub(super) const LOG2E: f32 = core::f32::consts::LOG2_E;
/// ln 2 split: `LN2_HI` has 9 significant bits, so `n * LN2_HI` is exact.
pub(super) const LN2_HI: f32 = 0.693_359_375;
pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
pub(super) const SHIFTER: f32 = 12_582_912.0;
/// The polynomial's coefficients, highest degree first (Horner order).
pub(super) const POLY: [f32; 6] = [
    1.987_569_2e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    5.000_000_1e-1,
];
/// Inputs are clamped to this range (exp(89) overflows, exp(-104) underflows
/// to zero), which keeps every intermediate integer small.
pub(crate) const EXP_HI: f32 = 89.0;
pub(crate) const EXP_LO: f32 = -104.0;

/// `e^r` for `|r| <= ln2/2 (+ tiny)`, ~1 ulp (Horner; these kernels are
/// FMA-throughput bound, so the fewest operations win).
#[inline(always)]
fn exp_poly<A: Arith>(r: f32) -> f32 {
    let mut p = POLY[0];
    p = A::fma(p, r, POLY[1]);
    p = A::fma(p, r, POLY[2]);
    p = A::fma(p, r, POLY[3]);
    p = A::fma(p, r, POLY[4]);
    p = A::fma(p, r, POLY[5]);
    A::fma(p, r * r, r) + 1.0
}

/// Range reduction for `x` in `[EXP_LO, EXP_HI]` (or NaN): returns `(r, k)`
/// with `x = n ln2 + r`, `|r| <= ~0.35`, and `n` encoded in `k`'s bits.
#[inline(always)]
pub(crate) fn exp_reduce<A: Arith>(x: f32) -> (f32, f32) {
    let k = A::fma(x, LOG2E, SHIFTER);
    let n = k - SHIFTER;
    let r = A::fma(n, -LN2_HI, x);
    (A::fma(n, -LN2_LO, r), k)
}

/// `pre * e^r * 2^n` from [`exp_reduce`]'s `(r, k)`: two multiplies, by `2^n1`
/// (`n1 = n >> 1`) and by `2^(n - n1)`. Requires `pre * e^r * 2^n1` to be normal whenever
/// `n != 0` (true for `pre = 1` and for any `|pre| >= 2^-40`), so the first multiply is
/// exact and the second rounds once; `pre` may be anything when `n = 0`. A NaN `p` (from a
/// NaN argument or `pre`) stays NaN with its payload.
#[inline(always)]
pub(crate) fn exp_finish<A: Arith>(r: f32, k: f32, pre: f32) -> f32 {
    let p = pre * exp_poly::<A>(r);
    // n in [-150, 129]; `a = n + 254`: `a >> 1 = n1 + 127` and `a - (a >> 1) = n2 + 127`,
    // the exponent fields of `2^n1` and `2^n2` (`tessera_ir::canonical::exp`'s sequence).
    let a = (k.to_bits() as i32).wrapping_sub(EXP_SCALE_BIAS);
    let e1 = a >> 1;
    let e2 = a.wrapping_sub(e1);
    p * f32::from_bits((e1 as u32) << 23) * f32::from_bits((e2 as u32) << 23)
}

/// `0x4B40_0000 − 254`: [`exp_reduce`]'s `k` bits minus this are `n + 254`.
const EXP_SCALE_BIAS: i32 = 0x4B40_0000 - 254;

/// `exp(hi + lo)` where `lo` is a small correction (|lo| <= ulp(hi)); pass
/// `lo = -0.0` for a plain `exp(hi)` (the add folds away). Full range:
/// overflow to `+inf`, gradual underflow through the subnormals to `0`,
/// NaN propagates.
#[inline(always)]
pub(crate) fn exp_core<A: Arith>(hi: f32, lo: f32) -> f32 {
    // Clamp (comparisons are false for NaN, so NaN passes through).
    let x = if hi < EXP_LO { EXP_LO } else { hi };
    let x = if x > EXP_HI { EXP_HI } else { x };
    exp_unclamped::<A>(x, lo)
}

/// [`exp_core`] without the clamp: the caller guarantees
/// `EXP_LO <= hi <= EXP_HI` (or NaN).
#[inline(always)]
pub(crate) fn exp_unclamped<A: Arith>(x: f32, lo: f32) -> f32 {
    let (r, k) = exp_reduce::<A>(x);
    exp_finish::<A>(r + lo, k, 1.0)
}

/// `exp(x)` for arguments known to lie in `[-87, 87]` (one multiply by `2^n`, exact there;
/// no subnormal handling). NaN propagates with its payload; callers clamp.
#[inline(always)]
pub(crate) fn exp_mid<A: Arith>(x: f32) -> f32 {
    let (r, k) = exp_reduce::<A>(x);
    let p = exp_poly::<A>(r);
    // n in [-126, 126]: `n + 127` is `2^n`'s exponent field.
    let e = (k.to_bits() as i32).wrapping_sub(0x4B40_0000 - 127);
    p * f32::from_bits((e as u32) << 23)
}

/// Element kernel for [`super::exp_fused`]: `tessera_ir::canonical::exp`'s sequence.
#[inline(always)]
pub(crate) fn exp1_canonical<A: Arith>(x: f32) -> f32 {
    exp_core::<A>(x, -0.0)
}

/// `16 / ln 2`.
pub(super) const T_LOG2E: f32 = 23.083_120_654_223_414;
/// `ln2/16` split: `T_LN2_HI = 2839·2^-16` has 12 significant bits, so `m · T_LN2_HI` is
/// exact for `|m| < 2^12` and `x - m·T_LN2_HI` is exact.
pub(super) const T_LN2_HI: f32 = 0.043_319_702_148_437_5;
/// `ln2/16 - T_LN2_HI`.
pub(super) const T_LN2_LO: f32 = 1.996_636_559_5e-6;
/// `e^r - 1 ≈ r + r²·(T_C2 + T_C3·r)` on `|r| <= ln2/32` (relative error of `e^r`
/// 1.6e-9 in f64).
pub(super) const T_C2: f32 = 0.500_016_274_841_592_1;
/// See [`T_C2`].
pub(super) const T_C3: f32 = 0.166_673_233_039_846_63;
/// `2^(j/16)` rounded to f32 (each correctly rounded), as bits.
pub(super) const T_BITS: [u32; 16] = [
    0x3F80_0000,
    0x3F85_AAC3,
    0x3F8B_95C2,
    0x3F91_C3D3,
    0x3F98_37F0,
    0x3F9E_F532,
    0x3FA5_FED7,
    0x3FAD_583F,
    0x3FB5_04F3,
    0x3FBD_08A4,
    0x3FC5_672A,
    0x3FCE_248C,
    0x3FD7_44FD,
    0x3FE0_CCDF,
    0x3FEA_C0C7,
    0x3FF5_257D,
];

/// [`exp1`]'s reduction for `x` in `[EXP_LO, EXP_HI]` (or NaN): `(r, k)` with
/// `x = m·ln2/16 + r`, `|r| <= ~ln2/32`, and `m + 0x0040_0000` in `k`'s low 23 bits (so
/// `k.to_bits() & 15 = m mod 16`).
#[inline(always)]
pub(super) fn exp_t_reduce<A: Arith>(x: f32) -> (f32, f32) {
    let k = A::fma(x, T_LOG2E, SHIFTER);
    let m = k - SHIFTER;
    let r = A::fma(m, -T_LN2_HI, x);
    (A::fma(m, -T_LN2_LO, r), k)
}

/// `T[j]·(1 + q(r)) ≈ 2^(j/16)·e^r`, in `[0.97, 2)`.
#[inline(always)]
pub(super) fn exp_t_poly<A: Arith>(r: f32, t: f32) -> f32 {
    let q = A::fma(T_C3, r, T_C2);
    let e = A::fma(q, r * r, r);
    A::fma(t, e, t)
}

/// Element kernel for [`super::exp`]: clamp to `[EXP_LO, EXP_HI]` (NaN passes),
/// [`exp_t_reduce`], [`exp_t_poly`] with `T[m mod 16]`, then `2^n` (`n = m >> 4`) in two
/// halves: a multiply by `2^n1` (`n1 = n >> 1`; exact, the product stays normal), then one by
/// `2^(n - n1)` (rounds once if the result is subnormal). A NaN `x` gives `y`'s NaN (an
/// integer add to `y`'s exponent field would turn most NaN payloads into numbers).
#[inline(always)]
pub(crate) fn exp1<A: Arith>(x: f32) -> f32 {
    let x = if x < EXP_LO { EXP_LO } else { x };
    let x = if x > EXP_HI { EXP_HI } else { x };
    let (r, k) = exp_t_reduce::<A>(x);
    let t = f32::from_bits(T_BITS[(k.to_bits() & 15) as usize]);
    let y = exp_t_poly::<A>(r, t);
    // m in [-2401, 2054], n in [-151, 128]; `a = m + 4064`: `a >> 4 = n + 254`,
    // `a >> 5 = n1 + 127`.
    let a = (k.to_bits() as i32).wrapping_sub(T_SCALE_BIAS);
    let p1 = a >> 5;
    let p2 = (a >> 4).wrapping_sub(p1);
    y * f32::from_bits((p1 as u32) << 23) * f32::from_bits((p2 as u32) << 23)
}

/// `0x4B40_0000 − 4064`: `k`'s bits minus this are `m + 4064` (see [`exp1`]).
pub(super) const T_SCALE_BIAS: i32 = 0x4B40_0000 - 4064;
