//! Lowering of a [`Program`] to a verified Tile IR [`Kernel`]: the driver, scopes, statements
//! and loops. Expressions are in `lower/value.rs`, built-in calls in `lower/call.rs`, the grid in
//! `lower/grid.rs`.

mod call;
mod grid;
mod value;

use super::{Access, DslError, Expr, ExprKind, NodeId, Program, Stmt, StmtKind};
use crate::tile::{self, Builder, Kernel, Param, TValue};
use std::collections::HashSet;
use value::Val;

/// Lowers `program` with knob values `knobs` (others take their defaults) and verifies the result.
///
/// ```
/// use tessera_ir::DType;
/// use tessera_ir::tile::dsl::*;
/// let e = |id, kind| Expr::new(id, kind);
/// let p = Program {
///     id: 0,
///     name: "fill".into(),
///     knobs: vec![Knob { id: 1, name: "B".into(), default: Some(64) }],
///     params: vec![ParamDecl { id: 2, name: "y".into(), access: Access::Out, dtype: DType::F32, rank: 1 }],
///     grid: vec![e(3, ExprKind::Int(1))],
///     body: vec![Stmt::new(4, StmtKind::Expr(e(5, ExprKind::Call {
///         func: "store".into(),
///         ty: None,
///         args: vec![
///             e(6, ExprKind::Var("y".into())),
///             e(7, ExprKind::List(vec![e(8, ExprKind::Int(0))])),
///             e(9, ExprKind::Call { func: "zeros".into(), ty: None, named: vec![],
///                 args: vec![e(10, ExprKind::List(vec![e(11, ExprKind::Var("B".into()))]))] }),
///         ],
///         named: vec![],
///     })))],
/// };
/// let k = lower(&p, &[("B", 16)]).unwrap();
/// assert_eq!(k.ty(tessera_ir::tile::TValue(1)).to_string(), "f32[16]");
/// assert!(lower(&p, &[("C", 1)]).unwrap_err().message.contains("unknown knob `C`"));
/// ```
pub fn lower(program: &Program, knobs: &[(&str, i64)]) -> Result<Kernel, DslError> {
    crate::invocations::lowered();
    let mut scope = Scopes::default();
    let mut seen = HashSet::new();
    for k in &program.knobs {
        if !seen.insert(k.name.as_str()) {
            return Err(DslError::new(
                k.id,
                format!("`{}` is declared twice", k.name),
            ));
        }
    }
    for (name, _) in knobs {
        if !program.knobs.iter().any(|k| k.name == *name) {
            let names: Vec<&str> = program.knobs.iter().map(|k| k.name.as_str()).collect();
            return Err(DslError::new(
                program.id,
                format!("unknown knob `{name}` (knobs: {})", names.join(", ")),
            ));
        }
    }
    for k in &program.knobs {
        let given = knobs
            .iter()
            .rev()
            .find(|(n, _)| *n == k.name)
            .map(|(_, v)| *v);
        let v = given.or(k.default).ok_or_else(|| {
            DslError::new(
                k.id,
                format!("knob `{}` has no default and no value", k.name),
            )
        })?;
        scope.bind(&k.name, Val::Int(v), false);
    }
    let mut params = Vec::new();
    for (i, p) in program.params.iter().enumerate() {
        if !seen.insert(p.name.as_str()) {
            return Err(DslError::new(
                p.id,
                format!("`{}` is declared twice", p.name),
            ));
        }
        if !(1..=3).contains(&p.rank) {
            return Err(DslError::new(
                p.id,
                format!(
                    "tensor parameters have rank 1 to 3, `{}` has {}",
                    p.name, p.rank
                ),
            ));
        }
        params.push(Param {
            name: p.name.clone(),
            dtype: p.dtype,
            rank: p.rank,
        });
        scope.bind(&p.name, Val::Param(i), false);
    }
    let grid = grid::lower_grid(program, &scope)?;
    let mut lw = Lower {
        program,
        b: Builder::new(&program.name, params, grid),
        scope,
    };
    lw.block(&program.body)?;
    let kernel = lw.b.finish();
    tile::verify(&kernel).map_err(|e| {
        DslError::new(
            program.id,
            format!("internal error: the lowered kernel does not verify:\n{e}"),
        )
    })?;
    Ok(kernel)
}

/// One variable binding.
#[derive(Clone, Debug)]
struct Binding {
    name: String,
    val: Val,
    mutable: bool,
}

/// Lexical scopes, innermost last.
#[derive(Default)]
struct Scopes {
    frames: Vec<Vec<Binding>>,
}

impl Scopes {
    fn bind(&mut self, name: &str, val: Val, mutable: bool) {
        if self.frames.is_empty() {
            self.frames.push(Vec::new());
        }
        self.frames.last_mut().unwrap().push(Binding {
            name: name.to_string(),
            val,
            mutable,
        });
    }

    fn lookup(&self, name: &str) -> Option<&Binding> {
        self.frames
            .iter()
            .rev()
            .flat_map(|f| f.iter().rev())
            .find(|b| b.name == name)
    }

    fn lookup_mut(&mut self, name: &str) -> Option<&mut Binding> {
        self.frames
            .iter_mut()
            .rev()
            .flat_map(|f| f.iter_mut().rev())
            .find(|b| b.name == name)
    }
}

/// Lowering state: the program, the Tile IR builder and the variable scopes.
struct Lower<'p> {
    program: &'p Program,
    b: Builder,
    scope: Scopes,
}

