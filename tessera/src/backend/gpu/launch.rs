//! Launch marshalling per the kernel ABI (`tessera_ir::target::ptx` `abi`): for each tensor,
//! its device pointer (`.u64`) then its view dims (`.u32` each); the grid from the kernel's
//! grid expression over those dims; `threads × 1 × 1` threads; `dyn_smem` bytes.

use super::{DeviceArg, LaunchDims};
use crate::{Error, Result};
use tessera_ir::target::ptx::PtxKernel;

/// One `.param` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamValue {
    /// A global-memory pointer (`.u64`).
    Ptr(u64),
    /// A view dim (`.u32`).
    U32(u32),
}

/// The launch configuration and parameter block of `k` over `args`; `None` when the grid is
/// empty (nothing to launch). Errors name the kernel and the argument at fault.
pub(crate) fn marshal(
    device: &str,
    k: &PtxKernel,
    args: &[DeviceArg],
) -> Result<Option<(LaunchDims, Vec<ParamValue>)>> {
    if args.len() != k.params.len() {
        return Err(Error::ArgCount {
            kernel: k.entry.clone(),
            expected: k.params.len(),
            got: args.len(),
        });
    }
    let mut params = Vec::new();
    for (a, (name, rank)) in args.iter().zip(&k.params) {
        if a.rank != *rank {
            return Err(Error::ShapeMismatch {
                kernel: k.entry.clone(),
                param: name.clone(),
                message: format!("has view rank {} but the kernel takes rank {rank}", a.rank),
            });
        }
        params.push(ParamValue::Ptr(a.addr));
        for &d in a.dims() {
            let d = u32::try_from(d).map_err(|_| Error::ShapeMismatch {
                kernel: k.entry.clone(),
                param: name.clone(),
                message: format!("dim {d} does not fit the ABI's 32-bit dims"),
            })?;
            params.push(ParamValue::U32(d));
        }
    }
    let shapes: Vec<Vec<usize>> = args.iter().map(|a| a.dims().to_vec()).collect();
    let mut grid = [1u32; 3];
    for (g, e) in grid.iter_mut().zip(&k.grid) {
        let n = e.try_eval(&shapes).map_err(|m| Error::ShapeMismatch {
            kernel: k.entry.clone(),
            param: "grid".into(),
            message: m,
        })?;
        *g = u32::try_from(n).map_err(|_| Error::Unsupported {
            device: device.into(),
            message: format!("{}: a grid of {n} blocks in one dimension", k.entry),
        })?;
    }
    if grid.contains(&0) {
        return Ok(None);
    }
    if k.threads == 0 || k.threads > 1024 {
        return Err(Error::Unsupported {
            device: device.into(),
            message: format!("{}: {} threads per block", k.entry, k.threads),
        });
    }
    Ok(Some((
        LaunchDims {
            grid,
            block: [k.threads, 1, 1],
            dyn_smem: k.dyn_smem,
        },
        params,
    )))
}
