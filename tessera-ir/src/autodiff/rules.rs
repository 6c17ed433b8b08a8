//! One VJP rule per op: the cotangents of a node's operands from the cotangent of its result,
//! written in Graph IR ops.

use super::Diff;
use crate::graph::{BinaryOp as B, Op, ReduceOp, UnaryOp as U, Value};
use crate::{DType, Dim, NumericsPolicy, Shape, TensorType};

type Grads = Vec<Option<Value>>;

/// The cotangents of forward node `v`'s operands (`None` where `wanted` is false) given the
/// cotangent `g` of its result.
pub(super) fn vjp(d: &mut Diff, v: Value, g: Value, wanted: &[bool]) -> Result<Grads, String> {
    let n = d.fwd.node(v).clone();
    let x: Vec<Value> = n.args.iter().map(|a| d.f(*a)).collect();
    let y = d.f(v);
    let one = |r: Value| vec![Some(r)];
    Ok(match &n.op {
        Op::Unary(u) => {
            let r = unary(d, *u, x[0], y, g)?;
            one(r)
        }
        Op::Binary(op) => binary(d, *op, x[0], x[1], y, g, wanted)?,
        Op::Cast(_) => {
            let to = d.ty(x[0]).dtype;
            let r = cast(d, g, to)?;
            one(r)
        }
        Op::Broadcast => {
            let t = d.ty(x[0]);
            let r = unbroadcast(d, g, &t)?;
            one(r)
        }
        Op::Reduce {
            op,
            axes,
            keepdim,
            policy,
        } => {
            let r = reduce(d, *op, axes, *keepdim, *policy, (x[0], y), g)?;
            one(r)
        }
        Op::Matmul { policy, .. } => matmul(d, x[0], x[1], *policy, g, wanted)?,
        Op::Transpose => {
            let r = d.push(Op::Transpose, &[g])?;
            one(r)
        }
        Op::Softmax { axis, policy } => {
            let r = softmax_vjp(d, y, g, *axis, *policy)?;
            one(r)
        }
        Op::Permute(perm) => {
            // The inverse permutation carries the cotangent back.
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            let r = d.push(Op::Permute(inv), &[g])?;
            one(r)
        }
        Op::LayerNorm { eps, policy } => norm(d, x[0], x[1], Some(x[2]), *eps, *policy, g)?,
        Op::RmsNorm { eps, policy } => norm(d, x[0], x[1], None, *eps, *policy, g)?,
        Op::Attention {
            scale,
            causal,
            policy,
        } => attention(d, &x, *scale, *causal, *policy, g, wanted)?,
        Op::Conv2d(c) => super::conv::conv2d(d, x[0], x[1], *c, g, wanted)?,
        Op::Fft { axis, inverse } => {
            let r = super::linear::fft(d, x[0], *axis, *inverse, g)?;
            one(r)
        }
        Op::Complex => {
            let r = super::linear::complex(d, x[0], g)?;
            one(r)
        }
        Op::Real => {
            let r = super::linear::real(d, g)?;
            one(r)
        }
        Op::Pad { lo, hi, interior } => {
            let r = super::linear::pad(d, lo, hi, interior, g)?;
            one(r)
        }
        Op::CausalMask => {
            let r = super::linear::causal_mask(d, v, g)?;
            one(r)
        }
        op => {
            return Err(format!(
                "no gradient rule for `{}` yet (the rules cover neg, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu, abs, add, sub, mul, div, max, min, cast, broadcast, reduce.sum, reduce.mean, reduce.max, matmul, transpose, permute, softmax, layernorm, rmsnorm, attention, causal_mask, conv2d, fft, ifft, complex, real, pad)",
                op.name()
            ));
        }
    })
}

