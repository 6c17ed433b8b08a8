//! The depthwise convolution's 3×3 case, one pass over `R` output rows at a time. In
//! channels-last layout output row `oh` is `n = OW·C` contiguous floats and, for tap
//! `(i, j)`, the inputs it needs are the `n` contiguous floats from `x[oh + i, j, 0]`; the
//! filter is laid out with each tap's `C` floats repeated (rows of `fl ≥ C + L` floats,
//! [`super::depthwise`]), so the taps of the `L` outputs from float `t` of a row are the
//! `L` floats from `t mod C` of each tap's row, for any `C`. A band of `R` rows walks its
//! rows' floats in vectors of `L`: the nine tap vectors are loaded, then input rows
//! `q = 0..R + 2` in order, each one's three columns in order, each input vector added to
//! every output row `r` it is tap `(q − r, j)` of. Per element it computes what
//! [`super::depthwise`] does (`acc = acc + x·f` from `+0.0`, a separate multiply and add, the
//! taps in `(i, j)` order), so the result is the interpreter's bit for bit at every level.
//!
//! The vectors of a band start at the first float of its first output row that is aligned
//! to the vector (so every store, and every load whose row shares that phase, touches one
//! cache line); the floats before it and after the last whole vector are computed as one
//! vector overlapping the row's start or end, stored element by element. While a band runs,
//! the input rows of the next band that it does not share are prefetched into L2, spread
//! over its vectors (when they are at most `PREFETCH_MAX` floats). A large output (`nt`, see
//! `stream::wanted`) is written with streaming stores where every vector store is aligned
//! (`n` a multiple of `L`).

use crate::backend::cpu::prefetch;
use crate::backend::cpu::simd::SimdLevel;

/// The filter size this module computes.
pub(crate) const K: usize = 3;

/// The most floats of a next band's input rows that a band prefetches (256 KiB, a quarter
/// of a 1 MiB L2).
const PREFETCH_MAX: usize = 1 << 16;

/// Lanes per vector at `level` (one register: 16 at AVX-512, 8 at AVX2, 4 otherwise).
pub(crate) fn lanes(level: SimdLevel) -> usize {
    match level {
        SimdLevel::Avx512 => 16,
        SimdLevel::Avx2 => 8,
        SimdLevel::Portable => 4,
    }
}

/// The output rows `oh0..` written into `out` and where they come from.
pub(crate) struct Band<'a> {
    /// The input, rows of `w·c` floats.
    pub x: &'a [f32],
    /// The filter's nine taps (in `(i, j)` order), each `c` floats repeated to `fl ≥ c + 16`.
    pub fe: &'a [f32],
    /// The filter rows' length in `fe`.
    pub fl: usize,
    /// Input width and channels.
    pub w: usize,
    pub c: usize,
    /// The first output row.
    pub oh0: usize,
    /// Output width (`out` is whole rows of `ow·c` floats).
    pub ow: usize,
    /// Bands of 8 output rows at AVX-512 instead of 4: the AMD EPYC Zen 5's tuning (see
    /// `rows_avx512`), which the caller sets on AMD CPUs.
    pub tall: bool,
    /// Streaming stores (the caller checked `stream::wanted` for the output).
    pub nt: bool,
}

/// Output rows `b.oh0..` into `out` at `level`; `ow·c` is at least [`lanes`]`(level)` and
/// every tap of every output element lies inside `x` (the caller checked).
pub(crate) fn rows(level: SimdLevel, b: &Band, out: &mut [f32]) {
    let n = b.ow * b.c;
    let nrows = out.len() / n.max(1);
    assert!(
        n >= lanes(level)
            && nrows * n == out.len()
            && b.fl >= b.c + 16
            && b.fe.len() >= K * K * b.fl
            && b.ow + K - 1 <= b.w
            && (b.oh0 + nrows + K - 1) * b.w * b.c <= b.x.len(),
        "depthwise taps out of bounds"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if level >= SimdLevel::Avx512 {
            // SAFETY: the active level is at most the detected one: AVX-512F is present;
            // the extents were checked above.
            return unsafe { rows_avx512(b, out) };
        }
        if level >= SimdLevel::Avx2 {
            // SAFETY: as above, AVX2 is present.
            return unsafe { rows_avx2(b, out) };
        }
    }
    // SAFETY: the extents were checked above.
    unsafe { rows_body::<2, 4>(b, out) }
}

