//! Expressions: compile-time constants fold, everything else becomes Tile IR values.

use super::Lower;
use crate::DType;
use crate::graph::{BinaryOp, UnaryOp};
use crate::tile::dsl::{BinOp, DslError, Expr, ExprKind, NodeId, UnOp};
use crate::tile::{CmpOp, Op, TValue, TileType};

/// The value of an expression during lowering.
#[derive(Clone, Debug)]
pub(super) enum Val {
    /// A compile-time integer (literals, knobs and arithmetic on them).
    Int(i64),
    /// A compile-time float literal.
    Float(f64),
    /// A compile-time boolean.
    Bool(bool),
    /// A Tile IR value (scalar or tile).
    Tile(TValue),
    /// A tensor parameter, by index.
    Param(usize),
}

impl Lower<'_> {
    /// Evaluates an expression.
    pub(super) fn expr(&mut self, e: &Expr) -> Result<Val, DslError> {
        match &e.kind {
            ExprKind::Int(v) => Ok(Val::Int(*v)),
            ExprKind::Float(v) => Ok(Val::Float(*v)),
            ExprKind::Bool(v) => Ok(Val::Bool(*v)),
            ExprKind::Var(name) => match self.scope.lookup(name) {
                Some(b) => Ok(b.val.clone()),
                None if name == "inf" => Ok(Val::Float(f64::INFINITY)),
                None => Err(DslError::new(e.id, format!("unknown variable `{name}`"))),
            },
            ExprKind::Unary(op, a) => {
                let v = self.expr(a)?;
                self.unary(e.id, *op, v)
            }
            ExprKind::Binary(op, a, b) => {
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                self.binary(e.id, *op, x, y)
            }
            ExprKind::Call {
                func,
                ty,
                args,
                named,
            } => self.call(e, func, *ty, args, named),
            ExprKind::List(_) => Err(DslError::new(
                e.id,
                "a list `[..]` is only allowed as an index or shape argument",
            )),
        }
    }

    /// Evaluates an expression that must be a compile-time integer (a knob, a literal, ...).
    pub(super) fn static_int(&mut self, e: &Expr) -> Result<i64, DslError> {
        match self.expr(e)? {
            Val::Int(v) => Ok(v),
            _ => Err(DslError::new(
                e.id,
                "expected a compile-time integer (a literal or a knob)",
            )),
        }
    }

    /// A tile or scalar operand; constants become `i32`/`f32`/`bool` scalars.
    pub(super) fn operand(&mut self, span: NodeId, v: Val) -> Result<TValue, DslError> {
        self.materialize_alone(span, "operand", v)
    }

    /// Materializes a value without another operand to take a dtype from.
    pub(super) fn materialize_alone(
        &mut self,
        span: NodeId,
        what: &str,
        v: Val,
    ) -> Result<TValue, DslError> {
        match v {
            Val::Int(i) => Ok(self.constant(i as f64, DType::I32)),
            Val::Float(f) => Ok(self.constant(f, DType::F32)),
            Val::Bool(b) => Ok(self.constant(b as i32 as f64, DType::Bool)),
            Val::Tile(t) => Ok(t),
            Val::Param(p) => Err(self.param_as_value(span, p, what)),
        }
    }

    /// Materializes `v` with dtype `dtype` when it is a constant; tiles are returned unchanged.
    pub(super) fn coerce_to(
        &mut self,
        span: NodeId,
        v: Val,
        dtype: &DType,
    ) -> Result<TValue, DslError> {
        match v {
            Val::Tile(t) => Ok(t),
            Val::Param(p) => Err(self.param_as_value(span, p, "value")),
            c => {
                let x = lit_as(span, &c, *dtype)?;
                Ok(self.constant(x, *dtype))
            }
        }
    }

    /// An i32 scalar (an index or a loop bound).
    pub(super) fn index_scalar(
        &mut self,
        span: NodeId,
        v: Val,
        what: &str,
    ) -> Result<TValue, DslError> {
        let t = self.coerce_to(span, v, &DType::I32)?;
        let ty = self.b.ty(t);
        if *ty != TileType::scalar(DType::I32) {
            return Err(DslError::new(
                span,
                format!("a {what} must be an i32 scalar, got {ty}"),
            ));
        }
        Ok(t)
    }

    /// A scalar constant.
    pub(super) fn constant(&mut self, v: f64, dtype: DType) -> TValue {
        self.b.op(Op::Const(v), TileType::scalar(dtype))
    }

    /// Broadcasts `t` to `shape` (inserting leading unit axes first).
    pub(super) fn broadcast_to(
        &mut self,
        span: NodeId,
        t: TValue,
        shape: &[usize],
    ) -> Result<TValue, DslError> {
        let ty = self.b.ty(t).clone();
        if ty.shape == shape {
            return Ok(t);
        }
        if TileType::broadcast_shape(&ty.shape, shape).as_deref() != Some(shape) {
            return Err(DslError::new(
                span,
                format!(
                    "{ty} does not broadcast to {}",
                    TileType::tile(ty.dtype, shape)
                ),
            ));
        }
        let mut t = t;
        let mut cur = ty.shape.clone();
        while !cur.is_empty() && cur.len() < shape.len() {
            cur.insert(0, 1);
            t = self
                .b
                .op(Op::Expand { a: t, axis: 0 }, TileType::tile(ty.dtype, &cur));
        }
        Ok(self.b.op(Op::Broadcast(t), TileType::tile(ty.dtype, shape)))
    }

    pub(super) fn param_as_value(&self, span: NodeId, p: usize, what: &str) -> DslError {
        let name = &self.program.params[p].name;
        DslError::new(
            span,
            format!("`{name}` is a tensor parameter, not a {what}; `load` a tile from it first"),
        )
    }

    fn unary(&mut self, span: NodeId, op: UnOp, v: Val) -> Result<Val, DslError> {
        match (op, v) {
            (UnOp::Neg, Val::Int(i)) => Ok(Val::Int(-i)),
            (UnOp::Neg, Val::Float(f)) => Ok(Val::Float(-f)),
            (UnOp::Not, Val::Bool(b)) => Ok(Val::Bool(!b)),
            (op, v) => {
                let t = self.operand(span, v)?;
                let ty = self.b.ty(t).clone();
                match (op, ty.dtype) {
                    (UnOp::Neg, d) if d.is_float() => {
                        Ok(Val::Tile(self.b.op(Op::Unary(UnaryOp::Neg, t), ty)))
                    }
                    (UnOp::Neg, DType::I32) => {
                        let z = self.constant(0.0, DType::I32);
                        Ok(Val::Tile(self.b.op(Op::Binary(BinaryOp::Sub, z, t), ty)))
                    }
                    (UnOp::Not, DType::Bool) => {
                        let f = self.constant(0.0, DType::Bool);
                        Ok(Val::Tile(self.b.op(Op::Cmp(CmpOp::Eq, t, f), ty)))
                    }
                    (UnOp::Neg, _) => Err(DslError::new(span, format!("cannot negate {ty}"))),
                    (UnOp::Not, _) => Err(DslError::new(
                        span,
                        format!("`!` needs a bool mask, got {ty}"),
                    )),
                }
            }
        }
    }

    /// Applies a binary operator, folding constants.
    pub(super) fn binary(
        &mut self,
        span: NodeId,
        op: BinOp,
        x: Val,
        y: Val,
    ) -> Result<Val, DslError> {
        if let Some(v) = fold(span, op, &x, &y)? {
            return Ok(v);
        }
        let (a, b) = self.unify(span, op.symbol(), x, y)?;
        let (ta, tb) = (self.b.ty(a).clone(), self.b.ty(b).clone());
        let shape = TileType::broadcast_shape(&ta.shape, &tb.shape)
            .ok_or_else(|| DslError::new(span, format!("shapes {ta} and {tb} do not broadcast")))?;
        let d = ta.dtype;
        let arith = |o| {
            if d == DType::Bool {
                Err(DslError::new(
                    span,
                    format!("arithmetic `{}` on bool masks", op.symbol()),
                ))
            } else {
                Ok(o)
            }
        };
        let op = match op {
            BinOp::Add => Op::Binary(arith(BinaryOp::Add)?, a, b),
            BinOp::Sub => Op::Binary(arith(BinaryOp::Sub)?, a, b),
            BinOp::Mul => Op::Binary(arith(BinaryOp::Mul)?, a, b),
            BinOp::Div => Op::Binary(arith(BinaryOp::Div)?, a, b),
            BinOp::Rem => {
                return Err(DslError::new(
                    span,
                    "`%` is only supported on compile-time integers",
                ));
            }
            BinOp::Lt => return Ok(self.cmp(CmpOp::Lt, a, b, shape)),
            BinOp::Le => return Ok(self.cmp(CmpOp::Le, a, b, shape)),
            BinOp::Gt => return Ok(self.cmp(CmpOp::Gt, a, b, shape)),
            BinOp::Ge => return Ok(self.cmp(CmpOp::Ge, a, b, shape)),
            BinOp::Eq => return Ok(self.cmp(CmpOp::Eq, a, b, shape)),
            BinOp::Ne => return Ok(self.cmp(CmpOp::Ne, a, b, shape)),
            BinOp::And | BinOp::Or => {
                if d != DType::Bool {
                    return Err(DslError::new(
                        span,
                        format!("`{}` combines bool masks, got {ta} and {tb}", op.symbol()),
                    ));
                }
                let c = self.constant(if op == BinOp::Or { 1.0 } else { 0.0 }, DType::Bool);
                let sel = if op == BinOp::And {
                    Op::Select(a, b, c)
                } else {
                    Op::Select(a, c, b)
                };
                return Ok(Val::Tile(self.b.op(
                    sel,
                    TileType {
                        dtype: DType::Bool,
                        shape,
                    },
                )));
            }
        };
        Ok(Val::Tile(self.b.op(op, TileType { dtype: d, shape })))
    }

    fn cmp(&mut self, c: CmpOp, a: TValue, b: TValue, shape: Vec<usize>) -> Val {
        Val::Tile(self.b.op(
            Op::Cmp(c, a, b),
            TileType {
                dtype: DType::Bool,
                shape,
            },
        ))
    }

    /// Two operands of one dtype: a constant takes the other operand's dtype.
    pub(super) fn unify(
        &mut self,
        span: NodeId,
        what: &str,
        x: Val,
        y: Val,
    ) -> Result<(TValue, TValue), DslError> {
        match (&x, &y) {
            (Val::Tile(a), Val::Tile(b)) => {
                let (ta, tb) = (self.b.ty(*a), self.b.ty(*b));
                if ta.dtype != tb.dtype {
                    return Err(DslError::new(
                        span,
                        format!("dtype mismatch: `{what}` of {ta} and {tb} (insert a cast)"),
                    ));
                }
                Ok((*a, *b))
            }
            (Val::Tile(a), _) => {
                let d = self.b.ty(*a).dtype;
                Ok((*a, self.coerce_to(span, y, &d)?))
            }
            (_, Val::Tile(b)) => {
                let d = self.b.ty(*b).dtype;
                Ok((self.coerce_to(span, x, &d)?, *b))
            }
            _ => {
                let a = self.operand(span, x)?;
                let d = self.b.ty(a).dtype;
                Ok((a, self.coerce_to(span, y, &d)?))
            }
        }
    }
}

