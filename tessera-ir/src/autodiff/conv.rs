//! The VJP of `conv2d` in ops Graph IR has: the weight gradient one kernel tap at a time
//! (`pad` to shift and crop, `matmul`, `transpose`, `reduce.sum`; a stride by a depthwise
//! `conv2d` with unit weights), the input gradient as a transposed convolution (`pad` with
//! interior padding, then a stride-1 `conv2d`).
//!
//! With `y[n, oh, ow, f] = Σ_{kh, kw, c} x[n, oh·sh + kh·dh − ph, ow·sw + kw·dw − pw,
//! g·Cg + c] · w[kh, kw, c, f]` (`g` the group of `f`), tap `(a, b)` contributes
//! - to `dw[a, b]`: `Σ_{n, oh, ow} xs[n, oh, ow, c] · dy[n, oh, ow, f]` per group, where `xs` is
//!   `x` shifted by `(a·dh − ph, b·dw − pw)` and subsampled by the stride — a batched
//!   `xsᵀ · dy` summed over `[N, OH]`: the correlation of `x` with `dy`;
//! - to `dx`: `dy · w[a, b]ᵀ` (per group), placed at rows `oh·sh + a·dh − ph`. Summed over
//!   the taps this is the transposed convolution, built as one `conv2d` (stride 1): `dy` with
//!   `s − 1` zeros inserted between rows and columns (`pad` with interior padding) and padded,
//!   convolved with the weight flipped along `KH`, `KW` and its channel roles swapped per group
//!   (see [`input_grad`]).

use super::Diff;
use super::rules::cast;
use crate::graph::{BinaryOp as B, Conv2d, Op, ReduceOp, Value};
use crate::{DType, Dim, Shape, TensorType};

type Grads = Vec<Option<Value>>;

fn constant(d: &Dim, what: &str) -> Result<i64, String> {
    match d {
        Dim::Const(n) => Ok(*n as i64),
        Dim::Sym(s) => Err(format!(
            "the conv2d gradient needs a constant {what}, got the symbolic dim {s}"
        )),
    }
}

/// `v` padded by `lo`/`hi` (negative: cropped) along `axis` only (no node when both are 0).
fn pad_axis(d: &mut Diff, v: Value, axis: usize, lo: i64, hi: i64) -> Result<Value, String> {
    if lo == 0 && hi == 0 {
        return Ok(v);
    }
    let r = d.ty(v).shape.rank();
    let (mut l, mut h) = (vec![0; r], vec![0; r]);
    l[axis] = lo;
    h[axis] = hi;
    d.push(Op::pad(l, h), &[v])
}

/// Elements `start .. start + len` of `axis` (extent `n`).
fn slice(
    d: &mut Diff,
    v: Value,
    axis: usize,
    start: i64,
    len: i64,
    n: i64,
) -> Result<Value, String> {
    pad_axis(d, v, axis, -start, -(n - start - len))
}

fn sum_axes(d: &mut Diff, v: Value, axes: &[usize]) -> Result<Value, String> {
    d.push(
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: axes.to_vec(),
            keepdim: false,
            policy: d.policy,
        },
        &[v],
    )
}

fn add_to(d: &mut Diff, acc: Option<Value>, v: Value) -> Result<Option<Value>, String> {
    Ok(Some(match acc {
        None => v,
        Some(a) => d.bin(B::Add, a, v)?,
    }))
}

/// The cotangents of `conv2d(x, w)` given `g` (the result's, f32).
pub(super) fn conv2d(
    d: &mut Diff,
    x: Value,
    w: Value,
    c: Conv2d,
    g: Value,
    wanted: &[bool],
) -> Result<Grads, String> {
    let (tx, tw) = (d.ty(x), d.ty(w));
    let (xs, ws, gs) = (
        tx.shape.0.clone(),
        tw.shape.0.clone(),
        d.ty(g).shape.0.clone(),
    );
    let (h, wd) = (constant(&xs[1], "H")?, constant(&xs[2], "W")?);
    let (kh, kw) = (constant(&ws[0], "KH")?, constant(&ws[1], "KW")?);
    let (oh, ow) = (constant(&gs[1], "OH")?, constant(&gs[2], "OW")?);
    let groups = c.groups as i64;
    // Channel extents are needed (constant) only to split the groups.
    let (cg, fg, cin, f) = if groups > 1 {
        let cg = constant(&ws[2], "C/groups")?;
        let f = constant(&ws[3], "F")?;
        (cg, f / groups, cg * groups, f)
    } else {
        (0, 0, 0, 0)
    };
    let [sh, sw] = c.stride.map(|s| s as i64);
    let [dh, dw] = c.dilation.map(|s| s as i64);
    let [ph, pw] = c.padding.map(|s| s as i64);
    let x32 = cast(d, x, DType::F32)?;
    let w32 = cast(d, w, DType::F32)?;
    let mm = Op::Matmul {
        acc: DType::F32,
        policy: d.policy,
    };
    let mut out = vec![None, None];
    if wanted[1] {
        // Unit weights of a depthwise conv2d that subsamples by the stride.
        let ones = if sh > 1 || sw > 1 {
            let cn = constant(&xs[3], "C (a strided conv2d)")?;
            let one = d.konst(1.0, DType::F32);
            let t = TensorType::new(
                DType::F32,
                Shape(vec![
                    Dim::Const(1),
                    Dim::Const(1),
                    Dim::Const(1),
                    xs[3].clone(),
                ]),
            );
            Some((d.b.push_typed(Op::Broadcast, &[one], t), cn))
        } else {
            None
        };
        let mut dw_acc = None;
        for a in 0..kh {
            for b in 0..kw {
                // xs[oh] = x[oh·sh + a·dh − ph]: pad so the row of output oh sits at oh·sh.
                let (lo_h, lo_w) = (ph - a * dh, pw - b * dw);
                let (len_h, len_w) = ((oh - 1) * sh + 1, (ow - 1) * sw + 1);
                let t = pad_axis(d, x32, 1, lo_h, len_h - h - lo_h)?;
                let mut t = pad_axis(d, t, 2, lo_w, len_w - wd - lo_w)?;
                if let Some((ones, cn)) = ones {
                    t = d.push(
                        Op::Conv2d(Conv2d {
                            stride: c.stride,
                            groups: cn as u64,
                            ..Conv2d::default()
                        }),
                        &[t, ones],
                    )?;
                }
                let mut tap = None;
                for gi in 0..groups.max(1) {
                    let (xg, gg) = if groups > 1 {
                        (
                            slice(d, t, 3, gi * cg, cg, cin)?,
                            slice(d, g, 3, gi * fg, fg, f)?,
                        )
                    } else {
                        (t, g)
                    };
                    let xt = d.push(Op::Transpose, &[xg])?;
                    let p = d.push(mm.clone(), &[xt, gg])?;
                    let mut p = sum_axes(d, p, &[0, 1])?;
                    if groups > 1 {
                        p = pad_axis(d, p, 1, gi * fg, f - (gi + 1) * fg)?;
                    }
                    tap = add_to(d, tap, p)?;
                }
                let tap = tap.expect("at least one group");
                let mut dims = vec![Dim::Const(1), Dim::Const(1)];
                dims.extend(d.ty(tap).shape.0.iter().cloned());
                let wide = d.b.push_typed(
                    Op::Broadcast,
                    &[tap],
                    TensorType::new(DType::F32, Shape(dims)),
                );
                let r = pad_axis(d, wide, 0, a, kh - 1 - a)?;
                let r = pad_axis(d, r, 1, b, kw - 1 - b)?;
                dw_acc = add_to(d, dw_acc, r)?;
            }
        }
        out[1] = Some(cast(d, dw_acc.expect("a kernel tap"), tw.dtype)?);
    }
    if wanted[0] {
        let dx = input_grad(d, w32, g, c, [h, wd], [kh, kw], [oh, ow])?;
        out[0] = Some(cast(d, dx, tx.dtype)?);
    }
    Ok(out)
}

