//! Tables of a direct unary chain ([`super::plan::Group::direct`]) over every bf16 input: a
//! bf16 value has 65 536 bit patterns, so the chain's result for each (the f32 bits stored to
//! an f32 output, or the bf16 bits stored to a bf16 one) is computed once per plan, by the
//! same steps the chunk loop runs on the widened values, and a launch looks each input up.
//! The results are the chunk loop's bit for bit, whatever the ops cost per element. Plain
//! loads: `vpgatherdd` measured slower on an AMD EPYC of family 26 (Zen 5) (gelu bf16
//! `[4096, 1024]` into a kept output, one thread: 1.21 ms with 16-lane gathers, 1.10 with
//! 8-lane ones, 0.91 with one scalar load per element).
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

/// `o[i] = t[s[i]]` as f32 bits over `o.len()` elements (`s` at least as long).
#[inline(always)]
pub(crate) fn look_f32(t: &[u32; 1 << 16], s: &[u16], o: &mut [f32]) {
    for (o, x) in o.iter_mut().zip(s) {
        *o = f32::from_bits(t[*x as usize]);
    }
}
