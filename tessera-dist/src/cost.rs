//! The α-β-γ cost model: time per collective and algorithm over a topology, algorithm choice,
//! and bus bandwidth as nccl-tests defines it.

use crate::Topology;
use std::fmt;

/// How a collective is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Pick the cheapest under the cost model (`choose_all_reduce`).
    Auto,
    /// Ring: reduce-scatter then all-gather around the ring; bandwidth-optimal.
    Ring,
    /// Binomial tree: reduce to rank 0, broadcast back; latency-optimal (log₂ n steps).
    Tree,
    /// Reduce-scatter inside each fast domain → all-reduce across domains → all-gather inside.
    Hierarchical,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Auto => "auto",
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Hierarchical => "hierarchical",
        })
    }
}

/// The collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollectiveKind {
    /// Every rank ends with the reduction of all ranks' buffers.
    AllReduce,
    /// Every rank ends with its chunk of the reduction.
    ReduceScatter,
    /// Every rank ends with the concatenation of all ranks' buffers.
    AllGather,
    /// Every rank ends with the root's buffer.
    Broadcast,
    /// One rank's buffer to another rank.
    SendRecv,
    /// Every rank sends its `i`-th chunk to rank `i`.
    AllToAll,
}

impl CollectiveKind {
    /// All kinds, in a fixed order (the index used by counters).
    pub const ALL: [CollectiveKind; 6] = [
        CollectiveKind::AllReduce,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllGather,
        CollectiveKind::Broadcast,
        CollectiveKind::SendRecv,
        CollectiveKind::AllToAll,
    ];

    /// Position in [`CollectiveKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// nccl-tests' bus-bandwidth factor: bus bw = algorithm bw × factor, where algorithm bw is
    /// `bytes / time` and `bytes` is the all-reduce buffer, or the *total* (all ranks) buffer of
    /// reduce-scatter and all-gather.
    ///
    /// ```
    /// use tessera_dist::CollectiveKind;
    /// assert_eq!(CollectiveKind::AllReduce.bus_factor(4), 1.5);     // 2(n−1)/n
    /// assert_eq!(CollectiveKind::AllGather.bus_factor(4), 0.75);    // (n−1)/n
    /// assert_eq!(CollectiveKind::Broadcast.bus_factor(4), 1.0);
    /// ```
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            CollectiveKind::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveKind::ReduceScatter
            | CollectiveKind::AllGather
            | CollectiveKind::AllToAll => (n - 1.0) / n,
            CollectiveKind::Broadcast | CollectiveKind::SendRecv => 1.0,
        }
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CollectiveKind::AllReduce => "all-reduce",
            CollectiveKind::ReduceScatter => "reduce-scatter",
            CollectiveKind::AllGather => "all-gather",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::SendRecv => "send/recv",
            CollectiveKind::AllToAll => "all-to-all",
        })
    }
}

/// Bus bandwidth in bytes/s (nccl-tests): `bytes / seconds × kind.bus_factor(n)`.
///
/// ```
/// use tessera_dist::{bus_bandwidth, CollectiveKind};
/// // 1 GB all-reduced by 8 ranks in 0.1 s: algbw 10 GB/s, busbw 17.5 GB/s.
/// let bw = bus_bandwidth(CollectiveKind::AllReduce, 1e9 as usize, 8, 0.1);
/// assert!((bw - 17.5e9).abs() < 1.0);
/// ```
pub fn bus_bandwidth(kind: CollectiveKind, bytes: usize, n: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds * kind.bus_factor(n)
}

fn log2_ceil(n: usize) -> f64 {
    (n.max(1) as f64).log2().ceil()
}

/// Predicted seconds for one collective over the group `ranks` (mesh ranks, in group order).
///
/// `bytes` follows nccl-tests: the all-reduce / broadcast / send buffer, or the total buffer of
/// reduce-scatter, all-gather and all-to-all. [`Algorithm::Auto`] means the cheapest.
///
/// ```
/// use tessera_dist::{collective_time, Algorithm, CollectiveKind, Link, Topology};
/// let t = Topology::single_domain(8, Link::nvlink());
/// let ranks: Vec<usize> = (0..8).collect();
/// let small = |a| collective_time(CollectiveKind::AllReduce, a, 64, &ranks, &t);
/// let big = |a| collective_time(CollectiveKind::AllReduce, a, 1 << 30, &ranks, &t);
/// assert!(small(Algorithm::Tree) < small(Algorithm::Ring));   // latency-bound: tree
/// assert!(big(Algorithm::Ring) < big(Algorithm::Tree));       // bandwidth-bound: ring
/// ```
pub fn collective_time(
    kind: CollectiveKind,
    algo: Algorithm,
    bytes: usize,
    ranks: &[usize],
    topo: &Topology,
) -> f64 {
    let n = ranks.len();
    if n <= 1 {
        return 0.0;
    }
    let s = bytes as f64;
    let nf = n as f64;
    let link = topo.link_for(ranks);
    let (a, b, g) = (link.latency_s, link.beta(), topo.gamma_s_per_byte);
    match kind {
        CollectiveKind::AllReduce => match algo {
            Algorithm::Auto => choose_all_reduce(bytes, ranks, topo).1,
            Algorithm::Ring => {
                2.0 * (nf - 1.0) * a + 2.0 * (nf - 1.0) / nf * s * b + (nf - 1.0) / nf * s * g
            }
            Algorithm::Tree => 2.0 * log2_ceil(n) * (a + s * b) + log2_ceil(n) * s * g,
            Algorithm::Hierarchical => match topo.domain_shape(ranks) {
                Some((k, m)) if k > 1 && m > 1 => {
                    let (kf, mf) = (k as f64, m as f64);
                    let (ai, bi) = (topo.intra.latency_s, topo.intra.beta());
                    let (ae, be) = (topo.inter.latency_s, topo.inter.beta());
                    let intra = (mf - 1.0) * ai + (mf - 1.0) / mf * s * bi;
                    let inter = 2.0 * (kf - 1.0) * ae + 2.0 * (kf - 1.0) / kf * (s / mf) * be;
                    2.0 * intra + inter + ((mf - 1.0) / mf + (kf - 1.0) / kf / mf) * s * g
                }
                _ => f64::INFINITY,
            },
        },
        CollectiveKind::ReduceScatter => (nf - 1.0) * a + (nf - 1.0) / nf * s * (b + g),
        CollectiveKind::AllGather | CollectiveKind::AllToAll => {
            (nf - 1.0) * a + (nf - 1.0) / nf * s * b
        }
        CollectiveKind::Broadcast => log2_ceil(n) * (a + s * b),
        CollectiveKind::SendRecv => a + s * b,
    }
}

/// The cheapest all-reduce algorithm for `bytes` over `ranks`, and its predicted time.
/// Hierarchical is a candidate only when the group spans several fast domains evenly.
pub fn choose_all_reduce(bytes: usize, ranks: &[usize], topo: &Topology) -> (Algorithm, f64) {
    [Algorithm::Ring, Algorithm::Tree, Algorithm::Hierarchical]
        .into_iter()
        .map(|al| {
            (
                al,
                collective_time(CollectiveKind::AllReduce, al, bytes, ranks, topo),
            )
        })
        .fold((Algorithm::Ring, f64::INFINITY), |best, c| {
            if c.1 < best.1 { c } else { best }
        })
}
