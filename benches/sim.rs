//! Simulated throughput of the PTX simulator (`tessera::backend::sim`): a 256×256×256 bf16
//! GEMM (bf16 in, f32 out) through the emitted PTX of the default schedule, and through the
//! tensor-core template's golden PTX (ldmatrix + mma.sync + cp.async), checkers on and off.
//!
//! Run: `cargo bench --bench sim`

use std::time::Instant;
use tessera::backend::Buffer;
use tessera::backend::sim::{Checks, simulate};
use tessera::ir::schedule::{KernelClass, Schedule};
use tessera::ir::target::ptx::{self, Arch, PtxKernel};
use tessera::ir::{DType, graph, pipeline};

fn buf(mem: &mut [u64], bytes: usize, dtype: DType, dims: &[usize], writable: bool) -> Buffer {
    let mut shape = [1usize; 3];
    shape[..dims.len()].copy_from_slice(dims);
    Buffer {
        dtype,
        shape,
        rank: dims.len(),
        ptr: mem.as_mut_ptr() as *mut u8,
        len: bytes,
        writable,
    }
}

fn bf16_mem(n: usize, seed: u64) -> Vec<u64> {
    let mut s = seed;
    let v: Vec<u16> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            tessera::bf16::from_f32((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5).to_bits()
        })
        .collect();
    let mut m = vec![0u64; (2 * n).div_ceil(8)];
    for (i, h) in v.iter().enumerate() {
        m[i / 4] |= (*h as u64) << (16 * (i % 4));
    }
    m
}

fn kernel(src: &str, s: &Schedule, arch: Arch) -> PtxKernel {
    let g = graph::parse(src).unwrap();
    let c = pipeline::compile(&g, &Default::default()).unwrap();
    let l = c.lower_with(0, s).unwrap();
    ptx::emit(&l.kernel, s, arch).unwrap()
}

fn main() {
    let n = 256usize;
    let mut rows = Vec::new();
    // 1. The emitted PTX (ptx::emit: the GEMM template where it applies, else the generic emitter).
    let mm = "graph @mm(%a: bf16[M, K], %b: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %a, %b : f32[M, N]\n  return %2\n}";
    let s = Schedule::default_for(KernelClass::Matmul, DType::BF16);
    let k = kernel(mm, &s, Arch::Sm80);
    let path = if k.text.contains("mma.sync") {
        "ptx::emit (tensor cores)"
    } else {
        "ptx::emit (generic, FFMA)"
    };
    rows.push((format!("matmul_bf16 {path}, {}", s), k, false));
    // 2. The GEMM template's golden PTX: linear + bias + gelu, bf16 out, 32x32x16 tile.
    let lg = "graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> bf16[M, N] {\n  %3 = matmul %x, %w : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  %6 = cast %5 : bf16[M, N]\n  return %6\n}";
    let s2 = Schedule {
        tile: vec![32, 32, 16],
        warps: 2,
        stages: 2,
        ..s.clone()
    };
    let mut k2 = kernel(lg, &s2, Arch::Sm80);
    k2.text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tessera-ir/tests/golden/gemm_bf16_32x32x16_bias_gelu.sm_80.ptx"
    ))
    .unwrap();
    k2.threads = 64;
    k2.dyn_smem = 4096;
    rows.push((
        "linear_bias_gelu_bf16 golden template PTX (mma.sync m16n8k16), tile 32x32x16".into(),
        k2,
        true,
    ));

    println!(
        "256x256x256 bf16 GEMM through the PTX simulator ({} rayon threads)\n",
        rayon_threads()
    );
    println!("| kernel | checkers | CTAs | warp instrs | time (s) | warp instrs/s |");
    println!("|---|---|---:|---:|---:|---:|");
    for (name, k, bias) in &rows {
        for checks in [Checks::default(), Checks { shared: false }] {
            let mut a = bf16_mem(n * n, 1);
            let mut b = bf16_mem(n * n, 2);
            let mut bias_m = vec![0u64; n / 2];
            let (odt, osz) = if *bias {
                (DType::BF16, 2)
            } else {
                (DType::F32, 4)
            };
            let mut out = vec![0u64; (n * n * osz).div_ceil(8)];
            let mut args = vec![
                buf(&mut a, n * n * 2, DType::BF16, &[n, n], false),
                buf(&mut b, n * n * 2, DType::BF16, &[n, n], false),
            ];
            if *bias {
                args.push(buf(&mut bias_m, n * 4, DType::F32, &[1, n], false));
            }
            args.push(buf(&mut out, n * n * osz, odt, &[n, n], true));
            let t = Instant::now();
            let st = simulate(k, &args, checks)
                .unwrap_or_else(|e| panic!("{e}"))
                .stats;
            let dt = t.elapsed().as_secs_f64();
            println!(
                "| {name} | {} | {} | {} | {:.2} | {:.2e} |",
                if checks.shared { "on" } else { "off" },
                st.ctas,
                st.warp_instructions,
                dt,
                st.warp_instructions as f64 / dt
            );
        }
    }
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
