//! The compile-time check of a `tile!` program: lower it with its default knobs.

use crate::parse::tile::Parsed;
use tessera_ir::tile::dsl;

/// Lowers with the default knobs; a front-end error becomes a `syn::Error` at its node.
pub fn check(p: &Parsed) -> syn::Result<()> {
    match dsl::lower(&p.program, &[]) {
        Ok(_) => Ok(()),
        Err(e) => {
            let at = p
                .spans
                .get(e.span as usize)
                .cloned()
                .unwrap_or_else(|| p.spans[0].clone());
            Err(syn::Error::new_spanned(at, e.message))
        }
    }
}
