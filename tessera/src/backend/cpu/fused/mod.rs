//! The CPU fast path: Tile IR compiled once per kernel into a fused chunk program.
//!
//! The interpreter (`super::exec`) runs one tile op at a time over whole tiles and allocates
//! a tile per op. Here `plan::compile` groups the elementwise ops, loads, stores and
//! reductions that share an iteration shape into one loop nest over the tile's rows, in chunks
//! of at most `plan::CHUNK` columns; values used only inside a group live in a few chunk
//! slots (L1), and only values read elsewhere (loop-carried vectors, reduction results) are
//! materialised; a `load → unary… → store` group of f32 or bf16 tensors runs its ops in place
//! over the widened input, in the output (f32) or one f32 chunk (bf16), rounding after each
//! op with a bf16 result (`plan::Group::direct`, [`direct_chains`]), and a `load, load → binary →
//! store` group computes each output element from the inputs in registers (`pipe`). Softmax,
//! layernorm and rmsnorm kernels, recognised in the Tile IR when the plan is compiled
//! (`rowmatch`), run as dedicated row loops instead (`softmax`, `norm`: each row read once,
//! one `exp` per element where the row max is known after its first chunk), bit for bit the
//! interpreter's result ([`softmax_programs`], [`norm_programs`]). After grouping, three
//! rewrites replace step patterns: a `load → trans → store` becomes a blocked copy tensor →
//! tensor (`transpose`), a fast-policy column-reduction loop one streaming pass over its rows
//! (`colreduce`), and a loop-carried tile updated elementwise is written in place instead of
//! copied at every iteration (`inplace`). Each worker reuses one scratch
//! (`run::Scratch`), so a warm launch allocates
//! nothing. Results follow the interpreter's rules (bf16 values rounded after every op, the
//! same `vmath` functions); the interpreter stays the oracle and runs whatever this path
//! declines: `dot`, masked accesses, f16 or integer tensors, reductions under the
//! `deterministic` or `kahan_sum` policies.
//!
//! ```
//! use tessera::backend::cpu::fused;
//! // Launches on this thread inside `with_interpreter` run the interpreter instead.
//! let before = fused::launches();
//! fused::with_interpreter(|| ());
//! assert_eq!(fused::launches(), before);
//! ```

mod bf16io;
mod chain;
mod chunk;
mod colpass;
mod colreduce;
mod depthwise;
mod dwmatch;
mod dwtaps;
mod flat;
mod gelubf16;
mod inplace;
mod lut;
mod norm;
#[cfg(target_arch = "x86_64")]
mod norm512;
#[cfg(target_arch = "x86_64")]
mod normpipe;
mod pipe;
mod plan;
mod rect;
mod rowmatch;
mod run;
mod serial;
mod softmax;
mod stream;
mod transpose;
mod uses;

use crate::backend::Buffer;
use rayon::prelude::*;
use std::cell::{Cell, RefCell};
use tessera_ir::tile::{Kernel, Op};

thread_local! {
    static INTERPRET: Cell<bool> = const { Cell::new(false) };
    static LAUNCHES: Cell<u64> = const { Cell::new(0) };
    static COVERED: Cell<u64> = const { Cell::new(0) };
    static SOFTMAX: Cell<u64> = const { Cell::new(0) };
    static NORM: Cell<u64> = const { Cell::new(0) };
    static TRANSPOSES: Cell<u64> = const { Cell::new(0) };
    static WHOLE: Cell<u64> = const { Cell::new(0) };
    static COLREDUCES: Cell<u64> = const { Cell::new(0) };
    static COLPASSES: Cell<u64> = const { Cell::new(0) };
    static CHAINS: Cell<u64> = const { Cell::new(0) };
    static OPERAND_CHAINS: Cell<u64> = const { Cell::new(0) };
    static DEPTHWISE: Cell<u64> = const { Cell::new(0) };
    static FLAT: Cell<u64> = const { Cell::new(0) };
    static FLAT_STREAMED: Cell<u64> = const { Cell::new(0) };
    static NO_FLAT: Cell<bool> = const { Cell::new(false) };
    static SCRATCH: RefCell<run::Scratch> = RefCell::new(run::Scratch::default());
}

