//! Lowering: one fused kernel + its schedule → a Tile IR block program.
//!
//! Tensors are seen by kernels through *views*: a tensor of shape `S` viewed at rank `r` merges
//! its leading dims (or pads with leading 1s) — see [`view_shape`]. The runtime applies the same
//! rule when it binds arguments, so the kernel and the launch agree on shapes.

mod attention;
mod conv;
mod fft;
mod layout;
mod matmul;
mod other;
mod rowprog;
mod rowwise;

use crate::fuse::FusedKernel;
use crate::graph::{Graph, Op, Value};
use crate::schedule::{KernelClass, Schedule, Target};
use crate::tile::{self, Builder, GridDim, Param, TValue, TileType};
use crate::{DType, Dim, NumericsPolicy};
use std::collections::HashMap;

/// A lowered kernel with the graph value bound to each of its parameters (output last).
#[derive(Clone, Debug, PartialEq)]
pub struct Lowered {
    /// The Tile IR kernel.
    pub kernel: tile::Kernel,
    /// The graph value of each kernel parameter, in parameter order.
    pub bindings: Vec<Binding>,
}

/// Which graph value a kernel parameter reads or writes, and how the kernel views it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The graph value.
    pub value: Value,
    /// The rank the kernel views it at (leading dims merged, or padded with 1s).
    pub view_rank: usize,
    /// How many of the value's trailing dims the view's second-to-last and last axes each
    /// merge (`[1, 1]`: one dim each, the plain view of [`view_shape`]); see
    /// [`view_shape_merged`].
    pub inner: [usize; 2],
}

/// The plain view: one dim per inner view axis.
pub const PLAIN: [usize; 2] = [1, 1];

impl Binding {
    /// A binding with the plain view (leading dims merged) at `view_rank`.
    pub fn new(value: Value, view_rank: usize) -> Self {
        Binding {
            value,
            view_rank,
            inner: PLAIN,
        }
    }

    /// The shape the kernel sees for a value of `shape`.
    ///
    /// ```
    /// use tessera_ir::{graph::Value, lower::Binding};
    /// let b = Binding { value: Value(0), view_rank: 3, inner: [1, 2] };
    /// assert_eq!(b.view(&[2, 3, 4, 5]), Ok(vec![2, 3, 20]));
    /// ```
    pub fn view(&self, shape: &[usize]) -> Result<Vec<usize>, String> {
        view_shape_merged(shape, self.view_rank, self.inner)
    }

    /// [`Binding::view`] without allocating: the view's dims in the first `rank` entries of
    /// an array of `N` (the rest 1), and `rank`; an error when the view has more than `N`
    /// dims.
    ///
    /// ```
    /// use tessera_ir::{graph::Value, lower::Binding};
    /// let b = Binding { value: Value(0), view_rank: 3, inner: [1, 2] };
    /// assert_eq!(b.view_array::<3>(&[2, 3, 4, 5]), Ok(([2, 3, 20], 3)));
    /// assert_eq!(Binding::new(Value(0), 2).view_array::<3>(&[2, 3, 4]), Ok(([6, 4, 1], 2)));
    /// assert!(b.view_array::<2>(&[2, 3, 4, 5]).is_err());
    /// ```
    pub fn view_array<const N: usize>(
        &self,
        shape: &[usize],
    ) -> Result<([usize; N], usize), String> {
        let rank = self.view_rank;
        if rank > N {
            return Err(format!("a rank-{rank} view does not fit in {N} dims"));
        }
        let mut out = [1; N];
        view_into(shape, rank, self.inner, &mut out[..rank])?;
        Ok((out, rank))
    }
}

/// The product of `dims`, checked; `0` when a dim is 0, whatever the others are.
fn merged_size(dims: &[usize], shape: &[usize]) -> Result<usize, String> {
    if dims.contains(&0) {
        return Ok(0);
    }
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("merging dims of {shape:?} overflows"))
}

