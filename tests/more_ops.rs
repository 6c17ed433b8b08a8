//! The remaining Graph IR ops (unary math, binary ops, casts, reductions, transpose) through
//! `#[tessera::kernel]`, against f64 references on random, tile-straddling shapes.

use tessera::prelude::*;
use tessera_workspace::reference::rel_error;

#[tessera::kernel]
fn unary_mix(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    let p = x.abs() + 0.5;
    exp(x) * 0.25 + log(p) - sqrt(p) + rsqrt(p) + tanh(x) + sigmoid(x) + relu(x) - (-x)
}

#[tessera::kernel]
fn binary_mix(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    maximum(x, y) - minimum(x, y) / (y.abs() + 1.0)
}

#[tessera::kernel]
fn bf16_elementwise(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    (x * y + x).cast::<f32>()
}

#[tessera::kernel]
fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    x.sum(1)
}

#[tessera::kernel]
fn row_max(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    x.amax(1)
}

#[tessera::kernel]
fn col_mean(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.mean(0)
}

#[tessera::kernel]
fn transpose_scale(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
    transpose(x) * 2.0
}

const SHAPES: &[(usize, usize)] = &[(1, 1), (0, 3), (3, 0), (7, 13), (37, 300), (130, 67)];

fn f64s<T: Element>(t: &Tensor<T>) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

#[test]
fn unary_and_binary_ops_match_f64() {
    for (i, &(r, c)) in SHAPES.iter().enumerate() {
        let x = Tensor::<f32>::randn(&[r, c], 100 + i as u64);
        let y = Tensor::<f32>::randn(&[r, c], 200 + i as u64);
        let (xv, yv) = (f64s(&x), f64s(&y));
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let want: Vec<f64> = xv
            .iter()
            .map(|&v| {
                let p = v.abs() + 0.5;
                v.exp() * 0.25 + p.ln() - p.sqrt()
                    + 1.0 / p.sqrt()
                    + v.tanh()
                    + sig(v)
                    + v.max(0.0)
                    + v
            })
            .collect();
        let e = rel_error(&f64s(&unary_mix(&x).unwrap()), &want);
        assert!(e < 1e-5, "unary {r}x{c}: {e:e}");
        let want: Vec<f64> = xv
            .iter()
            .zip(&yv)
            .map(|(&a, &b)| a.max(b) - a.min(b) / (b.abs() + 1.0))
            .collect();
        let e = rel_error(&f64s(&binary_mix(&x, &y).unwrap()), &want);
        assert!(e < 1e-5, "binary {r}x{c}: {e:e}");
    }
}

#[test]
fn bf16_elementwise_rounds_like_bf16() {
    for (i, &(r, c)) in SHAPES.iter().enumerate() {
        let x = Tensor::<bf16>::randn(&[r, c], 300 + i as u64);
        let y = Tensor::<bf16>::randn(&[r, c], 400 + i as u64);
        let want: Vec<f64> = f64s(&x)
            .iter()
            .zip(f64s(&y))
            .map(|(a, b)| a * b + a)
            .collect();
        let e = rel_error(&f64s(&bf16_elementwise(&x, &y).unwrap()), &want);
        assert!(e < 1e-2, "bf16 {r}x{c}: {e:e}");
    }
}

