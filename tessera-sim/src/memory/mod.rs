//! The simulated device's memory: [`Memory`] (global allocations, host↔device transfers and
//! their counters), and the memories a launch creates: each CTA's shared memory
//! ([`shared`]) and each thread's local memory ([`local`]).
//!
//! **Addresses.** Allocation `k` (the `k`-th `alloc`, from 1) owns the 1 TiB address slot
//! `[k << 40, (k + 1) << 40)` and starts at its base, so any address maps to at most one
//! allocation in O(1) (`addr >> 40`), an access past an allocation's end lands in no other
//! allocation, and every base is 256-byte aligned like `cudaMalloc`'s. Slots are never
//! reused, so an access through a freed pointer is reported as a use after free. The shared
//! and local windows of generic addressing sit above every slot (`cvta.shared` /
//! `cvta.local` map into them).

pub(crate) mod global;
pub(crate) mod local;
pub(crate) mod shared;

use crate::error::SimError;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the size of an allocation's address slot.
pub(crate) const SLOT_SHIFT: u32 = 40;
/// Generic-address base of the shared window (`cvta.shared`).
pub(crate) const SHARED_GENERIC: u64 = 0x7f00_0000_0000_0000;
/// Generic-address base of the local window (`cvta.local`).
pub(crate) const LOCAL_GENERIC: u64 = 0x7e00_0000_0000_0000;
/// Allocations stop below the generic windows.
const MAX_SLOTS: u64 = LOCAL_GENERIC >> SLOT_SHIFT;

/// An address in the simulated device's global memory (what `cudaMalloc` returns).
///
/// ```
/// use tessera_sim::{DevicePtr, Memory};
/// let mut mem = Memory::new();
/// let p = mem.alloc(1024)?;
/// assert_eq!(p.0 % 256, 0);
/// assert_eq!(p.offset(16).0, p.0 + 16);
/// # Ok::<(), tessera_sim::SimError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null pointer (in no allocation).
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The pointer `bytes` further on.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Host↔device traffic since the [`Memory`] was created or [`Memory::reset_transfers`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// [`Memory::upload`] calls and their bytes.
    pub uploads: u64,
    /// Bytes uploaded.
    pub bytes_up: u64,
    /// [`Memory::download`] calls and their bytes.
    pub downloads: u64,
    /// Bytes downloaded.
    pub bytes_down: u64,
    /// [`Memory::copy`] calls (device → device) and their bytes.
    pub device_copies: u64,
    /// Bytes copied inside the device.
    pub bytes_copied: u64,
}

/// Allocation statistics of a [`Memory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocations not yet freed, and their bytes.
    pub live_allocations: u64,
    /// Bytes of the live allocations.
    pub bytes_live: u64,
    /// The most bytes live at once.
    pub peak_bytes: u64,
    /// Allocations ever made.
    pub total_allocations: u64,
}

/// What [`Memory::allocation`] tells about a pointer's allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Its first byte.
    pub base: DevicePtr,
    /// Its size.
    pub bytes: u64,
    /// The name given to [`Memory::alloc_named`], or `alloc#k` (`k` counts allocations from 1).
    pub name: String,
    /// True when kernels may not write it (a write is a finding).
    pub read_only: bool,
    /// False once freed.
    pub live: bool,
}

/// One allocation's slot.
#[derive(Debug)]
pub(crate) struct Slot {
    pub name: Option<String>,
    pub bytes: u64,
    /// `None` once freed.
    pub data: Option<Vec<u8>>,
    pub read_only: bool,
}

#[derive(Debug, Default)]
struct Counters {
    uploads: AtomicU64,
    bytes_up: AtomicU64,
    downloads: AtomicU64,
    bytes_down: AtomicU64,
    device_copies: AtomicU64,
    bytes_copied: AtomicU64,
}