/// Runs `f` with the fused fast path off on this thread: CPU launches made by `f` run the
/// Tile IR interpreter (the reference the fast path is tested against).
///
/// ```
/// let n = tessera::backend::cpu::fused::with_interpreter(|| 1 + 1);
/// assert_eq!(n, 2);
/// ```
pub fn with_interpreter<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&INTERPRET, f)
}

/// Runs `f` with whole-tensor elementwise launches ([`flat_elementwise`]) off on this
/// thread: such kernels run tile by tile on the chunk program's loops (which the tests check
/// too).
///
/// ```
/// let n = tessera::backend::cpu::fused::without_flat(|| 1 + 1);
/// assert_eq!(n, 2);
/// ```
pub fn without_flat<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&NO_FLAT, f)
}

/// Runs `f` with the row loops' narrowing of bf16 outputs by `vcvtne2ps2bf16` (AVX-512
/// BF16, where the CPU has it) off in the whole process: they narrow by integer rounding
/// instead, as on a CPU without it (the same bits; the tests compare both). The setting is
/// process-wide: launches on other threads meanwhile also narrow by integer rounding (the
/// same bits), and it is on again once every such call on any thread has returned (or
/// unwound), however the calls overlap.
///
/// ```
/// let n = tessera::backend::cpu::fused::without_bf16_convert(|| 1 + 1);
/// assert_eq!(n, 2);
/// ```
pub fn without_bf16_convert<R>(f: impl FnOnce() -> R) -> R {
    use std::sync::atomic::Ordering;
    /// Ends this call's hold (also when `f` panics).
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            bf16io::CVT_OFF.fetch_sub(1, Ordering::Relaxed);
        }
    }
    bf16io::CVT_OFF.fetch_add(1, Ordering::Relaxed);
    let _restore = Restore;
    f()
}

/// Runs `f` with this thread's `flag` set, restoring its old value afterwards, also when `f`
/// panics (a test harness that catches the panic keeps using the thread).
fn with_flag<R>(flag: &'static std::thread::LocalKey<Cell<bool>>, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static std::thread::LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(flag, flag.with(|c| c.replace(true)));
    f()
}

/// Whether launches on this thread must run the interpreter ([`with_interpreter`]); the
/// direct GEMM path (`super::matmul`) honours it too.
pub(crate) fn interpreting() -> bool {
    INTERPRET.with(|c| c.get())
}

/// How many launches made on this thread ran the fused fast path.
///
/// ```
/// let n = tessera::backend::cpu::fused::launches();
/// assert!(tessera::backend::cpu::fused::launches() >= n);
/// ```
pub fn launches() -> u64 {
    LAUNCHES.with(|c| c.get())
}

/// How many launches made on this thread ran every program on the softmax row loop (a
/// kernel matched as softmax at compile time, with `[R, C]` input and output).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn soft(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
///     softmax(x)
/// }
///
/// let x = Tensor::<f32>::randn(&[3, 5], 1);
/// let before = tessera::backend::cpu::fused::softmax_programs();
/// let y = soft(&x)?;
/// assert_eq!(y.shape(), &[3, 5]);
/// assert!(tessera::backend::cpu::fused::softmax_programs() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn softmax_programs() -> u64 {
    SOFTMAX.with(|c| c.get())
}

/// How many launches made on this thread ran every program on the layernorm / rmsnorm row
/// loop (a kernel matched as a norm at compile time, with `[R, C]` input and output and
/// `[C]` scale and shift).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn rms(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
///     rmsnorm(x, g, 1e-6)
/// }
///
/// let x = Tensor::<f32>::randn(&[3, 5], 1);
/// let g = Tensor::<f32>::randn(&[5], 2);
/// let before = tessera::backend::cpu::fused::norm_programs();
/// let y = rms(&x, &g)?;
/// assert_eq!(y.shape(), &[3, 5]);
/// assert!(tessera::backend::cpu::fused::norm_programs() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn norm_programs() -> u64 {
    NORM.with(|c| c.get())
}

