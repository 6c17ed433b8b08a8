//! Launches on PTX devices (a CUDA GPU or the simulator): the PTX of each kernel per arch,
//! emitted once (or taken from what the macro embedded), then run.

use crate::backend::Buffer;
use crate::{Device, Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch, PtxKernel};
use tessera_ir::tile::Kernel;

/// PTX per (kernel index, arch), emitted on first use.
#[derive(Default)]
pub(super) struct PtxCache(Mutex<HashMap<(usize, Arch), Arc<PtxKernel>>>);

impl PtxCache {
    /// The PTX of kernel `i` for `device`'s arch. `source` gives the Tile IR and schedule;
    /// `embedded` is the macro's precompiled text, which must equal what the emitter produces.
    pub fn get(
        &self,
        device: &Device,
        i: usize,
        source: impl FnOnce() -> (Kernel, Schedule),
        embedded: Option<&'static str>,
    ) -> Result<Arc<PtxKernel>> {
        let arch = device_arch(device)?;
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = map.get(&(i, arch)) {
            return Ok(p.clone());
        }
        let (k, s) = source();
        let p = ptx::emit(&k, &s, arch).map_err(|e| Error::Compile {
            kernel: k.name.clone(),
            message: e.to_string(),
        })?;
        if let Some(text) = embedded
            && text != p.text
        {
            return Err(Error::Compile {
                kernel: k.name.clone(),
                message: format!(
                    "the PTX embedded at build time for {arch} differs from the emitter's (stale build?)"
                ),
            });
        }
        let p = Arc::new(p);
        map.insert((i, arch), p.clone());
        Ok(p)
    }
}

/// The PTX arch a device runs.
pub(crate) fn device_arch(device: &Device) -> Result<Arch> {
    device.arch().ok_or_else(|| Error::Unsupported {
        device: device.to_string(),
        message: "no PTX architecture (sm_80, sm_89 or sm_90a) for this device".into(),
    })
}

/// Runs emitted PTX on a GPU or the simulator.
pub(crate) fn run(device: &Device, k: &PtxKernel, bufs: &[Buffer]) -> Result<()> {
    run_timed(device, k, bufs).map(|_| ())
}

/// Runs emitted PTX and returns the kernel's own time in seconds where the device has a clock:
/// CUDA events around the launch on a GPU; `None` on the simulator, which has no clock.
pub(crate) fn run_timed(device: &Device, k: &PtxKernel, bufs: &[Buffer]) -> Result<Option<f64>> {
    match device {
        Device::Sim(_) => crate::backend::sim::run(k, bufs).map(|_| None),
        #[cfg(feature = "cuda")]
        Device::Cuda(h) => h.0.run(k, bufs).map(|ms| Some(ms as f64 * 1e-3)),
        Device::Cpu => unreachable!("the CPU runs Tile IR, not PTX"),
    }
}
