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
//!
//! Each memory-bound row also gets an arithmetic ceiling: its memcpy time over the kernel's
//! time for the row's elements at the rate it runs with its data in L2 ([`InL2`], measured
//! once per column count on one thread and doubled for two threads), the best ratio the row
//! could reach if memory were free.

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
fn tanh_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    tanh(x)
}

#[tessera::kernel]
fn sigmoid_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    sigmoid(x).cast::<f32>()
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
    best_alternating_in(fs, WINDOWS, WINDOW, WINDOW_RUNS)
}

/// [`best_alternating`] with `windows` rounds of windows of about `window` and at most
/// `window_runs` runs.
fn best_alternating_in(
    fs: &mut [&mut dyn FnMut()],
    windows: usize,
    window: Duration,
    window_runs: usize,
) -> Vec<Timed> {
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
    while round < windows || out.iter().any(|t| t.runs < 6) {
        for (f, t) in fs.iter_mut().zip(&mut out) {
            let (f0, start) = (minor_faults(), Instant::now());
            let (mut n, mut last) = (0, 0.0);
            while n == 0
                || (start.elapsed().as_secs_f64() + last < window.as_secs_f64() && n < window_runs)
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
    /// The arithmetic ceiling (see [`InL2`]), where measured.
    ceiling: Option<f64>,
    yardstick: &'static str,
}

/// A memory-bound case: a launch closure and the bytes it must move, and for a `#[kernel]`
/// the maker of a launch into an output it keeps (see [`reused`]).
struct Case<'a> {
    name: &'static str,
    bytes: usize,
    /// Elements of work: the `[R, C]` tensor's (the depthwise convolution: its output's).
    elems: usize,
    /// A transpose: its in-L2 shape takes a power-of-two row count (see [`l2_rows`]).
    transpose: bool,
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
    let case = |name: &'static str, bytes, run: Box<dyn Fn() + Send + Sync>, reused| Case {
        name,
        bytes,
        elems: r * c,
        transpose: name.starts_with("transpose"),
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
            "tanh bf16",
            2 * b2,
            Box::new(move || drop(tanh_bf16(xb).unwrap())),
            reused(
                move || tanh_bf16(xb),
                move |o| tanh_bf16::KERNEL.launch_into(&[xb.arg()], o),
            ),
        ),
        case(
            "sigmoid bf16→f32",
            b2 + f4,
            Box::new(move || drop(sigmoid_bf16(xb).unwrap())),
            reused(
                move || sigmoid_bf16(xb),
                move |o| sigmoid_bf16::KERNEL.launch_into(&[xb.arg()], o),
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
        elems: out,
        transpose: false,
        run: Box::new(move || drop(tessera_kernels::depthwise_conv2d(x, f).unwrap())),
        reused: reused(
            move || tessera_kernels::depthwise_conv2d(x, f),
            move |o| tessera_kernels::conv::depthwise_conv2d_into(x, f, o),
        ),
    }
}

/// The cases of one shape's memory-bound rows, in table order.
fn summary_cases(r: usize, c: usize) -> Vec<Case<'static>> {
    let mut cases: Vec<Case> = memory_cases(r, c).into_iter().flat_map(|g| g.1).collect();
    cases.push(depthwise_case(r, c));
    cases
}

/// Most bytes an in-L2 shape's launch reads and writes: 3/4 of a 1 MiB L2 (the smallest L2 of
/// the machines measured: AMD EPYC Zen 5 1 MiB, Intel Xeon model 207 2 MiB).
const L2_BYTES: usize = 768 << 10;
/// Fewest rows of an in-L2 shape.
const L2_MIN_ROWS: usize = 16;
/// Windows of the in-L2 timing ([`best_alternating_in`]): shorter than [`WINDOW`], as a
/// launch takes µs, and with no run cap that binds.
const L2_WINDOW: Duration = Duration::from_millis(25);
/// Rounds of in-L2 windows: more and shorter than [`WINDOWS`], the same 0.2 s per launch.
const L2_WINDOWS: usize = 8;
/// Most runs in one in-L2 window.
const L2_WINDOW_RUNS: usize = 20_000;

