//! `tile!` expansion: a module named after the program with `program()`, a `static DEF` and
//! the `launch` / `launch_with` wrappers.

use super::program::program;
use proc_macro2::TokenStream;
use quote::quote;
use tessera_front::lower::tile::check;
use tessera_front::parse::tile::{TileInput, program as parse_program};
use tessera_front::parse::types::rust_elem;
use tessera_ir::tile::dsl::{Access, ParamDecl};

/// Expands `tile! { .. }`.
pub fn expand(input: TokenStream) -> TokenStream {
    let t: TileInput = match syn::parse2(input) {
        Ok(t) => t,
        Err(e) => return e.to_compile_error(),
    };
    let parsed = match parse_program(&t) {
        Ok(p) => p,
        Err(e) => return e.to_compile_error(),
    };
    match check(&parsed) {
        Ok(()) => module(
            &t,
            &parsed.program.params,
            Some(program(&parsed.program)),
            &knob_defaults(&parsed.program),
        ),
        Err(e) => {
            let errors = e.to_compile_error();
            let stand_in = module(&t, &parsed.program.params, None, &[]);
            quote!(#errors #stand_in)
        }
    }
}

fn knob_defaults(p: &tessera_ir::tile::dsl::Program) -> Vec<(String, i64)> {
    p.knobs
        .iter()
        .filter_map(|k| Some((k.name.clone(), k.default?)))
        .collect()
}

/// The module. Without a program it is a stand-in that keeps callers type-checking after an
/// error has been reported.
fn module(
    t: &TileInput,
    params: &[ParamDecl],
    prog: Option<TokenStream>,
    knobs: &[(String, i64)],
) -> TokenStream {
    let (attrs, vis, name) = (&t.attrs, &t.vis, &t.name);
    let name_str = name.to_string();
    let names: Vec<_> = params
        .iter()
        .map(|p| quote::format_ident!("{}", p.name))
        .collect();
    let tys: Vec<_> = params
        .iter()
        .map(|p| {
            let e = rust_elem(p.dtype);
            match p.access {
                Access::In => quote!(&::tessera::Tensor<#e>),
                Access::Out => quote!(&mut ::tessera::Tensor<#e>),
            }
        })
        .collect();
    let args: Vec<_> = params
        .iter()
        .zip(&names)
        .map(|(p, n)| match p.access {
            Access::In => quote!(::tessera::Arg::In(#n.arg())),
            Access::Out => quote!(::tessera::Arg::Out(#n.arg_mut())),
        })
        .collect();
    let (kn, kv): (Vec<_>, Vec<_>) = knobs.iter().cloned().unzip();
    let items = match prog {
        Some(prog) => quote! {
            /// The block program's front-end AST (lowered again at launch for the chosen knobs).
            pub fn program() -> ::tessera::ir::tile::dsl::Program #prog

            /// The kernel definition: name, program and default knobs.
            pub static DEF: ::tessera::TileDef = ::tessera::TileDef::new(#name_str, program, &[#((#kn, #kv)),*]);

            /// Launches with the given knob values (others keep their defaults).
            pub fn launch_with(knobs: &[(&str, i64)], #(#names: #tys),*) -> ::tessera::Result<()> {
                DEF.launch(knobs, &mut [#(#args),*])
            }
        },
        None => quote! {
            /// Stand-in after a compile error.
            pub fn launch_with(knobs: &[(&str, i64)], #(#names: #tys),*) -> ::tessera::Result<()> {
                let _ = (knobs, #(#names,)*);
                ::core::unreachable!("tile program `{}` failed to compile", #name_str)
            }
        },
    };
    quote! {
        #(#attrs)*
        #[allow(clippy::too_many_arguments)]
        #vis mod #name {
            #items

            /// Launches with the default knobs.
            pub fn launch(#(#names: #tys),*) -> ::tessera::Result<()> {
                launch_with(&[], #(#names),*)
            }
        }
    }
}
