//! The device layer shared by every PTX device (a CUDA GPU, the simulator): device memory
//! behind a caching allocator, host↔device transfers with counters, one in-order stream per
//! device with events, module loading and launch marshalling per the kernel ABI.
//!
//! As in wgpu-hal, a backend implements one small trait, `Api` (allocate, free, copy, load a
//! module, launch, record an event, synchronize), and everything else — the allocator
//! (`alloc`), the counters ([`stats`]), the parameter block and grid of a launch
//! (`launch`), the module cache — is written once here, in `GpuDevice`. The simulator's
//! `Api` (`backend::sim::device`) runs in every test on a CPU machine, so this layer is
//! exercised there exactly as the CUDA backend (`backend::cuda`) uses it on a GPU.
//!
//! Type erasure: `GpuOps` is the object-safe face of a `GpuDevice<A>`, so a
//! [`crate::Device`] and the tensors on it hold `Arc<dyn GpuOps>`-like handles without
//! naming the backend.

pub(crate) mod alloc;
mod launch;
pub mod stats;

use crate::{Error, Result};
use stats::{Counters, DeviceStats, MemoryStats, TransferStats};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tessera_ir::DType;
use tessera_ir::target::ptx::{Arch, PtxKernel};

pub(crate) use launch::ParamValue;

/// A kernel argument in device memory, as the launcher hands it to a device (crate-internal:
/// launches take tensors, never raw device addresses).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceArg {
    /// The element type.
    pub dtype: DType,
    /// The shape at the kernel parameter's view rank.
    pub shape: [usize; 3],
    /// How many of `shape`'s dims are the view's (at most 3); the rest are 1.
    pub rank: usize,
    /// Device address of the first element.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// True for an output (the kernel may write it).
    pub writable: bool,
}

impl DeviceArg {
    /// The view's dims.
    pub(crate) fn dims(&self) -> &[usize] {
        &self.shape[..self.rank]
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dyn_smem: u32,
}

/// What a device backend implements. Every operation is enqueued on the device's one stream
/// in call order; `download` and `synchronize` return when the work before them is done.
pub(crate) trait Api: Send + Sync + 'static {
    /// An owned allocation.
    type Block: Send;
    /// A loaded kernel.
    type Module: Send + Sync;
    /// A point in the stream.
    type Event: Send + Sync + 'static;

    /// Allocates `bytes` (a bucket size) of device memory.
    fn alloc(&self, bytes: usize) -> Result<Self::Block>;
    /// The device address of a block.
    fn address(&self, b: &Self::Block) -> u64;
    /// Returns a block to the device.
    fn free(&self, b: Self::Block);
    /// Host → device, `src.len()` bytes at `dst`.
    fn upload(&self, dst: u64, src: &[u8]) -> Result<()>;
    /// Device → host; the bytes are in `dst` when it returns.
    fn download(&self, src: u64, dst: &mut [u8]) -> Result<()>;
    /// Device → device.
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()>;
    /// Sets `bytes` at `dst` to zero.
    fn zero(&self, dst: u64, bytes: usize) -> Result<()>;
    /// Loads a module and finds its entry.
    fn load(&self, k: &PtxKernel) -> Result<Self::Module>;
    /// Enqueues one launch. `params` is the parameter block per the kernel ABI; `args` are the
    /// tensors those pointers point into (for backends that check accesses).
    fn launch(
        &self,
        m: &Self::Module,
        k: &PtxKernel,
        dims: LaunchDims,
        params: &[ParamValue],
        args: &[DeviceArg],
    ) -> Result<()>;
    /// Records an event at the current point of the stream.
    fn record(&self) -> Result<Self::Event>;
    /// Seconds between two events, waiting for `end`; `None` where the device has no clock.
    fn elapsed(&self, start: &Self::Event, end: &Self::Event) -> Result<Option<f64>>;
    /// Waits until `e` has happened.
    fn wait(&self, e: &Self::Event) -> Result<()>;
    /// Waits until every enqueued operation has finished.
    fn synchronize(&self) -> Result<()>;
}

/// One opened PTX device: its backend, allocator, counters and loaded modules.
pub(crate) struct GpuDevice<A: Api> {
    api: A,
    label: String,
    arch: Option<Arch>,
    pool: Mutex<alloc::Pool<A::Block>>,
    counters: Counters,
    modules: Mutex<HashMap<(u64, usize, String), Arc<A::Module>>>,
}

impl<A: Api> GpuDevice<A> {
    pub fn new(api: A, label: String, arch: Option<Arch>) -> Self {
        GpuDevice {
            api,
            label,
            arch,
            pool: Mutex::new(alloc::Pool::new()),
            counters: Counters::default(),
            modules: Mutex::new(HashMap::new()),
        }
    }

    pub fn api(&self) -> &A {
        &self.api
    }

    fn pool(&self) -> MutexGuard<'_, alloc::Pool<A::Block>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn module(&self, k: &PtxKernel) -> Result<Arc<A::Module>> {
        let key = (fnv(k.text.as_bytes()), k.text.len(), k.entry.clone());
        let mut m = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = m.get(&key) {
            return Ok(x.clone());
        }
        let x = Arc::new(self.api.load(k)?);
        m.insert(key, x.clone());
        Ok(x)
    }
}

