//! Launch overhead on the simulator: the first launch of a kernel in a fresh process against
//! the steady state, for kernels tiny enough (one CTA, a few dozen elements) that the
//! simulation itself does not dominate.
//!
//! Each "first launch" is measured in its own child process (this binary re-run with
//! `TESSERA_LAUNCH_BENCH_CHILD=<case>`), so nothing is cached in memory; the steady state is
//! the median of many launches in this process after a warm-up.
//!
//! Run: `cargo bench --bench launch`

use std::process::Command;
use std::time::Instant;
use tessera::{Device, Tensor};

tessera::tile! {
    fn scale2<const BR: i64 = 4, const BC: i64 = 64>(x: In<f32, 2>, y: Out<f32, 2>)
        grid = (cdiv(x.dim(0), BR), cdiv(x.dim(1), BC))
    {
        let i = program_id(0) * BR;
        let j = program_id(1) * BC;
        store(y, [i, j], load(x, [i, j], [BR, BC]) * 2.0);
    }
}

#[tessera::kernel]
fn axpy(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    x * 2.0 + y
}

const CASES: &[&str] = &["kernel", "library", "tile"];

/// Inputs on the simulator, and one launch of `case`; returns the launch's seconds.
fn launch_once(case: &str, x: &Tensor<f32>, y: &Tensor<f32>, out: &mut Tensor<f32>) -> f64 {
    let t = Instant::now();
    match case {
        "kernel" => drop(axpy(x, y).unwrap()),
        "library" => drop(tessera_kernels::softmax(x).unwrap()),
        "tile" => scale2::launch(x, out).unwrap(),
        _ => unreachable!(),
    }
    t.elapsed().as_secs_f64()
}

fn inputs(case: &str) -> (Tensor<f32>, Tensor<f32>, Tensor<f32>) {
    let dev = Device::sim();
    let shape: &[usize] = if case == "kernel" { &[64] } else { &[4, 64] };
    (
        Tensor::<f32>::randn(shape, 1).to(&dev).unwrap(),
        Tensor::<f32>::randn(shape, 2).to(&dev).unwrap(),
        Tensor::<f32>::zeros(shape).unwrap().to(&dev).unwrap(),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Ok(case) = std::env::var("TESSERA_LAUNCH_BENCH_CHILD") {
        let (x, y, mut out) = inputs(&case);
        println!("{}", launch_once(&case, &x, &y, &mut out));
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    println!("| case | first launch, fresh process (median of 5) | steady state (median of 200) |");
    println!("|---|---|---|");
    for case in CASES {
        let firsts: Vec<f64> = (0..5)
            .map(|_| {
                let out = Command::new(&exe)
                    .env("TESSERA_LAUNCH_BENCH_CHILD", case)
                    .output()
                    .expect("child run");
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<f64>()
                    .expect("child prints seconds")
            })
            .collect();
        let (x, y, mut out) = inputs(case);
        for _ in 0..20 {
            launch_once(case, &x, &y, &mut out);
        }
        let steady: Vec<f64> = (0..200)
            .map(|_| launch_once(case, &x, &y, &mut out))
            .collect();
        println!(
            "| {case} | {:.1} µs | {:.1} µs |",
            median(firsts) * 1e6,
            median(steady) * 1e6
        );
    }
}
