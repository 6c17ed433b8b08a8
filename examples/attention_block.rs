//! A causal self-attention block in algebraic form: layer norm, the three projections, masked
//! attention, the output projection and the residual. The compiler's rewrite engine replaces
//! `softmax(causal_mask(q·kᵀ · s)) · v` by one fused attention kernel; fusion then puts the
//! residual add into the output projection's epilogue. The output is checked against the f64
//! reference.
//!
//! Run: `TESSERA_DUMP=fusion cargo run --release --example attention_block`
//! (the fusion trace, headed by the rewrite decisions, is printed to stderr). With
//! `-- --ptx DIR` it also writes each fused kernel's PTX for sm_80 and sm_90a to `DIR` (for
//! `ptxas`).

use tessera::ir::reference::ops;
use tessera::prelude::*;
use tessera_workspace::reference::{matmul, rel_error};

#[tessera::kernel(dims(C = 64, D = 64))]
fn attention_block(
    x: Tensor<f32, (B, S, C)>,
    gamma: Tensor<f32, (C,)>,
    beta: Tensor<f32, (C,)>,
    wq: Tensor<f32, (C, D)>,
    wk: Tensor<f32, (C, D)>,
    wv: Tensor<f32, (C, D)>,
    wo: Tensor<f32, (D, C)>,
) -> Tensor<f32, (B, S, C)> {
    let h = layernorm(x, gamma, beta, 1e-5);
    let q = h.matmul(wq);
    let k = h.matmul(wk);
    let v = h.matmul(wv);
    let a = softmax(causal_mask(q.matmul(k.t()) * 0.125)).matmul(v);
    a.matmul(wo) + x
}

fn main() -> tessera::Result<()> {
    let (b, s, c) = (2, 100, 64);
    let x = Tensor::<f32>::randn(&[b, s, c], 1);
    let gamma = Tensor::<f32>::randn(&[c], 2);
    let beta = Tensor::<f32>::randn(&[c], 3);
    let w: Vec<Tensor<f32>> = (0..4)
        .map(|i| Tensor::<f32>::randn(&[c, c], 10 + i))
        .collect();
    let y = attention_block(&x, &gamma, &beta, &w[0], &w[1], &w[2], &w[3])?;

    // f64 reference, step by step.
    let xv = x.to_f64_vec()?;
    let (g, be) = (gamma.to_f64_vec()?, beta.to_f64_vec()?);
    let mut h = vec![0.0; b * s * c];
    for r in 0..b * s {
        let row = &xv[r * c..(r + 1) * c];
        let mean = row.iter().sum::<f64>() / c as f64;
        let var = row.iter().map(|t| (t - mean) * (t - mean)).sum::<f64>() / c as f64;
        for j in 0..c {
            h[r * c + j] = (row[j] - mean) / (var + 1e-5).sqrt() * g[j] + be[j];
        }
    }
    let proj = |w: &Tensor<f32>| -> tessera::Result<Vec<f64>> {
        Ok(matmul(&h, &w.to_f64_vec()?, b * s, c, c))
    };
    let (q, k, v) = (proj(&w[0])?, proj(&w[1])?, proj(&w[2])?);
    let a = ops::attention(&q, &k, &v, b, s, s, c, c, 0.125, true);
    let mut want = matmul(&a, &w[3].to_f64_vec()?, b * s, c, c);
    for (o, xi) in want.iter_mut().zip(&xv) {
        *o += xi;
    }
    let e = rel_error(&y.to_f64_vec()?, &want);
    println!("attention block [{b}, {s}, {c}] on cpu: relative error vs f64 {e:.2e}");
    assert!(e < 1e-4, "relative error {e:e}");
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, dir] = args.as_slice()
        && flag == "--ptx"
    {
        use tessera::ir::target::ptx::Arch;
        std::fs::create_dir_all(dir).map_err(|e| tessera::Error::Compile {
            kernel: "attention_block".into(),
            message: format!("{dir}: {e}"),
        })?;
        let kernels = attention_block::KERNEL.compiled()?.kernels.len();
        for i in 0..kernels {
            for arch in [Arch::Sm80, Arch::Sm90a] {
                let path = format!("{dir}/attention_block_k{i}.{arch}.ptx");
                let text = attention_block::KERNEL.ptx(i, arch)?;
                std::fs::write(&path, text).map_err(|e| tessera::Error::Compile {
                    kernel: "attention_block".into(),
                    message: format!("{path}: {e}"),
                })?;
                println!("wrote {path}");
            }
        }
    }
    Ok(())
}
