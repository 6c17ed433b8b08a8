//! The f64 reference of a stack of blocks on the whole input (no parallelism).

use super::{BlockConfig, BlockKind, BlockWeights};

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p];
            for j in 0..n {
                c[i * n + j] += x * b[p * n + j];
            }
        }
    }
    c
}

fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn layernorm(x: &[f64], g: &[f32], b: &[f32], d: usize) -> Vec<f64> {
    x.chunks(d)
        .flat_map(|r| {
            let mean = r.iter().sum::<f64>() / d as f64;
            let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            r.iter()
                .enumerate()
                .map(move |(j, v)| (v - mean) * inv * g[j] as f64 + b[j] as f64)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `blocks` applied in order to `x` (`[tokens, d_model]`, whole sequences), in f64.
pub fn forward_f64(cfg: &BlockConfig, blocks: &[BlockWeights], x: &[f32]) -> Vec<f64> {
    let (d, h, dh, f, s) = (cfg.d_model, cfg.heads, cfg.d_head, cfg.d_ff, cfg.seq);
    let hd = h * dh;
    let mut x = wide(x);
    let tokens = x.len() / d;
    for w in blocks {
        let hn = match cfg.kind {
            BlockKind::Standard => layernorm(&x, &w.ln1_gamma, &w.ln1_beta, d),
            BlockKind::Exact => x.clone(),
        };
        let q = matmul(&hn, &wide(&w.wq), tokens, d, hd);
        let k = matmul(&hn, &wide(&w.wk), tokens, d, hd);
        let v = matmul(&hn, &wide(&w.wv), tokens, d, hd);
        let mut o = vec![0.0; tokens * hd];
        for seq in 0..tokens / s {
            for head in 0..h {
                let at = |m: &[f64], r: usize, c: usize| m[(seq * s + r) * hd + head * dh + c];
                for i in 0..s {
                    let mut sc: Vec<f64> = (0..s)
                        .map(|j| (0..dh).map(|c| at(&q, i, c) * at(&k, j, c)).sum())
                        .collect();
                    if cfg.kind == BlockKind::Standard {
                        let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                        let e: Vec<f64> = sc.iter().map(|v| (v - m).exp()).collect();
                        let z: f64 = e.iter().sum();
                        sc = e.iter().map(|v| v / z).collect();
                    }
                    for c in 0..dh {
                        o[(seq * s + i) * hd + head * dh + c] =
                            (0..s).map(|j| sc[j] * at(&v, j, c)).sum();
                    }
                }
            }
        }
        let a = matmul(&o, &wide(&w.wo), tokens, hd, d);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        let hn = match cfg.kind {
            BlockKind::Standard => layernorm(&x, &w.ln2_gamma, &w.ln2_beta, d),
            BlockKind::Exact => x.clone(),
        };
        let u: Vec<f64> = matmul(&hn, &wide(&w.w1), tokens, d, f)
            .into_iter()
            .map(|v| match cfg.kind {
                BlockKind::Standard => 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)),
                BlockKind::Exact => v.max(0.0),
            })
            .collect();
        let a = matmul(&u, &wide(&w.w2), tokens, f, d);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
    }
    x
}
