//! # tessera-front — the Rust-syntax front end
//!
//! [`parse`] turns syn trees into front-end ASTs (syntax only); [`lower`] hands them to
//! `tessera-ir`, which owns every typing rule. The proc macros (`tessera-macros`) and build
//! scripts that precompile kernels (`tessera-kernels/build.rs`) share this crate, so a kernel
//! compiles the same way in both.

#![deny(missing_docs)]

pub mod lower;
pub mod parse;

use proc_macro2::TokenStream;
use tessera_ir::pipeline::Compiled;
use tessera_ir::{NumericsPolicy, Precision};

/// The options of a `#[kernel(...)]` attribute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelAttr {
    /// `numerics = "fast" | "deterministic" | "kahan_sum"`.
    pub policy: NumericsPolicy,
    /// `precision = "safe" | "standard" | "aggressive" | "deterministic"` (seeds table A.3).
    pub precision: Option<Precision>,
    /// `autotune(tiles = [..], vectorize = [..], stages = [..], warps = [..],
    /// fusion_depth = [..], max_trials = N, strategy = "hybrid" | "grid" | "random",
    /// cost_model = "roofline" | "none")`.
    pub autotune: Option<AutotuneAttr>,
    /// `precompiled = path::TO::TABLE`: a `&'static [tessera::PrecompiledPtx]` of build-time
    /// PTX for the schedules of the kernel's search space (a library's `build.rs` output).
    pub precompiled: Option<syn::Path>,
    /// `rewrites(flash_attention = false, spectral_conv = true)`: rules switched off (`false`)
    /// or applied wherever legal, whatever the cost guard says (`true`).
    pub rewrites: Vec<(String, bool)>,
    /// `dims(D = 64, Dv = 32)`: symbols of the signature fixed to constants (Rust's parser
    /// takes no integer in a type tuple, so constant extents such as an attention head dim
    /// are written as symbols and bound here).
    pub dims: Vec<(syn::Ident, u64)>,
    /// `tile = (128, 128, 64)`: the `(BM, BN, BK)` tile every matmul and convolution kernel
    /// runs under instead of its default or the autotuner's pick (seeds §7.2); see
    /// `tessera_ir::pipeline::CompileOptions::tile`.
    pub tile: Option<PinnedTile>,
}

/// A `tile = (BM, BN, BK)` option as written (for error spans) and its dims.
#[derive(Clone, Debug, PartialEq)]
pub struct PinnedTile {
    /// The tile dims, `[BM, BN, BK]`.
    pub dims: Vec<u32>,
    /// The tuple as written.
    pub written: syn::Expr,
}

impl KernelAttr {
    /// Replaces every symbol the `dims(..)` option binds by its constant in the kernel's
    /// signature. A bound name that no tensor type uses is an error naming it.
    ///
    /// ```
    /// let a = tessera_front::kernel_attr(quote::quote!(dims(D = 64))).unwrap();
    /// let mut k: tessera_front::parse::kernel::KernelItem = syn::parse2(quote::quote!(
    ///     fn f(x: Tensor<f32, (S, D)>) -> Tensor<f32, (S, D)> { x }
    /// )).unwrap();
    /// a.bind_dims(&mut k).unwrap();
    /// assert_eq!(k.ret.ty.to_string(), "f32[S, 64]");
    /// ```
    pub fn bind_dims(&self, k: &mut parse::kernel::KernelItem) -> syn::Result<()> {
        for (name, n) in &self.dims {
            let mut used = false;
            let types = k.params.iter_mut().map(|(_, t)| t).chain([&mut k.ret]);
            for t in types {
                for d in t.ty.shape.0.iter_mut() {
                    if *d == tessera_ir::Dim::Sym(name.to_string()) {
                        *d = tessera_ir::Dim::Const(*n);
                        used = true;
                    }
                }
            }
            if !used {
                return Err(syn::Error::new(
                    name.span(),
                    format!("`dims` binds `{name}`, which no tensor type of the kernel uses"),
                ));
            }
        }
        Ok(())
    }

    /// The compile options the attribute asks for (the rewrites it switches; its numerics
    /// policy and precision mode are applied to the graph as it is built).
    pub fn compile_options(&self) -> tessera_ir::pipeline::CompileOptions {
        let mut rewrites = tessera_ir::rewrite::RewriteOptions::default();
        for (name, on) in &self.rewrites {
            if *on {
                rewrites.forced.push(name.clone());
            } else {
                rewrites.disabled.push(name.clone());
            }
        }
        tessera_ir::pipeline::CompileOptions {
            rewrites,
            tile: self.tile.as_ref().map(|t| t.dims.clone()),
            ..Default::default()
        }
    }
}

