//! Tile IR verifier: scoping and handles first, then the typing rule of every op.
//! All errors are collected, each tied to its instruction.

use super::{Inst, Kernel, Op, TValue, TileType, print::write_kernel};
use crate::DType;
use std::fmt;

/// Every problem found, with the kernel printed and `; error:` under each bad line.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    /// Each bad instruction and what is wrong with it.
    pub errors: Vec<(Inst, String)>,
    /// The kernel printed, with `; error:` under each bad line.
    pub annotated: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (_, e) in &self.errors {
            writeln!(f, "error: {e}")?;
        }
        write!(f, "{}", self.annotated)
    }
}

impl std::error::Error for VerifyError {}

/// The most elements one tile value may have: the 32-bit registers one block may hold on every
/// supported GPU (`regsPerBlock` = 65,536 on compute capability 8.0 to 10.0,
/// [`crate::cost::HwLimits::SM80`]). A tile lives in the registers of one block (one element
/// per register at least), so a larger tile cannot be held; the largest tile the schedule space
/// makes is the 256 × 128 matmul accumulator (32,768).
pub const MAX_TILE_ELEMENTS: usize = crate::cost::HwLimits::SM80.regs_per_block as usize;

/// Checks that a value type is one the target can hold: tiles of rank ≤ 2, no zero-size axis,
/// at most [`MAX_TILE_ELEMENTS`] elements (the product is computed with overflow checks).
///
/// ```
/// use tessera_ir::{DType, tile::{TileType, check_tile_type}};
/// assert!(check_tile_type(&TileType::tile(DType::F32, &[128, 128])).is_ok());
/// let e = check_tile_type(&TileType::tile(DType::F32, &[0, 64])).unwrap_err();
/// assert!(e.contains("f32[0, 64]") && e.contains("zero-size"), "{e}");
/// let e = check_tile_type(&TileType::tile(DType::F32, &[1 << 32, 1 << 32])).unwrap_err();
/// assert!(e.contains("f32[4294967296, 4294967296]"), "{e}");
/// ```
pub fn check_tile_type(t: &TileType) -> Result<(), String> {
    if t.shape.len() > 2 {
        return Err(format!("tiles have rank ≤ 2, got {t}"));
    }
    if t.shape.contains(&0) {
        return Err(format!(
            "{t} has a zero-size axis; tiles have at least one element"
        ));
    }
    let numel = t
        .shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_TILE_ELEMENTS);
    if numel.is_none() {
        return Err(format!(
            "{t} has more than {MAX_TILE_ELEMENTS} elements, the registers one block can hold"
        ));
    }
    Ok(())
}

/// Verifies a kernel.
///
/// ```
/// let k = tessera_ir::tile::parse(
///     "kernel @k(%x: f32<1>) grid=[1, 1, 1] {\n  %0 = const 0 : i32\n  %1 = load %x[%0] : f32[64]\n  %2 = trans %1 : f32[64]\n}",
/// ).unwrap();
/// let e = tessera_ir::tile::verify(&k).unwrap_err();
/// assert!(e.to_string().contains("%2 = trans: needs a rank-2 tile"));
/// ```
pub fn verify(k: &Kernel) -> Result<(), VerifyError> {
    let mut v = Verifier {
        k,
        defined: vec![false; k.types.len()],
        errors: vec![],
    };
    for p in &k.params {
        if p.rank == 0 || p.rank > 3 {
            v.errors.push((
                Inst(0),
                format!(
                    "parameter %{} has rank {}; kernels take ranks 1 to 3",
                    p.name, p.rank
                ),
            ));
        }
    }
    for (axis, g) in k.grid.iter().enumerate() {
        if !g.dims.is_empty() && g.tile == 0 {
            v.errors
                .push((Inst(0), format!("grid axis {axis} divides by a tile of 0")));
        }
        for &(p, a) in &g.dims {
            if k.params.get(p).is_none_or(|p| a >= p.rank) {
                v.errors.push((
                    Inst(0),
                    format!("grid uses axis {a} of parameter #{p}, which does not exist"),
                ));
            }
        }
    }
    v.block(&k.body, None);
    if v.errors.is_empty() {
        return Ok(());
    }
    let mut annotated = String::new();
    let _ = write_kernel(&mut annotated, k, &v.errors);
    Err(VerifyError {
        errors: v.errors,
        annotated,
    })
}

struct Verifier<'a> {
    k: &'a Kernel,
    defined: Vec<bool>,
    errors: Vec<(Inst, String)>,
}

