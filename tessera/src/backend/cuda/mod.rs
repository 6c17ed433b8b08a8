//! The CUDA backend: runs emitted PTX through the driver API (`cudarc`, loaded at run time).
//!
//! Layers, as in cudarc: `cudarc::driver::sys` (raw, dynamically loaded) → `cudarc::driver`
//! (safe context/stream/module) → this module (PTX kernels over Tessera buffers). The driver
//! library is probed with `is_culib_present()` before anything that could panic, so a machine
//! without a driver gets an [`Error::DeviceUnavailable`], never a panic.

use crate::backend::Buffer;
use crate::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tessera_ir::target::ptx::{Arch, PtxKernel};

/// True when the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// An opened GPU: context, stream, and the modules loaded so far.
pub struct CudaDevice {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<cudarc::driver::CudaStream>,
    arch: Option<Arch>,
    name: String,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} ({})", self.ordinal, self.name)
    }
}

fn unavailable(e: impl std::fmt::Display) -> Error {
    Error::DeviceUnavailable(e.to_string())
}

impl CudaDevice {
    /// Opens GPU `ordinal`.
    pub fn open(ordinal: usize) -> Result<Arc<CudaDevice>> {
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
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let stream = ctx.default_stream();
        Ok(Arc::new(CudaDevice {
            ordinal,
            ctx,
            stream,
            arch,
            name,
            functions: Mutex::new(HashMap::new()),
        }))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The PTX architecture this GPU runs, when it is one we emit for.
    pub fn arch(&self) -> Option<Arch> {
        self.arch
    }

    fn function(&self, k: &PtxKernel) -> Result<CudaFunction> {
        let key = format!("{}#{:x}", k.entry, fxhash(&k.text));
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(&key) {
            return Ok(f.clone());
        }
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(k.text.clone()))
            .map_err(|e| Error::Unsupported {
                device: format!("cuda:{}", self.ordinal),
                message: format!("loading PTX of {}: {e}", k.entry),
            })?;
        let f = module
            .load_function(&k.entry)
            .map_err(|e| Error::Unsupported {
                device: format!("cuda:{}", self.ordinal),
                message: format!("{}: {e}", k.entry),
            })?;
        if k.dyn_smem > 48 * 1024 {
            f.set_attribute(cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.dyn_smem as i32)
                .map_err(|e| Error::Unsupported { device: format!("cuda:{}", self.ordinal), message: format!("{} needs {} B of shared memory: {e}", k.entry, k.dyn_smem) })?;
        }
        cache.insert(key, f.clone());
        Ok(f)
    }

    /// Runs `k` on host buffers: copies every argument to the GPU, launches with the grid,
    /// block and shared memory the kernel implies, copies writable arguments back. Returns the
    /// kernel time in milliseconds, measured with CUDA events.
    pub(crate) fn run(&self, k: &PtxKernel, args: &[Buffer]) -> Result<f32> {
        let dev = |e: cudarc::driver::DriverError| Error::Unsupported {
            device: format!("cuda:{}", self.ordinal),
            message: e.to_string(),
        };
        let f = self.function(k)?;
        let stream: &Arc<CudaStream> = &self.stream;
        let mut slices = Vec::with_capacity(args.len());
        for a in args {
            // SAFETY: the launcher hands valid (ptr, len) views of host tensors.
            let host = unsafe { std::slice::from_raw_parts(a.ptr as *const u8, a.len) };
            slices.push(if a.len == 0 {
                stream.alloc_zeros::<u8>(1).map_err(dev)?
            } else {
                stream.clone_htod(host).map_err(dev)?
            });
        }
        let dims: Vec<Vec<u32>> = args
            .iter()
            .map(|a| a.dims().iter().map(|d| *d as u32).collect())
            .collect();
        let shapes: Vec<Vec<usize>> = args.iter().map(|a| a.dims().to_vec()).collect();
        let grid: Vec<u32> = k.grid.iter().map(|g| g.eval(&shapes) as u32).collect();
        if grid.contains(&0) {
            return Ok(0.0);
        }
        let cfg = LaunchConfig {
            grid_dim: (grid[0], grid[1], grid[2]),
            block_dim: (k.threads, 1, 1),
            shared_mem_bytes: k.dyn_smem,
        };
        let start = stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(dev)?;
        {
            let mut b = stream.launch_builder(&f);
            for (s, d) in slices.iter().zip(&dims) {
                b.arg(s);
                for x in d {
                    b.arg(x);
                }
            }
            // SAFETY: the argument list follows the kernel ABI (`tessera_ir::target::ptx::abi`).
            unsafe { b.launch(cfg) }.map_err(dev)?;
        }
        let end = stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(dev)?;
        end.synchronize().map_err(dev)?;
        let ms = start.elapsed_ms(&end).map_err(dev)?;
        for (a, s) in args.iter().zip(&slices) {
            if a.writable && a.len > 0 {
                let back: Vec<u8> = stream.clone_dtoh(s).map_err(dev)?;
                // SAFETY: writable buffers are exclusively borrowed for the launch.
                unsafe { std::ptr::copy_nonoverlapping(back.as_ptr(), a.ptr, a.len) };
            }
        }
        Ok(ms)
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