/// A simulated device's global memory: allocations, transfers and their counts.
///
/// ```
/// use tessera_sim::Memory;
/// let mut mem = Memory::new();
/// let x = mem.alloc_named("x", 8)?;
/// mem.upload(x, &[1, 2, 3, 4, 5, 6, 7, 8])?;
/// let mut back = [0u8; 4];
/// mem.download(x.offset(4), &mut back)?;
/// assert_eq!(back, [5, 6, 7, 8]);
/// assert_eq!((mem.transfers().uploads, mem.transfers().bytes_down), (1, 4));
/// mem.free(x)?;
/// assert!(mem.free(x).is_err()); // double free
/// # Ok::<(), tessera_sim::SimError>(())
/// ```
#[derive(Debug, Default)]
pub struct Memory {
    pub(crate) slots: Vec<Slot>,
    counters: Counters,
    usage: Usage,
}

/// A zero-filled byte vector, or `None` if the host cannot provide it. Large allocations get
/// fresh (lazily zeroed) pages from the allocator instead of being written.
fn zeroed(bytes: usize) -> Option<Vec<u8>> {
    if bytes == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(bytes).ok()?;
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `[u8; bytes]`, and
    // all `bytes` bytes are initialized (zero).
    Some(unsafe { Vec::from_raw_parts(p, bytes, bytes) })
}

impl Memory {
    /// An empty device memory.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Allocates `bytes` zero-filled bytes, 256-byte aligned. Too large for the host is an
    /// `Err` ([`SimError::Alloc`]), never an abort.
    pub fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, SimError> {
        self.alloc_inner(None, bytes)
    }

    /// [`Memory::alloc`] with a name, used by findings (`` `out`+1024 ``).
    pub fn alloc_named(&mut self, name: &str, bytes: usize) -> Result<DevicePtr, SimError> {
        self.alloc_inner(Some(name.to_string()), bytes)
    }

    fn alloc_inner(&mut self, name: Option<String>, bytes: usize) -> Result<DevicePtr, SimError> {
        if bytes as u64 >= 1 << SLOT_SHIFT {
            return Err(SimError::Alloc {
                bytes,
                message: "larger than the simulator's 1 TiB allocation slots".into(),
            });
        }
        if self.slots.len() as u64 + 1 >= MAX_SLOTS {
            return Err(SimError::Alloc {
                bytes,
                message: format!("more than {} allocations", MAX_SLOTS - 1),
            });
        }
        let data = zeroed(bytes).ok_or_else(|| SimError::Alloc {
            bytes,
            message: "the host allocator refused it".into(),
        })?;
        self.slots.push(Slot {
            name,
            bytes: bytes as u64,
            data: Some(data),
            read_only: false,
        });
        let u = &mut self.usage;
        u.live_allocations += 1;
        u.total_allocations += 1;
        u.bytes_live += bytes as u64;
        u.peak_bytes = u.peak_bytes.max(u.bytes_live);
        Ok(DevicePtr((self.slots.len() as u64) << SLOT_SHIFT))
    }

    /// The slot index and offset of `ptr`, which must be in a live allocation with `bytes`
    /// bytes from it inside it.
    fn locate(&self, ptr: DevicePtr, bytes: usize, what: &str) -> Result<(usize, usize), SimError> {
        let bad = |m: String| SimError::BadPointer { ptr, message: m };
        let k = (ptr.0 >> SLOT_SHIFT) as usize;
        let off = ptr.0 & ((1 << SLOT_SHIFT) - 1);
        if k == 0 || k > self.slots.len() {
            return Err(bad(format!("{what}: not a pointer into an allocation")));
        }
        let s = &self.slots[k - 1];
        let name = slot_name(s, k);
        if s.data.is_none() {
            return Err(bad(format!("{what}: `{name}` was freed")));
        }
        if off + bytes as u64 > s.bytes {
            return Err(bad(format!(
                "{what}: {bytes} bytes at offset {off} leave `{name}` ({} bytes)",
                s.bytes
            )));
        }
        Ok((k - 1, off as usize))
    }

    /// Frees the allocation that starts at `ptr`. A pointer that is not the start of a live
    /// allocation (double free, interior or unknown pointer) is an `Err`.
    pub fn free(&mut self, ptr: DevicePtr) -> Result<(), SimError> {
        let (k, off) = self.locate(ptr, 0, "free")?;
        if off != 0 {
            return Err(SimError::BadPointer {
                ptr,
                message: format!(
                    "free: offset {off} into `{}`, not the start of an allocation",
                    slot_name(&self.slots[k], k + 1)
                ),
            });
        }
        let s = &mut self.slots[k];
        s.data = None;
        self.usage.live_allocations -= 1;
        self.usage.bytes_live -= s.bytes;
        Ok(())
    }

