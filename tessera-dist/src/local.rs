//! The local backend: one process, one thread per device, real concurrent ring / tree / pairwise
//! algorithms over the ranks' own buffers (each rank publishes its buffer; in every step a rank
//! reads a neighbour's chunk and writes only its own buffer; a barrier separates steps).

use crate::comm::check_len;
use crate::{
    Algorithm, AsyncLane, CollectiveCounts, CollectiveKind, CommElem, Communicator, DistError,
    ReduceOp, Result, chunk_range,
};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A barrier that can be poisoned, so a failing rank releases its peers with an error instead of
/// leaving them waiting forever.
pub(crate) struct Barrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
    poisoned: AtomicBool,
}

impl Barrier {
    fn new(n: usize) -> Self {
        Barrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            poisoned: AtomicBool::new(false),
        }
    }

    fn wait(&self) -> Result<()> {
        if self.n <= 1 {
            return self.check();
        }
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let gen_ = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
        } else {
            while g.1 == gen_ {
                self.check()?;
                g = self
                    .cv
                    .wait_timeout(g, Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        drop(g);
        self.check()
    }

    fn check(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(DistError::Backend {
                backend: "local",
                message: "a peer rank failed".into(),
            })
        } else {
            Ok(())
        }
    }

    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
        let _g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }
}

/// Shared state of one group.
pub(crate) struct GroupShared {
    n: usize,
    pub(crate) barrier: Barrier,
    ptrs: Vec<AtomicUsize>,
    lens: Vec<AtomicUsize>,
    tx: Vec<Mutex<Sender<Vec<u8>>>>,
    rx: Vec<Mutex<Receiver<Vec<u8>>>>,
    counters: Arc<Counters>,
}

/// Shared counters of collectives (one count per group per call; one per message sent).
#[derive(Default, Debug)]
pub struct Counters([AtomicU64; 6]);

impl Counters {
    /// A snapshot.
    pub fn snapshot(&self) -> CollectiveCounts {
        let mut c = CollectiveCounts::default();
        for k in CollectiveKind::ALL {
            c.add(k, self.0[k.index()].load(Ordering::Relaxed));
        }
        c
    }
    fn bump(&self, k: CollectiveKind) {
        self.0[k.index()].fetch_add(1, Ordering::Relaxed);
    }
}

impl GroupShared {
    pub(crate) fn new(n: usize, counters: Arc<Counters>) -> Arc<Self> {
        let mut tx = Vec::with_capacity(n * n);
        let mut rx = Vec::with_capacity(n * n);
        for _ in 0..n * n {
            let (t, r) = mpsc::channel();
            tx.push(Mutex::new(t));
            rx.push(Mutex::new(r));
        }
        Arc::new(GroupShared {
            n,
            barrier: Barrier::new(n),
            ptrs: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            lens: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            tx,
            rx,
            counters,
        })
    }
}

/// A rank of a local (in-process) group. Create a group with [`LocalComm::group`] and hand one
/// communicator to each thread, or let [`LocalComm::run`] spawn the threads.
pub struct LocalComm {
    shared: Arc<GroupShared>,
    rank: usize,
    /// Ranks per fast domain for [`Algorithm::Hierarchical`] (consecutive ranks).
    domain: Option<usize>,
    lane: AsyncLane<LocalComm>,
}

impl LocalComm {
    /// `n` communicators of one new group, rank `i` at index `i`.
    pub fn group(n: usize) -> Vec<LocalComm> {
        Self::group_with(n, Arc::new(Counters::default()), None).0
    }

    pub(crate) fn group_with(
        n: usize,
        counters: Arc<Counters>,
        domain: Option<usize>,
    ) -> (Vec<LocalComm>, Vec<Arc<GroupShared>>) {
        let main = GroupShared::new(n, counters.clone());
        let lane = GroupShared::new(n, counters);
        let comms = (0..n)
            .map(|rank| LocalComm {
                shared: main.clone(),
                rank,
                domain,
                lane: AsyncLane::new(LocalComm {
                    shared: lane.clone(),
                    rank,
                    domain,
                    lane: AsyncLane::none(),
                }),
            })
            .collect();
        (comms, vec![main, lane])
    }

