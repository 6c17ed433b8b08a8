//! `#[kernel]` items: the signature and a straight-line body as a small expression AST.

use super::types::{KType, dtype};
use super::{describe, err};
use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Expr, GenericArgument, Ident, Lit, Pat, Stmt, Token, UnOp, Visibility};
use tessera_ir::DType;

/// A parsed kernel function.
pub struct KernelItem {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    pub params: Vec<(Ident, KType)>,
    pub ret: KType,
    pub block: syn::Block,
}

impl Parse for KernelItem {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![fn]>()?;
        let name: Ident = input.parse()?;
        if input.peek(Token![<]) {
            return Err(input.error(
                "kernels take no generic parameters: dims are symbols in the tensor types",
            ));
        }
        let content;
        let paren = syn::parenthesized!(content in input);
        let mut params = Vec::new();
        while !content.is_empty() {
            let n: Ident = content.parse()?;
            content.parse::<Token![:]>()?;
            params.push((n, content.parse::<KType>()?));
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        if !input.peek(Token![->]) {
            return Err(syn::Error::new(
                paren.span.close(),
                "a kernel returns a tensor: add `-> Tensor<dtype, (dims)>`",
            ));
        }
        input.parse::<Token![->]>()?;
        let ret: KType = input.parse()?;
        let block: syn::Block = input.parse()?;
        Ok(KernelItem {
            attrs,
            vis,
            name,
            params,
            ret,
            block,
        })
    }
}

/// Infix operators of kernel bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KBin {
    Add,
    Sub,
    Mul,
    Div,
}

/// A body expression; `tokens` keep the source for error spans.
pub enum KExpr {
    Var(Ident),
    Num {
        value: f64,
        tokens: TokenStream,
    },
    Neg {
        a: Box<KExpr>,
        tokens: TokenStream,
    },
    Bin {
        op: KBin,
        a: Box<KExpr>,
        b: Box<KExpr>,
        tokens: TokenStream,
    },
    /// `f::<T>(args)` or `recv.f::<T>(args)` (receiver first).
    Call {
        name: Ident,
        ty: Option<DType>,
        args: Vec<KExpr>,
        tokens: TokenStream,
    },
    /// `[0, 1]` (reduction axes).
    List {
        items: Vec<KExpr>,
        tokens: TokenStream,
    },
}

impl KExpr {
    /// The source tokens (for error spans).
    pub fn tokens(&self) -> TokenStream {
        match self {
            KExpr::Var(i) => i.to_token_stream(),
            KExpr::Num { tokens, .. } | KExpr::Neg { tokens, .. } | KExpr::Bin { tokens, .. } => {
                tokens.clone()
            }
            KExpr::Call { tokens, .. } | KExpr::List { tokens, .. } => tokens.clone(),
        }
    }
}

/// A kernel body: `let` bindings then the result expression.
pub struct KBody {
    pub lets: Vec<(Ident, KExpr)>,
    pub result: KExpr,
}

/// Parses the body block.
pub fn body(block: &syn::Block) -> syn::Result<KBody> {
    let mut lets = Vec::new();
    let mut result = None;
    let n = block.stmts.len();
    for (i, s) in block.stmts.iter().enumerate() {
        match s {
            Stmt::Local(l) => {
                let name = match &l.pat {
                    Pat::Ident(p)
                        if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() =>
                    {
                        p.ident.clone()
                    }
                    Pat::Ident(p) if p.mutability.is_some() => {
                        return Err(err(&l.pat, "kernel bindings are immutable: drop `mut`"));
                    }
                    _ => return Err(err(&l.pat, "expected `let name = ...;`")),
                };
                let init = l
                    .init
                    .as_ref()
                    .ok_or_else(|| err(l, "a `let` in a kernel needs a value"))?;
                if let Some((e, _)) = &init.diverge {
                    return Err(err(
                        e,
                        "unsupported syntax in a kernel body: `let ... else`",
                    ));
                }
                lets.push((name, expr(&init.expr)?));
            }
            Stmt::Expr(e, None) if i + 1 == n => result = Some(expr(e)?),
            Stmt::Expr(e, Some(_))
                if i + 1 == n
                    && !matches!(
                        e,
                        Expr::If(_) | Expr::Loop(_) | Expr::ForLoop(_) | Expr::While(_)
                    ) =>
            {
                return Err(err(
                    s,
                    "the kernel's result must be the final expression, without `;`",
                ));
            }
            Stmt::Expr(e, _) => return Err(unsupported(e)),
            _ => {
                return Err(err(
                    s,
                    "unsupported syntax in a kernel body: only `let` bindings and a final expression",
                ));
            }
        }
    }
    let result = result.ok_or_else(|| {
        syn::Error::new(
            block.brace_token.span.close(),
            "the kernel body must end with the result expression",
        )
    })?;
    Ok(KBody { lets, result })
}

