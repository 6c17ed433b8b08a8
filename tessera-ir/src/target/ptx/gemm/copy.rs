//! Global → shared copies of one operand tile for one pipeline stage.
//!
//! 16-bit inputs (bf16/f16), [`tile16`]: a *uniform run-time branch* on a flag computed once
//! per kernel (`fast` = every row length is a multiple of 8 elements, both base pointers are
//! 16-byte aligned, and the tile origins along the contiguous axis are multiples of 8):
//! - fast: 16-byte `cp.async.cg` per chunk of 8 elements; a chunk outside the tensor is copied
//!   with src-size 0 (zero fill) from the tensor's base address (never dereferenced);
//! - slow: per element, a predicated `ld.global.u16` (0 when out of bounds) and `st.shared.u16`
//!   into the same swizzled layout. These complete synchronously, so the pipeline's barriers
//!   order them exactly like the asynchronous copies.
//!
//! f32 inputs, [`tile32`]: one 4-byte `cp.async.ca` per element (src-size 0 out of bounds),
//! always-correct (f32 pointers are 4-byte aligned) and able to transpose A into k-major order.
//!
//! An implicit-GEMM convolution's A ([`Gather`]) goes through the same paths with im2col
//! addresses: GEMM row `m` → output pixel `(n, oh, ow)`, column `k` → tap `(kh, kw)` and
//! channel `ci`, the element `x[n, oh·sh + kh·dh − ph, ow·sw + kw·dw − pw, chan + ci]`, zero
//! (src-size 0, or the predicated scalar load) outside the input. The 16-byte path needs
//! `cg` and `C` multiples of 8 (eight consecutive `k` are then eight consecutive channels
//! of one tap).

use super::ctx::Ctx;
use super::layout::SmemTile;
use super::mma::MainLoop;
use crate::target::ptx::asm::Reg;
use crate::tile::Im2colGeom;

/// The im2col view of an NHWC input (param `Src::param`, view `[N·H, W, C]`): the geometry
/// and the per-kernel registers its addresses need.
#[derive(Clone)]
pub(super) struct Gather {
    pub geom: Im2colGeom,
    /// The group's first input channel.
    pub chan: Reg,
    /// `N·OH·OW`: GEMM rows.
    pub m: Reg,
    /// `OH·OW` and `OW`.
    pub ohow: Reg,
    pub ow: Reg,
}

impl Gather {
    /// Computes `OW` from the run-time `W`, `OH` from the fixed height, and `N·OH·OW`.
    pub fn new(cx: &mut Ctx, param: usize, geom: Im2colGeom, chan: Reg) -> Gather {
        let (nh, w) = (cx.dims[param][0], cx.dims[param][1]);
        let oh = geom.out_extent(0, geom.height as i64) as u32;
        let span = geom.dilation[1] * (geom.kernel[1] - 1) + 1;
        let a = &mut cx.asm;
        a.phase("im2col: OW from W, rows N*OH*OW");
        // OW = W + 2pw ≥ span ? (W + 2pw − span) / sw + 1 : 0
        let wp = a.r_op("add.s32", w, 2 * geom.padding[1]);
        let fits = a.p();
        a.i(format!("setp.ge.u32 {fits}, {wp}, {span}"));
        let t = a.r_op("sub.s32", wp, span);
        let t = a.r_op("div.u32", t, geom.stride[1]);
        let t = a.r_op("add.s32", t, 1);
        let ow = a.r();
        a.i(format!("selp.u32 {ow}, {t}, 0, {fits}"));
        let ohow = a.r_op("mul.lo.s32", ow, oh);
        let n = a.r_op("div.u32", nh, geom.height);
        let m = a.r_op("mul.lo.s32", n, ohow);
        Gather {
            geom,
            chan,
            m,
            ohow,
            ow,
        }
    }
}

