//! bf16 → bf16 `gelu` at the AVX-512 level without a lookup per element: a piecewise
//! polynomial gives each lane's result, and the lanes whose bf16 rounding it cannot decide
//! take the chain's table entry ([`super::lut`]), so every output is the table's (the
//! interpreter's) bits.
//!
//! For `-3.375 <= x < 3.875` a lane computes `p(u)` in f32, `p` a degree-4 polynomial fitted
//! to `gelu(x)` (minimax relative error; on the interval around 0 its constant term is set
//! to `-0.0`, so that `gelu(±0) = ±0`) on each of the 32 intervals of width 1/4
//! (`j = round(4x)`, `u = 4x - j`, coefficients [`CT`] picked by one `vpermt2ps` each): four
//! multiply-adds and five permutes per 16 lanes. Over the bf16 inputs of that range its
//! result is within 10 f32 units in the last place of `gelu(x)` rounded to f32 (computed in
//! f64 when the coefficients were fitted). From `3.875` on (and `+inf`) the lane's result is
//! `x` itself. The f32 result is rounded to bf16 by adding `0x8000` (round
//! half up, then the top 16 bits); a lane whose low 16 bits lie within [`HALF`] units of the
//! midpoint `0x8000`, where that rounding and the exact result's could differ, takes the
//! table's entry instead, as do inputs below `-3.375`, `-inf` and NaN; a block of 256
//! elements with many such lanes is looked up whole, and so are the next few. This module's
//! tests check that every one of the 65 536 inputs gives the table's bits through this
//! function, and, with a poisoned table, that every input in the polynomial's range which the
//! polynomial decides gives the true bits from each of the 32 lane positions.
//!
//! Off AMD ([`gather_tuned`]) the AVX-512 level computes only a third of the steps so and
//! looks the others up, 16 lanes per `vpgatherdd` ([`x86::mixed`], [`x86::gather`]): on the
//! Intel Xeon of sessions 17-20 the polynomial's ≈ 19 vector ops per 16 lanes (five
//! `vpermt2ps`, four FMAs, three for `j` and `u`, two for the `x >= 3.875` blend, the
//! rounding add, two compares and a test, and half the split and merge of the two halves;
//! eight of them port-5 only) held it at ≈ 9 cycles per 16 lanes, while a gathered step costs
//! 1.5 vector ops per 16 lanes besides the gather (split, merge) and is bound by the gather's
//! element loads, so the two kinds of step overlap.

use super::lut;
use super::plan::DirectStep;
use tessera_ir::graph::UnaryOp;

/// Half the width of the undecided window around the bf16 midpoint, in f32 units in the
/// last place (a power of two, above the polynomial's error plus `vmath::gelu`'s).
const HALF: u32 = 16;
/// The polynomial's range: `LO <= x < HI`.
const LO: f32 = -3.375;
/// From here on a lane's result is `x`.
const HI: f32 = 3.875;

/// Whether `ops` (a direct chain) is one gelu with its rounding: the table of such a chain
/// holds each input's `gelu` rounded to bf16.
fn is_gelu(ops: &[DirectStep]) -> bool {
    matches!(
        ops,
        [DirectStep::Unary(UnaryOp::Gelu)] | [DirectStep::Unary(UnaryOp::Gelu), DirectStep::Round]
    )
}

/// Whether the AVX-512 level looks most of gelu's table up with `vpgatherdd` ([`x86::mixed`],
/// [`x86::mixed_stream`]) rather than computing the polynomial for every step ([`x86::gelu`]): off
/// AMD (as `transpose::zen_tuned`) with AVX-512 FP16 (below). On the Intel Xeon of sessions 17-20
/// (family 6 model 207) a 16-lane gather from the (L1-resident for normal inputs) table costs less
/// than the polynomial's ≈ 19 vector ops per 16 lanes, all of them on the two 512-bit ports, five
/// `vpermt2ps` and three mask-producing compares on port 5 alone; on the AMD Zen 5 of the earlier
/// sessions gathers measured slower than scalar table loads (`ARCHITECTURE.md`, "vpgatherdd"), so
/// AMD keeps the polynomial. Figures: see [`x86::mixed`].
///
/// Only on Intel CPUs with AVX-512 FP16 (Sapphire Rapids and later, the generation measured
/// here): on the AVX-512 Intel cores before it (Skylake-SP to Ice Lake and Tiger Lake) the
/// microcode against Gather Data Sampling (Downfall) makes `vpgatherdd` several times slower,
/// and nothing was measured there, so they keep the polynomial too.
#[cfg(target_arch = "x86_64")]
fn gather_tuned() -> bool {
    !crate::backend::cpu::simd::is_amd() && std::arch::is_x86_feature_detected!("avx512fp16")
}

/// `o[i] = t[s[i]]` over `o.len()` elements (`s` at least as long), `t` the bf16 table of
/// `ops`: computed as described in the module docs when `ops` is a gelu ([`is_gelu`]) and the
/// active SIMD level is AVX-512, else looked up: by 16-lane gathers where [`gathers_any`],
/// else one load per element ([`lut::look_u16`]).
#[inline(always)]
pub(crate) fn look(ops: &[DirectStep], t: &lut::Table16, s: &[u16], o: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if is_gelu(ops)
        && crate::backend::cpu::simd::active() == crate::backend::cpu::simd::SimdLevel::Avx512
    {
        let n = o.len();
        if gather_tuned() {
            // SAFETY: AVX-512F, AVX2 and FMA are present at this level; `s` holds at least `n`.
            return unsafe { x86::mixed(t, &s[..n], o) };
        }
        // SAFETY: AVX-512F, AVX2 and FMA are present at this level; `s` holds at least `n`.
        return unsafe { x86::gelu(t, &s[..n], o) };
    }
    #[cfg(target_arch = "x86_64")]
    if gathers_any(ops) {
        let n = o.len();
        // SAFETY: AVX-512F is present at this level; `s` holds at least `n`.
        return unsafe { x86::gather(t, &s[..n], o) };
    }
    lut::look_u16(t, s, o)
}

