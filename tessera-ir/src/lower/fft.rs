//! `fft` / `ifft` kernels. Not lowered yet: the graph op, its verifier and the f64 reference
//! (a naive DFT) exist, but there is no Tile IR lowering, so compiling a kernel that keeps an
//! FFT node is an error that says so.
use super::{Lower, LowerError};
use crate::schedule::Schedule;

pub(super) fn lower(l: &mut Lower, _s: &Schedule) -> Result<(), LowerError> {
    Err(l.err(
        l.k.root,
        "fft/ifft have no Tile IR lowering yet (the Stockham kernel is not implemented)",
    ))
}