/// Where a tile comes from in global memory: element `(r, c)` of the tile is tensor element
/// `(row0 + r, col0 + c)` of param `param`'s last-two-dims view, offset by `lead_rows` rows.
pub(super) struct Src {
    pub param: usize,
    /// Set for an im2col A: `row0`/`col0` are then GEMM row and column origins.
    pub gather: Option<Gather>,
    pub lead_rows: Reg,
    pub row0: Reg,
    pub col0: Reg,
}

/// What one pipeline stage's copy of K tile `tile` needs: the shared destinations of A and B
/// in stage `stage` and their global sources.
pub(super) struct StageCopy {
    pub a_dst: Reg,
    pub b_dst: Reg,
    pub a: Src,
    pub b: Src,
}

/// Computes `k0 = lo + tile·bk`, the stage addresses `smem + stage·bytes` (`bytes` = A's and
/// B's stage sizes; the B stages follow all A stages), and the sources: A rows from `x`,
/// columns from `k0`; B rows from `k0`, columns from `y`.
pub(super) fn stage_copy(
    cx: &mut Ctx,
    m: &MainLoop,
    tile: Reg,
    stage: Reg,
    bytes: (usize, usize),
) -> StageCopy {
    let (smem, b_region) = (cx.smem, bytes.0 * m.stages as usize);
    let a = &mut cx.asm;
    let k0 = a.r();
    a.i(format!("mad.lo.s32 {k0}, {tile}, {}, {}", m.bk, m.lo));
    let a_dst = a.r();
    a.i(format!("mad.lo.s32 {a_dst}, {stage}, {}, {smem}", bytes.0));
    let b_dst = a.r();
    a.i(format!("mad.lo.s32 {b_dst}, {stage}, {}, {smem}", bytes.1));
    a.i(format!("add.s32 {b_dst}, {b_dst}, {b_region}"));
    StageCopy {
        a_dst,
        b_dst,
        a: Src {
            gather: m.gather.clone(),
            param: m.a.0,
            lead_rows: m.a.1,
            row0: m.x,
            col0: k0,
        },
        b: Src {
            gather: None,
            param: m.b.0,
            lead_rows: m.b.1,
            row0: k0,
            col0: m.y,
        },
    }
}

/// Global address and in-bounds predicate of element `(row0 + lr, col0 + lc)`; the address is
/// the tensor base when out of bounds.
pub(super) fn guarded_addr(cx: &mut Ctx, src: &Src, lr: Reg, lc: Reg, bytes: usize) -> (Reg, Reg) {
    if let Some(g) = &src.gather {
        return gathered_addr(cx, src, g, lr, lc, bytes);
    }
    let nrows = cx.dims[src.param][cx.dims[src.param].len() - 2];
    let ncols = *cx.dims[src.param].last().unwrap();
    let a = &mut cx.asm;
    let row = a.r_op("add.s32", src.row0, lr);
    let col = a.r_op("add.s32", src.col0, lc);
    let ok = a.p();
    a.i(format!("setp.lt.u32 {ok}, {row}, {nrows}"));
    a.i(format!("setp.lt.and.u32 {ok}, {col}, {ncols}, {ok}"));
    let rowflat = a.r_op("add.s32", src.lead_rows, row);
    let addr = cx.elem_addr(src.param, rowflat, col, bytes);
    let base = cx.ptrs[src.param];
    cx.asm.i(format!("selp.b64 {addr}, {addr}, {base}, {ok}"));
    (addr, ok)
}

