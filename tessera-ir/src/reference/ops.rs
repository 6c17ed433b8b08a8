//! One f64 function per op, on row-major data with explicit shapes. Complex tensors hold
//! interleaved `(re, im)` pairs in a last axis of size 2.

use crate::graph::Conv2d;

/// `batch` products `[m, k] × [k, n]`; `b` is shared by every batch when `b_batched` is false.
///
/// ```
/// let c = tessera_ir::reference::ops::matmul(&[1.0, 2.0], &[3.0, 4.0], 1, 1, 2, 1, false);
/// assert_eq!(c, vec![11.0]);
/// ```
pub fn matmul(
    a: &[f64],
    b: &[f64],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    b_batched: bool,
) -> Vec<f64> {
    let mut c = vec![0.0; batch * m * n];
    for t in 0..batch {
        let (a, c) = (&a[t * m * k..], &mut c[t * m * n..(t + 1) * m * n]);
        let b = if b_batched { &b[t * k * n..] } else { b };
        for i in 0..m {
            for p in 0..k {
                let x = a[i * k + p];
                for j in 0..n {
                    c[i * n + j] += x * b[p * n + j];
                }
            }
        }
    }
    c
}

/// Softmax of each row of length `n`. A row of all `−∞` gives NaN (0/0), as the formula does.
///
/// ```
/// let y = tessera_ir::reference::ops::softmax_rows(&[0.0, 0.0], 2);
/// assert_eq!(y, vec![0.5, 0.5]);
/// ```
pub fn softmax_rows(x: &[f64], n: usize) -> Vec<f64> {
    x.chunks(n.max(1))
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
        })
        .collect()
}

/// Softmax along `axis` of a row-major tensor of `shape`.
///
/// ```
/// let y = tessera_ir::reference::ops::softmax_axis(&[0.0, 1.0, 0.0, 1.0], &[2, 2], 0);
/// assert_eq!(y, vec![0.5; 4]);
/// ```
pub fn softmax_axis(x: &[f64], shape: &[usize], axis: usize) -> Vec<f64> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let m = (0..n).map(|k| x[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..n).map(|k| (x[at(k)] - m).exp()).sum();
            for k in 0..n {
                y[at(k)] = (x[at(k)] - m).exp() / s;
            }
        }
    }
    y
}

