//! `#[kernel]` expansion: a wrapper fn over `static KernelDef`s with the embedded IR texts (one
//! per instantiation of a generic kernel, dispatched on the element type). A non-generic kernel's
//! definition lives in a module of the same name (`name::KERNEL`), for launches that need more
//! than the call (`tessera_dist`'s SPMD launch over a mesh).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tessera_front::lower::kernel::compile;
use tessera_front::parse::kernel::{Instance, KernelItem, body};
use tessera_front::parse::types::{KType, rust_elem};

/// The texts one instantiation embeds.
struct Def {
    inst: Instance,
    graph: String,
    tiles: Vec<String>,
    ptx: Vec<String>,
}

/// Expands `#[kernel(attr)] item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let k: KernelItem = match syn::parse2(item) {
        Ok(k) => k,
        Err(e) => return e.to_compile_error(),
    };
    let compiled = tessera_front::kernel_attr(attr).and_then(|a| {
        let b = body(&k.block)?;
        let mut defs = Vec::new();
        for inst in k.instances() {
            let c = compile(&k.instantiate(&inst), &b, &a, &inst)?;
            let ptx = ptx_texts(&c.compiled).map_err(|e| syn::Error::new_spanned(&k.name, e))?;
            defs.push(Def {
                inst,
                graph: c.graph,
                tiles: c.tiles,
                ptx,
            });
        }
        Ok((defs, a))
    });
    match compiled {
        Ok((defs, a)) => wrapper(&k, Some((&defs, &a))),
        Err(e) => {
            let stand_in = wrapper(&k, None);
            let errors = e.to_compile_error();
            quote!(#errors #stand_in)
        }
    }
}

/// The Rust type of a kernel tensor's elements: the type parameter or the dtype's type.
fn elem(t: &KType) -> TokenStream {
    match &t.param {
        Some(p) => quote!(#p),
        None => rust_elem(t.ty.dtype),
    }
}

/// The user-facing fn. Without compiled texts it is a stand-in that keeps callers type-checking
/// after an error has been reported.
fn wrapper(k: &KernelItem, compiled: Option<(&[Def], &tessera_front::KernelAttr)>) -> TokenStream {
    let KernelItem {
        attrs,
        vis,
        name,
        generics,
        params,
        ret,
        ..
    } = k;
    let names: Vec<_> = params.iter().map(|(n, _)| n).collect();
    let tys: Vec<_> = params.iter().map(|(_, t)| elem(t)).collect();
    let out = elem(ret);
    let name_str = name.to_string();
    let bounds = generics.iter().map(|(p, b)| quote!(#p: ::tessera::#b));
    let gen_params = if generics.is_empty() {
        quote!()
    } else {
        quote!(<#(#bounds),*>)
    };
    let mut module = None;
    let body = match compiled {
        Some((defs, attr)) => {
            let tune = &attr.autotune;
            let precision = attr.precision.map(|m| {
                let v = format_ident!("{}", format!("{m:?}"));
                quote!(.with_precision(::tessera::Precision::#v))
            });
            let statics = defs.iter().enumerate().map(|(i, d)| {
                let s = format_ident!("KERNEL_{}", i);
                let kname = format!("{name_str}{}", d.inst.suffix);
                let (graph, tiles, ptx) = (&d.graph, &d.tiles, &d.ptx);
                let register = tune.as_ref().map(|t| search_space(&kname, t));
                quote! {
                    #register
                    static #s: ::tessera::KernelDef = ::tessera::KernelDef::new(#kname, #graph, &[#(#tiles),*]).with_ptx(&[#(#ptx),*])#precision;
                }
            });
            if generics.is_empty() {
                let d = &defs[0];
                let (graph, tiles, ptx) = (&d.graph, &d.tiles, &d.ptx);
                let register = tune.as_ref().map(|t| search_space(&name_str, t));
                module = Some(quote! {
                    ::tessera::KernelDef::new(#name_str, #graph, &[#(#tiles),*]).with_ptx(&[#(#ptx),*])#precision
                });
                quote! {
                    #register
                    #name::KERNEL.launch::<#out>(&[#(#names.arg()),*])
                }
            } else {
                let ps: Vec<_> = generics.iter().map(|(p, _)| p).collect();
                let arms = defs.iter().enumerate().map(|(i, d)| {
                    let s = format_ident!("KERNEL_{}", i);
                    let pats = d.inst.subst.iter().map(|(_, dt)| {
                        let v = format_ident!("{}", format!("{dt:?}"));
                        quote!(::tessera::DType::#v)
                    });
                    quote!([#(#pats),*] => &#s,)
                });
                quote! {
                    #(#statics)*
                    let def: &'static ::tessera::KernelDef = match [#(<#ps as ::tessera::Element>::DTYPE),*] {
                        #(#arms)*
                        other => {
                            return ::core::result::Result::Err(::tessera::Error::Compile {
                                kernel: #name_str.into(),
                                message: ::std::format!("no instantiation for element types {other:?}"),
                            })
                        }
                    };
                    def.launch::<#out>(&[#(#names.arg()),*])
                }
            }
        }
        None => {
            if generics.is_empty() {
                module = Some(quote! { ::tessera::KernelDef::new(#name_str, "", &[]) });
            }
            quote! {
            let _ = (#(#names,)*);
            ::core::unreachable!("kernel `{}` failed to compile", #name_str)
            }
        }
    };
    let doc = format!(
        "The static definition of kernel `{name_str}`: its Graph IR, fused kernels and PTX, for \
         launches that need more than the call (e.g. `tessera_dist`'s SPMD launch over a mesh)."
    );
    let module = module.map(|def| {
        quote! {
            #[doc = #doc]
            #vis mod #name {
                #[doc = #doc]
                pub static KERNEL: ::tessera::KernelDef = #def;
            }
        }
    });
    quote! {
        #(#attrs)*
        #vis fn #name #gen_params (#(#names: &::tessera::Tensor<#tys>),*) -> ::tessera::Result<::tessera::Tensor<#out>> {
            #body
        }
        #module
    }
}

/// The PTX of every fused kernel's default schedule for every arch (kernel-major, in
/// `Arch::ALL` order), emitted at compile time. An arch the kernel cannot run on (fp8 before
/// sm_89) gets an empty text: launching there emits at run time and reports why.
fn ptx_texts(c: &tessera_ir::pipeline::Compiled) -> Result<Vec<String>, String> {
    use tessera_ir::target::ptx::{Arch, emit, supports};
    let mut out = Vec::new();
    for k in &c.kernels {
        for arch in Arch::ALL {
            if supports(&k.lowered.kernel, arch).is_err() {
                out.push(String::new());
                continue;
            }
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
    let once = format_ident!("AUTOTUNE_SPACE_{}", name.to_uppercase());
    quote! {
        static #once: ::std::sync::Once = ::std::sync::Once::new();
        #once.call_once(|| {
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
