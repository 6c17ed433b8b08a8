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
mod rowwise;

use crate::fuse::FusedKernel;
use crate::graph::{Graph, Op, Value};
use crate::schedule::{KernelClass, Schedule};
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

/// Which graph value a kernel parameter reads or writes, and at what view rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The graph value.
    pub value: Value,
    /// The rank the kernel views it at (leading dims merged, or padded with 1s).
    pub view_rank: usize,
    /// How many trailing dims are merged into the view's last dim first (1: none; see
    /// [`Binding::view`]). An FFT along a middle axis views `[.., L, d.., 2]` as
    /// `[outer, L, d..·2]` this way.
    pub tail: usize,
}

impl Binding {
    /// The view of a tensor of `shape`: its last `tail` dims merged into one, then
    /// [`view_shape`] at `view_rank`.
    ///
    /// ```
    /// use tessera_ir::lower::Binding;
    /// use tessera_ir::graph::Value;
    /// let b = Binding { value: Value(0), view_rank: 3, tail: 3 };
    /// assert_eq!(b.view(&[2, 8, 4, 3, 2]), Ok(vec![2, 8, 24]));
    /// let plain = Binding { tail: 1, ..b };
    /// assert_eq!(plain.view(&[2, 8, 4, 3, 2]), Ok(vec![64, 3, 2]));
    /// ```
    pub fn view(&self, shape: &[usize]) -> Result<Vec<usize>, String> {
        if self.tail <= 1 || shape.len() < self.tail {
            return view_shape(shape, self.view_rank);
        }
        let cut = shape.len() - self.tail;
        let last = shape[cut..]
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| format!("merging the trailing dims of {shape:?} overflows"))?;
        let mut merged = shape[..cut].to_vec();
        merged.push(last);
        view_shape(&merged, self.view_rank)
    }
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
        let mut out = vec![merged];
        out.extend_from_slice(&shape[cut..]);
        Ok(if rank == 0 { vec![] } else { out })
    } else {
        let mut out = vec![1; rank - shape.len()];
        out.extend_from_slice(shape);
        Ok(out)
    }
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

/// Lowers `k` under schedule `s`. The kernel runs under its root's numerics policy, or
/// `policy` when the root (an elementwise op, say) has none; under `deterministic` and
/// `kahan_sum` every reduction is lowered to a fixed association order that does not depend on
/// `s` (see [`crate::NumericsPolicy`]).
pub fn lower(
    g: &Graph,
    k: &FusedKernel,
    s: &Schedule,
    policy: NumericsPolicy,
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
    if let Err(e) = crate::schedule::verify(s) {
        return Err(LowerError {
            value: k.name.clone(),
            message: format!("invalid schedule: {}", e.join("; ")),
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
        self.param_tail(v, view_rank, 1)
    }

    /// The kernel parameter bound to `v` viewed with its last `tail` dims merged (see
    /// [`Binding::view`]), added on first use.
    pub fn param_tail(&mut self, v: Value, view_rank: usize, tail: usize) -> usize {
        let b = Binding {
            value: v,
            view_rank,
            tail,
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
        self.output_param_tail(view_rank, 1)
    }

    /// Adds the output parameter viewed with its last `tail` dims merged.
    pub fn output_param_tail(&mut self, view_rank: usize, tail: usize) -> usize {
        let out = self.k.output;
        let i = self.param_tail(out, view_rank, tail);
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
            ref op => return Err(self.err(v, format!("{} is not elementwise", op.name()))),
        })
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
