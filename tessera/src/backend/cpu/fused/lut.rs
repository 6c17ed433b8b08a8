//! Tables of a direct unary chain ([`super::plan::Group::direct`]) over every bf16 input: a
//! bf16 value has 65 536 bit patterns, so the chain's result for each (the f32 bits stored to
//! an f32 output, or the bf16 bits stored to a bf16 one) is computed once per plan, by the
//! same steps the chunk loop runs on the widened values, and a launch looks each input up.
//! The results are the chunk loop's bit for bit, whatever the ops cost per element. Plain
//! loads on AMD: `vpgatherdd` measured slower on an AMD EPYC of family 26 (Zen 5) (gelu bf16
//! `[4096, 1024]` into a kept output, one thread: 1.21 ms with 16-lane gathers, 1.10 with
//! 8-lane ones, 0.91 with one scalar load per element); at the AVX-512 level of the Intel
//! CPUs where `gelubf16::gather_tuned`, 16-lane gathers for every table
//! (`gelubf16::gathers`: [`look_f32`] here, `gelubf16::look` for bf16 outputs).
//! At the AVX-512 level a bf16 → bf16 `gelu` is computed instead on AMD
//! ([`super::gelubf16`]: a piecewise polynomial), with its table giving the lanes the
//! polynomial leaves undecided; elsewhere two of every six steps of 32 are computed so and
//! the other four looked up by 16-lane `vpgatherdd` (on the Intel Xeon of sessions 17-20
//! the gathers cost less than the polynomial and overlap with it: gb20).

use super::chunk::{self, bf16_bits};
use super::plan::DirectStep;
use std::sync::OnceLock;

/// The tables of one chain (f32 output, bf16 output) per SIMD level, each built on first use
/// at that level: `vmath` computes with separate multiplies and adds at the portable level
/// and with FMA above it, so one input's result may differ between levels in its last bit.
#[derive(Clone, Default)]
pub(crate) struct Lut {
    f32: [OnceLock<Box<[u32; 1 << 16]>>; 3],
    bf16: [OnceLock<Box<Table16>>; 3],
}

/// A bf16 output's table ([`Lut::bf16`]): its 65 536 entries (by `Deref`) with one spare
/// entry (0) before and one after, so that a 4-byte read starting or ending at any entry
/// stays inside it: `gelubf16`'s gathers read so, unmasked ([`Table16::base`]).
#[repr(transparent)]
pub(crate) struct Table16([u16; (1 << 16) + 2]);

impl Table16 {
    /// The table of the 65 536 entries `t`.
    pub(crate) fn new(t: &[u16]) -> Box<Self> {
        assert_eq!(t.len(), 1 << 16);
        let mut v = vec![0u16; (1 << 16) + 2];
        v[1..(1 << 16) + 1].copy_from_slice(t);
        let b: Box<[u16; (1 << 16) + 2]> = v.into_boxed_slice().try_into().expect("65 538");
        // SAFETY: `Table16` is `repr(transparent)` over that array.
        unsafe { Box::from_raw(Box::into_raw(b) as *mut Self) }
    }

    /// Entry 0's address, from which the spare entries either side may be read too.
    pub(crate) fn base(&self) -> *const u16 {
        self.0.as_ptr().wrapping_add(1)
    }
}

impl Clone for Box<Table16> {
    fn clone(&self) -> Self {
        Table16::new(&self[..])
    }
}

impl std::ops::Deref for Table16 {
    type Target = [u16; 1 << 16];
    fn deref(&self) -> &[u16; 1 << 16] {
        self.0[1..(1 << 16) + 1].try_into().expect("65 536")
    }
}

impl std::fmt::Debug for Lut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = self.f32.each_ref().map(|t| t.get().is_some());
        let b = self.bf16.each_ref().map(|t| t.get().is_some());
        write!(f, "Lut {{ f32: {a:?}, bf16: {b:?} }}")
    }
}

/// The active SIMD level's index in [`Lut`]'s arrays.
fn level() -> usize {
    use crate::backend::cpu::simd::{SimdLevel, active};
    match active() {
        SimdLevel::Portable => 0,
        SimdLevel::Avx2 => 1,
        _ => 2,
    }
}

