//! Built-in functions of `tile!` programs (the table is in the module docs of `dsl`).

use super::{Lower, is_out, value::Val};
use crate::DType;
use crate::NumericsPolicy;
use crate::graph::{BinaryOp, UnaryOp};
use crate::tile::dsl::{BinOp, DslError, Expr, ExprKind, NodeId};
use crate::tile::{Op, TValue, TileReduce, TileType};

/// Every built-in name, for "unknown function" messages.
const BUILTINS: &[&str] = &[
    "program_id",
    "dim",
    "arange",
    "zeros",
    "full",
    "load",
    "load_masked",
    "store",
    "dot",
    "maximum",
    "minimum",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "where_",
    "select",
    "sum",
    "max",
    "expand",
    "broadcast",
    "cast",
    "trans",
    "t",
    "cdiv",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "abs",
];

impl Lower<'_> {
    /// Lowers a call `func::<ty>(args, named)`.
    pub(super) fn call(
        &mut self,
        e: &Expr,
        func: &str,
        ty: Option<DType>,
        args: &[Expr],
        named: &[(String, Expr)],
    ) -> Result<Val, DslError> {
        let id = e.id;
        if let Some((n, _)) = named.first().filter(|_| !matches!(func, "load" | "store")) {
            return Err(DslError::new(
                id,
                format!("`{func}` takes no named argument `{n}`"),
            ));
        }
        if ty.is_some() && !matches!(func, "zeros" | "full" | "cast") {
            return Err(DslError::new(
                id,
                format!("`{func}` takes no type argument"),
            ));
        }
        if let Some(u) = UnaryOp::parse(func).filter(|u| *u != UnaryOp::Neg) {
            arity(id, func, args, 1, 1)?;
            let t = self.tile_arg(&args[0])?;
            let tt = self.b.ty(t).clone();
            if !tt.dtype.is_float() {
                return Err(DslError::new(
                    id,
                    format!("`{func}` needs a float operand, got {tt}"),
                ));
            }
            return Ok(Val::Tile(self.b.op(Op::Unary(u, t), tt)));
        }
        let cmp = match func {
            "lt" => Some(BinOp::Lt),
            "le" => Some(BinOp::Le),
            "gt" => Some(BinOp::Gt),
            "ge" => Some(BinOp::Ge),
            "eq" => Some(BinOp::Eq),
            "ne" => Some(BinOp::Ne),
            _ => None,
        };
        if let Some(op) = cmp {
            arity(id, func, args, 2, 2)?;
            let (x, y) = (self.expr(&args[0])?, self.expr(&args[1])?);
            return self.binary(id, op, x, y);
        }
        match func {
            "program_id" => {
                arity(id, func, args, 1, 1)?;
                let axis = self.static_int(&args[0])?;
                if !(0..3).contains(&axis) {
                    return Err(DslError::new(
                        args[0].id,
                        format!("grid axis {axis} out of range 0..3"),
                    ));
                }
                Ok(Val::Tile(self.b.op(
                    Op::ProgramId(axis as u8),
                    TileType::scalar(DType::I32),
                )))
            }
            "dim" => {
                arity(id, func, args, 2, 2)?;
                let p = self.param_arg(func, &args[0])?;
                let rank = self.program.params[p].rank;
                let axis = self.axis_arg(&args[1], rank)?;
                Ok(Val::Tile(self.b.op(
                    Op::Dim { param: p, axis },
                    TileType::scalar(DType::I32),
                )))
            }
            "arange" => {
                arity(id, func, args, 1, 1)?;
                let n = self.static_int(&args[0])?;
                if n <= 0 {
                    return Err(DslError::new(
                        args[0].id,
                        format!("`arange` needs a positive length, got {n}"),
                    ));
                }
                Ok(Val::Tile(
                    self.b
                        .op(Op::Arange, TileType::tile(DType::I32, &[n as usize])),
                ))
            }
            "zeros" | "full" => {
                let n = if func == "zeros" { 1 } else { 2 };
                arity(id, func, args, n, n)?;
                let shape = self.shape_arg(&args[0])?;
                let dtype = ty.unwrap_or(DType::F32);
                let v = match args.get(1) {
                    Some(a) => self.static_number(a, dtype)?,
                    None => 0.0,
                };
                Ok(Val::Tile(
                    self.b.op(Op::Full(v), TileType::tile(dtype, &shape)),
                ))
            }
            "load" | "load_masked" => self.load(e, func, args, named),
            "store" => self.store(e, args, named),
            "dot" => {
                arity(id, func, args, 2, 3)?;
                let a = self.tile_arg(&args[0])?;
                let b = self.tile_arg(&args[1])?;
                let (ta, tb) = (self.b.ty(a).clone(), self.b.ty(b).clone());
                let (m, n) = match (ta.shape.as_slice(), tb.shape.as_slice()) {
                    ([m, k1], [k2, n]) if k1 == k2 => (*m, *n),
                    ([_, _], [_, _]) => {
                        return Err(DslError::new(
                            id,
                            format!(
                                "dot: inner dims differ: {ta} · {tb} contracts {} with {}",
                                ta.shape[1], tb.shape[0]
                            ),
                        ));
                    }
                    _ => {
                        return Err(DslError::new(
                            id,
                            format!("dot needs two rank-2 tiles, got {ta} and {tb}"),
                        ));
                    }
                };
                if ta.dtype != tb.dtype || !ta.dtype.is_float() {
                    return Err(DslError::new(
                        id,
                        format!("dot operands must share a float dtype, got {ta} and {tb}"),
                    ));
                }
                let out = TileType::tile(DType::F32, &[m, n]);
                let acc = match args.get(2) {
                    Some(c) => {
                        let acc = self.tile_arg(c)?;
                        if *self.b.ty(acc) != out {
                            return Err(DslError::new(
                                c.id,
                                format!("dot accumulator must be {out}, got {}", self.b.ty(acc)),
                            ));
                        }
                        acc
                    }
                    None => self.b.op(Op::Full(0.0), out.clone()),
                };
                Ok(Val::Tile(self.b.op(Op::Dot { a, b, acc }, out)))
            }
            "maximum" | "minimum" => {
                arity(id, func, args, 2, 2)?;
                let (x, y) = (self.expr(&args[0])?, self.expr(&args[1])?);
                let (a, b) = self.unify(id, func, x, y)?;
                let (ta, tb) = (self.b.ty(a).clone(), self.b.ty(b).clone());
                let shape = TileType::broadcast_shape(&ta.shape, &tb.shape).ok_or_else(|| {
                    DslError::new(id, format!("shapes {ta} and {tb} do not broadcast"))
                })?;
                if ta.dtype == DType::Bool {
                    return Err(DslError::new(id, format!("`{func}` of bool masks")));
                }
                let op = if func == "maximum" {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                Ok(Val::Tile(self.b.op(
                    Op::Binary(op, a, b),
                    TileType {
                        dtype: ta.dtype,
                        shape,
                    },
                )))
            }
            "where_" | "select" => {
                arity(id, func, args, 3, 3)?;
                let m = self.tile_arg(&args[0])?;
                let tm = self.b.ty(m).clone();
                if tm.dtype != DType::Bool {
                    return Err(DslError::new(
                        args[0].id,
                        format!("`{func}` needs a bool mask, got {tm}"),
                    ));
                }
                let (x, y) = (self.expr(&args[1])?, self.expr(&args[2])?);
                let (a, b) = self.unify(id, func, x, y)?;
                let (ta, tb) = (self.b.ty(a).clone(), self.b.ty(b).clone());
                let shape = TileType::broadcast_shape(&ta.shape, &tb.shape)
                    .and_then(|s| TileType::broadcast_shape(&s, &tm.shape))
                    .ok_or_else(|| {
                        DslError::new(
                            id,
                            format!("mask {tm} and values {ta}, {tb} do not broadcast"),
                        )
                    })?;
                Ok(Val::Tile(self.b.op(
                    Op::Select(m, a, b),
                    TileType {
                        dtype: ta.dtype,
                        shape,
                    },
                )))
            }
            "sum" | "max" => {
                arity(id, func, args, 2, 2)?;
                let a = self.tile_arg(&args[0])?;
                let ta = self.b.ty(a).clone();
                if ta.shape.is_empty() || ta.dtype == DType::Bool {
                    return Err(DslError::new(
                        id,
                        format!("`{func}` reduces a numeric tile, got {ta}"),
                    ));
                }
                let axis = self.axis_arg(&args[1], ta.shape.len())?;
                let mut shape = ta.shape.clone();
                shape.remove(axis);
                let op = if func == "sum" {
                    TileReduce::Sum
                } else {
                    TileReduce::Max
                };
                let r = Op::Reduce {
                    op,
                    a,
                    axis,
                    policy: NumericsPolicy::Fast,
                };
                Ok(Val::Tile(self.b.op(
                    r,
                    TileType {
                        dtype: ta.dtype,
                        shape,
                    },
                )))
            }
            "expand" => {
                arity(id, func, args, 2, 2)?;
                let a = self.tile_arg(&args[0])?;
                let ta = self.b.ty(a).clone();
                let axis = self.axis_arg(&args[1], ta.shape.len() + 1)?;
                let mut shape = ta.shape.clone();
                shape.insert(axis, 1);
                if shape.len() > 2 {
                    return Err(DslError::new(
                        id,
                        format!("tiles have rank ≤ 2; cannot expand {ta}"),
                    ));
                }
                Ok(Val::Tile(self.b.op(
                    Op::Expand { a, axis },
                    TileType {
                        dtype: ta.dtype,
                        shape,
                    },
                )))
            }
            "broadcast" => {
                arity(id, func, args, 2, 2)?;
                let a = self.tile_arg(&args[0])?;
                let shape = self.shape_arg(&args[1])?;
                Ok(Val::Tile(self.broadcast_to(id, a, &shape)?))
            }
            "cast" => {
                arity(id, func, args, 1, 1)?;
                let to = ty.ok_or_else(|| {
                    DslError::new(
                        id,
                        "`cast` needs a target type: `cast::<bf16>(x)` or `x.cast::<bf16>()`",
                    )
                })?;
                let a = self.tile_arg(&args[0])?;
                let shape = self.b.ty(a).shape.clone();
                Ok(Val::Tile(
                    self.b.op(Op::Cast(a), TileType { dtype: to, shape }),
                ))
            }
            "trans" | "t" => {
                arity(id, func, args, 1, 1)?;
                let a = self.tile_arg(&args[0])?;
                let ta = self.b.ty(a).clone();
                match ta.shape.as_slice() {
                    [r, c] => Ok(Val::Tile(
                        self.b.op(Op::Trans(a), TileType::tile(ta.dtype, &[*c, *r])),
                    )),
                    _ => Err(DslError::new(
                        id,
                        format!("`{func}` needs a rank-2 tile, got {ta}"),
                    )),
                }
            }
            "cdiv" => {
                arity(id, func, args, 2, 2)?;
                let (a, b) = (self.expr(&args[0])?, self.expr(&args[1])?);
                match (a, b) {
                    (Val::Int(a), Val::Int(b)) if b > 0 => {
                        Ok(Val::Int(a.div_euclid(b) + (a.rem_euclid(b) != 0) as i64))
                    }
                    (Val::Int(_), Val::Int(b)) => {
                        Err(DslError::new(args[1].id, format!("`cdiv` by {b}")))
                    }
                    _ => Err(DslError::new(
                        id,
                        "`cdiv` of run-time values is only supported in the grid",
                    )),
                }
            }
            "range" => Err(DslError::new(
                id,
                "`range` is only allowed as the iterator of a `for` loop",
            )),
            _ => Err(DslError::new(id, unknown(func))),
        }
    }

    fn load(
        &mut self,
        e: &Expr,
        func: &str,
        args: &[Expr],
        named: &[(String, Expr)],
    ) -> Result<Val, DslError> {
        let positional = if func == "load_masked" { 5 } else { 3 };
        arity(e.id, func, args, positional, positional)?;
        let p = self.param_arg(func, &args[0])?;
        let index = self.index_list(func, &args[1])?;
        let shape = self.shape_arg(&args[2])?;
        let param = &self.program.params[p];
        let dtype = param.dtype;
        check_access(e.id, &param.name, param.rank, index.len(), shape.len())?;
        let (mut mask_e, mut other_e) = (args.get(3), args.get(4));
        for (n, v) in named {
            match n.as_str() {
                "mask" if mask_e.is_none() => mask_e = Some(v),
                "other" if other_e.is_none() => other_e = Some(v),
                _ => {
                    return Err(DslError::new(
                        v.id,
                        format!(
                            "`{func}` takes named arguments `mask` and `other` once each, not `{n}`"
                        ),
                    ));
                }
            }
        }
        let mask = mask_e.map(|m| self.mask_arg(m, &shape)).transpose()?;
        let other = other_e
            .map(|o| self.static_number(o, dtype))
            .transpose()?
            .unwrap_or(0.0);
        Ok(Val::Tile(self.b.op(
            Op::Load {
                param: p,
                index,
                mask,
                other,
            },
            TileType::tile(dtype, &shape),
        )))
    }

    fn store(
        &mut self,
        e: &Expr,
        args: &[Expr],
        named: &[(String, Expr)],
    ) -> Result<Val, DslError> {
        arity(e.id, "store", args, 3, 4)?;
        let p = self.param_arg("store", &args[0])?;
        let param = &self.program.params[p];
        if !is_out(param) {
            return Err(DslError::new(
                args[0].id,
                format!(
                    "cannot store to `{}`: it is an `In` parameter (declare it `Out<..>`)",
                    param.name
                ),
            ));
        }
        let (name, dtype, rank) = (param.name.clone(), param.dtype, param.rank);
        let index = self.index_list("store", &args[1])?;
        let v = self.expr(&args[2])?;
        let value = self.coerce_to(args[2].id, v, &dtype)?;
        let tv = self.b.ty(value).clone();
        check_access(e.id, &name, rank, index.len(), tv.shape.len())?;
        if tv.dtype != dtype {
            return Err(DslError::new(
                args[2].id,
                format!("cannot store {tv} into `{name}`: {dtype} (insert `.cast::<{dtype}>()`)"),
            ));
        }
        let mut mask_e = args.get(3);
        for (n, v) in named {
            match n.as_str() {
                "mask" if mask_e.is_none() => mask_e = Some(v),
                _ => {
                    return Err(DslError::new(
                        v.id,
                        format!("`store` takes the named argument `mask` once, not `{n}`"),
                    ));
                }
            }
        }
        let mask = mask_e.map(|m| self.mask_arg(m, &tv.shape)).transpose()?;
        self.b.effect(Op::Store {
            param: p,
            index,
            value,
            mask,
        });
        Ok(Val::Bool(true))
    }

    fn tile_arg(&mut self, e: &Expr) -> Result<TValue, DslError> {
        let v = self.expr(e)?;
        self.operand(e.id, v)
    }

    fn param_arg(&mut self, func: &str, e: &Expr) -> Result<usize, DslError> {
        match self.expr(e)? {
            Val::Param(p) => Ok(p),
            _ => Err(DslError::new(
                e.id,
                format!("`{func}` expects a tensor parameter here"),
            )),
        }
    }

    /// An axis in `0..rank`; negative axes count from the end.
    fn axis_arg(&mut self, e: &Expr, rank: usize) -> Result<usize, DslError> {
        let a = self.static_int(e)?;
        let r = rank as i64;
        let axis = if a < 0 { a + r } else { a };
        if !(0..r).contains(&axis) {
            return Err(DslError::new(
                e.id,
                format!("axis {a} out of range for rank {rank}"),
            ));
        }
        Ok(axis as usize)
    }

    /// A tile shape `[BM, BN]`: one or two positive compile-time integers.
    fn shape_arg(&mut self, e: &Expr) -> Result<Vec<usize>, DslError> {
        let ExprKind::List(items) = &e.kind else {
            return Err(DslError::new(e.id, "expected a tile shape `[BM, BN]`"));
        };
        if !(1..=2).contains(&items.len()) {
            return Err(DslError::new(
                e.id,
                format!(
                    "tiles have rank 1 or 2, this shape has {} dims",
                    items.len()
                ),
            ));
        }
        items
            .iter()
            .map(|i| match self.static_int(i)? {
                n if n > 0 => Ok(n as usize),
                n => Err(DslError::new(
                    i.id,
                    format!("tile dims must be positive, got {n}"),
                )),
            })
            .collect()
    }

    /// An index list `[i, j]` of i32 scalars.
    fn index_list(&mut self, func: &str, e: &Expr) -> Result<Vec<TValue>, DslError> {
        let ExprKind::List(items) = &e.kind else {
            return Err(DslError::new(
                e.id,
                format!("`{func}` expects an index list `[i, j]` here"),
            ));
        };
        items
            .iter()
            .map(|i| {
                let v = self.expr(i)?;
                self.index_scalar(i.id, v, "tile index")
            })
            .collect()
    }

    fn mask_arg(&mut self, e: &Expr, shape: &[usize]) -> Result<TValue, DslError> {
        let m = self.tile_arg(e)?;
        let tm = self.b.ty(m).clone();
        if tm.dtype != DType::Bool
            || TileType::broadcast_shape(&tm.shape, shape).as_deref() != Some(shape)
        {
            return Err(DslError::new(
                e.id,
                format!("mask must be a bool tile broadcastable to {shape:?}, got {tm}"),
            ));
        }
        Ok(m)
    }

    /// A compile-time number usable as a `dtype` value (`0`, `-inf`, a knob).
    fn static_number(&mut self, e: &Expr, dtype: DType) -> Result<f64, DslError> {
        match self.expr(e)? {
            Val::Int(i) if dtype != DType::Bool => Ok(i as f64),
            Val::Float(f) if dtype.is_float() => Ok(f),
            Val::Bool(b) if dtype == DType::Bool => Ok(b as i32 as f64),
            _ => Err(DslError::new(
                e.id,
                format!("expected a compile-time {dtype} constant"),
            )),
        }
    }
}

