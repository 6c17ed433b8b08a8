//! Text in → text out: each rule on Graph IR text, against the expected text after.

use super::*;
use crate::graph::{parse, verify};

fn run(src: &str, opts: &RewriteOptions) -> (String, Vec<Applied>) {
    let g = parse(src).unwrap();
    verify(&g).unwrap();
    let (out, trace) = rewrite(&g, opts).unwrap();
    verify(&out).unwrap_or_else(|e| panic!("rewritten graph does not verify:\n{e}"));
    (out.to_string(), trace)
}

const ATTN_BF16: &str = "graph @attn(%q: bf16[B, H, S, 64], %k: bf16[B, H, S, 64], %v: bf16[B, H, S, 64]) -> f32[B, H, S, 64] {
  %3 = transpose %k : bf16[B, H, 64, S]
  %4 = matmul %q, %3 : f32[B, H, S, S]
  %5 = const 0.125 : f32[]
  %6 = mul %4, %5 : f32[B, H, S, S]
  %7 = causal_mask %6 : f32[B, H, S, S]
  %8 = softmax %7 : f32[B, H, S, S]
  %9 = cast %8 : bf16[B, H, S, S]
  %10 = matmul %9, %v : f32[B, H, S, 64]
  return %10
}
";

#[test]
fn flash_attention_text_in_text_out() {
    let (out, trace) = run(ATTN_BF16, &RewriteOptions::default());
    assert_eq!(
        out,
        "graph @attn(%q: bf16[B, H, S, 64], %k: bf16[B, H, S, 64], %v: bf16[B, H, S, 64]) -> f32[B, H, S, 64] {
  %3 = attention %q, %k, %v scale=0.125 causal=true policy=fast : f32[B, H, S, 64]
  return %3
}
"
    );
    assert_eq!(trace.len(), 1);
    let t = &trace[0];
    assert!(t.applied);
    assert_eq!(t.root, "%10");
    assert_eq!(t.matched, ["%3", "%4", "%6", "%7", "%8", "%9", "%10"]);
    assert_eq!(t.inputs, ["%q", "%k", "%v"]);
    let (b, a) = (t.before.unwrap(), t.after.unwrap());
    assert!(b.bytes > 10.0 * a.bytes, "{b:?} vs {a:?}");
    let line = t.to_string();
    assert!(line.starts_with("rewrite flash_attention at %10 [%3, %4, %6, %7, %8, %9, %10] (%q, %k, %v): applied; before "), "{line}");
}

#[test]
fn flash_attention_scale_forms_and_mask_order() {
    // A division by a constant after the mask, no cast (f32), rank 2.
    let src = "graph @a(%q: f32[S, 16], %k: f32[T, 16], %v: f32[T, 8]) -> f32[S, 8] {
  %3 = transpose %k : f32[16, T]
  %4 = matmul %q, %3 : f32[S, T]
  %5 = causal_mask %4 : f32[S, T]
  %6 = const 4 : f32[]
  %7 = div %5, %6 : f32[S, T]
  %8 = softmax %7 : f32[S, T]
  %9 = matmul %8, %v : f32[S, 8]
  return %9
}
";
    let (out, _) = run(src, &RewriteOptions::default());
    assert!(
        out.contains("%3 = attention %q, %k, %v scale=0.25 causal=true policy=fast : f32[S, 8]"),
        "{out}"
    );
    // No scale at all.
    let src = "graph @a(%q: f32[S, 16], %k: f32[S, 16], %v: f32[S, 16]) -> f32[S, 16] {
  %3 = transpose %k : f32[16, S]
  %4 = matmul %q, %3 : f32[S, S]
  %5 = softmax %4 : f32[S, S]
  %6 = matmul %5, %v : f32[S, 16]
  return %6
}
";
    let (out, _) = run(src, &RewriteOptions::default());
    assert!(
        out.contains("attention %q, %k, %v scale=1.0 causal=false"),
        "{out}"
    );
}

#[test]
fn flash_attention_kept_when_scores_are_used_twice() {
    let src = "graph @a(%q: f32[S, 16], %k: f32[S, 16], %v: f32[S, 16]) -> f32[S, 16] {
  %3 = transpose %k : f32[16, S]
  %4 = matmul %q, %3 : f32[S, S]
  %5 = softmax %4 : f32[S, S]
  %6 = matmul %5, %v : f32[S, 16]
  %7 = reduce.sum %5 axes=[1] keepdim=true policy=fast : f32[S, 1]
  %8 = add %6, %7 : f32[S, 16]
  return %8
}
";
    let g = parse(src).unwrap();
    let (out, trace) = run(src, &RewriteOptions::default());
    assert_eq!(out, g.to_string());
    assert!(!trace[0].applied);
    assert!(
        trace[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("%5 (softmax) has other uses"),
        "{:?}",
        trace[0]
    );
}

