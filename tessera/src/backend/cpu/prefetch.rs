//! Software prefetch hints: a loop asks for the cache lines it will read a little later, so
//! that memory works while it computes. A prefetch reads nothing architecturally and never
//! faults, so any address (one past a buffer's end, or unmapped) is harmless. On targets
//! other than x86-64 these do nothing.

/// Asks for the cache line holding `p` in L1 (`prefetcht0`).
#[inline(always)]
pub(crate) fn l1<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults (SSE is part of the
    // x86-64 baseline).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the cache line holding `p` in L2 (`prefetcht1`).
#[inline(always)]
pub(crate) fn l2<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as `l1`.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the `lines` consecutive 64-byte cache lines from `p` in L1 (one `prefetcht0`
/// each: with `p` 64-byte aligned, exactly the lines of bytes `p .. p + 64·lines`).
#[inline(always)]
pub(crate) fn lines_l1<T>(p: *const T, lines: usize) {
    let p = p.cast::<u8>();
    for l in 0..lines {
        l1(p.wrapping_add(64 * l));
    }
}

/// The bytes of each quarter of an f32 chunk of `n` columns for [`quarter_at`]: the 128-byte
/// steps of its whole 32-column steps, a quarter of them (rounded up) each.
pub(crate) fn quarter_bytes(n: usize) -> usize {
    (n / 32).div_ceil(4) * 128
}

/// Where step `i` of a loop over an f32 chunk (columns `32i .. 32i + 32`) asks for two
/// 64-byte lines of a row it reads later (the f32 softmax rows past the last-level cache),
/// in bytes from that row's chunk's start, with quarters of `q` bytes ([`quarter_bytes`]):
/// in step `i`, the `⌊i/4⌋`-th 128 bytes of quarter `i mod 4`. So the four quarters of that
/// row (four 4 KiB pages of a 16 KiB row) are asked for side by side as the step runs,
/// instead of its lines in column order; as glibc's large non-temporal copies interleave
/// four pages. Why it is faster is not measured (no hardware counters here); likely more
/// reads in flight, the hardware's stream prefetch following each page separately. A
/// standalone C loop (128 MiB f32 in, streaming stores out, 16 KiB rows, each row's lines
/// asked for three rows ahead, 2 × 8 FMAs per 32 values; Intel Xeon family 6 model 207, one
/// thread, `chrt -f 50`, 2026-11-28 19:00 UTC, load ≈ 5, two rounds, fastest of four):
/// column order 15.2–16.7 ms (`prefetcht0` one to three rows ahead, `t1` / `t2` three or
/// six), quarters 12.4–13.1 ms (`t0` or `t2`, two to six rows ahead), glibc's `memcpy` (`rep
/// movsb` here) of the same bytes 12.6–13.0, no prefetch 18.4–18.9; with 2 × 20 FMAs 17.6–18.7
/// against 14.4–14.7 (`memcpy` 14.8). A plain copy with streaming stores: 18.6–19.5 ms,
/// 14.3–15.2 with a `prefetcht0` / `t1` 1–4 KiB ahead, 12.7–13.2 over four pages
/// interleaved.
/// Figures of the loop that uses it (dr24): `fused::softmax::rows_avx512`'s doc.
#[inline(always)]
pub(crate) fn quarter_at(i: usize, q: usize) -> usize {
    (i & 3) * q + (i >> 2) * 128
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`quarter_at`] over a chunk's whole 32-column steps asks for each line at most once,
    /// all within the four quarters ([`quarter_bytes`] each); where the steps are a multiple
    /// of four, for exactly the lines of those steps (what the column order asks for), and
    /// otherwise for all but at most three steps' of them (the lines past them it asks for
    /// are a prefetch's, harmless).
    #[test]
    fn quarters_ask_for_the_lines_of_the_chunk_once() {
        for n in (32..=4224)
            .step_by(32)
            .chain([1, 31, 33, 300, 1000, 4095, 4097])
        {
            let (steps, q) = (n / 32, quarter_bytes(n));
            let mut seen = std::collections::BTreeSet::new();
            for i in 0..steps {
                for line in [quarter_at(i, q), quarter_at(i, q) + 64] {
                    assert!(
                        line % 64 == 0 && line < 4 * q,
                        "n {n}: step {i} asks {line}"
                    );
                    assert!(seen.insert(line), "n {n}: line {line} asked twice");
                }
            }
            let inside = seen.iter().filter(|&&l| l < steps * 128).count();
            if steps % 4 == 0 {
                assert_eq!(inside, steps * 2, "n {n}");
                assert_eq!(seen.len(), steps * 2, "n {n}");
            }
            assert!(
                inside + 6 >= steps * 2,
                "n {n}: {inside} of {} lines",
                steps * 2
            );
        }
    }

    /// A prefetch is a hint: addresses no allocation holds (null, the top of the address
    /// space, far past a buffer) must not fault, as a load there would.
    #[test]
    fn unmapped_addresses_do_not_fault() {
        let v = vec![1.5f32; 16];
        for p in [
            std::ptr::null::<f32>(),
            usize::MAX as *const f32,
            (usize::MAX - 4095) as *const f32,
            v.as_ptr().wrapping_add(1 << 40),
        ] {
            l1(p);
            l2(p);
            lines_l1(p, 4);
        }
        assert_eq!(v.iter().sum::<f32>(), 24.0);
    }
}
