//! Square root and reciprocal square root (IEEE `sqrt`, which lowers to
//! `sqrtps`; `rsqrt` is `1 / sqrt(x)`, i.e. at most two roundings, not the
//! 12-bit hardware estimate).

use super::arith::Arith;

/// Element kernel for [`super::sqrt`] (correctly rounded).
#[inline(always)]
pub(crate) fn sqrt1<A: Arith>(x: f32) -> f32 {
    x.sqrt()
}

/// Element kernel for [`super::rsqrt`] (< 1.5 ulp).
#[inline(always)]
pub(crate) fn rsqrt1<A: Arith>(x: f32) -> f32 {
    1.0 / x.sqrt()
}
