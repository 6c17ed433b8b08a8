//! Agreement with the CPU backend: compiled graphs, lowered under several schedules, emitted
//! for every arch, run on the simulator with random inputs and compared with the CPU backend
//! running the same Tile IR. Shapes are not multiples of the tiles.
//!
//! Error measure: `max_i |sim_i - cpu_i| / max(|cpu_i|, 1)`; f32 outputs must be under 1e-5,
//! bf16 outputs under 1e-2. Every output element must be written (outputs start as NaN).

use super::Buf;
use crate::backend::{cpu, sim};
use std::collections::HashMap;
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::{DType, Dim, graph, pipeline};

fn fill(dtype: DType, dims: &[usize], seed: u64, writable: bool) -> Buf {
    let n: usize = dims.iter().product();
    let v = super::rand(n, seed, 2.0);
    let mut b = Buf::zeros(dtype, dims, writable);
    let bytes = b.as_bytes_mut();
    match dtype {
        DType::F32 => bytes.copy_from_slice(bytemuck::cast_slice(&v)),
        DType::BF16 => {
            for (i, x) in v.iter().enumerate() {
                bytes[2 * i..2 * i + 2].copy_from_slice(&half::bf16::from_f32(*x).to_le_bytes());
            }
        }
        d => panic!("fill {d}"),
    }
    b
}

fn nan_buf(dtype: DType, dims: &[usize]) -> Buf {
    let mut b = Buf::zeros(dtype, dims, true);
    b.as_bytes_mut().fill(0xff);
    b
}

fn max_err(want: &[f32], got: &[f32]) -> (f32, usize) {
    let mut worst = (0f32, 0usize);
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        let e = if a.is_nan() && b.is_nan() {
            0.0
        } else if a.is_nan() || b.is_nan() {
            f32::INFINITY
        } else {
            (a - b).abs() / a.abs().max(1.0)
        };
        if e > worst.0 || e.is_nan() {
            worst = (e, i);
        }
    }
    worst
}

