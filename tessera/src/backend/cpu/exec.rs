//! The Tile IR interpreter: one program at a time, tile ops on whole tiles.

use super::value::{Data, Tile};
use super::{elementwise as ew, gemm, matmul, memory};
use crate::backend::Buffer;
use crate::{Error, Result};
use std::collections::HashSet;
use tessera_ir::DType;
use tessera_ir::tile::{Inst, Kernel, Op, TValue};

/// A kernel prepared for the CPU: the verified Tile IR plus where each operand dies, so tiles
/// (an accumulator, say) move instead of being copied.
pub(crate) struct Program {
    pub kernel: Kernel,
    take: HashSet<(u32, u32)>,
    /// The fused fast path, when the kernel compiles for it.
    pub fused: Option<super::fused::Fused>,
    /// The matmul K loop the direct GEMM path computes, when the kernel has one.
    pub kloop: Option<matmul::KLoop>,
}

/// The register file of one worker.
pub(crate) struct Registers(Vec<Option<Tile>>);

impl Registers {
    pub fn new(k: &Kernel) -> Self {
        Registers(vec![None; k.types.len()])
    }
}

impl Program {
    /// Prepares a verified kernel.
    pub fn new(kernel: Kernel) -> Program {
        let mut take = HashSet::new();
        liveness(&kernel, &kernel.body, &[], &mut take);
        let fused = super::fused::Fused::new(&kernel).ok();
        let kloop = matmul::recognise(&kernel);
        Program {
            kernel,
            take,
            fused,
            kloop,
        }
    }

    /// Whether the fused path matched this kernel for its row loops (`fused::rowmatch`: the
    /// library's softmax, layernorm and rmsnorm under `fast`), which compute only a row's own
    /// columns whatever the tile's width. A launch may still decline them (`Fused::runs`,
    /// `Plan::rows`: `with_interpreter`, a dim of 2^24 or more, tensors not `[R, C]` whole)
    /// and run this program's tile whole.
    pub fn on_row_loop(&self) -> bool {
        self.fused.as_ref().is_some_and(|f| f.on_row_loop())
    }

    /// Whether launching this program with `args` writes every element of parameter
    /// `param` (the fused path runs them and proves it covers that output, see
    /// `fused::Fused::covers`; or, without a fused path, a plain matmul's direct GEMM writes
    /// its whole output, see `matmul::writes_whole`).
    pub fn covers(&self, args: &[Buffer], param: usize) -> bool {
        match &self.fused {
            Some(f) => f.covers(&self.kernel, args, param),
            None => {
                args.len() == self.kernel.params.len()
                    && self.kloop.as_ref().is_some_and(|lp| {
                        lp.plain == Some(param) && matmul::writes_whole(lp, args) && {
                            let shapes: Vec<Vec<usize>> =
                                args.iter().map(|a| a.dims().to_vec()).collect();
                            super::grid_of(&self.kernel, &shapes)
                                .is_ok_and(|g| g.iter().all(|&d| d > 0))
                        }
                    })
            }
        }
    }

    /// Runs one program; `direct`: the launch's operands for the direct GEMM path of
    /// [`Program::kloop`] (`None`: the K loop runs step by step).
    pub fn run_block(
        &self,
        regs: &mut Registers,
        ids: [usize; 3],
        args: &[Buffer],
        direct: Option<&matmul::Operands>,
    ) -> Result<()> {
        let mut cx = Cx {
            p: self,
            regs,
            ids,
            args,
            direct,
        };
        cx.run(&self.kernel.body).map(|_| ())
    }
}

