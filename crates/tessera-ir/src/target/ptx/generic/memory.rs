//! Block loads and stores: each thread accesses the elements it owns, predicated by the
//! tensor's bounds (and the mask); lanes map to consecutive columns, so accesses coalesce.

use super::G;
use super::layout::DVal;
use super::ops::model;
use crate::target::ptx::EmitError;
use crate::target::ptx::asm::{Class, Reg, flit};
use crate::tile::{TValue, TileType};
use crate::DType;

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
    fn row_base(&mut self, param: usize, index: &[TValue], tile_rank: usize, row: Option<Reg>) -> RowBase {
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
        RowBase { ok, lin, last: idx[rank - 1], last_dim: dims[rank - 1] }
    }

    /// Predicate and address of column `col` (or the index itself for scalar tiles) of a row.
    fn access(&mut self, param: usize, rb: &RowBase, tile_rank: usize, col: Option<Reg>) -> Access {
        let (ptr, esize) = (self.params[param].ptr, self.k.params[param].dtype.size_bytes());
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
        self.a.i(format!("mad.lo.s64 {addr}, {lin}, {esize}, {ptr}"));
        Access { ok, addr }
    }

    pub(super) fn load(&mut self, param: usize, index: &[TValue], mask: Option<TValue>, other: f64, ty: &TileType) -> Result<DVal, EmitError> {
        let (r, c) = model(ty);
        let dtype = ty.dtype;
        let out = DVal::alloc(&mut self.a, dtype, r, c, self.w);
        let m = match mask {
            Some(mv) => Some(self.mask_for(mv, ty)?),
            None => None,
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
                    self.a.i(format!("and.pred {q}, {}, {}", acc.ok, md.regs[md.slot_for(s / scols, s % scols)]));
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
                    let cvt = if dtype == DType::BF16 { "cvt.f32.bf16" } else { "cvt.f32.f16" };
                    self.a.i(format!("@{ok} {cvt} {t}, {h}"));
                    self.a.i(format!("@{ok} mov.f32 {dst}, {t}"));
                }
                DType::I32 => {
                    self.a.i(format!("mov.s32 {dst}, {}", other as i32));
                    self.a.i(format!("@{ok} ld.global.s32 {dst}, [{addr}]"));
                }
                DType::Bool => {
                    let t = self.a.r();
                    self.a.i(format!("mov.u32 {t}, {}", (other != 0.0) as u32));
                    self.a.i(format!("@{ok} ld.global.u8 {t}, [{addr}]"));
                    self.a.i(format!("setp.ne.u32 {dst}, {t}, 0"));
                }
                d => return Err(self.err(format!("loads of {d} are not supported by the PTX emitter yet"))),
            }
        }
        Ok(out)
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

    pub(super) fn store(&mut self, param: usize, index: &[TValue], value: TValue, mask: Option<TValue>) -> Result<(), EmitError> {
        let ty = self.k.ty(value).clone();
        let (r, c) = model(&ty);
        let v = if ty.shape.len() == 1 { self.relayout(value, r, c)? } else { self.val(value).clone() };
        let m = match mask {
            Some(mv) => Some(self.mask_for(mv, &ty)?),
            None => None,
        };
        let dtype = self.k.params[param].dtype;
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
            for extra in [own, m.as_ref().map(|md| md.regs[md.slot_for(s / scols, s % scols)])].into_iter().flatten() {
                let q = self.a.p();
                self.a.i(format!("and.pred {q}, {ok}, {extra}"));
                ok = q;
            }
            let (x, addr) = (v.regs[s], acc.addr);
            match dtype {
                DType::F32 => self.a.i(format!("@{ok} st.global.f32 [{addr}], {x}")),
                DType::BF16 | DType::F16 => {
                    let h = self.a.reg(Class::H);
                    let cvt = if dtype == DType::BF16 { "cvt.rn.bf16.f32" } else { "cvt.rn.f16.f32" };
                    self.a.i(format!("{cvt} {h}, {x}"));
                    self.a.i(format!("@{ok} st.global.b16 [{addr}], {h}"));
                }
                DType::I32 => self.a.i(format!("@{ok} st.global.s32 [{addr}], {x}")),
                DType::Bool => {
                    let t = self.a.r();
                    self.a.i(format!("selp.u32 {t}, 1, 0, {x}"));
                    self.a.i(format!("@{ok} st.global.u8 [{addr}], {t}"));
                }
                d => return Err(self.err(format!("stores of {d} are not supported by the PTX emitter yet"))),
            }
        }
        Ok(())
    }
}
