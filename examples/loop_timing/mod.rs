//! The timing harness of the `gelu_loop` and `exp_loop` examples (each includes this file
//! with `#[path]`): argument parsing, the bit-for-bit check and the cycles per 16 values.

/// The row length and the number of rounds from the command line (1024 and 3 by default).
pub fn args() -> (usize, usize) {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(1024, |s| s.parse().unwrap());
    let rounds: usize = a.get(2).map_or(3, |s| s.parse().unwrap());
    (n, rounds)
}

/// Asserts that `got` and `want` hold the same bits.
#[cfg(target_arch = "x86_64")]
pub fn assert_same_bits(got: &[f32], want: &[f32]) {
    assert!(
        got.iter()
            .zip(want)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
}

/// Nanoseconds per cycle: the fastest of 20 chains of 10^7 dependent integer adds.
#[cfg(target_arch = "x86_64")]
fn ns_per_cycle() -> f64 {
    let mut best = f64::MAX;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let mut a: u64 = 0;
        for _ in 0..100_000 {
            // SAFETY: integer adds on one register.
            unsafe { core::arch::asm!(".rept 100", "add {0}, 1", ".endr", inout(reg) a) };
        }
        std::hint::black_box(a);
        best = best.min(t.elapsed().as_secs_f64() * 1e9 / 1e7);
    }
    best
}

/// Prints one line per round: for each row, the fastest of 5 runs of `call(f)` repeated
/// over about 2·10^7 values, in cycles per 16 values of a row of `n`; the results of
/// `call` are summed and the sum kept live.
#[cfg(target_arch = "x86_64")]
pub fn print_rounds<R: Copy, T: core::ops::AddAssign + Default>(
    rounds: usize,
    n: usize,
    rows: &[(&str, R)],
    mut call: impl FnMut(R) -> T,
) {
    let reps = (20_000_000 / n).max(1);
    for round in 0..rounds {
        let nspc = ns_per_cycle();
        let mut line = format!("round {round} ({:.2} GHz):", 1.0 / nspc);
        for &(name, f) in rows {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                let mut acc = T::default();
                for _ in 0..reps {
                    acc += call(f);
                }
                std::hint::black_box(acc);
                best = best.min(t.elapsed().as_secs_f64() * 1e9 / (reps * n) as f64);
            }
            line += &format!("  {name} {:.2}", best * 16.0 / nspc);
        }
        println!("{line}  (cycles per 16 values, row of {n})");
    }
}
