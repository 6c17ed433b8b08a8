//! Every compiled kernel of the sample graphs (and the pipeline-fused column reductions of two
//! backward graphs), under every schedule of its class, emits PTX for every arch; when `TESSERA_PTXAS` names a ptxas binary, ptxas must accept each file with no
//! spills (CI sets it through `scripts/ptxas-check`).

use std::process::Command;
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::{DType, graph, pipeline};

const GRAPHS: &[&str] = &[
    "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}",
    // Under `deterministic`: the canonical `exp` sequence (`exp_canonical`).
    "graph @smd(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x policy=deterministic : f32[R, C]\n  return %1\n}",
    "graph @ln(%x: bf16[R, C], %g: f32[C], %b: f32[C]) -> f32[R, C] {\n  %3 = layernorm %x, %g, %b eps=1e-5 : f32[R, C]\n  return %3\n}",
    "graph @rms(%x: f32[R, C], %g: f32[C]) -> f32[R, C] {\n  %2 = rmsnorm %x, %g eps=1e-6 : f32[R, C]\n  return %2\n}",
    "graph @ew(%x: f32[R, C], %y: f32[C]) -> bf16[R, C] {\n  %2 = mul %x, %y : f32[R, C]\n  %3 = gelu %2 : f32[R, C]\n  %4 = cast %3 : bf16[R, C]\n  return %4\n}",
    "graph @red(%x: f32[R, C]) -> f32[C] {\n  %1 = reduce.sum %x axes=[1] keepdim=true policy=fast : f32[R, 1]\n  %2 = sub %x, %1 : f32[R, C]\n  %3 = reduce.max %2 axes=[0] keepdim=false policy=fast : f32[C]\n  return %3\n}",
    "graph @tr(%x: f32[B, R, C]) -> f32[B, C, R] {\n  %1 = transpose %x : f32[B, C, R]\n  %2 = tanh %1 : f32[B, C, R]\n  return %2\n}",
    // A causal mask fused into the score matmul (attention's backward graph recomputes it).
    "graph @cm(%q: f32[B, S, D], %k: f32[B, D, T]) -> f32[B, S, T] {\n  %2 = matmul %q, %k acc=f32 : f32[B, S, T]\n  %3 = const 0.5 : f32[]\n  %4 = mul %2, %3 : f32[B, S, T]\n  %5 = causal_mask %4 : f32[B, S, T]\n  return %5\n}",
    // Row programs: rmsnorm and layernorm from primitives with a rank-0 `eps` (one kernel each).
    "graph @rmsp(%x: f32[R, C], %g: f32[C], %e: f32[]) -> f32[R, C] {\n  %3 = mul %x, %x : f32[R, C]\n  %4 = reduce.mean %3 axes=[1] keepdim=true : f32[R, 1]\n  %5 = add %4, %e : f32[R, 1]\n  %6 = rsqrt %5 : f32[R, 1]\n  %7 = mul %x, %6 : f32[R, C]\n  %8 = mul %7, %g : f32[R, C]\n  return %8\n}",
    "graph @lnp(%x: bf16[R, C], %g: f32[C], %b: f32[C], %e: f32[]) -> f32[R, C] {\n  %4 = cast %x : f32[R, C]\n  %5 = reduce.mean %4 axes=[1] keepdim=true : f32[R, 1]\n  %6 = sub %4, %5 : f32[R, C]\n  %7 = mul %6, %6 : f32[R, C]\n  %8 = reduce.mean %7 axes=[1] keepdim=true : f32[R, 1]\n  %9 = add %8, %e : f32[R, 1]\n  %10 = rsqrt %9 : f32[R, 1]\n  %11 = mul %6, %10 : f32[R, C]\n  %12 = mul %11, %g : f32[R, C]\n  %13 = add %12, %b : f32[R, C]\n  return %13\n}",
    // Softmax along an inner axis (permute, row softmax, permute back) and reductions over
    // inner axes (batched column reductions of merged views).
    "graph @axes(%x: f32[A, B, C, D]) -> f32[1, D] {\n  %1 = softmax %x axis=1 : f32[A, B, C, D]\n  %2 = reduce.max %1 axes=[0] keepdim=true : f32[1, B, C, D]\n  %3 = reduce.mean %2 axes=[2] keepdim=false : f32[1, B, D]\n  %4 = reduce.sum %3 axes=[1] keepdim=false : f32[1, D]\n  %5 = tanh %4 : f32[1, D]\n  return %5\n}",
    // Interior padding (zero insertion) of the rows and columns of an NHWC tensor.
    "graph @dilate(%x: f32[N, 4, 3, C]) -> f32[N, 8, 8, C] {\n  %1 = pad %x lo=[0, 1, 2, 0] hi=[0, 0, -1, 0] interior=[0, 1, 2, 0] : f32[N, 8, 8, C]\n  return %1\n}",
    // An operand broadcast along the middle axes (the gradient of a middle-axes mean): the
    // elementwise kernel's [batch, rows, cols] view.
    "graph @bmid(%x: f32[B, H, W, C], %m: f32[B, 1, 1, C]) -> f32[B, H, W, C] {\n  %2 = mul %x, %m : f32[B, H, W, C]\n  %3 = tanh %2 : f32[B, H, W, C]\n  return %3\n}",
];