#[test]
fn flash_attention_kept_for_symbolic_head_dims_and_bad_dtypes() {
    let src = "graph @a(%q: f32[S, D], %k: f32[S, D], %v: f32[S, D]) -> f32[S, D] {
  %3 = transpose %k : f32[D, S]
  %4 = matmul %q, %3 : f32[S, S]
  %5 = softmax %4 : f32[S, S]
  %6 = matmul %5, %v : f32[S, D]
  return %6
}
";
    let (out, trace) = run(src, &RewriteOptions::default());
    assert!(!out.contains("attention"));
    assert!(
        trace[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("head dim D = D is not a constant")
    );
    // bf16 scores multiplied by f32 values without a cast back: not the pattern.
    let src = "graph @a(%q: bf16[S, 16], %k: bf16[S, 16], %v: f32[S, 16]) -> f32[S, 16] {
  %3 = transpose %k : bf16[16, S]
  %4 = matmul %q, %3 : f32[S, S]
  %5 = softmax %4 : f32[S, S]
  %6 = matmul %5, %v : f32[S, 16]
  return %6
}
";
    let (out, trace) = run(src, &RewriteOptions::default());
    assert!(!out.contains("attention") && trace.is_empty());
}

#[test]
fn a_disabled_rule_leaves_the_graph_alone() {
    let opts = RewriteOptions::default()
        .disable(&["flash_attention"])
        .unwrap();
    let (out, trace) = run(ATTN_BF16, &opts);
    assert_eq!(out, parse(ATTN_BF16).unwrap().to_string());
    assert!(trace.is_empty());
}

#[test]
fn the_rewritten_graph_means_the_same_in_f64() {
    use crate::reference::{Tensor64, eval};
    let g = parse(ATTN_BF16).unwrap();
    let (r, _) = rewrite(&g, &RewriteOptions::default()).unwrap();
    let mut seed = 7u64;
    let mut rnd = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    };
    let shape = vec![2, 3, 5, 64];
    let n = shape.iter().product();
    let ins: Vec<Tensor64> = (0..3)
        .map(|_| Tensor64::new(shape.clone(), rnd(n)))
        .collect();
    let (a, b) = (eval(&g, &ins).unwrap(), eval(&r, &ins).unwrap());
    assert_eq!(a.shape, b.shape);
    let err = a
        .data
        .iter()
        .zip(&b.data)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(err < 1e-12, "{err}");
}

const CONV_SMALL: &str =
    "graph @c(%x: f32[N, 32, 32, 16], %w: f32[3, 3, 16, 16]) -> f32[N, 32, 32, 16] {
  %2 = conv2d %x, %w stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1 : f32[N, 32, 32, 16]
  return %2
}
";

const CONV_LARGE: &str =
    "graph @c(%x: f32[N, 32, 32, 16], %w: f32[31, 31, 16, 16]) -> f32[N, 32, 32, 16] {
  %2 = conv2d %x, %w stride=[1, 1] padding=[15, 15] dilation=[1, 1] groups=1 : f32[N, 32, 32, 16]
  return %2
}
";

#[test]
fn small_kernels_stay_direct_and_large_ones_go_spectral() {
    let (out, trace) = run(CONV_SMALL, &RewriteOptions::default());
    assert!(out.contains("conv2d"), "{out}");
    assert!(!trace[0].applied);
    assert!(
        trace[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("prefers the original")
    );
    let (out, trace) = run(CONV_LARGE, &RewriteOptions::default());
    assert_eq!(
        out,
        "graph @c(%x: f32[N, 32, 32, 16], %w: f32[31, 31, 16, 16]) -> f32[N, 32, 32, 16] {
  %2 = complex %x : f32[N, 32, 32, 16, 2]
  %3 = pad %2 lo=[0, 15, 15, 0, 0] hi=[0, 17, 17, 0, 0] : f32[N, 64, 64, 16, 2]
  %4 = fft %3 axis=1 : f32[N, 64, 64, 16, 2]
  %5 = fft %4 axis=2 : f32[N, 64, 64, 16, 2]
  %6 = complex %w : f32[31, 31, 16, 16, 2]
  %7 = pad %6 lo=[0, 0, 0, 0, 0] hi=[33, 33, 0, 0, 0] : f32[64, 64, 16, 16, 2]
  %8 = fft %7 axis=0 : f32[64, 64, 16, 16, 2]
  %9 = fft %8 axis=1 : f32[64, 64, 16, 16, 2]
  %10 = spectral_mul %5, %9 groups=1 : f32[N, 64, 64, 16, 2]
  %11 = ifft %10 axis=1 : f32[N, 64, 64, 16, 2]
  %12 = ifft %11 axis=2 : f32[N, 64, 64, 16, 2]
  %13 = real %12 : f32[N, 64, 64, 16]
  %14 = pad %13 lo=[0, 0, 0, 0] hi=[0, -32, -32, 0] : f32[N, 32, 32, 16]
  return %14
}
"
    );
    let t = &trace[0];
    assert!(t.applied);
    let line = t.to_string();
    assert!(line.contains("before") && line.contains("after"), "{line}");
}

