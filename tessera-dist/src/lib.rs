//! # tessera-dist — meshes, shard specs, distributed tensors and collectives
//!
//! * [`Mesh`]: named axes over devices (`Mesh::new([("tp", 2), ("pp", 2), ("dp", 2)], devices)`),
//!   per-axis groups ([`Mesh::axis`]) and a [`Topology`] (fast domains, link α and bandwidth).
//! * [`ShardSpec`]: per tensor dim, the mesh axes it is split over ([`Shard`]) or
//!   [`Replicate`], plus a partial (unreduced) state; uneven dims follow [`chunk_range`].
//! * [`DistTensor`]: `distribute`, `gather`, `redistribute` by an inspectable [`Plan`] — the
//!   cheapest sequence of slices and collectives under the α-β-γ model in [`collective_time`].
//! * [`Communicator`]: all-reduce (sum, max; ring, tree, hierarchical), reduce-scatter,
//!   all-gather, broadcast, send/recv, all-to-all, blocking and non-blocking. Backends:
//!   [`LocalComm`] (threads, default), `MpiComm` (feature `mpi`), `NcclComm` (feature `nccl`).
//!
//! ```
//! use tessera::Tensor;
//! use tessera_dist::{DistTensor, Mesh, ReduceOp, Replicate, Shard, ShardSpec};
//! let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
//! let x = Tensor::from_vec((0..20).map(|i| i as f32).collect(), &[5, 4])?;
//! let d = DistTensor::distribute(&x, ShardSpec::new([Shard(["tp"]), Shard(["pp"])]), &mesh)?;
//! let r = d.redistribute(&ShardSpec::new([Replicate, Shard(["tp", "dp"])]))?;
//! assert_eq!(r.gather()?, x);
//! # Ok::<(), tessera_dist::DistError>(())
//! ```
//!
//! **Architecture invariant:** `tessera-dist` moves buffers and knows nothing of PTX or the
//! compiler; it uses only `tessera`'s public `Tensor`/`Element`/`Device`.

#![deny(missing_docs)]

mod comm;
mod cost;
mod elem;
mod error;
mod exec;
mod groups;
mod host;
mod layout;
mod local;
pub mod megatron;
mod mesh;
#[cfg(feature = "mpi")]
pub mod mpi_backend;
#[cfg(feature = "nccl")]
pub mod nccl;
mod plan;
mod spec;
mod spmd;
mod tensor;
#[doc(hidden)]
pub mod testing;

pub use comm::{AsyncLane, CollectiveCounts, Communicator, Pending};
pub use cost::{Algorithm, CollectiveKind, bus_bandwidth, choose_all_reduce, collective_time};
pub use elem::{CommElem, ReduceOp};
pub use error::{DistError, Result};
pub use exec::execute_plan;
pub use local::{Counters, LocalComm};
pub use mesh::{AxisGroups, Link, Mesh, Topology};
pub use plan::{Plan, PlannedStep, Step, plan_redistribute, redistribute_edges};
pub use spec::{AxisRole, DimSpec, Replicate, Shard, ShardSpec, chunk_len, chunk_range};
pub use spmd::{
    AnyTensor, Erase, LaunchPlan, LocalKernel, Microbatches, Spmd, SpmdArg, SpmdKernel, Stage,
    Statistics, StatsChoice, StatsPath, spmd,
};
pub use tensor::{DistTensor, LocalRank, LocalWorld, RankContext, RankShard};