/// Forward graphs whose gradient w.r.t. the named parameter holds a column reduction with a
/// prologue (pipeline fusion): the bias of linear + gelu, layernorm's γ. Only those kernels
/// are checked.
const BACKWARD: &[(&str, &str)] = &[
    (
        "graph @lg(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {\n  %3 = matmul %x, %w acc=f32 : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  return %5\n}",
        "b",
    ),
    (
        "graph @ln(%x: f32[M, N], %g: f32[N], %b: f32[N]) -> f32[M, N] {\n  %3 = layernorm %x, %g, %b eps=1e-5 : f32[M, N]\n  return %3\n}",
        "g",
    ),
];

#[test]
fn generic_kernels_emit_and_pass_ptxas() {
    let ptxas = std::env::var("TESSERA_PTXAS").ok();
    let dir = std::env::temp_dir().join(format!("tessera-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    let mut graphs: Vec<(graph::Graph, bool)> = GRAPHS
        .iter()
        .map(|src| (graph::parse(src).unwrap(), false))
        .collect();
    for (src, p) in BACKWARD {
        let g = graph::parse(src).unwrap();
        graphs.push((tessera_ir::autodiff::grad_wrt(&g, p).unwrap(), true));
    }
    for (g, prologue_only) in &graphs {
        let c = pipeline::compile(g, &Default::default()).unwrap();
        for (i, k) in c.kernels.iter().enumerate() {
            if *prologue_only && k.fused.prologue.is_empty() {
                continue;
            }
            for s in Schedule::space(k.fused.class, DType::F32) {
                let l = c.lower_with(i, &s).unwrap();
                for arch in Arch::ALL {
                    let p = ptx::emit(&l.kernel, &s, arch).unwrap_or_else(|e| panic!("{e}"));
                    assert!(
                        p.text.starts_with("//")
                            && p.text.contains(&format!(".target {}", arch.target()))
                    );
                    let Some(ptxas) = &ptxas else { continue };
                    let f = dir.join(format!("{}_{}.ptx", p.entry, checked));
                    std::fs::write(&f, &p.text).unwrap();
                    let out = Command::new(ptxas)
                        .args([
                            "-v",
                            &format!("-arch={}", arch.target()),
                            f.to_str().unwrap(),
                            "-o",
                            "/dev/null",
                        ])
                        .output()
                        .unwrap();
                    let log = String::from_utf8_lossy(&out.stderr).to_string();
                    assert!(
                        out.status.success(),
                        "ptxas rejected {} ({s}, {arch}):\n{log}\n{}",
                        p.entry,
                        p.text
                    );
                    assert!(
                        log.contains("0 bytes spill stores"),
                        "{} ({s}, {arch}) spills:\n{log}",
                        p.entry
                    );
                    checked += 1;
                }
            }
        }
    }
    if ptxas.is_none() {
        eprintln!(
            "TESSERA_PTXAS not set: PTX emitted but ptxas not run (scripts/ptxas-check runs it)"
        );
    } else {
        eprintln!("ptxas accepted {checked} kernels");
    }
}