fn unary(d: &mut Diff, u: U, x: Value, y: Value, g: Value) -> Result<Value, String> {
    let dt = d.ty(x).dtype;
    Ok(match u {
        U::Neg => d.push(Op::Unary(U::Neg), &[g])?,
        // d exp = exp
        U::Exp => d.bin(B::Mul, g, y)?,
        // d log = 1/x
        U::Log => d.bin(B::Div, g, x)?,
        // d sqrt = 1/(2·sqrt x)
        U::Sqrt => {
            let two = d.konst(2.0, dt);
            let t = d.bin(B::Mul, y, two)?;
            d.bin(B::Div, g, t)?
        }
        // d rsqrt = −½·rsqrt(x)³
        U::Rsqrt => {
            let h = d.konst(-0.5, dt);
            let y2 = d.bin(B::Mul, y, y)?;
            let y3 = d.bin(B::Mul, y2, y)?;
            let t = d.bin(B::Mul, y3, h)?;
            d.bin(B::Mul, g, t)?
        }
        // d tanh = 1 − tanh²
        U::Tanh => {
            let one = d.konst(1.0, dt);
            let y2 = d.bin(B::Mul, y, y)?;
            let t = d.bin(B::Sub, one, y2)?;
            d.bin(B::Mul, g, t)?
        }
        // d sigmoid = s·(1 − s)
        U::Sigmoid => {
            let one = d.konst(1.0, dt);
            let c = d.bin(B::Sub, one, y)?;
            let t = d.bin(B::Mul, y, c)?;
            d.bin(B::Mul, g, t)?
        }
        // d relu = step(x) (0 at x = 0)
        U::Relu => {
            let s = step(d, x)?;
            d.bin(B::Mul, g, s)?
        }
        // d |x| = sign(x) = step(x) − step(−x) (0 at x = 0)
        U::Abs => {
            let s = sign(d, x)?;
            d.bin(B::Mul, g, s)?
        }
        // d gelu = Φ(x) + x·φ(x), with Φ(x) = gelu(x) / x (½ at x = 0) and
        // φ(x) = e^(−x²/2) / √(2π).
        U::Gelu => {
            let s = sign(d, x)?;
            let a = d.push(Op::Unary(U::Abs), &[s])?;
            let one = d.konst(1.0, dt);
            let z = d.bin(B::Sub, one, a)?;
            let half = d.konst(0.5, dt);
            let zh = d.bin(B::Mul, z, half)?;
            let num = d.bin(B::Add, y, zh)?;
            let den = d.bin(B::Add, x, z)?;
            let cdf = d.bin(B::Div, num, den)?;
            let x2 = d.bin(B::Mul, x, x)?;
            let mh = d.konst(-0.5, dt);
            let e = d.bin(B::Mul, x2, mh)?;
            let e = d.push(Op::Unary(U::Exp), &[e])?;
            let c = d.konst(1.0 / (2.0 * std::f64::consts::PI).sqrt(), dt);
            let pdf = d.bin(B::Mul, e, c)?;
            let xp = d.bin(B::Mul, x, pdf)?;
            let t = d.bin(B::Add, cdf, xp)?;
            d.bin(B::Mul, g, t)?
        }
    })
}

/// `1` where `x > 0`, `0` where `x ≤ 0` (NaN stays NaN), from ops Graph IR has:
/// `min(max(x·2¹²⁷·2¹²⁷, 0), 1)`. The two products carry every nonzero f32 or bf16 value
/// (the smallest subnormal is 2⁻¹⁴⁹) to at least 1 in magnitude (or ±∞), so the clamp is
/// exact; 16-bit floats without f32's range (f16, fp8) are widened to f32 first and the 0/1
/// result cast back (exact). In f64 (the reference interpreter) |x| < 2⁻²⁵⁴ counts as 0.
fn step(d: &mut Diff, x: Value) -> Result<Value, String> {
    let dt = d.ty(x).dtype;
    let wide = matches!(dt, DType::F32 | DType::BF16);
    let xw = if wide { x } else { cast(d, x, DType::F32)? };
    let wt = d.ty(xw).dtype;
    let big = d.konst(2f64.powi(127), wt);
    let t = d.bin(B::Mul, xw, big)?;
    let t = d.bin(B::Mul, t, big)?;
    let zero = d.konst(0.0, wt);
    let t = d.bin(B::Max, t, zero)?;
    let one = d.konst(1.0, wt);
    let t = d.bin(B::Min, t, one)?;
    cast(d, t, dt)
}