    /// Runs `f` on `n` threads, one per rank of a new group, and returns the results by rank.
    /// An error or panic on any rank releases the others and is returned.
    pub fn run<R: Send>(n: usize, f: impl Fn(&LocalComm) -> Result<R> + Sync) -> Result<Vec<R>> {
        let (comms, shared) = Self::group_with(n, Arc::new(Counters::default()), None);
        run_threads(
            comms,
            || shared.iter().for_each(|s| s.barrier.poison()),
            |c| f(c),
        )
    }

    /// Collectives this group has run so far.
    pub fn counts(&self) -> CollectiveCounts {
        self.shared.counters.snapshot()
    }

    fn count(&self, k: CollectiveKind) {
        if self.rank == 0 {
            self.shared.counters.bump(k);
        }
    }

    /// Publishes this rank's buffer, waits for all, and checks every rank passed `len` elements.
    fn publish<T>(&self, ptr: *const T, len: usize) -> Result<()> {
        self.shared.ptrs[self.rank].store(ptr as usize, Ordering::Relaxed);
        self.shared.lens[self.rank].store(len, Ordering::Relaxed);
        self.shared.barrier.wait()?;
        for r in 0..self.shared.n {
            let l = self.shared.lens[r].load(Ordering::Relaxed);
            if l != len {
                // Every rank sees the same lengths, so every rank fails here together.
                return Err(DistError::Length(format!(
                    "rank {r} passed {l} elements, rank {} passed {len}",
                    self.rank
                )));
            }
        }
        Ok(())
    }

    fn peer<T>(&self, r: usize) -> *const T {
        self.shared.ptrs[r].load(Ordering::Relaxed) as *const T
    }

    /// One ring reduce-scatter over `members` (group ranks, ring order) on `range`, split into
    /// `members.len()` chunks. At step `s` position `i` reduces chunk `(i − s − 1 + shift) mod m`
    /// from its left neighbour into its own buffer; on return chunk `(i + 1 + shift) mod m` is
    /// complete. A barrier ends every step, so a chunk is never read while it is written.
    fn ring_rs<T: CommElem>(
        &self,
        base: *mut T,
        members: &[usize],
        range: (usize, usize),
        shift: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let m = members.len();
        let i = members
            .iter()
            .position(|&r| r == self.rank)
            .expect("member");
        let left = self.peer::<T>(members[(i + m - 1) % m]);
        for s in 0..m.saturating_sub(1) {
            let c = (i + 2 * m - s - 1 + shift) % m;
            let r = chunk_range(range.1 - range.0, m, c);
            let (lo, len) = (range.0 + r.start, r.len());
            // SAFETY: during this step only this rank writes chunk `c` of its own buffer and only
            // its right neighbour reads it in the *next* step; the left neighbour's chunk `c` was
            // completed in the previous step and is not written in this one.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(base.add(lo), len);
                let src = std::slice::from_raw_parts(left.add(lo), len);
                op.reduce_into(dst, src);
            }
            self.shared.barrier.wait()?;
        }
        Ok(())
    }

    /// One ring all-gather: at step `s` position `i` copies chunk `(i − s + shift) mod m` from
    /// its left neighbour.
    fn ring_ag<T: CommElem>(
        &self,
        base: *mut T,
        members: &[usize],
        range: (usize, usize),
        shift: usize,
    ) -> Result<()> {
        let m = members.len();
        let i = members
            .iter()
            .position(|&r| r == self.rank)
            .expect("member");
        let left = self.peer::<T>(members[(i + m - 1) % m]);
        for s in 0..m.saturating_sub(1) {
            let c = (i + 2 * m - s + shift) % m;
            let r = chunk_range(range.1 - range.0, m, c);
            let (lo, len) = (range.0 + r.start, r.len());
            // SAFETY: as in `ring_rs`; copies are between distinct buffers.
            unsafe { std::ptr::copy_nonoverlapping(left.add(lo), base.add(lo), len) };
            self.shared.barrier.wait()?;
        }
        Ok(())
    }

    /// Hierarchical ring all-reduce with `d` consecutive ranks per domain (d = n: a flat ring):
    /// ring reduce-scatter inside each domain, ring all-reduce of each rank's chunk across the
    /// domains, ring all-gather inside each domain.
    fn ring_all_reduce<T: CommElem>(
        &self,
        base: *mut T,
        len: usize,
        d: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let n = self.shared.n;
        let k = n / d;
        let dom = self.rank / d;
        let local = self.rank % d;
        let intra: Vec<usize> = (dom * d..dom * d + d).collect();
        self.ring_rs(base, &intra, (0, len), 0, op)?;
        if k > 1 {
            let owned = (local + 1) % d;
            let r = chunk_range(len, d, owned);
            let inter: Vec<usize> = (0..k).map(|j| j * d + local).collect();
            self.ring_rs(base, &inter, (r.start, r.end), 0, op)?;
            self.ring_ag(base, &inter, (r.start, r.end), 0)?;
        }
        self.ring_ag(base, &intra, (0, len), 0)
    }

    /// Binomial-tree reduce to rank 0 then broadcast.
    fn tree_all_reduce<T: CommElem>(&self, base: *mut T, len: usize, op: ReduceOp) -> Result<()> {
        let n = self.shared.n;
        let i = self.rank;
        let mut mask = 1;
        while mask < n {
            if i.is_multiple_of(2 * mask) && i + mask < n {
                // SAFETY: the peer `i + mask` is a sender at this level and writes nothing.
                unsafe {
                    let dst = std::slice::from_raw_parts_mut(base, len);
                    let src = std::slice::from_raw_parts(self.peer::<T>(i + mask), len);
                    op.reduce_into(dst, src);
                }
            }
            self.shared.barrier.wait()?;
            mask <<= 1;
        }
        self.tree_bcast(base, len, 0)
    }

    fn tree_bcast<T: CommElem>(&self, base: *mut T, len: usize, root: usize) -> Result<()> {
        let n = self.shared.n;
        let v = (self.rank + n - root) % n;
        let mut mask = n.next_power_of_two() >> 1;
        while mask >= 1 {
            if v % (2 * mask) == mask {
                let src = (v - mask + root) % n;
                // SAFETY: the source is not a receiver at this level.
                unsafe { std::ptr::copy_nonoverlapping(self.peer::<T>(src), base, len) };
            }
            self.shared.barrier.wait()?;
            mask >>= 1;
        }
        Ok(())
    }

    fn hier_domain(&self) -> usize {
        let n = self.shared.n;
        match self.domain {
            Some(d) if d > 0 && n.is_multiple_of(d) => d,
            _ => (2..n).find(|p| n.is_multiple_of(*p)).unwrap_or(n),
        }
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.shared.n {
            Err(DistError::BadRank {
                rank: peer,
                size: self.shared.n,
            })
        } else {
            Ok(())
        }
    }
}