/// [`view_shape`] after merging trailing dims: the view's last axis holds the last `inner[1]`
/// dims of `shape` and (at rank 3) its second-to-last axis the `inner[0]` dims before them;
/// the leading dims are merged into the first axis (or it is 1 when none is left). `[1, 1]` is
/// [`view_shape`]. A reduction over axis `k` of `[d0, .., dr−1]` views it as
/// `[d0·..·dk−1, dk, dk+1·..·dr−1]` (`inner = [1, r − 1 − k]`).
///
/// ```
/// use tessera_ir::lower::view_shape_merged;
/// assert_eq!(view_shape_merged(&[2, 3, 4, 5], 3, [1, 2]), Ok(vec![2, 3, 20]));
/// assert_eq!(view_shape_merged(&[2, 3, 4, 5], 3, [2, 1]), Ok(vec![2, 12, 5]));
/// assert_eq!(view_shape_merged(&[3, 4, 5], 3, [1, 2]), Ok(vec![1, 3, 20]));
/// assert_eq!(view_shape_merged(&[3, 4, 5], 2, [1, 2]), Ok(vec![3, 20]));
/// assert!(view_shape_merged(&[4, 5], 3, [2, 1]).is_err());
/// ```
pub fn view_shape_merged(
    shape: &[usize],
    rank: usize,
    inner: [usize; 2],
) -> Result<Vec<usize>, String> {
    let mut out = vec![0; rank];
    view_into(shape, rank, inner, &mut out)?;
    Ok(out)
}

/// Writes the `rank` dims of the view of `shape` ([`view_shape_merged`]) into `out`, whose
/// length is `rank`.
fn view_into(
    shape: &[usize],
    rank: usize,
    inner: [usize; 2],
    out: &mut [usize],
) -> Result<(), String> {
    debug_assert_eq!(out.len(), rank);
    if inner == PLAIN {
        if shape.len() >= rank {
            let cut = shape.len() + 1 - rank.max(1);
            let lead = &shape[..cut];
            let merged = if lead.contains(&0) {
                0
            } else {
                lead.iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(d))
                    .ok_or_else(|| format!("merging the leading dims of {shape:?} overflows"))?
            };
            if rank > 0 {
                out[0] = merged;
                out[1..].copy_from_slice(&shape[cut..]);
            }
        } else {
            let pad = rank - shape.len();
            out[..pad].fill(1);
            out[pad..].copy_from_slice(shape);
        }
        return Ok(());
    }
    let counts: &[usize] = match rank {
        2 if inner[0] == 1 => &inner[1..],
        3 => &inner,
        _ => {
            return Err(format!(
                "a rank-{rank} view cannot merge {inner:?} trailing dims"
            ));
        }
    };
    let need: usize = counts.iter().sum();
    if need > shape.len() || counts.contains(&0) {
        return Err(format!(
            "a view merging {counts:?} trailing dims does not fit shape {shape:?}"
        ));
    }
    let lead = shape.len() - need;
    out[0] = merged_size(&shape[..lead], shape)?;
    let mut at = lead;
    for (o, &c) in out[1..].iter_mut().zip(counts) {
        *o = merged_size(&shape[at..at + c], shape)?;
        at += c;
    }
    Ok(())
}

/// [`view_groups`] for a view made by [`view_shape_merged`].
pub(crate) fn view_groups_merged(shape: &[Dim], rank: usize, inner: [usize; 2]) -> Vec<Vec<Dim>> {
    if inner == PLAIN {
        return view_groups(shape, rank);
    }
    let counts: &[usize] = if rank == 3 { &inner } else { &inner[1..] };
    let need: usize = counts.iter().sum();
    let lead = shape.len().saturating_sub(need);
    let mut out = vec![if lead == 0 {
        vec![Dim::Const(1)]
    } else {
        shape[..lead].to_vec()
    }];
    let mut at = lead;
    for &c in counts {
        out.push(shape[at..(at + c).min(shape.len())].to_vec());
        at += c;
    }
    out
}

/// Why a kernel could not be lowered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value}: {message}")]
pub struct LowerError {
    /// The value at fault.
    pub value: String,
    /// Why it cannot be lowered, in words.
    pub message: String,
}

