//! fp8 GEMM with per-tensor scales: e4m3/e5m2 operands decoded and multiplied with f32
//! accumulation, the product rescaled by `1 / (s_x · s_w)`, on the CPU and on the simulator
//! (sm_89, sm_90a), compared bit for bit under `deterministic` (every backend runs the same
//! in-order FMA chain over the exactly decoded fp8 values).

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
