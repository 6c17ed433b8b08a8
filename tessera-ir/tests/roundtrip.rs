//! Every IR level prints and parses back to the same thing; verifiers name values and rules.

use tessera_ir::graph::{self, Graph, Op, UnaryOp};
use tessera_ir::pipeline::{CompileOptions, compile};
use tessera_ir::schedule::{self, KernelClass, Schedule};
use tessera_ir::{DType, tile};

const GRAPHS: &[&str] = &[
    "graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> f32[M, N] {
  %3 = matmul %x, %w acc=f32 policy=fast : f32[M, N]
  %4 = add %3, %b : f32[M, N]
  %5 = gelu %4 : f32[M, N]
  return %5
}
",
    "graph @mixed(%x: bf16[M, K], %w: bf16[K, N]) -> bf16[M, N] {
  %2 = matmul %x, %w acc=bf16 policy=deterministic : bf16[M, N]
  %3 = softmax %2 policy=kahan_sum : f32[M, N]
  %4 = cast %3 : f8e4m3[M, N]
  %5 = cast %4 : bf16[M, N]
  return %5
}
",
    "graph @norms(%x: f32[B, T, D], %g: f32[D], %b: f32[D]) -> f32[B, T, D] {
  %3 = layernorm %x, %g, %b eps=1e-5 policy=deterministic : f32[B, T, D]
  %4 = rmsnorm %3, %g eps=1e-6 policy=fast : f32[B, T, D]
  %5 = softmax %4 policy=fast : f32[B, T, D]
  %6 = const 0.5 : f32[]
  %7 = mul %5, %6 : f32[B, T, D]
  return %7
}
",
    "graph @reductions(%x: f32[M, N]) -> f32[N] {
  %1 = reduce.sum %x axes=[1] keepdim=true policy=kahan_sum : f32[M, 1]
  %2 = sub %x, %1 : f32[M, N]
  %3 = reduce.max %2 axes=[0] keepdim=false policy=fast : f32[N]
  %4 = cast %3 : bf16[N]
  %5 = cast %4 : f32[N]
  return %5
}
",
    "graph @batched(%a: f16[B, M, K], %b: f16[B, K, N]) -> f32[B, N, M] {
  %2 = matmul %a, %b acc=f32 policy=fast : f32[B, M, N]
  %3 = transpose %2 : f32[B, N, M]
  %4 = tanh %3 : f32[B, N, M]
  return %4
}
",
    "graph @attn(%q: bf16[B, H, S, 64], %k: bf16[B, H, T, 64], %v: bf16[B, H, T, 32]) -> f32[B, H, S, 32] {
  %3 = attention %q, %k, %v scale=0.125 causal=true policy=fast : f32[B, H, S, 32]
  return %3
}
",
    "graph @axes(%x: f32[A, B, C, D]) -> f32[A, D, B] {
  %1 = softmax %x axis=1 policy=fast : f32[A, B, C, D]
  %2 = permute %1 perm=[0, 2, 3, 1] : f32[A, C, D, B]
  %3 = reduce.mean %2 axes=[1] keepdim=false policy=fast : f32[A, D, B]
  %4 = softmax %3 policy=fast : f32[A, D, B]
  %5 = reduce.sum %4 axes=[0, 1] keepdim=true policy=fast : f32[1, 1, B]
  %6 = sub %4, %5 : f32[A, D, B]
  return %6
}
",
    "graph @bcast(%x: f32[M, N], %v: f32[N]) -> f32[M, N] {
  %2 = broadcast %v : f32[M, N]
  %3 = sub %x, %2 : f32[M, N]
  return %3
}
",
    "graph @conv(%x: bf16[N, 9, 11, 8], %w: bf16[3, 3, 2, 8], %b: f32[8]) -> f32[N, 5, 4, 8] {
  %3 = conv2d %x, %w stride=[2, 2] padding=[1, 0] dilation=[1, 2] groups=4 : f32[N, 5, 4, 8]
  %4 = add %3, %b : f32[N, 5, 4, 8]
  %5 = relu %4 : f32[N, 5, 4, 8]
  return %5
}
",
    // The spectral path and the layout ops (`causal_mask` outside an attention).
    "graph @scores(%s: f32[S, T]) -> f32[S, T] {
  %1 = causal_mask %s : f32[S, T]
  %2 = softmax %1 policy=fast : f32[S, T]
  return %2
}
",
    "graph @spectral(%x: f32[2, 8, 8, 3], %w: f32[8, 8, 3, 4]) -> f32[2, 6, 6, 4] {
  %2 = complex %x : f32[2, 8, 8, 3, 2]
  %3 = fft %2 axis=1 : f32[2, 8, 8, 3, 2]
  %4 = fft %3 axis=2 : f32[2, 8, 8, 3, 2]
  %5 = complex %w : f32[8, 8, 3, 4, 2]
  %6 = fft %5 axis=0 : f32[8, 8, 3, 4, 2]
  %7 = fft %6 axis=1 : f32[8, 8, 3, 4, 2]
  %8 = spectral_mul %4, %7 groups=1 : f32[2, 8, 8, 4, 2]
  %9 = ifft %8 axis=1 : f32[2, 8, 8, 4, 2]
  %10 = ifft %9 axis=2 : f32[2, 8, 8, 4, 2]
  %11 = real %10 : f32[2, 8, 8, 4]
  %12 = pad %11 lo=[0, -1, -1, 0] hi=[0, -1, -1, 0] : f32[2, 6, 6, 4]
  return %12
}
",
    // Interior padding (zero insertion): the transposed convolution of a strided conv2d's
    // input gradient.
    "graph @dilate(%x: f32[N, 4, 3, C]) -> f32[N, 8, 8, C] {
  %1 = pad %x lo=[0, 1, 2, 0] hi=[0, 0, -1, 0] interior=[0, 1, 2, 0] : f32[N, 8, 8, C]
  return %1
}
",
];

