//! Every VJP rule against central finite differences of the f64 reference interpreter, on
//! seeded random inputs.

use super::{grad, grad_wrt};
use crate::graph::{self, Graph, Op, parse};
use crate::reference::{Tensor64, eval};

/// Uniform values in `[lo, lo + 2)` from a seeded LCG.
fn random(n: usize, seed: u64, lo: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + 2.0 * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Checks the gradient of every float parameter of `src` on inputs of `shapes` (values in
/// `[lo, lo + 2)`) against `(⟨dy, f(x + h·e_j)⟩ − ⟨dy, f(x − h·e_j)⟩) / 2h` for every
/// element `j`, in f64. Returns the backward graphs.
fn check(src: &str, shapes: &[&[usize]], lo: f64, seed: u64) -> Vec<Graph> {
    check_only(src, shapes, lo, seed, None)
}

/// [`check`] for the parameters named in `only` (all float parameters when `None`).
fn check_only(
    src: &str,
    shapes: &[&[usize]],
    lo: f64,
    seed: u64,
    only: Option<&[&str]>,
) -> Vec<Graph> {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    graph::verify(&g).unwrap();
    let inputs: Vec<Tensor64> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.iter().product();
            Tensor64::new(s.to_vec(), random(n, seed + i as u64, lo))
        })
        .collect();
    let y = eval(&g, &inputs).unwrap();
    let dy = Tensor64::new(y.shape.clone(), random(y.data.len(), seed + 99, -1.0));
    let mut graphs = Vec::new();
    let grads = match only {
        None => grad(&g).unwrap(),
        Some(names) => names
            .iter()
            .map(|p| super::Gradient {
                param: p.to_string(),
                graph: grad_wrt(&g, p).unwrap_or_else(|e| panic!("{e}")),
            })
            .collect(),
    };
    for gr in grads {
        let bw = &gr.graph;
        graph::verify(bw).unwrap();
        // The text form round-trips.
        assert_eq!(parse(&bw.to_string()).unwrap().to_string(), bw.to_string());
        let mut args = inputs.clone();
        args.push(dy.clone());
        let got = eval(bw, &args).unwrap_or_else(|e| panic!("{e}\n{bw}"));
        let p = g
            .params
            .iter()
            .position(|v| matches!(&g.node(*v).op, Op::Param { name, .. } if *name == gr.param))
            .unwrap();
        assert_eq!(got.shape, inputs[p].shape, "d{}\n{bw}", gr.param);
        let h = 1e-5;
        let mut want = Vec::new();
        for j in 0..inputs[p].data.len() {
            let mut plus = inputs.clone();
            plus[p].data[j] += h;
            let mut minus = inputs.clone();
            minus[p].data[j] -= h;
            let fp = dot(&eval(&g, &plus).unwrap().data, &dy.data);
            let fm = dot(&eval(&g, &minus).unwrap().data, &dy.data);
            want.push((fp - fm) / (2.0 * h));
        }
        let scale = want.iter().fold(1e-3f64, |m, x| m.max(x.abs()));
        let err = got
            .data
            .iter()
            .zip(&want)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
            / scale;
        assert!(
            err < 1e-6,
            "@{} d{}: relative error {err:e}\ngot  {:?}\nwant {want:?}\n{bw}",
            g.name,
            gr.param,
            got.data
        );
        graphs.push(gr.graph);
    }
    graphs
}

#[test]
fn unary_ops() {
    for (op, lo) in [
        ("neg", -1.0),
        ("exp", -1.0),
        ("log", 0.5),
        ("sqrt", 0.5),
        ("rsqrt", 0.5),
        ("tanh", -1.0),
        ("sigmoid", -1.0),
        ("relu", -1.0),
        ("abs", -1.0),
        ("gelu", -1.0),
        ("gelu", -4.0),
        ("gelu", 2.0),
    ] {
        let src = format!(
            "graph @u(%x: f32[M, N]) -> f32[M, N] {{\n  %1 = {op} %x : f32[M, N]\n  return %1\n}}\n"
        );
        check(&src, &[&[3, 5]], lo, 1);
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    for op in ["add", "sub", "mul", "div"] {
        // A row vector, a column and a scalar constant broadcast against a matrix.
        let src = format!(
            "graph @b(%x: f32[M, N], %r: f32[N], %c: f32[M, 1]) -> f32[M, N] {{
  %3 = {op} %x, %r : f32[M, N]
  %4 = {op} %c, %3 : f32[M, N]
  %5 = const 0.5 : f32[]
  %6 = {op} %4, %5 : f32[M, N]
  return %6
}}
"
        );
        check(&src, &[&[4, 3], &[3], &[4, 1]], 0.5, 2);
    }
}

