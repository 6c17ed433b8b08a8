//! The generic emitter: any verified Tile IR kernel → PTX.
//!
//! **Layout.** A block has `W` warps. A tile value is modelled as a 2-D `(R, C)` array: row `r`
//! lives in warp `r mod W` (slot row `r div W`), column `c` in lane `c mod 32` (slot column
//! `c div 32`). A model dim of 1 means *replicated*: every warp (or lane) holds it. Rank-1
//! tiles are modelled `(1, n)` ("columns", the default) or `(n, 1)` ("rows", what a row
//! reduction produces); scalars are `(1, 1)`. Broadcasting between these is local to each
//! thread; row reductions are warp shuffles; column reductions, transposes, layout changes and
//! the generic `dot` go through shared memory between barriers.
//!
//! **Numerics policies.** Under `deterministic` and `kahan_sum` the layout has one column per
//! lane; a row reduction then adds each lane's columns in order from `+0.0` and combines the
//! lanes by the butterfly `16, 8, 4, 2, 1` (the fixed tree of [`crate::NumericsPolicy`]); a
//! reduction over rows goes through shared memory and adds the rows in order; `dot` is an
//! in-order FMA chain (rounded to the accumulator's dtype each step); `exp` is the canonical
//! sequence. Under `kahan_sum` the lane and row folds carry a compensation and the butterfly
//! combines with TwoSum. Every thread runs every
//! instruction (no divergence around barriers); edges are handled by predicates.

mod fft;
mod layout;
mod memory;
mod ops;

use super::abi::{self, ParamRegs};
use super::asm::{Asm, Class, Reg};
use super::{Arch, EmitError, PtxKernel};
use crate::tile::{Inst, Kernel, Op, TValue};
use layout::DVal;

/// Emits `k` with `warps` warps per block.
pub(crate) fn emit(
    k: &Kernel,
    warps: u32,
    vector: u32,
    arch: Arch,
) -> Result<PtxKernel, EmitError> {
    let mut g = G::new(k, warps);
    (g.fft_loads, g.fft_stores) = fft::direct_chains(k);
    // Under deterministic and kahan_sum, one column per lane (no vector groups): a lane then
    // holds columns `lane + 32·j`, the lane partials of the fixed-order sum.
    let ordered = k.policy != crate::NumericsPolicy::Fast
        || k.insts.iter().any(
            |d| matches!(d.op, Op::Reduce { policy, .. } if policy != crate::NumericsPolicy::Fast),
        );
    g.v = if !ordered {
        vector.clamp(1, 4).next_power_of_two()
    } else {
        1
    };
    g.prologue();
    g.block(&k.body)?;
    Ok(g.finish(arch))
}

pub(super) struct G<'k> {
    pub k: &'k Kernel,
    pub a: Asm,
    pub w: u32,
    /// Vector width of the column layout (see [`DVal::v`]).
    pub v: u32,
    pub vals: Vec<Option<DVal>>,
    pub params: Vec<ParamRegs>,
    pub warp: Reg,
    pub lane: Reg,
    pub tid: Reg,
    /// Shared memory bytes needed (max over all uses; regions are reused between barriers).
    pub smem: usize,
    pub smem_base: Reg,
    /// Loads that feed a direct-path `fft` (not emitted; see `fft.rs`).
    fft_loads: std::collections::HashMap<TValue, fft::Direct>,
    /// Stores of direct-path `fft` results, by the stored value.
    fft_stores: std::collections::HashMap<TValue, fft::Direct>,
    /// Direct-path `fft` results kept in shared memory: (byte offset, L, W, scale).
    fft_smem: std::collections::HashMap<TValue, (usize, usize, usize, f32)>,
}

impl<'k> G<'k> {
    fn new(k: &'k Kernel, warps: u32) -> Self {
        let mut a = Asm::default();
        let (tid, warp, lane, smem_base) = (a.r(), a.r(), a.r(), a.r());
        G {
            k,
            a,
            w: warps.max(1),
            v: 1,
            vals: vec![None; k.types.len()],
            params: vec![],
            warp,
            lane,
            tid,
            smem: 0,
            smem_base,
            fft_loads: Default::default(),
            fft_stores: Default::default(),
            fft_smem: Default::default(),
        }
    }

