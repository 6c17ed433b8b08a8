//! The matmul template: Tile IR of the matmul class → one PTX module.
//!
//! Entry point: [`emit`]. It recognises the kernel structurally ([`pattern`]), then emits
//! parameters and index scalars ([`ctx`]), the K loop ([`mma`] or [`ffma`], wrapped in the
//! `cp.async` pipeline of [`pipeline`], copies in [`copy`]), and the per-element epilogue and
//! store ([`epilogue`], math from the shared [`super::math`]); text through the shared
//! [`super::asm::Asm`].
//!
//! Design:
//! - **bf16/f16 → tensor cores.** `s.warps` warps tile BM×BN as the most square split whose warp
//!   tile is a multiple of 16×16 (default 128×128, 8 warps: 2×4 warps of 64×32, i.e. 4×4
//!   `mma.sync.m16n8k16` tiles and 64 f32 accumulators per thread). Shared tiles are unpadded
//!   and XOR-swizzled per 16-byte chunk ([`layout::SmemTile`]); A is read with `ldmatrix.x4`,
//!   the k-major B with `ldmatrix.x4.trans`.
//! - **Pipeline**: `s.stages` stages of dynamic shared memory, `stages·(BM·BK + BK·BN)·2`
//!   bytes; when that exceeds the arch's opt-in limit the depth is lowered to what fits (noted
//!   in the module's comment; e.g. 128×256×64 keeps 2 of 3 stages on sm_89).
//! - **Edges**: any M, N, K. One uniform run-time branch per copy chooses 16-byte `cp.async`
//!   with zero fill (src-size 0) when row lengths are multiples of 8 and pointers 16-byte
//!   aligned, else a predicated scalar `ld.global.u16` + `st.shared.u16` path ([`copy`]).
//!   The epilogue predicates every element on `row < M`, `col < N`.
//! - **fp8 (`e4m3`/`e5m2`, sm_89 and sm_90a) → tensor cores** ([`fp8`]):
//!   `mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32`, f32 accumulation,
//!   the same warp tiling and accumulator frame as bf16, A and a transposed B as byte tiles
//!   read by `ldmatrix`; `.version 8.4` (what fp8 `mma` needs on every target). Per-tensor
//!   scales are epilogue ops like any other; an fp8 output is packed two columns at a time by
//!   `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`. sm_80 has no fp8 (`super::supports` rejects
//!   the kernel), and a `deterministic` fp8 GEMM takes the generic emitter's in-order FFMA
//!   `dot` over the decoded values, like bf16.
//! - **f32 → FFMA**, not tf32: tf32 keeps a 10-bit mantissa (~1e-3 relative), which cannot
//!   meet an f32 1e-5 tolerance. Each thread computes a `tm×tn` micro-tile (8×8 at the default)
//!   from a k-major A and row-major B in shared memory ([`ffma`]).
//! - **Attention** ([`attention`]): the online-softmax kernel of the attention class with
//!   bf16/f16 inputs runs both products on `mma.sync.m16n8k16` behind the same `cp.async`
//!   pipeline, copies and epilogue; f32 attention stays on the generic emitter (FFMA).
//! - **Epilogue**: the post-loop ops are evaluated per accumulator element; unsupported ops are
//!   an [`EmitError`] naming them, never skipped.
//! - No `.maxnreg`/`.minnctapersm`: 64 accumulators alone exceed a 64-register cap at the
//!   default tile, and forcing one spills. The entry carries `.maxntid threads, 1, 1`.

mod attention;
mod copy;
mod ctx;
mod epilogue;
mod ffma;
mod fp8;
mod layout;
mod mma;
mod pattern;
mod pipeline;

use super::abi::{self, PtxKernel};
use super::{Arch, EmitError};
use crate::DType;
use crate::schedule::Schedule;
use crate::tile;
use ctx::Ctx;
use mma::MainLoop;
use std::fmt::Write;

