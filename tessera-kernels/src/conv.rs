//! Convolutions. Depthwise 2-D (the seeds' example 4.5): memory-bound and sensitive to its
//! tile shape, so its `tile!` knobs are an autotuning search space ([`depthwise_space`]).

use tessera::autotune::TileSpace;
use tessera::ir::cost::Problem;
use tessera::{Arg, Result, Tensor};

tessera::tile! {
    /// Depthwise 2-D convolution, stride 1, no padding, channels last:
    /// `y[h, w, c] = Σ_{i<KH, j<KW} x[h+i, w+j, c] · f[i, j, c]` with `x: [H, W, C]`,
    /// `f: [KH, KW, C]`, `y: [H-KH+1, W-KW+1, C]`. A program owns `BH` output rows of `BW`
    /// columns × `BC` channels; each row accumulates `KH·KW` shifted input windows scaled by
    /// the filter taps. Edges are masked by the tensors' bounds.
    pub fn depthwise_conv2d<const BH: i64 = 4, const BW: i64 = 16, const BC: i64 = 64>(x: In<f32, 3>, f: In<f32, 3>, y: Out<f32, 3>)
        grid = (cdiv(y.dim(0), BH), cdiv(y.dim(1), BW), cdiv(y.dim(2), BC))
    {
        let h0 = program_id(0) * BH;
        let w0 = program_id(1) * BW;
        let c0 = program_id(2) * BC;
        for r in range(0, BH, 1) {
            let mut acc = zeros::<f32>([BW, BC]);
            for i in range(0, f.dim(0), 1) {
                for j in range(0, f.dim(1), 1) {
                    let xv = load(x, [h0 + r + i, w0 + j, c0], [BW, BC]);
                    let fv = load(f, [i, j, c0], [BC]);
                    acc = acc + xv * expand(fv, 0);
                }
            }
            store(y, [h0 + r, w0, c0], acc);
        }
    }
}

/// The cost model's view of a depthwise launch: argument shapes `[x, f, y]`.
pub fn depthwise_problem(shapes: &[Vec<usize>]) -> Problem {
    let (f, y) = (&shapes[1], &shapes[2]);
    Problem::Depthwise {
        oh: y[0] as u64,
        ow: y[1] as u64,
        c: y[2] as u64,
        kh: f[0] as u64,
        kw: f[1] as u64,
        in_bytes: 4,
    }
}

/// The depthwise search space: `BH ∈ {1, 2, 4, 8}`, `BW ∈ {8, 16, 32, 64}`,
/// `BC ∈ {16, 32, 64, 128}` (64 points), tile dims `[BH, BW, BC]` for the cost model.
///
/// ```
/// assert_eq!(tessera_kernels::conv::depthwise_space().points.len(), 64);
/// ```
pub fn depthwise_space() -> TileSpace {
    TileSpace::grid(&[
        ("BH", &[1, 2, 4, 8]),
        ("BW", &[8, 16, 32, 64]),
        ("BC", &[16, 32, 64, 128]),
    ])
    .tile_knobs(["BH", "BW", "BC"])
    .problem(depthwise_problem)
}

/// Depthwise convolution of `x: [H, W, C]` by `f: [KH, KW, C]` (stride 1, no padding), on the
/// inputs' device. On the CPU it runs the autotuner's knobs for these shapes (see
/// `tessera::autotune`: in the default `cached` mode a cached winner or the defaults); `tile!`
/// knobs are tuned on the CPU only, so on a PTX device it runs the default knobs (their
/// build-time PTX).
///
/// ```
/// use tessera::Tensor;
/// let x = Tensor::<f32>::randn(&[10, 12, 8], 1);
/// let f = Tensor::<f32>::randn(&[3, 3, 8], 2);
/// let y = tessera_kernels::depthwise_conv2d(&x, &f)?;
/// assert_eq!(y.shape(), &[8, 10, 8]);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn depthwise_conv2d(x: &Tensor<f32>, f: &Tensor<f32>) -> Result<Tensor<f32>> {
    let shape = depthwise_shape(x, f)?;
    if x.device().is_cpu() {
        // The launch allocates `y` and writes it without zeroing it first when the program
        // provably writes every element (`TileDef::launch_tuned_new`).
        let (y, _) =
            depthwise_conv2d::DEF.launch_tuned_new(space(), &[x.arg(), f.arg()], &shape)?;
        return Ok(y);
    }
    let mut y = Tensor::<f32>::zeros_on(&shape, x.device())?;
    launch_depthwise(x, f, &mut y)?;
    Ok(y)
}

/// The depthwise search space, built once per process (64 points of knob names).
fn space() -> &'static TileSpace {
    static SPACE: std::sync::OnceLock<TileSpace> = std::sync::OnceLock::new();
    SPACE.get_or_init(depthwise_space)
}