fn unsupported(e: &Expr) -> syn::Error {
    err(
        e,
        format!(
            "unsupported syntax in a kernel body: {} (kernels are straight-line tensor expressions)",
            describe(e)
        ),
    )
}

/// Parses one body expression.
pub fn expr(e: &Expr) -> syn::Result<KExpr> {
    let tokens = e.to_token_stream();
    match e {
        Expr::Paren(p) => expr(&p.expr),
        Expr::Group(g) => expr(&g.expr),
        Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
            Ok(KExpr::Var(p.path.get_ident().unwrap().clone()))
        }
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Ok(KExpr::Num {
                value: i.base10_parse::<i64>()? as f64,
                tokens,
            }),
            Lit::Float(f) => Ok(KExpr::Num {
                value: f.base10_parse::<f64>()?,
                tokens,
            }),
            _ => Err(err(e, "unsupported literal: kernels take numbers")),
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => Ok(KExpr::Neg {
            a: Box::new(expr(&u.expr)?),
            tokens,
        }),
        Expr::Binary(b) => {
            let op = match b.op {
                syn::BinOp::Add(_) => KBin::Add,
                syn::BinOp::Sub(_) => KBin::Sub,
                syn::BinOp::Mul(_) => KBin::Mul,
                syn::BinOp::Div(_) => KBin::Div,
                _ => {
                    return Err(err(
                        b.op,
                        "unsupported operator in a kernel body: use + - * / or a function such as `maximum`",
                    ));
                }
            };
            Ok(KExpr::Bin {
                op,
                a: Box::new(expr(&b.left)?),
                b: Box::new(expr(&b.right)?),
                tokens,
            })
        }
        Expr::Call(c) => {
            let seg = super::call_segment(c, "`gelu` or `cast::<bf16>`")?;
            let ty = turbofish(&seg.arguments)?;
            let args = c.args.iter().map(expr).collect::<syn::Result<_>>()?;
            Ok(KExpr::Call {
                name: seg.ident.clone(),
                ty,
                args,
                tokens,
            })
        }
        Expr::MethodCall(m) => {
            let ty = match &m.turbofish {
                Some(t) => turbofish(&syn::PathArguments::AngleBracketed(t.clone()))?,
                None => None,
            };
            let mut args = vec![expr(&m.receiver)?];
            for a in &m.args {
                args.push(expr(a)?);
            }
            Ok(KExpr::Call {
                name: m.method.clone(),
                ty,
                args,
                tokens,
            })
        }
        Expr::Array(a) => Ok(KExpr::List {
            items: a.elems.iter().map(expr).collect::<syn::Result<_>>()?,
            tokens,
        }),
        _ => Err(unsupported(e)),
    }
}

/// The dtype of a `::<T>` argument list, if any.
pub fn turbofish(args: &syn::PathArguments) -> syn::Result<Option<DType>> {
    match args {
        syn::PathArguments::None => Ok(None),
        syn::PathArguments::AngleBracketed(a) => match a.args.iter().collect::<Vec<_>>().as_slice()
        {
            [GenericArgument::Type(t)] => Ok(Some(dtype(t)?)),
            _ => Err(err(a, "expected one element type: `::<bf16>`")),
        },
        syn::PathArguments::Parenthesized(p) => Err(err(p, "expected `::<dtype>`")),
    }
}
