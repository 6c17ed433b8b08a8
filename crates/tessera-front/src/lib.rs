//! # tessera-front — the Rust-syntax front end
//!
//! [`parse`] turns syn trees into front-end ASTs (syntax only); [`lower`] hands them to
//! `tessera-ir`, which owns every typing rule. The proc macros (`tessera-macros`) and build
//! scripts that precompile kernels (`tessera-kernels/build.rs`) share this crate, so a kernel
//! compiles the same way in both.

pub mod lower;
pub mod parse;

use proc_macro2::TokenStream;
use tessera_ir::NumericsPolicy;
use tessera_ir::pipeline::Compiled;

/// Parses `numerics = "kahan_sum"` from a `#[kernel(...)]` attribute.
pub fn kernel_options(attr: TokenStream) -> syn::Result<NumericsPolicy> {
    let mut policy = NumericsPolicy::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("numerics") {
            let s: syn::LitStr = meta.value()?.parse()?;
            policy = NumericsPolicy::parse(&s.value())
                .ok_or_else(|| syn::Error::new(s.span(), "numerics is one of \"fast\", \"deterministic\", \"kahan_sum\""))?;
            Ok(())
        } else {
            Err(meta.error("unknown kernel option; expected `numerics = \"...\"`"))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(policy)
}

/// Compiles a `#[kernel]` fn (attribute tokens and item tokens) to its graph and kernels.
pub fn compile_kernel(attr: TokenStream, item: TokenStream) -> syn::Result<(parse::kernel::KernelItem, Compiled)> {
    let k: parse::kernel::KernelItem = syn::parse2(item)?;
    let policy = kernel_options(attr)?;
    let b = parse::kernel::body(&k.block)?;
    let c = lower::kernel::compile(&k, &b, policy)?;
    Ok((k, c.compiled))
}
