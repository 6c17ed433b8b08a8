//! Recognising the row-wise library kernels in Tile IR: softmax (online max and sum, then a
//! write pass) and layernorm / rmsnorm (mean, sum of squared deviations or squares, rsqrt of
//! the variance plus eps, scale, shift), as `lower::rowwise` emits them under the `fast`
//! policy. The match follows the data flow back from the kernel's only store and checks every
//! op on the way (operands, dtypes, constants, loop bounds, the grid; broadcast axes through
//! the tile shape, see `common`), so a kernel that
//! matches computes exactly what [`super::softmax`] and [`super::norm`] compute; anything
//! else (masks, other policies, other dtypes, an extra epilogue op) does not match and keeps
//! the general chunk program.

use std::collections::HashMap;
use tessera_ir::graph::{BinaryOp, UnaryOp};
use tessera_ir::tile::{CmpOp, Inst, Kernel, Op, TValue, TileReduce};
use tessera_ir::{DType, NumericsPolicy};

/// What the row kernels share: the tensors, the tile and how the result is stored.
#[derive(Clone, Debug)]
pub(crate) struct Rows {
    /// The input `[R, C]`.
    pub x: usize,
    /// The output `[R, C]`.
    pub out: usize,
    /// Rows per program (the grid is `cdiv(R, br)` programs).
    pub br: usize,
    /// Columns per loop step: row sums are taken per chunk of `bc` columns and added in
    /// column order, as the interpreter does.
    pub bc: usize,
    /// The result is rounded to bf16 before the store (a cast to bf16 on the way).
    pub round_bf16: bool,
}

/// A softmax kernel (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct Softmax {
    pub rows: Rows,
}

/// A layernorm (`beta` and the centring present) or rmsnorm kernel.
#[derive(Clone, Debug)]
pub(crate) struct Norm {
    pub rows: Rows,
    pub gamma: usize,
    pub beta: Option<usize>,
    /// Centred (layernorm) or not (rmsnorm).
    pub layer: bool,
    /// `eps` as the kernel's f32 constant.
    pub eps: f32,
}

/// Where a value comes from.
#[derive(Clone, Copy)]
pub(super) enum Def {
    /// Result `n` of an instruction.
    Res(Inst, usize),
    /// Carried value `n` of a loop, as its body sees it.
    Arg(Inst, usize),
    /// The counter of a loop.
    Iv(Inst),
}

pub(super) struct Ir<'k> {
    pub(super) k: &'k Kernel,
    pub(super) def: HashMap<TValue, Def>,
    pub(super) stores: Vec<Inst>,
}

impl<'k> Ir<'k> {
    pub(super) fn new(k: &'k Kernel) -> Ir<'k> {
        let mut ir = Ir {
            k,
            def: HashMap::new(),
            stores: Vec::new(),
        };
        ir.scan(&k.body);
        ir
    }

    fn scan(&mut self, block: &[Inst]) {
        for &i in block {
            let d = self.k.inst(i);
            for (n, r) in d.results.iter().enumerate() {
                self.def.insert(*r, Def::Res(i, n));
            }
            match &d.op {
                Op::For { iv, args, body, .. } => {
                    self.def.insert(*iv, Def::Iv(i));
                    for (n, a) in args.iter().enumerate() {
                        self.def.insert(*a, Def::Arg(i, n));
                    }
                    self.scan(body);
                }
                Op::Store { .. } => self.stores.push(i),
                _ => {}
            }
        }
    }

    /// `v` with `expand` and `broadcast` looked through.
    fn root(&self, mut v: TValue) -> TValue {
        loop {
            match self.def.get(&v) {
                Some(Def::Res(i, 0)) => match &self.k.inst(*i).op {
                    Op::Expand { a, .. } | Op::Broadcast(a) => v = *a,
                    _ => return v,
                },
                _ => return v,
            }
        }
    }

    /// The op defining `v` (aliases looked through), if an instruction's only result.
    pub(super) fn op(&self, v: TValue) -> Option<&'k Op> {
        match self.def.get(&self.root(v))? {
            Def::Res(i, 0) => Some(&self.k.inst(*i).op),
            _ => None,
        }
    }

