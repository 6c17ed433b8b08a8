//! The tensor-core main loop for bf16/f16: swizzled shared tiles → `ldmatrix` → `mma.sync`.
//!
//! Warp `w` owns the `wtm × wtn` sub-tile at `(w / wn, w % wn)`, as `mt × nt` tiles of
//! `m16n8k16`. Per 16-wide K step it loads `mt` A fragments (`ldmatrix.x4`, lane L addressing
//! row `L % 16`, chunk `L / 16` of its 16-row block) and `nt / 2` B fragment pairs
//! (`ldmatrix.x4.trans` on the k-major B tile: matrix `m = L / 8` is k rows `(m & 1)·8 ..`,
//! n columns `(m >> 1)·8 ..`), then issues `mt · nt` mma (FACTS.md §6).

use super::copy;
use super::ctx::Ctx;
use super::epilogue::Frame;
use super::layout::{SmemTile, WarpTiling};
use crate::target::ptx::asm::{Asm, Reg, flit, list};

/// Shapes and sources of the K loop.
pub(super) struct MainLoop {
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub stages: u32,
    /// `bf16` or `f16` (or `e4m3`/`e5m2` for [`super::fp8`]).
    pub ty: &'static str,
    /// `(param, leading-row offset)` of A and B.
    pub a: (usize, Reg),
    pub b: (usize, Reg),
    /// A rows come from `x + r`, B columns from `y + c`; K tile `t` starts at `lo + t·bk`.
    pub x: Reg,
    pub y: Reg,
    pub lo: Reg,
    pub kt_count: Reg,
    pub acc_init: f64,
    /// A is gathered (implicit-GEMM convolution), not block-loaded.
    pub gather: Option<copy::Gather>,
}

/// Emits the tensor-core K loop; returns the accumulator frame for the epilogue.
pub(super) fn emit(cx: &mut Ctx, m: &MainLoop, wt: WarpTiling, fast: Reg) -> Frame {
    let ta = SmemTile::new(m.bm, m.bk);
    let tb = SmemTile::new(m.bk, m.bn);
    let (a_stage, b_stage) = (ta.bytes(), tb.bytes());
    let b_region = a_stage * m.stages as usize;
    let smem = cx.smem;

    let a = &mut cx.asm;
    a.phase(format!(
        "warp tiling: {}x{} warps, each {}x{} = {}x{} mma.m16n8k16 tiles",
        wt.wm, wt.wn, wt.wtm, wt.wtn, wt.mt, wt.nt
    ));
    let lane = a.r_op("and.b32", cx.tid, 31);
    let warp = a.r_op("shr.u32", cx.tid, 5);
    let warp_m = a.r_op("shr.u32", warp, wt.wn.trailing_zeros());
    let warp_n = a.r_op("and.b32", warp, wt.wn - 1);
    a.comment(format!(
        "A ldmatrix.x4 lane address: row warp_m*{} + lane%16, chunk (2*ks + lane/16) ^ swizzle(row)",
        wt.wtm
    ));
    let l16 = a.r_op("and.b32", lane, 15);
    let arow = a.r();
    a.i(format!("mad.lo.s32 {arow}, {warp_m}, {}, {l16}", wt.wtm));
    let sw = a.r_op("shr.u32", arow, ta.shift);
    let sw = a.r_op("and.b32", sw, ta.mask);
    let hi = a.r_op("shr.u32", lane, 4);
    let ya = a.r_op("xor.b32", sw, hi);
    let a_lane = a.r();
    a.i(format!(
        "mad.lo.s32 {a_lane}, {arow}, {}, {smem}",
        ta.row_bytes
    ));
    a.comment("B ldmatrix.x4.trans lane address: k row (m&1)*8 + lane%8, chunk warp_n*wtn/8 + 2*np + (m>>1), m = lane/8");
    let mi = a.r_op("shr.u32", lane, 3);
    let m1 = a.r_op("and.b32", mi, 1);
    let l8 = a.r_op("and.b32", lane, 7);
    let krow = a.r();
    a.i(format!("mad.lo.s32 {krow}, {m1}, 8, {l8}"));
    let sw = a.r_op("shr.u32", krow, tb.shift);
    let sw = a.r_op("and.b32", sw, tb.mask);
    let mh = a.r_op("shr.u32", mi, 1);
    let yb = a.r_op("xor.b32", sw, mh);
    let b_lane = a.r();
    a.i(format!(
        "mad.lo.s32 {b_lane}, {krow}, {}, {smem}",
        tb.row_bytes
    ));
    a.i(format!("add.s32 {b_lane}, {b_lane}, {b_region}"));
    let wn_chunk = a.r_op("mul.lo.s32", warp_n, wt.wtn / 8);

    let acc = accumulators(a, &wt, m.acc_init);

    let mut load = |cx: &mut Ctx, tile: Reg, stage: Reg| {
        let a = &mut cx.asm;
        a.comment(format!(
            "copy K tile {tile} into stage {stage}: A {}x{} and B {}x{}",
            m.bm, m.bk, m.bk, m.bn
        ));
        let s = copy::stage_copy(cx, m, tile, stage, (a_stage, b_stage));
        copy::tile16(cx, s.a_dst, &ta, &s.a, fast);
        copy::tile16(cx, s.b_dst, &tb, &s.b, fast);
    };
    let mma = format!("mma.sync.aligned.m16n8k16.row.col.f32.{0}.{0}.f32", m.ty);
    let mut compute = |cx: &mut Ctx, stage: Reg| {
        let a = &mut cx.asm;
        a.comment(format!("compute stage {stage}: {} k16 steps", m.bk / 16));
        let sa = a.r();
        a.i(format!("mad.lo.s32 {sa}, {stage}, {a_stage}, {a_lane}"));
        let sb = a.r();
        a.i(format!("mad.lo.s32 {sb}, {stage}, {b_stage}, {b_lane}"));
        for ks in 0..m.bk / 16 {
            a.comment(format!("k16 step {ks}: ldmatrix A, ldmatrix.trans B, mma"));
            let ch = a.r_op("xor.b32", ya, 2 * ks);
            let ch = a.r_op("shl.b32", ch, 4);
            let base = a.r_op("add.s32", sa, ch);
            let af: Vec<[Reg; 4]> = (0..wt.mt)
                .map(|mt| {
                    let r: [Reg; 4] = std::array::from_fn(|_| a.r());
                    a.i(format!(
                        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}}}, [{base}+{}]",
                        list(&r),
                        mt * 16 * ta.row_bytes
                    ));
                    r
                })
                .collect();
            let mut bf: Vec<[Reg; 2]> = Vec::new();
            for np in 0..wt.nt / 2 {
                let c = a.r_op("add.s32", wn_chunk, 2 * np);
                let c = a.r_op("xor.b32", c, yb);
                let c = a.r_op("shl.b32", c, 4);
                let addr = a.r_op("add.s32", sb, c);
                let r: [Reg; 4] = std::array::from_fn(|_| a.r());
                a.i(format!(
                    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{}}}, [{addr}+{}]",
                    list(&r),
                    ks * 16 * tb.row_bytes
                ));
                bf.push([r[0], r[1]]);
                bf.push([r[2], r[3]]);
            }
            for (mt, af) in af.iter().enumerate() {
                for (nt, bf) in bf.iter().enumerate() {
                    let c = list(&acc[mt][nt]);
                    a.i(format!(
                        "{mma} {{{c}}}, {{{}}}, {{{}}}, {{{c}}}",
                        list(af),
                        list(bf)
                    ));
                }
            }
        }
    };
    super::pipeline::emit(cx, m.stages, m.kt_count, &mut load, &mut compute);

    frame(cx, lane, (warp_m, warp_n), wt, &acc)
}

