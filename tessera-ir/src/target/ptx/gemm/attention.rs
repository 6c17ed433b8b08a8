//! The tensor-core attention template: the online-softmax kernel of `lower::attention` with
//! bf16/f16 inputs → `mma.sync.m16n8k16` for both products and a `cp.async` K/V pipeline.
//!
//! Recognised structurally ([`recognise`]): a kernel of the attention class whose Tile IR is
//! exactly what `lower::attention` produces (the loop body's op sequence is checked op by op),
//! with 16-bit `q`, `k`, `v` and power-of-two tiles. Anything else (f32 inputs, which need
//! FFMA to meet f32 accuracy; other tiles) goes to the generic emitter.
//!
//! Layout: warp `w` owns query rows `w·16·mt ..` of the `BM`-row block (`mt = BM / (16·warps)`
//! m16 tiles). Per block:
//! - `Q [BM, D]` is copied to shared memory once and read into A fragments
//!   (`ldmatrix.x4`) that stay in registers; the shared region is then reused by the pipeline.
//! - Per key step of `BN` (the `cp.async` pipeline of `pipeline.rs`, `s.stages` stages, each
//!   holding `K [BN, D]` and `V [BN, Dv]`, XOR-swizzled): `S = Q·Kᵀ` with K read by
//!   non-transposed `ldmatrix.x4` (K row-major is Kᵀ's n-major B operand, FACTS.md §6); scale
//!   and mask per element (`col ≤ limit(row)`, `limit = min(row + Sk − Sq, Sk − 1)` causal, else
//!   `Sk − 1`); row max over the quad of lanes that share a row (`shfl.bfly` 1, 2); `α =
//!   e^(m − m')`, `p = e^(s − m')` (a row with no visible key yet keeps `m' = −∞` and uses 0
//!   in the exponents, as the lowering does); a per-thread partial row sum; `O ·= α`; then `O
//!   += P·V` with P taken straight from the S accumulators as A fragments (two n8 tiles of S
//!   are one k16 A fragment: `{pack(c0,c1), pack(c2,c3)}` of each, rounded to the input type
//!   by `cvt.rn` exactly as the lowering's cast) and V read by `ldmatrix.x4.trans`.
//! - After the loop: the partial sums are added over the quad, `O / l` (IEEE division, as the
//!   CPU backend), then the shared GEMM epilogue (`epilogue.rs`) applies the kernel's
//!   epilogue ops and stores with bounds checks.

use super::copy::{self, Src};
use super::ctx::Ctx;
use super::epilogue::{self, Frame};
use super::layout::SmemTile;
use super::pattern::Gemm;
use crate::DType;
use crate::graph::BinaryOp;
use crate::schedule::{KernelClass, Schedule};
use crate::target::ptx::abi::{self, PtxKernel};
use crate::target::ptx::asm::{Asm, Reg, flit, list};
use crate::target::ptx::{Arch, EmitError, math};
use crate::tile::{Inst, Kernel, Op, TValue};
use std::fmt::Write;

/// A recognised attention kernel.
struct Attn {
    pq: usize,
    pk: usize,
    pv: usize,
    dtype: DType,
    bm: usize,
    bn: usize,
    d: usize,
    dv: usize,
    scale: f64,
    causal: bool,
    /// `q` load index `[b, i, 0]` and the `k` / `v` batch index.
    q_index: Vec<TValue>,
    k_batch: TValue,
    v_batch: TValue,
    lo: TValue,
    hi: TValue,
    /// `acc / l`: the value the epilogue starts from.
    out: TValue,
    pre: Vec<Inst>,
    post: Vec<Inst>,
    store: Inst,
}

