//! Launching kernels: bind shapes, allocate outputs on the launch's device, run each fused
//! kernel in order.
//!
//! - [`kernel`]: `#[kernel]` definitions ([`KernelDef`]): on the CPU, the compiled plan's Tile
//!   IR; on a PTX device, the PTX the macro embedded, launched from its manifest without the
//!   compiler.
//! - [`family`]: a generic `#[kernel]`'s instantiations ([`KernelFamily`]).
//! - [`tile`]: `tile!` definitions ([`TileDef`]).
//! - [`gpu`]: device arguments and embedded PTX; [`jit`]: the JIT PTX cache (memory and
//!   disk); [`precompiled`]: library tables of build-time PTX; [`report`]: what the last
//!   launch ran ([`last_launch`]); [`scalar`]: scalar arguments ([`scalar_arg`]).

mod bind;
mod family;
pub(crate) mod gpu;
mod host_block;
pub(crate) mod jit;
mod kernel;
pub(crate) mod precompiled;
pub(crate) mod report;
mod scalar;
mod tile;

pub use family::{KernelFamily, KernelInstance};
pub use gpu::EmbeddedPtx;
pub use kernel::KernelDef;
pub use precompiled::PrecompiledPtx;
pub use report::{LaunchedKernel, last_launch};
pub use scalar::scalar_arg;
pub use tile::{TileDef, TileParam};

use bind::{Syms, bind_symbols, eval_shape};

use crate::autotune;
use crate::backend::Buffer;
use crate::tensor::{Data, DataMut, DeviceBuffer, TensorMut, TensorRef};
use crate::{Device, Error, Result};
use std::sync::Arc;
use tessera_ir::DType;

/// A `tile!` kernel argument: an input or an output tensor.
#[derive(Debug)]
pub enum Arg<'a> {
    /// A tensor the kernel reads.
    In(TensorRef<'a>),
    /// A tensor the kernel writes.
    Out(TensorMut<'a>),
}

/// The device of a launch: the first argument's (the default device when there is none);
/// every other argument must agree. `name(i)` names argument `i` (called only for an error).
fn launch_device<'a>(
    kernel: &str,
    mut devices: impl Iterator<Item = &'a Device>,
    name: impl Fn(usize) -> String,
) -> Result<Device> {
    let first = match devices.next() {
        Some(d) => d.clone(),
        None => Device::try_default()?,
    };
    for (i, d) in devices.enumerate() {
        if *d != first {
            return Err(Error::DeviceMismatch {
                kernel: kernel.into(),
                param: name(i + 1).trim_start_matches('%').into(),
                expected: first.to_string(),
                got: d.to_string(),
            });
        }
    }
    Ok(first)
}

fn buffer(dtype: DType, dims: &[usize], ptr: *mut u8, len: usize, writable: bool) -> Buffer {
    let mut shape = [1usize; 3];
    shape[..dims.len()].copy_from_slice(dims);
    Buffer {
        dtype,
        shape,
        rank: dims.len(),
        ptr,
        len,
        writable,
    }
}

/// The host bytes of a CPU launch's input (an error naming the parameter if it is in device
/// memory, which a launch on the CPU never sees: its arguments are the CPU's).
fn host_input<'a>(kernel: &str, param: &str, d: Data<'a>) -> Result<&'a [u8]> {
    match d {
        Data::Host(b) => Ok(b),
        Data::Device(b) => Err(device_arg_on_cpu(kernel, param, b.device())),
    }
}

fn host_output<'a>(kernel: &str, param: &str, d: DataMut<'a>) -> Result<&'a mut [u8]> {
    match d {
        DataMut::Host(b) => Ok(b),
        DataMut::Device(b) => Err(device_arg_on_cpu(kernel, param, b.device())),
    }
}

fn device_arg_on_cpu(kernel: &str, param: &str, device: &Device) -> Error {
    Error::DeviceMismatch {
        kernel: kernel.into(),
        param: param.into(),
        expected: "cpu".into(),
        got: device.to_string(),
    }
}

/// A launch argument kept for a later refinement: a copy of host bytes, or a share of a
/// device block (kernels never write their inputs, and a later writer of the tensor copies
/// first, so the share keeps the launch's values).
struct ArgCopy {
    device: Device,
    dtype: DType,
    shape: Vec<usize>,
    data: CopyData,
}

enum CopyData {
    Host(Vec<u8>),
    Device(Arc<DeviceBuffer>),
}

impl ArgCopy {
    fn of(a: &TensorRef<'_>) -> Self {
        ArgCopy {
            device: a.device().clone(),
            dtype: a.dtype(),
            shape: a.shape().to_vec(),
            data: match a.data() {
                Data::Host(b) => CopyData::Host(b.to_vec()),
                Data::Device(b) => CopyData::Device(b.clone()),
            },
        }
    }

    fn arg(&self) -> TensorRef<'_> {
        TensorRef::new_unchecked(
            &self.device,
            self.dtype,
            &self.shape,
            match &self.data {
                CopyData::Host(b) => Data::Host(b),
                CopyData::Device(b) => Data::Device(b),
            },
        )
    }

    fn arg_mut(&mut self) -> Result<TensorMut<'_>> {
        if let CopyData::Device(b) = &mut self.data
            && Arc::get_mut(b).is_none()
        {
            *b = Arc::new(b.duplicate()?);
        }
        Ok(TensorMut::new_unchecked(
            &self.device,
            self.dtype,
            &self.shape,
            match &mut self.data {
                CopyData::Host(b) => DataMut::Host(b),
                CopyData::Device(b) => DataMut::Device(b),
            },
        ))
    }
}

/// What a refinement is queued under: `name(f32[64x48],f32[48x40])@cpu-x86_64-avx512`.
fn refine_key(name: &str, device: &Device, args: &[TensorRef<'_>]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            let dims: Vec<String> = a.shape().iter().map(|d| d.to_string()).collect();
            format!("{}[{}]", a.dtype(), dims.join("x"))
        })
        .collect();
    format!(
        "{name}({})@{}",
        args.join(","),
        autotune::device_arch_id(device)
    )
}