/// Marks `(inst, value)` pairs where `value`, owned by this block, is used for the last time.
fn liveness(k: &Kernel, block: &[Inst], owned_extra: &[TValue], take: &mut HashSet<(u32, u32)>) {
    let mut owned: HashSet<TValue> = owned_extra.iter().copied().collect();
    for &i in block {
        owned.extend(k.inst(i).results.iter().copied());
    }
    // Last position (in this block) referring to each value, and whether that reference is direct.
    let mut last: std::collections::HashMap<TValue, (usize, bool)> = Default::default();
    for (pos, &i) in block.iter().enumerate() {
        let d = k.inst(i);
        for v in d.op.operands() {
            last.insert(v, (pos, true));
        }
        if let Op::For { body, args, iv, .. } = &d.op {
            let mut nested = Vec::new();
            collect_uses(k, body, &mut nested);
            for v in nested {
                if v != *iv && !args.contains(&v) {
                    last.insert(v, (pos, false));
                }
            }
            let inner: Vec<TValue> = std::iter::once(*iv).chain(args.iter().copied()).collect();
            liveness(k, body, &inner, take);
        }
    }
    for (v, (pos, direct)) in last {
        let i = block[pos];
        let once = k.inst(i).op.operands().iter().filter(|o| **o == v).count() == 1;
        if owned.contains(&v) && direct && once {
            take.insert((i.0, v.0));
        }
    }
}

fn collect_uses(k: &Kernel, block: &[Inst], out: &mut Vec<TValue>) {
    for &i in block {
        let d = k.inst(i);
        out.extend(d.op.operands());
        if let Op::For { body, .. } = &d.op {
            collect_uses(k, body, out);
        }
    }
}

struct Cx<'a> {
    p: &'a Program,
    regs: &'a mut Registers,
    ids: [usize; 3],
    args: &'a [Buffer],
    direct: Option<&'a matmul::Operands<'a>>,
}

