//! # tessera-sim — a PTX simulator for any PTX
//!
//! Parse a PTX module, allocate device memory, launch any entry with a grid, a block, dynamic
//! shared memory and typed parameters, and get back every bug the checkers found (named by
//! buffer and offset or shared variable and offset), what ran, and performance counters.
//!
//! ```
//! use tessera_sim::{LaunchConfig, Memory, Module, Options, Param};
//!
//! let ptx = r#"
//! .version 7.4
//! .target sm_80
//! .address_size 64
//! .visible .entry scale(.param .u64 x, .param .u32 n, .param .f32 s)
//! {
//!     .reg .pred %p<2>;
//!     .reg .b32 %r<4>;
//!     .reg .f32 %f<3>;
//!     .reg .b64 %rd<4>;
//!     ld.param.u64 %rd1, [x];
//!     ld.param.u32 %r1, [n];
//!     ld.param.f32 %f1, [s];
//!     mov.u32 %r2, %tid.x;
//!     mad.lo.u32 %r3, %ctaid.x, %ntid.x, %r2;
//!     setp.ge.u32 %p1, %r3, %r1;
//!     @%p1 ret;
//!     mul.wide.u32 %rd2, %r3, 4;
//!     add.s64 %rd3, %rd1, %rd2;
//!     ld.global.f32 %f2, [%rd3];
//!     mul.f32 %f2, %f2, %f1;
//!     st.global.f32 [%rd3], %f2;
//!     ret;
//! }
//! "#;
//! let module = Module::parse(ptx)?;
//! let mut mem = Memory::new();
//! let x = mem.alloc_named("x", 100 * 4)?;
//! let data: Vec<u8> = (0..100).flat_map(|i| (i as f32).to_le_bytes()).collect();
//! mem.upload(x, &data)?;
//! let cfg = LaunchConfig::linear(2, 64);
//! let report = module.launch(&mut mem, "scale", cfg, &[Param::Ptr(x), Param::U32(100), Param::F32(0.5)], &Options::default())?;
//! assert!(report.is_clean());
//! let mut out = vec![0u8; 400];
//! mem.download(x, &mut out)?;
//! assert_eq!(f32::from_le_bytes(out[4 * 7..4 * 8].try_into().unwrap()), 3.5);
//!
//! // `n` = 101 is one element too many: every finding names the buffer and the offset
//! let report = module.launch(&mut mem, "scale", cfg, &[Param::Ptr(x), Param::U32(101), Param::F32(0.5)], &Options::default())?;
//! let f = &report.findings[0];
//! assert_eq!(f.kind, tessera_sim::FindingKind::OutOfBounds);
//! assert_eq!(f.location, Some(tessera_sim::Location::Global { buffer: "x".into(), offset: 400, size: 400 }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod approx;
mod check;
#[cfg(feature = "cli")]
pub mod cli;
mod convert;
mod counters;
mod error;
mod exec;
mod launch;
mod memory;
mod mma;
mod module;
mod report;
#[cfg(test)]
mod tests;

pub use check::Checks;
pub use counters::{Counters, GlobalAccess, InstMix, SharedAccess};
pub use error::{ParseError, SimError};
pub use launch::{LaunchConfig, Options, Param, max_shared_per_block};
pub use memory::{Allocation, DevicePtr, Memory, Transfers, Usage};
pub use module::{Entry, Module, ParamDecl, ParamType, Unsupported};
pub use report::{Finding, FindingKind, Location, Report, Stats};