/// [`rows_body`] built with AVX-512F: 16 lanes, 4 output rows at a time (8 with
/// [`Band::tall`], on AMD).
///
/// Bands of 4 output rows, not 8, off AMD since tr21 (AVX2's are 4 rows too; on the AMD
/// EPYC Zen 5, where this loop is bound by its instructions rather than by the memory, 4
/// rows measured slower: ARCHITECTURE.md, "Where two-thread depthwise stands", so AMD
/// keeps 8). A band of `R` rows
/// reads `R + 2` input rows and writes `R` output rows side by side, so 8 rows keep 18 row
/// streams per thread (36 on two threads), 4 rows 10 (20), for 1.5 instead of 1.25 input
/// loads per output vector. On the 2-vCPU KVM Intel Xeon (family 6 model 207) of sessions
/// 17–21 (tr21, `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile depthwise R C 200 --pool`
/// (`[8192, 4096]`: 30), the band height forced by a temporary switch in one build,
/// interleaved with main a5b9485's binary, 2026-11-28 09:03–09:56 UTC, `uptime` 2.9–6.9
/// from other helpers' work; each process's fastest launch, its ratio to the same
/// process's yardstick, median of each batch's 4–7 rounds, 8 → 4 rows): two threads
/// `[4096, 1024]` 0.73 / 0.83 / 0.88 / 0.80 → 0.91 / 0.94 / 0.95 / 0.92, `[1024, 4096]`
/// 0.82 / 0.77 / 0.75 / 0.75 → 0.82 / 0.88 / 0.86 / 0.85 (last batch, µs fastest /
/// median: 779 / 913 → 720 / 831 and 974 / 1009 → 887 / 908); a build taking 4 rows on
/// two threads only, against main, two more batches: `[4096, 1024]` 0.91 → 0.88 and 0.79
/// → 0.90, `[1024, 4096]` 0.73 → 0.86 and 0.77 → 0.83, `[8192, 4096]` 8831 / 10130 →
/// 8302 / 9749 µs. One thread, three batches: `[1024, 4096]` 0.69 / 0.85 / 0.92 → 0.84 /
/// 1.02 / 0.99 (last: 1404 / 1509 → 1320 / 1432 µs), `[4096, 1024]` 0.99 / 1.02 / 1.04
/// → 0.96 / 0.99 / 1.06 (last: 1237 / 1285 → 1161 / 1240); `[8192, 4096]` 16632 / 19229
/// → 15826 / 17950 µs (0.70 → 0.74). Two runs of the same binary differed by up to 0.14
/// in such medians. This build against main, 09:59–10:03 UTC, `uptime` 2.3–5.4, five
/// rounds, µs fastest / median (median ratio): one thread `[4096, 1024]` 1155 / 1556
/// (0.78) → 1117 / 1157 (1.10), `[1024, 4096]` 1363 / 1764 (0.82) → 1263 / 1400 (0.91),
/// `[8192, 4096]` 18374 / 20145 (0.70) → 15194 / 18117 (0.78); two threads `[4096, 1024]`
/// 697 / 878 (0.77) → 663 / 787 (0.87), `[1024, 4096]` 774 / 951 (0.81) → 703 / 865
/// (0.83), `[8192, 4096]` 8194 / 9968 → 7914 / 9631; `[37, 300]` (5000 launches, four
/// rounds) 2.69–4.05 → 2.72–3.75 µs. Tried on two threads and not kept: bands of 6 rows (`[4096, 1024]`
/// 0.81 / 0.88, `[1024, 4096]` 0.86 / 0.81 against 8 rows' 0.73 / 0.83 and 0.82 / 0.77);
/// streaming stores from 12 MiB (`stream::wanted` keeps plain ones up to 3/4 of the
/// last-level cache on two threads), five batches against main with 8-row bands:
/// `[4096, 1024]` 0.92 → 1.02 but `[1024, 4096]` 0.90 → 0.82 (pooled medians), and with
/// 4-row bands 0.91 / 0.82 against plain stores' 0.92 / 0.85 in the last batch. Measured
/// in one batch only (four rounds, 8 rows' 0.73 / 0.82 there) and not followed up: 1 or 2
/// pieces per thread instead of 4, 0.91 / 0.82 and 0.82 / 0.91; no L2 prefetch of the next
/// band's rows, 0.88 / 0.86.
///
/// # Safety
/// The CPU must support AVX-512F; the extents as [`rows`] checks them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn rows_avx512(b: &Band, out: &mut [f32]) {
    unsafe {
        if b.tall {
            rows_body::<8, 16>(b, out)
        } else {
            rows_body::<4, 16>(b, out)
        }
    }
}

