//! Element types a [`crate::Tensor`] can hold.

use half::{bf16, f16};
use tessera_ir::DType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that stores one tensor element of an IR [`DType`].
///
/// ```
/// use tessera::{Element, DType, bf16};
/// assert_eq!(<bf16 as Element>::DTYPE, DType::BF16);
/// assert_eq!(bf16::from_f64_round(1.5).to_f64(), 1.5);
/// ```
pub trait Element:
    sealed::Sealed + Copy + Send + Sync + Default + std::fmt::Debug + bytemuck::Pod + 'static
{
    /// The IR element type.
    const DTYPE: DType;
    /// Widens to f64 (exact for every supported type).
    fn to_f64(self) -> f64;
    /// Rounds an f64 to this type (round to nearest even; saturating casts for integers).
    fn from_f64_round(x: f64) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr, |$x:ident| $to:expr, |$y:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_f64(self) -> f64 {
                let $x = self;
                $to
            }
            fn from_f64_round($y: f64) -> Self {
                $from
            }
        }
    };
}

element!(f32, DType::F32, |x| x as f64, |y| y as f32);
element!(f16, DType::F16, |x| x.to_f64(), |y| f16::from_f64(y));
element!(bf16, DType::BF16, |x| x.to_f64(), |y| bf16::from_f64(y));
element!(i32, DType::I32, |x| x as f64, |y| y.round() as i32);
