//! Generic `#[kernel]`s: one [`KernelDef`] per element-type instantiation, and the handle that
//! picks the one for given argument types (what `name::KERNEL` is for a generic kernel).

use super::KernelDef;
use crate::tensor::{Element, Tensor, TensorRef};
use crate::{Error, Result};
use smallvec::SmallVec;
use tessera_ir::DType;

/// One instantiation of a generic kernel: its parameters' element types and its definition.
pub struct KernelInstance {
    /// Element type of each parameter, in signature order.
    pub params: &'static [DType],
    /// The instantiation's definition.
    pub def: &'static KernelDef,
}

/// Every instantiation of a generic `#[tessera::kernel]` (`name::KERNEL` of a kernel with a
/// type parameter): [`KernelFamily::for_params`] picks one by the arguments' element types.
///
/// ```
/// use tessera::{DType, Tensor};
///
/// #[tessera::kernel]
/// fn scale<T: Float>(x: Tensor<T, (N,)>, y: Tensor<T, (N,)>) -> Tensor<T, (N,)> {
///     x * y
/// }
///
/// let def = scale::KERNEL.for_params(&[DType::F32, DType::F32])?;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
/// let y: Tensor<f32> = def.launch(&[x.arg(), x.arg()])?;
/// assert_eq!(y, scale(&x, &x)?);
/// assert!(scale::KERNEL.for_params(&[DType::I32, DType::I32]).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
pub struct KernelFamily {
    name: &'static str,
    instances: &'static [KernelInstance],
}

impl KernelFamily {
    /// A family from the macro's instantiations.
    pub const fn new(name: &'static str, instances: &'static [KernelInstance]) -> Self {
        KernelFamily { name, instances }
    }

    /// The generic kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Every instantiation.
    pub fn instances(&self) -> &'static [KernelInstance] {
        self.instances
    }

    /// The instantiation whose parameters have exactly these element types, or an error naming
    /// the kernel, the types asked for and those it has.
    pub fn for_params(&self, dtypes: &[DType]) -> Result<&'static KernelDef> {
        self.instances
            .iter()
            .find(|i| i.params == dtypes)
            .map(|i| i.def)
            .ok_or_else(|| {
                let have: Vec<String> = self
                    .instances
                    .iter()
                    .map(|i| format!("{:?}", i.params))
                    .collect();
                Error::Compile {
                    kernel: self.name.into(),
                    message: format!(
                        "no instantiation for argument types {dtypes:?} (it has {})",
                        have.join(", ")
                    ),
                }
            })
    }

    /// [`KernelDef::launch_into`] on the instantiation for the arguments' element types
    /// ([`Self::for_params`]): the result is written into `out`, reusing its host memory on
    /// the CPU.
    ///
    /// ```
    /// use tessera::Tensor;
    ///
    /// #[tessera::kernel]
    /// fn scale<T: Float>(x: Tensor<T, (N,)>, y: Tensor<T, (N,)>) -> Tensor<T, (N,)> {
    ///     x * y
    /// }
    ///
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// let mut out = Tensor::<f32>::zeros(&[3])?;
    /// scale::KERNEL.launch_into(&[x.arg(), x.arg()], &mut out)?;
    /// assert_eq!(out, scale(&x, &x)?);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn launch_into<T: Element>(
        &self,
        args: &[TensorRef<'_>],
        out: &mut Tensor<T>,
    ) -> Result<()> {
        let dtypes: SmallVec<[DType; 4]> = args.iter().map(|a| a.dtype()).collect();
        self.for_params(&dtypes)?.launch_into(args, out)
    }
}
