//! Scalar kernel arguments (`eps: f32` in a `#[kernel]` signature).

use crate::{Device, Error, Result, Tensor};
use tessera_ir::scalar::ScalarRule;

/// A scalar argument of kernel `kernel` as the rank-0 tensor its graph reads, placed on
/// `device` (the device of the call's first tensor argument; the host when it has none), after
/// checking `rule` (decided at compile time from how the kernel uses the parameter). The
/// function `#[kernel]` generates calls it for each scalar parameter; a value the rule refuses
/// is [`Error::ScalarArg`] naming the parameter. On a PTX device this is one 4-byte upload per
/// scalar per call.
///
/// ```
/// use tessera::{Device, scalar_arg};
/// use tessera::ir::scalar::ScalarRule;
/// let t = scalar_arg("norm", "eps", 1e-5, ScalarRule::FinitePositive, &Device::cpu())?;
/// assert_eq!((t.shape(), t.to_vec()?), (&[][..], vec![1e-5]));
/// let e = scalar_arg("norm", "eps", -1.0, ScalarRule::FinitePositive, &Device::cpu()).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "kernel `norm`: scalar `eps` is -1 but must be finite and > 0 (it is the eps of rmsnorm/layernorm)"
/// );
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn scalar_arg(
    kernel: &str,
    param: &str,
    value: f32,
    rule: ScalarRule,
    device: &Device,
) -> Result<Tensor<f32>> {
    rule.check(value as f64)
        .map_err(|message| Error::ScalarArg {
            kernel: kernel.into(),
            param: param.into(),
            message,
        })?;
    Tensor::from_vec(vec![value], &[])?.to(device)
}