/// Whether [`look`] and [`look_stream`] look up the table of the non-gelu chain `ops` by
/// 16-lane `vpgatherdd` ([`x86::gather`]) rather than one load per element
/// ([`lut::look_u16`]): at the AVX-512 level where [`gather_tuned`] (AMD keeps the loads: there
/// a u32-table gather measured slower, `ARCHITECTURE.md`). On the 2-vCPU Intel Xeon KVM guest
/// (family 6 model 207), `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile tanh_bf16 R C 150 --pool`
/// interleaved with the loads' build, 2026-11-28 18:53–18:56 UTC (load 3.7–4.7: two helpers'
/// builds), 3 rounds, fastest launch in µs (ratio to the printed memcpy): one thread `[4096,
/// 1024]` 1205–1285 (0.55–0.58) → 899–1244 (0.55–0.79; two of three ≤ 905), `[1024, 4096]`
/// 1205–2017 → 873–1147 (0.63–0.83), `[64, 1024]` 20.0–31.8 → 14.5–18.5 µs; two threads
/// `[4096, 1024]` 1544–2138 (0.32–0.47) → 496–1239 (0.64–0.73), `[1024, 4096]` 1203–2190 →
/// 560–946 (0.72–0.79).
#[cfg(target_arch = "x86_64")]
fn gathers_any(ops: &[DirectStep]) -> bool {
    !is_gelu(ops) && gathers()
}

/// Whether table lookups run on 16-lane `vpgatherdd`: the active SIMD level is AVX-512 and
/// [`gather_tuned`] (for a bf16 output: [`gathers_any`]; for an f32 one: `lut::look_f32`).
#[cfg(target_arch = "x86_64")]
pub(super) fn gathers() -> bool {
    crate::backend::cpu::simd::active() == crate::backend::cpu::simd::SimdLevel::Avx512
        && gather_tuned()
}

