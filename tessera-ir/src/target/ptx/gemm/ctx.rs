//! Emission state shared by the phases: the text, parameter registers, scalar index values.

use super::pattern::Gemm;
use crate::DType;
use crate::target::ptx::abi::load_params;
use crate::target::ptx::asm::{Asm, Reg};
use crate::target::ptx::{EmitError, math};
use crate::tile::{Op, TValue};
use std::collections::HashMap;

/// Everything the phases share while emitting one kernel.
pub(super) struct Ctx<'g, 'k> {
    pub asm: Asm,
    pub g: &'g Gemm<'k>,
    /// Threads per block.
    pub threads: usize,
    /// `%tid.x`.
    pub tid: Reg,
    /// 32-bit shared-window address of the dynamic shared memory.
    pub smem: Reg,
    /// Global base address of each parameter.
    pub ptrs: Vec<Reg>,
    /// Each parameter's view dims (`u32`).
    pub dims: Vec<Vec<Reg>>,
    /// Registers of the scalar `i32` values computed so far.
    pub scalars: HashMap<TValue, Reg>,
}

impl<'g, 'k> Ctx<'g, 'k> {
    /// Loads every parameter (pointer and dims) and the thread id: done once, up front, so
    /// later phases can use them on any control path.
    pub fn new(g: &'g Gemm<'k>, threads: usize) -> Ctx<'g, 'k> {
        let mut asm = Asm::default();
        asm.phase("parameters: global base pointers and view dims");
        let (ptrs, dims) = load_params(&mut asm, g.k)
            .into_iter()
            .map(|p| (p.ptr, p.dims))
            .unzip();
        let tid = asm.r();
        asm.i(format!("mov.u32 {tid}, %tid.x"));
        let smem = asm.r();
        asm.i(format!("mov.u32 {smem}, smem"));
        Ctx {
            asm,
            g,
            threads,
            tid,
            smem,
            ptrs,
            dims,
            scalars: HashMap::new(),
        }
    }

    /// An error naming this kernel.
    pub fn err(&self, m: impl Into<String>) -> EmitError {
        EmitError {
            kernel: self.g.k.name.clone(),
            message: m.into(),
        }
    }

    /// Emits the scalar `i32` instructions among `insts` (index arithmetic); other scalar
    /// values (f32 constants) are left to the epilogue, which evaluates them on use.
    pub fn scalars(&mut self, insts: &[crate::tile::Inst]) -> Result<(), EmitError> {
        let k = self.g.k;
        for i in insts {
            let d = k.inst(*i);
            let [res] = d.results.as_slice() else {
                continue;
            };
            let ty = k.ty(*res);
            if !ty.shape.is_empty() || ty.dtype != DType::I32 {
                continue;
            }
            let r = match &d.op {
                Op::ProgramId(a) => {
                    let r = self.asm.r();
                    let ax = ["x", "y", "z"][(*a as usize).min(2)];
                    self.asm.i(format!("mov.u32 {r}, %ctaid.{ax}"));
                    r
                }
                Op::Const(x) => {
                    let r = self.asm.r();
                    self.asm.i(format!("mov.u32 {r}, {}", *x as i64 as i32));
                    r
                }
                Op::Dim { param, axis } => self.dims[*param][*axis],
                Op::Binary(op, a, b) => {
                    let (a, b) = (self.scalar(*a)?, self.scalar(*b)?);
                    self.asm.r_op(math::s32_binary(*op), a, b)
                }
                op => {
                    return Err(
                        self.err(format!("gemm: scalar i32 `{}` is not supported", op.name()))
                    );
                }
            };
            self.scalars.insert(*res, r);
        }
        Ok(())
    }

    /// The register of a scalar `i32` value.
    pub fn scalar(&self, v: TValue) -> Result<Reg, EmitError> {
        self.scalars.get(&v).copied().ok_or_else(|| {
            self.err(format!(
                "gemm: index %{} is not a scalar i32 computed before use",
                v.0
            ))
        })
    }

    /// Row offset contributed by leading (batch) indices of param `p`:
    /// `((l0·d1 + l1)·d2 + … )·d[r-2]`, i.e. what to add to a row index of the last-two-dims view.
    pub fn lead_rows(&mut self, p: usize, lead: &[Reg]) -> Reg {
        let r = self.dims[p].len();
        if lead.is_empty() {
            let z = self.asm.r();
            self.asm.i(format!("mov.u32 {z}, 0"));
            return z;
        }
        let mut acc = lead[0];
        for (n, l) in lead.iter().enumerate().skip(1) {
            let d = self.dims[p][n];
            let t = self.asm.r();
            self.asm.i(format!("mad.lo.s32 {t}, {acc}, {d}, {l}"));
            acc = t;
        }
        let d = self.dims[p][r - 2];
        self.asm.r_op("mul.lo.s32", acc, d)
    }

    /// Predicate: every leading index of `p` is in bounds (a uniform value).
    pub fn lead_ok(&mut self, p: usize, lead: &[Reg]) -> Option<Reg> {
        let mut ok: Option<Reg> = None;
        for (n, l) in lead.iter().enumerate() {
            let d = self.dims[p][n];
            let q = self.asm.p();
            match &ok {
                None => self.asm.i(format!("setp.lt.u32 {q}, {l}, {d}")),
                Some(o) => self.asm.i(format!("setp.lt.and.u32 {q}, {l}, {d}, {o}")),
            }
            ok = Some(q);
        }
        ok
    }

    /// Global address of element `(rowflat, col)` of param `p` (`rowflat` already includes the
    /// leading rows), `bytes` per element: `base + (rowflat·d[r-1] + col)·bytes`.
    pub fn elem_addr(&mut self, p: usize, rowflat: Reg, col: Reg, bytes: usize) -> Reg {
        let ncols = *self.dims[p].last().unwrap();
        let base = self.ptrs[p];
        let a = &mut self.asm;
        let off = a.d();
        a.i(format!("mul.wide.u32 {off}, {rowflat}, {ncols}"));
        let c = a.d();
        a.i(format!("cvt.u64.u32 {c}, {col}"));
        a.i(format!("add.s64 {off}, {off}, {c}"));
        let addr = a.d();
        a.i(format!("mad.lo.s64 {addr}, {off}, {bytes}, {base}"));
        addr
    }
}
