//! Compiling Tile IR into a fused chunk program: elementwise ops, loads, stores and reductions
//! of one iteration shape become one [`Group`], run as a single loop over the tile's rows in
//! chunks of at most [`CHUNK`] columns; values used only inside a group never leave the chunk
//! scratch. Everything else (scalars, loops, transposes) becomes its own [`Step`].

use std::collections::{HashMap, HashSet};
use tessera_ir::graph::{BinaryOp, UnaryOp};
use tessera_ir::tile::{CmpOp, Inst, Kernel, Op, TValue, TileReduce};
use tessera_ir::{DType, NumericsPolicy};

/// Most columns one chunk holds (4 KiB of f32: a few live chunks stay in L1).
pub(crate) const CHUNK: usize = 1024;

/// Distance between chunk slots, and padding after each materialised tile, in f32s: not a
/// multiple of 4 KiB, so a loop reading one slot and writing another does not suffer 4K
/// aliasing (false store-to-load dependencies between addresses 4 KiB apart).
pub(crate) const SLOT: usize = CHUNK + 48;

/// Where a group reads an operand from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Src {
    /// A chunk slot of this group (same iteration shape, same position).
    Chunk(u16),
    /// A materialised tile seen as `rows × cols` (1 broadcasts).
    Mat {
        off: usize,
        rows: usize,
        cols: usize,
    },
    /// A scalar slot, broadcast.
    Scalar(u32),
}

/// Element kind of a chunk value (all are held as f32; ints exactly below 2^24, bools 0/1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    F,
    I,
    B,
}

/// One op of a group, on chunks.
#[derive(Clone, Debug)]
pub(crate) enum COp {
    Load {
        param: usize,
        idx: Vec<u32>,
        other: f32,
        rank: usize,
        dst: u16,
    },
    Store {
        param: usize,
        idx: Vec<u32>,
        rank: usize,
        src: Src,
    },
    Unary {
        op: UnaryOp,
        a: Src,
        dst: u16,
    },
    Binary {
        op: BinaryOp,
        kind: Kind,
        a: Src,
        b: Src,
        dst: u16,
    },
    Cmp {
        op: CmpOp,
        a: Src,
        b: Src,
        dst: u16,
    },
    Select {
        m: Src,
        a: Src,
        b: Src,
        dst: u16,
    },
    Cast {
        a: Src,
        to: DType,
        from: Kind,
        dst: u16,
    },
    Full {
        x: f32,
        dst: u16,
    },
    Arange {
        dst: u16,
    },
    /// Reduces each row (`along_cols`) into `out[r]`, or each column into `out[c]`.
    Reduce {
        op: TileReduce,
        a: Src,
        along_cols: bool,
        out: usize,
        scalar: Option<u32>,
        acc: usize,
    },
}

/// A member op plus what happens to its result.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub op: COp,
    /// Round the result to bf16 after the op.
    pub round_bf16: bool,
    /// Copy the result chunk to this materialised offset (row stride = the group's cols).
    pub mat: Option<usize>,
}

/// A fused loop nest over a `rows × cols` tile.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub rows: usize,
    pub cols: usize,
    pub members: Vec<Member>,
    /// No reductions and nothing materialised: stores are the group's only effect, so rows
    /// and columns outside every store's in-bounds window need not be computed.
    pub store_only: bool,
    /// The group is `load → unary ops and float casts → store` of f32 or bf16 tensors (an
    /// elementwise kernel such as `gelu`): where both windows cover the chunk, the runner
    /// widens the input into the output (f32) or into one f32 chunk (bf16 output), applies
    /// these steps there and, for a bf16 output, narrows the chunk into it.
    pub direct: Option<Vec<DirectStep>>,
    /// The group is `load, load → binary → (casts) → store` of two f32 or two bf16 tensors:
    /// where all three windows cover the chunk, the runner computes each output element from
    /// the inputs in registers (`super::pipe`).
    pub binary: Option<Pipe>,
    /// The group is `load → unary and binary ops → store` of f32 tensors, each binary op
    /// taking the running value and a materialised tile or a scalar (`gelu(x * y + 1.0)`):
    /// where the load's and the store's windows cover the chunk, the runner computes it in
    /// pieces straight into the output (`super::chain`).
    pub chain: Option<super::chain::Chain>,
    /// The tables of [`Group::direct`] over bf16 inputs (`super::lut`), built on first use.
    pub lut: super::lut::Lut,
}

/// One step of a [`Group::direct`] chain, run in place over f32 values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum DirectStep {
    /// A unary op (the interpreter's definition, `chunk::unary`).
    Unary(UnaryOp),
    /// Rounding to bf16 precision (after an op whose result is a bf16 value).
    Round,
}

/// A [`Group::binary`] group: its float op and the members that load its operands and store
/// its result.
#[derive(Clone, Debug)]
pub(crate) struct Pipe {
    pub op: BinaryOp,
    /// The member loading the op's first operand.
    pub a: usize,
    /// The member loading the op's second operand.
    pub b: usize,
    /// The store.
    pub store: usize,
}

/// A copy between slots (loop-carried values).
#[derive(Clone, Debug)]
pub(crate) enum Copy {
    Sc(u32, u32),
    Mat(usize, usize, usize),
}

/// A scalar op (rank-0 values, held as f64).
#[derive(Clone, Debug)]
pub(crate) enum SOp {
    ProgramId(u8),
    Const(f64),
    Dim(usize, usize),
    Unary(UnaryOp, u32),
    Binary(BinaryOp, Kind, u32, u32),
    Cmp(CmpOp, u32, u32),
    Select(u32, u32, u32),
    Cast(Kind, u32),
}

