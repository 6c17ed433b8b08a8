//! Graph IR: whole-tensor operations with symbolic shapes.
//!
//! A [`Graph`] is an arena of [`Node`]s addressed by [`Value`] handles, in topological order.
//! Every node's type is inferred by [`infer`] when it is built and re-checked by the verifier.
//!
//! Text form (see `print.rs` / `parse.rs`):
//! ```text
//! graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> f32[M, N] {
//!   %3 = matmul %x, %w : f32[M, N]
//!   %4 = add %3, %b : f32[M, N]
//!   %5 = gelu %4 : f32[M, N]
//!   return %5
//! }
//! ```

mod infer;
mod parse;
mod policy;
mod precision;
mod print;
mod verify;

pub use infer::{FFT_MAX_LENGTH, infer};
pub use parse::parse;
pub use policy::{policies, with_policy};
pub use precision::with_precision;
pub use verify::{VerifyError, verify};

use crate::{DType, NumericsPolicy, TensorType};
use std::fmt;

/// Handle of a node in a [`Graph`]; prints as `%3` (or `%name` for parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

impl Value {
    /// Arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Elementwise unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `−x`.
    Neg,
    /// `eˣ`.
    Exp,
    /// Natural logarithm.
    Log,
    /// `√x`.
    Sqrt,
    /// `1/√x`.
    Rsqrt,
    /// Hyperbolic tangent.
    Tanh,
    /// `1/(1 + e⁻ˣ)`.
    Sigmoid,
    /// `max(x, 0)`.
    Relu,
    /// Exact GELU, `0.5·x·(1 + erf(x/√2))`.
    Gelu,
    /// `|x|`.
    Abs,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 10] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::Abs,
    ];

    /// Name in IR text and in kernel bodies.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Abs => "abs",
        }
    }

    /// Looks an op up by name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }

    /// Reference semantics in f64 (the oracle every backend is tested against).
    pub fn eval_f64(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Gelu => 0.5 * x * crate::reference::erfc(-x / std::f64::consts::SQRT_2),
            UnaryOp::Abs => x.abs(),
        }
    }
}

/// Elementwise binary operations (numpy broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a − b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b`.
    Div,
    /// The larger of `a` and `b`, elementwise (`maximum`).
    Max,
    /// The smaller of `a` and `b`, elementwise (`minimum`).
    Min,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];

    /// Name in IR text and kernel bodies.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
        }
    }

    /// Looks an op up by name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }

    /// Reference semantics in f64.
    pub fn eval_f64(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
        }
    }
}

/// Reductions over axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum over the axes.
    Sum,
    /// The largest element over the axes (`amax` in kernel bodies).
    Max,
    /// The sum divided by the number of elements reduced.
    Mean,
}

impl ReduceOp {
    /// Name in IR text (`reduce.sum`) and kernel bodies (`sum`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Mean => "mean",
        }
    }

    /// Looks a reduction up by name.
    pub fn parse(s: &str) -> Option<Self> {
        [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean]
            .into_iter()
            .find(|o| o.name() == s)
    }
}