/// Reshapes `shape` to `rank` dims: merges leading dims, or pads with leading 1s. The merged
/// product is checked: an error names the shape when it overflows (a dim of 0 makes it 0
/// whatever the others are).
///
/// ```
/// use tessera_ir::lower::view_shape;
/// assert_eq!(view_shape(&[2, 3, 4], 2), Ok(vec![6, 4]));
/// assert_eq!(view_shape(&[4], 3), Ok(vec![1, 1, 4]));
/// assert_eq!(view_shape(&[], 1), Ok(vec![1]));
/// assert_eq!(view_shape(&[1 << 40, 1 << 40, 0, 7], 2), Ok(vec![0, 7]));
/// assert!(view_shape(&[1 << 40, 1 << 40, 7], 2).unwrap_err().contains("overflows"));
/// ```
pub fn view_shape(shape: &[usize], rank: usize) -> Result<Vec<usize>, String> {
    view_shape_merged(shape, rank, PLAIN)
}

/// Groups symbolic dims the way [`view_shape`] merges them.
pub(crate) fn view_groups(shape: &[Dim], rank: usize) -> Vec<Vec<Dim>> {
    if shape.len() >= rank {
        let cut = shape.len() + 1 - rank;
        let mut out = vec![shape[..cut].to_vec()];
        out.extend(shape[cut..].iter().map(|d| vec![d.clone()]));
        out
    } else {
        let mut out: Vec<Vec<Dim>> = vec![vec![Dim::Const(1)]; rank - shape.len()];
        out.extend(shape.iter().map(|d| vec![d.clone()]));
        out
    }
}

/// Lowers `k` under schedule `s`, checked under the PTX rules ([`lower_on`] with
/// [`Target::Ptx`]). The kernel runs under its root's numerics policy, or `policy` when the
/// root (an elementwise op, say) has none; under `deterministic` and `kahan_sum` every
/// reduction is lowered to a fixed association order that does not depend on `s` (see
/// [`crate::NumericsPolicy`]).
pub fn lower(
    g: &Graph,
    k: &FusedKernel,
    s: &Schedule,
    policy: NumericsPolicy,
) -> Result<Lowered, LowerError> {
    lower_on(g, k, s, policy, Target::Ptx)
}

/// [`lower`] for a schedule of `target`: `s` is checked by
/// [`verify_for`](crate::schedule::verify_for)`(s, target)`, so a CPU-only tile (wider than
/// the PTX limit) lowers only for [`Target::Cpu`]. A schedule that fails is an error naming
/// the kernel, the schedule, the target and each rule broken.
///
/// ```
/// use tessera_ir::{pipeline::{compile, CompileOptions}, schedule::{parse, Target}};
/// let g = tessera_ir::graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {
///   %1 = softmax %x : f32[R, C]
///   return %1
/// }").unwrap();
/// let c = compile(&g, &CompileOptions::default()).unwrap();
/// let s = parse("schedule rowwise tile=[8, 2048] warps=8 stages=1 vector=4").unwrap();
/// assert!(c.lower_on(0, &s, Target::Cpu).is_ok());
/// assert_eq!(
///     c.lower_on(0, &s, Target::Ptx).unwrap_err().to_string(),
///     "sm_k0: `schedule rowwise tile=[8, 2048] warps=8 stages=1 vector=4` is not a PTX \
///      schedule: tile[1] = 2048 exceeds the PTX limit 1024"
/// );
/// ```
pub fn lower_on(
    g: &Graph,
    k: &FusedKernel,
    s: &Schedule,
    policy: NumericsPolicy,
    target: Target,
) -> Result<Lowered, LowerError> {
    crate::invocations::lowered();
    if s.class != k.class {
        return Err(LowerError {
            value: k.name.clone(),
            message: format!(
                "a {} schedule cannot run a {} kernel",
                s.class.name(),
                k.class.name()
            ),
        });
    }
    if let Err(e) = crate::schedule::verify_for(s, target) {
        return Err(LowerError {
            value: k.name.clone(),
            message: format!("`{s}` is not a {target} schedule: {}", e.join("; ")),
        });
    }
    // The root's own policy (`#[kernel(numerics = ..)]`, a scoped setting) wins over the
    // caller's default; the two must agree when both ask for something.
    let policy = match g.node(k.root).op.policy() {
        Some(p) if p != NumericsPolicy::Fast => {
            if policy != NumericsPolicy::Fast && policy != p {
                return Err(LowerError {
                    value: g.value_name(k.root),
                    message: format!(
                        "runs under numerics policy `{p}` and cannot also honour `{policy}`"
                    ),
                });
            }
            p
        }
        _ => policy,
    };
    let mut l = Lower::new(g, k, policy);
    l.b.set_policy(policy);
    match k.class {
        KernelClass::Matmul => matmul::lower(&mut l, s)?,
        KernelClass::Rowwise if !k.members.is_empty() => rowprog::lower(&mut l, s)?,
        KernelClass::Rowwise => rowwise::lower(&mut l, s)?,
        KernelClass::ColReduce => other::col_reduce(&mut l, s)?,
        KernelClass::Elementwise => other::elementwise(&mut l, s)?,
        KernelClass::Transpose => other::transpose(&mut l, s)?,
        KernelClass::Attention => attention::lower(&mut l, s)?,
        KernelClass::Conv => conv::lower(&mut l, s)?,
        KernelClass::Fft => fft::lower(&mut l, s)?,
        KernelClass::Layout => layout::lower(&mut l, s)?,
    }
    let kernel = l.b.finish();
    tile::verify(&kernel).map_err(|e| LowerError {
        value: k.name.clone(),
        message: format!("lowering produced invalid Tile IR (a compiler bug):\n{e}"),
    })?;
    Ok(Lowered {
        kernel,
        bindings: l.bindings,
    })
}