#[test]
fn graph_text_round_trips_and_verifies() {
    for src in GRAPHS {
        let g = graph::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        graph::verify(&g).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g.to_string(), *src);
        assert_eq!(graph::parse(&g.to_string()).unwrap(), g);
    }
}

/// Texts written before accumulators and policies were printed still parse: a matmul without
/// `acc=` accumulates in its result type, a missing `policy=` is fast.
#[test]
fn graph_attributes_may_be_left_out() {
    let short = "graph @s(%x: bf16[M, K], %w: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %x, %w : f32[M, N]\n  %3 = softmax %2 : f32[M, N]\n  return %3\n}\n";
    let g = graph::parse(short).unwrap();
    graph::verify(&g).unwrap();
    assert_eq!(
        g.to_string(),
        "graph @s(%x: bf16[M, K], %w: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %x, %w acc=f32 policy=fast : f32[M, N]\n  %3 = softmax %2 policy=fast : f32[M, N]\n  return %3\n}\n"
    );
    // The accumulator decides the result type; a wrong one is an error naming the value.
    let bad = "graph @s(%x: bf16[M, K], %w: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %x, %w acc=bf16 policy=fast : f32[M, N]\n  return %2\n}\n";
    let e = graph::verify(&graph::parse(bad).unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .contains("%2: matmul: declared type f32[M, N] but the operands give bf16[M, N]"),
        "{e}"
    );
    let fp8_acc = "graph @s(%x: f32[M, K], %w: f32[K, N]) -> f8e4m3[M, N] {\n  %2 = matmul %x, %w acc=f8e4m3 policy=fast : f8e4m3[M, N]\n  return %2\n}\n";
    let e = graph::verify(&graph::parse(fp8_acc).unwrap()).unwrap_err();
    assert!(e.to_string().contains("cannot accumulate in f8e4m3"), "{e}");
}

/// A softmax axis or a permutation that does not fit its operand is an error naming the value
/// and the axis.
#[test]
fn graph_verifier_names_a_bad_axis() {
    for (body, want) in [
        (
            "%1 = softmax %x axis=2 : f32[M, N]",
            "%1: softmax: axis 2 out of range for rank-2 operand f32[M, N]",
        ),
        (
            "%1 = permute %x perm=[0, 2] : f32[M, N]",
            "%1: permute: axis 2 out of range for rank-2 operand f32[M, N]",
        ),
        (
            "%1 = permute %x perm=[1, 1] : f32[N, N]",
            "%1: permute: axis 1 listed twice in perm [1, 1]",
        ),
        (
            "%1 = permute %x perm=[1] : f32[N]",
            "%1: permute: perm [1] has 1 axes but the operand f32[M, N] has rank 2",
        ),
        (
            "%1 = reduce.sum %x axes=[3] keepdim=false : f32[M]",
            "%1: reduce.sum: axis 3 out of range for rank-2 operand f32[M, N]",
        ),
    ] {
        let ty = body.rsplit(" : ").next().unwrap();
        let src = format!("graph @k(%x: f32[M, N]) -> {ty} {{\n  {body}\n  return %1\n}}\n");
        let e = graph::verify(&graph::parse(&src).unwrap()).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn graph_verifier_collects_every_error_with_value_names() {
    let src = "graph @bad(%x: f32[M, K], %y: bf16[M, K]) -> f32[K, M] {
  %2 = add %x, %y : f32[M, K]
  %3 = exp %x : f32[K, M]
  return %3
}
";
    let g = graph::parse(src).unwrap();
    let e = graph::verify(&g).unwrap_err();
    assert_eq!(e.errors.len(), 2, "{e}");
    assert!(e.errors[0].1.contains("%2: add: dtype mismatch"), "{e}");
    assert!(
        e.errors[1].1.contains("%3: exp: declared type f32[K, M]"),
        "{e}"
    );
    assert!(
        e.annotated
            .contains("  %2 = add %x, %y : f32[M, K]\n  ; error: %2: add: dtype mismatch"),
        "{}",
        e.annotated
    );
}

#[test]
fn graph_parse_errors_carry_positions() {
    let e =
        graph::parse("graph @g(%x: f32[M]) -> f32[M] {\n  %1 = frob %x : f32[M]\n  return %1\n}")
            .unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (2, "unknown op `frob`"));
    let e =
        graph::parse("graph @g(%x: f32[M]) -> f32[M] {\n  %1 = exp %q : f32[M]\n}").unwrap_err();
    assert!(e.message.contains("undefined value `%q`"), "{e}");
}