#[derive(Clone, Debug)]
pub(crate) enum Step {
    Scalar {
        op: SOp,
        dtype: DType,
        dst: u32,
    },
    Group(Group),
    Trans {
        src: usize,
        rows: usize,
        cols: usize,
        dst: usize,
    },
    For {
        iv: u32,
        lo: u32,
        hi: u32,
        step: i64,
        inits: Vec<Copy>,
        body: Vec<Step>,
        yields: Vec<Copy>,
    },
    /// A `load → trans → store` run as one copy tensor → tensor (`super::transpose`).
    Transpose(super::transpose::Transpose),
    /// A column-reduction loop run as one streaming pass (`super::colreduce`).
    ColReduce(super::colreduce::ColReduce),
}

/// The compiled program of one kernel.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
    pub scalars: usize,
    pub mat_len: usize,
    pub chunk_slots: usize,
    pub reduce_len: usize,
    /// Outputs every program of a launch writes a proven part of (see [`Cover`]).
    pub covers: Vec<Cover>,
    /// The kernel is a softmax the row loop runs (`super::softmax`).
    pub softmax: Option<super::rowmatch::Softmax>,
    /// The kernel is a layernorm or rmsnorm the row loop runs (`super::norm`).
    pub norm: Option<super::rowmatch::Norm>,
}

/// Proof that a launch writes every element of output parameter `param`: it is stored exactly
/// once in the program, with no mask, by a group that runs once per program or once per
/// iteration of a top-level loop `for c in (0..dim).step_by(extent)`, at an index whose axis
/// `a` is `program_id(g) * extent` ([`CoverAxis::Grid`], `extent` the stored tile's extent
/// along that axis, each grid axis used once), the constant 0 ([`CoverAxis::Zero`]) or that
/// loop's counter ([`CoverAxis::Loop`]). A launch whose grid and loop reach the end of every
/// axis (`grid[g] * extent ≥ dim`, `dim ≤ extent` at a constant 0, the loop's bound ≥ dim)
/// then writes each element: program `(…, p_g, …)` writes `[p_g·extent, (p_g+1)·extent)`
/// along axis `a`, clipped to the tensor, and those windows tile the axis.
#[derive(Clone, Debug)]
pub(crate) struct Cover {
    pub param: usize,
    /// Per axis of the parameter: how the index covers it, and the stored tile's extent there.
    pub axes: Vec<(CoverAxis, usize)>,
}

/// How a store's index walks one axis (see [`Cover`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum CoverAxis {
    /// `program_id(g) * extent`.
    Grid(u8),
    /// The constant 0.
    Zero,
    /// The counter of a loop from 0 to `dim(param, axis)` in steps of `extent`.
    Loop { param: usize, axis: usize },
}

/// `rows × cols` of a static shape (rank 1 is one row).
pub(crate) fn view2d(shape: &[usize]) -> (usize, usize) {
    match shape.len() {
        2 => (shape[0], shape[1]),
        1 => (1, shape[0]),
        _ => (1, 1),
    }
}

fn kind(d: DType) -> Option<Kind> {
    match d {
        DType::F32 | DType::BF16 => Some(Kind::F),
        DType::I32 => Some(Kind::I),
        DType::Bool => Some(Kind::B),
        _ => None,
    }
}

/// Why a kernel stays on the interpreter.
pub(crate) type Decline = String;

/// A value as an operand: its root (after `expand`/`broadcast` aliases) and the 2-D view to
/// read it with.
#[derive(Clone, Copy, Debug)]
struct Alias {
    root: TValue,
    view: (usize, usize),
}

struct Pending {
    shape: (usize, usize),
    insts: Vec<Inst>,
    /// Values the group produces at chunk positions (readable by later members).
    chunk_vals: HashSet<TValue>,
    /// Values the group produces that are complete only after it ends (reductions).
    late_vals: HashSet<TValue>,
}

struct Compiler<'k> {
    k: &'k Kernel,
    alias: HashMap<TValue, Alias>,
    /// Uses of each root value: the instructions (any block) reading it.
    users: HashMap<TValue, HashSet<u32>>,
    sc: HashMap<TValue, u32>,
    mat: HashMap<TValue, usize>,
    mat_len: usize,
    max_slots: usize,
    reduce_len: usize,
}

/// Compiles `k`, or says why it cannot be fused.
pub(crate) fn compile(k: &Kernel) -> Result<Plan, Decline> {
    if k.policy != NumericsPolicy::Fast {
        // `deterministic` fixes every op's sequence (its `exp` is the canonical one):
        // the interpreter implements it, this path does not.
        return Err(format!("kernel policy {}", k.policy));
    }
    for p in &k.params {
        if !matches!(p.dtype, DType::F32 | DType::BF16) {
            return Err(format!("parameter %{} is {}", p.name, p.dtype));
        }
    }
    let (mut loaded, mut stored) = (HashSet::new(), HashSet::new());
    for d in &k.insts {
        match &d.op {
            Op::Load { param, .. } => {
                loaded.insert(*param);
            }
            Op::Store { param, .. } => {
                stored.insert(*param);
            }
            _ => {}
        }
    }
    if let Some(p) = loaded.intersection(&stored).next() {
        return Err(format!(
            "parameter %{} is loaded and stored",
            k.params[*p].name
        ));
    }
    let mut c = Compiler {
        k,
        alias: HashMap::new(),
        users: HashMap::new(),
        sc: HashMap::new(),
        mat: HashMap::new(),
        mat_len: 0,
        max_slots: 0,
        reduce_len: 0,
    };
    c.scan(&k.body)?;
    let steps = c.block(&k.body)?;
    let covers = covers(&steps, k.params.len());
    // Direct kernels replace whole step patterns and carried tiles are updated in place;
    // the stores stay the same, so the covers above still hold.
    let steps = super::transpose::fuse(k, steps);
    let steps = super::inplace::fuse(super::colreduce::fuse(k, steps));
    Ok(Plan {
        steps,
        scalars: c.sc.len(),
        mat_len: c.mat_len,
        chunk_slots: c.max_slots,
        reduce_len: c.reduce_len,
        covers,
        softmax: super::rowmatch::softmax(k),
        norm: super::rowmatch::norm(k),
    })
}