impl<A: Api> Drop for GpuDevice<A> {
    fn drop(&mut self) {
        let blocks = self.pool().drain_all();
        for b in blocks {
            self.api.free(b);
        }
    }
}

/// The object-safe face of a [`GpuDevice`].
pub(crate) trait GpuOps: Send + Sync {
    /// `sim:sm_80`, `cuda:0`.
    fn label(&self) -> &str;
    fn arch(&self) -> Option<Arch>;
    /// A block of at least `bytes` from the cache or the device; returns its address.
    fn alloc(&self, bytes: usize) -> Result<u64>;
    /// Hands the block at `addr` back to the cache.
    fn release(&self, addr: u64);
    fn upload(&self, dst: u64, src: &[u8]) -> Result<()>;
    fn download(&self, src: u64, dst: &mut [u8]) -> Result<()>;
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()>;
    fn zero(&self, dst: u64, bytes: usize) -> Result<()>;
    /// Enqueues `k` over `args` (per the kernel ABI); with `timed`, returns the kernel's
    /// seconds measured by events (waiting for it) where the device has a clock.
    fn launch(&self, k: &PtxKernel, args: &[DeviceArg], timed: bool) -> Result<Option<f64>>;
    fn record(&self) -> Result<Box<dyn Any + Send + Sync>>;
    fn elapsed(&self, start: &dyn Any, end: &dyn Any) -> Result<Option<f64>>;
    fn wait(&self, e: &dyn Any) -> Result<()>;
    fn synchronize(&self) -> Result<()>;
    fn stats(&self) -> DeviceStats;
    fn reset_stats(&self);
    fn empty_cache(&self);
}

impl<A: Api> GpuOps for GpuDevice<A> {
    fn label(&self) -> &str {
        &self.label
    }

    fn arch(&self) -> Option<Arch> {
        self.arch
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        let size = alloc::bucket(bytes).ok_or(Error::OutOfMemory { bytes })?;
        let mut pool = self.pool();
        if let Some(b) = pool.take_free(size) {
            let addr = self.api.address(&b);
            pool.mark_used(addr, b, size, true);
            return Ok(addr);
        }
        let b = match self.api.alloc(size) {
            Ok(b) => b,
            Err(first) => {
                // Out of memory with blocks parked in the cache: give them back and retry.
                let parked = pool.drain_free();
                if parked.is_empty() {
                    return Err(first);
                }
                for b in parked {
                    self.api.free(b);
                }
                self.api.alloc(size)?
            }
        };
        let addr = self.api.address(&b);
        pool.mark_used(addr, b, size, false);
        Ok(addr)
    }

    fn release(&self, addr: u64) {
        self.pool().release(addr);
    }

    fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.api.upload(dst, src)?;
        self.counters.upload(src.len());
        Ok(())
    }

    fn download(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        self.api.download(src, dst)?;
        self.counters.download(dst.len());
        Ok(())
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.api.copy(dst, src, bytes)?;
        self.counters.device_copy();
        Ok(())
    }

    fn zero(&self, dst: u64, bytes: usize) -> Result<()> {
        self.api.zero(dst, bytes)
    }

    fn launch(&self, k: &PtxKernel, args: &[DeviceArg], timed: bool) -> Result<Option<f64>> {
        let Some((dims, params)) = launch::marshal(&self.label, k, args)? else {
            // An empty grid: nothing to run.
            return Ok(timed.then_some(0.0));
        };
        let m = self.module(k)?;
        let start = if timed {
            Some(self.api.record()?)
        } else {
            None
        };
        self.api.launch(&m, k, dims, &params, args)?;
        self.counters.launch();
        match start {
            Some(s) => {
                let end = self.api.record()?;
                self.api.elapsed(&s, &end)
            }
            None => Ok(None),
        }
    }

    fn record(&self) -> Result<Box<dyn Any + Send + Sync>> {
        Ok(Box::new(self.api.record()?))
    }

    fn elapsed(&self, start: &dyn Any, end: &dyn Any) -> Result<Option<f64>> {
        let (Some(s), Some(e)) = (
            start.downcast_ref::<A::Event>(),
            end.downcast_ref::<A::Event>(),
        ) else {
            return Err(self.foreign_event());
        };
        self.api.elapsed(s, e)
    }

    fn wait(&self, e: &dyn Any) -> Result<()> {
        let e = e
            .downcast_ref::<A::Event>()
            .ok_or_else(|| self.foreign_event())?;
        self.api.wait(e)
    }

    fn synchronize(&self) -> Result<()> {
        self.api.synchronize()
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            transfers: self.counters.transfers(),
            memory: self.pool().stats(),
            launches: self.counters.launches(),
        }
    }

    fn reset_stats(&self) {
        self.counters.reset();
        self.pool().reset_counters();
    }

    fn empty_cache(&self) {
        let blocks = self.pool().drain_free();
        for b in blocks {
            self.api.free(b);
        }
    }
}

impl<A: Api> GpuDevice<A> {
    fn foreign_event(&self) -> Error {
        Error::Unsupported {
            device: self.label.clone(),
            message: "the event was recorded on another device".into(),
        }
    }
}

/// Statistics of no device (the CPU moves nothing).
pub(crate) fn no_stats() -> DeviceStats {
    DeviceStats {
        transfers: TransferStats::default(),
        memory: MemoryStats::default(),
        launches: 0,
    }
}

/// FNV-1a (module cache keys).
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