/// How an epilogue input lines up with one axis of the output view.
#[derive(Clone, Copy)]
pub(crate) struct Axis {
    /// Index of the tile origin along this axis.
    pub origin: TValue,
    /// Tile extent, or `None` for an axis indexed one position at a time (a batch).
    pub extent: Option<usize>,
}

/// Lowering state shared by the kernel classes.
pub(crate) struct Lower<'g> {
    pub g: &'g Graph,
    pub k: &'g FusedKernel,
    pub policy: NumericsPolicy,
    pub b: Builder,
    pub bindings: Vec<Binding>,
    pub vals: HashMap<Value, TValue>,
    consts: HashMap<(u64, DType), TValue>,
}

impl<'g> Lower<'g> {
    fn new(g: &'g Graph, k: &'g FusedKernel, policy: NumericsPolicy) -> Self {
        let one = || GridDim::one();
        Lower {
            g,
            k,
            policy,
            b: Builder::new(&k.name, vec![], [one(), one(), one()]),
            bindings: vec![],
            vals: HashMap::new(),
            consts: HashMap::new(),
        }
    }

    pub fn err(&self, v: Value, m: impl Into<String>) -> LowerError {
        LowerError {
            value: self.g.value_name(v),
            message: m.into(),
        }
    }

    /// The kernel parameter bound to `v` at `view_rank`, added on first use.
    pub fn param(&mut self, v: Value, view_rank: usize) -> usize {
        self.param_merged(v, view_rank, PLAIN)
    }

    /// The kernel parameter bound to `v` viewed by [`view_shape_merged`] at `view_rank` with
    /// `inner`, added on first use.
    pub fn param_merged(&mut self, v: Value, view_rank: usize, inner: [usize; 2]) -> usize {
        let b = Binding {
            value: v,
            view_rank,
            inner,
        };
        if let Some(i) = self.bindings.iter().position(|x| *x == b) {
            return i;
        }
        let n = self.g.node(v);
        let name = match &n.op {
            Op::Param { name, .. } => name.clone(),
            _ => format!("t{}", v.0),
        };
        self.b_params().push(Param {
            name,
            dtype: n.ty.dtype,
            rank: view_rank,
        });
        self.bindings.push(b);
        self.bindings.len() - 1
    }

    /// Adds the output parameter (called last, after every input).
    pub fn output_param(&mut self, view_rank: usize) -> usize {
        self.output_param_merged(view_rank, PLAIN)
    }