    /// Copies `data` to the device at `dst` (host → device), counted in [`Memory::transfers`].
    pub fn upload(&mut self, dst: DevicePtr, data: &[u8]) -> Result<(), SimError> {
        let (k, off) = self.locate(dst, data.len(), "upload")?;
        if let Some(d) = self.slots[k].data.as_mut() {
            d[off..off + data.len()].copy_from_slice(data);
        }
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_up
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Copies `out.len()` bytes from the device at `src` (device → host), counted.
    pub fn download(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), SimError> {
        let (k, off) = self.locate(src, out.len(), "download")?;
        if let Some(d) = self.slots[k].data.as_ref() {
            out.copy_from_slice(&d[off..off + out.len()]);
        }
        self.counters.downloads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_down
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Copies `bytes` bytes from `src` to `dst` on the device (ranges may overlap), counted.
    pub fn copy(&mut self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> Result<(), SimError> {
        let (ks, os) = self.locate(src, bytes, "copy source")?;
        let (kd, od) = self.locate(dst, bytes, "copy destination")?;
        if ks == kd {
            if let Some(d) = self.slots[kd].data.as_mut() {
                d.copy_within(os..os + bytes, od);
            }
        } else {
            let (a, b) = if ks < kd {
                let (l, r) = self.slots.split_at_mut(kd);
                (&l[ks], &mut r[0])
            } else {
                let (l, r) = self.slots.split_at_mut(ks);
                (&r[0], &mut l[kd])
            };
            if let (Some(s), Some(d)) = (a.data.as_ref(), b.data.as_mut()) {
                d[od..od + bytes].copy_from_slice(&s[os..os + bytes]);
            }
        }
        self.counters.device_copies.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_copied
            .fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Marks the allocation holding `ptr` read-only (or writable again): a kernel's write to it
    /// is a finding. Host uploads and copies are not affected.
    pub fn set_read_only(&mut self, ptr: DevicePtr, read_only: bool) -> Result<(), SimError> {
        let (k, _) = self.locate(ptr, 0, "set_read_only")?;
        self.slots[k].read_only = read_only;
        Ok(())
    }

    /// The allocation `ptr` points into (live or freed), if any.
    pub fn allocation(&self, ptr: DevicePtr) -> Option<Allocation> {
        let k = (ptr.0 >> SLOT_SHIFT) as usize;
        let s = self.slots.get(k.checked_sub(1)?)?;
        Some(Allocation {
            base: DevicePtr((k as u64) << SLOT_SHIFT),
            bytes: s.bytes,
            name: slot_name(s, k).into_owned(),
            read_only: s.read_only,
            live: s.data.is_some(),
        })
    }

    /// Transfers so far.
    pub fn transfers(&self) -> Transfers {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Transfers {
            uploads: l(&c.uploads),
            bytes_up: l(&c.bytes_up),
            downloads: l(&c.downloads),
            bytes_down: l(&c.bytes_down),
            device_copies: l(&c.device_copies),
            bytes_copied: l(&c.bytes_copied),
        }
    }

    /// Sets every transfer counter back to 0.
    pub fn reset_transfers(&self) {
        let c = &self.counters;
        for a in [
            &c.uploads,
            &c.bytes_up,
            &c.downloads,
            &c.bytes_down,
            &c.device_copies,
            &c.bytes_copied,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Allocation statistics.
    pub fn usage(&self) -> Usage {
        self.usage
    }
}

/// The name findings use for slot `k` (from 1).
pub(crate) fn slot_name(s: &Slot, k: usize) -> std::borrow::Cow<'_, str> {
    match &s.name {
        Some(n) => std::borrow::Cow::Borrowed(n.as_str()),
        None => std::borrow::Cow::Owned(format!("alloc#{k}")),
    }
}