impl Cx<'_> {
    fn get(&self, v: TValue) -> &Tile {
        self.regs.0[v.index()]
            .as_ref()
            .expect("read of an unset register (verifier bug)")
    }

    /// The operand's tile, moved out when this is its last use, else cloned.
    fn own(&mut self, at: Inst, v: TValue) -> Tile {
        if self.p.take.contains(&(at.0, v.0)) {
            self.regs.0[v.index()]
                .take()
                .expect("read of an unset register (verifier bug)")
        } else {
            self.get(v).clone()
        }
    }

    fn set(&mut self, v: TValue, t: Tile) {
        self.regs.0[v.index()] = Some(t);
    }

    fn index(&self, idx: &[TValue]) -> Vec<i64> {
        idx.iter().map(|v| self.get(*v).as_index()).collect()
    }

    /// Runs a block; returns the yielded tiles when it ends with `yield`.
    fn run(&mut self, block: &[Inst]) -> Result<Option<Vec<Tile>>> {
        let k = &self.p.kernel;
        for &i in block {
            let d = k.inst(i);
            let out_ty = d.results.first().map(|r| k.ty(*r));
            let dims = || out_ty.map(|t| t.shape.clone()).unwrap_or_default();
            let t = match &d.op {
                Op::ProgramId(a) => Tile::scalar_i(self.ids[*a as usize] as i32),
                Op::Const(x) => scalar(out_ty.unwrap().dtype, *x),
                Op::Dim { param, axis } => Tile::scalar_i(self.args[*param].dims()[*axis] as i32),
                Op::Arange => {
                    let n = out_ty.unwrap().shape[0];
                    Tile::new_i(&[n], (0..n as i32).collect())
                }
                Op::Full(x) => {
                    let s = scalar(out_ty.unwrap().dtype, *x);
                    let mut t = ew::broadcast(&s, &dims());
                    if matches!(t.data, Data::F(_)) && x.to_bits() == 0 {
                        t.zero_rows_from = 0;
                    }
                    t
                }
                Op::Unary(u, a) => ew::unary(*u, self.own(i, *a), k.policy),
                Op::Binary(b, x, y) => ew::binary(*b, self.get(*x), self.get(*y), &dims()),
                Op::Cmp(c, x, y) => ew::cmp(*c, self.get(*x), self.get(*y), &dims()),
                Op::Select(m, x, y) => {
                    ew::select(self.get(*m), self.get(*x), self.get(*y), &dims())
                }
                Op::Cast(a) => ew::cast(self.own(i, *a), out_ty.unwrap().dtype),
                Op::Expand { a, .. } => {
                    let mut t = self.own(i, *a);
                    let (shape, rank) = Tile::shape_of(&dims());
                    (t.shape, t.rank) = (shape, rank);
                    t.unknown_rows()
                }
                Op::Broadcast(a) => ew::broadcast(self.get(*a), &dims()),
                Op::Trans(a) => ew::trans(self.get(*a)),
                Op::Fft { a, inverse } => {
                    let mut t = self.own(i, *a);
                    let (l, w) = (t.shape[0], t.shape[1]);
                    if let Data::F(x) = &mut t.data {
                        super::fft::stockham(x, l, w, *inverse);
                    }
                    t.unknown_rows()
                }
                Op::Reduce {
                    op,
                    a,
                    axis,
                    policy,
                } => ew::reduce(*op, self.get(*a), *axis, *policy),
                Op::Dot { a, b, acc } => {
                    let mut c = self.own(i, *acc);
                    let (ta, tb) = (self.get(*a), self.get(*b));
                    let (m, kk, n) = (ta.shape[0], ta.shape[1], tb.shape[1]);
                    let dtype = c.dtype;
                    let Data::F(cv) = &mut c.data else {
                        unreachable!("float accumulator (verified)")
                    };
                    let rows = dot_rows(ta, tb, c.zero_rows_from, cv, n);
                    if dtype == DType::F32 {
                        // One FMA chain per element in increasing k (see `gemm`).
                        gemm::gemm_f32(rows, n, kk, ta.f(), kk, tb.f(), n, cv, n);
                    } else {
                        dot_narrow(dtype, rows, n, kk, ta.f(), tb.f(), cv);
                    }
                    c.zero_rows_from = if rows < m {
                        c.zero_rows_from.max(rows)
                    } else {
                        m
                    };
                    c
                }
                Op::Load {
                    param,
                    index,
                    mask,
                    other,
                } => {
                    let idx = self.index(index);
                    let m = mask.map(|m| self.get(m));
                    memory::load(
                        &self.args[*param],
                        &idx,
                        &dims(),
                        *other,
                        m,
                        out_ty.unwrap().dtype,
                    )?
                }
                Op::Im2col {
                    param,
                    row,
                    col,
                    chan,
                    geom,
                } => {
                    let idx = self.index(&[*row, *col, *chan]);
                    let d = dims();
                    memory::im2col(
                        &self.args[*param],
                        [idx[0], idx[1], idx[2]],
                        geom,
                        [d[0], d[1]],
                        out_ty.unwrap().dtype,
                    )
                }
                Op::Store {
                    param,
                    index,
                    value,
                    mask,
                } => {
                    let idx = self.index(index);
                    let buf = &self.args[*param];
                    if !buf.writable {
                        return Err(Error::Unsupported {
                            device: "cpu".into(),
                            message: format!(
                                "kernel `{}` stores into input %{}",
                                k.name, k.params[*param].name
                            ),
                        });
                    }
                    memory::store(buf, &idx, self.get(*value), mask.map(|m| self.get(m)))?;
                    continue;
                }
                Op::Yield(vs) => {
                    let out = vs.iter().map(|v| self.own(i, *v)).collect();
                    return Ok(Some(out));
                }
                Op::For { lo, hi, inits, .. }
                    if let (Some(ops), Some(lp)) = (self.direct, &self.p.kloop)
                        && lp.for_inst == i =>
                {
                    // The whole K loop as one GEMM (`matmul`): bit for bit the loop's result.
                    let mut acc = self.own(i, inits[0]);
                    let at = [
                        self.get(lp.row).as_index(),
                        self.get(lp.col).as_index(),
                        self.get(*lo).as_index(),
                        self.get(*hi).as_index(),
                    ];
                    let Data::F(v) = &mut acc.data else {
                        unreachable!("f32 accumulator (matched)")
                    };
                    matmul::block(lp, ops, v, at);
                    self.set(d.results[0], acc.unknown_rows());
                    continue;
                }
                Op::For {
                    iv,
                    lo,
                    hi,
                    step,
                    inits,
                    args,
                    body,
                } => {
                    let (lo, hi) = (self.get(*lo).as_index(), self.get(*hi).as_index());
                    for (a, init) in args.iter().zip(inits) {
                        let t = self.own(i, *init);
                        self.set(*a, t);
                    }
                    let mut x = lo;
                    while x < hi {
                        self.set(*iv, Tile::scalar_i(x as i32));
                        let next = self.run(body)?.unwrap_or_default();
                        for (a, t) in args.iter().zip(next) {
                            self.set(*a, t);
                        }
                        x += step;
                    }
                    for (r, a) in d.results.iter().zip(args) {
                        let t = self.regs.0[a.index()].take().expect("loop-carried value");
                        self.set(*r, t);
                    }
                    continue;
                }
            };
            self.set(d.results[0], t);
        }
        Ok(None)
    }
}

