//! The one place `tessera-dist` reads or builds a `Tensor`'s host storage. Collectives move host
//! buffers; when tensors can live on a device, this is where they are brought to the host and
//! back.

use crate::Result;
use tessera::{Device, Element, Tensor};

/// The elements: borrowed from host memory, or copied back from a device.
pub(crate) fn slice<T: Element>(t: &Tensor<T>) -> Result<std::borrow::Cow<'_, [T]>> {
    Ok(if t.device().is_cpu() {
        std::borrow::Cow::Borrowed(t.as_slice()?)
    } else {
        std::borrow::Cow::Owned(t.to_vec()?)
    })
}

/// The elements, copied out.
pub(crate) fn to_vec<T: Element>(t: &Tensor<T>) -> Result<Vec<T>> {
    Ok(t.to_vec()?)
}

/// A host tensor from its elements.
pub(crate) fn tensor<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor<T>> {
    Ok(Tensor::from_vec(data, shape)?)
}

/// The tensor placed on `device` (kernels taking it run there).
pub(crate) fn on<T: Element>(t: Tensor<T>, device: &Device) -> Result<Tensor<T>> {
    Ok(t.to(device)?)
}
