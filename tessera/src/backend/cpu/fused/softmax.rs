//! The softmax row loop ([`super::rowmatch::Softmax`]): one program's rows, each in two
//! passes over chunks of `bc` columns, with the interpreter's arithmetic op for op. The online
//! pass keeps `m` (running max) and `s` (running sum): per chunk `m' = max(m, max(x))`,
//! `s = s·exp(m − m') + Σ exp(x − m')` (`vmath::max`, `vmath::exp`, `vmath::sum` over the
//! chunk's columns), and it keeps each `exp(x − m')` in a row buffer. The write pass stores
//! `exp(x − m)·(1/s)`; for a chunk whose `m'` has the final `m`'s bits that exponential is the
//! kept one, so a row of one chunk (the common case: `bc` is 4096, `Schedule::cpu_default`)
//! takes one `exp` per element (at the AVX-512 level an f32 input larger than the last-level
//! cache takes two, the output's apart from the sum's: measured faster there). Lanes past
//! the row end add nothing to the interpreter's `-inf`-padded chunk (`max` ignores `-inf`,
//! `exp(-inf) = +0` adds nothing to a lane of `vmath::sum`), so only the row's own columns
//! are computed. At the AVX-512 level (`rows_avx512`) the passes of
//! neighbouring rows run in one loop per chunk: row `r`'s `exp` and sum (and, for a chunk
//! whose `m'` is not the row's max, the output's `exp(x − m)`), row `r + 2`'s chunk max (one
//! `vmaxps` chain per lane, `max_min_avx512`; for a bf16 row three 16-bit max/min ops on
//! the bit patterns, `MaxMin16`, the row widened in registers again by its exponentials'
//! loop; into a bf16 output whose chunks start at multiples of 32 columns and that is not
//! streamed unless its rows are 64-byte aligned, by two word unpacks, `widen_perm`, the
//! exponentials of whole 32-column steps kept in the unpacked order and the sums and the
//! output's words put back in column order) and row `r − 2`'s scaled store,
//! non-temporal for a large output (`stream`; rows `r + 1` and `r − 1` instead for long rows
//! into an f32 output, `rows_apart`): f32, or bf16 narrowed 32 lanes a store with
//! the interpreter's rounding (`vcvtne2ps2bf16` where the CPU has AVX-512 BF16 and no lane
//! is an f32 subnormal, checked per store unless the row's max and least value show that
//! none can be, `sub_free`; else integer rounding: `bf16io::store32`).

use super::super::prefetch;
use super::super::vmath;
use super::bf16io;
use super::chunk::{self, bin_f};
use super::rowmatch::Softmax;
use super::stream;
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::graph::BinaryOp;

/// Where [`rows_avx512`]'s three rows of exponentials start within a 4 KiB page, in bytes
/// from the offset of the input's first row (the output's with a bf16 input and an f32
/// output): a load that follows a store to an address a multiple of 4 KiB away waits on it
/// (4K aliasing), and with the output's stores trailing the loop's loads by `LAG` columns
/// these offsets measured best (chosen when three widened bf16 rows followed them at 0, 2048
/// and 512): on `[4096, 1024]` f32 and bf16→f32 (one thread) the loop ran 7-15 % slower
/// with every buffer at the input's offset, 3-8 % slower with other spreads tried, 2-5 %
/// slower without the lag.
const PLACE: [usize; 3] = [1024, 2304, 3584];

/// Columns by which [`fused_avx512`]'s stores of the previous row trail its loads.
const LAG: usize = 64;

/// How many rows apart [`rows_avx512`] runs its passes for rows of `n` values of `esz` bytes
/// (`f32_out`: into an f32 output that takes the scaled rows in the loop, not rounded to
/// bf16) from an input of `in_bytes`: 2 (row `r`'s exponentials beside row `r + 2`'s max and
/// row `r − 2`'s stores, row `r + 3` prefetched into the L1), or 1 (row `r + 1`'s max, row
/// `r − 1`'s stores, no prefetch) when a row's input and exponentials, `n·(esz + 4)` bytes,
/// take a third of the level-1 data cache or more, the output is such an f32 one and the
/// input fits the last-level cache. A row's input is read twice (its max, then its
/// exponentials) and its exponentials are stored and read back (by the output's stores), each
/// that many rows apart: 2 apart, 2·`n·(esz + 4)` bytes come between the two reads, which no
/// longer fits the L1 from 4096 f32 columns (64 KiB against 48 KiB here), so both second reads
/// came from the L2 beside the loop's reads from memory, and the prefetch of row `r + 3` into
/// the L1 pushed out more (`perf` cpu-clock, `[1024, 4096]` f32, one thread: ≈ 15 % of
/// `steps_avx512`'s samples on the loads of the exponentials to store, ≈ 20 % on the two
/// input rows' loads). 1 apart a row's first exponentials wait on the max tree taken just
/// before and its stores on the `1/s` just computed: a few steps of a long row. Intel Xeon
/// (family 6 model 207, 48 KiB L1; sx23, figures in [`rows_avx512`]'s doc): one and two
/// threads, `[1024, 4096]` f32 and bf16 → f32 and `[2048, 2048]` f32, 5–25 % faster. Not
/// taken: into a bf16 output (bf16 → bf16 is bound by its vector ops; 1 apart measured
/// 1200–1448 µs against 997–1020 at `[1024, 4096]`) and from an input larger than the
/// last-level cache (`[8192, 4096]` f32, one thread: no prefetch 21.3–24.3 ms against
/// 16.5–18.4 with it; 1 apart with row `r + 2` prefetched into the L2 16.6–20.4, into the L1
/// 19.9–20.6, against 16.5–18.9: no gain shown). Nor on an AMD Zen 4 from an f32 input of
/// half the last-level cache or more ([`zen4_wide`]).
fn rows_apart(n: usize, esz: usize, f32_out: bool, in_bytes: usize) -> usize {
    if one_apart(n, esz, f32_out, in_bytes) && !zen4_wide(esz, in_bytes) {
        1
    } else {
        2
    }
}

/// [`rows_apart`]'s rule for 1 apart before the Zen 4's exception ([`zen4_wide`]).
fn one_apart(n: usize, esz: usize, f32_out: bool, in_bytes: usize) -> bool {
    use crate::backend::cpu::cache;
    f32_out && n * (esz + 4) >= cache::l1_data_bytes() / 3 && !past_cache(in_bytes)
}

/// Whether [`rows_apart`] runs the rows 2 apart (row `r + 3` prefetched) on an AMD Zen 4
/// (`simd::is_zen4`: family 0x19, 32 KiB L1) where the L1 rule says 1: an f32 input
/// (`esz` 4) of at least half the last-level cache (`in_bytes`; its f32 output as large:
/// together the whole cache). One thread, 1 apart there ran at about half the speed (and half
/// the two threads' rate, 3.7× slower in the lead's first probe). Measured on the 2-vCPU Zen 4
/// KVM guest (AMD EPYC family 25 model 17, 32 KiB L1, 1 MiB L2, 32 MiB L3; sx25, a
/// throwaway build with the distance forced at run time, 2026-11-28 22:03–22:15 UTC, load
/// 2.5–11.7 from other helpers' builds; `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile softmax R
/// C 30 --pool`, rounds interleaved with the base `a362c42`, fastest launch in µs), 1 apart
/// (base) → 2 apart: one thread `[1024, 4096]` f32 1759–2129 → 990–1453 (13 rounds; one base
/// run read 956), `[2048, 2048]` 1656–1828 → 943–1139, `[512, 8192]` 1862–2332 → 1047–1626;
/// two threads `[1024, 4096]` 738–1049 → 633–757 (six rounds; at 22:09 base 451–741 against
/// 490–639 over four). 2 apart without the prefetch of row `r + 3` 1208–2021, 1 apart with
/// it 966–1744: both the distance and the prefetch matter; why is not measured (no hardware
/// counters). Not taken: below half the cache (one thread, output streamed: `[1024, 2048]`
/// f32, 8 MiB, 1 apart 411–417 against 466–473 µs; `[1536, 2048]`, 12 MiB, 687–1342
/// against 694–730: no gain shown), from a bf16 input (bf16 → f32 `[1024, 4096]` one thread
/// 826–850 against 819–826: no gain shown). Unmeasured: the Zen 5 and Intel (unchanged).
/// This build against the base (22:19–22:20 UTC, load 2.8–3.9, N = 30): one thread
/// `[1024, 4096]` 1825–2020 → 951–1432 (five rounds), `[2048, 2048]` 1816–2514 → 1389–1530
/// (three); two threads `[1024, 4096]` 646–1304 → 642–1125 (five; noise, no loss shown).
fn zen4_wide(esz: usize, in_bytes: usize) -> bool {
    #[cfg(all(test, target_arch = "x86_64"))]
    if let Some((zen4, llc)) = tests::AS_ZEN4.with(|a| a.get()) {
        return zen4 && esz == 4 && 2 * in_bytes >= llc;
    }
    #[cfg(target_arch = "x86_64")]
    {
        esz == 4
            && 2 * in_bytes >= crate::backend::cpu::cache::last_level_bytes()
            && crate::backend::cpu::simd::is_zen4()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (esz, in_bytes);
        false
    }
}

/// Runs programs `pids` (rows `pids.start·br .. pids.end·br`) of a `[rows, n]` softmax as one
/// run of rows; `buf` is the worker's row scratch.
pub(crate) fn run(
    sm: &Softmax,
    buf: &mut Vec<f32>,
    pids: std::ops::Range<usize>,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    let bc = sm.rows.bc;
    let chunks = n.div_ceil(bc);
    // Exponentials of the row, a widened chunk, each chunk's running max, an output chunk.
    // (On the AVX-512 path: three exponential rows placed within a page, each chunk's max
    // and least value for three rows and running max, an output chunk.)
    let need = (n + bc + chunks + bc).max(3 * (n + 32) + 3 * 1024 + bc + 7 * chunks);
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        return unsafe { run_avx2(sm, buf, pids, args, rows, n) };
    }
    body(sm, buf, pids, args, rows, n)
}

/// [`body`] built with AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(
    sm: &Softmax,
    buf: &mut [f32],
    pids: std::ops::Range<usize>,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    body(sm, buf, pids, args, rows, n)
}

/// `es[j]·inv` into `out` from element `at`: a bf16 output multiplied and narrowed 16 lanes at
/// a time (`bf16io::narrow_scaled`, the interpreter's rounding), any other through
/// `stream::write` (rounded with `round`, streamed with `nt`, staged in `ow`).
fn store_scaled(
    out: &Buffer,
    at: usize,
    es: &[f32],
    inv: f32,
    round: bool,
    nt: bool,
    ow: &mut [f32],
) {
    if out.dtype == DType::BF16 {
        // SAFETY: the programs of a launch write disjoint rows.
        let d = unsafe { stream::out_u16(out, at, es.len()) };
        bf16io::narrow_scaled(es, inv, d);
    } else {
        stream::write(out, at, es.len(), round, nt, ow, |j| es[j] * inv);
    }
}

