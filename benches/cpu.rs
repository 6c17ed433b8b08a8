//! The CPU backend at the machine's limits: every kernel class (row-wise, elementwise and fused
//! chains, column reductions, transposes, depthwise convolution, f32 and bf16 GEMM) on
//! `[4096, 1024]`, `[1024, 4096]`, `[37, 300]` and a shape four times the last-level cache, with
//! one and two threads. Memory-bound kernels are reported in GB/s (bytes read + written,
//! counted once) and as a ratio to a `copy_from_slice` of the same bytes in the same run
//! (into a buffer it keeps); at `[4096, 1024]` and the shape beyond the LLC each kernel also
//! gets a `… → reused out` row, launched into an output it keeps (`launch_into`, or
//! `depthwise_conv2d_into` for the depthwise `tile!` kernel);
//! GEMMs in GFLOP/s and as a ratio to faer. Launch overhead (a `[1, 1]` and a `[37, 300]`
//! launch, fast path and interpreter) is in µs.
//!
//! Criterion measures the `[4096, 1024]` cases; the summary is printed as one table and
//! written, with an SVG plot (plotters), to `docs/performance.md` and `docs/performance.svg`:
//!
//!     cargo bench --bench cpu
//!
//! `TESSERA_BENCH_QUICK=1` skips criterion and runs only the summary.
//!
//! The summary times each memory-bound row's kernel, its `→ reused out` launch and its memcpy
//! yardstick (one per row, buffers allocated once), and each GEMM's faer and ours, in
//! alternating windows of at most about 75 ms and 50 runs (kernel, copy, kernel, copy, …; four
//! each, at most about 0.3 s and 200 runs per closure), each taking its best over all its
//! windows ([`best_alternating`]): this machine moves between a fast and a slow memory state
//! every few tens of milliseconds within one process, the slow state slowing the copy as well,
//! and timing a kernel and its copy each in its own 0.3 s let one row's ratio pair the two
//! states (`col_mean [4096, 1024]` one thread 0.72 in one run, 0.88 in the next).

use criterion::{Criterion, Throughput};
use faer::{Accum, Mat, Par};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tessera::backend::cpu::cache::last_level_bytes;
use tessera::backend::cpu::fused;
use tessera::prelude::*;

#[tessera::kernel]
fn chain(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu(x * y + 1.0)
}

#[tessera::kernel]
fn col_mean(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.mean(0)
}

#[tessera::kernel]
fn transpose_f32(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
    transpose(x)
}

#[tessera::kernel]
fn gelu_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    gelu(x)
}

#[tessera::kernel]
fn add_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    x + y
}

#[tessera::kernel]
fn softmax_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn rmsnorm_bf16(x: Tensor<bf16, (R, C)>, g: Tensor<bf16, (C,)>) -> Tensor<f32, (R, C)> {
    rmsnorm(x, g, 1e-6)
}

#[tessera::kernel]
fn col_sum_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
    x.sum(0)
}

#[tessera::kernel]
fn transpose_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (C, R)> {
    transpose(x)
}

const THREADS: [usize; 2] = [1, 2];

/// The shapes: two square-ish, a ragged small one, and one whose f32 input is 4× the LLC.
fn shapes() -> Vec<(usize, usize)> {
    let big_rows = (4 * last_level_bytes() / 4).div_ceil(4096);
    vec![(4096, 1024), (1024, 4096), (37, 300), (big_rows, 4096)]
}

fn pool(t: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(t)
        .build()
        .expect("thread pool")
}

/// The process's minor page faults so far.
fn minor_faults() -> i64 {
    // SAFETY: `getrusage` writes the zeroed struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt
    }
}

/// Best time of `f` over at least 5 runs and about 0.3 s.
fn best(mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut b = f64::INFINITY;
    let mut n = 0;
    while n < 5 || (start.elapsed() < Duration::from_millis(300) && n < 200) {
        let s = Instant::now();
        f();
        b = b.min(s.elapsed().as_secs_f64());
        n += 1;
    }
    b
}

/// Timing windows per closure in [`best_alternating`].
const WINDOWS: usize = 4;
/// Length of one window: `WINDOWS` of them make about the 0.3 s that [`best`] gives one closure.
const WINDOW: Duration = Duration::from_millis(75);
/// Most runs in one window: `WINDOWS` of them make the 200 runs that [`best`] allows.
const WINDOW_RUNS: usize = 50;

