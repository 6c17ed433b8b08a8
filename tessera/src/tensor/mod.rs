//! Host tensors: shape plus contiguous row-major storage on a device.

mod element;
mod random;

pub use element::{Element, Float, Fp8, f8e4m3, f8e5m2};

use crate::{Device, Error, Result};
use tessera_ir::DType;

/// A dense row-major tensor.
///
/// ```
/// use tessera::Tensor;
/// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.to_vec()[5], 6.0);
/// assert!(Tensor::<f32>::from_vec(vec![1.0], &[2, 2]).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<T: Element> {
    shape: Vec<usize>,
    data: Vec<T>,
    device: Device,
}

impl<T: Element> Tensor<T> {
    /// Wraps a buffer; errors if its length is not the product of `shape`.
    pub fn from_vec(data: Vec<T>, shape: &[usize]) -> Result<Self> {
        let expected: usize = shape.iter().product();
        if data.len() != expected {
            return Err(Error::BufferLength {
                shape: shape.to_vec(),
                expected,
                got: data.len(),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            data,
            device: Device::cpu(),
        })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: &[usize]) -> Self {
        Tensor {
            shape: shape.to_vec(),
            data: vec![T::default(); shape.iter().product()],
            device: Device::cpu(),
        }
    }

    /// Standard-normal samples from a seeded generator (same seed, same tensor, on every machine).
    ///
    /// ```
    /// use tessera::{Tensor, bf16};
    /// let a = Tensor::<bf16>::randn(&[3, 5], 7);
    /// assert_eq!(a, Tensor::<bf16>::randn(&[3, 5], 7));
    /// assert_ne!(a, Tensor::<bf16>::randn(&[3, 5], 8));
    /// ```
    pub fn randn(shape: &[usize], seed: u64) -> Self {
        let n = shape.iter().product();
        let mut rng = random::SplitMix64::new(seed);
        let data = (0..n).map(|_| T::from_f64_round(rng.normal())).collect();
        Tensor {
            shape: shape.to_vec(),
            data,
            device: Device::cpu(),
        }
    }

    /// The shape, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// The device kernels on this tensor run on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The same tensor, placed on `device`: kernels taking it run there.
    ///
    /// Storage stays in host memory; a GPU launch copies arguments in and results out (device
    /// residency across launches is future work).
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let t = Tensor::<f32>::zeros(&[2, 2]).to(&Device::sim());
    /// assert_eq!(t.device().name(), "sim:sm_80");
    /// ```
    pub fn to(mut self, device: &Device) -> Self {
        self.device = device.clone();
        self
    }

    /// Copies the elements out.
    pub fn to_vec(&self) -> Vec<T> {
        self.data.clone()
    }

    /// Borrows the elements.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// Borrows the elements mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// Same data, new shape with the same element count.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self> {
        let expected: usize = shape.iter().product();
        if expected != self.data.len() {
            return Err(Error::BufferLength {
                shape: shape.to_vec(),
                expected,
                got: self.data.len(),
            });
        }
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// Elementwise conversion to f64 (for references and checks).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data.iter().map(|x| x.to_f64()).collect()
    }

    /// A type-erased read-only view, as kernels take their inputs.
    pub fn arg(&self) -> TensorRef<'_> {
        TensorRef {
            device: &self.device,
            dtype: T::DTYPE,
            shape: &self.shape,
            bytes: bytemuck::cast_slice(&self.data),
        }
    }

    /// A type-erased writable view, as `tile!` kernels take their outputs.
    pub fn arg_mut(&mut self) -> TensorMut<'_> {
        TensorMut {
            device: &self.device,
            dtype: T::DTYPE,
            shape: &self.shape,
            bytes: bytemuck::cast_slice_mut(&mut self.data),
        }
    }
}

/// A borrowed, type-erased tensor passed to a launch.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// Where kernels reading this tensor run.
    pub device: &'a Device,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// A mutably borrowed, type-erased tensor passed to a launch.
#[derive(Debug)]
pub struct TensorMut<'a> {
    /// Where kernels writing this tensor run.
    pub device: &'a Device,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a mut [u8],
}
