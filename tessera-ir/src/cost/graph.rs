//! Graph-level estimates for the rewrite engine's cost guards: the memory traffic and FLOPs of
//! a group of Graph IR nodes, timed on an [`Arch`]'s roofline.
//!
//! Graph IR shapes are symbolic; [`Sizes`] binds the symbols it knows and gives every other
//! symbol a nominal extent, so an estimate is a number the trace can print.

use super::Arch;
use crate::{Dim, TensorType};
use std::collections::HashMap;

/// Bytes moved to and from memory and floating-point operations of some work.
///
/// ```
/// use tessera_ir::cost::{Arch, graph::Work};
/// let w = Work { bytes: 3.35e12, flops: 0.0, half: false };
/// assert!((w.time(&Arch::H100) - 1.0).abs() < 1e-9);   // one second of HBM traffic
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// Bytes moved from memory.
    pub bytes: f64,
    /// Floating-point operations.
    pub flops: f64,
    /// The FLOPs run on 16-bit inputs (tensor cores), at the arch's 16-bit peak.
    pub half: bool,
}

impl Work {
    /// Roofline time: the slower of moving the bytes and doing the FLOPs.
    pub fn time(&self, arch: &Arch) -> f64 {
        let peak = if self.half {
            arch.peak_16
        } else {
            arch.peak_f32
        };
        (self.bytes / arch.bandwidth).max(self.flops / peak)
    }
}

impl std::ops::Add for Work {
    type Output = Work;
    fn add(self, o: Work) -> Work {
        Work {
            bytes: self.bytes + o.bytes,
            flops: self.flops + o.flops,
            half: self.half || o.half,
        }
    }
}

impl std::iter::Sum for Work {
    fn sum<I: Iterator<Item = Work>>(it: I) -> Work {
        it.fold(Work::default(), |a, b| a + b)
    }
}

/// Extents for estimates: bound symbols, and a nominal extent for the rest.
///
/// ```
/// use tessera_ir::{DType, Dim, Shape, TensorType, cost::graph::Sizes};
/// let s = Sizes::nominal(256);
/// let t = TensorType::new(DType::BF16, Shape(vec![Dim::sym("S"), Dim::Const(64)]));
/// assert_eq!(s.bytes(&t), 256.0 * 64.0 * 2.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Sizes {
    /// Extents of the symbols bound so far, by name.
    pub bound: HashMap<String, u64>,
    /// The extent of every symbol not in `bound`.
    pub nominal: u64,
}

impl Sizes {
    /// No symbol bound: every symbol is `nominal`.
    pub fn nominal(nominal: u64) -> Sizes {
        Sizes {
            bound: HashMap::new(),
            nominal,
        }
    }

    /// The extent of a dim.
    pub fn dim(&self, d: &Dim) -> u64 {
        match d {
            Dim::Const(c) => *c,
            Dim::Sym(s) => self.bound.get(s).copied().unwrap_or(self.nominal),
        }
    }

    /// Elements of a tensor type.
    pub fn numel(&self, t: &TensorType) -> f64 {
        t.shape.0.iter().map(|d| self.dim(d) as f64).product()
    }

    /// Bytes of a tensor type.
    pub fn bytes(&self, t: &TensorType) -> f64 {
        self.numel(t) * t.dtype.size_bytes() as f64
    }
}
