//! `#[kernel]` expansion: a wrapper fn holding a `static KernelDef` with the embedded IR texts.

use tessera_front::lower::kernel::compile;
use tessera_front::parse::kernel::{KernelItem, body};
use tessera_front::parse::types::rust_elem;
use proc_macro2::TokenStream;
use quote::quote;

/// Expands `#[kernel(attr)] item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let k: KernelItem = match syn::parse2(item) {
        Ok(k) => k,
        Err(e) => return e.to_compile_error(),
    };
    match tessera_front::kernel_options(attr).and_then(|policy| {
        let b = body(&k.block)?;
        compile(&k, &b, policy)
    }) {
        Ok(c) => wrapper(&k, Some((&c.graph, &c.tiles))),
        Err(e) => {
            let stand_in = wrapper(&k, None);
            let errors = e.to_compile_error();
            quote!(#errors #stand_in)
        }
    }
}

/// The user-facing fn. Without compiled texts it is a stand-in that keeps callers type-checking
/// after an error has been reported.
fn wrapper(k: &KernelItem, compiled: Option<(&String, &Vec<String>)>) -> TokenStream {
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
        Some((graph, tiles)) => quote! {
            static KERNEL: ::tessera::KernelDef = ::tessera::KernelDef::new(#name_str, #graph, &[#(#tiles),*]);
            KERNEL.launch::<#out>(&[#(#names.arg()),*])
        },
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
