//! `spectral_conv`: `conv2d` → `ifft(fft(x) ⊙ conj(fft(w)))`, padded and cropped.
//!
//! For stride 1 and dilation 1, convolution (cross-correlation) is a pointwise product in the
//! frequency domain. With `P ≥ H + 2·ph` and `Q ≥ W + 2·pw` (powers of two), `x` zero-padded to
//! `[P, Q]` (`ph`, `pw` zeros in front) and `w` zero-padded to `[P, Q]` (zeros behind), the
//! circular cross-correlation `c = ifft2(fft2(x_p) · conj(fft2(w_p)))` (summed over the input
//! channels of each group, [`Op::SpectralMul`]) equals the convolution on `[0, OH) × [0, OW)`
//! because no term wraps around. The replacement:
//!
//! ```text
//! x → complex → pad → fft(1) → fft(2) ─┐
//! w → complex → pad → fft(0) → fft(1) ─┴→ spectral_mul → ifft(1) → ifft(2) → real → crop
//! ```
//!
//! The cost guard weighs the direct convolution's FLOPs against the transforms' passes over
//! memory (`5·L·log2 L` FLOPs per length-`L` complex transform): the direct loop grows with
//! `KH·KW`, the transforms with `log(P·Q)`, so large kernels go spectral and small ones stay.

use super::{Match, Rule};
use crate::cost::graph::{Sizes, Work};
use crate::graph::{FFT_MAX_LENGTH, Graph, GraphBuilder, Op, TypeError, Value};
use crate::{DType, Dim, TensorType};

pub(super) const SPECTRAL_CONV: Rule = Rule {
    name: "spectral_conv",
    summary: "conv2d as ifft(fft(x) ⊙ conj(fft(w))) when the transforms are cheaper",
    pattern,
    legal,
    cost,
    replace,
};

fn pattern(g: &Graph, root: Value) -> Option<Match> {
    let n = g.node(root);
    let Op::Conv2d(_) = n.op else {
        return None;
    };
    Some(Match {
        root,
        nodes: vec![root],
        inputs: n.args.clone(),
        op: n.op.clone(),
    })
}

/// The padded transform sizes `[P, Q]`.
fn grid(g: &Graph, m: &Match) -> [u64; 2] {
    let Op::Conv2d(c) = &m.op else { unreachable!() };
    let x = g.ty(m.inputs[0]);
    let ext = |a: usize| match &x.shape.0[a + 1] {
        Dim::Const(n) => (n + 2 * c.padding[a]).next_power_of_two(),
        Dim::Sym(_) => u64::MAX,
    };
    [ext(0), ext(1)]
}

fn legal(g: &Graph, m: &Match) -> Result<(), String> {
    let Op::Conv2d(c) = &m.op else { unreachable!() };
    if c.stride != [1, 1] || c.dilation != [1, 1] {
        return Err(format!(
            "stride {:?} and dilation {:?} are not 1 (the spectral form computes every stride-1 output)",
            c.stride, c.dilation
        ));
    }
    let [p, q] = grid(g, m);
    if p > FFT_MAX_LENGTH || q > FFT_MAX_LENGTH {
        return Err(format!(
            "the padded transform {p}×{q} exceeds the FFT limit {FFT_MAX_LENGTH}"
        ));
    }
    Ok(())
}

fn fft_work(s: &Sizes, t: &TensorType, axis: usize) -> Work {
    let l = s.dim(&t.shape.0[axis]) as f64;
    let transforms = s.numel(t) / 2.0 / l;
    Work {
        bytes: 2.0 * s.bytes(t),
        flops: transforms * 5.0 * l * l.log2().max(1.0),
        half: false,
    }
}

fn pass(s: &Sizes, from: &TensorType, to: &TensorType) -> Work {
    Work {
        bytes: s.bytes(from) + s.bytes(to),
        flops: 0.0,
        half: false,
    }
}

