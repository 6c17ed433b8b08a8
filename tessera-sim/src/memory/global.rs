//! Global memory as a launch sees it: every slot's bytes as relaxed atomics (CTAs run in
//! parallel; a cross-CTA race of a buggy kernel gives some value, as on a GPU, never
//! undefined behaviour in the simulator), bounds, read-only and use-after-free checks that
//! name the allocation and the offset.

use super::{SLOT_SHIFT, Slot};
use crate::check::Fault;
use crate::report::{FindingKind, Location};
use std::sync::atomic::{AtomicU8, Ordering};

/// One slot during a launch.
pub(crate) struct SlotView<'a> {
    /// `None` once freed.
    data: Option<&'a [AtomicU8]>,
    name: std::borrow::Cow<'a, str>,
    bytes: u64,
    read_only: bool,
}

/// The global memory of a launch.
pub(crate) struct Global<'a> {
    slots: Vec<SlotView<'a>>,
}

/// Reads `out.len()` bytes.
#[inline]
pub(crate) fn load(src: &[AtomicU8], out: &mut [u8]) {
    for (o, s) in out.iter_mut().zip(src) {
        *o = s.load(Ordering::Relaxed);
    }
}

/// Writes `data`.
#[inline]
pub(crate) fn store(dst: &[AtomicU8], data: &[u8]) {
    for (d, s) in dst.iter().zip(data) {
        d.store(*s, Ordering::Relaxed);
    }
}

impl<'a> Global<'a> {
    /// A view of `slots` for one launch (which holds the memory exclusively).
    pub(crate) fn new(slots: &'a mut [Slot]) -> Global<'a> {
        let slots = slots
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let data = s.data.as_mut().map(|d| {
                    let d: &'a mut [u8] = d.as_mut_slice();
                    // SAFETY: `AtomicU8` has the size, alignment and bit validity of `u8`,
                    // and the launch holds the only reference to these bytes for `'a`.
                    unsafe { &*(d as *mut [u8] as *const [AtomicU8]) }
                });
                SlotView {
                    data,
                    name: match &s.name {
                        Some(n) => std::borrow::Cow::Borrowed(n.as_str()),
                        None => std::borrow::Cow::Owned(format!("alloc#{}", i + 1)),
                    },
                    bytes: s.bytes,
                    read_only: s.read_only,
                }
            })
            .collect();
        Global { slots }
    }

    /// The location of `addr` (for findings that are not bounds errors).
    pub(crate) fn location(&self, addr: u64) -> Option<Location> {
        let k = (addr >> SLOT_SHIFT) as usize;
        let s = self.slots.get(k.checked_sub(1)?)?;
        Some(Location::Global {
            buffer: s.name.to_string(),
            offset: addr & ((1 << SLOT_SHIFT) - 1),
            size: s.bytes,
        })
    }

    /// The `n` bytes at `addr`, or the finding that forbids the access.
    #[inline]
    pub(crate) fn access(
        &self,
        addr: u64,
        n: usize,
        write: bool,
        line: u32,
        tid: u32,
    ) -> Result<&'a [AtomicU8], Fault> {
        let k = (addr >> SLOT_SHIFT) as usize;
        let off = addr & ((1 << SLOT_SHIFT) - 1);
        if let Some(s) = k.checked_sub(1).and_then(|i| self.slots.get(i))
            && let Some(d) = s.data
            && off + n as u64 <= s.bytes
            && !(write && s.read_only)
        {
            return Ok(&d[off as usize..off as usize + n]);
        }
        Err(self.fault(addr, n, write, line, tid))
    }

    /// Why the access of `n` bytes at `addr` is not allowed.
    #[cold]
    fn fault(&self, addr: u64, n: usize, write: bool, line: u32, tid: u32) -> Fault {
        let what = if write { "write" } else { "read" };
        let k = (addr >> SLOT_SHIFT) as usize;
        let off = addr & ((1 << SLOT_SHIFT) - 1);
        let Some(s) = k.checked_sub(1).and_then(|i| self.slots.get(i)) else {
            let why = if k == 0 {
                format!("a null pointer plus {addr}")
            } else {
                "no allocation was made there".to_string()
            };
            return Fault::new(
                FindingKind::OutOfBounds,
                line,
                tid,
                None,
                format!(
                    "out-of-bounds global {what} of {n} bytes at address {addr:#x}: it is in no allocation ({why})"
                ),
            );
        };
        let loc = Some(Location::Global {
            buffer: s.name.to_string(),
            offset: off,
            size: s.bytes,
        });
        let name = &s.name;
        if s.data.is_none() {
            return Fault::new(
                FindingKind::UseAfterFree,
                line,
                tid,
                loc,
                format!("global {what} of {n} bytes at `{name}`+{off}: `{name}` was freed"),
            );
        }
        if off + n as u64 > s.bytes {
            // the upper half of a slot is far below the next allocation's start: an underrun
            let next = self.slots.get(k);
            let msg = if off >= 1 << (SLOT_SHIFT - 1)
                && let Some(nx) = next
            {
                format!(
                    "out-of-bounds global {what} of {n} bytes {} bytes before the start of `{}`",
                    (1u64 << SLOT_SHIFT) - off,
                    nx.name
                )
            } else if off >= s.bytes {
                format!(
                    "out-of-bounds global {what} of {n} bytes at `{name}`+{off}: {} bytes after the end of `{name}` ({} bytes)",
                    off - s.bytes,
                    s.bytes
                )
            } else {
                format!(
                    "out-of-bounds global {what} of {n} bytes at `{name}`+{off}: the access ends {} bytes after the end of `{name}` ({} bytes)",
                    off + n as u64 - s.bytes,
                    s.bytes
                )
            };
            return Fault::new(FindingKind::OutOfBounds, line, tid, loc, msg);
        }
        Fault::new(
            FindingKind::ReadOnlyWrite,
            line,
            tid,
            loc,
            format!("global {what} of {n} bytes to read-only allocation `{name}` at offset {off}"),
        )
    }
}