#[test]
fn schedule_text_round_trips_for_every_class_and_space() {
    for class in KernelClass::ALL {
        for dt in [DType::F32, DType::BF16] {
            for s in Schedule::space(class, dt) {
                schedule::verify(&s).unwrap_or_else(|e| panic!("{s}: {e:?}"));
                assert_eq!(schedule::parse(&s.to_string()).unwrap(), s);
            }
        }
    }
    assert!(schedule::parse("schedule matmul tile=[1, 2, 3] warps=4 stages=2").is_err());
}

#[test]
fn compiled_tile_ir_round_trips_and_verifies() {
    use tessera_ir::NumericsPolicy as P;
    for (src, policy) in GRAPHS
        .iter()
        .flat_map(|s| [P::Fast, P::Deterministic, P::KahanSum].map(|p| (s, p)))
    {
        let g = graph::parse(src).unwrap();
        let opts = CompileOptions {
            policy,
            ..Default::default()
        };
        let c = match compile(&g, &opts) {
            Ok(c) => c,
            // A graph naming another policy cannot honour this one: an error naming the value.
            Err(e) if graph::policies(&g).iter().any(|p| *p != policy) => {
                assert!(e.to_string().contains("cannot also honour"), "{e}");
                continue;
            }
            // The online-softmax attention kernel honours `fast` only, and says so.
            Err(e) if src.contains("= attention") && policy != P::Fast => {
                assert!(e.to_string().contains("`fast` numerics policy only"), "{e}");
                continue;
            }
            Err(e) => panic!("{e}\n{src}"),
        };
        for (i, k) in c.kernels.iter().enumerate() {
            let text = k.lowered.kernel.to_string();
            let back = tile::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            tile::verify(&back).unwrap();
            assert_eq!(back.to_string(), text);
            assert_eq!(back, k.lowered.kernel);
            // Every schedule of the class lowers to valid Tile IR too.
            for s in Schedule::space(k.fused.class, DType::F32) {
                let l = c.lower_with(i, &s).unwrap_or_else(|e| panic!("{s}: {e}"));
                tile::verify(&l.kernel).unwrap();
            }
        }
    }
}

#[test]
fn epilogues_fuse_and_decisions_are_recorded() {
    let g = graph::parse(GRAPHS[0]).unwrap();
    let c = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(c.kernels.len(), 1, "gelu(x·w + b) is one kernel");
    let k = &c.kernels[0];
    assert_eq!(k.fused.epilogue.len(), 2);
    let text = k.lowered.kernel.to_string();
    for needle in ["dot", "gelu", "load %b", "store %out", "for "] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    let plan = c.plan.to_string();
    assert!(
        plan.contains("%5 (gelu) fused into linear_gelu_k0 (%3) as epilogue"),
        "{plan}"
    );

    // A value with two uses is materialised, and the decision says why.
    let g = graph::parse(
        "graph @two(%x: f32[M, N]) -> f32[M, N] {
  %1 = softmax %x : f32[M, N]
  %2 = mul %1, %1 : f32[M, N]
  return %2
}",
    )
    .unwrap();
    let c = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(c.kernels.len(), 2);
    assert!(
        c.plan
            .to_string()
            .contains("not fused because operand %1 has 2 uses"),
        "{}",
        c.plan
    );
}