    /// [`Self::output_param`] with the view of [`view_shape_merged`].
    pub fn output_param_merged(&mut self, view_rank: usize, inner: [usize; 2]) -> usize {
        let out = self.k.output;
        let i = self.param_merged(out, view_rank, inner);
        let p = &mut self.b_params()[i];
        p.name = "out".into();
        i
    }

    fn b_params(&mut self) -> &mut Vec<Param> {
        // The builder owns the kernel; parameters are appended as the lowering discovers them.
        self.b.params_mut()
    }

    pub fn set_grid(&mut self, grid: [GridDim; 3]) {
        self.b.set_grid(grid);
    }

    pub fn c_i32(&mut self, x: i64) -> TValue {
        self.c(x as f64, DType::I32)
    }

    pub fn c(&mut self, x: f64, dtype: DType) -> TValue {
        if let Some(v) = self.consts.get(&(x.to_bits(), dtype)) {
            return *v;
        }
        let v = self.b.op(tile::Op::Const(x), TileType::scalar(dtype));
        // Constants are hoisted only at the top level; inside loops they are re-emitted.
        if self.depth() == 0 {
            self.consts.insert((x.to_bits(), dtype), v);
        }
        v
    }

    fn depth(&self) -> usize {
        self.b.depth()
    }

    pub fn dim(&mut self, param: usize, axis: usize) -> TValue {
        self.b
            .op(tile::Op::Dim { param, axis }, TileType::scalar(DType::I32))
    }

    pub fn pid(&mut self, axis: u8) -> TValue {
        self.b
            .op(tile::Op::ProgramId(axis), TileType::scalar(DType::I32))
    }

    pub fn mul(&mut self, a: TValue, b: TValue) -> TValue {
        self.bin(crate::graph::BinaryOp::Mul, a, b)
    }

    pub fn bin(&mut self, op: crate::graph::BinaryOp, a: TValue, b: TValue) -> TValue {
        let (ta, tb) = (self.b.ty(a).clone(), self.b.ty(b).clone());
        let shape = TileType::broadcast_shape(&ta.shape, &tb.shape)
            .expect("lowering built mismatched tiles");
        self.b.op(
            tile::Op::Binary(op, a, b),
            TileType {
                dtype: ta.dtype,
                shape,
            },
        )
    }

    /// One compensated step of `kahan_sum` (Ogita–Rump–Oishi `Sum2`, the branch-free form of
    /// Kahan–Babuška–Neumaier): `t = s + x` and its exact rounding error
    /// `e = (s − (t − (t − s))) + (x − (t − s))` (Knuth's TwoSum), `c += e`. Returns the new
    /// `(s, c)`; the compensated sum is `s + c`. Unlike Kahan's original step it keeps the low
    /// part when `|x| > |s|` (a large term after many small ones).
    pub fn two_sum_step(&mut self, s: TValue, c: TValue, x: TValue) -> (TValue, TValue) {
        use crate::graph::BinaryOp::{Add, Sub};
        let t = self.bin(Add, s, x);
        let bp = self.bin(Sub, t, s);
        let ap = self.bin(Sub, t, bp);
        let ea = self.bin(Sub, s, ap);
        let eb = self.bin(Sub, x, bp);
        let e = self.bin(Add, ea, eb);
        let c = self.bin(Add, c, e);
        (t, c)
    }

    pub fn unary(&mut self, op: crate::graph::UnaryOp, a: TValue) -> TValue {
        let t = self.b.ty(a).clone();
        self.b.op(tile::Op::Unary(op, a), t)
    }

    pub fn cast(&mut self, a: TValue, dtype: DType) -> TValue {
        let t = self.b.ty(a).clone();
        if t.dtype == dtype {
            return a;
        }
        self.b.op(
            tile::Op::Cast(a),
            TileType {
                dtype,
                shape: t.shape,
            },
        )
    }