/// Emits `k` with the tensor-core (or FFMA) GEMM template; `Ok(None)` when `k` is not a
/// matmul-class kernel of the shape this template handles.
pub(crate) fn emit(
    k: &tile::Kernel,
    s: &Schedule,
    arch: Arch,
) -> Result<Option<PtxKernel>, EmitError> {
    if s.class == crate::schedule::KernelClass::Attention {
        return attention::emit(k, s, arch);
    }
    let Some(g) = pattern::recognise(k) else {
        return Ok(None);
    };
    // Tensor-core `mma` sums in the hardware's own order: a deterministic kernel takes the
    // generic emitter's in-order FFMA `dot` instead (the f32 FFMA template here already adds
    // in increasing k).
    if k.policy == crate::NumericsPolicy::Deterministic && g.dtype != DType::F32 {
        return Ok(None);
    }
    let err = |m: String| EmitError {
        kernel: k.name.clone(),
        message: m,
    };
    let ir_tile = [g.bm as u32, g.bn as u32, g.bk as u32];
    // A hand-written `tile!` program carries its tile in the IR and comes with a generic
    // schedule: take the tile from the IR, keep warps and ask for a 2-stage pipeline.
    let adopted;
    let s = if s.class != crate::schedule::KernelClass::Matmul {
        adopted = Schedule {
            class: crate::schedule::KernelClass::Matmul,
            tile: ir_tile.to_vec(),
            stages: s.stages.max(2),
            ..s.clone()
        };
        &adopted
    } else {
        s
    };
    if s.tile != ir_tile {
        return Err(err(format!(
            "gemm: tiles {}x{}x{} in the IR disagree with {s}",
            g.bm, g.bn, g.bk
        )));
    }
    if ![g.bm, g.bn, g.bk].iter().all(|d| d.is_power_of_two()) {
        return Err(err(format!(
            "gemm: tile {}x{}x{} must be powers of two",
            g.bm, g.bn, g.bk
        )));
    }
    let threads = s.warps as usize * 32;
    let tensor = g.dtype != DType::F32;
    let fp8 = super::math::fp8_name(g.dtype);
    let es = if tensor { 2 } else { 4 };
    let stage_bytes = match fp8 {
        Some(_) => fp8::stage_bytes(g.bm, g.bn, g.bk),
        None => (g.bm * g.bk + g.bk * g.bn) * es,
    };
    let stages = layout::stages_that_fit(stage_bytes, s.stages, arch).ok_or_else(|| {
        err(format!(
            "gemm: one {stage_bytes}-byte stage exceeds {arch}'s shared memory"
        ))
    })?;
    let (wt, mt) = if tensor {
        let kstep = if fp8.is_some() { 32 } else { 16 };
        if g.bk % kstep != 0 {
            return Err(err(format!(
                "gemm: BK = {} is not a multiple of {kstep} (mma k{kstep})",
                g.bk
            )));
        }
        let wt = layout::warp_tiling(g.bm, g.bn, s.warps as usize).ok_or_else(|| {
            err(format!(
                "gemm: {} warps cannot tile {}x{} in 16x16 warp tiles",
                s.warps, g.bm, g.bn
            ))
        })?;
        (Some(wt), None)
    } else {
        let mt = layout::micro_tiling(g.bm, g.bn, threads).ok_or_else(|| {
            err(format!(
                "gemm: {threads} threads cannot split {}x{} into micro-tiles",
                g.bm, g.bn
            ))
        })?;
        (None, Some(mt))
    };

    let mut cx = Ctx::new(&g, threads);
    cx.asm
        .phase("index scalars (program ids, tile origins, dims)");
    let pre = g.pre.clone();
    cx.scalars(&pre)?;
    let (na, nb) = (g.a_index.len(), g.b_index.len());
    let sc = |cx: &Ctx, v: &[tile::TValue]| {
        v.iter()
            .map(|x| cx.scalar(*x))
            .collect::<Result<Vec<_>, _>>()
    };
    let a_lead = sc(&cx, &g.a_index[..na - 2])?;
    let b_lead = sc(&cx, &g.b_index[..nb - 2])?;
    let x = cx.scalar(g.a_index[na - 2])?;
    let y = cx.scalar(g.b_index[nb - 1])?;
    let (lo, hi) = (cx.scalar(g.lo)?, cx.scalar(g.hi)?);
    cx.asm.phase("K tiles and batch offsets");
    let a_rows = cx.lead_rows(g.pa, &a_lead);
    let b_rows = cx.lead_rows(g.pb, &b_lead);
    let kt = {
        let a = &mut cx.asm;
        let d = a.r_op("sub.s32", hi, lo);
        let d = a.r_op("max.s32", d, 0);
        let d = a.r_op("add.s32", d, g.bk - 1);
        a.r_op("shr.u32", d, g.bk.trailing_zeros())
    };
    // Out-of-bounds batch indices read nothing: no K tiles (the accumulator keeps its init).
    let lead_ok = [cx.lead_ok(g.pa, &a_lead), cx.lead_ok(g.pb, &b_lead)];
    for l in lead_ok.into_iter().flatten() {
        cx.asm.i(format!("selp.u32 {kt}, {kt}, 0, {l}"));
    }
    let gather = match g.a_gather {
        Some(_) if fp8.is_some() => {
            return Err(err(
                "gemm: an fp8 implicit-GEMM convolution is not supported".into(),
            ));
        }
        Some((geom, chan)) => {
            let chan = cx.scalar(chan)?;
            Some(copy::Gather::new(&mut cx, g.pa, geom, chan))
        }
        None => None,
    };
    // A gathered A is 16-byte copyable only when a chunk of 8 `k` is 8 channels of one tap.
    let gather_unaligned = g.a_gather.is_some_and(|(geom, _)| geom.cg % 8 != 0);
    let m = MainLoop {
        gather,
        bm: g.bm,
        bn: g.bn,
        bk: g.bk,
        stages,
        ty: match (fp8, g.dtype) {
            (Some(t), _) => t,
            (None, DType::BF16) => "bf16",
            _ => "f16",
        },
        a: (g.pa, a_rows),
        b: (g.pb, b_rows),
        x,
        y,
        lo,
        kt_count: kt,
        acc_init: g.acc_init,
    };
    let frame = if let (Some(wt), Some(_)) = (wt, fp8) {
        fp8::emit(&mut cx, &m, wt)
    } else if let Some(wt) = wt {
        let fast = {
            let (ka, nb_) = (
                *cx.dims[g.pa].last().unwrap(),
                *cx.dims[g.pb].last().unwrap(),
            );
            let (pa, pb) = (cx.ptrs[g.pa], cx.ptrs[g.pb]);
            let a = &mut cx.asm;
            a.phase("copy path: 16-byte cp.async when rows are multiples of 8 and pointers 16-byte aligned");
            let t = a.r_op("or.b32", ka, nb_);
            let t = a.r_op("or.b32", t, lo);
            let t = a.r_op("or.b32", t, y);
            let t = a.r_op("and.b32", t, 7);
            let t = if gather_unaligned {
                a.r_op("or.b32", t, 1)
            } else {
                t
            };
            let (la, lb) = (a.r(), a.r());
            a.i(format!("cvt.u32.u64 {la}, {pa}"));
            a.i(format!("cvt.u32.u64 {lb}, {pb}"));
            let u = a.r_op("or.b32", la, lb);
            let u = a.r_op("and.b32", u, 15);
            let t = a.r_op("or.b32", t, u);
            let f = a.p();
            a.i(format!("setp.eq.u32 {f}, {t}, 0"));
            f
        };
        mma::emit(&mut cx, &m, wt, fast)
    } else {
        ffma::emit(&mut cx, &m, mt.unwrap())
    };
    epilogue::emit(&mut cx, &frame)?;

    let dyn_smem = stage_bytes * stages as usize;
    let mut text = match fp8 {
        // fp8 `mma.sync` needs PTX ISA 8.4 on every target (FACTS.md §6).
        Some(_) => abi::header(arch).replacen(
            &format!(".version {}", arch.ptx_version()),
            ".version 8.4",
            1,
        ),
        None => abi::header(arch),
    };
    let _ = writeln!(text, "// {} on {arch}: {s}", k.name);
    match (wt, mt) {
        (Some(w), _) => {
            let _ = writeln!(
                text,
                "// tensor cores: {}x{} warps of {}x{} (mma.sync.m16n8k{}.{}), {} stage(s) of {} bytes, {}",
                w.wm,
                w.wn,
                w.wtm,
                w.wtn,
                if fp8.is_some() { 32 } else { 16 },
                m.ty,
                stages,
                stage_bytes,
                if fp8.is_some() {
                    "padded byte rows, B transposed"
                } else {
                    "XOR-swizzled smem"
                }
            );
        }
        (_, Some(t)) => {
            let _ = writeln!(
                text,
                "// FFMA (f32): {}x{} per thread, {} stage(s) of {} bytes",
                t.tm, t.tn, stages, stage_bytes
            );
        }
        _ => {}
    }
    if stages != s.stages {
        let _ = writeln!(
            text,
            "// stages lowered from {} to {stages}: {} stages do not fit {arch}'s {} bytes of shared memory per block",
            s.stages,
            s.stages,
            arch.limits().smem_per_block_optin
        );
    }
    let _ = writeln!(text, ".extern .shared .align 16 .b8 smem[];\n");
    text.push_str(&abi::entry_signature(k));
    let _ = writeln!(text, "\n.maxntid {threads}, 1, 1\n{{");
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

#[cfg(test)]
mod tests;