/// [`look`] into an output whose whole 64-byte lines take streaming stores, when `ops` is a
/// gelu and the active SIMD level is AVX-512 or [`gathers_any`]: each step's 32 results go to
/// memory from the computing (or gathering) loop ([`x86::gelu_stream`],
/// [`x86::gather_stream`]), no L1 buffer and separate copy between. Returns `false` (nothing
/// written) otherwise.
///
/// # Safety
/// The caller orders the streaming stores (`sfence`, [`super::stream::fence`]) before `o` is
/// read by anyone else.
#[inline(always)]
pub(crate) unsafe fn look_stream(
    ops: &[DirectStep],
    t: &lut::Table16,
    s: &[u16],
    o: &mut [u16],
    far: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if is_gelu(ops)
        && crate::backend::cpu::simd::active() == crate::backend::cpu::simd::SimdLevel::Avx512
    {
        let n = o.len();
        if gather_tuned() {
            // SAFETY: AVX-512F, AVX2 and FMA are present at this level; `s` holds at least `n`;
            // the caller fences.
            unsafe { x86::mixed_stream(t, &s[..n], o, far) };
            return true;
        }
        // SAFETY: AVX-512F, AVX2 and FMA are present at this level; `s` holds at least `n`;
        // the caller fences.
        unsafe { x86::gelu_stream(t, &s[..n], o, far) };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if gathers_any(ops) {
        let n = o.len();
        // SAFETY: AVX-512F is present at this level; `s` holds at least `n`; the caller fences.
        unsafe { x86::gather_stream(t, &s[..n], o, far) };
        return true;
    }
    let _ = (ops, t, s, o, far);
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CT, HALF, HI, LO, lut};
    use core::arch::x86_64::*;
    use lut::Table16;

    /// `1.5 · 2^23`: `4x + MAGIC` holds `round(4x)` in its low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;

    /// `o[i] = t[s[i]]` for gelu's table `t` (equal lengths): blocks of 256 elements (8
    /// steps of 32, each step's lanes left to the table kept as a mask, and the table's
    /// entries written after the block's steps), then single steps, then a lookup per element.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn gelu(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        // SAFETY: `CT[k]` holds 32 floats.
        let lo: [__m512; 5] = core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr()) });
        // SAFETY: as above.
        let hi: [__m512; 5] =
            core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr().add(16)) });
        let mut i = 0;
        let mut masks = [0u32; 8];
        // Blocks still to look up whole (`SKIP` after a block with more than `MANY` lanes
        // left to the table: inputs mostly outside the polynomial's range, where a lookup
        // per element costs less than computing and then fixing most lanes).
        let mut skip = 0;
        while i + 256 <= n {
            if skip > 0 {
                look(t, &s[i..i + 256], &mut o[i..i + 256]);
                skip -= 1;
                i += 256;
                continue;
            }
            let mut any = 0;
            for (k, m) in masks.iter_mut().enumerate() {
                let at = i + 32 * k;
                // SAFETY: `at + 32 <= n` elements of `s` and `o`.
                *m = unsafe { step(s.as_ptr().add(at), o.as_mut_ptr().add(at), &lo, &hi) };
                any |= *m;
            }
            if any != 0 {
                if masks.iter().map(|m| m.count_ones()).sum::<u32>() > MANY {
                    look(t, &s[i..i + 256], &mut o[i..i + 256]);
                    skip = SKIP;
                } else {
                    for (k, m) in masks.iter().enumerate() {
                        let at = i + 32 * k;
                        fix(t, &s[at..at + 32], &mut o[at..at + 32], *m);
                    }
                }
            }
            i += 256;
        }
        while i + 32 <= n {
            // SAFETY: `i + 32 <= n`.
            let m = unsafe { step(s.as_ptr().add(i), o.as_mut_ptr().add(i), &lo, &hi) };
            fix(t, &s[i..i + 32], &mut o[i..i + 32], m);
            i += 32;
        }
        for (o, x) in o[i..].iter_mut().zip(&s[i..]) {
            *o = t[*x as usize];
        }
    }

    /// `o[i] = t[s[i]]` for any bf16 table `t` (equal lengths) by 16-lane `vpgatherdd`: steps
    /// of 32 elements ([`gather_step`]), then a lookup per element. Gives the table's bits by
    /// construction (no polynomial, no lanes left over). Taken where [`super::gather_tuned`].
    ///
    /// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207), 2026-11-28: a
    /// standalone copy of the loops (05:45–05:55 UTC, load 3.3–3.9, `chrt -f 50`, fastest of
    /// 15 rounds over 7 680–9 216 elements in L1) ran standard-normal inputs at 0.200–0.203 ns
    /// per element against 0.259–0.276 for [`gelu`] (with its fix-ups); with the two
    /// out-of-table lanes masked off the gathers (since [`Table16`]'s spare entries: not
    /// needed) 0.212–0.218, uniformly random bf16 inputs (table from L2) 0.41–0.43 against
    /// 0.65–0.68, `8|x| + 1` 0.21 against 0.26. Without its stores the loop ran as fast
    /// (0.186 against 0.187 at 06:17): the gathers bind it. In the kernel it takes the rounds
    /// [`mixed`] leaves and the whole rounds after many undecided lanes.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gather(t: &Table16, s: &[u16], o: &mut [u16]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let mut i = 0;
        while i + 32 <= n {
            // SAFETY: `i + 32 <= n` elements of `s` and `o`.
            unsafe {
                let v = gather_step(t, s.as_ptr().add(i));
                _mm512_storeu_si512(o.as_mut_ptr().add(i).cast(), v);
            }
            i += 32;
        }
        for (o, x) in o[i..].iter_mut().zip(&s[i..]) {
            *o = t[*x as usize];
        }
    }

    /// Steps of 32 elements computed by the polynomial ([`step`]) per round of [`ROUND`]
    /// elements in [`mixed`]; the other steps are gathered ([`gather_step`]).
    const POLY: usize = 2;
    /// Elements per round of [`mixed`]: [`POLY`] computed steps, four gathered ones.
    const ROUND: usize = 192;
    /// More lanes than this left to the table in a round's computed steps: the next
    /// [`SKIP`] rounds are gathered whole (inputs mostly outside the polynomial's range).
    const MANY_MIXED: u32 = 8;

    /// [`gather`] for gelu's table with part of the work moved to the polynomial: per round
    /// of [`ROUND`] elements, [`POLY`] steps of 32 computed ([`step`], their undecided lanes
    /// fixed from the table at once) and the rest gathered. The gathers are bound by their
    /// element loads, the polynomial by the two 512-bit ports, so the two kinds of step
    /// overlap. After a round whose computed steps left more than [`MANY_MIXED`] lanes to the
    /// table, the next [`SKIP`] rounds are gathered whole. Then [`gather`] for the rest. Each
    /// step asks for the input line [`NEAR`] elements on.
    ///
    /// With that prefetch (gb23, 2026-11-28 15:45–15:48 UTC, load 2.9–10, `RAYON_NUM_THREADS=1
    /// chrt -f 50 cpu_profile gelu_bf16 R C 150 --pool [--into]` interleaved with main
    /// `5ad586c`'s binary, fastest launch in µs and its ratio to the same process's memcpy,
    /// rounds outside the vCPU's slow state, which struck both binaries alike at 1125–1256):
    /// `[4096, 1024]` 800–860 → 733–775 (0.78–0.82 → 0.84–0.89), into a kept output (`--into`)
    /// 803–821 → 749–753; `[1024, 4096]` 882 → 766–774 (0.77 → 0.88; main's other three
    /// rounds 1041–1175). Two threads: see
    /// `super::super::flat::run`.
    ///
    /// Standalone copy (2026-11-28 06:17 UTC, load 4.2, `chrt -f 50`, fastest of 15 rounds,
    /// 7 680 standard-normal inputs in L1, fix-ups not counted; ns per element, computed :
    /// gathered steps per round): gathers only 0.187–0.189, 1:1 0.175, 2:2 0.170, 1:2 0.177,
    /// 2:3 0.163–0.165, 1:3 0.181–0.185, 2:1 0.204, 3:3 0.172–0.173, 2:4 0.160–0.161, the
    /// polynomial only 0.254–0.261. In the kernel (`RAYON_NUM_THREADS=T chrt -f 50
    /// cpu_profile gelu_bf16 R C N --pool`, interleaved with main `c5e45d2`'s binary, fastest
    /// launch in µs and its ratio to the same process's memcpy, 06:20–06:21 UTC, load
    /// 3.6–4.1): `[4096, 1024]` one thread 1061–1101 → 787–810 (0.60–0.62 → 0.81–0.82), two
    /// 527–548 → 405–420 (0.61–0.64 → 0.79–0.82); `[1024, 4096]` one thread 1054–1097 →
    /// 776–836 (0.60–0.62 → 0.81–0.85), two 521–619 → 412–507 (0.53–0.66 → 0.67–0.82).
    /// `[8192, 4096]` ([`mixed_stream`], 06:29–06:31, load 3.0–4.1, N = 20): one thread
    /// 7.2–11.1 ms (base 13.6–17.4 in those rounds, 9.6–9.8 at 06:21), two 3.04–3.31 ms (base
    /// 4.50–5.66), the gathers alone ([`gather_stream`]) 7.6–7.9 and 3.31–3.53 in the same
    /// rounds. The gain depends on the vCPU's state: at 06:38–06:40 (load 3.0–3.7) some
    /// one-thread `[4096, 1024]` / `[1024, 4096]` launches ran 1207–1280 µs against base's
    /// 1246–1344 in the same pair (pinned: on CPU 1 once 1280 against 1332, while CPU 0 ran
    /// 860–880 against 1181–1186), the others 840–885 against 1141–1574.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn mixed(t: &Table16, s: &[u16], o: &mut [u16]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        // A prefetch never faults.
        let pre =
            |i: usize| _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().wrapping_add(i + NEAR) as *const i8);
        // SAFETY: `CT[k]` holds 32 floats.
        let lo: [__m512; 5] = core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr()) });
        // SAFETY: as above.
        let hi: [__m512; 5] =
            core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr().add(16)) });
        let mut i = 0;
        let mut skip = 0;
        while i + ROUND <= n {
            let first = if skip > 0 {
                skip -= 1;
                0
            } else {
                let mut left = 0;
                for k in 0..POLY {
                    let at = i + 32 * k;
                    pre(at);
                    // SAFETY: `at + 32 <= n` elements of `s` and `o`.
                    let m = unsafe { step(s.as_ptr().add(at), o.as_mut_ptr().add(at), &lo, &hi) };
                    if m != 0 {
                        fix(t, &s[at..at + 32], &mut o[at..at + 32], m);
                        left += m.count_ones();
                    }
                }
                if left > MANY_MIXED {
                    skip = SKIP;
                }
                POLY
            };
            for k in first..ROUND / 32 {
                let at = i + 32 * k;
                pre(at);
                // SAFETY: as above.
                unsafe {
                    let v = gather_step(t, s.as_ptr().add(at));
                    _mm512_storeu_si512(o.as_mut_ptr().add(at).cast(), v);
                }
            }
            i += ROUND;
        }
        // SAFETY: as this function's.
        unsafe { gather(t, &s[i..], &mut o[i..]) };
    }

    /// [`mixed`] with the whole 64-byte lines of `o` written by streaming stores, as
    /// [`gather_stream`] (plain head and tail by [`gather`]); a computed step with lanes left
    /// to the table has them fixed in a 32-element buffer before its line is stored
    /// ([`stream_step`]); with `far` the input is asked for [`AHEAD`] elements ahead.
    ///
    /// # Safety
    /// As [`mixed`]; the caller orders the streaming stores (`sfence`) before `o` is read
    /// elsewhere.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn mixed_stream(t: &Table16, s: &[u16], o: &mut [u16], far: bool) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let ahead = if far { AHEAD } else { NEAR };
        // A prefetch never faults.
        let pre =
            |i: usize| _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().wrapping_add(i + ahead) as *const i8);
        let h = o.as_ptr().align_offset(64).min(n);
        let end = h + (n - h) / 32 * 32;
        // SAFETY: as this function's.
        unsafe { gather(t, &s[..h], &mut o[..h]) };
        // SAFETY: `CT[k]` holds 32 floats.
        let lo: [__m512; 5] = core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr()) });
        // SAFETY: as above.
        let hi: [__m512; 5] =
            core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr().add(16)) });
        let mut i = h;
        let mut skip = 0;
        while i + ROUND <= end {
            let first = if skip > 0 {
                skip -= 1;
                0
            } else {
                let mut left = 0;
                for k in 0..POLY {
                    let at = i + 32 * k;
                    pre(at);
                    // SAFETY: `o[at]` is 64-byte aligned (`h`, steps of 32) and
                    // `at + 32 <= n`; the caller fences.
                    left += unsafe {
                        stream_step(t, &s[at..at + 32], o.as_mut_ptr().add(at), &lo, &hi)
                    };
                }
                if left > MANY_MIXED {
                    skip = SKIP;
                }
                POLY
            };
            for k in first..ROUND / 32 {
                let at = i + 32 * k;
                pre(at);
                // SAFETY: as above.
                unsafe {
                    let v = gather_step(t, s.as_ptr().add(at));
                    _mm512_stream_si512(o.as_mut_ptr().add(at).cast(), v);
                }
            }
            i += ROUND;
        }
        // SAFETY: as this function's; `o[i]` is 64-byte aligned.
        unsafe { gather_stream(t, &s[i..], &mut o[i..], far) };
    }

    /// [`gather`] with the whole 64-byte lines of `o` written by streaming stores, as
    /// [`gelu_stream`]: plain stores ([`gather`]) up to the first 64-byte boundary of `o` and
    /// for the last `< 32` elements, one `vmovntdq` per step of 32 between; with `far` the input
    /// is asked for [`AHEAD`] elements ahead.
    ///
    /// # Safety
    /// As [`gather`]; the caller orders the streaming stores (`sfence`) before `o` is read
    /// elsewhere.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gather_stream(t: &Table16, s: &[u16], o: &mut [u16], far: bool) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let h = o.as_ptr().align_offset(64).min(n);
        let end = h + (n - h) / 32 * 32;
        // SAFETY: as this function's.
        unsafe { gather(t, &s[..h], &mut o[..h]) };
        let mut i = h;
        while i < end {
            if far {
                // A prefetch never faults.
                _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().wrapping_add(i + AHEAD) as *const i8);
            }
            // SAFETY: `i + 32 <= end <= n`; `o[i]` is 64-byte aligned (`h`, steps of 32); the
            // caller fences.
            unsafe {
                let v = gather_step(t, s.as_ptr().add(i));
                _mm512_stream_si512(o.as_mut_ptr().add(i).cast(), v);
            }
            i += 32;
        }
        // SAFETY: as this function's.
        unsafe { gather(t, &s[end..], &mut o[end..]) };
    }

    /// The 32 table entries of the 32 elements from `s`, in order: dword `k` of the input
    /// holds elements `2k` (low half) and `2k + 1` (high half); each half is one gather of
    /// 4-byte reads with scale 2, the even one from entry 0 (the entry in the low half of the
    /// read), the odd one from entry −1 (the entry in the high half), so the two merge by one
    /// `vpternlogd`. Reads at `0xFFFF` (even) and ending at `0` (odd) take [`Table16`]'s
    /// spare entries, so no lane is masked off (masking the two lanes off cost two compares
    /// per 32 elements, ≈ 6 % in the standalone copy).
    ///
    /// # Safety
    /// As [`gather`]; `s` readable for 32 elements.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn gather_step(t: &Table16, s: *const u16) -> __m512i {
        let top = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        let low = _mm512_set1_epi32(0xFFFF);
        // SAFETY: the caller's contract.
        let v = unsafe { _mm512_loadu_si512(s.cast()) };
        let ie = _mm512_and_si512(v, low);
        let io = _mm512_srli_epi32::<16>(v);
        let base = t.base();
        // SAFETY: even lanes read entries `ie` and `ie + 1 <= 0x10000`, odd ones `io - 1 >= -1`
        // and `io`: inside `t` with its spare entries (`base` may address both).
        let (ge, go) = unsafe {
            (
                _mm512_i32gather_epi32::<2>(ie, base.cast()),
                _mm512_i32gather_epi32::<2>(io, base.wrapping_sub(1).cast()),
            )
        };
        // (top & go) | (!top & ge)
        _mm512_ternarylogic_epi32::<0xCA>(top, go, ge)
    }

    /// How far ahead of a step its input line is asked for where the caller says the data
    /// lies past the cache (`far`: `super::super::stream::past_cache` of input and output), in
    /// elements: 4 KiB, one page, as `gelu512::AHEAD`. There the one-thread loop left
    /// memory idle while it computed (as f32 gelu's did, ch18).
    ///
    /// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207; experiment build
    /// with the distance and hint on an environment switch, 2026-11-28 02:51–02:57 UTC, load
    /// 4.5–5.5 from other jobs; `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile gelu_bf16 8192
    /// 4096 20 --pool`, interleaved with main's binary, fastest launch in ms): main
    /// 18.3/19.5/18.9/18.4/19.2; 2048 elements ahead 18.3/12.0/11.0/14.5/11.1, the same into
    /// L2 (`prefetcht1`) 11.6/11.7/14.8/14.4/11.3, 1024 ahead into L2 12.8/11.7/24.6, 4096
    /// ahead 18.4/20.0. Final build: see the commit.
    const AHEAD: usize = 2048;

    /// How far ahead of a step its input line is asked for by [`mixed`] and, where the data
    /// fits the cache (not `far`), [`mixed_stream`], in elements (2 KiB of input): the loop
    /// runs at about its in-L2 rate (≈ 0.19 ns per element, one thread) and without the
    /// prefetch waited for part of its input at the full shapes.
    ///
    /// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207; gb23, experiment
    /// build with the distance a const generic picked by an environment switch, 2026-11-28
    /// 15:37–15:40 UTC, load 8–11 from other jobs; `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile
    /// gelu_bf16 R C 150 --pool`, interleaved with main `5ad586c`'s binary, fastest launch in
    /// µs, rounds where neither ran in the vCPU's slow state of ≈ 1100–1300 µs): `[4096,
    /// 1024]` main 776–809, no prefetch 836–840, 256 ahead 748, 512 749–771, 1024 728–792,
    /// 2048 728–796, 512 with the output asked for too (`prefetchw`) 762–766; `[1024, 4096]`
    /// main 771–812, 512 736–769 (and 992), 1024 712–756 (and 893); `[2048, 4096]` ([`mixed_stream`], not `far`,
    /// N = 60) main 1754–1843, 512 1721–1781, 1024 1733 (one round). Final build: see
    /// [`mixed`].
    const NEAR: usize = 1024;

    /// [`gelu`] with the whole 64-byte lines of `o` written by streaming stores straight from
    /// the loop: plain stores ([`gelu`]) up to the first 64-byte boundary of `o` and for the
    /// last `< 32` elements; between them steps of 32 elements (one line each), a step with
    /// lanes left to the table fixed in a 32-element buffer before its line is stored, and,
    /// after a block of 256 elements with more than [`MANY`] such lanes, the next [`SKIP`]
    /// blocks looked up whole into a 256-element buffer and streamed from there. With `far`
    /// the input is asked for [`AHEAD`] elements ahead.
    ///
    /// # Safety
    /// As [`gelu`]; the caller orders the streaming stores (`sfence`) before `o` is read
    /// elsewhere.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn gelu_stream(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16], far: bool) {
        let n = o.len();
        // With `far`, each step of 32 elements (one input line) asks for the line
        // `AHEAD` elements on (a prefetch never faults).
        let pre = |i: usize| {
            if far {
                _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().wrapping_add(i + AHEAD) as *const i8);
            }
        };
        assert_eq!(s.len(), n);
        let h = o.as_ptr().align_offset(64).min(n);
        let end = h + (n - h) / 32 * 32;
        // SAFETY: as this function's.
        unsafe { gelu(t, &s[..h], &mut o[..h]) };
        // SAFETY: `CT[k]` holds 32 floats.
        let lo: [__m512; 5] = core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr()) });
        // SAFETY: as above.
        let hi: [__m512; 5] =
            core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr().add(16)) });
        let mut i = h;
        let mut skip = 0;
        let mut b = [0u16; 256];
        while i + 256 <= end {
            if skip > 0 {
                look(t, &s[i..i + 256], &mut b);
                for k in (0..256).step_by(32) {
                    pre(i + k);
                    // SAFETY: `o[i + k]` is 64-byte aligned (`h`, steps of 32) and
                    // `i + k + 32 <= n`.
                    unsafe {
                        let v = _mm512_loadu_si512(b.as_ptr().add(k).cast());
                        _mm512_stream_si512(o.as_mut_ptr().add(i + k).cast(), v);
                    }
                }
                skip -= 1;
                i += 256;
                continue;
            }
            let mut left = 0;
            for k in (0..256).step_by(32) {
                pre(i + k);
                // SAFETY: as above.
                left += unsafe {
                    stream_step(
                        t,
                        &s[i + k..i + k + 32],
                        o.as_mut_ptr().add(i + k),
                        &lo,
                        &hi,
                    )
                };
            }
            if left > MANY {
                skip = SKIP;
            }
            i += 256;
        }
        while i < end {
            // SAFETY: as above.
            unsafe { stream_step(t, &s[i..i + 32], o.as_mut_ptr().add(i), &lo, &hi) };
            i += 32;
        }
        // SAFETY: as this function's.
        unsafe { gelu(t, &s[end..], &mut o[end..]) };
    }

    /// The 32 elements `s` (the table's entries for the lanes left to it) streamed to `o`;
    /// returns how many lanes took the table's entry.
    ///
    /// # Safety
    /// As [`gelu`]; `o` 64-byte aligned and writable for 32 elements.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    unsafe fn stream_step(
        t: &[u16; 1 << 16],
        s: &[u16],
        o: *mut u16,
        lo: &[__m512; 5],
        hi: &[__m512; 5],
    ) -> u32 {
        // SAFETY: `s` holds 32 elements.
        let (mut v, m) = unsafe { compute(s[..32].as_ptr(), lo, hi) };
        if m != 0 {
            let mut b = [0u16; 32];
            // SAFETY: `b` holds 32 elements.
            unsafe { _mm512_storeu_si512(b.as_mut_ptr().cast(), v) };
            fix(t, s, &mut b, m);
            // SAFETY: as above.
            v = unsafe { _mm512_loadu_si512(b.as_ptr().cast()) };
        }
        // SAFETY: the caller's contract.
        unsafe { _mm512_stream_si512(o.cast(), v) };
        m.count_ones()
    }

    /// The 32 elements from `s` into `o`; returns the lanes left to the table: bit `k` for
    /// element `2k`, bit `16 + k` for element `2k + 1`.
    ///
    /// # Safety
    /// As [`gelu`]; `s` readable and `o` writable for 32 elements.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    unsafe fn step(s: *const u16, o: *mut u16, lo: &[__m512; 5], hi: &[__m512; 5]) -> u32 {
        // SAFETY: the caller's contract.
        let (out, m) = unsafe { compute(s, lo, hi) };
        // SAFETY: as above.
        unsafe { _mm512_storeu_si512(o.cast(), out) };
        m
    }

    /// The 32 results from `s` (the lanes left to the table undecided) and those lanes, as
    /// [`step`] returns them.
    ///
    /// # Safety
    /// As [`gelu`]; `s` readable for 32 elements.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    unsafe fn compute(s: *const u16, lo: &[__m512; 5], hi: &[__m512; 5]) -> (__m512i, u32) {
        let top = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        // SAFETY: the caller's contract.
        let v = unsafe { _mm512_loadu_si512(s.cast()) };
        // Dword k holds elements 2k (low half) and 2k + 1 (high half).
        let (we, be) = lanes(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)), lo, hi);
        let (wo, bo) = lanes(_mm512_castsi512_ps(_mm512_and_si512(v, top)), lo, hi);
        // (top & wo) | (!top & we >> 16)
        let out = _mm512_ternarylogic_epi32::<0xCA>(top, wo, _mm512_srli_epi32::<16>(we));
        (out, u32::from(be) | u32::from(bo) << 16)
    }

    /// More lanes than this left to the table in a block of 256 elements: look the block
    /// and the next [`SKIP`] ones up.
    const MANY: u32 = 32;
    /// Blocks looked up after a block with more than [`MANY`] lanes left to the table.
    const SKIP: u32 = 7;

    /// [`lut::look_u16`], not inlined: compiled for the baseline level, its scalar loads stay
    /// scalar (inlined into [`gelu`], they may be vectorised into lane inserts).
    #[inline(never)]
    fn look(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) {
        lut::look_u16(t, s, o)
    }

    /// The table's entries for the lanes of `m` ([`step`]'s mask) of one step's 32 elements.
    #[inline(always)]
    fn fix(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16], mut m: u32) {
        while m != 0 {
            let b = m.trailing_zeros() as usize;
            let e = 2 * (b & 15) + (b >> 4);
            o[e] = t[s[e] as usize];
            m &= m - 1;
        }
    }

    /// One vector of inputs `x`: the f32 result's bits plus `0x8000 + HALF` (the top 16 bits
    /// the bf16 result where decided) and the lanes left to the table.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    fn lanes(x: __m512, lo: &[__m512; 5], hi: &[__m512; 5]) -> (__m512i, u16) {
        let magic = _mm512_set1_ps(MAGIC);
        let four = _mm512_set1_ps(4.0);
        let t = _mm512_fmadd_ps(x, four, magic);
        let j = _mm512_castps_si512(t);
        // u = 4x - round(4x), exact.
        let u = _mm512_fmsub_ps(x, four, _mm512_sub_ps(t, magic));
        let mut r = _mm512_permutex2var_ps(lo[4], j, hi[4]);
        for k in (0..4).rev() {
            r = _mm512_fmadd_ps(r, u, _mm512_permutex2var_ps(lo[k], j, hi[k]));
        }
        let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(HI));
        let r = _mm512_mask_mov_ps(r, big, x);
        let w = _mm512_add_epi32(
            _mm512_castps_si512(r),
            _mm512_set1_epi32((0x8000 + HALF) as i32),
        );
        // Decided: `x >= LO` (not NaN) and the low 16 bits of `w` at least `2 HALF` (not
        // within `HALF` of the midpoint).
        let ge = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(LO));
        let window = _mm512_set1_epi32((0xFFFF & !(2 * HALF - 1)) as i32);
        (w, !_mm512_mask_test_epi32_mask(ge, w, window))
    }
}

