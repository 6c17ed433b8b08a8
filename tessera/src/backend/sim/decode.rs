//! One PTX instruction (text) → [`Inst`]: opcode modifiers to an [`Op`], operands resolved.
//! Anything not listed here is an error naming the instruction and its line.

use super::ir::*;
use super::parse::{ParseError, Regs, err, split_args};
use std::collections::HashMap;

/// Names visible to instructions.
pub(crate) struct Ctx<'a> {
    pub regs: &'a mut Regs,
    pub shared: &'a HashMap<String, u64>,
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
        _ => None,
    }
}

impl Ctx<'_> {
    fn reg(&mut self, line: u32, t: &str) -> Result<u32, ParseError> {
        let n = t.trim().trim_start_matches('%');
        self.regs.get(n).ok_or_else(|| ParseError {
            line,
            message: format!("undeclared register `{t}`"),
        })
    }

    fn opd(&mut self, line: u32, tok: &str, fty: Option<Ty>) -> Result<Opd, ParseError> {
        let t = tok.trim();
        if t == "_" {
            return Ok(Opd::Sink);
        }
        if let Some(inner) = t.strip_prefix('{') {
            let inner = inner.strip_suffix('}').ok_or_else(|| ParseError {
                line,
                message: format!("bad vector operand `{t}`"),
            })?;
            let v: Result<Vec<Opd>, _> = inner.split(',').map(|x| self.opd(line, x, fty)).collect();
            return Ok(Opd::Vec(v?.into()));
        }
        if let Some(inner) = t.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| ParseError {
                    line,
                    message: format!("bad address `{t}`"),
                })?
                .trim();
            if inner.contains(',') {
                return err(line, format!("unsupported address form `{t}`"));
            }
            let split = inner[1..].find(['+', '-']).map(|i| i + 1);
            let (b, o) = match split {
                Some(i) => (inner[..i].trim(), inner[i..].trim()),
                None => (inner, ""),
            };
            let off = if o.is_empty() {
                0
            } else {
                imm(o.strip_prefix('+').unwrap_or(o), None).ok_or_else(|| ParseError {
                    line,
                    message: format!("bad offset in `{t}`"),
                })? as i64
            };
            let base = if b.starts_with('%') {
                Base::Reg(self.reg(line, b)?)
            } else if let Some(&a) = self.shared.get(b) {
                Base::Abs(a)
            } else if let Some(&p) = self.params.get(b) {
                Base::Param(p)
            } else if let Some(v) = imm(b, None) {
                Base::Abs(v)
            } else {
                return err(line, format!("unknown symbol `{b}` in `{t}`"));
            };
            return Ok(Opd::Mem(Addr { base, off }));
        }
        if let Some(r) = t.strip_prefix('!') {
            return Ok(Opd::Not(self.reg(line, r)?));
        }
        if let Some((a, b)) = t.split_once('|') {
            return Ok(Opd::Pair(self.reg(line, a)?, self.reg(line, b)?));
        }
        if let Some(n) = t.strip_prefix('%') {
            if let Some(s) = sreg(n) {
                return Ok(Opd::Sreg(s));
            }
            if n.contains('.')
                || [
                    "clock",
                    "clock64",
                    "smid",
                    "nsmid",
                    "gridid",
                    "lanemask_eq",
                    "globaltimer",
                ]
                .contains(&n)
            {
                return err(line, format!("unsupported special register `{t}`"));
            }
            return Ok(Opd::Reg(self.reg(line, t)?));
        }
        if let Some(v) = imm(t, fty) {
            return Ok(Opd::Imm(v));
        }
        if let Some(&a) = self.shared.get(t) {
            return Ok(Opd::Imm(a));
        }
        if let Some(&l) = self.labels.get(t) {
            return Ok(Opd::Target(l));
        }
        err(line, format!("unknown operand `{t}`"))
    }
}

fn space_of(m: &[&str]) -> Result<Space, String> {
    for x in m {
        let base = x.split("::").next().unwrap_or(x);
        match base {
            "global" => return Ok(Space::Global),
            "shared" => return Ok(Space::Shared),
            "param" => return Ok(Space::Param),
            "local" | "const" | "tex" => {
                return Err(format!("the .{base} state space is not supported"));
            }
            _ => {}
        }
    }
    Ok(Space::Generic)
}

