//! The NCCL backend (feature `nccl`): cudarc's NCCL bindings, loaded at run time. One CUDA device
//! per rank, single process ([`NcclComm::group`]); host buffers are staged through device
//! memory. All-to-all is grouped send/recv. On a machine without a CUDA driver or NCCL library,
//! [`NcclComm::group`] returns [`DistError::NoGpu`] before touching anything that would panic.
//! Reductions and moves support `f32`, `f16`, `bf16` and `i32`. [`NcclWorld::run`] is the
//! [`RankContext`] over a mesh (one thread per GPU, a communicator per axis group), so
//! `RankShard`, redistribution and the SPMD launch ([`crate::Spmd::run_rank`]) run on NCCL
//! through the same code as the local and MPI backends.

use crate::comm::check_len;
use crate::groups::CommCache;
use crate::{
    Algorithm, AsyncLane, CommElem, Communicator, DistError, Mesh, RankContext, ReduceOp, Result,
};
use cudarc::driver::{CudaContext, CudaSlice, DeviceRepr, ValidAsZeroBits};
use cudarc::nccl::safe::{Comm, NcclType, group_end, group_start};
use std::sync::Arc;
use tessera::DType;

/// One rank (one GPU) of an NCCL communicator.
pub struct NcclComm {
    comm: Comm,
    lane: AsyncLane<NcclComm>,
}

// SAFETY: an NCCL communicator is used by one thread at a time here (each rank's thread, or its
// lane's thread on its own communicator).
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

fn gpu_err(e: impl std::fmt::Debug) -> DistError {
    DistError::Backend {
        backend: "nccl",
        message: format!("{e:?}"),
    }
}

/// Whether the CUDA driver and the NCCL library can be loaded.
pub fn available() -> Result<()> {
    // SAFETY: only tries to dlopen the libraries.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(DistError::NoGpu(
            "the CUDA driver library (libcuda) is not present".into(),
        ));
    }
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(DistError::NoGpu(
            "the NCCL library (libnccl) is not present".into(),
        ));
    }
    let n = CudaContext::device_count().map_err(gpu_err)?;
    if n < 1 {
        return Err(DistError::NoGpu("no CUDA device".into()));
    }
    Ok(())
}

impl NcclComm {
    /// One communicator per GPU `0..n` (plus one per GPU for the async lanes).
    ///
    /// ```
    /// // On a machine without a GPU this is an error, not a panic.
    /// if let Err(e) = tessera_dist::nccl::NcclComm::group(2) {
    ///     assert!(e.to_string().contains("no GPU") || e.to_string().contains("nccl"));
    /// }
    /// ```
    pub fn group(n: usize) -> Result<Vec<NcclComm>> {
        available()?;
        let count = CudaContext::device_count().map_err(gpu_err)? as usize;
        if count < n {
            return Err(DistError::NoGpu(format!(
                "{n} ranks need {n} GPUs, found {count}"
            )));
        }
        Self::on_devices(&(0..n).collect::<Vec<_>>())
    }

    /// One communicator per GPU of `devices` (ordinals), ranked in that order.
    fn on_devices(devices: &[usize]) -> Result<Vec<NcclComm>> {
        let make = || -> Result<Vec<Comm>> {
            let streams = devices
                .iter()
                .map(|&i| {
                    CudaContext::new(i)
                        .and_then(|c| c.new_stream())
                        .map_err(gpu_err)
                })
                .collect::<Result<Vec<_>>>()?;
            Comm::from_devices(streams).map_err(gpu_err)
        };
        let (main, lanes) = (make()?, make()?);
        Ok(main
            .into_iter()
            .zip(lanes)
            .map(|(comm, lane)| NcclComm {
                comm,
                lane: AsyncLane::new(NcclComm {
                    comm: lane,
                    lane: AsyncLane::none(),
                }),
            })
            .collect())
    }

    fn op(op: ReduceOp) -> cudarc::nccl::safe::ReduceOp {
        match op {
            ReduceOp::Sum => cudarc::nccl::safe::ReduceOp::Sum,
            ReduceOp::Max => cudarc::nccl::safe::ReduceOp::Max,
        }
    }

    fn up<E: DeviceRepr>(&self, host: &[E]) -> Result<CudaSlice<E>> {
        self.comm.stream().clone_htod(host).map_err(gpu_err)
    }

    fn zeros<E: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<E>> {
        self.comm
            .stream()
            .alloc_zeros::<E>(n.max(1))
            .map_err(gpu_err)
    }