fn parse_rewrites(meta: syn::meta::ParseNestedMeta) -> syn::Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    meta.parse_nested_meta(|m| {
        let Some(id) = m.path.get_ident() else {
            return Err(m.error("expected a rewrite rule name"));
        };
        let name = id.to_string();
        if tessera_ir::rewrite::rule(&name).is_none() {
            return Err(syn::Error::new(
                id.span(),
                format!(
                    "unknown rewrite rule `{name}`; the rules are {}",
                    tessera_ir::rewrite::rule_names().join(", ")
                ),
            ));
        }
        let v: syn::LitBool = m.value()?.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("`{name}` takes `true` (always apply) or `false` (never apply)"),
            )
        })?;
        out.push((name, v.value));
        Ok(())
    })?;
    Ok(out)
}

/// The search space named by `autotune(...)`; empty lists mean "the built-in choices".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutotuneAttr {
    /// `tiles = [(BM, BN, BK), ..]`: the tiles to try.
    pub tiles: Vec<Vec<u32>>,
    /// `vectorize = [..]`: vector widths to try, in elements.
    pub vectorize: Vec<u32>,
    /// `stages = [..]`: pipeline stage counts to try.
    pub stages: Vec<u32>,
    /// `warps = [..]`: warps per block to try.
    pub warps: Vec<u32>,
    /// `fusion_depth = [..]`: fusion depths to try (elementwise ops per kernel epilogue).
    pub fusion_depths: Vec<u32>,
    /// `max_trials = N`: the trial budget.
    pub max_trials: Option<usize>,
    /// `strategy = "hybrid" | "grid" | "random"`.
    pub strategy: Option<String>,
    /// `"roofline"` or `"none"`.
    pub cost_model: Option<String>,
}

fn int_list(e: &syn::Expr, what: &str, check: impl Fn(u64) -> bool) -> syn::Result<Vec<u32>> {
    let syn::Expr::Array(a) = e else {
        return Err(syn::Error::new_spanned(
            e,
            format!("{what} takes a list: `[1, 2, 4]`"),
        ));
    };
    a.elems.iter().map(|x| lit_u32(x, what, &check)).collect()
}

fn lit_u32(x: &syn::Expr, what: &str, check: &impl Fn(u64) -> bool) -> syn::Result<u32> {
    match x {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => {
            let v: u64 = i.base10_parse()?;
            if check(v) && v <= u32::MAX as u64 {
                Ok(v as u32)
            } else {
                Err(syn::Error::new_spanned(
                    x,
                    format!("{v} is not a valid value for {what}"),
                ))
            }
        }
        _ => Err(syn::Error::new_spanned(
            x,
            format!("{what} takes integer literals"),
        )),
    }
}

fn parse_autotune(meta: syn::meta::ParseNestedMeta) -> syn::Result<AutotuneAttr> {
    let mut a = AutotuneAttr::default();
    let pow2 = |v: u64| v.is_power_of_two() && v <= 1024;
    meta.parse_nested_meta(|m| {
        let key = m.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
        match key.as_str() {
            "tiles" => {
                let e: syn::Expr = m.value()?.parse()?;
                let syn::Expr::Array(arr) = &e else {
                    return Err(syn::Error::new_spanned(&e, "tiles takes a list of tuples: `[(64, 64, 32), (128, 128, 64)]`"));
                };
                for t in &arr.elems {
                    let syn::Expr::Tuple(tu) = t else {
                        return Err(syn::Error::new_spanned(t, "a tile is a tuple `(BM, BN, BK)` or `(rows, cols)`"));
                    };
                    let dims = tu.elems.iter().map(|x| lit_u32(x, "a tile dim (a power of two ≤ 1024)", &pow2)).collect::<syn::Result<Vec<_>>>()?;
                    if !(2..=3).contains(&dims.len()) {
                        return Err(syn::Error::new_spanned(t, "a tile has 2 or 3 dims"));
                    }
                    a.tiles.push(dims);
                }
            }
            "vectorize" => a.vectorize = int_list(&m.value()?.parse()?, "vectorize (powers of two ≤ 16)", |v| v.is_power_of_two() && v <= 16)?,
            "stages" => a.stages = int_list(&m.value()?.parse()?, "stages (1 to 8)", |v| (1..=8).contains(&v))?,
            "warps" => a.warps = int_list(&m.value()?.parse()?, "warps (powers of two ≤ 32)", |v| v.is_power_of_two() && v <= 32)?,
            "fusion_depth" => a.fusion_depths = int_list(&m.value()?.parse()?, "fusion_depth (0 to 64)", |v| v <= 64)?,
            "max_trials" => a.max_trials = Some(lit_u32(&m.value()?.parse()?, "max_trials (≥ 1)", &|v| v >= 1)? as usize),
            "strategy" => {
                let s: syn::LitStr = m.value()?.parse()?;
                if !["hybrid", "grid", "random"].contains(&s.value().as_str()) {
                    return Err(syn::Error::new(s.span(), "strategy is one of \"hybrid\", \"grid\", \"random\""));
                }
                a.strategy = Some(s.value());
            }
            "cost_model" => {
                let s: syn::LitStr = m.value()?.parse()?;
                if !["roofline", "none"].contains(&s.value().as_str()) {
                    return Err(syn::Error::new(s.span(), "cost_model is \"roofline\" or \"none\""));
                }
                a.cost_model = Some(s.value());
            }
            _ => return Err(m.error("unknown autotune option; expected tiles, vectorize, stages, warps, fusion_depth, max_trials, strategy or cost_model")),
        }
        Ok(())
    })?;
    Ok(a)
}