/// Rows of the in-L2 shape (same column count `c`) for `case` of a `[r, c]` shape: as many as
/// keep its bytes within [`L2_BYTES`], at least [`L2_MIN_ROWS`]; a transpose the largest power
/// of two within that (whole 16 × 16, bf16 32 × 32, blocks and whole cache lines per
/// destination row; the full shape's source stride).
fn l2_rows(case: &Case, r: usize) -> usize {
    let rows = (L2_BYTES * r / case.bytes).max(L2_MIN_ROWS);
    if case.transpose {
        1 << rows.ilog2()
    } else {
        rows
    }
}

/// Rows of the smaller in-L2 launch that [`in_l2`] takes from a launch on `rows` rows: about a
/// quarter of them (at least 8) with the same remainder modulo the column reductions' tile
/// height ([`col_tile_rows`], 64), so that both shapes leave the same partial tile (a whole
/// tile takes the column pass's tile sum, a partial one its fill, padding and fold), and so
/// the same remainder for any row block that divides it (the depthwise convolution's 4, the
/// row-wise kernels' 8); where that leaves fewer than 8 rows between the two (`rows` under
/// 72), the same remainder modulo 8. The difference is whole blocks and most of the
/// launch.
fn fewer_rows(rows: usize) -> usize {
    let keep = |m: usize| {
        let b = rows / 4 / m * m + rows % m;
        if b < 8 { b + m } else { b }
    };
    match keep(col_tile_rows()) {
        b if b + 8 <= rows => b,
        // At least 8 rows fewer for any `rows` ≥ 16 (`L2_MIN_ROWS`).
        _ => keep(8),
    }
}

/// Rows per tile of a column reduction launched on the CPU (the bench's kernels do not pin a
/// tile): `Schedule::cpu_default`'s.
fn col_tile_rows() -> usize {
    use tessera::ir::schedule::{KernelClass, Schedule};
    Schedule::cpu_default(KernelClass::ColReduce, tessera::DType::F32).tile[0] as usize
}

/// A kernel's time per element with its data in L2, on one thread, from two `→ reused out`
/// launches of it timed in alternating windows: `a` on the in-L2 shape ([`l2_rows`]) and `b`
/// a smaller one, `(a − b) / (elements of a − elements of b)`. `b` is the same kernel on
/// [`fewer_rows`] rows, so the per-launch work (launch overhead, per-column set-up and
/// finish, partial blocks) cancels; a transpose's `b` is its `[1, 1]` launch (fewer rows
/// than the in-L2 shape's would take it off whole blocks), so only the launch overhead
/// cancels there.
///
/// The row's arithmetic ceiling is its memcpy time over the full shape's elements at this
/// rate: the best ratio it could reach if memory were free. On `t` threads the rate is taken
/// `t` times (perfect scaling: an upper bound).
struct InL2 {
    /// Rows of `a` and of `b`.
    rows: (usize, usize),
    /// Bytes `a` reads and writes.
    bytes: usize,
    /// Best times of `a` and `b`, seconds.
    times: (f64, f64),
    /// Seconds per element.
    per_elem: f64,
}

/// Pins the calling thread to the CPU it runs on.
fn pin_here() {
    // SAFETY: `sched_getcpu` takes nothing; `sched_setaffinity` reads the zeroed set it is
    // given, of the size given.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu >= 0 {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// [`InL2`] for every case of `full` (`summary_cases(r, c)`), on `p` (one thread), its thread
/// pinned to one CPU: a move to the other core would leave the data in the first one's L2.
fn in_l2(full: &[Case], r: usize, c: usize, p: &rayon::ThreadPool) -> Vec<InL2> {
    p.install(pin_here);
    let mut one: Vec<Case> = memory_cases(1, 1).into_iter().flat_map(|g| g.1).collect();
    one.push(depthwise_case(3, 1));
    let mut by_rows = std::collections::BTreeMap::new();
    let mut shape = |rows: usize| -> &'static [Case<'static>] {
        by_rows
            .entry(rows)
            .or_insert_with(|| &*Vec::leak(summary_cases(rows, c)))
    };
    let mut out = Vec::new();
    for (i, case) in full.iter().enumerate() {
        let rows = l2_rows(case, r);
        let a = &shape(rows)[i];
        let (b, rows_b) = if case.transpose {
            (&one[i], 1)
        } else {
            let rb = fewer_rows(rows);
            (&shape(rb)[i], rb)
        };
        let make = |k: &Case| (k.reused.as_ref().expect("a reused-output launch"))();
        let (mut la, mut lb) = (make(a), make(b));
        let timed = p.install(|| {
            best_alternating_in(
                &mut [&mut la, &mut lb],
                L2_WINDOWS,
                L2_WINDOW,
                L2_WINDOW_RUNS,
            )
        });
        let times = (timed[0].best, timed[1].best);
        let m = InL2 {
            rows: (rows, rows_b),
            bytes: a.bytes,
            times,
            per_elem: (times.0 - times.1) / (a.elems as f64 - b.elems as f64),
        };
        eprintln!(
            "{} [{r}, {c}] in L2: A {} rows ({} KiB) {:.2} µs, B {} {:.2} µs ({} + {} runs): \
             {:.4} ns per element",
            case.name,
            m.rows.0,
            m.bytes >> 10,
            m.times.0 * 1e6,
            if case.transpose {
                "[1, 1]".into()
            } else {
                format!("{} rows", m.rows.1)
            },
            m.times.1 * 1e6,
            timed[0].runs,
            timed[1].runs,
            m.per_elem * 1e9
        );
        out.push(m);
    }
    out
}