/// Decodes one instruction statement (guard, opcode, operands).
pub(crate) fn decode(cx: &mut Ctx, line: u32, s: &str) -> Result<Inst, ParseError> {
    let mut rest = s.trim();
    let mut guard = None;
    if let Some(g) = rest.strip_prefix('@') {
        let end = g.find(char::is_whitespace).ok_or_else(|| ParseError {
            line,
            message: format!("bad guard in `{s}`"),
        })?;
        let (neg, r) = match g[..end].strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, &g[..end]),
        };
        guard = Some((cx.reg(line, r)?, neg));
        rest = g[end..].trim_start();
    }
    let (opcode, argstr) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let parts: Vec<&str> = opcode.split('.').collect();
    let base = parts[0];
    let m: Vec<&str> = parts[1..]
        .iter()
        .copied()
        .filter(|x| !x.starts_with("L1::") && !x.starts_with("L2::"))
        .collect();
    let has = |x: &str| m.contains(&x);
    let tys: Vec<Ty> = m.iter().filter_map(|x| Ty::parse(x)).collect();
    let ty = tys.last().copied();
    let unknown = || ParseError {
        line,
        message: format!("unknown instruction `{opcode}`"),
    };
    let unsupported = |why: &str| ParseError {
        line,
        message: format!("unsupported instruction `{opcode}`: {why}"),
    };
    let raw = split_args(argstr);
    let fty = ty.filter(|t| t.is_float());
    let mut args = Vec::with_capacity(raw.len());
    for a in &raw {
        args.push(cx.opd(line, a, fty)?);
    }
    let need = |n: usize| -> Result<(), ParseError> {
        if args.len() == n {
            Ok(())
        } else {
            err(
                line,
                format!("`{opcode}` takes {n} operands, got {}", args.len()),
            )
        }
    };
    let check_round = || -> Result<(), ParseError> {
        for r in ["rz", "rm", "rp"] {
            if has(r) {
                return Err(unsupported("only .rn float rounding is supported"));
            }
        }
        Ok(())
    };
    let float_ok = |t: Ty| -> Result<(), ParseError> {
        if t.is_float() && t != Ty::F32 {
            return Err(unsupported("only .f32 float arithmetic is supported"));
        }
        Ok(())
    };
    let alu = |op: Alu, t: Ty| Op::Alu {
        op,
        ty: t,
        ftz: has("ftz"),
        sat: has("sat"),
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
        | "xor" | "shl" | "shr" | "abs" | "neg" | "not" | "popc" | "clz" => {
            let t = ty.ok_or_else(unknown)?;
            float_ok(t)?;
            check_round()?;
            if has("xorsign") || has("cc") || has("relu") {
                return Err(unsupported("modifier"));
            }
            let f = t.is_float();
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
                    approx: has("approx") || has("full"),
                },
                "rem" => Alu::Rem,
                "min" => Alu::Min { nan: has("NaN") },
                "max" => Alu::Max { nan: has("NaN") },
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
                _ => return Err(unknown()),
            };
            if f && matches!(o, Alu::Div { .. }) && !(has("rn") || has("approx") || has("full")) {
                return Err(unsupported("div.f32 needs .rn, .full or .approx"));
            }
            let n = match o {
                Alu::Abs | Alu::Neg | Alu::Not | Alu::Popc | Alu::Clz => 2,
                Alu::Fma | Alu::MadLo | Alu::MadHi | Alu::MadWide => 4,
                _ => 3,
            };
            need(n)?;
            alu(o, t)
        }
        "setp" => {
            let t = ty.ok_or_else(unknown)?;
            float_ok(t)?;
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
            float_ok(t)?;
            alu(Alu::Testp(k), t)
        }
        "ex2" | "lg2" | "rcp" | "rsqrt" | "sqrt" | "sin" | "cos" | "tanh" => {
            need(2)?;
            let t = ty.ok_or_else(unknown)?;
            if t != Ty::F32 {
                return Err(unsupported("only .f32"));
            }
            check_round()?;
            let approx = has("approx");
            if !approx && !has("rn") {
                return Err(unsupported("needs .approx or .rn"));
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
            if !matches!(sp, Space::Global | Space::Shared) {
                return Err(unsupported("only global and shared"));
            }
            alu(
                Alu::Cvta {
                    to_generic: !has("to"),
                    shared: sp == Space::Shared,
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
            if packed {
                if !has("rn") {
                    return Err(unsupported("packed conversions need .rn"));
                }
                if matches!(d, Ty::E4M3x2 | Ty::E5M2x2) && !has("satfinite") {
                    return Err(unsupported("f32 -> fp8 needs .satfinite"));
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
                Op::Cvt {
                    dst: d,
                    src: a,
                    rnd,
                    ftz: has("ftz"),
                    sat: has("sat") || has("satfinite"),
                }
            }
        }
        "ld" | "st" => {
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
            need(2)?;
            if base == "st" && sp == Space::Param {
                return Err(unsupported("st.param"));
            }
            if base == "ld" {
                Op::Ld {
                    space: sp,
                    ty: t,
                    vec,
                }
            } else {
                Op::St {
                    space: sp,
                    ty: t,
                    vec,
                }
            }
        }
        "atom" | "red" => {
            let sp = space_of(&m).map_err(|e| unsupported(&e))?;
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
                return err(line, format!("unknown label `{}`", raw[0]));
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
            match &args[0] {
                Opd::Vec(v) if v.len() == num as usize => {}
                _ => {
                    return err(
                        line,
                        format!("`{opcode}` needs {num} destination registers"),
                    );
                }
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
            if shape != "m16n8k16"
                || !has("row")
                || !has("col")
                || tys.len() != 4
                || tys[0] != Ty::F32
                || tys[3] != Ty::F32
                || tys[1] != tys[2]
                || !matches!(tys[1], Ty::BF16 | Ty::F16)
            {
                return Err(unsupported(
                    "only mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32",
                ));
            }
            need(4)?;
            let lens = [4, 4, 2, 4];
            for (a, n) in args.iter().zip(lens) {
                if !matches!(a, Opd::Vec(v) if v.len() == n) {
                    return err(
                        line,
                        format!("`{opcode}` operand shapes must be {{4}}, {{4}}, {{2}}, {{4}}"),
                    );
                }
            }
            Op::Mma { ab: tys[1] }
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
                    return err(line, format!("`{opcode}` takes 3 or 4 operands"));
                }
                if matches!(args.get(3), Some(Opd::Not(_))) {
                    return Err(unsupported("ignore-src predicate"));
                }
                let Opd::Imm(n) = args[2] else {
                    return Err(unsupported("cp-size must be an immediate"));
                };
                if !matches!(n, 4 | 8 | 16) || (has("cg") && n != 16) {
                    return err(
                        line,
                        format!("`{opcode}`: cp-size {n} is invalid (.ca: 4, 8, 16; .cg: 16)"),
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
        guard,
        op,
        args: args.into(),
        text: s.into(),
    })
}
