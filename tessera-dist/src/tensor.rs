//! Distributed tensors: distribute, gather, and redistribute by a plan run as SPMD code on every
//! rank (threads of the local backend, or MPI processes).

use crate::groups::CommCache;
use crate::layout::{copy_region, slice};
use crate::local::{Counters, GroupShared, run_threads};
use crate::{
    CollectiveCounts, CommElem, Communicator, DistError, LocalComm, Mesh, Plan, Result, ShardSpec,
    execute_plan, plan_redistribute,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tessera::Tensor;

/// What one rank needs to run SPMD code: its mesh position and a communicator per axis group.
pub trait RankContext {
    /// The backend's communicator.
    type Comm: Communicator;
    /// The mesh.
    fn mesh(&self) -> &Mesh;
    /// This device's mesh rank.
    fn rank(&self) -> usize;
    /// This rank's communicator for its group along `axes` (first axis major), created on first
    /// use. Every rank must ask for the same groups in the same order.
    fn comm(&self, axes: &[String]) -> Result<Arc<Self::Comm>>;
}

/// The local backend over a mesh: one thread per device.
///
/// ```
/// use tessera_dist::{Algorithm, Communicator, LocalWorld, Mesh, RankContext, ReduceOp};
/// let mesh = Mesh::local([("dp", 2), ("tp", 3)])?;
/// let (sums, counts) = LocalWorld::run(&mesh, |ctx| {
///     let tp = ctx.comm(&["tp".to_string()])?;
///     let mut x = [ctx.rank() as f32];
///     tp.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Ring)?;
///     Ok(x[0])
/// })?;
/// assert_eq!(sums, vec![3.0, 3.0, 3.0, 12.0, 12.0, 12.0]);   // 0+1+2 and 3+4+5
/// assert_eq!(counts.total(), 2);                            // one all-reduce per tp group
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
pub struct LocalWorld {
    mesh: Mesh,
    counters: Arc<Counters>,
    groups: CommCache<LocalComm>,
    shared: Mutex<Vec<Arc<GroupShared>>>,
}

/// One thread's view of a [`LocalWorld`].
pub struct LocalRank<'a> {
    world: &'a LocalWorld,
    rank: usize,
}

impl LocalWorld {
    /// Runs `f` once per device, each on its own thread, and returns the results by rank and the
    /// collectives that ran (counted once per group).
    pub fn run<R: Send>(
        mesh: &Mesh,
        f: impl Fn(&LocalRank<'_>) -> Result<R> + Sync,
    ) -> Result<(Vec<R>, CollectiveCounts)> {
        let world = LocalWorld {
            mesh: mesh.clone(),
            counters: Arc::new(Counters::default()),
            groups: CommCache::default(),
            shared: Mutex::new(Vec::new()),
        };
        let ranks: Vec<LocalRank<'_>> = (0..mesh.size())
            .map(|rank| LocalRank {
                world: &world,
                rank,
            })
            .collect();
        let poison = || {
            for s in world
                .shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
            {
                s.barrier.poison();
            }
        };
        let out = run_threads(ranks, poison, f)?;
        Ok((out, world.counters.snapshot()))
    }
}

impl RankContext for LocalRank<'_> {
    type Comm = LocalComm;

    fn mesh(&self) -> &Mesh {
        &self.world.mesh
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn comm(&self, axes: &[String]) -> Result<Arc<LocalComm>> {
        let w = self.world;
        w.groups.get_per_group(&w.mesh, axes, self.rank, |g| {
            let domain = w.mesh.topology().domain_shape(g).map(|(_, m)| m);
            let (comms, shared) = LocalComm::group_with(g.len(), w.counters.clone(), domain);
            w.shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(shared);
            Ok(comms)
        })
    }
}

/// The shard one device holds of `global` under `spec`: its slice, or for a partial spec the
/// value on the first device of each partial group and the op's identity on the others.
fn local_piece<T: CommElem>(
    global: &Tensor<T>,
    spec: &ShardSpec,
    mesh: &Mesh,
    rank: usize,
) -> Result<Tensor<T>> {
    let ranges = spec.local_ranges(global.shape(), mesh, rank)?;
    let shape: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    let mut data = slice(&crate::host::slice(global)?, global.shape(), &ranges);
    if let Some((axes, op)) = spec.partial_state()
        && mesh.index_along(rank, axes)?.0 != 0
    {
        data.iter_mut().for_each(|x| *x = op.identity());
    }
    crate::host::tensor(data, &shape)
}

/// One rank's part of a distributed tensor: the form SPMD code (an MPI process, or one thread of
/// [`LocalWorld::run`]) holds.
#[derive(Clone, Debug, PartialEq)]
pub struct RankShard<T: CommElem> {
    spec: ShardSpec,
    shape: Vec<usize>,
    local: Tensor<T>,
}

impl<T: CommElem> RankShard<T> {
    /// This rank's piece of `global` (every rank passes the same `global`).
    pub fn from_global<X: RankContext>(
        ctx: &X,
        global: &Tensor<T>,
        spec: &ShardSpec,
    ) -> Result<Self> {
        let local = local_piece(global, spec, ctx.mesh(), ctx.rank())?;
        Ok(RankShard {
            spec: spec.clone(),
            shape: global.shape().to_vec(),
            local,
        })
    }