#[inline(always)]
fn body(
    sm: &Softmax,
    buf: &mut [f32],
    pids: std::ops::Range<usize>,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    let (x, out) = (&args[sm.rows.x], &args[sm.rows.out]);
    let (br, bc) = (sm.rows.br, sm.rows.bc);
    let round = sm.rows.round_bf16;
    let nt = if out.dtype == DType::BF16 {
        stream::wanted_bf16_softmax(out)
    } else {
        stream::wanted_at_any_thread_count(out, round)
    };
    let r0 = (pids.start * br).min(rows);
    let r1 = (pids.end * br).min(rows);
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
        && n > 0
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        // SAFETY: the active level is at most the detected one: AVX-512F is present, and
        // AVX-512BW (detected); `buf` holds `3(n + 32) + 3·1024 + 7·chunks` values (`run`).
        unsafe { rows_avx512(buf, x, out, (r0, r1), (n, bc), round, nt) };
        if nt {
            stream::fence();
        }
        return;
    }
    let (e, rest) = buf.split_at_mut(n);
    let (xw, rest) = rest.split_at_mut(bc);
    let (mk, ow) = rest.split_at_mut(n.div_ceil(bc));
    for row in r0..r1 {
        let at = row * n;
        // The chunk `c0..c1` of the row as f32 (bf16 widened into `xw`, exactly).
        let chunk = |xw: &mut [f32], c0: usize, c1: usize| -> *const f32 {
            if x.dtype == DType::F32 {
                chunk::f32s(x, at + c0, c1 - c0).as_ptr()
            } else {
                chunk::load(x, at + c0, &mut xw[..c1 - c0]);
                xw.as_ptr()
            }
        };
        let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            // SAFETY: `chunk` returned `c1 - c0` values of the input or of `xw`, which
            // nothing writes until the next call.
            let xs = unsafe { std::slice::from_raw_parts(chunk(xw, c0, c1), c1 - c0) };
            let mn = bin_f(BinaryOp::Max, m, vmath::max(xs));
            let s1 = s * chunk_scale(k, m, mn);
            let es = &mut e[c0..c1];
            for (o, v) in es.iter_mut().zip(xs) {
                *o = v - mn;
            }
            vmath::exp(es);
            s = s1 + vmath::sum(es);
            m = mn;
            mk[k] = mn;
        }
        let inv = 1.0f32 / s;
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            let es = &mut e[c0..c1];
            if mk[k].to_bits() != m.to_bits() {
                // The max grew after this chunk: its exponentials are taken again.
                // SAFETY: as above.
                let xs = unsafe { std::slice::from_raw_parts(chunk(xw, c0, c1), c1 - c0) };
                for (o, v) in es.iter_mut().zip(xs) {
                    *o = v - m;
                }
                vmath::exp(es);
            }
            store_scaled(out, at + c0, es, inv, round, nt, ow);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if nt {
        stream::fence();
    }
}

/// The online pass's factor on the running sum at chunk `k`: `exp(m − mn)` (`m` the max
/// before the chunk, `mn` after it); at the first chunk `m` is `-inf`, so `m − mn` is `-inf`
/// (whose `exp` is `+0`) unless `mn` is `-inf` too (then NaN, whose `exp` is taken).
fn chunk_scale(k: usize, m: f32, mn: f32) -> f32 {
    let mut scale = [m - mn];
    if k == 0 && !scale[0].is_nan() {
        scale[0] = 0.0;
    } else {
        vmath::exp(&mut scale);
    }
    scale[0]
}

/// For the `n` f32 values from `p`: `vmath::max` of them, bit for bit but for NaN payloads
/// (32 lanes in two registers, the same steps and final tree; a lane's steps are one
/// `vmaxps` each, with the lanes that met a NaN recorded in a mask and set to NaN after the
/// loop), and the least value (unspecified when there is a NaN).
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX2 and FMA; `n` values from `p` are readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn max_min_avx512(p: *const f32, n: usize) -> (f32, f32) {
    let full = n / 32 * 32;
    let mut m = MaxMin::new();
    for j in (0..full).step_by(32) {
        // SAFETY: `j + 32 <= n`.
        unsafe { m.step(p, j) };
    }
    // SAFETY: the caller's.
    unsafe { max_finish(p, n, m) }
}

/// The running state of [`max_min_avx512`]'s steps over a row, 32 lanes in two registers:
/// the maxima, the lanes that met a NaN (kept apart so that the max chain is one `vmaxps`
/// per step) and the minima.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct MaxMin {
    max: [core::arch::x86_64::__m512; 2],
    nan: [core::arch::x86_64::__mmask16; 2],
    min: [core::arch::x86_64::__m512; 2],
}

#[cfg(target_arch = "x86_64")]
impl MaxMin {
    /// Nothing seen: maxima `-inf`, minima `+inf`, no NaN.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn new() -> MaxMin {
        use core::arch::x86_64::*;
        MaxMin {
            max: [_mm512_set1_ps(f32::NEG_INFINITY); 2],
            nan: [0; 2],
            min: [_mm512_set1_ps(f32::INFINITY); 2],
        }
    }

    /// Takes the 32 f32 values from column `j` of the row at `p`. `vmaxps(v, a)` is
    /// `v > a ? v : a` (`a` when either is NaN): `vmath::max`'s step but for a NaN `v`, which
    /// the masks record.
    ///
    /// # Safety
    /// AVX-512F present; values `j .. j + 32` readable at `p`.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    #[inline]
    unsafe fn step(&mut self, p: *const f32, j: usize) {
        use core::arch::x86_64::*;
        // SAFETY: the caller's.
        let (v0, v1) = unsafe { (_mm512_loadu_ps(p.add(j)), _mm512_loadu_ps(p.add(j + 16))) };
        self.max = [
            _mm512_max_ps(v0, self.max[0]),
            _mm512_max_ps(v1, self.max[1]),
        ];
        self.nan[0] |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v0, v0);
        self.nan[1] |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v1, v1);
        self.min = [
            _mm512_min_ps(self.min[0], v0),
            _mm512_min_ps(self.min[1], v1),
        ];
    }
}

/// The end of [`max_min_avx512`] after its loop over the whole 32-value steps: the last
/// `n % 32` values, then the tree over the 32 lanes.
///
/// # Safety
/// As [`max_min_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
#[inline]
unsafe fn max_finish(p: *const f32, n: usize, m: MaxMin) -> (f32, f32) {
    use core::arch::x86_64::*;
    let ([mut a0, mut a1], [n0, n1], [l0, l1]) = (m.max, m.nan, m.min);
    let full = n / 32 * 32;
    // A lane that met a NaN holds NaN from then on under `vmath::max`'s step (payloads aside).
    a0 = _mm512_mask_mov_ps(a0, n0, _mm512_set1_ps(f32::NAN));
    a1 = _mm512_mask_mov_ps(a1, n1, _mm512_set1_ps(f32::NAN));
    // `vmath::max`'s step lane by lane: `b` where `b > a` or `b` is NaN, else `a`.
    let vstep = |a: __m512, b: __m512| -> __m512 {
        let take =
            _mm512_cmp_ps_mask::<_CMP_GT_OQ>(b, a) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(b, b);
        _mm512_mask_mov_ps(a, take, b)
    };
    let (mut l0, mut l1) = (l0, l1);
    if n > full {
        // The last values in lanes `0 .. n - full`, `-inf` past them (a step to `-inf` keeps
        // `a`), by masked loads (the values once went through a stack array, whose vector
        // loads waited on its scalar stores); the least value takes only the row's lanes.
        let k = (1u64 << (n - full)) - 1;
        let (k0, k1) = (k as __mmask16, (k >> 16) as __mmask16);
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        // SAFETY: the masked loads read only values `full .. n` (the second one's address by
        // `wrapping_add`: with an empty mask it may lie past the allocation, and is not read).
        let (t0, t1) = unsafe {
            (
                _mm512_mask_loadu_ps(ninf, k0, p.add(full)),
                _mm512_mask_loadu_ps(ninf, k1, p.wrapping_add(full + 16)),
            )
        };
        a0 = vstep(a0, t0);
        a1 = vstep(a1, t1);
        l0 = _mm512_mask_min_ps(l0, k0, l0, t0);
        l1 = _mm512_mask_min_ps(l1, k1, l1, t1);
    }
    let lo = _mm512_reduce_min_ps(_mm512_min_ps(l0, l1));
    // The tree: lanes `i` and `i + w` for `w` = 16, 8, 4, 2, 1 (lane `i` is lane `i` of `a0`
    // then of `r`; the lanes past `w` hold values no later step reads).
    let r = vstep(a0, a1);
    let r = vstep(r, _mm512_shuffle_f32x4::<0b11_10_11_10>(r, r));
    let r = vstep(r, _mm512_shuffle_f32x4::<0b00_00_00_01>(r, r));
    let r = vstep(r, _mm512_permute_ps::<0b00_00_11_10>(r));
    let r = vstep(r, _mm512_permute_ps::<0b00_00_00_01>(r));
    (_mm512_cvtss_f32(r), lo)
}

/// For the `n` bf16 values from `p`: their max as `vmath::max` gives it (NaN when there is
/// one; a zero max may have the other sign, which no use of it can tell: `x − m` and the
/// exponentials of differences of maxima take the same bits) and the least value
/// (unspecified when there is a NaN), by [`MaxMin16`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW; `n` values from `p` are readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn max_min_bf16(p: *const u8, n: usize) -> (f32, f32) {
    let mut m = MaxMin16::new();
    for j in (0..n / 32 * 32).step_by(32) {
        // SAFETY: `j + 32 <= n`.
        unsafe { m.step(p, j) };
    }
    // SAFETY: the caller's.
    unsafe { m.finish(p, n) }
}

/// The running extremes of the bf16 bit patterns of a row, 32 lanes of 16 bits in one
/// register each: the greatest as `i16` (`smax`), the greatest and the least as `u16` (`umax`,
/// `umin`), three ops a step. As `i16` the patterns with the sign clear (`+0` up to the
/// positive NaNs) lie above those with it set and order as their values; as `u16` those with
/// the sign set (`-0` up to the negative NaNs) lie above the others and order as their
/// magnitudes. So the max is `smax`'s value when a pattern has the sign clear (`smax ≥ 0`),
/// else `umin`'s; the least value is `umax`'s when a pattern has the sign set
/// (`umax ≥ 0x8000`), else `umin`'s; a NaN shows as `smax` above `0x7f80` (`+inf`) or `umax`
/// above `0xff80` (`-inf`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct MaxMin16 {
    smax: core::arch::x86_64::__m512i,
    umax: core::arch::x86_64::__m512i,
    umin: core::arch::x86_64::__m512i,
}

#[cfg(target_arch = "x86_64")]
impl MaxMin16 {
    /// Nothing seen.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn new() -> MaxMin16 {
        use core::arch::x86_64::*;
        MaxMin16 {
            smax: _mm512_set1_epi16(i16::MIN),
            umax: _mm512_setzero_si512(),
            umin: _mm512_set1_epi16(-1),
        }
    }

    /// Takes the 32 bit patterns of `v`.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn take(&mut self, v: core::arch::x86_64::__m512i) {
        use core::arch::x86_64::*;
        self.smax = _mm512_max_epi16(self.smax, v);
        self.umax = _mm512_max_epu16(self.umax, v);
        self.umin = _mm512_min_epu16(self.umin, v);
    }

    /// Takes the 32 values from column `j` of the bf16 row at `p`.
    ///
    /// # Safety
    /// AVX-512F and AVX-512BW present; values `j .. j + 32` readable at `p`.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn step(&mut self, p: *const u8, j: usize) {
        use core::arch::x86_64::*;
        // SAFETY: the caller's.
        self.take(unsafe { _mm512_loadu_si512((p as *const u16).add(j) as *const _) });
    }

    /// The max and least value of the `n` values at `p` after the steps over their whole
    /// 32-value steps: the last `n % 32` values (lanes past them left out), the reductions
    /// over the lanes, then the values as the type's doc says (NaN for a max when there is
    /// a NaN).
    ///
    /// # Safety
    /// As [`max_min_bf16`].
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn finish(mut self, p: *const u8, n: usize) -> (f32, f32) {
        use core::arch::x86_64::*;
        let full = n / 32 * 32;
        if n > full {
            let k = ((1u64 << (n - full)) - 1) as __mmask32;
            // SAFETY: the masked load reads only the row's last `n - full` values.
            let v = unsafe { _mm512_maskz_loadu_epi16(k, (p as *const i16).add(full)) };
            let smax = _mm512_mask_mov_epi16(_mm512_set1_epi16(i16::MIN), k, v);
            self.smax = _mm512_max_epi16(self.smax, smax);
            self.umax = _mm512_max_epu16(self.umax, v);
            let umin = _mm512_mask_mov_epi16(_mm512_set1_epi16(-1), k, v);
            self.umin = _mm512_min_epu16(self.umin, umin);
        }
        // Each extreme as the least `u16` of a vector (`vphminposuw` after two folds):
        // `umax` as the least of the complements, `smax` as the least of `x ^ 0x7fff` (the
        // `i16` order reversed into the `u16` one).
        let least = |v: __m512i| -> i32 {
            let a = _mm256_min_epu16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
            let b = _mm_min_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
            _mm_cvtsi128_si32(_mm_minpos_epu16(b)) & 0xffff
        };
        let smax = (least(_mm512_xor_si512(self.smax, _mm512_set1_epi16(0x7fff))) ^ 0x7fff) as u16
            as i16 as i32;
        let umax = least(_mm512_xor_si512(self.umax, _mm512_set1_epi16(-1))) ^ 0xffff;
        let umin = least(self.umin);
        let value = |bits: i32| f32::from_bits((bits as u32 & 0xffff) << 16);
        let nan = smax > 0x7f80 || umax > 0xff80;
        let max = if smax >= 0 { value(smax) } else { value(umin) };
        let lo = if umax >= 0x8000 {
            value(umax)
        } else {
            value(umin)
        };
        (if nan { f32::NAN } else { max }, lo)
    }
}