/// Checks the argument count of a call.
fn arity(id: NodeId, func: &str, args: &[Expr], min: usize, max: usize) -> Result<(), DslError> {
    if (min..=max).contains(&args.len()) {
        return Ok(());
    }
    let want = if min == max {
        format!("{min}")
    } else {
        format!("{min} to {max}")
    };
    let s = if max == 1 { "" } else { "s" };
    Err(DslError::new(
        id,
        format!("`{func}` takes {want} argument{s}, got {}", args.len()),
    ))
}

/// Checks a block access against a parameter's rank.
fn check_access(
    id: NodeId,
    name: &str,
    rank: usize,
    n_index: usize,
    tile_rank: usize,
) -> Result<(), DslError> {
    if n_index != rank {
        return Err(DslError::new(
            id,
            format!("`{name}` has rank {rank} but {n_index} indices are given"),
        ));
    }
    if tile_rank > rank {
        return Err(DslError::new(
            id,
            format!("a rank-{tile_rank} tile does not fit the rank-{rank} tensor `{name}`"),
        ));
    }
    Ok(())
}

/// The message for an unknown function, with a suggestion when one is close.
fn unknown(func: &str) -> String {
    let close = BUILTINS
        .iter()
        .find(|b| b.len() > 2 && (b.starts_with(func) || func.starts_with(*b)));
    match close {
        Some(c) => format!("unknown function `{func}` (did you mean `{c}`?)"),
        None => format!("unknown function `{func}`"),
    }
}
