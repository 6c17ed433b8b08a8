//! `KernelDef::launch_into` / `KernelFamily::launch_into`: the result written into an existing
//! tensor is bit for bit the fresh launch's, whatever the tensor held; on the CPU the tensor's
//! host memory is reused; a wrong shape or element type is an error naming the kernel.

use tessera::backend::cpu::fused;
use tessera::prelude::*;
use tessera::{DType, Device, Error, KernelDef, KernelFamily, TensorRef};

#[tessera::kernel]
fn chain(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu(x * y + 1.0)
}

#[tessera::kernel]
fn col_mean(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.mean(0)
}

#[tessera::kernel]
fn transpose_f32(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
    transpose(x)
}

#[tessera::kernel]
fn transpose_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (C, R)> {
    transpose(x)
}

#[tessera::kernel]
fn softmax_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn matmul_softmax(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    softmax(matmul(a, b))
}

/// A tensor of `shape` holding garbage: NaNs, infinities and large random values.
fn garbage<T: Element>(shape: &[usize], seed: u64) -> Tensor<T> {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let v: Vec<T> = (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            T::from_f64_round(match i % 4 {
                0 => f64::NAN,
                1 => f64::NEG_INFINITY,
                _ => (s >> 11) as f64 * if s & 1 == 0 { 1e-3 } else { -7.0 },
            })
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// The values' bit patterns (every element type widens to f64 exactly; `-0.0` stays apart
/// from `+0.0`).
fn bits<T: Element>(t: &Tensor<T>) -> Vec<u64> {
    t.to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Launches `def` fresh and into a garbage tensor of the result's shape; both must agree bit
/// for bit, and the garbage tensor's memory must have been reused. Returns how many outputs
/// the `launch_into` call proved covered (not zeroed first).
fn agree<T: Element>(
    what: &str,
    def: &'static KernelDef,
    args: &[TensorRef<'_>],
    seed: u64,
) -> u64 {
    let want: Tensor<T> = def.launch(args).unwrap();
    let mut out = garbage::<T>(want.shape(), seed);
    let ptr = out.as_slice().unwrap().as_ptr();
    let before = fused::covered_outputs();
    def.launch_into(args, &mut out).unwrap();
    let covered = fused::covered_outputs() - before;
    assert_eq!(out.shape(), want.shape(), "{what}");
    assert_eq!(
        bits(&out),
        bits(&want),
        "{what}: launch_into differs from launch"
    );
    if want.numel() > 0 {
        assert_eq!(
            out.as_slice().unwrap().as_ptr(),
            ptr,
            "{what}: out's memory was not reused"
        );
    }
    covered
}

/// Every memory-bound kernel class, f32 and bf16, on ragged and large shapes (the fast path
/// proves these outputs covered, so the garbage is never zeroed and must all be overwritten),
/// and the same launches on the interpreter (which zeroes its output first).
#[test]
fn launch_into_agrees_with_launch_bit_for_bit() {
    for (i, &(r, c)) in [(37, 300), (1, 1), (5, 2100), (70, 9), (512, 1024)]
        .iter()
        .enumerate()
    {
        let s = 100 + 10 * i as u64;
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let y = Tensor::<f32>::randn(&[r, c], s + 2);
        let g = Tensor::<f32>::randn(&[c], s + 3);
        let xb = Tensor::<bf16>::randn(&[r, c], s + 4);
        let yb = Tensor::<bf16>::randn(&[r, c], s + 5);
        let pick = |f: &'static KernelFamily, a: &[TensorRef<'_>]| {
            let dtypes: Vec<DType> = a.iter().map(|t| t.dtype()).collect();
            f.for_params(&dtypes).unwrap()
        };
        let shape = format!("[{r}, {c}]");
        for interp in [false, true] {
            let run = |f: &dyn Fn() -> u64| {
                if interp {
                    assert_eq!(
                        fused::with_interpreter(f),
                        0,
                        "{shape}: the interpreter zeroes"
                    );
                } else {
                    f();
                }
            };
            run(&|| {
                let a = [x.arg()];
                agree::<f32>(
                    "softmax",
                    pick(&tessera_kernels::softmax::KERNEL, &a),
                    &a,
                    s,
                )
            });
            run(&|| {
                let a = [x.arg(), g.arg(), g.arg()];
                agree::<f32>(
                    "layernorm",
                    pick(&tessera_kernels::layernorm::KERNEL, &a),
                    &a,
                    s,
                )
            });
            run(&|| {
                let a = [x.arg(), g.arg()];
                agree::<f32>(
                    "rmsnorm",
                    pick(&tessera_kernels::rmsnorm::KERNEL, &a),
                    &a,
                    s,
                )
            });
            run(&|| {
                let a = [x.arg()];
                agree::<f32>("gelu", pick(&tessera_kernels::gelu::KERNEL, &a), &a, s)
            });
            run(&|| {
                let a = [x.arg(), y.arg()];
                agree::<f32>("add", pick(&tessera_kernels::add::KERNEL, &a), &a, s)
            });
            run(&|| {
                let a = [xb.arg(), yb.arg()];
                agree::<bf16>("add bf16", pick(&tessera_kernels::add::KERNEL, &a), &a, s)
            });
            run(&|| agree::<f32>("chain", &chain::KERNEL, &[x.arg(), g.arg()], s));
            run(&|| agree::<f32>("col_mean", &col_mean::KERNEL, &[x.arg()], s));
            run(&|| agree::<f32>("transpose", &transpose_f32::KERNEL, &[x.arg()], s));
            run(&|| agree::<bf16>("transpose bf16", &transpose_bf16::KERNEL, &[xb.arg()], s));
            run(&|| agree::<f32>("softmax bf16", &softmax_bf16::KERNEL, &[xb.arg()], s));
        }
    }
}

/// The fast path proves these outputs covered: `launch_into` skips their zeroing as `launch`
/// does (so every element of the garbage must be overwritten by the kernel itself).
#[test]
fn covered_outputs_are_not_zeroed() {
    let x = Tensor::<f32>::randn(&[37, 300], 7);
    let y = Tensor::<f32>::randn(&[37, 300], 8);
    let a = [x.arg(), y.arg()];
    let add = tessera_kernels::add::KERNEL
        .for_params(&[DType::F32, DType::F32])
        .unwrap();
    assert_eq!(agree::<f32>("add", add, &a, 1), 1);
    assert_eq!(
        agree::<f32>("transpose", &transpose_f32::KERNEL, &[x.arg()], 2),
        1
    );
}

/// Outputs the launch cannot prove it writes whole (a matmul's on the interpreter, whose K
/// loop accumulates into its output, and every kernel of a two-kernel plan run on the
/// interpreter) are zeroed before the kernel runs, as fresh ones are; the garbage never shows
/// through. The direct GEMM writes its output on the first k-block, so on the fast path a
/// plain matmul's output counts as covered and is not zeroed.
#[test]
fn outputs_not_proven_covered_are_zeroed_first() {
    let a = Tensor::<f32>::randn(&[37, 300], 11);
    let b = Tensor::<f32>::randn(&[300, 20], 12);
    let mm = tessera_kernels::matmul::KERNEL
        .for_params(&[DType::F32, DType::F32])
        .unwrap();
    assert_eq!(agree::<f32>("matmul", mm, &[a.arg(), b.arg()], 3), 1);
    let zeroed = fused::with_interpreter(|| agree::<f32>("matmul", mm, &[a.arg(), b.arg()], 13));
    assert_eq!(zeroed, 0);
    let two = &matmul_softmax::KERNEL;
    assert!(
        two.compiled().unwrap().kernels.len() >= 2,
        "a multi-kernel plan"
    );
    agree::<f32>("matmul → softmax", two, &[a.arg(), b.arg()], 4);
    let zeroed =
        fused::with_interpreter(|| agree::<f32>("matmul → softmax", two, &[a.arg(), b.arg()], 5));
    assert_eq!(zeroed, 0);
}

/// The family's method picks the instantiation by the arguments' element types.
#[test]
fn a_family_launches_into_its_instantiation() {
    let x = Tensor::<bf16>::randn(&[9, 33], 21);
    let y = Tensor::<bf16>::randn(&[9, 33], 22);
    let mut out = garbage::<bf16>(&[9, 33], 6);
    tessera_kernels::add::KERNEL
        .launch_into(&[x.arg(), y.arg()], &mut out)
        .unwrap();
    assert_eq!(bits(&out), bits(&tessera_kernels::add(&x, &y).unwrap()));
    let mut wrong = Tensor::<f32>::zeros(&[9, 33]).unwrap();
    let e = tessera_kernels::add::KERNEL
        .launch_into(&[x.arg(), y.arg()], &mut wrong)
        .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
}

/// A wrong shape or element type is an error naming the kernel, `out`, what was expected and
/// what was passed; nothing runs and `out` is left as it was.
#[test]
fn a_wrong_shape_or_dtype_is_an_error() {
    let x = Tensor::<f32>::randn(&[4, 6], 31);
    let mut out = garbage::<f32>(&[6, 4], 7);
    let kept = bits(&out);
    let e = chain::KERNEL
        .launch_into(&[x.arg(), x.arg()], &mut out)
        .unwrap_err();
    // `y` must be `[C]`: the argument error comes first.
    assert!(
        matches!(e, Error::DimMismatch { .. } | Error::ShapeMismatch { .. }),
        "{e}"
    );
    let g = Tensor::<f32>::randn(&[6], 32);
    let e = chain::KERNEL
        .launch_into(&[x.arg(), g.arg()], &mut out)
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{msg}");
    for part in ["chain", "`out`", "[4, 6]", "[6, 4]"] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
    assert_eq!(bits(&out), kept, "a refused launch must not touch out");
    let mut wrong_rank = garbage::<f32>(&[24], 8);
    assert!(matches!(
        transpose_f32::KERNEL.launch_into(&[x.arg()], &mut wrong_rank),
        Err(Error::ShapeMismatch { .. })
    ));
    let mut b = garbage::<bf16>(&[4, 6], 9);
    let e = chain::KERNEL
        .launch_into(&[x.arg(), g.arg()], &mut b)
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{msg}");
    for part in ["chain", "`out`", "f32", "bf16"] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
}

/// An empty result: nothing to write, no error.
#[test]
fn an_empty_result_is_fine() {
    let x = Tensor::<f32>::randn(&[0, 5], 41);
    let mut out = Tensor::<f32>::zeros(&[5, 0]).unwrap();
    transpose_f32::KERNEL
        .launch_into(&[x.arg()], &mut out)
        .unwrap();
    assert_eq!(out.shape(), &[5, 0]);
}

/// A launch on a device reuses nothing: its result (on the device) replaces a host `out`; a
/// CPU launch into a device tensor replaces it with the host result.
#[test]
fn device_results_replace_out() {
    let dev = Device::sim();
    let x = Tensor::<f32>::randn(&[3, 5], 51);
    let xd = x.to(&dev).unwrap();
    let mut out = garbage::<f32>(&[5, 3], 10);
    transpose_f32::KERNEL
        .launch_into(&[xd.arg()], &mut out)
        .unwrap();
    assert_eq!(out.device(), &dev);
    let want = transpose_f32(&x).unwrap();
    assert_eq!(bits(&out), bits(&want));
    let mut on_dev = Tensor::<f32>::zeros_on(&[5, 3], &dev).unwrap();
    transpose_f32::KERNEL
        .launch_into(&[x.arg()], &mut on_dev)
        .unwrap();
    assert!(on_dev.device().is_cpu());
    assert_eq!(bits(&on_dev), bits(&want));
}
