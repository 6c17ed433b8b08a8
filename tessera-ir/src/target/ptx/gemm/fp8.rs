//! The tensor-core main loop for fp8 (`e4m3`/`e5m2`, sm_89 and sm_90a): byte tiles in shared
//! memory → `ldmatrix` → `mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32`.
//!
//! Fragments (FACTS.md §6, CUTLASS `SM89_16x8x32_F32E4M3E4M3F32_TN`): A element i of lane
//! (g, t) is (row g + 8·((i>>2)&1), k 4t + (i&3) + 16·(i>>3)), four bytes per register; B
//! element i is (k 4t + (i&3) + 16·(i>>2), n g). Both are what a non-transposing
//! `ldmatrix.x4` returns from a tile whose rows hold 16 contiguous k bytes: an 8×8 `b16`
//! matrix is 8 rows × 16 bytes and gives lane T row T/4, bytes 4(T%4)..+3. So A is stored
//! k-contiguous as it is in memory (`[BM][BK]`), and B is stored **transposed**, n-major
//! (`[BN][BK]`): `ldmatrix` cannot transpose 8-bit elements, so the copy does.
//!
//! Shared tiles have rows of `BK + 16` bytes: consecutive rows then start 16 bytes further
//! along the 128-byte bank line, so the 8 row addresses of one `ldmatrix` phase hit 8
//! different 16-byte bank groups (no conflicts) for every BK that is a multiple of 32.
//!
//! The global → shared copy is one byte per thread and step (a predicated `ld.global.u8`, 0
//! outside the tensor, and an `st.shared.u8`), in a run-time loop: always correct for any M,
//! N, K and alignment, and the B transpose comes free. It completes synchronously, so the
//! `cp.async` pipeline around it ([`super::pipeline`]) orders it with its barriers exactly
//! like asynchronous copies.

use super::copy::{self, Src};
use super::ctx::Ctx;
use super::epilogue::Frame;
use super::layout::WarpTiling;
use super::mma::{MainLoop, accumulators, frame};
use crate::target::ptx::asm::{Reg, list};

/// Bytes per shared row of a tile with `bk` k bytes.
pub(super) fn row_bytes(bk: usize) -> usize {
    bk + 16
}

/// Bytes of one pipeline stage (A and B).
pub(super) fn stage_bytes(bm: usize, bn: usize, bk: usize) -> usize {
    (bm + bn) * row_bytes(bk)
}

/// Emits the fp8 tensor-core K loop; returns the accumulator frame for the epilogue.
pub(super) fn emit(cx: &mut Ctx, m: &MainLoop, wt: WarpTiling) -> Frame {
    let rb = row_bytes(m.bk);
    let (a_stage, b_stage) = (m.bm * rb, m.bn * rb);
    let b_region = a_stage * m.stages as usize;
    let smem = cx.smem;

    let a = &mut cx.asm;
    a.phase(format!(
        "warp tiling: {}x{} warps, each {}x{} = {}x{} mma.m16n8k32 tiles",
        wt.wm, wt.wn, wt.wtm, wt.wtn, wt.mt, wt.nt
    ));
    let lane = a.r_op("and.b32", cx.tid, 31);
    let warp = a.r_op("shr.u32", cx.tid, 5);
    let warp_m = a.r_op("shr.u32", warp, wt.wn.trailing_zeros());
    let warp_n = a.r_op("and.b32", warp, wt.wn - 1);
    a.comment(format!(
        "A ldmatrix.x4 lane address: row warp_m*{} + lane%16, k bytes 16*(lane/16)",
        wt.wtm
    ));
    let l16 = a.r_op("and.b32", lane, 15);
    let arow = a.r();
    a.i(format!("mad.lo.s32 {arow}, {warp_m}, {}, {l16}", wt.wtm));
    let hi = a.r_op("shr.u32", lane, 4);
    let a_lane = a.r();
    a.i(format!("mad.lo.s32 {a_lane}, {arow}, {rb}, {smem}"));
    a.i(format!("mad.lo.s32 {a_lane}, {hi}, 16, {a_lane}"));
    a.comment(format!(
        "B^T ldmatrix.x4 lane address (matrix q = lane/8): n row warp_n*{} + (q>>1)*8 + lane%8, k bytes (q&1)*16",
        wt.wtn
    ));
    let q = a.r_op("shr.u32", lane, 3);
    let q1 = a.r_op("and.b32", q, 1);
    let qh = a.r_op("shr.u32", q, 1);
    let l8 = a.r_op("and.b32", lane, 7);
    let nrow = a.r();
    a.i(format!("mad.lo.s32 {nrow}, {qh}, 8, {l8}"));
    a.i(format!("mad.lo.s32 {nrow}, {warp_n}, {}, {nrow}", wt.wtn));
    let b_lane = a.r();
    a.i(format!("mad.lo.s32 {b_lane}, {nrow}, {rb}, {smem}"));
    a.i(format!("mad.lo.s32 {b_lane}, {q1}, 16, {b_lane}"));
    a.i(format!("add.s32 {b_lane}, {b_lane}, {b_region}"));

    let acc = accumulators(a, &wt, m.acc_init);

    let mut load = |cx: &mut Ctx, tile: Reg, stage: Reg| {
        cx.asm.comment(format!(
            "copy K tile {tile} into stage {stage}: A {}x{} bytes as is, B {}x{} bytes transposed",
            m.bm, m.bk, m.bk, m.bn
        ));
        let s = copy::stage_copy(cx, m, tile, stage, (a_stage, b_stage));
        bytes(cx, s.a_dst, (m.bm, m.bk), (rb, 1), &s.a);
        bytes(cx, s.b_dst, (m.bk, m.bn), (1, rb), &s.b);
    };
    let mma = format!("mma.sync.aligned.m16n8k32.row.col.f32.{0}.{0}.f32", m.ty);
    let mut compute = |cx: &mut Ctx, stage: Reg| {
        let a = &mut cx.asm;
        a.comment(format!("compute stage {stage}: {} k32 steps", m.bk / 32));
        let sa = a.r();
        a.i(format!("mad.lo.s32 {sa}, {stage}, {a_stage}, {a_lane}"));
        let sb = a.r();
        a.i(format!("mad.lo.s32 {sb}, {stage}, {b_stage}, {b_lane}"));
        for ks in 0..m.bk / 32 {
            a.comment(format!("k32 step {ks}: ldmatrix A, ldmatrix B^T, mma"));
            let af: Vec<[Reg; 4]> = (0..wt.mt)
                .map(|mt| {
                    let r: [Reg; 4] = std::array::from_fn(|_| a.r());
                    a.i(format!(
                        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}}}, [{sa}+{}]",
                        list(&r),
                        mt * 16 * rb + ks * 32
                    ));
                    r
                })
                .collect();
            // B fragments one n16 pair at a time, used at once: 4 live registers, not 2·nt
            // (the 64×64 warp tiles of 128×256 and 256×128 hold 128 accumulators already)
            for np in 0..wt.nt / 2 {
                let r: [Reg; 4] = std::array::from_fn(|_| a.r());
                a.i(format!(
                    "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}}}, [{sb}+{}]",
                    list(&r),
                    np * 16 * rb + ks * 32
                ));
                for (mt, af) in af.iter().enumerate() {
                    for (h, bf) in [[r[0], r[1]], [r[2], r[3]]].iter().enumerate() {
                        let c = list(&acc[mt][2 * np + h]);
                        a.i(format!(
                            "{mma} {{{c}}}, {{{}}}, {{{}}}, {{{c}}}",
                            list(af),
                            list(bf)
                        ));
                    }
                }
            }
        }
    };
    super::pipeline::emit(cx, m.stages, m.kt_count, &mut load, &mut compute);
    frame(cx, lane, (warp_m, warp_n), wt, &acc)
}

