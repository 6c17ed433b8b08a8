//! The epilogue: the post-loop Tile IR evaluated per accumulator element, then the store.
//!
//! Every post-loop value is a tile broadcastable to `[BM, BN]` (or a scalar). Element
//! `(mi, ni)` of the thread's accumulator frame sits at tile-local row `rows[mi]`, column
//! `cols[ni]`. A value's register is cached by `(value, row slot if it varies along rows,
//! column slot if it varies along columns)`, so a `[1, BN]` bias is loaded once per column and
//! a scalar once. Columns are walked in adjacent pairs (`ni = 2q, 2q+1` are columns `c, c+1` in
//! both main loops), which lets the store write both with one vector store when the output's
//! row length and pointer allow (a uniform check); otherwise two predicated scalar stores.

use super::ctx::Ctx;
use crate::DType;
use crate::target::ptx::EmitError;
use crate::target::ptx::asm::Reg;
use crate::target::ptx::math;
use crate::tile::{Inst, Op, TValue};
use std::collections::HashMap;

/// The thread's accumulators and their tile-local coordinates.
pub(super) struct Frame {
    /// Tile-local row of each row slot (`u32` registers).
    pub rows: Vec<Reg>,
    /// Tile-local column of each column slot; slots `2q` and `2q+1` are adjacent columns.
    pub cols: Vec<Reg>,
    /// `acc[mi][ni]`.
    pub acc: Vec<Vec<Reg>>,
}

const ANY: usize = usize::MAX;

struct Eval<'f> {
    frame: &'f Frame,
    defs: HashMap<TValue, Inst>,
    memo: HashMap<(TValue, usize, usize), Reg>,
    /// Per load: its uniform parts (lead rows, lead predicate).
    loads: HashMap<TValue, (Reg, Option<Reg>)>,
}