/// `v` reversed along `axis` (constant extent `n`): each element cropped out and padded into
/// its mirrored place, the pieces summed.
fn flip(d: &mut Diff, v: Value, axis: usize, n: i64) -> Result<Value, String> {
    let mut acc = None;
    for i in 0..n {
        let t = slice(d, v, axis, i, 1, n)?;
        let t = pad_axis(d, t, axis, n - 1 - i, i)?;
        acc = add_to(d, acc, t)?;
    }
    Ok(acc.expect("a nonempty axis"))
}

/// The input gradient: the transposed convolution. `dy` (f32 `g`) gets `s − 1` zeros between
/// neighbouring rows and columns (interior padding), is padded by `d·(K − 1) − p` before and
/// `H − 1 + p − (OH − 1)·s` after (negative: cropped), and convolved at stride 1 and dilation
/// `d` with the weight flipped along `KH` and `KW` and its channel roles swapped within each
/// group: `wt[kh, kw, fg, g·Cg + c] = w[KH − 1 − kh, KW − 1 − kw, c, g·Fg + fg]`.
fn input_grad(
    d: &mut Diff,
    w32: Value,
    g: Value,
    c: Conv2d,
    [h, wd]: [i64; 2],
    [kh, kw]: [i64; 2],
    [oh, ow]: [i64; 2],
) -> Result<Value, String> {
    let ws = d.ty(w32).shape.0.clone();
    let groups = c.groups.max(1) as i64;
    let [sh, sw] = c.stride.map(|s| s as i64);
    let [dh, dw] = c.dilation.map(|s| s as i64);
    let [ph, pw] = c.padding.map(|s| s as i64);
    let t = flip(d, w32, 0, kh)?;
    let flipped = flip(d, t, 1, kw)?;
    let wt = if groups == 1 {
        d.push(Op::Transpose, &[flipped])?
    } else {
        let cg = constant(&ws[2], "C/groups")?;
        let f = constant(&ws[3], "F")?;
        let fg = f / groups;
        if cg == 1 && fg == 1 {
            // depthwise: `[KH, KW, 1, C]` is its own channel swap
            flipped
        } else {
            let cin = cg * groups;
            let mut acc = None;
            for gi in 0..groups {
                let t = slice(d, flipped, 3, gi * fg, fg, f)?;
                let t = d.push(Op::Transpose, &[t])?; // [KH, KW, Fg, Cg]
                let t = pad_axis(d, t, 3, gi * cg, cin - (gi + 1) * cg)?;
                acc = add_to(d, acc, t)?;
            }
            acc.expect("at least one group")
        }
    };
    let (lo_h, lo_w) = (dh * (kh - 1) - ph, dw * (kw - 1) - pw);
    let (hi_h, hi_w) = (h - 1 + ph - (oh - 1) * sh, wd - 1 + pw - (ow - 1) * sw);
    let z = if (lo_h, lo_w, hi_h, hi_w, sh, sw) == (0, 0, 0, 0, 1, 1) {
        g
    } else {
        d.push(
            Op::Pad {
                lo: vec![0, lo_h, lo_w, 0],
                hi: vec![0, hi_h, hi_w, 0],
                interior: vec![0, (sh - 1) as u64, (sw - 1) as u64, 0],
            },
            &[g],
        )?
    };
    d.push(
        Op::Conv2d(Conv2d {
            dilation: c.dilation,
            groups: groups as u64,
            ..Conv2d::default()
        }),
        &[z, wt],
    )
}
