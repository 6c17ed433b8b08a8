//! Transcendental functions as PTX instruction sequences on f32 registers, accurate to a few
//! ulp (or ~1e-6 relative where stated), shared by every emitter.
//!
//! - `exp`: `ex2.approx` of `x·log2e` with the product's rounding error folded back in
//!   (`fma` remainder + the low part of log2e), ≈ 2–3 ulp.
//! - `log`: `lg2.approx · ln2` (absolute error ≤ 2⁻²² near 1, relative elsewhere).
//! - `tanh`: odd Taylor polynomial for |x| < 0.3, else `1 − 2/(e^{2|x|} + 1)` with the sign.
//! - `sigmoid`: `1/(1 + e^{−x})` with `div.rn` (0 and 1 at the extremes, never NaN).
//! - `gelu`: `0.5·x·erfc(−x/√2)` with the Numerical-Recipes `erfcc` Chebyshev fit (fractional
//!   error < 1.2e-7) and the exponent's `z²` error compensated, so the negative tail keeps
//!   ~1e-6 relative accuracy. `erfc(−x/√2)` is `1 + erf(x/√2)` taken from `erfc(|z|)` on the
//!   side where it is small, so there is no `1 + erf` cancellation for negative `x`.
//! - `binary`: f32 arithmetic with `.rn` (so ptxas does not contract into FMAs), `div.rn`, and
//!   NaN-propagating `max`/`min`.
//!
//! Infinities: `exp(−inf) = 0`, `exp(+inf) = +inf`, `sigmoid(±inf) = 1, 0`, `tanh(±inf) = ±1`,
//! `gelu(−inf) = 0`, `gelu(+inf) = +inf`; NaN in gives NaN out.

use super::asm::{Asm, Reg, flit};
use crate::DType;
use crate::graph::{BinaryOp, UnaryOp};

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// log2(e) − f32(log2(e)).
const LOG2E_LO: f32 = 1.925_963e-8;
const LN2: f32 = std::f32::consts::LN_2;

/// `e^x`.
pub fn exp(a: &mut Asm, x: Reg) -> Reg {
    let (t, e, e2, y, y2) = (a.f(), a.f(), a.f(), a.f(), a.f());
    a.i(format!("mul.rn.f32 {t}, {x}, {}", flit(LOG2E)));
    let nt = a.f();
    a.i(format!("neg.f32 {nt}, {t}"));
    a.i(format!("fma.rn.f32 {e}, {x}, {}, {nt}", flit(LOG2E)));
    a.i(format!("fma.rn.f32 {e2}, {x}, {}, {e}", flit(LOG2E_LO)));
    a.i(format!("ex2.approx.f32 {y}, {t}"));
    a.i(format!("mul.rn.f32 {e2}, {e2}, {}", flit(LN2)));
    a.i(format!("fma.rn.f32 {y2}, {y}, {e2}, {y}"));
    // Keep inf/0 exact where the correction turns them into NaN (x = ±inf, or |x·log2e|
    // overflowing); a NaN x gives a NaN y anyway.
    let p = a.p();
    a.i(format!("testp.notanumber.f32 {p}, {y2}"));
    a.i(format!("selp.f32 {y2}, {y}, {y2}, {p}"));
    y2
}