impl Communicator for LocalComm {
    const BACKEND: &'static str = "local";

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.n
    }

    /// Ring (the default for [`Algorithm::Auto`]), tree, or hierarchical with the communicator's
    /// domain size (from the mesh topology; else the smallest prime factor of the group size).
    fn all_reduce<T: CommElem>(&self, data: &mut [T], op: ReduceOp, algo: Algorithm) -> Result<()> {
        self.count(CollectiveKind::AllReduce);
        let len = data.len();
        let base = data.as_mut_ptr();
        self.publish(base as *const T, len)?;
        match algo {
            Algorithm::Ring | Algorithm::Auto => {
                self.ring_all_reduce(base, len, self.shared.n, op)?
            }
            Algorithm::Tree => self.tree_all_reduce(base, len, op)?,
            Algorithm::Hierarchical => self.ring_all_reduce(base, len, self.hier_domain(), op)?,
        }
        self.shared.barrier.wait()
    }

    fn reduce_scatter_in_place<T: CommElem>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        self.count(CollectiveKind::ReduceScatter);
        let n = self.shared.n;
        if !data.len().is_multiple_of(n) {
            return Err(DistError::Length(format!(
                "reduce_scatter: {} elements is not {n} equal blocks",
                data.len()
            )));
        }
        let base = data.as_mut_ptr();
        self.publish(base as *const T, data.len())?;
        let members: Vec<usize> = (0..n).collect();
        self.ring_rs(base, &members, (0, data.len()), n - 1, op)?;
        self.shared.barrier.wait()
    }

    fn all_gather_in_place<T: CommElem>(&self, data: &mut [T]) -> Result<()> {
        self.count(CollectiveKind::AllGather);
        let n = self.shared.n;
        if !data.len().is_multiple_of(n) {
            return Err(DistError::Length(format!(
                "all_gather: {} elements is not {n} equal blocks",
                data.len()
            )));
        }
        let base = data.as_mut_ptr();
        self.publish(base as *const T, data.len())?;
        let members: Vec<usize> = (0..n).collect();
        self.ring_ag(base, &members, (0, data.len()), n - 1)?;
        self.shared.barrier.wait()
    }

    fn broadcast<T: CommElem>(&self, data: &mut [T], root: usize) -> Result<()> {
        self.count(CollectiveKind::Broadcast);
        self.check_peer(root)?;
        let base = data.as_mut_ptr();
        self.publish(base as *const T, data.len())?;
        self.tree_bcast(base, data.len(), root)?;
        self.shared.barrier.wait()
    }

    /// Pairwise exchange: every rank copies its block from every peer's send buffer at once.
    fn all_to_all<T: CommElem>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.count(CollectiveKind::AllToAll);
        let n = self.shared.n;
        check_len(recv.len(), send.len(), "all_to_all: recv vs send")?;
        if !send.len().is_multiple_of(n) {
            return Err(DistError::Length(format!(
                "all_to_all: {} elements is not {n} equal blocks",
                send.len()
            )));
        }
        self.publish(send.as_ptr(), send.len())?;
        let b = send.len() / n;
        for s in 0..n {
            let j = (self.rank + s) % n; // stagger peers so ranks do not all read one buffer
            // SAFETY: send buffers are only read during this collective.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.peer::<T>(j).add(self.rank * b),
                    recv.as_mut_ptr().add(j * b),
                    b,
                )
            };
        }
        self.shared.barrier.wait()
    }

    fn send<T: CommElem>(&self, data: &[T], peer: usize) -> Result<()> {
        self.check_peer(peer)?;
        // Point to point: every message counts, whichever rank sends it.
        self.shared.counters.bump(CollectiveKind::SendRecv);
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let tx = self.shared.tx[self.rank * self.shared.n + peer]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tx.send(bytes.to_vec()).map_err(|_| DistError::Backend {
            backend: "local",
            message: "peer gone".into(),
        })
    }

    fn recv<T: CommElem>(&self, data: &mut [T], peer: usize) -> Result<()> {
        self.check_peer(peer)?;
        let rx = self.shared.rx[peer * self.shared.n + self.rank]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let msg = loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(m) => break m,
                Err(mpsc::RecvTimeoutError::Timeout) => self.shared.barrier.check()?,
                Err(_) => {
                    return Err(DistError::Backend {
                        backend: "local",
                        message: "peer gone".into(),
                    });
                }
            }
        };
        let out: &mut [u8] = bytemuck::cast_slice_mut(data);
        check_len(msg.len(), out.len(), "recv: message bytes vs buffer bytes")?;
        out.copy_from_slice(&msg);
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.shared.barrier.wait()
    }

    fn lane(&self) -> &AsyncLane<Self> {
        &self.lane
    }
}

/// Runs one closure per item on its own thread; an error or panic poisons `shared` so the other
/// ranks return instead of waiting.
pub(crate) fn run_threads<C: Send, R: Send>(
    items: Vec<C>,
    poison: impl Fn() + Sync,
    f: impl Fn(&C) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let results: Vec<Result<R>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .into_iter()
            .map(|item| {
                let f = &f;
                let poison = &poison;
                s.spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&item)));
                    let r = r.unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        Err(DistError::Backend {
                            backend: "local",
                            message: format!("rank panicked: {msg}"),
                        })
                    });
                    if r.is_err() {
                        poison();
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("joined"))
            .collect()
    });
    // Report the root cause, not a peer's "a peer rank failed".
    let mut first_err = None;
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(v) => out.push(v),
            Err(e) => {
                let peer = matches!(&e, DistError::Backend { message, .. } if message == "a peer rank failed");
                if first_err.is_none() || (!peer && matches!(&first_err, Some((true, _)))) {
                    first_err = Some((peer, e));
                }
            }
        }
    }
    match first_err {
        Some((_, e)) => Err(e),
        None => Ok(out),
    }
}