    fn down<E: DeviceRepr>(&self, dev: &CudaSlice<E>, host: &mut [E]) -> Result<()> {
        let s = self.comm.stream();
        if !host.is_empty() {
            s.memcpy_dtoh(&dev.slice(0..host.len()), host)
                .map_err(gpu_err)?;
        }
        s.synchronize().map_err(gpu_err)
    }

    fn all_reduce_t<E: NcclType + DeviceRepr + ValidAsZeroBits>(
        &self,
        data: &mut [E],
        op: ReduceOp,
    ) -> Result<()> {
        let mut d = self.up(data)?;
        self.comm
            .all_reduce_in_place(&mut d, &Self::op(op))
            .map_err(gpu_err)?;
        self.down(&d, data)
    }

    fn reduce_scatter_t<E: NcclType + DeviceRepr + ValidAsZeroBits>(
        &self,
        data: &mut [E],
        op: ReduceOp,
    ) -> Result<()> {
        let b = data.len() / self.size();
        let s = self.up(data)?;
        let mut r = self.zeros::<E>(b)?;
        if b > 0 {
            self.comm
                .reduce_scatter(&s, &mut r.slice_mut(0..b), &Self::op(op))
                .map_err(gpu_err)?;
        }
        let me = self.rank();
        self.down(&r, &mut data[me * b..(me + 1) * b])
    }

    fn all_gather_t<E: NcclType + DeviceRepr + ValidAsZeroBits>(
        &self,
        data: &mut [E],
    ) -> Result<()> {
        let b = data.len() / self.size();
        let me = self.rank();
        let s = self.up(&data[me * b..(me + 1) * b])?;
        let mut r = self.zeros::<E>(data.len())?;
        if b > 0 {
            self.comm
                .all_gather(&s, &mut r.slice_mut(0..data.len()))
                .map_err(gpu_err)?;
        }
        self.down(&r, data)
    }

    fn broadcast_t<E: NcclType + DeviceRepr + ValidAsZeroBits>(
        &self,
        data: &mut [E],
        root: usize,
    ) -> Result<()> {
        let mut d = self.up(data)?;
        self.comm
            .broadcast_in_place(&mut d, root as i32)
            .map_err(gpu_err)?;
        self.down(&d, data)
    }

    /// All-to-all as grouped send/recv.
    fn all_to_all_t<E: NcclType + DeviceRepr + ValidAsZeroBits>(
        &self,
        send: &[E],
        recv: &mut [E],
    ) -> Result<()> {
        let n = self.size();
        let b = send.len() / n;
        let s = self.up(send)?;
        let mut r = self.zeros::<E>(recv.len())?;
        if b > 0 {
            group_start().map_err(gpu_err)?;
            for j in 0..n {
                self.comm
                    .send(&s.slice(j * b..(j + 1) * b), j as i32)
                    .map_err(gpu_err)?;
                self.comm
                    .recv(&mut r.slice_mut(j * b..(j + 1) * b), j as i32)
                    .map_err(gpu_err)?;
            }
            group_end().map_err(gpu_err)?;
        }
        self.down(&r, recv)
    }
}

macro_rules! typed {
    ($t:ty, $e:ident => $body:expr) => {
        match <$t>::DTYPE {
            DType::F32 => {
                type $e = f32;
                $body
            }
            DType::I32 => {
                type $e = i32;
                $body
            }
            DType::F16 => {
                type $e = half::f16;
                $body
            }
            DType::BF16 => {
                type $e = half::bf16;
                $body
            }
            d => Err(DistError::Unsupported {
                backend: "nccl",
                what: format!("{d:?}"),
            }),
        }
    };
}