/// `e^x` by the canonical sequence of deterministic kernels ([`crate::canonical::exp`]):
/// the same IEEE operations in the same order, so the result is the CPU's bit for bit.
pub fn exp_canonical(a: &mut Asm, x: Reg) -> Reg {
    use crate::canonical::{
        EXP_HI, EXP_LO, EXP_POLY, EXP_SCALE_BIAS, LN2_HI, LN2_LO, LOG2E, SHIFTER,
    };
    // Clamp; NaN passes (the comparisons are false).
    let (p, c0) = (a.p(), a.f());
    a.i(format!("setp.lt.f32 {p}, {x}, {}", flit(EXP_LO)));
    a.i(format!("selp.f32 {c0}, {}, {x}, {p}", flit(EXP_LO)));
    let (q, c1) = (a.p(), a.f());
    a.i(format!("setp.gt.f32 {q}, {c0}, {}", flit(EXP_HI)));
    a.i(format!("selp.f32 {c1}, {}, {c0}, {q}", flit(EXP_HI)));
    let (k, n, r0, r) = (a.f(), a.f(), a.f(), a.f());
    a.i(format!(
        "fma.rn.f32 {k}, {c1}, {}, {}",
        flit(LOG2E),
        flit(SHIFTER)
    ));
    a.i(format!("sub.rn.f32 {n}, {k}, {}", flit(SHIFTER)));
    a.i(format!("fma.rn.f32 {r0}, {n}, {}, {c1}", flit(-LN2_HI)));
    a.i(format!("fma.rn.f32 {r}, {n}, {}, {r0}", flit(-LN2_LO)));
    let mut poly = a.fconst(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        let t = a.f();
        a.i(format!("fma.rn.f32 {t}, {poly}, {r}, {}", flit(*c)));
        poly = t;
    }
    let (r2, t, p1) = (a.f(), a.f(), a.f());
    a.i(format!("mul.rn.f32 {r2}, {r}, {r}"));
    a.i(format!("fma.rn.f32 {t}, {poly}, {r2}, {r}"));
    a.i(format!("add.rn.f32 {p1}, {t}, {}", flit(1.0)));
    // a = bits(k) − EXP_SCALE_BIAS = n + 254; e1 = a >> 1 (arithmetic) = n1 + 127;
    // e2 = a − e1 = n2 + 127; y = p · from_bits(e1 << 23) · from_bits(e2 << 23) (a NaN p
    // stays NaN).
    let (kb, ab, e1, e2) = (a.r(), a.r(), a.r(), a.r());
    a.i(format!("mov.b32 {kb}, {k}"));
    a.i(format!("sub.s32 {ab}, {kb}, {EXP_SCALE_BIAS}"));
    a.i(format!("shr.s32 {e1}, {ab}, 1"));
    a.i(format!("sub.s32 {e2}, {ab}, {e1}"));
    let (b1, b2) = (a.r(), a.r());
    a.i(format!("shl.b32 {b1}, {e1}, 23"));
    a.i(format!("shl.b32 {b2}, {e2}, 23"));
    let (s1, s2, y0, y) = (a.f(), a.f(), a.f(), a.f());
    a.i(format!("mov.b32 {s1}, {b1}"));
    a.i(format!("mov.b32 {s2}, {b2}"));
    a.i(format!("mul.rn.f32 {y0}, {p1}, {s1}"));
    a.i(format!("mul.rn.f32 {y}, {y0}, {s2}"));
    y
}

/// `ln x`.
pub fn log(a: &mut Asm, x: Reg) -> Reg {
    let (t, y) = (a.f(), a.f());
    a.i(format!("lg2.approx.f32 {t}, {x}"));
    a.i(format!("mul.rn.f32 {y}, {t}, {}", flit(LN2)));
    y
}

/// `tanh x`.
pub fn tanh(a: &mut Asm, x: Reg) -> Reg {
    let ax = a.f();
    a.i(format!("abs.f32 {ax}, {x}"));
    // Small |x|: x + x³(c3 + x²(c5 + x²(c7 + x²(c9 + x²·c11)))).
    let x2 = a.f();
    a.i(format!("mul.rn.f32 {x2}, {x}, {x}"));
    let coeffs = [
        -1.0 / 3.0,
        2.0 / 15.0,
        -17.0 / 315.0,
        62.0 / 2835.0,
        -1382.0 / 155925.0f64,
    ];
    let mut p = a.fconst(coeffs[4] as f32);
    for c in coeffs[..4].iter().rev() {
        let q = a.f();
        a.i(format!("fma.rn.f32 {q}, {p}, {x2}, {}", flit(*c as f32)));
        p = q;
    }
    let (x3, small) = (a.f(), a.f());
    a.i(format!("mul.rn.f32 {x3}, {x2}, {x}"));
    a.i(format!("fma.rn.f32 {small}, {x3}, {p}, {x}"));
    // Large |x|: 1 − 2/(e^{2|x|} + 1), signed.
    let two = a.f();
    a.i(format!("add.rn.f32 {two}, {ax}, {ax}"));
    let e = exp(a, two);
    let (den, q, big) = (a.f(), a.f(), a.f());
    a.i(format!("add.rn.f32 {den}, {e}, {}", flit(1.0)));
    a.i(format!("div.rn.f32 {q}, {}, {den}", flit(2.0)));
    a.i(format!("sub.rn.f32 {big}, {}, {q}", flit(1.0)));
    let (neg, sbig) = (a.p(), a.f());
    a.i(format!("setp.lt.f32 {neg}, {x}, {}", flit(0.0)));
    a.i(format!("neg.f32 {sbig}, {big}"));
    a.i(format!("selp.f32 {sbig}, {sbig}, {big}, {neg}"));
    let (lt, y) = (a.p(), a.f());
    a.i(format!("setp.lt.f32 {lt}, {ax}, {}", flit(0.3)));
    a.i(format!("selp.f32 {y}, {small}, {sbig}, {lt}"));
    // NaN in, NaN out (the selects above would otherwise pick a finite branch).
    let nan = a.p();
    a.i(format!("setp.nan.f32 {nan}, {x}, {x}"));
    a.i(format!("selp.f32 {y}, {x}, {y}, {nan}"));
    y
}

