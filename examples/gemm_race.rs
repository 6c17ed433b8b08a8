//! Races the f32 matmul launch against faer's GEMM, interleaved, on the shapes of
//! `benches/cpu.rs`'s GEMM rows (or those on the command line, `MxKxN`), on the rayon pool's
//! threads: `RAYON_NUM_THREADS=1 cargo run --release --example gemm_race -- 20 256x256x256`.
//! The first argument is the number of rounds; each round times one batch of launches of
//! each (about 0.3 GFLOP per batch) back to back, and the best batch of each counts, so a
//! neighbour's load that slows one round slows both sides of it. Prints GFLOP/s and the
//! ratio `faer time / tessera time` (above 1: tessera is faster) from wall time, as the
//! bench does, and from the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which
//! time on a shared machine inflates less; only that thread's: meaningful on one thread,
//! where both run on it. With `GEMM_RACE_BF16=1` the race is instead our bf16 matmul
//! (`matmul_bf16_f32`, on `vdpbf16ps` where the CPU has it) against our f32 matmul, on random
//! bf16 inputs; "faer" then names our f32 matmul and the ratio is
//! `f32 time / bf16 time`.
use std::time::Instant;
use tessera::Tensor;

/// CPU time of the calling thread in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(20, |s| s.parse().unwrap());
    let shapes: Vec<(usize, usize, usize)> = if args.len() > 2 {
        args[2..]
            .iter()
            .map(|s| {
                let v: Vec<usize> = s.split('x').map(|x| x.parse().unwrap()).collect();
                (v[0], v[1], v[2])
            })
            .collect()
    } else {
        vec![
            (256, 256, 256),
            (512, 512, 512),
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (1, 4096, 4096),
            (8, 4096, 4096),
            (64, 4096, 4096),
        ]
    };
    let threads = rayon::current_num_threads();
    let par = if threads == 1 {
        faer::Par::Seq
    } else {
        faer::Par::rayon(threads)
    };
    for (m, k, n) in shapes {
        let a = Tensor::<f32>::randn(&[m, k], 1);
        let b = Tensor::<f32>::randn(&[k, n], 2);
        let (av, bv) = (a.as_slice().unwrap(), b.as_slice().unwrap());
        let fa = faer::Mat::from_fn(m, k, |i, j| av[i * k + j]);
        let fb = faer::Mat::from_fn(k, n, |i, j| bv[i * n + j]);
        let mut fc = faer::Mat::<f32>::zeros(m, n);
        let flop = 2.0 * (m * k * n) as f64;
        let batch = ((3e8 / flop) as usize).max(1);
        let (mut ours, mut theirs) = (f64::INFINITY, f64::INFINITY);
        let (mut ours_cpu, mut theirs_cpu) = (f64::INFINITY, f64::INFINITY);
        let bf16 = std::env::var("GEMM_RACE_BF16").is_ok_and(|v| v == "1");
        let ab = Tensor::<half::bf16>::randn(&[m, k], 1);
        let bb = Tensor::<half::bf16>::randn(&[k, n], 2);
        let launch = || {
            if bf16 {
                drop(tessera_kernels::matmul_bf16_f32(&ab, &bb).unwrap())
            } else {
                drop(tessera_kernels::matmul(&a, &b).unwrap())
            }
        };
        let mut faer_run = || {
            if bf16 {
                drop(tessera_kernels::matmul(&a, &b).unwrap());
                return;
            }
            faer::linalg::matmul::matmul(
                fc.as_mut(),
                faer::Accum::Replace,
                fa.as_ref(),
                fb.as_ref(),
                1.0f32,
                par,
            )
        };
        launch();
        faer_run();
        for _ in 0..rounds {
            let (t, c) = (Instant::now(), thread_cpu_s());
            for _ in 0..batch {
                launch();
            }
            ours = ours.min(t.elapsed().as_secs_f64() / batch as f64);
            ours_cpu = ours_cpu.min((thread_cpu_s() - c) / batch as f64);
            let (t, c) = (Instant::now(), thread_cpu_s());
            for _ in 0..batch {
                faer_run();
            }
            theirs = theirs.min(t.elapsed().as_secs_f64() / batch as f64);
            theirs_cpu = theirs_cpu.min((thread_cpu_s() - c) / batch as f64);
        }
        println!(
            "{m}x{k}x{n} {threads}T: wall: tessera {:.1} GFLOP/s, faer {:.1}, ratio {:.3}; \
             thread CPU time: tessera {:.1}, faer {:.1}, ratio {:.3}",
            flop / ours / 1e9,
            flop / theirs / 1e9,
            theirs / ours,
            flop / ours_cpu / 1e9,
            flop / theirs_cpu / 1e9,
            theirs_cpu / ours_cpu
        );
    }
}
