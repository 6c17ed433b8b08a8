//! Host memory for a CPU launch's outputs, aligned to the element size, so the final output
//! becomes the returned tensor's `Vec<T>` without a copy.
//!
//! A block starts zeroed ([`HostBlock::zeroed`]) or uninitialised ([`HostBlock::uninit`]), or
//! borrows memory the caller owns ([`HostBlock::borrowed`]: the storage of the tensor that
//! `KernelDef::launch_into` writes into), which it treats as uninitialised and never frees.
//! An uninitialised block is never read: [`HostBlock::as_bytes`] and [`HostBlock::into_vec`]
//! check that it was zeroed ([`HostBlock::zero`]) or declared fully written by a launch
//! ([`HostBlock::assume_init`]) first, and kernels never load an output they have not
//! written (the fused path declines a parameter both loaded and stored; the launch zeroes any
//! output the program that writes it cannot prove it covers).
//!
//! A block of at least [`HUGE_PAGE_MIN`] bytes asks Linux for transparent huge pages on its
//! 2 MiB-aligned interior (`madvise(MADV_HUGEPAGE)`, honoured where the system's THP mode is
//! `madvise` or `always`): a large block is often a fresh `mmap` (glibc maps blocks above its
//! mmap threshold, at most 32 MiB, and unmaps them on free, so a 128 MiB output is new memory
//! on every launch), and the first write to each of its 4 KiB pages is a page fault; with huge pages one fault maps 2 MiB (figures in ARCHITECTURE.md,
//! "Launch outputs on huge pages").

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Blocks of at least this many bytes get [huge pages](advise_huge_pages).
pub(crate) const HUGE_PAGE_MIN: usize = 4 << 20;

/// `bytes` bytes aligned to `align` (a power of two); freed on drop unless turned into a `Vec`
/// by [`HostBlock::into_vec`].
pub(crate) struct HostBlock {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Every byte has been written (zeroed at allocation, by [`HostBlock::zero`], or by a
    /// launch that covers the whole block).
    init: bool,
    /// Allocated here (freed on drop); `false` for [`HostBlock::borrowed`] memory.
    owned: bool,
}

// SAFETY: a uniquely owned heap block of plain bytes.
unsafe impl Send for HostBlock {}
// SAFETY: shared access only reads through `as_bytes`, which checks `init`.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// Zeroed memory (`calloc`: large blocks come zeroed from the OS, no pass over them).
    /// A size the allocator refuses is [`crate::Error::OutOfMemory`], never an abort.
    #[cfg(test)]
    pub fn zeroed(bytes: usize, align: usize) -> crate::Result<HostBlock> {
        Self::alloc(bytes, align, true)
    }

    /// Uninitialised memory (`malloc`: a block the allocator reuses is neither cleared nor
    /// faulted in again). It must be [zeroed](HostBlock::zero) or fully written and then
    /// [declared so](HostBlock::assume_init) before it is read.
    pub fn uninit(bytes: usize, align: usize) -> crate::Result<HostBlock> {
        Self::alloc(bytes, align, false)
    }

    fn alloc(bytes: usize, align: usize, zeroed: bool) -> crate::Result<HostBlock> {
        let oom = crate::Error::OutOfMemory { bytes };
        let layout = Layout::from_size_align(bytes, align.max(1)).map_err(|_| oom.clone())?;
        let ptr = if bytes == 0 {
            // A dangling, aligned pointer: nothing is allocated for an empty block.
            NonNull::new(layout.align() as *mut u8).ok_or_else(|| oom.clone())?
        } else if zeroed {
            // SAFETY: the layout has a non-zero size.
            NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(oom)?
        } else {
            // SAFETY: the layout has a non-zero size.
            NonNull::new(unsafe { alloc(layout) }).ok_or(oom)?
        };
        if bytes >= HUGE_PAGE_MIN {
            advise_huge_pages(ptr.as_ptr(), bytes);
        }
        Ok(HostBlock {
            ptr,
            layout,
            init: zeroed || bytes == 0,
            owned: true,
        })
    }

    /// A block over `bytes`, memory the caller owns: the launch writes its output there. It
    /// counts as uninitialised (a launch zeroes it unless it provably writes every byte, as
    /// for a fresh block, whatever `bytes` held before), is never freed and never becomes a
    /// `Vec` ([`HostBlock::into_vec`] hands it back as `Err`).
    ///
    /// # Safety
    /// `bytes` must stay valid, and be neither read nor written other than through this
    /// block, until the block is dropped; its address must be a multiple of `align` (a power
    /// of two).
    pub unsafe fn borrowed(bytes: &mut [u8], align: usize) -> crate::Result<HostBlock> {
        let oom = crate::Error::OutOfMemory { bytes: bytes.len() };
        let layout = Layout::from_size_align(bytes.len(), align.max(1)).map_err(|_| oom)?;
        debug_assert_eq!(bytes.as_ptr() as usize % layout.align(), 0);
        Ok(HostBlock {
            ptr: NonNull::from(bytes).cast(),
            layout,
            init: layout.size() == 0,
            owned: false,
        })
    }

