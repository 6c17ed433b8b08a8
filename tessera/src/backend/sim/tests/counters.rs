//! Performance counters of library kernels on the simulator: the bf16 tensor-core GEMM's
//! `ldmatrix` reads of its swizzled shared tiles are free of bank conflicts, and a row kernel's
//! f32 loads touch the minimum number of 32-byte sectors. (The unswizzled / strided
//! counterparts that make the counters rise are hand-written kernels in `tessera-sim`'s tests.)

use super::Buf;
use crate::backend::sim;
use std::collections::HashMap;
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::{DType, Dim, graph, pipeline};

/// Reports of every schedule of the first kernel of `src`, emitted for `arch`, on random
/// inputs.
fn reports(
    src: &str,
    syms: &[(&str, usize)],
    sdt: DType,
    arch: Arch,
) -> Vec<(String, sim::Report)> {
    let g = graph::parse(src).unwrap();
    let c = pipeline::compile(&g, &Default::default()).unwrap();
    let sym: HashMap<&str, usize> = syms.iter().copied().collect();
    let shape_of = |v: graph::Value| -> Vec<usize> {
        g.ty(v)
            .shape
            .0
            .iter()
            .map(|d| match d {
                Dim::Const(c) => *c as usize,
                Dim::Sym(s) => sym[s.as_str()],
            })
            .collect()
    };
    let k = &c.kernels[0];
    let mut out = Vec::new();
    for s in Schedule::space(k.fused.class, sdt) {
        let l = c.lower_with(0, &s).unwrap();
        let n = l.bindings.len();
        let bufs: Vec<Buf> = l
            .bindings
            .iter()
            .enumerate()
            .map(|(j, b)| {
                let dt = g.ty(b.value).dtype;
                let dims = shape_of(b.value);
                let mut buf = Buf::zeros(dt, &dims, j == n - 1);
                let v = super::rand(dims.iter().product(), 5 + j as u64, 1.0);
                let bytes = buf.as_bytes_mut();
                for (i, x) in v.iter().enumerate() {
                    match dt {
                        DType::F32 => bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
                        DType::BF16 => bytes[2 * i..2 * i + 2]
                            .copy_from_slice(&half::bf16::from_f32(*x).to_le_bytes()),
                        d => panic!("{d}"),
                    }
                }
                buf
            })
            .collect();
        let views: Vec<_> = l
            .bindings
            .iter()
            .zip(&bufs)
            .map(|(b, buf)| buf.view(&b.view(&shape_of(b.value)).unwrap()))
            .collect();
        let p = ptx::emit(&l.kernel, &s, arch).unwrap();
        let r = sim::run_with(&p, &views, sim::Checks::default())
            .unwrap_or_else(|e| panic!("{s}: {e}"));
        out.push((s.to_string(), r));
    }
    out
}

#[test]
fn swizzled_bf16_gemm_ldmatrix_is_conflict_free() {
    let src = "graph @mm(%a: bf16[M, K], %b: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %a, %b : f32[M, N]\n  return %2\n}";
    let mut with_ldmatrix = 0;
    for arch in [Arch::Sm80, Arch::Sm90a] {
        for (s, r) in reports(src, &[("M", 64), ("K", 64), ("N", 64)], DType::BF16, arch) {
            let c = &r.counters;
            assert!(c.mix.mma > 0, "{s} ({arch}): no mma");
            if c.ldmatrix.requests > 0 {
                with_ldmatrix += 1;
                assert_eq!(
                    c.ldmatrix.bank_conflicts(),
                    0,
                    "{s} ({arch}): {:?}",
                    c.ldmatrix
                );
                assert_eq!(c.ldmatrix.wavefronts, c.ldmatrix.ideal_wavefronts);
            }
        }
    }
    assert!(with_ldmatrix > 0, "no schedule used ldmatrix");
}

#[test]
fn row_kernel_f32_loads_touch_the_minimum_sectors() {
    let src =
        "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}";
    let rs = reports(src, &[("R", 8), ("C", 1024)], DType::F32, Arch::Sm80);
    assert!(!rs.is_empty());
    for (s, r) in rs {
        let g = &r.counters.global_loads;
        assert!(g.requests > 0, "{s}");
        assert_eq!(g.sectors, g.ideal_sectors, "{s}: {g:?}");
        assert_eq!(g.efficiency(), 1.0);
        let st = &r.counters.global_stores;
        assert_eq!(st.sectors, st.ideal_sectors, "{s}: {st:?}");
    }
}
