//! The launch grid: `(cdiv(a.dim(0), BM), cdiv(b.dim(1), BN), 1)` → three [`GridDim`]s.

use super::{Scopes, value::Val};
use crate::tile::GridDim;
use crate::tile::dsl::{BinOp, DslError, Expr, ExprKind, Program};

const FORM: &str = "a grid entry is `1`, `x.dim(a)`, a product of dims, or `cdiv(dims, TILE)` with a constant TILE";

/// Lowers the program's grid entries (one to three; missing entries are 1).
pub(super) fn lower_grid(program: &Program, scope: &Scopes) -> Result<[GridDim; 3], DslError> {
    if program.grid.is_empty() || program.grid.len() > 3 {
        return Err(DslError::new(
            program.id,
            format!("the grid has 1 to 3 entries, got {}", program.grid.len()),
        ));
    }
    let mut out = [GridDim::one(), GridDim::one(), GridDim::one()];
    for (slot, e) in out.iter_mut().zip(&program.grid) {
        *slot = entry(program, e, scope)?;
    }
    Ok(out)
}

fn entry(program: &Program, e: &Expr, scope: &Scopes) -> Result<GridDim, DslError> {
    if let ExprKind::Call { func, args, .. } = &e.kind
        && func == "cdiv"
    {
        {
            let [n, t] = args.as_slice() else {
                return Err(DslError::new(
                    e.id,
                    format!("`cdiv` takes 2 arguments, got {}", args.len()),
                ));
            };
            let tile = match constant(t, scope)? {
                Some(v) if v > 0 && v <= u32::MAX as i64 => v as u32,
                Some(v) => {
                    return Err(DslError::new(
                        t.id,
                        format!("grid tile must be positive, got {v}"),
                    ));
                }
                None => {
                    return Err(DslError::new(
                        t.id,
                        "the grid tile must be a constant or a knob",
                    ));
                }
            };
            return Ok(GridDim {
                dims: dims(program, n, scope)?,
                tile,
            });
        }
    }
    if let Some(v) = constant(e, scope)? {
        return match v {
            1 => Ok(GridDim::one()),
            _ => Err(DslError::new(
                e.id,
                format!("a constant grid entry must be 1, got {v}; {FORM}"),
            )),
        };
    }
    Ok(GridDim {
        dims: dims(program, e, scope)?,
        tile: 1,
    })
}

/// A product of `x.dim(a)` terms as `(param, axis)` pairs.
fn dims(program: &Program, e: &Expr, scope: &Scopes) -> Result<Vec<(usize, usize)>, DslError> {
    match &e.kind {
        ExprKind::Binary(BinOp::Mul, a, b) => {
            let mut d = dims(program, a, scope)?;
            d.extend(dims(program, b, scope)?);
            Ok(d)
        }
        ExprKind::Call { func, args, .. } if func == "dim" => {
            let [x, a] = args.as_slice() else {
                return Err(DslError::new(
                    e.id,
                    format!("`dim` takes 2 arguments, got {}", args.len()),
                ));
            };
            let p = match &x.kind {
                ExprKind::Var(n) => match scope.lookup(n).map(|b| &b.val) {
                    Some(Val::Param(p)) => *p,
                    _ => {
                        return Err(DslError::new(
                            x.id,
                            format!("`{n}` is not a tensor parameter"),
                        ));
                    }
                },
                _ => return Err(DslError::new(x.id, "`dim` expects a tensor parameter here")),
            };
            let axis = constant(a, scope)?
                .ok_or_else(|| DslError::new(a.id, "the axis must be a constant"))?;
            let rank = program.params[p].rank as i64;
            if !(0..rank).contains(&axis) {
                return Err(DslError::new(
                    a.id,
                    format!("axis {axis} out of range for rank {rank}"),
                ));
            }
            Ok(vec![(p, axis as usize)])
        }
        _ => Err(DslError::new(e.id, FORM)),
    }
}

/// The value of a constant integer expression (literals, knobs, arithmetic), if it is one.
fn constant(e: &Expr, scope: &Scopes) -> Result<Option<i64>, DslError> {
    Ok(match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Var(n) => match scope.lookup(n).map(|b| &b.val) {
            Some(Val::Int(v)) => Some(*v),
            Some(_) => None,
            None => return Err(DslError::new(e.id, format!("unknown variable `{n}`"))),
        },
        ExprKind::Binary(op, a, b) => match (constant(a, scope)?, constant(b, scope)?) {
            (Some(x), Some(y)) => match op {
                BinOp::Add => x.checked_add(y),
                BinOp::Sub => x.checked_sub(y),
                BinOp::Mul => x.checked_mul(y),
                BinOp::Div => x.checked_div(y),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    })
}
