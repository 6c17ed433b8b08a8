//! Element types and symbolic shapes shared by every IR level.

use std::fmt;

/// Element type of a tensor or tile.
///
/// ```
/// use tessera_ir::DType;
/// assert_eq!(DType::parse("bf16"), Some(DType::BF16));
/// assert_eq!(DType::BF16.size_bytes(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16: 8 exponent bits, 7 mantissa bits.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// Boolean (masks and comparisons).
    Bool,
    /// OCP fp8 E4M3: 4 exponent bits, 3 mantissa bits, no infinity, max 448 (see [`crate::fp8`]).
    F8E4M3,
    /// OCP fp8 E5M2: 5 exponent bits, 2 mantissa bits, IEEE-like inf/NaN, max 57344.
    F8E5M2,
}

impl DType {
    /// All element types, in declaration order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::Bool,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// The name used in IR text and in `Tensor<bf16, ..>` type parameters.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::Bool => "bool",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }

    /// Parses an IR / Rust type name (`f32`, `bf16`, `f8e4m3`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Storage size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Bool | DType::F8E4M3 | DType::F8E5M2 => 1,
        }
    }

    /// True for floating-point types (including fp8).
    pub fn is_float(self) -> bool {
        !matches!(self, DType::I32 | DType::Bool)
    }

    /// The type arithmetic on this type accumulates in: f32 for every float type.
    pub fn accumulator(self) -> DType {
        if self.is_float() { DType::F32 } else { self }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of a shape: a symbol bound at launch (`M`) or a constant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A symbol bound at launch.
    Sym(String),
    /// A constant size.
    Const(u64),
}

impl Dim {
    /// Shorthand for a symbolic dimension.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(name.to_string())
    }

    /// True when this is the constant 1 (broadcastable).
    pub fn is_one(&self) -> bool {
        matches!(self, Dim::Const(1))
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Sym(s) => f.write_str(s),
            Dim::Const(c) => write!(f, "{c}"),
        }
    }
}

/// A symbolic shape, outermost dimension first (row-major).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// Rank (number of dimensions).
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The shape of a rank-0 tensor.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// Numpy-style broadcast of two shapes (trailing dims aligned; a dim of 1 stretches).
    pub fn broadcast(&self, other: &Shape) -> Result<Shape, String> {
        let r = self.rank().max(other.rank());
        let mut out = Vec::with_capacity(r);
        for i in 0..r {
            let a = (i + self.rank()).checked_sub(r).map(|j| &self.0[j]);
            let b = (i + other.rank()).checked_sub(r).map(|j| &other.0[j]);
            out.push(match (a, b) {
                (Some(a), None) => a.clone(),
                (None, Some(b)) => b.clone(),
                (Some(a), Some(b)) if a == b => a.clone(),
                (Some(a), Some(b)) if a.is_one() => b.clone(),
                (Some(a), Some(b)) if b.is_one() => a.clone(),
                (Some(a), Some(b)) => {
                    return Err(format!(
                        "shapes {self} and {other} do not broadcast: dim {a} vs {b}"
                    ));
                }
                (None, None) => unreachable!(),
            });
        }
        Ok(Shape(out))
    }

    /// The symbols of this shape, in order of first appearance.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|d| match d {
            Dim::Sym(s) => Some(s.as_str()),
            Dim::Const(_) => None,
        })
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Element type plus symbolic shape: `bf16[M, K]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// The element type.
    pub dtype: DType,
    /// The dims, outermost first.
    pub shape: Shape,
}

impl TensorType {
    /// Builds a tensor type.
    pub fn new(dtype: DType, shape: Shape) -> Self {
        TensorType { dtype, shape }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("f64"), None);
    }

    #[test]
    fn broadcast_rules() {
        let mn = Shape(vec![Dim::sym("M"), Dim::sym("N")]);
        let n = Shape(vec![Dim::sym("N")]);
        let m1 = Shape(vec![Dim::sym("M"), Dim::Const(1)]);
        assert_eq!(mn.broadcast(&n).unwrap(), mn);
        assert_eq!(m1.broadcast(&mn).unwrap(), mn);
        assert_eq!(Shape::scalar().broadcast(&mn).unwrap(), mn);
        let err = mn.broadcast(&Shape(vec![Dim::sym("K")])).unwrap_err();
        assert!(err.contains("N vs K"), "{err}");
    }
}
