//! Launches on PTX devices (a CUDA GPU or the simulator): device arguments of a launch, the
//! PTX the macros embedded (parsed once, never re-emitted), and running a kernel.

use crate::backend::gpu::DeviceArg;
use crate::tensor::{Data, DataMut, DeviceBuffer};
use crate::{Device, Error, Result};
use tessera_ir::DType;
use tessera_ir::target::ptx::{self, Arch, PtxKernel};

/// PTX embedded by a macro: the launch header ([`ptx::print_launch`]) and the module text.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedPtx {
    /// `ptx @entry sm_80 threads=.. dyn_smem=.. grid=[..] params=[..]`.
    pub launch: &'static str,
    /// The PTX module.
    pub text: &'static str,
}

impl EmbeddedPtx {
    /// The kernel, checked against its header (no compiler involved).
    pub(crate) fn parse(&self, kernel: &str) -> Result<PtxKernel> {
        ptx::parse_launch(self.launch, self.text).map_err(|e| Error::Compile {
            kernel: kernel.into(),
            message: format!("embedded PTX header `{}`: {e}", self.launch),
        })
    }
}

/// The PTX arch a device runs.
pub(crate) fn device_arch(device: &Device) -> Result<Arch> {
    device.arch().ok_or_else(|| Error::Unsupported {
        device: device.to_string(),
        message: "no PTX architecture (sm_80, sm_89 or sm_90a) for this device".into(),
    })
}

/// Enqueues `k` on the device's stream.
pub(crate) fn run(device: &Device, k: &PtxKernel, args: &[DeviceArg]) -> Result<()> {
    run_timed(device, k, args, false).map(drop)
}

/// Runs `k`; with `timed`, returns the kernel's own time in seconds where the device has a
/// clock (CUDA events around the launch; `None` on the simulator, which has none).
pub(crate) fn run_timed(
    device: &Device,
    k: &PtxKernel,
    args: &[DeviceArg],
    timed: bool,
) -> Result<Option<f64>> {
    let g = device.gpu().ok_or_else(|| Error::Unsupported {
        device: device.to_string(),
        message: "the CPU runs Tile IR, not PTX".into(),
    })?;
    g.launch(k, args, timed)
}

/// A device argument over a view of `buf`.
pub(crate) fn device_arg(
    dtype: DType,
    dims: &[usize],
    buf: &DeviceBuffer,
    writable: bool,
) -> DeviceArg {
    let mut shape = [1usize; 3];
    shape[..dims.len()].copy_from_slice(dims);
    DeviceArg {
        dtype,
        shape,
        rank: dims.len(),
        addr: buf.address(),
        len: buf.len(),
        writable,
    }
}

/// The device block of an input, or an error naming the parameter when it is in host memory
/// (cannot happen for tensors of a device launch: their storage is that device's).
pub(crate) fn device_input<'a>(kernel: &str, param: &str, d: Data<'a>) -> Result<&'a DeviceBuffer> {
    match d {
        Data::Device(b) => Ok(b),
        Data::Host(_) => Err(host_arg(kernel, param)),
    }
}

/// [`device_input`] for an output.
pub(crate) fn device_output<'a>(
    kernel: &str,
    param: &str,
    d: &'a DataMut<'_>,
) -> Result<&'a DeviceBuffer> {
    match d {
        DataMut::Device(b) => Ok(b),
        DataMut::Host(_) => Err(host_arg(kernel, param)),
    }
}

fn host_arg(kernel: &str, param: &str) -> Error {
    Error::Unsupported {
        device: "launch".into(),
        message: format!(
            "kernel `{kernel}`: `{param}` is in host memory but the launch runs on a device"
        ),
    }
}
