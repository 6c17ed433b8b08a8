//! f32 matmul: Tessera's CPU backend against faer, side by side in one run, at n = 256, 512,
//! 1024 on one thread and two. Criterion measures each pair; a summary table with GFLOP/s and
//! the Tessera/faer ratio is printed at the end.
//!
//! Run: `cargo bench --bench matmul`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use faer::{Accum, Mat, Par};
use std::time::Instant;
use tessera::Tensor;

const SIZES: [usize; 3] = [256, 512, 1024];
const THREADS: [usize; 2] = [1, 2];

fn pool(t: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(t)
        .build()
        .expect("thread pool")
}

fn faer_par(t: usize) -> Par {
    if t == 1 { Par::Seq } else { Par::rayon(t) }
}

fn inputs(n: usize) -> (Tensor<f32>, Tensor<f32>, Mat<f32>, Mat<f32>) {
    let a = Tensor::<f32>::randn(&[n, n], 1);
    let b = Tensor::<f32>::randn(&[n, n], 2);
    let (av, bv) = (a.as_slice().unwrap(), b.as_slice().unwrap());
    let fa = Mat::from_fn(n, n, |i, j| av[i * n + j]);
    let fb = Mat::from_fn(n, n, |i, j| bv[i * n + j]);
    (a, b, fa, fb)
}

fn bench(c: &mut Criterion) {
    for t in THREADS {
        let p = pool(t);
        let mut g = c.benchmark_group(format!("matmul_f32_{t}thread"));
        g.sample_size(10);
        for n in SIZES {
            let (a, b, fa, fb) = inputs(n);
            let mut fc = Mat::<f32>::zeros(n, n);
            g.throughput(Throughput::Elements(2 * (n * n * n) as u64));
            g.bench_with_input(BenchmarkId::new("tessera", n), &n, |bch, _| {
                bch.iter(|| p.install(|| tessera_kernels::matmul(&a, &b).unwrap()))
            });
            g.bench_with_input(BenchmarkId::new("faer", n), &n, |bch, _| {
                bch.iter(|| {
                    p.install(|| {
                        faer::linalg::matmul::matmul(
                            fc.as_mut(),
                            Accum::Replace,
                            fa.as_ref(),
                            fb.as_ref(),
                            1.0f32,
                            faer_par(t),
                        )
                    })
                })
            });
        }
        g.finish();
    }
}

/// Best-of-N GFLOP/s for the summary table.
fn gflops(n: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let s = Instant::now();
        f();
        best = best.min(s.elapsed().as_secs_f64());
    }
    2.0 * (n * n * n) as f64 / best / 1e9
}

fn summary() {
    println!("\n| threads | n | tessera GFLOP/s | faer GFLOP/s | tessera/faer |");
    println!("|---|---|---|---|---|");
    for t in THREADS {
        let p = pool(t);
        for n in SIZES {
            let (a, b, fa, fb) = inputs(n);
            let mut fc = Mat::<f32>::zeros(n, n);
            let reps = (2e9 / (n * n * n) as f64).clamp(3.0, 50.0) as usize;
            // Interleave the two so drifting machine load hits both alike.
            let (mut ts, mut fs) = (0.0f64, 0.0f64);
            for _ in 0..3 {
                ts = ts.max(gflops(n, reps, || {
                    p.install(|| drop(tessera_kernels::matmul(&a, &b).unwrap()))
                }));
                fs = fs.max(gflops(n, reps, || {
                    p.install(|| {
                        faer::linalg::matmul::matmul(
                            fc.as_mut(),
                            Accum::Replace,
                            fa.as_ref(),
                            fb.as_ref(),
                            1.0f32,
                            faer_par(t),
                        )
                    })
                }));
            }
            println!("| {t} | {n} | {ts:.1} | {fs:.1} | {:.2} |", ts / fs);
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    if std::env::args().any(|a| a == "--summary-only") {
        summary();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
