//! Front-end ASTs → `tessera-ir`: the Graph IR for `#[kernel]` (through `GraphBuilder`, which
//! owns the typing rules) and the compile-time check of `tile!` programs.

pub mod kernel;
pub mod tile;