#[test]
fn spectral_conv_means_the_same_in_f64() {
    use crate::reference::{Tensor64, eval};
    let src = "graph @c(%x: f32[2, 9, 7, 3], %w: f32[5, 4, 3, 2]) -> f32[2, 7, 6, 2] {
  %2 = conv2d %x, %w stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1 : f32[2, 7, 6, 2]
  return %2
}
";
    let g = parse(src).unwrap();
    // Too small to pay: forced.
    let opts = RewriteOptions::default().force(&["spectral_conv"]).unwrap();
    let (r, trace) = rewrite(&g, &opts).unwrap();
    assert!(trace[0].applied && trace[0].forced, "{}", trace[0]);
    assert!(trace[0].to_string().contains("applied (forced)"));
    verify(&r).unwrap();
    let x = Tensor64::new(
        vec![2, 9, 7, 3],
        (0..378)
            .map(|i| ((i * 37 % 101) as f64 - 50.0) / 25.0)
            .collect(),
    );
    let w = Tensor64::new(
        vec![5, 4, 3, 2],
        (0..120)
            .map(|i| ((i * 13 % 29) as f64 - 14.0) / 7.0)
            .collect(),
    );
    let (a, b) = (
        eval(&g, &[x.clone(), w.clone()]).unwrap(),
        eval(&r, &[x, w]).unwrap(),
    );
    assert_eq!(a.shape, b.shape);
    let err = a
        .data
        .iter()
        .zip(&b.data)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(err < 1e-9, "{err}");
}

#[test]
fn spectral_conv_needs_unit_stride() {
    let src = "graph @c(%x: f32[1, 64, 64, 4], %w: f32[31, 31, 4, 4]) -> f32[1, 17, 17, 4] {
  %2 = conv2d %x, %w stride=[2, 2] padding=[0, 0] dilation=[1, 1] groups=1 : f32[1, 17, 17, 4]
  return %2
}
";
    let (_, trace) = run(src, &RewriteOptions::default());
    assert!(
        trace[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("stride [2, 2]")
    );
}

#[test]
fn flash_attention_leaves_a_non_fast_policy_unfused() {
    // The online softmax honours `fast` only: a deterministic softmax or a bf16 accumulator
    // keeps the unfused graph (which honours them), and the trace says why.
    for (from, to, why) in [
        (
            "%8 = softmax %7 :",
            "%8 = softmax %7 policy=deterministic :",
            "(softmax) runs under policy `deterministic`",
        ),
        (
            "%4 = matmul %q, %3 : f32",
            "%4 = matmul %q, %3 acc=bf16 : bf16",
            "(matmul) accumulates in bf16",
        ),
    ] {
        let mut src = ATTN_BF16.replace(from, to);
        if to.contains("acc=bf16") {
            src = src
                .replace("%6 = mul %4, %5 : f32", "%6 = mul %4, %5 : bf16")
                .replace("%5 = const 0.125 : f32", "%5 = const 0.125 : bf16")
                .replace("%7 = causal_mask %6 : f32", "%7 = causal_mask %6 : bf16")
                .replace("%8 = softmax %7 :", "%8 = softmax %7 policy=fast :");
        }
        let (out, trace) = run(&src, &RewriteOptions::default());
        assert!(!out.contains("attention"), "{out}");
        assert!(!trace[0].applied);
        let reason = trace[0].reason.clone().unwrap_or_default();
        assert!(reason.contains(why), "{reason}");
    }
}