    pub fn expand(&mut self, a: TValue, axis: usize) -> TValue {
        let t = self.b.ty(a).clone();
        let mut shape = t.shape.clone();
        shape.insert(axis, 1);
        self.b.op(
            tile::Op::Expand { a, axis },
            TileType {
                dtype: t.dtype,
                shape,
            },
        )
    }

    pub fn reduce(&mut self, op: tile::TileReduce, a: TValue, axis: usize) -> TValue {
        let t = self.b.ty(a).clone();
        let mut shape = t.shape.clone();
        shape.remove(axis);
        let policy = self.policy;
        self.b.op(
            tile::Op::Reduce {
                op,
                a,
                axis,
                policy,
            },
            TileType {
                dtype: t.dtype,
                shape,
            },
        )
    }

    pub fn load(
        &mut self,
        param: usize,
        index: Vec<TValue>,
        shape: &[usize],
        other: f64,
    ) -> TValue {
        let dtype = self.b.params_mut()[param].dtype;
        self.b.op(
            tile::Op::Load {
                param,
                index,
                mask: None,
                other,
            },
            TileType::tile(dtype, shape),
        )
    }

    /// Loads an operand of the epilogue, broadcast against the output view `groups` whose axes
    /// are tiled as `axes`.
    pub fn load_broadcast(
        &mut self,
        v: Value,
        groups: &[Vec<Dim>],
        axes: &[Axis],
    ) -> Result<TValue, LowerError> {
        let ty = self.g.ty(v).clone();
        let out_rank: usize = groups
            .iter()
            .map(|g| g.len())
            .sum::<usize>()
            .max(ty.shape.rank());
        let mut padded = vec![Dim::Const(1); out_rank - ty.shape.rank()];
        padded.extend(ty.shape.0.iter().cloned());
        let mut index = Vec::new();
        let mut shape = Vec::new();
        let mut pos = 0;
        for (g, ax) in groups.iter().zip(axes) {
            let mine = &padded[pos..pos + g.len()];
            pos += g.len();
            let full = mine == g.as_slice();
            let ones = mine.iter().all(|d| d.is_one());
            if !full && !ones {
                return Err(self.err(v, format!("{} does not broadcast along the output's tiles {:?}: fused operands must match the output or be 1 along each tiled axis", ty, groups)));
            }
            let zero = self.c_i32(0);
            index.push(if full { ax.origin } else { zero });
            if let Some(e) = ax.extent {
                shape.push(if full { e } else { 1 });
            }
        }
        let p = self.param(v, groups.len());
        Ok(self.load(p, index, &shape, 0.0))
    }

    /// Applies the kernel's epilogue to `x` (the root's value as a tile).
    pub fn epilogue(
        &mut self,
        x: TValue,
        groups: &[Vec<Dim>],
        axes: &[Axis],
    ) -> Result<TValue, LowerError> {
        self.vals.insert(self.k.root, x);
        let mut last = x;
        for &v in &self.k.epilogue.clone() {
            last = self.elementwise(v, groups, axes)?;
            self.vals.insert(v, last);
        }
        Ok(last)
    }

    /// Emits one elementwise graph node; operands not yet in registers are loaded.
    pub fn elementwise(
        &mut self,
        v: Value,
        groups: &[Vec<Dim>],
        axes: &[Axis],
    ) -> Result<TValue, LowerError> {
        let n = self.g.node(v).clone();
        let mut ops = Vec::new();
        for a in &n.args {
            let t = match self.vals.get(a) {
                Some(t) => *t,
                None => match self.g.node(*a).op {
                    Op::Const { value, dtype } => self.c(value, dtype),
                    _ => self.load_broadcast(*a, groups, axes)?,
                },
            };
            ops.push(t);
        }
        Ok(match n.op {
            Op::Unary(u) => self.unary(u, ops[0]),
            Op::Binary(b) => self.bin(b, ops[0], ops[1]),
            Op::Cast(d) => self.cast(ops[0], d),
            Op::Const { value, dtype } => self.c(value, dtype),
            // The operand was loaded broadcast against the output tiles; consumers broadcast
            // it further and the final store widens it to the full tile.
            Op::Broadcast => ops[0],
            Op::CausalMask => self.causal_mask(v, ops[0], groups, axes)?,
            ref op => return Err(self.err(v, format!("{} is not elementwise", op.name()))),
        })
    }