#[test]
fn max_and_min_with_broadcasting() {
    for op in ["max", "min"] {
        let src = format!(
            "graph @b(%x: f32[M, N], %r: f32[N]) -> f32[M, N] {{
  %2 = {op} %x, %r : f32[M, N]
  %3 = const 0.25 : f32[]
  %4 = {op} %2, %3 : f32[M, N]
  return %4
}}
"
        );
        check(&src, &[&[4, 3], &[3]], -1.0, 20);
    }
}

#[test]
fn max_min_ties_split_the_cotangent() {
    // max(x, x) = x and min(x, x) = x: each operand gets half, summing to dy.
    for op in ["max", "min"] {
        let src = format!(
            "graph @t(%x: f32[N]) -> f32[N] {{\n  %1 = {op} %x, %x : f32[N]\n  return %1\n}}\n"
        );
        check(&src, &[&[5]], -1.0, 21);
    }
}

#[test]
fn relu_abs_at_zero_are_zero() {
    // The step at exactly 0 (where the one-sided derivatives differ) is 0, not NaN.
    for op in ["relu", "abs"] {
        let g = parse(&format!(
            "graph @z(%x: f32[N]) -> f32[N] {{\n  %1 = {op} %x : f32[N]\n  return %1\n}}\n"
        ))
        .unwrap();
        let bw = grad_wrt(&g, "x").unwrap();
        let x = Tensor64::new(vec![3], vec![0.0, 1e-30, -1e-30]);
        let dy = Tensor64::new(vec![3], vec![2.0, 2.0, 2.0]);
        let got = eval(&bw, &[x, dy]).unwrap().data;
        let want = if op == "relu" {
            [0.0, 2.0, 0.0]
        } else {
            [0.0, 2.0, -2.0]
        };
        assert_eq!(got, want, "{op}");
    }
}

#[test]
fn reduce_max_over_rows_columns_and_keepdim() {
    let src = "graph @rm(%x: f32[M, N]) -> f32[] {
  %1 = reduce.max %x axes=[1] keepdim=false : f32[M]
  %2 = mul %1, %1 : f32[M]
  %3 = reduce.max %2 axes=[0] keepdim=false : f32[]
  %4 = reduce.max %x axes=[0] keepdim=true : f32[1, N]
  %5 = reduce.sum %4 axes=[1] keepdim=false : f32[1]
  %6 = reduce.sum %5 axes=[0] keepdim=false : f32[]
  %7 = add %3, %6 : f32[]
  return %7
}
";
    check(src, &[&[4, 5]], -1.0, 22);
    // A tie: both maxima of a row share the cotangent.
    let g = parse(
        "graph @tie(%x: f32[M, N]) -> f32[M] {\n  %1 = reduce.max %x axes=[1] keepdim=false : f32[M]\n  return %1\n}\n",
    )
    .unwrap();
    let bw = grad_wrt(&g, "x").unwrap();
    let x = Tensor64::new(vec![1, 4], vec![1.0, 3.0, -2.0, 3.0]);
    let dy = Tensor64::new(vec![1], vec![4.0]);
    assert_eq!(eval(&bw, &[x, dy]).unwrap().data, [0.0, 2.0, 0.0, 2.0]);
}

#[test]
fn a_value_used_twice_sums_its_cotangents() {
    let src = "graph @sq(%x: f32[M, N]) -> f32[M, N] {
  %1 = mul %x, %x : f32[M, N]
  %2 = exp %x : f32[M, N]
  %3 = add %1, %2 : f32[M, N]
  return %3
}
";
    check(src, &[&[2, 3]], -1.0, 3);
}

#[test]
fn reductions() {
    let src = "graph @r(%x: f32[M, N]) -> f32[] {
  %1 = reduce.sum %x axes=[1] keepdim=false : f32[M]
  %2 = mul %1, %1 : f32[M]
  %3 = reduce.sum %2 axes=[0] keepdim=false : f32[]
  return %3
}
";
    check(src, &[&[3, 4]], -1.0, 4);
    // mean over a symbolic axis with keepdim, and over a constant leading axis.
    let src = "graph @m(%x: f32[M, N], %y: f32[4, N]) -> f32[M, N] {
  %2 = reduce.mean %x axes=[1] keepdim=true : f32[M, 1]
  %3 = mul %x, %2 : f32[M, N]
  %4 = reduce.mean %y axes=[0] keepdim=false : f32[N]
  %5 = add %3, %4 : f32[M, N]
  return %5
}
";
    check(src, &[&[3, 5], &[4, 5]], -1.0, 5);
}

