//! Tensors: a shape plus contiguous row-major storage, in host memory or in a device's memory.

mod element;
mod random;
mod storage;

pub use element::{Element, Float, Fp8, f8e4m3, f8e5m2};
pub use storage::DeviceBuffer;

use crate::{Device, Error, Result};
use std::fmt;
use std::sync::Arc;
use tessera_ir::DType;

/// A dense row-major tensor, stored where its device keeps memory: host memory on the CPU,
/// device memory on a GPU or the simulator.
///
/// [`Tensor::to`] copies a tensor to a device once; kernels then read it there, and their
/// results are allocated on that device and stay there. [`Tensor::to_vec`] (or
/// `.to(&Device::cpu())`) copies back. Accessors that need host memory
/// ([`Tensor::as_slice`], [`Tensor::as_mut_slice`]) are an error on a device tensor, naming
/// the device.
///
/// ```
/// use tessera::{Device, Tensor};
/// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.as_slice()?[5], 6.0);
/// let d = t.to(&Device::sim())?;                       // one upload; `t` stays usable
/// assert!(d.as_slice().unwrap_err().to_string().contains("on sim:sm_80"));
/// assert_eq!(d.to_vec()?, t.to_vec()?);                 // one download
/// assert!(Tensor::<f32>::from_vec(vec![1.0], &[2, 2]).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor<T: Element> {
    shape: Vec<usize>,
    storage: Storage<T>,
}

#[derive(Clone)]
enum Storage<T> {
    Host(Vec<T>),
    /// Shared by clones; a writer gets its own copy first (copy on write).
    Device(Arc<DeviceBuffer>),
}

static CPU: Device = Device::Cpu;

impl<T: Element> Tensor<T> {
    /// Wraps a buffer (host memory); errors if its length is not the product of `shape`.
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
            storage: Storage::Host(data),
        })
    }

    /// A tensor of zeros in host memory.
    pub fn zeros(shape: &[usize]) -> Self {
        Tensor {
            shape: shape.to_vec(),
            storage: Storage::Host(vec![T::default(); shape.iter().product()]),
        }
    }

    /// A tensor of zeros on `device`, set there (no transfer): an output buffer for a `tile!`
    /// kernel on a GPU.
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let dev = Device::new_sim(tessera::ir::target::ptx::Arch::Sm80);
    /// let z = Tensor::<f32>::zeros_on(&[3, 5], &dev)?;
    /// assert_eq!(dev.transfer_stats().uploads, 0);
    /// assert_eq!(z.to_vec()?, vec![0.0; 15]);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn zeros_on(shape: &[usize], device: &Device) -> Result<Self> {
        if device.is_cpu() {
            return Ok(Self::zeros(shape));
        }
        let bytes = shape.iter().product::<usize>() * std::mem::size_of::<T>();
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Storage::Device(Arc::new(DeviceBuffer::zeros(device, bytes)?)),
        })
    }

    /// Standard-normal samples from a seeded generator (same seed, same tensor, on every
    /// machine), in host memory.
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
            storage: Storage::Host(data),
        }
    }

    /// A tensor over a device buffer the launcher filled.
    pub(crate) fn from_device(shape: Vec<usize>, buffer: DeviceBuffer) -> Self {
        debug_assert_eq!(
            buffer.len(),
            shape.iter().product::<usize>() * std::mem::size_of::<T>()
        );
        Tensor {
            shape,
            storage: Storage::Device(Arc::new(buffer)),
        }
    }

    /// The shape, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// The device it lives on (kernels taking it run there).
    pub fn device(&self) -> &Device {
        match &self.storage {
            Storage::Host(_) => &CPU,
            Storage::Device(b) => b.device(),
        }
    }

    /// True when its elements are in host memory.
    pub fn is_host(&self) -> bool {
        matches!(self.storage, Storage::Host(_))
    }

    /// The same elements on `device`: one upload from the host, one download to the host, or
    /// (between two devices) a download and an upload. On the device it already lives on, the
    /// result shares its storage (no copy; a later writer copies first). `self` is unchanged.
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let dev = Device::new_sim(tessera::ir::target::ptx::Arch::Sm80);
    /// let t = Tensor::<f32>::randn(&[2, 2], 1);
    /// let d = t.to(&dev)?;
    /// assert_eq!(d.device(), &dev);
    /// let back = d.to(&Device::cpu())?;
    /// assert_eq!(back.as_slice()?, t.as_slice()?);
    /// let same = d.to(&dev)?;                               // shares d's block
    /// assert_eq!((dev.transfer_stats().uploads, dev.transfer_stats().downloads), (1, 1));
    /// # drop(same);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn to(&self, device: &Device) -> Result<Tensor<T>> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let storage = match (&self.storage, device.is_cpu()) {
            (_, true) => Storage::Host(self.to_vec()?),
            (Storage::Host(v), false) => Storage::Device(Arc::new(DeviceBuffer::upload(
                device,
                bytemuck::cast_slice(v),
            )?)),
            (Storage::Device(_), false) => {
                let host = self.to_vec()?;
                Storage::Device(Arc::new(DeviceBuffer::upload(
                    device,
                    bytemuck::cast_slice(&host),
                )?))
            }
        };
        Ok(Tensor {
            shape: self.shape.clone(),
            storage,
        })
    }

    /// Copies the elements into a new host vector (a download for a device tensor, which waits
    /// for the work queued before it).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        match &self.storage {
            Storage::Host(v) => Ok(v.clone()),
            Storage::Device(b) => {
                let mut out = vec![T::default(); self.numel()];
                b.download(bytemuck::cast_slice_mut(&mut out))?;
                Ok(out)
            }
        }
    }

    /// The elements as a host vector, without a copy for a host tensor.
    pub fn into_vec(self) -> Result<Vec<T>> {
        match self.storage {
            Storage::Host(v) => Ok(v),
            Storage::Device(_) => self.to_vec(),
        }
    }

    /// Borrows the elements; an error for a tensor in device memory (copy it with
    /// [`Tensor::to_vec`] or [`Tensor::to`] first).
    pub fn as_slice(&self) -> Result<&[T]> {
        match &self.storage {
            Storage::Host(v) => Ok(v),
            Storage::Device(b) => Err(not_on_host("as_slice", b.device())),
        }
    }

    /// Borrows the elements mutably; an error for a tensor in device memory.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        match &mut self.storage {
            Storage::Host(v) => Ok(v),
            Storage::Device(b) => Err(not_on_host("as_mut_slice", b.device())),
        }
    }

    /// Same data, new shape with the same element count.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self> {
        let expected: usize = shape.iter().product();
        if expected != self.numel() {
            return Err(Error::BufferLength {
                shape: shape.to_vec(),
                expected,
                got: self.numel(),
            });
        }
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// Elementwise conversion to f64 on the host (for references and checks; a download for a
    /// device tensor).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let conv = |v: &[T]| v.iter().map(|x| x.to_f64()).collect();
        match &self.storage {
            Storage::Host(v) => Ok(conv(v)),
            Storage::Device(_) => Ok(conv(&self.to_vec()?)),
        }
    }

    /// A type-erased read-only view, as kernels take their inputs.
    pub fn arg(&self) -> TensorRef<'_> {
        TensorRef {
            device: self.device(),
            dtype: T::DTYPE,
            shape: &self.shape,
            data: match &self.storage {
                Storage::Host(v) => Data::Host(bytemuck::cast_slice(v)),
                Storage::Device(b) => Data::Device(b),
            },
        }
    }

    /// A type-erased writable view, as `tile!` kernels take their outputs. A device tensor
    /// that shares its block with a clone gets a block of its own first (a copy inside device
    /// memory), so a kernel writing it never changes another tensor.
    pub fn arg_mut(&mut self) -> Result<TensorMut<'_>> {
        if let Storage::Device(b) = &mut self.storage
            && Arc::get_mut(b).is_none()
        {
            *b = Arc::new(b.duplicate()?);
        }
        let shape = &self.shape;
        Ok(match &mut self.storage {
            Storage::Host(v) => TensorMut {
                device: &CPU,
                dtype: T::DTYPE,
                shape,
                data: DataMut::Host(bytemuck::cast_slice_mut(v)),
            },
            Storage::Device(b) => {
                let b: &DeviceBuffer = b;
                TensorMut {
                    device: b.device(),
                    dtype: T::DTYPE,
                    shape,
                    data: DataMut::Device(b),
                }
            }
        })
    }
}

