//! Every op against an f64 reference, on random shapes that are not multiples of the tile
//! (so masks matter), for f32 and bf16 inputs, including 1×1 and empty edges.
//!
//! One test body per behaviour, instantiated for each backend by `backend_tests!` (cpu now; the
//! simulator joins when it lands).

use tessera::{Device, Element, Float, Tensor, bf16, f16};
use tessera_workspace::reference::{self, rel_error};

/// Shapes chosen to straddle tile edges: 1×1, empty, primes, just over a tile.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (0, 5, 3),
    (3, 0, 4),
    (5, 7, 0),
    (37, 61, 29),
    // Skinny: one or two rows (the unpacked GEMM), a few rows of a 128-row tile.
    (1, 130, 300),
    (2, 70, 33),
    (8, 65, 130),
    (129, 67, 131),
    (200, 257, 100),
];

thread_local! {
    /// The device the current test body runs on (set by `backend_tests!`).
    static DEVICE: std::cell::RefCell<Device> = const { std::cell::RefCell::new(Device::Cpu) };
}

/// Random inputs placed on the backend under test.
fn randn<T: Element>(shape: &[usize], seed: u64) -> Tensor<T> {
    Tensor::randn(shape, seed)
        .to(&DEVICE.with(|d| d.borrow().clone()))
        .unwrap()
}

fn tol<T: Element>() -> f64 {
    if T::DTYPE == tessera::DType::F32 {
        1e-5
    } else {
        1e-2
    }
}

fn check(name: &str, got: &[f64], want: &[f64], tol: f64) {
    let e = rel_error(got, want);
    assert!(e < tol, "{name}: relative error {e:e} ≥ {tol:e}");
}

fn matmul_case<T: Element>(
    seed: u64,
    f: impl Fn(&Tensor<T>, &Tensor<T>) -> tessera::Result<Tensor<f32>>,
) {
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let a = randn::<T>(&[m, k], seed + i as u64);
        let b = randn::<T>(&[k, n], seed + 100 + i as u64);
        let y = f(&a, &b).unwrap();
        assert_eq!(y.shape(), &[m, n]);
        let want = reference::matmul(&a.to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), m, k, n);
        // Inputs are exact in f64; only accumulation differs: f32 tolerance applies to both.
        check(
            &format!("matmul {m}x{k}x{n}"),
            &y.to_f64_vec().unwrap(),
            &want,
            1e-5,
        );
    }
}

fn linear_gelu_case<T: Element>(
    seed: u64,
    f: impl Fn(&Tensor<T>, &Tensor<T>, &Tensor<f32>) -> tessera::Result<Tensor<f32>>,
) {
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let x = randn::<T>(&[m, k], seed + i as u64);
        let w = randn::<T>(&[k, n], seed + 50 + i as u64);
        let b = randn::<f32>(&[n], seed + 90 + i as u64);
        let y = f(&x, &w, &b).unwrap();
        let mut want =
            reference::matmul(&x.to_f64_vec().unwrap(), &w.to_f64_vec().unwrap(), m, k, n);
        let bv = b.to_f64_vec().unwrap();
        for (j, v) in want.iter_mut().enumerate() {
            *v = reference::gelu(*v + bv[j % n.max(1)]);
        }
        check(
            &format!("linear+bias+gelu {m}x{k}x{n}"),
            &y.to_f64_vec().unwrap(),
            &want,
            1e-5,
        );
    }
}

fn rows_case(
    seed: u64,
    name: &str,
    f: impl Fn(&Tensor<f32>, &Tensor<f32>, &Tensor<f32>) -> tessera::Result<Tensor<f32>>,
    r: impl Fn(&[f64], &[f64], &[f64]) -> Vec<f64>,
) {
    for (i, &(rows, cols, _)) in SHAPES.iter().enumerate() {
        let x = randn::<f32>(&[rows, cols], seed + i as u64);
        let g = randn::<f32>(&[cols], seed + 7 + i as u64);
        let b = randn::<f32>(&[cols], seed + 9 + i as u64);
        let y = f(&x, &g, &b).unwrap();
        assert_eq!(y.shape(), &[rows, cols]);
        let (xv, gv, bv) = (
            x.to_f64_vec().unwrap(),
            g.to_f64_vec().unwrap(),
            b.to_f64_vec().unwrap(),
        );
        let want: Vec<f64> = xv
            .chunks(cols.max(1))
            .flat_map(|row| r(row, &gv, &bv))
            .collect();
        check(
            &format!("{name} {rows}x{cols}"),
            &y.to_f64_vec().unwrap(),
            &want[..y.numel()],
            1e-5,
        );
    }
}

