//! Quotes a `tile!` front-end AST as a constructor expression (`fn program() -> Program`).

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tessera_ir::DType;
use tessera_ir::tile::dsl::{Access, BinOp, Expr, ExprKind, Program, Stmt, StmtKind, UnOp};

/// The expression building `p` at run time.
pub fn program(p: &Program) -> TokenStream {
    let id = p.id;
    let name = &p.name;
    let knobs = p.knobs.iter().map(|k| {
        let (id, n) = (k.id, &k.name);
        let d = match k.default {
            Some(v) => quote!(::core::option::Option::Some(#v)),
            None => quote!(::core::option::Option::None),
        };
        quote!(D::Knob { id: #id, name: ::std::string::String::from(#n), default: #d })
    });
    let params = p.params.iter().map(|q| {
        let (id, n, rank) = (q.id, &q.name, q.rank);
        let access = match q.access {
            Access::In => quote!(D::Access::In),
            Access::Out => quote!(D::Access::Out),
        };
        let dtype = dtype(q.dtype);
        quote!(D::ParamDecl { id: #id, name: ::std::string::String::from(#n), access: #access, dtype: #dtype, rank: #rank })
    });
    let grid = p.grid.iter().map(expr);
    let body = block(&p.body);
    quote! {{
        use ::tessera::ir::tile::dsl as D;
        D::Program {
            id: #id,
            name: ::std::string::String::from(#name),
            knobs: ::std::vec![#(#knobs),*],
            params: ::std::vec![#(#params),*],
            grid: ::std::vec![#(#grid),*],
            body: #body,
        }
    }}
}

fn dtype(d: DType) -> TokenStream {
    let v = format_ident!("{}", format!("{d:?}"));
    quote!(::tessera::ir::DType::#v)
}

fn block(stmts: &[Stmt]) -> TokenStream {
    let s = stmts.iter().map(stmt);
    quote!(::std::vec![#(#s),*])
}

fn stmt(s: &Stmt) -> TokenStream {
    let id = s.id;
    let kind = match &s.kind {
        StmtKind::Let {
            name,
            mutable,
            value,
        } => {
            let v = expr(value);
            quote!(D::StmtKind::Let { name: ::std::string::String::from(#name), mutable: #mutable, value: #v })
        }
        StmtKind::Assign { name, value } => {
            let v = expr(value);
            quote!(D::StmtKind::Assign { name: ::std::string::String::from(#name), value: #v })
        }
        StmtKind::Expr(e) => {
            let v = expr(e);
            quote!(D::StmtKind::Expr(#v))
        }
        StmtKind::For { var, iter, body } => {
            let (i, b) = (expr(iter), block(body));
            quote!(D::StmtKind::For { var: ::std::string::String::from(#var), iter: #i, body: #b })
        }
    };
    quote!(D::Stmt::new(#id, #kind))
}

fn expr(e: &Expr) -> TokenStream {
    let id = e.id;
    let kind = match &e.kind {
        ExprKind::Int(v) => {
            let l = Literal::i64_suffixed(*v);
            quote!(D::ExprKind::Int(#l))
        }
        ExprKind::Float(v) => {
            let l = float(*v);
            quote!(D::ExprKind::Float(#l))
        }
        ExprKind::Bool(b) => quote!(D::ExprKind::Bool(#b)),
        ExprKind::Var(n) => quote!(D::ExprKind::Var(::std::string::String::from(#n))),
        ExprKind::Unary(op, a) => {
            let op = match op {
                UnOp::Neg => quote!(D::UnOp::Neg),
                UnOp::Not => quote!(D::UnOp::Not),
            };
            let a = expr(a);
            quote!(D::ExprKind::Unary(#op, ::std::boxed::Box::new(#a)))
        }
        ExprKind::Binary(op, a, b) => {
            let op = format_ident!("{}", format!("{:?}", op));
            let _: BinOp;
            let (a, b) = (expr(a), expr(b));
            quote!(D::ExprKind::Binary(D::BinOp::#op, ::std::boxed::Box::new(#a), ::std::boxed::Box::new(#b)))
        }
        ExprKind::Call {
            func,
            ty,
            args,
            named,
        } => {
            let ty = match ty {
                Some(d) => {
                    let d = dtype(*d);
                    quote!(::core::option::Option::Some(#d))
                }
                None => quote!(::core::option::Option::None),
            };
            let args = args.iter().map(expr);
            let named = named.iter().map(|(n, v)| {
                let v = expr(v);
                quote!((::std::string::String::from(#n), #v))
            });
            quote!(D::ExprKind::Call {
                func: ::std::string::String::from(#func),
                ty: #ty,
                args: ::std::vec![#(#args),*],
                named: ::std::vec![#(#named),*],
            })
        }
        ExprKind::List(items) => {
            let items = items.iter().map(expr);
            quote!(D::ExprKind::List(::std::vec![#(#items),*]))
        }
    };
    quote!(D::Expr::new(#id, #kind))
}

/// An f64 literal (non-finite values as constants).
fn float(v: f64) -> TokenStream {
    if v.is_nan() {
        quote!(::core::f64::NAN)
    } else if v.is_infinite() && v > 0.0 {
        quote!(::core::f64::INFINITY)
    } else if v.is_infinite() {
        quote!(::core::f64::NEG_INFINITY)
    } else {
        let l = Literal::f64_suffixed(v);
        quote!(#l)
    }
}
