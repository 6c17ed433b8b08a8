//! Global memory (the launch's buffers at simulated addresses) and a CTA's shared memory with
//! its checker state.
//!
//! Buffer `i` of a launch lives at the simulated global address `(i + 1) << 40`, so any
//! address maps to at most one buffer and an access past a buffer's end lands in no buffer.
//! Shared memory is a byte array addressed by the 32-bit shared window (static symbols from 0,
//! then the dynamic `.extern` array); generic addresses of shared memory are
//! `SHARED_GENERIC + window address`.

use super::check::Fault;
use crate::backend::Buffer;

/// log2 of the spacing of buffers in the simulated global address space.
pub(crate) const GLOBAL_SHIFT: u32 = 40;
/// Generic-address base of the shared window (`cvta.shared`).
pub(crate) const SHARED_GENERIC: u64 = 0x7f00_0000_0000_0000;

/// The simulated global address of buffer `i`.
pub(crate) fn global_base(i: usize) -> u64 {
    (i as u64 + 1) << GLOBAL_SHIFT
}

/// The launch's buffers as global memory.
pub(crate) struct Global<'a> {
    pub bufs: &'a [Buffer],
    pub names: &'a [String],
}

impl Global<'_> {
    /// Host pointer for `n` bytes at `addr`, checking bounds (and writability for writes).
    pub(crate) fn locate(
        &self,
        addr: u64,
        n: usize,
        write: bool,
        line: u32,
        tid: u32,
    ) -> Result<*mut u8, Fault> {
        let what = if write { "write" } else { "read" };
        let idx = (addr >> GLOBAL_SHIFT) as usize;
        if idx == 0 || idx > self.bufs.len() {
            return Err(Fault::check(
                line,
                tid,
                Some(addr),
                format!(
                    "out-of-bounds global {what} of {n} bytes at {addr:#x}: the address is in no buffer of the launch"
                ),
            ));
        }
        let b = &self.bufs[idx - 1];
        let off = addr - global_base(idx - 1);
        let name = self.names.get(idx - 1).map(|s| s.as_str()).unwrap_or("?");
        if off as usize + n > b.len {
            return Err(Fault::check(
                line,
                tid,
                Some(addr),
                format!(
                    "out-of-bounds global {what} of {n} bytes at {addr:#x}: byte offset {off} of `{name}` (buffer {}, {} bytes)",
                    idx - 1,
                    b.len
                ),
            ));
        }
        if write && !b.writable {
            return Err(Fault::check(
                line,
                tid,
                Some(addr),
                format!(
                    "global write to read-only buffer `{name}` (buffer {}) at byte offset {off}",
                    idx - 1
                ),
            ));
        }
        // SAFETY: in bounds of a buffer the launcher handed us.
        Ok(unsafe { b.ptr.add(off as usize) })
    }

    pub(crate) fn read(&self, addr: u64, out: &mut [u8], line: u32, tid: u32) -> Result<(), Fault> {
        let p = self.locate(addr, out.len(), false, line, tid)?;
        // SAFETY: `locate` checked the range.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    pub(crate) fn write(&self, addr: u64, data: &[u8], line: u32, tid: u32) -> Result<(), Fault> {
        let p = self.locate(addr, data.len(), true, line, tid)?;
        // SAFETY: `locate` checked the range; CTAs write disjoint elements (as on a GPU).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }
}

const NONE: u32 = u32::MAX;
const MANY: u32 = u32::MAX - 1;

/// One CTA's shared memory and, per byte, who wrote and read it in the current barrier epoch.
pub(crate) struct Shared {
    pub data: Vec<u8>,
    pub static_bytes: u32,
    pub checks: bool,
    /// Incremented at every CTA-wide `bar.sync`.
    pub epoch: u32,
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
    /// The first read of never-written bytes in this epoch.
    pub uninit: Option<Fault>,
}

impl Shared {
    pub(crate) fn new(bytes: usize, static_bytes: u32, checks: bool) -> Shared {
        let v = |x: u32| if checks { vec![x; bytes] } else { Vec::new() };
        Shared {
            data: vec![0; bytes],
            static_bytes,
            checks,
            epoch: 1,
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
            uninit: None,
        }
    }

    fn bounds(&self, addr: u64, n: usize, what: &str, line: u32, tid: u32) -> Result<usize, Fault> {
        if addr
            .checked_add(n as u64)
            .is_none_or(|e| e > self.data.len() as u64)
        {
            return Err(Fault::check(
                line,
                tid,
                Some(addr),
                format!(
                    "out-of-bounds shared {what} of {n} bytes at shared address {addr:#x}: the CTA has {} bytes of shared memory ({} static + {} dynamic)",
                    self.data.len(),
                    self.static_bytes,
                    self.data.len() as u32 - self.static_bytes.min(self.data.len() as u32)
                ),
            ));
        }
        Ok(addr as usize)
    }