/// What [`best_alternating`] measured for one closure.
struct Timed {
    /// Best time of one run, in seconds.
    best: f64,
    /// Runs, the untimed first one included.
    runs: u32,
    /// Minor page faults over those runs.
    faults: i64,
}

/// Best time of each closure, timed in alternating windows: one untimed run of each, then
/// rounds in which each closure in turn runs for one window of about [`WINDOW`] (at least one
/// run, at most [`WINDOW_RUNS`], and no run started that the last one says would end past the
/// window), until there have been [`WINDOWS`] rounds and every closure has had at least 5 timed
/// runs.
///
/// Why: this machine moves between a fast and a slow memory state every few tens of
/// milliseconds, within one process, and the slow state slows the memcpy yardstick too
/// (`col_mean [4096, 1024]` one thread read 0.72 of memcpy in one run and 0.88 in
/// the next when each was the best of its own 0.3 s). Alternating the windows gives a kernel and
/// its yardstick the same chances at the fast state, so a ratio pairs like with like. Page
/// faults are read around each window, outside the timed runs.
fn best_alternating(fs: &mut [&mut dyn FnMut()]) -> Vec<Timed> {
    let mut out: Vec<Timed> = fs
        .iter_mut()
        .map(|f| {
            let f0 = minor_faults();
            f();
            Timed {
                best: f64::INFINITY,
                runs: 1,
                faults: minor_faults() - f0,
            }
        })
        .collect();
    let mut round = 0;
    while round < WINDOWS || out.iter().any(|t| t.runs < 6) {
        for (f, t) in fs.iter_mut().zip(&mut out) {
            let (f0, start) = (minor_faults(), Instant::now());
            let (mut n, mut last) = (0, 0.0);
            while n == 0
                || (start.elapsed().as_secs_f64() + last < WINDOW.as_secs_f64() && n < WINDOW_RUNS)
            {
                let s = Instant::now();
                f();
                last = s.elapsed().as_secs_f64();
                t.best = t.best.min(last);
                n += 1;
            }
            t.runs += n as u32;
            t.faults += minor_faults() - f0;
        }
        round += 1;
    }
    out
}

/// A parallel `copy_from_slice` of `bytes` on the current pool's threads into a destination it
/// keeps: the memory-bound rows' yardstick, which moves `2 * bytes` (read + written).
///
/// Timed inside the pool, as the kernels are (`p.install(|| ..)` around the whole timing):
/// timing each copy through its own `install` would add the pool thread's wake-up to a copy of
/// a few microseconds, and the yardstick of the `[37, 300]` rows would move severalfold between
/// runs.
fn memcpy(bytes: usize, t: usize) -> impl FnMut() {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let chunk = bytes.div_ceil(t).max(1);
    move || {
        use rayon::prelude::*;
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s))
    }
}

/// One row of the summary.
struct Row {
    kernel: String,
    shape: String,
    threads: usize,
    value: f64,
    unit: &'static str,
    ratio: f64,
    yardstick: &'static str,
}

/// A memory-bound case: a launch closure and the bytes it must move, and for a `#[kernel]`
/// the maker of a launch into an output it keeps (see [`reused`]).
struct Case<'a> {
    name: &'static str,
    bytes: usize,
    run: Box<dyn Fn() + Send + Sync + 'a>,
    reused: Option<Reused>,
}

/// Makes a launch closure that writes into one output tensor it keeps (allocated by a first,
/// fresh launch; freed with the closure).
type Reused = Box<dyn Fn() -> Box<dyn FnMut() + Send> + Send + Sync>;

/// A [`Reused`] from a fresh launch and the same launch with `KernelDef::launch_into`.
fn reused<T: Element>(
    fresh: impl Fn() -> tessera::Result<Tensor<T>> + Send + Sync + 'static,
    into: impl Fn(&mut Tensor<T>) -> tessera::Result<()> + Send + Sync + Copy + 'static,
) -> Option<Reused> {
    Some(Box::new(move || {
        let mut out = fresh().unwrap();
        Box::new(move || into(&mut out).unwrap())
    }))
}