/// `1/(1 + e^{−x})`.
pub fn sigmoid(a: &mut Asm, x: Reg) -> Reg {
    let nx = a.f();
    a.i(format!("neg.f32 {nx}, {x}"));
    let e = exp(a, nx);
    let (den, y) = (a.f(), a.f());
    a.i(format!("add.rn.f32 {den}, {e}, {}", flit(1.0)));
    a.i(format!("div.rn.f32 {y}, {}, {den}", flit(1.0)));
    y
}

/// Numerical Recipes `erfcc` coefficients (Press et al.), lowest degree first:
/// `erfc z = t·exp(−z² + Σ ERFC[i]·tⁱ)` with `t = 1/(1 + |z|/2)` for `z ≥ 0`.
const ERFC: [f64; 10] = [
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
];

/// `erfc z` (fractional error < 1.2e-7 for every z).
pub fn erfc(a: &mut Asm, z: Reg) -> Reg {
    let (az, h, t) = (a.f(), a.f(), a.f());
    a.i(format!("abs.f32 {az}, {z}"));
    a.i(format!(
        "fma.rn.f32 {h}, {az}, {}, {}",
        flit(0.5),
        flit(1.0)
    ));
    a.i(format!("div.rn.f32 {t}, {}, {h}", flit(1.0)));
    let mut p = a.fconst(ERFC[9] as f32);
    for c in ERFC[..9].iter().rev() {
        let q = a.f();
        a.i(format!("fma.rn.f32 {q}, {p}, {t}, {}", flit(*c as f32)));
        p = q;
    }
    // exponent = −z² + poly, with z² = s + err exactly. |z| is capped at 11 (erfc 11 < 2⁻¹⁴⁹,
    // so the result is 0 either way) to keep z² and its error finite: no inf − inf for huge |z|.
    let azc = a.f();
    a.i(format!("min.f32 {azc}, {az}, {}", flit(11.0)));
    let (s, err, ex) = (a.f(), a.f(), a.f());
    a.i(format!("mul.rn.f32 {s}, {azc}, {azc}"));
    let ns = a.f();
    a.i(format!("neg.f32 {ns}, {s}"));
    a.i(format!("fma.rn.f32 {err}, {azc}, {azc}, {ns}"));
    a.i(format!("sub.rn.f32 {ex}, {p}, {s}"));
    a.i(format!("sub.rn.f32 {ex}, {ex}, {err}"));
    let e = exp(a, ex);
    let (r, r2) = (a.f(), a.f());
    a.i(format!("mul.rn.f32 {r}, {t}, {e}"));
    a.i(format!("sub.rn.f32 {r2}, {}, {r}", flit(2.0)));
    let neg = a.p();
    a.i(format!("setp.lt.f32 {neg}, {z}, {}", flit(0.0)));
    a.i(format!("selp.f32 {r}, {r2}, {r}, {neg}"));
    r
}

/// Exact GELU: `0.5·x·erfc(−x/√2)`.
pub fn gelu(a: &mut Asm, x: Reg) -> Reg {
    let z = a.f();
    a.i(format!(
        "mul.rn.f32 {z}, {x}, {}",
        flit(-std::f32::consts::FRAC_1_SQRT_2)
    ));
    let c = erfc(a, z);
    let (h, y) = (a.f(), a.f());
    a.i(format!("mul.rn.f32 {h}, {x}, {}", flit(0.5)));
    a.i(format!("mul.rn.f32 {y}, {h}, {c}"));
    // gelu(−inf) = 0 (not NaN), gelu(+inf) = +inf.
    let inf = a.p();
    a.i(format!(
        "setp.eq.f32 {inf}, {x}, {}",
        flit(f32::NEG_INFINITY)
    ));
    a.i(format!("selp.f32 {y}, {}, {y}, {inf}", flit(0.0)));
    y
}

/// The f32 instruction of `op` (`.rn` arithmetic, NaN-propagating `max`/`min`).
pub fn f32_binary(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add.rn.f32",
        BinaryOp::Sub => "sub.rn.f32",
        BinaryOp::Mul => "mul.rn.f32",
        BinaryOp::Div => "div.rn.f32",
        BinaryOp::Max => "max.NaN.f32",
        BinaryOp::Min => "min.NaN.f32",
    }
}

/// The s32 instruction of `op` (index arithmetic).
pub fn s32_binary(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add.s32",
        BinaryOp::Sub => "sub.s32",
        BinaryOp::Mul => "mul.lo.s32",
        BinaryOp::Div => "div.s32",
        BinaryOp::Max => "max.s32",
        BinaryOp::Min => "min.s32",
    }
}

/// `x op y` on f32 registers, into a fresh register.
pub fn binary(a: &mut Asm, op: BinaryOp, x: Reg, y: Reg) -> Reg {
    let d = a.f();
    a.i(format!("{} {d}, {x}, {y}", f32_binary(op)));
    d
}