/// The warp tile's f32 accumulators (`mt` × `nt` fragments of 4 per thread), each set to
/// `init`; shared by the f16/bf16/tf32 and the fp8 main loops.
pub(super) fn accumulators(a: &mut Asm, wt: &WarpTiling, init: f64) -> Vec<Vec<[Reg; 4]>> {
    a.phase(format!(
        "accumulators: {}x{}x4 f32 per thread = {}",
        wt.mt,
        wt.nt,
        wt.mt * wt.nt * 4
    ));
    let init = flit(init as f32);
    (0..wt.mt)
        .map(|_| {
            (0..wt.nt)
                .map(|_| {
                    std::array::from_fn(|_| {
                        let f = a.f();
                        a.i(format!("mov.f32 {f}, {init}"));
                        f
                    })
                })
                .collect()
        })
        .collect()
}

/// The accumulator frame of a warp-tiled `m16n8` C layout (the same for every `mma` shape
/// here): `c_i` at row g + 8·(i>>1), col 2t + (i&1) of each 16×8 tile of the warp's sub-tile.
pub(super) fn frame(
    cx: &mut Ctx,
    lane: Reg,
    (warp_m, warp_n): (Reg, Reg),
    wt: WarpTiling,
    acc: &[Vec<[Reg; 4]>],
) -> Frame {
    let a = &mut cx.asm;
    a.phase("accumulator coordinates (C fragment: row g + 8*(i>>1), col 2t + (i&1))");
    let g = a.r_op("shr.u32", lane, 2);
    let t = a.r_op("and.b32", lane, 3);
    let t2 = a.r_op("shl.b32", t, 1);
    let row0 = a.r();
    a.i(format!("mad.lo.s32 {row0}, {warp_m}, {}, {g}", wt.wtm));
    let col0 = a.r();
    a.i(format!("mad.lo.s32 {col0}, {warp_n}, {}, {t2}", wt.wtn));
    let rows = (0..wt.mt * 2)
        .map(|s| a.r_op("add.s32", row0, (s / 2) * 16 + (s % 2) * 8))
        .collect();
    let cols = (0..wt.nt * 2)
        .map(|s| a.r_op("add.s32", col0, (s / 2) * 8 + s % 2))
        .collect();
    let acc = (0..wt.mt * 2)
        .map(|mi| {
            (0..wt.nt * 2)
                .map(|ni| acc[mi / 2][ni / 2][(mi % 2) * 2 + ni % 2])
                .collect()
        })
        .collect();
    Frame { rows, cols, acc }
}
