//! # tessera-ir — the Tessera compiler
//!
//! One-way pipeline: **Graph IR** (whole-tensor ops with symbolic shapes) → fusion
//! ([`fuse`]) → **Schedule IR** (tile shape, warps, stages, vector width per fused kernel) →
//! **Tile IR** (a block program per kernel) → backends (the CPU runs Tile IR; PTX comes later).
//! Each level has a text form with a printer, a parser and a verifier.
//!
//! **Architecture invariant:** this crate depends on nothing of Tessera's; the macros and the
//! runtime depend on it.

#![deny(missing_docs)]

pub mod autodiff;
pub mod cost;
pub mod env;
pub mod fuse;
pub mod graph;
pub mod invocations;
pub mod lower;
pub mod manifest;
pub mod pipeline;
pub mod reference;
pub mod rewrite;
pub mod scalar;
pub mod schedule;
pub mod target;
pub mod text;
pub mod tile;

pub mod canonical;
pub mod fp8;
mod numerics;
mod types;

pub use numerics::{LossScaling, NumericsPolicy, Precision};
pub use types::{DType, Dim, Shape, TensorType};
