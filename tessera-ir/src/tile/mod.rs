//! Tile IR: one block program per kernel, run once per program id of a grid.
//!
//! Values are scalars (`i32`, `f32`) or tiles of static shape (`bf16[128, 64]`). Kernel
//! parameters are tensors in memory with a dtype, a rank and run-time dims. Loads and stores are
//! block accesses: `load %x[%i, %k] : bf16[128, 64]` reads rows `i..i+128`, columns `k..k+64`;
//! leading indices beyond the tile's rank select a fixed position (the batch). Every access is
//! masked by the tensor's bounds (out-of-bounds lanes read `other`, default 0, and are not
//! written), and may carry an extra boolean `mask` tile.
//!
//! Text form:
//! ```text
//! kernel @matmul(%a: f32<2>, %b: f32<2>, %c: f32<2>) grid=[cdiv(%a.0, 64), cdiv(%b.1, 64), 1] {
//!   %0 = program_id 0 : i32
//!   ...
//!   %9, %10 = for %11 = %3 to %4 step 32 iter(%12: f32[64, 64] = %8) {
//!     ...
//!     yield %15
//!   }
//!   store %c[%5, %6], %9
//! }
//! ```
//! Data (the ops, in `Kernel::insts`) is kept apart from order (blocks list instruction handles).

pub mod dsl;
mod parse;
mod print;
mod verify;

pub use parse::parse;
pub use verify::{MAX_TILE_ELEMENTS, VerifyError, check_tile_type, verify};

use crate::graph::{BinaryOp, UnaryOp};
use crate::{DType, NumericsPolicy};
use std::fmt;

/// Handle of a Tile IR value; prints as `%N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TValue(pub u32);

impl TValue {
    /// Arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Handle of an instruction in [`Kernel::insts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inst(pub u32);

/// Type of a value: a scalar when `shape` is empty, otherwise a tile (rank 1 or 2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TileType {
    /// The element type.
    pub dtype: DType,
    /// The dims (empty for a scalar).
    pub shape: Vec<usize>,
}

impl TileType {
    /// A scalar type.
    pub fn scalar(dtype: DType) -> Self {
        TileType {
            dtype,
            shape: Vec::new(),
        }
    }

    /// A tile type.
    pub fn tile(dtype: DType, shape: &[usize]) -> Self {
        TileType {
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// Number of elements (1 for scalars).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Numpy-style broadcast of two static shapes.
    pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
        let r = a.len().max(b.len());
        (0..r)
            .map(|i| {
                let x = (i + a.len()).checked_sub(r).map_or(1, |j| a[j]);
                let y = (i + b.len()).checked_sub(r).map_or(1, |j| b[j]);
                match (x, y) {
                    _ if x == y => Some(x),
                    (1, y) => Some(y),
                    (x, 1) => Some(x),
                    _ => None,
                }
            })
            .collect()
    }
}

impl fmt::Display for TileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dtype)?;
        if !self.shape.is_empty() {
            let d: Vec<String> = self.shape.iter().map(|s| s.to_string()).collect();
            write!(f, "[{}]", d.join(", "))?;
        }
        Ok(())
    }
}

/// A tensor parameter: name, element type, rank (dims are bound at launch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// The parameter's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its rank.
    pub rank: usize,
}

/// One grid dimension: `cdiv(product of parameter dims, tile)`; no dims means `1`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GridDim {
    /// `(parameter index, axis)` pairs multiplied together.
    pub dims: Vec<(usize, usize)>,
    /// The tile size the product is divided by, rounding up (at least 1 when `dims` is not empty).
    pub tile: u32,
}

impl GridDim {
    /// The constant grid dimension 1.
    pub fn one() -> Self {
        GridDim {
            dims: Vec::new(),
            tile: 1,
        }
    }