/// The operation of a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// The `i`-th kernel parameter.
    Param {
        /// Its position in the signature, from 0.
        index: usize,
        /// Its name in the signature.
        name: String,
    },
    /// A scalar constant (rank-0 tensor) of the given dtype.
    Const {
        /// The value.
        value: f64,
        /// Its dtype.
        dtype: DType,
    },
    /// An elementwise unary op.
    Unary(UnaryOp),
    /// An elementwise binary op, with numpy broadcasting of the two operands.
    Binary(BinaryOp),
    /// Elementwise conversion to the dtype.
    Cast(DType),
    /// Explicit broadcast to the node's type.
    Broadcast,
    /// A reduction of the operand over `axes`.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// The axes reduced, each below the operand's rank.
        axes: Vec<usize>,
        /// Whether the reduced axes stay as size-1 dims.
        keepdim: bool,
        /// The summation order (see [`NumericsPolicy`]).
        policy: NumericsPolicy,
    },
    /// `[.., M, K] × [.., K, N]`: plain or batched. The sum over K runs in the accumulator
    /// dtype `acc` (f32, bf16 or f16 for float inputs: every partial sum is rounded to it; i32
    /// for integers), which is the result dtype; `policy` orders the K loop (see
    /// [`NumericsPolicy`]). Text: `%3 = matmul %x, %w acc=f32 policy=fast : f32[M, N]`.
    Matmul {
        /// The accumulator dtype, which is the result dtype.
        acc: DType,
        /// The order of the K loop.
        policy: NumericsPolicy,
    },
    /// Swaps the last two axes.
    Transpose,
    /// Reorders the axes: result axis `i` is operand axis `perm[i]` (`perm` is a permutation
    /// of `0..rank`). Text: `%2 = permute %x perm=[1, 2, 0] : f32[B, C, A]`. The compiler
    /// inserts it around a softmax over an inner axis; kernels lower the permutations that
    /// exchange two adjacent groups of trailing axes (`[0, .., k−1, j, .., r−1, k, .., j−1]`).
    Permute(Vec<usize>),
    /// Softmax along `axis`, computed and returned in f32. Text: `softmax %x axis=0` (the
    /// attribute is left out for the last axis).
    Softmax {
        /// The axis normalised, below the operand's rank.
        axis: usize,
        /// The order of the row reductions.
        policy: NumericsPolicy,
    },
    /// `(x − mean)/sqrt(var + eps) · gamma + beta` over the last axis; args `x, gamma, beta`.
    LayerNorm {
        /// Added to the variance; finite and > 0.
        eps: f64,
        /// The order of the row reductions.
        policy: NumericsPolicy,
    },
    /// `x / sqrt(mean(x²) + eps) · gamma` over the last axis; args `x, gamma`.
    RmsNorm {
        /// Added to the mean square; finite and > 0.
        eps: f64,
        /// The order of the row reductions.
        policy: NumericsPolicy,
    },
    /// Causal masking of attention scores `x: [.., Sq, Sk]`: entry `(i, j)` is kept when
    /// `j ≤ i + (Sk − Sq)` (the diagonal aligned bottom-right, so a query attends to its own
    /// position and every earlier key) and is `−∞` otherwise.
    CausalMask,
    /// Fused attention `softmax(mask(scale · q·kᵀ)) · v` over the last two axes of
    /// `q: [.., Sq, D]`, `k: [.., Sk, D]`, `v: [.., Sk, Dv]` (equal leading batch/head dims, one
    /// float dtype); the probabilities are rounded to the inputs' dtype before the second
    /// product (as `softmax(..).cast::<T>().matmul(v)` does) and both products accumulate in
    /// f32. Result `f32[.., Sq, Dv]`. Built by the `flash_attention` rewrite or written directly.
    /// `policy` orders its reductions (the row sums and both products); the online-softmax
    /// lowering honours `fast` only (another policy is a lowering error, and the rewrite leaves
    /// a graph whose softmax or matmuls name one unfused).
    Attention {
        /// The factor applied to `q·kᵀ` (usually `1/√D`).
        scale: f64,
        /// Whether the scores are causally masked (as [`Op::CausalMask`]).
        causal: bool,
        /// The order of the reductions.
        policy: NumericsPolicy,
    },
    /// 2-D convolution (cross-correlation, as in deep learning) of an NHWC input
    /// `x: [N, H, W, C]` by an HWIO weight `w: [KH, KW, C/groups, F]`; see [`Conv2d`].
    Conv2d(Conv2d),
    /// Discrete Fourier transform along logical axis `axis` of a complex tensor (f32, interleaved
    /// `(re, im)` pairs in a last axis of size 2): `y[k] = Σ_n x[n]·e^{∓2πi·nk/L}`, `−` forward;
    /// the inverse divides by `L`. `L` must be a constant power of two ≤ 4096.
    Fft {
        /// The logical axis transformed (the complex pair axis not counted).
        axis: usize,
        /// True for the inverse transform.
        inverse: bool,
    },
    /// A real tensor as complex: `[..] → f32[.., 2]` with imaginary part 0.
    Complex,
    /// The real part of a complex tensor: `f32[.., 2] → f32[..]`.
    Real,
    /// Zero padding (or cropping, for negative amounts), with optional interior padding (zero
    /// insertion, as XLA's `pad`): with `k = interior[a] + 1`, `y[lo + i·k] = x[i]` along each
    /// axis and every other element is 0; an axis of extent `n ≥ 1` becomes
    /// `lo + (n − 1)·k + 1 + hi` (negative `lo`/`hi` crop after the insertion). Text:
    /// `pad %x lo=[0, 1] hi=[0, -1]`, with ` interior=[0, 2]` when any is nonzero. Kernels lower
    /// interior padding on every axis but the last.
    Pad {
        /// Elements added before the start of each axis (negative: removed).
        lo: Vec<i64>,
        /// Elements added after the end of each axis (negative: removed).
        hi: Vec<i64>,
        /// Zeros inserted between neighbouring elements of each axis.
        interior: Vec<u64>,
    },
    /// The spectral product of a convolution: `X: [N, P, Q, C, 2]` by `W: [P, Q, C/groups, F, 2]`
    /// (complex), `Y[n, p, q, f] = Σ_c X[n, p, q, g·Cg + c] · conj(W[p, q, c, f])` with `g` the
    /// group of output channel `f`. Result `f32[N, P, Q, F, 2]`.
    SpectralMul {
        /// Channel groups: input and output channels are split into this many groups.
        groups: u64,
    },
}