/// Emits the epilogue and the store.
pub(super) fn emit(cx: &mut Ctx, frame: &Frame) -> Result<(), EmitError> {
    let g = cx.g;
    let k = g.k;
    cx.asm.phase("epilogue: index scalars");
    cx.scalars(&g.post)?;
    let mut ev = Eval {
        frame,
        defs: HashMap::new(),
        memo: HashMap::new(),
        loads: HashMap::new(),
    };
    for i in g.pre.iter().chain(&g.post) {
        for r in &k.inst(*i).results {
            ev.defs.insert(*r, *i);
        }
    }
    let Op::Store {
        param,
        index,
        value,
        mask,
    } = &k.inst(g.store).op
    else {
        unreachable!()
    };
    let vt = k.ty(*value);
    if vt.shape != [g.bm, g.bn] {
        return Err(cx.err(format!(
            "gemm epilogue: stored tile {vt} is not [{}, {}]",
            g.bm, g.bn
        )));
    }
    let out_ty = k.params[*param].dtype;
    let (es, st1, st2) = match out_ty {
        DType::F32 => (4, "st.global.f32", "st.global.v2.f32"),
        DType::BF16 | DType::F16 => (2, "st.global.b16", "st.global.b32"),
        DType::F8E4M3 | DType::F8E5M2 => (1, "st.global.u8", "st.global.b16"),
        t => return Err(cx.err(format!("gemm epilogue: store of {t} is not supported"))),
    };
    let rank = k.params[*param].rank;
    if index.len() != rank || rank < 2 {
        return Err(cx.err("gemm epilogue: store index does not match the output view"));
    }
    let idx: Vec<Reg> = index
        .iter()
        .map(|v| cx.scalar(*v))
        .collect::<Result<_, _>>()?;
    cx.asm
        .phase("epilogue: output bounds and vector-store check");
    let lead_rows = cx.lead_rows(*param, &idx[..rank - 2]);
    let lead_ok = cx.lead_ok(*param, &idx[..rank - 2]);
    let (nrows, ncols) = (cx.dims[*param][rank - 2], cx.dims[*param][rank - 1]);
    let (i0, j0) = (idx[rank - 2], idx[rank - 1]);
    let base = cx.ptrs[*param];
    let vec_ok = {
        let a = &mut cx.asm;
        let v = a.p();
        let t = a.r_op("or.b32", ncols, j0);
        let t = a.r_op("and.b32", t, 1);
        a.i(format!("setp.eq.u32 {v}, {t}, 0"));
        let lo = a.r();
        a.i(format!("cvt.u32.u64 {lo}, {base}"));
        let t = a.r_op("and.b32", lo, 2 * es - 1);
        a.i(format!("setp.eq.and.u32 {v}, {t}, 0, {v}"));
        v
    };

    let nslots = frame.cols.len();
    for q in 0..nslots / 2 {
        for mi in 0..frame.rows.len() {
            cx.asm.phase(format!(
                "epilogue: row slot {mi}, column slots {}..{}",
                2 * q,
                2 * q + 1
            ));
            let v0 = ev.value(cx, *value, mi, 2 * q)?;
            let v1 = ev.value(cx, *value, mi, 2 * q + 1)?;
            let a = &mut cx.asm;
            a.comment("store: bounds row < M, col < N");
            let row = a.r_op("add.s32", i0, frame.rows[mi]);
            let col = a.r_op("add.s32", j0, frame.cols[2 * q]);
            let col1 = a.r_op("add.s32", col, 1);
            let rok = a.p();
            a.i(format!("setp.lt.u32 {rok}, {row}, {nrows}"));
            if let Some(l) = &lead_ok {
                a.i(format!("and.pred {rok}, {rok}, {l}"));
            }
            let (ok0, ok1) = (a.p(), a.p());
            a.i(format!("setp.lt.and.u32 {ok0}, {col}, {ncols}, {rok}"));
            a.i(format!("setp.lt.and.u32 {ok1}, {col1}, {ncols}, {rok}"));
            if let Some(mv) = mask {
                // The store's mask (a grouped convolution's column limit), per column.
                let (r, c0, c1) = (frame.rows[mi], frame.cols[2 * q], frame.cols[2 * q + 1]);
                let m0 = ev.store_pred(cx, *mv, r, c0, None)?;
                let m1 = ev.store_pred(cx, *mv, r, c1, None)?;
                let a = &mut cx.asm;
                a.i(format!("and.pred {ok0}, {ok0}, {m0}"));
                a.i(format!("and.pred {ok1}, {ok1}, {m1}"));
            }
            let a = &mut cx.asm;
            let pv = a.p();
            a.i(format!("and.pred {pv}, {ok1}, {vec_ok}"));
            if mask.is_some() {
                // Unmasked, `col + 1 < N` implies `col < N`; a mask may keep one and not the other.
                a.i(format!("and.pred {pv}, {pv}, {ok0}"));
            }
            a.i(format!("and.pred {ok0}, {ok0}, !{pv}"));
            a.i(format!("and.pred {ok1}, {ok1}, !{pv}"));
            let rowflat = a.r_op("add.s32", lead_rows, row);
            let addr = cx.elem_addr(*param, rowflat, col, es);
            let a = &mut cx.asm;
            match out_ty {
                DType::F32 => {
                    a.i(format!("@{pv} {st2} [{addr}], {{{v0}, {v1}}}"));
                    a.i(format!("@{ok0} {st1} [{addr}], {v0}"));
                    a.i(format!("@{ok1} {st1} [{addr}+4], {v1}"));
                }
                DType::F8E4M3 | DType::F8E5M2 => {
                    // d[15:8] = fp8(v1), d[7:0] = fp8(v0): columns c, c+1 in memory order
                    let t = math::fp8_name(out_ty).unwrap();
                    let pk = a.h();
                    a.i(format!("cvt.rn.satfinite.{t}x2.f32 {pk}, {v1}, {v0}"));
                    let (b0, b1) = (a.r(), a.r());
                    a.i(format!("cvt.u32.u16 {b0}, {pk}"));
                    a.i(format!("shr.u32 {b1}, {b0}, 8"));
                    a.i(format!("@{pv} {st2} [{addr}], {pk}"));
                    a.i(format!("@{ok0} {st1} [{addr}], {b0}"));
                    a.i(format!("@{ok1} {st1} [{addr}+1], {b1}"));
                }
                _ => {
                    let t = if out_ty == DType::BF16 { "bf16" } else { "f16" };
                    let pk = a.r();
                    a.i(format!("cvt.rn.{t}x2.f32 {pk}, {v1}, {v0}"));
                    let (h0, h1) = (a.h(), a.h());
                    a.i(format!("mov.b32 {{{h0}, {h1}}}, {pk}"));
                    a.i(format!("@{pv} {st2} [{addr}], {pk}"));
                    a.i(format!("@{ok0} {st1} [{addr}], {h0}"));
                    a.i(format!("@{ok1} {st1} [{addr}+2], {h1}"));
                }
            }
        }
    }
    Ok(())
}

