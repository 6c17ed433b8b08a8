//! The f32 main loop on FFMA (no tensor cores): exact f32 products and sums, so results meet
//! an f32 tolerance (tf32 `mma` would round inputs to a 10-bit mantissa, ~1e-3 relative).
//!
//! Thread `t` owns a `tm × tn` micro-tile (rows `tr·tm ..`, columns `tc·tn ..`). Shared memory
//! holds A transposed (`[bk][bm]`, k-major) and B as is (`[bk][bn]`), so every k step reads
//! `tm` A values and `tn` B values with `ld.shared.v4.f32` and issues `tm · tn` `fma.rn.f32`.
//! The copies are 4-byte `cp.async.ca` per element (see `copy::tile32`).

use super::copy;
use super::ctx::Ctx;
use super::epilogue::Frame;
use super::layout::MicroTiling;
use super::mma::MainLoop;
use crate::target::ptx::asm::{Asm, Reg, flit, list};

/// Emits the FFMA K loop; returns the accumulator frame.
pub(super) fn emit(cx: &mut Ctx, m: &MainLoop, mt: MicroTiling) -> Frame {
    let (a_stage, b_stage) = (m.bm * m.bk * 4, m.bk * m.bn * 4);
    let b_region = a_stage * m.stages as usize;
    let smem = cx.smem;
    let a = &mut cx.asm;
    a.phase(format!(
        "thread micro-tile {}x{} (threads {} along N)",
        mt.tm, mt.tn, mt.tcols
    ));
    let tc = a.r_op("and.b32", cx.tid, mt.tcols - 1);
    let tr = a.r_op("shr.u32", cx.tid, mt.tcols.trailing_zeros());
    let a_thr = a.r();
    a.i(format!("mad.lo.s32 {a_thr}, {tr}, {}, {smem}", mt.tm * 4));
    let b_thr = a.r();
    a.i(format!("mad.lo.s32 {b_thr}, {tc}, {}, {smem}", mt.tn * 4));
    a.i(format!("add.s32 {b_thr}, {b_thr}, {b_region}"));
    a.phase(format!("accumulators: {} f32 per thread", mt.tm * mt.tn));
    let init = flit(m.acc_init as f32);
    let mut acc: Vec<Vec<Reg>> = Vec::new();
    for _ in 0..mt.tm {
        let mut row = Vec::new();
        for _ in 0..mt.tn {
            let f = a.f();
            a.i(format!("mov.f32 {f}, {init}"));
            row.push(f);
        }
        acc.push(row);
    }

    let mut load = |cx: &mut Ctx, tile: Reg, stage: Reg| {
        let a = &mut cx.asm;
        a.comment(format!(
            "copy K tile {tile} into stage {stage}: A^T {}x{} and B {}x{}",
            m.bk, m.bm, m.bk, m.bn
        ));
        let s = copy::stage_copy(cx, m, tile, stage, (a_stage, b_stage));
        copy::tile32(cx, s.a_dst, m.bm, m.bk, (4, m.bm * 4), &s.a);
        copy::tile32(cx, s.b_dst, m.bk, m.bn, (m.bn * 4, 4), &s.b);
    };
    let mut compute = |cx: &mut Ctx, stage: Reg| {
        let a = &mut cx.asm;
        a.comment(format!(
            "compute stage {stage}: {} k steps of {} fma",
            m.bk,
            mt.tm * mt.tn
        ));
        let sa = a.r();
        a.i(format!("mad.lo.s32 {sa}, {stage}, {a_stage}, {a_thr}"));
        let sb = a.r();
        a.i(format!("mad.lo.s32 {sb}, {stage}, {b_stage}, {b_thr}"));
        for k in 0..m.bk {
            let av = vec_load(a, sa, k * m.bm * 4, mt.tm);
            let bv = vec_load(a, sb, k * m.bn * 4, mt.tn);
            for (i, x) in av.iter().enumerate() {
                for (j, y) in bv.iter().enumerate() {
                    let c = &acc[i][j];
                    a.i(format!("fma.rn.f32 {c}, {x}, {y}, {c}"));
                }
            }
        }
    };
    super::pipeline::emit(cx, m.stages, m.kt_count, &mut load, &mut compute);

    let a = &mut cx.asm;
    a.phase("accumulator coordinates (row tr*tm + i, col tc*tn + j)");
    let r0 = a.r_op("mul.lo.s32", tr, mt.tm);
    let c0 = a.r_op("mul.lo.s32", tc, mt.tn);
    let rows = (0..mt.tm).map(|i| a.r_op("add.s32", r0, i)).collect();
    let cols = (0..mt.tn).map(|j| a.r_op("add.s32", c0, j)).collect();
    Frame { rows, cols, acc }
}

/// `n` consecutive f32 from shared `[base + off]`, as v4/v2/scalar loads.
fn vec_load(a: &mut Asm, base: Reg, off: usize, n: usize) -> Vec<Reg> {
    let w = n.min(4);
    let mut out = Vec::new();
    for c in 0..n / w {
        let r: Vec<Reg> = (0..w).map(|_| a.f()).collect();
        let o = off + c * w * 4;
        match w {
            1 => a.i(format!("ld.shared.f32 {}, [{base}+{o}]", r[0])),
            _ => a.i(format!("ld.shared.v{w}.f32 {{{}}}, [{base}+{o}]", list(&r))),
        }
        out.extend(r);
    }
    out
}
