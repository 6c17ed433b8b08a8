//! Graph IR parser: the inverse of the printer.

use super::{BinaryOp, Graph, GraphBuilder, Op, ReduceOp, UnaryOp, Value};
use crate::text::{Cursor, ParseError, Tok};
use crate::{DType, Dim, NumericsPolicy, Shape, TensorType};
use std::collections::HashMap;

/// Parses a graph from its text form. Types are taken as written; run [`super::verify`] to check them.
pub fn parse(src: &str) -> Result<Graph, ParseError> {
    let mut c = Cursor::new(src)?;
    let g = parse_graph(&mut c)?;
    if !c.at_end() {
        return Err(c.error(format!("unexpected {} after the graph", c.peek())));
    }
    Ok(g)
}

/// Parses `f32[M, 4]`.
pub(crate) fn parse_tensor_type(c: &mut Cursor) -> Result<TensorType, ParseError> {
    let name = c.ident()?;
    let dtype = DType::parse(&name).ok_or_else(|| c.error(format!("unknown dtype `{name}`")))?;
    let dims = c.list("[", "]", |c| match c.next() {
        Tok::Ident(s) => Ok(Dim::Sym(s)),
        Tok::Int(i) if i >= 0 => Ok(Dim::Const(i as u64)),
        t => Err(c.error(format!("expected a dimension, found {t}"))),
    })?;
    Ok(TensorType::new(dtype, Shape(dims)))
}

pub(crate) fn parse_graph(c: &mut Cursor) -> Result<Graph, ParseError> {
    c.expect_kw("graph")?;
    let name = c.symbol()?;
    let mut b: GraphBuilder = Graph::builder(&name);
    let mut names: HashMap<String, Value> = HashMap::new();
    let params = c.list("(", ")", |c| {
        let n = c.value()?;
        c.expect(":")?;
        Ok((n, parse_tensor_type(c)?))
    })?;
    for (n, ty) in params {
        // Computed values print by number: a parameter named by a number would collide.
        if n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(c.error(format!(
                "parameter `%{n}` is named by a number, as computed values are: name it with a letter"
            )));
        }
        if names.contains_key(&n) {
            return Err(c.error(format!("parameter `%{n}` declared twice")));
        }
        let v = b.param(&n, ty);
        names.insert(n, v);
    }
    c.expect("->")?;
    let declared_at = c.error("");
    let declared_out = parse_tensor_type(c)?;
    c.expect("{")?;
    loop {
        if c.eat_kw("return") {
            let r = c.value()?;
            let out = *names
                .get(&r)
                .ok_or_else(|| c.error(format!("unknown value `%{r}`")))?;
            if *b.ty(out) != declared_out {
                return Err(ParseError {
                    message: format!(
                        "@{name} declares return type {declared_out} but returns `%{r}`: {}",
                        b.ty(out)
                    ),
                    ..declared_at
                });
            }
            c.expect("}")?;
            return Ok(b.finish(out));
        }
        let def = c.value()?;
        c.expect("=")?;
        let op_name = c.ident()?;
        let mut args = Vec::new();
        while let Tok::Value(_) = c.peek() {
            let a = c.value()?;
            args.push(
                *names
                    .get(&a)
                    .ok_or_else(|| c.error(format!("use of undefined value `%{a}`")))?,
            );
            if !c.eat(",") {
                break;
            }
        }
        // `softmax` without `axis=` runs along its operand's last axis.
        let last = args
            .first()
            .map_or(0, |a| b.ty(*a).shape.rank().saturating_sub(1));
        let (op, acc_named) = parse_op(c, &op_name, last)?;
        c.expect(":")?;
        let ty = parse_tensor_type(c)?;
        // `cast` and `const` carry their dtype in the result type, and so does a matmul that
        // does not name its accumulator.
        let op = match op {
            Op::Matmul { policy, .. } if !acc_named => Op::Matmul {
                acc: ty.dtype,
                policy,
            },
            Op::Cast(_) => Op::Cast(ty.dtype),
            Op::Const { value, .. } => Op::Const {
                value,
                dtype: ty.dtype,
            },
            op => op,
        };
        if names.contains_key(&def) {
            return Err(c.error(format!("value `%{def}` defined twice")));
        }
        let v = b.push_typed(op, &args, ty);
        names.insert(def, v);
    }
}

