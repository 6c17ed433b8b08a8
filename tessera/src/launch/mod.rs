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

use crate::autotune;
use crate::backend::Buffer;
use crate::tensor::{Data, DataMut, DeviceBuffer, TensorMut, TensorRef};
use crate::{Device, Error, Result};
use std::collections::HashMap;
use std::sync::Arc;
use tessera_ir::graph::Graph;
use tessera_ir::{DType, Dim};

/// A `tile!` kernel argument: an input or an output tensor.
#[derive(Debug)]
pub enum Arg<'a> {
    /// A tensor the kernel reads.
    In(TensorRef<'a>),
    /// A tensor the kernel writes.
    Out(TensorMut<'a>),
}

/// The device of a launch: the first argument's (the default device when there is none);
/// every other argument must agree.
fn launch_device<'a>(
    kernel: &str,
    mut devices: impl Iterator<Item = &'a Device>,
    mut names: impl Iterator<Item = String>,
) -> Result<Device> {
    let first = match devices.next() {
        Some(d) => d.clone(),
        None => Device::try_default()?,
    };
    let _ = names.next();
    for (d, n) in devices.zip(names) {
        if *d != first {
            return Err(Error::DeviceMismatch {
                kernel: kernel.into(),
                param: n.trim_start_matches('%').into(),
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

/// Binds every symbolic dim of the signature to the argument sizes; the error names the dim,
/// both sizes and the parameters that disagree.
fn bind_symbols(kernel: &str, g: &Graph, args: &[TensorRef<'_>]) -> Result<Syms> {
    let mut syms: HashMap<String, (usize, String)> = HashMap::new();
    for (p, a) in g.params.iter().zip(args) {
        // The name is formatted only where it is used (errors, new symbols): this runs on
        // every launch.
        let ty = g.ty(*p);
        let pname = || g.value_name(*p).trim_start_matches('%').to_string();
        if a.dtype() != ty.dtype {
            return Err(Error::DTypeMismatch {
                kernel: kernel.into(),
                param: pname(),
                expected: ty.dtype.to_string(),
                got: a.dtype().to_string(),
            });
        }
        if a.shape().len() != ty.shape.rank() {
            return Err(Error::ShapeMismatch {
                kernel: kernel.into(),
                param: pname(),
                message: format!(
                    "must have rank {} ({}), got shape {:?}",
                    ty.shape.rank(),
                    ty.shape,
                    a.shape()
                ),
            });
        }
        for (axis, (d, &got)) in ty.shape.0.iter().zip(a.shape()).enumerate() {
            match d {
                Dim::Const(c) if *c as usize != got => {
                    return Err(Error::ShapeMismatch {
                        kernel: kernel.into(),
                        param: pname(),
                        message: format!(
                            "must have shape {}: dim {axis} must be {c}, got {got} (shape {:?})",
                            ty.shape,
                            a.shape()
                        ),
                    });
                }
                Dim::Const(_) => {}
                Dim::Sym(s) => match syms.get(s) {
                    Some((want, by)) if *want != got => {
                        return Err(Error::DimMismatch {
                            kernel: kernel.into(),
                            dim: s.clone(),
                            param: pname(),
                            bound_by: format!("`{by}`"),
                            expected: *want,
                            got,
                        });
                    }
                    Some(_) => {}
                    None => {
                        syms.insert(s.clone(), (got, pname()));
                    }
                },
            }
        }
    }
    Ok(syms)
}

fn eval_shape(dims: &[Dim], syms: &Syms) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Const(c) => *c as usize,
            Dim::Sym(s) => syms
                .get(s)
                .map(|x| x.0)
                .expect("result dims are bound by the parameters (verified)"),
        })
        .collect()
}

/// The symbol bindings of a launch: each dim's size and the parameter that bound it.
type Syms = HashMap<String, (usize, String)>;

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