/// The rows `r0..r1` of a `[_, n]` softmax in chunks of `bc` columns at the AVX-512 level,
/// the same bits as the passes in [`body`], with the passes of neighbouring rows in one loop
/// per chunk ([`fused_avx512`]): while chunk `k` of row `r` has its exponentials and sum
/// computed, chunk `k` of row `r + 2` has its max (and least value) taken (two rows ahead, so
/// that a row's first exponentials do not wait on the max taken just before), and, with an
/// f32 output, chunk `k` of row `r − 2` is scaled and stored. Row `r`'s chunk maxima are
/// known before its first chunk, so each chunk's running max `m'` and the row's final max `m`
/// are too: a chunk whose `m'` differs from `m` takes `exp(x − m')` for the sum and
/// `exp(x − m)` for the output in the same loop.
///
/// bf16 → bf16 on the Intel Xeon (family 6 model 207; sm20): the loop had run ≈ 1.5× the
/// bf16 → f32 one's time (lead, 05:36 UTC: 1773 against 1190 µs at `[4096, 1024]`, one
/// thread), which writes twice the bytes. Its `MaxMin16` state lived on the stack (the
/// compiler kept it there across the out-of-line `bf16io::narrow_scaled` calls of the
/// row's head and tail: a load, op and store per step, bf16 → f32 had it in registers); the
/// state is now made after the head and finished before the tail. Then, per 32 lanes, the
/// key transform of the max/min went (three ops instead of five, `MaxMin16`), rows that
/// `sub_free` shows subnormal-free narrow without the two `vfpclassps`, `korw`, `kmovd` and
/// branch, the step's flags are read one by one (an 8-byte load of `inv` and the flags had
/// waited on the caller's separate stores once per call: ≈ 2.5 % of the loop's samples in
/// L2), and the output streams off AMD from the L2's size (`stream::wanted_bf16_softmax`).
/// `vcvtne2ps2bf16` itself costs about as much as four simple vector ops here (a standalone
/// loop: two of them beside eight independent FMAs took 7.8 cycles a step against 4.0, two
/// `vpaddd` 4.9), so the bf16 output's loop still does more vector work than the f32
/// output's; at `[256, 1024]` (in L2) it runs 69–72 µs against 65–67. Measured (sm20,
/// 2026-11-28 06:40–06:48 UTC, load 2.5–3.9 from other helpers,
/// `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile K R C N --pool`, base = main `c5e45d2`,
/// rounds interleaved, fastest launch in µs, min / median of 5–10 runs; two-thread medians
/// include runs whose second thread waited for a CPU), softmax bf16 before → after, and
/// bf16 → f32 after: one thread `[4096, 1024]` 1309 / 1342 → 1099 / 1134 (bf16 → f32 1087 /
/// 1108), `[1024, 4096]` 1488 / 1565 → 1053 / 1138 (1289 / 1471), `[8192, 4096]` 10784 /
/// 15603 → 9696 / 10601 (11462 / 11799), `[37, 300]` 5.76 / 5.78 → 5.81 / 5.83; two threads
/// `[4096, 1024]` 691 / 881 → 574 / 724 (596 / 740), `[1024, 4096]` 791 / 867 → 537 / 681
/// (731 / 783), `[8192, 4096]` 5626 / 6610 → 4496 / 6392 (6450 / 7224).
///
/// sx21: the loop is bound by its vector ops, not by memory: in L2 (`[64, 4096]`) a
/// 32-column step takes ≈ 20 cycles (≈ 2.5 GHz by a dependent `imul` chain), about the sum
/// of its ops' costs as a standalone loop measures them beside eight FMAs (an FMA ≈ 0.5
/// cycle, a simple op 0.4–0.5, `vpermps` ≈ 0.4, `vpermw` ≈ 0.8, `vcvtne2ps2bf16` ≈ 1.8, the
/// column-order widen 1.8–2.0): ≈ 10.6 for the two `exp16_in_range`, 1.8 + 1.8 for the
/// narrowing and the widen, ≈ 4.4 for subtractions, sums, scaling and `MaxMin16`; and each
/// row costs ≈ 80 cycles more (`[1024, 256]` against `[64, 4096]`: ≈ 11 % at 1024
/// columns). So the L3-resident shapes run at ≈ 0.63 of the same-run copy on one thread
/// and no reordering of these ops can reach 0.8 with `vmath::exp`'s bits. Into a bf16
/// output whose chunks are whole 64-byte-aligned 32-column steps (`perm`) the steps widen
/// by two word unpacks ([`widen_perm`]) and keep the exponentials in the unpacked order,
/// which one `vpermq` of the output's words and, per chunk, two `vpermt2ps` of the sums
/// undo. Measured (2026-11-28 09:13–09:35 UTC, load 3–19 from other helpers' builds and
/// runs; `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile softmax_bf16 R C N --pool`, base =
/// main `a5b9485`, rounds interleaved, fastest launch in µs, min / median of 8–10 runs),
/// base → this: one thread `[256, 1024]` (in L2) 70.2 / 92.7 → 67.9 / 94.4 (an earlier
/// round of three: 70.8 → 68.3), `[64, 4096]` 64.7 / 71.2 → 61.4 / 69.9 (64.5 → 63.8),
/// `[4096, 1024]` 1112 / 1198 → 1093 / 1177, `[1024, 4096]` 1050 / 1453 → 1031 / 1250.
/// Two threads (09:36–09:38, load 5–9) `[4096, 1024]` 708 / 792 → 691 / 741, `[1024, 4096]`
/// 693 / 792 → 540 / 754, but other rounds gave the base the lower minimum (572 against
/// 588, 752 against 776): within the noise. `[8192, 4096]` one thread: minima 8831–9417
/// against 9107–9846 over three rounds of 4–6 runs, 9281 / 11775 against 9256 / 9828 over
/// 12 (noise, no loss shown). `[37, 300]` (300 columns: not whole steps, the column-order
/// loop) 5.65–6.08 either way; bf16 → f32 takes the column-order loop too.
/// ln20's even/odd widen (`x << 16`, `x & 0xffff0000`) would need a `vpermw` of the
/// output's words, which costs two simple ops here: no gain in the standalone loop.
///
/// sx22: rows whose length is not a multiple of 32 had cost up to 1.3–1.5× per element what
/// their aligned neighbours do (lead, `[1024, 300]` against `[1066, 288]` and `[960, 320]`).
/// `perf` (cpu-clock) of `[1024, 300]` bf16 put ≈ 2.2 steps' time in the row's 12-column tail:
/// its exponentials ran after the loop, a chain of ≈ 75 cycles (load, widen, `exp`, the
/// masked add, the tree) between the loop and the sum; the head and tail stores went through
/// the out-of-line `narrow_scaled` (bf16) or a scalar loop (f32); `max_finish` staged an f32
/// tail through a stack array (scalar stores, then vector loads of them); `perm` was not
/// taken; and every call read `m`, `mf`, `inv` and the flags as one 16-byte load of the
/// caller's separate stores (≈ 7 % of `steps_avx512_cvt`'s samples at every shape). Now
/// [`fused_avx512`] takes the tail's exponentials before its loop (in the in-range form when
/// the row is, the lanes past it set to `m`; the second 16 lanes only for a tail over 16)
/// and adds them to their lanes after it, stores a head and tail by masked vectors, and reads
/// the fields one by one; `max_finish` masks its tail loads; `perm` also takes a ragged last
/// chunk (its tail in column order, [`store_perm`] likewise) and unaligned output rows when
/// the stores are not streamed. Measured (2026-11-28 12:56–12:59 UTC, load 2.3–2.9 from
/// other helpers; `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile K R C N --pool`, base = main
/// `bc6447d`, three interleaved rounds, fastest launch, min), ns per element, one thread,
/// base → this, at C = 288 / 300 / 320 / 1000 / 1023 / 1024 (`R = 307200 / C`, N = 300):
/// softmax f32 0.414 / 0.562 / 0.397 / 0.386 / 0.399 / 0.338 → 0.372 / 0.364 / 0.351 /
/// 0.369 / 0.371 / 0.364; bf16 0.366 / 0.455 / 0.481 / 0.395 / 0.305 / 0.260 → 0.333 /
/// 0.342 / 0.325 / 0.365 / 0.259 / 0.342; bf16 → f32 0.401 / 0.441 / 0.395 / 0.283 / 0.279
/// / 0.257 → 0.331 / 0.341 / 0.321 / 0.259 / 0.252 / 0.241 (single runs swing ±15 %: seven
/// rounds at 13:04, load 7–8, gave `[300, 1024]` bf16 77.0 → 77.3 µs, bf16 → f32 80.9 →
/// 75.2, but f32 97.7 → 106.0, medians 107.4 → 110.6: f32 rows of 1024 may have lost
/// 3–8 % in L2; `perf` put the same samples in the kernel either way). Two threads: f32 0.214 /
/// 0.263 / 0.201 / 0.172 / 0.191 / 0.177 → 0.173 / 0.181 / 0.172 / 0.160 / 0.164 / 0.157;
/// bf16 0.189 / 0.238 / 0.186 / 0.171 / 0.181 / 0.154 → 0.175 / 0.187 / 0.172 / 0.152 /
/// 0.160 / 0.149; bf16 → f32 0.219 / 0.236 / 0.208 / 0.162 / 0.174 / 0.167 → 0.173 / 0.177
/// / 0.169 / 0.148 / 0.161 / 0.142. `[37, 300]` (N = 3000) in µs: f32 6.22 → 4.33, bf16
/// 5.90 → 4.78, bf16 → f32 5.30 → 4.10. Large shapes (13:00–13:04 UTC, load 3.9–8.4, five
/// rounds, N = 60, `[8192, 4096]` N = 15; µs, min): f32 one thread `[4096, 1024]` 1153 →
/// 1078, `[1024, 4096]` 1492 → 1491, `[8192, 4096]` 16946 → 16829; two threads 644 → 585,
/// 790 → 769; bf16 one thread 1096 → 1095, 1068 → 1019, 9491 → 9165; two threads 588 →
/// 546, 1078 → 1062; bf16 → f32 one thread 1114 → 1011, 1256 → 1233, 11203 → 11191; two
/// threads 1100 → 997, 1323 → 1306 (two-thread figures at that load are the second
/// worker waiting for a CPU as much as the kernel).
///
/// sx23: at 4096 columns the loop ran at 0.75–0.89 of the same-run copy against 1.0–1.3 at
/// 1024 columns (lead, 15:20 UTC), though its in-L2 rate is not worse there (sx22): each
/// row's second reads (its input, its exponentials) came from the L2 (`rows_apart`). Long
/// rows into an f32 output from an input that fits the last-level cache now run 1 row
/// apart, without the prefetch. Measured (2026-11-28 15:43–15:59 UTC, load 3.2–5.2 from
/// other helpers; `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile K R C 150 --pool`, base = main
/// `5ad586c`, rounds interleaved, fastest launch in µs and its ratio to the same run's copy;
/// two builds of the same path at these shapes, three rounds each), base → this: one thread
/// `[1024, 4096]` f32 1464–1931 (0.75–0.92) → 1318–1685 (0.90–0.98), bf16 → f32 1208–1617
/// (0.65–0.80) → 1010–1562 (0.73–0.98; five of six 0.91–0.98), `[2048, 2048]` f32 1308–1335
/// (1.01–1.03) → 1037–1198 (1.15–1.19); two threads `[1024, 4096]` f32 733–1463 (0.74–0.90)
/// → 683–1382 (0.80–0.94), bf16 → f32 615–1249 (0.65–0.85) → 515–1070 (0.66–0.99; five of
/// six 0.90–0.99), `[2048, 2048]` f32 660–897 (0.74–1.00) → 656–773 (0.90–1.11). Not
/// changed (the same path; noise): `[4096, 1024]` one thread f32 1076–1123 → 1042–1171,
/// bf16 → f32 934–1131 → 970–1147, two threads f32 560–1456 → 545–1038, bf16 → f32
/// 502–1001 → 496–930; `[8192, 4096]` f32 one thread 15962–18694 → 15931–17354; bf16 →
/// bf16 `[1024, 4096]` 993–1248 → 995–1025; `[37, 300]` the same within the noise. In a
/// throwaway build with run-time switches (15:28–15:41, load 3–10), `[1024, 4096]` f32 one
/// thread, 2 apart: no prefetch 1349–1613 against `T0` 1455–1842, `T1`/`T2` 1417–1715, `NTA`
/// 3994–4452, `T0` of the row and of the exponentials 512 bytes ahead 1477–1593, plain
/// stores 1709–1893; 1 apart, no prefetch 1436–1472.
///
/// dr24: an f32 input larger than the last-level cache (`[8192, 4096]`, 128 MiB in, 128 MiB
/// streamed out) ran at 0.57–0.76 of the same-run copy on one thread. Row `r + 3`'s lines
/// are now asked for (`prefetcht0`, as before) in four interleaved quarters
/// (`prefetch::quarter_at`, which holds a standalone loop's figures) instead of in column
/// order, and off AMD the steps no longer take the `REDO` loop there (`twice`). Measured
/// (2026-11-28 19:22–19:24 UTC, load 4.0–5.2 from other helpers; `RAYON_NUM_THREADS=T chrt
/// -f 50 cpu_profile softmax 8192 4096 10 --pool`, base = main `47673e3`, six interleaved
/// rounds, fastest launch in µs and its ratio to the same run's copy), base → this: one
/// thread 16751–18642 (0.69–0.76) → 13692–17110 (0.79–0.90; five of six 0.83–0.90); two
/// threads 8418–9943 (1.13–1.28; a sixth round 17105, the second core busy) → 7192–9263
/// (1.24–1.47; two rounds 15051 / 16118). An earlier build (19:16–19:17, load 4.1–4.8):
/// one thread 15936–17969 (0.70–0.75) → 13047–16030 (0.74–0.94, five of six ≥ 0.81). In a
/// throwaway build with run-time switches (18:51–19:10, load 3–5.4; one thread, ratios):
/// column order as before 0.60–0.79; quarters 0.73–0.88; quarters without `REDO` 0.75–0.93;
/// quarters by `prefetcht2` 0.70–0.86; without `REDO` alone 0.61–0.78; in column order
/// `prefetcht1` or `t2`, rows `r + 4` or `r + 5`, a second row (`r + 5` by `t2`, `r + 6` by
/// `t1`), one row apart with row `r + 2` asked for (`t2`, or `t0` and row `r + 4` by `t1`):
/// 0.50–0.78, no gain shown; `prefetchnta` 0.33–0.34; plain stores 0.41–0.47; the scaled row stored
/// into its exponentials' buffer and copied out by `rep movsb` (the yardstick's copy here)
/// 0.39–0.48. The same quarters in the f32 norm rows' prefetches (`normpipe`, layernorm
/// `[8192, 4096]` one thread, clean build, six rounds) measured 0.71–0.85 → 0.72–0.86: not
/// kept.
///

