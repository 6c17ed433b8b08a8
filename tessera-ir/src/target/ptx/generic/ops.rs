//! Value-producing ops: constants, arithmetic, conversions, reshapes, reductions and `dot`.

use super::G;
use super::layout::{DVal, class_of};
use crate::DType;
use crate::graph::BinaryOp;
use crate::target::ptx::asm::{Class, Reg, flit};
use crate::target::ptx::{EmitError, math};
use crate::tile::{CmpOp, Op, TValue, TileReduce, TileType};

/// The natural model of a tile type.
pub(super) fn model(ty: &TileType) -> (usize, usize) {
    match ty.shape.as_slice() {
        [] => (1, 1),
        [n] => (1, *n),
        [r, c] => (*r, *c),
        _ => unreachable!("tiles have rank ≤ 2 (verified)"),
    }
}

impl G<'_> {
    pub(super) fn op(&mut self, op: &Op, ty: &TileType) -> Result<DVal, EmitError> {
        let (r, c) = model(ty);
        Ok(match op {
            Op::ProgramId(a) => {
                let x = self.a.r();
                self.a.i(format!(
                    "mov.u32 {x}, %ctaid.{}",
                    ["x", "y", "z"][*a as usize]
                ));
                DVal::scalar(DType::I32, x)
            }
            Op::Const(x) => self.splat(ty.dtype, *x, 1, 1),
            Op::Full(x) => self.splat(ty.dtype, *x, r, c),
            Op::Dim { param, axis } => DVal::scalar(DType::I32, self.params[*param].dims[*axis]),
            Op::Arange => {
                let mut d = DVal::alloc(&mut self.a, DType::I32, 1, c, self.w, self.v);
                for s in 0..d.slots() {
                    let x = d.regs[s];
                    let v = self.v as usize;
                    self.a.i(format!(
                        "mad.lo.s32 {x}, {}, {v}, {}",
                        self.lane,
                        (s / v) * 32 * v + s % v
                    ));
                }
                d.regs.shrink_to_fit();
                d
            }
            Op::Unary(u, x) => {
                let src = self.val(*x).clone();
                let regs = src
                    .regs
                    .iter()
                    .map(|&v| {
                        let canonical = self.k.policy == crate::NumericsPolicy::Deterministic;
                        let y = math::unary_with(&mut self.a, *u, v, canonical);
                        self.round(ty.dtype, y)
                    })
                    .collect();
                DVal { regs, ..src }
            }
            Op::Binary(b, x, y) => self.zip(ty, &[*x, *y], |g, v, out_dtype| {
                g.binary(*b, v[0], v[1], out_dtype)
            })?,
            Op::Cmp(cmp, x, y) => {
                let dt = self.val(*x).dtype;
                self.zip(ty, &[*x, *y], |g, v, _| g.cmp(*cmp, dt, v[0], v[1]))?
            }
            Op::Select(m, x, y) => {
                self.zip(ty, &[*m, *x, *y], |g, v, dt| g.select(dt, v[0], v[1], v[2]))?
            }
            Op::Cast(x) => {
                let src = self.val(*x).clone();
                let regs = src
                    .regs
                    .iter()
                    .map(|&v| self.cast(src.dtype, ty.dtype, v))
                    .collect();
                DVal {
                    dtype: ty.dtype,
                    regs,
                    ..src
                }
            }
            Op::Expand { a, .. } => {
                let mut d = self.relayout(*a, r, c)?;
                d.dtype = ty.dtype;
                d
            }
            Op::Broadcast(x) => {
                let xm = self.val(*x).clone();
                let src = if self.k.ty(*x).shape.len() == 1 {
                    self.relayout(*x, 1, xm.c.max(xm.r))?
                } else {
                    xm
                };
                let mut out = DVal::alloc(&mut self.a, ty.dtype, r, c, self.w, self.v);
                let scols = out.slot_cols();
                for s in 0..out.slots() {
                    let from = src.regs[src.slot_for(s / scols, s % scols)];
                    out.regs[s] = from;
                }
                out
            }
            Op::Trans(x) => {
                let d = self.val(*x).clone();
                self.need_smem(d.numel() * 4);
                self.write_smem(&d, 0, true)?;
                self.bar();
                let out = self.read_smem(ty.dtype, r, c, 0, false);
                self.bar();
                out
            }
            Op::Reduce {
                op,
                a,
                axis,
                policy,
            } => self.reduce(*op, *a, *axis, *policy, ty)?,
            Op::Dot { a, b, acc } => self.dot(*a, *b, *acc)?,
            Op::Fft { a, inverse } => self.fft(*a, *inverse)?,
            Op::Load {
                param,
                index,
                mask,
                other,
            } => self.load(*param, index, *mask, *other, ty)?,
            Op::Im2col { .. } => {
                return Err(self.err(
                    "im2col runs only in the GEMM template (an implicit-GEMM convolution whose \
                     K loop the template recognises); the generic emitter has no gather",
                ));
            }
            Op::Store { .. } | Op::For { .. } | Op::Yield(_) => {
                unreachable!("handled by the block walk")
            }
        })
    }

    fn splat(&mut self, dtype: DType, x: f64, r: usize, c: usize) -> DVal {
        let reg = match class_of(dtype) {
            Class::F => {
                let v = match dtype {
                    DType::BF16 => half_round_bf16(x as f32),
                    DType::F16 => half_round_f16(x as f32),
                    _ => x as f32,
                };
                self.a.fconst(v)
            }
            Class::R => self.a.rconst(x as i32),
            _ => {
                let p = self.a.p();
                self.a
                    .i(format!("setp.ne.s32 {p}, {}, 0", (x != 0.0) as i32));
                p
            }
        };
        let mut d = DVal::alloc(&mut self.a, dtype, r, c, self.w, self.v);
        d.regs.iter_mut().for_each(|x| *x = reg);
        d
    }

    /// Elementwise over operands broadcast to `ty`'s model.
    fn zip(
        &mut self,
        ty: &TileType,
        xs: &[TValue],
        mut f: impl FnMut(&mut Self, &[Reg], DType) -> Reg,
    ) -> Result<DVal, EmitError> {
        let (mut r, mut c) = model(ty);
        if ty.shape.len() == 1 {
            // Keep the layout of the first rank-1 operand (rows or columns).
            if let Some(first) = xs.iter().find(|x| self.k.ty(**x).shape.len() == 1) {
                let d = self.val(*first);
                (r, c) = (d.r, d.c);
            }
        }
        let mut ops = Vec::new();
        for x in xs {
            let t = self.k.ty(*x).clone();
            let d = match t.shape.len() {
                0 => self.val(*x).clone(),
                1 if ty.shape.len() == 1 => self.relayout(*x, r, c)?,
                1 => self.relayout(*x, 1, t.shape[0])?,
                _ => self.val(*x).clone(),
            };
            ops.push(d);
        }
        let mut out = DVal::alloc(&mut self.a, ty.dtype, r, c, self.w, self.v);
        let scols = out.slot_cols();
        for s in 0..out.slots() {
            let (sr, sc) = (s / scols, s % scols);
            let regs: Vec<Reg> = ops.iter().map(|o| o.regs[o.slot_for(sr, sc)]).collect();
            out.regs[s] = f(self, &regs, ty.dtype);
        }
        Ok(out)
    }

    fn binary(&mut self, op: BinaryOp, x: Reg, y: Reg, dt: DType) -> Reg {
        match class_of(dt) {
            Class::F => {
                let d = math::binary(&mut self.a, op, x, y);
                self.round(dt, d)
            }
            Class::R => self.a.r_op(math::s32_binary(op), x, y),
            _ => {
                let d = self.a.p();
                let ins = if matches!(op, BinaryOp::Mul | BinaryOp::Min) {
                    "and.pred"
                } else {
                    "or.pred"
                };
                self.a.i(format!("{ins} {d}, {x}, {y}"));
                d
            }
        }
    }

    fn cmp(&mut self, op: CmpOp, dt: DType, x: Reg, y: Reg) -> Reg {
        let p = self.a.p();
        match class_of(dt) {
            Class::F => self.a.i(format!("setp.{}.f32 {p}, {x}, {y}", op.name())),
            Class::R => self.a.i(format!("setp.{}.s32 {p}, {x}, {y}", op.name())),
            _ => {
                let (a, b) = (self.a.r(), self.a.r());
                self.a.i(format!("selp.s32 {a}, 1, 0, {x}"));
                self.a.i(format!("selp.s32 {b}, 1, 0, {y}"));
                self.a.i(format!("setp.{}.s32 {p}, {a}, {b}", op.name()));
            }
        }
        p
    }

    fn select(&mut self, dt: DType, m: Reg, x: Reg, y: Reg) -> Reg {
        match class_of(dt) {
            Class::F => {
                let d = self.a.f();
                self.a.i(format!("selp.f32 {d}, {x}, {y}, {m}"));
                d
            }
            Class::R => {
                let d = self.a.r();
                self.a.i(format!("selp.s32 {d}, {x}, {y}, {m}"));
                d
            }
            _ => {
                let (t, u, nm, d) = (self.a.p(), self.a.p(), self.a.p(), self.a.p());
                self.a.i(format!("and.pred {t}, {m}, {x}"));
                self.a.i(format!("not.pred {nm}, {m}"));
                self.a.i(format!("and.pred {u}, {nm}, {y}"));
                self.a.i(format!("or.pred {d}, {t}, {u}"));
                d
            }
        }
    }

    /// Rounds an f32 register to the precision of `dt` ([`math::round`]).
    pub(super) fn round(&mut self, dt: DType, x: Reg) -> Reg {
        math::round(&mut self.a, dt, x)
    }

    pub(super) fn cast(&mut self, from: DType, to: DType, x: Reg) -> Reg {
        match (class_of(from), class_of(to)) {
            (Class::F, Class::F) => self.round(to, x),
            (Class::F, Class::R) => {
                let y = self.a.r();
                self.a.i(format!("cvt.rzi.s32.f32 {y}, {x}"));
                y
            }
            (Class::R, Class::F) => {
                let y = self.a.f();
                self.a.i(format!("cvt.rn.f32.s32 {y}, {x}"));
                self.round(to, y)
            }
            (Class::F, Class::P) => {
                let p = self.a.p();
                self.a.i(format!("setp.ne.f32 {p}, {x}, {}", flit(0.0)));
                p
            }
            (Class::R, Class::P) => {
                let p = self.a.p();
                self.a.i(format!("setp.ne.s32 {p}, {x}, 0"));
                p
            }
            (Class::P, Class::F) => {
                let y = self.a.f();
                self.a
                    .i(format!("selp.f32 {y}, {}, {}, {x}", flit(1.0), flit(0.0)));
                y
            }
            (Class::P, Class::R) => {
                let y = self.a.r();
                self.a.i(format!("selp.s32 {y}, 1, 0, {x}"));
                y
            }
            _ => x,
        }
    }

    fn combine(&mut self, op: TileReduce, dt: DType, acc: Reg, x: Reg) -> Reg {
        let b = if op == TileReduce::Sum {
            BinaryOp::Add
        } else {
            BinaryOp::Max
        };
        self.binary(b, acc, x, dt)
    }

    fn identity(&mut self, op: TileReduce, dt: DType) -> Reg {
        match (class_of(dt), op) {
            (Class::F, TileReduce::Sum) => self.a.fconst(0.0),
            (Class::F, TileReduce::Max) => self.a.fconst(f32::NEG_INFINITY),
            (_, TileReduce::Sum) => self.a.rconst(0),
            (_, TileReduce::Max) => self.a.rconst(i32::MIN),
        }
    }

    /// `s, c ← Sum2(s, c, v)`: `t = s + v` and its exact error by TwoSum,
    /// `e = (s − (t − (t − s))) + (v − (t − s))`, `c += e`, `s = t` (the sum is `s + c`; the
    /// Tile IR lowering's `two_sum_step`, op for op).
    fn kahan_step(&mut self, s: Reg, c: Reg, v: Reg) -> (Reg, Reg) {
        let t = math::binary(&mut self.a, BinaryOp::Add, s, v);
        let bp = math::binary(&mut self.a, BinaryOp::Sub, t, s);
        let ap = math::binary(&mut self.a, BinaryOp::Sub, t, bp);
        let ea = math::binary(&mut self.a, BinaryOp::Sub, s, ap);
        let eb = math::binary(&mut self.a, BinaryOp::Sub, v, bp);
        let e = math::binary(&mut self.a, BinaryOp::Add, ea, eb);
        let c = math::binary(&mut self.a, BinaryOp::Add, c, e);
        (t, c)
    }

    /// A reduction under `deterministic` or `kahan_sum` (a sum; max is exact in any order and
    /// takes the fast path). Along columns: each lane adds its columns in order (one column
    /// per lane: the layout is scalar under these policies), then the butterfly
    /// `16, 8, 4, 2, 1` combines the lanes (with TwoSum under `kahan_sum`). Along rows: the
    /// tile goes to shared memory and each column adds its rows in order.
    fn reduce_ordered(
        &mut self,
        x: TValue,
        axis: usize,
        kahan: bool,
        ty: &TileType,
    ) -> Result<DVal, EmitError> {
        let rank = self.k.ty(x).shape.len();
        let mut d = self.val(x).clone();
        if d.dtype.is_float() && d.v != 1 {
            return Err(self.err(
                "an ordered reduction needs one column per lane (the kernel's numerics policy sets it)",
            ));
        }
        if rank == 1 && d.c == 1 && d.r > 1 {
            // A rank-1 tile laid out as rows: lay it out as columns, like the CPU's row.
            d = self.relayout(x, 1, d.r)?;
        }
        let dt = d.dtype;
        let along_cols = if rank == 2 { axis == 1 } else { true };
        let zero = || 0.0f32;
        let (scr, scc) = (d.slot_rows(), d.slot_cols());
        if along_cols {
            let mut out = DVal::alloc(&mut self.a, dt, d.r, 1, self.w, self.v);
            for sr in 0..scr {
                let mut s = self.a.fconst(zero());
                let mut c = self.a.fconst(zero());
                for sc in 0..scc {
                    let slot = sr * scc + sc;
                    let (_, col) = d.coords(self, slot);
                    let valid = d.valid(self, &None, &col);
                    let v = match valid {
                        Some(p) => {
                            let z = self.a.fconst(zero());
                            self.select(dt, p, d.regs[slot], z)
                        }
                        None => d.regs[slot],
                    };
                    if kahan {
                        (s, c) = self.kahan_step(s, c, v);
                    } else {
                        s = math::binary(&mut self.a, BinaryOp::Add, s, v);
                    }
                }
                if d.c > 1 {
                    for off in [16, 8, 4, 2, 1] {
                        let ts = self.a.f();
                        self.a.i(format!(
                            "shfl.sync.bfly.b32 {ts}, {s}, {off}, 0x1f, 0xffffffff"
                        ));
                        if kahan {
                            let tc = self.a.f();
                            self.a.i(format!(
                                "shfl.sync.bfly.b32 {tc}, {c}, {off}, 0x1f, 0xffffffff"
                            ));
                            // TwoSum of the two sums; the pair's lost part is
                            // c + tc + e.
                            let cc = math::binary(&mut self.a, BinaryOp::Add, c, tc);
                            (s, c) = self.kahan_step(s, cc, ts);
                        } else {
                            s = math::binary(&mut self.a, BinaryOp::Add, s, ts);
                        }
                    }
                }
                out.regs[sr] = if kahan {
                    math::binary(&mut self.a, BinaryOp::Add, s, c)
                } else {
                    s
                };
            }
            let out = self.round_all(out);
            return Ok(if ty.shape.is_empty() {
                DVal { r: 1, c: 1, ..out }
            } else {
                out
            });
        }
        // Along rows, through shared memory: column j adds rows 0, 1, .. in order.
        let (rows, cols) = (d.r, d.c);
        self.need_smem(rows * cols * 4);
        self.write_smem(&d, 0, false)?;
        self.bar();
        let mut out = DVal::alloc(&mut self.a, dt, 1, cols, self.w, self.v);
        for sc in 0..out.slot_cols() {
            let (_, col) = out.coords(self, sc);
            let ci = match col {
                Some(x) => self.clamp(x, cols),
                None => self.zero(),
            };
            let mut s = self.a.fconst(zero());
            let mut c = self.a.fconst(zero());
            for r in 0..rows {
                let idx = self.a.r();
                self.a.i(format!("add.s32 {idx}, {ci}, {}", r * cols));
                let addr = self.smem_addr(idx, 0);
                let v = self.a.f();
                self.a.i(format!("ld.shared.f32 {v}, [{addr}]"));
                if kahan {
                    (s, c) = self.kahan_step(s, c, v);
                } else {
                    s = math::binary(&mut self.a, BinaryOp::Add, s, v);
                }
            }
            out.regs[sc] = if kahan {
                math::binary(&mut self.a, BinaryOp::Add, s, c)
            } else {
                s
            };
        }
        self.bar();
        let out = self.round_all(out);
        Ok(if ty.shape.is_empty() {
            DVal { r: 1, c: 1, ..out }
        } else {
            out
        })
    }

    /// Rounds every register of a float value to its dtype's precision.
    fn round_all(&mut self, mut d: DVal) -> DVal {
        let dt = d.dtype;
        for r in d.regs.iter_mut() {
            *r = self.round(dt, *r);
        }
        d
    }

    fn reduce(
        &mut self,
        op: TileReduce,
        x: TValue,
        axis: usize,
        policy: crate::NumericsPolicy,
        ty: &TileType,
    ) -> Result<DVal, EmitError> {
        if op == TileReduce::Sum
            && policy != crate::NumericsPolicy::Fast
            && self.val(x).dtype.is_float()
        {
            return self.reduce_ordered(x, axis, policy == crate::NumericsPolicy::KahanSum, ty);
        }
        let d = self.val(x).clone();
        let dt = d.dtype;
        let rank = self.k.ty(x).shape.len();
        // Reduce along the model's columns (lanes) or rows (warps).
        let along_cols = if rank == 2 {
            axis == 1
        } else {
            d.c > 1 || d.r == 1
        };
        let (scr, scc) = (d.slot_rows(), d.slot_cols());
        if along_cols {
            let mut out = DVal::alloc(&mut self.a, dt, d.r, 1, self.w, self.v);
            for sr in 0..scr {
                let mut acc = self.identity(op, dt);
                for sc in 0..scc {
                    let s = sr * scc + sc;
                    let (row, col) = d.coords(self, s);
                    let v = d.regs[s];
                    let valid = d.valid(self, &None, &col);
                    let _ = row;
                    let v = match valid {
                        Some(p) => {
                            let id = self.identity(op, dt);
                            self.select(dt, p, v, id)
                        }
                        None => v,
                    };
                    acc = self.combine(op, dt, acc, v);
                }
                if d.c > 1 {
                    for off in [16, 8, 4, 2, 1] {
                        let t = self.a.reg(acc.0);
                        let ty = if acc.0 == Class::F { "f32" } else { "b32" };
                        let _ = ty;
                        self.a.i(format!(
                            "shfl.sync.bfly.b32 {t}, {acc}, {off}, 0x1f, 0xffffffff"
                        ));
                        acc = self.combine(op, dt, acc, t);
                    }
                }
                out.regs[sr] = acc;
            }
            // Rank-1 and scalar results keep the natural model of their type.
            let (r, c) = model(ty);
            if ty.shape.is_empty() || (out.r, out.c) == (r, c) || ty.shape.len() == 1 {
                return Ok(if ty.shape.is_empty() {
                    DVal { r: 1, c: 1, ..out }
                } else {
                    out
                });
            }
            Ok(out)
        } else {
            // Across warps: fold own rows, then combine the W partials through shared memory.
            let mut part = DVal::alloc(&mut self.a, dt, 1, d.c, self.w, self.v);
            for sc in 0..scc {
                let mut acc = self.identity(op, dt);
                for sr in 0..scr {
                    let s = sr * scc + sc;
                    let (row, _) = d.coords(self, s);
                    let valid = d.valid(self, &row, &None);
                    let v = match valid {
                        Some(p) => {
                            let id = self.identity(op, dt);
                            self.select(dt, p, d.regs[s], id)
                        }
                        None => d.regs[s],
                    };
                    acc = self.combine(op, dt, acc, v);
                }
                part.regs[sc] = acc;
            }
            if d.r <= 1 {
                return Ok(if ty.shape.is_empty() {
                    DVal { r: 1, c: 1, ..part }
                } else {
                    part
                });
            }
            let w = self.w as usize;
            let cols = d.c;
            self.need_smem(w * cols * 4);
            // Each warp writes its partial row; lanes beyond the tile's columns stay silent.
            for sc in 0..scc {
                let (_, col) = part.coords(self, sc);
                let ci = col.unwrap_or_else(|| self.zero());
                let idx = self.a.r();
                self.a
                    .i(format!("mad.lo.s32 {idx}, {}, {cols}, {ci}", self.warp));
                let valid = part.valid(self, &None, &col);
                let addr = self.smem_addr(idx, 0);
                let v = part.regs[sc];
                let st = if v.0 == Class::F {
                    format!("st.shared.f32 [{addr}], {v}")
                } else {
                    format!("st.shared.s32 [{addr}], {v}")
                };
                match valid {
                    Some(p) => self.a.i(format!("@{p} {st}")),
                    None => self.a.i(st),
                }
            }
            self.bar();
            let mut out = DVal::alloc(&mut self.a, dt, 1, cols, self.w, self.v);
            for sc in 0..scc {
                let (_, col) = out.coords(self, sc);
                let ci = match col {
                    Some(x) => self.clamp(x, cols),
                    None => self.zero(),
                };
                let mut acc = self.identity(op, dt);
                for wi in 0..w {
                    let idx = self.a.r();
                    self.a.i(format!("add.s32 {idx}, {ci}, {}", wi * cols));
                    let addr = self.smem_addr(idx, 0);
                    let t = self.a.reg(class_of(dt));
                    let ld = if t.0 == Class::F {
                        "ld.shared.f32"
                    } else {
                        "ld.shared.s32"
                    };
                    self.a.i(format!("{ld} {t}, [{addr}]"));
                    acc = self.combine(op, dt, acc, t);
                }
                out.regs[sc] = acc;
            }
            self.bar();
            Ok(if ty.shape.is_empty() {
                DVal { r: 1, c: 1, ..out }
            } else {
                out
            })
        }
    }

    /// Generic `acc + a·b` through shared memory: per element one FMA chain in increasing k
    /// (the Tile IR `dot` order); matmul-class kernels of the fast policy use the tensor-core
    /// template instead.
    fn dot(&mut self, a: TValue, b: TValue, acc: TValue) -> Result<DVal, EmitError> {
        let (da, db, dc) = (
            self.val(a).clone(),
            self.val(b).clone(),
            self.val(acc).clone(),
        );
        let (m, k, n) = (da.r, da.c, db.c);
        let b_off = (m * k * 4).next_multiple_of(16);
        self.need_smem(b_off + k * n * 4);
        self.write_smem(&da, 0, false)?;
        self.write_smem(&db, b_off, false)?;
        self.bar();
        let out = dc.fresh_like(&mut self.a);
        out.mov_from(&mut self.a, &dc);
        let (scr, scc) = (out.slot_rows(), out.slot_cols());
        // Row bases in A and column offsets in B for every slot row/column.
        let mut arow = Vec::new();
        for sr in 0..scr {
            let (row, _) = out.coords(self, sr * scc);
            let ri = match row {
                Some(x) => self.clamp(x, m),
                None => self.zero(),
            };
            let idx = self.a.r();
            self.a.i(format!("mul.lo.s32 {idx}, {ri}, {k}"));
            arow.push(self.smem_addr(idx, 0));
        }
        let mut bcol = Vec::new();
        for sc in 0..scc {
            let (_, col) = out.coords(self, sc);
            let ci = match col {
                Some(x) => self.clamp(x, n),
                None => self.zero(),
            };
            bcol.push(self.smem_addr(ci, b_off));
        }
        let kk = self.a.r();
        self.a.i(format!("mov.s32 {kk}, 0"));
        let (head, end) = (self.a.label("dot"), self.a.label("enddot"));
        let p = self.a.p();
        self.a.place(&head);
        self.a.i(format!("setp.ge.s32 {p}, {kk}, {k}"));
        self.a.i(format!("@{p} bra {end}"));
        let (ka, kb) = (self.a.r(), self.a.r());
        self.a.i(format!("shl.b32 {ka}, {kk}, 2"));
        self.a.i(format!("mul.lo.s32 {kb}, {kk}, {}", n * 4));
        let avals: Vec<Reg> = arow
            .iter()
            .map(|base| {
                let (ad, v) = (self.a.r(), self.a.f());
                self.a.i(format!("add.u32 {ad}, {base}, {ka}"));
                self.a.i(format!("ld.shared.f32 {v}, [{ad}]"));
                v
            })
            .collect();
        let bvals: Vec<Reg> = bcol
            .iter()
            .map(|base| {
                let (ad, v) = (self.a.r(), self.a.f());
                self.a.i(format!("add.u32 {ad}, {base}, {kb}"));
                self.a.i(format!("ld.shared.f32 {v}, [{ad}]"));
                v
            })
            .collect();
        // A bf16/f16 accumulator is rounded after every step (the Tile IR `dot` semantics).
        let narrow = match dc.dtype {
            DType::BF16 => Some("bf16"),
            DType::F16 => Some("f16"),
            _ => None,
        };
        let h = narrow.map(|_| self.a.h());
        for sr in 0..scr {
            for sc in 0..scc {
                let r = out.regs[sr * scc + sc];
                self.a
                    .i(format!("fma.rn.f32 {r}, {}, {}, {r}", avals[sr], bvals[sc]));
                if let (Some(t), Some(h)) = (narrow, h) {
                    self.a.i(format!("cvt.rn.{t}.f32 {h}, {r}"));
                    self.a.i(format!("cvt.f32.{t} {r}, {h}"));
                }
            }
        }
        self.a.i(format!("add.s32 {kk}, {kk}, 1"));
        self.a.i(format!("bra.uni {head}"));
        self.a.place(&end);
        self.bar();
        Ok(out)
    }
}

fn half_round_bf16(x: f32) -> f32 {
    // Round to nearest even at 16 bits (inputs here are finite constants).
    let b = x.to_bits();
    let r = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000;
    f32::from_bits(r)
}

fn half_round_f16(x: f32) -> f32 {
    // f16 has 10 mantissa bits: round the f32 mantissa at bit 13 (normal range constants).
    let b = x.to_bits();
    let r = b.wrapping_add(0xFFF + ((b >> 13) & 1)) & !0x1FFF;
    f32::from_bits(r)
}