/// [`depthwise_conv2d()`] writing into `y`, which must have the result's shape
/// `[H-KH+1, W-KW+1, C]` (else [`tessera::Error::ShapeMismatch`] naming `y`) and live on the
/// inputs' device. The program stores every element of `y` (whatever it held is overwritten),
/// so a loop that keeps `y` allocates nothing per launch: no fresh output whose pages the OS
/// maps and zeroes again on every call, which costs more than the convolution itself once
/// `y` is larger than glibc's 32 MiB mmap threshold.
///
/// ```
/// use tessera::Tensor;
/// let x = Tensor::<f32>::randn(&[10, 12, 16], 1);
/// let f = Tensor::<f32>::randn(&[3, 3, 16], 2);
/// let mut y = Tensor::<f32>::full(&[8, 10, 16], f32::NAN)?;
/// tessera_kernels::conv::depthwise_conv2d_into(&x, &f, &mut y)?;
/// assert_eq!(y, tessera_kernels::depthwise_conv2d(&x, &f)?);
/// let mut wrong = Tensor::<f32>::zeros(&[10, 8, 16])?;
/// let e = tessera_kernels::conv::depthwise_conv2d_into(&x, &f, &mut wrong).unwrap_err();
/// assert!(e.to_string().contains("[8, 10, 16]"), "{e}");
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn depthwise_conv2d_into(x: &Tensor<f32>, f: &Tensor<f32>, y: &mut Tensor<f32>) -> Result<()> {
    let shape = depthwise_shape(x, f)?;
    if y.shape() != shape.as_slice() {
        return Err(tessera::Error::ShapeMismatch {
            kernel: "depthwise_conv2d".into(),
            param: "y".into(),
            message: format!(
                "must have the result's shape {shape:?}, got {:?}",
                y.shape()
            ),
        });
    }
    launch_depthwise(x, f, y)
}

/// The output shape `[H-KH+1, W-KW+1, C]` of `x: [H, W, C]` by `f: [KH, KW, C]`, or the
/// error naming both shapes.
fn depthwise_shape(x: &Tensor<f32>, f: &Tensor<f32>) -> Result<[usize; 3]> {
    let (xs, fs) = (x.shape(), f.shape());
    if xs.len() != 3 || fs.len() != 3 || xs[2] != fs[2] || fs[0] > xs[0] || fs[1] > xs[1] {
        return Err(tessera::Error::ShapeMismatch {
            kernel: "depthwise_conv2d".into(),
            param: "f".into(),
            message: format!("must be [KH ≤ H, KW ≤ W, C] for x {xs:?}, got {fs:?}"),
        });
    }
    Ok([xs[0] - fs[0] + 1, xs[1] - fs[1] + 1, xs[2]])
}

/// Runs the program on `x`, `f` into `y` (shapes checked): the autotuner's knobs on the CPU,
/// the default knobs' precompiled PTX on a device.
fn launch_depthwise(x: &Tensor<f32>, f: &Tensor<f32>, y: &mut Tensor<f32>) -> Result<()> {
    let mut args = [Arg::In(x.arg()), Arg::In(f.arg()), Arg::Out(y.arg_mut()?)];
    if x.device().is_cpu() {
        depthwise_conv2d::DEF.launch_tuned(space(), &mut args)?;
        Ok(())
    } else {
        depthwise_conv2d::DEF.launch(&[], &mut args)
    }
}

pub use tessera::ir::graph::Conv2d;

/// `relu(conv2d(x, w) + b)` for a 3×3 kernel, stride 1, padding 1 on `[N, 56, 56, 64]`
/// inputs with 64 output channels (a ResNet stage), f32: one implicit-GEMM kernel with the
/// bias and ReLU fused into its epilogue; its PTX is precompiled for the conv schedule space.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED, dims(H = 56, W = 56, C = 64, F = 64, K = 3))]
pub fn conv3x3_bias_relu(
    x: Tensor<f32, (N, H, W, C)>,
    w: Tensor<f32, (K, K, C, F)>,
    b: Tensor<f32, (F,)>,
) -> Tensor<f32, (N, H, W, F)> {
    relu(conv2d(x, w, [1, 1], [1, 1]) + b)
}

/// [`conv3x3_bias_relu()`] with bf16 inputs (tensor-core `mma.sync` on a GPU), f32
/// accumulation, bias and output.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED, dims(H = 56, W = 56, C = 64, F = 64, K = 3))]
pub fn conv3x3_bias_relu_bf16(
    x: Tensor<bf16, (N, H, W, C)>,
    w: Tensor<bf16, (K, K, C, F)>,
    b: Tensor<f32, (F,)>,
) -> Tensor<f32, (N, H, W, F)> {
    relu(conv2d(x, w, [1, 1], [1, 1]) + b)
}