/// Parses `tile = (BM, BN, BK)`: integer literals, checked as a pinned tile
/// ([`tessera_ir::pipeline::CompileOptions::check_tile`]); errors point at the tuple.
fn parse_tile(e: syn::Expr) -> syn::Result<PinnedTile> {
    let syn::Expr::Tuple(t) = &e else {
        return Err(syn::Error::new_spanned(
            &e,
            "tile takes a tuple `(BM, BN, BK)`, e.g. `tile = (128, 128, 64)`",
        ));
    };
    let dims = t
        .elems
        .iter()
        .map(|x| lit_u32(x, "a tile dim", &|_| true))
        .collect::<syn::Result<Vec<_>>>()?;
    let opts = tessera_ir::pipeline::CompileOptions {
        tile: Some(dims.clone()),
        ..Default::default()
    };
    opts.check_tile()
        .map_err(|m| syn::Error::new_spanned(&e, m))?;
    Ok(PinnedTile { dims, written: e })
}

/// Parses a `#[kernel(...)]` attribute: `numerics = "kahan_sum"`, `precision = "standard"`,
/// `autotune(...)`, `precompiled = path`, `rewrites(flash_attention = false)`, `dims(D = 64)`,
/// `tile = (128, 128, 64)`.
pub fn kernel_attr(attr: TokenStream) -> syn::Result<KernelAttr> {
    let mut out = KernelAttr::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("numerics") {
            let s: syn::LitStr = meta.value()?.parse()?;
            out.policy = NumericsPolicy::parse(&s.value()).ok_or_else(|| {
                syn::Error::new(
                    s.span(),
                    "numerics is one of \"fast\", \"deterministic\", \"kahan_sum\"",
                )
            })?;
            Ok(())
        } else if meta.path.is_ident("precision") {
            let s: syn::LitStr = meta.value()?.parse()?;
            out.precision = Some(Precision::parse(&s.value()).ok_or_else(|| {
                syn::Error::new(
                    s.span(),
                    "precision is one of \"safe\", \"standard\", \"aggressive\", \"deterministic\"",
                )
            })?);
            Ok(())
        } else if meta.path.is_ident("autotune") {
            out.autotune = Some(parse_autotune(meta)?);
            Ok(())
        } else if meta.path.is_ident("precompiled") {
            out.precompiled = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("rewrites") {
            out.rewrites = parse_rewrites(meta)?;
            Ok(())
        } else if meta.path.is_ident("tile") {
            out.tile = Some(parse_tile(meta.value()?.parse()?)?);
            Ok(())
        } else if meta.path.is_ident("dims") {
            meta.parse_nested_meta(|m| {
                let Some(id) = m.path.get_ident() else {
                    return Err(m.error("expected a dim symbol: `dims(D = 64)`"));
                };
                let v: syn::LitInt = m.value()?.parse()?;
                out.dims.push((id.clone(), v.base10_parse()?));
                Ok(())
            })
        } else {
            Err(meta.error(
                "unknown kernel option; expected `numerics = \"...\"`, `precision = \"...\"`, `autotune(...)`, `precompiled = path`, `rewrites(...)`, `dims(...)` or `tile = (BM, BN, BK)`",
            ))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(out)
}

/// The numerics policy of a `#[kernel(...)]` attribute.
pub fn kernel_options(attr: TokenStream) -> syn::Result<NumericsPolicy> {
    kernel_attr(attr).map(|a| a.policy)
}

/// Compiles a `#[kernel]` fn (attribute tokens and item tokens): every instantiation its type
/// parameters allow (one for a kernel without any), each with its graph and kernels.
#[allow(clippy::type_complexity)]
pub fn compile_kernel(
    attr: TokenStream,
    item: TokenStream,
) -> syn::Result<(
    parse::kernel::KernelItem,
    Vec<(parse::kernel::Instance, Compiled)>,
)> {
    let mut k: parse::kernel::KernelItem = syn::parse2(item)?;
    let a = kernel_attr(attr)?;
    a.bind_dims(&mut k)?;
    let b = parse::kernel::body(&k.block)?;
    let mut out = Vec::new();
    for inst in k.instances() {
        let c = lower::kernel::compile(&k.instantiate(&inst), &b, &a, &inst)?;
        out.push((inst, c.compiled));
    }
    Ok((k, out))
}
