//! Where a tensor's elements live: host memory, or a block of a device's memory.

use crate::{Device, Error, Result};
use std::fmt;

/// A block of device memory holding one tensor's elements, taken from the device's caching
/// allocator and handed back to it when the last tensor sharing it is dropped.
pub struct DeviceBuffer {
    device: Device,
    addr: u64,
    len: usize,
}

impl DeviceBuffer {
    /// `len` bytes of uninitialized memory on `device` (a GPU or the simulator).
    pub(crate) fn alloc(device: &Device, len: usize) -> Result<DeviceBuffer> {
        let g = device.gpu().ok_or_else(|| not_a_gpu(device))?;
        Ok(DeviceBuffer {
            device: device.clone(),
            addr: g.alloc(len)?,
            len,
        })
    }

    /// `len` bytes of zeros on `device`, set on the device (no transfer).
    pub(crate) fn zeros(device: &Device, len: usize) -> Result<DeviceBuffer> {
        let b = Self::alloc(device, len)?;
        b.gpu().zero(b.addr, len)?;
        Ok(b)
    }

    /// A copy of `bytes` on `device`: one upload.
    pub(crate) fn upload(device: &Device, bytes: &[u8]) -> Result<DeviceBuffer> {
        let b = Self::alloc(device, bytes.len())?;
        if !bytes.is_empty() {
            b.gpu().upload(b.addr, bytes)?;
        }
        Ok(b)
    }

    /// Copies the bytes to `out` (one download; waits for the work queued before it).
    pub(crate) fn download(&self, out: &mut [u8]) -> Result<()> {
        debug_assert_eq!(out.len(), self.len);
        if self.len == 0 {
            return Ok(());
        }
        self.gpu().download(self.addr, out)
    }

    /// Copies the `out.len()` bytes at byte `offset` to `out` (one download); an error when
    /// they are not inside the block.
    pub(crate) fn download_range(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(Error::Unsupported {
                device: self.device.to_string(),
                message: format!(
                    "{} bytes at offset {offset} are outside a block of {} bytes",
                    out.len(),
                    self.len
                ),
            });
        }
        if out.is_empty() {
            return Ok(());
        }
        self.gpu().download(self.addr + offset as u64, out)
    }

    /// A copy in a new block of the same device (a copy inside device memory).
    pub(crate) fn duplicate(&self) -> Result<DeviceBuffer> {
        let b = Self::alloc(&self.device, self.len)?;
        if self.len > 0 {
            self.gpu().copy(b.addr, self.addr, self.len)?;
        }
        Ok(b)
    }

    fn gpu(&self) -> &dyn crate::backend::gpu::GpuOps {
        self.device
            .gpu()
            .expect("a device buffer lives on a GPU device")
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device address of its first byte.
    pub fn address(&self) -> u64 {
        self.addr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(g) = self.device.gpu() {
            g.release(self.addr);
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes at {:#x} on {}",
            self.len, self.addr, self.device
        )
    }
}

pub(crate) fn not_a_gpu(device: &Device) -> Error {
    Error::Unsupported {
        device: device.to_string(),
        message: "has no device memory (tensors on it live in host memory)".into(),
    }
}