/// The outputs a program provably covers (see [`Cover`]).
fn covers(steps: &[Step], nparams: usize) -> Vec<Cover> {
    // How many stores each parameter has anywhere (loops included).
    fn count(steps: &[Step], n: &mut [usize]) {
        for s in steps {
            match s {
                Step::Group(g) => {
                    for m in &g.members {
                        if let COp::Store { param, .. } = m.op {
                            n[param] += 1;
                        }
                    }
                }
                Step::For { body, .. } => count(body, n),
                _ => {}
            }
        }
    }
    let mut n = vec![0usize; nparams];
    count(steps, &mut n);
    // Scalars defined once per program at the top level (scalar slots are SSA values).
    let mut defs: HashMap<u32, &SOp> = HashMap::new();
    let mut out = Vec::new();
    for s in steps {
        match s {
            Step::Scalar { op, dst, .. } => {
                defs.insert(*dst, op);
            }
            Step::Group(g) => group_covers(g, &defs, None, &n, &mut out),
            Step::For {
                iv,
                lo,
                hi,
                step,
                body,
                ..
            } => {
                let from_zero = matches!(defs.get(lo), Some(SOp::Const(x)) if *x == 0.0);
                let bound = match defs.get(hi) {
                    Some(SOp::Dim(p, a)) => Some((*p, *a)),
                    _ => None,
                };
                let lp = bound.filter(|_| from_zero && *step > 0).map(|(p, a)| Loop {
                    iv: *iv,
                    step: *step as usize,
                    param: p,
                    axis: a,
                });
                for b in body {
                    if let Step::Group(g) = b {
                        group_covers(g, &defs, lp, &n, &mut out);
                    }
                }
            }
            Step::Trans { .. } | Step::Transpose(_) | Step::ColReduce(_) => {}
        }
    }
    out
}

/// A top-level loop `for iv in (0..dim(param, axis)).step_by(step)`.
#[derive(Clone, Copy)]
struct Loop {
    iv: u32,
    step: usize,
    param: usize,
    axis: usize,
}