/// Runs `ops` in place over `v` (what the chunk loop runs on a widened chunk).
pub(crate) fn steps(ops: &[DirectStep], v: &mut [f32]) {
    for op in ops {
        match op {
            DirectStep::Unary(u) => chunk::unary(*u, v),
            DirectStep::Round => chunk::round_bf16_slice(v),
        }
    }
}

/// `ops` over every bf16 value, widened, in bit-pattern order.
fn all(ops: &[DirectStep]) -> Vec<f32> {
    let mut v: Vec<f32> = (0..=0xFFFFu32).map(|x| f32::from_bits(x << 16)).collect();
    steps(ops, &mut v);
    v
}

impl Lut {
    /// The table of `ops` at the active level for an f32 output: entry `x` holds the result's
    /// f32 bits for the bf16 input bits `x`.
    pub fn f32(&self, ops: &[DirectStep]) -> &[u32; 1 << 16] {
        self.f32[level()].get_or_init(|| {
            let v: Box<[u32]> = all(ops).iter().map(|x| x.to_bits()).collect();
            v.try_into().expect("65 536 entries")
        })
    }

    /// The table of `ops` at the active level for a bf16 output: entry `x` holds the result
    /// narrowed ([`bf16_bits`]) for the bf16 input bits `x`.
    pub fn bf16(&self, ops: &[DirectStep]) -> &Table16 {
        self.bf16[level()].get_or_init(|| {
            let v: Vec<u16> = all(ops).iter().map(|x| bf16_bits(*x) as u16).collect();
            Table16::new(&v)
        })
    }
}

/// `o[i] = t[s[i]]` over `o.len()` elements (`s` at least as long): four at a time through
/// one 64-bit load and store.
#[inline(always)]
pub(crate) fn look_u16(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) {
    let n = o.len();
    let s = &s[..n];
    let (o4, ot) = o.split_at_mut(n / 4 * 4);
    let (s4, st) = s.split_at(n / 4 * 4);
    for (o, s) in o4.chunks_exact_mut(4).zip(s4.chunks_exact(4)) {
        let x =
            u64::from(s[0]) | u64::from(s[1]) << 16 | u64::from(s[2]) << 32 | u64::from(s[3]) << 48;
        let at = |k: u32| u64::from(t[(x >> k) as u16 as usize]) << k;
        let y = at(0) | at(16) | at(32) | at(48);
        o.copy_from_slice(&[
            y as u16,
            (y >> 16) as u16,
            (y >> 32) as u16,
            (y >> 48) as u16,
        ]);
    }
    for (o, x) in ot.iter_mut().zip(st) {
        *o = t[*x as usize];
    }
}

/// `o[i] = t[s[i]]` as f32 bits over `o.len()` elements (`s` at least as long): 16 lanes per
/// `vpgatherdd` where [`super::gelubf16::gathers`] ([`x86::look_f32`]), else one load per
/// element.
#[inline(always)]
pub(crate) fn look_f32(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::gelubf16::gathers() {
        let n = o.len();
        // SAFETY: AVX-512F is present at this level; `s` holds at least `n`.
        return unsafe { x86::look_f32(t, &s[..n], o) };
    }
    look_f32_each(t, s, o)
}