/// The launch grid over the argument shapes (dims below 2^24, so no product overflows).
fn grid(k: &Kernel, args: &[Buffer]) -> [usize; 3] {
    let mut grid = [1usize; 3];
    for (g, d) in grid.iter_mut().zip(&k.grid) {
        let n: usize = d.dims.iter().map(|&(p, a)| args[p].dims()[a]).product();
        *g = n.div_ceil(d.tile.max(1) as usize);
    }
    grid
}

/// How many fast-path launches made on this thread ran their transpose as a direct copy (a
/// `load → trans → store` run tensor → tensor, with no materialised tile).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn flip(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
///     transpose(x)
/// }
///
/// let x = Tensor::<f32>::randn(&[3, 5], 1);
/// let before = tessera::backend::cpu::fused::direct_transposes();
/// let y = flip(&x)?;
/// assert_eq!(y.shape(), &[5, 3]);
/// assert!(tessera::backend::cpu::fused::direct_transposes() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn direct_transposes() -> u64 {
    TRANSPOSES.with(|c| c.get())
}

/// How many fast-path launches made on this thread ran as one whole-tensor transpose (their
/// programs together a `load → trans → store` of the whole tensor; also counted by
/// [`direct_transposes`]).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn flip(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
///     transpose(x)
/// }
///
/// let x = Tensor::<f32>::randn(&[70, 130], 1);
/// let before = tessera::backend::cpu::fused::whole_transposes();
/// let y = flip(&x)?;
/// assert_eq!(y.shape(), &[130, 70]);
/// assert!(tessera::backend::cpu::fused::whole_transposes() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn whole_transposes() -> u64 {
    WHOLE.with(|c| c.get())
}

/// How many fast-path launches made on this thread computed their column reduction's
/// accumulators for all programs in one pass over whole rows of the tensor before running the
/// programs (a plan with one column reduction, its programs splitting the columns).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
///     x.sum(0)
/// }
///
/// let x = Tensor::<f32>::randn(&[100, 1000], 1);
/// let before = tessera::backend::cpu::fused::column_passes();
/// let y = col_sum(&x)?;
/// assert_eq!(y.shape(), &[1000]);
/// assert!(tessera::backend::cpu::fused::column_passes() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn column_passes() -> u64 {
    COLPASSES.with(|c| c.get())
}

/// How many programs run on this thread took their column-reduction loop's result from the
/// launch's whole-row pass ([`column_passes`]) instead of running the loop: the loop is the
/// one the pass folded (row index the loop counter, from 0 in steps of the tile height over
/// every tile of rows, the accumulator starting at the reduction's identity).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
///     x.sum(0)
/// }
///
/// let x = Tensor::<f32>::randn(&[100, 1000], 1);
/// let before = tessera::backend::cpu::fused::folded_column_loops();
/// let y = col_sum(&x)?;
/// assert_eq!(y.shape(), &[1000]);
/// // One program per 256 columns.
/// assert_eq!(tessera::backend::cpu::fused::folded_column_loops(), before + 4);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn folded_column_loops() -> u64 {
    colreduce::folded_loops()
}

/// How many fast-path launches made on this thread ran their column-reduction loop as one
/// streaming pass over the rows (with no loaded or materialised tile).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
///     x.sum(0)
/// }
///
/// let x = Tensor::<f32>::randn(&[7, 5], 1);
/// let before = tessera::backend::cpu::fused::direct_column_reductions();
/// let y = col_sum(&x)?;
/// assert_eq!(y.shape(), &[5]);
/// assert!(tessera::backend::cpu::fused::direct_column_reductions() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn direct_column_reductions() -> u64 {
    COLREDUCES.with(|c| c.get())
}

/// How many fast-path launches made on this thread ran a plan with a direct elementwise
/// chain (a `load → unary… → store` group of f32 or bf16 tensors, `plan::Group::direct`),
/// which runs each chunk whose load and store windows cover it without a chunk program.
///
/// ```
/// let n = tessera::backend::cpu::fused::direct_chains();
/// assert!(tessera::backend::cpu::fused::direct_chains() >= n);
/// ```
pub fn direct_chains() -> u64 {
    CHAINS.with(|c| c.get())
}

