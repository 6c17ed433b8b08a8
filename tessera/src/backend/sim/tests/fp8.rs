//! fp8 GEMM with per-tensor scales: e4m3/e5m2 operands decoded and multiplied with f32
//! accumulation, the product rescaled in the epilogue, on the CPU and on the simulator (sm_89,
//! sm_90a). Under `fast` the PTX is the tensor-core path (`mma.sync.m16n8k32` on fp8
//! operands), compared within f32 accumulation-order error; under `deterministic` it is the
//! in-order FFMA chain over the exactly decoded values, compared bit for bit.

use super::Buf;
use super::policy::{Case, setup};
use tessera_ir::DType;
use tessera_ir::fp8::Fp8;
use tessera_ir::target::ptx::Arch;

fn fp8_fill(dtype: DType, dims: &[usize], seed: u64) -> Buf {
    let n: usize = dims.iter().product();
    let v = super::rand(n, seed, 3.0);
    let mut b = Buf::zeros(dtype, dims, false);
    match Fp8::of(dtype) {
        Some(f) => {
            // Quantised with the per-tensor scale 448 / amax (e4m3) or 57344 / amax (e5m2).
            let amax = v
                .iter()
                .fold(0f32, |m, x| m.max(x.abs()))
                .max(f32::MIN_POSITIVE);
            let s = (f.max() / amax as f64) as f32;
            for (o, x) in b.as_bytes_mut().iter_mut().zip(&v) {
                *o = f.encode((x * s) as f64, true);
            }
        }
        None => {
            assert_eq!(dtype, DType::F32);
            b.as_bytes_mut().copy_from_slice(bytemuck::cast_slice(&v));
        }
    }
    b
}

#[test]
fn fp8_gemm_cpu_and_sim_agree() {
    for (t, policy) in [
        ("f8e4m3", "deterministic"),
        ("f8e5m2", "deterministic"),
        ("f8e4m3", "fast"),
    ] {
        let case = Case {
            name: "fp8mm",
            src: format!(
                "graph @fp8mm(%x: {t}[M, K], %w: {t}[K, N], %s: f32[N]) -> f32[M, N] {{\n  %3 = matmul %x, %w acc=f32 policy={policy} : f32[M, N]\n  %4 = mul %3, %s : f32[M, N]\n  return %4\n}}"
            ),
            syms: vec![("M", 37), ("K", 200), ("N", 45)],
        };
        let s = setup(&case, fp8_fill);
        let sch = s.c.kernels[0].schedule.clone();
        let cpu = s.cpu(&sch, 2);
        for arch in [Arch::Sm89, Arch::Sm90a] {
            let text = ptx_text(&s, &sch, arch);
            let mma = format!("mma.sync.aligned.m16n8k32.row.col.f32.{0}.{0}.f32", &t[2..]);
            assert_eq!(
                text.contains(&mma),
                policy == "fast",
                "{t} {policy} {arch}: tensor cores under fast only"
            );
            let sim = s
                .sim(&sch, arch)
                .unwrap_or_else(|e| panic!("{t} {policy} {arch}: {e}"));
            let f = |b: &[u8]| -> Vec<f32> {
                b.chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            };
            let (c, g) = (f(&cpu), f(&sim));
            if policy == "deterministic" {
                assert!(c == g, "{t} {arch}: cpu and sim differ");
            } else {
                let e = c
                    .iter()
                    .zip(&g)
                    .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
                    .fold(0f32, f32::max);
                assert!(e < 1e-5, "{t} {arch}: {e}");
            }
        }
        // sm_80 has no fp8: an error, not a silent fallback.
        assert!(s.sim(&sch, Arch::Sm80).unwrap_err().contains("sm_89"));
    }
}

fn ptx_text(s: &super::policy::Setup, sch: &tessera_ir::schedule::Schedule, arch: Arch) -> String {
    let l = s.c.lower_with(0, sch).unwrap();
    tessera_ir::target::ptx::emit(&l.kernel, sch, arch)
        .unwrap()
        .text
}