/// The f64 value of constant `c` as dtype `d`, if it can take that dtype.
fn lit_as(span: NodeId, c: &Val, d: DType) -> Result<f64, DslError> {
    match (c, d) {
        (Val::Int(i), d) if d != DType::Bool => Ok(*i as f64),
        (Val::Float(f), d) if d.is_float() => Ok(*f),
        (Val::Bool(b), DType::Bool) => Ok(*b as i32 as f64),
        (Val::Int(i), _) => Err(DslError::new(
            span,
            format!("integer {i} used as a {d} value"),
        )),
        (Val::Float(f), _) => Err(DslError::new(
            span,
            format!("float {f} used as a {d} value"),
        )),
        (Val::Bool(b), _) => Err(DslError::new(span, format!("`{b}` used as a {d} value"))),
        _ => unreachable!("lit_as on a non-constant"),
    }
}

/// Folds an operator over two constants; `None` when either side is not constant.
fn fold(span: NodeId, op: BinOp, x: &Val, y: &Val) -> Result<Option<Val>, DslError> {
    let overflow = || {
        DslError::new(
            span,
            format!("constant `{}` overflows or divides by zero", op.symbol()),
        )
    };
    let v = match (x, y) {
        (Val::Int(a), Val::Int(b)) => {
            let (a, b) = (*a, *b);
            match op {
                BinOp::Add => Val::Int(a.checked_add(b).ok_or_else(overflow)?),
                BinOp::Sub => Val::Int(a.checked_sub(b).ok_or_else(overflow)?),
                BinOp::Mul => Val::Int(a.checked_mul(b).ok_or_else(overflow)?),
                BinOp::Div => Val::Int(a.checked_div(b).ok_or_else(overflow)?),
                BinOp::Rem => Val::Int(a.checked_rem(b).ok_or_else(overflow)?),
                BinOp::Lt => Val::Bool(a < b),
                BinOp::Le => Val::Bool(a <= b),
                BinOp::Gt => Val::Bool(a > b),
                BinOp::Ge => Val::Bool(a >= b),
                BinOp::Eq => Val::Bool(a == b),
                BinOp::Ne => Val::Bool(a != b),
                BinOp::And | BinOp::Or => {
                    return Err(DslError::new(
                        span,
                        format!("`{}` combines bool masks, not integers", op.symbol()),
                    ));
                }
            }
        }
        (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
            let f = |v: &Val| {
                if let Val::Int(i) = v {
                    *i as f64
                } else if let Val::Float(f) = v {
                    *f
                } else {
                    0.0
                }
            };
            let (a, b) = (f(x), f(y));
            match op {
                BinOp::Add => Val::Float(a + b),
                BinOp::Sub => Val::Float(a - b),
                BinOp::Mul => Val::Float(a * b),
                BinOp::Div => Val::Float(a / b),
                BinOp::Rem => Val::Float(a % b),
                BinOp::Lt => Val::Bool(a < b),
                BinOp::Le => Val::Bool(a <= b),
                BinOp::Gt => Val::Bool(a > b),
                BinOp::Ge => Val::Bool(a >= b),
                BinOp::Eq => Val::Bool(a == b),
                BinOp::Ne => Val::Bool(a != b),
                BinOp::And | BinOp::Or => {
                    return Err(DslError::new(
                        span,
                        format!("`{}` combines bool masks, not numbers", op.symbol()),
                    ));
                }
            }
        }
        (Val::Bool(a), Val::Bool(b)) => match op {
            BinOp::And => Val::Bool(*a && *b),
            BinOp::Or => Val::Bool(*a || *b),
            BinOp::Eq => Val::Bool(a == b),
            BinOp::Ne => Val::Bool(a != b),
            _ => {
                return Err(DslError::new(
                    span,
                    format!("`{}` on booleans", op.symbol()),
                ));
            }
        },
        _ => return Ok(None),
    };
    Ok(Some(v))
}
