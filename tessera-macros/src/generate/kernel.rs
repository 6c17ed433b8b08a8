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
    /// Per fused kernel its launch manifest ([`tessera_ir::manifest::KernelManifest`] text).
    manifests: Vec<String>,
    /// Per fused kernel and arch (kernel-major, `Arch::ALL` order): the default schedule's
    /// launch header and PTX module; both empty for an arch the kernel cannot run on.
    ptx: Vec<(String, String)>,
    /// Per scalar parameter, the rule its value must meet at launch.
    scalar_rules: Vec<(String, tessera_ir::scalar::ScalarRule)>,
}

/// Expands `#[kernel(attr)] item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut k: KernelItem = match syn::parse2(item) {
        Ok(k) => k,
        Err(e) => return e.to_compile_error(),
    };
    let compiled = tessera_front::kernel_attr(attr).and_then(|a| {
        a.bind_dims(&mut k)?;
        let b = body(&k.block)?;
        let mut defs = Vec::new();
        for inst in k.instances() {
            let c = compile(&k.instantiate(&inst), &b, &a, &inst)?;
            let (manifests, ptx) = embedded(&c).map_err(|e| syn::Error::new_spanned(&k.name, e))?;
            defs.push(Def {
                inst,
                graph: c.graph,
                tiles: c.tiles,
                manifests,
                ptx,
                scalar_rules: c.scalar_rules,
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
    // Tensors by reference, scalar parameters (`eps: f32`) by value.
    let arg_tys: Vec<_> = params
        .iter()
        .map(|(_, t)| {
            let e = elem(t);
            if t.scalar {
                quote!(#e)
            } else {
                quote!(&::tessera::Tensor<#e>)
            }
        })
        .collect();
    let out = elem(ret);
    let name_str = name.to_string();
    let bounds = generics.iter().map(|(p, b)| quote!(#p: ::tessera::#b));
    let gen_params = if generics.is_empty() {
        quote!()
    } else {
        quote!(<#(#bounds),*>)
    };
    let mut module = None;
    let doc = format!(
        "The static definition of kernel `{name_str}` (of each instantiation, for a generic one): its Graph IR, fused kernels and PTX, for \
         launches that need more than the call (e.g. `tessera_dist`'s SPMD launch over a mesh)."
    );
    let body = match compiled {
        Some((defs, attr)) => {
            let scalars = scalar_prelude(&name_str, params, &defs[0].scalar_rules);
            let tune = &attr.autotune;
            let precision = attr.precision.map(|m| {
                let v = format_ident!("{}", format!("{m:?}"));
                quote!(.with_precision(::tessera::Precision::#v))
            });
            let library = attr
                .precompiled
                .as_ref()
                .map(|p| quote!(.with_precompiled(#p)));
            let tile = attr.tile.as_ref().map(|t| {
                let d = &t.dims;
                quote!(.with_tile(&[#(#d),*]))
            });
            let (rule_names, on): (Vec<&String>, Vec<bool>) =
                attr.rewrites.iter().map(|(n, b)| (n, *b)).unzip();
            // One instantiation's definition: its texts, manifests and build-time PTX.
            let def = |kname: &str, d: &Def| {
                let (graph, tiles, manifests) = (&d.graph, &d.tiles, &d.manifests);
                let scalars = d.scalar_rules.iter().map(|(n, r)| {
                    let r = format_ident!("{}", format!("{r:?}"));
                    quote!((#n, ::tessera::ir::scalar::ScalarRule::#r))
                });
                let ptx = d.ptx.iter().map(
                    |(launch, text)| quote!(::tessera::EmbeddedPtx { launch: #launch, text: #text }),
                );
                quote! {
                    ::tessera::KernelDef::new(#kname, #graph, &[#(#tiles),*])
                        .with_embedded(&[#(#manifests),*], &[#(#ptx),*])
                        #precision
                        #library
                        .with_rewrites(&[#((#rule_names, #on)),*])
                        .with_scalars(&[#(#scalars),*])
                        #tile
                }
            };
            if generics.is_empty() {
                let register = tune.as_ref().map(|t| search_space(&name_str, t));
                let d0 = def(&name_str, &defs[0]);
                module = Some(quote! {
                    #[doc = #doc]
                    pub static KERNEL: ::tessera::KernelDef = #d0;
                });
                quote! {
                    #register
                    #scalars
                    #name::KERNEL.launch_scalars_checked::<#out>(&[#(#names.arg()),*])
                }
            } else {
                // The instantiations live in the module, with `KERNEL` the family over them.
                let statics = defs.iter().enumerate().map(|(i, d)| {
                    let s = format_ident!("KERNEL_{}", i);
                    let kname = format!("{name_str}{}", d.inst.suffix);
                    let def = def(&kname, d);
                    let idoc = format!("Instantiation `{kname}` of kernel `{name_str}`.");
                    quote! {
                        #[doc = #idoc]
                        pub static #s: ::tessera::KernelDef = #def;
                    }
                });
                let instances = defs.iter().enumerate().map(|(i, d)| {
                    let s = format_ident!("KERNEL_{}", i);
                    let dts = params.iter().map(|(_, t)| {
                        let dt = t
                            .param
                            .as_ref()
                            .and_then(|p| d.inst.get(&p.to_string()))
                            .unwrap_or(t.ty.dtype);
                        let v = format_ident!("{}", format!("{dt:?}"));
                        quote!(::tessera::DType::#v)
                    });
                    quote!(::tessera::KernelInstance { params: &[#(#dts),*], def: &#s })
                });
                module = Some(quote! {
                    #(#statics)*
                    #[doc = #doc]
                    pub static KERNEL: ::tessera::KernelFamily =
                        ::tessera::KernelFamily::new(#name_str, &[#(#instances),*]);
                });
                let registers = defs.iter().map(|d| {
                    let kname = format!("{name_str}{}", d.inst.suffix);
                    tune.as_ref().map(|t| search_space(&kname, t))
                });
                let ps: Vec<_> = generics.iter().map(|(p, _)| p).collect();
                let arms = defs.iter().enumerate().map(|(i, d)| {
                    let s = format_ident!("KERNEL_{}", i);
                    let pats = d.inst.subst.iter().map(|(_, dt)| {
                        let v = format_ident!("{}", format!("{dt:?}"));
                        quote!(::tessera::DType::#v)
                    });
                    quote!([#(#pats),*] => &#name::#s,)
                });
                quote! {
                    #(#registers)*
                    #scalars
                    let def: &'static ::tessera::KernelDef = match [#(<#ps as ::tessera::Element>::DTYPE),*] {
                        #(#arms)*
                        other => {
                            return ::core::result::Result::Err(::tessera::Error::Compile {
                                kernel: #name_str.into(),
                                message: ::std::format!("no instantiation for element types {other:?}"),
                            })
                        }
                    };
                    def.launch_scalars_checked::<#out>(&[#(#names.arg()),*])
                }
            }
        }
        None => {
            if generics.is_empty() {
                module = Some(quote! {
                    #[doc = #doc]
                    pub static KERNEL: ::tessera::KernelDef = ::tessera::KernelDef::new(#name_str, "", &[]);
                });
            }
            quote! {
            let _ = (#(#names,)*);
            ::core::unreachable!("kernel `{}` failed to compile", #name_str)
            }
        }
    };
    let module = module.map(|items| {
        quote! {
            #[doc = #doc]
            #vis mod #name {
                #[allow(unused_imports)]
                use super::*;
                #items
            }
        }
    });
    // The shape contract, after the user's own docs.
    let contract = format!(
        " Shape contract: {}. A dim named in several places must have one size at launch; a \
         mismatch, a wrong element type or argument count is an `Err` naming it.",
        k.shape_contract()
    );
    let contract_doc = if attrs.iter().any(|a| a.path().is_ident("doc")) {
        quote!(#[doc = ""] #[doc = #contract])
    } else {
        quote!(#[doc = #contract])
    };
    quote! {
        #(#attrs)*
        #contract_doc
        #vis fn #name #gen_params (#(#names: #arg_tys),*) -> ::tessera::Result<::tessera::Tensor<#out>> {
            #body
        }
        #module
    }
}

/// Turns each scalar parameter into the rank-0 tensor the kernel reads
/// (`tessera::scalar_arg`: its rule checked, placed on the first tensor argument's device).
fn scalar_prelude(
    kernel: &str,
    params: &[(syn::Ident, KType)],
    rules: &[(String, tessera_ir::scalar::ScalarRule)],
) -> TokenStream {
    if rules.is_empty() {
        return quote!();
    }
    let device = match params.iter().find(|(_, t)| !t.scalar) {
        Some((n, _)) => quote!(#n.device().clone()),
        None => quote!(::tessera::Device::cpu()),
    };
    let scalars = params.iter().filter(|(_, t)| t.scalar).map(|(n, _)| n);
    let each = scalars.zip(rules).map(|(id, (n, rule))| {
        let r = format_ident!("{}", format!("{rule:?}"));
        quote! {
            let #id = &::tessera::scalar_arg(#kernel, #n, #id, ::tessera::ir::scalar::ScalarRule::#r, &__tessera_device)?;
        }
    });
    quote! {
        let __tessera_device: ::tessera::Device = #device;
        #(#each)*
    }
}

/// The manifests of the fused kernels, and the launch header and PTX of every fused kernel's
/// default schedule for every arch (kernel-major, in `Arch::ALL` order), emitted at compile time.
/// An arch the kernel cannot run on (fp8 before sm_89) gets empty texts: launching there
/// compiles at run time and reports why. The manifests name values as the embedded graph text
/// parses back, which is checked here.
fn embedded(
    c: &tessera_front::lower::kernel::Compiled,
) -> Result<(Vec<String>, Vec<(String, String)>), String> {
    use tessera_ir::manifest::KernelManifest;
    use tessera_ir::target::ptx::{Arch, emit, print_launch, supports};
    let reparsed = tessera_ir::graph::parse(&c.graph).map_err(|e| format!("graph text: {e}"))?;
    if reparsed.to_string() != c.graph {
        return Err("internal error: the graph text does not print back the same".into());
    }
    let mut manifests = Vec::new();
    let mut ptx = Vec::new();
    for (i, k) in c.compiled.kernels.iter().enumerate() {
        manifests.push(
            KernelManifest::of(&c.compiled, i)
                .display(&reparsed)
                .to_string(),
        );
        for arch in Arch::ALL {
            if supports(&k.lowered.kernel, arch).is_err() {
                ptx.push((String::new(), String::new()));
                continue;
            }
            let p = emit(&k.lowered.kernel, &k.schedule, arch)
                .map_err(|e| format!("PTX for {arch}: {e}"))?;
            ptx.push((print_launch(&p), p.text));
        }
    }
    Ok((manifests, ptx))
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_generated_fn_docs_state_the_shape_contract() {
        let out = super::expand(
            quote::quote!(dims(D = 64)),
            quote::quote!(
                /// Projects.
                fn proj(x: Tensor<bf16, (M, D)>, w: Tensor<bf16, (D, N)>) -> Tensor<f32, (M, N)> {
                    x.matmul(w)
                }
            ),
        )
        .to_string();
        assert!(out.contains("Projects."), "{out}");
        assert!(
            out.contains("Shape contract: `x: bf16[M, 64]`, `w: bf16[64, N]` → `f32[M, N]`."),
            "{out}"
        );
    }
}