fn scalar(dtype: DType, x: f64) -> Tile {
    match dtype {
        DType::I32 => Tile::scalar_i(x as i32),
        DType::Bool => Tile::new_b(&[], vec![x != 0.0]),
        d => {
            let mut v = vec![x as f32];
            super::value::round_to(d, &mut v);
            Tile::new_f(d, &[], v)
        }
    }
}

/// `c += a·b` with a bf16/f16 accumulator: per element an FMA chain in increasing k, rounded
/// to the accumulator's dtype after every step (the Tile IR `dot` semantics; PTX does the same).
/// How many leading rows of `acc += a · b` must be computed: rows of `a` at and after
/// `a.zero_rows_from` are `+0.0`, and when every element of `b` is finite each of their FMAs
/// adds `±0.0` to the accumulator, which leaves it unchanged unless it is `-0.0` — so those
/// rows are skipped when no accumulator entry there is `-0.0` (always the case for rows a
/// `full(0)` accumulator still holds, `acc_zero_from`). A `[128, k]` tile of an `m = 1` matmul
/// multiplies one row, not 128; results are bit for bit those of the full product.
fn dot_rows(a: &Tile, b: &Tile, acc_zero_from: usize, acc: &[f32], n: usize) -> usize {
    let m = a.shape[0];
    let rows = a.zero_rows_from.min(m);
    if rows >= m || a.rank != 2 {
        return m;
    }
    // Largest magnitude bit pattern below +inf: every element finite (NaN patterns are larger).
    let finite = b
        .f()
        .iter()
        .map(|x| x.to_bits() & 0x7FFF_FFFF)
        .max()
        .unwrap_or(0)
        < 0x7F80_0000;
    let no_neg_zero = acc_zero_from <= rows
        || acc[rows * n..m * n]
            .iter()
            .all(|x| x.to_bits() != 0x8000_0000);
    if finite && no_neg_zero { rows } else { m }
}

fn dot_narrow(dtype: DType, m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    for i in 0..m {
        for j in 0..n {
            let mut x = [c[i * n + j]];
            for p in 0..k {
                x[0] = a[i * k + p].mul_add(b[p * n + j], x[0]);
                super::value::round_to(dtype, &mut x);
            }
            c[i * n + j] = x[0];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Tile, dot_rows};
    use tessera_ir::DType;

    fn tile(rows: usize, cols: usize, v: Vec<f32>) -> Tile {
        Tile::new_f(DType::F32, &[rows, cols], v)
    }

    /// Zero rows are skipped only when that cannot change a bit of the product: `b` finite and
    /// no `-0.0` in the skipped accumulator rows.
    #[test]
    fn dot_skips_zero_rows_only_when_exact() {
        let mut a = tile(
            4,
            3,
            (0..12).map(|i| if i < 3 { 1.5 } else { 0.0 }).collect(),
        );
        a.zero_rows_from = 1;
        let b = tile(3, 2, vec![1.0, -2.0, 3.0, 0.5, -1.0, 2.0]);
        let acc = vec![0.25f32; 8];
        assert_eq!(dot_rows(&a, &b, 4, &acc, 2), 1);
        // Nothing known about `a`: every row.
        assert_eq!(dot_rows(&a.clone().unknown_rows(), &b, 4, &acc, 2), 4);
        // A non-finite `b` makes 0 · b NaN: every row.
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let mut bv = vec![1.0f32; 6];
            bv[4] = bad;
            assert_eq!(dot_rows(&a, &tile(3, 2, bv), 4, &acc, 2), 4);
        }
        // A -0.0 in a skipped accumulator row could turn +0.0: every row; unless that row is
        // known to be a `full(0)` row.
        let mut acc2 = acc.clone();
        acc2[5] = -0.0;
        assert_eq!(dot_rows(&a, &b, 4, &acc2, 2), 4);
        acc2[5] = 0.0;
        assert_eq!(dot_rows(&a, &b, 4, &acc2, 2), 1);
        assert_eq!(dot_rows(&a, &b, 1, &acc, 2), 1);
    }
}
