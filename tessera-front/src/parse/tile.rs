//! `tile!` input → `tessera_ir::tile::dsl::Program`, with the source tokens of every node.

use super::kernel::turbofish_dtype;
use super::types::dtype;
use super::{describe, err};
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::parse::{Parse, ParseStream};
use syn::{
    Attribute, Expr, GenericArgument, GenericParam, Generics, Ident, Lit, Pat, Stmt, Token, Type,
    Visibility,
};
use tessera_ir::tile::dsl::{
    Access, BinOp, Expr as E, ExprKind, Knob, NodeId, ParamDecl, Program, Stmt as S, StmtKind, UnOp,
};

/// The `grid` keyword of `tile!` (a private module: the keyword type is no public item).
mod kw {
    syn::custom_keyword!(grid);
}
use kw::grid;

/// The raw `tile!` input.
pub struct TileInput {
    /// The `tile!` item's outer attributes.
    pub attrs: Vec<Attribute>,
    /// Its visibility.
    pub vis: Visibility,
    /// The kernel's name.
    pub name: Ident,
    /// The knobs, as const generics with defaults (`const BM: i64 = 64`).
    pub generics: Generics,
    /// The parameters and their types (`In<f32, 2>` or `Out<f32, 2>`), in order.
    pub params: Vec<(Ident, Type)>,
    /// The `grid = (x, y, z)` expressions.
    pub grid: Vec<Expr>,
    /// The block program.
    pub body: syn::Block,
}

impl Parse for TileInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![fn]>()?;
        let name: Ident = input.parse()?;
        let generics: Generics = input.parse()?;
        let content;
        syn::parenthesized!(content in input);
        let mut params = Vec::new();
        while !content.is_empty() {
            let n: Ident = content.parse()?;
            content.parse::<Token![:]>()?;
            params.push((n, content.parse::<Type>()?));
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        if !input.peek(grid) {
            return Err(
                input.error("expected the launch grid: `grid = (cdiv(x.dim(0), BM), 1, 1)`")
            );
        }
        input.parse::<grid>()?;
        input.parse::<Token![=]>()?;
        let g;
        syn::parenthesized!(g in input);
        let grid = g
            .parse_terminated(Expr::parse, Token![,])?
            .into_iter()
            .collect();
        let body: syn::Block = input.parse()?;
        if !input.is_empty() {
            return Err(input.error("one program per `tile!`"));
        }
        Ok(TileInput {
            attrs,
            vis,
            name,
            generics,
            params,
            grid,
            body,
        })
    }
}

/// A program and, per [`NodeId`], the tokens to point errors at.
pub struct Parsed {
    /// The block program.
    pub program: Program,
    /// The source tokens of each node, indexed by [`NodeId`].
    pub spans: Vec<TokenStream>,
}

/// Converts the input to a [`Program`].
pub fn program(t: &TileInput) -> syn::Result<Parsed> {
    let mut cx = Cx { spans: vec![] };
    let id = cx.id(t.name.to_token_stream());
    let mut knobs = Vec::new();
    for g in &t.generics.params {
        let GenericParam::Const(c) = g else {
            return Err(err(
                g,
                "`tile!` generics are schedule knobs: `const BM: i64 = 64`",
            ));
        };
        if !matches!(&c.ty, Type::Path(p) if p.path.is_ident("i64")) {
            return Err(err(&c.ty, "knobs are `i64`"));
        }
        let default = match &c.default {
            Some((_, e)) => {
                Some(int_lit(e).ok_or_else(|| err(e, "a knob default is an integer literal"))?)
            }
            None => {
                return Err(err(
                    &c.ident,
                    format!(
                        "knob `{}` needs a default value (`const {}: i64 = 64`)",
                        c.ident, c.ident
                    ),
                ));
            }
        };
        knobs.push(Knob {
            id: cx.id(c.to_token_stream()),
            name: c.ident.to_string(),
            default,
        });
    }
    let mut params = Vec::new();
    for (n, ty) in &t.params {
        if n == "knobs" {
            return Err(err(
                n,
                "`knobs` is the name of `launch_with`'s first argument; rename this parameter",
            ));
        }
        let (access, dtype, rank) = param_type(ty)?;
        params.push(ParamDecl {
            id: cx.id(quote!(#n: #ty)),
            name: n.to_string(),
            access,
            dtype,
            rank,
        });
    }
    let grid = t
        .grid
        .iter()
        .map(|e| cx.expr(e))
        .collect::<syn::Result<Vec<_>>>()?;
    let body = cx.block(&t.body)?;
    Ok(Parsed {
        program: Program {
            id,
            name: t.name.to_string(),
            knobs,
            params,
            grid,
            body,
        },
        spans: cx.spans,
    })
}

/// `In<f32, 2>` / `Out<bf16, 1>`.
fn param_type(ty: &Type) -> syn::Result<(Access, tessera_ir::DType, usize)> {
    let bad = || {
        err(
            ty,
            "expected a tensor parameter `In<dtype, rank>` or `Out<dtype, rank>`",
        )
    };
    let Type::Path(p) = ty else { return Err(bad()) };
    let seg = p.path.segments.last().ok_or_else(bad)?;
    let access = match seg.ident.to_string().as_str() {
        "In" => Access::In,
        "Out" => Access::Out,
        _ => return Err(bad()),
    };
    let syn::PathArguments::AngleBracketed(a) = &seg.arguments else {
        return Err(bad());
    };
    let args: Vec<&GenericArgument> = a.args.iter().collect();
    let [GenericArgument::Type(d), r] = args.as_slice() else {
        return Err(bad());
    };
    let rank = match r {
        GenericArgument::Const(e) => int_lit(e),
        GenericArgument::Type(Type::Verbatim(v)) => v.to_string().parse().ok(),
        _ => None,
    }
    .filter(|r| (1..=3).contains(r))
    .ok_or_else(|| err(r, "the rank is an integer literal from 1 to 3"))?;
    Ok((access, dtype(d)?, rank as usize))
}

/// An integer literal, possibly negated.
fn int_lit(e: &Expr) -> Option<i64> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.base10_parse().ok(),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => int_lit(&u.expr).map(|v| -v),
        Expr::Group(g) => int_lit(&g.expr),
        Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
            Stmt::Expr(e, None) => int_lit(e),
            _ => None,
        },
        _ => None,
    }
}