/// The loop body `lower::attention` emits, op by op (`causal` changes no op, only the mask's
/// shape).
const BODY: &[&str] = &[
    "load",
    "trans",
    "full",
    "dot",
    "const",
    "mul",
    "arange",
    "add",
    "expand",
    "cmp.le",
    "const",
    "select",
    "reduce.max",
    "max",
    "cmp.eq",
    "const",
    "select",
    "sub",
    "exp",
    "expand",
    "sub",
    "exp",
    "reduce.sum",
    "mul",
    "add",
    "cast",
    "load",
    "expand",
    "mul",
    "dot",
    "yield",
];

fn recognise(k: &Kernel, s: &Schedule) -> Option<Attn> {
    if s.class != KernelClass::Attention || k.policy != crate::NumericsPolicy::Fast {
        return None;
    }
    let fors: Vec<usize> = (0..k.body.len())
        .filter(|&n| matches!(k.inst(k.body[n]).op, Op::For { .. }))
        .collect();
    let [pos] = fors.as_slice() else {
        return None;
    };
    let pos = *pos;
    let fd = k.inst(k.body[pos]);
    let Op::For {
        iv,
        lo,
        hi,
        step,
        inits,
        args,
        body,
    } = &fd.op
    else {
        return None;
    };
    if inits.len() != 3 || args.len() != 3 || fd.results.len() != 3 || body.len() != BODY.len() {
        return None;
    }
    if body
        .iter()
        .zip(BODY)
        .any(|(i, name)| k.inst(*i).op.name() != *name)
    {
        return None;
    }
    let op = |n: usize| &k.inst(body[n]).op;
    let res = |n: usize| k.inst(body[n]).results[0];
    // Body positions (see BODY): 0 load k, 1 trans, 3 dot, 4 scale, 5 mul, 9 cmp (the mask),
    // 25 cast p, 26 load v, 29 dot.
    let (
        Op::Load {
            param: pk,
            index: kix,
            mask: None,
            ..
        },
        Op::Trans(kt),
        Op::Dot { a: qv, b: kb, .. },
    ) = (op(0), op(1), op(3))
    else {
        return None;
    };
    if *kt != res(0) || *kb != res(1) || kix.len() != 3 || kix[1] != *iv {
        return None;
    }
    let Op::Const(scale) = op(4) else {
        return None;
    };
    if !matches!(op(5), Op::Binary(BinaryOp::Mul, x, c) if *x == res(3) && *c == res(4)) {
        return None;
    }
    let mask = k.ty(res(9)).shape.clone();
    let Op::Load {
        param: pv,
        index: vix,
        mask: None,
        ..
    } = op(26)
    else {
        return None;
    };
    if vix.len() != 3 || vix[1] != *iv {
        return None;
    }
    let Op::Dot { a: pc, b: vb, acc } = op(29) else {
        return None;
    };
    if *pc != res(25) || *vb != res(26) || *acc != res(28) {
        return None;
    }
    // q: a top-level load before the loop.
    let qload = k.body[..pos]
        .iter()
        .find(|i| k.inst(**i).results == [*qv])?;
    let Op::Load {
        param: pq,
        index: qix,
        mask: None,
        ..
    } = &k.inst(*qload).op
    else {
        return None;
    };
    let (tq, tk, tv) = (k.ty(*qv), k.ty(res(0)), k.ty(res(26)));
    let (bm, d) = (tq.shape[0], tq.shape[1]);
    let (bn, dv) = (tk.shape[0], tv.shape[1]);
    let dtype = tq.dtype;
    if !matches!(dtype, DType::BF16 | DType::F16)
        || tk.dtype != dtype
        || tv.dtype != dtype
        || k.ty(res(25)).dtype != dtype
        || tk.shape[1] != d
        || tv.shape[0] != bn
        || *step != bn as i64
        || qix.len() != 3
        || ![bm, bn, d, dv]
            .iter()
            .all(|x| x.is_power_of_two() && *x >= 16)
    {
        return None;
    }
    let causal = match mask.as_slice() {
        [r, c] if *r == bm && *c == bn => true,
        [1, c] if *c == bn => false,
        _ => return None,
    };
    // After the loop: `acc / expand(l)`.
    let (rl, racc) = (fd.results[1], fd.results[2]);
    let post: Vec<Inst> = k.body[pos + 1..k.body.len() - 1].to_vec();
    let out = post.iter().find_map(|i| match &k.inst(*i).op {
        Op::Binary(BinaryOp::Div, x, y)
            if *x == racc
                && matches!(post.iter().map(|j| k.inst(*j)).find(|d| d.results == [*y]),
                    Some(d) if d.op == Op::Expand { a: rl, axis: 1 }) =>
        {
            Some(k.inst(*i).results[0])
        }
        _ => None,
    })?;
    let store = *k.body.last()?;
    if !matches!(k.inst(store).op, Op::Store { mask: None, .. }) {
        return None;
    }
    Some(Attn {
        pq: *pq,
        pk: *pk,
        pv: *pv,
        dtype,
        bm,
        bn,
        d,
        dv,
        scale: *scale,
        causal,
        q_index: qix.clone(),
        k_batch: kix[0],
        v_batch: vix[0],
        lo: *lo,
        hi: *hi,
        out,
        pre: k.body[..pos].to_vec(),
        post,
        store,
    })
}