/// [`look_f32`] into an output whose whole 64-byte lines take streaming stores, from the
/// gathering loop itself ([`x86::look_f32_stream`]) where [`super::gelubf16::gathers`];
/// returns `false` (nothing written) otherwise.
///
/// On the 2-vCPU Intel Xeon KVM guest (family 6 model 207), `RAYON_NUM_THREADS=T chrt -f 50
/// cpu_profile sigmoid_bf16_f32 R C 150 --pool`, 2026-11-28 18:56–19:02 UTC (load 3.7–3.9: two
/// helpers' builds), interleaved, fastest launch in µs (ratio to the printed memcpy), loads →
/// gathers into an L1 piece and a streaming copy → gathers streamed from the loop: one
/// thread `[4096, 1024]` 1549–2174 (0.45–0.64) → 1305–1952 (0.51–0.76) → 1020–1372
/// (0.75–1.00), `[1024, 4096]` 1523–2450 (0.43–0.63) → 1236–1391 (0.73–0.77) → 906–1294
/// (0.80–1.02); two threads (outputs under 3/4 of the LLC are not streamed there) `[4096,
/// 1024]` 567–757 (0.72–0.84) → 487–698 (0.71–1.01), `[1024, 4096]` 565–818 (0.69–0.85) →
/// 479–680 (0.82–0.96).
///
/// # Safety
/// The caller orders the streaming stores (`sfence`, [`super::stream::fence`]) before `o` is
/// read by anyone else.
#[inline(always)]
pub(crate) unsafe fn look_f32_stream(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if super::gelubf16::gathers() {
        let n = o.len();
        // SAFETY: AVX-512F is present at this level; `s` holds at least `n`; the caller
        // fences.
        unsafe { x86::look_f32_stream(t, &s[..n], o) };
        return true;
    }
    let _ = (t, s, o);
    false
}

/// [`look_u16`] into an output whose whole 64-byte lines take streaming stores, from the
/// lookup loop itself ([`x86::look_u16_stream`]: each step's 32 results built by one load per
/// element in a 64-byte local, then one `vmovntdq`; no input prefetch: measured no faster);
/// on a Zen 4 (AMD family 0x19, [`crate::backend::cpu::simd::is_zen4`]) at the AVX-512 level
/// only; returns `false` (nothing written) otherwise.
///
/// On the 2-vCPU AMD EPYC KVM guest (family 25 model 17, Zen 4), `RAYON_NUM_THREADS=T chrt -f
/// 50 cpu_profile K R C N --pool`, 2026-11-28 23:10–23:12 UTC (load 5.9–7.0: two helpers'
/// and the lead's builds), interleaved with the base build (a362c42) and this build with the
/// path off (a temporary `TESSERA_LUT_STREAM=0` switch, since removed), fastest launch in µs, base / off → streamed: one thread
/// `[8192, 4096]` tanh bf16 9517–9732 / 9545–10012 → 7944–10106 (three of four ≤ 8908; the
/// cache-resident lookup rate, ≈ 8.4 ms for 32 Mi elements, is this row's ceiling now),
/// sigmoid bf16 → f32 9554–9698 / 9806–10102 → 8409–8522; two threads `[8192, 4096]` tanh
/// 4879–7661 → 4106–4132, sigmoid 4974–5109 → 4347–4413; one thread `[4096, 1024]` and
/// `[1024, 4096]` (streamed too on one thread): tanh 1044–1093 / 1047–1101 → 1050–1096
/// (unchanged), sigmoid 1126–1141 / 1134–1171 → 1042–1080. Tried and dropped: asking for the
/// input ahead past the LLC (`_MM_HINT_T0`, 23:26–23:28 UTC, load 5.0–5.4, one thread `[8192,
/// 4096]` tanh, four rounds): 2048 elements ahead 8106–8174 µs, 8192 7990–8124, 32768
/// 7946–8328, none (the line in use) 7910–8087. Zen 5 and Intel keep their paths (not
/// measured here: the gate is the CPU family).
///
/// # Safety
/// The caller orders the streaming stores (`sfence`, [`super::stream::fence`]) before `o` is
/// read by anyone else.
#[inline(always)]
pub(crate) unsafe fn look_u16_stream(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if zen4_streamed() {
        let n = o.len();
        // SAFETY: AVX-512F is present at this level; `s` holds at least `n`; the caller
        // fences.
        unsafe { x86::look_u16_stream(t, &s[..n], o) };
        return true;
    }
    let _ = (t, s, o);
    false
}

/// [`look_f32_each`] into an output whose whole 64-byte lines take streaming stores, from the
/// lookup loop itself ([`x86::look_f32_each_stream`]), as [`look_u16_stream`] (Zen 4 only;
/// measured there); returns `false` (nothing written) otherwise.
///
/// # Safety
/// As [`look_u16_stream`].
#[inline(always)]
pub(crate) unsafe fn look_f32_each_stream(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if zen4_streamed() {
        let n = o.len();
        // SAFETY: as [`look_u16_stream`].
        unsafe { x86::look_f32_each_stream(t, &s[..n], o) };
        return true;
    }
    let _ = (t, s, o);
    false
}

