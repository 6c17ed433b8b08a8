//! Counters of compiler invocations in this process: how many times the pipeline compiled a
//! graph, lowered a kernel to Tile IR and emitted PTX.
//!
//! The runtime promises that launches of precompiled kernels on a PTX device run the PTX
//! embedded at build time without calling the compiler; tests read these counters to prove it.
//!
//! ```
//! use tessera_ir::{graph, invocations, pipeline};
//! let before = invocations::get();
//! let g = graph::parse("graph @id(%x: f32[N]) -> f32[N] {\n  %1 = exp %x : f32[N]\n  return %1\n}").unwrap();
//! pipeline::compile(&g, &Default::default()).unwrap();
//! let after = invocations::get();
//! assert!(after.compiles > before.compiles && after.lowerings > before.lowerings);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

static COMPILES: AtomicU64 = AtomicU64::new(0);
static LOWERINGS: AtomicU64 = AtomicU64::new(0);
static EMITS: AtomicU64 = AtomicU64::new(0);

/// Compiler invocations so far in this process (every thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Invocations {
    /// [`crate::pipeline::compile`] calls (verify, fuse, schedule and lower a whole graph).
    pub compiles: u64,
    /// Kernels lowered to Tile IR ([`crate::lower::lower`], [`crate::tile::dsl::lower`]).
    pub lowerings: u64,
    /// PTX modules emitted ([`crate::target::ptx::emit`]).
    pub emits: u64,
}

impl Invocations {
    /// Every invocation of any kind.
    pub fn total(&self) -> u64 {
        self.compiles + self.lowerings + self.emits
    }
}

/// The counters now.
pub fn get() -> Invocations {
    Invocations {
        compiles: COMPILES.load(Ordering::SeqCst),
        lowerings: LOWERINGS.load(Ordering::SeqCst),
        emits: EMITS.load(Ordering::SeqCst),
    }
}

pub(crate) fn compiled() {
    COMPILES.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn lowered() {
    LOWERINGS.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn emitted() {
    EMITS.fetch_add(1, Ordering::SeqCst);
}