    /// `causal_mask` of the tile `x` at `axes`: entry `(i, j)` of the last two axes is kept
    /// where `j ≤ i + (Sk − Sq)` and is `−∞` elsewhere (as [`Op::CausalMask`] defines it).
    /// Needs the last two axes tiled on their own (not merged with a batch).
    fn causal_mask(
        &mut self,
        v: Value,
        x: TValue,
        groups: &[Vec<Dim>],
        axes: &[Axis],
    ) -> Result<TValue, LowerError> {
        let r = groups.len();
        let (ei, ej) = match (r >= 2).then(|| (axes[r - 2].extent, axes[r - 1].extent)) {
            Some((Some(ei), Some(ej))) if groups[r - 2].len() == 1 && groups[r - 1].len() == 1 => {
                (ei, ej)
            }
            _ => {
                return Err(self.err(
                    v,
                    format!(
                        "a fused causal mask needs its last two axes tiled on their own, the kernel's view is {groups:?}"
                    ),
                ));
            }
        };
        let sq = self.extent(v, &groups[r - 2][0])?;
        let sk = self.extent(v, &groups[r - 1][0])?;
        let (oi, oj) = (axes[r - 2].origin, axes[r - 1].origin);
        let ai = self
            .b
            .op(tile::Op::Arange, TileType::tile(DType::I32, &[ei]));
        let rows = self.bin(crate::graph::BinaryOp::Add, ai, oi);
        let rows = self.expand(rows, 1);
        let aj = self
            .b
            .op(tile::Op::Arange, TileType::tile(DType::I32, &[ej]));
        let cols = self.bin(crate::graph::BinaryOp::Add, aj, oj);
        let cols = self.expand(cols, 0);
        let shift = self.bin(crate::graph::BinaryOp::Sub, sk, sq);
        let lim = self.bin(crate::graph::BinaryOp::Add, rows, shift);
        let keep = self.b.op(
            tile::Op::Cmp(tile::CmpOp::Le, cols, lim),
            TileType::tile(DType::Bool, &[ei, ej]),
        );
        let t = self.b.ty(x).clone();
        let ninf = self.c(f64::NEG_INFINITY, t.dtype);
        let shape = TileType::broadcast_shape(&t.shape, &[ei, ej]).ok_or_else(|| {
            self.err(
                v,
                format!("the masked tile {:?} does not fit the output tile", t.shape),
            )
        })?;
        Ok(self.b.op(
            tile::Op::Select(keep, x, ninf),
            TileType {
                dtype: t.dtype,
                shape,
            },
        ))
    }

    /// The run-time extent `d` (an `i32`): a constant, or the axis of a kernel parameter bound
    /// so far that a view shows as `d` alone.
    fn extent(&mut self, v: Value, d: &Dim) -> Result<TValue, LowerError> {
        if let Dim::Const(n) = d {
            return Ok(self.c_i32(*n as i64));
        }
        let found = self.bindings.iter().enumerate().find_map(|(p, b)| {
            view_groups(&self.g.ty(b.value).shape.0, b.view_rank)
                .iter()
                .position(|g| g.as_slice() == std::slice::from_ref(d))
                .map(|axis| (p, axis))
        });
        match found {
            Some((param, axis)) => Ok(self.dim(param, axis)),
            None => Err(self.err(
                v,
                format!("no kernel input shows the extent {d} on an axis of its own"),
            )),
        }
    }

    /// Broadcasts `x` to `shape` when it is smaller (before a store).
    pub fn fit(&mut self, x: TValue, shape: &[usize]) -> TValue {
        let t = self.b.ty(x).clone();
        if t.shape == shape {
            return x;
        }
        self.b
            .op(tile::Op::Broadcast(x), TileType::tile(t.dtype, shape))
    }

    pub fn store(&mut self, param: usize, index: Vec<TValue>, value: TValue) {
        self.b.effect(tile::Op::Store {
            param,
            index,
            value,
            mask: None,
        });
    }
}