fn cost(g: &Graph, m: &Match, s: &Sizes) -> (Work, Work) {
    let (x, w, y) = (g.ty(m.inputs[0]), g.ty(m.inputs[1]), g.ty(m.root));
    let dim = |t: &TensorType, i: usize| s.dim(&t.shape.0[i]) as f64;
    let direct = Work {
        bytes: s.bytes(x) + s.bytes(w) + s.bytes(y),
        flops: 2.0 * s.numel(y) * dim(w, 0) * dim(w, 1) * dim(w, 2),
        half: x.dtype != DType::F32,
    };
    let [p, q] = grid(g, m);
    let cplx = |lead: &[Dim], ch: &[Dim]| {
        let mut d = lead.to_vec();
        d.extend([Dim::Const(p), Dim::Const(q)]);
        d.extend_from_slice(ch);
        d.push(Dim::Const(2));
        TensorType::new(DType::F32, crate::Shape(d))
    };
    let xs = &x.shape.0;
    let ws = &w.shape.0;
    let xc = cplx(&[xs[0].clone()], &[xs[3].clone()]);
    let wc = cplx(&[], &[ws[2].clone(), ws[3].clone()]);
    let yc = cplx(&[xs[0].clone()], &[ws[3].clone()]);
    let as_complex = |t: &TensorType| {
        let mut d = t.shape.0.clone();
        d.push(Dim::Const(2));
        TensorType::new(DType::F32, crate::Shape(d))
    };
    let (x2, w2) = (as_complex(x), as_complex(w));
    let spectral = [
        pass(s, x, &x2),
        pass(s, &x2, &xc),
        fft_work(s, &xc, 1),
        fft_work(s, &xc, 2),
        pass(s, w, &w2),
        pass(s, &w2, &wc),
        fft_work(s, &wc, 0),
        fft_work(s, &wc, 1),
        Work {
            bytes: s.bytes(&xc) + s.bytes(&wc) + s.bytes(&yc),
            flops: 8.0 * s.numel(&yc) / 2.0 * dim(w, 2),
            half: false,
        },
        fft_work(s, &yc, 1),
        fft_work(s, &yc, 2),
        pass(s, &yc, &yc),
        pass(s, &yc, y),
    ]
    .into_iter()
    .sum();
    (direct, spectral)
}

fn replace(b: &mut GraphBuilder, m: &Match, inputs: &[Value]) -> Result<Value, TypeError> {
    let Op::Conv2d(c) = &m.op else { unreachable!() };
    let (x, w) = (inputs[0], inputs[1]);
    let dims = |b: &GraphBuilder, v: Value| -> Vec<i64> {
        b.ty(v)
            .shape
            .0
            .iter()
            .map(|d| match d {
                Dim::Const(n) => *n as i64,
                Dim::Sym(_) => 0,
            })
            .collect()
    };
    let (xd, wd) = (dims(b, x), dims(b, w));
    let (ph, pw) = (c.padding[0] as i64, c.padding[1] as i64);
    let p = ((xd[1] + 2 * ph) as u64).next_power_of_two() as i64;
    let q = ((xd[2] + 2 * pw) as u64).next_power_of_two() as i64;
    let xc = b.push(Op::Complex, &[x])?;
    let xp = b.push(
        Op::pad(
            vec![0, ph, pw, 0, 0],
            vec![0, p - xd[1] - ph, q - xd[2] - pw, 0, 0],
        ),
        &[xc],
    )?;
    let x1 = b.push(
        Op::Fft {
            axis: 1,
            inverse: false,
        },
        &[xp],
    )?;
    let xf = b.push(
        Op::Fft {
            axis: 2,
            inverse: false,
        },
        &[x1],
    )?;
    let wc = b.push(Op::Complex, &[w])?;
    let wp = b.push(
        Op::pad(vec![0; 5], vec![p - wd[0], q - wd[1], 0, 0, 0]),
        &[wc],
    )?;
    let w1 = b.push(
        Op::Fft {
            axis: 0,
            inverse: false,
        },
        &[wp],
    )?;
    let wf = b.push(
        Op::Fft {
            axis: 1,
            inverse: false,
        },
        &[w1],
    )?;
    let yf = b.push(Op::SpectralMul { groups: c.groups }, &[xf, wf])?;
    let y1 = b.push(
        Op::Fft {
            axis: 1,
            inverse: true,
        },
        &[yf],
    )?;
    let y2 = b.push(
        Op::Fft {
            axis: 2,
            inverse: true,
        },
        &[y1],
    )?;
    let yr = b.push(Op::Real, &[y2])?;
    let oh = c.out_extent(0, xd[1] as u64, wd[0] as u64).unwrap_or(0) as i64;
    let ow = c.out_extent(1, xd[2] as u64, wd[1] as u64).unwrap_or(0) as i64;
    b.push(Op::pad(vec![0; 4], vec![0, oh - p, ow - q, 0]), &[yr])
}