    fn prologue(&mut self) {
        let (tid, warp, lane) = (self.tid, self.warp, self.lane);
        self.a.comment("thread coordinates");
        self.a.i(format!("mov.u32 {tid}, %tid.x"));
        self.a.i(format!("shr.u32 {warp}, {tid}, 5"));
        self.a.i(format!("and.b32 {lane}, {tid}, 31"));
        self.a
            .i(format!("mov.u32 {}, tessera_smem", self.smem_base));
        self.a.comment("parameters");
        self.params = abi::load_params(&mut self.a, self.k);
    }

    fn finish(self, arch: Arch) -> PtxKernel {
        let threads = self.w * 32;
        let mut text = abi::header(arch);
        let dyn_smem = if self.smem > 48 * 1024 {
            self.smem as u32
        } else {
            0
        };
        if dyn_smem > 0 {
            text.push_str(".extern .shared .align 16 .b8 tessera_smem[];\n\n");
        }
        text.push_str(&abi::entry_signature(self.k));
        text.push_str(&format!("\n.maxntid {threads}, 1, 1\n{{\n"));
        text.push_str(&self.a.decls());
        if dyn_smem == 0 {
            text.push_str(&format!(
                "    .shared .align 16 .b8 tessera_smem[{}];\n",
                self.smem.max(16)
            ));
        }
        text.push('\n');
        text.push_str(self.a.body());
        text.push_str("    ret;\n}\n");
        PtxKernel {
            entry: abi::ident(&self.k.name),
            arch,
            text,
            threads,
            dyn_smem,
            grid: self.k.grid.clone(),
            params: abi::params_of(self.k),
            lowered_stages: None,
        }
    }

    pub fn err(&self, m: impl Into<String>) -> EmitError {
        EmitError {
            kernel: self.k.name.clone(),
            message: m.into(),
        }
    }

    pub fn val(&self, v: TValue) -> &DVal {
        self.vals[v.index()]
            .as_ref()
            .expect("value defined before use (verified)")
    }

    /// Reserves `bytes` of shared memory for one barrier-delimited use (offset 0).
    pub fn need_smem(&mut self, bytes: usize) {
        self.smem = self.smem.max(bytes.next_multiple_of(16));
    }

    pub fn bar(&mut self) {
        self.a.i("bar.sync 0");
    }