fn memory_cases(r: usize, c: usize) -> Vec<(&'static str, Vec<Case<'static>>)> {
    let (f4, b2) = (4 * r * c, 2 * r * c);
    let x: &'static Tensor<f32> = Box::leak(Box::new(Tensor::<f32>::randn(&[r, c], 1)));
    let y: &'static Tensor<f32> = Box::leak(Box::new(Tensor::<f32>::randn(&[r, c], 2)));
    let g: &'static Tensor<f32> = Box::leak(Box::new(Tensor::<f32>::randn(&[c], 3)));
    let xb: &'static Tensor<bf16> = Box::leak(Box::new(Tensor::<bf16>::randn(&[r, c], 4)));
    let yb: &'static Tensor<bf16> = Box::leak(Box::new(Tensor::<bf16>::randn(&[r, c], 5)));
    let gb: &'static Tensor<bf16> = Box::leak(Box::new(Tensor::<bf16>::randn(&[c], 6)));
    let case = |name, bytes, run: Box<dyn Fn() + Send + Sync>, reused| Case {
        name,
        bytes,
        run,
        reused,
    };
    use tessera_kernels as k;
    let f32_cases = vec![
        case(
            "softmax",
            2 * f4,
            Box::new(move || drop(tessera_kernels::softmax(x).unwrap())),
            reused(
                move || k::softmax(x),
                move |o| k::softmax::KERNEL.launch_into(&[x.arg()], o),
            ),
        ),
        case(
            "layernorm",
            2 * f4,
            Box::new(move || drop(tessera_kernels::layernorm(x, g, g).unwrap())),
            reused(
                move || k::layernorm(x, g, g),
                move |o| k::layernorm::KERNEL.launch_into(&[x.arg(), g.arg(), g.arg()], o),
            ),
        ),
        case(
            "rmsnorm",
            2 * f4,
            Box::new(move || drop(tessera_kernels::rmsnorm(x, g).unwrap())),
            reused(
                move || k::rmsnorm(x, g),
                move |o| k::rmsnorm::KERNEL.launch_into(&[x.arg(), g.arg()], o),
            ),
        ),
        case(
            "gelu",
            2 * f4,
            Box::new(move || drop(tessera_kernels::gelu(x).unwrap())),
            reused(
                move || k::gelu(x),
                move |o| k::gelu::KERNEL.launch_into(&[x.arg()], o),
            ),
        ),
        case(
            "add",
            3 * f4,
            Box::new(move || drop(tessera_kernels::add(x, y).unwrap())),
            reused(
                move || k::add(x, y),
                move |o| k::add::KERNEL.launch_into(&[x.arg(), y.arg()], o),
            ),
        ),
        case(
            "mul+add+gelu",
            2 * f4,
            Box::new(move || drop(chain(x, g).unwrap())),
            reused(
                move || chain(x, g),
                move |o| chain::KERNEL.launch_into(&[x.arg(), g.arg()], o),
            ),
        ),
        case(
            "col_mean",
            f4,
            Box::new(move || drop(col_mean(x).unwrap())),
            reused(
                move || col_mean(x),
                move |o| col_mean::KERNEL.launch_into(&[x.arg()], o),
            ),
        ),
        case(
            "transpose",
            2 * f4,
            Box::new(move || drop(transpose_f32(x).unwrap())),
            reused(
                move || transpose_f32(x),
                move |o| transpose_f32::KERNEL.launch_into(&[x.arg()], o),
            ),
        ),
    ];
    let bf16_cases = vec![
        case(
            "softmax bf16",
            2 * b2,
            Box::new(move || drop(tessera_kernels::softmax(xb).unwrap())),
            reused(
                move || k::softmax(xb),
                move |o| k::softmax::KERNEL.launch_into(&[xb.arg()], o),
            ),
        ),
        case(
            "layernorm bf16",
            2 * b2,
            Box::new(move || drop(tessera_kernels::layernorm(xb, gb, gb).unwrap())),
            reused(
                move || k::layernorm(xb, gb, gb),
                move |o| k::layernorm::KERNEL.launch_into(&[xb.arg(), gb.arg(), gb.arg()], o),
            ),
        ),
        case(
            "rmsnorm bf16",
            2 * b2,
            Box::new(move || drop(tessera_kernels::rmsnorm(xb, gb).unwrap())),
            reused(
                move || k::rmsnorm(xb, gb),
                move |o| k::rmsnorm::KERNEL.launch_into(&[xb.arg(), gb.arg()], o),
            ),
        ),
        case(
            "softmax bf16→f32",
            b2 + f4,
            Box::new(move || drop(softmax_bf16(xb).unwrap())),
            reused(
                move || softmax_bf16(xb),
                move |o| softmax_bf16::KERNEL.launch_into(&[xb.arg()], o),
            ),
        ),
        case(
            "rmsnorm bf16→f32",
            b2 + f4,
            Box::new(move || drop(rmsnorm_bf16(xb, gb).unwrap())),
            reused(
                move || rmsnorm_bf16(xb, gb),
                move |o| rmsnorm_bf16::KERNEL.launch_into(&[xb.arg(), gb.arg()], o),
            ),
        ),
        case(
            "gelu bf16",
            2 * b2,
            Box::new(move || drop(gelu_bf16(xb).unwrap())),
            reused(
                move || gelu_bf16(xb),
                move |o| gelu_bf16::KERNEL.launch_into(&[xb.arg()], o),
            ),
        ),
        case(
            "add bf16",
            3 * b2,
            Box::new(move || drop(add_bf16(xb, yb).unwrap())),
            reused(
                move || add_bf16(xb, yb),
                move |o| add_bf16::KERNEL.launch_into(&[xb.arg(), yb.arg()], o),
            ),
        ),
        case(
            "col_sum bf16",
            b2,
            Box::new(move || drop(col_sum_bf16(xb).unwrap())),
            reused(
                move || col_sum_bf16(xb),
                move |o| col_sum_bf16::KERNEL.launch_into(&[xb.arg()], o),
            ),
        ),
        case(
            "transpose bf16",
            2 * b2,
            Box::new(move || drop(transpose_bf16(xb).unwrap())),
            reused(
                move || transpose_bf16(xb),
                move |o| transpose_bf16::KERNEL.launch_into(&[xb.arg()], o),
            ),
        ),
    ];
    vec![("f32", f32_cases), ("bf16", bf16_cases)]
}

