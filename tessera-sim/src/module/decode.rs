//! One PTX instruction (text) → [`Inst`]: opcode modifiers to an [`Op`], operands resolved.
//! A malformed operand is a syntax error; an opcode, type or modifier not listed here is
//! [`DecodeError::Unsupported`] (the entry then cannot be launched), never skipped.

use super::ir::*;
use super::parse::{Regs, split_args};
use std::collections::HashMap;

/// Why an instruction did not decode.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Malformed text: a parse error of the module. `token` locates the column.
    Syntax {
        message: String,
        token: Option<String>,
    },
    /// Valid PTX (or at least not known to be invalid) that the simulator does not implement.
    Unsupported(String),
}

fn syntax<T>(message: impl Into<String>, token: &str) -> Result<T, DecodeError> {
    Err(DecodeError::Syntax {
        message: message.into(),
        token: Some(token.trim().to_string()),
    })
}

/// Names visible to instructions.
pub(crate) struct Ctx<'a> {
    pub regs: &'a mut Regs,
    pub shared: &'a HashMap<String, u64>,
    pub local: &'a HashMap<String, u64>,
    pub params: &'a HashMap<String, u32>,
    pub labels: &'a HashMap<String, u32>,
}

fn imm(tok: &str, fty: Option<Ty>) -> Option<u64> {
    let t = tok.trim();
    let (neg, u) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let float = |x: f64| -> u64 {
        let x = if neg { -x } else { x };
        if fty == Some(Ty::F64) {
            x.to_bits()
        } else {
            (x as f32).to_bits() as u64
        }
    };
    if let Some(h) = u.strip_prefix("0f").or_else(|| u.strip_prefix("0F"))
        && h.len() == 8
    {
        let b = u32::from_str_radix(h, 16).ok()?;
        return Some(float(f32::from_bits(b) as f64));
    }
    if let Some(h) = u.strip_prefix("0d").or_else(|| u.strip_prefix("0D"))
        && h.len() == 16
    {
        return Some(float(f64::from_bits(u64::from_str_radix(h, 16).ok()?)));
    }
    let u2 = u.trim_end_matches(['U', 'u']);
    let v = if let Some(h) = u2.strip_prefix("0x").or_else(|| u2.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else if u2.chars().all(|c| c.is_ascii_digit()) && !u2.is_empty() {
        u2.parse::<u64>().ok()?
    } else if u2.contains(['.', 'e', 'E']) {
        return Some(float(u2.parse::<f64>().ok()?));
    } else {
        return None;
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

fn sreg(name: &str) -> Option<Sreg> {
    let axis = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((a, b)) = name.split_once('.') {
        let ax = axis(b)?;
        return Some(match a {
            "tid" => Sreg::Tid(ax),
            "ntid" => Sreg::Ntid(ax),
            "ctaid" => Sreg::Ctaid(ax),
            "nctaid" => Sreg::Nctaid(ax),
            _ => return None,
        });
    }
    match name {
        "laneid" => Some(Sreg::LaneId),
        "warpid" => Some(Sreg::WarpId),
        "lanemask_eq" => Some(Sreg::LaneMask(LaneMask::Eq)),
        "lanemask_lt" => Some(Sreg::LaneMask(LaneMask::Lt)),
        "lanemask_le" => Some(Sreg::LaneMask(LaneMask::Le)),
        "lanemask_gt" => Some(Sreg::LaneMask(LaneMask::Gt)),
        "lanemask_ge" => Some(Sreg::LaneMask(LaneMask::Ge)),
        _ => None,
    }
}

impl Ctx<'_> {
    fn reg(&mut self, t: &str) -> Result<u32, DecodeError> {
        let n = t.trim().trim_start_matches('%');
        match self.regs.get(n) {
            Some(r) => Ok(r),
            None => syntax(format!("undeclared register `{}`", t.trim()), t),
        }
    }

    /// A window symbol (`.shared` or `.local`) as an address.
    fn symbol(&self, name: &str) -> Option<u64> {
        self.shared
            .get(name)
            .or_else(|| self.local.get(name))
            .copied()
    }

    fn opd(&mut self, tok: &str, fty: Option<Ty>) -> Result<Opd, DecodeError> {
        let t = tok.trim();
        if t == "_" {
            return Ok(Opd::Sink);
        }
        if let Some(inner) = t.strip_prefix('{') {
            let Some(inner) = inner.strip_suffix('}') else {
                return syntax(format!("bad vector operand `{t}`"), t);
            };
            let v: Result<Vec<Opd>, _> = inner.split(',').map(|x| self.opd(x, fty)).collect();
            return Ok(Opd::Vec(v?.into()));
        }
        if let Some(inner) = t.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return syntax(format!("bad address `{t}`"), t);
            };
            let inner = inner.trim();
            if inner.contains(',') || inner.is_empty() {
                return Err(DecodeError::Unsupported(format!("the address form `{t}`")));
            }
            let split = inner[1..].find(['+', '-']).map(|i| i + 1);
            let (b, o) = match split {
                Some(i) => (inner[..i].trim(), inner[i..].trim()),
                None => (inner, ""),
            };
            let off = if o.is_empty() {
                0
            } else {
                match imm(o.strip_prefix('+').unwrap_or(o), None) {
                    Some(v) => v as i64,
                    None => return syntax(format!("bad offset in `{t}`"), t),
                }
            };
            let base = if b.starts_with('%') {
                Base::Reg(self.reg(b)?)
            } else if let Some(a) = self.symbol(b) {
                Base::Abs(a)
            } else if let Some(&p) = self.params.get(b) {
                Base::Param(p)
            } else if let Some(v) = imm(b, None) {
                Base::Abs(v)
            } else {
                return syntax(format!("unknown symbol `{b}` in `{t}`"), b);
            };
            return Ok(Opd::Mem(Addr { base, off }));
        }
        if let Some(r) = t.strip_prefix('!') {
            return Ok(Opd::Not(self.reg(r)?));
        }
        if let Some((a, b)) = t.split_once('|') {
            return Ok(Opd::Pair(self.reg(a)?, self.reg(b)?));
        }
        if let Some(n) = t.strip_prefix('%') {
            if let Some(s) = sreg(n) {
                return Ok(Opd::Sreg(s));
            }
            if !self.regs.singles.contains_key(n)
                && (n.contains('.')
                    || [
                        "clock",
                        "clock64",
                        "smid",
                        "nsmid",
                        "gridid",
                        "nwarpid",
                        "globaltimer",
                        "dynamic_smem_size",
                        "total_smem_size",
                    ]
                    .contains(&n))
            {
                return Err(DecodeError::Unsupported(format!(
                    "the special register `{t}`"
                )));
            }
            return Ok(Opd::Reg(self.reg(t)?));
        }
        if let Some(v) = imm(t, fty) {
            return Ok(Opd::Imm(v));
        }
        if let Some(a) = self.symbol(t) {
            return Ok(Opd::Imm(a));
        }
        if let Some(&l) = self.labels.get(t) {
            return Ok(Opd::Target(l));
        }
        syntax(format!("unknown operand `{t}`"), t)
    }
}

