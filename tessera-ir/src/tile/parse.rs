//! Tile IR parser: the inverse of the printer. Values are renumbered in the order the
//! [`super::Builder`] would create them, so `print(parse(print(k))) == print(k)`.

use super::{CmpOp, GridDim, Inst, InstData, Kernel, Op, Param, TValue, TileReduce, TileType};
use crate::graph::{BinaryOp, UnaryOp};
use crate::text::{Cursor, ParseError, Tok};
use crate::{DType, NumericsPolicy};
use std::collections::HashMap;

/// Parses one kernel. Types are taken as written; [`super::verify`] checks them.
pub fn parse(src: &str) -> Result<Kernel, ParseError> {
    let mut c = Cursor::new(src)?;
    let k = parse_kernel(&mut c)?;
    if !c.at_end() {
        return Err(c.error(format!("unexpected {} after the kernel", c.peek())));
    }
    Ok(k)
}

struct P<'a> {
    c: &'a mut Cursor,
    k: Kernel,
    names: HashMap<String, TValue>,
}

pub(crate) fn parse_kernel(c: &mut Cursor) -> Result<Kernel, ParseError> {
    c.expect_kw("kernel")?;
    let name = c.symbol()?;
    let params = c.list("(", ")", |c| {
        let name = c.value()?;
        c.expect(":")?;
        let d = c.ident()?;
        let dtype = DType::parse(&d).ok_or_else(|| c.error(format!("unknown dtype `{d}`")))?;
        c.expect("<")?;
        let rank = c.usize()?;
        c.expect(">")?;
        Ok(Param { name, dtype, rank })
    })?;
    let mut k = Kernel {
        name,
        params,
        grid: [GridDim::one(), GridDim::one(), GridDim::one()],
        policy: NumericsPolicy::Fast,
        types: vec![],
        insts: vec![],
        body: vec![],
    };
    c.expect_kw("grid")?;
    c.expect("=")?;
    let grid = c.list("[", "]", |c| parse_grid_dim(c, &k))?;
    k.grid = grid
        .try_into()
        .map_err(|_| c.error("grid needs exactly 3 dimensions"))?;
    if c.eat_kw("numerics") {
        c.expect("=")?;
        let n = c.ident()?;
        k.policy = NumericsPolicy::parse(&n)
            .ok_or_else(|| c.error(format!("unknown numerics policy `{n}`")))?;
    }
    c.expect("{")?;
    let mut p = P {
        c,
        k,
        names: HashMap::new(),
    };
    let body = p.block()?;
    p.k.body = body;
    Ok(p.k)
}

fn parse_grid_dim(c: &mut Cursor, k: &Kernel) -> Result<GridDim, ParseError> {
    if let Tok::Int(i) = c.peek().clone() {
        if i != 0 && i != 1 {
            return Err(c.error(format!(
                "a constant grid dimension is 1 (or 0 for none), found {i}; \
                 sizes are written cdiv(dim(%p, axis), tile)"
            )));
        }
        c.next();
        return Ok(GridDim {
            dims: vec![],
            tile: i as u32,
        });
    }
    c.expect_kw("cdiv")?;
    c.expect("(")?;
    let mut dims = Vec::new();
    loop {
        c.expect_kw("dim")?;
        c.expect("(")?;
        let pname = c.value()?;
        let pi = k
            .param_index(&pname)
            .ok_or_else(|| c.error(format!("unknown parameter `%{pname}`")))?;
        c.expect(",")?;
        let axis = c.usize()?;
        c.expect(")")?;
        dims.push((pi, axis));
        if !c.eat("*") {
            break;
        }
    }
    c.expect(",")?;
    let tile = c.u32()?;
    c.expect(")")?;
    Ok(GridDim { dims, tile })
}