/// Node id allocation and span recording.
struct Cx {
    spans: Vec<TokenStream>,
}

impl Cx {
    fn id(&mut self, tokens: TokenStream) -> NodeId {
        self.spans.push(tokens);
        (self.spans.len() - 1) as NodeId
    }

    fn block(&mut self, b: &syn::Block) -> syn::Result<Vec<S>> {
        b.stmts.iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, s: &Stmt) -> syn::Result<S> {
        let id = self.id(s.to_token_stream());
        let kind = match s {
            Stmt::Local(l) => {
                let Pat::Ident(p) = &l.pat else {
                    return Err(err(
                        &l.pat,
                        "expected `let name = ...;` or `let mut name = ...;`",
                    ));
                };
                if p.by_ref.is_some() || p.subpat.is_some() {
                    return Err(err(
                        &l.pat,
                        "expected `let name = ...;` or `let mut name = ...;`",
                    ));
                }
                let init = l
                    .init
                    .as_ref()
                    .ok_or_else(|| err(l, "a `let` in a tile program needs a value"))?;
                if let Some((e, _)) = &init.diverge {
                    return Err(err(
                        e,
                        "unsupported syntax in a tile program: `let ... else`",
                    ));
                }
                StmtKind::Let {
                    name: p.ident.to_string(),
                    mutable: p.mutability.is_some(),
                    value: self.expr(&init.expr)?,
                }
            }
            Stmt::Expr(Expr::Assign(a), _) => {
                let name = var_name(&a.left)?;
                StmtKind::Assign {
                    name,
                    value: self.expr(&a.right)?,
                }
            }
            Stmt::Expr(Expr::Binary(b), _) if compound(&b.op).is_some() => {
                let name = var_name(&b.left)?;
                let op = compound(&b.op).unwrap();
                let lhs = E::new(
                    self.id(b.left.to_token_stream()),
                    ExprKind::Var(name.clone()),
                );
                let rhs = self.expr(&b.right)?;
                let value = E::new(
                    self.id(s.to_token_stream()),
                    ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                );
                StmtKind::Assign { name, value }
            }
            Stmt::Expr(Expr::ForLoop(f), _) => {
                if let Some(l) = &f.label {
                    return Err(err(l, "loop labels are not supported"));
                }
                let Pat::Ident(p) = &*f.pat else {
                    return Err(err(&f.pat, "expected a loop variable name"));
                };
                let iter = match &*f.expr {
                    Expr::Range(r) => {
                        let (Some(lo), Some(hi), syn::RangeLimits::HalfOpen(_)) =
                            (&r.start, &r.end, &r.limits)
                        else {
                            return Err(err(r, "expected `lo..hi` or `range(lo, hi, step)`"));
                        };
                        let args = vec![self.expr(lo)?, self.expr(hi)?];
                        E::new(
                            self.id(r.to_token_stream()),
                            ExprKind::Call {
                                func: "range".into(),
                                ty: None,
                                args,
                                named: vec![],
                            },
                        )
                    }
                    e => self.expr(e)?,
                };
                StmtKind::For {
                    var: p.ident.to_string(),
                    iter,
                    body: self.block(&f.body)?,
                }
            }
            Stmt::Expr(e, _) => StmtKind::Expr(self.expr(e)?),
            _ => {
                return Err(err(
                    s,
                    "unsupported syntax in a tile program: items and macros",
                ));
            }
        };
        Ok(S::new(id, kind))
    }

