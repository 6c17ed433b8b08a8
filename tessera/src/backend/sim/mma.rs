//! `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32` with the exact fragment
//! layouts (FACTS.md §6; `g = lane >> 2`, `t = lane & 3`, element `i` of a register pair is in
//! register `i / 2`, even `i` in the low 16 bits):
//!
//! | operand | element i → (row, col) |
//! |---|---|
//! | A 16×16 | (g + 8·((i>>1)&1), 2t + (i&1) + 8·(i>>2)) |
//! | B 16×8 | (2t + (i&1) + 8·(i>>1), g) |
//! | C/D 16×8 | (g + 8·(i>>1), 2t + (i&1)) |
//!
//! Products of bf16/f16 values are exact in f64; each D element is the f64 sum of its 16
//! products and C, rounded once to f32.

use super::exec::Lanes;
use super::ir::{Opd, Ty};
use half::{bf16, f16};

fn half(ab: Ty, h: u16) -> f64 {
    if ab == Ty::BF16 {
        bf16::from_bits(h).to_f64()
    } else {
        f16::from_bits(h).to_f64()
    }
}

fn regs(o: &Opd) -> &[Opd] {
    match o {
        Opd::Vec(v) => v,
        _ => &[],
    }
}

/// Executes the mma for the whole warp (the caller checked that all 32 lanes execute it).
pub(crate) fn mma_m16n8k16(l: &mut Lanes, args: &[Opd], ab: Ty) {
    let (d, a, b, c) = (
        regs(&args[0]),
        regs(&args[1]),
        regs(&args[2]),
        regs(&args[3]),
    );
    let mut am = [[0f64; 16]; 16];
    let mut bm = [[0f64; 8]; 16];
    let mut cm = [[0f64; 8]; 16];
    for lane in 0..32usize {
        let (g, t) = (lane >> 2, lane & 3);
        for i in 0..8 {
            let v = l.rd(&a[i / 2], lane) >> (16 * (i & 1));
            am[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = half(ab, v as u16);
        }
        for i in 0..4 {
            let v = l.rd(&b[i / 2], lane) >> (16 * (i & 1));
            bm[2 * t + (i & 1) + 8 * (i >> 1)][g] = half(ab, v as u16);
        }
        for i in 0..4 {
            cm[g + 8 * (i >> 1)][2 * t + (i & 1)] = f32::from_bits(l.rd(&c[i], lane) as u32) as f64;
        }
    }
    for lane in 0..32usize {
        let (g, t) = (lane >> 2, lane & 3);
        for i in 0..4 {
            let (r, col) = (g + 8 * (i >> 1), 2 * t + (i & 1));
            let mut s = cm[r][col];
            for k in 0..16 {
                s += am[r][k] * bm[k][col];
            }
            if let Opd::Reg(x) = d[i] {
                l.wr(x, lane, super::convert::bits_f32(s as f32));
            }
        }
    }
}
