//! Checker plumbing: a [`Fault`] is one thread's finding at one instruction; a CTA's
//! [`Collector`] turns faults into deduplicated [`Finding`]s; [`Checks`] says which optional
//! checkers run.

use crate::report::{Finding, FindingKind, Location};
use std::collections::HashMap;

/// One thread's finding at one instruction (the CTA adds its coordinates and the text).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fault {
    pub kind: FindingKind,
    pub line: u32,
    /// Linear thread index in the CTA.
    pub thread: u32,
    pub location: Option<Location>,
    pub message: String,
}

impl Fault {
    pub(crate) fn new(
        kind: FindingKind,
        line: u32,
        thread: u32,
        location: Option<Location>,
        message: impl Into<String>,
    ) -> Fault {
        Fault {
            kind,
            line,
            thread,
            location,
            message: message.into(),
        }
    }
}

/// Why a warp step could not complete.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stop {
    /// Something the simulator does not implement, found at run time (line, message).
    Unsupported(u32, String),
    /// A finding that makes continuing impossible was recorded: the CTA ends.
    EndCta,
}

/// Which optional checkers run. All are on by default; turning them off exists for showing
/// that a bug slips through without them and for measuring their cost.
///
/// Bounds, alignment, read-only, use-after-free, barrier and collective checks always run:
/// the simulator could not give an access or a collective a meaning without them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checks {
    /// Shared-memory races, reads of never-written shared memory, and `cp.async`
    /// destinations used before their wait (per-byte tracking of shared memory).
    pub shared: bool,
}

impl Default for Checks {
    fn default() -> Self {
        Checks { shared: true }
    }
}

/// `(x, y, z)` of linear thread `t` in a block of `block` threads.
pub(crate) fn thread_xyz(t: u32, block: [u32; 3]) -> [u32; 3] {
    let [bx, by, _] = block;
    [t % bx, (t / bx) % by, t / (bx * by)]
}

/// `(x, y, z)` of thread `t`, as messages print it.
pub(crate) fn fmt_thread(t: u32, block: [u32; 3]) -> String {
    let [x, y, z] = thread_xyz(t, block);
    format!("({x}, {y}, {z})")
}

/// The place a location names (an allocation, a shared variable), for merging the lanes of
/// one warp instruction.
fn region(l: &Option<Location>) -> Option<&str> {
    match l {
        Some(Location::Global { buffer, .. }) => Some(buffer),
        Some(Location::Shared { symbol, .. }) => Some(symbol),
        Some(Location::Local { .. }) => Some("local"),
        Some(Location::Param { .. }) => Some("param"),
        None => None,
    }
}

type Key = (FindingKind, u32, Option<Location>);

/// Deduplicated findings: one per (kind, line, location), and one per warp instruction for
/// the lanes that hit the same region; at most `max` distinct ones, the rest counted.
#[derive(Debug)]
pub(crate) struct Collector {
    pub cta: [u32; 3],
    pub block: [u32; 3],
    pub list: Vec<Finding>,
    index: HashMap<Key, usize>,
    pub max: usize,
    pub dropped: u64,
    /// The current warp step and the findings it recorded: (kind, line, region, index).
    step: u64,
    in_step: Vec<(u64, FindingKind, u32, Option<String>, usize)>,
}

impl Collector {
    pub(crate) fn new(cta: [u32; 3], block: [u32; 3], max: usize) -> Collector {
        Collector {
            cta,
            block,
            list: Vec::new(),
            index: HashMap::new(),
            max,
            dropped: 0,
            step: 0,
            in_step: Vec::new(),
        }
    }

    /// A new warp instruction starts: its lanes' findings merge with each other.
    #[inline]
    pub(crate) fn next_step(&mut self) {
        self.step += 1;
        if !self.in_step.is_empty() {
            self.in_step.clear();
        }
    }

    /// Records `f`, found executing `text`.
    pub(crate) fn push(&mut self, f: Fault, text: &str) {
        let reg = region(&f.location).map(str::to_string);
        if let Some(e) = self
            .in_step
            .iter()
            .find(|e| e.0 == self.step && e.1 == f.kind && e.2 == f.line && e.3 == reg)
        {
            self.list[e.4].count += 1;
            return;
        }
        let key = (f.kind, f.line, f.location.clone());
        if let Some(&i) = self.index.get(&key) {
            self.list[i].count += 1;
            return;
        }
        if self.list.len() >= self.max {
            self.dropped += 1;
            return;
        }
        let i = self.list.len();
        self.list.push(Finding {
            kind: f.kind,
            line: f.line,
            instruction: text.to_string(),
            cta: self.cta,
            thread: thread_xyz(f.thread, self.block),
            location: f.location,
            message: f.message,
            count: 1,
        });
        self.index.insert(key, i);
        self.in_step.push((self.step, f.kind, f.line, reg, i));
    }
}

/// Findings of many CTAs merged in launch order, with the same (kind, line, location) rule.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    pub list: Vec<Finding>,
    index: HashMap<Key, usize>,
    pub dropped: u64,
}

impl Merged {
    pub(crate) fn add(&mut self, c: Collector, max: usize) {
        self.dropped += c.dropped;
        for f in c.list {
            let key = (f.kind, f.line, f.location.clone());
            if let Some(&i) = self.index.get(&key) {
                self.list[i].count += f.count;
            } else if self.list.len() < max {
                self.index.insert(key, self.list.len());
                self.list.push(f);
            } else {
                self.dropped += f.count;
            }
        }
    }
}
