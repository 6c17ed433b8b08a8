//! Distributed tile values: registers per slot and the coordinates each slot holds.

use super::G;
use crate::DType;
use crate::target::ptx::asm::{Asm, Class, Reg};

/// A tile value as registers: model `(r, c)` (1 = replicated), one register per slot,
/// slots row-major over `(ceil(r/W), ceil(c/32))`.
#[derive(Clone, Debug)]
pub(crate) struct DVal {
    pub dtype: DType,
    pub r: usize,
    pub c: usize,
    pub w: u32,
    /// Columns per lane-vector: column `c` of slot column `sc` is
    /// `((sc / v)·32 + lane)·v + sc % v`, so a lane's `v` consecutive slots are adjacent
    /// columns (one vector access).
    pub v: u32,
    pub regs: Vec<Reg>,
}

pub(crate) fn class_of(d: DType) -> Class {
    match d {
        DType::I32 => Class::R,
        DType::Bool => Class::P,
        _ => Class::F,
    }
}

impl DVal {
    pub fn scalar(dtype: DType, reg: Reg) -> DVal {
        DVal {
            dtype,
            r: 1,
            c: 1,
            w: 1,
            v: 1,
            regs: vec![reg],
        }
    }

    /// Fresh registers for a value of model `(r, c)`.
    pub fn alloc(a: &mut Asm, dtype: DType, r: usize, c: usize, w: u32, v: u32) -> DVal {
        let mut d = DVal {
            dtype,
            r,
            c,
            w,
            v,
            regs: vec![],
        };
        d.regs = (0..d.slots()).map(|_| a.reg(class_of(dtype))).collect();
        d
    }

    pub fn fresh_like(&self, a: &mut Asm) -> DVal {
        DVal::alloc(a, self.dtype, self.r, self.c, self.w, self.v)
    }

    pub fn slot_rows(&self) -> usize {
        if self.r > 1 {
            self.r.div_ceil(self.w as usize)
        } else {
            1
        }
    }

    pub fn slot_cols(&self) -> usize {
        if self.c > 1 {
            self.c.div_ceil(32 * self.v as usize) * self.v as usize
        } else {
            1
        }
    }

    pub fn slots(&self) -> usize {
        self.slot_rows() * self.slot_cols()
    }

    pub fn numel(&self) -> usize {
        self.r * self.c
    }

    /// The slot of an operand with this model that holds output slot `(sr, sc)`.
    pub fn slot_for(&self, sr: usize, sc: usize) -> usize {
        let r = if self.r > 1 { sr } else { 0 };
        let c = if self.c > 1 { sc } else { 0 };
        r * self.slot_cols() + c
    }

    pub fn mov_from(&self, a: &mut Asm, src: &DVal) {
        for (d, s) in self.regs.iter().zip(&src.regs) {
            let t = match d.0 {
                Class::F => "mov.f32",
                Class::R => "mov.b32",
                Class::P => "mov.pred",
                Class::D => "mov.b64",
                Class::H => "mov.b16",
            };
            a.i(format!("{t} {d}, {s}"));
        }
    }

    /// Row and column (registers) of slot `s`; `None` for a replicated dim.
    pub fn coords(&self, g: &mut G, s: usize) -> (Option<Reg>, Option<Reg>) {
        let (sr, sc) = (s / self.slot_cols(), s % self.slot_cols());
        let row = (self.r > 1).then(|| {
            let x = g.a.r();
            g.a.i(format!("add.s32 {x}, {}, {}", g.warp, sr * self.w as usize));
            x
        });
        let col = (self.c > 1).then(|| {
            let x = g.a.r();
            let v = self.v as usize;
            g.a.i(format!(
                "mad.lo.s32 {x}, {}, {v}, {}",
                g.lane,
                (sc / v) * 32 * v + sc % v
            ));
            x
        });
        (row, col)
    }

    /// Predicate "this thread owns slot `s` and it is inside the tile": replicated dims are
    /// owned by warp 0 / lane 0 only. `None` means always true.
    pub fn owner_valid(
        &self,
        g: &mut G,
        s: usize,
        row: &Option<Reg>,
        col: &Option<Reg>,
    ) -> Option<Reg> {
        let _ = s;
        let mut preds = Vec::new();
        match row {
            Some(x) if !self.r.is_multiple_of(self.w as usize) => {
                preds.push(format!("setp.lt.s32 {{p}}, {x}, {}", self.r))
            }
            Some(_) => {}
            None if self.w > 1 => preds.push(format!("setp.eq.s32 {{p}}, {}, 0", g.warp)),
            None => {}
        }
        match col {
            Some(x) if !self.c.is_multiple_of(32 * self.v as usize) => {
                preds.push(format!("setp.lt.s32 {{p}}, {x}, {}", self.c))
            }
            Some(_) => {}
            None => preds.push(format!("setp.eq.s32 {{p}}, {}, 0", g.lane)),
        }
        g.and_all(preds)
    }

    /// Predicate "slot `s` holds an element inside the tile" (replicas count as valid).
    pub fn valid(&self, g: &mut G, row: &Option<Reg>, col: &Option<Reg>) -> Option<Reg> {
        let mut preds = Vec::new();
        if let Some(x) = row
            && !self.r.is_multiple_of(self.w as usize)
        {
            preds.push(format!("setp.lt.s32 {{p}}, {x}, {}", self.r));
        }
        if let Some(x) = col
            && !self.c.is_multiple_of(32 * self.v as usize)
        {
            preds.push(format!("setp.lt.s32 {{p}}, {x}, {}", self.c));
        }
        g.and_all(preds)
    }
}

impl G<'_> {
    /// Emits each `setp` template (with `{p}` for its destination) and ANDs the results.
    pub fn and_all(&mut self, preds: Vec<String>) -> Option<Reg> {
        let mut acc: Option<Reg> = None;
        for t in preds {
            let p = self.a.p();
            self.a.i(t.replace("{p}", &p.to_string()));
            acc = Some(match acc {
                None => p,
                Some(q) => {
                    let r = self.a.p();
                    self.a.i(format!("and.pred {r}, {q}, {p}"));
                    r
                }
            });
        }
        acc
    }
}
