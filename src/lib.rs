//! Shared helpers of the workspace's examples, benches and integration tests.
//!
//! The user-facing API is the `tessera` crate; this package only holds what the examples and
//! tests at the workspace root have in common.

pub mod reference;
