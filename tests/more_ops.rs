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