/// Attributes of a 2-D convolution.
///
/// `y[n, oh, ow, f] = Σ_{kh, kw, c} x[n, oh·sh + kh·dh − ph, ow·sw + kw·dw − pw, g·Cg + c] ·
/// w[kh, kw, c, f]` where `g = f / (F / groups)` is the group of output channel `f`,
/// `Cg = C / groups`, and positions outside `x` read 0 (zero padding).
/// `OH = (H + 2·ph − dh·(KH − 1) − 1) / sh + 1` (likewise `OW`). Depthwise is `groups = C`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2d {
    /// `[sh, sw]`, each ≥ 1.
    pub stride: [u64; 2],
    /// `[ph, pw]`: zeros on both sides.
    pub padding: [u64; 2],
    /// `[dh, dw]`, each ≥ 1.
    pub dilation: [u64; 2],
    /// ≥ 1; divides `C` and `F`.
    pub groups: u64,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

impl Conv2d {
    /// Output extent of a spatial axis (`0` = H, `1` = W) of input extent `n` and kernel `k`;
    /// `None` when the kernel does not fit the padded input.
    ///
    /// ```
    /// let c = tessera_ir::graph::Conv2d { stride: [2, 2], padding: [1, 1], ..Default::default() };
    /// assert_eq!(c.out_extent(0, 7, 3), Some(4));
    /// ```
    pub fn out_extent(&self, axis: usize, n: u64, k: u64) -> Option<u64> {
        let span = self.dilation[axis] * (k.max(1) - 1) + 1;
        (n + 2 * self.padding[axis])
            .checked_sub(span)
            .map(|x| x / self.stride[axis] + 1)
    }
}

impl Op {
    /// The op's name in IR text.
    pub fn name(&self) -> String {
        match self {
            Op::Param { .. } => "param".into(),
            Op::Const { .. } => "const".into(),
            Op::Unary(u) => u.name().into(),
            Op::Binary(b) => b.name().into(),
            Op::Cast(_) => "cast".into(),
            Op::Broadcast => "broadcast".into(),
            Op::Reduce { op, .. } => format!("reduce.{}", op.name()),
            Op::Matmul { .. } => "matmul".into(),
            Op::Transpose => "transpose".into(),
            Op::Permute(_) => "permute".into(),
            Op::Softmax { .. } => "softmax".into(),
            Op::LayerNorm { .. } => "layernorm".into(),
            Op::RmsNorm { .. } => "rmsnorm".into(),
            Op::CausalMask => "causal_mask".into(),
            Op::Attention { .. } => "attention".into(),
            Op::Conv2d(_) => "conv2d".into(),
            Op::Fft { inverse: false, .. } => "fft".into(),
            Op::Fft { inverse: true, .. } => "ifft".into(),
            Op::Complex => "complex".into(),
            Op::Real => "real".into(),
            Op::Pad { .. } => "pad".into(),
            Op::SpectralMul { .. } => "spectral_mul".into(),
        }
    }

    /// `pad` by `lo`/`hi` without interior padding.
    ///
    /// ```
    /// let op = tessera_ir::graph::Op::pad(vec![1, 0], vec![0, -1]);
    /// assert!(matches!(op, tessera_ir::graph::Op::Pad { interior, .. } if interior == [0, 0]));
    /// ```
    pub fn pad(lo: Vec<i64>, hi: Vec<i64>) -> Op {
        let interior = vec![0; lo.len()];
        Op::Pad { lo, hi, interior }
    }

    /// `matmul` accumulating in `acc` under the fast policy.
    pub fn matmul(acc: DType) -> Op {
        Op::Matmul {
            acc,
            policy: NumericsPolicy::Fast,
        }
    }

    /// The numerics policy of a reduction (sum, mean, max, softmax, the norms, matmul's K
    /// loop); `None` for ops that reduce nothing.
    pub fn policy(&self) -> Option<NumericsPolicy> {
        match self {
            Op::Reduce { policy, .. }
            | Op::Matmul { policy, .. }
            | Op::Softmax { policy, .. }
            | Op::LayerNorm { policy, .. }
            | Op::RmsNorm { policy, .. }
            | Op::Attention { policy, .. } => Some(*policy),
            _ => None,
        }
    }