fn layernorm_ref(row: &[f64], g: &[f64], b: &[f64]) -> Vec<f64> {
    let n = row.len() as f64;
    let mean = row.iter().sum::<f64>() / n;
    let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    row.iter()
        .enumerate()
        .map(|(j, x)| (x - mean) / (var + 1e-5).sqrt() * g[j] + b[j])
        .collect()
}

fn rmsnorm_ref(row: &[f64], g: &[f64], _b: &[f64]) -> Vec<f64> {
    let ms = row.iter().map(|x| x * x).sum::<f64>() / row.len() as f64;
    row.iter()
        .enumerate()
        .map(|(j, x)| x / (ms + 1e-6).sqrt() * g[j])
        .collect()
}

/// Output tolerance of a kernel returning `T` (normwise, against f64 on the inputs as stored):
/// f32 accumulation, then one rounding to `T`.
fn out_tol<T: Element>() -> f64 {
    match T::DTYPE {
        tessera::DType::F32 => 2e-5,
        tessera::DType::F16 => 2e-3,
        _ => 1e-2,
    }
}

/// Every generic library kernel (`<T: Float>`) at `T`, against f64 references on the inputs
/// as stored in `T`.
fn generic_case<T: Float>(seed: u64) {
    let tol = out_tol::<T>();
    for (i, &(r, k, c)) in SHAPES.iter().enumerate() {
        let s = seed + 10 * i as u64;
        let x = randn::<T>(&[r, c], s);
        let y = randn::<T>(&[r, c], s + 1);
        let g = randn::<T>(&[c], s + 2);
        let b = randn::<T>(&[c], s + 3);
        let (xv, yv, gv, bv) = (
            x.to_f64_vec().unwrap(),
            y.to_f64_vec().unwrap(),
            g.to_f64_vec().unwrap(),
            b.to_f64_vec().unwrap(),
        );
        let name = |op: &str| format!("{op} {} {r}x{c}", T::DTYPE);
        let rows = |f: &dyn Fn(&[f64]) -> Vec<f64>| -> Vec<f64> {
            xv.chunks(c.max(1)).flat_map(f).collect::<Vec<_>>()[..r * c].to_vec()
        };
        let got = |t: tessera::Result<Tensor<T>>| t.unwrap().to_f64_vec().unwrap();
        let sum: Vec<f64> = xv.iter().zip(&yv).map(|(a, b)| a + b).collect();
        check(&name("add"), &got(tessera_kernels::add(&x, &y)), &sum, tol);
        let prod: Vec<f64> = xv
            .iter()
            .enumerate()
            .map(|(j, a)| a * gv[j % c.max(1)])
            .collect();
        check(&name("mul"), &got(tessera_kernels::mul(&x, &g)), &prod, tol);
        let ge: Vec<f64> = xv.iter().map(|a| reference::gelu(*a)).collect();
        check(&name("gelu"), &got(tessera_kernels::gelu(&x)), &ge, tol);
        let sm = rows(&|row| reference::softmax(row, row.len()));
        check(
            &name("softmax"),
            &got(tessera_kernels::softmax(&x)),
            &sm,
            tol,
        );
        let ln = rows(&|row| layernorm_ref(row, &gv, &bv));
        check(
            &name("layernorm"),
            &got(tessera_kernels::layernorm(&x, &g, &b)),
            &ln,
            tol,
        );
        let rms = rows(&|row| rmsnorm_ref(row, &gv, &bv));
        check(
            &name("rmsnorm"),
            &got(tessera_kernels::rmsnorm(&x, &g)),
            &rms,
            tol,
        );
        // Matmuls: [r, k] · [k, c].
        let a = randn::<T>(&[r, k], s + 4);
        let w = randn::<T>(&[k, c], s + 5);
        let bias = randn::<f32>(&[c], s + 6);
        let mm = reference::matmul(&a.to_f64_vec().unwrap(), &w.to_f64_vec().unwrap(), r, k, c);
        check(
            &name("matmul"),
            &got(tessera_kernels::matmul(&a, &w)),
            &mm,
            tol,
        );
        let bb = bias.to_f64_vec().unwrap();
        let lg: Vec<f64> = mm
            .iter()
            .enumerate()
            .map(|(j, v)| reference::gelu(v + bb[j % c.max(1)]))
            .collect();
        check(
            &name("linear_bias_gelu"),
            &got(tessera_kernels::linear_bias_gelu(&a, &w, &bias)),
            &lg,
            tol,
        );
        let a3 = a.clone().reshape(&[1, r, k]).unwrap();
        let w3 = w.clone().reshape(&[1, k, c]).unwrap();
        check(
            &name("matmul_batched"),
            &got(tessera_kernels::matmul_batched(&a3, &w3)),
            &mm,
            tol,
        );
    }
}

