//! VJPs of the linear layout and spectral ops: `fft` / `ifft`, `complex`, `real`, `pad` and
//! `causal_mask`.
//!
//! As real-linear maps on interleaved `(re, im)` pairs, the transforms' adjoints are their
//! conjugate transposes: `fft` is `F` with `F[k, n] = e^{−2πi·nk/L}`, whose adjoint `Fᴴ` is
//! `L · ifft`; `ifft = Fᴴ / L` has adjoint `F / L = fft / L`.

use super::Diff;
use super::rules::cast;
use crate::graph::{BinaryOp as B, Op, UnaryOp as U, Value};
use crate::{DType, Dim};

/// `fft` (`inverse` false) or `ifft` along `axis` of `x`, cotangent `g`.
pub(super) fn fft(
    d: &mut Diff,
    x: Value,
    axis: usize,
    inverse: bool,
    g: Value,
) -> Result<Value, String> {
    let Dim::Const(l) = d.ty(x).shape.0[axis] else {
        return Err("the transform length must be constant".into());
    };
    let t = d.push(
        Op::Fft {
            axis,
            inverse: !inverse,
        },
        &[g],
    )?;
    let s = if inverse { 1.0 / l as f64 } else { l as f64 };
    let c = d.konst(s, DType::F32);
    d.bin(B::Mul, t, c)
}

/// `complex`: the real part of the cotangent, in the operand's dtype.
pub(super) fn complex(d: &mut Diff, x: Value, g: Value) -> Result<Value, String> {
    let r = d.push(Op::Real, &[g])?;
    let dt = d.ty(x).dtype;
    cast(d, r, dt)
}

/// `real`: the cotangent as a complex tensor with imaginary part 0.
pub(super) fn real(d: &mut Diff, g: Value) -> Result<Value, String> {
    let g = cast(d, g, DType::F32)?;
    d.push(Op::Complex, &[g])
}

/// `pad lo hi`: the cotangent cropped back (`pad −lo −hi`). Interior padding's adjoint would
/// subsample the cotangent, which Graph IR has no op for: an error naming it.
pub(super) fn pad(
    d: &mut Diff,
    lo: &[i64],
    hi: &[i64],
    interior: &[u64],
    g: Value,
) -> Result<Value, String> {
    if interior.iter().any(|&i| i != 0) {
        return Err(format!(
            "no gradient for pad with interior={interior:?} (its adjoint subsamples, which Graph IR has no op for)"
        ));
    }
    let neg = |v: &[i64]| v.iter().map(|a| -a).collect();
    d.push(Op::pad(neg(lo), neg(hi)), &[g])
}

/// `causal_mask` (forward node `v`): the cotangent where the mask keeps the entry, 0 where it
/// writes `−∞`. When only softmaxes read the masked scores (attention), the cotangent `g` is
/// already 0 there — the softmax VJP `p ⊙ (..)` has `p = exp(−∞) = 0` — and passes through
/// unchanged (so the backward graph holds only the forward's mask, which fuses into the
/// score matmul); otherwise `g · exp(causal_mask(0))`.
pub(super) fn causal_mask(d: &mut Diff, v: Value, g: Value) -> Result<Value, String> {
    let fwd = d.fwd;
    let softmax_only = fwd.output != v
        && fwd
            .nodes
            .iter()
            .filter(|n| n.args.contains(&v))
            .all(|n| matches!(n.op, Op::Softmax { .. }));
    if softmax_only {
        return Ok(g);
    }
    let t = d.ty(g);
    let z = d.konst(0.0, t.dtype);
    let zeros = d.b.push_typed(Op::Broadcast, &[z], t);
    let m = d.push(Op::CausalMask, &[zeros])?;
    let keep = d.push(Op::Unary(U::Exp), &[m])?;
    d.bin(B::Mul, g, keep)
}