    fn expr(&mut self, e: &Expr) -> syn::Result<E> {
        let kind = match e {
            Expr::Paren(p) => return self.expr(&p.expr),
            Expr::Group(g) => return self.expr(&g.expr),
            Expr::Lit(l) => match &l.lit {
                Lit::Int(i) => ExprKind::Int(i.base10_parse()?),
                Lit::Float(f) => ExprKind::Float(f.base10_parse()?),
                Lit::Bool(b) => ExprKind::Bool(b.value),
                _ => return Err(err(e, "unsupported literal")),
            },
            Expr::Path(_) => ExprKind::Var(var_name(e)?),
            Expr::Unary(u) => {
                let op = match u.op {
                    syn::UnOp::Neg(_) => UnOp::Neg,
                    syn::UnOp::Not(_) => UnOp::Not,
                    _ => return Err(err(e, "unsupported operator `*`")),
                };
                ExprKind::Unary(op, Box::new(self.expr(&u.expr)?))
            }
            Expr::Binary(b) => {
                let op = binop(&b.op).ok_or_else(|| err(b.op, "unsupported operator here"))?;
                ExprKind::Binary(
                    op,
                    Box::new(self.expr(&b.left)?),
                    Box::new(self.expr(&b.right)?),
                )
            }
            Expr::Call(c) => {
                let seg = super::call_segment(c, "`load` or `zeros::<f32>`")?;
                let ty = turbofish_dtype(&seg.arguments)?;
                self.call(seg.ident.to_string(), ty, None, c.args.iter())?
            }
            Expr::MethodCall(m) => {
                let ty = match &m.turbofish {
                    Some(t) => turbofish_dtype(&syn::PathArguments::AngleBracketed(t.clone()))?,
                    None => None,
                };
                self.call(m.method.to_string(), ty, Some(&m.receiver), m.args.iter())?
            }
            Expr::Array(a) => ExprKind::List(
                a.elems
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<syn::Result<_>>()?,
            ),
            _ => {
                return Err(err(
                    e,
                    format!("unsupported syntax in a tile program: {}", describe(e)),
                ));
            }
        };
        Ok(E::new(self.id(e.to_token_stream()), kind))
    }

    fn call<'a>(
        &mut self,
        func: String,
        ty: Option<tessera_ir::DType>,
        recv: Option<&Expr>,
        args: impl Iterator<Item = &'a Expr>,
    ) -> syn::Result<ExprKind> {
        let mut pos = Vec::new();
        let mut named = Vec::new();
        if let Some(r) = recv {
            pos.push(self.expr(r)?);
        }
        for a in args {
            match a {
                Expr::Assign(x) => named.push((var_name(&x.left)?, self.expr(&x.right)?)),
                _ => {
                    if !named.is_empty() {
                        return Err(err(a, "positional arguments come before named ones"));
                    }
                    pos.push(self.expr(a)?);
                }
            }
        }
        Ok(ExprKind::Call {
            func,
            ty,
            args: pos,
            named,
        })
    }
}

fn var_name(e: &Expr) -> syn::Result<String> {
    match e {
        Expr::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .map(|i| i.to_string())
            .ok_or_else(|| err(e, "expected a variable name")),
        _ => Err(err(e, "expected a variable name")),
    }
}

fn binop(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as B;
    Some(match op {
        B::Add(_) => BinOp::Add,
        B::Sub(_) => BinOp::Sub,
        B::Mul(_) => BinOp::Mul,
        B::Div(_) => BinOp::Div,
        B::Rem(_) => BinOp::Rem,
        B::Lt(_) => BinOp::Lt,
        B::Le(_) => BinOp::Le,
        B::Gt(_) => BinOp::Gt,
        B::Ge(_) => BinOp::Ge,
        B::Eq(_) => BinOp::Eq,
        B::Ne(_) => BinOp::Ne,
        B::BitAnd(_) | B::And(_) => BinOp::And,
        B::BitOr(_) | B::Or(_) => BinOp::Or,
        _ => return None,
    })
}

/// The operator of `x op= e`.
fn compound(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as B;
    Some(match op {
        B::AddAssign(_) => BinOp::Add,
        B::SubAssign(_) => BinOp::Sub,
        B::MulAssign(_) => BinOp::Mul,
        B::DivAssign(_) => BinOp::Div,
        _ => return None,
    })
}