/// `(N, H, W, C, KH, KW, F, stride, padding, dilation, groups)`: stride 2, padding, dilation
/// 2, groups 1 / 2 / C (depthwise), odd sizes that straddle the tiles, batch > 1, a 1×1.
type ConvCase = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    u64,
    u64,
    u64,
    u64,
);
const CONVS: &[ConvCase] = &[
    (2, 9, 11, 6, 3, 3, 10, 2, 1, 1, 1),
    (1, 13, 10, 8, 3, 3, 6, 1, 2, 2, 2),
    (3, 7, 9, 5, 3, 3, 5, 1, 1, 1, 5),
    (1, 11, 7, 6, 2, 3, 10, 2, 0, 2, 2),
    (2, 12, 12, 16, 3, 3, 24, 1, 1, 1, 1),
    (1, 5, 5, 3, 1, 1, 130, 1, 0, 1, 1),
];

/// Direct f64 loop: `y[n, oh, ow, f] = Σ x[n, oh·s + kh·d − p, ow·s + kw·d − p, g·Cg + c] ·
/// w[kh, kw, c, f]`, then `relu(y + b)` when a bias is given.
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f64],
    w: &[f64],
    b: Option<&[f64]>,
    (n, h, wd, c, kh, kw, f, s, p, d, g): ConvCase,
) -> Vec<f64> {
    let (s, p, d, g) = (s as i64, p as i64, d as i64, g as usize);
    let oh = ((h as i64 + 2 * p - d * (kh as i64 - 1) - 1) / s + 1) as usize;
    let ow = ((wd as i64 + 2 * p - d * (kw as i64 - 1) - 1) / s + 1) as usize;
    let (cg, fg) = (c / g, f / g);
    let mut y = vec![0f64; n * oh * ow * f];
    for b0 in 0..n {
        for y0 in 0..oh {
            for x0 in 0..ow {
                for fo in 0..f {
                    let gi = fo / fg;
                    let mut acc = 0f64;
                    for i in 0..kh {
                        for j in 0..kw {
                            let iy = (y0 as i64) * s + i as i64 * d - p;
                            let ix = (x0 as i64) * s + j as i64 * d - p;
                            if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                continue;
                            }
                            for ci in 0..cg {
                                let xi =
                                    ((b0 * h + iy as usize) * wd + ix as usize) * c + gi * cg + ci;
                                acc += x[xi] * w[((i * kw + j) * cg + ci) * f + fo];
                            }
                        }
                    }
                    if let Some(b) = b {
                        acc = (acc + b[fo]).max(0.0);
                    }
                    y[((b0 * oh + y0) * ow + x0) * f + fo] = acc;
                }
            }
        }
    }
    y
}

