//! A tensor whose element type is a value: what the SPMD runtime holds between kernels, whatever
//! dtype each value of a kernel's graph has.

use crate::{CommElem, DistError, Pending, Plan, RankContext, Result, execute_plan};
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

    /// Starts a redistribution plan on this rank's shard without waiting (its collectives run
    /// on the group's async lane); the result is a host tensor.
    pub(crate) fn start_redistribute<X: RankContext>(
        self,
        ctx: &X,
        plan: &Plan,
    ) -> Result<Pending<AnyTensor>> {
        with_tensor!(self, t => crate::exec::start_plan(ctx, plan, t, Erase::wrap))
    }

    /// Indices `range` of dim `d` (a host tensor).
    pub(crate) fn slice_dim(&self, d: usize, range: std::ops::Range<usize>) -> Result<AnyTensor> {
        with_tensor!(self, t => {
            let mut ranges: Vec<std::ops::Range<usize>> = t.shape().iter().map(|&n| 0..n).collect();
            ranges[d] = range;
            let shape: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            let data = crate::layout::slice(&crate::host::to_vec(t)?, t.shape(), &ranges);
            Ok(Erase::wrap(crate::host::tensor(data, &shape)?))
        })
    }

    /// Concatenation along dim 0 (one element type).
    pub(crate) fn concat_rows(pieces: Vec<AnyTensor>) -> Result<AnyTensor> {
        fn cat<T: Erase>(pieces: Vec<AnyTensor>) -> Result<AnyTensor> {
            let mut shape: Option<Vec<usize>> = None;
            let mut data = Vec::new();
            for p in pieces {
                let t = p.typed::<T>("microbatch")?;
                match &mut shape {
                    None => shape = Some(t.shape().to_vec()),
                    Some(s) if s[1..] == t.shape()[1..] => s[0] += t.shape()[0],
                    Some(s) => {
                        return Err(DistError::Shape(format!(
                            "microbatches of shapes {s:?} and {:?}",
                            t.shape()
                        )));
                    }
                }
                data.extend(crate::host::to_vec(&t)?);
            }
            let shape = shape.ok_or_else(|| DistError::Shape("no microbatch".into()))?;
            crate::host::tensor(data, &shape).map(T::wrap)
        }
        match pieces.first().map(AnyTensor::dtype) {
            Some(DType::F16) => cat::<f16>(pieces),
            Some(DType::BF16) => cat::<bf16>(pieces),
            Some(DType::I32) => cat::<i32>(pieces),
            _ => cat::<f32>(pieces),
        }
    }
}