    /// Whether the block borrows its caller's memory ([`HostBlock::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        !self.owned
    }

    /// Whether every byte is initialised.
    pub fn is_init(&self) -> bool {
        self.init
    }

    /// Zeroes an uninitialised block (nothing to do for an initialised one).
    pub fn zero(&mut self) {
        if !self.init {
            // SAFETY: `layout.size()` writable bytes owned by this block.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.layout.size()) };
            self.init = true;
        }
    }

    /// Declares every byte written.
    ///
    /// # Safety
    /// Every byte of the block must have been written since it was allocated.
    pub unsafe fn assume_init(&mut self) {
        self.init = true;
    }

    /// The block's size in bytes.
    pub fn as_bytes_len(&self) -> usize {
        self.layout.size()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The block's bytes. Panics on a block not yet initialised (reading it would be
    /// undefined behaviour); the launch initialises every output before returning it.
    pub fn as_bytes(&self) -> &[u8] {
        assert!(self.init, "an uninitialised launch output was read");
        // SAFETY: `layout.size()` initialised bytes (checked above), or an empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The block as a `Vec<T>` of `len` elements, without a copy, when it was allocated here
    /// and its layout is exactly `T`'s array layout; else `Err(self)`. Panics on a block not
    /// yet initialised.
    pub fn into_vec<T: bytemuck::Pod>(self, len: usize) -> Result<Vec<T>, HostBlock> {
        assert!(self.init, "an uninitialised launch output was read");
        let size = std::mem::size_of::<T>();
        if !self.owned
            || size == 0
            || len == 0
            || self.layout.size() != len * size
            || self.layout.align() != std::mem::align_of::<T>()
        {
            return Err(self);
        }
        let p = self.ptr.as_ptr() as *mut T;
        std::mem::forget(self);
        // SAFETY: allocated by the global allocator with `T`'s alignment and `len *
        // size_of::<T>()` bytes, every byte initialised (checked above), and `T` is plain old
        // data.
        Ok(unsafe { Vec::from_raw_parts(p, len, len) })
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

impl Drop for HostBlock {
    fn drop(&mut self) {
        if self.owned && self.layout.size() != 0 {
            // SAFETY: allocated in `alloc` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HostBlock;

    #[test]
    fn becomes_a_vec_only_with_the_matching_layout() {
        let mut b = HostBlock::zeroed(12, 4).unwrap();
        // SAFETY: 12 bytes were allocated.
        unsafe { b.as_mut_ptr().add(4).cast::<f32>().write(2.5) };
        assert_eq!(b.into_vec::<f32>(3).ok(), Some(vec![0.0, 2.5, 0.0]));
        let b = HostBlock::zeroed(12, 4).unwrap();
        let b = b
            .into_vec::<u16>(6)
            .err()
            .expect("alignment 4 is not u16's");
        assert_eq!(b.as_bytes(), &[0u8; 12]);
        assert!(HostBlock::zeroed(0, 4).unwrap().into_vec::<f32>(0).is_err());
    }

    #[test]
    fn an_uninitialised_block_is_read_only_once_zeroed_or_written() {
        let mut b = HostBlock::uninit(8, 4).unwrap();
        assert!(!b.is_init());
        b.zero();
        assert_eq!(b.as_bytes(), &[0u8; 8]);
        let mut b = HostBlock::uninit(8, 4).unwrap();
        for i in 0..2 {
            // SAFETY: 8 bytes were allocated.
            unsafe { b.as_mut_ptr().cast::<f32>().add(i).write(i as f32 + 0.5) };
        }
        // SAFETY: both f32s were written.
        unsafe { b.assume_init() };
        assert_eq!(b.into_vec::<f32>(2).ok(), Some(vec![0.5, 1.5]));
        let b = HostBlock::uninit(8, 4).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.as_bytes().len()));
        assert!(r.is_err(), "reading an uninitialised block must panic");
    }

    #[test]
    fn a_borrowed_block_is_uninitialised_and_stays_its_owners() {
        let mut v = vec![7.5f32; 3];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
        // SAFETY: `v` outlives the block and is not touched while it lives.
        let mut b = unsafe { HostBlock::borrowed(bytes, 4) }.unwrap();
        assert!(b.is_borrowed() && !b.is_init());
        b.zero();
        assert_eq!(b.as_bytes(), &[0u8; 12]);
        // SAFETY: 12 bytes are borrowed.
        unsafe { b.as_mut_ptr().add(8).cast::<f32>().write(-1.25) };
        let b = b
            .into_vec::<f32>(3)
            .err()
            .expect("borrowed memory is no Vec");
        drop(b);
        assert_eq!(v, [0.0, 0.0, -1.25]);
        let mut e: Vec<f32> = Vec::new();
        // SAFETY: an empty slice.
        let b = unsafe { HostBlock::borrowed(bytemuck::cast_slice_mut(&mut e), 4) }.unwrap();
        assert!(b.is_init() && b.as_bytes().is_empty());
    }

    #[test]
    fn a_huge_page_block_holds_what_is_written() {
        // Large enough for the huge-page advice; every element written, then read back.
        let n = (super::HUGE_PAGE_MIN + (3 << 20) + 12) / 4;
        let mut b = HostBlock::uninit(n * 4, 4).unwrap();
        let p = b.as_mut_ptr().cast::<f32>();
        for i in 0..n {
            // SAFETY: `n` f32s were allocated.
            unsafe { p.add(i).write((i % 977) as f32 - 400.5) };
        }
        // SAFETY: all `n` were written.
        unsafe { b.assume_init() };
        let v = b.into_vec::<f32>(n).ok().unwrap();
        assert!(
            v.iter()
                .enumerate()
                .all(|(i, &x)| x == (i % 977) as f32 - 400.5)
        );
    }

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
    fn a_block_the_allocator_refuses_is_an_error() {
        let bytes = 1usize << 62;
        assert_eq!(
            HostBlock::uninit(bytes, 8).err(),
            Some(crate::Error::OutOfMemory { bytes })
        );
        assert_eq!(
            HostBlock::zeroed(bytes, 8).err(),
            Some(crate::Error::OutOfMemory { bytes })
        );
    }
}
