//! Block loads and stores: each thread accesses the elements it owns, predicated by the
//! tensor's bounds (and the mask); lanes map to consecutive columns, so accesses coalesce.

use super::G;
use super::layout::DVal;
use super::ops::model;
use crate::DType;
use crate::target::ptx::asm::{Class, Reg, flit, list};
use crate::target::ptx::{EmitError, math};
use crate::tile::{TValue, TileType};

/// Where slot coordinates land in the tensor: the in-bounds predicate and the byte address.
struct Access {
    ok: Reg,
    addr: Reg,
}

/// Per-row part of an access.
struct RowBase {
    ok: Option<Reg>,
    lin: Reg,
    last: Reg,
    last_dim: Reg,
}

impl G<'_> {
    /// The part of an access shared by all slots of one slot row: the in-bounds predicate of
    /// the leading and row coordinates, and the 64-bit linear index of column 0.
    fn row_base(
        &mut self,
        param: usize,
        index: &[TValue],
        tile_rank: usize,
        row: Option<Reg>,
    ) -> RowBase {
        let p = &self.k.params[param];
        let rank = p.rank;
        let dims = self.params[param].dims.clone();
        let idx: Vec<Reg> = index.iter().map(|v| self.val(*v).regs[0]).collect();
        // All axes but the last: leading axes use the index as is; a rank-2 tile's row adds.
        let mut preds = Vec::new();
        let lin = self.a.d();
        self.a.i(format!("mov.u64 {lin}, 0"));
        for ax in 0..rank - 1 {
            let coord = match (tile_rank, rank - ax, row) {
                (2, 2, Some(o)) => {
                    let x = self.a.r();
                    self.a.i(format!("add.s32 {x}, {}, {o}", idx[ax]));
                    x
                }
                _ => idx[ax],
            };
            preds.push(format!("setp.lt.u32 {{p}}, {coord}, {}", dims[ax]));
            let (t, c64) = (self.a.d(), self.a.d());
            self.a.i(format!("cvt.u64.u32 {t}, {}", dims[ax + 1]));
            self.a.i(format!("cvt.s64.s32 {c64}, {coord}"));
            self.a.i(format!("add.s64 {lin}, {lin}, {c64}"));
            self.a.i(format!("mul.lo.s64 {lin}, {lin}, {t}"));
        }
        let ok = self.and_all(preds);
        RowBase {
            ok,
            lin,
            last: idx[rank - 1],
            last_dim: dims[rank - 1],
        }
    }

    /// Predicate and address of column `col` (or the index itself for scalar tiles) of a row.
    fn access(&mut self, param: usize, rb: &RowBase, tile_rank: usize, col: Option<Reg>) -> Access {
        let (ptr, esize) = (
            self.params[param].ptr,
            self.k.params[param].dtype.size_bytes(),
        );
        let c = match (tile_rank, col) {
            (1 | 2, Some(o)) => {
                let x = self.a.r();
                self.a.i(format!("add.s32 {x}, {}, {o}", rb.last));
                x
            }
            _ => rb.last,
        };
        let inb = self.a.p();
        self.a.i(format!("setp.lt.u32 {inb}, {c}, {}", rb.last_dim));
        let ok = match rb.ok {
            Some(q) => {
                let r = self.a.p();
                self.a.i(format!("and.pred {r}, {q}, {inb}"));
                r
            }
            None => inb,
        };
        let (c64, lin, addr) = (self.a.d(), self.a.d(), self.a.d());
        self.a.i(format!("cvt.s64.s32 {c64}, {c}"));
        self.a.i(format!("add.s64 {lin}, {}, {c64}", rb.lin));
        self.a
            .i(format!("mad.lo.s64 {addr}, {lin}, {esize}, {ptr}"));
        Access { ok, addr }
    }

    pub(super) fn load(
        &mut self,
        param: usize,
        index: &[TValue],
        mask: Option<TValue>,
        other: f64,
        ty: &TileType,
    ) -> Result<DVal, EmitError> {
        let (r, c) = model(ty);
        let dtype = ty.dtype;
        let out = DVal::alloc(&mut self.a, dtype, r, c, self.w, self.v);
        let m = match mask {
            Some(mv) => Some(self.mask_for(mv, ty)?),
            None => None,
        };
        let done = if m.is_none() && self.vectorizable(&out, ty) {
            // 16-byte (or v-element) accesses when the tensor, its row length and the tile
            // origin are aligned; a uniform branch picks this path or the per-element one.
            let aligned = self.vector_aligned(param, index);
            let (scalar, done) = (self.a.label("ld_scalar"), self.a.label("ld_done"));
            self.a.i(format!("@!{aligned} bra {scalar}"));
            self.load_vectors(param, index, &out, other, ty)?;
            self.a.i(format!("bra.uni {done}"));
            self.a.place(&scalar);
            Some(done)
        } else {
            None
        };
        let scols = out.slot_cols();
        let mut rb = None;
        for s in 0..out.slots() {
            let (row, col) = out.coords(self, s);
            if s % scols == 0 {
                rb = Some(self.row_base(param, index, ty.shape.len(), row));
            }
            let acc = self.access(param, rb.as_ref().unwrap(), ty.shape.len(), col);
            let ok = match &m {
                Some(md) => {
                    let q = self.a.p();
                    self.a.i(format!(
                        "and.pred {q}, {}, {}",
                        acc.ok,
                        md.regs[md.slot_for(s / scols, s % scols)]
                    ));
                    q
                }
                None => acc.ok,
            };
            let dst = out.regs[s];
            let (ok, addr) = (ok, acc.addr);
            match dtype {
                DType::F32 => {
                    self.a.i(format!("mov.f32 {dst}, {}", flit(other as f32)));
                    self.a.i(format!("@{ok} ld.global.f32 {dst}, [{addr}]"));
                }
                DType::BF16 | DType::F16 => {
                    let h = self.a.reg(Class::H);
                    let t = self.a.f();
                    self.a.i(format!("mov.f32 {dst}, {}", flit(other as f32)));
                    self.a.i(format!("@{ok} ld.global.b16 {h}, [{addr}]"));
                    let cvt = if dtype == DType::BF16 {
                        "cvt.f32.bf16"
                    } else {
                        "cvt.f32.f16"
                    };
                    self.a.i(format!("@{ok} {cvt} {t}, {h}"));
                    self.a.i(format!("@{ok} mov.f32 {dst}, {t}"));
                }
                DType::I32 => {
                    self.a.i(format!("mov.s32 {dst}, {}", other as i32));
                    self.a.i(format!("@{ok} ld.global.s32 {dst}, [{addr}]"));
                }
                DType::F8E4M3 | DType::F8E5M2 => {
                    let h = self.a.reg(Class::H);
                    self.a.i(format!("mov.f32 {dst}, {}", flit(other as f32)));
                    self.a.i(format!("mov.b16 {h}, 0"));
                    self.a.i(format!("@{ok} ld.global.u8 {h}, [{addr}]"));
                    let t = math::fp8_to_f32(&mut self.a, dtype, h);
                    self.a.i(format!("@{ok} mov.f32 {dst}, {t}"));
                }
                DType::Bool => {
                    let t = self.a.r();
                    self.a.i(format!("mov.u32 {t}, {}", (other != 0.0) as u32));
                    self.a.i(format!("@{ok} ld.global.u8 {t}, [{addr}]"));
                    self.a.i(format!("setp.ne.u32 {dst}, {t}, 0"));
                }
            }
        }
        if let Some(done) = done {
            self.a.place(&done);
        }
        Ok(out)
    }

    /// True when `d` (the tile being accessed) can use vector accesses: lanes own `v`
    /// adjacent columns, the tile's width is a multiple of `v`, and the dtype packs.
    fn vectorizable(&self, d: &DVal, ty: &TileType) -> bool {
        d.v > 1
            && d.c > 1
            && !ty.shape.is_empty()
            && d.c.is_multiple_of(d.v as usize)
            && matches!(d.dtype, DType::F32 | DType::I32 | DType::BF16 | DType::F16)
    }

    /// Uniform predicate: the tensor's base pointer, its row length and the tile's column
    /// origin are all multiples of the vector, so every lane's group is aligned.
    fn vector_aligned(&mut self, param: usize, index: &[TValue]) -> Reg {
        let v = self.v as u64;
        let bytes = v * self.k.params[param].dtype.size_bytes() as u64;
        let ptr = self.params[param].ptr;
        let last_dim = *self.params[param].dims.last().expect("rank ≥ 1");
        let origin = self.val(*index.last().expect("rank ≥ 1")).regs[0];
        let (t64, t1, t2) = (self.a.d(), self.a.r(), self.a.r());
        let (p1, p2, p3, q, ok) = (self.a.p(), self.a.p(), self.a.p(), self.a.p(), self.a.p());
        self.a.i(format!("and.b64 {t64}, {ptr}, {}", bytes - 1));
        self.a.i(format!("setp.eq.u64 {p1}, {t64}, 0"));
        self.a.i(format!("and.b32 {t1}, {last_dim}, {}", v - 1));
        self.a.i(format!("setp.eq.u32 {p2}, {t1}, 0"));
        self.a.i(format!("and.b32 {t2}, {origin}, {}", v - 1));
        self.a.i(format!("setp.eq.u32 {p3}, {t2}, 0"));
        self.a.i(format!("and.pred {q}, {p1}, {p2}"));
        self.a.i(format!("and.pred {ok}, {q}, {p3}"));
        ok
    }

    /// The vector path of a load: one access per lane group of `v` columns when the whole
    /// group is inside the tensor, element accesses for a group that straddles its edge.
    fn load_vectors(
        &mut self,
        param: usize,
        index: &[TValue],
        out: &DVal,
        other: f64,
        ty: &TileType,
    ) -> Result<(), EmitError> {
        let (v, scols, rank) = (out.v as usize, out.slot_cols(), ty.shape.len());
        let dtype = out.dtype;
        for sr in 0..out.slot_rows() {
            let (row, _) = out.coords(self, sr * scols);
            let rb = self.row_base(param, index, rank, row);
            for g in 0..scols / v {
                let s0 = sr * scols + g * v;
                let mut oks = Vec::new();
                let mut addrs = Vec::new();
                for j in 0..v {
                    let (_, col) = out.coords(self, s0 + j);
                    let acc = self.access(param, &rb, rank, col);
                    oks.push(acc.ok);
                    addrs.push(acc.addr);
                }
                let full = self.a.p();
                self.a
                    .i(format!("and.pred {full}, {}, {}", oks[0], oks[v - 1]));
                let regs = &out.regs[s0..s0 + v];
                for &dst in regs {
                    match dtype {
                        DType::I32 => self.a.i(format!("mov.s32 {dst}, {}", other as i32)),
                        _ => self.a.i(format!("mov.f32 {dst}, {}", flit(other as f32))),
                    }
                }
                match dtype {
                    DType::F32 | DType::I32 => {
                        let t = if dtype == DType::F32 { "f32" } else { "s32" };
                        self.a.i(format!(
                            "@{full} ld.global.v{v}.{t} {{{}}}, [{}]",
                            list(regs),
                            addrs[0]
                        ));
                    }
                    _ => {
                        let words: Vec<Reg> = (0..v / 2).map(|_| self.a.r()).collect();
                        let ld = if words.len() == 1 {
                            "ld.global.b32".to_string()
                        } else {
                            format!("ld.global.v{}.b32", words.len())
                        };
                        let dstw = if words.len() == 1 {
                            words[0].to_string()
                        } else {
                            format!("{{{}}}", list(&words))
                        };
                        self.a.i(format!("@{full} {ld} {dstw}, [{}]", addrs[0]));
                        let cvt = if dtype == DType::BF16 {
                            "cvt.f32.bf16"
                        } else {
                            "cvt.f32.f16"
                        };
                        for (wi, w) in words.iter().enumerate() {
                            let (lo, hi) = (self.a.h(), self.a.h());
                            self.a.i(format!("@{full} mov.b32 {{{lo}, {hi}}}, {w}"));
                            self.a.i(format!("@{full} {cvt} {}, {lo}", regs[2 * wi]));
                            self.a
                                .i(format!("@{full} {cvt} {}, {hi}", regs[2 * wi + 1]));
                        }
                    }
                }
                // A group on the tensor's edge: element by element.
                let nf = self.a.p();
                self.a.i(format!("not.pred {nf}, {full}"));
                for j in 0..v {
                    let p = self.a.p();
                    self.a.i(format!("and.pred {p}, {nf}, {}", oks[j]));
                    self.load_elem(dtype, regs[j], p, addrs[j])?;
                }
            }
        }
        Ok(())
    }

    /// One predicated element load into `dst` (already holding the `other` value).
    fn load_elem(&mut self, dtype: DType, dst: Reg, ok: Reg, addr: Reg) -> Result<(), EmitError> {
        match dtype {
            DType::F32 => self.a.i(format!("@{ok} ld.global.f32 {dst}, [{addr}]")),
            DType::I32 => self.a.i(format!("@{ok} ld.global.s32 {dst}, [{addr}]")),
            DType::BF16 | DType::F16 => {
                let h = self.a.h();
                let cvt = if dtype == DType::BF16 {
                    "cvt.f32.bf16"
                } else {
                    "cvt.f32.f16"
                };
                self.a.i(format!("@{ok} ld.global.b16 {h}, [{addr}]"));
                self.a.i(format!("@{ok} {cvt} {dst}, {h}"));
            }
            d => return Err(self.err(format!("vector loads of {d}"))),
        }
        Ok(())
    }

    /// A mask value in the model of the accessed tile.
    fn mask_for(&mut self, m: TValue, ty: &TileType) -> Result<DVal, EmitError> {
        let mt = self.k.ty(m).clone();
        if mt.shape.len() == 1 && ty.shape.len() == 2 {
            return self.relayout(m, 1, mt.shape[0]);
        }
        let (r, c) = model(&mt);
        if ty.shape.len() == 1 {
            return self.relayout(m, 1, c.max(r));
        }
        self.relayout(m, r, c)
    }

    pub(super) fn store(
        &mut self,
        param: usize,
        index: &[TValue],
        value: TValue,
        mask: Option<TValue>,
    ) -> Result<(), EmitError> {
        let ty = self.k.ty(value).clone();
        let (r, c) = model(&ty);
        let v = if ty.shape.len() == 1 {
            self.relayout(value, r, c)?
        } else {
            self.val(value).clone()
        };
        let m = match mask {
            Some(mv) => Some(self.mask_for(mv, &ty)?),
            None => None,
        };
        let dtype = self.k.params[param].dtype;
        let done = if m.is_none() && self.vectorizable(&v, &ty) && v.dtype == dtype {
            let aligned = self.vector_aligned(param, index);
            let (scalar, done) = (self.a.label("st_scalar"), self.a.label("st_done"));
            self.a.i(format!("@!{aligned} bra {scalar}"));
            self.store_vectors(param, index, &v, &ty)?;
            self.a.i(format!("bra.uni {done}"));
            self.a.place(&scalar);
            Some(done)
        } else {
            None
        };
        let scols = v.slot_cols();
        let mut rb = None;
        for s in 0..v.slots() {
            let (row, col) = v.coords(self, s);
            let own = v.owner_valid(self, s, &row, &col);
            if s % scols == 0 {
                rb = Some(self.row_base(param, index, ty.shape.len(), row));
            }
            let acc = self.access(param, rb.as_ref().unwrap(), ty.shape.len(), col);
            let mut ok = acc.ok;
            for extra in [
                own,
                m.as_ref()
                    .map(|md| md.regs[md.slot_for(s / scols, s % scols)]),
            ]
            .into_iter()
            .flatten()
            {
                let q = self.a.p();
                self.a.i(format!("and.pred {q}, {ok}, {extra}"));
                ok = q;
            }
            let (x, addr) = (v.regs[s], acc.addr);
            match dtype {
                DType::F32 => self.a.i(format!("@{ok} st.global.f32 [{addr}], {x}")),
                DType::BF16 | DType::F16 => {
                    let h = self.a.reg(Class::H);
                    let cvt = if dtype == DType::BF16 {
                        "cvt.rn.bf16.f32"
                    } else {
                        "cvt.rn.f16.f32"
                    };
                    self.a.i(format!("{cvt} {h}, {x}"));
                    self.a.i(format!("@{ok} st.global.b16 [{addr}], {h}"));
                }
                DType::I32 => self.a.i(format!("@{ok} st.global.s32 [{addr}], {x}")),
                DType::F8E4M3 | DType::F8E5M2 => {
                    let h = math::f32_to_fp8(&mut self.a, dtype, x);
                    self.a.i(format!("@{ok} st.global.u8 [{addr}], {h}"));
                }
                DType::Bool => {
                    let t = self.a.r();
                    self.a.i(format!("selp.u32 {t}, 1, 0, {x}"));
                    self.a.i(format!("@{ok} st.global.u8 [{addr}], {t}"));
                }
            }
        }
        if let Some(done) = done {
            self.a.place(&done);
        }
        Ok(())
    }

    /// The vector path of a store (see [`Self::load_vectors`]); only owners write.
    fn store_vectors(
        &mut self,
        param: usize,
        index: &[TValue],
        val: &DVal,
        ty: &TileType,
    ) -> Result<(), EmitError> {
        let (v, scols, rank, dtype) = (val.v as usize, val.slot_cols(), ty.shape.len(), val.dtype);
        for sr in 0..val.slot_rows() {
            let (row, _) = val.coords(self, sr * scols);
            let rb = self.row_base(param, index, rank, row);
            for g in 0..scols / v {
                let s0 = sr * scols + g * v;
                let (row0, col0) = val.coords(self, s0);
                let own = val.owner_valid(self, s0, &row0, &col0);
                let mut oks = Vec::new();
                let mut addrs = Vec::new();
                for j in 0..v {
                    let (_, col) = val.coords(self, s0 + j);
                    let acc = self.access(param, &rb, rank, col);
                    let ok = match own {
                        Some(o) => {
                            let q = self.a.p();
                            self.a.i(format!("and.pred {q}, {}, {o}", acc.ok));
                            q
                        }
                        None => acc.ok,
                    };
                    oks.push(ok);
                    addrs.push(acc.addr);
                }
                let full = self.a.p();
                self.a
                    .i(format!("and.pred {full}, {}, {}", oks[0], oks[v - 1]));
                let regs = &val.regs[s0..s0 + v];
                match dtype {
                    DType::F32 => self.a.i(format!(
                        "@{full} st.global.v{v}.f32 [{}], {{{}}}",
                        addrs[0],
                        list(regs)
                    )),
                    DType::I32 => self.a.i(format!(
                        "@{full} st.global.v{v}.s32 [{}], {{{}}}",
                        addrs[0],
                        list(regs)
                    )),
                    _ => {
                        let pack = if dtype == DType::BF16 {
                            "cvt.rn.bf16x2.f32"
                        } else {
                            "cvt.rn.f16x2.f32"
                        };
                        let words: Vec<Reg> = (0..v / 2)
                            .map(|wi| {
                                let w = self.a.r();
                                // The first operand lands in the high half: element 2wi+1.
                                self.a.i(format!(
                                    "{pack} {w}, {}, {}",
                                    regs[2 * wi + 1],
                                    regs[2 * wi]
                                ));
                                w
                            })
                            .collect();
                        if words.len() == 1 {
                            self.a.i(format!(
                                "@{full} st.global.b32 [{}], {}",
                                addrs[0], words[0]
                            ));
                        } else {
                            self.a.i(format!(
                                "@{full} st.global.v{}.b32 [{}], {{{}}}",
                                words.len(),
                                addrs[0],
                                list(&words)
                            ));
                        }
                    }
                }
                let nf = self.a.p();
                self.a.i(format!("not.pred {nf}, {full}"));
                for j in 0..v {
                    let p = self.a.p();
                    self.a.i(format!("and.pred {p}, {nf}, {}", oks[j]));
                    let (x, addr) = (regs[j], addrs[j]);
                    match dtype {
                        DType::F32 => self.a.i(format!("@{p} st.global.f32 [{addr}], {x}")),
                        DType::I32 => self.a.i(format!("@{p} st.global.s32 [{addr}], {x}")),
                        _ => {
                            let h = self.a.h();
                            let cvt = if dtype == DType::BF16 {
                                "cvt.rn.bf16.f32"
                            } else {
                                "cvt.rn.f16.f32"
                            };
                            self.a.i(format!("{cvt} {h}, {x}"));
                            self.a.i(format!("@{p} st.global.b16 [{addr}], {h}"));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