/// `step(x) − step(−x)`: −1, 0 or 1.
fn sign(d: &mut Diff, x: Value) -> Result<Value, String> {
    let p = step(d, x)?;
    let nx = d.push(Op::Unary(U::Neg), &[x])?;
    let n = step(d, nx)?;
    d.bin(B::Sub, p, n)
}

/// The share of `max(a, b)`'s cotangent that goes to `a`: 1 where `a > b`, ½ on a tie, 0
/// where `a < b` (`min`: the same with `a < b`), as `step(a − b) + (1 − step(a − b) −
/// step(b − a)) / 2`.
fn pick(d: &mut Diff, a: Value, b: Value, op: B) -> Result<(Value, Value), String> {
    let (hi, lo) = if op == B::Max { (a, b) } else { (b, a) };
    let dab = d.bin(B::Sub, hi, lo)?;
    let dba = d.bin(B::Sub, lo, hi)?;
    let s = step(d, dab)?;
    let t = step(d, dba)?;
    let dt = d.ty(s).dtype;
    let one = d.konst(1.0, dt);
    let half = d.konst(0.5, dt);
    let e = d.bin(B::Sub, one, s)?;
    let e = d.bin(B::Sub, e, t)?;
    let e = d.bin(B::Mul, e, half)?;
    let wa = d.bin(B::Add, s, e)?;
    let wb = d.bin(B::Add, t, e)?;
    Ok((wa, wb))
}

fn binary(
    d: &mut Diff,
    op: B,
    a: Value,
    b: Value,
    y: Value,
    g: Value,
    wanted: &[bool],
) -> Result<Grads, String> {
    let (ta, tb) = (d.ty(a), d.ty(b));
    let (ga, gb) = match op {
        B::Add => (Some(g), Some(g)),
        B::Sub => {
            let nb = wanted[1]
                .then(|| d.push(Op::Unary(U::Neg), &[g]))
                .transpose()?;
            (Some(g), nb)
        }
        // (a·b)' = g·b, g·a
        B::Mul => {
            let ga = wanted[0].then(|| d.bin(B::Mul, g, b)).transpose()?;
            let gb = wanted[1].then(|| d.bin(B::Mul, g, a)).transpose()?;
            (ga, gb)
        }
        // (a/b)' = g/b, −g·y/b
        B::Div => {
            let ga = wanted[0].then(|| d.bin(B::Div, g, b)).transpose()?;
            let gb = if wanted[1] {
                let t = d.bin(B::Mul, g, y)?;
                let t = d.bin(B::Div, t, b)?;
                Some(d.push(Op::Unary(U::Neg), &[t])?)
            } else {
                None
            };
            (ga, gb)
        }
        // The larger (smaller) operand takes the cotangent; a tie splits it evenly.
        B::Max | B::Min => {
            let (wa, wb) = pick(d, a, b, op)?;
            let ga = wanted[0].then(|| d.bin(B::Mul, g, wa)).transpose()?;
            let gb = wanted[1].then(|| d.bin(B::Mul, g, wb)).transpose()?;
            (ga, gb)
        }
    };
    let ga = match ga.filter(|_| wanted[0]) {
        Some(v) => Some(unbroadcast(d, v, &ta)?),
        None => None,
    };
    let gb = match gb.filter(|_| wanted[1]) {
        Some(v) => Some(unbroadcast(d, v, &tb)?),
        None => None,
    };
    Ok(vec![ga, gb])
}

/// `v` in dtype `to` (no node when it already is).
pub(super) fn cast(d: &mut Diff, v: Value, to: DType) -> Result<Value, String> {
    if d.ty(v).dtype == to {
        Ok(v)
    } else {
        d.push(Op::Cast(to), &[v])
    }
}

