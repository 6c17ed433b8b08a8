//! Tests of the GEMM template: golden text, required instructions, errors, and (with
//! `TESSERA_PTXAS`) ptxas acceptance with 0 spills for every schedule × arch × dtype.

use super::emit;
use crate::DType;
use crate::pipeline::{CompileOptions, compile};
use crate::schedule::{KernelClass, Schedule};
use crate::target::ptx::{Arch, PtxKernel};

/// `linear + bias + gelu` with inputs of `dt`, output cast to `dt`.
fn linear_gelu(dt: DType) -> String {
    format!(
        "graph @linear_gelu(%x: {dt}[M, K], %w: {dt}[K, N], %b: f32[N]) -> {dt}[M, N] {{
  %3 = matmul %x, %w : f32[M, N]
  %4 = add %3, %b : f32[M, N]
  %5 = gelu %4 : f32[M, N]
  %6 = cast %5 : {dt}[M, N]
  return %6
}}"
    )
}

fn kernel(src: &str, s: &Schedule) -> crate::tile::Kernel {
    let g = crate::graph::parse(src).unwrap();
    let c = compile(&g, &CompileOptions::default()).unwrap();
    c.lower_with(0, s).unwrap().kernel
}

fn gemm(src: &str, s: &Schedule, arch: Arch) -> PtxKernel {
    let k = kernel(src, s);
    emit(&k, s, arch)
        .unwrap()
        .unwrap_or_else(|| panic!("not recognised as a GEMM:\n{k}"))
}

fn sched(tile: [u32; 3], warps: u32, stages: u32) -> Schedule {
    Schedule {
        tile: tile.to_vec(),
        warps,
        stages,
        ..Schedule::default_for(KernelClass::Matmul, DType::BF16)
    }
}

#[test]
fn golden_small_bf16_bias_gelu() {
    let p = gemm(
        &linear_gelu(DType::BF16),
        &sched([32, 32, 16], 2, 2),
        Arch::Sm80,
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/gemm_bf16_32x32x16_bias_gelu.sm_80.ptx");
    if std::env::var("TESSERA_TEST_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &p.text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with TESSERA_TEST_BLESS=1)", path.display()));
    assert!(
        want == p.text,
        "golden mismatch: {} (TESSERA_TEST_BLESS=1 rewrites it)",
        path.display()
    );
    assert_eq!((p.threads, p.dyn_smem), (64, 2 * (32 * 16 + 16 * 32) * 2));
}

#[test]
fn bf16_gemm_uses_tensor_core_instructions() {
    for s in Schedule::space(KernelClass::Matmul, DType::BF16) {
        for stages in [1, 3] {
            let s = Schedule {
                stages,
                ..s.clone()
            };
            let p = gemm(&linear_gelu(DType::BF16), &s, Arch::Sm90a);
            assert!(
                p.text
                    .contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                "{s}"
            );
            assert!(
                p.text.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                "{s}"
            );
            assert!(
                p.text
                    .contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
                "{s}"
            );
            assert!(
                p.text.contains("cp.async.cg.shared.global") || stages == 1,
                "{s}"
            );
            assert!(p.text.contains(".version 8.0\n.target sm_90a"));
        }
    }
}

#[test]
fn f32_gemm_uses_ffma_and_default_fits() {
    let s = Schedule::default_for(KernelClass::Matmul, DType::F32);
    let p = gemm(&linear_gelu(DType::F32), &s, Arch::Sm80);
    assert!(p.text.contains("fma.rn.f32") && !p.text.contains("mma.sync"));
    assert!(p.dyn_smem <= Arch::Sm80.limits().smem_per_block_optin);
}

#[test]
fn stages_that_do_not_fit_are_reported_not_hidden() {
    // f32 128×128×64 stages are 64 KB: three fit H100's 227 KB, two fit A100's 163 KB, one fits
    // Ada's 99 KB. The kernel says what it built.
    let s = Schedule::default_for(KernelClass::Matmul, DType::F32);
    assert_eq!(s.stages, 3);
    for (arch, used) in [(Arch::Sm90a, 3), (Arch::Sm80, 2), (Arch::Sm89, 1)] {
        let p = gemm(&linear_gelu(DType::F32), &s, arch);
        let want = (used != 3).then_some((3, used));
        assert_eq!(p.lowered_stages, want, "{arch}");
        assert_eq!(p.dyn_smem, used * 64 * 1024, "{arch}");
        assert_eq!(
            p.text.contains(&format!("stages lowered from 3 to {used}")),
            used != 3,
            "{arch}"
        );
        assert!(p.dyn_smem <= arch.limits().smem_per_block_optin);
    }
}