    fn block(&mut self, block: &[Inst]) -> Result<Option<Vec<TValue>>, EmitError> {
        for &i in block {
            let d = self.k.inst(i).clone();
            self.a.comment(format!(
                "{} {}",
                d.results
                    .iter()
                    .map(|r| format!("%{}", r.0))
                    .collect::<Vec<_>>()
                    .join(", "),
                d.op.name()
            ));
            match &d.op {
                Op::Yield(vs) => return Ok(Some(vs.clone())),
                Op::For {
                    iv,
                    lo,
                    hi,
                    step,
                    inits,
                    args,
                    body,
                } => self.for_loop(*iv, *lo, *hi, *step, inits, args, body, &d.results)?,
                Op::Store { value, .. } if self.fft_smem.contains_key(value) => {
                    let (off, l, w, scale) = self.fft_smem[value];
                    let dst = self.fft_stores[value].clone();
                    self.fft_direct_store(&dst, l, w, off, scale);
                }
                Op::Store {
                    param,
                    index,
                    value,
                    mask,
                } => self.store(*param, index, *value, *mask)?,
                Op::Load { .. } if self.fft_loads.contains_key(&d.results[0]) => {}
                Op::Fft { a, inverse } if self.fft_loads.contains_key(a) => {
                    let (l, w) = match self.k.ty(*a).shape.as_slice() {
                        [l, w] => (*l, *w),
                        _ => return Err(self.err("fft needs a rank-2 tile (verified)")),
                    };
                    let src = self.fft_loads[a].clone();
                    let off = self.fft_direct(&src, l, w, *inverse);
                    let scale = if *inverse { 1.0 / l as f32 } else { 1.0 };
                    self.fft_smem.insert(d.results[0], (off, l, w, scale));
                }
                op => {
                    let ty = self.k.ty(d.results[0]).clone();
                    let v = self.op(op, &ty)?;
                    self.vals[d.results[0].index()] = Some(v);
                }
            }
        }
        Ok(None)
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        iv: TValue,
        lo: TValue,
        hi: TValue,
        step: i64,
        inits: &[TValue],
        args: &[TValue],
        body: &[Inst],
        results: &[TValue],
    ) -> Result<(), EmitError> {
        // Carried values get their own registers, assigned before the loop and at each yield.
        let mut carried = Vec::new();
        for (a, init) in args.iter().zip(inits) {
            let src = self.val(*init).clone();
            let dst = src.fresh_like(&mut self.a);
            dst.mov_from(&mut self.a, &src);
            self.vals[a.index()] = Some(dst.clone());
            carried.push(dst);
        }
        let ivr = self.a.r();
        let (lo_r, hi_r) = (self.val(lo).regs[0], self.val(hi).regs[0]);
        self.a.i(format!("mov.s32 {ivr}, {lo_r}"));
        self.vals[iv.index()] = Some(DVal::scalar(crate::DType::I32, ivr));
        let (head, end) = (self.a.label("for"), self.a.label("endfor"));
        let p = self.a.p();
        self.a.place(&head);
        self.a.i(format!("setp.ge.s32 {p}, {ivr}, {hi_r}"));
        self.a.i(format!("@{p} bra {end}"));
        let yielded = self.block(body)?.unwrap_or_default();
        // Two-step move so a yield that permutes carried values stays correct.
        let temps: Vec<DVal> = yielded
            .iter()
            .zip(&carried)
            .map(|(y, c)| {
                let y = self.relayout(*y, c.r, c.c)?;
                let t = y.fresh_like(&mut self.a);
                t.mov_from(&mut self.a, &y);
                Ok(t)
            })
            .collect::<Result<_, EmitError>>()?;
        for (t, c) in temps.iter().zip(&carried) {
            c.mov_from(&mut self.a, t);
        }
        self.a.i(format!("add.s32 {ivr}, {ivr}, {step}"));
        self.a.i(format!("bra.uni {head}"));
        self.a.place(&end);
        for (r, c) in results.iter().zip(carried) {
            self.vals[r.index()] = Some(c);
        }
        Ok(())
    }

    /// The value `v` in model `(r, c)`, converted through shared memory if needed.
    pub fn relayout(&mut self, v: TValue, r: usize, c: usize) -> Result<DVal, EmitError> {
        let d = self.val(v).clone();
        if (d.r, d.c) == (r, c) {
            return Ok(d);
        }
        self.convert(&d, r, c)
    }

    /// Writes a value's elements (logical row-major order) to shared memory, then reads them
    /// back in model `(r, c)`. A one-element value (model `(1, 1)`: every thread holds it) is
    /// broadcast instead: each slot of the result is its register. (Going through shared memory
    /// would write one element and read `r·c`, so every slot but the first read memory nobody
    /// wrote: a `[1]` operand of a `[BR]` row tile, such as a rank-0 tensor parameter in a
    /// row-wise kernel, was wrong from row 1 on.)
    pub fn convert(&mut self, d: &DVal, r: usize, c: usize) -> Result<DVal, EmitError> {
        if d.numel() == 1 {
            let mut out = DVal {
                r,
                c,
                regs: vec![],
                ..d.clone()
            };
            out.w = self.w;
            out.v = self.v;
            out.regs = vec![d.regs[0]; out.slots()];
            return Ok(out);
        }
        if d.r * d.c != r * c {
            return Err(self.err(format!(
                "cannot relayout a ({}, {}) tile as ({r}, {c})",
                d.r, d.c
            )));
        }
        self.need_smem(d.numel() * 4);
        self.write_smem(d, 0, false)?;
        self.bar();
        let out = self.read_smem(d.dtype, r, c, 0, false);
        self.bar();
        Ok(out)
    }

