//! The MPI backend (feature `mpi`): rsmpi over the system MPI (Debian's OpenMPI). One process per
//! rank; run under `mpirun`. MPI initialises once per process ([`MpiWorld::init`]), with
//! `MPI_THREAD_MULTIPLE` so each communicator's async lane (a duplicated communicator driven by
//! its own thread) can overlap collectives with compute.
//!
//! Reductions use MPI's native `MPI_Allreduce` / `MPI_Reduce_scatter_block` (MPI picks the
//! algorithm; the [`Algorithm`] argument is advisory here) for `f32` and `i32`; `f16`/`bf16`
//! move (gather, broadcast, all-to-all, send/recv) but are not reduced by MPI.

use crate::comm::check_len;
use crate::groups::CommCache;
use crate::{
    Algorithm, AsyncLane, CommElem, Communicator, DistError, Mesh, RankContext, ReduceOp, Result,
};
use mpi::collective::SystemOperation;
use mpi::topology::{Color, Communicator as _, SimpleCommunicator};
use mpi::traits::*;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use tessera::DType;

/// The MPI environment of this process.
pub struct MpiWorld {
    universe: mpi::environment::Universe,
}

impl MpiWorld {
    /// Initialises MPI (once per process) with `MPI_THREAD_MULTIPLE`.
    pub fn init() -> Result<MpiWorld> {
        let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .ok_or_else(|| DistError::Backend {
                backend: "mpi",
                message: "MPI was already initialised".into(),
            })?;
        if level != mpi::Threading::Multiple {
            return Err(DistError::Backend {
                backend: "mpi",
                message: format!("MPI gave thread level {level:?}, need Multiple"),
            });
        }
        Ok(MpiWorld { universe })
    }

    /// This process's rank in `MPI_COMM_WORLD`.
    pub fn rank(&self) -> usize {
        self.universe.world().rank() as usize
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.universe.world().size() as usize
    }

    /// A communicator over all processes.
    pub fn comm(&self) -> MpiComm {
        MpiComm::new(self.universe.world().duplicate())
    }

    /// This process's view of `mesh` (its size must equal the process count).
    pub fn rank_context(&self, mesh: &Mesh) -> Result<MpiRank> {
        if mesh.size() != self.size() {
            return Err(DistError::Shape(format!(
                "mesh of {} devices but {} MPI processes",
                mesh.size(),
                self.size()
            )));
        }
        Ok(MpiRank {
            mesh: mesh.clone(),
            world: ManuallyDrop::new(self.universe.world().duplicate()),
            cache: CommCache::default(),
        })
    }
}

/// One rank of an MPI communicator.
pub struct MpiComm {
    // Communicators are never freed: MPI_Finalize reclaims them, and a lane thread may still hold
    // one when the universe finalises.
    comm: ManuallyDrop<SimpleCommunicator>,
    lane: AsyncLane<MpiComm>,
}

// SAFETY: MPI is initialised with MPI_THREAD_MULTIPLE; a communicator handle may be used from any
// thread, and each async lane has its own duplicated communicator.
unsafe impl Send for MpiComm {}
unsafe impl Sync for MpiComm {}

fn err(what: &str) -> DistError {
    DistError::Unsupported {
        backend: "mpi",
        what: what.to_string(),
    }
}

impl MpiComm {
    fn new(comm: SimpleCommunicator) -> MpiComm {
        let lane = MpiComm {
            comm: ManuallyDrop::new(comm.duplicate()),
            lane: AsyncLane::none(),
        };
        MpiComm {
            comm: ManuallyDrop::new(comm),
            lane: AsyncLane::new(lane),
        }
    }

    fn op(op: ReduceOp) -> SystemOperation {
        match op {
            ReduceOp::Sum => SystemOperation::sum(),
            ReduceOp::Max => SystemOperation::max(),
        }
    }

    /// Agree on the element count first, so a mismatch is an error on every rank, not a hang.
    fn check_same_len(&self, len: usize) -> Result<()> {
        let mine = len as u64;
        let (mut lo, mut hi) = (0u64, 0u64);
        self.comm
            .all_reduce_into(&mine, &mut lo, SystemOperation::min());
        self.comm
            .all_reduce_into(&mine, &mut hi, SystemOperation::max());
        if lo != hi {
            return Err(DistError::Length(format!(
                "ranks passed between {lo} and {hi} elements"
            )));
        }
        Ok(())
    }
}

impl Communicator for MpiComm {
    const BACKEND: &'static str = "mpi";

    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    fn size(&self) -> usize {
        self.comm.size() as usize
    }

    fn all_reduce<T: CommElem>(
        &self,
        data: &mut [T],
        op: ReduceOp,
        _algo: Algorithm,
    ) -> Result<()> {
        self.check_same_len(data.len())?;
        let send = data.to_vec();
        match T::DTYPE {
            DType::F32 => self.comm.all_reduce_into(
                bytemuck::cast_slice::<T, f32>(&send),
                bytemuck::cast_slice_mut::<T, f32>(data),
                Self::op(op),
            ),
            DType::I32 => self.comm.all_reduce_into(
                bytemuck::cast_slice::<T, i32>(&send),
                bytemuck::cast_slice_mut::<T, i32>(data),
                Self::op(op),
            ),
            d => return Err(err(&format!("reductions of {d:?}"))),
        }
        Ok(())
    }