    /// Wraps a local shard (its shape must match the spec's local shape on this rank).
    pub fn from_local<X: RankContext>(
        ctx: &X,
        local: Tensor<T>,
        spec: &ShardSpec,
        global_shape: &[usize],
    ) -> Result<Self> {
        let want = spec.local_shape(global_shape, ctx.mesh(), ctx.rank())?;
        if local.shape() != want.as_slice() {
            return Err(DistError::Shape(format!(
                "rank {} shard is {:?}, the spec says {want:?}",
                ctx.rank(),
                local.shape()
            )));
        }
        Ok(RankShard {
            spec: spec.clone(),
            shape: global_shape.to_vec(),
            local,
        })
    }

    /// Wraps a shard whose shape the caller computed under `spec`.
    pub(crate) fn from_parts(spec: ShardSpec, shape: Vec<usize>, local: Tensor<T>) -> Self {
        RankShard { spec, shape, local }
    }

    /// The local shard.
    pub fn local(&self) -> &Tensor<T> {
        &self.local
    }
    /// The spec.
    pub fn spec(&self) -> &ShardSpec {
        &self.spec
    }
    /// The global shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The plan to `to`.
    pub fn plan<X: RankContext>(&self, ctx: &X, to: &ShardSpec) -> Result<Plan> {
        plan_redistribute(ctx.mesh(), &self.shape, size_of::<T>(), &self.spec, to)
    }

    /// Redistributes to `to` (collective: every rank calls it).
    pub fn redistribute<X: RankContext>(&self, ctx: &X, to: &ShardSpec) -> Result<Self> {
        let plan = self.plan(ctx, to)?;
        let local = execute_plan(ctx, &plan, self.local.clone())?;
        Ok(RankShard {
            spec: to.clone(),
            shape: self.shape.clone(),
            local,
        })
    }

    /// The whole tensor on every rank (collective: redistribute to replicated).
    pub fn gather<X: RankContext>(&self, ctx: &X) -> Result<Tensor<T>> {
        Ok(self.redistribute(ctx, &ShardSpec::replicated())?.local)
    }
}

/// A tensor spread over a mesh, all shards held by this process (the local backend's view).
///
/// ```
/// use tessera::Tensor;
/// use tessera_dist::{DistTensor, Mesh, Replicate, Shard, ShardSpec};
/// let mesh = Mesh::local([("tp", 2), ("pp", 2)])?;
/// let x = Tensor::from_vec((0..15).map(|i| i as f32).collect(), &[5, 3])?;
/// let d = DistTensor::distribute(&x, ShardSpec::new([Shard(["tp"]), Replicate]), &mesh)?;
/// assert_eq!(d.shard(0).shape(), &[3, 3]);     // ceil(5/2) rows
/// assert_eq!(d.shard(2).shape(), &[2, 3]);     // the trailing shard is smaller
/// // shard(tp) on dim 0 → shard(tp) on dim 1: one all-to-all per tp group.
/// let (moved, plan, seen) = d.redistribute_traced(&ShardSpec::new([Replicate, Shard(["tp"])]))?;
/// assert_eq!(plan.counts(), seen);
/// assert_eq!(moved.gather()?, x);
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DistTensor<T: CommElem> {
    mesh: Mesh,
    spec: ShardSpec,
    shape: Vec<usize>,
    shards: Vec<Tensor<T>>,
}

impl<T: CommElem> DistTensor<T> {
    /// Splits `global` over `mesh` by `spec`.
    pub fn distribute(global: &Tensor<T>, spec: ShardSpec, mesh: &Mesh) -> Result<Self> {
        let shards = (0..mesh.size())
            .map(|r| local_piece(global, &spec, mesh, r))
            .collect::<Result<_>>()?;
        Ok(DistTensor {
            mesh: mesh.clone(),
            spec,
            shape: global.shape().to_vec(),
            shards,
        })
    }

