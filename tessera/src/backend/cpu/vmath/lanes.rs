//! The fused executor's unary ops on a block of `L` lanes, for loops that apply them inside
//! their own vector loop (`fused::chain`): the same element kernels the slice functions of
//! this module run, so with the arithmetic flavour those use at the active SIMD level
//! ([`super::arith::Fused`] at AVX2 and AVX-512, [`super::arith::Plain`] otherwise) each lane
//! gets exactly the slice function's result.

use super::arith::Arith;
use tessera_ir::graph::UnaryOp;

/// `v[k] = op(v[k])` for every lane (`fused::chunk::unary`'s definitions).
#[inline(always)]
pub(crate) fn unary<A: Arith, const L: usize>(op: UnaryOp, v: &mut [f32; L]) {
    macro_rules! each {
        ($f:expr) => {{
            for x in v.iter_mut() {
                *x = $f(*x);
            }
        }};
    }
    match op {
        UnaryOp::Neg => each!(neg),
        UnaryOp::Abs => each!(f32::abs),
        UnaryOp::Relu => each!(relu),
        UnaryOp::Exp => super::exp_simd::block::<A, L>(v),
        UnaryOp::Log => each!(super::log::log1::<A>),
        UnaryOp::Sqrt => each!(super::sqrt::sqrt1::<A>),
        UnaryOp::Rsqrt => each!(super::sqrt::rsqrt1::<A>),
        UnaryOp::Tanh => each!(super::tanh::tanh1::<A>),
        UnaryOp::Sigmoid => each!(super::sigmoid::sigmoid1::<A>),
        UnaryOp::Gelu => super::gelu_simd::block::<A, L>(v),
    }
}

#[inline(always)]
fn neg(x: f32) -> f32 {
    -x
}

#[inline(always)]
fn relu(x: f32) -> f32 {
    if x.is_nan() { x } else { x.max(0.0) }
}