/// Coefficients: `CT[k][j mod 32]` multiplies `u^k` on the interval `round(4x) = j`,
/// `-16 <= j < 16` (fitted in f64 to `gelu(j/4 + u/4)` for `u ∈ [-1/2, 1/2]`, minimax
/// relative error by reweighted least squares, rounded to f32; the intervals below
/// `j = -13` are not used). Printed by `scripts/gen-gelu-bf16-coefs.py`.
#[allow(clippy::excessive_precision)]
pub(crate) const CT: [[f32; 32]; 5] = [
    [
        -0.0,
        0.14967656135559082,
        0.3457312285900116,
        0.5800294876098633,
        0.8413447141647339,
        1.1179378032684326,
        1.3997892141342163,
        1.6798964738845825,
        1.9544997215270996,
        2.2224948406219482,
        2.48447585105896,
        2.7418055534362793,
        2.995950222015381,
        3.248124599456787,
        3.499185800552368,
        3.7496683597564697,
        -0.0001266846084035933,
        -0.00033156428253278136,
        -0.0008142011356540024,
        -0.0018753308104351163,
        -0.004049694165587425,
        -0.008194349706172943,
        -0.015524165704846382,
        -0.027505066245794296,
        -0.045500267297029495,
        -0.07010352611541748,
        -0.10021080076694489,
        -0.13206221163272858,
        -0.15865525603294373,
        -0.16997051239013672,
        -0.1542687714099884,
        -0.10032343119382858,
    ],
    [
        0.125,
        0.17384308576583862,
        0.21687336266040802,
        0.2498060017824173,
        0.27082857489585876,
        0.2806652784347534,
        0.2818673551082611,
        0.27773168683052063,
        0.27130812406539917,
        0.264797568321228,
        0.2594028413295746,
        0.2555069029331207,
        0.2529864013195038,
        0.2515043318271637,
        0.25070542097091675,
        0.25030845403671265,
        -0.00012590459664352238,
        -0.0003084420459344983,
        -0.0007054248126223683,
        -0.00150433205999434,
        -0.0029864120297133923,
        -0.00550691457465291,
        -0.009402851574122906,
        -0.014797570183873177,
        -0.021308118477463722,
        -0.02773168683052063,
        -0.03186734765768051,
        -0.03066527657210827,
        -0.02082855813205242,
        0.00019400697783567011,
        0.033126648515462875,
        0.07615692913532257,
    ],
    [
        0.024933842942118645,
        0.023411961272358894,
        0.019253967329859734,
        0.013527989387512207,
        0.007561819162219763,
        0.0024972863029688597,
        -0.0010118124773725867,
        -0.0028646914288401604,
        -0.0033744790125638247,
        -0.003037631744518876,
        -0.0023280151654034853,
        -0.001580739626660943,
        -0.0009694741456769407,
        -0.0005429301527328789,
        -0.00027952867094427347,
        -0.0001329087681369856,
        -5.8562007325235754e-05,
        -0.00013292903895489872,
        -0.00027955271070823073,
        -0.0005429497105069458,
        -0.0009694737382233143,
        -0.0015807008603587747,
        -0.0023279229644685984,
        -0.0030374883208423853,
        -0.003374312771484256,
        -0.0028645561542361975,
        -0.001011769869364798,
        0.00249719456769526,
        0.007561595644801855,
        0.013527690432965755,
        0.0192536860704422,
        0.023411795496940613,
    ],
    [
        3.893832367651839e-09,
        -0.0009870441863313317,
        -0.0017122653080150485,
        -0.002014860976487398,
        -0.0018854873487725854,
        -0.0014473552582785487,
        -0.0008862002287060022,
        -0.00037103219074197114,
        -2.7420505830377806e-06,
        0.0001954088656930253,
        0.0002554585807956755,
        0.00023149093613028526,
        0.00017311798001173884,
        0.00011292069393675774,
        6.588006363017485e-05,
        3.485376510070637e-05,
        -1.6859507013577968e-05,
        -3.4849803341785446e-05,
        -6.587553798453882e-05,
        -0.00011291688861092553,
        -0.00017311675765085965,
        -0.0002314940793439746,
        -0.0002554666134528816,
        -0.00019542027439456433,
        2.7305272851663176e-06,
        0.00037102357600815594,
        0.0008861946989782155,
        0.0014473478076979518,
        0.0018854697700589895,
        0.002014824654906988,
        0.0017122061690315604,
        0.0009869633940979838,
    ],
    [
        -0.0002589509531389922,
        -0.00022565617109648883,
        -0.00013391826360020787,
        -2.0033530745422468e-05,
        7.74857762735337e-05,
        0.00013275355740915984,
        0.00014052064216230065,
        0.00011310648551443592,
        7.050025305943564e-05,
        3.029964500456117e-05,
        2.2238898509385763e-06,
        -1.2042359230690636e-05,
        -1.5794998034834862e-05,
        -1.3728751582675613e-05,
        -9.715959095046856e-06,
        -5.9511321524041705e-06,
        -3.1867543839325663e-06,
        -5.8695477491710335e-06,
        -9.619281627237797e-06,
        -1.3650265827891417e-05,
        -1.5796724255778827e-05,
        -1.2197871910757385e-05,
        1.8548163325249334e-06,
        2.9725728381890804e-05,
        6.983578350627795e-05,
        0.00011256559082539752,
        0.00014034945343155414,
        0.00013311977090779692,
        7.837754674255848e-05,
        -1.8839349650079384e-05,
        -0.00013279321137815714,
        -0.0002249864483019337,
    ],
];

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{HI, LO, x86};
    use crate::backend::cpu::fused::chunk::bf16_bits;
    use crate::backend::cpu::fused::lut::Table16;
    use core::arch::x86_64::_mm_sfence;

    /// The AVX-512 level's table: `vmath::gelu`'s AVX-512 kernel on every bf16 input,
    /// rounded to bf16.
    fn table() -> Box<[u16; 1 << 16]> {
        let mut v: Vec<f32> = (0..=0xFFFFu32).map(|x| f32::from_bits(x << 16)).collect();
        // SAFETY: only called where AVX-512F, AVX2 and FMA are detected.
        unsafe { crate::backend::cpu::vmath::gelu_simd::avx512(&mut v) };
        let t: Vec<u16> = v.iter().map(|x| bf16_bits(*x) as u16).collect();
        t.into_boxed_slice().try_into().unwrap()
    }

    fn avx512() -> bool {
        let has = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        if !has {
            eprintln!("not run: this CPU lacks AVX-512F, AVX2 or FMA");
        }
        has
    }

    /// `v` in a seeded random order.
    fn shuffled(v: Vec<u16>) -> Vec<u16> {
        shuffled_by(v, 0x9E37_79B9_7F4A_7C15)
    }

    /// `v` in the random order of seed `z` (not 0).
    fn shuffled_by(mut v: Vec<u16>, mut z: u64) -> Vec<u16> {
        for i in (1..v.len()).rev() {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            v.swap(i, (z % (i as u64 + 1)) as usize);
        }
        v
    }

    /// Runs `run` (input, output) on each input order in `orders` from every offset 0..32
    /// (each input in every lane) and checks every output against `want` of its input;
    /// `ctx` (a seed) goes into the failure message.
    fn each_offset(
        orders: [&[u16]; 2],
        want: impl Fn(u16) -> u16,
        ctx: &str,
        run: impl Fn(&[u16], &mut [u16]),
    ) {
        for s in orders {
            for off in 0..32 {
                let s = &s[off..];
                let mut o = vec![0u16; s.len()];
                run(s, &mut o);
                for (x, y) in s.iter().zip(&o) {
                    assert_eq!(*y, want(*x), "input {x:#06x}, offset {off}{ctx}");
                }
            }
        }
    }

    /// Runs a streamed variant `run` (input, output, `far`) on each input order in `orders`
    /// with the output starting at every 2-byte offset of a 64-byte line (plain head,
    /// streamed lines, plain tail) and the input at other offsets, at lengths `0..=96`,
    /// `extra`, all but 33 and all (odd lengths with the prefetch past the cache, `far`),
    /// the output first filled with `fill`; fences the stores and checks every output
    /// against `want` of its input.
    fn each_stream_offset(
        orders: [&[u16]; 2],
        want: impl Fn(u16) -> u16,
        extra: &[usize],
        fill: u16,
        ctx: &str,
        run: impl Fn(&[u16], &mut [u16], bool),
    ) {
        let mut o = vec![0u16; (1 << 16) + 64];
        for s in orders {
            for off in 0..32 {
                let s = &s[(off * 7) % 32..];
                let lens = (0..=96)
                    .chain(extra.iter().copied())
                    .chain([s.len() - 33, s.len()]);
                for n in lens {
                    let o = &mut o[off..off + n];
                    o.fill(fill);
                    run(&s[..n], o, n % 2 == 1);
                    // SAFETY: SSE is part of x86_64.
                    unsafe { _mm_sfence() };
                    for (x, y) in s.iter().zip(o.iter()) {
                        assert_eq!(*y, want(*x), "input {x:#06x}, offset {off}, {n}{ctx}");
                    }
                }
            }
        }
    }

    /// Every one of the 65 536 inputs, in order and in a shuffled order, from every offset
    /// 0..32, gives the table's bits. About a quarter of the inputs are left to the table
    /// (below the range, NaN), so many blocks here are looked up whole and the polynomial's
    /// lanes are proven by [`the_polynomial_decides_most_lanes`].
    #[test]
    fn every_bf16_input_gives_the_tables_bits() {
        if !avx512() {
            return;
        }
        let t = table();
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let shuffled = shuffled(all.clone());
        each_offset(
            [&all, &shuffled],
            |x| t[x as usize],
            "",
            |s, o| {
                // SAFETY: AVX-512F, AVX2 and FMA detected.
                unsafe { x86::gelu(&t, s, o) }
            },
        );
    }

    /// The streamed variant gives the table's bits for every input, in order and shuffled,
    /// with the output starting at every 2-byte offset of a 64-byte line (plain head, streamed
    /// lines, plain tail) and the input at other offsets, at lengths `0..=96` and all 65 536
    /// (odd lengths with the prefetch of data past the cache, `far`, even ones without);
    /// its lines left to the table (inputs mostly outside the range, in order) take the
    /// whole-block lookup too.
    #[test]
    fn streamed_outputs_give_the_tables_bits() {
        if !avx512() {
            return;
        }
        let t = table();
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let shuffled = shuffled(all.clone());
        let want = |x: u16| t[x as usize];
        each_stream_offset([&all, &shuffled], want, &[], 0x7FC1, "", |s, o, far| {
            // SAFETY: AVX-512F, AVX2 and FMA detected; the helper fences.
            unsafe { x86::gelu_stream(&t, s, o, far) }
        });
    }

    /// The polynomial decides the lanes: with a table of a value gelu never gives
    /// (`0x7FC1`, a NaN), all but the lanes left to the table still get the true bits, from
    /// each of the 32 offsets (so every input meets every lane), and those left are few:
    /// under 1 % of the inputs in the polynomial's range (shuffled: in order,
    /// the half of the bf16 subnormals whose `gelu` is a bf16 midpoint fill blocks that are
    /// then looked up whole) and of standard-normal ones.
    #[test]
    fn the_polynomial_decides_most_lanes() {
        if !avx512() {
            return;
        }
        let t = table();
        let poison = Box::new([0x7FC1u16; 1 << 16]);
        let count = |s: &[u16]| {
            let mut o = vec![0u16; s.len()];
            // SAFETY: AVX-512F, AVX2 and FMA detected.
            unsafe { x86::gelu(&poison, s, &mut o) };
            let mut left = 0;
            for (x, y) in s.iter().zip(&o) {
                if *y == 0x7FC1 {
                    left += 1;
                } else {
                    assert_eq!(*y, t[*x as usize], "input {x:#06x}");
                }
            }
            left
        };
        let range: Vec<u16> = shuffled(
            (0..=0xFFFFu16)
                .filter(|x| (LO..HI).contains(&f32::from_bits(u32::from(*x) << 16)))
                .collect(),
        );
        for off in 0..32 {
            let s = &range[off..];
            let left = count(s);
            assert!(
                left > 0 && left < s.len() / 100,
                "{left} of {} from offset {off}",
                s.len()
            );
        }
        let normal: Vec<u16> = crate::Tensor::<crate::bf16>::randn(&[1 << 16], 11)
            .to_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let left = count(&normal);
        assert!(left < (1 << 16) / 100, "{left}");
    }

    /// A table of random bits (seeded from the clock, printed on failure) and the seed.
    fn random_table() -> (Box<Table16>, u64) {
        let seed = crate::backend::cpu::clock_seed() | 1;
        let mut z = seed;
        let t: Vec<u16> = (0..1 << 16)
            .map(|_| {
                z ^= z << 13;
                z ^= z >> 7;
                z ^= z << 17;
                (z >> 24) as u16
            })
            .collect();
        (Table16::new(&t), seed)
    }

    /// The gather path ([`x86::gather`], taken where `gather_tuned`) gives the table's entry for
    /// every one of the 65 536 inputs, in order and in a random order, from every offset 0..32
    /// (each input in every lane, among them `0` and `0xFFFF`, whose 4-byte reads take a spare
    /// entry of [`Table16`], and the scalar tail), with gelu's table and with a table of random
    /// bits.
    #[test]
    fn gather_gives_the_tables_bits() {
        if !avx512() {
            return;
        }
        let (r, seed) = random_table();
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let mixed = shuffled_by(all.clone(), seed);
        let ctx = format!(", seed {seed}");
        for t in [&Table16::new(&table()[..]), &r] {
            each_offset(
                [&all, &mixed],
                |x| t[x as usize],
                &ctx,
                |s, o| {
                    // SAFETY: AVX-512F detected.
                    unsafe { x86::gather(t, s, o) }
                },
            );
        }
    }

    /// The streamed gather path ([`x86::gather_stream`]) gives the table's entry (random
    /// bits) for every input, in order and in a random order, with the output starting at
    /// every 2-byte offset of a 64-byte line (plain head, streamed lines, plain tail) and the
    /// input at other offsets, at lengths `0..=96` and all 65 536 (odd lengths with the
    /// prefetch, `far`).
    #[test]
    fn streamed_gather_gives_the_tables_bits() {
        if !avx512() {
            return;
        }
        let (t, seed) = random_table();
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let mixed = shuffled_by(all.clone(), seed);
        let ctx = format!(", seed {seed}");
        let want = |x: u16| t[x as usize];
        each_stream_offset([&all, &mixed], want, &[], !t[0], &ctx, |s, o, far| {
            // SAFETY: AVX-512F detected; the helper fences.
            unsafe { x86::gather_stream(&t, s, o, far) }
        });
    }

    /// The mixed path ([`x86::mixed`], taken where `gather_tuned`: computed and gathered steps)
    /// gives the table's bits for every one of the 65 536 inputs, in order and in a random order,
    /// from every offset 0..32 (each input in every lane of both kinds of step, the whole-round
    /// gathers after many undecided lanes, and the tails); and with a poisoned table the computed
    /// steps still give the true bits: about a third of standard-normal inputs (the other two
    /// thirds, gathered, read the poison).
    #[test]
    fn mixed_gives_the_tables_bits() {
        if !avx512() {
            return;
        }
        let t = Table16::new(&table()[..]);
        let seed = crate::backend::cpu::clock_seed() | 1;
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let mixed = shuffled_by(all.clone(), seed);
        let ctx = format!(", seed {seed}");
        each_offset(
            [&all, &mixed],
            |x| t[x as usize],
            &ctx,
            |s, o| {
                // SAFETY: AVX-512F, AVX2 and FMA detected.
                unsafe { x86::mixed(&t, s, o) }
            },
        );
        let poison = Table16::new(&[0x7FC1u16; 1 << 16]);
        let normal: Vec<u16> = crate::Tensor::<crate::bf16>::randn(&[1 << 16], seed)
            .to_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let mut o = vec![0u16; normal.len()];
        // SAFETY: AVX-512F, AVX2 and FMA detected.
        unsafe { x86::mixed(&poison, &normal, &mut o) };
        let mut right = 0;
        for (x, y) in normal.iter().zip(&o) {
            if *y != 0x7FC1 {
                assert_eq!(*y, t[*x as usize], "input {x:#06x}, seed {seed}");
                right += 1;
            }
        }
        assert!(
            right > normal.len() * 3 / 10,
            "{right} computed, seed {seed}"
        );
    }

    /// The streamed mixed path ([`x86::mixed_stream`]) gives the table's bits for every
    /// input, in order and in a random order, with the output starting at every 2-byte
    /// offset of a 64-byte line and the input at other offsets, at lengths `0..=96`, 400
    /// (two rounds and a tail) and all 65 536 (odd lengths with the prefetch, `far`).
    #[test]
    fn streamed_mixed_gives_the_tables_bits() {
        if !avx512() {
            return;
        }
        let t = Table16::new(&table()[..]);
        let seed = crate::backend::cpu::clock_seed() | 1;
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let mixed = shuffled_by(all.clone(), seed);
        let ctx = format!(", seed {seed}");
        let want = |x: u16| t[x as usize];
        each_stream_offset([&all, &mixed], want, &[400], 0x7FC1, &ctx, |s, o, far| {
            // SAFETY: AVX-512F, AVX2 and FMA detected; the helper fences.
            unsafe { x86::mixed_stream(&t, s, o, far) }
        });
    }
}