fn reduce_op(op: ReduceOp, axis: usize, keepdim: bool, policy: NumericsPolicy) -> Op {
    Op::Reduce {
        op,
        axes: vec![axis],
        keepdim,
        policy,
    }
}

/// Sums the cotangent `g` of a broadcast result back to the operand type `to`: leading axes
/// the operand lacks are summed away, axes where it has extent 1 are summed keeping the dim,
/// under the kernel's numerics policy ([`Diff::policy`]). The dtype is `to`'s.
pub(super) fn unbroadcast(d: &mut Diff, g: Value, to: &TensorType) -> Result<Value, String> {
    let mut g = g;
    let r = to.shape.rank();
    while d.ty(g).shape.rank() > r {
        g = d.push(reduce_op(ReduceOp::Sum, 0, false, d.policy), &[g])?;
    }
    for (i, want) in to.shape.0.iter().enumerate() {
        let have = d.ty(g).shape.0[i].clone();
        if want.is_one() && !have.is_one() {
            g = d.push(reduce_op(ReduceOp::Sum, i, true, d.policy), &[g])?;
        }
    }
    let g = cast(d, g, to.dtype)?;
    if d.ty(g).shape != to.shape {
        return Err(format!(
            "cannot sum a cotangent of type {} back to {to} (a rule bug)",
            d.ty(g)
        ));
    }
    Ok(g)
}

fn reduce_op_axes(op: ReduceOp, axes: &[usize], keepdim: bool, policy: NumericsPolicy) -> Op {
    Op::Reduce {
        op,
        axes: axes.to_vec(),
        keepdim,
        policy,
    }
}

/// A value of a reduction's result type spread back to the operand type `tx` over the
/// reduced axes (`sorted`). Numpy broadcasting aligns trailing axes: a value without the
/// reduced axes spreads back by itself when they are leading; the last axis of a matrix
/// spreads through a transpose.
fn spread_back(
    d: &mut Diff,
    sorted: &[usize],
    keepdim: bool,
    tx: &TensorType,
    g: Value,
) -> Result<Value, String> {
    let r = tx.shape.rank();
    if keepdim || sorted.iter().enumerate().all(|(i, a)| i == *a) {
        Ok(d.b.push_typed(
            Op::Broadcast,
            &[g],
            TensorType::new(tx.dtype, tx.shape.clone()),
        ))
    } else if r == 2 && sorted == [1] {
        let t = TensorType::new(
            tx.dtype,
            Shape(vec![tx.shape.0[1].clone(), tx.shape.0[0].clone()]),
        );
        let wide = d.b.push_typed(Op::Broadcast, &[g], t);
        d.push(Op::Transpose, &[wide])
    } else {
        Err(format!(
            "no gradient rule for reducing axes {sorted:?} of a rank-{r} tensor without keepdim (reduce with `_keepdim`, or leading axes)"
        ))
    }
}