    fn dtype(&self, v: TValue) -> DType {
        self.k.ty(v).dtype
    }

    /// `v` is an f32 binary op `op` of operands `(a, b)`.
    pub(super) fn bin(&self, v: TValue, op: BinaryOp) -> Option<(TValue, TValue)> {
        match self.op(v)? {
            Op::Binary(o, a, b) if *o == op && self.dtype(self.root(v)) == DType::F32 => {
                Some((*a, *b))
            }
            _ => None,
        }
    }

    /// `v` is an f32 unary op `op` of `a`.
    fn un(&self, v: TValue, op: UnaryOp) -> Option<TValue> {
        match self.op(v)? {
            Op::Unary(o, a) if *o == op && self.dtype(self.root(v)) == DType::F32 => Some(*a),
            _ => None,
        }
    }

    /// `v` is a fast f32 row reduction (`axis` 1 of a rank-2 tile) `op` of `a`.
    fn reduce(&self, v: TValue, op: TileReduce) -> Option<TValue> {
        match self.op(v)? {
            Op::Reduce {
                op: o,
                a,
                axis: 1,
                policy: NumericsPolicy::Fast,
            } if *o == op
                && self.dtype(self.root(v)) == DType::F32
                && self.k.ty(*a).shape.len() == 2 =>
            {
                Some(*a)
            }
            _ => None,
        }
    }

    pub(super) fn konst(&self, v: TValue) -> Option<f64> {
        match self.op(v)? {
            Op::Const(x) => Some(*x),
            _ => None,
        }
    }

    fn same(&self, a: TValue, b: TValue) -> bool {
        self.root(a) == self.root(b)
    }

    /// The loop whose carried value `n` (as seen after it) is `v`.
    fn loop_result(&self, v: TValue) -> Option<(Inst, usize)> {
        match self.def.get(&self.root(v))? {
            Def::Res(i, n) if matches!(self.k.inst(*i).op, Op::For { .. }) => Some((*i, *n)),
            _ => None,
        }
    }

    /// Carried value `n` of loop `l` inside its body.
    fn is_arg(&self, v: TValue, l: Inst, n: usize) -> bool {
        matches!(self.def.get(&self.root(v)), Some(Def::Arg(i, m)) if *i == l && *m == n)
    }

    fn is_iv(&self, v: TValue, l: Inst) -> bool {
        matches!(self.def.get(&self.root(v)), Some(Def::Iv(i)) if *i == l)
    }

    /// Strips casts to f32 from a float value.
    fn uncast(&self, mut v: TValue) -> TValue {
        while let Some(Op::Cast(a)) = self.op(v) {
            if self.dtype(self.root(v)) != DType::F32
                || !matches!(self.dtype(*a), DType::F32 | DType::BF16)
            {
                break;
            }
            v = *a;
        }
        v
    }

    /// `v` (casts to f32 stripped) is an unmasked load of `param` at `index` with tile shape
    /// `shape`: its `other`.
    fn load(
        &self,
        v: TValue,
        param: usize,
        shape: &[usize],
        index: &[&dyn Fn(TValue) -> bool],
    ) -> Option<f64> {
        let v = self.root(self.uncast(v));
        if self.k.ty(v).shape != shape {
            return None;
        }
        match self.op(v)? {
            Op::Load {
                param: p,
                index: idx,
                mask: None,
                other,
            } if *p == param
                && idx.len() == index.len()
                && idx.iter().zip(index).all(|(i, f)| f(*i)) =>
            {
                Some(*other)
            }
            _ => None,
        }
    }

    /// The param of the load behind `v` (casts stripped).
    fn load_param(&self, v: TValue) -> Option<usize> {
        match self.op(self.uncast(v))? {
            Op::Load { param, .. } => Some(*param),
            _ => None,
        }
    }

