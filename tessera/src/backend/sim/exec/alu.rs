//! Lane-wise instructions: integer and f32 arithmetic, logic, comparisons, `selp`, `cvt`,
//! `cvta`, and the special functions. `.approx` functions (`ex2`, `lg2`, `rcp`, `rsqrt`,
//! `sin`, `cos`, `tanh`, `div.full/approx`) are computed exactly in f64 and rounded once,
//! which is within PTX's documented error bounds.

use super::super::convert::{bits_f32, cvt, cvt_pack, f32_of, ftz, sx, zx};
use super::super::ir::{Alu, Cmp, Op, Opd, Testp, Ty};
use super::super::memory::SHARED_GENERIC;
use super::Lanes;

fn fmax(a: f32, b: f32, nan: bool) -> f32 {
    if a.is_nan() || b.is_nan() {
        return if nan || (a.is_nan() && b.is_nan()) {
            f32::NAN
        } else if a.is_nan() {
            b
        } else {
            a
        };
    }
    if a > b || (a == b && b.is_sign_negative()) {
        a
    } else {
        b
    }
}

fn fmin(a: f32, b: f32, nan: bool) -> f32 {
    if a.is_nan() || b.is_nan() {
        return if nan || (a.is_nan() && b.is_nan()) {
            f32::NAN
        } else if a.is_nan() {
            b
        } else {
            a
        };
    }
    if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

fn fcmp(c: Cmp, a: f32, b: f32) -> bool {
    let un = a.is_nan() || b.is_nan();
    match c {
        Cmp::Eq => a == b,
        Cmp::Ne => !un && a != b,
        Cmp::Lt | Cmp::Lo => a < b,
        Cmp::Le | Cmp::Ls => a <= b,
        Cmp::Gt | Cmp::Hi => a > b,
        Cmp::Ge | Cmp::Hs => a >= b,
        Cmp::Equ => un || a == b,
        Cmp::Neu => un || a != b,
        Cmp::Ltu => un || a < b,
        Cmp::Leu => un || a <= b,
        Cmp::Gtu => un || a > b,
        Cmp::Geu => un || a >= b,
        Cmp::Num => !un,
        Cmp::Nan => un,
    }
}

fn icmp(c: Cmp, t: Ty, a: u64, b: u64) -> bool {
    let w = t.bits();
    let (sa, sb, ua, ub) = (sx(a, w), sx(b, w), zx(a, w), zx(b, w));
    let s = t.signed();
    match c {
        Cmp::Eq => ua == ub,
        Cmp::Ne => ua != ub,
        Cmp::Lt => {
            if s {
                sa < sb
            } else {
                ua < ub
            }
        }
        Cmp::Le => {
            if s {
                sa <= sb
            } else {
                ua <= ub
            }
        }
        Cmp::Gt => {
            if s {
                sa > sb
            } else {
                ua > ub
            }
        }
        Cmp::Ge => {
            if s {
                sa >= sb
            } else {
                ua >= ub
            }
        }
        Cmp::Lo => ua < ub,
        Cmp::Ls => ua <= ub,
        Cmp::Hi => ua > ub,
        Cmp::Hs => ua >= ub,
        _ => false,
    }
}

/// Executes a lane-wise `Op::Alu` / `Op::Cvt` / `Op::CvtPack` / `Op::MovVec` on the lanes of
/// `mask`. `Err` is a simulator limitation message.
pub(crate) fn exec(op: &Op, a: &[Opd], l: &mut Lanes, mask: u32) -> Result<(), String> {
    match *op {
        Op::Alu {
            op,
            ty,
            ftz: fz,
            sat,
        } => alu(op, ty, fz, sat, a, l, mask),
        Op::Cvt {
            dst,
            src,
            rnd,
            ftz,
            sat,
        } => {
            // validate once
            cvt(dst, src, rnd, ftz, sat, 0)?;
            l.map1(a, mask, |x| cvt(dst, src, rnd, ftz, sat, x).unwrap_or(0));
            Ok(())
        }
        Op::CvtPack { dst, src, relu } => {
            if a.len() == 3 {
                l.map2(a, mask, |x, y| cvt_pack(dst, src, relu, x, y));
            } else {
                l.map1(a, mask, |x| cvt_pack(dst, src, relu, x, 0));
            }
            Ok(())
        }
        Op::MovVec { ty } => {
            let w = ty.bits();
            match (&a[0], &a[1]) {
                (Opd::Vec(d), s) if !matches!(s, Opd::Vec(_)) => {
                    let eb = w / d.len() as u32;
                    for lane in Lanes::iter(mask) {
                        let v = l.rd(s, lane);
                        for (i, o) in d.iter().enumerate() {
                            if let Opd::Reg(r) = o {
                                l.wr(*r, lane, zx(v >> (eb * i as u32), eb));
                            }
                        }
                    }
                }
                (Opd::Reg(r), Opd::Vec(s)) => {
                    let eb = w / s.len() as u32;
                    for lane in Lanes::iter(mask) {
                        let mut v = 0u64;
                        for (i, o) in s.iter().enumerate() {
                            v |= zx(l.rd(o, lane), eb) << (eb * i as u32);
                        }
                        l.wr(*r, lane, zx(v, w));
                    }
                }
                _ => return Err("mov with this vector operand shape".into()),
            }
            Ok(())
        }
        _ => Err("not a lane-wise instruction".into()),
    }
}

fn alu(
    op: Alu,
    t: Ty,
    fz: bool,
    sat: bool,
    a: &[Opd],
    l: &mut Lanes,
    mask: u32,
) -> Result<(), String> {
    let w = t.bits();
    if t == Ty::F32 {
        let fi = |v: u64| if fz { ftz(f32_of(v)) } else { f32_of(v) };
        let fo = move |x: f32| {
            let x = if fz { ftz(x) } else { x };
            let x = if sat {
                if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
            } else {
                x
            };
            bits_f32(x)
        };
        let f64o = move |x: f64| fo(x as f32);
        match op {
            Alu::Mov => l.map1(a, mask, |x| zx(x, 32)),
            Alu::Add => l.map2(a, mask, |x, y| fo(fi(x) + fi(y))),
            Alu::Sub => l.map2(a, mask, |x, y| fo(fi(x) - fi(y))),
            Alu::MulLo => l.map2(a, mask, |x, y| fo(fi(x) * fi(y))),
            Alu::Fma => l.map3(a, mask, |x, y, z| fo(fi(x).mul_add(fi(y), fi(z)))),
            Alu::Div { approx: false } => l.map2(a, mask, |x, y| fo(fi(x) / fi(y))),
            Alu::Div { approx: true } => l.map2(a, mask, |x, y| {
                let (x, y) = (fi(x), fi(y));
                let ay = y.abs();
                if ay > 2f32.powi(126) && ay.is_finite() {
                    // documented: div.approx/full gives 0 (NaN for an infinite dividend) here
                    return fo(if x.is_infinite() {
                        f32::NAN
                    } else {
                        0.0 * x.signum() * y.signum()
                    });
                }
                f64o(x as f64 / y as f64)
            }),
            Alu::Min { nan } => l.map2(a, mask, |x, y| fo(fmin(fi(x), fi(y), nan))),
            Alu::Max { nan } => l.map2(a, mask, |x, y| fo(fmax(fi(x), fi(y), nan))),
            Alu::Abs => l.map1(a, mask, |x| (fi(x).to_bits() & 0x7fff_ffff) as u64),
            Alu::Neg => l.map1(a, mask, |x| (fi(x).to_bits() ^ 0x8000_0000) as u64),
            Alu::Setp { cmp, bop: b } => l.setp(a, mask, |x, y| fcmp(cmp, fi(x), fi(y)), b),
            Alu::Selp => l.map3(
                a,
                mask,
                |x, y, c| if c & 1 != 0 { zx(x, 32) } else { zx(y, 32) },
            ),
            Alu::Testp(k) => l.map1(a, mask, |x| {
                let x = f32_of(x);
                (match k {
                    Testp::Finite => x.is_finite(),
                    Testp::Infinite => x.is_infinite(),
                    Testp::Number => !x.is_nan(),
                    Testp::NotANumber => x.is_nan(),
                    Testp::Normal => x.is_normal(),
                    Testp::Subnormal => x.is_subnormal(),
                }) as u64
            }),
            Alu::Ex2 => l.map1(a, mask, |x| f64o((fi(x) as f64).exp2())),
            Alu::Lg2 => l.map1(a, mask, |x| f64o((fi(x) as f64).log2())),
            Alu::Rcp { approx: true } => l.map1(a, mask, |x| f64o(1.0 / fi(x) as f64)),
            Alu::Rcp { approx: false } => l.map1(a, mask, |x| fo(1.0 / fi(x))),
            Alu::Rsqrt => l.map1(a, mask, |x| f64o(1.0 / (fi(x) as f64).sqrt())),
            Alu::Sqrt { .. } => l.map1(a, mask, |x| fo(fi(x).sqrt())),
            Alu::Sin => l.map1(a, mask, |x| f64o((fi(x) as f64).sin())),
            Alu::Cos => l.map1(a, mask, |x| f64o((fi(x) as f64).cos())),
            Alu::Tanh => l.map1(a, mask, |x| f64o((fi(x) as f64).tanh())),
            _ => return Err(format!("{op:?} on .f32")),
        }
        return Ok(());
    }
    if t.is_float() {
        return match op {
            Alu::Mov => {
                l.map1(a, mask, |x| zx(x, w));
                Ok(())
            }
            Alu::Selp => {
                l.map3(
                    a,
                    mask,
                    |x, y, c| if c & 1 != 0 { zx(x, w) } else { zx(y, w) },
                );
                Ok(())
            }
            _ => Err(format!("{op:?} on .{t:?}")),
        };
    }
    let s = t.signed();
    let m = move |x: u64| zx(x, w);
    let sv = move |x: u64| sx(x, w);
    match op {
        Alu::Mov => l.map1(a, mask, m),
        Alu::Add if sat && t == Ty::S32 => l.map2(a, mask, |x, y| {
            m((sv(x) + sv(y)).clamp(i32::MIN as i64, i32::MAX as i64) as u64)
        }),
        Alu::Sub if sat && t == Ty::S32 => l.map2(a, mask, |x, y| {
            m((sv(x) - sv(y)).clamp(i32::MIN as i64, i32::MAX as i64) as u64)
        }),
        Alu::Add => l.map2(a, mask, |x, y| m(x.wrapping_add(y))),
        Alu::Sub => l.map2(a, mask, |x, y| m(x.wrapping_sub(y))),
        Alu::MulLo => l.map2(a, mask, |x, y| m(x.wrapping_mul(y))),
        Alu::MadLo => l.map3(a, mask, |x, y, z| m(x.wrapping_mul(y).wrapping_add(z))),
        Alu::MulWide | Alu::MadWide | Alu::MulHi | Alu::MadHi => {
            let full = move |x: u64, y: u64| -> i128 {
                if s {
                    sv(x) as i128 * sv(y) as i128
                } else {
                    m(x) as i128 * m(y) as i128
                }
            };
            match op {
                Alu::MulWide => l.map2(a, mask, |x, y| zx(full(x, y) as u64, 2 * w)),
                Alu::MadWide => l.map3(a, mask, |x, y, z| {
                    zx((full(x, y) as u64).wrapping_add(z), 2 * w)
                }),
                Alu::MulHi => l.map2(a, mask, |x, y| m((full(x, y) >> w) as u64)),
                _ => l.map3(a, mask, |x, y, z| {
                    m(((full(x, y) >> w) as u64).wrapping_add(z))
                }),
            }
        }
        Alu::Div { .. } => l.map2(a, mask, |x, y| {
            if m(y) == 0 {
                return m(u64::MAX);
            }
            if s {
                m(sv(x).wrapping_div(sv(y)) as u64)
            } else {
                m(x) / m(y)
            }
        }),
        Alu::Rem => l.map2(a, mask, |x, y| {
            if m(y) == 0 {
                return m(x);
            }
            if s {
                m(sv(x).wrapping_rem(sv(y)) as u64)
            } else {
                m(x) % m(y)
            }
        }),
        Alu::Min { .. } => l.map2(a, mask, |x, y| {
            if s {
                m(sv(x).min(sv(y)) as u64)
            } else {
                m(x).min(m(y))
            }
        }),
        Alu::Max { .. } => l.map2(a, mask, |x, y| {
            if s {
                m(sv(x).max(sv(y)) as u64)
            } else {
                m(x).max(m(y))
            }
        }),
        Alu::Abs => l.map1(a, mask, |x| m(sv(x).wrapping_abs() as u64)),
        Alu::Neg => l.map1(a, mask, |x| m(sv(x).wrapping_neg() as u64)),
        Alu::And => l.map2(a, mask, |x, y| m(x & y)),
        Alu::Or => l.map2(a, mask, |x, y| m(x | y)),
        Alu::Xor => l.map2(a, mask, |x, y| m(x ^ y)),
        Alu::Not => l.map1(a, mask, |x| m(!x)),
        Alu::Shl => l.map2(a, mask, |x, y| {
            if zx(y, 32) >= w as u64 {
                0
            } else {
                m(x << zx(y, 32))
            }
        }),
        Alu::Shr => l.map2(a, mask, |x, y| {
            let k = zx(y, 32);
            if s {
                m((sv(x) >> k.min(w as u64 - 1)) as u64)
            } else if k >= w as u64 {
                0
            } else {
                m(x) >> k
            }
        }),
        Alu::Popc => l.map1(a, mask, |x| m(x).count_ones() as u64),
        Alu::Clz => l.map1(a, mask, |x| (m(x).leading_zeros() - (64 - w)) as u64),
        Alu::Setp { cmp, bop: b } => l.setp(a, mask, |x, y| icmp(cmp, t, x, y), b),
        Alu::Selp => l.map3(a, mask, |x, y, c| if c & 1 != 0 { m(x) } else { m(y) }),
        Alu::Cvta { to_generic, shared } => l.map1(a, mask, |x| {
            if !shared {
                m(x)
            } else if to_generic {
                SHARED_GENERIC.wrapping_add(zx(x, 32))
            } else {
                m(x.wrapping_sub(SHARED_GENERIC))
            }
        }),
        _ => return Err(format!("{op:?} on .{t:?}")),
    }
    Ok(())
}