/// Whether [`look_u16_stream`] and [`look_f32_each_stream`] stream from the lookup loop: a
/// Zen 4 at the AVX-512 level.
#[cfg(target_arch = "x86_64")]
fn zen4_streamed() -> bool {
    use crate::backend::cpu::simd::{SimdLevel, active, is_zen4};
    active() == SimdLevel::Avx512 && is_zen4()
}

/// [`look_f32`] by one load per element.
#[inline(always)]
fn look_f32_each(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) {
    for (o, x) in o.iter_mut().zip(s) {
        *o = f32::from_bits(t[*x as usize]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    /// [`super::look_f32`] by 16-lane `vpgatherdd`: each step one [`gather16`], stored as 16
    /// floats;
    /// the last `< 16` elements by one load each. Every index is below `2^16`, inside `t`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `s.len() == o.len()`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn look_f32(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: `i + 16 <= n` elements of `s` and `o`.
            unsafe {
                _mm512_storeu_si512(o.as_mut_ptr().add(i).cast(), gather16(t, s.as_ptr().add(i)))
            };
            i += 16;
        }
        super::look_f32_each(t, &s[i..], &mut o[i..]);
    }

    /// The entries of `t` at the 16 input words from `s` (`vpmovzxwd` into the indices of one
    /// `vpgatherdd` of 4-byte entries; every index is a `u16`, inside `t`).
    ///
    /// # Safety
    /// AVX-512F present (the caller is built with it); `s` readable for 16 elements.
    #[inline(always)]
    unsafe fn gather16(t: &[u32; 1 << 16], s: *const u16) -> __m512i {
        // SAFETY: the caller's contract.
        unsafe {
            let w = _mm256_loadu_si256(s.cast());
            _mm512_i32gather_epi32::<4>(_mm512_cvtepu16_epi32(w), t.as_ptr() as *const i32)
        }
    }

    /// [`look_f32`] with the whole 64-byte lines of `o` written by `vmovntdq`: plain
    /// ([`look_f32`]) up to the first 64-byte boundary of `o` and for the last `< 16`
    /// elements.
    ///
    /// # Safety
    /// As [`look_f32`]; the caller orders the streaming stores (`sfence`) before `o` is read
    /// elsewhere.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn look_f32_stream(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let h = o.as_ptr().align_offset(64).min(n);
        let end = h + (n - h) / 16 * 16;
        // SAFETY: as this function's.
        unsafe { look_f32(t, &s[..h], &mut o[..h]) };
        let mut i = h;
        while i < end {
            // SAFETY: `i + 16 <= end <= n`; `o[i]` is 64-byte aligned (`h`, steps of 16); the
            // caller fences.
            unsafe {
                _mm512_stream_si512(o.as_mut_ptr().add(i).cast(), gather16(t, s.as_ptr().add(i)))
            };
            i += 16;
        }
        // SAFETY: as this function's.
        unsafe { look_f32(t, &s[end..], &mut o[end..]) };
    }

    /// [`super::look_u16_stream`]: [`super::look_u16`] up to the first 64-byte boundary of `o`
    /// and for the last `< 32` elements, one `vmovntdq` of 32 looked-up entries between.
    ///
    /// # Safety
    /// AVX-512F present; `s.len() == o.len()`; the caller fences.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn look_u16_stream(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let h = o.as_ptr().align_offset(64).min(n);
        let end = h + (n - h) / 32 * 32;
        super::look_u16(t, &s[..h], &mut o[..h]);
        let mut w = [0u16; 32];
        let mut i = h;
        while i < end {
            super::look_u16(t, &s[i..i + 32], &mut w);
            // SAFETY: `i + 32 <= end <= n`; `o[i]` is 64-byte aligned (`h`, steps of 32); the
            // caller fences.
            unsafe {
                _mm512_stream_si512(
                    o.as_mut_ptr().add(i).cast(),
                    _mm512_loadu_si512(w.as_ptr().cast()),
                )
            };
            i += 32;
        }
        super::look_u16(t, &s[end..], &mut o[end..]);
    }

    /// [`super::look_f32_each_stream`]: as [`look_u16_stream`] with 16 f32 entries a line.
    ///
    /// # Safety
    /// As [`look_u16_stream`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn look_f32_each_stream(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        let h = o.as_ptr().align_offset(64).min(n);
        let end = h + (n - h) / 16 * 16;
        super::look_f32_each(t, &s[..h], &mut o[..h]);
        let mut w = [0f32; 16];
        let mut i = h;
        while i < end {
            super::look_f32_each(t, &s[i..i + 16], &mut w);
            // SAFETY: `i + 16 <= end <= n`; `o[i]` is 64-byte aligned; the caller fences.
            unsafe {
                _mm512_stream_si512(
                    o.as_mut_ptr().add(i).cast(),
                    _mm512_loadu_si512(w.as_ptr().cast()),
                )
            };
            i += 16;
        }
        super::look_f32_each(t, &s[end..], &mut o[end..]);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{look_f32_each, look_u16, x86};

    /// A xorshift generator seeded from `seed` (fresh bits for the tables).
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut z = seed | 1;
        move || {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            z
        }
    }

    /// A 65 536-entry table of `next`'s bits, each narrowed by `f`.
    fn table<T: std::fmt::Debug>(
        next: &mut impl FnMut() -> u64,
        f: impl Fn(u64) -> T,
    ) -> Box<[T; 1 << 16]> {
        (0..1 << 16)
            .map(|_| f(next()))
            .collect::<Box<[T]>>()
            .try_into()
            .unwrap()
    }

    /// Every one of the 65 536 indices from `start` (an odd stride), and 37 more.
    fn every_index(start: u16) -> Vec<u16> {
        (0..(1 << 16) + 37)
            .map(|j| start.wrapping_add((j as u16).wrapping_mul(40503)))
            .collect()
    }

    /// The Zen 4 streamed lookups ([`x86::look_u16_stream`], [`x86::look_f32_each_stream`],
    /// against [`look_u16`] / [`look_f32_each`]:
    /// tables of fresh random bits, inputs covering every index from a random start, every
    /// length `0..=100` and the whole, the output at every 2-byte (4-byte) offset of a 64-byte
    /// line (plain head, streamed lines, plain tail), its other elements untouched; and on a
    /// Zen 4 at the AVX-512 level the dispatch (`look_u16_stream`, `look_f32_each_stream`)
    /// takes that path.
    #[test]
    fn zen4_streamed_lookups_match_the_plain_ones() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("not run: this CPU lacks AVX-512F");
            return;
        }
        let seed = crate::backend::cpu::clock_seed();
        let mut next = xorshift(seed);
        let t32 = table(&mut next, |b| b as u32);
        let t16 = table(&mut next, |b| b as u16);
        let s = every_index(next() as u16);
        let mut lens: Vec<usize> = (0..=100).collect();
        lens.push(s.len() - 33);
        const BAD: u16 = 0xDEAD;
        for n in lens {
            {
                for off in 0..32 {
                    let mut want = vec![BAD; n + 96];
                    let mut got = want.clone();
                    let at = |v: &Vec<u16>| v.as_ptr().align_offset(64) + off;
                    let (lo, gl) = (at(&want), at(&got));
                    look_u16(&t16, &s[3..3 + n], &mut want[lo..lo + n]);
                    // SAFETY: AVX-512F (checked above); equal lengths; fenced below.
                    unsafe {
                        x86::look_u16_stream(&t16, &s[3..3 + n], &mut got[gl..gl + n]);
                        core::arch::x86_64::_mm_sfence();
                    }
                    assert_eq!(
                        got[gl..gl + n],
                        want[lo..lo + n],
                        "u16 {n} at {off} (seed {seed})"
                    );
                    let untouched = got[..gl].iter().chain(&got[gl + n..]);
                    assert!(untouched.into_iter().all(|x| *x == BAD), "u16 {n} at {off}");
                }
                for off in 0..16 {
                    let mut want = vec![f32::from_bits(0x7FC0_0BAD); n + 48];
                    let mut got = want.clone();
                    let at = |v: &Vec<f32>| v.as_ptr().align_offset(64) + off;
                    let (lo, gl) = (at(&want), at(&got));
                    look_f32_each(&t32, &s[3..3 + n], &mut want[lo..lo + n]);
                    // SAFETY: as above.
                    unsafe {
                        x86::look_f32_each_stream(&t32, &s[3..3 + n], &mut got[gl..gl + n]);
                        core::arch::x86_64::_mm_sfence();
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got[gl..gl + n]),
                        bits(&want[lo..lo + n]),
                        "f32 {n} at {off} (seed {seed})"
                    );
                    let untouched = got[..gl].iter().chain(&got[gl + n..]);
                    assert!(untouched.into_iter().all(|x| x.to_bits() == 0x7FC0_0BAD));
                }
            }
        }
        if crate::backend::cpu::simd::is_zen4()
            && crate::backend::cpu::simd::active() == crate::backend::cpu::simd::SimdLevel::Avx512
        {
            let mut o = vec![0u16; 64];
            let mut f = vec![0f32; 64];
            // SAFETY: fenced below.
            unsafe {
                assert!(super::look_u16_stream(&t16, &s[..64], &mut o));
                assert!(super::look_f32_each_stream(&t32, &s[..64], &mut f));
                core::arch::x86_64::_mm_sfence();
            }
            let mut w = vec![0u16; 64];
            look_u16(&t16, &s[..64], &mut w);
            assert_eq!(o, w, "dispatched u16");
        }
    }

    /// The f32 gathers ([`x86::look_f32`], [`x86::look_f32_stream`]) against one load per
    /// element: a table of fresh random bits (so a wrong index or lane order shows), inputs
    /// covering every one of the 65 536 indices from a random start, every length `0..=70`
    /// and the whole, the output starting at every 4-byte offset of a 64-byte line (the
    /// streamed variant's plain head, whole lines and plain tail), its other elements
    /// untouched.
    #[test]
    fn f32_gathers_match_a_load_per_element() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("not run: this CPU lacks AVX-512F");
            return;
        }
        let seed = crate::backend::cpu::clock_seed();
        let mut next = xorshift(seed);
        let t = table(&mut next, |b| b as u32);
        let s = every_index(next() as u16);
        let mut lens: Vec<usize> = (0..=70).collect();
        lens.push(s.len() - 16);
        for n in lens {
            for off in 0..16 {
                let mut want = vec![f32::from_bits(0x7FC0_0BAD); n + 48];
                let mut plain = want.clone();
                let mut streamed = want.clone();
                // `off` floats past a 64-byte boundary of each buffer (`Vec<f32>` is only
                // 4-byte aligned: the boundary's index `a < 16` differs per allocation).
                let at = |v: &Vec<f32>| v.as_ptr().align_offset(64) + off;
                let (lo, hi) = (at(&want), at(&want) + n);
                assert!(hi <= want.len());
                let (pl, sl) = (at(&plain), at(&streamed));
                look_f32_each(&t, &s[3..3 + n], &mut want[lo..hi]);
                // SAFETY: AVX-512F (checked above); equal lengths; fenced below.
                unsafe {
                    x86::look_f32(&t, &s[3..3 + n], &mut plain[pl..pl + n]);
                    x86::look_f32_stream(&t, &s[3..3 + n], &mut streamed[sl..sl + n]);
                    core::arch::x86_64::_mm_sfence();
                }
                // Each result where it belongs, and nothing written outside `n` elements.
                let bits = |v: &[f32], lo: usize| {
                    let r: Vec<u32> = v[lo..lo + n].iter().map(|x| x.to_bits()).collect();
                    let untouched = v[..lo].iter().chain(&v[lo + n..]);
                    (r, untouched.filter(|x| x.to_bits() != 0x7FC0_0BAD).count())
                };
                let want = bits(&want, lo);
                assert_eq!(want.1, 0);
                assert_eq!(bits(&plain, pl), want, "plain, {n} at {off} (seed {seed})");
                assert_eq!(
                    bits(&streamed, sl),
                    want,
                    "streamed, {n} at {off} (seed {seed})"
                );
            }
        }
    }
}
