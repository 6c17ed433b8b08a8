//! Layout kernels (`pad`, `complex`, `real`, `causal_mask`, `spectral_mul`). Not lowered yet:
//! the graph ops, their verifiers and f64 references exist; a kernel that keeps one of these
//! nodes (a `causal_mask` the attention rewrite did not absorb, or a spectral convolution) is
//! an error that says so.
use super::{Lower, LowerError};
use crate::schedule::Schedule;

pub(super) fn lower(l: &mut Lower, _s: &Schedule) -> Result<(), LowerError> {
    let op = l.g.node(l.k.root).op.name();
    Err(l.err(
        l.k.root,
        format!("`{op}` has no Tile IR lowering yet (layout kernels are not implemented)"),
    ))
}
