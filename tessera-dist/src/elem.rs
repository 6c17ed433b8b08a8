//! Element types collectives move and reduce.

use half::{bf16, f16};
use tessera::Element;

/// A reduction op for all-reduce / reduce-scatter and for the partial state of a
/// [`crate::ShardSpec`].
///
/// ```
/// use tessera_dist::ReduceOp;
/// assert_eq!(ReduceOp::Sum.combine(2.0f32, 3.0), 5.0);
/// assert_eq!(ReduceOp::Max.combine(2.0f32, 3.0), 3.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Maximum.
    Max,
}

impl ReduceOp {
    /// `op(a, b)`.
    pub fn combine<T: CommElem>(self, a: T, b: T) -> T {
        match self {
            ReduceOp::Sum => a.add(b),
            ReduceOp::Max => a.max_of(b),
        }
    }

    /// The identity: 0 for sum, the lowest value (−∞ for floats) for max.
    pub fn identity<T: CommElem>(self) -> T {
        match self {
            ReduceOp::Sum => T::default(),
            ReduceOp::Max => T::LOWEST,
        }
    }

    /// `dst[i] = op(dst[i], src[i])`.
    pub fn reduce_into<T: CommElem>(self, dst: &mut [T], src: &[T]) {
        T::reduce_slice(self, dst, src)
    }
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
        })
    }
}

/// A tensor element that collectives can reduce: `f32`, `f16`, `bf16`, `i32`.
pub trait CommElem: Element {
    /// The identity of max.
    const LOWEST: Self;
    /// `a + b` (f16/bf16 add in f32 and round once; i32 wraps).
    fn add(self, b: Self) -> Self;
    /// `max(a, b)`.
    fn max_of(self, b: Self) -> Self;
    /// Vectorisable slice reduction.
    fn reduce_slice(op: ReduceOp, dst: &mut [Self], src: &[Self]) {
        match op {
            ReduceOp::Sum => dst.iter_mut().zip(src).for_each(|(a, b)| *a = a.add(*b)),
            ReduceOp::Max => dst.iter_mut().zip(src).for_each(|(a, b)| *a = a.max_of(*b)),
        }
    }
}

impl CommElem for f32 {
    const LOWEST: Self = f32::NEG_INFINITY;
    #[inline]
    fn add(self, b: Self) -> Self {
        self + b
    }
    #[inline]
    fn max_of(self, b: Self) -> Self {
        if b > self { b } else { self }
    }
}

impl CommElem for i32 {
    const LOWEST: Self = i32::MIN;
    #[inline]
    fn add(self, b: Self) -> Self {
        self.wrapping_add(b)
    }
    #[inline]
    fn max_of(self, b: Self) -> Self {
        self.max(b)
    }
}

macro_rules! half_elem {
    ($t:ty) => {
        impl CommElem for $t {
            const LOWEST: Self = <$t>::NEG_INFINITY;
            #[inline]
            fn add(self, b: Self) -> Self {
                <$t>::from_f32(self.to_f32() + b.to_f32())
            }
            #[inline]
            fn max_of(self, b: Self) -> Self {
                if b.to_f32() > self.to_f32() { b } else { self }
            }
        }
    };
}
half_elem!(f16);
half_elem!(bf16);
