//! `#[kernel]` items: the signature and a straight-line body as a small expression AST.

use super::types::{KType, dtype};
use super::{describe, err};
use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Expr, GenericArgument, Ident, Lit, Pat, Stmt, Token, UnOp, Visibility};
use tessera_ir::DType;

/// A parsed kernel function.
#[derive(Clone)]
pub struct KernelItem {
    /// The function's outer attributes (doc comments among them), kept for the generated function.
    pub attrs: Vec<Attribute>,
    /// The function's visibility.
    pub vis: Visibility,
    /// The function's name.
    pub name: Ident,
    /// Type parameters and their bounds: `<T: Float>` is `[(T, Float)]`.
    pub generics: Vec<(Ident, Ident)>,
    /// The parameters and their tensor types, in order.
    pub params: Vec<(Ident, KType)>,
    /// The return tensor type.
    pub ret: KType,
    /// The body.
    pub block: syn::Block,
}

/// One instantiation of a kernel: a suffix for its names (`_bf16`; empty for a kernel without
/// type parameters) and the dtype of each type parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// Appended to the kernel's name (`_bf16`; empty without type parameters).
    pub suffix: String,
    /// Each type parameter and the dtype it stands for.
    pub subst: Vec<(String, DType)>,
}

impl Instance {
    /// The dtype a type parameter stands for.
    pub fn get(&self, param: &str) -> Option<DType> {
        self.subst.iter().find(|(p, _)| p == param).map(|x| x.1)
    }
}

impl KernelItem {
    /// Every instantiation the bounds allow (the cartesian product, first parameter
    /// outermost); one empty instance for a kernel without type parameters.
    pub fn instances(&self) -> Vec<Instance> {
        let mut out = vec![Instance {
            suffix: String::new(),
            subst: vec![],
        }];
        for (p, bound) in &self.generics {
            let ds = super::types::bound_dtypes(&bound.to_string()).unwrap_or(&[]);
            out = out
                .into_iter()
                .flat_map(|i| {
                    ds.iter().map(move |d| Instance {
                        suffix: format!("{}_{}", i.suffix, d.name()),
                        subst: i
                            .subst
                            .iter()
                            .cloned()
                            .chain([(p.to_string(), *d)])
                            .collect(),
                    })
                })
                .collect();
        }
        out
    }

    /// The shape contract the generated function's docs state: each parameter's and the
    /// result's element type and dims as written (a type parameter by its name; `dims(..)`
    /// constants once bound). Dims with the same name must agree at launch.
    ///
    /// ```
    /// let k: tessera_front::parse::kernel::KernelItem = syn::parse2(quote::quote!(
    ///     fn lin<T: Float>(x: Tensor<T, (M, K)>, w: Tensor<T, (K, N)>) -> Tensor<f32, (M, N)> {
    ///         x.matmul(w)
    ///     }
    /// )).unwrap();
    /// assert_eq!(k.shape_contract(), "`x: T[M, K]`, `w: T[K, N]` → `f32[M, N]`");
    /// ```
    pub fn shape_contract(&self) -> String {
        let ty = |t: &KType| match &t.param {
            _ if t.scalar => t.ty.dtype.to_string(),
            Some(p) => format!("{p}{}", t.ty.shape),
            None => t.ty.to_string(),
        };
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("`{n}: {}`", ty(t)))
            .collect();
        format!("{} → `{}`", params.join(", "), ty(&self.ret))
    }

    /// The kernel with every type parameter replaced as `inst` says.
    pub fn instantiate(&self, inst: &Instance) -> KernelItem {
        let fix = |t: &KType| {
            let mut t = t.clone();
            if let Some(d) = t.param.as_ref().and_then(|p| inst.get(&p.to_string())) {
                t.ty.dtype = d;
                t.param = None;
            }
            t
        };
        KernelItem {
            params: self
                .params
                .iter()
                .map(|(n, t)| (n.clone(), fix(t)))
                .collect(),
            ret: fix(&self.ret),
            ..self.clone()
        }
    }
}

