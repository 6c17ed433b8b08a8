//! A tensor whose element type is a value: what the SPMD runtime holds between kernels, whatever
//! dtype each value of a kernel's graph has.

use crate::{CommElem, DistError, Plan, RankContext, Result, execute_plan};
use tessera::{DType, Device, KernelDef, Tensor, TensorRef, bf16, f16};

/// One rank's local tensor of any element type collectives can move.
#[derive(Clone, Debug, PartialEq)]
pub enum AnyTensor {
    /// An `f32` tensor.
    F32(Tensor<f32>),
    /// An `f16` tensor.
    F16(Tensor<f16>),
    /// A `bf16` tensor.
    BF16(Tensor<bf16>),
    /// An `i32` tensor.
    I32(Tensor<i32>),
}

/// Runs `$body` with `$t` bound to the tensor inside `$x` (of type `Tensor<E>` for its `E`).
macro_rules! with_tensor {
    ($x:expr, $t:ident => $body:expr) => {
        match $x {
            AnyTensor::F32($t) => $body,
            AnyTensor::F16($t) => $body,
            AnyTensor::BF16($t) => $body,
            AnyTensor::I32($t) => $body,
        }
    };
}

/// Element types with an [`AnyTensor`] variant.
pub trait Erase: CommElem {
    /// Wraps a tensor.
    fn wrap(t: Tensor<Self>) -> AnyTensor;
    /// Unwraps one of this element type.
    fn unwrap(t: AnyTensor) -> Option<Tensor<Self>>;
}

macro_rules! erase {
    ($t:ty, $v:ident) => {
        impl Erase for $t {
            fn wrap(t: Tensor<Self>) -> AnyTensor {
                AnyTensor::$v(t)
            }
            fn unwrap(t: AnyTensor) -> Option<Tensor<Self>> {
                match t {
                    AnyTensor::$v(t) => Some(t),
                    _ => None,
                }
            }
        }
    };
}
erase!(f32, F32);
erase!(f16, F16);
erase!(bf16, BF16);
erase!(i32, I32);

impl AnyTensor {
    /// The element type.
    pub fn dtype(&self) -> DType {
        with_tensor!(self, t => t.dtype())
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        with_tensor!(self, t => t.shape())
    }

    /// A launch argument.
    pub fn arg(&self) -> TensorRef<'_> {
        with_tensor!(self, t => t.arg())
    }

    /// The same tensor placed on `device`.
    pub fn on(self, device: &Device) -> Result<AnyTensor> {
        Ok(match self {
            AnyTensor::F32(t) => AnyTensor::F32(crate::host::on(t, device)?),
            AnyTensor::F16(t) => AnyTensor::F16(crate::host::on(t, device)?),
            AnyTensor::BF16(t) => AnyTensor::BF16(crate::host::on(t, device)?),
            AnyTensor::I32(t) => AnyTensor::I32(crate::host::on(t, device)?),
        })
    }

    /// Back to a typed tensor, or an error naming both element types.
    pub fn typed<T: Erase>(self, what: &str) -> Result<Tensor<T>> {
        let got = self.dtype();
        T::unwrap(self)
            .ok_or_else(|| DistError::Shape(format!("{what}: expected {}, got {got}", T::DTYPE)))
    }

    /// Runs a redistribution plan on this rank's shard.
    pub fn redistribute<X: RankContext>(self, ctx: &X, plan: &Plan) -> Result<AnyTensor> {
        Ok(match self {
            AnyTensor::F32(t) => AnyTensor::F32(execute_plan(ctx, plan, t)?),
            AnyTensor::F16(t) => AnyTensor::F16(execute_plan(ctx, plan, t)?),
            AnyTensor::BF16(t) => AnyTensor::BF16(execute_plan(ctx, plan, t)?),
            AnyTensor::I32(t) => AnyTensor::I32(execute_plan(ctx, plan, t)?),
        })
    }

    /// Launches `def` on `args` and wraps its `out`-typed result.
    pub fn launch(def: &'static KernelDef, args: &[TensorRef<'_>], out: DType) -> Result<Self> {
        Ok(match out {
            DType::F32 => AnyTensor::F32(def.launch(args)?),
            DType::F16 => AnyTensor::F16(def.launch(args)?),
            DType::BF16 => AnyTensor::BF16(def.launch(args)?),
            DType::I32 => AnyTensor::I32(def.launch(args)?),
            d => {
                return Err(DistError::Unsupported {
                    backend: "spmd",
                    what: format!("kernel outputs of {d}"),
                });
            }
        })
    }

    /// The same elements with a new shape of the same element count (row-major reinterpretation).
    pub fn reshape(self, shape: &[usize]) -> Result<AnyTensor> {
        Ok(match self {
            AnyTensor::F32(t) => AnyTensor::F32(t.reshape(shape)?),
            AnyTensor::F16(t) => AnyTensor::F16(t.reshape(shape)?),
            AnyTensor::BF16(t) => AnyTensor::BF16(t.reshape(shape)?),
            AnyTensor::I32(t) => AnyTensor::I32(t.reshape(shape)?),
        })
    }
}