/// [`rows_body`] built with AVX2: 8 lanes, 4 output rows at a time.
///
/// # Safety
/// The CPU must support AVX2; the extents as [`rows`] checks them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2(b: &Band, out: &mut [f32]) {
    unsafe { rows_body::<4, 8>(b, out) }
}

/// Bands of `R` output rows, then the remaining rows one at a time; streaming stores when
/// `b.nt` and every row starts at the same offset within a vector (`n` a multiple of `L`),
/// fenced before returning.
///
/// # Safety
/// As [`rows`] checks.
#[inline(always)]
unsafe fn rows_body<const R: usize, const L: usize>(b: &Band, out: &mut [f32]) {
    let (c, rs) = (b.c, b.w * b.c);
    let n = b.ow * c;
    let nrows = out.len() / n;
    let nt = b.nt && n.is_multiple_of(L) && L >= 8;
    let g = Geom {
        fe: b.fe.as_ptr(),
        fl: b.fl,
        rs,
        c,
        n,
        step: L % c,
    };
    let (xp, op) = (b.x.as_ptr(), out.as_mut_ptr());
    let mut r = 0;
    // An input past the last-level cache ([`past_cache`]): the next band's `R` rows asked
    // for side by side, one stream per row, instead of in order.
    let ks = if past_cache(b.x.len() * 4) { R } else { 0 };
    #[cfg(test)]
    if ks != 0 {
        tests::STREAMED.with(|q| q.set(q.get() + 1));
    }
    while r < nrows {
        let oh = b.oh0 + r;
        // The next band's input rows this one does not read: rows `oh + R + 2 ..` of `x`
        // (none when they would not fit in L2 beside this band's).
        let ahead = if R * rs <= PREFETCH_MAX {
            b.x.len().saturating_sub((oh + R + 2) * rs).min(R * rs)
        } else {
            0
        };
        // SAFETY: rows `r..` of `out`, their taps in `x` (the caller's extents).
        let (x, y) = unsafe { (xp.add(oh * rs), op.add(r * n)) };
        if r + R <= nrows {
            // SAFETY: as above, `R` rows.
            unsafe {
                // (`KS` a constant: the loop without streams is the one from before.)
                match (nt, ks != 0) {
                    (true, true) => band::<R, L, true, true>(&g, x, y, (ahead, ks)),
                    (true, false) => band::<R, L, true, false>(&g, x, y, (ahead, 0)),
                    (false, true) => band::<R, L, false, true>(&g, x, y, (ahead, ks)),
                    (false, false) => band::<R, L, false, false>(&g, x, y, (ahead, 0)),
                }
            }
            r += R;
        } else {
            // SAFETY: as above, one row.
            unsafe {
                if nt {
                    band::<1, L, true, false>(&g, x, y, (0, 0))
                } else {
                    band::<1, L, false, false>(&g, x, y, (0, 0))
                }
            }
            r += 1;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if nt {
        super::stream::fence();
    }
}

/// Whether [`rows_body`] treats an input of `bytes` as past the last-level cache
/// (`super::stream::past_cache`; a test may force it on its own thread). There the next
/// band's rows are asked for (into L2, as before) one stream per row side by side, as the
/// softmax rows past the cache ask for theirs in four interleaved quarters
/// (`prefetch::quarter_at`). Measured (dr24, 2026-11-28, throwaway build with run-time
/// switches, `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile depthwise 8192 4096 10 --pool`,
/// interleaved with main `47673e3`'s binary, fastest launch's ratio to the same run's copy,
/// three sets of 3–5 rounds, 19:06–19:49 UTC, load 3.5–5.5): main 0.67–0.88, the switch
/// build as main 0.64–0.86, one stream per row 0.60–0.95 (0.80–0.95 in 9 of 12 rounds;
/// 14179–15039 µs in four of the last five, main 15308–18185), 16 streams 0.59–0.88, the
/// rows two bands ahead 0.71–0.87, `prefetcht0` 0.77–0.83. This build against main's
/// binary (19:52–19:58 UTC, load 2.1–3.7): one thread, thirteen interleaved rounds,
/// 14428–20341 µs (0.67–0.82) → 12996–18570 (0.70–0.95; ≥ 0.82 in eleven), faster in
/// twelve; two threads (four rounds) 6258–7825 (1.31–1.39) → 5575–7231 (1.56–1.96). Not
/// taken (the loop without streams is the old one, `KS` false): `[4096, 1024]` two threads
/// 664–980 against 668–881 µs over eight rounds (an earlier build with a run-time test in
/// the loop had measured its minimum 3–5 % higher), `[1024, 4096]` one thread 1262–1716
/// against 1281–1807 (noise), `[4096, 1024]` one thread and `[1024, 4096]` two threads the
/// same within the noise.
fn past_cache(bytes: usize) -> bool {
    #[cfg(test)]
    if tests::FORCE_PAST.with(|f| f.get()) {
        return true;
    }
    super::stream::past_cache(bytes)
}

/// A launch's extents as [`band`] reads them.
struct Geom {
    /// The repeated filter taps and their rows' length.
    fe: *const f32,
    fl: usize,
    /// Input row stride, channels, output row length.
    rs: usize,
    c: usize,
    n: usize,
    /// `L mod c`: how far a vector moves the filter offset.
    step: usize,
}

/// `R` output rows from `y` (rows `g.n` apart) from the input rows from `x` (rows `g.rs`
/// apart): the floats before the first vector-aligned one, the aligned vectors, the floats
/// after the last one; `ahead` floats of `x` from row `R + 2` on are prefetched meanwhile.
///
/// # Safety
/// `y` holds `R` rows of `g.n ≥ L` floats; `x` holds `R + 2` rows of `g.n + 2·g.c` floats
/// and `ahead` more from row `R + 2`; `g.fe` holds nine rows of `g.fl ≥ g.c + L` floats;
/// with `NT`, every row of `y` starts at the same offset within `L` floats and the CPU has
/// AVX-512F (`L = 16`) or AVX (`L = 8`).
#[inline(always)]
unsafe fn band<const R: usize, const L: usize, const NT: bool, const KS: bool>(
    g: &Geom,
    x: *const f32,
    y: *mut f32,
    (ahead, ks): (usize, usize),
) {
    let n = g.n;
    // Floats before the first vector-aligned one (none where that is not known).
    let head = Some(y.align_offset(4 * L)).filter(|&h| h < L).unwrap_or(0);
    if head > 0 {
        // SAFETY: `L ≤ n` floats from 0.
        unsafe { block::<R, L, false>(g, x, y, 0, 0, (0, head)) };
    }
    let mut t = head;
    let mut m = t % g.c;
    // Prefetch `per` lines per vector, `ahead` floats from row `R + 2` in all.
    let iters = ((n - t) / L).max(1);
    let per = (ahead / 16).div_ceil(iters);
    let pf = x.wrapping_add((R + 2) * g.rs);
    let mut at = 0;
    while t + L <= n {
        for _ in 0..per {
            if at < ahead {
                // With `ks` streams, prefetch `k` asks for line `k / ks` of stream `k mod ks`.
                let off = if KS {
                    let (k, lines) = (at / 16, (ahead / 16).div_ceil(ks));
                    16 * ((k % ks) * lines + k / ks)
                } else {
                    at
                };
                prefetch::l2(pf.wrapping_add(off));
                at += 16;
            }
        }
        // SAFETY: `t + L ≤ n`; with `NT`, `y + t` is aligned (`head` and the caller).
        unsafe { block::<R, L, NT>(g, x, y, t, m, (0, L)) };
        t += L;
        m += g.step;
        if m >= g.c {
            m -= g.c;
        }
    }
    if t < n {
        let s = n - L;
        // SAFETY: floats `n - L..n`.
        unsafe { block::<R, L, false>(g, x, y, s, s % g.c, (t - s, L)) };
    }
}

/// Floats `t..t + L` of `R` output rows (filter offset `m = t mod c`), stored from `lo` to
/// `hi` within the vector: input rows `q = 0..R + 2` in order, each one's three columns in
/// order, each vector added to every output row `r` it is tap `(q − r, j)` of.
///
/// # Safety
/// As [`band`], with `t + L ≤ g.n`, `m < g.c`, and with `NT` the stores aligned.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `j` indexes the taps of two rows and the input columns.
unsafe fn block<const R: usize, const L: usize, const NT: bool>(
    g: &Geom,
    x: *const f32,
    y: *mut f32,
    t: usize,
    m: usize,
    (lo, hi): (usize, usize),
) {
    let mut taps = [[[0f32; L]; K]; K];
    for (i, row) in taps.iter_mut().enumerate() {
        for (j, tap) in row.iter_mut().enumerate() {
            // SAFETY: tap `(i, j)`'s floats `m..m + L < fl`.
            *tap = unsafe { *(g.fe.add((i * K + j) * g.fl + m) as *const [f32; L]) };
        }
    }
    let mut acc = [[0f32; L]; R];
    for q in 0..R + K - 1 {
        for j in 0..K {
            // SAFETY: input row `q`, floats `t + j·c ..` (in bounds by the caller).
            let v = unsafe { *(x.add(q * g.rs + j * g.c + t) as *const [f32; L]) };
            for (r, a) in acc.iter_mut().enumerate() {
                if q >= r && q - r < K {
                    let tap = &taps[q - r][j];
                    for k in 0..L {
                        a[k] += v[k] * tap[k];
                    }
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: output row `r`, floats `t..t + L`.
        let p = unsafe { y.add(r * g.n + t) };
        if lo == 0 && hi == L {
            unsafe { put::<L, NT>(p, a) };
        } else {
            for k in lo..hi {
                unsafe { *p.add(k) = a[k] };
            }
        }
    }
}

/// Stores `a` at `p`: a streaming store with `NT`.
///
/// # Safety
/// `p` holds `L` floats; with `NT`, `p` is `4·L`-byte aligned and the CPU has AVX-512F
/// (`L = 16`) or AVX (`L = 8`).
#[inline(always)]
unsafe fn put<const L: usize, const NT: bool>(p: *mut f32, a: &[f32; L]) {
    #[cfg(target_arch = "x86_64")]
    if NT {
        use core::arch::x86_64::*;
        // SAFETY: the caller's alignment and features.
        unsafe {
            if L == 16 {
                return _mm512_stream_ps(p, _mm512_loadu_ps(a.as_ptr()));
            }
            if L == 8 {
                return _mm256_stream_ps(p, _mm256_loadu_ps(a.as_ptr()));
            }
        }
    }
    // SAFETY: `p` holds `L` floats.
    unsafe { *(p as *mut [f32; L]) = *a };
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Whether [`past_cache`] answers true on this thread (a test's).
        pub(super) static FORCE_PAST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Calls of [`rows_body`] on this thread that asked for rows in streams.
        pub(super) static STREAMED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    use crate::backend::cpu::simd;

    /// `y[h, w, ch] = Σ x[h + i, w + j, ch] · f[i, j, ch]`, each term added to `+0.0` in
    /// `(i, j)` order with a separate multiply and add (the interpreter's arithmetic).
    fn reference(x: &[f32], f: &[f32], (h, w, c): (usize, usize, usize)) -> Vec<f32> {
        let (oh, ow) = (h - 2, w - 2);
        let mut y = vec![0f32; oh * ow * c];
        for a in 0..oh {
            for b in 0..ow {
                for ch in 0..c {
                    let mut acc = 0f32;
                    for i in 0..K {
                        for j in 0..K {
                            acc += x[((a + i) * w + b + j) * c + ch] * f[(i * K + j) * c + ch];
                        }
                    }
                    y[(a * ow + b) * c + ch] = acc;
                }
            }
        }
        y
    }

    /// Every SIMD level, input and output at every offset within a 64-byte line, streaming
    /// stores on and off, bands of 4 and of 8 rows ([`Band::tall`]), fresh inputs from the
    /// clock, ragged channel counts (rows not a
    /// whole number of vectors), heights leaving 1 to 7 rows after bands of 8 (1 to 3 after
    /// the bands of 4 that AVX-512 and AVX2 run), rows of exactly one vector, and inputs
    /// with NaN, ±inf and -0.0: the same bits as the scalar reference (any NaN for a NaN).
    #[test]
    fn bands_match_the_scalar_reference_at_every_alignment() {
        let seed = crate::backend::cpu::clock_seed();
        let mut s = seed;
        let mut rnd = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        for &(h, w, c) in &[
            (3, 3, 16),
            (10, 18, 64),
            (17, 6, 70),
            (12, 40, 3),
            (20, 7, 1),
            (9, 10, 2),
            (5, 4, 130),
            (11, 3, 8),
        ] {
            let mut x: Vec<f32> = (0..h * w * c).map(|_| rnd()).collect();
            for (k, v) in x.iter_mut().enumerate() {
                match k % 53 {
                    5 => *v = f32::INFINITY,
                    13 => *v = f32::NEG_INFINITY,
                    21 => *v = -0.0,
                    34 => *v = f32::NAN,
                    _ => {}
                }
            }
            let mut f: Vec<f32> = (0..K * K * c).map(|_| rnd()).collect();
            f[c / 2] = -0.0;
            let want = reference(&x, &f, (h, w, c));
            let (oh, ow) = (h - 2, w - 2);
            let fl = c + 16;
            let fe: Vec<f32> = (0..K * K * fl)
                .map(|k| f[k / fl * c + k % fl % c])
                .collect();
            for level in simd::supported() {
                if ow * c < lanes(level) {
                    continue;
                }
                for (xo, yo, nt, tall) in (0..16).flat_map(|o| {
                    [
                        (o, (o * 5) % 16, false, o % 2 == 1),
                        (o, o, true, o % 4 < 2),
                    ]
                }) {
                    let nt = nt && level >= SimdLevel::Avx2;
                    // Half the cases as past the last-level cache (streams per row).
                    FORCE_PAST.with(|f| f.set(xo % 2 == 0));
                    let mut xs = vec![0f32; x.len() + 32];
                    let xa = xs.as_ptr().align_offset(64) + xo;
                    xs[xa..xa + x.len()].copy_from_slice(&x);
                    let mut ys = vec![f32::NAN; want.len() + 32];
                    let ya = ys.as_ptr().align_offset(64) + yo;
                    let band = Band {
                        x: &xs[xa..xa + x.len()],
                        fe: &fe,
                        fl,
                        w,
                        c,
                        oh0: 0,
                        ow,
                        tall,
                        nt,
                    };
                    rows(level, &band, &mut ys[ya..ya + oh * ow * c]);
                    let outside = ys[..ya].iter().chain(&ys[ya + want.len()..]);
                    assert!(
                        outside.into_iter().all(|v| v.is_nan()),
                        "[{h}, {w}, {c}] wrote outside"
                    );
                    let got = &ys[ya..ya + want.len()];
                    let same =
                        |a: f32, b: f32| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan();
                    if let Some(k) = (0..want.len()).find(|&k| !same(got[k], want[k])) {
                        panic!(
                            "[{h}, {w}, {c}] {level:?} x+{xo} y+{yo} nt {nt} tall {tall} seed {seed}: element {k} is {} not {}",
                            got[k], want[k]
                        );
                    }
                }
            }
        }
        FORCE_PAST.with(|f| f.set(false));
        assert!(
            STREAMED.with(|q| q.get()) > 0,
            "no band asked for rows in streams"
        );
    }
}