/// `tessera_kernels::conv2d` (implicit GEMM) against the direct loop, plain and with the
/// fused bias + ReLU epilogue. Inputs are exact in both; only the f32 accumulation order
/// differs, so bf16 inputs get the f32 tolerance scaled by their larger products' spread.
fn conv_case<T: Element + Float>(seed: u64) {
    let tol = if T::DTYPE == tessera::DType::F32 {
        1e-5
    } else {
        1e-4
    };
    for (i, &cv) in CONVS.iter().enumerate() {
        let (n, h, wd, c, kh, kw, f, s, p, d, g) = cv;
        let x = randn::<T>(&[n, h, wd, c], seed + i as u64);
        let w = randn::<T>(&[kh, kw, c / g as usize, f], seed + 20 + i as u64);
        let b = randn::<f32>(&[f], seed + 40 + i as u64);
        let cfg = tessera_kernels::conv::Conv2d {
            stride: [s, s],
            padding: [p, p],
            dilation: [d, d],
            groups: g,
        };
        let (xv, wv) = (x.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
        let name = format!("conv2d {:?} {cv:?}", T::DTYPE);
        let y = tessera_kernels::conv2d(&x, &w, None, &cfg).unwrap();
        check(
            &name,
            &y.to_f64_vec().unwrap(),
            &conv_ref(&xv, &wv, None, cv),
            tol,
        );
        let y = tessera_kernels::conv2d(&x, &w, Some(&b), &cfg).unwrap();
        let bv = b.to_f64_vec().unwrap();
        check(
            &format!("{name} + bias, relu"),
            &y.to_f64_vec().unwrap(),
            &conv_ref(&xv, &wv, Some(&bv), cv),
            tol,
        );
    }
}

macro_rules! backend_tests {
    ($($backend:ident => $device:expr),* $(,)?) => {$(
        mod $backend {
            use super::*;
            fn device() -> Device {
                let d = $device;
                DEVICE.with(|x| *x.borrow_mut() = d.clone());
                d
            }

            #[test] fn matmul_f32() { device(); matmul_case::<f32>(11, |a, b| tessera_kernels::matmul(a, b)); }
            #[test] fn matmul_bf16() { device(); matmul_case::<bf16>(12, |a, b| tessera_kernels::matmul_bf16_f32(a, b)); }
            #[test] fn linear_bias_gelu_f32() { device(); linear_gelu_case::<f32>(13, |x, w, b| tessera_kernels::linear_bias_gelu(x, w, b)); }
            #[test] fn linear_bias_gelu_bf16() { device(); linear_gelu_case::<bf16>(14, |x, w, b| tessera_kernels::linear_bias_gelu_bf16_f32(x, w, b)); }
            #[test] fn softmax() { device(); rows_case(15, "softmax", |x, _, _| tessera_kernels::softmax(x), |r, _, _| reference::softmax(r, r.len())); }
            #[test] fn layernorm() { device(); rows_case(16, "layernorm", |x, g, b| tessera_kernels::layernorm(x, g, b), layernorm_ref); }
            #[test] fn rmsnorm() { device(); rows_case(17, "rmsnorm", |x, g, _| tessera_kernels::rmsnorm(x, g), rmsnorm_ref); }
            #[test] fn batched_matmul() {
                let _ = device();
                for &(bt, m, k, n) in &[(1, 1, 1, 1), (3, 17, 9, 33), (2, 130, 70, 65), (0, 4, 4, 4)] {
                    let a = randn::<f32>(&[bt, m, k], 21);
                    let c = randn::<f32>(&[bt, k, n], 22);
                    let y = tessera_kernels::matmul_batched(&a, &c).unwrap();
                    let (av, cv) = (a.to_f64_vec().unwrap(), c.to_f64_vec().unwrap());
                    let want: Vec<f64> = (0..bt).flat_map(|i| reference::matmul(&av[i * m * k..(i + 1) * m * k], &cv[i * k * n..(i + 1) * k * n], m, k, n)).collect();
                    check("batched matmul", &y.to_f64_vec().unwrap(), &want, 1e-5);
                }
            }
            #[test] fn conv2d_f32() { device(); conv_case::<f32>(61); }
            #[test] fn conv2d_bf16() { device(); conv_case::<bf16>(62); }
            #[test] fn tile_programs() { device(); tile_programs_case(); }
            #[test] fn generic_f32() { device(); generic_case::<f32>(101); }
            #[test] fn generic_bf16() { device(); generic_case::<bf16>(102); }
            #[test] fn generic_f16() { device(); generic_case::<f16>(103); }
            #[test] fn elementwise_broadcast() {
                device();
                for (i, &(r, c, _)) in SHAPES.iter().enumerate() {
                    let x = randn::<f32>(&[r, c], 31 + i as u64);
                    let y = randn::<f32>(&[r, c], 41 + i as u64);
                    let v = randn::<f32>(&[c], 51 + i as u64);
                    let (xv, yv, vv) = (x.to_f64_vec().unwrap(), y.to_f64_vec().unwrap(), v.to_f64_vec().unwrap());
                    let s: Vec<f64> = xv.iter().zip(&yv).map(|(a, b)| a + b).collect();
                    check("add", &tessera_kernels::add(&x, &y).unwrap().to_f64_vec().unwrap(), &s, 1e-6);
                    let p: Vec<f64> = xv.iter().enumerate().map(|(j, a)| a * vv[j % c.max(1)]).collect();
                    check("mul row-broadcast", &tessera_kernels::mul(&x, &v).unwrap().to_f64_vec().unwrap(), &p, 1e-6);
                    let g: Vec<f64> = xv.iter().map(|a| reference::gelu(*a)).collect();
                    check("gelu", &tessera_kernels::gelu(&x).unwrap().to_f64_vec().unwrap(), &g, 1e-6);
                }
            }
        }
    )*};
}

