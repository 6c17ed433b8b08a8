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
//!
//! ## Supported instructions
//!
//! What the decoder (`module/decode.rs`) accepts; any other instruction, type or modifier makes
//! the entry [`Entry::unsupported`] (named with its line), never silently skipped.
//!
//! | class | instructions and forms |
//! |---|---|
//! | data movement | `mov`; `ld`/`st` on `.global` (`ld.global.nc`, `ldu.global`), `.shared`, `.local`, `.param` (loads) and generic addresses, scalar, `.v2`, `.v4`; `cvta`/`cvta.to` for `.global`/`.shared`/`.local` |
//! | asynchronous copies | `cp.async.ca`/`.cg` (cp-size 4/8/16, optional src-size), `cp.async.commit_group`, `cp.async.wait_group N`, `cp.async.wait_all` |
//! | integer | `add sub mul(.lo/.hi/.wide) mad(.lo/.hi/.wide) div rem min max abs neg and or xor not shl shr popc clz brev`, `prmt` (default mode), `bfe`, `bfi`, `lop3`, `shf.{l,r}.{wrap,clamp}` |
//! | floating point | f32/f64: `add sub mul fma mad min max abs neg`, `div` (`.rn`, `.full`, `.approx`), `testp`; f16, bf16, `.f16x2`, `.bf16x2`: `add sub mul fma min max abs neg` (`.relu` on `fma`, `.xorsign.abs` on `min`/`max`); `.approx.f32`: `ex2 lg2 sin cos tanh rsqrt rcp sqrt` (see [`Options::perturb_approx`]); `rcp.rn`/`sqrt.rn` on f32 and f64 |
//! | compare / select | `setp` (every comparison, combined `.and`/`.or`/`.xor` with a predicate), `selp` |
//! | conversion | `cvt` between integer, f16, bf16, tf32, f32, f64 (`.rn` for float results, `.rni .rzi .rmi .rpi` for integer results, `.sat`, `.ftz`); packed `cvt.rn(.satfinite)(.relu)` to `.f16x2`/`.bf16x2`/`.e4m3x2`/`.e5m2x2` and back |
//! | atomics | `atom`/`red` on global, shared and generic addresses: `add min max and or xor exch cas inc dec` |
//! | control | `bra` (`.uni` checked), `ret`, `exit`, `bar.sync`/`barrier.sync`, `membar`/`fence` (no-ops: execution is sequentially consistent) |
//! | warp collectives | `shfl.sync` (`up down bfly idx`), `vote.sync` (`all any uni ballot`), `ldmatrix.sync.aligned` (`.x1 .x2 .x4`, `.trans`) |
//! | tensor cores | `mma.sync.aligned.row.col`: m16n8k16 and m16n8k8 `.f32.{bf16,f16}.{bf16,f16}.f32`; m16n8k8 and m16n8k4 `.f32.tf32.tf32.f32`; m16n8k32 `.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32` (sm_89 / sm_90a fp8) |
//!
//! Unit tests (`src/tests/`) pin each family against references computed from the ISA's
//! definitions, on seeded random inputs: bit-exact for the bit instructions (`prmt bfe bfi
//! brev lop3 shf`), the conversions, `shfl.sync`, `cp.async`, divergence, the packed half
//! arithmetic (`add mul fma` on `.f16x2`/`.bf16x2`, correctly rounded), `.local` and
//! `ld.global.nc`; within f32 rounding of an f64 reference for every `mma` shape above but the
//! bf16/f16 m16n8k16 (fragment layouts written out from the ISA's tables in the test), whose
//! coverage is the `tessera` crate's agreement tests running every emitted GEMM (`mma`,
//! `ldmatrix`, `cp.async`, reductions) against its CPU backend. Each test kernel is also
//! accepted by ptxas for its targets when `TESSERA_PTXAS` is set (`scripts/ptxas-check`).
//! `ld.global.nc` reads like `ld.global`: the simulator does not check that nothing writes the
//! memory during the kernel.

#![deny(missing_docs)]

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
