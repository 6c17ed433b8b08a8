//! Logistic sigmoid `1 / (1 + e^-x)`, evaluated as `q = 1 / (1 + e)` with
//! `e = exp(-|x|)`: `q` for `x >= 0`, `e * q` for `x < 0`. This never
//! overflows (sigmoid(-large) = 0, not NaN) and keeps relative accuracy in the
//! far negative tail down into the subnormals.

use super::arith::Arith;
use super::exp::exp_core;

/// Element kernel for [`super::sigmoid`].
#[inline(always)]
pub(crate) fn sigmoid1<A: Arith>(x: f32) -> f32 {
    let nax = f32::from_bits(x.to_bits() | 0x8000_0000); // -|x|
    let e = exp_core::<A>(nax, -0.0);
    let q = 1.0 / (1.0 + e);
    if x >= 0.0 { q } else { e * q }
}