backend_tests!(
    cpu => Device::cpu(),
    sim_sm80 => Device::sim(),
    sim_sm89 => Device::sim_arch(tessera::ir::target::ptx::Arch::Sm89),
    sim_sm90a => Device::sim_arch(tessera::ir::target::ptx::Arch::Sm90a),
);

#[test]
fn shape_mismatch_is_an_error_naming_dim_and_sizes() {
    let a = Tensor::<f32>::randn(&[4, 5], 1);
    let b = Tensor::<f32>::randn(&[6, 3], 2);
    let e = tessera_kernels::matmul(&a, &b).unwrap_err().to_string();
    assert!(
        e.contains("dim `K` is 5 (from `x`)") && e.contains("`w` has 6"),
        "{e}"
    );
    let e = tessera_kernels::matmul(&a, &Tensor::<f32>::randn(&[5], 3))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`w` must have rank 2") && e.contains("got shape [5]"),
        "{e}"
    );
    // A dim bound by the first parameter and met again by the third: the error names the
    // third, the size it has, and the parameter that bound the dim.
    let x = Tensor::<f32>::randn(&[4, 5], 4);
    let (g, b) = (Tensor::<f32>::randn(&[5], 5), Tensor::<f32>::randn(&[7], 6));
    let e = tessera_kernels::layernorm(&x, &g, &b).unwrap_err();
    match &e {
        tessera::Error::DimMismatch {
            dim,
            param,
            bound_by,
            expected,
            got,
            ..
        } => assert_eq!(
            (
                dim.as_str(),
                param.as_str(),
                bound_by.as_str(),
                *expected,
                *got
            ),
            ("C", "beta", "`x`", 5, 7),
            "{e}"
        ),
        _ => panic!("not a dim mismatch: {e}"),
    }
    // The same launch with matching sizes runs (the binding kept no state from the error).
    let b = Tensor::<f32>::randn(&[5], 6);
    assert_eq!(
        tessera_kernels::layernorm(&x, &g, &b).unwrap().shape(),
        &[4, 5]
    );
}

#[test]
fn tolerance_helper_is_strict() {
    assert!(tol::<f32>() < tol::<bf16>());
    assert!(rel_error(&[1.0, 2.0], &[1.0, 2.1]) > 1e-2);
    assert!(rel_error(&[f64::NAN], &[1.0]).is_infinite());
}

fn tile_programs_case() {
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let a = randn::<f32>(&[m, k], 60 + i as u64);
        let b = randn::<f32>(&[k, n], 70 + i as u64);
        let mut c = Tensor::<f32>::zeros_on(&[m, n], a.device()).unwrap();
        tessera_kernels::tiled::matmul_tiled::launch(&a, &b, &mut c).unwrap();
        check(
            "tile! matmul",
            &c.to_f64_vec().unwrap(),
            &reference::matmul(&a.to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), m, k, n),
            1e-5,
        );
        let mut c2 = Tensor::<f32>::zeros_on(&[m, n], a.device()).unwrap();
        tessera_kernels::tiled::matmul_tiled::launch_with(
            &[("BM", 16), ("BK", 8)],
            &a,
            &b,
            &mut c2,
        )
        .unwrap();
        assert_eq!(
            c.to_vec().unwrap(),
            c2.to_vec()
                .unwrap()
                .iter()
                .zip(c.to_vec().unwrap())
                .map(|(x, y)| if (x - y).abs() < 1e-3 { y } else { *x })
                .collect::<Vec<_>>()
        );
        let x = randn::<f32>(&[m, k.max(1) * 3], 80 + i as u64);
        let cols = x.shape()[1];
        let mut y = Tensor::<f32>::zeros_on(x.shape(), x.device()).unwrap();
        tessera_kernels::tiled::softmax_rows::launch(&x, &mut y).unwrap();
        check(
            "tile! softmax",
            &y.to_f64_vec().unwrap(),
            &reference::softmax(&x.to_f64_vec().unwrap(), cols),
            1e-5,
        );
    }
}

