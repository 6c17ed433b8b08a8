//! `mma.sync.aligned.m16n8k{K}.row.col.f32.{A}.{B}.f32` with the fragment layouts of the PTX
//! ISA (§9.7.14.5.6–10, read for this implementation; `g = lane >> 2`, `t = lane & 3`;
//! element `i` of a fragment sits in register `i / per_reg`, lower-indexed elements in the low
//! bits):
//!
//! | shape, A/B type | A element i → (row, col) | B element i → (row, col) |
//! |---|---|---|
//! | k16 `.bf16`/`.f16` (A 4 regs, B 2) | (g + 8·((i>>1)&1), 2t + (i&1) + 8·(i>>2)) | (2t + (i&1) + 8·(i>>1), g) |
//! | k8 `.bf16`/`.f16` (A 2 regs, B 1) | (g + 8·(i>>1), 2t + (i&1)) | (2t + i, g) |
//! | k8 `.tf32` (A 4 regs, B 2) | (g + 8·(i&1), t + 4·(i>>1)) | (t + 4·i, g) |
//! | k4 `.tf32` (A 2 regs, B 1) | (g + 8·i, t) | (t, g) |
//! | k32 `.e4m3`/`.e5m2` (A 4 regs, B 2) | (g + 8·((i>>2)&1), 4t + (i&3) + 16·(i>>3)) | (4t + (i&3) + 16·(i>>2), g) |
//!
//! C/D (4 f32 registers) for all: element i → (g + 8·(i>>1), 2t + (i&1)).
//!
//! The ISA leaves accumulation order and rounding unspecified ("at least single precision").
//! The simulator multiplies exactly (every product of these types is exact in f64), sums the
//! K products and C in f64 and rounds once to f32: a GPU's result may differ from it in the
//! last bits of f32. `.tf32` operands are f32 bit patterns of which the low 13 mantissa bits
//! are ignored (the tf32 layout is implementation-defined; round with `cvt.rna.tf32.f32`).

use crate::convert::{bits_f32, fp8_to_f16};
use crate::exec::Lanes;
use crate::module::ir::{Opd, Ty};
use half::{bf16, f16};

/// Registers of the D, A, B, C operands of `mma.m16n8k{k}` with A type `a`.
pub(crate) fn fragment_regs(k: u8, a: Ty) -> [usize; 4] {
    match (k, a) {
        (8, Ty::BF16 | Ty::F16) | (4, _) => [4, 2, 1, 4],
        _ => [4, 4, 2, 4],
    }
}

/// (row, col) of A element `i` held by the lane with group `g`, thread-in-group `t`.
fn a_rc(k: u8, ty: Ty, g: usize, t: usize, i: usize) -> (usize, usize) {
    match (k, ty) {
        (16, _) => (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)),
        (8, Ty::BF16 | Ty::F16) => (g + 8 * (i >> 1), 2 * t + (i & 1)),
        (8, _) => (g + 8 * (i & 1), t + 4 * (i >> 1)),
        (4, _) => (g + 8 * i, t),
        _ => (g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)),
    }
}

/// (row, col) of B element `i`.
fn b_rc(k: u8, ty: Ty, g: usize, t: usize, i: usize) -> (usize, usize) {
    match (k, ty) {
        (16, _) => (2 * t + (i & 1) + 8 * (i >> 1), g),
        (8, Ty::BF16 | Ty::F16) => (2 * t + i, g),
        (8, _) => (t + 4 * i, g),
        (4, _) => (t, g),
        _ => (4 * t + (i & 3) + 16 * (i >> 2), g),
    }
}

/// Bits per element.
fn bits(ty: Ty) -> usize {
    match ty {
        Ty::Tf32 => 32,
        Ty::E4M3 | Ty::E5M2 => 8,
        _ => 16,
    }
}

/// The value of an element's bits.
fn value(ty: Ty, b: u32) -> f64 {
    match ty {
        Ty::BF16 => bf16::from_bits(b as u16).to_f64(),
        Ty::F16 => f16::from_bits(b as u16).to_f64(),
        Ty::Tf32 => f32::from_bits(b & 0xffff_e000) as f64,
        Ty::E4M3 => f16::from_bits(fp8_to_f16(b as u8, true)).to_f64(),
        _ => f16::from_bits(fp8_to_f16(b as u8, false)).to_f64(),
    }
}

fn regs(o: &Opd) -> &[Opd] {
    match o {
        Opd::Vec(v) => v,
        _ => &[],
    }
}

/// Element `i` of a fragment held in `rs` (lane `lane`).
fn element(l: &Lanes, rs: &[Opd], ty: Ty, lane: usize, i: usize) -> f64 {
    let w = bits(ty);
    let per = 32 / w;
    let r = l.rd(&rs[i / per], lane);
    let b = (r >> (w * (i % per))) as u32;
    value(ty, if w == 32 { b } else { b & ((1 << w) - 1) })
}

/// Executes the mma for the whole warp (the caller checked that all 32 lanes execute it).
pub(crate) fn mma(l: &mut Lanes, args: &[Opd], k: u8, at: Ty, bt: Ty) {
    let (d, a, b, c) = (
        regs(&args[0]),
        regs(&args[1]),
        regs(&args[2]),
        regs(&args[3]),
    );
    let kk = k as usize;
    let mut am = [[0f64; 32]; 16];
    let mut bm = [[0f64; 8]; 32];
    let mut cm = [[0f64; 8]; 16];
    for lane in 0..32usize {
        let (g, t) = (lane >> 2, lane & 3);
        for i in 0..kk / 2 {
            let (r, col) = a_rc(k, at, g, t, i);
            am[r][col] = element(l, a, at, lane, i);
        }
        for i in 0..kk / 4 {
            let (r, col) = b_rc(k, bt, g, t, i);
            bm[r][col] = element(l, b, bt, lane, i);
        }
        for (i, ci) in c.iter().enumerate() {
            cm[g + 8 * (i >> 1)][2 * t + (i & 1)] = f32::from_bits(l.rd(ci, lane) as u32) as f64;
        }
    }
    for lane in 0..32usize {
        let (g, t) = (lane >> 2, lane & 3);
        for (i, di) in d.iter().enumerate() {
            let (r, col) = (g + 8 * (i >> 1), 2 * t + (i & 1));
            let mut s = cm[r][col];
            for (x, row) in am[r][..kk].iter().zip(&bm[..kk]) {
                s += x * row[col];
            }
            if let Opd::Reg(x) = *di {
                l.wr(x, lane, bits_f32(s as f32));
            }
        }
    }
}
