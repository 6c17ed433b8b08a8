//! Fast Fourier transforms of complex sequences stored as interleaved `(re, im)` pairs:
//! `x: f32[B, L, 2]` → `f32[B, L, 2]`, `y[k] = Σ_n x[n]·e^{∓2πi·nk/L}` (`−` forward; the
//! inverse divides by `L`), one transform per row `b`.
//!
//! Each kernel is one Graph IR `fft` / `ifft` node lowered to the Tile IR `fft` op: radix-2/4
//! Stockham, on the CPU over whole tiles (rayon over programs), in PTX as a shared-memory
//! Stockham per block of transforms (global → shared → global, twiddles computed in registers).
//! The length is a constant of the kernel, so there is one kernel per length and direction:
//! [`FFT_LENGTHS`]. Every point of the FFT class's search space
//! (`tessera::ir::schedule::Schedule::space(KernelClass::Fft, F32)`: `[T, C]` = transforms
//! per program × complex columns per block) is precompiled for sm_80/89/90a (`crate::ptx`), so
//! `scripts/ptxas-check` checks them (accepted, 0 spills).
//!
//! ```
//! use tessera::Tensor;
//! let x = Tensor::<f32>::randn(&[3, 256, 2], 1);
//! let y = tessera_kernels::fft(&x)?;
//! let back = tessera_kernels::ifft(&y)?;
//! let (a, b) = (x.to_f64_vec()?, back.to_f64_vec()?);
//! assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-5));
//! # Ok::<(), tessera::Error>(())
//! ```

use tessera::{Error, Result, Tensor};

/// Forward FFT of length 256 of each row of `x: f32[B, 256, 2]`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn fft256(x: Tensor<f32, (B, Const<256>, Const<2>)>) -> Tensor<f32, (B, Const<256>, Const<2>)> {
    fft(x, 1)
}

/// Inverse FFT of length 256 of each row of `x: f32[B, 256, 2]`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn ifft256(
    x: Tensor<f32, (B, Const<256>, Const<2>)>,
) -> Tensor<f32, (B, Const<256>, Const<2>)> {
    ifft(x, 1)
}

/// Forward FFT of length 4096 (the longest, `tessera::ir::graph::FFT_MAX_LENGTH`) of each row
/// of `x: f32[B, 4096, 2]`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn fft4096(
    x: Tensor<f32, (B, Const<4096>, Const<2>)>,
) -> Tensor<f32, (B, Const<4096>, Const<2>)> {
    fft(x, 1)
}

/// Inverse FFT of length 4096 of each row of `x: f32[B, 4096, 2]`.
#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]
pub fn ifft4096(
    x: Tensor<f32, (B, Const<4096>, Const<2>)>,
) -> Tensor<f32, (B, Const<4096>, Const<2>)> {
    ifft(x, 1)
}

/// The lengths with a kernel.
pub const FFT_LENGTHS: [usize; 2] = [256, 4096];

fn dispatch(x: &Tensor<f32>, inverse: bool) -> Result<Tensor<f32>> {
    let s = x.shape();
    let name = if inverse { "ifft" } else { "fft" };
    let err = |message: String| Error::ShapeMismatch {
        kernel: name.into(),
        param: "x".into(),
        message,
    };
    if s.len() != 3 || s[2] != 2 {
        return Err(err(format!("must be [B, L, 2], got shape {s:?}")));
    }
    match (s[1], inverse) {
        (256, false) => fft256(x),
        (256, true) => ifft256(x),
        (4096, false) => fft4096(x),
        (4096, true) => ifft4096(x),
        (l, _) => Err(err(format!(
            "has shape {s:?}: no kernel for length {l}; lengths with a kernel: {FFT_LENGTHS:?}"
        ))),
    }
}

/// The forward FFT of each row of `x: f32[B, L, 2]` (`L` one of [`FFT_LENGTHS`]), on the
/// device `x` is on. Another length or rank is an error naming the shape.
///
/// ```
/// use tessera::Tensor;
/// // the transform of a unit impulse is all ones
/// let mut d = vec![0.0f32; 2 * 256];
/// d[0] = 1.0;
/// let y = tessera_kernels::fft(&Tensor::from_vec(d, &[1, 256, 2])?)?;
/// assert!(y.to_f64_vec()?.chunks(2).all(|z| (z[0] - 1.0).abs() < 1e-6 && z[1].abs() < 1e-6));
/// let bad = Tensor::<f32>::randn(&[1, 100, 2], 1);
/// assert!(tessera_kernels::fft(&bad).unwrap_err().to_string().contains("length 100"));
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn fft(x: &Tensor<f32>) -> Result<Tensor<f32>> {
    dispatch(x, false)
}

/// The inverse FFT (scaled by `1/L`) of each row of `x: f32[B, L, 2]` (`L` one of
/// [`FFT_LENGTHS`]); see [`fft`].
///
/// ```
/// use tessera::Tensor;
/// let x = Tensor::<f32>::randn(&[2, 4096, 2], 7);
/// let back = tessera_kernels::ifft(&tessera_kernels::fft(&x)?)?;
/// assert!(x.to_f64_vec()?.iter().zip(&back.to_f64_vec()?).all(|(p, q)| (p - q).abs() < 1e-4));
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn ifft(x: &Tensor<f32>) -> Result<Tensor<f32>> {
    dispatch(x, true)
}