impl Verifier<'_> {
    fn block(&mut self, block: &[Inst], carried: Option<&[TValue]>) {
        let mut scope = Vec::new();
        for (pos, &i) in block.iter().enumerate() {
            if i.0 as usize >= self.k.insts.len() {
                self.errors
                    .push((Inst(0), format!("instruction handle {} out of range", i.0)));
                continue;
            }
            let d = self.k.inst(i);
            if let Some(r) = d.results.iter().find(|r| r.index() >= self.k.types.len()) {
                self.errors.push((
                    i,
                    format!("result %{} has no type (handle out of range)", r.0),
                ));
                continue;
            }
            let name = match d.results.first() {
                Some(r) => format!("%{} = {}", r.0, d.op.name()),
                None => d.op.name(),
            };
            let mut errs: Vec<String> = Vec::new();
            let mut err = |m: String| errs.push(m);
            for r in &d.results {
                if let Err(m) = check_tile_type(self.k.ty(*r)) {
                    err(format!("%{}: {m}", r.0));
                }
            }
            let bad: Vec<_> =
                d.op.operands()
                    .into_iter()
                    .filter(|o| !self.defined.get(o.index()).copied().unwrap_or(false))
                    .collect();
            if let Some(o) = bad.first() {
                self.errors
                    .push((i, format!("{name}: operand %{} is not defined here", o.0)));
                continue;
            }
            if let Op::Yield(xs) = &d.op {
                match carried {
                    Some(args) if pos + 1 == block.len() => {
                        if xs.len() != args.len() {
                            err(format!(
                                "yields {} value(s) for {} carried",
                                xs.len(),
                                args.len()
                            ));
                        }
                        for (x, a) in xs.iter().zip(args) {
                            if self.k.ty(*x) != self.k.ty(*a) {
                                err(format!(
                                    "yields %{}: {} for carried %{}: {}",
                                    x.0,
                                    self.k.ty(*x),
                                    a.0,
                                    self.k.ty(*a)
                                ));
                            }
                        }
                    }
                    _ => err("yield must be the last instruction of a loop body".into()),
                }
                self.errors
                    .extend(errs.into_iter().map(|m| (i, format!("{name}: {m}"))));
                continue;
            }
            if let Op::For {
                iv,
                lo,
                hi,
                step,
                inits,
                args,
                body,
            } = &d.op
            {
                let n_types = self.k.types.len();
                if let Some(x) = std::iter::once(iv)
                    .chain(args)
                    .find(|x| x.index() >= n_types)
                {
                    err(format!(
                        "loop value %{} has no type (handle out of range)",
                        x.0
                    ));
                    self.errors
                        .extend(errs.into_iter().map(|m| (i, format!("{name}: {m}"))));
                    continue;
                }
                for s in [lo, hi] {
                    if *self.k.ty(*s) != TileType::scalar(DType::I32) {
                        err(format!("bound %{} must be an i32 scalar", s.0));
                    }
                }
                if !(1..=i64::from(i32::MAX)).contains(step) {
                    err(format!(
                        "step must be in 1..={} (the induction variable is i32), got {step}",
                        i32::MAX
                    ));
                }
                if inits.len() != args.len() || args.len() != d.results.len() {
                    err("carried values, initial values and results differ in number".into());
                } else {
                    for ((a, i0), r) in args.iter().zip(inits).zip(&d.results) {
                        if self.k.ty(*a) != self.k.ty(*i0) || self.k.ty(*a) != self.k.ty(*r) {
                            err(format!(
                                "carried %{} has type {} but starts as {}",
                                a.0,
                                self.k.ty(*a),
                                self.k.ty(*i0)
                            ));
                        }
                    }
                }
                let last = body.last().and_then(|b| self.k.insts.get(b.0 as usize));
                if !matches!(last.map(|d| &d.op), Some(Op::Yield(_))) {
                    err("loop body must end with yield".into());
                }
                let inner: Vec<TValue> = std::iter::once(*iv).chain(args.iter().copied()).collect();
                for x in &inner {
                    self.defined[x.index()] = true;
                }
                self.block(body, Some(args));
                for x in &inner {
                    self.defined[x.index()] = false;
                }
            } else if let Err(m) = self.check(&d.op, d.results.first().map(|r| self.k.ty(*r))) {
                err(m);
            }
            self.errors
                .extend(errs.into_iter().map(|m| (i, format!("{name}: {m}"))));
            for r in &d.results {
                if std::mem::replace(&mut self.defined[r.index()], true) {
                    self.errors.push((i, format!("%{} defined twice", r.0)));
                }
                scope.push(*r);
            }
        }
        for r in scope {
            self.defined[r.index()] = false;
        }
    }

    fn check(&self, op: &Op, out: Option<&TileType>) -> Result<(), String> {
        let k = self.k;
        let ty = |v: &TValue| k.ty(*v);
        let i32s = TileType::scalar(DType::I32);
        let want_out = |expected: TileType| -> Result<(), String> {
            match out {
                Some(o) if *o == expected => Ok(()),
                Some(o) => Err(format!("declared {o} but the rule gives {expected}")),
                None => Err("must define a value".into()),
            }
        };
        let out_ty = out.cloned().ok_or("must define a value");
        if let Some(o) = out
            && o.shape.len() > 2
        {
            return Err(format!("tiles have rank ≤ 2, got {o}"));
        }
        match op {
            Op::ProgramId(a) if *a > 2 => Err(format!("grid axis {a} out of range 0..3")),
            Op::ProgramId(_) => want_out(i32s),
            Op::Dim { param, axis } if k.params.get(*param).is_none_or(|p| *axis >= p.rank) => {
                Err(format!("parameter #{param} has no axis {axis}"))
            }
            Op::Dim { .. } => want_out(i32s),
            Op::Const(_) => match out_ty?.shape.is_empty() {
                true => Ok(()),
                false => Err("const defines a scalar; use full for tiles".into()),
            },
            Op::Arange => match out_ty?.shape.as_slice() {
                [_] if out.unwrap().dtype == DType::I32 => Ok(()),
                _ => Err("arange defines an i32[n] tile".into()),
            },
            Op::Full(_) => out_ty.map(|_| ()).map_err(String::from),
            Op::Unary(_, a) => {
                if !ty(a).dtype.is_float() {
                    return Err(format!("needs a float operand, got {}", ty(a)));
                }
                want_out(ty(a).clone())
            }
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) => {
                let (ta, tb) = (ty(a), ty(b));
                if ta.dtype != tb.dtype {
                    return Err(format!("dtype mismatch: {ta} and {tb}"));
                }
                let shape = TileType::broadcast_shape(&ta.shape, &tb.shape)
                    .ok_or_else(|| format!("shapes {ta} and {tb} do not broadcast"))?;
                let dtype = if matches!(op, Op::Cmp(..)) {
                    DType::Bool
                } else {
                    ta.dtype
                };
                want_out(TileType { dtype, shape })
            }
            Op::Select(m, a, b) => {
                if ty(m).dtype != DType::Bool {
                    return Err(format!("mask %{} must be bool, got {}", m.0, ty(m)));
                }
                if ty(a).dtype != ty(b).dtype {
                    return Err(format!("dtype mismatch: {} and {}", ty(a), ty(b)));
                }
                let s = TileType::broadcast_shape(&ty(a).shape, &ty(b).shape)
                    .and_then(|s| TileType::broadcast_shape(&s, &ty(m).shape))
                    .ok_or("mask and values do not broadcast")?;
                want_out(TileType {
                    dtype: ty(a).dtype,
                    shape: s,
                })
            }
            Op::Cast(a) => want_out(TileType {
                dtype: out_ty?.dtype,
                shape: ty(a).shape.clone(),
            }),
            Op::Expand { a, axis } => {
                let mut s = ty(a).shape.clone();
                if *axis > s.len() {
                    return Err(format!("axis {axis} out of range for {}", ty(a)));
                }
                s.insert(*axis, 1);
                want_out(TileType {
                    dtype: ty(a).dtype,
                    shape: s,
                })
            }
            Op::Broadcast(a) => {
                let o = out_ty?;
                match TileType::broadcast_shape(&ty(a).shape, &o.shape) {
                    Some(s) if s == o.shape && o.dtype == ty(a).dtype => Ok(()),
                    _ => Err(format!("{} does not broadcast to {o}", ty(a))),
                }
            }
            Op::Fft { a, .. } => match (ty(a).dtype, ty(a).shape.as_slice()) {
                (DType::F32, [l, w])
                    if l.is_power_of_two()
                        && *l as u64 <= crate::graph::FFT_MAX_LENGTH
                        && w % 2 == 0 =>
                {
                    want_out(ty(a).clone())
                }
                _ => Err(format!(
                    "needs an f32[L, W] tile with L a power of two ≤ {} and W even (W/2 complex columns), got {}",
                    crate::graph::FFT_MAX_LENGTH,
                    ty(a)
                )),
            },
            Op::Trans(a) => match ty(a).shape.as_slice() {
                [r, c] => want_out(TileType {
                    dtype: ty(a).dtype,
                    shape: vec![*c, *r],
                }),
                _ => Err(format!("needs a rank-2 tile, got {}", ty(a))),
            },
            Op::Reduce { a, axis, .. } => {
                let mut s = ty(a).shape.clone();
                if *axis >= s.len() {
                    return Err(format!("axis {axis} out of range for {}", ty(a)));
                }
                if ty(a).dtype == DType::Bool {
                    return Err("cannot reduce a bool tile".into());
                }
                s.remove(*axis);
                want_out(TileType {
                    dtype: ty(a).dtype,
                    shape: s,
                })
            }
            Op::Dot { a, b, acc } => {
                let (ta, tb, tc) = (ty(a), ty(b), ty(acc));
                match (
                    ta.shape.as_slice(),
                    tb.shape.as_slice(),
                    tc.shape.as_slice(),
                ) {
                    ([m, k1], [k2, n], [m2, n2]) if k1 == k2 && m == m2 && n == n2 => {}
                    _ => return Err(format!("shapes do not chain: {ta} · {tb} + {tc}")),
                }
                if ta.dtype != tb.dtype || !ta.dtype.is_float() {
                    return Err(format!(
                        "operands must share a float dtype, got {ta} and {tb}"
                    ));
                }
                if ![DType::F32, DType::BF16, DType::F16].contains(&tc.dtype) {
                    return Err(format!("accumulator must be f32, bf16 or f16, got {tc}"));
                }
                want_out(tc.clone())
            }
            Op::Load {
                param, index, mask, ..
            } => {
                let o = out_ty?;
                self.access(*param, index, &o, *mask)?;
                if o.dtype != k.params[*param].dtype {
                    return Err(format!(
                        "loads {} from %{}: {}",
                        o.dtype, k.params[*param].name, k.params[*param].dtype
                    ));
                }
                Ok(())
            }
            Op::Im2col {
                param,
                row,
                col,
                chan,
                geom,
            } => {
                let o = out_ty?;
                let p = k
                    .params
                    .get(*param)
                    .ok_or(format!("parameter #{param} does not exist"))?;
                if p.rank != 3 {
                    return Err(format!(
                        "im2col reads the [N·H, W, C] view of an NHWC tensor; %{} has rank {}",
                        p.name, p.rank
                    ));
                }
                if o.dtype != p.dtype || o.shape.len() != 2 {
                    return Err(format!(
                        "im2col of %{}: {} gives a rank-2 {} tile, got {o}",
                        p.name, p.dtype, p.dtype
                    ));
                }
                if let Some(i) = [row, col, chan]
                    .into_iter()
                    .find(|i| *ty(i) != TileType::scalar(DType::I32))
                {
                    return Err(format!(
                        "im2col index %{} must be an i32 scalar, got {}",
                        i.0,
                        ty(i)
                    ));
                }
                let g = geom;
                if g.height == 0
                    || g.kernel.contains(&0)
                    || g.cg == 0
                    || g.stride.contains(&0)
                    || g.dilation.contains(&0)
                {
                    return Err(format!(
                        "im2col height {}, kernel {:?}, cg {}, stride {:?} and dilation {:?} must be ≥ 1",
                        g.height, g.kernel, g.cg, g.stride, g.dilation
                    ));
                }
                Ok(())
            }
            Op::Store {
                param,
                index,
                value,
                mask,
            } => {
                if out.is_some() {
                    return Err("store defines no value".into());
                }
                let t = ty(value).clone();
                self.access(*param, index, &t, *mask)?;
                if t.dtype != k.params[*param].dtype {
                    return Err(format!(
                        "stores {t} into %{}: {}",
                        k.params[*param].name, k.params[*param].dtype
                    ));
                }
                Ok(())
            }
            Op::For { .. } | Op::Yield(_) => unreachable!("handled by the block walk"),
        }
    }

    fn access(
        &self,
        param: usize,
        index: &[TValue],
        t: &TileType,
        mask: Option<TValue>,
    ) -> Result<(), String> {
        let p = self
            .k
            .params
            .get(param)
            .ok_or(format!("parameter #{param} does not exist"))?;
        if index.len() != p.rank {
            return Err(format!(
                "%{} has rank {} but {} indices are given",
                p.name,
                p.rank,
                index.len()
            ));
        }
        if let Some(i) = index
            .iter()
            .find(|i| *self.k.ty(**i) != TileType::scalar(DType::I32))
        {
            return Err(format!(
                "index %{} must be an i32 scalar, got {}",
                i.0,
                self.k.ty(*i)
            ));
        }
        if t.shape.len() > p.rank {
            return Err(format!(
                "a rank-{} tile does not fit the rank-{} tensor %{}",
                t.shape.len(),
                p.rank,
                p.name
            ));
        }
        if let Some(m) = mask {
            let mt = self.k.ty(m);
            if mt.dtype != DType::Bool
                || TileType::broadcast_shape(&mt.shape, &t.shape).as_deref() != Some(&t.shape[..])
            {
                return Err(format!(
                    "mask %{} must be a bool tile broadcastable to {t}, got {mt}",
                    m.0
                ));
            }
        }
        Ok(())
    }
}