#[test]
fn batched_and_row_broadcast_epilogue() {
    let src = "graph @batched(%a: f16[B, M, K], %b: f16[B, K, N], %c: f32[M, 1]) -> f32[B, M, N] {
  %2 = matmul %a, %b : f32[B, M, N]
  %3 = mul %2, %c : f32[B, M, N]
  %4 = tanh %3 : f32[B, M, N]
  return %4
}";
    let p = gemm(
        src,
        &Schedule::default_for(KernelClass::Matmul, DType::F16),
        Arch::Sm89,
    );
    assert!(p.text.contains("%ctaid.z") && p.text.contains(".f32.f16.f16.f32"));
}

#[test]
fn non_gemm_is_not_ours_and_unknown_epilogue_ops_are_errors() {
    let src = "graph @sm(%x: f32[R, C]) -> f32[R, C] {
  %1 = softmax %x : f32[R, C]
  return %1
}";
    let g = crate::graph::parse(src).unwrap();
    let c = compile(&g, &CompileOptions::default()).unwrap();
    let k = &c.kernels[0];
    assert_eq!(emit(&k.lowered.kernel, &k.schedule, Arch::Sm80), Ok(None));

    let s = Schedule::default_for(KernelClass::Matmul, DType::BF16);
    let mut k = kernel(&linear_gelu(DType::BF16), &s);
    // Replace the gelu with an op the epilogue cannot run per element.
    let gelu = k.insts.iter().position(|d| d.op.name() == "gelu").unwrap();
    let crate::tile::Op::Unary(_, x) = k.insts[gelu].op.clone() else {
        unreachable!()
    };
    k.insts[gelu].op = crate::tile::Op::Trans(x);
    let e = emit(&k, &s, Arch::Sm80).unwrap_err();
    assert!(e.message.contains("`trans`"), "{e}");
}

