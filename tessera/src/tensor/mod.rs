//! Tensors: a shape plus contiguous row-major storage, in host memory or in a device's memory.

mod display;
mod element;
pub(crate) mod host_cache;
mod host_data;
mod host_mem;
mod index;
mod random;
pub mod size;
mod storage;
mod view;

pub use element::{Element, Float, Fp8, f8e4m3, f8e5m2};
pub(crate) use host_data::{HostData, block_align};
#[cfg(test)]
pub(crate) use host_mem::HUGE_PAGE_MIN;
pub(crate) use host_mem::HostMem;
pub use storage::DeviceBuffer;
pub use view::{Data, DataMut, TensorMut, TensorRef};

use crate::{Device, Error, Result};
use std::sync::Arc;
use tessera_ir::DType;

/// A dense row-major tensor, stored where its device keeps memory: host memory on the CPU,
/// device memory on a GPU or the simulator.
///
/// Host memory the library allocates (a CPU kernel's result, [`Tensor::zeros`],
/// [`Tensor::full`], [`Tensor::arange`], [`Tensor::randn`], [`Tensor::from_slice`], a clone
/// of one of those) is 64-byte aligned from 4 KiB on, and a block of at least 1 MiB goes to
/// the host cache when dropped, for the next launch's output of that size
/// ([`crate::host_cache`]); a `Vec` given to [`Tensor::from_vec`] stays the tensor's storage
/// as it is.
///
/// ```
/// use tessera::Tensor;
/// let z = Tensor::<f32>::zeros(&[37, 300])?;
/// assert_eq!(z.as_slice()?.as_ptr() as usize % 64, 0);
/// # Ok::<(), tessera::Error>(())
/// ```
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
enum Storage<T: Element> {
    /// A `Vec` the user gave, or a block the library allocated (64-byte aligned from 4 KiB;
    /// back to the host cache, `tensor/host_cache.rs`, when dropped).
    Host(HostData<T>),
    /// Shared by clones; a writer gets its own copy first (copy on write).
    Device(Arc<DeviceBuffer>),
}

static CPU: Device = Device::Cpu;

impl<T: Element> Tensor<T> {
    /// Wraps a buffer (host memory); an error if its length is not the product of `shape`, or
    /// if that product overflows (the error names the shape).
    ///
    /// ```
    /// use tessera::Tensor;
    /// let t = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(t.get(&[1, 0])?, 3);
    /// assert!(Tensor::<f32>::from_vec(vec![], &[1 << 32, 1 << 32]).is_err());
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn from_vec(data: Vec<T>, shape: &[usize]) -> Result<Self> {
        let expected = size::numel("Tensor::from_vec", shape)?;
        if data.len() != expected {
            return Err(Error::BufferLength {
                shape: shape.to_vec(),
                expected,
                got: data.len(),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Storage::Host(HostData::Vec(data)),
        })
    }

    /// A copy of `data` in host memory, shaped `shape` (its length must be the shape's
    /// element count; other errors as [`Tensor::zeros`]).
    ///
    /// ```
    /// use tessera::Tensor;
    /// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// assert_eq!(t.get(&[2, 1])?, 6.0);
    /// assert!(Tensor::from_slice(&[1.0f32], &[2]).is_err());
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn from_slice(data: &[T], shape: &[usize]) -> Result<Self> {
        let expected = size::numel("Tensor::from_slice", shape)?;
        if data.len() != expected {
            return Err(Error::BufferLength {
                shape: shape.to_vec(),
                expected,
                got: data.len(),
            });
        }
        Ok(Self::from_host(
            shape.to_vec(),
            HostData::try_from_iter(data.len(), data.iter().copied())?,
        ))
    }

    /// A tensor of zeros in host memory. A shape whose size overflows is
    /// [`Error::TooLarge`]; memory the system refuses is [`Error::OutOfMemory`] (never an
    /// abort); an invalid `TESSERA_HOST_CACHE` is [`Error::Env`] for a tensor of at least
    /// [`crate::host_cache::MIN_BLOCK`] bytes (it may come from the [host
    /// cache](crate::host_cache)).
    ///
    /// ```
    /// use tessera::Tensor;
    /// let z = Tensor::<f32>::zeros(&[2, 3])?;
    /// assert_eq!(z.to_vec()?, vec![0.0; 6]);
    /// assert!(matches!(
    ///     Tensor::<f32>::zeros(&[1 << 20, 1 << 20]),      // 4 TiB
    ///     Err(tessera::Error::OutOfMemory { .. })
    /// ));
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn zeros(shape: &[usize]) -> Result<Self> {
        Self::full(shape, T::default())
    }

    /// A tensor of `value` everywhere, in host memory (errors as [`Tensor::zeros`]).
    ///
    /// ```
    /// use tessera::{Tensor, bf16};
    /// let t = Tensor::full(&[2, 2], bf16::from_f32(1.5))?;
    /// assert_eq!(t.to_f64_vec()?, vec![1.5; 4]);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn full(shape: &[usize], value: T) -> Result<Self> {
        let n = size::numel("Tensor::full", shape)?;
        size::byte_len("Tensor::full", shape, std::mem::size_of::<T>())?;
        let data = if bytemuck::bytes_of(&value).iter().all(|&b| b == 0) {
            HostData::try_zeroed(n)?
        } else {
            HostData::try_from_iter(n, std::iter::repeat(value))?
        };
        Ok(Self::from_host(shape.to_vec(), data))
    }