/// The axes of a row-major tensor of `shape` reordered: result axis `i` is axis `perm[i]`.
///
/// ```
/// let y = tessera_ir::reference::ops::permute(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &[1, 0]);
/// assert_eq!(y, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// ```
pub fn permute(x: &[f64], shape: &[usize], perm: &[usize]) -> Vec<f64> {
    let r = shape.len();
    let mut strides = vec![1usize; r];
    for a in (0..r.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let out: Vec<usize> = perm.iter().map(|&a| shape[a]).collect();
    let mut idx = vec![0usize; r];
    let mut y = Vec::with_capacity(x.len());
    for _ in 0..x.len() {
        y.push(x[(0..r).map(|i| idx[i] * strides[perm[i]]).sum::<usize>()]);
        for i in (0..r).rev() {
            idx[i] += 1;
            if idx[i] < out[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    y
}

/// Is key `j` visible to query `i` under the causal mask of an `sq × sk` score matrix?
/// The diagonal is aligned bottom-right: `j ≤ i + sk − sq`.
pub fn causal_visible(i: usize, j: usize, sq: usize, sk: usize) -> bool {
    (j + sq) as i64 <= (i + sk) as i64
}

/// Causal masking of `batch` score matrices `[sq, sk]`: hidden entries become `−∞`.
///
/// ```
/// let y = tessera_ir::reference::ops::causal_mask(&[1.0, 2.0, 3.0, 4.0], 2, 2);
/// assert_eq!(y, vec![1.0, f64::NEG_INFINITY, 3.0, 4.0]);
/// ```
pub fn causal_mask(x: &[f64], sq: usize, sk: usize) -> Vec<f64> {
    let mut y = x.to_vec();
    for (e, v) in y.iter_mut().enumerate() {
        let (i, j) = ((e / sk.max(1)) % sq.max(1), e % sk.max(1));
        if !causal_visible(i, j, sq, sk) {
            *v = f64::NEG_INFINITY;
        }
    }
    y
}

/// Attention of `batch` (batch × heads) problems: `q: [sq, d]`, `k: [sk, d]`, `v: [sk, dv]`
/// each, `softmax(mask(scale · q·kᵀ)) · v`. Exact: no rounding of the probabilities.
///
/// ```
/// // one query, two keys with equal scores: the mean of the values
/// let o = tessera_ir::reference::ops::attention(&[1.0], &[1.0, 1.0], &[2.0, 4.0], 1, 1, 2, 1, 1, 1.0, false);
/// assert_eq!(o, vec![3.0]);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    batch: usize,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
    scale: f64,
    causal: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; batch * sq * dv];
    let mut s = vec![0.0; sk];
    for b in 0..batch {
        let (q, k, v) = (&q[b * sq * d..], &k[b * sk * d..], &v[b * sk * dv..]);
        for i in 0..sq {
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = if causal && !causal_visible(i, j, sq, sk) {
                    f64::NEG_INFINITY
                } else {
                    scale * (0..d).map(|t| q[i * d + t] * k[j * d + t]).sum::<f64>()
                };
            }
            let p = softmax_rows(&s, sk);
            let o = &mut out[(b * sq + i) * dv..(b * sq + i + 1) * dv];
            for (j, pj) in p.iter().enumerate() {
                for (t, ot) in o.iter_mut().enumerate() {
                    *ot += pj * v[j * dv + t];
                }
            }
        }
    }
    out
}

/// Direct-loop convolution of `x: [n, h, w, c]` by `w: [kh, kw, c/groups, f]` (see
/// [`Conv2d`]); returns `[n, oh, ow, f]` and the output shape.
///
/// ```
/// use tessera_ir::graph::Conv2d;
/// // a 1×1 kernel of weight 2 doubles the input
/// let (y, s) = tessera_ir::reference::ops::conv2d(&[1.0, 2.0], [1, 1, 2, 1], &[2.0], [1, 1, 1, 1], &Conv2d::default());
/// assert_eq!((y, s), (vec![2.0, 4.0], [1, 1, 2, 1]));
/// ```
pub fn conv2d(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    c: &Conv2d,
) -> (Vec<f64>, [usize; 4]) {
    let [n, h, wd, cin] = xs;
    let [kh, kw, cg, f] = ws;
    let oh = c.out_extent(0, h as u64, kh as u64).unwrap_or(0) as usize;
    let ow = c.out_extent(1, wd as u64, kw as u64).unwrap_or(0) as usize;
    let groups = c.groups.max(1) as usize;
    let fg = f / groups;
    let mut y = vec![0.0; n * oh * ow * f];
    for b in 0..n {
        for i in 0..oh {
            for j in 0..ow {
                for o in 0..f {
                    let g = o / fg.max(1);
                    let mut acc = 0.0;
                    for p in 0..kh {
                        let ih = (i * c.stride[0] as usize + p * c.dilation[0] as usize) as i64
                            - c.padding[0] as i64;
                        if ih < 0 || ih >= h as i64 {
                            continue;
                        }
                        for q in 0..kw {
                            let iw = (j * c.stride[1] as usize + q * c.dilation[1] as usize) as i64
                                - c.padding[1] as i64;
                            if iw < 0 || iw >= wd as i64 {
                                continue;
                            }
                            let xrow = ((b * h + ih as usize) * wd + iw as usize) * cin + g * cg;
                            for t in 0..cg {
                                acc += x[xrow + t] * w[((p * kw + q) * cg + t) * f + o];
                            }
                        }
                    }
                    y[((b * oh + i) * ow + j) * f + o] = acc;
                }
            }
        }
    }
    (y, [n, oh, ow, f])
}

/// The naive `O(L²)` DFT along logical axis `axis` of a complex tensor of physical `shape`
/// (last axis 2): `y[k] = Σ_n x[n]·e^{∓2πi·nk/L}`, the inverse scaled by `1/L`.
///
/// ```
/// // the DFT of a unit impulse is all ones
/// let y = tessera_ir::reference::ops::dft(&[1.0, 0.0, 0.0, 0.0], &[2, 2], 0, false);
/// assert_eq!(y, vec![1.0, 0.0, 1.0, 0.0]);
/// ```
pub fn dft(x: &[f64], shape: &[usize], axis: usize, inverse: bool) -> Vec<f64> {
    let l = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product::<usize>() / 2;
    let sign = if inverse { 1.0 } else { -1.0 };
    let norm = if inverse { 1.0 / l as f64 } else { 1.0 };
    // e^{±2πi·j/L} for j < L: the angle of n·k/L reduced mod L keeps the phase exact for
    // large n·k, and the table makes the O(L²) sum cheap enough for L = 4096 in tests.
    let roots: Vec<(f64, f64)> = (0..l)
        .map(|j| (sign * 2.0 * std::f64::consts::PI * j as f64 / l as f64).sin_cos())
        .collect();
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for c in 0..inner {
            let at = |t: usize| ((o * l + t) * inner + c) * 2;
            for k in 0..l {
                let (mut re, mut im) = (0.0, 0.0);
                for t in 0..l {
                    let (s, cth) = roots[(t * k) % l];
                    let (xr, xi) = (x[at(t)], x[at(t) + 1]);
                    re += xr * cth - xi * s;
                    im += xr * s + xi * cth;
                }
                y[at(k)] = re * norm;
                y[at(k) + 1] = im * norm;
            }
        }
    }
    y
}