impl Eval<'_> {
    /// The predicate of the `bool` value `v` at tile-local `(row, col)` (a store mask); a
    /// rank-1 value (under an `expand`) is indexed by `pos`. Supports comparisons of `i32`
    /// index values.
    fn store_pred(
        &mut self,
        cx: &mut Ctx,
        v: TValue,
        row: Reg,
        col: Reg,
        pos: Option<Reg>,
    ) -> Result<Reg, EmitError> {
        let k = cx.g.k;
        match self.defs.get(&v).map(|i| k.inst(*i).op.clone()) {
            Some(Op::Cmp(op, x, y)) => {
                let (x, y) = (
                    self.int_at(cx, x, pos, row, col)?,
                    self.int_at(cx, y, pos, row, col)?,
                );
                let p = cx.asm.p();
                cx.asm.i(format!("setp.{}.s32 {p}, {x}, {y}", op.name()));
                Ok(p)
            }
            Some(Op::Expand { a, axis }) => {
                let pos = if axis == 0 { col } else { row };
                self.store_pred(cx, a, row, col, Some(pos))
            }
            Some(Op::Broadcast(a)) => self.store_pred(cx, a, row, col, pos),
            _ => Err(cx.err(format!(
                "gemm epilogue: mask %{} is not a comparison of index values",
                v.0
            ))),
        }
    }

    /// The f32 register of value `v` at element `(mi, ni)`.
    fn value(&mut self, cx: &mut Ctx, v: TValue, mi: usize, ni: usize) -> Result<Reg, EmitError> {
        let k = cx.g.k;
        if v == cx.g.acc {
            return Ok(self.frame.acc[mi][ni]);
        }
        let ty = k.ty(v).clone();
        let (vr, vc) = match ty.shape.as_slice() {
            [] => (false, false),
            [r, c] => (*r > 1, *c > 1),
            _ => {
                return Err(cx.err(format!(
                    "gemm epilogue: %{} has rank-{} type {ty}",
                    v.0,
                    ty.shape.len()
                )));
            }
        };
        let key = (v, if vr { mi } else { ANY }, if vc { ni } else { ANY });
        if let Some(r) = self.memo.get(&key) {
            return Ok(*r);
        }
        // A 16-bit or fp8 value lives in an f32 register already rounded to its type
        // (`math::round`); the store converts it again, exactly.
        if !matches!(
            ty.dtype,
            DType::F32 | DType::BF16 | DType::F16 | DType::F8E4M3 | DType::F8E5M2
        ) {
            return Err(cx.err(format!(
                "gemm epilogue: %{} of type {ty} is not a float tile",
                v.0
            )));
        }
        let Some(inst) = self.defs.get(&v).copied() else {
            return Err(cx.err(format!(
                "gemm epilogue: %{} is not defined at top level",
                v.0
            )));
        };
        let op = k.inst(inst).op.clone();
        let r = match &op {
            Op::Const(x) | Op::Full(x) => cx.asm.fconst(*x as f32),
            Op::Unary(u, x) => {
                let x = self.value(cx, *x, mi, ni)?;
                let canonical = k.policy == crate::NumericsPolicy::Deterministic;
                math::unary_with(&mut cx.asm, *u, x, canonical)
            }
            Op::Binary(b, x, y) => {
                let x = self.value(cx, *x, mi, ni)?;
                let y = self.value(cx, *y, mi, ni)?;
                math::binary(&mut cx.asm, *b, x, y)
            }
            // Per element, a broadcast is the element itself.
            Op::Broadcast(x) => self.value(cx, *x, mi, ni)?,
            Op::Cast(x) => {
                let x = self.value(cx, *x, mi, ni)?;
                math::round(&mut cx.asm, ty.dtype, x)
            }
            Op::Load {
                param,
                index,
                mask,
                other,
            } => {
                if mask.is_some() {
                    return Err(cx.err("gemm epilogue: masked load is not supported"));
                }
                self.load(cx, v, *param, index, *other, mi, ni)?
            }
            Op::Select(m, x, y) => {
                let m = self.pred(cx, *m, mi, ni)?;
                let x = self.value(cx, *x, mi, ni)?;
                let y = self.value(cx, *y, mi, ni)?;
                let d = cx.asm.f();
                cx.asm.i(format!("selp.f32 {d}, {x}, {y}, {m}"));
                d
            }
            op => {
                return Err(cx.err(format!(
                    "gemm epilogue: `{}` (%{}) is not supported per element",
                    op.name(),
                    v.0
                )));
            }
        };
        self.memo.insert(key, r);
        Ok(r)
    }

    /// The predicate of `bool` value `v` at element `(mi, ni)`: a comparison of two `i32`
    /// or two float values.
    fn pred(&mut self, cx: &mut Ctx, v: TValue, mi: usize, ni: usize) -> Result<Reg, EmitError> {
        let k = cx.g.k;
        let Some(inst) = self.defs.get(&v).copied() else {
            return Err(cx.err(format!(
                "gemm epilogue: %{} is not defined at top level",
                v.0
            )));
        };
        match k.inst(inst).op.clone() {
            Op::Cmp(c, x, y) => {
                let (x, y, t) = if k.ty(x).dtype == DType::I32 {
                    (self.int(cx, x, mi, ni)?, self.int(cx, y, mi, ni)?, "s32")
                } else {
                    (
                        self.value(cx, x, mi, ni)?,
                        self.value(cx, y, mi, ni)?,
                        "f32",
                    )
                };
                let p = cx.asm.p();
                cx.asm.i(format!("setp.{}.{t} {p}, {x}, {y}", c.name()));
                Ok(p)
            }
            Op::Broadcast(x) => self.pred(cx, x, mi, ni),
            op => Err(cx.err(format!(
                "gemm epilogue: `{}` (%{}) is not supported as a per-element mask",
                op.name(),
                v.0
            ))),
        }
    }

    /// The `i32` register of value `v` at element `(mi, ni)`: a scalar index, or an `arange`
    /// expanded along the rows (`[n, 1]`: the element's tile-local row) or the columns
    /// (`[1, n]`: its column), combined by integer ops (a causal mask's positions).
    fn int(&mut self, cx: &mut Ctx, v: TValue, mi: usize, ni: usize) -> Result<Reg, EmitError> {
        let (row, col) = (self.frame.rows[mi], self.frame.cols[ni]);
        self.int_at(cx, v, None, row, col)
    }

    /// The `i32` index value `v` at tile-local `(row, col)`; `along` is the index a rank-1
    /// value is read at (inside an `expand`: the row or the column).
    fn int_at(
        &mut self,
        cx: &mut Ctx,
        v: TValue,
        along: Option<Reg>,
        row: Reg,
        col: Reg,
    ) -> Result<Reg, EmitError> {
        let k = cx.g.k;
        if k.ty(v).shape.is_empty() {
            return cx.scalar(v);
        }
        let Some(inst) = self.defs.get(&v).copied() else {
            return Err(cx.err(format!(
                "gemm epilogue: %{} is not defined at top level",
                v.0
            )));
        };
        match k.inst(inst).op.clone() {
            Op::Arange => along.ok_or_else(|| {
                cx.err(format!(
                    "gemm epilogue: `arange` (%{}) must be expanded to a row or a column",
                    v.0
                ))
            }),
            Op::Expand { a, axis } => {
                let at = if axis == 1 { row } else { col };
                self.int_at(cx, a, Some(at), row, col)
            }
            Op::Binary(op, x, y) => {
                let x = self.int_at(cx, x, along, row, col)?;
                let y = self.int_at(cx, y, along, row, col)?;
                Ok(cx.asm.r_op(math::s32_binary(op), x, y))
            }
            Op::Broadcast(x) => self.int_at(cx, x, along, row, col),
            op => Err(cx.err(format!(
                "gemm epilogue: i32 `{}` (%{}) is not supported per element",
                op.name(),
                v.0
            ))),
        }
    }

    /// Element `(mi, ni)` of a loaded operand tile, `other` when out of bounds.
    #[allow(clippy::too_many_arguments)]
    fn load(
        &mut self,
        cx: &mut Ctx,
        v: TValue,
        param: usize,
        index: &[TValue],
        other: f64,
        mi: usize,
        ni: usize,
    ) -> Result<Reg, EmitError> {
        let k = cx.g.k;
        let ty = k.ty(v).clone();
        let rank = k.params[param].rank;
        let pty = k.params[param].dtype;
        if index.len() != rank || rank < 2 || ty.shape.len() != 2 {
            return Err(cx.err(format!(
                "gemm epilogue: load of %{} must be a rank-2 tile of a rank ≥ 2 view",
                v.0
            )));
        }
        if ty.shape[0] != 1 && ty.shape[0] != cx.g.bm || ty.shape[1] != 1 && ty.shape[1] != cx.g.bn
        {
            return Err(cx.err(format!(
                "gemm epilogue: loaded tile {ty} does not broadcast to the output tile"
            )));
        }
        let idx: Vec<Reg> = index
            .iter()
            .map(|x| cx.scalar(*x))
            .collect::<Result<_, _>>()?;
        self.loads.entry(v).or_insert_with(|| {
            let lr = cx.lead_rows(param, &idx[..rank - 2]);
            let lo = cx.lead_ok(param, &idx[..rank - 2]);
            (lr, lo)
        });
        let (lead_rows, lead_ok) = self.loads[&v];
        let (nrows, ncols) = (cx.dims[param][rank - 2], cx.dims[param][rank - 1]);
        let a = &mut cx.asm;
        a.comment(format!(
            "load %{} at ({}, {})",
            v.0,
            if ty.shape[0] > 1 { "row" } else { "origin" },
            if ty.shape[1] > 1 { "col" } else { "origin" }
        ));
        let row = if ty.shape[0] > 1 {
            a.r_op("add.s32", idx[rank - 2], self.frame.rows[mi])
        } else {
            idx[rank - 2]
        };
        let col = if ty.shape[1] > 1 {
            a.r_op("add.s32", idx[rank - 1], self.frame.cols[ni])
        } else {
            idx[rank - 1]
        };
        let ok = a.p();
        a.i(format!("setp.lt.u32 {ok}, {row}, {nrows}"));
        a.i(format!("setp.lt.and.u32 {ok}, {col}, {ncols}, {ok}"));
        if let Some(l) = &lead_ok {
            a.i(format!("and.pred {ok}, {ok}, {l}"));
        }
        let rowflat = a.r_op("add.s32", lead_rows, row);
        let es = match pty {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
            t => return Err(cx.err(format!("gemm epilogue: load of {t} is not supported"))),
        };
        let addr = cx.elem_addr(param, rowflat, col, es);
        let a = &mut cx.asm;
        let f = a.fconst(other as f32);
        match pty {
            DType::F32 => a.i(format!("@{ok} ld.global.f32 {f}, [{addr}]")),
            _ => {
                let t = if pty == DType::BF16 { "bf16" } else { "f16" };
                let h = a.h();
                a.i(format!("mov.b16 {h}, 0"));
                a.i(format!("@{ok} ld.global.u16 {h}, [{addr}]"));
                let g = a.f();
                a.i(format!("cvt.f32.{t} {g}, {h}"));
                a.i(format!("selp.f32 {f}, {g}, {f}, {ok}"));
            }
        }
        Ok(f)
    }
}