#[test]
fn reductions_and_transpose_match_f64() {
    for (i, &(r, c)) in SHAPES.iter().enumerate() {
        let x = Tensor::<f32>::randn(&[r, c], 500 + i as u64);
        let xv = f64s(&x);
        let rows: Vec<&[f64]> = if c == 0 {
            vec![&[][..]; r]
        } else {
            xv.chunks(c).collect()
        };
        let sums: Vec<f64> = rows.iter().map(|row| row.iter().sum()).collect();
        let e = rel_error(&f64s(&row_sum(&x).unwrap()), &sums);
        assert!(e < 1e-5, "sum {r}x{c}: {e:e}");
        let maxs: Vec<f64> = rows
            .iter()
            .map(|row| row.iter().cloned().fold(f64::NEG_INFINITY, f64::max))
            .collect();
        let got = row_max(&x).unwrap();
        assert_eq!(got.shape(), &[r]);
        if c > 0 {
            assert_eq!(rel_error(&f64s(&got), &maxs), 0.0, "max is exact");
        }
        let means: Vec<f64> = (0..c)
            .map(|j| (0..r).map(|k| xv[k * c + j]).sum::<f64>() / r as f64)
            .collect();
        if r > 0 {
            let e = rel_error(&f64s(&col_mean(&x).unwrap()), &means);
            assert!(e < 1e-5, "mean {r}x{c}: {e:e}");
        }
        let t: Vec<f64> = (0..c)
            .flat_map(|j| (0..r).map(move |k| (j, k)))
            .map(|(j, k)| 2.0 * xv[k * c + j])
            .collect();
        let got = transpose_scale(&x).unwrap();
        assert_eq!(got.shape(), &[c, r]);
        assert_eq!(rel_error(&f64s(&got), &t), 0.0, "transpose·2 is exact");
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions and softmax over any axis (ranks 1–4), on cpu and sim, against f64.

/// `softmax` and reductions name their axis as `sum(x, axis)` does; negative counts from the
/// end, no axis is the last.
#[tessera::kernel]
fn softmax_mid(x: Tensor<f32, (A, B, C)>) -> Tensor<f32, (A, B, C)> {
    x.softmax(1)
}

#[tessera::kernel]
fn softmax_first_neg(x: Tensor<f32, (A, B, C)>) -> Tensor<f32, (A, B, C)> {
    softmax(x, -3) * 2.0
}

#[tessera::kernel]
fn softmax_1d(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    x.softmax()
}

#[tessera::kernel]
fn softmax_1d_axis(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    softmax(x, 0)
}

#[tessera::kernel]
fn sum_first(x: Tensor<f32, (A, B, C)>) -> Tensor<f32, (B, C)> {
    x.sum(0)
}

#[tessera::kernel]
fn mean_keep_mid(x: Tensor<f32, (A, B, C, D)>) -> Tensor<f32, (A, Const<1>, C, D)> {
    mean_keepdim(x, -3)
}

#[tessera::kernel]
fn amax_two_axes(x: Tensor<f32, (A, B, C)>) -> Tensor<f32, (B,)> {
    amax(x, [0, 2])
}

/// The f64 reference: `op` along `axis` of a row-major tensor of `shape` (reductions drop the
/// axis; softmax keeps the shape).
fn along_axis(x: &[f64], shape: &[usize], axis: usize, op: &str) -> Vec<f64> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let at = |o: usize, k: usize, i: usize| (o * n + k) * inner + i;
    let mut out = Vec::new();
    if op == "softmax" {
        out = vec![0.0; x.len()];
    }
    for o in 0..outer {
        for i in 0..inner {
            let v = || (0..n).map(|k| x[at(o, k, i)]);
            let m = v().fold(f64::NEG_INFINITY, f64::max);
            match op {
                "softmax" => {
                    let z: f64 = v().map(|e| (e - m).exp()).sum();
                    for k in 0..n {
                        out[at(o, k, i)] = (x[at(o, k, i)] - m).exp() / z;
                    }
                }
                "sum" => out.push(v().sum()),
                "mean" => out.push(v().sum::<f64>() / n as f64),
                _ => out.push(m),
            }
        }
    }
    out
}

/// A kernel from Graph IR text: `op` along `axis` of a rank-`rank` f32 tensor (compiled at its
/// first launch; on the simulator its PTX is emitted then).
fn axis_kernel(op: &str, rank: usize, axis: usize, keepdim: bool) -> &'static tessera::KernelDef {
    let dims: Vec<String> = (0..rank).map(|d| format!("D{d}")).collect();
    let out: Vec<String> = dims
        .iter()
        .enumerate()
        .filter_map(|(d, s)| match (d == axis, op == "softmax" || keepdim) {
            (false, _) => Some(s.clone()),
            (true, true) => Some(if op == "softmax" {
                s.clone()
            } else {
                "1".into()
            }),
            (true, false) => None,
        })
        .collect();
    let body = if op == "softmax" {
        format!("softmax %x axis={axis}")
    } else {
        format!("reduce.{op} %x axes=[{axis}] keepdim={keepdim}")
    };
    let name = format!("{op}_r{rank}_a{axis}_k{}", keepdim as u8);
    let text = format!(
        "graph @{name}(%x: f32[{}]) -> f32[{}] {{\n  %1 = {body} : f32[{}]\n  return %1\n}}\n",
        dims.join(", "),
        out.join(", "),
        out.join(", ")
    );
    let text: &'static str = Box::leak(text.into_boxed_str());
    let name: &'static str = Box::leak(name.into_boxed_str());
    Box::leak(Box::new(tessera::KernelDef::new(name, text, &[])))
}

