//! A CTA's shared memory and its checker state.
//!
//! Shared memory is a byte array addressed by the 32-bit shared window (static symbols from 0,
//! then the dynamic `.extern` array); generic addresses of shared memory are
//! `SHARED_GENERIC + window address`. With [`crate::Checks::shared`], every byte remembers who
//! wrote and read it in the current barrier epoch, so races, reads of never-written bytes and
//! uses of in-flight `cp.async` destinations are found. Findings go to [`Shared::faults`]; the
//! CTA turns them into [`crate::Finding`]s named `symbol+offset`.

use crate::check::{Fault, fmt_thread};
use crate::module::ir::Symbol;
use crate::report::{FindingKind, Location};

const NONE: u32 = u32::MAX;
const MANY: u32 = u32::MAX - 1;
/// Pending reads of never-written bytes kept per epoch (further ones are dropped: they would
/// deduplicate into the same findings).
const MAX_PENDING_UNINIT: usize = 4096;

/// One CTA's shared memory and, per byte, who wrote and read it in the current barrier epoch.
pub(crate) struct Shared<'a> {
    pub data: Vec<u8>,
    pub static_bytes: u32,
    pub checks: bool,
    /// Incremented at every CTA-wide `bar.sync`.
    pub epoch: u32,
    syms: &'a [Symbol],
    block: [u32; 3],
    w_ep: Vec<u32>,
    w_tid: Vec<u32>,
    w_line: Vec<u32>,
    r_ep: Vec<u32>,
    r_tid: Vec<u32>,
    r_line: Vec<u32>,
    init: Vec<bool>,
    /// `thread + 1` of an in-flight cp.async writing this byte (0: none), and its line.
    pending: Vec<u32>,
    pending_line: Vec<u32>,
    /// Reads of never-written bytes in this epoch: reported at the next barrier (or the end
    /// of the CTA) unless another thread writes the byte first in this epoch — then it is the
    /// race already reported, whatever order the simulator ran the warps in.
    uninit: Vec<(usize, Fault)>,
    /// Findings of the current instruction.
    pub faults: Vec<Fault>,
}