/// A real tensor as complex (imaginary part 0).
pub fn complex(x: &[f64]) -> Vec<f64> {
    x.iter().flat_map(|&r| [r, 0.0]).collect()
}

/// The real part of a complex tensor.
pub fn real(z: &[f64]) -> Vec<f64> {
    z.iter().step_by(2).copied().collect()
}

/// Zero padding (negative amounts crop): `y[i] = x[i − lo]` inside `x`, else 0. Returns the
/// data and the new shape.
///
/// ```
/// let (y, s) = tessera_ir::reference::ops::pad(&[1.0, 2.0, 3.0], &[3], &[1], &[-2]);
/// assert_eq!((y, s), (vec![0.0, 1.0], vec![2]));
/// ```
pub fn pad(x: &[f64], shape: &[usize], lo: &[i64], hi: &[i64]) -> (Vec<f64>, Vec<usize>) {
    pad_interior(x, shape, lo, hi, &vec![0; shape.len()])
}

/// [`pad`] with `interior[a]` zeros inserted between neighbouring elements of axis `a`
/// first: `y[lo + i·(interior + 1)] = x[i]`, every other element 0.
///
/// ```
/// let (y, s) = tessera_ir::reference::ops::pad_interior(&[1.0, 2.0, 3.0], &[3], &[1], &[-1], &[1]);
/// assert_eq!((y, s), (vec![0.0, 1.0, 0.0, 2.0, 0.0], vec![5]));
/// ```
pub fn pad_interior(
    x: &[f64],
    shape: &[usize],
    lo: &[i64],
    hi: &[i64],
    interior: &[u64],
) -> (Vec<f64>, Vec<usize>) {
    let k: Vec<i64> = interior.iter().map(|&i| i as i64 + 1).collect();
    let out: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(a, &d)| {
            let n = if d == 0 { 0 } else { (d as i64 - 1) * k[a] + 1 };
            (n + lo[a] + hi[a]).max(0) as usize
        })
        .collect();
    let n: usize = out.iter().product();
    let mut y = vec![0.0; n];
    'outer: for (e, yv) in y.iter_mut().enumerate() {
        let mut rem = e;
        let mut src = 0usize;
        let mut stride = 1usize;
        for a in (0..out.len()).rev() {
            let j = (rem % out[a]) as i64 - lo[a];
            rem /= out[a];
            if j < 0 || j % k[a] != 0 || j / k[a] >= shape[a] as i64 {
                continue 'outer;
            }
            src += (j / k[a]) as usize * stride;
            stride *= shape[a];
        }
        *yv = x[src];
    }
    (y, out)
}

/// `Y[n, p, q, f] = Σ_c X[n, p, q, g·Cg + c] · conj(W[p, q, c, f])` for `X: [n, p, q, c, 2]`,
/// `W: [p, q, c/groups, f, 2]`.
pub fn spectral_mul(x: &[f64], xs: [usize; 4], w: &[f64], f: usize, groups: usize) -> Vec<f64> {
    let [n, p, q, c] = xs;
    let cg = c / groups.max(1);
    let fg = f / groups.max(1);
    let mut y = vec![0.0; n * p * q * f * 2];
    for b in 0..n {
        for pq in 0..p * q {
            for o in 0..f {
                let g = o / fg.max(1);
                let (mut re, mut im) = (0.0, 0.0);
                for t in 0..cg {
                    let xi = ((b * p * q + pq) * c + g * cg + t) * 2;
                    let wi = ((pq * cg + t) * f + o) * 2;
                    let (xr, xm, wr, wm) = (x[xi], x[xi + 1], w[wi], w[wi + 1]);
                    re += xr * wr + xm * wm;
                    im += xm * wr - xr * wm;
                }
                let yi = ((b * p * q + pq) * f + o) * 2;
                y[yi] = re;
                y[yi + 1] = im;
            }
        }
    }
    y
}