/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX2 and FMA; `buf` holds at least
/// `3(n + 32) + 3·1024 + 7·⌈n/bc⌉` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn rows_avx512(
    buf: &mut [f32],
    x: &Buffer,
    out: &Buffer,
    (r0, r1): (usize, usize),
    (n, bc): (usize, usize),
    round: bool,
    nt: bool,
) {
    if r0 >= r1 {
        return;
    }
    let bf = x.dtype == DType::BF16;
    let esz = if bf { 2 } else { 4 };
    let chunks = n.div_ceil(bc);
    assert!(r1 * n * esz <= x.len, "fused load out of bounds");
    // An f32 or bf16 output takes each row's scaled exponentials in the next row's loop
    // (streaming stores with `nt`, plain ones otherwise; a bf16 one narrowed 32 lanes at a
    // time, `bf16io::store32`); a rounded f32 one after each row (`stream::write`).
    let o16 = out.dtype == DType::BF16;
    let osz = if o16 { 2 } else { 4 };
    let fuse = (out.dtype == DType::F32 && !round) || o16;
    // A bf16 output narrowed by `vcvtne2ps2bf16` where the CPU has it.
    let cvt = o16 && bf16io::has_cvt();
    // bf16 in and out by `vcvtne2ps2bf16` with every chunk starting at a multiple of 32
    // columns: the steps widen by word unpacks and keep the exponentials of whole 32-column
    // steps in their order ([`widen_perm`]), a chunk's last `n % 32` in column order; the
    // stores start at each chunk's first column (no aligned head), so a streamed output
    // (64-byte aligned stores) needs every output row 64-byte aligned.
    let perm = cvt
        && bf
        && (chunks == 1 || bc.is_multiple_of(32))
        && (!nt || ((out.ptr as usize).is_multiple_of(64) && n.is_multiple_of(32)));
    assert!(
        !fuse || r1 * n * osz <= out.len,
        "fused store out of bounds"
    );
    // The rows of exponentials start at `PLACE`'s offsets within a 4 KiB page from the
    // input's first row (f32 or bf16 output) or the f32 output's (bf16 input).
    let base = if bf && fuse && !o16 {
        (out.ptr as usize).wrapping_add(r0 * n * 4)
    } else {
        (x.ptr as usize).wrapping_add(r0 * n * esz)
    };
    let mut rest = buf;
    let mut rows: [&mut [f32]; 3] = Default::default();
    for (b, off) in rows.iter_mut().zip(PLACE) {
        let want = (base.wrapping_add(off) % 4096) / 4 * 4;
        let skip = (want + 4096 - rest.as_ptr() as usize % 4096) % 4096 / 4;
        let (_, r) = std::mem::take(&mut rest).split_at_mut(skip);
        // Each row buffer has 32 values of slack (whole-vector stores of a row's tail).
        let (row, r) = r.split_at_mut(n + 32);
        (*b, rest) = (row, r);
    }
    let [ea, eb, ec] = rows;
    // Per chunk of rows `r`, `r + 1` and `r + 2`: the max and least value; and the running
    // maxima of row `r`.
    let (s0, rest) = rest.split_at_mut(2 * chunks);
    let (s1, rest) = rest.split_at_mut(2 * chunks);
    let (s2, rest) = rest.split_at_mut(2 * chunks);
    let (mk, ow) = rest.split_at_mut(chunks);
    // The exponentials of rows `r`, `r − 1` and `r − 2` (stored during step `r`: its `1/s`
    // is known a whole step before, so the stores do not wait on the row just finished).
    let mut ex = [ea.as_mut_ptr(), eb.as_mut_ptr(), ec.as_mut_ptr()];
    let mut st = [s0, s1, s2];
    let rowp = |r: usize| x.ptr.wrapping_add(r * n * esz) as *const u8;
    // Rows apart (`rows_apart`): the max of row `r + dist` and the stores of row `r − dist`
    // beside row `r`'s exponentials. Rows `r0 .. r0 + dist` before the loop; each step takes
    // row `r + dist`'s.
    let dist = rows_apart(n, esz, fuse && !o16, x.len);
    #[cfg(test)]
    tests::APART.with(|a| {
        let mut v = a.get();
        v[dist - 1] += 1;
        // 2 apart by the Zen 4's rule (`zen4_wide`) where the L1 rule says 1.
        v[2] += usize::from(dist == 2 && one_apart(n, esz, fuse && !o16, x.len));
        a.set(v)
    });
    // An f32 input larger than the last-level cache: row `r + 3` asked for in four
    // interleaved quarters (`prefetch::quarter_at`).
    let past = past_cache(x.len);
    let quarters = past && !bf;
    for (i, row) in (r0..r1).take(dist).enumerate() {
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            let p = rowp(row).wrapping_add(c0 * esz);
            // SAFETY: the chunk is in the input (asserted).
            let (cm, lo) = unsafe {
                if bf {
                    max_min_bf16(p, c1 - c0)
                } else {
                    max_min_avx512(p as *const f32, c1 - c0)
                }
            };
            (st[i][2 * k], st[i][2 * k + 1]) = (cm, lo);
        }
    }
    // Rows `r − 2` and `r − 1` (exponentials in `ex[2]`, `ex[1]`) not yet stored: offset
    // and `1/s`.
    let mut pending: [Option<(usize, f32, bool)>; 2] = [None, None];

    // Opaque to the compiler: with the constant it split the loop at the lag, which measured
    // 5-10 % slower on `[4096, 1024]` f32.
    let lag = std::hint::black_box(LAG);
    // An f32 row into an f32 output, the input larger than the last-level cache, on AMD:
    // every chunk takes the loop that computes the output's exponentials apart from the
    // sum's (`REDO`, with `mf` = `m` the same bits), which measured faster there on the Zen 5
    // (see ARCHITECTURE.md, "The CPU's row-wise tile"); on the Intel Xeon of sessions 17–24,
    // with the quartered prefetch, the loop without it measured faster (`prefetch::quarter_at`).
    let twice = !bf && !o16 && past && crate::backend::cpu::simd::is_amd();
    for row in r0..r1 {
        let at = row * n;
        // The row (bf16 bit patterns, widened as the exponentials are taken, or f32).
        let xs = if bf {
            rowp(row)
        } else {
            chunk::f32s(x, at, n).as_ptr() as *const u8
        };
        // The online pass's running max after each chunk, and the row's max `m`.
        let mut m = f32::NEG_INFINITY;
        for (k, mk) in mk.iter_mut().enumerate() {
            m = bin_f(BinaryOp::Max, m, st[0][2 * k]);
            *mk = m;
        }
        // The row `dist` ahead, whose max this step takes; and (`dist` 2) the row after that,
        // asked for while this step reads that one (when in the input).
        let next = row + dist < r1;
        // Row `r + 3` asked for into the L1 with `dist` 2; none with 1 (see `rows_apart`).
        let pf = dist == 2 && (row + 4) * n * esz <= x.len;
        let (d, inv_prev, nosub) = match pending[0] {
            Some((pat, inv, ns)) => (out.ptr.wrapping_add(pat * osz), inv, ns),
            _ => (std::ptr::null_mut(), 0.0, false),
        };
        let (mut mp, mut s) = (f32::NEG_INFINITY, 0.0f32);
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            let (mn, lo) = (mk[k], st[0][2 * k + 1]);
            let s1 = s * chunk_scale(k, mp, mn);
            let redo = twice || mn.to_bits() != m.to_bits();
            // Every `x − mn` (and, to redo, `x − m`) in `[-86, 0]` (finite, no NaN): no lane
            // needs a range check.
            let tame =
                mn.is_finite() && m.is_finite() && lo.is_finite() && lo - m >= vmath::EXP16_FAST_LO;
            let a = Step {
                xs: xs.wrapping_add(c0 * esz),
                n: c1 - c0,
                m: mn,
                mf: m,
                // SAFETY (these offsets): `c0 < n`; each buffer holds `n` values.
                es: unsafe { ex[0].add(c0) },
                next: if next {
                    rowp(row + dist).wrapping_add(c0 * esz)
                } else {
                    std::ptr::null()
                },
                d: if d.is_null() {
                    d
                } else {
                    d.wrapping_add(c0 * osz)
                },
                ep: unsafe { ex[dist].add(c0) as *const f32 },
                inv: inv_prev,
                nosub,
                lag,
                nt,
                pf: if next && pf {
                    rowp(row + 3).wrapping_add(c0 * esz)
                } else {
                    std::ptr::null()
                },
                pfq: if quarters && next && pf {
                    #[cfg(test)]
                    tests::QUARTERED.with(|q| q.set(q.get() + 1));
                    prefetch::quarter_bytes(c1 - c0)
                } else {
                    0
                },
            };
            // SAFETY: `xs` holds the chunk's values (in the input, asserted, or f32s');
            // `ex[0]` and `ex[dist]` hold `n` values each from `c0` on and are distinct;
            // `next` is row `r + dist`'s chunk in the input (asserted) or null; `d` is the
            // chunk of the row `ex[dist]` belongs to in the output (asserted) or null.
            let (sum, nm) = unsafe {
                if cvt {
                    steps_avx512_cvt(tame, bf, redo, perm, a)
                } else {
                    steps_avx512(tame, bf, redo, o16, a)
                }
            };
            s = s1 + sum;
            mp = mn;
            (st[dist][2 * k], st[dist][2 * k + 1]) = nm;
        }
        let inv = 1.0f32 / s;
        if fuse {
            // Whether the row's stores may narrow without the subnormal check.
            let lo = (0..chunks).fold(f32::INFINITY, |a, k| a.min(st[0][2 * k + 1]));
            let normal = cvt && sub_free(m, lo, inv);
            let [a, b, c] = ex;
            if dist == 2 {
                pending = [pending[1], Some((at, inv, normal))];
                ex = [c, a, b];
            } else {
                // Row `r − 1` was stored in this step: its buffer takes row `r + 1`'s.
                pending = [Some((at, inv, normal)), None];
                ex = [b, a, c];
            }
        } else {
            // SAFETY: `ex[0]` holds this row's `n` exponentials.
            let es = unsafe { std::slice::from_raw_parts(ex[0], n) };
            store_scaled(out, at, es, inv, round, false, ow);
        }
        let [a, b, c] = st;
        st = if dist == 2 { [b, c, a] } else { [b, a, c] };
    }
    for (p, e) in pending.into_iter().zip([ex[dist], ex[dist - 1]]) {
        let Some((at, inv, nosub)) = p else { continue };
        // SAFETY: `e` holds that row's `n` exponentials.
        let es = unsafe { std::slice::from_raw_parts(e, n) };
        if perm {
            // SAFETY: the programs of a launch write disjoint rows; `perm` implies `cvt`
            // (the features of `bf16io::has_cvt`) and chunks that start at multiples of 32.
            unsafe { store_perm(es, inv, stream::out_u16(out, at, n), nosub) };
        } else if o16 {
            // SAFETY: the programs of a launch write disjoint rows.
            bf16io::narrow_scaled(es, inv, unsafe { stream::out_u16(out, at, n) });
        } else if nt {
            // SAFETY: AVX-512F is present; the caller fences the streaming stores.
            unsafe { stream::scale_avx512(out, at, es, inv) };
        } else {
            stream::write(out, at, n, false, false, ow, |j| es[j] * inv);
        }
    }
}