fn space_of(m: &[&str]) -> Result<Space, String> {
    for x in m {
        let base = x.split("::").next().unwrap_or(x);
        match base {
            "global" => return Ok(Space::Global),
            "shared" if !x.ends_with("::cluster") => return Ok(Space::Shared),
            "shared" => return Err("the .shared::cluster window".into()),
            "local" => return Ok(Space::Local),
            "param" => return Ok(Space::Param),
            "const" | "tex" | "surf" => {
                return Err(format!("the .{base} state space"));
            }
            _ => {}
        }
    }
    Ok(Space::Generic)
}

/// The instruction-mix class of a decoded op.
fn class_of(op: &Op) -> Class {
    match op {
        Op::Alu { op, .. } => match op {
            Alu::Ex2
            | Alu::Lg2
            | Alu::Rsqrt
            | Alu::Sin
            | Alu::Cos
            | Alu::Tanh
            | Alu::Rcp { approx: true }
            | Alu::Sqrt { approx: true }
            | Alu::Div {
                approx: Approx::Approx | Approx::Full,
            } => Class::Sfu,
            _ => Class::Alu,
        },
        Op::MovVec { .. } | Op::Cvt { .. } | Op::CvtPack { .. } => Class::Alu,
        Op::Ld { space, .. } => match space {
            Space::Global => Class::GlobalLoad,
            Space::Shared => Class::SharedLoad,
            Space::Local => Class::LocalLoad,
            Space::Param => Class::ParamLoad,
            Space::Generic => Class::GenericLoad,
        },
        Op::St { space, .. } => match space {
            Space::Global => Class::GlobalStore,
            Space::Shared => Class::SharedStore,
            Space::Local => Class::LocalStore,
            Space::Param | Space::Generic => Class::GenericStore,
        },
        Op::Atom { .. } => Class::Atomic,
        Op::Bra { .. } | Op::Exit | Op::Bar { .. } | Op::Fence => Class::Control,
        Op::Shfl { .. } | Op::Vote { .. } => Class::Collective,
        Op::Ldmatrix { .. } => Class::Ldmatrix,
        Op::Mma { .. } => Class::Mma,
        Op::CpAsync { .. } | Op::CpCommit | Op::CpWait { .. } | Op::CpWaitAll => Class::AsyncCopy,
    }
}

