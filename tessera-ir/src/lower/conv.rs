//! `conv2d` kernels. Not lowered yet: the graph op, its verifier, the f64 reference and the
//! rewrites exist, but there is no Tile IR lowering, so compiling a kernel that keeps a
//! `conv2d` node is an error that says so.
use super::{Lower, LowerError};
use crate::schedule::Schedule;

pub(super) fn lower(l: &mut Lower, _s: &Schedule) -> Result<(), LowerError> {
    Err(l.err(
        l.k.root,
        "conv2d has no Tile IR lowering yet (the implicit-GEMM kernel is not implemented)",
    ))
}
