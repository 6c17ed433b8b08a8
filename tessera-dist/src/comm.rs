//! The backend trait: one communicator per rank of a group, blocking and non-blocking
//! collectives.

use crate::{Algorithm, CollectiveKind, CommElem, DistError, ReduceOp, Result};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, Sender};

/// A rank's handle on one communication group (a mesh axis group, or any set of ranks).
///
/// Every rank of the group calls the same collectives in the same order (SPMD), like MPI and
/// NCCL. Buffer rules follow NCCL: `reduce_scatter` takes `size × block` elements and returns
/// one block; `all_gather` the reverse; `all_to_all` sends block `j` to rank `j`. In-place forms
/// keep rank `r`'s block at offset `r × block`. Uneven shards are padded by the caller
/// ([`crate::DistTensor`] does it with [`crate::chunk_len`]).
///
/// The `start_*` forms are non-blocking: they move their buffer to this communicator's
/// *async lane* (a second communicator over the same ranks, driven by its own thread, ops in issue
/// order) and return a [`Pending`] to `wait` on, so communication overlaps the caller's compute.
///
/// ```
/// use tessera_dist::{Algorithm, Communicator, LocalComm, ReduceOp};
/// let out = LocalComm::run(4, |c| {
///     let mut x = vec![c.rank() as f32 + 1.0; 3];
///     c.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Ring)?;            // blocking
///     let pending = c.start_all_reduce(vec![1.0f32; 5], ReduceOp::Sum, Algorithm::Tree);
///     let overlapped: f32 = (0..1000).map(|i| i as f32).sum();           // compute meanwhile
///     let y = pending.wait()?;
///     Ok((x, y, overlapped))
/// })?;
/// for (x, y, _) in out {
///     assert_eq!(x, vec![10.0; 3]);
///     assert_eq!(y, vec![4.0; 5]);
/// }
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
pub trait Communicator: Send + Sync + Sized + 'static {
    /// The backend's name (`local`, `mpi`, `nccl`).
    const BACKEND: &'static str;
    /// This rank inside the group.
    fn rank(&self) -> usize;
    /// Number of ranks in the group.
    fn size(&self) -> usize;
    /// In-place all-reduce.
    fn all_reduce<T: CommElem>(&self, data: &mut [T], op: ReduceOp, algo: Algorithm) -> Result<()>;
    /// In-place reduce-scatter: `data` holds `size` blocks; on return block `rank` is reduced
    /// (the others hold scratch).
    fn reduce_scatter_in_place<T: CommElem>(&self, data: &mut [T], op: ReduceOp) -> Result<()>;
    /// In-place all-gather: block `rank` of `data` is this rank's contribution.
    fn all_gather_in_place<T: CommElem>(&self, data: &mut [T]) -> Result<()>;
    /// Broadcast `root`'s buffer to every rank.
    fn broadcast<T: CommElem>(&self, data: &mut [T], root: usize) -> Result<()>;
    /// All-to-all: block `j` of `send` goes to rank `j`; block `j` of `recv` came from rank `j`.
    fn all_to_all<T: CommElem>(&self, send: &[T], recv: &mut [T]) -> Result<()>;
    /// Point-to-point send (may return before the matching `recv`).
    fn send<T: CommElem>(&self, data: &[T], peer: usize) -> Result<()>;
    /// Point-to-point receive of exactly `data.len()` elements from `peer`.
    fn recv<T: CommElem>(&self, data: &mut [T], peer: usize) -> Result<()>;
    /// Waits until every rank arrives.
    fn barrier(&self) -> Result<()>;
    /// The async lane the `start_*` forms use.
    fn lane(&self) -> &AsyncLane<Self>;

    /// Out-of-place all-reduce.
    fn all_reduce_into<T: CommElem>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        algo: Algorithm,
    ) -> Result<()> {
        check_len(send.len(), recv.len(), "all_reduce_into: send and recv")?;
        recv.copy_from_slice(send);
        self.all_reduce(recv, op, algo)
    }

    /// Out-of-place reduce-scatter: `send.len() == size × recv.len()`.
    fn reduce_scatter<T: CommElem>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        check_len(
            send.len(),
            recv.len() * self.size(),
            "reduce_scatter: send vs size × recv",
        )?;
        let mut work = send.to_vec();
        self.reduce_scatter_in_place(&mut work, op)?;
        let b = recv.len();
        recv.copy_from_slice(&work[self.rank() * b..(self.rank() + 1) * b]);
        Ok(())
    }

    /// Out-of-place all-gather: `recv.len() == size × send.len()`.
    fn all_gather<T: CommElem>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        check_len(
            recv.len(),
            send.len() * self.size(),
            "all_gather: recv vs size × send",
        )?;
        let b = send.len();
        recv[self.rank() * b..(self.rank() + 1) * b].copy_from_slice(send);
        self.all_gather_in_place(recv)
    }

    /// Non-blocking all-reduce.
    fn start_all_reduce<T: CommElem>(
        &self,
        mut data: Vec<T>,
        op: ReduceOp,
        algo: Algorithm,
    ) -> Pending<Vec<T>> {
        self.lane()
            .submit(move |c| c.all_reduce(&mut data, op, algo).map(|_| data))
    }
    /// Non-blocking reduce-scatter; returns this rank's block.
    fn start_reduce_scatter<T: CommElem>(&self, send: Vec<T>, op: ReduceOp) -> Pending<Vec<T>> {
        self.lane().submit(move |c| {
            let mut recv = vec![T::default(); send.len() / c.size().max(1)];
            c.reduce_scatter(&send, &mut recv, op).map(|_| recv)
        })
    }
    /// Non-blocking all-gather; returns all blocks.
    fn start_all_gather<T: CommElem>(&self, send: Vec<T>) -> Pending<Vec<T>> {
        self.lane().submit(move |c| {
            let mut recv = vec![T::default(); send.len() * c.size()];
            c.all_gather(&send, &mut recv).map(|_| recv)
        })
    }
    /// Non-blocking broadcast.
    fn start_broadcast<T: CommElem>(&self, mut data: Vec<T>, root: usize) -> Pending<Vec<T>> {
        self.lane()
            .submit(move |c| c.broadcast(&mut data, root).map(|_| data))
    }
    /// Non-blocking all-to-all.
    fn start_all_to_all<T: CommElem>(&self, send: Vec<T>) -> Pending<Vec<T>> {
        self.lane().submit(move |c| {
            let mut recv = vec![T::default(); send.len()];
            c.all_to_all(&send, &mut recv).map(|_| recv)
        })
    }
    /// Non-blocking send.
    fn start_send<T: CommElem>(&self, data: Vec<T>, peer: usize) -> Pending<()> {
        self.lane().submit(move |c| c.send(&data, peer))
    }
    /// Non-blocking receive of `len` elements.
    fn start_recv<T: CommElem>(&self, len: usize, peer: usize) -> Pending<Vec<T>> {
        self.lane().submit(move |c| {
            let mut data = vec![T::default(); len];
            c.recv(&mut data, peer).map(|_| data)
        })
    }
}