    fn not_pending(
        &self,
        a: usize,
        n: usize,
        what: &str,
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        for b in a..a + n {
            if self.pending[b] != 0 {
                return Err(Fault::check(
                    line,
                    tid,
                    Some(b as u64),
                    format!(
                        "{what} of cp.async destination at shared address {b:#x} before its cp.async.wait_group/wait_all (copy issued by thread {} at line {})",
                        self.pending[b] - 1,
                        self.pending_line[b]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `addr` as thread `tid`.
    pub(crate) fn read(
        &mut self,
        addr: u64,
        out: &mut [u8],
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        let n = out.len();
        let a = self.bounds(addr, n, "read", line, tid)?;
        if self.checks {
            self.not_pending(a, n, "read", line, tid)?;
            let e = self.epoch;
            for b in a..a + n {
                if !self.init[b] && self.uninit.is_none() {
                    // Reported at the next barrier (or the end of the CTA) unless another
                    // thread writes the byte first in this epoch: then it is reported as the
                    // race it is, whatever order the simulator ran the warps in.
                    self.uninit = Some(Fault::check(
                        line,
                        tid,
                        Some(b as u64),
                        format!(
                            "read of uninitialized shared memory at {b:#x}: no thread wrote it before this read"
                        ),
                    ));
                }
                if self.w_ep[b] == e && self.w_tid[b] != tid {
                    return Err(Fault::check(
                        line,
                        tid,
                        Some(b as u64),
                        format!(
                            "shared-memory race at {b:#x}: thread {tid} reads it (line {line}) after thread {} wrote it (line {}) with no bar.sync between them",
                            self.w_tid[b], self.w_line[b]
                        ),
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
        Ok(())
    }

    fn check_write(&self, a: usize, n: usize, line: u32, tid: u32) -> Result<(), Fault> {
        let e = self.epoch;
        for b in a..a + n {
            if self.w_ep[b] == e && self.w_tid[b] != tid {
                return Err(Fault::check(
                    line,
                    tid,
                    Some(b as u64),
                    format!(
                        "shared-memory race at {b:#x}: thread {tid} writes it (line {line}) after thread {} wrote it (line {}) with no bar.sync between them",
                        self.w_tid[b], self.w_line[b]
                    ),
                ));
            }
            if self.r_ep[b] == e && self.r_tid[b] != tid {
                let who = if self.r_tid[b] == MANY {
                    "other threads".to_string()
                } else {
                    format!("thread {}", self.r_tid[b])
                };
                return Err(Fault::check(
                    line,
                    tid,
                    Some(b as u64),
                    format!(
                        "shared-memory race at {b:#x}: thread {tid} writes it (line {line}) after {who} read it (line {}) with no bar.sync between them",
                        self.r_line[b]
                    ),
                ));
            }
        }
        Ok(())
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

    /// Writes `data` at `addr` as thread `tid`.
    pub(crate) fn write(
        &mut self,
        addr: u64,
        data: &[u8],
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        let n = data.len();
        let a = self.bounds(addr, n, "write", line, tid)?;
        if self.checks {
            self.not_pending(a, n, "write", line, tid)?;
            self.check_write(a, n, line, tid)?;
            self.record_write(a, n, line, tid);
        }
        self.data[a..a + n].copy_from_slice(data);
        Ok(())
    }

    /// An atomic read-modify-write: bounds, in-flight copies and initialization are checked;
    /// atomics do not race with each other, so they are not recorded as plain accesses.
    pub(crate) fn atomic(
        &mut self,
        addr: u64,
        n: usize,
        line: u32,
        tid: u32,
    ) -> Result<&mut [u8], Fault> {
        let a = self.bounds(addr, n, "atomic", line, tid)?;
        if self.checks {
            self.not_pending(a, n, "atomic", line, tid)?;
            if let Some(b) = (a..a + n).find(|&b| !self.init[b]) {
                return Err(Fault::check(
                    line,
                    tid,
                    Some(b as u64),
                    format!("atomic on uninitialized shared memory at {b:#x}: no thread wrote it"),
                ));
            }
        }
        Ok(&mut self.data[a..a + n])
    }

    /// A cp.async issue: the destination becomes in flight (reading or writing it before the
    /// wait is an error); writing it now would race with readers of this epoch.
    pub(crate) fn issue_async(
        &mut self,
        addr: u64,
        n: usize,
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        let a = self.bounds(addr, n, "cp.async write", line, tid)?;
        if self.checks {
            self.not_pending(a, n, "cp.async to the in-flight", line, tid)?;
            self.check_write(a, n, line, tid)?;
            for b in a..a + n {
                self.pending[b] = tid + 1;
                self.pending_line[b] = line;
            }
        }
        Ok(())
    }

    /// A cp.async lands (at the issuing thread's wait): the bytes are written by that thread.
    pub(crate) fn land_async(
        &mut self,
        addr: u64,
        data: &[u8],
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        let a = addr as usize;
        let n = data.len();
        if self.checks {
            for b in a..a + n {
                self.pending[b] = 0;
            }
            self.check_write(a, n, line, tid)?;
            self.record_write(a, n, line, tid);
        }
        self.data[a..a + n].copy_from_slice(data);
        Ok(())
    }
}