/// How many fast-path launches made on this thread ran as one pass over whole tensors: an
/// elementwise kernel (a unary chain such as `gelu`, a binary op such as `add`, or an operand
/// chain such as `gelu(x * y + 1.0)` with `y` a broadcast row or constants) whose
/// programs together compute every element of an output shaped like its inputs, run as
/// contiguous ranges of the flat tensors split among the threads, whatever the tile shape.
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn act(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
///     gelu(x)
/// }
///
/// let x = Tensor::<f32>::randn(&[3, 5], 1);
/// let before = tessera::backend::cpu::fused::flat_elementwise();
/// let y = act(&x)?;
/// assert_eq!(y.shape(), &[3, 5]);
/// assert!(tessera::backend::cpu::fused::flat_elementwise() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn flat_elementwise() -> u64 {
    FLAT.with(|c| c.get())
}

/// How many of [`flat_elementwise`]'s launches on this thread wrote their output with
/// non-temporal stores (an f32 or bf16 output of at least 3/8 of the last-level cache on one
/// thread, of more than 3/4 of it on two or more, at the AVX2 level or higher).
///
/// ```
/// let n = tessera::backend::cpu::fused::flat_streamed();
/// assert!(tessera::backend::cpu::fused::flat_streamed() >= n);
/// ```
pub fn flat_streamed() -> u64 {
    FLAT_STREAMED.with(|c| c.get())
}

/// How many fast-path launches made on this thread ran a plan with a fused operand chain (a
/// `load → unary and binary ops → store` group of f32 tensors whose binary ops take the
/// running value and a broadcast row or a scalar, `plan::Group::chain`), which computes each
/// chunk whose load and store windows cover it straight into the output, in one pass over
/// the input.
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn chain(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
///     gelu(x * y + 1.0)
/// }
///
/// let x = Tensor::<f32>::randn(&[3, 5], 1);
/// let y = Tensor::<f32>::randn(&[5], 2);
/// let before = tessera::backend::cpu::fused::operand_chains();
/// let z = chain(&x, &y)?;
/// assert_eq!(z.shape(), &[3, 5]);
/// assert!(tessera::backend::cpu::fused::operand_chains() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn operand_chains() -> u64 {
    OPERAND_CHAINS.with(|c| c.get())
}

/// How many fast-path launches made on this thread ran as one direct depthwise convolution
/// (a kernel matched as the library's `depthwise_conv2d` at compile time, with f32
/// `x [H, W, C]`, `f [KH, KW, C]`, `y [H-KH+1, W-KW+1, C]` or a smaller `y`): register blocks
/// along each output row, bit for bit the interpreter's result.
///
/// ```
/// tessera::tile! {
///     fn dw<const BH: i64 = 4, const BW: i64 = 16, const BC: i64 = 64>(x: In<f32, 3>, f: In<f32, 3>, y: Out<f32, 3>)
///         grid = (cdiv(y.dim(0), BH), cdiv(y.dim(1), BW), cdiv(y.dim(2), BC))
///     {
///         let h0 = program_id(0) * BH;
///         let w0 = program_id(1) * BW;
///         let c0 = program_id(2) * BC;
///         for r in range(0, BH, 1) {
///             let mut acc = zeros::<f32>([BW, BC]);
///             for i in range(0, f.dim(0), 1) {
///                 for j in range(0, f.dim(1), 1) {
///                     let xv = load(x, [h0 + r + i, w0 + j, c0], [BW, BC]);
///                     let fv = load(f, [i, j, c0], [BC]);
///                     acc = acc + xv * expand(fv, 0);
///                 }
///             }
///             store(y, [h0 + r, w0, c0], acc);
///         }
///     }
/// }
///
/// use tessera::{Arg, Tensor};
/// let x = Tensor::<f32>::randn(&[9, 11, 5], 1);
/// let f = Tensor::<f32>::randn(&[3, 3, 5], 2);
/// let mut y = Tensor::<f32>::zeros(&[7, 9, 5])?;
/// let before = tessera::backend::cpu::fused::depthwise_launches();
/// dw::DEF.launch(&[], &mut [Arg::In(x.arg()), Arg::In(f.arg()), Arg::Out(y.arg_mut()?)])?;
/// assert!(tessera::backend::cpu::fused::depthwise_launches() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn depthwise_launches() -> u64 {
    DEPTHWISE.with(|c| c.get())
}

