//! Lane-wise instructions: integer, f32, f64 and half-precision (f16/bf16, scalar and packed
//! x2) arithmetic, logic and bit manipulation (`prmt`, `bfe`, `bfi`, `brev`, `lop3`, `shf`),
//! comparisons, `selp`, `cvt`, `cvta`, and the special functions. `.approx` functions are
//! computed exactly in f64 and rounded once (within PTX's documented error bounds), or
//! perturbed within those bounds on request ([`crate::approx`]).

use super::Lanes;
use crate::approx::{self, Fn as Afn};
use crate::convert::{bits_f32, cvt, cvt_pack, f32_of, ftz, sx, zx};
use crate::memory::{LOCAL_GENERIC, SHARED_GENERIC};
use crate::module::ir::{Alu, Approx, Cmp, Op, Opd, Prmt, Space, Testp, Ty};
use half::{bf16, f16};

/// NVIDIA's f32 `max`/`min` ignore a single NaN; `nan` (`.NaN`) propagates it.
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

fn fcmp(c: Cmp, a: f64, b: f64) -> bool {
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
        Cmp::Lt if s => sa < sb,
        Cmp::Le if s => sa <= sb,
        Cmp::Gt if s => sa > sb,
        Cmp::Ge if s => sa >= sb,
        Cmp::Lt | Cmp::Lo => ua < ub,
        Cmp::Le | Cmp::Ls => ua <= ub,
        Cmp::Gt | Cmp::Hi => ua > ub,
        Cmp::Ge | Cmp::Hs => ua >= ub,
        _ => false,
    }
}

