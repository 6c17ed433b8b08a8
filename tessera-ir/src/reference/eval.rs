//! A Graph IR interpreter in f64.

use super::ops;
use crate::graph::{Graph, Op, ReduceOp, Value};
use crate::{DType, Dim};
use std::collections::HashMap;

/// A concrete tensor in f64: row-major data and its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor64 {
    /// The dims, outermost first.
    pub shape: Vec<usize>,
    /// The elements, row-major (`shape`'s product of them).
    pub data: Vec<f64>,
}

impl Tensor64 {
    /// A tensor of `shape` holding `data` (row-major).
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor64 { shape, data }
    }
}

/// Evaluates `g` on `inputs` (in parameter order) and returns its output.
/// Errors name the parameter or value whose shape does not fit.
pub fn eval(g: &Graph, inputs: &[Tensor64]) -> Result<Tensor64, String> {
    let mut all = eval_all(g, inputs)?;
    Ok(all.swap_remove(g.output.index()))
}

/// Evaluates `g` and returns the value of every node, indexed by [`Value`].
pub fn eval_all(g: &Graph, inputs: &[Tensor64]) -> Result<Vec<Tensor64>, String> {
    if inputs.len() != g.params.len() {
        return Err(format!(
            "@{} takes {} inputs, got {}",
            g.name,
            g.params.len(),
            inputs.len()
        ));
    }
    let mut syms: HashMap<String, usize> = HashMap::new();
    for (p, x) in g.params.iter().zip(inputs) {
        let ty = g.ty(*p);
        if ty.shape.rank() != x.shape.len() {
            return Err(format!(
                "{}: expects {ty}, got shape {:?}",
                g.value_name(*p),
                x.shape
            ));
        }
        for (d, &n) in ty.shape.0.iter().zip(&x.shape) {
            let ok = match d {
                Dim::Const(c) => *c as usize == n,
                Dim::Sym(s) => *syms.entry(s.clone()).or_insert(n) == n,
            };
            if !ok {
                return Err(format!(
                    "{}: dim {d} is bound to {}, got {n}",
                    g.value_name(*p),
                    match d {
                        Dim::Const(c) => *c as usize,
                        Dim::Sym(s) => syms[s],
                    }
                ));
            }
        }
    }
    let mut vals: Vec<Tensor64> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let a = |j: usize| &vals[n.args[j].index()];
        let shape: Vec<usize> =
            n.ty.shape
                .0
                .iter()
                .map(|d| match d {
                    Dim::Const(c) => *c as usize,
                    Dim::Sym(s) => syms.get(s).copied().unwrap_or(0),
                })
                .collect();
        let data = match &n.op {
            Op::Param { index, .. } => inputs[*index].data.clone(),
            Op::Const { value, .. } => vec![*value],
            Op::Unary(u) => a(0).data.iter().map(|x| u.eval_f64(*x)).collect(),
            Op::Binary(b) => broadcast_zip(a(0), a(1), &shape, |x, y| b.eval_f64(x, y)),
            Op::Cast(to) => a(0).data.iter().map(|x| cast(*x, *to)).collect(),
            Op::Broadcast => broadcast_zip(a(0), a(0), &shape, |x, _| x),
            Op::Reduce { op, axes, .. } => reduce(a(0), *op, axes),
            Op::Matmul { .. } => {
                let (x, y) = (a(0), a(1));
                let (ra, rb) = (x.shape.len(), y.shape.len());
                let (m, k, nn) = (x.shape[ra - 2], x.shape[ra - 1], y.shape[rb - 1]);
                let batch: usize = x.shape[..ra - 2].iter().product();
                ops::matmul(&x.data, &y.data, batch, m, k, nn, rb > 2)
            }
            Op::Transpose => {
                let x = a(0);
                let r = x.shape.len();
                let (m, nn) = (x.shape[r - 2], x.shape[r - 1]);
                let mut y = vec![0.0; x.data.len()];
                for (b, (src, dst)) in x.data.chunks(m * nn).zip(y.chunks_mut(m * nn)).enumerate() {
                    let _ = b;
                    for i in 0..m {
                        for j in 0..nn {
                            dst[j * m + i] = src[i * nn + j];
                        }
                    }
                }
                y
            }
            Op::Softmax { axis, .. } => ops::softmax_axis(&a(0).data, &a(0).shape, *axis),
            Op::Permute(perm) => ops::permute(&a(0).data, &a(0).shape, perm),
            Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => {
                let x = a(0);
                let nn = *x.shape.last().unwrap();
                let gamma = &a(1).data;
                let beta = (n.args.len() == 3).then(|| &a(2).data);
                x.data
                    .chunks(nn.max(1))
                    .flat_map(|r| {
                        let mean = if beta.is_some() {
                            r.iter().sum::<f64>() / nn as f64
                        } else {
                            0.0
                        };
                        let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / nn as f64;
                        let rstd = 1.0 / (var + eps).sqrt();
                        r.iter()
                            .enumerate()
                            .map(|(j, v)| (v - mean) * rstd * gamma[j] + beta.map_or(0.0, |b| b[j]))
                            .collect::<Vec<_>>()
                    })
                    .collect()
            }
            Op::CausalMask => {
                let x = a(0);
                let r = x.shape.len();
                ops::causal_mask(&x.data, x.shape[r - 2], x.shape[r - 1])
            }
            Op::Attention { scale, causal, .. } => {
                let (q, k, v) = (a(0), a(1), a(2));
                let r = q.shape.len();
                let batch = q.shape[..r - 2].iter().product();
                ops::attention(
                    &q.data,
                    &k.data,
                    &v.data,
                    batch,
                    q.shape[r - 2],
                    k.shape[r - 2],
                    q.shape[r - 1],
                    v.shape[r - 1],
                    *scale,
                    *causal,
                )
            }
            Op::Conv2d(c) => {
                let (x, w) = (a(0), a(1));
                let four = |s: &[usize]| [s[0], s[1], s[2], s[3]];
                ops::conv2d(&x.data, four(&x.shape), &w.data, four(&w.shape), c).0
            }
            Op::Fft { axis, inverse } => ops::dft(&a(0).data, &a(0).shape, *axis, *inverse),
            Op::Complex => ops::complex(&a(0).data),
            Op::Real => ops::real(&a(0).data),
            Op::Pad { lo, hi, interior } => {
                ops::pad_interior(&a(0).data, &a(0).shape, lo, hi, interior).0
            }
            Op::SpectralMul { groups } => {
                let (x, w) = (a(0), a(1));
                let xs = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
                ops::spectral_mul(&x.data, xs, &w.data, w.shape[3], *groups as usize)
            }
        };
        if data.len() != shape.iter().product::<usize>() {
            return Err(format!(
                "{}: {} gives {} elements for shape {shape:?}",
                g.value_name(Value(i as u32)),
                n.op.name(),
                data.len()
            ));
        }
        vals.push(Tensor64 { shape, data });
    }
    Ok(vals)
}