/// The [`Cover`]s of the stores of `g` (run once per program, or once per iteration of `lp`).
fn group_covers(
    g: &Group,
    defs: &HashMap<u32, &SOp>,
    lp: Option<Loop>,
    n: &[usize],
    out: &mut Vec<Cover>,
) {
    let pid = |slot: u32| match defs.get(&slot) {
        Some(SOp::ProgramId(g)) => Some(*g),
        _ => None,
    };
    let konst = |slot: u32| match defs.get(&slot) {
        Some(SOp::Const(x)) => Some(*x),
        _ => None,
    };
    for m in &g.members {
        let COp::Store {
            param, idx, rank, ..
        } = &m.op
        else {
            continue;
        };
        if n[*param] != 1 {
            continue;
        }
        let nd = idx.len();
        let extent = |a: usize| {
            if *rank >= 1 && a + 1 == nd {
                g.cols
            } else if *rank == 2 && a + 2 == nd {
                g.rows
            } else {
                1
            }
        };
        let mut axes = Vec::with_capacity(nd);
        for (a, &slot) in idx.iter().enumerate() {
            let e = extent(a);
            let ax = match (lp, defs.get(&slot)) {
                (Some(l), _) if l.iv == slot && l.step == e => Some(CoverAxis::Loop {
                    param: l.param,
                    axis: l.axis,
                }),
                (_, Some(SOp::ProgramId(g))) if e == 1 => Some(CoverAxis::Grid(*g)),
                (_, Some(SOp::Const(x))) if *x == 0.0 => Some(CoverAxis::Zero),
                (_, Some(SOp::Binary(BinaryOp::Mul, Kind::I, x, y))) => {
                    match (pid(*x), konst(*y), pid(*y), konst(*x)) {
                        (Some(g), Some(t), _, _) | (_, _, Some(g), Some(t)) if t == e as f64 => {
                            Some(CoverAxis::Grid(g))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            match ax {
                Some(ax) => axes.push((ax, e)),
                None => break,
            }
        }
        let mut seen = [false; 3];
        let distinct = axes.iter().all(|(ax, _)| match ax {
            CoverAxis::Grid(g) if (*g as usize) < 3 => {
                !std::mem::replace(&mut seen[*g as usize], true)
            }
            CoverAxis::Grid(_) => false,
            _ => true,
        });
        let loops = axes
            .iter()
            .filter(|(ax, _)| matches!(ax, CoverAxis::Loop { .. }))
            .count();
        if axes.len() == nd && distinct && loops <= 1 {
            out.push(Cover {
                param: *param,
                axes,
            });
        }
    }
}

impl Compiler<'_> {
    fn ty_shape(&self, v: TValue) -> &[usize] {
        &self.k.ty(v).shape
    }

    fn resolve(&self, v: TValue) -> Alias {
        self.alias.get(&v).copied().unwrap_or(Alias {
            root: v,
            view: view2d(self.ty_shape(v)),
        })
    }

    /// Records aliases (in order) and the users of every root.
    fn scan(&mut self, block: &[Inst]) -> Result<(), Decline> {
        for &i in block {
            let d = self.k.inst(i);
            match &d.op {
                Op::Expand { a, .. } => {
                    let r = self.resolve(*a);
                    let view = view2d(self.ty_shape(d.results[0]));
                    self.alias
                        .insert(d.results[0], Alias { root: r.root, view });
                    continue;
                }
                Op::Broadcast(a) => {
                    let r = self.resolve(*a);
                    self.alias.insert(d.results[0], r);
                    continue;
                }
                Op::For { body, args, .. } => {
                    for o in d.op.operands() {
                        let r = self.resolve(o).root;
                        self.users.entry(r).or_default().insert(i.0);
                    }
                    self.scan(body)?;
                    // Loop results are the carried args after the last iteration.
                    for (res, a) in d.results.iter().zip(args) {
                        let view = view2d(self.ty_shape(*res));
                        self.alias.insert(*res, Alias { root: *a, view });
                    }
                    continue;
                }
                _ => {}
            }
            for o in d.op.operands() {
                let r = self.resolve(o).root;
                self.users.entry(r).or_default().insert(i.0);
            }
        }
        Ok(())
    }

    fn sc_slot(&mut self, v: TValue) -> u32 {
        let n = self.sc.len() as u32;
        *self.sc.entry(v).or_insert(n)
    }

    fn mat_slot(&mut self, v: TValue) -> usize {
        if let Some(o) = self.mat.get(&v) {
            return *o;
        }
        let o = self.mat_len;
        self.mat_len += self.k.ty(v).numel() + (SLOT - CHUNK);
        self.mat.insert(v, o);
        o
    }

    /// The iteration shape of a group-able instruction, or `None` for other kinds.
    fn group_shape(&self, op: &Op, res: Option<TValue>) -> Option<(usize, usize)> {
        match op {
            Op::Store { value, .. } => Some(view2d(self.ty_shape(*value))),
            Op::Reduce { a, .. } => Some(view2d(self.ty_shape(*a))),
            Op::Load { .. } | Op::Full(_) | Op::Arange => Some(view2d(self.ty_shape(res?))),
            Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(_) => {
                let r = res?;
                (!self.ty_shape(r).is_empty()).then(|| view2d(self.ty_shape(r)))
            }
            _ => None,
        }
    }

    fn block(&mut self, block: &[Inst]) -> Result<Vec<Step>, Decline> {
        let k = self.k;
        let mut steps = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        for &i in block {
            let d = k.inst(i);
            match &d.op {
                Op::Expand { .. } | Op::Broadcast(_) => continue,
                Op::Dot { .. } => return Err("dot (the interpreter calls the GEMM)".into()),
                Op::Im2col { .. } => {
                    return Err("im2col (the interpreter gathers for the GEMM)".into());
                }
                Op::Load { mask: Some(_), .. } | Op::Store { mask: Some(_), .. } => {
                    return Err("masked load/store".into());
                }
                Op::Reduce { policy, a, .. } => {
                    if *policy != NumericsPolicy::Fast {
                        return Err(format!("reduction with policy {policy}"));
                    }
                    if kind(k.ty(*a).dtype) != Some(Kind::F) {
                        return Err("reduction of a non-float tile".into());
                    }
                }
                _ => {}
            }
            for r in &d.results {
                if kind(k.ty(*r).dtype).is_none() {
                    return Err(format!("value of type {}", k.ty(*r)));
                }
            }
            let res = d.results.first().copied();
            let is_tile_op = self.group_shape(&d.op, res).is_some()
                && !matches!(&d.op, Op::Load { .. } if self.ty_shape(res.unwrap()).is_empty());
            if is_tile_op {
                if let Op::Binary(b, ..) = &d.op
                    && k.ty(res.unwrap()).dtype == DType::I32
                    && matches!(b, BinaryOp::Mul | BinaryOp::Div)
                {
                    return Err("i32 tile multiply/divide".into());
                }
                let shape = self.group_shape(&d.op, res).unwrap();
                let gi = pending.iter().position(|g| g.shape == shape);
                // Operands produced by pending groups: fine at chunk positions of the group
                // this joins, otherwise that group must run first.
                for o in d.op.operands() {
                    let a = self.resolve(o);
                    let owner = pending.iter().position(|g| {
                        g.chunk_vals.contains(&a.root) || g.late_vals.contains(&a.root)
                    });
                    let Some(h) = owner else { continue };
                    let same = Some(h)
                        == gi
                            .filter(|_| pending[h].chunk_vals.contains(&a.root) && a.view == shape);
                    if !same {
                        let g = pending.remove(h);
                        steps.push(Step::Group(self.group(g)?));
                    }
                }
                let gi = pending.iter().position(|g| g.shape == shape);
                let g = match gi {
                    Some(g) => &mut pending[g],
                    None => {
                        pending.push(Pending {
                            shape,
                            insts: vec![],
                            chunk_vals: HashSet::new(),
                            late_vals: HashSet::new(),
                        });
                        pending.last_mut().unwrap()
                    }
                };
                g.insts.push(i);
                if let Some(r) = res {
                    if matches!(d.op, Op::Reduce { .. }) {
                        g.late_vals.insert(r);
                    } else {
                        g.chunk_vals.insert(r);
                    }
                }
                continue;
            }
            // A scalar op reading no value of a pending group runs before those groups, which
            // stay open for later tile ops (a constant between two elementwise ops does not
            // split their group): scalar steps only read scalar slots, one per value, and
            // write their own. Anything else runs after every pending group.
            let scalar_first = !matches!(
                d.op,
                Op::Trans(_) | Op::For { .. } | Op::Yield(_) | Op::Load { .. } | Op::Store { .. }
            ) && res.is_some_and(|r| self.ty_shape(r).is_empty())
                && d.op.operands().into_iter().all(|o| {
                    let a = self.resolve(o).root;
                    !pending
                        .iter()
                        .any(|g| g.chunk_vals.contains(&a) || g.late_vals.contains(&a))
                });
            if !scalar_first {
                for g in std::mem::take(&mut pending) {
                    steps.push(Step::Group(self.group(g)?));
                }
            }
            match &d.op {
                Op::Trans(a) => {
                    let a = self.resolve(*a);
                    let src = self.mat_slot(a.root);
                    let dst = self.mat_slot(d.results[0]);
                    steps.push(Step::Trans {
                        src,
                        rows: a.view.0,
                        cols: a.view.1,
                        dst,
                    });
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
                    let lo = self.scalar_operand(*lo)?;
                    let hi = self.scalar_operand(*hi)?;
                    let iv = self.sc_slot(*iv);
                    let mut init_copies = Vec::new();
                    for (a, init) in args.iter().zip(inits) {
                        init_copies.push(self.copy(*init, *a)?);
                    }
                    let last = *body.last().ok_or("empty loop body")?;
                    let Op::Yield(ys) = &k.inst(last).op else {
                        return Err("loop body without yield".into());
                    };
                    let body_steps = self.block(&body[..body.len() - 1])?;
                    let mut yields = Vec::new();
                    for (a, y) in args.iter().zip(ys) {
                        let r = self.resolve(*y).root;
                        if r == *a {
                            continue;
                        }
                        if args.contains(&r) {
                            return Err("loop yields another carried value".into());
                        }
                        yields.push(self.copy(*y, *a)?);
                    }
                    steps.push(Step::For {
                        iv,
                        lo,
                        hi,
                        step: *step,
                        inits: init_copies,
                        body: body_steps,
                        yields,
                    });
                }
                Op::Yield(_) => return Err("yield outside a loop body's end".into()),
                op => {
                    let dst_v = res.ok_or("op without a result")?;
                    if !self.ty_shape(dst_v).is_empty() {
                        return Err(format!("tile op `{}` not fusible", op.name()));
                    }
                    let dtype = k.ty(dst_v).dtype;
                    let sop = self.scalar_op(op)?;
                    let dst = self.sc_slot(dst_v);
                    steps.push(Step::Scalar {
                        op: sop,
                        dtype,
                        dst,
                    });
                }
            }
        }
        for g in pending {
            steps.push(Step::Group(self.group(g)?));
        }
        Ok(steps)
    }

    fn copy(&mut self, from: TValue, to: TValue) -> Result<Copy, Decline> {
        if self.ty_shape(to).is_empty() {
            let f = self.scalar_operand(from)?;
            Ok(Copy::Sc(f, self.sc_slot(to)))
        } else {
            let r = self.resolve(from);
            if r.view.0 * r.view.1 != self.k.ty(to).numel()
                || view2d(self.ty_shape(r.root)).0 * view2d(self.ty_shape(r.root)).1
                    != self.k.ty(to).numel()
            {
                return Err("loop-carried tile from a broadcast".into());
            }
            let f = self.mat_slot(r.root);
            Ok(Copy::Mat(f, self.mat_slot(to), self.k.ty(to).numel()))
        }
    }

    fn scalar_operand(&mut self, v: TValue) -> Result<u32, Decline> {
        let r = self.resolve(v).root;
        if !self.ty_shape(r).is_empty() {
            return Err(format!("%{} used as a scalar", v.0));
        }
        Ok(self.sc_slot(r))
    }

    fn scalar_op(&mut self, op: &Op) -> Result<SOp, Decline> {
        let kd = |c: &Self, v: TValue| kind(c.k.ty(v).dtype).unwrap_or(Kind::F);
        Ok(match op {
            Op::ProgramId(a) => SOp::ProgramId(*a),
            Op::Const(x) => SOp::Const(*x),
            Op::Dim { param, axis } => SOp::Dim(*param, *axis),
            Op::Unary(u, a) => SOp::Unary(*u, self.scalar_operand(*a)?),
            Op::Binary(b, x, y) => SOp::Binary(
                *b,
                kd(self, *x),
                self.scalar_operand(*x)?,
                self.scalar_operand(*y)?,
            ),
            Op::Cmp(c, x, y) => SOp::Cmp(*c, self.scalar_operand(*x)?, self.scalar_operand(*y)?),
            Op::Select(m, x, y) => SOp::Select(
                self.scalar_operand(*m)?,
                self.scalar_operand(*x)?,
                self.scalar_operand(*y)?,
            ),
            Op::Cast(a) => SOp::Cast(kd(self, *a), self.scalar_operand(*a)?),
            op => return Err(format!("scalar `{}`", op.name())),
        })
    }

    /// Lowers a closed group: operands, chunk slots (reused after a value's last use in the
    /// group), materialisation of values read elsewhere.
    fn group(&mut self, g: Pending) -> Result<Group, Decline> {
        let k = self.k;
        let members: HashSet<u32> = g.insts.iter().map(|i| i.0).collect();
        // Last member position reading each chunk value.
        let mut last: HashMap<TValue, usize> = HashMap::new();
        for (p, &i) in g.insts.iter().enumerate() {
            for o in k.inst(i).op.operands() {
                let a = self.resolve(o);
                if g.chunk_vals.contains(&a.root) {
                    last.insert(a.root, p);
                }
            }
        }
        let mut slot_of: HashMap<TValue, u16> = HashMap::new();
        let mut free: Vec<u16> = Vec::new();
        let mut nslots = 0u16;
        let mut out = Vec::new();
        for (p, &i) in g.insts.iter().enumerate() {
            let d = k.inst(i);
            let src = |c: &mut Self, v: TValue| -> Result<Src, Decline> {
                let a = c.resolve(v);
                if let Some(s) = slot_of.get(&a.root)
                    && a.view == g.shape
                {
                    return Ok(Src::Chunk(*s));
                }
                if c.ty_shape(a.root).is_empty() {
                    return Ok(Src::Scalar(c.sc_slot(a.root)));
                }
                let (rows, cols) = a.view;
                if (rows != 1 && rows != g.shape.0) || (cols != 1 && cols != g.shape.1) {
                    return Err(format!("operand %{} of view {rows}x{cols}", v.0));
                }
                Ok(Src::Mat {
                    off: c.mat_slot(a.root),
                    rows,
                    cols,
                })
            };
            let idx = |c: &mut Self, index: &[TValue]| -> Result<Vec<u32>, Decline> {
                index.iter().map(|v| c.scalar_operand(*v)).collect()
            };
            // Operands first (their slots are freed after this member allocates its own).
            let op = match &d.op {
                Op::Load {
                    param,
                    index,
                    other,
                    ..
                } => COp::Load {
                    param: *param,
                    idx: idx(self, index)?,
                    other: *other as f32,
                    rank: self.ty_shape(d.results[0]).len(),
                    dst: 0,
                },
                Op::Store {
                    param,
                    index,
                    value,
                    ..
                } => COp::Store {
                    param: *param,
                    idx: idx(self, index)?,
                    rank: self.ty_shape(*value).len(),
                    src: src(self, *value)?,
                },
                Op::Unary(u, a) => COp::Unary {
                    op: *u,
                    a: src(self, *a)?,
                    dst: 0,
                },
                Op::Binary(b, x, y) => COp::Binary {
                    op: *b,
                    kind: kind(k.ty(*x).dtype).unwrap(),
                    a: src(self, *x)?,
                    b: src(self, *y)?,
                    dst: 0,
                },
                Op::Cmp(c, x, y) => COp::Cmp {
                    op: *c,
                    a: src(self, *x)?,
                    b: src(self, *y)?,
                    dst: 0,
                },
                Op::Select(m, x, y) => COp::Select {
                    m: src(self, *m)?,
                    a: src(self, *x)?,
                    b: src(self, *y)?,
                    dst: 0,
                },
                Op::Cast(a) => COp::Cast {
                    a: src(self, *a)?,
                    to: k.ty(d.results[0]).dtype,
                    from: kind(k.ty(*a).dtype).unwrap(),
                    dst: 0,
                },
                Op::Full(x) => COp::Full {
                    x: *x as f32,
                    dst: 0,
                },
                Op::Arange => COp::Arange { dst: 0 },
                Op::Reduce { op, a, axis, .. } => {
                    let r = d.results[0];
                    let along_cols = self.ty_shape(*a).len() == 1 || *axis == 1;
                    let acc = self.reduce_len;
                    self.reduce_len += 1;
                    let scalar = self.ty_shape(r).is_empty().then(|| self.sc_slot(r));
                    COp::Reduce {
                        op: *op,
                        a: src(self, *a)?,
                        along_cols,
                        out: self.mat_slot(r),
                        scalar,
                        acc,
                    }
                }
                op => return Err(format!("`{}` in a group", op.name())),
            };
            // The result's chunk slot.
            let mut op = op;
            let mut mat = None;
            let mut round_bf16 = false;
            let mut result_slot = None;
            if let Some(&r) = d.results.first()
                && !matches!(op, COp::Reduce { .. })
            {
                // A unary op on a chunk value read here for the last time runs in place (no
                // copy into a fresh slot); any other op writes a slot none of its operands use.
                let in_place = match (&op, &d.op) {
                    (
                        COp::Unary {
                            a: Src::Chunk(k), ..
                        },
                        Op::Unary(_, x),
                    ) if last.get(&self.resolve(*x).root) == Some(&p) => Some(*k),
                    _ => None,
                };
                let s = in_place.unwrap_or_else(|| {
                    free.pop().unwrap_or_else(|| {
                        nslots += 1;
                        nslots - 1
                    })
                });
                result_slot = Some(s);
                slot_of.insert(r, s);
                match &mut op {
                    COp::Load { dst, .. }
                    | COp::Unary { dst, .. }
                    | COp::Binary { dst, .. }
                    | COp::Cmp { dst, .. }
                    | COp::Select { dst, .. }
                    | COp::Cast { dst, .. }
                    | COp::Full { dst, .. }
                    | COp::Arange { dst } => *dst = s,
                    _ => {}
                }
                let outside = self
                    .users
                    .get(&r)
                    .is_some_and(|u| u.iter().any(|x| !members.contains(x)));
                if outside {
                    mat = Some(self.mat_slot(r));
                }
                // A bf16 load widens exactly: nothing to round.
                round_bf16 = k.ty(r).dtype == DType::BF16 && !matches!(op, COp::Load { .. });
                if !last.contains_key(&r) {
                    free.push(s);
                }
            }
            if matches!(op, COp::Reduce { .. }) {
                round_bf16 = k.ty(d.results[0]).dtype == DType::BF16;
            }
            // Free operand slots whose last use this was.
            for o in d.op.operands() {
                let a = self.resolve(o).root;
                if last.get(&a) == Some(&p)
                    && let Some(s) = slot_of.get(&a)
                    && !free.contains(s)
                    && result_slot != Some(*s)
                {
                    free.push(*s);
                }
            }
            out.push(Member {
                op,
                round_bf16,
                mat,
            });
        }
        self.max_slots = self.max_slots.max(nslots as usize);
        let store_only = out
            .iter()
            .all(|m| m.mat.is_none() && !matches!(m.op, COp::Reduce { .. }));
        let direct = if store_only {
            direct_chain(k, &out)
        } else {
            None
        };
        let binary = if store_only {
            binary_pipe(k, &out)
        } else {
            None
        };
        let chain = if store_only && direct.is_none() && binary.is_none() {
            super::chain::recognise(k, &out)
        } else {
            None
        };
        Ok(Group {
            rows: g.shape.0,
            cols: g.shape.1,
            members: out,
            store_only,
            direct,
            binary,
            chain,
            lut: Default::default(),
        })
    }
}

/// The steps of a `load → unary… → store` chain with f32 or bf16 storage
/// on each end (see [`Group::direct`]): each unary op, then a rounding where its result is a
/// bf16 value; a float cast is a rounding when it yields bf16 and no step otherwise.
fn direct_chain(k: &Kernel, members: &[Member]) -> Option<Vec<DirectStep>> {
    let (first, rest) = members.split_first()?;
    let (last, mid) = rest.split_last()?;
    let COp::Load {
        param: pi, dst: s, ..
    } = &first.op
    else {
        return None;
    };
    let COp::Store {
        param: po,
        src: Src::Chunk(so),
        ..
    } = &last.op
    else {
        return None;
    };
    let float_param = |p: usize| matches!(k.params[p].dtype, DType::F32 | DType::BF16);
    if !float_param(*pi) || !float_param(*po) {
        return None;
    }
    if first.round_bf16 || first.mat.is_some() {
        return None;
    }
    // Each op reads the slot the one before it wrote (`cur`), and the store reads the last.
    let mut cur = *s;
    let mut ops = Vec::new();
    for m in mid {
        if m.mat.is_some() {
            return None;
        }
        match &m.op {
            COp::Unary {
                op,
                a: Src::Chunk(a),
                dst,
            } if *a == cur => {
                ops.push(DirectStep::Unary(*op));
                cur = *dst;
            }
            COp::Cast {
                a: Src::Chunk(a),
                to: DType::F32 | DType::BF16,
                from: Kind::F,
                dst,
            } if *a == cur => cur = *dst,
            _ => return None,
        }
        if m.round_bf16 {
            ops.push(DirectStep::Round);
        }
    }
    (*so == cur).then_some(ops)
}

/// The [`Pipe`] of a `load, load → binary → (casts) → store` group: the loads of two tensors
/// of one dtype (f32 or bf16) in two chunk slots, a float binary op of both, casts between f32
/// and bf16, a store of the result; nothing materialised, and nothing rounded unless the
/// stored tensor is bf16 (whose store rounds the same way once more, changing nothing) or the
/// operands are (the op's result is then a rounded bf16 value, which no later rounding
/// changes).
fn binary_pipe(k: &Kernel, members: &[Member]) -> Option<Pipe> {
    let [la, lb, bin, rest @ ..] = members else {
        return None;
    };
    let (st, casts) = rest.split_last()?;
    let (
        COp::Load {
            param: pa, dst: sa, ..
        },
        COp::Load {
            param: pb, dst: sb, ..
        },
        COp::Binary {
            op,
            kind: Kind::F,
            a: Src::Chunk(x),
            b: Src::Chunk(y),
            dst: s0,
        },
        COp::Store {
            param: po,
            src: Src::Chunk(so),
            ..
        },
    ) = (&la.op, &lb.op, &bin.op, &st.op)
    else {
        return None;
    };
    let dt = |p: usize| k.params[p].dtype;
    let bf16_out = dt(*po) == DType::BF16;
    if sa == sb || dt(*pa) != dt(*pb) || [la, lb].iter().any(|m| m.round_bf16 || m.mat.is_some()) {
        return None;
    }
    // bf16 operands give a bf16 value (the op rounds), which later casts leave as it is.
    let bf16_in = dt(*pa) == DType::BF16;
    if bf16_in && !bin.round_bf16 {
        return None;
    }
    for m in std::iter::once(bin).chain(casts) {
        if m.mat.is_some() || (m.round_bf16 && !bf16_out && !bf16_in) {
            return None;
        }
    }
    let mut s = *s0;
    for m in casts {
        match &m.op {
            COp::Cast {
                a: Src::Chunk(a),
                to: DType::F32 | DType::BF16,
                from: Kind::F,
                dst,
            } if *a == s => s = *dst,
            _ => return None,
        }
    }
    let member = |slot: &u16| match slot {
        x if x == sa => Some(0),
        x if x == sb => Some(1),
        _ => None,
    };
    (*so == s).then_some(())?;
    Some(Pipe {
        op: *op,
        a: member(x)?,
        b: member(y)?,
        store: members.len() - 1,
    })
}

#[cfg(test)]
mod tests {
    use super::compile;
    use crate::backend::Buffer;
    use tessera_ir::DType;
    use tessera_ir::tile::parse;

    /// A `[R, C]` → `[R, C]` kernel over `[16, 64]` tiles whose body (after `%0..%5`: the
    /// program ids times 16 and 64) is `body`.
    fn kernel(step0: i64, body: &str) -> tessera_ir::tile::Kernel {
        let text = format!(
            "kernel @k(%x: f32<2>, %y: f32<2>) grid=[cdiv(dim(%x, 0), 16), cdiv(dim(%x, 1), 64), 1] {{
  %0 = program_id 0 : i32
  %1 = const {step0}.0 : i32
  %2 = mul %0, %1 : i32
  %3 = program_id 1 : i32
  %4 = const 64.0 : i32
  %5 = mul %3, %4 : i32
{body}}}
"
        );
        parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// The axes of the covers `body` proves for `%y`.
    fn covers(step0: i64, body: &str) -> Vec<Vec<(String, usize)>> {
        let plan = compile(&kernel(step0, body)).unwrap();
        plan.covers
            .iter()
            .filter(|c| c.param == 1)
            .map(|c| c.axes.iter().map(|(a, e)| (format!("{a:?}"), *e)).collect())
            .collect()
    }

    const TILE: &str = "  %6 = load %x[%2, %5] : f32[16, 64]\n  %7 = exp %6 : f32[16, 64]\n";

    /// Whether the plan of `body` has a group on the binary pipe (`Group::binary`).
    fn piped(body: &str) -> bool {
        let plan = compile(&kernel(16, body)).unwrap();
        plan.steps
            .iter()
            .any(|s| matches!(s, super::Step::Group(g) if g.binary.is_some()))
    }

    #[test]
    fn load_load_binary_store_runs_on_the_pipe() {
        let two = "  %6 = load %x[%2, %5] : f32[16, 64]\n  %7 = load %x[%5, %2] : f32[16, 64]\n";
        for op in ["add", "sub", "mul", "div", "max"] {
            let body = format!("{two}  %8 = {op} %6, %7 : f32[16, 64]\n  store %y[%2, %5], %8\n");
            assert!(piped(&body), "{op}");
        }
        // An op after the binary one, or one operand used twice, is not the pipe's pattern.
        let more = format!(
            "{two}  %8 = add %6, %7 : f32[16, 64]\n  %9 = exp %8 : f32[16, 64]\n  store %y[%2, %5], %9\n"
        );
        assert!(!piped(&more));
        let same = "  %6 = load %x[%2, %5] : f32[16, 64]\n  %7 = add %6, %6 : f32[16, 64]\n  store %y[%2, %5], %7\n";
        assert!(!piped(same));
    }

    #[test]
    fn a_store_at_program_id_times_the_tile_covers_its_output() {
        let c = covers(16, &format!("{TILE}  store %y[%2, %5], %7\n"));
        assert_eq!(
            c,
            vec![vec![("Grid(0)".into(), 16), ("Grid(1)".into(), 64)]]
        );
    }

    #[test]
    fn stores_that_may_leave_gaps_prove_nothing() {
        // Shifted by one column: column 0 is never written.
        let shifted = format!(
            "{TILE}  %8 = const 1.0 : i32\n  %9 = add %5, %8 : i32\n  store %y[%2, %9], %7\n"
        );
        assert!(covers(16, &shifted).is_empty());
        // Programs 32 rows apart with 16-row tiles: every other block of rows is skipped.
        assert!(covers(32, &format!("{TILE}  store %y[%2, %5], %7\n")).is_empty());
        // The same grid axis on both dims: only the diagonal blocks are written.
        let diag = format!("{TILE}  %8 = mul %0, %4 : i32\n  store %y[%2, %8], %7\n");
        assert!(covers(16, &diag).is_empty());
        // Two stores of the same output.
        let twice = format!("{TILE}  store %y[%2, %5], %7\n  store %y[%2, %5], %6\n");
        assert!(covers(16, &twice).is_empty());
        // A loop whose step is not the tile's width.
        let half = "  %6 = const 0.0 : i32\n  %7 = dim %x, 1 : i32\n  for %8 = %6 to %7 step 32 iter() {\n    %9 = load %x[%2, %8] : f32[16, 64]\n    store %y[%2, %8], %9\n    yield \n  }\n";
        assert!(covers(16, half).is_empty());
    }

    #[test]
    fn a_store_at_a_loop_counter_covers_up_to_the_loop_bound() {
        let body = "  %6 = const 0.0 : i32\n  %7 = dim %x, 1 : i32\n  for %8 = %6 to %7 step 64 iter() {\n    %9 = load %x[%2, %8] : f32[16, 64]\n    store %y[%2, %8], %9\n    yield \n  }\n";
        let c = covers(16, body);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0][0], ("Grid(0)".into(), 16));
        assert_eq!(c[0][1].1, 64);
        assert!(c[0][1].0.starts_with("Loop"), "{c:?}");
    }

    /// At launch the grid (from `%x`'s dims) must reach the end of `%y`: with `%x` of 40 rows
    /// (3 programs of 16 rows: rows 0..48) a `%y` of 49 rows is not covered.
    #[test]
    fn a_grid_that_stops_short_of_the_output_proves_nothing() {
        let k = kernel(16, &format!("{TILE}  store %y[%2, %5], %7\n"));
        let f = super::super::Fused::new(&k).unwrap();
        let buf = |v: &mut Vec<f32>, r: usize, c: usize, writable: bool| Buffer {
            dtype: DType::F32,
            shape: [r, c, 1],
            rank: 2,
            ptr: v.as_mut_ptr() as *mut u8,
            len: r * c * 4,
            writable,
        };
        let (mut x, mut y) = (vec![0f32; 40 * 130], vec![0f32; 49 * 130]);
        let same = [buf(&mut x, 40, 130, false), buf(&mut y, 40, 130, true)];
        assert!(f.covers(&k, &same, 1));
        let reach = [buf(&mut x, 40, 130, false), buf(&mut y, 48, 130, true)];
        assert!(
            f.covers(&k, &reach, 1),
            "3 programs of 16 rows reach row 48"
        );
        let taller = [buf(&mut x, 40, 130, false), buf(&mut y, 49, 130, true)];
        assert!(!f.covers(&k, &taller, 1));
        let inputs = [buf(&mut x, 40, 130, false), buf(&mut y, 40, 130, false)];
        assert!(
            !f.covers(&k, &inputs, 1),
            "a read-only output runs the interpreter"
        );
    }
}
