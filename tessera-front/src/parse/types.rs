//! Element types and the kernel's `Tensor<dtype, (dims)>` types.

use super::err;
use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitInt, Token, Type};
use tessera_ir::{DType, Dim, Shape, TensorType};

/// The element types a macro signature may name.
pub const DTYPES: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F8E4M3,
    DType::F8E5M2,
    DType::I32,
    DType::Bool,
];

const DTYPE_MSG: &str = "expected an element type: f32, f16, bf16, f8e4m3, f8e5m2, i32 or bool";

/// The bounds a generic kernel's type parameter may carry (`<T: Float>`) and the dtypes each
/// instantiates, in order: `Float` (f32, bf16, f16) and `Fp8` (f8e4m3, f8e5m2). The runtime's
/// traits of the same names (`tessera::Float`, `tessera::Fp8`) are implemented for exactly
/// these element types.
pub fn bound_dtypes(bound: &str) -> Option<&'static [DType]> {
    match bound {
        "Float" => Some(&[DType::F32, DType::BF16, DType::F16]),
        "Fp8" => Some(&[DType::F8E4M3, DType::F8E5M2]),
        _ => None,
    }
}

/// Parses a dtype name (`bf16`).
pub fn dtype_ident(i: &Ident) -> syn::Result<DType> {
    DType::parse(&i.to_string())
        .filter(|d| DTYPES.contains(d))
        .ok_or_else(|| err(i, DTYPE_MSG))
}

/// Parses a dtype written as a type (`bf16` in `zeros::<bf16>`).
pub fn dtype(ty: &Type) -> syn::Result<DType> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .map(dtype_ident)
            .unwrap_or_else(|| Err(err(ty, DTYPE_MSG))),
        _ => Err(err(ty, DTYPE_MSG)),
    }
}

/// A kernel tensor type `Tensor<bf16, (M, K)>`, or `Tensor<T, (M, K)>` with `T` a type
/// parameter of a generic kernel (`param`; `ty.dtype` is then a placeholder until the kernel
/// is instantiated), or a scalar parameter's type `f32` (`scalar`).
#[derive(Clone)]
pub struct KType {
    /// The tensor type (dtype and dims).
    pub ty: TensorType,
    /// The type parameter standing for the dtype, if any.
    pub param: Option<Ident>,
    /// A scalar parameter written as the bare element type `f32` (`eps: f32`): a rank-0 `f32`
    /// tensor in the graph, passed by value to the generated function (see
    /// `tessera_ir::scalar`).
    pub scalar: bool,
}

const TENSOR_MSG: &str = "expected a tensor type `Tensor<dtype, (dims)>` (e.g. `Tensor<bf16, (M, K)>`) or, for a scalar parameter, `f32`";

/// The element types a scalar parameter may have.
const SCALAR_MSG: &str = "a scalar kernel parameter is `f32` (e.g. `eps: f32`); other element types are passed as tensors: `Tensor<i32, ()>`";

impl Parse for KType {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let fork = input.fork();
        let whole = || match fork.parse::<Type>() {
            Ok(t) => err(t, TENSOR_MSG),
            Err(_) => syn::Error::new(fork.span(), TENSOR_MSG),
        };
        if !input.peek(Ident) {
            return Err(whole());
        }
        let head: Ident = input.parse()?;
        if head != "Tensor" && !input.peek(Token![<]) && !input.peek(Token![::]) {
            return match dtype_ident(&head) {
                Ok(DType::F32) => Ok(KType {
                    ty: TensorType::new(DType::F32, Shape::scalar()),
                    param: None,
                    scalar: true,
                }),
                Ok(_) => Err(err(&head, SCALAR_MSG)),
                Err(_) => Err(whole()),
            };
        }
        if head != "Tensor" || !input.peek(Token![<]) {
            return Err(whole());
        }
        input.parse::<Token![<]>()?;
        let dt: Ident = input.parse().map_err(|_| whole())?;
        // An identifier that is no dtype may be a type parameter; `KernelItem` checks it is
        // declared.
        let (dtype, param) = match dtype_ident(&dt) {
            Ok(d) => (d, None),
            Err(_) if dt.to_string().starts_with(|c: char| c.is_ascii_uppercase()) => {
                (DType::F32, Some(dt.clone()))
            }
            Err(e) => return Err(e),
        };
        input.parse::<Token![,]>().map_err(|_| whole())?;
        let content;
        syn::parenthesized!(content in input);
        let mut dims = Vec::new();
        while !content.is_empty() {
            if content.peek(LitInt) {
                let l: LitInt = content.parse()?;
                dims.push(Dim::Const(l.base10_parse()?));
            } else {
                let i: Ident = content
                    .parse()
                    .map_err(|e| syn::Error::new(e.span(), DIM_MSG))?;
                if i == "Const" && content.peek(Token![<]) {
                    dims.push(Dim::Const(const_dim(&content)?));
                } else {
                    dims.push(Dim::Sym(i.to_string()));
                }
            }
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        input.parse::<Token![>]>()?;
        Ok(KType {
            ty: TensorType::new(dtype, Shape(dims)),
            param,
            scalar: false,
        })
    }
}

const DIM_MSG: &str = "a dim is a symbol (`M`) or a constant `Const<64>`";

/// The `<64>` of a constant dim `Const<64>` (Rust's parser takes no integer literal in a type
/// tuple, so `Tensor<f32, (M, 64)>` cannot be written; `Const<64>` is a type path it accepts,
/// never resolved since the macro replaces the item).
fn const_dim(input: ParseStream) -> syn::Result<u64> {
    input.parse::<Token![<]>()?;
    let l: LitInt = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "a constant dim is an integer literal: `Const<64>`",
        )
    })?;
    let n: u64 = l.base10_parse().map_err(|_| {
        err(
            &l,
            "a constant dim is a non-negative integer literal: `Const<64>`",
        )
    })?;
    if !l.suffix().is_empty() {
        return Err(err(
            &l,
            "a constant dim is written without a suffix: `Const<64>`",
        ));
    }
    input
        .parse::<Token![>]>()
        .map_err(|e| syn::Error::new(e.span(), "expected `>` closing `Const<..>`"))?;
    Ok(n)
}

/// The Rust element type tokens of a dtype (`::tessera::bf16`).
pub fn rust_elem(d: DType) -> TokenStream {
    match d {
        DType::F32 => quote!(f32),
        DType::F16 => quote!(::tessera::f16),
        DType::BF16 => quote!(::tessera::bf16),
        DType::F8E4M3 => quote!(::tessera::f8e4m3),
        DType::F8E5M2 => quote!(::tessera::f8e5m2),
        DType::I32 => quote!(i32),
        DType::Bool => quote!(bool),
    }
}

#[cfg(test)]
mod tests {
    use super::KType;

    fn parse(t: proc_macro2::TokenStream) -> syn::Result<KType> {
        syn::parse2(t)
    }

    #[test]
    fn constant_dims_and_scalars() {
        let t = parse(quote::quote!(Tensor<f32, (M, Const<64>)>)).unwrap();
        assert_eq!(t.ty.to_string(), "f32[M, 64]");
        let s = parse(quote::quote!(f32)).unwrap();
        assert!(s.scalar && s.ty.shape.rank() == 0);
        for bad in [
            quote::quote!(Tensor<f32, (M, Const<N>)>),
            quote::quote!(Tensor<f32, (M, Const<64u8>)>),
            quote::quote!(Tensor<f32, (M, Const<64, 2>)>),
            quote::quote!(i32),
            quote::quote!(String),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
    }
}