    fn reduce_scatter_in_place<T: CommElem>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let n = self.size();
        if data.len() % n != 0 {
            return Err(DistError::Length(format!(
                "reduce_scatter: {} elements is not {n} equal blocks",
                data.len()
            )));
        }
        self.check_same_len(data.len())?;
        let b = data.len() / n;
        let r = self.rank();
        let send = data.to_vec();
        match T::DTYPE {
            DType::F32 => self.comm.reduce_scatter_block_into(
                bytemuck::cast_slice::<T, f32>(&send),
                bytemuck::cast_slice_mut::<T, f32>(&mut data[r * b..(r + 1) * b]),
                Self::op(op),
            ),
            DType::I32 => self.comm.reduce_scatter_block_into(
                bytemuck::cast_slice::<T, i32>(&send),
                bytemuck::cast_slice_mut::<T, i32>(&mut data[r * b..(r + 1) * b]),
                Self::op(op),
            ),
            d => return Err(err(&format!("reductions of {d:?}"))),
        }
        Ok(())
    }

    fn all_gather_in_place<T: CommElem>(&self, data: &mut [T]) -> Result<()> {
        let n = self.size();
        if data.len() % n != 0 {
            return Err(DistError::Length(format!(
                "all_gather: {} elements is not {n} equal blocks",
                data.len()
            )));
        }
        self.check_same_len(data.len())?;
        let b = data.len() / n;
        let r = self.rank();
        let send: Vec<u8> = bytemuck::cast_slice(&data[r * b..(r + 1) * b]).to_vec();
        self.comm
            .all_gather_into(&send[..], bytemuck::cast_slice_mut::<T, u8>(data));
        Ok(())
    }

    fn broadcast<T: CommElem>(&self, data: &mut [T], root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(DistError::BadRank {
                rank: root,
                size: self.size(),
            });
        }
        self.check_same_len(data.len())?;
        self.comm
            .process_at_rank(root as i32)
            .broadcast_into(bytemuck::cast_slice_mut::<T, u8>(data));
        Ok(())
    }

    fn all_to_all<T: CommElem>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        check_len(recv.len(), send.len(), "all_to_all: recv vs send")?;
        let n = self.size();
        if send.len() % n != 0 {
            return Err(DistError::Length(format!(
                "all_to_all: {} elements is not {n} equal blocks",
                send.len()
            )));
        }
        self.check_same_len(send.len())?;
        self.comm.all_to_all_into(
            bytemuck::cast_slice::<T, u8>(send),
            bytemuck::cast_slice_mut::<T, u8>(recv),
        );
        Ok(())
    }

    fn send<T: CommElem>(&self, data: &[T], peer: usize) -> Result<()> {
        if peer >= self.size() {
            return Err(DistError::BadRank {
                rank: peer,
                size: self.size(),
            });
        }
        self.comm
            .process_at_rank(peer as i32)
            .send(bytemuck::cast_slice::<T, u8>(data));
        Ok(())
    }

    fn recv<T: CommElem>(&self, data: &mut [T], peer: usize) -> Result<()> {
        if peer >= self.size() {
            return Err(DistError::BadRank {
                rank: peer,
                size: self.size(),
            });
        }
        let status = self
            .comm
            .process_at_rank(peer as i32)
            .receive_into(bytemuck::cast_slice_mut::<T, u8>(data));
        let got = status.count(u8::equivalent_datatype()) as usize;
        check_len(
            got,
            std::mem::size_of_val(data),
            "recv: message bytes vs buffer bytes",
        )
    }

    fn barrier(&self) -> Result<()> {
        self.comm.barrier();
        Ok(())
    }

    fn lane(&self) -> &AsyncLane<Self> {
        &self.lane
    }
}

/// One MPI process's view of a mesh: its rank and a communicator per axis group
/// (`MPI_Comm_split` by group, keyed by position).
pub struct MpiRank {
    mesh: Mesh,
    world: ManuallyDrop<SimpleCommunicator>,
    cache: CommCache<MpiComm>,
}

// SAFETY: see `MpiComm`.
unsafe impl Send for MpiRank {}
unsafe impl Sync for MpiRank {}

impl RankContext for MpiRank {
    type Comm = MpiComm;

    fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// `MPI_Comm_split` of the world by this rank's group (collective: every process asks for
    /// the same axes in the same order); this process holds only its own group's communicator.
    fn comm(&self, axes: &[String]) -> Result<Arc<MpiComm>> {
        let r = self.rank();
        self.cache.get(&self.mesh, axes, r, |groups| {
            let color = Color::with_value(groups.group_index(r) as i32);
            let sub = self
                .world
                .split_by_color_with_key(color, groups.position(r) as i32)
                .ok_or_else(|| DistError::Backend {
                    backend: "mpi",
                    message: "MPI_Comm_split gave no communicator".into(),
                })?;
            let mut by_rank: Vec<Option<MpiComm>> = (0..self.mesh.size()).map(|_| None).collect();
            by_rank[r] = Some(MpiComm::new(sub));
            Ok(by_rank)
        })
    }
}