    /// Loop `l` runs `for c = 0 to dim(x, 1) step bc` and yields `Some(values)`.
    fn row_loop(&self, l: Inst, x: usize, bc: usize) -> Option<(&'k [TValue], &'k [TValue])> {
        let Op::For {
            lo,
            hi,
            step,
            inits,
            body,
            ..
        } = &self.k.inst(l).op
        else {
            return None;
        };
        let yields = match &self.k.inst(*body.last()?).op {
            Op::Yield(y) => y.as_slice(),
            _ => return None,
        };
        let ok = self.konst(*lo) == Some(0.0)
            && matches!(self.op(*hi), Some(Op::Dim { param, axis: 1 }) if *param == x)
            && *step == bc as i64;
        ok.then_some((inits.as_slice(), yields))
    }

    /// `v` is an f32 `full(x)` tile.
    pub(super) fn full(&self, v: TValue, x: f64) -> bool {
        matches!(self.op(v), Some(Op::Full(y)) if y.to_bits() == x.to_bits())
            && self.dtype(self.root(v)) == DType::F32
    }

    /// The store's value with its casts stripped, and whether one of them (or the stored
    /// parameter) rounds to bf16; casts only between f32 and bf16.
    fn stored(&self, v: TValue, out: usize) -> Option<(TValue, bool)> {
        let mut round = self.k.params[out].dtype == DType::BF16;
        let mut v = v;
        while let Some(Op::Cast(a)) = self.op(v) {
            match (self.dtype(self.root(v)), self.dtype(*a)) {
                (DType::BF16, DType::F32 | DType::BF16) => round = true,
                (DType::F32, DType::F32 | DType::BF16) => {}
                _ => return None,
            }
            v = *a;
        }
        Some((v, round))
    }
}

/// The parts every row kernel shares: the only store (in a row loop, at `[i, c]`), `i` =
/// `program_id(0) * br` with the grid over the input's rows, the tile `[br, bc]` of the value
/// stored. Returns the store's loop, the stored value (casts stripped), `i` and the rows.
fn common(ir: &Ir) -> Option<(Inst, TValue, TValue, Rows)> {
    let k = ir.k;
    let [st] = ir.stores.as_slice() else {
        return None;
    };
    let Op::Store {
        param: out,
        index,
        value,
        mask: None,
    } = &k.inst(*st).op
    else {
        return None;
    };
    let [i, c] = index.as_slice() else {
        return None;
    };
    let Some(Def::Iv(w)) = ir.def.get(&ir.root(*c)).copied() else {
        return None;
    };
    // The grid: programs over the input's rows, `br` each; `i = program_id(0) * br`.
    let [g0, g1, g2] = &k.grid;
    let [(x, 0)] = g0.dims.as_slice() else {
        return None;
    };
    let br = g0.tile as usize;
    if !g1.dims.is_empty() || !g2.dims.is_empty() || br == 0 {
        return None;
    }
    let (p, q) = match ir.op(*i)? {
        Op::Binary(BinaryOp::Mul, p, q) => (*p, *q),
        _ => return None,
    };
    let pid0 = |v| matches!(ir.op(v), Some(Op::ProgramId(0)));
    let is_br = |v| ir.konst(v) == Some(br as f64);
    if !((pid0(p) && is_br(q)) || (pid0(q) && is_br(p))) {
        return None;
    }
    let (v, round_bf16) = ir.stored(*value, *out)?;
    let shape = &k.ty(ir.root(v)).shape;
    let [rb, bc] = shape.as_slice() else {
        return None;
    };
    if *rb != br || *bc == 0 || !matches!(k.params[*x].dtype, DType::F32 | DType::BF16) {
        return None;
    }
    let Op::For { step, .. } = &k.inst(w).op else {
        return None;
    };
    let bc = *bc;
    // `root` looks through `expand` and `broadcast` without checking the axis: the tile
    // shapes do. A `[br]` row statistic expanded on the wrong axis is `[1, br]`, a `[bc]`
    // column vector `[bc, 1]`, and neither broadcasts to `[br, bc]` unless `br == bc` (or the
    // axis has one element, where both readings agree). So square tiles keep the chunk
    // program.
    if *step != bc as i64 || (br == bc && br > 1) {
        return None;
    }
    let rows = Rows {
        x: *x,
        out: *out,
        br,
        bc,
        round_bf16,
    };
    Some((w, v, *i, rows))
}