/// `g` (a reduction's result cotangent) spread back over the reduced axes of `x`.
fn reduce(
    d: &mut Diff,
    op: ReduceOp,
    axes: &[usize],
    keepdim: bool,
    policy: NumericsPolicy,
    (x, y): (Value, Value),
    g: Value,
) -> Result<Value, String> {
    let tx = d.ty(x);
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    let spread = spread_back(d, &sorted, keepdim, &tx, g)?;
    if op == ReduceOp::Sum {
        return Ok(spread);
    }
    if op == ReduceOp::Max {
        // The maxima take the cotangent, split evenly among ties: `mask / count` with
        // `mask = 1 − step(|x − max|)`.
        let ym = spread_back(d, &sorted, keepdim, &tx, y)?;
        let diff = d.bin(B::Sub, x, ym)?;
        let dist = d.push(Op::Unary(U::Abs), &[diff])?;
        let off = step(d, dist)?;
        let one = d.konst(1.0, tx.dtype);
        let mask = d.bin(B::Sub, one, off)?;
        let count = d.push(
            reduce_op_axes(ReduceOp::Sum, &sorted, true, policy),
            &[mask],
        )?;
        let count = spread_back(d, &sorted, true, &tx, count)?;
        let share = d.bin(B::Div, mask, count)?;
        return d.bin(B::Mul, spread, share);
    }
    // mean: divide by the number of reduced elements.
    let dt = tx.dtype;
    let mut count = 1u64;
    let mut symbolic = false;
    for a in axes {
        match &tx.shape.0[*a] {
            Dim::Const(c) => count *= c,
            Dim::Sym(_) => symbolic = true,
        }
    }
    if !symbolic {
        let c = d.konst(1.0 / count as f64, dt);
        return d.bin(B::Mul, spread, c);
    }
    // A symbolic extent: the count is the mean's own sum of ones (`sum(1)` over the axes).
    let one = d.konst(1.0, dt);
    let mut ones = d.b.push_typed(Op::Broadcast, &[one], tx.clone());
    for a in &sorted {
        ones = d.push(reduce_op(ReduceOp::Sum, *a, true, policy), &[ones])?;
    }
    d.bin(B::Div, spread, ones)
}