#[test]
fn matmul_plain_batched_and_shared_weights() {
    let src = "graph @mm(%a: f32[M, K], %b: f32[K, N]) -> f32[M, N] {
  %2 = matmul %a, %b acc=f32 : f32[M, N]
  return %2
}
";
    check(src, &[&[3, 4], &[4, 5]], -1.0, 6);
    let src = "graph @bmm(%a: f32[B, M, K], %b: f32[B, K, N], %w: f32[N, P]) -> f32[B, M, P] {
  %3 = matmul %a, %b acc=f32 : f32[B, M, N]
  %4 = matmul %3, %w acc=f32 : f32[B, M, P]
  return %4
}
";
    check(src, &[&[2, 3, 4], &[2, 4, 2], &[2, 3]], -1.0, 7);
    let src = "graph @mt(%a: f32[M, K], %b: f32[N, K]) -> f32[M, N] {
  %2 = transpose %b : f32[K, N]
  %3 = matmul %a, %2 acc=f32 : f32[M, N]
  return %3
}
";
    check(src, &[&[3, 4], &[2, 4]], -1.0, 8);
}

#[test]
fn softmax() {
    let src = "graph @sm(%x: f32[M, N]) -> f32[M, N] {
  %1 = softmax %x : f32[M, N]
  return %1
}
";
    check(src, &[&[3, 6]], -1.0, 9);
}

#[test]
fn layernorm_and_rmsnorm() {
    let src = "graph @ln(%x: f32[M, N], %g: f32[N], %b: f32[N]) -> f32[M, N] {
  %3 = layernorm %x, %g, %b eps=1e-5 : f32[M, N]
  return %3
}
";
    check(src, &[&[4, 6], &[6], &[6]], -1.0, 10);
    let src = "graph @rms(%x: f32[M, N], %g: f32[N]) -> f32[M, N] {
  %2 = rmsnorm %x, %g eps=1e-5 : f32[M, N]
  return %2
}
";
    check(src, &[&[4, 6], &[6]], -1.0, 11);
}

#[test]
fn attention_plain_and_causal() {
    for causal in [false, true] {
        let src = format!(
            "graph @at(%q: f32[B, S, 4], %k: f32[B, T, 4], %v: f32[B, T, 3]) -> f32[B, S, 3] {{
  %3 = attention %q, %k, %v scale=0.5 causal={causal} : f32[B, S, 3]
  return %3
}}
"
        );
        check(&src, &[&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]], -1.0, 12);
    }
}

#[test]
fn two_layer_mlp_loss() {
    let src = "graph @mlp(%x: f32[M, K], %w1: f32[K, H], %b1: f32[H], %w2: f32[H, N], %b2: f32[N], %t: f32[M, N]) -> f32[] {
  %6 = matmul %x, %w1 acc=f32 : f32[M, H]
  %7 = add %6, %b1 : f32[M, H]
  %8 = tanh %7 : f32[M, H]
  %9 = matmul %8, %w2 acc=f32 : f32[M, N]
  %10 = add %9, %b2 : f32[M, N]
  %11 = sub %10, %t : f32[M, N]
  %12 = mul %11, %11 : f32[M, N]
  %13 = reduce.sum %12 axes=[1] keepdim=false : f32[M]
  %14 = reduce.mean %13 axes=[0] keepdim=false : f32[]
  return %14
}
";
    let graphs = check(
        src,
        &[&[4, 3], &[3, 5], &[5], &[5, 2], &[2], &[4, 2]],
        -1.0,
        13,
    );
    // The bias gradient is a column sum of the pre-activation's cotangent.
    let db1 = &graphs[2];
    assert_eq!(db1.name, "mlp_grad_b1");
    assert!(db1.to_string().contains("reduce.sum"), "{db1}");
}

#[test]
fn an_op_without_a_rule_is_an_error_naming_it() {
    let g = parse(
        "graph @r(%x: f32[1, 4, 4, 2, 2], %y: f32[4, 4, 2, 3, 2]) -> f32[1, 4, 4, 3, 2] {
  %2 = spectral_mul %x, %y groups=1 : f32[1, 4, 4, 3, 2]
  return %2
}
",
    )
    .unwrap();
    let e = grad_wrt(&g, "x").unwrap_err().to_string();
    assert!(
        e.contains("@r: %2 (spectral_mul): no gradient rule for `spectral_mul`"),
        "{e}"
    );
    let e = grad_wrt(&g, "z").unwrap_err().to_string();
    assert!(e.contains("%z") && e.contains("no such parameter"), "{e}");
}