/// Decodes one instruction statement (guard, opcode, operands).
pub(crate) fn decode(cx: &mut Ctx, line: u32, s: &str) -> Result<Inst, DecodeError> {
    let mut rest = s.trim();
    let mut guard = None;
    if let Some(g) = rest.strip_prefix('@') {
        let Some(end) = g.find(char::is_whitespace) else {
            return syntax(format!("bad guard in `{s}`"), s);
        };
        let (neg, r) = match g[..end].strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, &g[..end]),
        };
        guard = Some((cx.reg(r)?, neg));
        rest = g[end..].trim_start();
    }
    let (opcode, argstr) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let parts: Vec<&str> = opcode.split('.').collect();
    let base = parts[0];
    let m: Vec<&str> = parts[1..]
        .iter()
        .copied()
        .filter(|x| {
            !x.starts_with("L1::")
                && !x.starts_with("L2::")
                && !matches!(*x, "ca" | "cg" | "cs" | "lu" | "cv" | "wb" | "wt")
                || base == "cp"
        })
        .collect();
    let has = |x: &str| m.contains(&x);
    let tys: Vec<Ty> = m.iter().filter_map(|x| Ty::parse(x)).collect();
    let ty = tys.last().copied();
    let unsupported = |why: &str| DecodeError::Unsupported(format!("`{opcode}`: {why}"));
    let unknown = || DecodeError::Unsupported(format!("unknown instruction `{opcode}`"));
    let raw = split_args(argstr);
    let fty = ty.filter(|t| matches!(t, Ty::F32 | Ty::F64));
    let mut args = Vec::with_capacity(raw.len());
    for a in &raw {
        args.push(cx.opd(a, fty)?);
    }
    let need = |n: usize| -> Result<(), DecodeError> {
        if args.len() == n {
            Ok(())
        } else {
            syntax(
                format!("`{opcode}` takes {n} operands, got {}", args.len()),
                opcode,
            )
        }
    };
    let check_round = || -> Result<(), DecodeError> {
        for r in ["rz", "rm", "rp"] {
            if has(r) {
                return Err(unsupported("only .rn float rounding is supported"));
            }
        }
        Ok(())
    };
    let alu = |op: Alu, t: Ty| Op::Alu {
        op,
        ty: t,
        ftz: has("ftz"),
        sat: has("sat"),
        relu: has("relu"),
    };
    let op = match base {
        "mov" => {
            let t = ty.ok_or_else(unknown)?;
            need(2)?;
            if args.iter().any(|a| matches!(a, Opd::Vec(_))) {
                Op::MovVec { ty: t }
            } else {
                alu(Alu::Mov, t)
            }
        }
        "add" | "sub" | "mul" | "mad" | "fma" | "div" | "rem" | "min" | "max" | "and" | "or"
        | "xor" | "shl" | "shr" | "abs" | "neg" | "not" | "popc" | "clz" | "brev" => {
            let t = ty.ok_or_else(unknown)?;
            let f = t.is_float();
            let half = t.is_half();
            if f && t != Ty::F32 && t != Ty::F64 {
                if !half
                    || !matches!(
                        base,
                        "add" | "sub" | "mul" | "fma" | "min" | "max" | "abs" | "neg"
                    )
                {
                    return Err(unsupported(
                        "half-precision types support add, sub, mul, fma, min, max, abs, neg",
                    ));
                }
                if matches!(t, Ty::BF16 | Ty::BF16x2) && (has("ftz") || has("sat")) {
                    return Err(unsupported(".ftz/.sat are not defined for bf16"));
                }
            }
            if t == Ty::F64 && (has("ftz") || has("sat") || has("approx") || has("full")) {
                return Err(unsupported("f64 arithmetic is IEEE only (.rn)"));
            }
            check_round()?;
            if has("cc") {
                return Err(unsupported("the carry modifier .cc"));
            }
            if has("relu") && !(half && base == "fma") {
                return Err(unsupported(".relu outside half-precision fma"));
            }
            let xorsign = has("xorsign");
            if xorsign && !(half && has("abs") && matches!(base, "min" | "max")) {
                return Err(unsupported(
                    ".xorsign.abs is supported on half-precision min/max",
                ));
            }
            if matches!(base, "abs" | "neg") && f && t != Ty::F32 && t != Ty::F64 && has("ftz") {
                return Err(unsupported(".ftz on half-precision abs/neg"));
            }
            let o = match base {
                "add" => Alu::Add,
                "sub" => Alu::Sub,
                "mul" if f => Alu::MulLo,
                "mul" if has("hi") => Alu::MulHi,
                "mul" if has("wide") => Alu::MulWide,
                "mul" if has("lo") => Alu::MulLo,
                "mad" if f => Alu::Fma,
                "mad" if has("hi") => Alu::MadHi,
                "mad" if has("wide") => Alu::MadWide,
                "mad" if has("lo") => Alu::MadLo,
                "mul" | "mad" => {
                    return Err(unsupported("integer mul/mad needs .lo, .hi or .wide"));
                }
                "fma" if f => Alu::Fma,
                "div" => Alu::Div {
                    approx: if has("approx") {
                        Approx::Approx
                    } else if has("full") {
                        Approx::Full
                    } else {
                        Approx::Exact
                    },
                },
                "rem" => Alu::Rem,
                "min" => Alu::Min {
                    nan: has("NaN"),
                    xorsign,
                },
                "max" => Alu::Max {
                    nan: has("NaN"),
                    xorsign,
                },
                "and" => Alu::And,
                "or" => Alu::Or,
                "xor" => Alu::Xor,
                "shl" => Alu::Shl,
                "shr" => Alu::Shr,
                "abs" => Alu::Abs,
                "neg" => Alu::Neg,
                "not" => Alu::Not,
                "popc" => Alu::Popc,
                "clz" => Alu::Clz,
                "brev" if matches!(t, Ty::B32 | Ty::B64) => Alu::Brev,
                _ => return Err(unknown()),
            };
            if f && matches!(
                o,
                Alu::Div {
                    approx: Approx::Exact
                }
            ) && !has("rn")
            {
                return Err(unsupported("float div needs .rn, .full or .approx"));
            }
            if t == Ty::F64 && matches!(o, Alu::Fma) && !has("rn") {
                return Err(unsupported("f64 fma/mad needs .rn"));
            }
            let n = match o {
                Alu::Abs | Alu::Neg | Alu::Not | Alu::Popc | Alu::Clz | Alu::Brev => 2,
                Alu::Fma | Alu::MadLo | Alu::MadHi | Alu::MadWide => 4,
                _ => 3,
            };
            need(n)?;
            alu(o, t)
        }
        "prmt" => {
            if ty != Some(Ty::B32) {
                return Err(unsupported("only prmt.b32"));
            }
            need(4)?;
            let mode = match m.iter().find(|x| Ty::parse(x).is_none()).copied() {
                None => Prmt::Generic,
                Some("f4e") => Prmt::F4e,
                Some("b4e") => Prmt::B4e,
                Some("rc8") => Prmt::Rc8,
                Some("ecl") => Prmt::Ecl,
                Some("ecr") => Prmt::Ecr,
                Some("rc16") => Prmt::Rc16,
                Some(x) => return Err(unsupported(&format!("prmt mode .{x}"))),
            };
            alu(Alu::Prmt(mode), Ty::B32)
        }
        "bfe" => {
            let t = ty.ok_or_else(unknown)?;
            if !matches!(t, Ty::U32 | Ty::U64 | Ty::S32 | Ty::S64) {
                return Err(unsupported("bfe types are .u32, .u64, .s32, .s64"));
            }
            need(4)?;
            alu(Alu::Bfe, t)
        }
        "bfi" => {
            let t = ty.ok_or_else(unknown)?;
            if !matches!(t, Ty::B32 | Ty::B64) {
                return Err(unsupported("bfi types are .b32, .b64"));
            }
            need(5)?;
            alu(Alu::Bfi, t)
        }
        "lop3" => {
            if ty != Some(Ty::B32) || m.len() != 1 {
                return Err(unsupported("only lop3.b32 (no .BoolOp form)"));
            }
            need(5)?;
            if !matches!(args[4], Opd::Imm(v) if v <= 255) {
                return syntax("lop3's immLut must be an immediate in 0..=255", raw[4]);
            }
            alu(Alu::Lop3, Ty::B32)
        }
        "shf" => {
            let left = has("l");
            if ty != Some(Ty::B32) || left == has("r") || has("wrap") == has("clamp") {
                return Err(unsupported("only shf.{l,r}.{wrap,clamp}.b32"));
            }
            need(4)?;
            alu(
                Alu::Shf {
                    left,
                    clamp: has("clamp"),
                },
                Ty::B32,
            )
        }
        "setp" => {
            let t = ty.ok_or_else(unknown)?;
            if t.is_float() && t != Ty::F32 && t != Ty::F64 {
                return Err(unsupported("setp on half-precision types"));
            }
            let cmp = match m.first().copied().unwrap_or("") {
                "eq" => Cmp::Eq,
                "ne" => Cmp::Ne,
                "lt" => Cmp::Lt,
                "le" => Cmp::Le,
                "gt" => Cmp::Gt,
                "ge" => Cmp::Ge,
                "lo" => Cmp::Lo,
                "ls" => Cmp::Ls,
                "hi" => Cmp::Hi,
                "hs" => Cmp::Hs,
                "equ" => Cmp::Equ,
                "neu" => Cmp::Neu,
                "ltu" => Cmp::Ltu,
                "leu" => Cmp::Leu,
                "gtu" => Cmp::Gtu,
                "geu" => Cmp::Geu,
                "num" => Cmp::Num,
                "nan" => Cmp::Nan,
                _ => return Err(unknown()),
            };
            let bop = m.get(1).and_then(|x| match *x {
                "and" => Some(BoolOp::And),
                "or" => Some(BoolOp::Or),
                "xor" => Some(BoolOp::Xor),
                _ => None,
            });
            need(if bop.is_some() { 4 } else { 3 })?;
            alu(Alu::Setp { cmp, bop }, t)
        }
        "selp" => {
            need(4)?;
            alu(Alu::Selp, ty.ok_or_else(unknown)?)
        }
        "testp" => {
            need(2)?;
            let k = match m.first().copied().unwrap_or("") {
                "finite" => Testp::Finite,
                "infinite" => Testp::Infinite,
                "number" => Testp::Number,
                "notanumber" => Testp::NotANumber,
                "normal" => Testp::Normal,
                "subnormal" => Testp::Subnormal,
                _ => return Err(unknown()),
            };
            let t = ty.ok_or_else(unknown)?;
            if t != Ty::F32 && t != Ty::F64 {
                return Err(unsupported("testp is .f32/.f64"));
            }
            alu(Alu::Testp(k), t)
        }
        "ex2" | "lg2" | "rcp" | "rsqrt" | "sqrt" | "sin" | "cos" | "tanh" => {
            need(2)?;
            let t = ty.ok_or_else(unknown)?;
            let approx = has("approx");
            let f64_ieee = t == Ty::F64 && matches!(base, "rcp" | "sqrt") && has("rn");
            if t != Ty::F32 && !f64_ieee {
                return Err(unsupported("only .f32 (and rcp/sqrt.rn.f64)"));
            }
            check_round()?;
            if !approx && !has("rn") {
                return Err(unsupported("needs .approx or .rn"));
            }
            if !approx && !matches!(base, "rcp" | "sqrt") {
                return Err(unsupported("only rcp and sqrt have an IEEE .rn form"));
            }
            alu(
                match base {
                    "ex2" => Alu::Ex2,
                    "lg2" => Alu::Lg2,
                    "rcp" => Alu::Rcp { approx },
                    "rsqrt" => Alu::Rsqrt,
                    "sqrt" => Alu::Sqrt { approx },
                    "sin" => Alu::Sin,
                    "cos" => Alu::Cos,
                    _ => Alu::Tanh,
                },
                t,
            )
        }
        "cvta" => {
            need(2)?;
            let sp = space_of(&m).map_err(|e| unsupported(&e))?;
            if !matches!(sp, Space::Global | Space::Shared | Space::Local) {
                return Err(unsupported("only .global, .shared and .local"));
            }
            alu(
                Alu::Cvta {
                    to_generic: !has("to"),
                    space: sp,
                },
                ty.ok_or_else(unknown)?,
            )
        }
        "cvt" => {
            if tys.len() != 2 {
                return Err(unknown());
            }
            let (d, a) = (tys[0], tys[1]);
            let packed = matches!(d, Ty::BF16x2 | Ty::F16x2 | Ty::E4M3x2 | Ty::E5M2x2);
            if d == Ty::Tf32 {
                if a != Ty::F32 || !has("rna") {
                    return Err(unsupported("only cvt.rna.tf32.f32"));
                }
                need(2)?;
                Op::CvtPack {
                    dst: d,
                    src: a,
                    relu: false,
                }
            } else if packed {
                if !has("rn") {
                    return Err(unsupported("packed conversions need .rn"));
                }
                if matches!(d, Ty::E4M3x2 | Ty::E5M2x2) && !has("satfinite") {
                    return Err(unsupported("f32 -> fp8 needs .satfinite"));
                }
                if has("satfinite") && matches!(d, Ty::BF16x2 | Ty::F16x2) {
                    return Err(unsupported(".satfinite to f16x2/bf16x2"));
                }
                if a == Ty::F32 {
                    need(3)?;
                } else if d == Ty::F16x2 && matches!(a, Ty::E4M3x2 | Ty::E5M2x2) {
                    need(2)?;
                } else {
                    return Err(unsupported("packed conversion types"));
                }
                Op::CvtPack {
                    dst: d,
                    src: a,
                    relu: has("relu"),
                }
            } else {
                need(2)?;
                let rnd = if has("rn") {
                    FRound::Rn
                } else if has("rni") {
                    FRound::Int(IRound::Rni)
                } else if has("rzi") {
                    FRound::Int(IRound::Rzi)
                } else if has("rmi") {
                    FRound::Int(IRound::Rmi)
                } else if has("rpi") {
                    FRound::Int(IRound::Rpi)
                } else if has("rz") || has("rm") || has("rp") || has("rna") || has("rs") {
                    return Err(unsupported("rounding mode"));
                } else {
                    FRound::None
                };
                // the combinations `cvt` supports, checked once here
                crate::convert::cvt(d, a, rnd, has("ftz"), has("sat"), 0)
                    .map_err(|e| unsupported(&e))?;
                Op::Cvt {
                    dst: d,
                    src: a,
                    rnd,
                    ftz: has("ftz"),
                    sat: has("sat") || has("satfinite"),
                }
            }
        }
        "ld" | "st" | "ldu" => {
            let sp = space_of(&m).map_err(|e| unsupported(&e))?;
            let vec = if has("v2") {
                2
            } else if has("v4") {
                4
            } else if m
                .iter()
                .any(|x| x.starts_with('v') && x[1..].parse::<u32>().is_ok())
            {
                return Err(unsupported("vector width"));
            } else {
                1
            };
            let t = ty.ok_or_else(unknown)?;
            if t == Ty::Pred || t.bits() > 64 {
                return Err(unsupported("load/store type"));
            }
            if has("volatile") || has("relaxed") || has("acquire") || has("release") || has("mmio")
            {
                return Err(unsupported("memory-consistency qualifiers"));
            }
            need(2)?;
            let nc = has("nc");
            if nc && (base != "ld" || sp != Space::Global) {
                return Err(unsupported(".nc is ld.global.nc only"));
            }
            if base == "ldu" && sp != Space::Global {
                return Err(unsupported("ldu.global only"));
            }
            if base == "st" && sp == Space::Param {
                return Err(unsupported("st.param"));
            }
            if base == "st" {
                Op::St {
                    space: sp,
                    ty: t,
                    vec,
                }
            } else {
                Op::Ld {
                    space: sp,
                    ty: t,
                    vec,
                    nc: nc || base == "ldu",
                }
            }
        }
        "atom" | "red" => {
            let sp = space_of(&m).map_err(|e| unsupported(&e))?;
            if sp == Space::Local || sp == Space::Param {
                return Err(unsupported("atomics on .local/.param"));
            }
            let o = [
                ("add", AtomOp::Add),
                ("min", AtomOp::Min),
                ("max", AtomOp::Max),
                ("and", AtomOp::And),
                ("or", AtomOp::Or),
                ("xor", AtomOp::Xor),
                ("exch", AtomOp::Exch),
                ("cas", AtomOp::Cas),
                ("inc", AtomOp::Inc),
                ("dec", AtomOp::Dec),
            ]
            .iter()
            .find(|(n, _)| has(n))
            .map(|x| x.1)
            .ok_or_else(unknown)?;
            let t = ty.ok_or_else(unknown)?;
            if !matches!(
                t,
                Ty::U32 | Ty::S32 | Ty::B32 | Ty::F32 | Ty::U64 | Ty::S64 | Ty::B64
            ) || m.iter().any(|x| x.starts_with('v'))
            {
                return Err(unsupported("atomic type"));
            }
            if t == Ty::F32 && o != AtomOp::Add && o != AtomOp::Exch {
                return Err(unsupported("f32 atomics are add and exch"));
            }
            let ret = base == "atom";
            need(if o == AtomOp::Cas { 4 } else { 3 } - usize::from(!ret))?;
            Op::Atom {
                space: sp,
                op: o,
                ty: t,
                ret,
            }
        }
        "bra" => {
            need(1)?;
            if !matches!(args[0], Opd::Target(_)) {
                return syntax(format!("unknown label `{}`", raw[0]), raw[0]);
            }
            Op::Bra { uni: has("uni") }
        }
        "ret" | "exit" => {
            need(0)?;
            Op::Exit
        }
        "bar" | "barrier" => {
            if !(has("sync") || (base == "barrier" && m.is_empty()))
                || has("arrive")
                || has("red")
                || has("warp")
                || has("cluster")
            {
                return Err(unsupported(
                    "only bar.sync / barrier.sync over the whole CTA",
                ));
            }
            if args.len() != 1 {
                return Err(unsupported("a thread count operand"));
            }
            let Opd::Imm(id) = args[0] else {
                return Err(unsupported("the barrier id must be an immediate"));
            };
            Op::Bar { id: id as u32 }
        }
        "membar" | "fence" => {
            if has("proxy") && !has("async") || m.iter().any(|x| x.starts_with("mbarrier")) {
                return Err(unsupported("fence form"));
            }
            Op::Fence
        }
        "shfl" => {
            if !has("sync") || ty != Some(Ty::B32) {
                return Err(unsupported("only shfl.sync.*.b32"));
            }
            need(5)?;
            let mode = if has("up") {
                Shfl::Up
            } else if has("down") {
                Shfl::Down
            } else if has("bfly") {
                Shfl::Bfly
            } else if has("idx") {
                Shfl::Idx
            } else {
                return Err(unknown());
            };
            Op::Shfl { mode }
        }
        "vote" => {
            if !has("sync") {
                return Err(unsupported("only vote.sync"));
            }
            need(3)?;
            let mode = if has("all") {
                Vote::All
            } else if has("any") {
                Vote::Any
            } else if has("uni") {
                Vote::Uni
            } else if has("ballot") {
                Vote::Ballot
            } else {
                return Err(unknown());
            };
            Op::Vote { mode }
        }
        "ldmatrix" => {
            if !has("m8n8") || ty != Some(Ty::B16) || space_of(&m) != Ok(Space::Shared) {
                return Err(unsupported(
                    "only ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16",
                ));
            }
            let num = if has("x1") {
                1
            } else if has("x2") {
                2
            } else if has("x4") {
                4
            } else {
                return Err(unknown());
            };
            need(2)?;
            if !matches!(&args[0], Opd::Vec(v) if v.len() == num as usize) {
                return syntax(
                    format!("`{opcode}` needs {num} destination registers"),
                    raw[0],
                );
            }
            Op::Ldmatrix {
                num,
                trans: has("trans"),
            }
        }
        "mma" => {
            let shape = m
                .iter()
                .find(|x| x.starts_with('m') && x.contains('n') && x.contains('k'))
                .copied()
                .unwrap_or("");
            let (k, a, b) = if tys.len() == 4 {
                (
                    shape.rsplit('k').next().and_then(|x| x.parse::<u8>().ok()),
                    tys[1],
                    tys[2],
                )
            } else {
                (None, Ty::Pred, Ty::Pred)
            };
            let ok = has("sync")
                && has("aligned")
                && has("row")
                && has("col")
                && tys.len() == 4
                && tys[0] == Ty::F32
                && tys[3] == Ty::F32
                && shape.starts_with("m16n8k")
                && match (k, a, b) {
                    (Some(16 | 8), Ty::BF16, Ty::BF16) | (Some(16 | 8), Ty::F16, Ty::F16) => true,
                    (Some(8 | 4), Ty::Tf32, Ty::Tf32) => true,
                    (Some(32), Ty::E4M3 | Ty::E5M2, Ty::E4M3 | Ty::E5M2) => true,
                    _ => false,
                };
            if !ok {
                return Err(unsupported(
                    "supported: mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.f32.{bf16,f16}.{bf16,f16}.f32, \
                     m16n8k8/m16n8k4 .f32.tf32.tf32.f32, m16n8k32 .f32.{e4m3,e5m2}.{e4m3,e5m2}.f32",
                ));
            }
            let k = k.unwrap_or(0);
            need(4)?;
            let lens = crate::mma::fragment_regs(k, a);
            for (i, (o, n)) in args.iter().zip(lens).enumerate() {
                if !matches!(o, Opd::Vec(v) if v.len() == n) {
                    return syntax(
                        format!(
                            "`{opcode}` operand shapes must be {{{}}}, {{{}}}, {{{}}}, {{{}}}",
                            lens[0], lens[1], lens[2], lens[3]
                        ),
                        raw[i],
                    );
                }
            }
            Op::Mma { k, a, b }
        }
        "cp" => {
            if !has("async") {
                return Err(unknown());
            }
            if has("bulk") {
                return Err(unsupported("cp.async.bulk"));
            }
            if has("commit_group") {
                need(0)?;
                Op::CpCommit
            } else if has("wait_all") {
                need(0)?;
                Op::CpWaitAll
            } else if has("wait_group") {
                need(1)?;
                let Opd::Imm(n) = args[0] else {
                    return Err(unsupported("wait_group needs an immediate"));
                };
                Op::CpWait { n: n as u32 }
            } else if has("ca") || has("cg") {
                if !(3..=4).contains(&args.len()) {
                    return syntax(format!("`{opcode}` takes 3 or 4 operands"), opcode);
                }
                if matches!(args.get(3), Some(Opd::Not(_))) {
                    return Err(unsupported("ignore-src predicate"));
                }
                let Opd::Imm(n) = args[2] else {
                    return Err(unsupported("cp-size must be an immediate"));
                };
                if !matches!(n, 4 | 8 | 16) || (has("cg") && n != 16) {
                    return syntax(
                        format!("`{opcode}`: cp-size {n} is invalid (.ca: 4, 8, 16; .cg: 16)"),
                        raw[2],
                    );
                }
                Op::CpAsync { bytes: n as u8 }
            } else {
                return Err(unknown());
            }
        }
        _ => return Err(unknown()),
    };
    Ok(Inst {
        line,
        class: class_of(&op),
        guard,
        op,
        args: args.into(),
        text: s.into(),
    })
}