/// Matches a softmax kernel.
pub(crate) fn softmax(k: &Kernel) -> Option<Softmax> {
    let ir = Ir::new(k);
    let (w, y, i, rows) = common(&ir)?;
    let (x, bc) = (rows.x, rows.bc);
    let load_x = |v: TValue, l: Inst| -> Option<f64> {
        let fi = |t: TValue| ir.same(t, i);
        let fc = |t: TValue| ir.is_iv(t, l);
        ir.load(v, x, &[rows.br, bc], &[&fi, &fc])
    };
    // Write pass: y = exp(x - m) * (1 / s).
    let (e, inv) = ir.bin(y, BinaryOp::Mul)?;
    let (xw, m) = ir.bin(ir.un(e, UnaryOp::Exp)?, BinaryOp::Sub)?;
    load_x(xw, w)?;
    let (one, s) = ir.bin(inv, BinaryOp::Div)?;
    let (a, 0) = ir.loop_result(m)? else {
        return None;
    };
    if ir.konst(one) != Some(1.0) || ir.loop_result(s)? != (a, 1) {
        return None;
    }
    ir.row_loop(w, x, bc)?;
    // The online pass: m' = max(m, max(x)), s' = s·exp(m - m') + Σ exp(x - m').
    let ([m0, s0], [mn, s2]) = ir.row_loop(a, x, bc)? else {
        return None;
    };
    if !ir.full(*m0, f64::NEG_INFINITY) || !ir.full(*s0, 0.0) {
        return None;
    }
    let (m_old, cm) = ir.bin(*mn, BinaryOp::Max)?;
    let xa = ir.reduce(cm, TileReduce::Max)?;
    if !ir.is_arg(m_old, a, 0) || load_x(xa, a)? != f64::NEG_INFINITY {
        return None;
    }
    let (s1, r) = ir.bin(*s2, BinaryOp::Add)?;
    let (s_old, scale) = ir.bin(s1, BinaryOp::Mul)?;
    let (d0, d1) = ir.bin(ir.un(scale, UnaryOp::Exp)?, BinaryOp::Sub)?;
    let (xe, mne) = ir.bin(
        ir.un(ir.reduce(r, TileReduce::Sum)?, UnaryOp::Exp)?,
        BinaryOp::Sub,
    )?;
    let ok = ir.is_arg(s_old, a, 1)
        && ir.is_arg(d0, a, 0)
        && ir.same(d1, *mn)
        && ir.same(xe, xa)
        && ir.same(mne, *mn);
    ok.then_some(Softmax { rows })
}