/// Copies a `rows × cols` byte tile from `src` into shared memory at `stage`, element
/// `(r, c)` landing at byte `r·strides.0 + c·strides.1`: a loop over the tile's bytes,
/// `threads` apart, consecutive threads on consecutive columns (coalesced global reads).
fn bytes(
    cx: &mut Ctx,
    stage: Reg,
    (rows, cols): (usize, usize),
    strides: (usize, usize),
    src: &Src,
) {
    let threads = cx.threads;
    let e = cx.asm.r();
    cx.asm.i(format!("mov.u32 {e}, {}", cx.tid));
    let (top, end) = (cx.asm.label("BYTE_COPY"), cx.asm.label("BYTE_COPY_END"));
    cx.asm.place(&top);
    let p = cx.asm.p();
    cx.asm.i(format!("setp.ge.u32 {p}, {e}, {}", rows * cols));
    cx.asm.i(format!("@{p} bra {end}"));
    let lr = cx.asm.r_op("shr.u32", e, cols.trailing_zeros());
    let lc = cx.asm.r_op("and.b32", e, cols - 1);
    let (addr, ok) = copy::guarded_addr(cx, src, lr, lc, 1);
    let a = &mut cx.asm;
    let v = a.r();
    a.i(format!("mov.u32 {v}, 0"));
    a.i(format!("@{ok} ld.global.u8 {v}, [{addr}]"));
    let off = a.r();
    a.i(format!("mul.lo.s32 {off}, {lr}, {}", strides.0));
    a.i(format!("mad.lo.s32 {off}, {lc}, {}, {off}", strides.1));
    let dst = a.r_op("add.s32", stage, off);
    a.i(format!("st.shared.u8 [{dst}], {v}"));
    a.i(format!("add.s32 {e}, {e}, {threads}"));
    a.i(format!("bra {top}"));
    a.place(&end);
}

#[cfg(test)]
mod tests {
    use super::row_bytes;

    /// The 8 row addresses of one `ldmatrix` phase (8 consecutive rows, one 16-byte chunk)
    /// fall in 8 different 16-byte groups of the 128-byte bank line: no bank conflicts.
    #[test]
    fn padded_rows_make_ldmatrix_phases_conflict_free() {
        for bk in [32, 64, 128, 256] {
            let rb = row_bytes(bk);
            for base in (0..64).step_by(8) {
                for chunk in 0..bk / 16 {
                    let mut groups: Vec<usize> = (base..base + 8)
                        .map(|r| (r * rb + chunk * 16) / 16 % 8)
                        .collect();
                    groups.sort();
                    groups.dedup();
                    assert_eq!(groups.len(), 8, "bk {bk} rows {base}.. chunk {chunk}");
                }
            }
        }
    }
}