    /// Evaluates against the bound shapes of the parameters.
    ///
    /// Panics when a `(parameter, axis)` pair is missing from `shapes` or the product
    /// overflows; [`GridDim::try_eval`] returns those as errors.
    pub fn eval(&self, shapes: &[Vec<usize>]) -> usize {
        self.try_eval(shapes).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Evaluates against the bound shapes of the parameters, with every index and the product
    /// checked; the error names the parameter, axis and the sizes involved.
    ///
    /// ```
    /// use tessera_ir::tile::GridDim;
    /// let g = GridDim { dims: vec![(0, 0), (0, 1)], tile: 64 };
    /// assert_eq!(g.try_eval(&[vec![100, 3]]), Ok(5));
    /// assert!(g.try_eval(&[vec![1 << 40, 1 << 40]]).unwrap_err().contains("overflows"));
    /// assert!(g.try_eval(&[vec![4]]).unwrap_err().contains("axis 1"));
    /// ```
    pub fn try_eval(&self, shapes: &[Vec<usize>]) -> Result<usize, String> {
        let mut n: usize = 1;
        for &(p, a) in &self.dims {
            let d = *shapes.get(p).and_then(|s| s.get(a)).ok_or_else(|| {
                format!("grid uses axis {a} of parameter #{p}, which is not bound")
            })?;
            n = n.checked_mul(d).ok_or_else(|| {
                format!("grid size overflows: {n} × {d} (axis {a} of parameter #{p})")
            })?;
        }
        Ok(n.div_ceil(self.tile.max(1) as usize))
    }
}

/// Comparison ops producing `bool` tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a < b`.
    Lt,
    /// `a ≤ b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a ≥ b`.
    Ge,
    /// `a = b`.
    Eq,
    /// `a ≠ b`.
    Ne,
}

impl CmpOp {
    /// Every comparison.
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::Eq,
        CmpOp::Ne,
    ];

    /// Name in text (`cmp.lt`).
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
        }
    }

    /// Looks a comparison up by name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Evaluates the comparison.
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        }
    }
}

/// The fixed geometry of an [`Op::Im2col`] gather: the input height, kernel extent, input
/// channels per group, stride, zero padding and dilation (`[h, w]` each). The input's `W`
/// and `C`, and `N` (its view's first dim over `height`), are read at run time.
///
/// ```
/// use tessera_ir::tile::Im2colGeom;
/// let g = Im2colGeom { height: 7, kernel: [3, 3], cg: 4, stride: [2, 2], padding: [1, 1], dilation: [1, 1] };
/// assert_eq!(g.out_extent(0, 7), 4);
/// assert_eq!(g.k(), 36);
/// // GEMM column 13 is tap (kh, kw) = (1, 0), channel 1: offsets (1 − 1, 0 − 1).
/// assert_eq!(g.tap(13), (0, -1, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Im2colGeom {
    /// The input height `H` (≥ 1): the kernel sees the input as `[N·H, W, C]`.
    pub height: u32,
    /// `[KH, KW]`, each ≥ 1.
    pub kernel: [u32; 2],
    /// Input channels per group (`Cg`), ≥ 1.
    pub cg: u32,
    /// `[sh, sw]`, each ≥ 1.
    pub stride: [u32; 2],
    /// `[ph, pw]`.
    pub padding: [u32; 2],
    /// `[dh, dw]`, each ≥ 1.
    pub dilation: [u32; 2],
}

impl Im2colGeom {
    /// Output extent along `axis` (0 = H, 1 = W) of an input extent `n`; 0 when the kernel
    /// does not fit the padded input.
    pub fn out_extent(&self, axis: usize, n: i64) -> i64 {
        let span = self.dilation[axis] as i64 * (self.kernel[axis] as i64 - 1) + 1;
        let padded = n + 2 * self.padding[axis] as i64;
        if padded < span {
            0
        } else {
            (padded - span) / self.stride[axis] as i64 + 1
        }
    }

    /// The GEMM reduction length `KH·KW·cg`.
    pub fn k(&self) -> usize {
        self.kernel[0] as usize * self.kernel[1] as usize * self.cg as usize
    }

    /// GEMM column `k` (below [`Im2colGeom::k`]) as input offsets `(kh·dh − ph, kw·dw − pw)`
    /// from `(oh·sh, ow·sw)` and the channel `ci` within the group.
    pub fn tap(&self, k: usize) -> (i64, i64, usize) {
        let cg = self.cg as usize;
        let (t, ci) = (k / cg, k % cg);
        let (kh, kw) = (t / self.kernel[1] as usize, t % self.kernel[1] as usize);
        (
            kh as i64 * self.dilation[0] as i64 - self.padding[0] as i64,
            kw as i64 * self.dilation[1] as i64 - self.padding[1] as i64,
            ci,
        )
    }
}

/// Tile reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileReduce {
    /// The sum of the axis.
    Sum,
    /// The largest element of the axis.
    Max,
}