/// [`guarded_addr`] of an im2col A: element `(m, k) = (row0 + lr, col0 + lc)`.
fn gathered_addr(
    cx: &mut Ctx,
    src: &Src,
    g: &Gather,
    lr: Reg,
    lc: Reg,
    bytes: usize,
) -> (Reg, Reg) {
    let (h, w) = (g.geom.height, cx.dims[src.param][1]);
    let ge = g.geom;
    let a = &mut cx.asm;
    a.comment("im2col: (m, k) -> x[n, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw, chan + ci]");
    let m = a.r_op("add.s32", src.row0, lr);
    let k = a.r_op("add.s32", src.col0, lc);
    let ok = a.p();
    a.i(format!("setp.lt.u32 {ok}, {m}, {}", g.m));
    a.i(format!("setp.lt.and.u32 {ok}, {k}, {}, {ok}", ge.k()));
    let n = a.r_op("div.u32", m, g.ohow);
    let p = a.r();
    a.i(format!("mul.lo.s32 {p}, {n}, {}", g.ohow));
    let p = a.r_op("sub.s32", m, p);
    let oy = a.r_op("div.u32", p, g.ow);
    let ox = a.r();
    a.i(format!("mul.lo.s32 {ox}, {oy}, {}", g.ow));
    let ox = a.r_op("sub.s32", p, ox);
    let t = a.r_op("div.u32", k, ge.cg);
    let ci = a.r();
    a.i(format!("mul.lo.s32 {ci}, {t}, {}", ge.cg));
    let ci = a.r_op("sub.s32", k, ci);
    let ky = a.r_op("div.u32", t, ge.kernel[1]);
    let kx = a.r();
    a.i(format!("mul.lo.s32 {kx}, {ky}, {}", ge.kernel[1]));
    let kx = a.r_op("sub.s32", t, kx);
    let iy = a.r();
    a.i(format!("mul.lo.s32 {iy}, {oy}, {}", ge.stride[0]));
    a.i(format!("mad.lo.s32 {iy}, {ky}, {}, {iy}", ge.dilation[0]));
    a.i(format!("sub.s32 {iy}, {iy}, {}", ge.padding[0]));
    let ix = a.r();
    a.i(format!("mul.lo.s32 {ix}, {ox}, {}", ge.stride[1]));
    a.i(format!("mad.lo.s32 {ix}, {kx}, {}, {ix}", ge.dilation[1]));
    a.i(format!("sub.s32 {ix}, {ix}, {}", ge.padding[1]));
    // Negative offsets wrap to large unsigned values: one compare per axis.
    a.i(format!("setp.lt.and.u32 {ok}, {iy}, {h}, {ok}"));
    a.i(format!("setp.lt.and.u32 {ok}, {ix}, {w}, {ok}"));
    let row = a.r();
    a.i(format!("mad.lo.s32 {row}, {n}, {h}, {iy}"));
    let pix = a.r();
    a.i(format!("mad.lo.s32 {pix}, {row}, {w}, {ix}"));
    let col = a.r_op("add.s32", g.chan, ci);
    let addr = cx.elem_addr(src.param, pix, col, bytes);
    let base = cx.ptrs[src.param];
    cx.asm.i(format!("selp.b64 {addr}, {addr}, {base}, {ok}"));
    (addr, ok)
}

/// Shared address of the 16-byte chunk `ch` of row `lr` (swizzled), plus `extra` bytes.
fn swizzled(cx: &mut Ctx, stage: Reg, t: &SmemTile, lr: Reg, ch: Reg) -> Reg {
    let a = &mut cx.asm;
    let s = a.r_op("shr.u32", lr, t.shift);
    let s = a.r_op("and.b32", s, t.mask);
    let pch = a.r_op("xor.b32", ch, s);
    let off = a.r();
    a.i(format!("mul.lo.s32 {off}, {lr}, {}", t.row_bytes));
    a.i(format!("mad.lo.s32 {off}, {pch}, 16, {off}"));
    a.r_op("add.s32", stage, off)
}

