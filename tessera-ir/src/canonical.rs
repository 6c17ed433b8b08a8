//! The canonical operation sequences of `deterministic` kernels: what every backend computes,
//! operation for operation, so that results are bit-identical (see
//! [`crate::NumericsPolicy::Deterministic`]). The CPU backend's fused-multiply-add `exp` and
//! the PTX emitter's deterministic `exp` both follow [`exp`] here; tests hold them to it bit
//! for bit.
//!
//! `exp`: Cody–Waite range reduction with `ln 2` split in two, a degree-5 polynomial (Cephes
//! `expf` coefficients) evaluated with fused multiply-adds, and the `2^n` scale applied as two
//! multiplies, by `2^n1` (`n1 = n >> 1`; exact, the product stays normal) and by `2^(n - n1)`,
//! so subnormal results round once and a NaN keeps its payload through both. Inputs are
//! clamped to `[-104, 89]`; NaN propagates. About 1 ulp.

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
pub fn exp(x: f32) -> f32 {
    let (p, k) = reduced(x);
    // n in [-150, 128]; `a = n + 254`: `a >> 1 = n1 + 127` (`n1 = n >> 1`) and
    // `a - (a >> 1) = n2 + 127` (`n2 = n - n1`), the exponent fields of `2^n1` and `2^n2`.
    let a = (k.to_bits() as i32).wrapping_sub(EXP_SCALE_BIAS);
    let e1 = a >> 1;
    let e2 = a.wrapping_sub(e1);
    p * f32::from_bits((e1 as u32) << 23) * f32::from_bits((e2 as u32) << 23)
}

/// [`exp`] up to its `2^n` scale: the clamped input's `k = n + 1.5·2^23` (`n` its integer part
/// in units of ln 2) and the polynomial `p ≈ e^r` of the reduced argument.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn reduced(x: f32) -> (f32, f32) {
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
    (p, k)
}

/// `0x4B40_0000 − 254`: in [`exp`], the bits of `k = n + 1.5·2^23` minus this are `n + 254`.
pub const EXP_SCALE_BIAS: i32 = 0x4B40_0000 - 254;

#[cfg(test)]
mod tests {
    use super::*;

    /// [`exp`] as it was before the two-multiply scale: an integer add of `n1` to the
    /// polynomial's exponent field, then a multiply by `2^n2`.
    fn exp_exponent_add(x: f32) -> f32 {
        let (p, k) = reduced(x);
        let ni = (k.to_bits() as i32).wrapping_sub(0x4B40_0000);
        let n1 = ni >> 1;
        let n2 = ni - n1;
        let scale = f32::from_bits((n2.wrapping_add(127) as u32) << 23);
        f32::from_bits(p.to_bits().wrapping_add((n1 as u32) << 23)) * scale
    }

    fn same_bits(lo: f32, hi: f32, stride: u32) {
        let mut x = lo;
        while x <= hi {
            if !x.is_nan() {
                assert_eq!(exp(x).to_bits(), exp_exponent_add(x).to_bits(), "x = {x:e}");
            }
            let b = x.to_bits();
            // Step away from -inf toward +inf in the float order.
            x = f32::from_bits(if b >> 31 == 1 {
                if b == 0x8000_0000 {
                    0
                } else {
                    b.saturating_sub(stride).max(0x8000_0000)
                }
            } else {
                b + stride
            });
        }
    }

    #[test]
    fn two_multiply_scale_gives_the_exponent_add_bits() {
        // Every f32 at both ends of the clamp range (subnormal results, overflow).
        same_bits(-105.0, -86.0, 1);
        same_bits(86.0, 90.0, 1);
        // Every 61st bit pattern elsewhere, ±inf and ±0 included.
        same_bits(f32::NEG_INFINITY, -86.0, 61);
        same_bits(-86.0, 86.0, 61);
        same_bits(86.0, f32::INFINITY, 61);
        for x in [
            f32::NEG_INFINITY,
            f32::INFINITY,
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -1e-45,
        ] {
            assert_eq!(exp(x).to_bits(), exp_exponent_add(x).to_bits(), "x = {x:e}");
        }
    }

    #[test]
    fn nan_gives_nan_for_every_payload() {
        // The exponent add turned this payload into f32::MAX.
        assert_eq!(
            exp_exponent_add(f32::from_bits(0x7FFF_FFFF)).to_bits(),
            0x7F7F_FFFF
        );
        for payload in (1..0x0080_0000u32)
            .step_by(7)
            .chain([0x0040_0000, 0x007F_FFFF, 1])
        {
            for sign in [0, 0x8000_0000] {
                let x = f32::from_bits(sign | 0x7F80_0000 | payload);
                assert!(exp(x).is_nan(), "x = {:#010x}: {:e}", x.to_bits(), exp(x));
            }
        }
    }
}
