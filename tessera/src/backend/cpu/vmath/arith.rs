//! Arithmetic flavours the generic kernels are instantiated with.
//!
//! Every kernel body is written once, generic over [`Arith`]. The
//! [`Fused`] flavour uses `f32::mul_add`, which lowers to a single FMA
//! instruction inside a `#[target_feature(enable = "avx2,fma")]` function.
//! The [`Plain`] flavour uses a separate multiply and add, so the baseline
//! build never calls the (slow, non-vectorisable) software `fmaf`.

/// Multiply-add primitives used by the kernels.
pub(crate) trait Arith {
    /// True for [`Fused`] (the flavour of the AVX2 and AVX-512 levels).
    const FUSED: bool;
    /// `a * b + c` (fused in [`Fused`], two roundings in [`Plain`]).
    fn fma(a: f32, b: f32, c: f32) -> f32;
    /// Exact product: returns `(p, e)` with `p = fl(a*b)` and `a*b = p + e`
    /// exactly (barring underflow / overflow).
    fn two_prod(a: f32, b: f32) -> (f32, f32);
}

/// Separate multiply and add; used for the portable fallback.
pub(crate) struct Plain;
/// Fused multiply-add; only instantiated where FMA is enabled.
#[cfg_attr(
    not(any(target_arch = "x86", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) struct Fused;

impl Arith for Plain {
    const FUSED: bool = false;
    #[inline(always)]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
    #[inline(always)]
    fn two_prod(a: f32, b: f32) -> (f32, f32) {
        // Dekker's product with a bit-mask split (12 + 12 significant bits),
        // so every partial product is exact.
        #[inline(always)]
        fn split(v: f32) -> (f32, f32) {
            let hi = f32::from_bits(v.to_bits() & 0xFFFF_F000);
            (hi, v - hi)
        }
        let p = a * b;
        let (ah, al) = split(a);
        let (bh, bl) = split(b);
        let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
        (p, e)
    }
}

impl Arith for Fused {
    const FUSED: bool = true;
    #[inline(always)]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn two_prod(a: f32, b: f32) -> (f32, f32) {
        let p = a * b;
        (p, a.mul_add(b, -p))
    }
}