// ---- The spectral path: fft / ifft, the layout ops, the spectral convolution ----

/// A kernel compiled at run time from Graph IR text: FFT lengths and pads are constants, so
/// each shape is its own definition (the macro would need one item per shape).
fn graph_kernel(text: String) -> &'static tessera::KernelDef {
    let name = text[text.find('@').unwrap() + 1..text.find('(').unwrap()].to_string();
    let name: &'static str = Box::leak(name.into_boxed_str());
    let text: &'static str = Box::leak(text.into_boxed_str());
    Box::leak(Box::new(tessera::KernelDef::new(name, text, &[])))
}

fn shape_text(s: &[usize]) -> String {
    let d: Vec<String> = s.iter().map(|x| x.to_string()).collect();
    format!("f32[{}]", d.join(", "))
}

/// One op of one operand: `graph @name(%x: <in>) -> <out> { %1 = <op> %x <attrs> : <out> }`.
fn unary_graph(
    name: &str,
    input: &[usize],
    op: &str,
    output: &[usize],
) -> &'static tessera::KernelDef {
    let (i, o) = (shape_text(input), shape_text(output));
    let (op, attrs) = op.split_once(' ').unwrap_or((op, ""));
    graph_kernel(format!(
        "graph @{name}(%x: {i}) -> {o} {{\n  %1 = {op} %x {attrs} : {o}\n  return %1\n}}\n"
    ))
}

/// `fft` / `ifft` against the naive f64 DFT for every power-of-two length up to the limit, on
/// batch layouts with the transform axis last, first and in the middle; `ifft(fft(x)) ≈ x`.
fn fft_case() {
    let max = tessera::ir::graph::FFT_MAX_LENGTH as usize;
    let mut l = 1;
    let mut seed = 700;
    while l <= max {
        // (shape, axis): the axis last (many short rows), first (columns), in the middle
        let mut layouts = vec![
            (vec![3, l, 2], 1),
            (vec![l, 5, 2], 0),
            (vec![2, l, 3, 2], 1),
        ];
        if l >= 1024 {
            layouts.truncate(2);
        }
        for (shape, axis) in layouts {
            seed += 1;
            let x = randn::<f32>(&shape, seed);
            let xv = x.to_f64_vec().unwrap();
            for inverse in [false, true] {
                let op = if inverse { "ifft" } else { "fft" };
                let k = unary_graph(
                    &format!("{op}_{l}_{axis}_{}", shape.len()),
                    &shape,
                    &format!("{op} axis={axis}"),
                    &shape,
                );
                let y = k.launch::<f32>(&[x.arg()]).unwrap();
                let want = tessera::ir::reference::ops::dft(&xv, &shape, axis, inverse);
                check(
                    &format!("{op} {shape:?} axis {axis}"),
                    &y.to_f64_vec().unwrap(),
                    &want,
                    2e-5,
                );
            }
            let name = format!("roundtrip_{l}_{axis}_{}", shape.len());
            let s = shape_text(&shape);
            let k = graph_kernel(format!(
                "graph @{name}(%x: {s}) -> {s} {{\n  %1 = fft %x axis={axis} : {s}\n  %2 = ifft %1 axis={axis} : {s}\n  return %2\n}}\n"
            ));
            let y = k.launch::<f32>(&[x.arg()]).unwrap();
            check(
                &format!("ifft(fft(x)) {shape:?}"),
                &y.to_f64_vec().unwrap(),
                &xv,
                2e-5,
            );
        }
        l *= 2;
    }
}

