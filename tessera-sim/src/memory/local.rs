//! Per-thread `.local` memory: each thread of a CTA owns `bytes` bytes at local-window
//! addresses `[0, bytes)` (the entry's `.local` declarations in order); generic addresses of
//! local memory are `LOCAL_GENERIC + window address`. It starts zeroed, and an access outside
//! a thread's bytes is an out-of-bounds finding (not performed).

use crate::check::Fault;
use crate::report::{FindingKind, Location};

pub(crate) struct Local {
    data: Vec<u8>,
    bytes: usize,
    /// Findings of the current instruction.
    pub faults: Vec<Fault>,
}

impl Local {
    pub(crate) fn new(bytes: u32, threads: usize) -> Local {
        Local {
            data: vec![0; bytes as usize * threads],
            bytes: bytes as usize,
            faults: Vec::new(),
        }
    }

    fn range(&mut self, addr: u64, n: usize, what: &str, line: u32, tid: u32) -> Option<usize> {
        if addr
            .checked_add(n as u64)
            .is_none_or(|e| e > self.bytes as u64)
        {
            self.faults.push(Fault::new(
                FindingKind::OutOfBounds,
                line,
                tid,
                Some(Location::Local { offset: addr }),
                format!(
                    "out-of-bounds local {what} of {n} bytes at local+{addr}: each thread has {} bytes of .local memory",
                    self.bytes
                ),
            ));
            return None;
        }
        Some(tid as usize * self.bytes + addr as usize)
    }

    /// Reads thread `tid`'s bytes at `addr`; false (and `out` zeroed) when out of bounds.
    pub(crate) fn read(&mut self, addr: u64, out: &mut [u8], line: u32, tid: u32) -> bool {
        match self.range(addr, out.len(), "read", line, tid) {
            Some(a) => {
                out.copy_from_slice(&self.data[a..a + out.len()]);
                true
            }
            None => {
                out.fill(0);
                false
            }
        }
    }

    /// Writes thread `tid`'s bytes at `addr`; false when out of bounds.
    pub(crate) fn write(&mut self, addr: u64, data: &[u8], line: u32, tid: u32) -> bool {
        match self.range(addr, data.len(), "write", line, tid) {
            Some(a) => {
                self.data[a..a + data.len()].copy_from_slice(data);
                true
            }
            None => false,
        }
    }
}
