//! The simulator as a device: its own device memory (blocks at simulated addresses, with
//! host↔device transfer counters of its own) and launches that run the PTX on those blocks.
//! Implements [`Api`], so the generic device layer (`backend::gpu`) drives it exactly as it
//! drives a CUDA GPU.
//!
//! The stream is synchronous: an operation is complete when its call returns, so a checker
//! finding is the error of the launch that caused it (on a GPU, a fault surfaces at the next
//! synchronizing call). Events are sequence numbers; the simulator has no clock.

use super::Checks;
use crate::backend::Buffer;
use crate::backend::gpu::stats::TransferStats;
use crate::backend::gpu::{Api, DeviceArg, LaunchDims, ParamValue};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tessera_ir::target::ptx::PtxKernel;

/// First simulated device address; blocks follow, 256-byte aligned (as `cudaMalloc`), with a
/// 256-byte gap after each so an access past a block's end lands in no block.
const BASE: u64 = 1 << 32;
const ALIGN: u64 = 256;

/// Simulated device memory: blocks by base address.
struct Memory {
    blocks: BTreeMap<u64, Vec<u64>>,
    next: u64,
    transfers: TransferStats,
}

impl Memory {
    /// The block holding `[addr, addr + n)`: its base and the storage.
    fn find(&mut self, addr: u64, n: usize) -> Result<(u64, &mut Vec<u64>)> {
        let (base, block) = self
            .blocks
            .range_mut(..=addr)
            .next_back()
            .ok_or_else(|| bad_address(addr, n))?;
        if addr - base + n as u64 > (block.len() * 8) as u64 {
            return Err(bad_address(addr, n));
        }
        Ok((*base, block))
    }

    fn bytes(&mut self, addr: u64, n: usize) -> Result<&mut [u8]> {
        let (base, block) = self.find(addr, n)?;
        let off = (addr - base) as usize;
        Ok(&mut bytemuck::cast_slice_mut::<u64, u8>(block)[off..off + n])
    }
}

fn bad_address(addr: u64, n: usize) -> Error {
    Error::Unsupported {
        device: "sim".into(),
        message: format!("{n} bytes at {addr:#x} are not inside one allocation"),
    }
}

/// The simulator's [`Api`].
pub(crate) struct SimApi {
    mem: Mutex<Memory>,
    events: AtomicU64,
}

impl SimApi {
    pub fn new() -> Self {
        SimApi {
            mem: Mutex::new(Memory {
                blocks: BTreeMap::new(),
                next: BASE,
                transfers: TransferStats::default(),
            }),
            events: AtomicU64::new(0),
        }
    }

    fn mem(&self) -> MutexGuard<'_, Memory> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The transfers the simulated memory itself counted.
    pub fn transfers(&self) -> TransferStats {
        self.mem().transfers
    }
}

/// A simulated block: its address and size.
pub(crate) struct SimBlock {
    addr: u64,
}

impl Api for SimApi {
    type Block = SimBlock;
    type Module = ();
    type Event = u64;

    fn alloc(&self, bytes: usize) -> Result<SimBlock> {
        let block = crate::tensor::size::try_filled(bytes.div_ceil(8), 0u64)?;
        let mut m = self.mem();
        let addr = m.next;
        m.next = (bytes as u64)
            .div_ceil(ALIGN)
            .checked_mul(ALIGN)
            .and_then(|b| b.checked_add(ALIGN))
            .and_then(|b| addr.checked_add(b))
            .ok_or(Error::OutOfMemory { bytes })?;
        m.blocks.insert(addr, block);
        Ok(SimBlock { addr })
    }

    fn address(&self, b: &SimBlock) -> u64 {
        b.addr
    }

    fn free(&self, b: SimBlock) {
        self.mem().blocks.remove(&b.addr);
    }

    fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        let mut m = self.mem();
        m.bytes(dst, src.len())?.copy_from_slice(src);
        m.transfers.uploads += 1;
        m.transfers.bytes_up += src.len() as u64;
        Ok(())
    }

    fn download(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        let mut m = self.mem();
        dst.copy_from_slice(m.bytes(src, dst.len())?);
        m.transfers.downloads += 1;
        m.transfers.bytes_down += dst.len() as u64;
        Ok(())
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        let mut m = self.mem();
        let data = m.bytes(src, bytes)?.to_vec();
        m.bytes(dst, bytes)?.copy_from_slice(&data);
        m.transfers.device_copies += 1;
        Ok(())
    }

    fn zero(&self, dst: u64, bytes: usize) -> Result<()> {
        self.mem().bytes(dst, bytes)?.fill(0);
        Ok(())
    }

    fn load(&self, _k: &PtxKernel) -> Result<()> {
        // Parsed (and cached by text) at launch.
        Ok(())
    }

    fn launch(
        &self,
        _m: &(),
        k: &PtxKernel,
        _dims: LaunchDims,
        _params: &[ParamValue],
        args: &[DeviceArg],
    ) -> Result<()> {
        let mut m = self.mem();
        let mut bufs = Vec::with_capacity(args.len());
        for a in args {
            let bytes = m.bytes(a.addr, a.len)?;
            bufs.push(Buffer {
                dtype: a.dtype,
                shape: a.shape,
                rank: a.rank,
                ptr: bytes.as_mut_ptr(),
                len: a.len,
                writable: a.writable,
            });
        }
        // The memory stays locked while the launch runs: its blocks are what `bufs` point at.
        super::run_with(k, &bufs, Checks::default()).map(drop)
    }

    fn record(&self) -> Result<u64> {
        Ok(self.events.fetch_add(1, Ordering::SeqCst))
    }

    fn elapsed(&self, _start: &u64, _end: &u64) -> Result<Option<f64>> {
        Ok(None)
    }

    fn wait(&self, _e: &u64) -> Result<()> {
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