/// An fp8 GEMM whose output is fp8 too (`Aggressive` precision's shape): per-tensor scale
/// (`%s: f32[1]`) applied in the tensor-core path's epilogue, the result quantised by
/// `cvt.rn.satfinite.e4m3x2.f32` two columns at a time. The CPU and the simulator sum in
/// different orders, so a result near a rounding boundary may land one fp8 code apart: at
/// most one code, on at most 2% of the outputs, and equal elsewhere.
#[test]
fn fp8_gemm_with_fp8_output_cpu_and_sim_agree() {
    for t in ["f8e4m3", "f8e5m2"] {
        let case = Case {
            name: "fp8mm8",
            src: format!(
                "graph @fp8mm8(%x: {t}[M, K], %w: {t}[K, N], %s: f32[1]) -> {t}[M, N] {{\n  %3 = matmul %x, %w acc=f32 policy=fast : f32[M, N]\n  %4 = mul %3, %s : f32[M, N]\n  %5 = cast %4 : {t}[M, N]\n  return %5\n}}"
            ),
            syms: vec![("M", 45), ("K", 96), ("N", 70)],
        };
        let fill = |dtype: DType, dims: &[usize], seed: u64| match dtype {
            // the operands carry scales of ~448/3 each: 2^-17 brings the products back to O(1)
            DType::F32 => Buf::f32s(&[1.0 / 131072.0], dims, false),
            _ => fp8_fill(dtype, dims, seed),
        };
        let s = setup(&case, fill);
        let sch = s.c.kernels[0].schedule.clone();
        let cpu = s.cpu(&sch, 2);
        for arch in [Arch::Sm89, Arch::Sm90a] {
            let text = ptx_text(&s, &sch, arch);
            assert!(text.contains("mma.sync.aligned.m16n8k32"), "{t} {arch}");
            assert!(text.contains(&format!("cvt.rn.satfinite.{}x2.f32", &t[2..])));
            let sim = s
                .sim(&sch, arch)
                .unwrap_or_else(|e| panic!("{t} {arch}: {e}"));
            assert_eq!(sim.len(), cpu.len());
            // adjacent codes of one sign differ by one in their low 7 bits
            let mut apart = 0;
            for (c, g) in cpu.iter().zip(&sim) {
                if c != g {
                    assert!(
                        c & 0x80 == g & 0x80 && (c & 0x7f).abs_diff(g & 0x7f) == 1,
                        "{t} {arch}: codes {c:#x} and {g:#x}"
                    );
                    apart += 1;
                }
            }
            assert!(apart * 50 <= cpu.len(), "{t} {arch}: {apart} codes apart");
            assert!(cpu.iter().any(|b| b & 0x7f != 0), "{t}: all zero");
        }
    }
}

/// Quantising to fp8 (`cast`, PTX `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`) gives the CPU's
/// bytes, saturation included (inputs reach ±2·max).
#[test]
fn fp8_cast_cpu_and_sim_agree() {
    for (t, max) in [("f8e4m3", 448f32), ("f8e5m2", 57344.0)] {
        let case = Case {
            name: "q",
            src: format!(
                "graph @q(%x: f32[R, C]) -> {t}[R, C] {{\n  %1 = cast %x : {t}[R, C]\n  return %1\n}}"
            ),
            syms: vec![("R", 19), ("C", 300)],
        };
        let fill = |dtype: DType, dims: &[usize], seed: u64| {
            assert_eq!(dtype, DType::F32);
            let n: usize = dims.iter().product();
            let v: Vec<f32> = super::rand(n, seed, 1.0)
                .iter()
                .map(|u| u * 2.0 * max * u.abs().powi(4))
                .collect();
            Buf::f32s(&v, dims, false)
        };
        let s = setup(&case, fill);
        let sch = s.c.kernels[0].schedule.clone();
        let cpu = s.cpu(&sch, 2);
        assert!(
            cpu.iter()
                .any(|b| b & 0x7f == if t == "f8e4m3" { 0x7e } else { 0x7b }),
            "{t}: nothing saturated"
        );
        for arch in [Arch::Sm89, Arch::Sm90a] {
            assert_eq!(s.sim(&sch, arch).unwrap(), cpu, "{t} {arch}");
        }
    }
}
