//! Binding a launch's symbolic dims (`M`, `N` …) to its argument sizes: a few entries kept
//! inline ([`Syms`]), names borrowed from the graph, nothing allocated or formatted unless an
//! error needs it.

use crate::tensor::TensorRef;
use crate::{Error, Result};
use smallvec::SmallVec;
use tessera_ir::Dim;
use tessera_ir::graph::{Graph, Value};

/// One bound symbol: its name (borrowed from the signature), its size and the parameter
/// that bound it (named only in an error).
#[derive(Clone, Copy, Debug)]
struct Bound<'g> {
    name: &'g str,
    size: usize,
    by: Value,
}

/// The symbol bindings of a launch, in the order the signature first names them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Syms<'g>(SmallVec<[Bound<'g>; 4]>);

impl Syms<'_> {
    /// The size bound to symbol `name`.
    pub fn get(&self, name: &str) -> Option<usize> {
        self.0.iter().find(|b| b.name == name).map(|b| b.size)
    }
}

/// Binds every symbolic dim of the signature to the argument sizes; the error names the dim,
/// both sizes and the parameters that disagree.
pub(crate) fn bind_symbols<'g>(
    kernel: &str,
    g: &'g Graph,
    args: &[TensorRef<'_>],
) -> Result<Syms<'g>> {
    let mut syms = Syms::default();
    for (p, a) in g.params.iter().zip(args) {
        // The name is formatted only where an error uses it: this runs on every launch.
        let ty = g.ty(*p);
        let pname = |v: Value| g.value_name(v).trim_start_matches('%').to_string();
        if a.dtype() != ty.dtype {
            return Err(Error::DTypeMismatch {
                kernel: kernel.into(),
                param: pname(*p),
                expected: ty.dtype.to_string(),
                got: a.dtype().to_string(),
            });
        }
        if a.shape().len() != ty.shape.rank() {
            return Err(Error::ShapeMismatch {
                kernel: kernel.into(),
                param: pname(*p),
                message: format!(
                    "must have rank {} ({}), got shape {:?}",
                    ty.shape.rank(),
                    ty.shape,
                    a.shape()
                ),
            });
        }
        for (axis, (d, &got)) in ty.shape.0.iter().zip(a.shape()).enumerate() {
            match d {
                Dim::Const(c) if *c as usize != got => {
                    return Err(Error::ShapeMismatch {
                        kernel: kernel.into(),
                        param: pname(*p),
                        message: format!(
                            "must have shape {}: dim {axis} must be {c}, got {got} (shape {:?})",
                            ty.shape,
                            a.shape()
                        ),
                    });
                }
                Dim::Const(_) => {}
                Dim::Sym(s) => match syms.0.iter().find(|b| b.name == s.as_str()) {
                    Some(b) if b.size != got => {
                        return Err(Error::DimMismatch {
                            kernel: kernel.into(),
                            dim: s.clone(),
                            param: pname(*p),
                            bound_by: format!("`{}`", pname(b.by)),
                            expected: b.size,
                            got,
                        });
                    }
                    Some(_) => {}
                    None => syms.0.push(Bound {
                        name: s,
                        size: got,
                        by: *p,
                    }),
                },
            }
        }
    }
    Ok(syms)
}

/// The sizes of `dims` under `syms`.
pub(crate) fn eval_shape(dims: &[Dim], syms: &Syms<'_>) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Const(c) => *c as usize,
            Dim::Sym(s) => syms
                .get(s)
                .expect("result dims are bound by the parameters (verified)"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;

    fn graph() -> Graph {
        tessera_ir::graph::parse(
            "graph @k(%x: f32[M, K], %w: f32[K, N]) -> f32[M, N] {\n  %2 = matmul %x, %w : f32[M, N]\n  return %2\n}",
        )
        .unwrap()
    }

    #[test]
    fn binds_each_symbol_once_and_evaluates_shapes() {
        let g = graph();
        let x = Tensor::<f32>::randn(&[3, 5], 1);
        let w = Tensor::<f32>::randn(&[5, 7], 2);
        let s = bind_symbols("k", &g, &[x.arg(), w.arg()]).unwrap();
        assert_eq!(
            (s.get("M"), s.get("K"), s.get("N")),
            (Some(3), Some(5), Some(7))
        );
        assert_eq!(s.get("Z"), None);
        assert_eq!(eval_shape(&g.ty(g.output).shape.0, &s), vec![3, 7]);
    }

    #[test]
    fn a_disagreeing_size_names_the_dim_and_both_parameters() {
        let g = graph();
        let x = Tensor::<f32>::randn(&[3, 5], 1);
        let w = Tensor::<f32>::randn(&[6, 7], 2);
        let e = bind_symbols("k", &g, &[x.arg(), w.arg()]).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains('K') && m.contains("`x`") && m.contains('w'),
            "{m}"
        );
        assert!(m.contains('5') && m.contains('6'), "{m}");
    }
}
