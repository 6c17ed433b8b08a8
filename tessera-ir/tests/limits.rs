//! Text-in checks of the limits every IR level enforces: sizes the target cannot hold, integers
//! that do not fit their field, declared types and op attributes. Each input is an error that
//! names the value, op or number at fault — never a panic, an abort or a silent truncation.

use tessera_ir::schedule::{self, KernelClass, Schedule};
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::{DType, graph, tile};

/// A kernel that loads one tile of the given type from a rank-2 tensor and stores it back.
fn copy_kernel(ty: &str) -> String {
    format!(
        "kernel @copy(%x: f32<2>, %y: f32<2>) grid=[1, 1, 1] {{
  %0 = const 0 : i32
  %1 = load %x[%0, %0] : {ty}
  store %y[%0, %0], %1
}}
"
    )
}

fn tile_errors(src: &str) -> Vec<String> {
    let k = tile::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    match tile::verify(&k) {
        Ok(()) => vec![],
        Err(e) => e.errors.into_iter().map(|(_, m)| m).collect(),
    }
}

#[test]
fn tile_verifier_accepts_the_largest_tile_a_block_holds() {
    assert!(tile_errors(&copy_kernel("f32[256, 256]")).is_empty());
    let k = tile::parse(&copy_kernel("f32[16, 64]")).unwrap();
    let s = Schedule::default_for(KernelClass::Elementwise, DType::F32);
    ptx::emit(&k, &s, Arch::Sm80).unwrap();
}

#[test]
fn tile_verifier_rejects_zero_size_and_oversized_tiles() {
    let e = tile_errors(&copy_kernel("f32[0, 64]"));
    assert!(
        e.iter()
            .any(|m| m.contains("%1 = load: %1: f32[0, 64] has a zero-size axis")),
        "{e:?}"
    );
    let e = tile_errors(&copy_kernel("f32[256, 257]"));
    assert!(
        e.iter()
            .any(|m| m.contains("f32[256, 257] has more than 65536 elements")),
        "{e:?}"
    );
    let e = tile_errors(&copy_kernel("f32[4294967296, 4294967296]"));
    assert!(
        e.iter()
            .any(|m| m.contains("f32[4294967296, 4294967296] has more than")),
        "{e:?}"
    );
    // The product overflows u64: still an error, not a wrapped small number.
    let e = tile_errors(&copy_kernel("f32[18446744073709551, 18446744073709551]"));
    assert!(
        e.iter().any(|m| m.contains("has more than 65536 elements")),
        "{e:?}"
    );
}

#[test]
fn ptx_emit_of_an_oversized_tile_is_an_error_not_an_abort() {
    let k = tile::parse(&copy_kernel("f32[4294967296, 4294967296]")).unwrap();
    let s = Schedule::default_for(KernelClass::Elementwise, DType::F32);
    for arch in [Arch::Sm80, Arch::Sm89, Arch::Sm90a] {
        let e = ptx::emit(&k, &s, arch).unwrap_err();
        assert!(e.message.contains("unverified Tile IR"), "{e}");
        assert!(e.message.contains("f32[4294967296, 4294967296]"), "{e}");
    }
}

#[test]
fn tile_parser_rejects_integers_that_do_not_fit() {
    let grid =
        |g: &str| tile::parse(&copy_kernel("f32[16, 16]").replace("grid=[1, 1, 1]", g)).map(|_| ());
    let e = grid("grid=[5, 1, 1]").unwrap_err();
    assert!(e.message.contains("constant grid dimension is 1"), "{e}");
    let e = grid("grid=[cdiv(dim(%x, 0), 4294967296), 1, 1]").unwrap_err();
    assert!(e.message.contains("4294967296"), "{e}");
    let e = tile::parse("kernel @k(%x: f32<1>) grid=[1, 1, 1] {\n  %0 = program_id 256 : i32\n}")
        .unwrap_err();
    assert!(e.message.contains("grid axis 256"), "{e}");
    let e = tile_errors("kernel @k(%x: f32<1>) grid=[1, 1, 1] {\n  %0 = program_id 3 : i32\n}");
    assert!(
        e.iter().any(|m| m.contains("grid axis 3 out of range")),
        "{e:?}"
    );
}

#[test]
fn tile_verifier_rejects_a_loop_step_beyond_i32_and_a_grid_tile_of_zero() {
    let src = "kernel @k(%x: f32<1>) grid=[cdiv(dim(%x, 0), 0), 1, 1] {
  %0 = const 0 : i32
  %1 = dim %x, 0 : i32
  for %2 = %0 to %1 step 4294967296 iter() {
    yield
  }
}
";
    let e = tile_errors(src);
    assert!(
        e.iter()
            .any(|m| m.contains("grid axis 0 divides by a tile of 0")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|m| m.contains("step must be in 1..=2147483647")),
        "{e:?}"
    );
}