    /// Shared-memory element address (bytes) of `base_off + index*4`.
    pub fn smem_addr(&mut self, index: Reg, base_off: usize) -> Reg {
        let a = self.a.r();
        self.a
            .i(format!("mad.lo.u32 {a}, {index}, 4, {}", self.smem_base));
        if base_off > 0 {
            self.a.i(format!("add.u32 {a}, {a}, {base_off}"));
        }
        a
    }

    /// Writes every valid, owned element of `d` at its logical index (transposed if asked).
    pub fn write_smem(
        &mut self,
        d: &DVal,
        base_off: usize,
        transpose: bool,
    ) -> Result<(), EmitError> {
        for s in 0..d.slots() {
            let (row, col) = d.coords(self, s);
            let valid = d.owner_valid(self, s, &row, &col);
            let idx = self.a.r();
            let (ri, ci) = (
                row.unwrap_or_else(|| self.zero()),
                col.unwrap_or_else(|| self.zero()),
            );
            if transpose {
                self.a.i(format!("mad.lo.s32 {idx}, {ci}, {}, {ri}", d.r));
            } else {
                self.a.i(format!("mad.lo.s32 {idx}, {ri}, {}, {ci}", d.c));
            }
            let addr = self.smem_addr(idx, base_off);
            let reg = d.regs[s];
            let st = match reg.0 {
                Class::F => format!("st.shared.f32 [{addr}], {reg}"),
                Class::R => format!("st.shared.s32 [{addr}], {reg}"),
                Class::P => {
                    let t = self.a.r();
                    self.a.i(format!("selp.s32 {t}, 1, 0, {reg}"));
                    format!("st.shared.s32 [{addr}], {t}")
                }
                _ => return Err(self.err("unexpected register class in shared store")),
            };
            match valid {
                Some(p) => self.a.i(format!("@{p} {st}")),
                None => self.a.i(st),
            }
        }
        Ok(())
    }

    /// Reads a `(r, c)`-modelled value from shared memory laid out row-major `[r, c]`
    /// (or `[c, r]` when `transposed`), clamping addresses of padding slots.
    pub fn read_smem(
        &mut self,
        dtype: crate::DType,
        r: usize,
        c: usize,
        base_off: usize,
        transposed: bool,
    ) -> DVal {
        let mut out = DVal::alloc(&mut self.a, dtype, r, c, self.w, self.v);
        for s in 0..out.slots() {
            let (row, col) = out.coords(self, s);
            let ri = match row {
                Some(x) => self.clamp(x, r),
                None => self.zero(),
            };
            let ci = match col {
                Some(x) => self.clamp(x, c),
                None => self.zero(),
            };
            let idx = self.a.r();
            if transposed {
                self.a.i(format!("mad.lo.s32 {idx}, {ci}, {r}, {ri}"));
            } else {
                self.a.i(format!("mad.lo.s32 {idx}, {ri}, {c}, {ci}"));
            }
            let addr = self.smem_addr(idx, base_off);
            let reg = out.regs[s];
            match reg.0 {
                Class::F => self.a.i(format!("ld.shared.f32 {reg}, [{addr}]")),
                Class::R => self.a.i(format!("ld.shared.s32 {reg}, [{addr}]")),
                _ => {
                    let t = self.a.r();
                    self.a.i(format!("ld.shared.s32 {t}, [{addr}]"));
                    self.a.i(format!("setp.ne.s32 {reg}, {t}, 0"));
                }
            }
        }
        out.regs.shrink_to_fit();
        out
    }

    pub fn zero(&mut self) -> Reg {
        self.a.rconst(0)
    }

    /// `min(x, n − 1)` so padding slots address inside the array.
    pub fn clamp(&mut self, x: Reg, n: usize) -> Reg {
        let y = self.a.r();
        self.a
            .i(format!("min.s32 {y}, {x}, {}", n.saturating_sub(1)));
        y
    }
}