fn summary_memory(rows: &mut Vec<Row>) {
    let mut in_l2_by_cols = std::collections::BTreeMap::new();
    for (r, c) in shapes() {
        let shape = format!("[{r}, {c}]");
        // `→ reused out` rows at `[4096, 1024]` and beyond the LLC.
        let reuse = (r, c) == (4096, 1024) || 4 * r * c > last_level_bytes();
        let cases = summary_cases(r, c);
        let only = only();
        // The in-L2 rates depend on the column count only (the in-L2 shapes keep `c`), so
        // `[8192, 4096]` takes `[1024, 4096]`'s.
        let l2: &[InL2] = if only.is_none() {
            in_l2_by_cols
                .entry(c)
                .or_insert_with(|| in_l2(&cases, r, c, &pool(1)))
        } else {
            &[]
        };
        for t in THREADS {
            let p = pool(t);
            for (i, case) in cases.iter().enumerate() {
                if only
                    .as_ref()
                    .is_some_and(|o| !case.name.contains(o.as_str()))
                {
                    continue;
                }
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
                let copy_s = timed[timed.len() - 1].best;
                let copy = (2 * (case.bytes / 2)) as f64 / copy_s / 1e9;
                // None where A was not slower than B (timing noise): no rate to divide by.
                let ceiling = l2
                    .get(i)
                    .filter(|m| m.per_elem.is_finite() && m.per_elem > 0.0)
                    .map(|m| copy_s / (m.per_elem * case.elems as f64 / t as f64));
                // One row per timed kernel (the plain launch, then the reused output).
                let row = |kernel: String, best: f64| {
                    let gbs = case.bytes as f64 / best / 1e9;
                    Row {
                        kernel,
                        shape: shape.clone(),
                        threads: t,
                        value: gbs,
                        unit: "GB/s",
                        ratio: gbs / copy,
                        ceiling,
                        yardstick: "memcpy",
                    }
                };
                rows.push(row(case.name.into(), timed[0].best));
                if into.is_some() {
                    rows.push(row(format!("{} → reused out", case.name), timed[1].best));
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
                    ceiling: None,
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
            ceiling: None,
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
            ceiling: None,
            yardstick: "2 µs goal",
        });
    }
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| kernel | shape | threads | value | unit | ratio | arithmetic ceiling | ratio to |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let ceiling = r.ceiling.map_or("–".into(), |c| format!("{c:.2}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {} | {:.2} | {} | {} |",
            r.kernel, r.shape, r.threads, r.value, r.unit, r.ratio, ceiling, r.yardstick
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

/// The running CPU as `/proc/cpuinfo` names it (model name, vendor, family and model) and its
/// caches as sysfs reports them for CPU 0, for the docs' machine line: tables taken on
/// different machines (the machine a session runs on is drawn) must say which one they are.
fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|n| n.trim() == k))
            .and_then(|l| l.split_once(':'))
            .map_or(String::from("?"), |(_, v)| v.trim().to_string())
    };
    let caches = (0..8)
        .filter_map(|i| {
            let at = |f: &str| {
                std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/{f}"))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            let (level, kind, size) = (at("level")?, at("type")?, at("size")?);
            (kind != "Instruction").then(|| format!("L{level} {size}"))
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{} ({}, family {}, model {}); caches of CPU 0 (sysfs): {caches}",
        field("model name"),
        field("vendor_id"),
        field("cpu family"),
        field("model"),
    )
}

fn write_docs(rows: &[Row]) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let machine = machine();
    let col_tile = col_tile_rows();
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
         *Arithmetic ceiling* (every memory-bound row; – where A did not time slower than B): \
         the ratio the row could reach if memory were free, = \
         the row's memcpy time (the one its ratio uses) / (the kernel's in-L2 time per element × \
         the row's elements). The in-L2 time per element comes from two `→ reused out` launches \
         of the kernel on one thread, timed in alternating windows (8 each of ≤ 25 ms, best of \
         each): A on a shape with the row's column count whose bytes read + written are ≤ 768 KiB \
         (3/4 of a 1 MiB L2, the smallest L2 the table has run on; as many rows as fit, at least 16), B on about a quarter of A's rows (at \
         least 8, the same count modulo the column reductions' {col_tile}-row tile, or modulo 8 where \
         A has under {} rows, so both leave the same partial tile or row block); time per \
         element = (A − B) / (A's elements − B's), so the launch overhead (≈ 0.3 µs) and the \
         per-launch column set-up cancel (A takes 3–34 µs): the ceiling leaves them out, and at \
         `[37, 300]`, whose copy runs from L1, they are a large part of the launch. A shape's \
         in-L2 rate is measured once per column count (its A and B keep the columns), so a \
         shape past the last-level cache takes that of the resident shape with its columns. Column reductions keep their access \
         pattern this way (the same column strips, fewer row passes). A transpose's A has \
         the largest power-of-two row count that fits (whole 16 × 16, bf16 32 × 32, blocks and \
         destination rows of whole cache lines; the full shape's source stride, a shorter \
         destination stride) and its B is its `[1, 1]` launch, as fewer rows would leave those \
         blocks. The depthwise convolution's rows are its H (W × 64 channels kept), its elements \
         its output's. Two threads: that one-thread in-L2 rate doubled (perfect scaling, so an \
         upper bound) against the two-thread memcpy — not measured on two threads, since an in-L2 \
         launch is a few µs per thread and the pool's wake-up and join would be a large and \
         varying part of it. A row whose ceiling is below 0.8 cannot reach 0.8 on this machine \
         without a cheaper op sequence; one whose ceiling is at or above 0.8 and above its ratio \
         is held by the memory path (room left). A ratio above its ceiling means the full-shape \
         launch ran faster per element than the in-L2 one, by timing noise (a few %, more \
         while other jobs run) or a different schedule; the run's stderr prints each A and B shape, time and ns per element.\n\n\
         Machine: {machine}; {threads} hardware threads; load average at the end of the run: `{}` — numbers \
         taken while other jobs ran are provisional.\n\n![ratios](performance.svg)\n\n{}",
        col_tile + 8,
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

/// `TESSERA_BENCH_ONLY=NAME`: the summary's memory-bound rows whose kernel name contains
/// `NAME` only (no criterion, launch or GEMM rows, no arithmetic ceiling), printed and not
/// written to `docs/`: one kernel's rows timed the summary's way, e.g.
/// `TESSERA_BENCH_ONLY=depthwise cargo bench --bench cpu` (an empty `NAME` keeps every
/// memory-bound row, in the summary's order). What it showed first (dw18, 2026-11-27
/// 23:30–23:38 UTC, `chrt -f 50`, load 7–11 from other jobs' builds): the quiet table's
/// depthwise `[4096, 1024]` one thread 0.94 fresh / 0.54 `→ reused out` is no property of
/// the reused launch. Both launches take the same path (`depthwise::run` → `dwtaps`,
/// streaming stores: a 14.7 MB output on one thread), the kept output faults no pages
/// (`cpu_profile depthwise 4096 1024 200 --pool --into`: 0.0 per launch, 1237–1266 µs
/// against 1254 fresh);
/// alone the two rows read 1.03 / 1.03, after every other memory-bound row (an empty
/// `NAME`) 1.06 / 1.04 in one run and 0.67 / 0.47 in another, with `p` (the transposes
/// first) 0.79 / 0.85, `t` 1.08 / 1.06, `e` 0.82 / 0.83: a run's windows, not the output.
fn only() -> Option<String> {
    std::env::var("TESSERA_BENCH_ONLY").ok()
}

fn main() {
    if only().is_some() {
        let mut rows = Vec::new();
        summary_memory(&mut rows);
        println!("\n{}", table(&rows));
        return;
    }
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
