//! f32 elementwise math for the epilogue, from standard PTX instructions only.
//!
//! - `exp(x) = ex2.approx(x·log2 e)` (≤ 2 ulp on the ex2), `log(x) = lg2.approx(x)·ln 2`.
//! - `tanh`: `|x| < 0.3`: odd Taylor series to x⁹ (truncation < 7e-8 relative);
//!   otherwise `sign(x)·(1 - 2/(exp(2|x|) + 1))` (≈ 1e-6 relative; saturates to ±1).
//! - `sigmoid(x) = 1 / (1 + exp(-x))` with `rcp.rn`.
//! - `gelu(x) = 0.5·x·(1 + erf(x/√2))`, exact (erf-based). `1 + erf(z)` is computed from
//!   `erfc(|z|)` with the Numerical Recipes Chebyshev fit (Press et al., `erfcc`:
//!   `t = 1/(1 + |z|/2)`, `erfc = t·exp(-z² + P(t))`, fractional error < 1.2e-7 everywhere):
//!   `1 + erf(z) = 2 - erfc(z)` for `z ≥ 0` and `erfc(|z|)` for `z < 0`, so negative inputs keep
//!   full relative accuracy (no `1 + erf` cancellation). With f32 evaluation the result is
//!   within ~1e-6 relative for |x| < 4 (the `exp` argument's rounding grows with z²).
//! - `sqrt` is `sqrt.rn` (IEEE), `rsqrt` is `rsqrt.approx` (2^-22.9 relative), division
//!   `div.rn`; add/sub/mul carry `.rn` so ptxas does not contract them into FMAs.

use super::text::{Asm, Reg, f32_imm};
use crate::graph::{BinaryOp, UnaryOp};

const LOG2E: f64 = std::f64::consts::LOG2_E;

fn op(a: &mut Asm, ins: &str, args: &[&str]) -> Reg {
    let d = a.f();
    a.ins(format!("{ins} {d}, {}", args.join(", ")));
    d
}

/// `exp(x)`.
fn exp(a: &mut Asm, x: &str) -> Reg {
    let t = op(a, "mul.rn.f32", &[x, &f32_imm(LOG2E)]);
    op(a, "ex2.approx.f32", &[&t])
}

/// Emits `u(x)`.
pub(super) fn unary(a: &mut Asm, u: UnaryOp, x: &str) -> Reg {
    match u {
        UnaryOp::Neg => op(a, "neg.f32", &[x]),
        UnaryOp::Abs => op(a, "abs.f32", &[x]),
        UnaryOp::Relu => op(a, "max.f32", &[x, &f32_imm(0.0)]),
        UnaryOp::Exp => exp(a, x),
        UnaryOp::Log => {
            let l = op(a, "lg2.approx.f32", &[x]);
            op(a, "mul.rn.f32", &[&l, &f32_imm(std::f64::consts::LN_2)])
        }
        UnaryOp::Sqrt => op(a, "sqrt.rn.f32", &[x]),
        UnaryOp::Rsqrt => op(a, "rsqrt.approx.f32", &[x]),
        UnaryOp::Sigmoid => {
            let n = op(a, "neg.f32", &[x]);
            let e = exp(a, &n);
            let d = op(a, "add.rn.f32", &[&e, &f32_imm(1.0)]);
            op(a, "rcp.rn.f32", &[&d])
        }
        UnaryOp::Tanh => tanh(a, x),
        UnaryOp::Gelu => gelu(a, x),
    }
}

