//! syn → front-end ASTs. Nothing here knows typing rules; it only checks the syntax.

pub mod kernel;
pub mod tile;
pub mod types;

/// `syn::Error` at the tokens of `t`.
pub fn err(t: impl quote::ToTokens, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new_spanned(t, msg)
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
