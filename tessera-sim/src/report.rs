//! What a launch returns: its findings (kernel bugs), statistics and performance counters.

use crate::counters::Counters;
use std::fmt;

/// The result of a launch: findings, what ran, and the performance counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every finding (deduplicated, see [`Finding::count`]), CTAs in launch order, up to
    /// [`crate::Options::max_findings`].
    pub findings: Vec<Finding>,
    /// Occurrences not kept because [`crate::Options::max_findings`] distinct findings were
    /// already recorded.
    pub findings_dropped: u64,
    /// What ran: instructions, warps, CTAs.
    pub stats: Stats,
    /// The performance counters.
    pub counters: Counters,
}

impl Report {
    /// True when the launch has no finding.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// Occurrences in all: every finding's count plus the dropped ones (what `ERROR SUMMARY`
    /// counts, like compute-sanitizer).
    pub fn error_count(&self) -> u64 {
        self.findings.iter().map(|f| f.count).sum::<u64>() + self.findings_dropped
    }
}

/// What a launch executed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// CTAs run.
    pub ctas: u64,
    /// Warp instructions issued (one per warp step, whatever the number of active lanes).
    pub warp_instructions: u64,
    /// Lane instructions (active lanes after the guard predicate, summed over steps).
    pub thread_instructions: u64,
    /// CTA-wide barriers released.
    pub barriers: u64,
}

/// What kind of bug a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingKind {
    /// An access outside every allocation, the shared memory of the CTA, the thread's local
    /// memory or the parameter block. The access is not performed (a load yields 0).
    OutOfBounds,
    /// An access not aligned to its size (or `ldmatrix`/`cp.async` rules). Not performed.
    Misaligned,
    /// A write (or atomic) to an allocation marked read-only. Not performed.
    ReadOnlyWrite,
    /// An access to a freed allocation. Not performed.
    UseAfterFree,
    /// Two threads of a CTA touch a shared byte, at least one writes, no `bar.sync` between.
    SharedRace,
    /// A read of shared memory no thread of the CTA wrote.
    UninitializedRead,
    /// A `cp.async` destination read or written before the issuing thread's wait.
    AsyncCopyInFlight,
    /// `bar.sync` not reached by every thread, or threads at different barriers: a deadlock
    /// on a GPU. Ends the CTA.
    BarrierDeadlock,
    /// A warp-collective instruction (`shfl.sync`, `vote.sync`, `ldmatrix`, `mma`) or
    /// `bra.uni` executed by the wrong set of lanes.
    DivergentCollective,
    /// An operand a GPU would reject (e.g. `cp.async` src-size above its cp-size).
    InvalidOperand,
    /// The CTA ran more than [`crate::Options::max_warp_instructions`] warp instructions
    /// (an infinite loop?). Ends the CTA.
    NonTermination,
}

impl FindingKind {
    /// A short title, as the CLI prints it.
    pub fn title(self) -> &'static str {
        match self {
            FindingKind::OutOfBounds => "Out-of-bounds access",
            FindingKind::Misaligned => "Misaligned access",
            FindingKind::ReadOnlyWrite => "Write to a read-only allocation",
            FindingKind::UseAfterFree => "Use after free",
            FindingKind::SharedRace => "Shared-memory race",
            FindingKind::UninitializedRead => "Uninitialized shared-memory read",
            FindingKind::AsyncCopyInFlight => "cp.async destination used before its wait",
            FindingKind::BarrierDeadlock => "Barrier deadlock",
            FindingKind::DivergentCollective => "Collective executed by the wrong lanes",
            FindingKind::InvalidOperand => "Invalid operand",
            FindingKind::NonTermination => "No termination",
        }
    }
}

/// Where a finding's access went: a named place and a byte offset, never a raw internal
/// address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// Byte `offset` of the global allocation `buffer` (its [`crate::Memory::alloc_named`]
    /// name or `alloc#k`) of `size` bytes; `offset >= size` for an overrun.
    Global {
        /// The allocation's name.
        buffer: String,
        /// The byte offset from its start.
        offset: u64,
        /// The allocation's size in bytes.
        size: u64,
    },
    /// Byte `offset` of the shared variable `symbol` (`offset` past its size when the access
    /// is beyond every shared variable).
    Shared {
        /// The shared variable.
        symbol: String,
        /// The byte offset from its start.
        offset: u64,
    },
    /// Byte `offset` of the thread's `.local` memory.
    Local {
        /// The byte offset in the thread's local memory.
        offset: u64,
    },
    /// Byte `offset` of the kernel parameter block.
    Param {
        /// The byte offset in the parameter block.
        offset: u64,
    },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Global {
                buffer,
                offset,
                size,
            } => {
                if offset >= size {
                    write!(
                        f,
                        "`{buffer}`+{offset}, {} bytes after the end of `{buffer}` ({size} bytes)",
                        offset - size
                    )
                } else {
                    write!(f, "`{buffer}`+{offset} (of {size} bytes)")
                }
            }
            Location::Shared { symbol, offset } => write!(f, "`{symbol}+{offset}`"),
            Location::Local { offset } => write!(f, "local+{offset}"),
            Location::Param { offset } => write!(f, "param+{offset}"),
        }
    }
}

/// One bug found in a launch, with where it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What kind of bug.
    pub kind: FindingKind,
    /// 1-based line of the instruction in the PTX text.
    pub line: u32,
    /// The instruction as written.
    pub instruction: String,
    /// The CTA (`%ctaid`) and thread (`%tid`) of the first occurrence.
    pub cta: [u32; 3],
    /// The thread's `%tid` (x, y, z).
    pub thread: [u32; 3],
    /// The memory location of the first occurrence, for memory findings.
    pub location: Option<Location>,
    /// The finding in words.
    pub message: String,
    /// Occurrences folded into this finding: the same kind at the same line and location
    /// from other threads or CTAs, and the other lanes of the same warp instruction that hit
    /// the same allocation or shared variable.
    pub count: u64,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [cx, cy, cz] = self.cta;
        let [tx, ty, tz] = self.thread;
        write!(
            f,
            "{} at line {}, CTA ({cx}, {cy}, {cz}), thread ({tx}, {ty}, {tz})",
            self.kind.title(),
            self.line
        )?;
        if let Some(l) = &self.location {
            write!(f, ", {l}")?;
        }
        write!(f, ": {}", self.message)?;
        if self.count > 1 {
            write!(f, " ({} occurrences)", self.count)?;
        }
        Ok(())
    }
}