/// Rounds an f32 register to the precision of `dt` through a `.b16` register (bf16/f16, round
/// to nearest even), as the CPU backend does; other dtypes return `x` unchanged.
pub fn round(a: &mut Asm, dt: DType, x: Reg) -> Reg {
    if fp8_name(dt).is_some() {
        let h = f32_to_fp8(a, dt, x);
        return fp8_to_f32(a, dt, h);
    }
    let t = match dt {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => return x,
    };
    let (h, y) = (a.h(), a.f());
    a.i(format!("cvt.rn.{t}.f32 {h}, {x}"));
    a.i(format!("cvt.f32.{t} {y}, {h}"));
    y
}

/// The PTX name of an fp8 dtype (`e4m3`, `e5m2`).
pub fn fp8_name(dt: DType) -> Option<&'static str> {
    match dt {
        DType::F8E4M3 => Some("e4m3"),
        DType::F8E5M2 => Some("e5m2"),
        _ => None,
    }
}

/// An f32 rounded to the fp8 `dt` (round to nearest even, saturating: PTX has only
/// `cvt.rn.satfinite` to fp8): a `.b16` register with the code in its low byte (sm_89+).
pub fn f32_to_fp8(a: &mut Asm, dt: DType, x: Reg) -> Reg {
    let t = fp8_name(dt).expect("an fp8 dtype");
    let (h, z) = (a.h(), a.fconst(0.0));
    // d[15:8] = cvt(z), d[7:0] = cvt(x).
    a.i(format!("cvt.rn.satfinite.{t}x2.f32 {h}, {z}, {x}"));
    h
}

/// The exact f32 value of the fp8 code in the low byte of the `.b16` register `h` (sm_89+):
/// widened to f16 by `cvt.rn.f16x2.{e4m3x2,e5m2x2}` (exact), then to f32.
pub fn fp8_to_f32(a: &mut Asm, dt: DType, h: Reg) -> Reg {
    let t = fp8_name(dt).expect("an fp8 dtype");
    let (r, lo, hi, y) = (a.r(), a.h(), a.h(), a.f());
    a.i(format!("cvt.rn.f16x2.{t}x2 {r}, {h}"));
    a.i(format!("mov.b32 {{{lo}, {hi}}}, {r}"));
    a.i(format!("cvt.f32.f16 {y}, {lo}"));
    y
}

/// Any unary op on an f32 register; `canonical` (deterministic kernels) takes the canonical
/// sequence where one exists (`exp`; `sqrt`, `rsqrt`, `neg`, `abs`, `relu` are exact or
/// correctly rounded either way).
pub fn unary_with(a: &mut Asm, op: UnaryOp, x: Reg, canonical: bool) -> Reg {
    match op {
        UnaryOp::Exp if canonical => exp_canonical(a, x),
        _ => unary(a, op, x),
    }
}

/// Any unary op on an f32 register.
pub fn unary(a: &mut Asm, op: UnaryOp, x: Reg) -> Reg {
    let simple = |a: &mut Asm, ins: &str| {
        let y = a.f();
        a.i(format!("{ins} {y}, {x}"));
        y
    };
    match op {
        UnaryOp::Neg => simple(a, "neg.f32"),
        UnaryOp::Abs => simple(a, "abs.f32"),
        UnaryOp::Sqrt => simple(a, "sqrt.rn.f32"),
        UnaryOp::Rsqrt => {
            let s = simple(a, "sqrt.rn.f32");
            let y = a.f();
            a.i(format!("div.rn.f32 {y}, {}, {s}", flit(1.0)));
            y
        }
        UnaryOp::Relu => {
            let y = a.f();
            a.i(format!("max.f32 {y}, {x}, {}", flit(0.0)));
            // max.f32 drops NaN; keep it.
            let nan = a.p();
            a.i(format!("setp.nan.f32 {nan}, {x}, {x}"));
            a.i(format!("selp.f32 {y}, {x}, {y}, {nan}"));
            y
        }
        UnaryOp::Exp => exp(a, x),
        UnaryOp::Log => log(a, x),
        UnaryOp::Tanh => tanh(a, x),
        UnaryOp::Sigmoid => sigmoid(a, x),
        UnaryOp::Gelu => gelu(a, x),
    }
}

#[cfg(test)]
mod tests {
    /// The erfc fit, evaluated in f64 as the PTX does in f32, against libm.
    #[test]
    fn erfc_fit_is_accurate() {
        for i in 0..400 {
            let z = i as f64 * 0.02;
            let t = 1.0 / (1.0 + 0.5 * z);
            let p = super::ERFC.iter().rev().fold(0.0, |p, c| p * t + c);
            let e = t * (-z * z + p).exp();
            let want = libm::erfc(z);
            assert!(((e - want) / want).abs() < 2e-7, "z {z}: {e} vs {want}");
        }
    }
}