/// `complex`, `real`, `pad` (grow, crop, both, on the last axis and inner axes),
/// `causal_mask` (alone and under a softmax with no matmul after it) and `spectral_mul` (with
/// groups) against their f64 references.
fn layout_case() {
    use tessera::ir::reference::ops;
    let x = randn::<f32>(&[5, 37], 801);
    let xv = x.to_f64_vec().unwrap();
    let k = unary_graph("complex_5x37", &[5, 37], "complex", &[5, 37, 2]);
    check(
        "complex",
        &k.launch::<f32>(&[x.arg()]).unwrap().to_f64_vec().unwrap(),
        &ops::complex(&xv),
        0.0 + 1e-7,
    );
    let z = randn::<f32>(&[3, 4, 37, 2], 802);
    let zv = z.to_f64_vec().unwrap();
    let k = unary_graph("real_3x4x37", &[3, 4, 37, 2], "real", &[3, 4, 37]);
    check(
        "real",
        &k.launch::<f32>(&[z.arg()]).unwrap().to_f64_vec().unwrap(),
        &ops::real(&zv),
        1e-7,
    );
    // (shape, lo, hi, interior): the last three with interior padding (zero insertion) on
    // the last padded axis, on a leading axis, and on an axis before the last padded one.
    for (i, (shape, lo, hi, int)) in [
        (vec![6, 9], vec![1, 3], vec![-2, 2], vec![0, 0]),
        (
            vec![2, 5, 4, 3, 2],
            vec![0, 2, -1, 0, 0],
            vec![0, 1, 3, 0, 0],
            vec![0; 5],
        ),
        (vec![4, 7, 3], vec![-1, 0, 2], vec![2, 0, -1], vec![0; 3]),
        (vec![40], vec![-3], vec![5], vec![0]),
        (
            vec![2, 5, 4, 3],
            vec![0, 1, -1, 0],
            vec![0, -1, 2, 0],
            vec![0, 1, 2, 0],
        ),
        (vec![3, 4, 5], vec![1, 0, 0], vec![0, 2, 0], vec![2, 0, 0]),
        (vec![4, 7, 3], vec![-1, 0, 2], vec![2, 0, -1], vec![0, 3, 0]),
    ]
    .into_iter()
    .enumerate()
    {
        let x = randn::<f32>(&shape, 810 + i as u64);
        let (want, out) = ops::pad_interior(&x.to_f64_vec().unwrap(), &shape, &lo, &hi, &int);
        let attrs = if int.iter().any(|&k| k != 0) {
            format!("pad lo={lo:?} hi={hi:?} interior={int:?}")
        } else {
            format!("pad lo={lo:?} hi={hi:?}")
        };
        let k = unary_graph(&format!("pad_{i}"), &shape, &attrs, &out);
        let y = k.launch::<f32>(&[x.arg()]).unwrap();
        assert_eq!(y.shape(), out.as_slice());
        check(
            &format!("pad {shape:?} {lo:?} {hi:?} {int:?}"),
            &y.to_f64_vec().unwrap(),
            &want,
            1e-7,
        );
    }
    for (i, shape) in [vec![2, 5, 7], vec![3, 9, 4], vec![1, 1]]
        .into_iter()
        .enumerate()
    {
        let r = shape.len();
        let x = randn::<f32>(&shape, 820 + i as u64);
        let xv = x.to_f64_vec().unwrap();
        let masked = ops::causal_mask(&xv, shape[r - 2], shape[r - 1]);
        let k = unary_graph(&format!("causal_{i}"), &shape, "causal_mask", &shape);
        let y = k.launch::<f32>(&[x.arg()]).unwrap().to_f64_vec().unwrap();
        assert!(
            y.iter()
                .zip(&masked)
                .all(|(a, b)| a == b || (*a as f32) == (*b as f32)),
            "causal_mask {shape:?}"
        );
        let s = shape_text(&shape);
        let k = graph_kernel(format!(
            "graph @causal_softmax_{i}(%x: {s}) -> {s} {{\n  %1 = causal_mask %x : {s}\n  %2 = softmax %1 : {s}\n  return %2\n}}\n"
        ));
        let y = k.launch::<f32>(&[x.arg()]).unwrap();
        check(
            "softmax(causal_mask(x))",
            &y.to_f64_vec().unwrap(),
            &ops::softmax_rows(&masked, shape[r - 1]),
            1e-6,
        );
    }
    for (i, (xs, ws, groups)) in [
        ([2, 4, 4, 6], [4, 4, 3, 4], 2usize),
        ([1, 8, 2, 5], [8, 2, 5, 37], 1),
    ]
    .into_iter()
    .enumerate()
    {
        let mut xsh = xs.to_vec();
        xsh.push(2);
        let mut wsh = ws.to_vec();
        wsh.push(2);
        let ysh = vec![xs[0], xs[1], xs[2], ws[3], 2];
        let x = randn::<f32>(&xsh, 830 + i as u64);
        let w = randn::<f32>(&wsh, 840 + i as u64);
        let want = ops::spectral_mul(
            &x.to_f64_vec().unwrap(),
            xs,
            &w.to_f64_vec().unwrap(),
            ws[3],
            groups,
        );
        let (a, b, o) = (shape_text(&xsh), shape_text(&wsh), shape_text(&ysh));
        let k = graph_kernel(format!(
            "graph @smul_{i}(%x: {a}, %w: {b}) -> {o} {{\n  %2 = spectral_mul %x, %w groups={groups} : {o}\n  return %2\n}}\n"
        ));
        let y = k.launch::<f32>(&[x.arg(), w.arg()]).unwrap();
        check(
            &format!("spectral_mul {xs:?} {ws:?} groups {groups}"),
            &y.to_f64_vec().unwrap(),
            &want,
            1e-5,
        );
    }
}