fn testp(k: Testp, x: f64) -> bool {
    match k {
        Testp::Finite => x.is_finite(),
        Testp::Infinite => x.is_infinite(),
        Testp::Number => !x.is_nan(),
        Testp::NotANumber => x.is_nan(),
        Testp::Normal => x.is_normal(),
        Testp::Subnormal => x.is_subnormal(),
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
            relu,
        } => {
            if ty.is_half() {
                return half_alu(op, ty, fz, sat, relu, a, l, mask);
            }
            alu(op, ty, fz, sat, a, l, mask)
        }
        Op::Cvt {
            dst,
            src,
            rnd,
            ftz,
            sat,
        } => {
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

/// The approximate result of `f` on `x` (exact value `exact`), perturbed on request.
fn approx_f32(l: &Lanes, f: Afn, x: f32, exact: f64, salt: u64) -> f32 {
    let key = ((l.line as u64) << 40) ^ ((f as u64) << 32) ^ x.to_bits() as u64 ^ salt;
    approx::result(f, x, exact, key, l.perturb)
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
        // lane-wise approximate functions (need the lane context for perturbation)
        let approx1 = |l: &mut Lanes, f: Afn, g: fn(f64) -> f64| {
            for lane in Lanes::iter(mask) {
                let x = fi(l.rd(&a[1], lane));
                let r = approx_f32(l, f, x, g(x as f64), 0);
                l.put(&a[0], lane, fo(r));
            }
        };
        match op {
            Alu::Mov => l.map1(a, mask, |x| zx(x, 32)),
            Alu::Add => l.map2(a, mask, |x, y| fo(fi(x) + fi(y))),
            Alu::Sub => l.map2(a, mask, |x, y| fo(fi(x) - fi(y))),
            Alu::MulLo => l.map2(a, mask, |x, y| fo(fi(x) * fi(y))),
            Alu::Fma => l.map3(a, mask, |x, y, z| fo(fi(x).mul_add(fi(y), fi(z)))),
            Alu::Div {
                approx: Approx::Exact,
            } => l.map2(a, mask, |x, y| fo(fi(x) / fi(y))),
            Alu::Div { approx: kind } => {
                for lane in Lanes::iter(mask) {
                    let (x, y) = (fi(l.rd(&a[1], lane)), fi(l.rd(&a[2], lane)));
                    let ay = y.abs();
                    let r = if kind == Approx::Approx && ay > 2f32.powi(126) && ay.is_finite() {
                        // documented: 0 (NaN for an infinite dividend) in this range
                        if x.is_infinite() {
                            f32::NAN
                        } else {
                            0.0 * x.signum() * y.signum()
                        }
                    } else {
                        approx_f32(
                            l,
                            Afn::Div,
                            x,
                            x as f64 / y as f64,
                            (y.to_bits() as u64).rotate_left(17),
                        )
                    };
                    l.put(&a[0], lane, fo(r));
                }
            }
            Alu::Min { nan, .. } => l.map2(a, mask, |x, y| fo(fmin(fi(x), fi(y), nan))),
            Alu::Max { nan, .. } => l.map2(a, mask, |x, y| fo(fmax(fi(x), fi(y), nan))),
            Alu::Abs => l.map1(a, mask, |x| (fi(x).to_bits() & 0x7fff_ffff) as u64),
            Alu::Neg => l.map1(a, mask, |x| (fi(x).to_bits() ^ 0x8000_0000) as u64),
            Alu::Setp { cmp, bop: b } => {
                l.setp(a, mask, |x, y| fcmp(cmp, fi(x) as f64, fi(y) as f64), b)
            }
            Alu::Selp => l.map3(
                a,
                mask,
                |x, y, c| if c & 1 != 0 { zx(x, 32) } else { zx(y, 32) },
            ),
            Alu::Testp(k) => l.map1(a, mask, |x| testp(k, f32_of(x) as f64) as u64),
            Alu::Ex2 => approx1(l, Afn::Ex2, f64::exp2),
            Alu::Lg2 => approx1(l, Afn::Lg2, f64::log2),
            Alu::Rcp { approx: true } => approx1(l, Afn::Rcp, |x| 1.0 / x),
            Alu::Rcp { approx: false } => l.map1(a, mask, |x| fo(1.0 / fi(x))),
            Alu::Rsqrt => approx1(l, Afn::Rsqrt, |x| 1.0 / x.sqrt()),
            Alu::Sqrt { approx: true } => approx1(l, Afn::Sqrt, f64::sqrt),
            Alu::Sqrt { approx: false } => l.map1(a, mask, |x| fo(fi(x).sqrt())),
            Alu::Sin => approx1(l, Afn::Sin, f64::sin),
            Alu::Cos => approx1(l, Afn::Cos, f64::cos),
            Alu::Tanh => approx1(l, Afn::Tanh, f64::tanh),
            _ => return Err(format!("{op:?} on .f32")),
        }
        return Ok(());
    }
    if t == Ty::F64 {
        let fi = f64::from_bits;
        let fo = |x: f64| {
            if x.is_nan() {
                0x7fff_ffff_ffff_ffff
            } else {
                x.to_bits()
            }
        };
        let mm = |x: f64, y: f64, nan: bool, max: bool| {
            if x.is_nan() || y.is_nan() {
                return if nan || (x.is_nan() && y.is_nan()) {
                    f64::NAN
                } else if x.is_nan() {
                    y
                } else {
                    x
                };
            }
            if x == y {
                // +0 > -0
                return if max == x.is_sign_negative() { y } else { x };
            }
            if (x > y) == max { x } else { y }
        };
        match op {
            Alu::Mov => l.map1(a, mask, |x| x),
            Alu::Add => l.map2(a, mask, |x, y| fo(fi(x) + fi(y))),
            Alu::Sub => l.map2(a, mask, |x, y| fo(fi(x) - fi(y))),
            Alu::MulLo => l.map2(a, mask, |x, y| fo(fi(x) * fi(y))),
            Alu::Fma => l.map3(a, mask, |x, y, z| fo(fi(x).mul_add(fi(y), fi(z)))),
            Alu::Div {
                approx: Approx::Exact,
            } => l.map2(a, mask, |x, y| fo(fi(x) / fi(y))),
            Alu::Min { nan, .. } => l.map2(a, mask, |x, y| fo(mm(fi(x), fi(y), nan, false))),
            Alu::Max { nan, .. } => l.map2(a, mask, |x, y| fo(mm(fi(x), fi(y), nan, true))),
            Alu::Abs => l.map1(a, mask, |x| x & !(1 << 63)),
            Alu::Neg => l.map1(a, mask, |x| x ^ (1 << 63)),
            Alu::Setp { cmp, bop: b } => l.setp(a, mask, |x, y| fcmp(cmp, fi(x), fi(y)), b),
            Alu::Selp => l.map3(a, mask, |x, y, c| if c & 1 != 0 { x } else { y }),
            Alu::Testp(k) => l.map1(a, mask, |x| testp(k, fi(x)) as u64),
            Alu::Rcp { approx: false } => l.map1(a, mask, |x| fo(1.0 / fi(x))),
            Alu::Sqrt { approx: false } => l.map1(a, mask, |x| fo(fi(x).sqrt())),
            _ => return Err(format!("{op:?} on .f64")),
        }
        return Ok(());
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
        Alu::Brev => l.map1(a, mask, |x| m(x).reverse_bits() >> (64 - w)),
        Alu::Bfe => l.map3(a, mask, |x, pos, len| bfe(x, pos, len, w, s)),
        Alu::Bfi => l.map4(a, mask, |x, y, pos, len| bfi(x, y, pos, len, w)),
        Alu::Prmt(mode) => l.map3(a, mask, |x, y, c| {
            prmt(mode, x as u32, y as u32, c as u32) as u64
        }),
        Alu::Lop3 => {
            let Opd::Imm(lut) = a[4] else {
                return Err("lop3 without an immediate immLut".into());
            };
            l.map3(a, mask, |x, y, z| {
                lop3(x as u32, y as u32, z as u32, lut as u8) as u64
            })
        }
        Alu::Shf { left, clamp } => l.map3(a, mask, |x, y, c| {
            shf(x as u32, y as u32, c as u32, left, clamp) as u64
        }),
        Alu::Setp { cmp, bop: b } => l.setp(a, mask, |x, y| icmp(cmp, t, x, y), b),
        Alu::Selp => l.map3(a, mask, |x, y, c| if c & 1 != 0 { m(x) } else { m(y) }),
        Alu::Cvta { to_generic, space } => {
            let window = match space {
                Space::Shared => Some(SHARED_GENERIC),
                Space::Local => Some(LOCAL_GENERIC),
                _ => None,
            };
            l.map1(a, mask, |x| match window {
                None => m(x),
                Some(b) if to_generic => b.wrapping_add(zx(x, 32)),
                Some(b) => m(x.wrapping_sub(b)),
            })
        }
        _ => return Err(format!("{op:?} on .{t:?}")),
    }
    Ok(())
}

/// `bfe` per the PTX ISA pseudo-code.
fn bfe(a: u64, b: u64, c: u64, w: u32, signed: bool) -> u64 {
    let msb = w as u64 - 1;
    let (pos, len) = (b & 0xff, c & 0xff);
    let sbit = if !signed || len == 0 {
        0
    } else {
        (a >> (pos + len - 1).min(msb)) & 1
    };
    let mut d = 0u64;
    for i in 0..=msb {
        let bit = if i < len && pos + i <= msb {
            (a >> (pos + i)) & 1
        } else {
            sbit
        };
        d |= bit << i;
    }
    d
}

/// `bfi` per the PTX ISA pseudo-code.
fn bfi(a: u64, b: u64, c: u64, d: u64, w: u32) -> u64 {
    let msb = w as u64 - 1;
    let (pos, len) = (c & 0xff, d & 0xff);
    let mut f = zx(b, w);
    let mut i = 0;
    while i < len && pos + i <= msb {
        f = (f & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
        i += 1;
    }
    f
}

/// `prmt.b32{.mode} d, a, b, c`.
fn prmt(mode: Prmt, a: u32, b: u32, c: u32) -> u32 {
    let src = ((b as u64) << 32) | a as u64;
    let byte = |i: u32| ((src >> (8 * (i & 7))) & 0xff) as u32;
    let s = c & 3;
    let mut d = 0u32;
    for i in 0..4u32 {
        let v = match mode {
            Prmt::Generic => {
                let ctl = (c >> (4 * i)) & 0xf;
                let v = byte(ctl & 7);
                if ctl & 8 != 0 {
                    if v & 0x80 != 0 { 0xff } else { 0 }
                } else {
                    v
                }
            }
            Prmt::F4e => byte(s + i),
            Prmt::B4e => byte(s.wrapping_sub(i) & 7),
            Prmt::Rc8 => byte(s),
            Prmt::Ecl => byte(i.max(s)),
            Prmt::Ecr => byte(i.min(s)),
            Prmt::Rc16 => byte((i & 1) + 2 * (s & 1)),
        };
        d |= v << (8 * i);
    }
    d
}

/// `lop3.b32`: bit i of the result is bit `(a_i << 2) | (b_i << 1) | c_i` of `lut`.
fn lop3(a: u32, b: u32, c: u32, lut: u8) -> u32 {
    let mut r = 0u32;
    for k in 0..8u32 {
        if lut >> k & 1 != 0 {
            let pa = if k & 4 != 0 { a } else { !a };
            let pb = if k & 2 != 0 { b } else { !b };
            let pc = if k & 1 != 0 { c } else { !c };
            r |= pa & pb & pc;
        }
    }
    r
}

/// `shf.{l,r}.{clamp,wrap}.b32 d, a, b, c` (a: bits 31:0, b: bits 63:32).
fn shf(a: u32, b: u32, c: u32, left: bool, clamp: bool) -> u32 {
    let n = if clamp { c.min(32) } else { c & 31 };
    let v = ((b as u64) << 32) | a as u64;
    if left {
        ((v << n) >> 32) as u32
    } else {
        (v >> n) as u32
    }
}

/// An f16 subnormal (exponent 0, mantissa non-zero).
fn is_sub16(h: f16) -> bool {
    h.to_bits() & 0x7c00 == 0 && h.to_bits() & 0x3ff != 0
}

/// A 16-bit float of type `t` (f16 or bf16, scalar or half of an x2).
fn h_in(t: Ty, b: u16, fz: bool) -> f64 {
    if matches!(t, Ty::F16 | Ty::F16x2) {
        let h = f16::from_bits(b);
        if fz && is_sub16(h) {
            return if h.is_sign_negative() { -0.0 } else { 0.0 };
        }
        h.to_f64()
    } else {
        bf16::from_bits(b).to_f64()
    }
}

/// `x` rounded to the 16-bit type `t` (round to nearest even); NaN is canonical (`0x7fff`).
fn h_out(t: Ty, x: f64, fz: bool, sat: bool, relu: bool) -> u16 {
    if x.is_nan() {
        return if sat { 0 } else { 0x7fff };
    }
    let x = if sat { x.clamp(0.0, 1.0) } else { x };
    let x = if relu && x < 0.0 { 0.0 } else { x };
    if matches!(t, Ty::F16 | Ty::F16x2) {
        let h = f16::from_f64(x);
        if fz && is_sub16(h) {
            return h.to_bits() & 0x8000;
        }
        h.to_bits()
    } else {
        bf16::from_f64(x).to_bits()
    }
}

/// Half-precision min/max per the PTX ISA pseudo-code (+0 > -0, a single NaN ignored unless
/// `.NaN`, `.xorsign.abs`).
fn h_minmax(x: f64, y: f64, max: bool, nan: bool, xorsign: bool) -> f64 {
    let neg = x.is_sign_negative() != y.is_sign_negative();
    let (x, y) = if xorsign { (x.abs(), y.abs()) } else { (x, y) };
    let d = if x.is_nan() && y.is_nan() || (nan && (x.is_nan() || y.is_nan())) {
        return f64::NAN;
    } else if x.is_nan() {
        y
    } else if y.is_nan() {
        x
    } else if x == y {
        if max == x.is_sign_negative() { y } else { x }
    } else if (x > y) == max {
        x
    } else {
        y
    };
    if xorsign {
        if neg { -d.abs() } else { d.abs() }
    } else {
        d
    }
}

/// `a·b + c` of 16-bit values in f64 rounded *to odd*, so that the one rounding to 16 bits that
/// follows is the correctly rounded fma. The product is exact (≤ 22 significant bits); the
/// sum may not be (bf16's exponent range lets `c` sit far below `a·b`), and a plain f64 sum
/// could land exactly on a 16-bit tie the exact value misses (1.75 · 0.578125 − 2^-70 must
/// round down to 258/256, not to the even 260/256): rounding to odd keeps that information.
fn fma_round_to_odd(a: f64, b: f64, c: f64) -> f64 {
    let p = a * b;
    let s = p + c;
    if !s.is_finite() {
        return s;
    }
    // TwoSum: s + e = p + c exactly
    let bb = s - p;
    let e = (p - (s - bb)) + (c - bb);
    if e == 0.0 || s.to_bits() & 1 == 1 {
        s
    } else if e > 0.0 {
        s.next_up()
    } else {
        s.next_down()
    }
}

#[allow(clippy::too_many_arguments)]
fn half_alu(
    op: Alu,
    t: Ty,
    fz: bool,
    sat: bool,
    relu: bool,
    a: &[Opd],
    l: &mut Lanes,
    mask: u32,
) -> Result<(), String> {
    let lanes = if matches!(t, Ty::F16x2 | Ty::BF16x2) {
        2
    } else {
        1
    };
    let w = 16 * lanes;
    let each = |v: &[u64], f: &dyn Fn(&[f64]) -> f64| -> u64 {
        let mut out = 0u64;
        for h in 0..lanes {
            let mut xs = [0f64; 3];
            for (x, v) in xs.iter_mut().zip(v) {
                *x = h_in(t, (v >> (16 * h)) as u16, fz);
            }
            out |= (h_out(t, f(&xs[..v.len()]), fz, sat, relu) as u64) << (16 * h);
        }
        out
    };
    let bitwise = |x: u64, f: &dyn Fn(u16) -> u16| -> u64 {
        let mut out = 0u64;
        for h in 0..lanes {
            out |= (f((x >> (16 * h)) as u16) as u64) << (16 * h);
        }
        out
    };
    match op {
        Alu::Mov => l.map1(a, mask, |x| zx(x, w)),
        Alu::Selp => l.map3(
            a,
            mask,
            |x, y, c| if c & 1 != 0 { zx(x, w) } else { zx(y, w) },
        ),
        Alu::Add => l.map2(a, mask, |x, y| each(&[x, y], &|v| v[0] + v[1])),
        Alu::Sub => l.map2(a, mask, |x, y| each(&[x, y], &|v| v[0] - v[1])),
        Alu::MulLo => l.map2(a, mask, |x, y| each(&[x, y], &|v| v[0] * v[1])),
        Alu::Fma => l.map3(a, mask, |x, y, z| {
            each(&[x, y, z], &|v| fma_round_to_odd(v[0], v[1], v[2]))
        }),
        Alu::Min { nan, xorsign } => l.map2(a, mask, |x, y| {
            each(&[x, y], &|v| h_minmax(v[0], v[1], false, nan, xorsign))
        }),
        Alu::Max { nan, xorsign } => l.map2(a, mask, |x, y| {
            each(&[x, y], &|v| h_minmax(v[0], v[1], true, nan, xorsign))
        }),
        Alu::Abs => l.map1(a, mask, |x| bitwise(x, &|h| h & 0x7fff)),
        Alu::Neg => l.map1(a, mask, |x| bitwise(x, &|h| h ^ 0x8000)),
        _ => return Err(format!("{op:?} on .{t:?}")),
    }
    Ok(())
}