/// Copies a `t.rows × t.cols` 16-bit tile into the stage at shared address `stage`.
pub(super) fn tile16(cx: &mut Ctx, stage: Reg, t: &SmemTile, src: &Src, fast: Reg) {
    let threads = cx.threads;
    let (slow, done) = (cx.asm.label("SLOW_COPY"), cx.asm.label("COPIED"));
    cx.asm.i(format!("@!{fast} bra {slow}"));
    // Fast path: 16-byte chunks.
    let total = t.rows * t.chunks;
    for i in 0..total.div_ceil(threads) {
        let c = cx.asm.r_op("add.s32", cx.tid, i * threads);
        let guard = guard(cx, c, total, (i + 1) * threads);
        let lr = cx.asm.r_op("shr.u32", c, t.chunks.trailing_zeros());
        let ch = cx.asm.r_op("and.b32", c, t.chunks - 1);
        let lc = cx.asm.r_op("shl.b32", ch, 3);
        let (addr, ok) = guarded_addr(cx, src, lr, lc, 2);
        let sz = cx.asm.r();
        cx.asm.i(format!("selp.u32 {sz}, 16, 0, {ok}"));
        let dst = swizzled(cx, stage, t, lr, ch);
        cx.asm.i(format!(
            "{guard}cp.async.cg.shared.global [{dst}], [{addr}], 16, {sz}"
        ));
    }
    cx.asm.i(format!("bra.uni {done}"));
    cx.asm.place(&slow);
    // Slow path: one element at a time.
    let total = t.rows * t.cols;
    for i in 0..total.div_ceil(threads) {
        let e = cx.asm.r_op("add.s32", cx.tid, i * threads);
        let guard = guard(cx, e, total, (i + 1) * threads);
        let lr = cx.asm.r_op("shr.u32", e, t.cols.trailing_zeros());
        let lc = cx.asm.r_op("and.b32", e, t.cols - 1);
        let (addr, ok) = guarded_addr(cx, src, lr, lc, 2);
        let h = cx.asm.h();
        cx.asm.i(format!("mov.b16 {h}, 0"));
        cx.asm.i(format!("@{ok} ld.global.u16 {h}, [{addr}]"));
        let ch = cx.asm.r_op("shr.u32", lc, 3);
        let dst = swizzled(cx, stage, t, lr, ch);
        let within = cx.asm.r_op("and.b32", lc, 7);
        let dst2 = cx.asm.r();
        cx.asm.i(format!("mad.lo.s32 {dst2}, {within}, 2, {dst}"));
        cx.asm.i(format!("{guard}st.shared.u16 [{dst2}], {h}"));
    }
    cx.asm.place(&done);
}

/// `@%p ` when only some threads have an item in this round (index `c` of `total`).
fn guard(cx: &mut Ctx, c: Reg, total: usize, end: usize) -> String {
    if end <= total {
        return String::new();
    }
    let p = cx.asm.p();
    cx.asm.i(format!("setp.lt.u32 {p}, {c}, {total}"));
    format!("@{p} ")
}

/// Copies an f32 tile of `rows × cols` into shared memory at `stage`, element `(r, c)` landing
/// at byte `r·row_stride + c·col_stride` (so A can be stored transposed, k-major).
pub(super) fn tile32(
    cx: &mut Ctx,
    stage: Reg,
    rows: usize,
    cols: usize,
    strides: (usize, usize),
    src: &Src,
) {
    let threads = cx.threads;
    let total = rows * cols;
    for i in 0..total.div_ceil(threads) {
        let e = cx.asm.r_op("add.s32", cx.tid, i * threads);
        let guard = guard(cx, e, total, (i + 1) * threads);
        let lr = cx.asm.r_op("shr.u32", e, cols.trailing_zeros());
        let lc = cx.asm.r_op("and.b32", e, cols - 1);
        let (addr, ok) = guarded_addr(cx, src, lr, lc, 4);
        let sz = cx.asm.r();
        cx.asm.i(format!("selp.u32 {sz}, 4, 0, {ok}"));
        let off = cx.asm.r();
        cx.asm.i(format!("mul.lo.s32 {off}, {lr}, {}", strides.0));
        cx.asm
            .i(format!("mad.lo.s32 {off}, {lc}, {}, {off}", strides.1));
        let dst = cx.asm.r_op("add.s32", stage, off);
        cx.asm.i(format!(
            "{guard}cp.async.ca.shared.global [{dst}], [{addr}], 4, {sz}"
        ));
    }
}
