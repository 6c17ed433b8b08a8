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
    /// Rounds an f64 to this type (round to nearest even; saturating casts for integers and
    /// fp8).
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
element!(f8e4m3, DType::F8E4M3, |x| x.to_f32() as f64, |y| {
    f8e4m3::from_f64(y)
});
element!(f8e5m2, DType::F8E5M2, |x| x.to_f32() as f64, |y| {
    f8e5m2::from_f64(y)
});

/// A float element type a generic kernel `<T: Float>` instantiates: f32, bf16, f16.
///
/// ```
/// use tessera::{Float, Element, bf16};
/// fn dtype_of<T: Float>() -> tessera::DType { T::DTYPE }
/// assert_eq!(dtype_of::<bf16>(), tessera::DType::BF16);
/// ```
pub trait Float: Element {}
impl Float for f32 {}
impl Float for bf16 {}
impl Float for f16 {}

/// An fp8 element type a generic kernel `<T: Fp8>` instantiates: [`f8e4m3`], [`f8e5m2`].
pub trait Fp8: Element {}
impl Fp8 for f8e4m3 {}
impl Fp8 for f8e5m2 {}

macro_rules! fp8_type {
    ($t:ident, $f:expr, $doc:literal) => {
        #[doc = $doc]
        #[allow(non_camel_case_types)]
        #[repr(transparent)]
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $t(u8);

        // SAFETY: a transparent wrapper of `u8`: every bit pattern is valid, no padding.
        unsafe impl bytemuck::Zeroable for $t {}
        // SAFETY: as above; `Copy + 'static`.
        unsafe impl bytemuck::Pod for $t {}

        impl $t {
            /// The largest finite value.
            pub const MAX: f32 = $f.max() as f32;

            /// The value with bits `b`.
            pub const fn from_bits(b: u8) -> Self {
                $t(b)
            }

            /// The bits.
            pub const fn to_bits(self) -> u8 {
                self.0
            }

            /// Rounds to nearest even, saturating: finite overflow and ±inf become ±`MAX`,
            /// NaN stays NaN (PTX `cvt.rn.satfinite`).
            pub fn from_f32(x: f32) -> Self {
                $t($f.encode(x as f64, true))
            }

            /// [`Self::from_f32`] from an f64 (one rounding).
            pub fn from_f64(x: f64) -> Self {
                $t($f.encode(x, true))
            }

            /// Rounds to nearest even without saturation (the OCP conversion): overflow is
            /// NaN in e4m3 (no infinity) and ±inf in e5m2.
            pub fn from_f32_unsaturated(x: f32) -> Self {
                $t($f.encode(x as f64, false))
            }

            /// The exact value.
            pub fn to_f32(self) -> f32 {
                $f.decode(self.0)
            }
        }

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.to_f32())
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.to_f32())
            }
        }
    };
}

fp8_type!(
    f8e4m3,
    tessera_ir::fp8::Fp8::E4M3,
    "OCP fp8 E4M3 (4 exponent bits, 3 mantissa bits, no infinity, max 448): the bits of one value.\n\n```\nuse tessera::f8e4m3;\nassert_eq!(f8e4m3::from_f32(1e6).to_f32(), 448.0);\nassert!(f8e4m3::from_f32_unsaturated(1e6).to_f32().is_nan());\nassert_eq!(f8e4m3::from_f32(0.3).to_bits(), 0x2A);\n```"
);
fp8_type!(
    f8e5m2,
    tessera_ir::fp8::Fp8::E5M2,
    "OCP fp8 E5M2 (5 exponent bits, 2 mantissa bits, IEEE-like inf/NaN, max 57344): the bits of one value.\n\n```\nuse tessera::f8e5m2;\nassert_eq!(f8e5m2::from_f32(1e6).to_f32(), 57344.0);\nassert_eq!(f8e5m2::from_f32_unsaturated(1e6).to_f32(), f32::INFINITY);\n```"
);