impl<'a> Shared<'a> {
    pub(crate) fn new(
        bytes: usize,
        static_bytes: u32,
        checks: bool,
        syms: &'a [Symbol],
        block: [u32; 3],
    ) -> Shared<'a> {
        let v = |x: u32| if checks { vec![x; bytes] } else { Vec::new() };
        Shared {
            data: vec![0; bytes],
            static_bytes,
            checks,
            epoch: 1,
            syms,
            block,
            w_ep: v(0),
            w_tid: v(NONE),
            w_line: v(0),
            r_ep: v(0),
            r_tid: v(NONE),
            r_line: v(0),
            init: if checks {
                vec![false; bytes]
            } else {
                Vec::new()
            },
            pending: v(0),
            pending_line: v(0),
            uninit: Vec::new(),
            faults: Vec::new(),
        }
    }

    /// `symbol+offset` of a shared-window address.
    pub(crate) fn location(&self, addr: u64) -> Location {
        let sym = self
            .syms
            .iter()
            .rev()
            .find(|s| s.start as u64 <= addr)
            .or(self.syms.first());
        match sym {
            Some(s) => Location::Shared {
                symbol: s.name.clone(),
                offset: addr.wrapping_sub(s.start as u64),
            },
            None => Location::Shared {
                symbol: "shared".into(),
                offset: addr,
            },
        }
    }

    fn who(&self, tid: u32) -> String {
        fmt_thread(tid, self.block)
    }

    /// The byte range of an access, or `None` (with a finding) when it leaves shared memory.
    fn bounds(&mut self, addr: u64, n: usize, what: &str, line: u32, tid: u32) -> Option<usize> {
        if addr
            .checked_add(n as u64)
            .is_none_or(|e| e > self.data.len() as u64)
        {
            let loc = self.location(addr);
            let msg = format!(
                "out-of-bounds shared {what} of {n} bytes at {loc} (shared address {addr:#x}): the CTA has {} bytes of shared memory ({} static + {} dynamic)",
                self.data.len(),
                self.static_bytes,
                self.data.len() as u32 - self.static_bytes.min(self.data.len() as u32)
            );
            self.faults.push(Fault::new(
                FindingKind::OutOfBounds,
                line,
                tid,
                Some(loc),
                msg,
            ));
            return None;
        }
        Some(addr as usize)
    }

    /// A finding if a byte of `[a, a + n)` is the destination of an in-flight cp.async.
    fn not_pending(&mut self, a: usize, n: usize, what: &str, line: u32, tid: u32) {
        if let Some(b) = (a..a + n).find(|&b| self.pending[b] != 0) {
            let loc = self.location(b as u64);
            let msg = format!(
                "{what} of cp.async destination {loc} before its cp.async.wait_group/wait_all (copy issued by thread {} at line {})",
                self.who(self.pending[b] - 1),
                self.pending_line[b]
            );
            self.faults.push(Fault::new(
                FindingKind::AsyncCopyInFlight,
                line,
                tid,
                Some(loc),
                msg,
            ));
        }
    }

    /// Reads `out.len()` bytes at `addr` as thread `tid`; false (and `out` zeroed) when the
    /// access leaves shared memory.
    pub(crate) fn read(&mut self, addr: u64, out: &mut [u8], line: u32, tid: u32) -> bool {
        let n = out.len();
        let Some(a) = self.bounds(addr, n, "read", line, tid) else {
            out.fill(0);
            return false;
        };
        if self.checks {
            self.not_pending(a, n, "read", line, tid);
            let e = self.epoch;
            let mut raced = false;
            for b in a..a + n {
                if !self.init[b] && self.uninit.len() < MAX_PENDING_UNINIT {
                    let loc = self.location(b as u64);
                    let msg = format!(
                        "read of uninitialized shared memory at {loc}: no thread wrote it before this read"
                    );
                    self.uninit.push((
                        b,
                        Fault::new(FindingKind::UninitializedRead, line, tid, Some(loc), msg),
                    ));
                }
                if !raced && self.w_ep[b] == e && self.w_tid[b] != tid {
                    raced = true;
                    let loc = self.location(b as u64);
                    let msg = format!(
                        "shared-memory race at {loc}: thread {} reads it (line {line}) after thread {} wrote it (line {}) with no bar.sync between them",
                        self.who(tid),
                        self.who(self.w_tid[b]),
                        self.w_line[b]
                    );
                    self.faults.push(Fault::new(
                        FindingKind::SharedRace,
                        line,
                        tid,
                        Some(loc),
                        msg,
                    ));
                }
                if self.r_ep[b] != e {
                    self.r_ep[b] = e;
                    self.r_tid[b] = tid;
                    self.r_line[b] = line;
                } else if self.r_tid[b] != tid && self.r_tid[b] != MANY {
                    self.r_tid[b] = MANY;
                }
            }
        }
        out.copy_from_slice(&self.data[a..a + n]);
        true
    }

    /// A finding if writing `[a, a + n)` as `tid` races with this epoch's accesses.
    fn check_write(&mut self, a: usize, n: usize, line: u32, tid: u32) {
        let e = self.epoch;
        for b in a..a + n {
            let msg = if self.w_ep[b] == e && self.w_tid[b] != tid {
                format!(
                    "thread {} writes it (line {line}) after thread {} wrote it (line {}) with no bar.sync between them",
                    self.who(tid),
                    self.who(self.w_tid[b]),
                    self.w_line[b]
                )
            } else if self.r_ep[b] == e && self.r_tid[b] != tid {
                let other = if self.r_tid[b] == MANY {
                    "other threads".to_string()
                } else {
                    format!("thread {}", self.who(self.r_tid[b]))
                };
                format!(
                    "thread {} writes it (line {line}) after {other} read it (line {}) with no bar.sync between them",
                    self.who(tid),
                    self.r_line[b]
                )
            } else {
                continue;
            };
            let loc = self.location(b as u64);
            self.faults.push(Fault::new(
                FindingKind::SharedRace,
                line,
                tid,
                Some(loc.clone()),
                format!("shared-memory race at {loc}: {msg}"),
            ));
            return;
        }
    }

    fn record_write(&mut self, a: usize, n: usize, line: u32, tid: u32) {
        let e = self.epoch;
        for b in a..a + n {
            self.w_ep[b] = e;
            self.w_tid[b] = tid;
            self.w_line[b] = line;
            self.init[b] = true;
        }
    }

    /// Writes `data` at `addr` as thread `tid`; false when the access leaves shared memory.
    pub(crate) fn write(&mut self, addr: u64, data: &[u8], line: u32, tid: u32) -> bool {
        let n = data.len();
        let Some(a) = self.bounds(addr, n, "write", line, tid) else {
            return false;
        };
        if self.checks {
            self.not_pending(a, n, "write", line, tid);
            self.check_write(a, n, line, tid);
            self.record_write(a, n, line, tid);
        }
        self.data[a..a + n].copy_from_slice(data);
        true
    }

    /// An atomic read-modify-write: bounds, in-flight copies and initialization are checked;
    /// atomics do not race with each other, so they are not recorded as plain accesses.
    pub(crate) fn atomic(&mut self, addr: u64, n: usize, line: u32, tid: u32) -> Option<&mut [u8]> {
        let a = self.bounds(addr, n, "atomic", line, tid)?;
        if self.checks {
            self.not_pending(a, n, "atomic", line, tid);
            if let Some(b) = (a..a + n).find(|&b| !self.init[b]) {
                let loc = self.location(b as u64);
                let msg =
                    format!("atomic on uninitialized shared memory at {loc}: no thread wrote it");
                self.faults.push(Fault::new(
                    FindingKind::UninitializedRead,
                    line,
                    tid,
                    Some(loc),
                    msg,
                ));
            }
        }
        Some(&mut self.data[a..a + n])
    }

    /// A cp.async issue: the destination becomes in flight (reading or writing it before the
    /// wait is a finding); writing it now would race with readers of this epoch. False when
    /// the destination leaves shared memory (the copy is not performed).
    pub(crate) fn issue_async(&mut self, addr: u64, n: usize, line: u32, tid: u32) -> bool {
        let Some(a) = self.bounds(addr, n, "cp.async write", line, tid) else {
            return false;
        };
        if self.checks {
            self.not_pending(a, n, "cp.async to the in-flight", line, tid);
            self.check_write(a, n, line, tid);
            for b in a..a + n {
                self.pending[b] = tid + 1;
                self.pending_line[b] = line;
            }
        }
        true
    }

    /// A cp.async lands (at the issuing thread's wait): the bytes are written by that thread.
    pub(crate) fn land_async(&mut self, addr: u64, data: &[u8], line: u32, tid: u32) {
        let a = addr as usize;
        let n = data.len();
        if self.checks {
            for b in a..a + n {
                self.pending[b] = 0;
            }
            self.check_write(a, n, line, tid);
            self.record_write(a, n, line, tid);
        }
        self.data[a..a + n].copy_from_slice(data);
    }

    /// The epoch ends (a barrier or the end of the CTA): the reads of never-written bytes that
    /// no other thread wrote in this epoch become findings.
    pub(crate) fn end_epoch(&mut self) {
        if self.uninit.is_empty() {
            return;
        }
        let e = self.epoch;
        for (b, f) in std::mem::take(&mut self.uninit) {
            let written_by_other = self.w_ep[b] == e && self.w_tid[b] != f.thread;
            if !written_by_other {
                self.faults.push(f);
            }
        }
    }
}