/// The spectral convolution source: a 31 × 31 filter over 32 × 32 images with 8 channels, the
/// smallest such shape the cost guard sends to the transforms (64 × 64 of them).
const SPECTRAL_CONV: &str =
    "graph @spectral_conv(%x: f32[N, 32, 32, 8], %w: f32[31, 31, 8, 8]) -> f32[N, 32, 32, 8] {
  %2 = conv2d %x, %w stride=[1, 1] padding=[15, 15] dilation=[1, 1] groups=1 : f32[N, 32, 32, 8]
  return %2
}
";

/// A conv2d with a large filter: the `spectral_conv` rewrite fires (the fusion trace names it
/// with both costs), and the kernels it leaves (pad, complex, fft, spectral_mul, ifft, real)
/// agree with a direct f64 convolution loop.
fn spectral_conv_case() {
    let k = graph_kernel(SPECTRAL_CONV.to_string());
    let trace = k.compiled().unwrap().trace();
    assert!(
        trace.contains("spectral_conv") && trace.contains("applied"),
        "{trace}"
    );
    assert!(
        trace.contains("before") && trace.contains("after"),
        "{trace}"
    );
    assert!(trace.contains("spectral_mul"), "{trace}");
    let c = tessera::ir::graph::Conv2d {
        padding: [15, 15],
        ..Default::default()
    };
    for n in [2usize] {
        let x = randn::<f32>(&[n, 32, 32, 8], 900 + n as u64);
        let w = randn::<f32>(&[31, 31, 8, 8], 910 + n as u64);
        let y = k.launch::<f32>(&[x.arg(), w.arg()]).unwrap();
        let (want, s) = tessera::ir::reference::ops::conv2d(
            &x.to_f64_vec().unwrap(),
            [n, 32, 32, 8],
            &w.to_f64_vec().unwrap(),
            [31, 31, 8, 8],
            &c,
        );
        assert_eq!(y.shape(), &s);
        check(
            &format!("spectral conv2d n={n}"),
            &y.to_f64_vec().unwrap(),
            &want,
            2e-5,
        );
    }
}

macro_rules! spectral_tests {
    ($($backend:ident => $device:expr),* $(,)?) => {$(
        mod $backend {
            use super::*;
            fn device() {
                DEVICE.with(|x| *x.borrow_mut() = $device);
            }
            #[test] fn fft_against_the_naive_dft() { device(); fft_case(); }
            #[test] fn layout_ops() { device(); layout_case(); }
            #[test] fn spectral_conv2d() { device(); spectral_conv_case(); }
        }
    )*};
}

mod spectral {
    use super::*;
    spectral_tests!(
        cpu => Device::cpu(),
        sim_sm80 => Device::sim(),
    );
}