pub(crate) fn check_len(got: usize, want: usize, what: &str) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(DistError::Length(format!(
            "{what}: {got} elements, expected {want}"
        )))
    }
}

type Job<C> = Box<dyn FnOnce(&C) + Send>;

enum LaneState<C> {
    Idle(Box<C>),
    Running(Sender<Job<C>>),
    Absent,
}

/// A second communicator over the same ranks plus the thread that drives it: the non-blocking
/// collectives run here in issue order, so every rank sees them in the same order.
pub struct AsyncLane<C> {
    state: Mutex<LaneState<C>>,
}

impl<C: Send + 'static> AsyncLane<C> {
    /// A lane driving `comm` (its thread starts on first use).
    pub fn new(comm: C) -> Self {
        AsyncLane {
            state: Mutex::new(LaneState::Idle(Box::new(comm))),
        }
    }

    /// No lane: `start_*` calls return an error when waited on.
    pub fn none() -> Self {
        AsyncLane {
            state: Mutex::new(LaneState::Absent),
        }
    }

    /// Queues `f` on the lane.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&C) -> Result<R> + Send + 'static,
    ) -> Pending<R> {
        let (tx, rx) = mpsc::channel();
        let job: Job<C> = Box::new(move |c| {
            let _ = tx.send(f(c));
        });
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let LaneState::Idle(_) = &*st {
            let LaneState::Idle(comm) = std::mem::replace(&mut *st, LaneState::Absent) else {
                unreachable!()
            };
            let (jtx, jrx) = mpsc::channel::<Job<C>>();
            std::thread::Builder::new()
                .name("tessera-dist-lane".into())
                .spawn(move || {
                    while let Ok(job) = jrx.recv() {
                        job(&comm);
                    }
                })
                .expect("spawn async lane");
            *st = LaneState::Running(jtx);
        }
        match &*st {
            LaneState::Running(jtx) => {
                let _ = jtx.send(job);
            }
            _ => drop(job),
        }
        Pending { rx, done: None }
    }
}

/// A non-blocking collective in flight.
pub struct Pending<R> {
    rx: Receiver<Result<R>>,
    done: Option<Result<R>>,
}

impl<R> Pending<R> {
    /// An operation already finished with result `r`.
    pub(crate) fn ready(r: Result<R>) -> Self {
        let (_, rx) = mpsc::channel();
        Pending { rx, done: Some(r) }
    }

    /// True once the operation finished (never blocks).
    pub fn is_done(&mut self) -> bool {
        if self.done.is_none()
            && let Ok(r) = self.rx.try_recv()
        {
            self.done = Some(r);
        }
        self.done.is_some()
    }

    /// Blocks until the operation finishes and returns its result.
    pub fn wait(mut self) -> Result<R> {
        if let Some(r) = self.done.take() {
            return r;
        }
        self.rx.recv().unwrap_or_else(|_| {
            Err(DistError::Backend {
                backend: "async",
                message: "no async lane, or the lane's operation panicked".into(),
            })
        })
    }
}

/// Collectives counted by kind (one count per group per call; send/recv: one per message).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectiveCounts(pub [u64; 6]);

impl CollectiveCounts {
    /// The count of one kind.
    pub fn get(&self, k: CollectiveKind) -> u64 {
        self.0[k.index()]
    }
    /// Adds `n` to one kind.
    pub fn add(&mut self, k: CollectiveKind, n: u64) {
        self.0[k.index()] += n;
    }
    /// Sum over kinds.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl std::fmt::Display for CollectiveCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = CollectiveKind::ALL
            .iter()
            .filter(|k| self.get(**k) > 0)
            .map(|k| format!("{k}×{}", self.get(*k)))
            .collect();
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}