/// [`fused_avx512`] for the step's `tame`, `bf` and `redo`, into an f32 output or (`o16`)
/// a bf16 one narrowed by integer rounding (`bf16io::store32`).
///
/// # Safety
/// As [`fused_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn steps_avx512(tame: bool, bf: bool, redo: bool, o16: bool, a: Step) -> (f32, (f32, f32)) {
    // SAFETY: the caller's.
    unsafe {
        if o16 {
            step_avx512::<true, false>(tame, bf, redo, a)
        } else {
            step_avx512::<false, false>(tame, bf, redo, a)
        }
    }
}

/// [`fused_avx512`] for the step's `tame`, `bf` and `redo` into a bf16 output narrowed by
/// `vcvtne2ps2bf16` (`bf16io::store32_cvt`).
///
/// # Safety
/// As [`fused_avx512`]; the CPU must support AVX-512DQ and AVX-512 BF16 (`bf16io::has_cvt`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx2,fma")]
unsafe fn steps_avx512_cvt(
    tame: bool,
    bf: bool,
    redo: bool,
    perm: bool,
    a: Step,
) -> (f32, (f32, f32)) {
    // SAFETY: the caller's.
    unsafe {
        match (perm, tame, redo) {
            (true, true, false) => fused_avx512::<false, true, false, true, true, true>(a),
            (true, false, false) => fused_avx512::<true, true, false, true, true, true>(a),
            (true, true, true) => fused_avx512::<false, true, true, true, true, true>(a),
            (true, false, true) => fused_avx512::<true, true, true, true, true, true>(a),
            _ => step_avx512::<true, true>(tame, bf, redo, a),
        }
    }
}

/// [`fused_avx512`] for the step's `tame`, `bf` and `redo` (`O16`: a bf16 output, `CVT`:
/// narrowed by `vcvtne2ps2bf16`), inlined into the function built with the features it
/// needs.
///
/// # Safety
/// As [`fused_avx512`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn step_avx512<const O16: bool, const CVT: bool>(
    tame: bool,
    bf: bool,
    redo: bool,
    a: Step,
) -> (f32, (f32, f32)) {
    // SAFETY: the caller's.
    unsafe {
        match (tame, bf, redo) {
            (true, false, false) => fused_avx512::<false, false, false, O16, CVT, false>(a),
            (true, true, false) => fused_avx512::<false, true, false, O16, CVT, false>(a),
            (false, false, false) => fused_avx512::<true, false, false, O16, CVT, false>(a),
            (false, true, false) => fused_avx512::<true, true, false, O16, CVT, false>(a),
            (true, false, true) => fused_avx512::<false, false, true, O16, CVT, false>(a),
            (true, true, true) => fused_avx512::<false, true, true, O16, CVT, false>(a),
            (false, false, true) => fused_avx512::<true, false, true, O16, CVT, false>(a),
            (false, true, true) => fused_avx512::<true, true, true, O16, CVT, false>(a),
        }
    }
}

/// The operands of one [`fused_avx512`] step: a chunk of `n` columns.
#[cfg(target_arch = "x86_64")]
struct Step {
    /// This row's chunk (f32, or bf16 bit patterns with `BF`).
    xs: *const u8,
    /// The chunk's columns.
    n: usize,
    /// The chunk's running max `m'`.
    m: f32,
    /// The row's max (with `REDO`).
    mf: f32,
    /// Where the chunk's exponentials go.
    es: *mut f32,
    /// The next row's chunk (f32 or bf16 bits) or null.
    next: *const u8,
    /// The previous row's chunk in the output (f32, or bf16 with `O16`), or null.
    d: *mut u8,
    /// The previous row's exponentials for `d`.
    ep: *const f32,
    /// The previous row's `1/s`.
    inv: f32,
    /// Whether no `ep[j]·inv` can be an f32 subnormal ([`sub_free`]): with `CVT`, the stores
    /// narrow without the subnormal check.
    nosub: bool,
    /// Columns by which the stores to `d` trail the loads ([`LAG`]).
    lag: usize,
    /// Whether `d` takes streaming stores.
    nt: bool,
    /// The chunk of the row after the next (to prefetch), or null.
    pf: *const u8,
    /// With an f32 input, the bytes of each of the four quarters in which `pf`'s lines are
    /// asked for (`prefetch::quarter_at`), or 0 (asked for in column order).
    pfq: usize,
}

/// Whether [`rows_avx512`] treats an input of `bytes` as larger than the last-level cache
/// (`cache::last_level_bytes`; a test may force it on its own thread).
fn past_cache(bytes: usize) -> bool {
    #[cfg(all(test, target_arch = "x86_64"))]
    if tests::FORCE_PAST.with(|f| f.get()) {
        return true;
    }
    bytes > crate::backend::cpu::cache::last_level_bytes()
}

/// One step of [`rows_avx512`] over a chunk of `n` columns from `xs`: `exp(xs[j] − m)`
/// into `es` and their `vmath::sum` (32 lanes in two registers, the same bits), or with
/// `REDO` that sum while `es` gets `exp(xs[j] − mf)`; with a non-null `next`,
/// the max and least value of the `n` values at `next` ([`max_min_avx512`]'s, or with `BF`
/// [`max_min_bf16`]'s), else
/// `(-inf, inf)`; with a non-null `d`, `d[j] = ep[j]·inv` (with `O16` narrowed to bf16 as
/// `bf16io::narrow_scaled` narrows it, 32 lanes a store; with `nt` as
/// [`stream::scale_avx512`] stores it: streaming stores from the first 64-byte boundary of
/// `d` to its last whole vector);
/// with a non-null `pf`, the cache lines of the `n` values at `pf` are asked for.
///
/// Inlined into its callers, which are built with the features it needs.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX2 and FMA (with `CVT` also AVX-512DQ and
/// AVX-512 BF16); `es`, `ep` and `d` (when non-null) hold `n` values; `next` (when
/// non-null) that many elements.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn fused_avx512<
    const CHECK: bool,
    const BF: bool,
    const REDO: bool,
    const O16: bool,
    const CVT: bool,
    const PERM: bool,
