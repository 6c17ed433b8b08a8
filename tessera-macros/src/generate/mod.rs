//! Code generation (quote): the static kernel definitions and their launch wrappers.

pub mod kernel;
pub mod program;
pub mod tile;
