//! How a launch of several programs starts on several threads: a small launch runs on the
//! calling thread alone, since handing programs to rayon's workers (waking one that sleeps)
//! costs microseconds, more than a launch over L1/L2-resident tensors takes in all
//! (rmsnorm `[37, 300]` f32, two threads: 7.4 µs per launch split among them, 1.6 µs on one).
//! What a program costs is known only by running one (a norm row, a softmax row and an
//! attention block differ by orders of magnitude), so [`probe`] runs the first programs on
//! the calling thread, in runs of doubling length, while the next run is predicted (from
//! the mean time per program so far) to end within [`BUDGET`]; the rest are then split among the threads as before. A launch with a tensor
//! of [`LARGE`] bytes or more skips the probe. Programs are independent, so which thread
//! runs one changes no result.

use crate::backend::Buffer;
use std::time::{Duration, Instant};

/// The time a launch's programs may take on the calling thread before the rest are split
/// among the threads: about what a fork-join to a sleeping worker costs.
pub(crate) const BUDGET: Duration = Duration::from_micros(5);

/// Elements (`R · C`) below which a softmax or norm row loop runs on the calling thread
/// without [`probe`]: its cost per element is known within a few times (a row loop over
/// L1/L2-resident rows), and [`probe`] reads the clock after each of its runs (≈ 7 reads for
/// 37 rows), which cost a `[37, 300]` softmax launch on a two-thread pool ≈ 0.5 µs of its
/// ≈ 4.3 (fastest launch 4.80 against 4.30 µs on one thread). Break-even on the 2-vCPU Intel
/// Xeon KVM guest (family 6 model 207), `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile softmax
/// R 1024 5000 --pool` (main `47673e3`, probe and split), 2026-11-28 18:50 UTC, load 3.6–5.1,
/// fastest launch in µs, two rounds, one → two threads: `R = 16` 6.26, 4.90 → 5.31, 5.54;
/// 32: 9.35, 10.93 → 10.23, 9.79; 64: 17.39, 17.46 → 18.96, 18.84; 128: 34.85, 33.83 →
/// 35.94, 35.87; 256: 84.7, 94.0 → 81.9, 84.4; 512: 198, 204 → 197, 203. Two threads gain
/// nothing below 256 rows here, and lose up to 128. Unprobed below this, the same command at
/// `[37, 300]` interleaved with that binary, 2026-11-28 19:16 UTC, load 4.0–4.7, three rounds:
/// two threads fastest 4.64–4.78 → 4.11–4.23 µs, wall 5.25–5.71 → 4.53–4.89 µs (one thread
/// 4.30–4.50 → 4.23–4.24: the launch's other cuts); `layernorm` runs 3.3–4.5 µs on either,
/// whole processes landing at one end or the other of that range.
pub(crate) const ROWS_MIN: usize = 1 << 16;

/// Bytes of one tensor from which a launch splits its programs at once (4 MiB: far more
/// work than [`BUDGET`]).
pub(crate) const LARGE: usize = 4 << 20;

/// Whether some tensor of the launch holds [`LARGE`] bytes or more.
pub(crate) fn large(args: &[Buffer]) -> bool {
    args.iter().any(|b| b.len >= LARGE)
}

/// Runs programs `first ..` of `total` on this thread, `span(a, b)` running programs
/// `a .. b`, in runs of 1, 2, 4, … programs; a run starts only when the time so far plus
/// the run at the mean time per program measured so far stays within [`BUDGET`] (the
/// first program always runs: it is the first measurement). Returns the first program
/// not run (`total` when all ran).
pub(crate) fn probe(first: usize, total: usize, span: impl Fn(usize, usize)) -> usize {
    let start = Instant::now();
    let (mut next, mut run) = (first, 1);
    while next < total {
        let end = (next + run).min(total);
        span(next, end);
        next = end;
        run *= 2;
        let (spent, done) = (start.elapsed(), (next - first) as u32);
        let ahead = spent / done * (run.min(total - next) as u32);
        if spent + ahead > BUDGET {
            break;
        }
    }
    next
}