>(
    a: Step,
) -> (f32, (f32, f32)) {
    // The flags and the f32 fields one by one (a load of several caller's stores at once
    // waits for them all to reach the cache: the compiler read `inv` and the flags as one
    // 8-byte load, and later `m`, `mf`, `inv` and the flags as one 16-byte load, ≈ 7 % of
    // this function's samples at `[1024, 300]` bf16, once per call).
    // SAFETY: reads of `a`'s own fields.
    let (nosub, nt, m, mf, inv) = unsafe {
        (
            std::ptr::read_volatile(&a.nosub),
            std::ptr::read_volatile(&a.nt),
            std::ptr::read_volatile(&a.m),
            std::ptr::read_volatile(&a.mf),
            std::ptr::read_volatile(&a.inv),
        )
    };
    let Step {
        xs,
        n,
        es,
        next,
        d,
        ep,
        lag,
        pf,
        pfq,
        ..
    } = a;
    use super::norm512::{load, widen16};
    use core::arch::x86_64::*;
    let full = n / 32 * 32;
    let (has_next, has_d) = (!next.is_null(), !d.is_null());
    // SAFETY (these register set-ups): the caller's level.
    let (mv, fv, iv) = unsafe { (_mm512_set1_ps(m), _mm512_set1_ps(mf), _mm512_set1_ps(inv)) };
    // (Macros, not closures: a closure here is not built with the caller's features.
    // Both are used in the unsafe block below, under its SAFETY note.)
    // `exp` of 16 lanes: the level is the caller's; without `CHECK` every lane is in range.
    macro_rules! exp {
        ($v:expr) => {{
            let v: __m512 = $v;
            if CHECK {
                vmath::exp16(v)
            } else {
                vmath::exp16_in_range(v)
            }
        }};
    }
    let (mut a0, mut a1) = unsafe { (_mm512_setzero_ps(), _mm512_setzero_ps()) };
    // The last `n - full` (< 32) values in lanes `0 .. n - full` (`exp16` is `vmath::exp`'s
    // bits), taken before the loop (their exponentials then run beside its work instead of
    // after it, where their latency had stood between the loop and the sum's tree) and added
    // to those lanes after it (their last adds, as in `vmath::sum`); the second vector only
    // for a tail of more than 16.
    let k = if n > full {
        (1u64 << (n - full)) - 1
    } else {
        0
    };
    let (k0, k1) = (k as __mmask16, (k >> 16) as __mmask16);
    // SAFETY: the caller's level.
    let (mut t0, mut t1) = unsafe { (_mm512_setzero_ps(), _mm512_setzero_ps()) };
    if n > full {
        // SAFETY: the masked loads read only the row's last `n - full` values; `es` has 32
        // values of slack past `n` (`rows_avx512`), so whole vectors are stored (the lanes
        // past the chunk are never read, or are written again by the next chunk's call,
        // after this one).
        unsafe {
            let (x0, x1) = if BF {
                let v = _mm512_maskz_loadu_epi16(k as __mmask32, (xs as *const i16).add(full));
                (
                    widen16(_mm512_castsi512_si256(v)),
                    widen16(_mm512_extracti64x4_epi64::<1>(v)),
                )
            } else {
                let xs = xs as *const f32;
                (
                    _mm512_maskz_loadu_ps(k0, xs.add(full)),
                    _mm512_maskz_loadu_ps(k1, xs.wrapping_add(full + 16)),
                )
            };
            // Lanes past the row take `m` (`x − m` = 0, and to redo `m − mf` in `[lo − mf,
            // 0]`): in range when every lane of the row is (`!CHECK`), so the tail takes the
            // loop's `exp` form (the checked one costs two compares and a branch per 16
            // lanes more).
            let x0 = _mm512_mask_mov_ps(mv, k0, x0);
            t0 = exp!(_mm512_sub_ps(x0, mv));
            let e0 = if REDO {
                exp!(_mm512_sub_ps(x0, fv))
            } else {
                t0
            };
            _mm512_storeu_ps(es.add(full), e0);
            if k1 != 0 {
                let x1 = _mm512_mask_mov_ps(mv, k1, x1);
                t1 = exp!(_mm512_sub_ps(x1, mv));
                let e1 = if REDO {
                    exp!(_mm512_sub_ps(x1, fv))
                } else {
                    t1
                };
                _mm512_storeu_ps(es.add(full + 16), e1);
            }
        }
    }
    let mx;
    // The scaled row: plain stores up to `d`'s first 64-byte boundary, streaming ones from
    // `q` to `qend` (whole vectors: 16 f32 or 32 bf16), plain ones after.
    let (d, d16) = (d as *mut f32, d as *mut u16);
    let w = if O16 { 32 } else { 16 };
    // (With `PERM` no head: the stores start at the row's first column, streamed only
    // where that is 64-byte aligned, `rows_avx512`.)
    let (head, qend) = if has_d && !PERM {
        let head = if O16 {
            d16.align_offset(64)
        } else {
            d.align_offset(64)
        }
        .min(n);
        (head, head + (n - head) / w * w)
    } else if has_d {
        (0, n / w * w)
    } else {
        (0, 0)
    };
    debug_assert!(!PERM || (BF && O16 && CVT && head == 0));
    // The output's elements `j0 .. j1` (32 a piece, the last masked; `j1 − j0 < 32` but
    // for an output too misaligned to reach a 64-byte boundary; plain stores, in column order:
    // with `PERM` only the chunk's last `n % 32` columns, which the tail below keeps in
    // column order): `ep[j]·inv`, narrowed to bf16 with `O16` as `bf16io::narrow_scaled`
    // narrows it (`vcvtne2ps2bf16` with `CVT`: the same bits, an f32 subnormal lane taking
    // the integer rounding unless `nosub`). Inline masked vectors instead of the
    // out-of-line `narrow_scaled` (bf16) or a scalar loop (f32) for a row's head and tail.
    macro_rules! part {
        ($j0:expr, $j1:expr) => {{
            let (mut j0, j1): (usize, usize) = ($j0, $j1);
            while j1 > j0 {
                let k = ((1u64 << (j1 - j0).min(32)) - 1) as u32;
                let (k0, k1) = (k as __mmask16, (k >> 16) as __mmask16);
                let v0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k0, ep.add(j0)), iv);
                if O16 {
                    let v1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k1, ep.add(j0 + 16)), iv);
                    if CVT {
                        let w = if nosub {
                            bf16io::pack32_cvt_normal(v0, v1)
                        } else {
                            bf16io::pack32_cvt(v0, v1)
                        };
                        _mm512_mask_storeu_epi16(d16.add(j0) as *mut i16, k, w);
                    } else {
                        bf16io::store16(d16.add(j0), k0, v0);
                        if k1 != 0 {
                            bf16io::store16(d16.add(j0 + 16), k1, v1);
                        }
                    }
                } else {
                    _mm512_mask_storeu_ps(d.add(j0), k0, v0);
                    if k1 != 0 {
                        let v1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k1, ep.add(j0 + 16)), iv);
                        _mm512_mask_storeu_ps(d.add(j0 + 16), k1, v1);
                    }
                }
                j0 += 32;
            }
        }};
    }
    // The bf16 output's elements `q .. q + 32`, `d16.add(q)` 64-byte aligned (streaming
    // stores with `nt`).
    macro_rules! put32 {
        ($q:expr) => {{
            let q: usize = $q;
            let v0 = _mm512_mul_ps(_mm512_loadu_ps(ep.add(q)), iv);
            let v1 = _mm512_mul_ps(_mm512_loadu_ps(ep.add(q + 16)), iv);
            if PERM {
                let w = if nosub {
                    bf16io::pack32_cvt_normal(v0, v1)
                } else {
                    bf16io::pack32_cvt(v0, v1)
                };
                let w = unperm_words(w);
                if nt {
                    _mm512_stream_si512(d16.add(q) as *mut __m512i, w)
                } else {
                    _mm512_storeu_si512(d16.add(q) as *mut __m512i, w)
                }
            } else {
                match (nt, CVT) {
                    (true, true) if nosub => bf16io::stream32_cvt_normal(d16.add(q), v0, v1),
                    (false, true) if nosub => bf16io::store32_cvt_normal(d16.add(q), v0, v1),
                    (true, true) => bf16io::stream32_cvt(d16.add(q), v0, v1),
                    (false, true) => bf16io::store32_cvt(d16.add(q), v0, v1),
                    (true, false) => bf16io::stream32(d16.add(q), v0, v1),
                    (false, false) => bf16io::store32(d16.add(q), v0, v1),
                }
            }
        }};
    }
    // SAFETY (this block): every index below is under `n`; the pointers hold `n` values
    // (the caller's); `d.add(q)` (`d16.add(q)`) is 64-byte aligned for `head <= q`,
    // `q - head` a multiple of `w`.
    unsafe {
        if has_d {
            part!(0, head);
        }
        let mut q = head;
        // The max/min state made after the head's stores and finished before the tail's
        // (once out-of-line calls: live across them, the compiler had kept `m16` on the
        // stack, a load and a store each step).
        let mut m = MaxMin::new();
        let mut m16 = MaxMin16::new();
        for j in (0..full).step_by(32) {
            let (v0, v1) = if PERM {
                widen_perm(xs, j)
            } else {
                (load::<BF>(xs, j), load::<BF>(xs, j + 16))
            };
            let (e0, e1) = (exp!(_mm512_sub_ps(v0, mv)), exp!(_mm512_sub_ps(v1, mv)));
            a0 = _mm512_add_ps(a0, e0);
            a1 = _mm512_add_ps(a1, e1);
            let (e0, e1) = if REDO {
                (exp!(_mm512_sub_ps(v0, fv)), exp!(_mm512_sub_ps(v1, fv)))
            } else {
                (e0, e1)
            };
            _mm512_storeu_ps(es.add(j), e0);
            _mm512_storeu_ps(es.add(j + 16), e1);
            if has_next {
                if !pf.is_null() {
                    // A prefetch never faults.
                    let at = if !BF && pfq != 0 {
                        prefetch::quarter_at(j / 32, pfq)
                    } else {
                        j * if BF { 2 } else { 4 }
                    };
                    let b = pf.wrapping_add(at) as *const i8;
                    _mm_prefetch::<_MM_HINT_T0>(b);
                    if !BF {
                        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(64));
                    }
                }
                if BF {
                    m16.step(next, j);
                } else {
                    m.step(next as *const f32, j);
                }
            }
            if O16 && has_d && j >= lag && q < qend {
                put32!(q);
                q += 32;
            }
            if !O16 && has_d && j >= lag {
                for _ in 0..2 {
                    if q < qend {
                        let v = _mm512_mul_ps(_mm512_loadu_ps(ep.add(q)), iv);
                        if nt {
                            _mm512_stream_ps(d.add(q), v);
                        } else {
                            _mm512_storeu_ps(d.add(q), v);
                        }
                        q += 16;
                    }
                }
            }
        }
        if PERM {
            // The sums back in lane order (lane `i` of `a0 ‖ a1`: column `i` of each step).
            (a0, a1) = unperm_lanes(a0, a1);
        }
        mx = if has_next && BF {
            m16.finish(next, n)
        } else if has_next {
            max_finish(next as *const f32, n, m)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        };
        if O16 && has_d {
            while q < qend {
                put32!(q);
                q += 32;
            }
        }
        if !O16 && has_d {
            while q < qend {
                let v = _mm512_mul_ps(_mm512_loadu_ps(ep.add(q)), iv);
                if nt {
                    _mm512_stream_ps(d.add(q), v);
                } else {
                    _mm512_storeu_ps(d.add(q), v);
                }
                q += 16;
            }
        }
        if has_d {
            part!(qend, n);
        }
    }
    // The tail's exponentials, added after the loop to the lanes they belong to.
    // SAFETY: the caller's level.
    unsafe {
        a0 = _mm512_mask_add_ps(a0, k0, a0, t0);
        a1 = _mm512_mask_add_ps(a1, k1, a1, t1);
    }
    (super::norm512::tree(a0, a1), mx)
}

/// Whether no scaled output `exp(x − m)·inv` of a row whose values lie in `[lo, m]` can be
/// an f32 subnormal (or NaN): `m` and `lo` finite, `lo − m ≥ -60` and `inv ≥ 2^-30`. Then
/// each `x − m` lies in `[-60, 0]`, its `exp` (`vmath::exp`, or `exp16`: the same bits) is
/// at least `e^-60·(1 − 2^-20)` ≈ `8.7e-27`, and the product rounds to at least ≈ `8e-36`,
/// about 690 times the least normal f32 (≈ `1.2e-38`): `vcvtne2ps2bf16` (which reads a subnormal
/// as zero) narrows such a row's stores without the per-store `vfpclassps` check
/// (`bf16io::store32_cvt_normal`). Any other row (a NaN or infinity, a spread of more than
/// 60, `1/s` below `2^-30`) keeps the check.
fn sub_free(m: f32, lo: f32, inv: f32) -> bool {
    m.is_finite() && lo.is_finite() && lo - m >= -60.0 && inv >= 1.0 / (1u64 << 30) as f32
}