/// `conv2d` over `x: [N, H, W, C]` and `w: [KH, KW, C/groups, F]` (shapes given) with the
/// attributes written in `attrs`, followed by `tanh` so the check sees a nonlinear loss.
fn conv_src(x: [usize; 4], w: [usize; 4], out: [usize; 4], attrs: &str) -> String {
    let t = |s: [usize; 4]| format!("f32[{}, {}, {}, {}]", s[0], s[1], s[2], s[3]);
    format!(
        "graph @cv(%x: {}, %w: {}) -> {} {{\n  %2 = conv2d %x, %w {attrs} : {}\n  %3 = tanh %2 : {}\n  return %3\n}}\n",
        t(x),
        t(w),
        t(out),
        t(out),
        t(out)
    )
}

#[test]
fn conv2d_padding_dilation_groups() {
    // (x, w, out, attributes): plain 3×3 "same"; a padding wider than the kernel (the input
    // gradient crops); dilation 2 with two groups; depthwise (groups = C).
    let cases: [([usize; 4], [usize; 4], [usize; 4], &str); 4] = [
        (
            [2, 5, 4, 3],
            [3, 3, 3, 4],
            [2, 5, 4, 4],
            "stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1",
        ),
        (
            [1, 4, 3, 2],
            [2, 2, 2, 3],
            [1, 7, 4, 3],
            "stride=[1, 1] padding=[2, 1] dilation=[1, 1] groups=1",
        ),
        (
            [1, 6, 5, 4],
            [3, 2, 2, 6],
            [1, 6, 3, 6],
            "stride=[1, 1] padding=[2, 0] dilation=[2, 2] groups=2",
        ),
        (
            [2, 5, 5, 3],
            [3, 3, 1, 3],
            [2, 5, 5, 3],
            "stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=3",
        ),
    ];
    for (i, (x, w, out, attrs)) in cases.into_iter().enumerate() {
        check(&conv_src(x, w, out, attrs), &[&x, &w], -1.0, 30 + i as u64);
    }
}

/// `conv_src` with the output extents computed from the attributes.
fn conv_case(
    x: [usize; 4],
    w: [usize; 4],
    s: [usize; 2],
    p: [usize; 2],
    dl: [usize; 2],
    g: usize,
) -> String {
    let o = |a: usize| (x[1 + a] + 2 * p[a] - dl[a] * (w[a] - 1) - 1) / s[a] + 1;
    let attrs = format!(
        "stride=[{}, {}] padding=[{}, {}] dilation=[{}, {}] groups={g}",
        s[0], s[1], p[0], p[1], dl[0], dl[1]
    );
    conv_src(x, w, [x[0], o(0), o(1), w[3]], &attrs)
}

#[test]
fn conv2d_strided_gradients() {
    // (x, w, stride, padding, dilation, groups): stride 2 "same"-padded; stride 3 with
    // uneven padding; stride 2 with dilation 2 and two groups; depthwise at stride 2;
    // depthwise with channel multiplier 2, strides [3, 2] and dilation [1, 2]; a 1×1 kernel
    // at stride 3 (input rows no output reads get gradient 0).
    type Case = (
        [usize; 4],
        [usize; 4],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
    );
    let cases: [Case; 6] = [
        ([2, 7, 6, 3], [3, 3, 3, 4], [2, 2], [1, 1], [1, 1], 1),
        ([1, 8, 7, 2], [2, 3, 2, 3], [3, 3], [0, 2], [1, 1], 1),
        ([2, 7, 6, 4], [3, 2, 2, 4], [2, 2], [1, 1], [2, 2], 2),
        ([1, 7, 7, 3], [3, 3, 1, 3], [2, 2], [1, 1], [1, 1], 3),
        ([1, 6, 5, 2], [2, 2, 1, 4], [3, 2], [1, 0], [1, 2], 2),
        ([1, 7, 7, 2], [1, 1, 2, 3], [3, 3], [0, 0], [1, 1], 1),
    ];
    for (i, (x, w, s, p, dl, g)) in cases.into_iter().enumerate() {
        let graphs = check(
            &conv_case(x, w, s, p, dl, g),
            &[&x, &w],
            -1.0,
            50 + i as u64,
        );
        // The input gradient is one stride-1 conv2d over `dy` with zeros inserted (beside the
        // recomputed forward conv2d that tanh's derivative reads).
        let dx = graphs[0].to_string();
        let interior = format!("interior=[0, {}, {}, 0]", s[0] - 1, s[1] - 1);
        assert!(dx.contains(&interior), "{dx}");
        assert_eq!(dx.matches("conv2d").count(), 2, "{dx}");
    }
}