/// Tile IR operations. Operands are [`TValue`]s; tensor parameters are referred to by index.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Program id along grid axis 0, 1 or 2 (`i32`).
    ProgramId(u8),
    /// A scalar constant of the result type.
    Const(f64),
    /// Run-time size of a parameter's axis (`i32`).
    Dim {
        /// The parameter's index.
        param: usize,
        /// The axis.
        axis: usize,
    },
    /// `[0, 1, .., n-1]` as an `i32[n]` tile.
    Arange,
    /// A tile filled with one value.
    Full(f64),
    /// An elementwise unary op.
    Unary(UnaryOp, TValue),
    /// An elementwise binary op, with broadcasting.
    Binary(BinaryOp, TValue, TValue),
    /// An elementwise comparison, with broadcasting: a `bool` tile.
    Cmp(CmpOp, TValue, TValue),
    /// `mask ? a : b`, elementwise with broadcasting.
    Select(TValue, TValue, TValue),
    /// Converts to the result dtype (round to nearest even).
    Cast(TValue),
    /// Inserts a unit axis at `axis`: `[n]` → `[1, n]` (axis 0) or `[n, 1]` (axis 1).
    Expand {
        /// The tile.
        a: TValue,
        /// Where the unit axis goes (0 or 1).
        axis: usize,
    },
    /// Broadcasts a scalar or unit-axis tile to the result shape.
    Broadcast(TValue),
    /// Swaps the two axes of a rank-2 tile.
    Trans(TValue),
    /// Reduces one axis of a tile.
    Reduce {
        /// Which reduction.
        op: TileReduce,
        /// The tile.
        a: TValue,
        /// The axis reduced (it is removed).
        axis: usize,
        /// The summation order (see [`NumericsPolicy`]).
        policy: NumericsPolicy,
    },
    /// `acc + a·b` with `a: [m, k]`, `b: [k, n]` of one float dtype (fp8 included) and
    /// `acc: [m, n]` of f32, bf16 or f16. Per element, the products are added to `acc` one `k`
    /// at a time in increasing `k`, each as one fused multiply-add rounded to `acc`'s dtype:
    /// the CPU does exactly this; PTX does it too except where the kernel runs under the fast
    /// policy with f32 accumulation, where tensor-core `mma` may sum in its own order.
    Dot {
        /// The left factor, `[m, k]`.
        a: TValue,
        /// The right factor, `[k, n]`.
        b: TValue,
        /// The accumulator, `[m, n]`.
        acc: TValue,
    },
    /// Block load (see the module docs).
    Load {
        /// The parameter loaded from.
        param: usize,
        /// One `i32` index tile per axis of the parameter.
        index: Vec<TValue>,
        /// A `bool` tile: lanes where it is false are not read.
        mask: Option<TValue>,
        /// The value of the lanes not read.
        other: f64,
    },
    /// The implicit-GEMM gather of a convolution input (*im2col*), formed on the fly: element
    /// `(r, c)` of the `[BM, BK]` result is `x[n, oh·sh + kh·dh − ph, ow·sw + kw·dw − pw,
    /// chan + ci]` of the NHWC input, seen by the kernel as the rank-3 view `x: [N·H, W, C]`
    /// (`H` is [`Im2colGeom::height`]; `W`, `C` and `N` are read at run time), where GEMM
    /// row `m = row + r = (n·OH + oh)·OW + ow` and GEMM column `k = col + c = (kh·KW + kw)·cg +
    /// ci`, with `OH`, `OW` from [`Im2colGeom::out_extent`]. Lanes outside `x` (the zero
    /// padding), with `m ≥ N·OH·OW`, or with `k ≥ KH·KW·cg` read 0.
    Im2col {
        /// The input parameter (its `[N·H, W, C]` view).
        param: usize,
        /// First GEMM row (`i32` scalar).
        row: TValue,
        /// First GEMM column (`i32` scalar).
        col: TValue,
        /// First input channel of the group (`i32` scalar).
        chan: TValue,
        /// The convolution's fixed geometry.
        geom: Im2colGeom,
    },
    /// Block store of `value`.
    Store {
        /// The parameter stored to.
        param: usize,
        /// One `i32` index tile per axis of the parameter.
        index: Vec<TValue>,
        /// The tile stored.
        value: TValue,
        /// A `bool` tile: lanes where it is false are not written.
        mask: Option<TValue>,
    },
    /// `for iv = lo; iv < hi; iv += step`, carrying `args` (initialised from `inits`) through the
    /// body, whose last instruction is a `Yield`. The results are the final carried values.
    For {
        /// The induction variable (`i32`).
        iv: TValue,
        /// Its first value.
        lo: TValue,
        /// The bound it stays below.
        hi: TValue,
        /// The increment, in 1..=i32::MAX.
        step: i64,
        /// The carried values' initial values.
        inits: Vec<TValue>,
        /// The carried values as the body sees them.
        args: Vec<TValue>,
        /// The body's instructions, in order.
        body: Vec<Inst>,
    },
    /// Ends a loop body, giving the next values of the carried args.
    Yield(Vec<TValue>),
    /// Discrete Fourier transforms of an `f32[L, W]` tile along axis 0: column pair
    /// `(2j, 2j + 1)` holds the `(re, im)` parts of one length-`L` complex sequence, so the
    /// tile carries `W / 2` independent transforms. `y[k] = Σ_n x[n]·e^{∓2πi·nk/L}` (`−`
    /// forward); the inverse divides by `L`. `L` is a power of two ≤
    /// [`crate::graph::FFT_MAX_LENGTH`], `W` is even. Text: `fft %x : f32[L, W]` (`ifft`).
    Fft {
        /// The tile transformed.
        a: TValue,
        /// True for the inverse transform.
        inverse: bool,
    },
}

