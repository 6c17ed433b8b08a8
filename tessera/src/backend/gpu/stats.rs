//! What a device has done: host↔device transfers, kernel launches, and its caching allocator's
//! state. Read them with [`crate::Device::stats`] to check your own code's traffic.

use std::sync::atomic::{AtomicU64, Ordering};

/// Host↔device traffic of a device since it was opened or its counters were reset.
///
/// ```
/// use tessera::{Device, Tensor};
/// let dev = Device::new_sim(tessera::ir::target::ptx::Arch::Sm80);
/// let x = Tensor::<f32>::randn(&[8, 8], 1).to(&dev)?;  // one upload of 256 bytes
/// let _ = x.to_vec()?;                                 // one download
/// let t = dev.transfer_stats();
/// assert_eq!((t.uploads, t.bytes_up, t.downloads, t.bytes_down), (1, 256, 1, 256));
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransferStats {
    /// Host → device copies.
    pub uploads: u64,
    /// Device → host copies.
    pub downloads: u64,
    /// Copies inside the device's memory (copy-on-write of a shared device tensor).
    pub device_copies: u64,
    /// Bytes copied host → device.
    pub bytes_up: u64,
    /// Bytes copied device → host.
    pub bytes_down: u64,
}

/// The caching allocator's counters (cumulative since the last reset) and gauges (now).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemoryStats {
    /// Allocation requests served.
    pub allocations: u64,
    /// Requests that asked the device for new memory (the cache had no block of the size).
    pub device_allocations: u64,
    /// Requests served by a cached block freed earlier.
    pub reuses: u64,
    /// Blocks handed back to the cache.
    pub releases: u64,
    /// Cached blocks returned to the device ([`crate::Device::empty_cache`], or to retry an
    /// allocation the device refused).
    pub device_frees: u64,
    /// Bytes of the blocks in use now (bucket sizes).
    pub bytes_in_use: u64,
    /// Bytes of the free blocks the cache holds now.
    pub bytes_cached: u64,
    /// Most bytes in use at once.
    pub peak_bytes_in_use: u64,
}

/// Everything a device counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceStats {
    /// Uploads, downloads and copies inside the device.
    pub transfers: TransferStats,
    /// The caching allocator's state.
    pub memory: MemoryStats,
    /// Kernels launched.
    pub launches: u64,
}

/// Lock-free counters behind [`TransferStats`] and the launch count.
#[derive(Default)]
pub(crate) struct Counters {
    uploads: AtomicU64,
    downloads: AtomicU64,
    device_copies: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    launches: AtomicU64,
}

impl Counters {
    pub fn upload(&self, bytes: usize) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
        self.bytes_up.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn download(&self, bytes: usize) {
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.bytes_down.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn device_copy(&self) {
        self.device_copies.fetch_add(1, Ordering::Relaxed);
    }

    pub fn launch(&self) {
        self.launches.fetch_add(1, Ordering::Relaxed);
    }

    pub fn transfers(&self) -> TransferStats {
        TransferStats {
            uploads: self.uploads.load(Ordering::Relaxed),
            downloads: self.downloads.load(Ordering::Relaxed),
            device_copies: self.device_copies.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }

    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    pub fn reset(&self) {
        for c in [
            &self.uploads,
            &self.downloads,
            &self.device_copies,
            &self.bytes_up,
            &self.bytes_down,
            &self.launches,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}