    /// `0, 1, …, n - 1` as a 1-D tensor in host memory (each rounded to `T`; errors as
    /// [`Tensor::zeros`]).
    ///
    /// ```
    /// use tessera::Tensor;
    /// let t = Tensor::<f32>::arange(5)?;
    /// assert_eq!(t.shape(), &[5]);
    /// assert_eq!(t.to_vec()?, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    /// let m = Tensor::<i32>::arange(6)?.reshape(&[2, 3])?;
    /// assert_eq!(m.get(&[1, 2])?, 5);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn arange(n: usize) -> Result<Self> {
        size::byte_len("Tensor::arange", &[n], std::mem::size_of::<T>())?;
        let data = HostData::try_from_iter(n, (0..n).map(|i| T::from_f64_round(i as f64)))?;
        Ok(Self::from_host(vec![n], data))
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
            return Self::zeros(shape);
        }
        let bytes = size::byte_len("Tensor::zeros_on", shape, std::mem::size_of::<T>())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Storage::Device(Arc::new(DeviceBuffer::zeros(device, bytes)?)),
        })
    }

    /// A tensor of `value` everywhere on `device` (one upload for a GPU or the simulator;
    /// zeros are set on the device without one).
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let dev = Device::new_sim(tessera::ir::target::ptx::Arch::Sm80);
    /// let t = Tensor::full_on(&[4], 2.5f32, &dev)?;
    /// assert_eq!(t.device(), &dev);
    /// assert_eq!(t.to_vec()?, vec![2.5; 4]);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn full_on(shape: &[usize], value: T, device: &Device) -> Result<Self> {
        if bytemuck::bytes_of(&value).iter().all(|&b| b == 0) {
            return Self::zeros_on(shape, device);
        }
        Self::full(shape, value)?.into_device(device)
    }

    /// A copy of `data` on `device`, shaped `shape` (one upload for a GPU or the simulator).
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let dev = Device::new_sim(tessera::ir::target::ptx::Arch::Sm80);
    /// let t = Tensor::from_slice_on(&[1.0f32, 2.0], &[2], &dev)?;
    /// assert_eq!((t.device(), dev.transfer_stats().uploads), (&dev, 1));
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn from_slice_on(data: &[T], shape: &[usize], device: &Device) -> Result<Self> {
        if device.is_cpu() {
            return Self::from_slice(data, shape);
        }
        let expected = size::numel("Tensor::from_slice_on", shape)?;
        if data.len() != expected {
            return Err(Error::BufferLength {
                shape: shape.to_vec(),
                expected,
                got: data.len(),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Storage::Device(Arc::new(DeviceBuffer::upload(
                device,
                bytemuck::cast_slice(data),
            )?)),
        })
    }

    /// Moves a host tensor to `device` (the same as [`Tensor::to`], consuming `self`).
    fn into_device(self, device: &Device) -> Result<Self> {
        match &self.storage {
            Storage::Host(v) if !device.is_cpu() => Self::from_slice_on(v, &self.shape, device),
            _ => self.to(device),
        }
    }

    /// Standard-normal samples from a seeded generator (same seed, same tensor, on every
    /// machine), in host memory.
    ///
    /// # Panics
    ///
    /// When the shape's size overflows, its memory cannot be allocated, or (for at least
    /// [`crate::host_cache::MIN_BLOCK`] bytes) `TESSERA_HOST_CACHE` is invalid (a
    /// convenience for tests and examples; [`Tensor::try_randn`] returns those as errors).
    ///
    /// ```
    /// use tessera::{Tensor, bf16};
    /// let a = Tensor::<bf16>::randn(&[3, 5], 7);
    /// assert_eq!(a, Tensor::<bf16>::randn(&[3, 5], 7));
    /// assert_ne!(a, Tensor::<bf16>::randn(&[3, 5], 8));
    /// ```
    pub fn randn(shape: &[usize], seed: u64) -> Self {
        Self::try_randn(shape, seed).unwrap_or_else(|e| panic!("Tensor::randn: {e}"))
    }

    /// [`Tensor::randn`], with a too-large shape, refused memory or an invalid
    /// `TESSERA_HOST_CACHE` as an error (as [`Tensor::zeros`]).
    ///
    /// ```
    /// use tessera::Tensor;
    /// assert_eq!(Tensor::<f32>::try_randn(&[4], 1)?, Tensor::randn(&[4], 1));
    /// assert!(Tensor::<f32>::try_randn(&[1 << 40, 1 << 40], 1).is_err());
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn try_randn(shape: &[usize], seed: u64) -> Result<Self> {
        let n = size::numel("Tensor::randn", shape)?;
        size::byte_len("Tensor::randn", shape, std::mem::size_of::<T>())?;
        let mut rng = random::SplitMix64::new(seed);
        let data = HostData::try_from_iter(n, (0..n).map(|_| T::from_f64_round(rng.normal())))?;
        Ok(Self::from_host(shape.to_vec(), data))
    }

    /// A tensor over host memory the launcher (or a constructor) filled, taking `data` and
    /// `shape` as they are (no copy; the caller checked the sizes when it allocated `data`).
    pub(crate) fn from_host(shape: Vec<usize>, data: HostData<T>) -> Self {
        debug_assert_eq!(data.len(), size::elements(&shape));
        Tensor {
            shape,
            storage: Storage::Host(data),
        }
    }

    /// The shape, and the elements when the tensor is in host memory (what
    /// `KernelDef::launch_into` writes into).
    pub(crate) fn host_parts_mut(&mut self) -> (&[usize], Option<&mut [T]>) {
        match &mut self.storage {
            Storage::Host(v) => (&self.shape, Some(v)),
            Storage::Device(_) => (&self.shape, None),
        }
    }

    /// A tensor over a device buffer the launcher filled.
    pub(crate) fn from_device(shape: Vec<usize>, buffer: DeviceBuffer) -> Self {
        debug_assert_eq!(
            buffer.len(),
            size::elements(&shape) * std::mem::size_of::<T>()
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

    /// Number of elements (a tensor's shape is checked when it is made, so this cannot
    /// overflow).
    pub fn numel(&self) -> usize {
        size::elements(&self.shape)
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
            (_, true) => Storage::Host(HostData::Vec(self.to_vec()?)),
            (Storage::Host(v), false) => Storage::Device(Arc::new(DeviceBuffer::upload(
                device,
                bytemuck::cast_slice(&v[..]),
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
            Storage::Host(v) => {
                let mut out = size::try_with_capacity(v.len())?;
                out.extend_from_slice(v);
                Ok(out)
            }
            Storage::Device(b) => {
                let mut out = size::try_filled(self.numel(), T::default())?;
                b.download(bytemuck::cast_slice_mut(&mut out))?;
                Ok(out)
            }
        }
    }

    /// The elements as a host vector: without a copy for a host tensor made from a `Vec`
    /// ([`Tensor::from_vec`], `From<Vec<T>>`); a kernel's output or a tensor the library
    /// allocated lives in a block of its own (see [`crate::host_cache`]) and is copied.
    ///
    /// ```
    /// use tessera::Tensor;
    /// let v = vec![1.0f32, 2.0];
    /// let p = v.as_ptr();
    /// let back = Tensor::from_vec(v, &[2])?.into_vec()?;
    /// assert_eq!((back.as_ptr(), back), (p, vec![1.0, 2.0]));
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn into_vec(self) -> Result<Vec<T>> {
        match self.storage {
            Storage::Host(v) => v.into_vec(),
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
        let expected = size::numel("Tensor::reshape", shape)?;
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
        let conv = |v: &[T]| -> Result<Vec<f64>> {
            let mut out = size::try_with_capacity(v.len())?;
            out.extend(v.iter().map(|x| x.to_f64()));
            Ok(out)
        };
        match &self.storage {
            Storage::Host(v) => conv(v),
            Storage::Device(_) => conv(&self.to_vec()?),
        }
    }

    /// A type-erased read-only view, as kernels take their inputs.
    pub fn arg(&self) -> TensorRef<'_> {
        TensorRef::new_unchecked(
            self.device(),
            T::DTYPE,
            &self.shape,
            match &self.storage {
                Storage::Host(v) => Data::Host(bytemuck::cast_slice(&v[..])),
                Storage::Device(b) => Data::Device(b),
            },
        )
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
            Storage::Host(v) => TensorMut::new_unchecked(
                &CPU,
                T::DTYPE,
                shape,
                DataMut::Host(bytemuck::cast_slice_mut(&mut v[..])),
            ),
            Storage::Device(b) => {
                let b: &DeviceBuffer = b;
                TensorMut::new_unchecked(b.device(), T::DTYPE, shape, DataMut::Device(b))
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
            (Storage::Host(a), Storage::Host(b)) => a[..] == b[..],
            (Storage::Device(a), Storage::Device(b)) if Arc::ptr_eq(a, b) => true,
            _ => matches!((self.to_vec(), o.to_vec()), (Ok(a), Ok(b)) if a == b),
        }
    }
}
