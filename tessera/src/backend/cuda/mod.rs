//! The CUDA backend: the generic device layer's `Api` over the driver API, through cudarc
//! (loaded at run time: building needs no CUDA toolkit).
//!
//! Layers, as in cudarc: `cudarc::driver::sys` (raw bindings, dynamically loaded) →
//! `cudarc::driver::result` (thin `Result` wrappers: the raw-address copies, memset) →
//! `cudarc::driver` safe types (context, the device's own stream, `CudaSlice` blocks, modules,
//! events) → `CudaApi` (this file) → `backend::gpu::GpuDevice` (allocator, counters, launch
//! marshalling, shared with the simulator). The driver library is probed with
//! `is_culib_present()` before anything that could panic, so a machine without a driver gets
//! an [`Error::DeviceUnavailable`], never a panic.
//!
//! Every operation is enqueued on the device's stream (`cuMemcpyHtoDAsync`, `cuLaunchKernel`,
//! …) and returns without waiting, except `download` and `synchronize`. Blocks are allocated
//! with `cuMemAllocAsync` on that stream where the driver supports it.

use crate::backend::gpu::{Api, DeviceArg, GpuDevice, LaunchDims, ParamValue};
use crate::{Error, Result};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg, result, sys,
};
use std::sync::Arc;
use tessera_ir::target::ptx::{Arch, PtxKernel};

/// True when the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    unsafe { sys::is_culib_present() }
}

/// An opened GPU: its context and the stream every operation of this device goes to.
pub(crate) struct CudaApi {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

/// A device allocation and its address.
pub(crate) struct CudaBlock {
    slice: CudaSlice<u8>,
    addr: u64,
}

fn unavailable(e: impl std::fmt::Display) -> Error {
    Error::DeviceUnavailable(e.to_string())
}

impl CudaApi {
    /// Opens GPU `ordinal` as a device of the generic layer.
    pub fn open(ordinal: usize) -> Result<GpuDevice<CudaApi>> {
        if !driver_present() {
            return Err(Error::DeviceUnavailable(
                "no CUDA driver (libcuda.so) found on this machine".into(),
            ));
        }
        let n = CudaContext::device_count().map_err(unavailable)?;
        if ordinal >= n.max(0) as usize {
            return Err(Error::DeviceUnavailable(format!(
                "cuda:{ordinal} requested but the driver reports {n} device(s)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(unavailable)?;
        let (major, minor) = ctx.compute_capability().map_err(unavailable)?;
        let arch = match (major, minor) {
            (8, 0) | (8, 6) | (8, 7) => Some(Arch::Sm80),
            (8, 9) => Some(Arch::Sm89),
            (9, 0) => Some(Arch::Sm90a),
            _ => None,
        };
        // One stream per device orders everything; cudarc's per-slice events (for several
        // streams sharing buffers) are not needed.
        // SAFETY: no slice of this context exists yet.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(unavailable)?;
        let api = CudaApi {
            ordinal,
            ctx,
            stream,
        };
        Ok(GpuDevice::new(api, format!("cuda:{ordinal}"), arch))
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::Unsupported {
            device: format!("cuda:{}", self.ordinal),
            message: e.to_string(),
        }
    }

    fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| self.err(e))
    }
}

impl Api for CudaApi {
    type Block = CudaBlock;
    type Module = CudaFunction;
    type Event = CudaEvent;

    fn alloc(&self, bytes: usize) -> Result<CudaBlock> {
        // SAFETY: the block is written (by a copy or a kernel) before it is read; the launcher
        // never reads an output it has not written.
        let slice = unsafe { self.stream.alloc::<u8>(bytes) }.map_err(|e| self.err(e))?;
        let addr = {
            let (p, _sync) = slice.device_ptr(&self.stream);
            p
        };
        Ok(CudaBlock { slice, addr })
    }

    fn address(&self, b: &CudaBlock) -> u64 {
        b.addr
    }

    fn free(&self, b: CudaBlock) {
        // cudarc frees on the block's stream (`cuMemFreeAsync`) when the slice drops.
        drop(b.slice);
    }

    fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` is inside a live block of this context (the caller's tensor); a copy
        // from pageable memory has read `src` when it returns.
        unsafe { result::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))
    }

    fn download(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        self.bind()?;
        // SAFETY: `src` is inside a live block; the stream is synchronized before `dst` is used.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))?;
        self.stream.synchronize().map_err(|e| self.err(e))
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.bind()?;
        // SAFETY: both ranges are inside live blocks of this context.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))
    }

    fn zero(&self, dst: u64, bytes: usize) -> Result<()> {
        self.bind()?;
        // SAFETY: the range is inside a live block of this context.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))
    }

    fn load(&self, k: &PtxKernel) -> Result<CudaFunction> {
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(k.text.clone()))
            .map_err(|e| self.err(format!("loading PTX of {}: {e}", k.entry)))?;
        let f = module
            .load_function(&k.entry)
            .map_err(|e| self.err(format!("{}: {e}", k.entry)))?;
        if k.dyn_smem > 48 * 1024 {
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                k.dyn_smem as i32,
            )
            .map_err(|e| {
                self.err(format!(
                    "{} needs {} B of shared memory: {e}",
                    k.entry, k.dyn_smem
                ))
            })?;
        }
        Ok(f)
    }

    fn launch(
        &self,
        f: &CudaFunction,
        _k: &PtxKernel,
        dims: LaunchDims,
        params: &[ParamValue],
        _args: &[DeviceArg],
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (dims.grid[0], dims.grid[1], dims.grid[2]),
            block_dim: (dims.block[0], dims.block[1], dims.block[2]),
            shared_mem_bytes: dims.dyn_smem,
        };
        let mut b = self.stream.launch_builder(f);
        for p in params {
            match p {
                ParamValue::Ptr(a) => b.arg(a),
                ParamValue::U32(d) => b.arg(d),
            };
        }
        // SAFETY: the parameter block follows the kernel ABI (`backend::gpu::launch`), and
        // every pointer is inside a live block of this context for the launch's arguments.
        unsafe { b.launch(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    fn record(&self) -> Result<CudaEvent> {
        self.stream
            .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| self.err(e))
    }

    fn elapsed(&self, start: &CudaEvent, end: &CudaEvent) -> Result<Option<f64>> {
        end.synchronize().map_err(|e| self.err(e))?;
        let ms = start.elapsed_ms(end).map_err(|e| self.err(e))?;
        Ok(Some(ms as f64 * 1e-3))
    }

    fn wait(&self, e: &CudaEvent) -> Result<()> {
        e.synchronize().map_err(|e| self.err(e))
    }

    fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| self.err(e))
    }
}