/// Matches a layernorm or rmsnorm kernel.
pub(crate) fn norm(k: &Kernel) -> Option<Norm> {
    let ir = Ir::new(k);
    let (w, y, i, rows) = common(&ir)?;
    let (x, bc) = (rows.x, rows.bc);
    let row_at = |v: TValue, l: Inst, param: usize| -> Option<f64> {
        let fi = |t: TValue| ir.same(t, i);
        let fc = |t: TValue| ir.is_iv(t, l);
        ir.load(v, param, &[rows.br, bc], &[&fi, &fc])
    };
    // A `[bc]` vector loaded at the write loop's column.
    let vec_at = |v: TValue| -> Option<usize> {
        let p = ir.load_param(v)?;
        let fc = |t: TValue| ir.is_iv(t, w);
        ir.load(v, p, &[bc], &[&fc])?;
        Some(p)
    };
    ir.row_loop(w, x, bc)?;
    // Write pass: ((x - mean) · rstd) · g (+ b).
    let (y, beta) = match ir.bin(y, BinaryOp::Add) {
        Some((y, b)) => (y, Some(vec_at(b)?)),
        None => (y, None),
    };
    let (y, g) = ir.bin(y, BinaryOp::Mul)?;
    let gamma = vec_at(g)?;
    let (cen, rstd) = ir.bin(y, BinaryOp::Mul)?;
    let layer = beta.is_some();
    let mean = if layer {
        let (xw, mean) = ir.bin(cen, BinaryOp::Sub)?;
        row_at(xw, w, x)?;
        Some(mean)
    } else {
        row_at(cen, w, x)?;
        None
    };
    // rstd = rsqrt(ss / n + eps).
    let (var, ceps) = ir.bin(ir.un(rstd, UnaryOp::Rsqrt)?, BinaryOp::Add)?;
    let eps = ir.konst(ceps)?;
    if ir.dtype(ir.root(ceps)) != DType::F32 {
        return None;
    }
    let nf = |v: TValue| match ir.op(v) {
        Some(Op::Cast(a)) => {
            ir.dtype(ir.root(v)) == DType::F32
                && matches!(ir.op(*a), Some(Op::Dim { param, axis: 1 }) if *param == x)
        }
        _ => false,
    };
    let (ss, n1) = ir.bin(var, BinaryOp::Div)?;
    let (b, 0) = ir.loop_result(ss)? else {
        return None;
    };
    // Σ d·d per row, d = select(col < n, x - mean, 0) or x.
    let ([s0], [next]) = ir.row_loop(b, x, bc)? else {
        return None;
    };
    let (acc, r) = ir.bin(*next, BinaryOp::Add)?;
    let (d, d2) = ir.bin(ir.reduce(r, TileReduce::Sum)?, BinaryOp::Mul)?;
    if !nf(n1) || !ir.full(*s0, 0.0) || !ir.is_arg(acc, b, 0) || !ir.same(d, d2) {
        return None;
    }
    match mean {
        Some(mean) => {
            let Some(Op::Select(mask, dd, z)) = ir.op(d) else {
                return None;
            };
            if ir.dtype(ir.root(d)) != DType::F32 {
                return None;
            }
            let (xb, mb) = ir.bin(*dd, BinaryOp::Sub)?;
            row_at(xb, b, x)?;
            // mask = expand(arange + c < dim(x, 1), 0)
            let Some(Op::Cmp(CmpOp::Lt, cols, n)) = ir.op(*mask) else {
                return None;
            };
            let Some(Op::Binary(BinaryOp::Add, ar, c)) = ir.op(*cols) else {
                return None;
            };
            let ok = ir.konst(*z) == Some(0.0)
                && !ir.konst(*z)?.is_sign_negative()
                && ir.same(mb, mean)
                && matches!(ir.op(*n), Some(Op::Dim { param, axis: 1 }) if *param == x)
                && matches!(ir.op(*ar), Some(Op::Arange))
                && k.ty(ir.root(*ar)).shape == [bc]
                && ir.is_iv(*c, b);
            if !ok {
                return None;
            }
            // mean = Σ x / n.
            let (total, n2) = ir.bin(mean, BinaryOp::Div)?;
            let (a, 0) = ir.loop_result(total)? else {
                return None;
            };
            let ([s0], [next]) = ir.row_loop(a, x, bc)? else {
                return None;
            };
            let (acc, r) = ir.bin(*next, BinaryOp::Add)?;
            let xa = ir.reduce(r, TileReduce::Sum)?;
            let ok = nf(n2)
                && ir.full(*s0, 0.0)
                && ir.is_arg(acc, a, 0)
                && row_at(xa, a, x).is_some_and(|o| o.to_bits() == 0f64.to_bits());
            if !ok {
                return None;
            }
        }
        None => {
            // Lanes past the row read +0, whose square adds nothing.
            if row_at(d, b, x)?.to_bits() != 0f64.to_bits() {
                return None;
            }
        }
    }
    Some(Norm {
        rows,
        gamma,
        beta,
        layer,
        eps: eps as f32,
    })
}

impl Rows {
    /// `[R, C]` when the input and output are `[R, C]` tensors of exactly that size (the row
    /// kernels index them so); `None` sends the launch to the chunk program.
    pub fn dims(&self, args: &[crate::backend::Buffer]) -> Option<(usize, usize)> {
        let (x, o) = (&args[self.x], &args[self.out]);
        let ([r, c], [ro, co]) = (x.dims(), o.dims()) else {
            return None;
        };
        let whole = |b: &crate::backend::Buffer| r * c * b.dtype.size_bytes() == b.len;
        ((*r, *c) == (*ro, *co) && whole(x) && whole(o)).then_some((*r, *c))
    }
}