fn tanh(a: &mut Asm, x: &str) -> Reg {
    a.comment("tanh: series below |x| = 0.3, 1 - 2/(exp(2|x|)+1) above");
    let ax = op(a, "abs.f32", &[x]);
    // Large: 1 - 2/(e^{2|x|} + 1), sign restored.
    let t = op(a, "mul.rn.f32", &[&ax, &f32_imm(2.0 * LOG2E)]);
    let e = op(a, "ex2.approx.f32", &[&t]);
    let d = op(a, "add.rn.f32", &[&e, &f32_imm(1.0)]);
    let r = op(a, "rcp.rn.f32", &[&d]);
    let big = op(a, "fma.rn.f32", &[&r, &f32_imm(-2.0), &f32_imm(1.0)]);
    let big = op(a, "copysign.f32", &[x, &big]);
    // Small: x + x³·(-1/3 + x²·(2/15 + x²·(-17/315 + x²·62/2835))).
    let x2 = op(a, "mul.rn.f32", &[x, x]);
    let mut p = f32_imm(62.0 / 2835.0);
    for c in [-17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0] {
        p = op(a, "fma.rn.f32", &[&p, &x2, &f32_imm(c)]);
    }
    let x3 = op(a, "mul.rn.f32", &[&x2, x]);
    let small = op(a, "fma.rn.f32", &[&x3, &p, x]);
    let q = a.p();
    a.ins(format!("setp.lt.f32 {q}, {ax}, {}", f32_imm(0.3)));
    op(a, "selp.f32", &[&small, &big, &q])
}

/// Numerical Recipes `erfcc` coefficients, highest degree first.
const ERFC: [f64; 10] = [
    0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
    0.37409196, 1.00002368, -1.26551223,
];

fn gelu(a: &mut Asm, x: &str) -> Reg {
    a.comment("gelu(x) = 0.5*x*(1 + erf(x/sqrt2)), 1 + erf from erfc(|z|) (Numerical Recipes erfcc)");
    let z = op(a, "mul.rn.f32", &[x, &f32_imm(std::f64::consts::FRAC_1_SQRT_2)]);
    let az = op(a, "abs.f32", &[&z]);
    let den = op(a, "fma.rn.f32", &[&az, &f32_imm(0.5), &f32_imm(1.0)]);
    let t = op(a, "rcp.rn.f32", &[&den]);
    let mut p = f32_imm(ERFC[0]);
    for c in &ERFC[1..] {
        p = op(a, "fma.rn.f32", &[&p, &t, &f32_imm(*c)]);
    }
    // exp(-z² + P(t))
    let nz2 = op(a, "mul.rn.f32", &[&az, &az]);
    let arg = op(a, "sub.rn.f32", &[&p, &nz2]);
    let e = exp(a, &arg);
    let erfc = op(a, "mul.rn.f32", &[&t, &e]);
    let pos = op(a, "sub.rn.f32", &[&f32_imm(2.0), &erfc]);
    let q = a.p();
    a.ins(format!("setp.ge.f32 {q}, {x}, {}", f32_imm(0.0)));
    let one_plus = op(a, "selp.f32", &[&pos, &erfc, &q]);
    let hx = op(a, "mul.rn.f32", &[x, &f32_imm(0.5)]);
    op(a, "mul.rn.f32", &[&hx, &one_plus])
}

/// Emits `x op y`.
pub(super) fn binary(a: &mut Asm, b: BinaryOp, x: &str, y: &str) -> Reg {
    let ins = match b {
        BinaryOp::Add => "add.rn.f32",
        BinaryOp::Sub => "sub.rn.f32",
        BinaryOp::Mul => "mul.rn.f32",
        BinaryOp::Div => "div.rn.f32",
        BinaryOp::Max => "max.f32",
        BinaryOp::Min => "min.f32",
    };
    op(a, ins, &[x, y])
}

#[cfg(test)]
mod tests {
    /// The erfc fit, evaluated in f64 as the PTX does in f32, against libm.
    #[test]
    fn erfc_fit_is_accurate() {
        for i in 0..400 {
            let z = i as f64 * 0.02;
            let t = 1.0 / (1.0 + 0.5 * z);
            let p = super::ERFC.iter().fold(0.0, |p, c| p * t + c);
            let e = t * (-z * z + p).exp();
            let want = libm::erfc(z);
            assert!(((e - want) / want).abs() < 2e-7, "z {z}: {e} vs {want}");
        }
    }
}
