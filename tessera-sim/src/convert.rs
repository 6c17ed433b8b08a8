//! `cvt`: integer widths, float ↔ integer, and float narrowing with exact IEEE
//! round-to-nearest-even (f16/bf16 through the `half` crate, fp8 e4m3/e5m2 with `.satfinite`
//! per the OCP FP8 formats).

use crate::module::ir::{FRound, IRound, Ty};
use half::{bf16, f16};

/// Sign-extends the low `bits` of `v`.
pub(crate) fn sx(v: u64, bits: u32) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        ((v << (64 - bits)) as i64) >> (64 - bits)
    }
}

/// Zero-extends the low `bits` of `v`.
pub(crate) fn zx(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

pub(crate) fn f32_of(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

/// f32 result bits; NaNs are canonical (`0x7fffffff`), as PTX arithmetic produces them.
pub(crate) fn bits_f32(x: f32) -> u64 {
    if x.is_nan() {
        0x7fff_ffff
    } else {
        x.to_bits() as u64
    }
}

/// `.ftz`: subnormals become zero of the same sign.
pub(crate) fn ftz(x: f32) -> f32 {
    if x.is_subnormal() {
        if x.is_sign_negative() { -0.0 } else { 0.0 }
    } else {
        x
    }
}

pub(crate) fn iround(x: f64, r: IRound) -> f64 {
    match r {
        IRound::Rni => x.round_ties_even(),
        IRound::Rzi => x.trunc(),
        IRound::Rmi => x.floor(),
        IRound::Rpi => x.ceil(),
    }
}

fn float_in(t: Ty, v: u64) -> Option<f64> {
    Some(match t {
        Ty::F32 => f32_of(v) as f64,
        Ty::F64 => f64::from_bits(v),
        Ty::F16 => f16::from_bits(v as u16).to_f64(),
        Ty::BF16 => bf16::from_bits(v as u16).to_f64(),
        _ => return None,
    })
}

/// `cvt.<rnd>.<dst>.<src>`; `Err` names an unsupported combination.
pub(crate) fn cvt(
    dst: Ty,
    src: Ty,
    rnd: FRound,
    flush: bool,
    sat: bool,
    v: u64,
) -> Result<u64, String> {
    let dint = !dst.is_float() && dst != Ty::Pred;
    let sint = !src.is_float() && src != Ty::Pred;
    let (db, sb) = (dst.bits(), src.bits());
    if dint && sint {
        let x: i128 = if src.signed() {
            sx(v, sb) as i128
        } else {
            zx(v, sb) as i128
        };
        let x = if sat {
            let (lo, hi): (i128, i128) = if dst.signed() {
                (-(1i128 << (db - 1)), (1i128 << (db - 1)) - 1)
            } else {
                (0, (1i128 << db) - 1)
            };
            x.clamp(lo, hi)
        } else {
            x
        };
        return Ok(zx(x as u64, db));
    }
    if sint && !dint {
        if rnd != FRound::Rn {
            return Err("int -> float needs .rn".into());
        }
        let (s, u) = (sx(v, sb), zx(v, sb));
        return Ok(match dst {
            Ty::F32 => bits_f32(if src.signed() { s as f32 } else { u as f32 }),
            Ty::F64 => (if src.signed() { s as f64 } else { u as f64 }).to_bits(),
            _ => return Err(format!("int -> {dst:?}")),
        });
    }
    let x = float_in(src, v).ok_or_else(|| format!("cvt from {src:?}"))?;
    let x = if flush && src == Ty::F32 {
        ftz(x as f32) as f64
    } else {
        x
    };
    if dint {
        let FRound::Int(r) = rnd else {
            return Err("float -> int needs .rni/.rzi/.rmi/.rpi".into());
        };
        let y = iround(x, r);
        // `as` saturates and maps NaN to 0, as PTX's float-to-integer conversion does.
        return Ok(match dst {
            Ty::S8 => zx(y as i8 as u64, 8),
            Ty::S16 => zx(y as i16 as u64, 16),
            Ty::S32 => zx(y as i32 as u64, 32),
            Ty::S64 => y as i64 as u64,
            Ty::U8 | Ty::B8 => y as u8 as u64,
            Ty::U16 | Ty::B16 => y as u16 as u64,
            Ty::U32 | Ty::B32 => y as u32 as u64,
            Ty::U64 | Ty::B64 => y as u64,
            _ => return Err(format!("float -> {dst:?}")),
        });
    }
    // float -> float
    let x = match rnd {
        FRound::Int(r) => iround(x, r),
        _ => x,
    };
    let x = if sat && matches!(dst, Ty::F32 | Ty::F64) {
        if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
    } else {
        x
    };
    Ok(match dst {
        Ty::F32 => {
            let widening = matches!(src, Ty::F16 | Ty::BF16 | Ty::F32);
            if !widening && rnd == FRound::None {
                return Err("f64 -> f32 needs a rounding modifier".into());
            }
            let y = x as f32; // f64 -> f32 `as` rounds to nearest even
            bits_f32(if flush { ftz(y) } else { y })
        }
        Ty::F64 => x.to_bits(),
        Ty::F16 | Ty::BF16 => {
            if src != Ty::F32 || rnd != FRound::Rn {
                return Err(format!("cvt to {dst:?} is supported from .f32 with .rn"));
            }
            narrow16(dst, x as f32, sat, false) as u64
        }
        _ => return Err(format!("cvt to {dst:?}")),
    })
}

/// f32 → f16/bf16 bits, round-to-nearest-even; `satfinite` clamps ±Inf/overflow to ±MAX;
/// `relu` maps negatives to +0 (NaN stays NaN).
pub(crate) fn narrow16(dst: Ty, x: f32, satfinite: bool, relu: bool) -> u16 {
    let x = if relu && !x.is_nan() && x < 0.0 {
        0.0
    } else {
        x
    };
    match dst {
        Ty::F16 | Ty::F16x2 => {
            let h = f16::from_f32(x);
            if satfinite && h.is_infinite() {
                if x < 0.0 {
                    f16::MIN.to_bits()
                } else {
                    f16::MAX.to_bits()
                }
            } else if h.is_nan() {
                0x7fff
            } else {
                h.to_bits()
            }
        }
        _ => {
            let h = bf16::from_f32(x);
            if satfinite && h.is_infinite() {
                if x < 0.0 {
                    bf16::MIN.to_bits()
                } else {
                    bf16::MAX.to_bits()
                }
            } else if h.is_nan() {
                0x7fff
            } else {
                h.to_bits()
            }
        }
    }
}

/// f32 → an fp8 byte (e4m3: `ebits = 4, mbits = 3`; e5m2: `5, 2`) with `.rn.satfinite`:
/// round to nearest even, overflow and ±Inf saturate to ±max finite, NaN → `0x7f`.
pub(crate) fn to_fp8(x: f32, e4m3: bool) -> u8 {
    let (ebits, mbits, max) = if e4m3 {
        (4i32, 3i32, 448.0f64)
    } else {
        (5, 2, 57344.0)
    };
    let max_bits: u8 = if e4m3 { 0x7e } else { 0x7b };
    if x.is_nan() {
        return 0x7f;
    }
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = (x as f64).abs();
    if a == 0.0 {
        return sign;
    }
    let bias = (1 << (ebits - 1)) - 1;
    let emin = 1 - bias;
    let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
    let q = 2f64.powi(e - mbits);
    let r = (a / q).round_ties_even();
    let v = r * q;
    if v > max || a.is_infinite() {
        return sign | max_bits;
    }
    if v == 0.0 {
        return sign;
    }
    let ve = ((v.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    if ve < emin {
        return sign | (v / 2f64.powi(emin - mbits)) as u8;
    }
    let mant = (v / 2f64.powi(ve - mbits)) as i32 - (1 << mbits);
    sign | (((ve + bias) << mbits) | mant) as u8
}

/// An fp8 byte → f16 bits (exact).
pub(crate) fn fp8_to_f16(b: u8, e4m3: bool) -> u16 {
    let (ebits, mbits) = if e4m3 { (4, 3) } else { (5, 2) };
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b & 0x7f) >> mbits) as i32;
    let m = (b & ((1 << mbits) - 1)) as i32;
    let bias = (1 << (ebits - 1)) - 1;
    if e4m3 && b & 0x7f == 0x7f {
        return 0x7fff;
    }
    if !e4m3 && e == (1 << ebits) - 1 {
        return if m == 0 {
            if sign < 0.0 { 0xfc00 } else { 0x7c00 }
        } else {
            0x7fff
        };
    }
    let v = if e == 0 {
        m as f64 * 2f64.powi(1 - bias - mbits)
    } else {
        (m + (1 << mbits)) as f64 * 2f64.powi(e - bias - mbits)
    };
    f16::from_f64(sign * v).to_bits()
}

/// `cvt.rna.tf32.f32`: round to the nearest tf32 (10 mantissa bits), ties away from zero;
/// the result is an f32 bit pattern with the low 13 bits clear. NaN stays NaN.
pub(crate) fn to_tf32(x: u32) -> u32 {
    if f32::from_bits(x).is_nan() {
        return 0x7fff_ffff;
    }
    if x & 0x7f80_0000 == 0x7f80_0000 {
        return x; // ±Inf
    }
    // on the magnitude bits, adding half an ulp then truncating rounds ties away from zero
    // (a carry into the exponent is the correct next binade, or ±Inf)
    ((x & 0x7fff_ffff) + 0x1000) & 0x7fff_e000 | (x & 0x8000_0000)
}

/// `cvt.rn[.satfinite][.relu].{bf16x2,f16x2,e4m3x2,e5m2x2}.f32 d, a, b` (a goes to the high
/// half), `cvt.rn.f16x2.{e4m3x2,e5m2x2} d, a` and `cvt.rna.tf32.f32 d, a`.
pub(crate) fn cvt_pack(dst: Ty, src: Ty, relu: bool, a: u64, b: u64) -> u64 {
    match (dst, src) {
        (Ty::Tf32, _) => to_tf32(a as u32) as u64,
        (Ty::BF16x2 | Ty::F16x2, Ty::F32) => {
            ((narrow16(dst, f32_of(a), false, relu) as u64) << 16)
                | narrow16(dst, f32_of(b), false, relu) as u64
        }
        (Ty::E4M3x2 | Ty::E5M2x2, _) => {
            let e4 = dst == Ty::E4M3x2;
            let r = |v: u64| {
                let x = f32_of(v);
                to_fp8(if relu && x < 0.0 { 0.0 } else { x }, e4) as u64
            };
            (r(a) << 8) | r(b)
        }
        (_, s) => {
            let e4 = s == Ty::E4M3x2;
            ((fp8_to_f16((a >> 8) as u8, e4) as u64) << 16) | fp8_to_f16(a as u8, e4) as u64
        }
    }
}