    /// The policy slot of a reduction, for rewriting it.
    pub fn policy_mut(&mut self) -> Option<&mut NumericsPolicy> {
        match self {
            Op::Reduce { policy, .. }
            | Op::Matmul { policy, .. }
            | Op::Softmax { policy, .. }
            | Op::LayerNorm { policy, .. }
            | Op::RmsNorm { policy, .. }
            | Op::Attention { policy, .. } => Some(policy),
            _ => None,
        }
    }

    /// True for ops that map element to element (fusable as epilogues).
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Cast(_) | Op::Const { .. }
        )
    }
}

/// One node: op, operands and result type.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// The operands, values of earlier nodes.
    pub args: Vec<Value>,
    /// The result type.
    pub ty: TensorType,
}

/// A kernel body as a dataflow graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The kernel's name.
    pub name: String,
    /// The nodes in topological order; a [`Value`] indexes them.
    pub nodes: Vec<Node>,
    /// Parameter nodes, in signature order.
    pub params: Vec<Value>,
    /// The value returned.
    pub output: Value,
}

impl Graph {
    /// Starts an empty graph; add params and nodes with [`GraphBuilder`].
    pub fn builder(name: &str) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                name: name.to_string(),
                nodes: Vec::new(),
                params: Vec::new(),
                output: Value(0),
            },
        }
    }

    /// The node behind a value.
    pub fn node(&self, v: Value) -> &Node {
        &self.nodes[v.index()]
    }

    /// The value's type.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.node(v).ty
    }

    /// How many nodes (and the output) use each value.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for a in &n.args {
                uses[a.index()] += 1;
            }
        }
        if let Some(u) = uses.get_mut(self.output.index()) {
            *u += 1;
        }
        uses
    }

    /// The name a value prints as: the parameter name, or its index.
    pub fn value_name(&self, v: Value) -> String {
        match &self.nodes.get(v.index()).map(|n| &n.op) {
            Some(Op::Param { name, .. }) => format!("%{name}"),
            _ => format!("%{}", v.0),
        }
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        print::write_graph(f, self, &[])
    }
}

/// A type error found while building a node: which op and what rule it broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {message}")]
pub struct TypeError {
    /// The op's name.
    pub op: String,
    /// The rule broken, in words.
    pub message: String,
}

/// Builds a graph node by node, inferring and checking types.
///
/// ```
/// use tessera_ir::{DType, Dim, Shape, TensorType, graph::{Graph, Op, UnaryOp}};
/// let mut b = Graph::builder("k");
/// let x = b.param("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("M"), Dim::sym("K")])));
/// let w = b.param("w", TensorType::new(DType::F32, Shape(vec![Dim::sym("K"), Dim::sym("N")])));
/// let y = b.push(Op::matmul(DType::F32), &[x, w]).unwrap();
/// let z = b.push(Op::Unary(UnaryOp::Gelu), &[y]).unwrap();
/// let g = b.finish(z);
/// assert_eq!(g.ty(z).to_string(), "f32[M, N]");
/// ```
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// Adds a parameter.
    pub fn param(&mut self, name: &str, ty: TensorType) -> Value {
        let v = Value(self.graph.nodes.len() as u32);
        let index = self.graph.params.len();
        self.graph.nodes.push(Node {
            op: Op::Param {
                index,
                name: name.to_string(),
            },
            args: vec![],
            ty,
        });
        self.graph.params.push(v);
        v
    }

    /// Adds a node, inferring its type.
    pub fn push(&mut self, op: Op, args: &[Value]) -> Result<Value, TypeError> {
        let tys: Vec<&TensorType> = args
            .iter()
            .map(|a| &self.graph.nodes[a.index()].ty)
            .collect();
        let ty = infer(&op, &tys).map_err(|message| TypeError {
            op: op.name(),
            message,
        })?;
        Ok(self.push_typed(op, args, ty))
    }

    /// Adds a node with a given type (used by `broadcast` and the parser; the verifier checks it).
    pub fn push_typed(&mut self, op: Op, args: &[Value], ty: TensorType) -> Value {
        let v = Value(self.graph.nodes.len() as u32);
        self.graph.nodes.push(Node {
            op,
            args: args.to_vec(),
            ty,
        });
        v
    }

    /// The type of a value built so far.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.graph.nodes[v.index()].ty
    }

    /// Finishes the graph with `output` as its result.
    pub fn finish(mut self, output: Value) -> Graph {
        self.graph.output = output;
        self.graph
    }
}
