//! Graph IR verifier: handles first, then every node's type re-inferred; all errors collected.

use super::{Graph, Op, infer, print::write_graph};
use crate::{Dim, TensorType};
use std::fmt;

/// All problems found in a graph, each tied to a value.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    /// `(node index, message)`; the message starts with the value's name.
    pub errors: Vec<(usize, String)>,
    /// The graph printed with `; error:` lines under the offending nodes.
    pub annotated: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (_, e) in &self.errors {
            writeln!(f, "error: {e}")?;
        }
        write!(f, "{}", self.annotated)
    }
}

impl std::error::Error for VerifyError {}

/// Checks handles (operands defined before use), parameter numbering, and types.
///
/// ```
/// let g = tessera_ir::graph::parse(
///     "graph @k(%x: f32[M, K], %w: f32[J, N]) -> f32[M, N] {\n  %2 = matmul %x, %w : f32[M, N]\n  return %2\n}",
/// ).unwrap();
/// let err = tessera_ir::graph::verify(&g).unwrap_err();
/// assert!(err.to_string().contains("%2: matmul: inner dims differ"));
/// ```
pub fn verify(g: &Graph) -> Result<(), VerifyError> {
    let mut errors = Vec::new();
    let n = g.nodes.len();
    for (i, node) in g.nodes.iter().enumerate() {
        let name = g.value_name(super::Value(i as u32));
        if let Some(bad) = node.args.iter().find(|a| a.index() >= i) {
            errors.push((
                i,
                format!("{name}: operand %{} is not defined before its use", bad.0),
            ));
            continue;
        }
        if let Err(m) = check_size(&node.ty) {
            errors.push((i, format!("{name}: {m}")));
        }
        match &node.op {
            Op::Param { index, .. } => {
                if g.params.get(*index).map(|p| p.index()) != Some(i) {
                    errors.push((
                        i,
                        format!("{name}: parameter index {index} does not match the signature"),
                    ));
                }
            }
            Op::Broadcast => {
                if node.args.len() != 1 {
                    errors.push((i, format!("{name}: broadcast expects 1 operand")));
                    continue;
                }
                let x = &g.ty(node.args[0]);
                if x.dtype != node.ty.dtype
                    || x.shape.broadcast(&node.ty.shape).as_ref() != Ok(&node.ty.shape)
                {
                    errors.push((
                        i,
                        format!("{name}: broadcast: {x} does not broadcast to {}", node.ty),
                    ));
                }
            }
            op => {
                let tys: Vec<_> = node.args.iter().map(|a| g.ty(*a)).collect();
                match infer(op, &tys) {
                    Err(m) => errors.push((i, format!("{name}: {}: {m}", op.name()))),
                    Ok(t) if t != node.ty => errors.push((
                        i,
                        format!(
                            "{name}: {}: declared type {} but the operands give {t}",
                            op.name(),
                            node.ty
                        ),
                    )),
                    Ok(_) => {}
                }
            }
        }
    }
    if g.output.index() >= n {
        errors.push((
            n.saturating_sub(1),
            format!("return of undefined value %{}", g.output.0),
        ));
    }
    if errors.is_empty() {
        return Ok(());
    }
    let mut annotated = String::new();
    let _ = write_graph(&mut annotated, g, &errors);
    Err(VerifyError { errors, annotated })
}

/// Checks that the constant part of a type's shape, times the element size, fits in `isize`
/// bytes (the most any allocation can hold); symbolic dims are checked at launch.
fn check_size(t: &TensorType) -> Result<(), String> {
    let mut n = t.dtype.size_bytes() as u64;
    for d in &t.shape.0 {
        if let Dim::Const(c) = d {
            n = n
                .checked_mul(*c)
                .filter(|&n| n <= isize::MAX as u64)
                .ok_or_else(|| format!("{t} needs more than {} bytes", isize::MAX))?;
        }
    }
    Ok(())
}