fn depthwise_case(r: usize, c: usize) -> Case<'static> {
    // Channels last: an [H, W, 64] image of the same element count, 3×3 filter.
    let ch = 64;
    let (h, w) = (r, (c / ch).max(3));
    let x: &'static Tensor<f32> = Box::leak(Box::new(Tensor::<f32>::randn(&[h, w, ch], 7)));
    let f: &'static Tensor<f32> = Box::leak(Box::new(Tensor::<f32>::randn(&[3, 3, ch], 8)));
    let out = (h.saturating_sub(2)) * (w - 2) * ch;
    Case {
        name: "depthwise 3x3",
        bytes: 4 * (h * w * ch + out),
        run: Box::new(move || drop(tessera_kernels::depthwise_conv2d(x, f).unwrap())),
        reused: reused(
            move || tessera_kernels::depthwise_conv2d(x, f),
            move |o| tessera_kernels::conv::depthwise_conv2d_into(x, f, o),
        ),
    }
}

fn summary_memory(rows: &mut Vec<Row>) {
    for (r, c) in shapes() {
        let shape = format!("[{r}, {c}]");
        // `→ reused out` rows at `[4096, 1024]` and beyond the LLC.
        let reuse = (r, c) == (4096, 1024) || 4 * r * c > last_level_bytes();
        let mut groups = memory_cases(r, c);
        groups.push(("f32", vec![depthwise_case(r, c)]));
        for t in THREADS {
            let p = pool(t);
            for (_, cases) in &groups {
                for case in cases {
                    // One yardstick per row, allocated once and timed in windows alternating
                    // with the kernel's (and the `→ reused out` launch's).
                    let mut copy = memcpy(case.bytes / 2, t);
                    let mut kernel = || (case.run)();
                    let mut into = case.reused.as_ref().filter(|_| reuse).map(|make| make());
                    let timed = p.install(|| match into.as_mut() {
                        Some(into) => best_alternating(&mut [&mut kernel, into, &mut copy]),
                        None => best_alternating(&mut [&mut kernel, &mut copy]),
                    });
                    eprintln!(
                        "{} {shape} {t}T: {:.1} minor faults per launch",
                        case.name,
                        timed[0].faults as f64 / f64::from(timed[0].runs)
                    );
                    let copy = (2 * (case.bytes / 2)) as f64 / timed[timed.len() - 1].best / 1e9;
                    let gbs = case.bytes as f64 / timed[0].best / 1e9;
                    rows.push(Row {
                        kernel: case.name.into(),
                        shape: shape.clone(),
                        threads: t,
                        value: gbs,
                        unit: "GB/s",
                        ratio: gbs / copy,
                        yardstick: "memcpy",
                    });
                    if into.is_some() {
                        let gbs = case.bytes as f64 / timed[1].best / 1e9;
                        rows.push(Row {
                            kernel: format!("{} → reused out", case.name),
                            shape: shape.clone(),
                            threads: t,
                            value: gbs,
                            unit: "GB/s",
                            ratio: gbs / copy,
                            yardstick: "memcpy",
                        });
                    }
                }
            }
        }
    }
}