/// The 32 bf16 values from column `j` of the row at `p` widened to f32 by two word unpacks
/// with zero (`bits << 16`, exact) in their unpacked order: within each 128-bit lane `l`
/// (columns `8l .. 8l + 8`) the first vector takes columns `8l .. 8l + 4`, the second
/// `8l + 4 .. 8l + 8`, so lane `4l + i` of the first is column `8l + i` and of the second
/// column `8l + 4 + i` ([`unperm_lanes`] puts 32 such lanes back in column order,
/// [`unperm_words`] the 32 bf16 words that `vcvtne2ps2bf16` makes of them).
///
/// Intel Xeon (family 6 model 207; sx21): the two unpacks take one 64-byte load and no
/// shift, against two `vpmovzxwd` (a port-5 op each) and two `vpslld` for the column-order
/// widen; the output's 32 words take one `vpermq` more. In a standalone loop beside eight
/// independent FMAs (4.1–4.2 cycles a step alone) the column-order widen added 1.8–2.0
/// cycles, unpacks and `vpermq` 1.4–1.7, and with the step's `vcvtne2ps2bf16` 7.8–8.0
/// against 7.3–7.4 cycles (ln20's even/odd split, `x << 16` and `x & 0xffff0000` with a
/// `vpermw` of the words, 7.7–7.8: `vpermw` costs about two simple ops here).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW (the caller is built with them); values
/// `j .. j + 32` readable at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen_perm(
    p: *const u8,
    j: usize,
) -> (core::arch::x86_64::__m512, core::arch::x86_64::__m512) {
    use core::arch::x86_64::*;
    // SAFETY: the caller's.
    unsafe {
        let x = _mm512_loadu_si512((p as *const u16).add(j) as *const __m512i);
        let z = _mm512_setzero_si512();
        (
            _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, x)),
            _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, x)),
        )
    }
}

/// 32 lanes in [`widen_perm`]'s order back in column order: lane `i` of the result pair is
/// column `i`.
///
/// # Safety
/// The CPU must support AVX-512F (the caller is built with it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn unperm_lanes(
    a: core::arch::x86_64::__m512,
    b: core::arch::x86_64::__m512,
) -> (core::arch::x86_64::__m512, core::arch::x86_64::__m512) {
    use core::arch::x86_64::*;
    // SAFETY: the caller's.
    unsafe {
        // Column `c` (`l = c / 8`, `i = c % 8`): lane `4l + i` of `a` for `i < 4`, else lane
        // `4l + i − 4` of `b` (index `16 +` that).
        let i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
        let i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
        (
            _mm512_permutex2var_ps(a, i0, b),
            _mm512_permutex2var_ps(a, i1, b),
        )
    }
}

/// The 32 bf16 words of `vcvtne2ps2bf16` (first source's lanes first) of two vectors in
/// [`widen_perm`]'s order, in column order: 64-bit group `g` of the words holds columns
/// `8g .. 8g + 4` for `g < 4`, `8(g − 4) + 4 ..` for the others.
///
/// # Safety
/// The CPU must support AVX-512F (the caller is built with it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn unperm_words(w: core::arch::x86_64::__m512i) -> core::arch::x86_64::__m512i {
    use core::arch::x86_64::*;
    // SAFETY: the caller's.
    unsafe { _mm512_permutexvar_epi64(_mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0), w) }
}