impl Parse for KernelItem {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![fn]>()?;
        let name: Ident = input.parse()?;
        let mut generics = Vec::new();
        if input.peek(Token![<]) {
            let g: syn::Generics = input.parse()?;
            for p in &g.params {
                let syn::GenericParam::Type(t) = p else {
                    return Err(err(
                        p,
                        "kernels take type parameters only (`<T: Float>`): dims are symbols in the tensor types",
                    ));
                };
                let bound = match t.bounds.iter().collect::<Vec<_>>().as_slice() {
                    [syn::TypeParamBound::Trait(b)] if b.path.get_ident().is_some() => {
                        b.path.get_ident().unwrap().clone()
                    }
                    _ => {
                        return Err(err(
                            t,
                            "a kernel type parameter takes one bound: `T: Float` or `T: Fp8`",
                        ));
                    }
                };
                if super::types::bound_dtypes(&bound.to_string()).is_none() {
                    return Err(err(
                        &bound,
                        "unknown bound: a kernel type parameter is `T: Float` (f32, bf16, f16) or `T: Fp8` (f8e4m3, f8e5m2)",
                    ));
                }
                generics.push((t.ident.clone(), bound));
            }
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
        let ret_start = input.fork();
        let ret: KType = input.parse()?;
        if ret.scalar {
            let t: syn::Type = ret_start.parse()?;
            return Err(err(
                t,
                "a kernel returns a tensor: `-> Tensor<dtype, (dims)>` (a rank-0 result is `Tensor<f32, ()>`)",
            ));
        }
        let block: syn::Block = input.parse()?;
        for t in params.iter().map(|(_, t)| t).chain([&ret]) {
            if let Some(p) = &t.param
                && !generics.iter().any(|(g, _)| g == p)
            {
                return Err(err(
                    p,
                    "expected an element type: f32, f16, bf16, f8e4m3, f8e5m2, i32 or bool, or a type parameter declared as `<T: Float>`",
                ));
            }
        }
        Ok(KernelItem {
            attrs,
            vis,
            name,
            generics,
            params,
            ret,
            block,
        })
    }
}

/// Infix operators of kernel bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KBin {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// A body expression; `tokens` keep the source for error spans.
pub enum KExpr {
    /// A parameter or a `let` binding.
    Var(Ident),
    /// A numeric literal (integer or float).
    Num {
        /// Its value.
        value: f64,
        /// The literal as written.
        tokens: TokenStream,
    },
    /// `-a`.
    Neg {
        /// The operand.
        a: Box<KExpr>,
        /// The expression as written.
        tokens: TokenStream,
    },
    /// `a op b`.
    Bin {
        /// The operator.
        op: KBin,
        /// The left operand.
        a: Box<KExpr>,
        /// The right operand.
        b: Box<KExpr>,
        /// The expression as written.
        tokens: TokenStream,
    },
    /// `f::<T>(args)` or `recv.f::<T>(args)` (receiver first).
    Call {
        /// The op's name (`matmul`, `gelu`, ...).
        name: Ident,
        /// The turbofish type argument, if any.
        ty: Option<TyArg>,
        /// The arguments, receiver first.
        args: Vec<KExpr>,
        /// The call as written.
        tokens: TokenStream,
    },
    /// `[0, 1]` (reduction axes).
    List {
        /// The elements.
        items: Vec<KExpr>,
        /// The list as written.
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

/// The type argument of a call (`cast::<bf16>`, `matmul_acc::<T>`): a dtype, or a type
/// parameter of a generic kernel.
#[derive(Clone)]
pub enum TyArg {
    /// A dtype (`cast::<bf16>`).
    D(DType),
    /// A type parameter of the kernel (`cast::<T>`).
    Param(Ident),
}

/// A kernel body: `let` bindings then the result expression.
pub struct KBody {
    /// The `let` bindings in order: name and value.
    pub lets: Vec<(Ident, KExpr)>,
    /// The block's final expression.
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

/// The type of a `::<T>` argument list, if any: a dtype or a type parameter (an upper-case
/// identifier; the body's lowering checks it is declared).
pub fn turbofish(args: &syn::PathArguments) -> syn::Result<Option<TyArg>> {
    match args {
        syn::PathArguments::None => Ok(None),
        syn::PathArguments::AngleBracketed(a) => match a.args.iter().collect::<Vec<_>>().as_slice()
        {
            [GenericArgument::Type(t)] => match dtype(t) {
                Ok(d) => Ok(Some(TyArg::D(d))),
                Err(e) => match t {
                    syn::Type::Path(p)
                        if p.qself.is_none()
                            && p.path.get_ident().is_some_and(|i| {
                                i.to_string().starts_with(|c: char| c.is_ascii_uppercase())
                            }) =>
                    {
                        Ok(Some(TyArg::Param(p.path.get_ident().unwrap().clone())))
                    }
                    _ => Err(e),
                },
            },
            _ => Err(err(a, "expected one element type: `::<bf16>`")),
        },
        syn::PathArguments::Parenthesized(p) => Err(err(p, "expected `::<dtype>`")),
    }
}

/// [`turbofish`] where only a dtype may appear (the `tile!` DSL has no type parameters).
pub fn turbofish_dtype(args: &syn::PathArguments) -> syn::Result<Option<DType>> {
    match turbofish(args)? {
        None => Ok(None),
        Some(TyArg::D(d)) => Ok(Some(d)),
        Some(TyArg::Param(p)) => Err(err(
            p,
            "expected an element type: f32, f16, bf16, f8e4m3, f8e5m2, i32 or bool",
        )),
    }
}
