//! Tests of the simulator on hand-written PTX (the public API is exercised by the crate and item
//! doctests and `tests/cli.rs`): instruction
//! semantics ([`units`], [`bits`]), planted bugs caught by checkers or comparisons ([`planted`]),
//! performance counters ([`counters`]), `.approx` perturbation ([`approx`]) and one test per
//! instruction family with an ISA-derived reference ([`families`]).

mod approx;
mod bits;
mod counters;
mod families;
mod planted;
mod units;

use crate::{DevicePtr, LaunchConfig, Memory, Module, Options, Param, Report, SimError};

/// Deterministic pseudo-random f32s in `[-r, r]`.
pub(super) fn rand(n: usize, seed: u64, r: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * r
        })
        .collect()
}

/// Deterministic pseudo-random u32s.
pub(super) fn rand_u32(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 16) as u32
        })
        .collect()
}

pub(super) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Allocates `name` and uploads `data`.
pub(super) fn buf(mem: &mut Memory, name: &str, data: &[u8]) -> DevicePtr {
    let p = mem.alloc_named(name, data.len()).unwrap();
    mem.upload(p, data).unwrap();
    p
}

pub(super) fn read_f32(mem: &Memory, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; 4 * n];
    mem.download(p, &mut b).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub(super) fn read_u32(mem: &Memory, p: DevicePtr, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; 4 * n];
    mem.download(p, &mut b).unwrap();
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Parses `text` and launches `entry`.
pub(super) fn launch(
    text: &str,
    entry: &str,
    mem: &mut Memory,
    cfg: LaunchConfig,
    params: &[Param],
    opts: &Options,
) -> Result<Report, SimError> {
    Module::parse(text)?.launch(mem, entry, cfg, params, opts)
}