/// Shapes per rank: sizes off every tile, and one dim of size 1.
const AXIS_SHAPES: &[&[usize]] = &[
    &[133],
    &[1],
    &[37, 130],
    &[1, 45],
    &[5, 1, 67],
    &[3, 29, 40],
    &[3, 5, 1, 37],
    &[2, 9, 7, 33],
];

fn check_axis(what: &str, got: &Tensor<f32>, want: &[f64], tol: f64) {
    let e = rel_error(&f64s(got), want);
    assert!(e <= tol, "{what}: relative error {e:e}");
}

/// Every reduction and softmax along every axis of ranks 1–4 (Graph IR text, compiled at run
/// time), and the `#[kernel]` spellings of the axis.
fn every_axis(d: Device) {
    for (s, shape) in AXIS_SHAPES.iter().enumerate() {
        let rank = shape.len();
        let x = Tensor::<f32>::randn(shape, 700 + s as u64);
        let xd = x.to(&d).unwrap();
        let xv = x.to_f64_vec().unwrap();
        for axis in 0..rank {
            for (op, keepdim) in [
                ("sum", false),
                ("mean", true),
                ("max", false),
                ("softmax", false),
            ] {
                let k = axis_kernel(op, rank, axis, keepdim);
                let y: Tensor<f32> = k.launch(&[xd.arg()]).unwrap();
                let mut want_shape = shape.to_vec();
                match (op, keepdim) {
                    ("softmax", _) => {}
                    (_, true) => want_shape[axis] = 1,
                    (_, false) => {
                        want_shape.remove(axis);
                    }
                }
                let what = format!("{op} axis {axis} of {shape:?} on {d:?}");
                assert_eq!(y.shape(), &want_shape[..], "{what}");
                let tol = if op == "max" { 0.0 } else { 1e-5 };
                check_axis(&what, &y, &along_axis(&xv, shape, axis, op), tol);
            }
        }
    }
    // The kernel-language spellings.
    let x3 = Tensor::<f32>::randn(&[4, 37, 9], 801);
    let v3 = x3.to_f64_vec().unwrap();
    let x3d = x3.to(&d).unwrap();
    check_axis(
        "x.softmax(1)",
        &softmax_mid(&x3d).unwrap(),
        &along_axis(&v3, &[4, 37, 9], 1, "softmax"),
        1e-5,
    );
    let two: Vec<f64> = along_axis(&v3, &[4, 37, 9], 0, "softmax")
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    check_axis(
        "softmax(x, -3) * 2",
        &softmax_first_neg(&x3d).unwrap(),
        &two,
        1e-5,
    );
    check_axis(
        "x.sum(0)",
        &sum_first(&x3d).unwrap(),
        &along_axis(&v3, &[4, 37, 9], 0, "sum"),
        1e-5,
    );
    let m: Vec<f64> = along_axis(&v3, &[4, 37, 9], 2, "max");
    let m = along_axis(&m, &[4, 37], 0, "max");
    check_axis("amax(x, [0, 2])", &amax_two_axes(&x3d).unwrap(), &m, 0.0);
    let x4 = Tensor::<f32>::randn(&[2, 13, 1, 70], 802);
    let y = mean_keep_mid(&x4.to(&d).unwrap()).unwrap();
    assert_eq!(y.shape(), &[2, 1, 1, 70]);
    check_axis(
        "mean_keepdim(x, -3)",
        &y,
        &along_axis(&x4.to_f64_vec().unwrap(), &[2, 13, 1, 70], 1, "mean"),
        1e-5,
    );
    for n in [1, 5, 300, 1029] {
        let x1 = Tensor::<f32>::randn(&[n], 803 + n as u64);
        let want = along_axis(&x1.to_f64_vec().unwrap(), &[n], 0, "softmax");
        let x1d = x1.to(&d).unwrap();
        check_axis(
            &format!("1-D softmax [{n}]"),
            &softmax_1d(&x1d).unwrap(),
            &want,
            1e-5,
        );
        check_axis(
            &format!("1-D softmax(x, 0) [{n}]"),
            &softmax_1d_axis(&x1d).unwrap(),
            &want,
            1e-5,
        );
    }
}

mod any_axis {
    use super::*;
    #[test]
    fn on_cpu() {
        every_axis(Device::cpu());
    }
    #[test]
    fn on_sim() {
        every_axis(Device::sim());
    }
}