/// `d[j]` = the bf16 bits of `es[j]·inv` for the `es.len()` exponentials of a row that
/// [`fused_avx512`] stored in [`widen_perm`]'s order (each whole 32-column step; the last
/// `es.len() % 32` in column order: the row's chunks start at multiples of 32), 32 a step
/// (plain stores, the last masked; `vcvtne2ps2bf16`, with the subnormal check unless
/// `nosub`).
///
/// # Safety
/// The CPU must support AVX-512F, BW, DQ and BF16 (`bf16io::has_cvt`); `d` holds
/// `es.len()` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx2,fma")]
unsafe fn store_perm(es: &[f32], inv: f32, d: &mut [u16], nosub: bool) {
    use core::arch::x86_64::*;
    let n = es.len();
    assert!(d.len() >= n);
    let iv = _mm512_set1_ps(inv);
    let (e, d) = (es.as_ptr(), d.as_mut_ptr());
    let full = n / 32 * 32;
    if n > full {
        let k = ((1u64 << (n - full)) - 1) as u32;
        let (k0, k1) = (k as __mmask16, (k >> 16) as __mmask16);
        // SAFETY: the masked loads and store touch only elements `full .. n`.
        unsafe {
            let v0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k0, e.add(full)), iv);
            let v1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k1, e.wrapping_add(full + 16)), iv);
            let w = if nosub {
                bf16io::pack32_cvt_normal(v0, v1)
            } else {
                bf16io::pack32_cvt(v0, v1)
            };
            _mm512_mask_storeu_epi16(d.add(full) as *mut i16, k, w);
        }
    }
    for q in (0..full).step_by(32) {
        // SAFETY: `q + 32 <= n`; the features are the caller's.
        unsafe {
            let v0 = _mm512_mul_ps(_mm512_loadu_ps(e.add(q)), iv);
            let v1 = _mm512_mul_ps(_mm512_loadu_ps(e.add(q + 16)), iv);
            let w = if nosub {
                bf16io::pack32_cvt_normal(v0, v1)
            } else {
                bf16io::pack32_cvt(v0, v1)
            };
            _mm512_storeu_si512(d.add(q) as *mut __m512i, unperm_words(w));
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    thread_local! {
        /// Whether [`past_cache`] answers true on this thread (a test's).
        pub(super) static FORCE_PAST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Chunks of this thread's steps that asked for the row after the next in quarters.
        pub(super) static QUARTERED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        /// [`zen4_wide`] on this thread as on a Zen 4 (`true`) or not, with this last-level
        /// cache in bytes; `None`: the CPU's answer.
        pub(super) static AS_ZEN4: std::cell::Cell<Option<(bool, usize)>> = const { std::cell::Cell::new(None) };
        /// This thread's [`rows_avx512`] calls 1 apart, 2 apart, and 2 apart by the Zen 4's
        /// rule ([`zen4_wide`]) where the L1 rule says 1.
        pub(super) static APART: std::cell::Cell<[usize; 3]> = const { std::cell::Cell::new([0; 3]) };
    }

    /// Rows of an f32 input taken as larger than the last-level cache ([`past_cache`] forced
    /// on this thread: row `r + 3` asked for in quarters, asserted to run, and off AMD the
    /// loop without `REDO`) against [`reference`] bit for bit on fresh clock-seeded rows,
    /// some spread to subnormal outputs, some with ±inf, NaN and subnormal inputs; one chunk
    /// and chunks of 1024 or 48 columns; the rows split over two calls.
    #[test]
    fn rows_past_the_last_level_cache_match_the_reference() {
        let seed = crate::backend::cpu::clock_seed();
        let mut rng = Rng(seed | 1);
        FORCE_PAST.with(|f| f.set(true));
        QUARTERED.with(|q| q.set(0));
        let specials = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -0.0,
            f32::from_bits(3),
        ];
        for &(rows, n) in &[
            (9, 4096),
            (7, 4097),
            (8, 2048),
            (9, 1000),
            (8, 300),
            (10, 64),
            (6, 33),
        ] {
            for bc in [4096usize, 1024, 48] {
                let case = format!("seed {seed}, [{rows}, {n}], bc {bc}");
                let mut xs: Vec<f32> = Vec::with_capacity(rows * n);
                for _ in 0..rows {
                    let kind = rng.next() % 4;
                    for _ in 0..n {
                        let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                        xs.push(if kind == 1 {
                            4.0 - u * 124.0
                        } else {
                            u * 16.0 - 8.0
                        });
                    }
                    if kind == 2 {
                        let at = xs.len() - n + rng.next() as usize % n;
                        xs[at] = specials[rng.next() as usize % specials.len()];
                    }
                }
                let mut ob = vec![0.0f32; rows * n + 16];
                let op = ob.as_mut_ptr();
                let op = op.wrapping_add(op.align_offset(64));
                let buffer = |ptr: *mut u8| Buffer {
                    dtype: DType::F32,
                    shape: [rows, n, 1],
                    rank: 2,
                    ptr,
                    len: rows * n * 4,
                    writable: true,
                };
                let args = [buffer(xs.as_mut_ptr() as *mut u8), buffer(op as *mut u8)];
                let sm = Softmax {
                    rows: super::super::rowmatch::Rows {
                        x: 0,
                        out: 1,
                        br: 1,
                        bc,
                        round_bf16: false,
                    },
                };
                let mut buf = Vec::new();
                run(&sm, &mut buf, 0..rows / 2, &args, rows, n);
                run(&sm, &mut buf, rows / 2..rows, &args, rows, n);
                for r in 0..rows {
                    let want = reference(&xs[r * n..(r + 1) * n], bc);
                    for (j, w) in want.iter().enumerate() {
                        // SAFETY: element `r·n + j` of the output.
                        let got = unsafe { *op.add(r * n + j) };
                        assert!(
                            got.to_bits() == w.to_bits() || (got.is_nan() && w.is_nan()),
                            "{case}: row {r} column {j}: {got:e} against {w:e}"
                        );
                    }
                }
            }
        }
        FORCE_PAST.with(|f| f.set(false));
        assert!(
            QUARTERED.with(|q| q.get()) > 0
                || !crate::backend::cpu::simd::active()
                    .ge(&crate::backend::cpu::simd::SimdLevel::Avx512),
            "no step asked for its rows in quarters"
        );
    }

    /// A small xorshift generator (the tests' seeds come from the clock).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// [`max_min_bf16`] (the [`MaxMin16`] steps and finish the AVX-512 row loop takes for a
    /// bf16 row) against a scalar reference: the max as `vmath::max` gives it (NaN when there
    /// is one; zeros compare equal, as the max's sign of zero is unspecified) and the least
    /// value (when there is no NaN), over fresh random bf16 bit patterns at every tail length up
    /// to 70 and at 1000, in rows of every sign mix (all with the sign clear, all with it set,
    /// both), with zeros of both signs, subnormals, infinities and NaNs of both signs among
    /// them in some rows and not in others.
    #[test]
    fn bf16_max_and_least_value_match_a_scalar_reference() {
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw"))
        {
            eprintln!("no AVX-512BW: not run");
            return;
        }
        let seed = crate::backend::cpu::clock_seed();
        let mut rng = Rng(seed | 1);
        let specials = [
            0x0000u16, 0x8000, 0x0001, 0x8001, 0x7f80, 0xff80, 0x7fc0, 0xffc1,
        ];
        let value = |b: u16| f32::from_bits((b as u32) << 16);
        for n in (1..=70).chain([1000]) {
            for case in 0..24 {
                let sign = match case % 3 {
                    0 => 0x0000,
                    1 => 0x8000,
                    _ => 0xffff,
                };
                let mut row: Vec<u16> = (0..n)
                    .map(|_| {
                        let b = rng.next() as u16 & 0x7fff;
                        // Finite magnitudes mostly (exponent below all ones).
                        let b = if b >= 0x7f80 { b - 0x0100 } else { b };
                        match sign {
                            0xffff => b | (rng.next() as u16 & 0x8000),
                            s => b | s,
                        }
                    })
                    .collect();
                // Cases 3.. put one special at a random place (of a sign that may break
                // the row's sign mix: that is a mix too).
                if case >= 3 {
                    let s = specials[(case - 3) % specials.len()];
                    let at = rng.next() as usize % n;
                    row[at] = s;
                }
                let vals: Vec<f32> = row.iter().map(|b| value(*b)).collect();
                let nan = vals.iter().any(|v| v.is_nan());
                let want_max = crate::backend::cpu::vmath::max(&vals);
                // `-0` below `+0` (`total_cmp`): the least value's bits are exact.
                let want_lo = vals.iter().copied().min_by(|a, b| a.total_cmp(b)).unwrap();
                // SAFETY: the features are detected; `n` values are readable.
                let (mx, lo) = unsafe { max_min_bf16(row.as_ptr() as *const u8, n) };
                let tag = format!("seed {seed}, n {n}, case {case}: {row:x?}");
                if nan {
                    assert!(mx.is_nan() && want_max.is_nan(), "max not NaN, {tag}");
                } else {
                    assert_eq!(mx, want_max, "max, {tag}");
                    assert_eq!(lo.to_bits(), want_lo.to_bits(), "least value, {tag}");
                }
            }
        }
    }

    /// The interpreter's softmax of one row in chunks of `bc` columns, op for op as
    /// [`body`]'s portable passes take it (`vmath::max`, `vmath::exp`, `vmath::sum`, the
    /// online rescale `chunk_scale`, the output's exponentials again where a chunk's running
    /// max is not the row's): the f32 products `exp(x − m)·(1/s)`.
    fn reference(xs: &[f32], bc: usize) -> Vec<f32> {
        let n = xs.len();
        let mut e = vec![0.0f32; n];
        let mut mk = Vec::new();
        let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            let mn = bin_f(BinaryOp::Max, m, vmath::max(&xs[c0..c1]));
            let s1 = s * chunk_scale(k, m, mn);
            for (o, v) in e[c0..c1].iter_mut().zip(&xs[c0..c1]) {
                *o = v - mn;
            }
            vmath::exp(&mut e[c0..c1]);
            s = s1 + vmath::sum(&e[c0..c1]);
            m = mn;
            mk.push(mn);
        }
        let inv = 1.0f32 / s;
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            if mk[k].to_bits() != m.to_bits() {
                for (o, v) in e[c0..c1].iter_mut().zip(&xs[c0..c1]) {
                    *o = v - m;
                }
                vmath::exp(&mut e[c0..c1]);
            }
        }
        e.iter().map(|v| v * inv).collect()
    }

    /// [`run`] (on this CPU: [`rows_avx512`], for a bf16 input and output its `perm` steps
    /// wherever each chunk starts at a multiple of 32 columns and the output is not streamed)
    /// against [`reference`], bit for bit (NaNs as NaNs), on fresh clock-seeded rows: f32 → f32,
    /// bf16 → bf16 and bf16 → f32; every row length 1..=70 and 96, 300, 1000, 1023, 1024,
    /// 2048, 4095, 4096, 4097, 8192 (long rows into an f32 output run one row apart,
    /// `rows_apart`, shorter ones two: both asserted to run; every other case as on a Zen 4
    /// whose last-level cache is twice the input, `zen4_wide`, so that long f32 rows also run
    /// 2 apart by that rule: asserted to run); one chunk and chunks of 32 or
    /// 1024 columns (`perm` with a ragged last chunk) and of 48 (not `perm`); output rows
    /// 64-byte aligned and not (the output's start moved by one element: bf16 rows unaligned,
    /// stored from their first column, f32 rows with a masked head before their aligned
    /// stores); the rows split over two calls (as two workers); values about `[-8, 8)`, in some rows spread to −120 below the
    /// max (exponentials and outputs that are subnormal, or zero), with ±inf, NaN, ±0 and
    /// f32/bf16 subnormal inputs in others; and a bf16 output of 2 MiB (streamed, so not
    /// `perm`, with its aligned head and masked tail).
    #[test]
    fn rows_match_the_reference_on_fresh_inputs() {
        let seed = crate::backend::cpu::clock_seed();
        let mut rng = Rng(seed | 1);
        let specials = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            0.0,
            -0.0,
            f32::from_bits(0x0001_0000),
            -f32::from_bits(0x0000_0001),
        ];
        let mut shapes: Vec<(usize, usize)> = (1..=70).map(|n| (3, n)).collect();
        shapes.extend([
            (5, 96),
            (7, 300),
            (4, 1000),
            (4, 1023),
            (3, 1024),
            (5, 2048),
            (3, 4095),
            (4, 4096),
            (3, 4097),
            (2, 8192),
        ]);
        shapes.push((257, 4095));
        APART.with(|a| a.set([0; 3]));
        // Both pipelines run (`rows_apart`, not as on a Zen 4): some rows of an f32 output one
        // row apart, others two, from an f32 and from a bf16 input.
        AS_ZEN4.with(|a| a.set(Some((false, usize::MAX))));
        for esz in [4, 2] {
            let apart = |d| {
                shapes
                    .iter()
                    .any(|&(r, n)| rows_apart(n, esz, true, r * n * esz) == d)
            };
            assert!(
                apart(1) && apart(2),
                "input of {esz} bytes: one pipeline not run"
            );
        }
        let bf = |v: f32| half::bf16::from_f32(v).to_f32();
        let osz_of = |d: DType| d.size_bytes();
        let mut cases = 0usize;
        for (ki, (xd, od)) in [
            (DType::F32, DType::F32),
            (DType::BF16, DType::BF16),
            (DType::BF16, DType::F32),
        ]
        .into_iter()
        .enumerate()
        {
            for &(rows, n) in &shapes {
                let big = rows * n > 1 << 20;
                for (bi, bc) in [4096usize, 32, 1024, 48].into_iter().enumerate() {
                    if big && bi > 0 {
                        continue;
                    }
                    for mut off in [0usize, 2] {
                        // (An f32 output's rows start at multiples of 4 bytes.)
                        off *= osz_of(od) / 2;
                        if big && off > 0 {
                            continue;
                        }
                        // Every other case as on a Zen 4 whose last-level cache is twice
                        // the input (`zen4_wide`: long f32 rows 2 apart).
                        cases += 1;
                        let zen4 = cases % 2 == 0;
                        AS_ZEN4.with(|a| a.set(Some((zen4, 2 * rows * n * xd.size_bytes()))));
                        let case = format!(
                            "seed {seed}, {xd:?} -> {od:?}, [{rows}, {n}], bc {bc}, offset {off}, \
                             as a Zen 4 {zen4}"
                        );
                        // Values: a random kind of row each.
                        let mut xs: Vec<f32> = Vec::with_capacity(rows * n);
                        for _ in 0..rows {
                            let kind = rng.next() % 4;
                            for _ in 0..n {
                                let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                                let v = match kind {
                                    // Spread far below the max: subnormal and zero outputs.
                                    1 => 4.0 - u * 124.0,
                                    _ => u * 16.0 - 8.0,
                                };
                                xs.push(v);
                            }
                            if kind == 2 {
                                let row = xs.len() - n;
                                for _ in 0..1 + rng.next() % 3 {
                                    let at = row + rng.next() as usize % n;
                                    xs[at] = specials[rng.next() as usize % specials.len()];
                                }
                            }
                        }
                        if xd == DType::BF16 {
                            for v in xs.iter_mut() {
                                *v = bf(*v);
                            }
                        }
                        // The input, 64-byte aligned, and the output at `off` bytes past a
                        // 64-byte boundary.
                        let (xsz, osz) = (xd.size_bytes(), od.size_bytes());
                        let mut xb = vec![0u8; rows * n * xsz + 64];
                        let xp = xb.as_mut_ptr();
                        let xp = xp.wrapping_add(xp.align_offset(64));
                        for (i, v) in xs.iter().enumerate() {
                            // SAFETY: `rows·n` elements fit after the aligned start.
                            unsafe {
                                if xd == DType::BF16 {
                                    *(xp as *mut u16).add(i) = half::bf16::from_f32(*v).to_bits();
                                } else {
                                    *(xp as *mut f32).add(i) = *v;
                                }
                            }
                        }
                        let mut ob = vec![0xA5u8; rows * n * osz + 192];
                        let op = ob.as_mut_ptr();
                        let op = op.wrapping_add(op.align_offset(64) + off);
                        let buffer = |dtype: DType, ptr: *mut u8, sz: usize| Buffer {
                            dtype,
                            shape: [rows, n, 1],
                            rank: 2,
                            ptr,
                            len: rows * n * sz,
                            writable: true,
                        };
                        let args = [buffer(xd, xp, xsz), buffer(od, op, osz)];
                        let br = 1 + (ki + bi) % 2;
                        let sm = Softmax {
                            rows: super::super::rowmatch::Rows {
                                x: 0,
                                out: 1,
                                br,
                                bc,
                                round_bf16: false,
                            },
                        };
                        let programs = rows.div_ceil(br);
                        let mid = programs / 2;
                        let mut buf = Vec::new();
                        run(&sm, &mut buf, 0..mid, &args, rows, n);
                        run(&sm, &mut buf, mid..programs, &args, rows, n);
                        for r in 0..rows {
                            let want = reference(&xs[r * n..(r + 1) * n], bc);
                            for (j, w) in want.iter().enumerate() {
                                let i = r * n + j;
                                // SAFETY: element `i` of the output.
                                let (got, want) = unsafe {
                                    if od == DType::BF16 {
                                        (*(op as *const u16).add(i) as u32, chunk::bf16_bits(*w))
                                    } else {
                                        ((*(op as *const f32).add(i)).to_bits(), w.to_bits())
                                    }
                                };
                                let nan = |b: u32| {
                                    if od == DType::BF16 {
                                        b & 0x7fff > 0x7f80
                                    } else {
                                        b & 0x7fff_ffff > 0x7f80_0000
                                    }
                                };
                                assert!(
                                    got == want || (nan(got) && nan(want)),
                                    "{case}: row {r} column {j}: {got:#x} against {want:#x} \
                                     (row {:?})",
                                    &xs[r * n..(r + 1) * n]
                                );
                            }
                        }
                        // Nothing written just before or past the output.
                        let end = rows * n * osz;
                        // SAFETY: at most 65 bytes of the 192 of slack lie before the output.
                        let (before, past) = unsafe {
                            (
                                std::slice::from_raw_parts(
                                    ob.as_ptr(),
                                    op.offset_from(ob.as_ptr()) as usize,
                                ),
                                std::slice::from_raw_parts(op.add(end), 64),
                            )
                        };
                        assert!(
                            before.iter().chain(past).all(|&b| b == 0xA5),
                            "{case}: written outside the output"
                        );
                    }
                }
            }
        }
        AS_ZEN4.with(|a| a.set(None));
        // The AVX-512 loop ran 1 apart, 2 apart, and 2 apart by the Zen 4's rule.
        if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
            && std::arch::is_x86_feature_detected!("avx512bw")
        {
            let [one, two, zen4] = APART.with(|a| a.get());
            assert!(
                one > 0 && two > 0 && zen4 > 0,
                "seed {seed}: 1 apart {one}, 2 apart {two}, by the Zen 4 rule {zen4}"
            );
        }
        // On this CPU: an f32 input of half the last-level cache runs 2 apart on a Zen 4 only.
        let llc = crate::backend::cpu::cache::last_level_bytes();
        assert_eq!(
            zen4_wide(4, llc.div_ceil(2)),
            crate::backend::cpu::simd::is_zen4()
        );
        assert!(!zen4_wide(2, llc) && !zen4_wide(4, llc / 2 - 4096));
    }

    /// [`sub_free`]'s bound: at its limits (`lo − m = -60`, `inv = 2^-30`) the product of
    /// `vmath::exp(lo − m)` and `inv` is a normal f32 (with a factor of 512 to spare), and
    /// any row past them, or with a NaN or infinite max or least value, is not taken.
    #[test]
    fn sub_free_takes_only_rows_whose_outputs_are_normal() {
        let mut e = [-60.0f32];
        crate::backend::cpu::vmath::exp(&mut e);
        let inv = 1.0 / (1u64 << 30) as f32;
        let p = e[0] * inv;
        assert!(p.is_normal() && p >= f32::MIN_POSITIVE * 512.0, "{p:e}");
        assert!(sub_free(0.0, -60.0, inv));
        assert!(sub_free(3.5, 3.5, 1.0));
        assert!(!sub_free(0.0, -60.01, 1.0));
        assert!(!sub_free(0.0, -1.0, inv / 2.0));
        assert!(!sub_free(f32::NAN, -1.0, 1.0));
        assert!(!sub_free(f32::INFINITY, 1.0, 1.0));
        assert!(!sub_free(0.0, f32::NEG_INFINITY, 1.0));
    }
}