#[test]
fn interior_pad_has_no_gradient() {
    let src = "graph @ip(%x: f32[3, 4]) -> f32[5, 4] {
  %1 = pad %x lo=[0, 0] hi=[0, 0] interior=[1, 0] : f32[5, 4]
  return %1
}
";
    let e = grad_wrt(&parse(src).unwrap(), "x").unwrap_err().to_string();
    assert!(
        e.contains("%1 (pad)") && e.contains("interior=[1, 0]"),
        "{e}"
    );
}

#[test]
fn fft_ifft_complex_real_pad() {
    let src = "graph @sp(%x: f32[4, 8, 2], %r: f32[4, 8]) -> f32[4, 9] {
  %2 = fft %x axis=1 : f32[4, 8, 2]
  %3 = complex %r : f32[4, 8, 2]
  %4 = mul %2, %3 : f32[4, 8, 2]
  %5 = ifft %4 axis=0 : f32[4, 8, 2]
  %6 = fft %5 axis=1 : f32[4, 8, 2]
  %7 = pad %6 lo=[1, -2, 0] hi=[-1, 3, 0] : f32[4, 9, 2]
  %8 = real %7 : f32[4, 9]
  %9 = tanh %8 : f32[4, 9]
  return %9
}
";
    check(src, &[&[4, 8, 2], &[4, 8]], -1.0, 41);
}

#[test]
fn causal_mask_under_softmax() {
    let src = "graph @cm(%x: f32[B, 3, 5]) -> f32[B, 3, 5] {
  %1 = causal_mask %x : f32[B, 3, 5]
  %2 = softmax %1 : f32[B, 3, 5]
  return %2
}
";
    check(src, &[&[2, 3, 5]], -1.0, 42);
    // Read by more than a softmax: the general rule, `g · exp(causal_mask(0))`.
    let src = "graph @cm2(%x: f32[B, 3, 5]) -> f32[B, 3, 5] {
  %1 = causal_mask %x : f32[B, 3, 5]
  %2 = softmax %1 : f32[B, 3, 5]
  %3 = exp %1 : f32[B, 3, 5]
  %4 = add %2, %3 : f32[B, 3, 5]
  return %4
}
";
    let graphs = check(src, &[&[2, 3, 5]], -1.0, 43);
    assert_eq!(graphs[0].to_string().matches("causal_mask").count(), 2);
}

/// The number of kernels `compile` makes of `g`, and its fusion trace.
fn plan(g: &Graph, depth: Option<usize>) -> (usize, String) {
    let opts = crate::pipeline::CompileOptions {
        fusion_depth: depth,
        ..Default::default()
    };
    let c = crate::pipeline::compile(g, &opts).unwrap_or_else(|e| panic!("{e}\n{g}"));
    (c.kernels.len(), c.trace())
}

#[test]
fn backward_column_reductions_fuse_into_their_producers() {
    // linear + bias + gelu: db = Σ_rows dY·gelu'(x·w + b). Before pipeline fusion this
    // backward graph compiled to 8 kernels (the reduction re-read an operand another kernel
    // wrote).
    let lg = parse(
        "graph @lg(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {
  %3 = matmul %x, %w acc=f32 : f32[M, N]
  %4 = add %3, %b : f32[M, N]
  %5 = gelu %4 : f32[M, N]
  return %5
}",
    )
    .unwrap();
    let ln = parse(
        "graph @ln(%x: f32[M, N], %g: f32[N], %b: f32[N]) -> f32[M, N] {
  %3 = layernorm %x, %g, %b eps=1e-5 : f32[M, N]
  return %3
}",
    )
    .unwrap();
    // layernorm: dγ = Σ_rows dY·x̂ (6 kernels before): x̂ and dY·x̂ are one row program (the
    // row statistics recomputed inside it), then the column sum; a row program is not an
    // elementwise kernel, so pipeline fusion leaves it and the trace says nothing of it.
    let (n, trace) = plan(&grad_wrt(&ln, "g").unwrap(), None);
    assert_eq!(n, 2, "{trace}");
    assert!(trace.contains("rowwise): a row program of"), "{trace}");
    let bw = grad_wrt(&lg, "b").unwrap();
    let (n, trace) = plan(&bw, None);
    assert_eq!(n, 7, "{trace}");
    assert!(
        trace.contains("(reduce.sum) fused into") && trace.contains("(pipeline fusion)"),
        "{trace}"
    );
    // Fusion depth 0 keeps every kernel apart, the reduction's producer included.
    let (_, trace) = plan(&bw, Some(0));
    assert!(trace.contains("fusion depth 0 keeps"), "{trace}");
}

