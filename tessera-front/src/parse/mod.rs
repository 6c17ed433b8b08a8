//! syn → front-end ASTs. Nothing here knows typing rules; it only checks the syntax.

pub mod kernel;
pub mod tile;
pub mod types;

/// `syn::Error` at the tokens of `t`.
pub fn err(t: impl quote::ToTokens, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new_spanned(t, msg)
}

/// The single path segment a call names (`gelu`, `cast::<bf16>`), or an error whose example
/// names fit the front end (`example` like "`gelu` or `cast::<bf16>`").
pub fn call_segment<'a>(c: &'a syn::ExprCall, example: &str) -> syn::Result<&'a syn::PathSegment> {
    let syn::Expr::Path(p) = &*c.func else {
        return Err(err(&c.func, "expected a function name"));
    };
    match (p.qself.as_ref(), p.path.segments.len()) {
        (None, 1) => Ok(&p.path.segments[0]),
        _ => Err(err(
            &c.func,
            format!("expected a function name such as {example}"),
        )),
    }
}

/// Names an unsupported expression form for error messages.
pub fn describe(e: &syn::Expr) -> &'static str {
    use syn::Expr::*;
    match e {
        If(_) => "`if` expressions",
        Loop(_) => "`loop`",
        While(_) => "`while` loops",
        ForLoop(_) => "`for` loops",
        Closure(_) => "closures",
        Index(_) => "indexing (`x[..]`)",
        Match(_) => "`match`",
        Block(_) | Unsafe(_) => "blocks",
        Field(_) => "field access",
        Reference(_) => "references",
        Return(_) => "`return`",
        Break(_) | Continue(_) => "`break`/`continue`",
        Macro(_) => "macro calls",
        Tuple(_) => "tuples",
        Cast(_) => "`as` casts (use `.cast::<T>()`)",
        Range(_) => "ranges",
        Try(_) => "`?`",
        Struct(_) => "struct literals",
        Assign(_) => "assignments",
        Let(_) => "`let` expressions",
        _ => "this expression",
    }
}