#[test]
fn tile_verifier_names_value_and_rule() {
    let src = "kernel @k(%a: f32<2>, %c: f32<2>) grid=[cdiv(dim(%a, 0), 16), 1, 1] {
  %0 = const 0 : i32
  %1 = load %a[%0, %0] : f32[16, 8]
  %2 = load %a[%0, %0] : f32[16, 8]
  %3 = full 0.0 : f32[16, 16]
  %4 = dot %1, %2, %3 : f32[16, 16]
  %5 = load %a[%0] : f32[16]
  store %c[%0, %0], %9
}
";
    let k = tile::parse(src);
    assert!(k.is_err(), "use of undefined %9 is a parse error");
    let k = tile::parse(&src.replace(", %9", ", %4")).unwrap();
    let e = tile::verify(&k).unwrap_err();
    let msgs: Vec<&str> = e.errors.iter().map(|x| x.1.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("%4 = dot: shapes do not chain")),
        "{e}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("%5 = load: %a has rank 2 but 1 indices")),
        "{e}"
    );
    assert!(e.annotated.contains("; error: %4 = dot"), "{e}");
}

/// The `fft` / `ifft` tile op: text round-trips; an odd width, a length that is not a power
/// of two, a non-f32 tile or a rank-1 tile is an error naming the value and the rule.
#[test]
fn tile_fft_round_trips_and_checks_its_tile() {
    let src = "kernel @f(%a: f32<3>, %out: f32<3>) grid=[1, 1, 1] {
  %0 = const 0.0 : i32
  %1 = load %a[%0, %0, %0] : f32[8, 4]
  %2 = fft %1 : f32[8, 4]
  %3 = ifft %2 : f32[8, 4]
  store %out[%0, %0, %0], %3
}
";
    let k = tile::parse(src).unwrap();
    tile::verify(&k).unwrap();
    assert_eq!(k.to_string(), src);
    for (from, to) in [("f32[8, 4]", "f32[8, 3]"), ("f32[8, 4]", "f32[6, 4]")] {
        let k = tile::parse(&src.replace(from, to)).unwrap();
        let e = tile::verify(&k).unwrap_err().to_string();
        assert!(
            e.contains("%2 = fft: needs an f32[L, W] tile with L a power of two"),
            "{e}"
        );
    }
    let bad = src.replace(
        "%2 = fft %1 : f32[8, 4]",
        "%9 = load %a[%0, %0, %0] : f32[8]\n  %2 = fft %9 : f32[8]",
    );
    let bad = bad.replace("%3 = ifft %2 : f32[8, 4]", "%3 = ifft %1 : f32[8, 4]");
    let e = tile::verify(&tile::parse(&bad).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("= fft: needs an f32[L, W] tile") && e.contains("got f32[8]"),
        "{e}"
    );
}

#[test]
fn builder_types_follow_the_rules() {
    let mut b = Graph::builder("k");
    let x = b.param("x", "f32[M, K]".parse_ty());
    let w = b.param("w", "f32[J, N]".parse_ty());
    let e = b.push(Op::matmul(DType::F32), &[x, w]).unwrap_err();
    assert!(e.to_string().contains("contracts K with J"), "{e}");
    let y = b.push(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    assert_eq!(b.ty(y).to_string(), "f32[M, K]");
}

trait ParseTy {
    fn parse_ty(&self) -> tessera_ir::TensorType;
}

impl ParseTy for str {
    fn parse_ty(&self) -> tessera_ir::TensorType {
        let src = format!("graph @t(%p: {self}) -> {self} {{\n  return %p\n}}");
        graph::parse(&src)
            .unwrap()
            .ty(tessera_ir::graph::Value(0))
            .clone()
    }
}

/// The implicit-GEMM conv kernel prints its `im2col` gather and store mask, and the Tile IR
/// verifier rejects a gather with a zero geometry or a wrong view rank, naming the rule.
#[test]
fn conv_kernel_gathers_with_im2col_and_the_verifier_checks_it() {
    let src = GRAPHS.iter().find(|s| s.contains("@conv")).unwrap();
    let c = compile(&graph::parse(src).unwrap(), &CompileOptions::default()).unwrap();
    assert_eq!(
        c.kernels.len(),
        1,
        "bias and relu fuse into the conv kernel"
    );
    let text = c.kernels[0].lowered.kernel.to_string();
    assert!(
        text.contains("height=9 kernel=[3, 3] cg=2 stride=[2, 2] padding=[1, 0] dilation=[1, 2]"),
        "{text}"
    );
    // groups = 4, F/groups = 2 < BN: the store is masked to the group's columns.
    assert!(
        text.contains("cmp.lt") && text.contains(" mask %"),
        "{text}"
    );
    let bad = tile::parse(&text.replace("cg=2", "cg=0")).unwrap();
    let e = tile::verify(&bad).unwrap_err().to_string();
    assert!(e.contains("must be ≥ 1"), "{e}");
    let bad = tile::parse(&text.replace("%x: bf16<3>", "%x: bf16<2>")).unwrap();
    let e = tile::verify(&bad).unwrap_err().to_string();
    assert!(e.contains("im2col reads the [N·H, W, C] view"), "{e}");
}