/// Emits `k` with the tensor-core attention template; `Ok(None)` when it is not a 16-bit
/// attention kernel of the shape the template handles (or `s.warps` does not divide `BM`
/// into m16 tiles per warp), which the generic emitter then takes.
pub(super) fn emit(k: &Kernel, s: &Schedule, arch: Arch) -> Result<Option<PtxKernel>, EmitError> {
    let Some(at) = recognise(k, s) else {
        return Ok(None);
    };
    let err = |m: String| EmitError {
        kernel: k.name.clone(),
        message: m,
    };
    if s.tile.first() != Some(&(at.bm as u32)) || s.tile.get(1) != Some(&(at.bn as u32)) {
        return Err(err(format!(
            "attention: tiles {}x{} in the IR disagree with {s}",
            at.bm, at.bn
        )));
    }
    // Warps that cannot each own whole m16 tiles of query rows: the generic emitter runs
    // this schedule as written.
    let warps = s.warps as usize;
    if warps == 0 || !at.bm.is_multiple_of(16 * warps) {
        return Ok(None);
    }
    let mt = at.bm / (16 * warps);
    let threads = warps * 32;
    let (tq, tk, tv) = (
        SmemTile::new(at.bm, at.d),
        SmemTile::new(at.bn, at.d),
        SmemTile::new(at.bn, at.dv),
    );
    let stage_bytes = tk.bytes() + tv.bytes();
    let optin = arch.limits().smem_per_block_optin as usize;
    if tq.bytes() > optin {
        return Err(err(format!(
            "attention: the {}-byte Q tile exceeds {arch}'s shared memory",
            tq.bytes()
        )));
    }
    let stages =
        super::layout::stages_that_fit(stage_bytes, s.stages.max(1), arch).ok_or_else(|| {
            err(format!(
                "attention: one {stage_bytes}-byte K/V stage exceeds {arch}'s shared memory"
            ))
        })?;
    let g = Gemm {
        a_gather: None,
        k,
        pa: at.pq,
        pb: at.pv,
        dtype: at.dtype,
        bm: at.bm,
        bn: at.dv,
        bk: at.d,
        a_index: at.q_index.clone(),
        b_index: Vec::new(),
        lo: at.lo,
        hi: at.hi,
        acc_init: 0.0,
        acc: at.out,
        pre: at.pre.clone(),
        post: at.post.clone(),
        store: at.store,
    };
    let mut cx = Ctx::new(&g, threads);
    cx.asm
        .phase("index scalars (program ids, tile origins, dims)");
    cx.scalars(&at.pre)?;
    let b = cx.scalar(at.q_index[0])?;
    let i0 = cx.scalar(at.q_index[1])?;
    let (kb, vb) = (cx.scalar(at.k_batch)?, cx.scalar(at.v_batch)?);
    let (lo, hi) = (cx.scalar(at.lo)?, cx.scalar(at.hi)?);
    let q_lead = cx.lead_rows(at.pq, &[b]);
    let k_lead = cx.lead_rows(at.pk, &[kb]);
    let v_lead = cx.lead_rows(at.pv, &[vb]);
    let oks = [
        cx.lead_ok(at.pq, &[b]),
        cx.lead_ok(at.pk, &[kb]),
        cx.lead_ok(at.pv, &[vb]),
    ];
    let (sq, sk) = (cx.dims[at.pq][1], cx.dims[at.pk][1]);
    let fast = {
        let (dq, dk, dvv) = (cx.dims[at.pq][2], cx.dims[at.pk][2], cx.dims[at.pv][2]);
        let ptrs = [cx.ptrs[at.pq], cx.ptrs[at.pk], cx.ptrs[at.pv]];
        let a = &mut cx.asm;
        a.phase(
            "copy path: 16-byte cp.async when rows are multiples of 8 and pointers 16-byte aligned",
        );
        let t = a.r_op("or.b32", dq, dk);
        let t = a.r_op("or.b32", t, dvv);
        let t = a.r_op("and.b32", t, 7);
        for p in ptrs {
            let l = a.r();
            a.i(format!("cvt.u32.u64 {l}, {p}"));
            let l = a.r_op("and.b32", l, 15);
            a.i(format!("or.b32 {t}, {t}, {l}"));
        }
        let f = a.p();
        a.i(format!("setp.eq.u32 {f}, {t}, 0"));
        f
    };
    let zero = cx.asm.rconst(0);
    let smem = cx.smem;
    let ty = if at.dtype == DType::BF16 {
        "bf16"
    } else {
        "f16"
    };

    // Lane roles.
    let a = &mut cx.asm;
    a.phase(format!(
        "warp layout: {warps} warps x {mt} m16 tile(s) of query rows; S {}x{} and O {}x{} per warp",
        16 * mt,
        at.bn,
        16 * mt,
        at.dv
    ));
    let lane = a.r_op("and.b32", cx.tid, 31);
    let warp = a.r_op("shr.u32", cx.tid, 5);
    let gq = a.r_op("shr.u32", lane, 2);
    let t4 = a.r_op("and.b32", lane, 3);
    let t2 = a.r_op("shl.b32", t4, 1);
    let wrow = a.r_op("mul.lo.s32", warp, 16 * mt);

    // Q: global → shared → A fragments in registers.
    a.phase(format!(
        "Q tile {}x{} -> shared -> A fragments",
        at.bm, at.d
    ));
    copy::tile16(
        &mut cx,
        smem,
        &tq,
        &Src {
            gather: None,
            param: at.pq,
            lead_rows: q_lead,
            row0: i0,
            col0: zero,
        },
        fast,
    );
    let a = &mut cx.asm;
    a.i("cp.async.commit_group");
    a.i("cp.async.wait_group 0");
    a.i("bar.sync 0");
    let l16 = a.r_op("and.b32", lane, 15);
    let hi16 = a.r_op("shr.u32", lane, 4);
    let mut qf: Vec<Vec<[Reg; 4]>> = Vec::new();
    for m in 0..mt {
        let row = a.r_op("add.s32", wrow, l16);
        let row = a.r_op("add.s32", row, m * 16);
        let sw = a.r_op("shr.u32", row, tq.shift);
        let sw = a.r_op("and.b32", sw, tq.mask);
        let base = a.r();
        a.i(format!(
            "mad.lo.s32 {base}, {row}, {}, {smem}",
            tq.row_bytes
        ));
        let mut frags = Vec::new();
        for ks in 0..at.d / 16 {
            let ch = a.r_op("add.s32", hi16, 2 * ks);
            let ch = a.r_op("xor.b32", ch, sw);
            let ch = a.r_op("shl.b32", ch, 4);
            let addr = a.r_op("add.s32", base, ch);
            let r: [Reg; 4] = std::array::from_fn(|_| a.r());
            a.i(format!(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}}}, [{addr}]",
                list(&r)
            ));
            frags.push(r);
        }
        qf.push(frags);
    }
    a.comment("every warp has its Q fragments: the shared memory is the pipeline's now");
    a.i("bar.sync 0");

    // Per row slot (m16 tile m, half h: rows g and g+8): the causal limit, m and l.
    a.phase("row state: visible-key limit, running max m, partial sum l, O accumulators");
    let last = a.r_op("sub.s32", sk, 1);
    let off = a.r_op("sub.s32", sk, sq);
    let ninf = flit(f32::NEG_INFINITY);
    let mut limit = Vec::new();
    let (mut mrow, mut lrow) = (Vec::new(), Vec::new());
    for m in 0..mt {
        for h in 0..2 {
            let lim = if at.causal {
                let r = a.r_op("add.s32", wrow, gq);
                let r = a.r_op("add.s32", r, m * 16 + h * 8);
                let r = a.r_op("add.s32", r, i0);
                let r = a.r_op("add.s32", r, off);
                a.r_op("min.s32", r, last)
            } else {
                last
            };
            limit.push(lim);
            let (mr, lr) = (a.f(), a.f());
            a.i(format!("mov.f32 {mr}, {ninf}"));
            a.i(format!("mov.f32 {lr}, 0f00000000"));
            mrow.push(mr);
            lrow.push(lr);
        }
    }
    let nv = at.dv / 8;
    let ns = at.bn / 8;
    let acc: Vec<Vec<[Reg; 4]>> = (0..mt)
        .map(|_| {
            (0..nv)
                .map(|_| {
                    std::array::from_fn(|_| {
                        let f = a.f();
                        a.i(format!("mov.f32 {f}, 0f00000000"));
                        f
                    })
                })
                .collect()
        })
        .collect();
    // K/V tiles: (hi − lo) / BN rounded up; none when a batch index is out of bounds.
    let kt_count = {
        let d = a.r_op("sub.s32", hi, lo);
        let d = a.r_op("max.s32", d, 0);
        let d = a.r_op("add.s32", d, at.bn - 1);
        a.r_op("shr.u32", d, at.bn.trailing_zeros())
    };
    for l in oks.into_iter().flatten() {
        cx.asm.i(format!("selp.u32 {kt_count}, {kt_count}, 0, {l}"));
    }
    // The key origin of the tile being computed (advanced by BN after each).
    let jc = cx.asm.r();
    cx.asm.i(format!("mov.u32 {jc}, {lo}"));

    // ldmatrix lane addresses inside a stage. K (non-trans): matrix mi = lane/8 covers keys
    // (mi>>1)*8 + lane%8 of a 16-key pair, d chunk (mi&1). V (trans): key rows (mi&1)*8 +
    // lane%8, dv chunk (mi>>1) of a 16-column pair.
    let a = &mut cx.asm;
    let mi = a.r_op("shr.u32", lane, 3);
    let m1 = a.r_op("and.b32", mi, 1);
    let mh = a.r_op("shr.u32", mi, 1);
    let l8 = a.r_op("and.b32", lane, 7);
    let krow = a.r();
    a.i(format!("mad.lo.s32 {krow}, {mh}, 8, {l8}"));
    let vrow = a.r();
    a.i(format!("mad.lo.s32 {vrow}, {m1}, 8, {l8}"));

    let mma = format!("mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32");
    let (pk, pv) = (at.pk, at.pv);
    let mut load = |cx: &mut Ctx, tile: Reg, stage: Reg| {
        let a = &mut cx.asm;
        a.comment(format!(
            "copy K/V tile {tile} into stage {stage}: K {}x{}, V {}x{}",
            at.bn, at.d, at.bn, at.dv
        ));
        let j0 = a.r();
        a.i(format!("mad.lo.s32 {j0}, {tile}, {}, {lo}", at.bn));
        let kdst = a.r();
        a.i(format!("mad.lo.s32 {kdst}, {stage}, {stage_bytes}, {smem}"));
        let vdst = a.r_op("add.s32", kdst, tk.bytes());
        let src = |param, lead_rows| Src {
            gather: None,
            param,
            lead_rows,
            row0: j0,
            col0: zero,
        };
        copy::tile16(cx, kdst, &tk, &src(pk, k_lead), fast);
        copy::tile16(cx, vdst, &tv, &src(pv, v_lead), fast);
    };
    let mut compute = |cx: &mut Ctx, stage: Reg| {
        let a = &mut cx.asm;
        let kbase = a.r();
        a.i(format!(
            "mad.lo.s32 {kbase}, {stage}, {stage_bytes}, {smem}"
        ));
        let vbase = a.r_op("add.s32", kbase, tk.bytes());
        a.comment(format!(
            "S = Q K^T: {} k16 steps x {} key pairs",
            at.d / 16,
            at.bn / 16
        ));
        let sacc: Vec<Vec<[Reg; 4]>> = (0..mt)
            .map(|_| {
                (0..ns)
                    .map(|_| {
                        std::array::from_fn(|_| {
                            let f = a.f();
                            a.i(format!("mov.f32 {f}, 0f00000000"));
                            f
                        })
                    })
                    .collect()
            })
            .collect();
        for ks in 0..at.d / 16 {
            // One ldmatrix.x4 (two n8 key tiles) at a time, used at once: few live fragments.
            for np in 0..at.bn / 16 {
                let row = a.r_op("add.s32", krow, np * 16);
                let sw = a.r_op("shr.u32", row, tk.shift);
                let sw = a.r_op("and.b32", sw, tk.mask);
                let ch = a.r_op("add.s32", m1, 2 * ks);
                let ch = a.r_op("xor.b32", ch, sw);
                let ch = a.r_op("shl.b32", ch, 4);
                let addr = a.r();
                a.i(format!(
                    "mad.lo.s32 {addr}, {row}, {}, {kbase}",
                    tk.row_bytes
                ));
                let addr = a.r_op("add.s32", addr, ch);
                let r: [Reg; 4] = std::array::from_fn(|_| a.r());
                a.i(format!(
                    "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}}}, [{addr}]",
                    list(&r)
                ));
                for (m, qm) in qf.iter().enumerate() {
                    for (half, kfn) in [[r[0], r[1]], [r[2], r[3]]].iter().enumerate() {
                        let c = list(&sacc[m][2 * np + half]);
                        a.i(format!(
                            "{mma} {{{c}}}, {{{}}}, {{{}}}, {{{c}}}",
                            list(&qm[ks]),
                            list(kfn)
                        ));
                    }
                }
            }
        }
        a.comment("scale, mask (col <= limit(row)), online softmax per row slot");
        let cscale = a.fconst(at.scale as f32);
        let cbase = a.r_op("add.s32", jc, t2);
        for m in 0..mt {
            for h in 0..2 {
                let slot = m * 2 + h;
                let lim = limit[slot];
                let mut vals = Vec::new();
                for n in 0..ns {
                    for e in 0..2 {
                        let x = sacc[m][n][h * 2 + e];
                        a.i(format!("mul.rn.f32 {x}, {x}, {cscale}"));
                        let col = a.r_op("add.s32", cbase, n * 8 + e);
                        let p = a.p();
                        a.i(format!("setp.le.s32 {p}, {col}, {lim}"));
                        a.i(format!("selp.f32 {x}, {x}, {ninf}, {p}"));
                        vals.push(x);
                    }
                }
                let mx = a.f();
                a.i(format!("mov.f32 {mx}, {}", vals[0]));
                for v in &vals[1..] {
                    a.i(format!("max.f32 {mx}, {mx}, {v}"));
                }
                for sh in [1, 2] {
                    let o = a.f();
                    a.i(format!("shfl.sync.bfly.b32 {o}, {mx}, {sh}, 31, -1"));
                    a.i(format!("max.f32 {mx}, {mx}, {o}"));
                }
                let mnew = a.f();
                a.i(format!("max.f32 {mnew}, {}, {mx}", mrow[slot]));
                let dead = a.p();
                a.i(format!("setp.eq.f32 {dead}, {mnew}, {ninf}"));
                let ms = a.f();
                a.i(format!("selp.f32 {ms}, 0f00000000, {mnew}, {dead}"));
                let dm = a.f();
                a.i(format!("sub.rn.f32 {dm}, {}, {ms}", mrow[slot]));
                let alpha = math::exp(a, dm);
                a.i(format!("mov.f32 {}, {mnew}", mrow[slot]));
                let mut sum = None;
                for x in vals {
                    a.i(format!("sub.rn.f32 {x}, {x}, {ms}"));
                    let p = math::exp(a, x);
                    a.i(format!("mov.f32 {x}, {p}"));
                    sum = Some(match sum {
                        None => {
                            let s = a.f();
                            a.i(format!("mov.f32 {s}, {x}"));
                            s
                        }
                        Some(s) => {
                            a.i(format!("add.rn.f32 {s}, {s}, {x}"));
                            s
                        }
                    });
                }
                let lr = lrow[slot];
                a.i(format!(
                    "fma.rn.f32 {lr}, {lr}, {alpha}, {}",
                    sum.expect("BN >= 16")
                ));
                for accn in &acc[m] {
                    for e in 0..2 {
                        let x = accn[h * 2 + e];
                        a.i(format!("mul.rn.f32 {x}, {x}, {alpha}"));
                    }
                }
            }
        }
        a.comment(format!(
            "O += P V: P from the S accumulators ({ty}), V by ldmatrix.trans"
        ));
        for kk in 0..at.bn / 16 {
            let pf: Vec<[Reg; 4]> = (0..mt)
                .map(|m| {
                    let (s0, s1) = (&sacc[m][2 * kk], &sacc[m][2 * kk + 1]);
                    let pairs = [
                        (s0[0], s0[1]),
                        (s0[2], s0[3]),
                        (s1[0], s1[1]),
                        (s1[2], s1[3]),
                    ];
                    pairs.map(|(x, y)| {
                        let r = a.r();
                        a.i(format!("cvt.rn.{ty}x2.f32 {r}, {y}, {x}"));
                        r
                    })
                })
                .collect();
            let row = a.r_op("add.s32", vrow, kk * 16);
            let sw = a.r_op("shr.u32", row, tv.shift);
            let sw = a.r_op("and.b32", sw, tv.mask);
            let rbase = a.r();
            a.i(format!(
                "mad.lo.s32 {rbase}, {row}, {}, {vbase}",
                tv.row_bytes
            ));
            for np in 0..at.dv / 16 {
                let ch = a.r_op("add.s32", mh, 2 * np);
                let ch = a.r_op("xor.b32", ch, sw);
                let ch = a.r_op("shl.b32", ch, 4);
                let addr = a.r_op("add.s32", rbase, ch);
                let r: [Reg; 4] = std::array::from_fn(|_| a.r());
                a.i(format!(
                    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{}}}, [{addr}]",
                    list(&r)
                ));
                for (m, pm) in pf.iter().enumerate() {
                    for (half, bf) in [[r[0], r[1]], [r[2], r[3]]].iter().enumerate() {
                        let c = list(&acc[m][2 * np + half]);
                        a.i(format!(
                            "{mma} {{{c}}}, {{{}}}, {{{}}}, {{{c}}}",
                            list(pm),
                            list(bf)
                        ));
                    }
                }
            }
        }
        a.i(format!("add.s32 {jc}, {jc}, {}", at.bn));
    };
    super::pipeline::emit(&mut cx, stages, kt_count, &mut load, &mut compute);

    // O / l, then the frame for the shared epilogue.
    let a = &mut cx.asm;
    a.phase("O / l (row sums added over the quad)");
    for lr in &lrow {
        for sh in [1, 2] {
            let o = a.f();
            a.i(format!("shfl.sync.bfly.b32 {o}, {lr}, {sh}, 31, -1"));
            a.i(format!("add.rn.f32 {lr}, {lr}, {o}"));
        }
    }
    for (m, accm) in acc.iter().enumerate() {
        for accn in accm {
            for (e, x) in accn.iter().enumerate() {
                a.i(format!("div.rn.f32 {x}, {x}, {}", lrow[m * 2 + e / 2]));
            }
        }
    }
    let frame = frame(a, (wrow, gq, t2), mt, nv, &acc);
    epilogue::emit(&mut cx, &frame)?;

    let dyn_smem = (stage_bytes * stages as usize).max(tq.bytes());
    let mut text = abi::header(arch);
    let _ = writeln!(text, "// {} on {arch}: {s}", k.name);
    let _ = writeln!(
        text,
        "// tensor-core attention: {warps} warps x {}x{} query rows, mma.sync.m16n8k16.{ty} for S = QK^T and O += PV, {stages} cp.async K/V stage(s) of {stage_bytes} bytes{}",
        16 * mt,
        at.d,
        if at.causal { ", causal" } else { "" }
    );
    if stages != s.stages {
        let _ = writeln!(
            text,
            "// stages lowered from {} to {stages}: {} stages do not fit {arch}'s {optin} bytes of shared memory per block",
            s.stages, s.stages
        );
    }
    let _ = writeln!(text, ".extern .shared .align 16 .b8 smem[];\n");
    text.push_str(&abi::entry_signature(k));
    // `.maxnreg` (the hardware's own cap) on 8-warp blocks: without it ptxas 12.9 caps the
    // 128x64 sm_80 modules at 128 registers and spills 8 bytes (with it: ~160, no spill); on
    // 4-warp blocks stating it makes the head-dim-128 64x64 modules spill, so they go without.
    let maxnreg = if threads >= 256 {
        format!(".maxnreg {}\n", (65536 / threads).min(255))
    } else {
        String::new()
    };
    let _ = writeln!(text, "\n.maxntid {threads}, 1, 1\n{maxnreg}{{");
    text.push_str(&cx.asm.decls());
    text.push_str(cx.asm.body());
    text.push_str("\n    ret;\n}\n");
    Ok(Some(PtxKernel {
        entry: abi::ident(&k.name),
        arch,
        text,
        threads: threads as u32,
        dyn_smem: dyn_smem as u32,
        grid: k.grid.clone(),
        params: abi::params_of(k),
        lowered_stages: (stages != s.stages).then_some((s.stages, stages)),
    }))
}

/// The O accumulators as the epilogue's frame: row slot `2m + h` is tile row
/// `warp·16·mt + 16m + g + 8h`, column slot `2n + e` is column `8n + 2t + e` (the m16n8 C
/// layout).
fn frame(
    a: &mut Asm,
    (wrow, g, t2): (Reg, Reg, Reg),
    mt: usize,
    nv: usize,
    acc: &[Vec<[Reg; 4]>],
) -> Frame {
    let row0 = a.r_op("add.s32", wrow, g);
    let rows = (0..mt * 2)
        .map(|s| a.r_op("add.s32", row0, (s / 2) * 16 + (s % 2) * 8))
        .collect();
    let cols = (0..nv * 2)
        .map(|s| a.r_op("add.s32", t2, (s / 2) * 8 + s % 2))
        .collect();
    let acc = (0..mt * 2)
        .map(|mi| {
            (0..nv * 2)
                .map(|ni| acc[mi / 2][ni / 2][(mi % 2) * 2 + ni % 2])
                .collect()
        })
        .collect();
    Frame { rows, cols, acc }
}