fn faer_par(t: usize) -> Par {
    if t == 1 { Par::Seq } else { Par::rayon(t) }
}

fn summary_gemm(rows: &mut Vec<Row>) {
    let mut dims: Vec<(usize, usize, usize)> = vec![
        (256, 256, 256),
        (512, 512, 512),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (1, 4096, 4096),
        (8, 4096, 4096),
        (64, 4096, 4096),
    ];
    if !quick() {
        dims.push((4096, 4096, 4096));
    }
    for (m, k, n) in dims {
        let a = Tensor::<f32>::randn(&[m, k], 1);
        let b = Tensor::<f32>::randn(&[k, n], 2);
        let ab = Tensor::<bf16>::randn(&[m, k], 3);
        let bb = Tensor::<bf16>::randn(&[k, n], 4);
        let (av, bv) = (a.as_slice().unwrap(), b.as_slice().unwrap());
        let fa = Mat::from_fn(m, k, |i, j| av[i * k + j]);
        let fb = Mat::from_fn(k, n, |i, j| bv[i * n + j]);
        let mut fc = Mat::<f32>::zeros(m, n);
        let flop = 2.0 * (m * k * n) as f64;
        for t in THREADS {
            let p = pool(t);
            // faer and ours timed in alternating windows (see `best_alternating`).
            let timed = p.install(|| {
                best_alternating(&mut [
                    &mut || {
                        faer::linalg::matmul::matmul(
                            fc.as_mut(),
                            Accum::Replace,
                            fa.as_ref(),
                            fb.as_ref(),
                            1.0f32,
                            faer_par(t),
                        )
                    },
                    &mut || drop(tessera_kernels::matmul(&a, &b).unwrap()),
                    &mut || drop(tessera_kernels::matmul_bf16_f32(&ab, &bb).unwrap()),
                ])
            });
            let (faer_s, f32_s, bf_s) = (timed[0].best, timed[1].best, timed[2].best);
            for (name, s) in [("matmul f32", f32_s), ("matmul bf16", bf_s)] {
                rows.push(Row {
                    kernel: name.into(),
                    shape: format!("{m}x{k}x{n}"),
                    threads: t,
                    value: flop / s / 1e9,
                    unit: "GFLOP/s",
                    ratio: faer_s / s,
                    yardstick: "faer f32",
                });
            }
        }
    }
}

/// Launch overhead: time of a whole `gelu` launch on `[1, 1]` and `[37, 300]`, fast path and
/// interpreter, one thread.
fn summary_launch(rows: &mut Vec<Row>) {
    let p = pool(1);
    for (r, c) in [(1usize, 1usize), (37, 300)] {
        let x = Tensor::<f32>::randn(&[r, c], 9);
        let fast = p.install(|| best(|| drop(tessera_kernels::gelu(&x).unwrap())));
        let slow = p.install(|| {
            fused::with_interpreter(|| best(|| drop(tessera_kernels::gelu(&x).unwrap())))
        });
        rows.push(Row {
            kernel: "gelu launch".into(),
            shape: format!("[{r}, {c}]"),
            threads: 1,
            value: fast * 1e6,
            unit: "µs",
            ratio: slow / fast,
            yardstick: "interpreter time / fast",
        });
        // The launch's work: read the input, gelu it, write a fresh output.
        let xs = x.as_slice().unwrap();
        let work = p.install(|| {
            best(|| {
                let mut v = xs.to_vec();
                tessera::backend::cpu::vmath::gelu(&mut v);
                std::hint::black_box(v);
            })
        });
        rows.push(Row {
            kernel: "gelu launch beyond work".into(),
            shape: format!("[{r}, {c}]"),
            threads: 1,
            value: (fast - work) * 1e6,
            unit: "µs",
            ratio: (fast - work) * 1e6 / 2.0,
            yardstick: "2 µs goal",
        });
    }
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| kernel | shape | threads | value | unit | ratio | ratio to |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {} | {:.2} | {} |",
            r.kernel, r.shape, r.threads, r.value, r.unit, r.ratio, r.yardstick
        );
    }
    s
}

