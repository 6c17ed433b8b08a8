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
    let (xs, fs) = (x.shape(), f.shape());
    if xs.len() != 3 || fs.len() != 3 || xs[2] != fs[2] || fs[0] > xs[0] || fs[1] > xs[1] {
        return Err(tessera::Error::ShapeMismatch {
            kernel: "depthwise_conv2d".into(),
            param: "f".into(),
            message: format!("must be [KH ≤ H, KW ≤ W, C] for x {xs:?}, got {fs:?}"),
        });
    }
    let mut y =
        Tensor::<f32>::zeros_on(&[xs[0] - fs[0] + 1, xs[1] - fs[1] + 1, xs[2]], x.device())?;
    let mut args = [Arg::In(x.arg()), Arg::In(f.arg()), Arg::Out(y.arg_mut()?)];
    if x.device().is_cpu() {
        depthwise_conv2d::DEF.launch_tuned(&depthwise_space(), &mut args)?;
    } else {
        depthwise_conv2d::DEF.launch(&[], &mut args)?;
    }
    Ok(y)
}