/// Runs every kernel of `src` (symbols bound by `syms`) under the first `nsched` schedules of
/// its class (space of `sdt`) on every arch; returns the number of simulator runs compared.
fn agree(src: &str, syms: &[(&str, usize)], sdt: DType, nsched: usize) -> usize {
    let g = graph::parse(src).unwrap();
    let c = pipeline::compile(&g, &Default::default()).unwrap();
    let sym: HashMap<&str, usize> = syms.iter().copied().collect();
    let shape_of = |v: tessera_ir::graph::Value| -> Vec<usize> {
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
    let mut vals: HashMap<u32, Buf> = HashMap::new();
    for (i, &p) in g.params.iter().enumerate() {
        vals.insert(p.0, fill(g.ty(p).dtype, &shape_of(p), 17 + i as u64, false));
    }
    let mut runs = 0;
    for (i, k) in c.kernels.iter().enumerate() {
        let out_v = k.fused.output;
        let (odt, oshape) = (g.ty(out_v).dtype, shape_of(out_v));
        let tol = if odt == DType::F32 { 1e-5 } else { 1e-2 };
        let mut first: Option<Buf> = None;
        let space = Schedule::space(k.fused.class, sdt);
        assert!(
            space.len() >= nsched.min(3),
            "{}: fewer than 3 schedules",
            k.fused.name
        );
        for s in space.into_iter().take(nsched) {
            let l = c.lower_with(i, &s).unwrap();
            let n = l.bindings.len();
            let bufs_for = |out: &Buf| -> Vec<crate::backend::Buffer> {
                l.bindings
                    .iter()
                    .enumerate()
                    .map(|(j, b)| {
                        let view = b.view(&shape_of(b.value)).unwrap();
                        if j == n - 1 {
                            out.view(&view)
                        } else {
                            vals[&b.value.0].view(&view)
                        }
                    })
                    .collect()
            };
            let mut want = nan_buf(odt, &oshape);
            want.writable = true;
            cpu::launch(&cpu::Program::new(l.kernel.clone()), &bufs_for(&want)).unwrap();
            let want_f = want.to_f32();
            for arch in Arch::ALL {
                let p = ptx::emit(&l.kernel, &s, arch).unwrap_or_else(|e| panic!("{e}"));
                let got = nan_buf(odt, &oshape);
                let stats = sim::run(&p, &bufs_for(&got))
                    .unwrap_or_else(|e| panic!("{} ({s}, {arch}): {e}", p.entry));
                assert!(stats.ctas > 0);
                let (e, at) = max_err(&want_f, &got.to_f32());
                assert!(
                    e < tol,
                    "{} ({s}, {arch}): error {e} at element {at}: cpu {} sim {}",
                    p.entry,
                    want_f[at],
                    got.to_f32()[at]
                );
                runs += 1;
            }
            if first.is_none() {
                first = Some(want);
            }
        }
        let mut out = first.expect("one schedule");
        out.writable = false;
        vals.insert(out_v.0, out);
    }
    runs
}

#[test]
fn softmax() {
    let src =
        "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}";
    assert_eq!(agree(src, &[("R", 37), ("C", 300)], DType::F32, 3), 9);
}

#[test]
fn layernorm_bf16_in() {
    let src = "graph @ln(%x: bf16[R, C], %g: f32[C], %b: f32[C]) -> f32[R, C] {\n  %3 = layernorm %x, %g, %b eps=1e-5 : f32[R, C]\n  return %3\n}";
    assert_eq!(agree(src, &[("R", 19), ("C", 200)], DType::F32, 3), 9);
}

#[test]
fn rmsnorm() {
    let src = "graph @rms(%x: f32[R, C], %g: f32[C]) -> f32[R, C] {\n  %2 = rmsnorm %x, %g eps=1e-6 : f32[R, C]\n  return %2\n}";
    assert_eq!(agree(src, &[("R", 23), ("C", 130)], DType::F32, 3), 9);
}

#[test]
fn elementwise_gelu_to_bf16() {
    let src = "graph @ew(%x: f32[R, C], %y: f32[C]) -> bf16[R, C] {\n  %2 = mul %x, %y : f32[R, C]\n  %3 = gelu %2 : f32[R, C]\n  %4 = cast %3 : bf16[R, C]\n  return %4\n}";
    assert_eq!(agree(src, &[("R", 13), ("C", 300)], DType::F32, 3), 9);
}

#[test]
fn elementwise_add() {
    let src = "graph @add(%x: f32[R, C], %y: f32[R, C]) -> f32[R, C] {\n  %2 = add %x, %y : f32[R, C]\n  return %2\n}";
    assert_eq!(agree(src, &[("R", 9), ("C", 333)], DType::F32, 3), 9);
}

#[test]
fn reductions() {
    let src = "graph @red(%x: f32[R, C]) -> f32[C] {\n  %1 = reduce.sum %x axes=[1] keepdim=true policy=fast : f32[R, 1]\n  %2 = sub %x, %1 : f32[R, C]\n  %3 = reduce.max %2 axes=[0] keepdim=false policy=fast : f32[C]\n  return %3\n}";
    assert!(agree(src, &[("R", 45), ("C", 150)], DType::F32, 3) >= 9);
}

#[test]
fn transpose() {
    let src = "graph @tr(%x: f32[B, R, C]) -> f32[B, C, R] {\n  %1 = transpose %x : f32[B, C, R]\n  %2 = tanh %1 : f32[B, C, R]\n  return %2\n}";
    assert_eq!(
        agree(src, &[("B", 2), ("R", 33), ("C", 70)], DType::F32, 3),
        9
    );
}

#[test]
fn matmul_f32() {
    let src = "graph @mm(%a: f32[M, K], %b: f32[K, N]) -> f32[M, N] {\n  %2 = matmul %a, %b : f32[M, N]\n  return %2\n}";
    assert_eq!(
        agree(src, &[("M", 70), ("K", 50), ("N", 90)], DType::F32, 3),
        9
    );
}

#[test]
fn matmul_bf16() {
    let src = "graph @mm(%a: bf16[M, K], %b: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %a, %b : f32[M, N]\n  return %2\n}";
    assert_eq!(
        agree(src, &[("M", 70), ("K", 40), ("N", 90)], DType::BF16, 3),
        9
    );
}

#[test]
fn linear_bias_gelu_bf16() {
    let src = "graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> bf16[M, N] {\n  %3 = matmul %x, %w : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  %6 = cast %5 : bf16[M, N]\n  return %6\n}";
    assert_eq!(
        agree(src, &[("M", 70), ("K", 40), ("N", 90)], DType::BF16, 3),
        9
    );
}

#[test]
fn batched_matmul() {
    let src = "graph @bmm(%a: f32[B, M, K], %b: f32[B, K, N]) -> f32[B, M, N] {\n  %2 = matmul %a, %b : f32[B, M, N]\n  return %2\n}";
    assert_eq!(
        agree(
            src,
            &[("B", 2), ("M", 70), ("K", 40), ("N", 90)],
            DType::F32,
            3
        ),
        9
    );
}

#[test]
fn linear_bias_gelu_f32() {
    let src = "graph @linear_gelu(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {\n  %3 = matmul %x, %w : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  return %5\n}";
    assert_eq!(
        agree(src, &[("M", 70), ("K", 40), ("N", 90)], DType::F32, 3),
        9
    );
}

/// Every schedule of every graph above, on every arch, and the golden PTX files parse and
/// decode (no unknown instruction), not only the three schedules that are run.
#[test]
fn every_emitted_module_decodes() {
    let graphs = [
        (
            "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}",
            DType::F32,
        ),
        (
            "graph @ln(%x: bf16[R, C], %g: f32[C], %b: f32[C]) -> f32[R, C] {\n  %3 = layernorm %x, %g, %b eps=1e-5 : f32[R, C]\n  return %3\n}",
            DType::F32,
        ),
        (
            "graph @rms(%x: f32[R, C], %g: f32[C]) -> f32[R, C] {\n  %2 = rmsnorm %x, %g eps=1e-6 : f32[R, C]\n  return %2\n}",
            DType::F32,
        ),
        (
            "graph @ew(%x: f32[R, C], %y: f32[C]) -> bf16[R, C] {\n  %2 = mul %x, %y : f32[R, C]\n  %3 = gelu %2 : f32[R, C]\n  %4 = cast %3 : bf16[R, C]\n  return %4\n}",
            DType::F32,
        ),
        (
            "graph @red(%x: f32[R, C]) -> f32[C] {\n  %1 = reduce.sum %x axes=[1] keepdim=true policy=fast : f32[R, 1]\n  %2 = sub %x, %1 : f32[R, C]\n  %3 = reduce.max %2 axes=[0] keepdim=false policy=fast : f32[C]\n  return %3\n}",
            DType::F32,
        ),
        (
            "graph @tr(%x: f32[B, R, C]) -> f32[B, C, R] {\n  %1 = transpose %x : f32[B, C, R]\n  %2 = tanh %1 : f32[B, C, R]\n  return %2\n}",
            DType::F32,
        ),
        (
            "graph @mm(%a: f32[M, K], %b: f32[K, N]) -> f32[M, N] {\n  %2 = matmul %a, %b : f32[M, N]\n  return %2\n}",
            DType::F32,
        ),
        (
            "graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> bf16[M, N] {\n  %3 = matmul %x, %w : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  %6 = cast %5 : bf16[M, N]\n  return %6\n}",
            DType::BF16,
        ),
    ];
    let mut n = 0;
    for (src, sdt) in graphs {
        let g = graph::parse(src).unwrap();
        let c = pipeline::compile(&g, &Default::default()).unwrap();
        for (i, k) in c.kernels.iter().enumerate() {
            for s in Schedule::space(k.fused.class, sdt) {
                let l = c.lower_with(i, &s).unwrap();
                for arch in Arch::ALL {
                    let p = ptx::emit(&l.kernel, &s, arch).unwrap();
                    decodes(&p.text, &p.entry).unwrap_or_else(|e| {
                        panic!("{} ({s}, {arch}) line {}: {}", p.entry, e.line, e.message)
                    });
                    n += 1;
                }
            }
        }
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tessera-ir/tests/golden");
    for f in std::fs::read_dir(dir)
        .unwrap()
        .chain(std::fs::read_dir(format!("{dir}/ptx")).unwrap())
    {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "ptx") {
            let text = std::fs::read_to_string(&f).unwrap();
            let entry = text
                .split(".entry ")
                .nth(1)
                .and_then(|r| r.split('(').next())
                .unwrap()
                .trim()
                .to_string();
            decodes(&text, &entry)
                .unwrap_or_else(|e| panic!("{}: line {}: {}", f.display(), e.line, e.message));
            n += 1;
        }
    }
    assert!(n > 100, "{n}");
}

/// Opt-in: every `.ptx` file in `$TESSERA_SIM_PTX_DIR` (e.g. the output of
/// `cargo run -p tessera-kernels --example ptx_dump -- DIR`) parses and decodes.
#[test]
fn dumped_modules_decode() {
    let Ok(dir) = std::env::var("TESSERA_SIM_PTX_DIR") else {
        return;
    };
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "ptx") {
            let text = std::fs::read_to_string(&f).unwrap();
            let entry = text
                .split(".entry ")
                .nth(1)
                .and_then(|r| r.split('(').next())
                .unwrap()
                .trim()
                .to_string();
            decodes(&text, &entry)
                .unwrap_or_else(|e| panic!("{}: line {}: {}", f.display(), e.line, e.message));
            n += 1;
        }
    }
    eprintln!("{n} modules from {dir} decode");
    assert!(n > 0);
}

/// Parses `text` with the simulator; `Err` names the line of a syntax error or of the first
/// instruction of `entry` the simulator does not implement.
fn decodes(text: &str, entry: &str) -> Result<(), Decode> {
    let m = tessera_sim::Module::parse(text).map_err(|e| Decode {
        line: e.line,
        message: e.message,
    })?;
    let e = m.entry(entry).ok_or_else(|| Decode {
        line: 0,
        message: format!("no entry `{entry}`"),
    })?;
    match &e.unsupported {
        Some(u) => Err(Decode {
            line: u.line,
            message: format!("`{}`: {}", u.instruction, u.reason),
        }),
        None => Ok(()),
    }
}

struct Decode {
    line: u32,
    message: String,
}