/// Bar chart of the ratios (memory-bound to memcpy, GEMM to faer), one bar per row.
fn plot(rows: &[Row], path: &str) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let rows: Vec<&Row> = rows.iter().filter(|r| r.unit != "µs").collect();
    let h = 40 + 14 * rows.len() as u32;
    let root = SVGBackend::new(path, (900, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = rows.iter().map(|r| r.ratio).fold(1.0f64, f64::max) * 1.05;
    let (x0, x1) = (420.0, 880.0);
    let sx = |v: f64| (x0 + (x1 - x0) * v / max) as i32;
    let style = ("sans-serif", 11).into_font();
    root.draw(&Text::new(
        "ratio to same-run memcpy (memory-bound) or faer f32 (GEMM); line at 0.8 and 1.0",
        (10, 8),
        style.clone(),
    ))?;
    for (i, r) in rows.iter().enumerate() {
        let y = 30 + 14 * i as i32;
        let color = if r.ratio >= 0.8 { GREEN } else { RED };
        root.draw(&Rectangle::new(
            [(x0 as i32, y), (sx(r.ratio), y + 11)],
            color.filled(),
        ))?;
        root.draw(&Text::new(
            format!("{} {} {}t {:.2}", r.kernel, r.shape, r.threads, r.ratio),
            (10, y),
            style.clone(),
        ))?;
    }
    for v in [0.8, 1.0] {
        root.draw(&PathElement::new(
            vec![(sx(v), 25), (sx(v), h as i32 - 5)],
            BLACK.stroke_width(1),
        ))?;
    }
    root.present()?;
    Ok(())
}

fn write_docs(rows: &[Row]) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let md = format!(
        "# CPU performance\n\nWritten by `cargo bench --bench cpu` (regenerate with that one command; \
         `TESSERA_BENCH_QUICK=1 cargo bench --bench cpu` skips criterion and the 4096³ GEMM and \
         writes the same table in a few minutes). \
         Memory-bound kernels: GB/s of the bytes they must read and write (each counted once) and \
         the ratio to a `copy_from_slice` of the same bytes on the same number of threads in the \
         same run (into a destination it keeps). A plain row times the library call, which returns \
         a fresh output tensor per launch (a 64-byte-aligned block: from `tessera::host_cache` when \
         a freed block of at least 1 MiB fits, as the previous launch's dropped output does, \
         else from the allocator); a `→ reused out` row times the same kernel launched with \
         `KernelDef::launch_into` (the depthwise convolution: `depthwise_conv2d_into`) into one \
         output tensor kept across launches, as the copy keeps \
         its destination. GEMMs: GFLOP/s and the ratio to faer's f32 GEMM in the same run. Launches: µs \
         per whole launch, and how many times slower the interpreter is; \
         \"beyond work\": the launch minus a copy + `vmath::gelu` of the same elements. Each \
         memory-bound row's kernel, its `→ reused out` launch and its memcpy (one per row, buffers \
         kept), and each GEMM's faer and ours, are timed in alternating windows of ≤ 75 ms and ≤ 50 \
         runs (4 each) \
         and take their best over all their runs (≥ 5), so a ratio pairs times from the same \
         memory state; launches: best of ≥ 5 runs.\n\n\
         Machine: {threads} hardware threads; load average at the end of the run: `{}` — numbers \
         taken while other jobs ran are provisional.\n\n![ratios](performance.svg)\n\n{}",
        load.trim(),
        table(rows)
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs");
    let _ = std::fs::write(format!("{dir}/performance.md"), md);
    if let Err(e) = plot(rows, &format!("{dir}/performance.svg")) {
        eprintln!("plot: {e}");
    }
}

fn criterion_benches(c: &mut Criterion) {
    let (r, cc) = (4096, 1024);
    for (dtype, cases) in memory_cases(r, cc) {
        for t in THREADS {
            let p = pool(t);
            let mut g = c.benchmark_group(format!("cpu_{dtype}_{r}x{cc}_{t}thread"));
            g.sample_size(10);
            g.warm_up_time(Duration::from_millis(300));
            g.measurement_time(Duration::from_secs(1));
            for case in &cases {
                g.throughput(Throughput::Bytes(case.bytes as u64));
                g.bench_function(case.name, |b| b.iter(|| p.install(|| (case.run)())));
            }
            g.finish();
        }
    }
}

/// `TESSERA_BENCH_QUICK=1`: the summary only (no criterion), and no 4096³ GEMM.
fn quick() -> bool {
    std::env::var_os("TESSERA_BENCH_QUICK").is_some()
}

fn main() {
    if !quick() {
        let mut c = Criterion::default().configure_from_args();
        criterion_benches(&mut c);
    }
    let mut rows = Vec::new();
    summary_launch(&mut rows);
    summary_memory(&mut rows);
    summary_gemm(&mut rows);
    println!("\n{}", table(&rows));
    write_docs(&rows);
}
