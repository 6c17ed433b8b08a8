//! `#[kernel]` expansion: a wrapper fn holding a `static KernelDef` with the embedded IR texts.

use proc_macro2::TokenStream;
use quote::quote;
use tessera_front::lower::kernel::{Compiled, compile};
use tessera_front::parse::kernel::{KernelItem, body};
use tessera_front::parse::types::rust_elem;

/// Expands `#[kernel(attr)] item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let k: KernelItem = match syn::parse2(item) {
        Ok(k) => k,
        Err(e) => return e.to_compile_error(),
    };
    match tessera_front::kernel_attr(attr).and_then(|a| {
        let b = body(&k.block)?;
        compile(&k, &b, a.policy).map(|c| (c, a))
    }) {
        Ok((c, attr)) => match embedded(&c) {
            Ok(e) => wrapper(&k, Some((&c, &e, &attr))),
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

/// What a kernel embeds besides its IR texts: per fused kernel its launch manifest, and its
/// default schedule's PTX (launch header and module) for every arch.
struct Embedded {
    manifests: Vec<String>,
    ptx: Vec<(String, String)>,
}

/// The user-facing fn. Without compiled texts it is a stand-in that keeps callers type-checking
/// after an error has been reported.
fn wrapper(
    k: &KernelItem,
    compiled: Option<(&Compiled, &Embedded, &tessera_front::KernelAttr)>,
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
        Some((c, e, attr)) => {
            let register = attr.autotune.as_ref().map(|t| search_space(&name_str, t));
            let (graph, tiles, manifests) = (&c.graph, &c.tiles, &e.manifests);
            let ptx = e.ptx.iter().map(
                |(launch, text)| quote!(::tessera::EmbeddedPtx { launch: #launch, text: #text }),
            );
            let library = attr
                .precompiled
                .as_ref()
                .map(|p| quote!(.with_precompiled(#p)));
            quote! {
                #register
                static KERNEL: ::tessera::KernelDef = ::tessera::KernelDef::new(#name_str, #graph, &[#(#tiles),*])
                    .with_embedded(&[#(#manifests),*], &[#(#ptx),*])
                    #library;
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

/// The manifests of the fused kernels and the PTX of every fused kernel's default schedule for
/// every arch (kernel-major, in `Arch::ALL` order), emitted at compile time. The manifests
/// name values as the embedded graph text parses back, which is checked here.
fn embedded(c: &Compiled) -> Result<Embedded, String> {
    use tessera_ir::manifest::KernelManifest;
    use tessera_ir::target::ptx::{Arch, emit, print_launch};
    let reparsed = tessera_ir::graph::parse(&c.graph).map_err(|e| format!("graph text: {e}"))?;
    if reparsed.to_string() != c.graph {
        return Err("internal error: the graph text does not print back the same".into());
    }
    let mut out = Embedded {
        manifests: Vec::new(),
        ptx: Vec::new(),
    };
    for (i, k) in c.compiled.kernels.iter().enumerate() {
        out.manifests.push(
            KernelManifest::of(&c.compiled, i)
                .display(&reparsed)
                .to_string(),
        );
        for arch in Arch::ALL {
            let p = emit(&k.lowered.kernel, &k.schedule, arch)
                .map_err(|e| format!("PTX for {arch}: {e}"))?;
            out.ptx.push((print_launch(&p), p.text));
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
