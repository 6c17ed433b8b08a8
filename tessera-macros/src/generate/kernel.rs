//! `#[kernel]` expansion: a wrapper fn holding a `static KernelDef` with the embedded IR texts.

use proc_macro2::TokenStream;
use quote::quote;
use tessera_front::lower::kernel::compile_with;
use tessera_front::parse::kernel::{KernelItem, body};
use tessera_front::parse::types::rust_elem;

/// Expands `#[kernel(attr)] item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut k: KernelItem = match syn::parse2(item) {
        Ok(k) => k,
        Err(e) => return e.to_compile_error(),
    };
    match tessera_front::kernel_attr(attr).and_then(|a| {
        a.bind_dims(&mut k)?;
        let b = body(&k.block)?;
        compile_with(&k, &b, &a.compile_options()).map(|c| (c, a.autotune, a.rewrites))
    }) {
        Ok((c, tune, rewrites)) => match ptx_texts(&c.compiled) {
            Ok(ptx) => wrapper(&k, Some((&c.graph, &c.tiles, &ptx, &tune, &rewrites))),
            Err(e) => {
                let stand_in = wrapper(&k, None);
                let errors = syn::Error::new_spanned(&k.name, e).to_compile_error();
                quote!(#errors #stand_in)
            }
        },
        Err(e) => {
            let stand_in = wrapper(&k, None);
            let errors = e.to_compile_error();
            quote!(#errors #stand_in)
        }
    }
}

/// The user-facing fn. Without compiled texts it is a stand-in that keeps callers type-checking
/// after an error has been reported.
#[allow(clippy::type_complexity)]
fn wrapper(
    k: &KernelItem,
    compiled: Option<(
        &String,
        &Vec<String>,
        &Vec<String>,
        &Option<tessera_front::AutotuneAttr>,
        &Vec<(String, bool)>,
    )>,
) -> TokenStream {
    let KernelItem {
        attrs,
        vis,
        name,
        params,
        ret,
        ..
    } = k;
    let names: Vec<_> = params.iter().map(|(n, _)| n).collect();
    let tys: Vec<_> = params.iter().map(|(_, t)| rust_elem(t.ty.dtype)).collect();
    let out = rust_elem(ret.ty.dtype);
    let name_str = name.to_string();
    let body = match compiled {
        Some((graph, tiles, ptx, tune, rewrites)) => {
            let register = tune.as_ref().map(|t| search_space(&name_str, t));
            let (rule_names, on): (Vec<&String>, Vec<bool>) =
                rewrites.iter().map(|(n, b)| (n, *b)).unzip();
            quote! {
                #register
                static KERNEL: ::tessera::KernelDef = ::tessera::KernelDef::new(#name_str, #graph, &[#(#tiles),*]).with_ptx(&[#(#ptx),*]).with_rewrites(&[#((#rule_names, #on)),*]);
                KERNEL.launch::<#out>(&[#(#names.arg()),*])
            }
        }
        None => quote! {
            let _ = (#(#names,)*);
            ::core::unreachable!("kernel `{}` failed to compile", #name_str)
        },
    };
    quote! {
        #(#attrs)*
        #vis fn #name(#(#names: &::tessera::Tensor<#tys>),*) -> ::tessera::Result<::tessera::Tensor<#out>> {
            #body
        }
    }
}

/// The PTX of every fused kernel's default schedule for every arch (kernel-major, in
/// `Arch::ALL` order), emitted at compile time.
fn ptx_texts(c: &tessera_ir::pipeline::Compiled) -> Result<Vec<String>, String> {
    use tessera_ir::target::ptx::{Arch, emit};
    let mut out = Vec::new();
    for k in &c.kernels {
        for arch in Arch::ALL {
            out.push(
                emit(&k.lowered.kernel, &k.schedule, arch)
                    .map_err(|e| format!("PTX for {arch}: {e}"))?
                    .text,
            );
        }
    }
    Ok(out)
}

/// Registers the attribute's search space once, at the first launch, unless the program
/// registered one for this kernel through `tessera::autotune::search_space` already.
fn search_space(name: &str, t: &tessera_front::AutotuneAttr) -> TokenStream {
    let tiles = t.tiles.iter().map(|d| quote!(::std::vec![#(#d),*]));
    let (v, s, w, f) = (&t.vectorize, &t.stages, &t.warps, &t.fusion_depths);
    let max = t.max_trials.map(|n| quote!(.max_trials(#n)));
    let strategy = t.strategy.as_deref().map(|s| match s {
        "grid" => quote!(.strategy(::tessera::autotune::Strategy::Grid)),
        "random" => quote!(.strategy(::tessera::autotune::Strategy::Random { seed: 0 })),
        _ => quote!(.strategy(::tessera::autotune::Strategy::Hybrid)),
    });
    let cost_model = t.cost_model.as_deref().map(|c| match c {
        "none" => quote!(.cost_model(::tessera::autotune::CostModel::Off)),
        _ => quote!(.cost_model(::tessera::autotune::CostModel::Roofline)),
    });
    quote! {
        static AUTOTUNE_SPACE: ::std::sync::Once = ::std::sync::Once::new();
        AUTOTUNE_SPACE.call_once(|| {
            if ::tessera::autotune::space_of(#name).is_none() {
                ::tessera::autotune::search_space(
                    #name,
                    ::tessera::autotune::SearchSpace::new()
                        .tiles([#(::tessera::autotune::TileDims(#tiles)),*])
                        .vectorize([#(#v),*])
                        .stages([#(#s),*])
                        .warps([#(#w),*])
                        .fusion_depths([#(#f),*])
                        #max
                        #strategy
                        #cost_model,
                );
            }
        });
    }
}