fn not_on_host(what: &str, device: &Device) -> Error {
    Error::NotOnHost {
        what: what.into(),
        device: device.to_string(),
    }
}

/// Equal shapes, devices and elements. Comparing tensors in device memory downloads both.
impl<T: Element + PartialEq> PartialEq for Tensor<T> {
    fn eq(&self, o: &Self) -> bool {
        if self.shape != o.shape || self.device() != o.device() {
            return false;
        }
        match (&self.storage, &o.storage) {
            (Storage::Host(a), Storage::Host(b)) => a == b,
            (Storage::Device(a), Storage::Device(b)) if Arc::ptr_eq(a, b) => true,
            _ => matches!((self.to_vec(), o.to_vec()), (Ok(a), Ok(b)) if a == b),
        }
    }
}

impl<T: Element> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tensor");
        d.field("dtype", &T::DTYPE).field("shape", &self.shape);
        match &self.storage {
            Storage::Host(v) => d.field("data", v),
            Storage::Device(b) => d.field("device", b),
        };
        d.finish()
    }
}

/// Where a borrowed tensor's bytes are.
#[derive(Clone, Copy, Debug)]
pub enum Data<'a> {
    /// Host memory.
    Host(&'a [u8]),
    /// A block of device memory (shared with the tensor's clones).
    Device(&'a Arc<DeviceBuffer>),
}

/// Where a mutably borrowed tensor's bytes are.
#[derive(Debug)]
pub enum DataMut<'a> {
    /// Host memory.
    Host(&'a mut [u8]),
    /// A block of device memory the tensor holds alone.
    Device(&'a DeviceBuffer),
}

/// A borrowed, type-erased tensor passed to a launch.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// Where kernels reading this tensor run.
    pub device: &'a Device,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data: Data<'a>,
}

impl TensorRef<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self.data {
            Data::Host(b) => b.len(),
            Data::Device(b) => b.len(),
        }
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A mutably borrowed, type-erased tensor passed to a launch.
#[derive(Debug)]
pub struct TensorMut<'a> {
    /// Where kernels writing this tensor run.
    pub device: &'a Device,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data: DataMut<'a>,
}