#[test]
fn causal_attention_backward_compiles_with_the_mask_in_the_score_matmul() {
    let g = parse(
        "graph @at(%q: f32[B, S, 4], %k: f32[B, T, 4], %v: f32[B, T, 3]) -> f32[B, S, 3] {
  %3 = transpose %k : f32[B, 4, T]
  %4 = matmul %q, %3 acc=f32 : f32[B, S, T]
  %5 = const 0.5 : f32[]
  %6 = mul %4, %5 : f32[B, S, T]
  %7 = causal_mask %6 : f32[B, S, T]
  %8 = softmax %7 : f32[B, S, T]
  %9 = matmul %8, %v acc=f32 : f32[B, S, 3]
  return %9
}",
    )
    .unwrap();
    for gr in grad(&g).unwrap() {
        let (_, trace) = plan(&gr.graph, None);
        assert!(
            trace.contains("(causal_mask) fused into") && trace.contains("as epilogue"),
            "{trace}"
        );
    }
}

/// The reduce and matmul lines of a backward graph's text.
fn reduction_lines(g: &Graph) -> Vec<String> {
    g.to_string()
        .lines()
        .filter(|l| l.contains("= reduce.") || l.contains("= matmul"))
        .map(str::to_string)
        .collect()
}

#[test]
fn backward_reductions_follow_the_kernel_policy() {
    for p in ["deterministic", "kahan_sum"] {
        // A bias sum (unbroadcast) beside a matmul's products.
        let lin = format!(
            "graph @lb(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {{
  %3 = matmul %x, %w acc=f32 policy={p} : f32[M, N]
  %4 = add %3, %b : f32[M, N]
  %5 = gelu %4 : f32[M, N]
  return %5
}}
"
        );
        // A conv2d (which names no policy) under a kernel whose reduction names one.
        let conv = format!(
            "graph @cs(%x: f32[2, 5, 5, 2], %w: f32[3, 3, 2, 3], %s: f32[3]) -> f32[2, 2, 2, 1] {{
  %3 = conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : f32[2, 3, 3, 3]
  %4 = mul %3, %s : f32[2, 3, 3, 3]
  %5 = pad %4 lo=[0, 0, 0, 0] hi=[0, -1, -1, 0] : f32[2, 2, 2, 3]
  %6 = reduce.sum %5 axes=[3] keepdim=true policy={p} : f32[2, 2, 2, 1]
  return %6
}}
"
        );
        let graphs = check(&lin, &[&[6, 4], &[4, 5], &[5]], -1.0, 70);
        let graphs: Vec<Graph> = graphs
            .into_iter()
            .chain(check(
                &conv,
                &[&[2, 5, 5, 2], &[3, 3, 2, 3], &[3]],
                -1.0,
                71,
            ))
            .collect();
        // Every backward graph but conv2d's input gradient (a conv2d, no reduction) has some.
        let with = graphs.iter().filter(|g| !reduction_lines(g).is_empty());
        assert_eq!(with.count(), graphs.len() - 1);
        for g in &graphs {
            for l in reduction_lines(g) {
                assert!(l.contains(&format!("policy={p}")), "{l}\n{g}");
            }
        }
    }
    // A fast kernel's stay fast, and so do those of a kernel naming two policies.
    let mixed = "graph @mx(%x: f32[M, N], %b: f32[N]) -> f32[M] {
  %2 = add %x, %b : f32[M, N]
  %3 = softmax %2 policy=kahan_sum : f32[M, N]
  %4 = reduce.sum %3 axes=[1] keepdim=false policy=deterministic : f32[M]
  return %4
}
";
    let g = grad_wrt(&parse(mixed).unwrap(), "b").unwrap();
    assert!(
        reduction_lines(&g)
            .iter()
            .any(|l| l.contains("reduce.sum %")
                && l.contains("axes=[0]")
                && l.contains("policy=fast")),
        "{g}"
    );
}
