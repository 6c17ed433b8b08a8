//! Owned, aligned host memory that goes back to the [host cache](super::host_cache) when
//! dropped: what a CPU launch allocates its outputs in.

use super::host_cache::{self, Alloc};
use std::alloc::{Layout, alloc, alloc_zeroed};
use std::ptr::NonNull;

/// Blocks of at least this many bytes get [huge pages](advise_huge_pages).
pub(crate) const HUGE_PAGE_MIN: usize = 4 << 20;

/// At least `len` bytes aligned to the layout's alignment, from the host cache or the global
/// allocator; back to the cache (or freed) on drop. The bytes may be uninitialised: the
/// owner tracks that ([`crate::launch`]'s `HostBlock`).
pub(crate) struct HostMem {
    alloc: std::mem::ManuallyDrop<Alloc>,
}

// SAFETY: a uniquely owned heap block of plain bytes; shared access only reads.
unsafe impl Send for HostMem {}
// SAFETY: as above.
unsafe impl Sync for HostMem {}

impl HostMem {
    /// At least `layout.size()` bytes, zeroed when `zeroed` (a kept block is cleared here; a
    /// new one by the global allocator's `alloc_zeroed`, which is `calloc` only for
    /// alignments up to 16 and otherwise an aligned allocation followed by a pass that writes
    /// zeros), else uninitialised. A size the allocator refuses, or an invalid
    /// `TESSERA_HOST_CACHE` for a block of at least [`host_cache::MIN_BLOCK`] bytes, is an
    /// error, never an abort.
    pub fn new(layout: Layout, zeroed: bool) -> crate::Result<HostMem> {
        if let Some(a) = host_cache::take(layout)? {
            if zeroed {
                // SAFETY: `layout.size()` writable bytes of a block nothing else holds.
                unsafe { std::ptr::write_bytes(a.ptr.as_ptr(), 0, layout.size()) };
            }
            return Ok(HostMem::from(a));
        }
        HostMem::fresh(layout, zeroed)
    }

    /// At least `layout.size()` bytes from the global allocator, never from the host cache
    /// (what [`HostMem::new`] does on a miss).
    pub fn fresh(layout: Layout, zeroed: bool) -> crate::Result<HostMem> {
        let oom = crate::Error::OutOfMemory {
            bytes: layout.size(),
        };
        if layout.size() == 0 {
            // A dangling, aligned pointer: nothing is allocated for an empty block.
            let ptr = NonNull::new(layout.align() as *mut u8).ok_or(oom)?;
            return Ok(HostMem::from(Alloc { ptr, layout }));
        }
        // SAFETY: the layout has a non-zero size.
        let p = unsafe {
            if zeroed {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        let ptr = NonNull::new(p).ok_or(oom)?;
        if layout.size() >= HUGE_PAGE_MIN {
            advise_huge_pages(ptr.as_ptr(), layout.size());
        }
        Ok(HostMem::from(Alloc { ptr, layout }))
    }

    fn from(a: Alloc) -> HostMem {
        HostMem {
            alloc: std::mem::ManuallyDrop::new(a),
        }
    }

    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.alloc.ptr
    }

    /// How many bytes it holds (at least what was asked for).
    pub fn capacity(&self) -> usize {
        self.alloc.layout.size()
    }

    /// Its alignment.
    pub fn align(&self) -> usize {
        self.alloc.layout.align()
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.alloc` is not used again.
        let a = unsafe { std::mem::ManuallyDrop::take(&mut self.alloc) };
        if a.layout.size() != 0 {
            host_cache::give_back(a);
        }
    }
}

/// Asks the kernel to back the 2 MiB-aligned pages inside `[ptr, ptr + bytes)` with
/// transparent huge pages, so a fresh block faults in 512 times less often. Advisory: a
/// system without THP (or another OS) keeps 4 KiB pages, and the block's contents and
/// ownership are unchanged either way.
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if let Some((start, len)) = huge_page_range(ptr as usize, bytes) {
        // SAFETY: `[start, start + len)` lies inside a block this process allocated and owns;
        // `MADV_HUGEPAGE` changes only how the kernel backs the pages, never their contents.
        // A failure (THP not built into the kernel) leaves ordinary pages, so it is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// The 2 MiB-aligned part of `[addr, addr + bytes)` as `(start, len)`, if any.
fn huge_page_range(addr: usize, bytes: usize) -> Option<(usize, usize)> {
    const HUGE: usize = 2 << 20;
    let start = addr.checked_next_multiple_of(HUGE)?;
    let end = addr.checked_add(bytes)? / HUGE * HUGE;
    (end > start).then_some((start, end - start))
}

#[cfg(test)]
mod tests {
    use super::HostMem;
    use std::alloc::Layout;

    #[test]
    fn huge_pages_are_advised_on_the_aligned_interior_only() {
        const M: usize = 1 << 20;
        assert_eq!(super::huge_page_range(2 * M, 4 * M), Some((2 * M, 4 * M)));
        assert_eq!(
            super::huge_page_range(2 * M + 16, 6 * M),
            Some((4 * M, 4 * M))
        );
        assert_eq!(
            super::huge_page_range(2 * M + 16, 4 * M),
            Some((4 * M, 2 * M))
        );
        assert_eq!(super::huge_page_range(2 * M + 16, 2 * M), None);
        assert_eq!(super::huge_page_range(usize::MAX - M, 4 * M), None);
    }

    #[test]
    fn memory_is_aligned_as_asked_and_zeroed_when_asked() {
        for (size, align) in [(0, 64), (12, 64), (4096 + 4, 64), (3 << 20, 4096)] {
            let m = HostMem::new(Layout::from_size_align(size, align).unwrap(), true).unwrap();
            assert_eq!(m.ptr().as_ptr() as usize % align, 0);
            assert!(m.capacity() >= size);
            // SAFETY: `size` zeroed bytes.
            let s = unsafe { std::slice::from_raw_parts(m.ptr().as_ptr(), size) };
            assert!(s.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn a_reused_block_asked_for_zeroed_reads_zeros() {
        // The cache on whatever `TESSERA_HOST_CACHE` says (no other unit test sets it, and
        // none frees 1 GiB of blocks that could push this one out).
        crate::tensor::host_cache::set_capacity(Some(
            crate::tensor::host_cache::MIN_DEFAULT_CAPACITY,
        ));
        // An alignment no other test asks for, so no other test takes this block.
        let layout = Layout::from_size_align((3 << 20) + 4160, 8192).unwrap();
        let m = HostMem::new(layout, false).unwrap();
        let p = m.ptr();
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..layout.size() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // SAFETY: `layout.size()` bytes owned by `m`.
            unsafe { p.as_ptr().add(i).write((s >> 24) as u8 | 1) };
        }
        let hits = crate::tensor::host_cache::stats().hits;
        drop(m);
        let z = HostMem::new(layout, true).unwrap();
        assert_eq!(z.ptr(), p, "the block was not reused");
        assert!(crate::tensor::host_cache::stats().hits > hits);
        // SAFETY: `layout.size()` bytes, zeroed.
        let b = unsafe { std::slice::from_raw_parts(z.ptr().as_ptr(), layout.size()) };
        assert!(b.iter().all(|&x| x == 0));
    }
}