fn cast(x: f64, to: DType) -> f64 {
    match to {
        DType::I32 => x.trunc(),
        DType::Bool => (x != 0.0) as u8 as f64,
        _ => x,
    }
}

/// Numpy broadcasting of two tensors to `shape`.
fn broadcast_zip(
    a: &Tensor64,
    b: &Tensor64,
    shape: &[usize],
    f: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let r = shape.len();
    let strides = |t: &Tensor64| -> Vec<usize> {
        let mut s = vec![0; r];
        let mut acc = 1;
        for (i, &d) in t.shape.iter().enumerate().rev() {
            let at = r - t.shape.len() + i;
            s[at] = if d == 1 { 0 } else { acc };
            acc *= d;
        }
        s
    };
    let (sa, sb) = (strides(a), strides(b));
    let n: usize = shape.iter().product();
    (0..n)
        .map(|e| {
            let (mut rem, mut ia, mut ib) = (e, 0, 0);
            for ax in (0..r).rev() {
                let i = rem % shape[ax];
                rem /= shape[ax];
                ia += i * sa[ax];
                ib += i * sb[ax];
            }
            f(a.data[ia], b.data[ib])
        })
        .collect()
}

fn reduce(x: &Tensor64, op: ReduceOp, axes: &[usize]) -> Vec<f64> {
    let r = x.shape.len();
    let out_shape: Vec<usize> = (0..r)
        .map(|a| if axes.contains(&a) { 1 } else { x.shape[a] })
        .collect();
    let n: usize = out_shape.iter().product();
    let init = if op == ReduceOp::Max {
        f64::NEG_INFINITY
    } else {
        0.0
    };
    let mut acc = vec![init; n];
    for (e, v) in x.data.iter().enumerate() {
        let (mut rem, mut o, mut stride) = (e, 0, 1);
        for ax in (0..r).rev() {
            let i = rem % x.shape[ax];
            rem /= x.shape[ax];
            if !axes.contains(&ax) {
                o += i * stride;
            }
            stride *= out_shape[ax];
        }
        acc[o] = if op == ReduceOp::Max {
            acc[o].max(*v)
        } else {
            acc[o] + v
        };
    }
    if op == ReduceOp::Mean {
        let cnt: usize = axes.iter().map(|a| x.shape[*a]).product();
        acc.iter_mut().for_each(|v| *v /= cnt as f64);
    }
    acc
}