/// 2-D convolution `conv2d(x, w)` of `x: [N, H, W, C]` (NHWC) by the HWIO weight
/// `w: [KH, KW, C/groups, F]` with stride, zero padding, dilation and groups from `c`
/// (depthwise: `groups = C`), accumulated and returned in f32 as `[N, OH, OW, F]`. It runs
/// as one implicit-GEMM kernel (`tessera_ir::lower`'s conv lowering: im2col tiles gathered
/// on the fly into the GEMM micro-kernels on the CPU, `mma.sync` for bf16/f16 and FFMA for
/// f32 in PTX). Graph IR needs constant spatial dims, so each geometry (`H`, `W`, `C`, the
/// weight shape, `c`, the dtype, whether a bias is fused) is its own kernel definition,
/// built on first use and kept for the process; its PTX is compiled through the JIT cache
/// (the precompiled geometries are [`conv3x3_bias_relu()`] and its bf16 twin). The batch `N`
/// is symbolic: one definition serves every batch size. When `bias` is given, the result is
/// `relu(conv2d(x, w) + bias)` with the bias (`[F]`, f32) and ReLU fused into the epilogue.
///
/// ```
/// use tessera::Tensor;
/// use tessera_kernels::conv::Conv2d;
/// let x = Tensor::<f32>::randn(&[2, 9, 11, 6], 1);
/// let w = Tensor::<f32>::randn(&[3, 3, 3, 4], 2);
/// let c = Conv2d { stride: [2, 2], padding: [1, 1], groups: 2, ..Default::default() };
/// let y = tessera_kernels::conv2d(&x, &w, None, &c)?;
/// assert_eq!(y.shape(), &[2, 5, 6, 4]);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn conv2d<T: tessera::Float>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    bias: Option<&Tensor<f32>>,
    c: &Conv2d,
) -> Result<Tensor<f32>> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tessera::ir::graph::{BinaryOp, Graph, Op, UnaryOp};
    use tessera::ir::{Dim, Shape, TensorType};
    static DEFS: Mutex<Option<HashMap<String, &'static tessera::KernelDef>>> = Mutex::new(None);
    let bad = |param: &str, message: String| tessera::Error::ShapeMismatch {
        kernel: "conv2d".into(),
        param: param.into(),
        message,
    };
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 4 {
        return Err(bad("x", format!("must be [N, H, W, C], got {xs:?}")));
    }
    if ws.len() != 4 {
        return Err(bad(
            "w",
            format!("must be [KH, KW, C/groups, F], got {ws:?}"),
        ));
    }
    let konst = |v: &[usize]| Shape(v.iter().map(|d| Dim::Const(*d as u64)).collect::<Vec<_>>());
    let mut gb = Graph::builder("conv2d");
    let mut xdims = vec![Dim::Sym("N".into())];
    xdims.extend(xs[1..].iter().map(|d| Dim::Const(*d as u64)));
    let xv = gb.param("x", TensorType::new(T::DTYPE, Shape(xdims)));
    let wv = gb.param("w", TensorType::new(T::DTYPE, konst(ws)));
    let mut y = gb
        .push(Op::Conv2d(*c), &[xv, wv])
        .map_err(|e| bad("w", e.to_string()))?;
    if let Some(b) = bias {
        if b.shape() != [ws[3]] {
            return Err(bad(
                "bias",
                format!("must be [F] = [{}], got {:?}", ws[3], b.shape()),
            ));
        }
        let bv = gb.param("b", TensorType::new(tessera::DType::F32, konst(b.shape())));
        let s = gb
            .push(Op::Binary(BinaryOp::Add), &[y, bv])
            .map_err(|e| bad("bias", e.to_string()))?;
        y = gb
            .push(Op::Unary(UnaryOp::Relu), &[s])
            .map_err(|e| bad("bias", e.to_string()))?;
    }
    let text = gb.finish(y).to_string();
    let def = {
        let mut defs = DEFS.lock().unwrap_or_else(|e| e.into_inner());
        let defs = defs.get_or_insert_with(HashMap::new);
        *defs.entry(text.clone()).or_insert_with(|| {
            // One definition per geometry and process: the text lives as long as it.
            let text: &'static str = Box::leak(text.into_boxed_str());
            Box::leak(Box::new(tessera::KernelDef::new("conv2d", text, &[])))
        })
    };
    let mut args = vec![x.arg(), w.arg()];
    if let Some(b) = bias {
        args.push(b.arg());
    }
    def.launch::<f32>(&args)
}