impl Op {
    /// The op's name in text.
    pub fn name(&self) -> String {
        match self {
            Op::ProgramId(_) => "program_id".into(),
            Op::Const(_) => "const".into(),
            Op::Dim { .. } => "dim".into(),
            Op::Arange => "arange".into(),
            Op::Full(_) => "full".into(),
            Op::Unary(u, _) => u.name().into(),
            Op::Binary(b, ..) => b.name().into(),
            Op::Cmp(c, ..) => format!("cmp.{}", c.name()),
            Op::Select(..) => "select".into(),
            Op::Cast(_) => "cast".into(),
            Op::Expand { .. } => "expand".into(),
            Op::Broadcast(_) => "broadcast".into(),
            Op::Trans(_) => "trans".into(),
            Op::Reduce {
                op: TileReduce::Sum,
                ..
            } => "reduce.sum".into(),
            Op::Reduce {
                op: TileReduce::Max,
                ..
            } => "reduce.max".into(),
            Op::Dot { .. } => "dot".into(),
            Op::Load { .. } => "load".into(),
            Op::Im2col { .. } => "im2col".into(),
            Op::Store { .. } => "store".into(),
            Op::For { .. } => "for".into(),
            Op::Yield(_) => "yield".into(),
            Op::Fft { inverse: false, .. } => "fft".into(),
            Op::Fft { inverse: true, .. } => "ifft".into(),
        }
    }

    /// The value operands, in order.
    pub fn operands(&self) -> Vec<TValue> {
        match self {
            Op::ProgramId(_) | Op::Const(_) | Op::Dim { .. } | Op::Arange | Op::Full(_) => vec![],
            Op::Unary(_, a) | Op::Cast(a) | Op::Broadcast(a) | Op::Trans(a) => vec![*a],
            Op::Expand { a, .. } | Op::Reduce { a, .. } | Op::Fft { a, .. } => vec![*a],
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) => vec![*a, *b],
            Op::Select(m, a, b) => vec![*m, *a, *b],
            Op::Dot { a, b, acc } => vec![*a, *b, *acc],
            Op::Load { index, mask, .. } => index.iter().copied().chain(*mask).collect(),
            Op::Im2col { row, col, chan, .. } => vec![*row, *col, *chan],
            Op::Store {
                index, value, mask, ..
            } => index.iter().copied().chain([*value]).chain(*mask).collect(),
            Op::For { lo, hi, inits, .. } => [*lo, *hi]
                .into_iter()
                .chain(inits.iter().copied())
                .collect(),
            Op::Yield(v) => v.clone(),
        }
    }
}

/// An instruction: results and op.
#[derive(Clone, Debug, PartialEq)]
pub struct InstData {
    /// The values it defines.
    pub results: Vec<TValue>,
    /// The operation.
    pub op: Op,
}

/// A block program with its parameters and grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The kernel's name.
    pub name: String,
    /// The tensor parameters, in launch order.
    pub params: Vec<Param>,
    /// The grid: programs along each of the three axes.
    pub grid: [GridDim; 3],
    /// The kernel's numerics policy (text: `numerics=..` after the grid, left out when fast).
    /// Under `deterministic` every backend computes every op by the same sequence of IEEE
    /// operations (see [`crate::NumericsPolicy`]), so results are bit-identical across
    /// backends, threads and tile shapes.
    pub policy: NumericsPolicy,
    /// Type of every value, indexed by [`TValue`].
    pub types: Vec<TileType>,
    /// Every instruction, indexed by [`Inst`].
    pub insts: Vec<InstData>,
    /// The top-level block, in execution order.
    pub body: Vec<Inst>,
}

impl Kernel {
    /// The instruction data behind a handle.
    pub fn inst(&self, i: Inst) -> &InstData {
        &self.insts[i.0 as usize]
    }

    /// The type of a value.
    pub fn ty(&self, v: TValue) -> &TileType {
        &self.types[v.index()]
    }

    /// Looks a parameter up by name.
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        print::write_kernel(f, self, &[])
    }
}

