//! Borrowed, type-erased views of a tensor as launches take them: a device, an element type,
//! a shape and the bytes. Their fields are private and the constructors check that the shape
//! fits the bytes and the bytes live on the device, so a kernel never reads past a buffer.

use super::{DeviceBuffer, size};
use crate::{Device, Error, Result};
use std::sync::Arc;
use tessera_ir::DType;

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

/// A borrowed, type-erased tensor passed to a launch ([`crate::Tensor::arg`] makes one).
///
/// ```
/// use tessera::{DType, Data, Device, TensorRef};
/// let bytes = [0u8; 24];
/// let cpu = Device::cpu();
/// let v = TensorRef::new(&cpu, DType::F32, &[2, 3], Data::Host(&bytes))?;
/// assert_eq!((v.shape(), v.len()), (&[2usize, 3][..], 24));
/// // A shape that needs more bytes than the buffer holds is an error, not a bad read.
/// assert!(TensorRef::new(&cpu, DType::F32, &[4, 3], Data::Host(&bytes)).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    device: &'a Device,
    dtype: DType,
    shape: &'a [usize],
    data: Data<'a>,
}

impl<'a> TensorRef<'a> {
    /// A view of `data` as a `dtype` tensor of `shape` on `device`: an error unless the bytes
    /// are exactly the shape's size and live on `device` (host bytes on the CPU, a block of
    /// that device otherwise).
    pub fn new(
        device: &'a Device,
        dtype: DType,
        shape: &'a [usize],
        data: Data<'a>,
    ) -> Result<Self> {
        let (len, on) = match data {
            Data::Host(b) => (b.len(), None),
            Data::Device(b) => (b.len(), Some(b.device())),
        };
        check(device, dtype, shape, len, on)?;
        Ok(TensorRef {
            device,
            dtype,
            shape,
            data,
        })
    }

    /// [`TensorRef::new`] without the check, for views the crate builds from a tensor or from
    /// a view already checked (its bytes moved to another device): the caller guarantees the
    /// invariant, which debug builds assert.
    pub(crate) fn new_unchecked(
        device: &'a Device,
        dtype: DType,
        shape: &'a [usize],
        data: Data<'a>,
    ) -> Self {
        debug_assert!(TensorRef::new(device, dtype, shape, data).is_ok());
        TensorRef {
            device,
            dtype,
            shape,
            data,
        }
    }

    /// Where kernels reading this tensor run.
    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, outermost first.
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// The bytes.
    pub fn data(&self) -> Data<'a> {
        self.data
    }

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

/// A mutably borrowed, type-erased tensor passed to a launch ([`crate::Tensor::arg_mut`]).
///
/// ```
/// use tessera::{DType, DataMut, Device, TensorMut};
/// let mut bytes = [0u8; 8];
/// let cpu = Device::cpu();
/// let v = TensorMut::new(&cpu, DType::BF16, &[4], DataMut::Host(&mut bytes))?;
/// assert_eq!(v.shape(), &[4]);
/// assert!(TensorMut::new(&cpu, DType::F32, &[4], DataMut::Host(&mut bytes)).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Debug)]
pub struct TensorMut<'a> {
    device: &'a Device,
    dtype: DType,
    shape: &'a [usize],
    data: DataMut<'a>,
}

impl<'a> TensorMut<'a> {
    /// A writable view; checked as [`TensorRef::new`].
    pub fn new(
        device: &'a Device,
        dtype: DType,
        shape: &'a [usize],
        data: DataMut<'a>,
    ) -> Result<Self> {
        let (len, on) = match &data {
            DataMut::Host(b) => (b.len(), None),
            DataMut::Device(b) => (b.len(), Some(b.device())),
        };
        check(device, dtype, shape, len, on)?;
        Ok(TensorMut {
            device,
            dtype,
            shape,
            data,
        })
    }

    /// [`TensorMut::new`] without the check (see [`TensorRef::new_unchecked`]).
    pub(crate) fn new_unchecked(
        device: &'a Device,
        dtype: DType,
        shape: &'a [usize],
        data: DataMut<'a>,
    ) -> Self {
        if cfg!(debug_assertions) {
            let (len, on) = match &data {
                DataMut::Host(b) => (b.len(), None),
                DataMut::Device(b) => (b.len(), Some(b.device())),
            };
            debug_assert!(check(device, dtype, shape, len, on).is_ok());
        }
        TensorMut {
            device,
            dtype,
            shape,
            data,
        }
    }

    /// The bytes, read-only.
    pub(crate) fn data(&self) -> &DataMut<'a> {
        &self.data
    }

    /// The bytes, reborrowed for writing: the view's length and placement cannot change.
    pub(crate) fn data_mut(&mut self) -> DataMut<'_> {
        match &mut self.data {
            DataMut::Host(b) => DataMut::Host(b),
            DataMut::Device(b) => DataMut::Device(b),
        }
    }

    /// Where kernels writing this tensor run.
    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, outermost first.
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.data {
            DataMut::Host(b) => b.len(),
            DataMut::Device(b) => b.len(),
        }
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The view invariant: `len` bytes are exactly `shape` of `dtype`, and they live on `device`
/// (`on` is the device of a device block, `None` for host bytes).
fn check(
    device: &Device,
    dtype: DType,
    shape: &[usize],
    len: usize,
    on: Option<&Device>,
) -> Result<()> {
    let need = size::byte_len("tensor view", shape, dtype.size_bytes())?;
    if need != len {
        return Err(Error::ViewLength {
            shape: shape.to_vec(),
            dtype: dtype.to_string(),
            expected: need,
            got: len,
        });
    }
    let placed = match on {
        None => device.is_cpu(),
        Some(d) => d == device,
    };
    if !placed {
        return Err(Error::Unsupported {
            device: device.to_string(),
            message: format!(
                "a view's bytes are on {}, not on the view's device",
                on.map_or("the host".to_string(), |d| d.to_string())
            ),
        });
    }
    Ok(())
}