impl Communicator for NcclComm {
    const BACKEND: &'static str = "nccl";

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.world_size()
    }

    /// NCCL picks ring or tree itself; the `Algorithm` argument is advisory.
    fn all_reduce<T: CommElem>(
        &self,
        data: &mut [T],
        op: ReduceOp,
        _algo: Algorithm,
    ) -> Result<()> {
        typed!(T, E => self.all_reduce_t::<E>(bytemuck::cast_slice_mut::<T, E>(data), op))
    }

    fn reduce_scatter_in_place<T: CommElem>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        if data.len() % self.size() != 0 {
            return Err(DistError::Length(format!(
                "reduce_scatter: {} elements is not {} equal blocks",
                data.len(),
                self.size()
            )));
        }
        typed!(T, E => self.reduce_scatter_t::<E>(bytemuck::cast_slice_mut::<T, E>(data), op))
    }

    fn all_gather_in_place<T: CommElem>(&self, data: &mut [T]) -> Result<()> {
        if data.len() % self.size() != 0 {
            return Err(DistError::Length(format!(
                "all_gather: {} elements is not {} equal blocks",
                data.len(),
                self.size()
            )));
        }
        typed!(T, E => self.all_gather_t::<E>(bytemuck::cast_slice_mut::<T, E>(data)))
    }

    fn broadcast<T: CommElem>(&self, data: &mut [T], root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(DistError::BadRank {
                rank: root,
                size: self.size(),
            });
        }
        typed!(T, E => self.broadcast_t::<E>(bytemuck::cast_slice_mut::<T, E>(data), root))
    }

    fn all_to_all<T: CommElem>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        check_len(recv.len(), send.len(), "all_to_all: recv vs send")?;
        if send.len() % self.size() != 0 {
            return Err(DistError::Length(format!(
                "all_to_all: {} elements is not {} equal blocks",
                send.len(),
                self.size()
            )));
        }
        typed!(T, E => self.all_to_all_t::<E>(bytemuck::cast_slice::<T, E>(send), bytemuck::cast_slice_mut::<T, E>(recv)))
    }

    fn send<T: CommElem>(&self, data: &[T], peer: usize) -> Result<()> {
        if peer >= self.size() {
            return Err(DistError::BadRank {
                rank: peer,
                size: self.size(),
            });
        }
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let d = self.up(bytes)?;
        if !bytes.is_empty() {
            self.comm.send(&d, peer as i32).map_err(gpu_err)?;
        }
        self.comm.stream().synchronize().map_err(gpu_err)
    }

    fn recv<T: CommElem>(&self, data: &mut [T], peer: usize) -> Result<()> {
        if peer >= self.size() {
            return Err(DistError::BadRank {
                rank: peer,
                size: self.size(),
            });
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
        let mut d = self.zeros::<u8>(bytes.len())?;
        if !bytes.is_empty() {
            self.comm
                .recv(&mut d.slice_mut(0..bytes.len()), peer as i32)
                .map_err(gpu_err)?;
        }
        self.down(&d, bytes)
    }

    fn barrier(&self) -> Result<()> {
        let mut one = [0i32];
        self.all_reduce_t::<i32>(&mut one, ReduceOp::Sum)
    }

    fn lane(&self) -> &AsyncLane<Self> {
        &self.lane
    }
}

/// NCCL over a mesh in one process: mesh rank `r` is GPU `r`, one thread per GPU.
pub struct NcclWorld {
    mesh: Mesh,
    groups: CommCache<NcclComm>,
}

/// One GPU thread's view of an [`NcclWorld`].
pub struct NcclRank<'a> {
    world: &'a NcclWorld,
    rank: usize,
}

impl NcclWorld {
    /// Runs `f` once per mesh rank, each on its own thread driving GPU `rank`; results by rank.
    ///
    /// ```
    /// use tessera_dist::{Mesh, RankContext, nccl::NcclWorld};
    /// let mesh = Mesh::local([("tp", 2)])?;
    /// // Without 2 GPUs and NCCL this is an error, not a panic.
    /// match NcclWorld::run(&mesh, |ctx| Ok(ctx.rank())) {
    ///     Ok(r) => assert_eq!(r, vec![0, 1]),
    ///     Err(e) => assert!(e.to_string().contains("GPU") || e.to_string().contains("nccl")),
    /// }
    /// # Ok::<(), tessera_dist::DistError>(())
    /// ```
    pub fn run<R: Send>(
        mesh: &Mesh,
        f: impl Fn(&NcclRank<'_>) -> Result<R> + Sync,
    ) -> Result<Vec<R>> {
        available()?;
        let count = CudaContext::device_count().map_err(gpu_err)? as usize;
        if count < mesh.size() {
            return Err(DistError::NoGpu(format!(
                "a mesh of {} needs {} GPUs, found {count}",
                mesh.size(),
                mesh.size()
            )));
        }
        let world = NcclWorld {
            mesh: mesh.clone(),
            groups: CommCache::default(),
        };
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..mesh.size())
                .map(|rank| {
                    let (world, f) = (&world, &f);
                    s.spawn(move || f(&NcclRank { world, rank }))
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(DistError::Backend {
                            backend: "nccl",
                            message: "a rank's thread panicked".into(),
                        })
                    })
                })
                .collect()
        })
    }
}

impl RankContext for NcclRank<'_> {
    type Comm = NcclComm;

    fn mesh(&self) -> &Mesh {
        &self.world.mesh
    }

    fn rank(&self) -> usize {
        self.rank
    }

    /// The first rank to ask creates every group's communicators along `axes` (NCCL creates a
    /// single-process group in one call over its GPUs).
    fn comm(&self, axes: &[String]) -> Result<Arc<NcclComm>> {
        let w = self.world;
        w.groups
            .get_per_group(&w.mesh, axes, self.rank, NcclComm::on_devices)
    }
}