fn matmul(
    d: &mut Diff,
    a: Value,
    b: Value,
    policy: NumericsPolicy,
    g: Value,
    wanted: &[bool],
) -> Result<Grads, String> {
    let (ta, tb) = (d.ty(a), d.ty(b));
    let gd = d.ty(g).dtype;
    // The products run in the cotangent's dtype (the forward accumulator, f32 for floats),
    // under the forward matmul's policy, as does the sum over a shared operand's batch.
    let (a32, b32) = (cast(d, a, gd)?, cast(d, b, gd)?);
    let mm = Op::Matmul { acc: gd, policy };
    let ga = if wanted[0] {
        // dA = g · Bᵀ
        let bt = d.push(Op::Transpose, &[b32])?;
        let r = d.push(mm.clone(), &[g, bt])?;
        Some(cast(d, r, ta.dtype)?)
    } else {
        None
    };
    let gb = if wanted[1] {
        // dB = Aᵀ · g, summed over the batch when B is shared by every batch of A.
        let at = d.push(Op::Transpose, &[a32])?;
        let mut r = d.push(mm, &[at, g])?;
        while d.ty(r).shape.rank() > tb.shape.rank() {
            r = d.push(reduce_op(ReduceOp::Sum, 0, false, policy), &[r])?;
        }
        Some(cast(d, r, tb.dtype)?)
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// `y ⊙ (g − Σ_axis(g ⊙ y))` for `y = softmax(x)` along `axis`.
fn softmax_vjp(
    d: &mut Diff,
    y: Value,
    g: Value,
    axis: usize,
    policy: NumericsPolicy,
) -> Result<Value, String> {
    let gy = d.bin(B::Mul, g, y)?;
    let s = d.push(reduce_op(ReduceOp::Sum, axis, true, policy), &[gy])?;
    let c = d.bin(B::Sub, g, s)?;
    d.bin(B::Mul, y, c)
}

/// layernorm (`beta` given) and rmsnorm: with `x̂ = (x − μ)·rstd` (μ = 0 for rmsnorm) and
/// `h = g ⊙ γ`: `dx = rstd·(h − mean(h) − x̂·mean(h ⊙ x̂))` (no `mean(h)` term for
/// rmsnorm), `dγ = Σ_rows g ⊙ x̂`, `dβ = Σ_rows g`.
fn norm(
    d: &mut Diff,
    x: Value,
    gamma: Value,
    beta: Option<Value>,
    eps: f64,
    policy: NumericsPolicy,
    g: Value,
) -> Result<Grads, String> {
    let tx = d.ty(x);
    let dt = tx.dtype;
    if dt != DType::F32 {
        return Err(format!(
            "the norm gradients are written for f32 inputs, got {dt} (cast to f32 first)"
        ));
    }
    let last = tx.shape.rank() - 1;
    let mean = |d: &mut Diff, v: Value| d.push(reduce_op(ReduceOp::Mean, last, true, policy), &[v]);
    let xc = match beta {
        Some(_) => {
            let mu = mean(d, x)?;
            d.bin(B::Sub, x, mu)?
        }
        None => x,
    };
    let sq = d.bin(B::Mul, xc, xc)?;
    let var = mean(d, sq)?;
    let e = d.konst(eps, dt);
    let ve = d.bin(B::Add, var, e)?;
    let rstd = d.push(Op::Unary(U::Rsqrt), &[ve])?;
    let xhat = d.bin(B::Mul, xc, rstd)?;
    let h = d.bin(B::Mul, g, gamma)?;
    let hx = d.bin(B::Mul, h, xhat)?;
    let m2 = mean(d, hx)?;
    let t = d.bin(B::Mul, xhat, m2)?;
    let mut inner = d.bin(B::Sub, h, t)?;
    if beta.is_some() {
        let m1 = mean(d, h)?;
        inner = d.bin(B::Sub, inner, m1)?;
    }
    let dx = d.bin(B::Mul, rstd, inner)?;
    let tg = d.ty(gamma);
    let gx = d.bin(B::Mul, g, xhat)?;
    let dgamma = unbroadcast(d, gx, &tg)?;
    let mut out = vec![Some(dx), Some(dgamma)];
    if let Some(b) = beta {
        let tb = d.ty(b);
        out.push(Some(unbroadcast(d, g, &tb)?));
    }
    Ok(out)
}

/// Attention recomputed unfused: `s = scale·q·kᵀ [mask]`, `p = softmax(s)`;
/// `dv = pᵀ·g`, `dp = g·vᵀ`, `ds = p ⊙ (dp − rowsum(dp ⊙ p))`, `dq = scale·ds·k`,
/// `dk = scale·dsᵀ·q` (products in f32; results in the inputs' dtype).
fn attention(
    d: &mut Diff,
    x: &[Value],
    scale: f64,
    causal: bool,
    policy: NumericsPolicy,
    g: Value,
    wanted: &[bool],
) -> Result<Grads, String> {
    let dt = d.ty(x[0]).dtype;
    let (q, k, v) = (
        cast(d, x[0], DType::F32)?,
        cast(d, x[1], DType::F32)?,
        cast(d, x[2], DType::F32)?,
    );
    let mm = Op::Matmul {
        acc: DType::F32,
        policy,
    };
    let kt = d.push(Op::Transpose, &[k])?;
    let s = d.push(mm.clone(), &[q, kt])?;
    let c = d.konst(scale, DType::F32);
    let mut s = d.bin(B::Mul, s, c)?;
    if causal {
        s = d.push(Op::CausalMask, &[s])?;
    }
    let axis = d.ty(s).shape.rank() - 1;
    let p = d.push(Op::Softmax { axis, policy }, &[s])?;
    let mut out = vec![None, None, None];
    if wanted[2] {
        let pt = d.push(Op::Transpose, &[p])?;
        let dv = d.push(mm.clone(), &[pt, g])?;
        out[2] = Some(cast(d, dv, dt)?);
    }
    if wanted[0] || wanted[1] {
        let vt = d.push(Op::Transpose, &[v])?;
        let dp = d.push(mm.clone(), &[g, vt])?;
        let ds = softmax_vjp(d, p, dp, axis, policy)?;
        let ds = d.bin(B::Mul, ds, c)?;
        if wanted[0] {
            let dq = d.push(mm.clone(), &[ds, k])?;
            out[0] = Some(cast(d, dq, dt)?);
        }
        if wanted[1] {
            let dst = d.push(Op::Transpose, &[ds])?;
            let dk = d.push(mm, &[dst, q])?;
            out[1] = Some(cast(d, dk, dt)?);
        }
    }
    Ok(out)
}