/// How many of the [`depthwise_launches`] on this thread ran the 3×3 kernel that holds its
/// nine filter taps in registers (a 3×3 filter and a channel count that is a multiple of the
/// active SIMD level's vector width: 16 floats at AVX-512, 8 at AVX2, 4 otherwise).
///
/// ```
/// tessera::tile! {
///     fn dw<const BH: i64 = 4, const BW: i64 = 16, const BC: i64 = 64>(x: In<f32, 3>, f: In<f32, 3>, y: Out<f32, 3>)
///         grid = (cdiv(y.dim(0), BH), cdiv(y.dim(1), BW), cdiv(y.dim(2), BC))
///     {
///         let h0 = program_id(0) * BH;
///         let w0 = program_id(1) * BW;
///         let c0 = program_id(2) * BC;
///         for r in range(0, BH, 1) {
///             let mut acc = zeros::<f32>([BW, BC]);
///             for i in range(0, f.dim(0), 1) {
///                 for j in range(0, f.dim(1), 1) {
///                     let xv = load(x, [h0 + r + i, w0 + j, c0], [BW, BC]);
///                     let fv = load(f, [i, j, c0], [BC]);
///                     acc = acc + xv * expand(fv, 0);
///                 }
///             }
///             store(y, [h0 + r, w0, c0], acc);
///         }
///     }
/// }
///
/// use tessera::{Arg, Tensor};
/// let x = Tensor::<f32>::randn(&[9, 11, 64], 1);
/// let f = Tensor::<f32>::randn(&[3, 3, 64], 2);
/// let mut y = Tensor::<f32>::zeros(&[7, 9, 64])?;
/// let before = tessera::backend::cpu::fused::depthwise_tap_launches();
/// dw::DEF.launch(&[], &mut [Arg::In(x.arg()), Arg::In(f.arg()), Arg::Out(y.arg_mut()?)])?;
/// assert!(tessera::backend::cpu::fused::depthwise_tap_launches() > before);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn depthwise_tap_launches() -> u64 {
    depthwise::tap_launches()
}

/// How many kernel outputs made on this thread were written by a fast-path launch proven to
/// cover every element, and so were never zeroed first.
///
/// ```
/// let n = tessera::backend::cpu::fused::covered_outputs();
/// assert!(tessera::backend::cpu::fused::covered_outputs() >= n);
/// ```
pub fn covered_outputs() -> u64 {
    COVERED.with(|c| c.get())
}

/// Counts one output [`covered_outputs`] reports.
pub(crate) fn count_covered() {
    COVERED.with(|c| c.set(c.get() + 1));
}

/// A kernel compiled for the fast path.
pub(crate) struct Fused {
    plan: plan::Plan,
    /// Parameters stored into (must be writable).
    stored: Vec<usize>,
    /// Whether the plan has a direct transpose, a direct column reduction, a direct chain
    /// (counted per launch: [`direct_transposes`], [`direct_column_reductions`],
    /// [`direct_chains`]).
    direct: (bool, bool, bool),
    /// Whether the plan has an operand chain ([`operand_chains`]).
    chain: bool,
    /// The plan's transpose when all its other steps are scalar (see [`Fused::whole`]).
    whole: Option<transpose::Transpose>,
    /// The kernel is the library's depthwise convolution (`depthwise`).
    depthwise: Option<dwmatch::Depthwise>,
    /// The group [`flat::run`] may run over whole tensors, and its operands.
    flat: Option<flat::Flat>,
    /// The plan's column reduction when it has exactly one (its launches compute the
    /// partials of all programs in one pass: `colpass`).
    colreduce: Option<colreduce::ColReduce>,
    /// The argument shapes (`Buffer::shape`, `Buffer::rank`) of the last launch whose
    /// programs [`Fused::whole`] proved one whole-tensor transpose. The proof reads the
    /// program ids and the arguments' dims only (`SOp::Dim`), so a launch with the same
    /// shapes skips it (evaluating the scalars of every program took ≈ 5 % of a bf16
    /// `[4096, 1024]` transpose launch, `perf record -e cpu-clock`).
    whole_shapes: std::sync::Mutex<Vec<([usize; 3], usize)>>,
}