impl Lower<'_> {
    fn block(&mut self, stmts: &[Stmt]) -> Result<(), DslError> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), DslError> {
        match &s.kind {
            StmtKind::Let {
                name,
                mutable,
                value,
            } => {
                let v = self.expr(value)?;
                self.scope.bind(name, v, *mutable);
            }
            StmtKind::Assign { name, value } => {
                let v = self.expr(value)?;
                let b = self
                    .scope
                    .lookup_mut(name)
                    .ok_or_else(|| DslError::new(s.id, format!("unknown variable `{name}`")))?;
                if !b.mutable {
                    return Err(DslError::new(
                        s.id,
                        format!("cannot assign to `{name}`: declare it with `let mut`"),
                    ));
                }
                b.val = v;
            }
            StmtKind::Expr(e) => {
                self.expr(e)?;
            }
            StmtKind::For { var, iter, body } => self.for_loop(s.id, var, iter, body)?,
        }
        Ok(())
    }

    /// `for var in range(lo, hi, step) { body }` → `Op::For` carrying every outer variable the
    /// body assigns.
    fn for_loop(
        &mut self,
        id: NodeId,
        var: &str,
        iter: &Expr,
        body: &[Stmt],
    ) -> Result<(), DslError> {
        let (lo, hi, step) = self.range(iter)?;
        let mut carried = Vec::new();
        assigned_outer(body, &mut HashSet::from([var.to_string()]), &mut carried);
        carried.retain(|n| self.scope.lookup(n).is_some_and(|b| b.mutable));
        let mut inits = Vec::new();
        for n in &carried {
            let v = self.scope.lookup(n).unwrap().val.clone();
            inits.push(self.materialize_alone(id, n, v)?);
        }
        let (iv, args) = self.b.begin_for(lo, hi, step, &inits);
        for (n, a) in carried.iter().zip(&args) {
            self.scope.lookup_mut(n).unwrap().val = Val::Tile(*a);
        }
        self.scope.frames.push(Vec::new());
        self.scope.bind(var, Val::Tile(iv), false);
        self.block(body)?;
        self.scope.frames.pop();
        let mut next = Vec::new();
        for (n, init) in carried.iter().zip(&inits) {
            let v = self.scope.lookup(n).unwrap().val.clone();
            let want = self.b.ty(*init).clone();
            let span = last_assign(body, n).unwrap_or(id);
            let t = self.coerce_to(span, v, &want.dtype)?;
            let got = self.b.ty(t).clone();
            let t = if got.shape != want.shape && got.shape.is_empty() {
                self.broadcast_to(span, t, &want.shape)?
            } else {
                t
            };
            let got = self.b.ty(t).clone();
            if got != want {
                return Err(DslError::new(
                    span,
                    format!(
                        "`{n}` is carried through the loop as {want} but is assigned {got} here"
                    ),
                ));
            }
            next.push(t);
        }
        let results = self.b.end_for(&next);
        for (n, r) in carried.iter().zip(results) {
            self.scope.lookup_mut(n).unwrap().val = Val::Tile(r);
        }
        Ok(())
    }

    /// The bounds of `range(lo, hi[, step])` or `lo..hi`: i32 scalars and a constant step.
    fn range(&mut self, iter: &Expr) -> Result<(TValue, TValue, i64), DslError> {
        let ExprKind::Call {
            func, args, named, ..
        } = &iter.kind
        else {
            return Err(DslError::new(
                iter.id,
                "a loop runs over `range(lo, hi, step)`",
            ));
        };
        if func != "range" || !named.is_empty() {
            return Err(DslError::new(
                iter.id,
                "a loop runs over `range(lo, hi, step)`",
            ));
        }
        if !(2..=3).contains(&args.len()) {
            return Err(DslError::new(
                iter.id,
                format!("`range` takes 2 or 3 arguments, got {}", args.len()),
            ));
        }
        let lo = self.expr(&args[0])?;
        let lo = self.index_scalar(args[0].id, lo, "loop bound")?;
        let hi = self.expr(&args[1])?;
        let hi = self.index_scalar(args[1].id, hi, "loop bound")?;
        let step = match args.get(2) {
            Some(s) => self.static_int(s)?,
            None => 1,
        };
        if step <= 0 {
            return Err(DslError::new(
                args.get(2).map_or(iter.id, |s| s.id),
                format!("loop step must be positive, got {step}"),
            ));
        }
        Ok((lo, hi, step))
    }
}

/// Names assigned in `body` that are not declared in it first, in order of first assignment.
fn assigned_outer(body: &[Stmt], local: &mut HashSet<String>, out: &mut Vec<String>) {
    for s in body {
        match &s.kind {
            StmtKind::Let { name, .. } => {
                local.insert(name.clone());
            }
            StmtKind::Assign { name, .. } => {
                if !local.contains(name) && !out.contains(name) {
                    out.push(name.clone());
                }
            }
            StmtKind::For { var, body, .. } => {
                let mut inner = local.clone();
                inner.insert(var.clone());
                assigned_outer(body, &mut inner, out);
            }
            StmtKind::Expr(_) => {}
        }
    }
}

/// The id of the last statement in `body` (nested loops included) assigning `name`.
fn last_assign(body: &[Stmt], name: &str) -> Option<NodeId> {
    body.iter().rev().find_map(|s| match &s.kind {
        StmtKind::Assign { name: n, .. } if n == name => Some(s.id),
        StmtKind::For { body, .. } => last_assign(body, name),
        _ => None,
    })
}

/// True when the parameter is written by the kernel.
fn is_out(p: &super::ParamDecl) -> bool {
    p.access == Access::Out
}
