//! The multi-stage `cp.async` software pipeline around a K loop.
//!
//! With `S ≥ 2` stages: a prologue issues tiles `0 .. S-2` (one commit group each, empty when
//! past the end), then every iteration `kt` does
//! `cp.async.wait_group S-2` (tile `kt` has landed for this thread) → `bar.sync 0` (… for every
//! thread, and every warp is done reading stage `(kt-1) % S`) → issue tile `kt+S-1` into that
//! freed stage → commit → compute stage `kt % S`. One barrier per K tile.
//! With `S = 1`: barrier → copy → `wait_group 0` → barrier → compute.

use super::ctx::Ctx;
use crate::target::ptx::asm::Reg;

/// Emits the pipeline. `load(cx, tile, stage)` issues the copies of K tile `tile` into stage
/// `stage` (registers); `compute(cx, stage)` consumes a stage. `kt_count` is the number of K
/// tiles (uniform).
pub(super) fn emit(
    cx: &mut Ctx,
    stages: u32,
    kt_count: Reg,
    load: &mut dyn FnMut(&mut Ctx, Reg, Reg),
    compute: &mut dyn FnMut(&mut Ctx, Reg),
) {
    let a = &mut cx.asm;
    let (kt, lt) = (a.r(), a.r());
    if stages == 1 {
        a.phase("main loop (1 stage: copy, wait, compute)");
        let zero = a.r();
        a.i(format!("mov.u32 {zero}, 0"));
        a.i(format!("mov.u32 {kt}, 0"));
        let (top, end) = (a.label("K_LOOP"), a.label("K_END"));
        a.place(&top);
        let p = a.p();
        a.i(format!("setp.ge.u32 {p}, {kt}, {kt_count}"));
        a.i(format!("@{p} bra.uni {end}"));
        a.i("bar.sync 0");
        load(cx, kt, zero);
        let a = &mut cx.asm;
        a.i("cp.async.commit_group");
        a.i("cp.async.wait_group 0");
        a.i("bar.sync 0");
        compute(cx, zero);
        let a = &mut cx.asm;
        a.i(format!("add.s32 {kt}, {kt}, 1"));
        a.i(format!("bra.uni {top}"));
        a.place(&end);
        return;
    }
    a.phase(format!(
        "pipeline prologue: issue K tiles 0..{} (one commit group each)",
        stages - 2
    ));
    a.i(format!("mov.u32 {lt}, 0"));
    let (top, end, skip) = (
        a.label("PROLOGUE"),
        a.label("PROLOGUE_END"),
        a.label("PROLOGUE_SKIP"),
    );
    a.place(&top);
    let p = a.p();
    a.i(format!("setp.ge.u32 {p}, {lt}, {}", stages - 1));
    a.i(format!("@{p} bra.uni {end}"));
    let q = a.p();
    a.i(format!("setp.ge.u32 {q}, {lt}, {kt_count}"));
    a.i(format!("@{q} bra.uni {skip}"));
    load(cx, lt, lt);
    let a = &mut cx.asm;
    a.place(&skip);
    a.i("cp.async.commit_group");
    a.i(format!("add.s32 {lt}, {lt}, 1"));
    a.i(format!("bra.uni {top}"));
    a.place(&end);

    a.phase(format!(
        "main loop: wait for tile kt, issue tile kt+{}, compute tile kt",
        stages - 1
    ));
    let (cs, ls) = (a.r(), a.r());
    a.i(format!("mov.u32 {kt}, 0"));
    a.i(format!("mov.u32 {cs}, 0"));
    a.i(format!("mov.u32 {ls}, {}", stages - 1));
    let (top, end, skip) = (a.label("K_LOOP"), a.label("K_END"), a.label("K_SKIP_COPY"));
    a.place(&top);
    let p = a.p();
    a.i(format!("setp.ge.u32 {p}, {kt}, {kt_count}"));
    a.i(format!("@{p} bra.uni {end}"));
    a.i(format!("cp.async.wait_group {}", stages - 2));
    a.i("bar.sync 0");
    let q = a.p();
    a.i(format!("setp.ge.u32 {q}, {lt}, {kt_count}"));
    a.i(format!("@{q} bra.uni {skip}"));
    load(cx, lt, ls);
    let a = &mut cx.asm;
    a.place(&skip);
    a.i("cp.async.commit_group");
    compute(cx, cs);
    let a = &mut cx.asm;
    a.comment("advance: kt, the tile to issue, and both ring indices");
    a.i(format!("add.s32 {kt}, {kt}, 1"));
    a.i(format!("add.s32 {lt}, {lt}, 1"));
    for s in [cs, ls] {
        a.i(format!("add.s32 {s}, {s}, 1"));
        let w = a.p();
        a.i(format!("setp.eq.u32 {w}, {s}, {stages}"));
        a.i(format!("selp.u32 {s}, 0, {s}, {w}"));
    }
    a.i(format!("bra.uni {top}"));
    a.place(&end);
    a.i("cp.async.wait_all");
}