#[test]
fn schedule_parser_rejects_values_beyond_u32() {
    let e =
        schedule::parse("schedule matmul tile=[128, 128, 64] warps=4294967304 stages=3 vector=8")
            .unwrap_err();
    assert!(e.message.contains("4294967304"), "{e}");
    let e = schedule::parse("schedule rowwise tile=[4294967297, 8] warps=8 stages=1 vector=4")
        .unwrap_err();
    assert!(e.message.contains("4294967297"), "{e}");
    let s = schedule::parse("schedule rowwise tile=[0, 8] warps=8 stages=1 vector=4").unwrap();
    let e = schedule::verify(&s).unwrap_err();
    assert!(e[0].contains("tile[0] = 0"), "{e:?}");
}

#[test]
fn graph_parser_checks_the_declared_return_type() {
    let src = "graph @g(%x: f32[M, N]) -> f32[N, M] {\n  %1 = exp %x : f32[M, N]\n  return %1\n}";
    let e = graph::parse(src).unwrap_err();
    assert_eq!(e.line, 1, "{e}");
    assert!(
        e.message
            .contains("@g declares return type f32[N, M] but returns `%1`: f32[M, N]"),
        "{e}"
    );
    let e = graph::parse(&src.replace("-> f32[N, M]", "-> bf16[M, N]")).unwrap_err();
    assert!(e.message.contains("bf16[M, N]"), "{e}");
    graph::parse(&src.replace("-> f32[N, M]", "-> f32[M, N]")).unwrap();
}

fn graph_errors(src: &str) -> Vec<String> {
    let g = graph::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    match graph::verify(&g) {
        Ok(()) => vec![],
        Err(e) => e.errors.into_iter().map(|(_, m)| m).collect(),
    }
}

#[test]
fn norm_eps_must_be_finite_and_positive() {
    let rms = "graph @n(%x: f32[M, D], %g: f32[D]) -> f32[M, D] {
  %2 = rmsnorm %x, %g eps=EPS : f32[M, D]
  return %2
}";
    assert!(graph_errors(&rms.replace("EPS", "1e-6")).is_empty());
    for bad in ["-1", "0", "0.0", "inf", "nan", "-inf"] {
        let e = graph_errors(&rms.replace("EPS", bad));
        assert!(
            e.iter()
                .any(|m| m.starts_with("%2: rmsnorm: eps must be finite and > 0")),
            "eps={bad}: {e:?}"
        );
    }
    let ln = "graph @n(%x: f32[M, D], %g: f32[D], %b: f32[D]) -> f32[M, D] {
  %3 = layernorm %x, %g, %b eps=-1e-5 : f32[M, D]
  return %3
}";
    let e = graph_errors(ln);
    assert!(
        e.iter()
            .any(|m| m.contains("%3: layernorm: eps must be finite and > 0, got -0.00001")),
        "{e:?}"
    );
}

#[test]
fn reduce_axes_must_be_in_range_and_distinct() {
    let src = "graph @r(%x: f32[M, N]) -> f32[M] {
  %1 = reduce.sum %x axes=[AXES] keepdim=false policy=fast : f32[M]
  return %1
}";
    assert!(graph_errors(&src.replace("AXES", "1")).is_empty());
    let e = graph_errors(&src.replace("AXES", "2"));
    assert!(
        e.iter()
            .any(|m| m.contains("%1: reduce.sum: axis 2 out of range")),
        "{e:?}"
    );
    let e = graph_errors(&src.replace("AXES", "1, 1"));
    assert!(
        e.iter()
            .any(|m| m.contains("%1: reduce.sum: axis 1 listed twice")),
        "{e:?}"
    );
    let e = graph::parse(&src.replace("AXES", "-1")).unwrap_err();
    assert!(e.message.contains("non-negative"), "{e}");
}

#[test]
fn graph_verifier_bounds_constant_byte_sizes_and_operand_counts() {
    let e = graph_errors(
        "graph @big(%x: f32[4294967296, 4294967296]) -> f32[4294967296, 4294967296] {
  %1 = exp %x : f32[4294967296, 4294967296]
  return %1
}",
    );
    assert!(
        e.iter()
            .any(|m| m.starts_with("%x: f32[4294967296, 4294967296] needs more than")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|m| m.starts_with("%1: f32[4294967296, 4294967296] needs more than")),
        "{e:?}"
    );
    // A broadcast with no operand is reported, not indexed.
    let e =
        graph_errors("graph @b(%x: f32[N]) -> f32[N] {\n  %1 = broadcast : f32[N]\n  return %1\n}");
    assert!(
        e.iter()
            .any(|m| m.contains("%1: broadcast expects 1 operand")),
        "{e:?}"
    );
}

/// Found by the graph-text fuzzer: a parameter named by a number (`%5`) printed next to the
/// computed value `%5` and did not parse back. It is now a parse error naming it.
#[test]
fn graph_parameter_named_by_a_number_is_an_error() {
    let src = "graph @k(%a: f32[N], %5: f32[N]) -> f32[N] {\n  %2 = add %a, %5 : f32[N]\n  return %2\n}\n";
    let e = graph::parse(src).unwrap_err();
    assert!(
        e.to_string()
            .contains("parameter `%5` is named by a number"),
        "{e}"
    );
}