impl P<'_> {
    fn fresh(&mut self, name: String, ty: TileType) -> Result<TValue, ParseError> {
        if self.names.contains_key(&name) {
            return Err(self.c.error(format!("value `%{name}` defined twice")));
        }
        self.k.types.push(ty);
        let v = TValue(self.k.types.len() as u32 - 1);
        self.names.insert(name, v);
        Ok(v)
    }

    fn use_(&mut self) -> Result<TValue, ParseError> {
        let n = self.c.value()?;
        self.names
            .get(&n)
            .copied()
            .ok_or_else(|| self.c.error(format!("use of undefined value `%{n}`")))
    }

    fn uses(&mut self) -> Result<Vec<TValue>, ParseError> {
        let mut out = vec![self.use_()?];
        while self.c.eat(",") {
            out.push(self.use_()?);
        }
        Ok(out)
    }

    fn ty(&mut self) -> Result<TileType, ParseError> {
        let d = self.c.ident()?;
        let dtype = DType::parse(&d).ok_or_else(|| self.c.error(format!("unknown dtype `{d}`")))?;
        let shape = if matches!(self.c.peek(), Tok::Punct("[")) {
            self.c.list("[", "]", |c| c.usize())?
        } else {
            vec![]
        };
        Ok(TileType { dtype, shape })
    }

    fn param(&mut self) -> Result<usize, ParseError> {
        let n = self.c.value()?;
        self.k
            .param_index(&n)
            .ok_or_else(|| self.c.error(format!("unknown parameter `%{n}`")))
    }

    fn push(&mut self, results: Vec<TValue>, op: Op) -> Inst {
        self.k.insts.push(InstData { results, op });
        Inst(self.k.insts.len() as u32 - 1)
    }

    fn block(&mut self) -> Result<Vec<Inst>, ParseError> {
        let mut insts = Vec::new();
        loop {
            if self.c.eat("}") {
                return Ok(insts);
            }
            insts.push(self.inst()?);
        }
    }

    fn inst(&mut self) -> Result<Inst, ParseError> {
        let mut defs = Vec::new();
        if let Tok::Value(_) = self.c.peek() {
            defs.push(self.c.value()?);
            while self.c.eat(",") {
                defs.push(self.c.value()?);
            }
            self.c.expect("=")?;
        }
        let name = self.c.ident()?;
        let op = match name.as_str() {
            "store" => {
                let param = self.param()?;
                let index = self.index()?;
                self.c.expect(",")?;
                let value = self.use_()?;
                let mask = if self.c.eat_kw("mask") {
                    Some(self.use_()?)
                } else {
                    None
                };
                return Ok(self.push(
                    vec![],
                    Op::Store {
                        param,
                        index,
                        value,
                        mask,
                    },
                ));
            }
            "yield" => {
                let xs = if matches!(self.c.peek(), Tok::Value(_)) {
                    self.uses()?
                } else {
                    vec![]
                };
                return Ok(self.push(vec![], Op::Yield(xs)));
            }
            "for" => return self.for_(defs),
            "program_id" => {
                let here = self.c.error("");
                let a = self.c.usize()?;
                Op::ProgramId(u8::try_from(a).map_err(|_| ParseError {
                    message: format!("grid axis {a} out of range 0..3"),
                    ..here
                })?)
            }
            "const" => Op::Const(self.c.number()?),
            "full" => Op::Full(self.c.number()?),
            "arange" => Op::Arange,
            "dim" => {
                let param = self.param()?;
                self.c.expect(",")?;
                Op::Dim {
                    param,
                    axis: self.c.usize()?,
                }
            }
            "expand" => {
                let a = self.use_()?;
                self.c.expect_kw("axis")?;
                self.c.expect("=")?;
                Op::Expand {
                    a,
                    axis: self.c.usize()?,
                }
            }
            "reduce.sum" | "reduce.max" => {
                let a = self.use_()?;
                self.c.expect_kw("axis")?;
                self.c.expect("=")?;
                let axis = self.c.usize()?;
                self.c.expect_kw("policy")?;
                self.c.expect("=")?;
                let pn = self.c.ident()?;
                let policy = NumericsPolicy::parse(&pn)
                    .ok_or_else(|| self.c.error(format!("unknown numerics policy `{pn}`")))?;
                let op = if name == "reduce.sum" {
                    TileReduce::Sum
                } else {
                    TileReduce::Max
                };
                Op::Reduce {
                    op,
                    a,
                    axis,
                    policy,
                }
            }
            "load" => {
                let param = self.param()?;
                let index = self.index()?;
                let mask = if self.c.eat_kw("mask") {
                    Some(self.use_()?)
                } else {
                    None
                };
                let other = if self.c.eat_kw("other") {
                    self.c.number()?
                } else {
                    0.0
                };
                Op::Load {
                    param,
                    index,
                    mask,
                    other,
                }
            }
            "im2col" => {
                let param = self.param()?;
                let index = self.index()?;
                let [row, col, chan] = index[..] else {
                    return Err(self.c.error(format!(
                        "im2col takes three indices `[row, col, chan]`, got {}",
                        index.len()
                    )));
                };
                let pair = |c: &mut Cursor, key: &str| -> Result<[u32; 2], ParseError> {
                    c.expect_kw(key)?;
                    c.expect("=")?;
                    let v = c.list("[", "]", |c| c.u32())?;
                    match v.as_slice() {
                        [a, b] => Ok([*a, *b]),
                        _ => Err(c.error(format!("{key} takes two values `[h, w]`"))),
                    }
                };
                self.c.expect_kw("height")?;
                self.c.expect("=")?;
                let height = self.c.u32()?;
                let kernel = pair(self.c, "kernel")?;
                self.c.expect_kw("cg")?;
                self.c.expect("=")?;
                let cg = self.c.u32()?;
                let stride = pair(self.c, "stride")?;
                let padding = pair(self.c, "padding")?;
                let dilation = pair(self.c, "dilation")?;
                Op::Im2col {
                    param,
                    row,
                    col,
                    chan,
                    geom: super::Im2colGeom {
                        height,
                        kernel,
                        cg,
                        stride,
                        padding,
                        dilation,
                    },
                }
            }
            _ => {
                let args = self.uses()?;
                let n = args.len();
                let want = |k: usize, c: &Cursor| {
                    if n == k {
                        Ok(())
                    } else {
                        Err(c.error(format!("`{name}` takes {k} operand(s), got {n}")))
                    }
                };
                if let Some(u) = UnaryOp::parse(&name) {
                    want(1, self.c)?;
                    Op::Unary(u, args[0])
                } else if let Some(b) = BinaryOp::parse(&name) {
                    want(2, self.c)?;
                    Op::Binary(b, args[0], args[1])
                } else if let Some(cmp) = name.strip_prefix("cmp.").and_then(CmpOp::parse) {
                    want(2, self.c)?;
                    Op::Cmp(cmp, args[0], args[1])
                } else {
                    match name.as_str() {
                        "select" => {
                            want(3, self.c)?;
                            Op::Select(args[0], args[1], args[2])
                        }
                        "fft" | "ifft" => {
                            want(1, self.c)?;
                            Op::Fft {
                                a: args[0],
                                inverse: name == "ifft",
                            }
                        }
                        "cast" | "broadcast" | "trans" => {
                            want(1, self.c)?;
                            match name.as_str() {
                                "cast" => Op::Cast(args[0]),
                                "broadcast" => Op::Broadcast(args[0]),
                                _ => Op::Trans(args[0]),
                            }
                        }
                        "dot" => {
                            want(3, self.c)?;
                            Op::Dot {
                                a: args[0],
                                b: args[1],
                                acc: args[2],
                            }
                        }
                        _ => return Err(self.c.error(format!("unknown tile op `{name}`"))),
                    }
                }
            }
        };
        self.c.expect(":")?;
        let ty = self.ty()?;
        if defs.len() != 1 {
            return Err(self.c.error(format!("`{name}` defines exactly one value")));
        }
        let r = self.fresh(defs.pop().unwrap(), ty)?;
        Ok(self.push(vec![r], op))
    }

    fn index(&mut self) -> Result<Vec<TValue>, ParseError> {
        self.c.expect("[")?;
        let mut out = Vec::new();
        if !self.c.eat("]") {
            out = self.uses()?;
            self.c.expect("]")?;
        }
        Ok(out)
    }

    fn for_(&mut self, defs: Vec<String>) -> Result<Inst, ParseError> {
        let ivn = self.c.value()?;
        self.c.expect("=")?;
        let lo = self.use_()?;
        self.c.expect_kw("to")?;
        let hi = self.use_()?;
        self.c.expect_kw("step")?;
        let step = self.c.int()?;
        let iv = self.fresh(ivn, TileType::scalar(DType::I32))?;
        self.c.expect_kw("iter")?;
        self.c.expect("(")?;
        let (mut args, mut inits) = (Vec::new(), Vec::new());
        if !self.c.eat(")") {
            loop {
                let an = self.c.value()?;
                self.c.expect(":")?;
                let ty = self.ty()?;
                self.c.expect("=")?;
                inits.push(self.use_()?);
                args.push(self.fresh(an, ty)?);
                if self.c.eat(")") {
                    break;
                }
                self.c.expect(",")?;
            }
        }
        if defs.len() != args.len() {
            return Err(self.c.error(format!(
                "`for` carries {} value(s) but defines {}",
                args.len(),
                defs.len()
            )));
        }
        self.c.expect("{")?;
        let body = self.block()?;
        let mut results = Vec::new();
        for (d, a) in defs.into_iter().zip(&args) {
            let ty = self.k.ty(*a).clone();
            results.push(self.fresh(d, ty)?);
        }
        Ok(self.push(
            results,
            Op::For {
                iv,
                lo,
                hi,
                step,
                inits,
                args,
                body,
            },
        ))
    }
}
