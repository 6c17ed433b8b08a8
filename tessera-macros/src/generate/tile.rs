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
            Some((program(&parsed.program), default_ptx(&parsed.program))),
            &knob_defaults(&parsed.program),
        ),
        Err(e) => {
            let errors = e.to_compile_error();
            let stand_in = module(&t, &parsed.program.params, None, &[]);
            quote!(#errors #stand_in)
        }
    }
}

/// The default knobs' PTX for every arch (`Arch::ALL` order) as (launch header, module), under
/// the schedule block programs run with on a PTX device. Empty when the emitter cannot take
/// the program: a launch on a PTX device then reports the emitter's error, as it would at run
/// time, and the CPU path is unaffected.
fn default_ptx(p: &tessera_ir::tile::dsl::Program) -> Vec<(String, String)> {
    use tessera_ir::schedule::Schedule;
    use tessera_ir::target::ptx::{Arch, emit, print_launch};
    let Ok(k) = tessera_ir::tile::dsl::lower(p, &[]) else {
        return Vec::new();
    };
    let s = Schedule::block_program();
    Arch::ALL
        .iter()
        .map(|a| emit(&k, &s, *a).map(|x| (print_launch(&x), x.text)))
        .collect::<Result<_, _>>()
        .unwrap_or_default()
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
    prog: Option<(TokenStream, Vec<(String, String)>)>,
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
            Access::Out => quote!(::tessera::Arg::Out(#n.arg_mut()?)),
        })
        .collect();
    let (kn, kv): (Vec<_>, Vec<_>) = knobs.iter().cloned().unzip();
    let decls = params.iter().map(|p| {
        let (n, r) = (&p.name, p.rank);
        let d = quote::format_ident!("{}", format!("{:?}", p.dtype));
        quote!(::tessera::TileParam { name: #n, dtype: ::tessera::DType::#d, rank: #r })
    });
    let items = match prog {
        Some((prog, ptx)) => {
            let ptx = ptx.iter().map(
                |(launch, text)| quote!(::tessera::EmbeddedPtx { launch: #launch, text: #text }),
            );
            quote! {
            /// The block program's front-end AST (lowered at launch on the CPU, and on a PTX
            /// device for knobs other than the defaults).
            pub fn program() -> ::tessera::ir::tile::dsl::Program #prog

            /// The kernel definition: name, program, default knobs, parameters and the
            /// default knobs' PTX per arch.
            pub static DEF: ::tessera::TileDef = ::tessera::TileDef::new(#name_str, program, &[#((#kn, #kv)),*])
                .with_embedded(&[#(#decls),*], &[#(#ptx),*]);

            /// Launches with the given knob values (others keep their defaults).
            pub fn launch_with(knobs: &[(&str, i64)], #(#names: #tys),*) -> ::tessera::Result<()> {
                DEF.launch(knobs, &mut [#(#args),*])
            }
            }
        }
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