impl Fused {
    /// Whether the plan has a matched row loop (`Plan::softmax` or `Plan::norm`), which a
    /// launch runs when its arguments fit (`Fused::runs`, `Plan::rows`).
    pub fn on_row_loop(&self) -> bool {
        self.plan.softmax.is_some() || self.plan.norm.is_some()
    }

    /// Compiles `k`; `Err` says why it stays on the interpreter.
    pub fn new(k: &Kernel) -> Result<Fused, String> {
        let plan = plan::compile(k)?;
        let mut stored: Vec<usize> = k
            .insts
            .iter()
            .filter_map(|d| match d.op {
                Op::Store { param, .. } => Some(param),
                _ => None,
            })
            .collect();
        stored.sort_unstable();
        stored.dedup();
        let has = |f: fn(&plan::Step) -> bool| plan.steps.iter().any(f);
        let direct = (
            has(|s| matches!(s, plan::Step::Transpose(_))),
            has(|s| matches!(s, plan::Step::ColReduce(_))),
            has(|s| matches!(s, plan::Step::Group(g) if g.direct.is_some())),
        );
        let chain = has(|s| matches!(s, plan::Step::Group(g) if g.chain.is_some()));
        let whole = transpose::whole(&plan.steps);
        let flat = flat::find(&plan.steps);
        let mut crs = plan.steps.iter().filter_map(|s| match s {
            plan::Step::ColReduce(c) => Some(c.clone()),
            _ => None,
        });
        let colreduce = match (crs.next(), crs.next()) {
            (Some(c), None) => Some(c),
            _ => None,
        };
        Ok(Fused {
            plan,
            stored,
            direct,
            chain,
            whole,
            depthwise: dwmatch::depthwise(k),
            flat,
            colreduce,
            whole_shapes: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Whether [`Fused::launch`] runs these arguments on the fast path.
    fn runs(&self, args: &[Buffer]) -> bool {
        !(INTERPRET.with(|c| c.get())
            || self.stored.iter().any(|p| !args[*p].writable)
            || args.iter().any(|a| a.dims().iter().any(|&d| d >= 1 << 24)))
    }

    /// Whether launching `k` with `args` (on the fast path, which it checks) writes every
    /// element of parameter `param`: a [`plan::Cover`] proof holds and the grid reaches the
    /// end of each of its axes. The launch then need not zero that output first.
    pub fn covers(&self, k: &Kernel, args: &[Buffer], param: usize) -> bool {
        self.runs(args) && self.covers_on(&grid(k, args), args, param)
    }

    /// [`Fused::covers`] for arguments the fast path takes (`Fused::runs`) and their `grid`
    /// (what [`Fused::launch`] computed already: its proofs ask again for no second grid).
    fn covers_on(&self, grid: &[usize; 3], args: &[Buffer], param: usize) -> bool {
        // A matched depthwise convolution whose arguments `depthwise::run` takes: that pass
        // writes the whole output (`Fused::launch` tries it first).
        if let Some(d) = &self.depthwise
            && d.y == param
            && depthwise::covers(d, args)
        {
            return true;
        }
        let dims = args[param].dims();
        let numel: usize = dims.iter().product();
        if numel * args[param].dtype.size_bytes() != args[param].len {
            return false;
        }
        self.plan.covers.iter().any(|c| {
            c.param == param
                && c.axes.len() == dims.len()
                && c.axes.iter().zip(dims).all(|(&(ax, e), &d)| match ax {
                    plan::CoverAxis::Grid(g) => {
                        grid[g as usize].checked_mul(e).is_some_and(|n| n >= d)
                    }
                    plan::CoverAxis::Zero => d <= e,
                    plan::CoverAxis::Loop { param, axis } => {
                        args[param].dims().get(axis).is_some_and(|&n| n >= d)
                    }
                })
        })
    }

    /// The plan's transpose when this launch's programs together transpose the whole `[r, c]`
    /// source into the whole `[c, r]` destination: every other step is scalar, the grid covers
    /// the destination (a [`plan::Cover`] proof), and each program's destination tile starts
    /// at its source tile's origin swapped, so each copies `d[a][b] = s[b][a]` in tensor
    /// coordinates.
    fn whole(
        &self,
        grid: &[usize; 3],
        args: &[Buffer],
        total: usize,
        ids: impl Fn(usize) -> [usize; 3],
    ) -> Option<&transpose::Transpose> {
        let t = self.whole.as_ref()?;
        let (sd, dd) = (args[t.src].dims(), args[t.dst].dims());
        let size = if t.bf16 { 2 } else { 4 };
        let shaped = sd.len() == 2
            && dd.len() == 2
            && (dd[0], dd[1]) == (sd[1], sd[0])
            && sd[0] * sd[1] * size == args[t.src].len
            && t.src != t.dst
            && self.covers_on(grid, args, t.dst);
        if !shaped {
            return None;
        }
        let same = |k: &[([usize; 3], usize)]| {
            k.len() == args.len()
                && k.iter()
                    .zip(args)
                    .all(|(&(s, r), a)| (s, r) == (a.shape, a.rank))
        };
        if self.whole_shapes.lock().is_ok_and(|k| same(&k)) {
            return Some(t);
        }
        let check = |s: &mut run::Scratch| {
            s.fit(&self.plan);
            (0..total).all(|pid| {
                let sc = run::scalars(&self.plan, s, ids(pid), args);
                let v = |i: &[u32], a: usize| sc[i[a] as usize];
                v(&t.dst_idx, 0) == v(&t.src_idx, 1) && v(&t.dst_idx, 1) == v(&t.src_idx, 0)
            })
        };
        let ok = SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(mut s) => check(&mut s),
            Err(_) => check(&mut run::Scratch::default()),
        });
        if ok && let Ok(mut k) = self.whole_shapes.lock() {
            *k = args.iter().map(|a| (a.shape, a.rank)).collect();
        }
        ok.then_some(t)
    }

    /// Runs the kernel over its grid; `false` when these arguments need the interpreter
    /// (the path is off on this thread, a store into an input, or a dim of 2^24 or more,
    /// where integer tiles held as f32 would stop being exact).
    pub fn launch(&self, k: &Kernel, args: &[Buffer]) -> bool {
        if !self.runs(args) {
            return false;
        }
        let grid = grid(k, args);
        let total = grid[0] * grid[1] * grid[2];
        LAUNCHES.with(|c| c.set(c.get() + 1));
        let bump = |c: &Cell<u64>| c.set(c.get() + 1);
        if self.direct.0 {
            TRANSPOSES.with(bump);
        }
        if self.direct.1 {
            COLREDUCES.with(bump);
        }
        if self.direct.2 {
            CHAINS.with(bump);
        }
        if self.chain {
            OPERAND_CHAINS.with(bump);
        }
        let path = self.plan.rows(args);
        match path {
            run::Path::Softmax { .. } => SOFTMAX.with(bump),
            run::Path::Norm { .. } => NORM.with(bump),
            run::Path::Chunks => {}
        }
        if total == 0 {
            return true;
        }
        let ids = |pid: usize| {
            [
                pid % grid[0],
                (pid / grid[0]) % grid[1],
                pid / (grid[0] * grid[1]),
            ]
        };
        if let Some(d) = &self.depthwise
            && depthwise::run(d, args)
        {
            DEPTHWISE.with(bump);
            return true;
        }
        if let Some(t) = self.whole(&grid, args, total, ids) {
            WHOLE.with(bump);
            transpose::run_whole(t, args);
            return true;
        }
        if let Some(f) = &self.flat
            && !NO_FLAT.with(|c| c.get())
            && let plan::Step::Group(g) = &self.plan.steps[f.step]
            && let Some(o) = flat::shaped(g, f, args)
            && self.covers_on(&grid, args, o)
        {
            FLAT.with(bump);
            if stream::large(&args[o]) {
                FLAT_STREAMED.with(bump);
            }
            flat::run(g, f, args);
            return true;
        }
        match &self.colreduce {
            Some(c) => colpass::with(c, args, total, |parts| {
                if parts.is_some() {
                    COLPASSES.with(bump);
                }
                self.programs(path, total, ids, parts, args)
            }),
            None => self.programs(path, total, ids, None, args),
        }
        true
    }

    /// Runs programs `0 .. total` (`ids` their grid coordinates), on rayon's threads when
    /// there are several, with the launch's column-reduction partials `parts`.
    fn programs(
        &self,
        path: run::Path,
        total: usize,
        ids: impl Fn(usize) -> [usize; 3] + Sync,
        parts: Option<colpass::Parts>,
        args: &[Buffer],
    ) {
        // This launch's number, unique in the process: a worker's scratch keeps what it
        // derived from the launch's read-only inputs (a norm's widened `γ`) for this number.
        static NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let launch = NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let go = |s: &mut run::Scratch, pid: usize| {
            s.fit(&self.plan);
            s.parts = parts;
            s.launch = launch;
            run::run_block(&self.plan, path, s, ids(pid), args);
            s.parts = None;
        };
        let block = |pid: usize| {
            SCRATCH.with(|s| match s.try_borrow_mut() {
                Ok(mut s) => go(&mut s, pid),
                Err(_) => go(&mut run::Scratch::default(), pid),
            })
        };
        // The softmax row loop takes a run of programs over a 1-D grid as one run of rows,
        // so that its pipeline of neighbouring rows does not restart at each program.
        let softmax = matches!(path, run::Path::Softmax { .. })
            && parts.is_none()
            && (0..total).all(|p| ids(p) == [p, 0, 0]);
        // One fence for the streaming stores of a run of programs (`stream::fenced_once`).
        let span = |a: usize, b: usize| {
            stream::fenced_once(|| {
                if !softmax {
                    return (a..b).for_each(block);
                }
                SCRATCH.with(|s| match s.try_borrow_mut() {
                    Ok(mut s) => {
                        s.fit(&self.plan);
                        run::softmax_programs(&self.plan, path, &mut s, a..b, args)
                    }
                    Err(_) => (a..b).for_each(block),
                })
            })
        };
        if total == 1 || rayon::current_num_threads() == 1 {
            span(0, total);
            return;
        }
        // With a column pass's folded accumulators each program's loop is a copy: when the
        // first program's loop took them, the programs run on this thread (a second
        // fork-join would cost more than they do); a loop the pass did not fold runs on
        // every thread.
        let mut first = 0;
        if parts.is_some() {
            let before = colreduce::folded_loops();
            block(0);
            if colreduce::folded_loops() > before {
                (1..total).for_each(block);
                return;
            }
            first = 1;
        }
        // A row loop over few elements runs on this thread alone, without probing (each
        // probe step reads the clock); other launches done within `serial::BUDGET` too.
        if let run::Path::Softmax { rows, n } | run::Path::Norm { rows, n } = path
            && first == 0
            && rows * n < serial::ROWS_MIN
        {
            span(0, total);
            return;
        }
        if !serial::large(args) {
            first = serial::probe(first, total, span);
            if first == total {
                return;
            }
        }
        // Contiguous runs of programs per task keep scratch and rows hot.
        let rest = total - first;
        let per = rest.div_ceil(rayon::current_num_threads() * 4).max(1);
        (0..rest.div_ceil(per)).into_par_iter().for_each(|t| {
            span(first + t * per, first + ((t + 1) * per).min(rest));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_switches_are_restored_when_their_closure_panics() {
        let a = std::panic::catch_unwind(|| with_interpreter(|| panic!("inside")));
        let b = std::panic::catch_unwind(|| without_flat(|| panic!("inside")));
        assert!(a.is_err() && b.is_err());
        assert!(!interpreting());
        assert!(!NO_FLAT.with(|c| c.get()));
        // Nested switches restore the outer value, not `false`.
        with_interpreter(|| {
            assert!(with_interpreter(interpreting));
            assert!(interpreting());
        });
        assert!(!interpreting());
    }
}