/// Parses an op's attributes; the flag is false for a matmul that leaves `acc=` out.
fn parse_op(c: &mut Cursor, name: &str, last: usize) -> Result<(Op, bool), ParseError> {
    if let Some(u) = UnaryOp::parse(name) {
        return Ok((Op::Unary(u), true));
    }
    if let Some(b) = BinaryOp::parse(name) {
        return Ok((Op::Binary(b), true));
    }
    let mut acc_named = true;
    let attr = |c: &mut Cursor, key: &str| -> Result<(), ParseError> {
        c.expect_kw(key)?;
        c.expect("=")
    };
    // `policy=..` may be left out (fast).
    let policy = |c: &mut Cursor| -> Result<NumericsPolicy, ParseError> {
        if !c.eat_kw("policy") {
            return Ok(NumericsPolicy::Fast);
        }
        c.expect("=")?;
        let p = c.ident()?;
        NumericsPolicy::parse(&p).ok_or_else(|| c.error(format!("unknown numerics policy `{p}`")))
    };
    let op = match name {
        "const" => Op::Const {
            value: c.number()?,
            dtype: DType::F32,
        },
        "cast" => Op::Cast(DType::F32),
        "broadcast" => Op::Broadcast,
        "matmul" => {
            // `acc=..` may be left out: the result type names it (see `parse_graph`).
            let acc = if c.eat_kw("acc") {
                c.expect("=")?;
                let d = c.ident()?;
                DType::parse(&d).ok_or_else(|| c.error(format!("unknown dtype `{d}`")))?
            } else {
                acc_named = false;
                DType::F32
            };
            Op::Matmul {
                acc,
                policy: policy(c)?,
            }
        }
        "transpose" => Op::Transpose,
        "softmax" => {
            let axis = if c.eat_kw("axis") {
                c.expect("=")?;
                c.usize()?
            } else {
                last
            };
            Op::Softmax {
                axis,
                policy: policy(c)?,
            }
        }
        "permute" => {
            attr(c, "perm")?;
            Op::Permute(c.list("[", "]", |c| c.usize())?)
        }
        "layernorm" => {
            attr(c, "eps")?;
            Op::LayerNorm {
                eps: c.number()?,
                policy: policy(c)?,
            }
        }
        "rmsnorm" => {
            attr(c, "eps")?;
            Op::RmsNorm {
                eps: c.number()?,
                policy: policy(c)?,
            }
        }
        "causal_mask" => Op::CausalMask,
        "attention" => {
            attr(c, "scale")?;
            let scale = c.number()?;
            attr(c, "causal")?;
            let causal = boolean(c)?;
            Op::Attention {
                scale,
                causal,
                policy: policy(c)?,
            }
        }
        "conv2d" => {
            let pair = |c: &mut Cursor, key: &str| -> Result<[u64; 2], ParseError> {
                attr(c, key)?;
                let v = c.list("[", "]", |c| c.usize())?;
                match v.as_slice() {
                    [a, b] => Ok([*a as u64, *b as u64]),
                    _ => Err(c.error(format!("{key} takes two values `[h, w]`"))),
                }
            };
            let stride = pair(c, "stride")?;
            let padding = pair(c, "padding")?;
            let dilation = pair(c, "dilation")?;
            attr(c, "groups")?;
            Op::Conv2d(super::Conv2d {
                stride,
                padding,
                dilation,
                groups: c.usize()? as u64,
            })
        }
        "fft" | "ifft" => {
            attr(c, "axis")?;
            Op::Fft {
                axis: c.usize()?,
                inverse: name == "ifft",
            }
        }
        "complex" => Op::Complex,
        "real" => Op::Real,
        "pad" => {
            attr(c, "lo")?;
            let lo = c.list("[", "]", |c| c.int())?;
            attr(c, "hi")?;
            let hi = c.list("[", "]", |c| c.int())?;
            // `interior=[..]` may be left out (none).
            let interior = if c.eat_kw("interior") {
                c.expect("=")?;
                c.list("[", "]", |c| c.usize().map(|i| i as u64))?
            } else {
                vec![0; lo.len()]
            };
            Op::Pad { lo, hi, interior }
        }
        "spectral_mul" => {
            attr(c, "groups")?;
            Op::SpectralMul {
                groups: c.usize()? as u64,
            }
        }
        _ if name.starts_with("reduce.") => {
            let op = ReduceOp::parse(&name[7..])
                .ok_or_else(|| c.error(format!("unknown reduction `{name}`")))?;
            attr(c, "axes")?;
            let axes = c.list("[", "]", |c| c.usize())?;
            attr(c, "keepdim")?;
            let keepdim = match c.ident()?.as_str() {
                "true" => true,
                "false" => false,
                o => return Err(c.error(format!("expected true or false, found `{o}`"))),
            };
            let policy = policy(c)?;
            Op::Reduce {
                op,
                axes,
                keepdim,
                policy,
            }
        }
        _ => return Err(c.error(format!("unknown op `{name}`"))),
    };
    Ok((op, acc_named))
}

fn boolean(c: &mut Cursor) -> Result<bool, ParseError> {
    match c.ident()?.as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        o => Err(c.error(format!("expected true or false, found `{o}`"))),
    }
}