#[test]
fn fp8_gemm_uses_fp8_tensor_cores_and_satfinite_epilogue() {
    for dt in [DType::F8E4M3, DType::F8E5M2] {
        let t = crate::target::ptx::math::fp8_name(dt).unwrap();
        for s in Schedule::space(KernelClass::Matmul, dt) {
            for arch in [Arch::Sm89, Arch::Sm90a] {
                let p = gemm(&linear_gelu(dt), &s, arch);
                let has = |x: &str| p.text.contains(x);
                assert!(
                    has(&format!(
                        "mma.sync.aligned.m16n8k32.row.col.f32.{t}.{t}.f32"
                    )),
                    "{dt} {s} {arch}"
                );
                assert!(has("ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
                assert!(has(&format!("cvt.rn.satfinite.{t}x2.f32")));
                assert!(has(&format!(".version 8.4\n.target {arch}")));
                assert!(p.dyn_smem <= arch.limits().smem_per_block_optin);
            }
        }
    }
    // BK must hold whole k32 steps
    let e = emit(
        &kernel(&linear_gelu(DType::F8E4M3), &sched([64, 64, 16], 4, 2)),
        &sched([64, 64, 16], 4, 2),
        Arch::Sm89,
    )
    .unwrap_err();
    assert!(e.message.contains("multiple of 32"), "{e}");
    // sm_80 has no fp8 at all: an error from the emitter's entry, not a fallback
    let s = Schedule::default_for(KernelClass::Matmul, DType::F8E4M3);
    let e = crate::target::ptx::emit(&kernel(&linear_gelu(DType::F8E4M3), &s), &s, Arch::Sm80)
        .unwrap_err();
    assert!(e.message.contains("sm_89"), "{e}");
}

/// ptxas -v on every schedule × arch × dtype: accepted, 0 spill bytes, no injected waits.
#[test]
fn ptxas_accepts_every_schedule_without_spills() {
    let all = Arch::ALL.to_vec();
    ptxas_check(&[(DType::BF16, &all), (DType::F16, &all), (DType::F32, &all)]);
}

/// The same for the fp8 tensor-core path on the archs that have it (`scripts/ptxas-check`
/// runs this one: the 16-bit and f32 GEMMs are among the precompiled library modules).
#[test]
fn fp8_ptxas_accepts_every_schedule_without_spills() {
    let fp8 = [Arch::Sm89, Arch::Sm90a];
    ptxas_check(&[(DType::F8E4M3, &fp8), (DType::F8E5M2, &fp8)]);
}

fn ptxas_check(cases: &[(DType, &[Arch])]) {
    let Ok(ptxas) = std::env::var("TESSERA_PTXAS") else {
        eprintln!("TESSERA_PTXAS is not set: skipping the ptxas check of the GEMM template");
        return;
    };
    let dir = std::env::temp_dir().join(format!("tessera-gemm-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut jobs = Vec::new();
    for &(dt, arches) in cases {
        for s in Schedule::space(KernelClass::Matmul, dt) {
            for &arch in arches {
                let p = gemm(&linear_gelu(dt), &s, arch);
                let t: Vec<String> = s.tile.iter().map(|x| x.to_string()).collect();
                let name = format!("{dt}_{}_w{}_s{}_{arch}", t.join("x"), s.warps, s.stages);
                let f = dir.join(format!("{name}.ptx"));
                std::fs::write(&f, &p.text).unwrap();
                jobs.push((name, f, arch, p.dyn_smem));
            }
        }
    }
    let rows: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(8))
            .map(|chunk| {
                let ptxas = &ptxas;
                sc.spawn(move || {
                    chunk
                        .iter()
                        .map(|(name, f, arch, smem)| {
                            let o = std::process::Command::new(ptxas)
                                .args([
                                    "-v",
                                    &format!("-arch={arch}"),
                                    f.to_str().unwrap(),
                                    "-o",
                                    "/dev/null",
                                ])
                                .output()
                                .expect("run ptxas");
                            let err = String::from_utf8_lossy(&o.stderr).to_string();
                            assert!(o.status.success(), "{name}: ptxas rejected it:\n{err}");
                            assert!(
                                !err.contains("(C75"),
                                "{name}: ptxas injected waits:\n{err}"
                            );
                            let num = |pat: &str| {
                                err.split(pat)
                                    .next()
                                    .and_then(|s| s.split_whitespace().last())
                                    .and_then(|n| n.parse::<u32>().ok())
                            };
                            let regs = err
                                .split("Used ")
                                .nth(1)
                                .and_then(|s| s.split_whitespace().next())
                                .unwrap_or("?")
                                .to_string();
                            let spills = num(" bytes spill stores").unwrap_or(0)
                                + num(" bytes spill loads").unwrap_or(0);
                            assert_eq!(spills, 0, "{name}: spills\n{err}");
                            format!("| {name} | {regs} | {spills} | {smem} |")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "| kernel_dtype_schedule_arch | registers | spill bytes | dyn smem |\n|---|---|---|---|"
    );
    for r in rows {
        eprintln!("{r}");
    }
}

/// Attention with inputs of `dt` (head dim 64, values 32), the output cast back to `dt`.
fn attention(dt: DType, causal: bool) -> String {
    format!(
        "graph @at(%q: {dt}[B, S, 64], %k: {dt}[B, T, 64], %v: {dt}[B, T, 32]) -> {dt}[B, S, 32] {{
  %3 = attention %q, %k, %v scale=0.125 causal={causal} policy=fast : f32[B, S, 32]
  %4 = cast %3 : {dt}[B, S, 32]
  return %4
}}"
    )
}

#[test]
fn attention_takes_the_tensor_core_template_for_16_bit_inputs_only() {
    for dt in [DType::BF16, DType::F16] {
        for causal in [false, true] {
            for s in Schedule::space(KernelClass::Attention, dt) {
                let k = kernel(&attention(dt, causal), &s);
                for arch in Arch::ALL {
                    let p = emit(&k, &s, arch).unwrap().expect("the attention template");
                    assert!(p.text.contains("tensor-core attention"), "{s}");
                    let mma = format!("mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32");
                    // Q·Kᵀ and P·V, per m16 tile and n8 tile pair.
                    assert!(p.text.matches(&mma).count() >= 2, "{s}");
                    assert!(p.text.contains("cp.async.cg.shared.global"));
                    assert!(
                        p.text
                            .contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16")
                    );
                    assert_eq!(p.threads, s.warps * 32);
                }
            }
        }
    }
    // f32 needs FFMA for f32 accuracy; a warp count that cannot own whole m16 tiles of query
    // rows runs the schedule as written on the generic emitter.
    let s = Schedule::default_for(KernelClass::Attention, DType::F32);
    assert!(
        emit(&kernel(&attention(DType::F32, false), &s), &s, Arch::Sm80)
            .unwrap()
            .is_none()
    );
    let s = Schedule {
        warps: 8,
        ..sched_attention([64, 64])
    };
    let k = kernel(&attention(DType::BF16, false), &s);
    assert!(emit(&k, &s, Arch::Sm80).unwrap().is_none());
    assert!(crate::target::ptx::emit(&k, &s, Arch::Sm80).is_ok());
}

fn sched_attention(tile: [u32; 2]) -> Schedule {
    Schedule {
        tile: tile.to_vec(),
        ..Schedule::default_for(KernelClass::Attention, DType::BF16)
    }
}