    /// Wraps per-device shards (e.g. the outputs of a local kernel per device); shapes are
    /// checked against the spec.
    pub fn from_shards(
        shards: Vec<Tensor<T>>,
        spec: ShardSpec,
        mesh: &Mesh,
        shape: &[usize],
    ) -> Result<Self> {
        if shards.len() != mesh.size() {
            return Err(DistError::Shape(format!(
                "{} shards for a mesh of {}",
                shards.len(),
                mesh.size()
            )));
        }
        for (r, s) in shards.iter().enumerate() {
            let want = spec.local_shape(shape, mesh, r)?;
            if s.shape() != want.as_slice() {
                return Err(DistError::Shape(format!(
                    "shard {r} is {:?}, the spec says {want:?}",
                    s.shape()
                )));
            }
        }
        Ok(DistTensor {
            mesh: mesh.clone(),
            spec,
            shape: shape.to_vec(),
            shards,
        })
    }

    /// The mesh.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }
    /// The spec.
    pub fn spec(&self) -> &ShardSpec {
        &self.spec
    }
    /// The global shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// All shards by rank.
    pub fn shards(&self) -> &[Tensor<T>] {
        &self.shards
    }
    /// Device `rank`'s shard.
    pub fn shard(&self, rank: usize) -> &Tensor<T> {
        &self.shards[rank]
    }

    /// Reassembles the global tensor on the host: reduces partial contributions (in partial-
    /// group order) and checks that every replica is bit-identical to its peers.
    pub fn gather(&self) -> Result<Tensor<T>> {
        let mesh = &self.mesh;
        let partial = self.spec.partial_state();
        // ranges → (partial index → (rank, shard))
        let mut pieces: BTreeMap<Vec<(usize, usize)>, BTreeMap<usize, usize>> = BTreeMap::new();
        for r in 0..mesh.size() {
            let ranges = self.spec.local_ranges(&self.shape, mesh, r)?;
            let key: Vec<(usize, usize)> = ranges.iter().map(|x| (x.start, x.end)).collect();
            let pidx = match partial {
                Some((axes, _)) => mesh.index_along(r, axes)?.0,
                None => 0,
            };
            let slot = pieces.entry(key).or_default();
            match slot.get(&pidx) {
                Some(&first) => {
                    let (a, b) = (
                        crate::host::slice(&self.shards[first])?,
                        crate::host::slice(&self.shards[r])?,
                    );
                    if bytemuck::cast_slice::<T, u8>(&a) != bytemuck::cast_slice::<T, u8>(&b) {
                        return Err(DistError::ReplicaMismatch(format!(
                            "ranks {first} and {r} hold different copies"
                        )));
                    }
                }
                None => {
                    slot.insert(pidx, r);
                }
            }
        }
        let mut out = vec![T::default(); self.shape.iter().product()];
        let zero = vec![0; self.shape.len()];
        for (key, contribs) in pieces {
            let ext: Vec<usize> = key.iter().map(|(a, b)| b - a).collect();
            let off: Vec<usize> = key.iter().map(|(a, _)| *a).collect();
            let mut acc =
                crate::host::to_vec(&self.shards[*contribs.values().next().expect("one")])?;
            if let Some((_, op)) = partial {
                for &r in contribs.values().skip(1) {
                    op.reduce_into(&mut acc, &crate::host::slice(&self.shards[r])?);
                }
            }
            copy_region(&acc, &ext, &zero, &mut out, &self.shape, &off, &ext);
        }
        crate::host::tensor(out, &self.shape)
    }

    /// The plan to `to`, without running it.
    pub fn plan(&self, to: &ShardSpec) -> Result<Plan> {
        plan_redistribute(&self.mesh, &self.shape, size_of::<T>(), &self.spec, to)
    }

    /// Redistributes to `to`: the cheapest plan, run by one thread per device.
    pub fn redistribute(&self, to: &ShardSpec) -> Result<DistTensor<T>> {
        Ok(self.redistribute_traced(to)?.0)
    }

    /// [`DistTensor::redistribute`], also returning the plan and the collectives observed.
    pub fn redistribute_traced(
        &self,
        to: &ShardSpec,
    ) -> Result<(DistTensor<T>, Plan, CollectiveCounts)> {
        let plan = self.plan(to)?;
        let (shards, seen) = LocalWorld::run(&self.mesh, |ctx| {
            execute_plan(ctx, &plan, self.shards[ctx.rank()].clone())
        })?;
        let out = DistTensor {
            mesh: self.mesh.clone(),
            spec: to.clone(),
            shape: self.shape.clone(),
            shards,
        };
        Ok((out, plan, seen))
    }
}