/// Builds a kernel instruction by instruction; [`Builder::finish`] closes it.
///
/// Blocks nest: [`Builder::begin_for`] opens a loop body, [`Builder::end_for`] closes it with
/// the yielded values and returns the loop results.
pub struct Builder {
    kernel: Kernel,
    blocks: Vec<Vec<Inst>>,
    loops: Vec<(TValue, TValue, TValue, i64, Vec<TValue>, Vec<TValue>)>,
}

impl Builder {
    /// Starts a kernel with parameters and grid.
    pub fn new(name: &str, params: Vec<Param>, grid: [GridDim; 3]) -> Self {
        Builder {
            kernel: Kernel {
                name: name.into(),
                params,
                grid,
                policy: NumericsPolicy::Fast,
                types: vec![],
                insts: vec![],
                body: vec![],
            },
            blocks: vec![vec![]],
            loops: vec![],
        }
    }

    /// A fresh value of type `ty`.
    pub fn value(&mut self, ty: TileType) -> TValue {
        self.kernel.types.push(ty);
        TValue(self.kernel.types.len() as u32 - 1)
    }

    /// The type of an existing value.
    pub fn ty(&self, v: TValue) -> &TileType {
        self.kernel.ty(v)
    }

    /// Appends an instruction with no result.
    pub fn effect(&mut self, op: Op) {
        self.emit(op, vec![]);
    }

    /// Appends an instruction with one result of type `ty`.
    pub fn op(&mut self, op: Op, ty: TileType) -> TValue {
        let v = self.value(ty);
        self.emit(op, vec![v]);
        v
    }

    fn emit(&mut self, op: Op, results: Vec<TValue>) {
        self.kernel.insts.push(InstData { results, op });
        let i = Inst(self.kernel.insts.len() as u32 - 1);
        self.blocks.last_mut().unwrap().push(i);
    }

    /// Opens `for iv = lo to hi step step` carrying `inits`; returns `(iv, carried args)`.
    pub fn begin_for(
        &mut self,
        lo: TValue,
        hi: TValue,
        step: i64,
        inits: &[TValue],
    ) -> (TValue, Vec<TValue>) {
        let iv = self.value(TileType::scalar(DType::I32));
        let args: Vec<TValue> = inits
            .iter()
            .map(|i| self.kernel.ty(*i).clone())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| self.value(t))
            .collect();
        self.loops
            .push((iv, lo, hi, step, inits.to_vec(), args.clone()));
        self.blocks.push(vec![]);
        (iv, args)
    }

    /// Closes the innermost loop, yielding `next`; returns the loop's results.
    pub fn end_for(&mut self, next: &[TValue]) -> Vec<TValue> {
        self.effect(Op::Yield(next.to_vec()));
        let body = self.blocks.pop().expect("end_for without begin_for");
        let (iv, lo, hi, step, inits, args) = self.loops.pop().expect("end_for without begin_for");
        let results: Vec<TValue> = args
            .iter()
            .map(|a| self.kernel.ty(*a).clone())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| self.value(t))
            .collect();
        self.emit(
            Op::For {
                iv,
                lo,
                hi,
                step,
                inits,
                args,
                body,
            },
            results.clone(),
        );
        results
    }

    /// Finishes the kernel.
    pub fn finish(mut self) -> Kernel {
        assert!(self.loops.is_empty(), "unclosed loop in tile builder");
        self.kernel.body = self.blocks.pop().unwrap();
        self.kernel
    }
}

impl Builder {
    /// The kernel's parameters, for appending while lowering.
    pub fn params_mut(&mut self) -> &mut Vec<Param> {
        &mut self.kernel.params
    }

    /// Sets the grid.
    pub fn set_grid(&mut self, grid: [GridDim; 3]) {
        self.kernel.grid = grid;
    }

    /// Sets the kernel's numerics policy.
    pub fn set_policy(&mut self, policy: NumericsPolicy) {
        self.kernel.policy = policy;
    }

    /// Loop nesting depth at the insertion point.
    pub fn depth(&self) -> usize {
        self.loops.len()
    }
}

impl Builder {
    /// Renumbers parameter references in every instruction built so far (and the grid).
    pub fn remap_params(&mut self, f: impl Fn(usize) -> usize) {
        for d in &mut self.kernel.insts {
            match &mut d.op {
                Op::Dim { param, .. }
                | Op::Load { param, .. }
                | Op::Im2col { param, .. }
                | Op::Store { param, .. } => *param = f(*param),
                _ => {}
            }
        }
        for g in &mut self.kernel.grid {
            for (p, _) in &mut g.dims {
                *p = f(*p);
            }
        }
    }
}
