//! The canonical operation sequences of `deterministic` kernels: what every backend computes,
//! operation for operation, so that results are bit-identical (see
//! [`crate::NumericsPolicy::Deterministic`]). The CPU backend's fused-multiply-add `exp` and
//! the PTX emitter's deterministic `exp` both follow [`exp`] here; tests hold them to it bit
//! for bit.
//!
//! `exp`: Cody–Waite range reduction with `ln 2` split in two, a degree-5 polynomial (Cephes
//! `expf` coefficients) evaluated with fused multiply-adds, and the `2^n` scale applied in two
//! halves (an exponent-field integer add, then one multiply) so subnormal results round once.
//! Inputs are clamped to `[-104, 89]`; NaN propagates. About 1 ulp.

/// `log2(e)`.
pub const LOG2E: f32 = std::f32::consts::LOG2_E;
/// The high part of `ln 2` (9 significant bits, so `n · LN2_HI` is exact).
pub const LN2_HI: f32 = 0.693_359_375;
/// `ln 2 − LN2_HI`.
pub const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 · 2^23`: adding it rounds to an integer held in the low mantissa bits.
pub const SHIFTER: f32 = 12_582_912.0;
/// The clamp range of `exp`'s input.
pub const EXP_HI: f32 = 89.0;
/// See [`EXP_HI`].
pub const EXP_LO: f32 = -104.0;
/// The polynomial's coefficients, highest degree first: `p = c0; p = fma(p, r, c_i)`.
pub const EXP_POLY: [f32; 6] = [
    1.987_569_2e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    5.000_000_1e-1,
];

/// `e^x` by the canonical sequence (the reference every backend matches bit for bit).
///
/// ```
/// let y = tessera_ir::canonical::exp(1.0);
/// assert!((y as f64 - 1f64.exp()).abs() < 2e-7 * 1f64.exp());
/// assert_eq!(tessera_ir::canonical::exp(f32::NEG_INFINITY), 0.0);
/// assert!(tessera_ir::canonical::exp(f32::NAN).is_nan());
/// ```
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn exp(x: f32) -> f32 {
    // Clamp (comparisons are false for NaN, so NaN passes through).
    let x = if x < EXP_LO { EXP_LO } else { x };
    let x = if x > EXP_HI { EXP_HI } else { x };
    let k = x.mul_add(LOG2E, SHIFTER);
    let n = k - SHIFTER;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let p = p.mul_add(r * r, r) + 1.0;
    let ni = (k.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let scale = f32::from_bits((n2.wrapping_add(127) as u32) << 23);
    f32::from_bits(p.to_bits().wrapping_add((n1 as u32) << 23)) * scale
}
