//! `CompileOptions::tile`: a pinned `(BM, BN, BK)` tile replaces the default schedule of matmul
//! kernels, leaves other kernels alone, and is an error naming it when illegal or unused.

use tessera_ir::pipeline::{CompileError, CompileOptions, compile};
use tessera_ir::schedule::KernelClass;

fn graph(body: &str, ret: &str) -> tessera_ir::graph::Graph {
    tessera_ir::graph::parse(&format!(
        "graph @k(%x: f32[M, K], %w: f32[K, N]) -> {ret} {{\n{body}\n}}"
    ))
    .unwrap()
}

fn pinned(t: &[u32]) -> CompileOptions {
    CompileOptions {
        tile: Some(t.to_vec()),
        ..Default::default()
    }
}

#[test]
fn a_pinned_tile_is_the_matmul_schedule_and_others_keep_theirs() {
    let g = graph(
        "  %1 = matmul %x, %w : f32[M, N]\n  %2 = softmax %1 : f32[M, N]\n  return %2",
        "f32[M, N]",
    );
    let c = compile(&g, &pinned(&[64, 64, 32])).unwrap();
    let classes: Vec<_> = c.kernels.iter().map(|k| k.fused.class).collect();
    assert!(classes.contains(&KernelClass::Matmul), "{classes:?}");
    for k in &c.kernels {
        let default = CompileOptions::default().schedule_for(k.fused.class, tessera_ir::DType::F32);
        if k.fused.class == KernelClass::Matmul {
            assert_eq!(k.schedule.tile, vec![64, 64, 32]);
            assert_ne!(k.schedule.tile, default.tile);
        } else {
            assert_eq!(k.schedule, default);
        }
    }
    let d = compile(&g, &CompileOptions::default()).unwrap();
    let mm = |c: &tessera_ir::pipeline::Compiled| {
        let k = c
            .kernels
            .iter()
            .find(|k| k.fused.class == KernelClass::Matmul);
        k.unwrap().lowered.kernel.to_string()
    };
    assert_ne!(mm(&c), mm(&d), "the pinned tile changes the lowered matmul");
}

#[test]
fn illegal_or_unused_pinned_tiles_are_errors_naming_them() {
    let mm = graph("  %1 = matmul %x, %w : f32[M, N]\n  return %1", "f32[M, N]");
    for (t, want) in [
        (&[128, 96, 64][..], "tile[1] = 96"),
        (&[128, 128][..], "has 2 dims"),
        (&[0, 128, 64][..], "tile[0] = 0"),
        (&[2048, 128, 64][..], "tile[0] = 2048"),
    ] {
        let e = compile(&mm, &pinned(t)).unwrap_err();
        assert!(matches!(e, CompileError::Tile(_)), "{e:?}");
        let name = tessera_ir::pipeline::tile_name(t);
        assert!(
            e.to_string().contains(&name) && e.to_string().contains(want),
            "{e}"
        );
    }
    let no_matmul = tessera_ir::graph::parse(
        "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}",
    )
    .unwrap();
    let e = compile(&no_matmul, &pinned(&[64, 64, 32])).unwrap_err();
    assert!(
        e.to_string().contains("(64, 64, 32) fits no kernel of @sm"),
        "{e}"
    );
}
