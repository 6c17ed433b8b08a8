//! Host memory for a CPU launch's outputs: blocks ([`HostMem`], 64-byte aligned from 4 KiB, else
//! aligned to the element; from the host
//! cache when a freed block fits, see `tensor/host_cache.rs`), so the final output becomes
//! the returned tensor's storage without a copy.
//!
//! A block starts zeroed ([`HostBlock::zeroed`]) or uninitialised ([`HostBlock::uninit`]), or
//! borrows memory the caller owns ([`HostBlock::borrowed`]: the storage of the tensor that
//! `KernelDef::launch_into` writes into), which it treats as uninitialised and never frees.
//! An uninitialised block is never read: [`HostBlock::as_bytes`] and
//! [`HostBlock::into_host_data`] check that it was zeroed ([`HostBlock::zero`]) or declared
//! fully written by a launch ([`HostBlock::assume_init`]) first, and kernels never load an
//! output they have not written (the fused path declines a parameter both loaded and stored;
//! the launch zeroes any output the program that writes it cannot prove it covers). A block
//! reused from the cache counts as uninitialised, whatever it held, exactly as a new one.
//!
//! A new block of at least 4 MiB asks Linux for transparent huge pages on its 2 MiB-aligned
//! interior (`tensor/host_mem.rs`; figures in ARCHITECTURE.md, "Launch outputs on huge pages").

use crate::tensor::{HostData, HostMem, block_align};
use std::alloc::Layout;
use std::ptr::NonNull;

/// `bytes` bytes aligned to 64 from 4 KiB on, else to the element (owned: back to the host
/// cache on drop unless turned
/// into a tensor's storage by [`HostBlock::into_host_data`]), or borrowed.
pub(crate) struct HostBlock {
    ptr: NonNull<u8>,
    len: usize,
    /// Every byte has been written (zeroed at allocation, by [`HostBlock::zero`], or by a
    /// launch that covers the whole block).
    init: bool,
    /// The owned memory; `None` for [`HostBlock::borrowed`] memory.
    mem: Option<HostMem>,
}

// SAFETY: a uniquely owned (or exclusively borrowed) block of plain bytes.
unsafe impl Send for HostBlock {}
// SAFETY: shared access only reads through `as_bytes`, which checks `init`.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// Zeroed memory (a reused block is cleared; a new one is zeroed by the global
    /// allocator, which for a 64-byte-aligned block is a pass that writes zeros). A size the allocator refuses is [`crate::Error::OutOfMemory`], never
    /// an abort.
    #[cfg(test)]
    pub fn zeroed(bytes: usize, align: usize) -> crate::Result<HostBlock> {
        Self::alloc(bytes, align, true)
    }

    /// Uninitialised memory (a reused or allocator-recycled block is neither cleared nor
    /// faulted in again). It must be [zeroed](HostBlock::zero) or fully written and then
    /// [declared so](HostBlock::assume_init) before it is read.
    pub fn uninit(bytes: usize, align: usize) -> crate::Result<HostBlock> {
        Self::alloc(bytes, align, false)
    }

    fn alloc(bytes: usize, align: usize, zeroed: bool) -> crate::Result<HostBlock> {
        let oom = crate::Error::OutOfMemory { bytes };
        let layout = Layout::from_size_align(bytes, block_align(bytes, align)).map_err(|_| oom)?;
        let mem = HostMem::new(layout, zeroed)?;
        Ok(HostBlock {
            ptr: mem.ptr(),
            len: bytes,
            init: zeroed || bytes == 0,
            mem: Some(mem),
        })
    }

    /// A block over `bytes`, memory the caller owns: the launch writes its output there. It
    /// counts as uninitialised (a launch zeroes it unless it provably writes every byte, as
    /// for a fresh block, whatever `bytes` held before), is never freed and never becomes a
    /// tensor's storage ([`HostBlock::into_host_data`] hands it back as `Err`).
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
            len: layout.size(),
            init: layout.size() == 0,
            mem: None,
        })
    }

    /// Whether the block borrows its caller's memory ([`HostBlock::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        self.mem.is_none()
    }

    /// Whether every byte is initialised.
    pub fn is_init(&self) -> bool {
        self.init
    }

    /// Zeroes an uninitialised block (nothing to do for an initialised one).
    pub fn zero(&mut self) {
        if !self.init {
            // SAFETY: `len` writable bytes owned by this block.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
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
        self.len
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The block's bytes. Panics on a block not yet initialised (reading it would be
    /// undefined behaviour); the launch initialises every output before returning it.
    pub fn as_bytes(&self) -> &[u8] {
        assert!(self.init, "an uninitialised launch output was read");
        // SAFETY: `len` initialised bytes (checked above), or an empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The block as `len` elements of a tensor's storage, without a copy, when it was
    /// allocated here, holds exactly `len` `T`s and is aligned for `T`; else `Err(self)`.
    /// Panics on a block not yet initialised.
    pub fn into_host_data<T: bytemuck::Pod>(
        mut self,
        len: usize,
    ) -> Result<HostData<T>, HostBlock> {
        assert!(self.init, "an uninitialised launch output was read");
        let size = std::mem::size_of::<T>();
        if self.mem.is_none()
            || size == 0
            || Some(self.len) != len.checked_mul(size)
            || !(self.ptr.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
        {
            return Err(self);
        }
        let mem = self.mem.take().expect("checked above");
        // SAFETY: `mem` holds at least `len * size_of::<T>()` bytes (this block's `len`), all
        // initialised (checked above), aligned for `T` (checked above); `T` is plain old data.
        Ok(unsafe { HostData::from_block(mem, len) })
    }

    /// The elements as a tensor's storage: the block itself ([`HostBlock::into_host_data`]),
    /// else a copy. Panics on a block not yet initialised.
    pub fn into_storage<T: bytemuck::Pod>(self, len: usize) -> crate::Result<HostData<T>> {
        match self.into_host_data::<T>(len) {
            Ok(d) => Ok(d),
            Err(mem) => {
                let size = std::mem::size_of::<T>();
                let mut data: Vec<T> = crate::tensor::size::try_with_capacity(len)?;
                data.extend(
                    mem.as_bytes()[..len * size]
                        .chunks_exact(size)
                        .map(bytemuck::pod_read_unaligned::<T>),
                );
                Ok(HostData::Vec(data))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HostBlock;
    use crate::tensor::HostData;

    #[test]
    fn becomes_storage_only_when_the_size_matches() {
        assert_eq!(
            HostBlock::zeroed(4096, 4).unwrap().as_mut_ptr() as usize % 64,
            0
        );
        let mut b = HostBlock::zeroed(12, 4).unwrap();
        // SAFETY: 12 bytes were allocated.
        unsafe { b.as_mut_ptr().add(4).cast::<f32>().write(2.5) };
        let d = b.into_host_data::<f32>(3).ok().unwrap();
        assert!(matches!(d, HostData::Block { .. }));
        assert_eq!(&d[..], &[0.0, 2.5, 0.0]);
        let b = HostBlock::zeroed(12, 4).unwrap();
        let b = b
            .into_host_data::<u16>(5)
            .err()
            .expect("12 bytes are 6 u16s");
        assert_eq!(b.as_bytes(), &[0u8; 12]);
        assert_eq!(&b.into_storage::<u16>(6).unwrap()[..], &[0u16; 6]);
        assert!(
            HostBlock::zeroed(0, 4)
                .unwrap()
                .into_host_data::<f32>(0)
                .is_ok()
        );
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
        assert_eq!(&b.into_host_data::<f32>(2).ok().unwrap()[..], &[0.5, 1.5]);
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
            .into_host_data::<f32>(3)
            .err()
            .expect("borrowed memory is no tensor storage");
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
        let n = (crate::tensor::HUGE_PAGE_MIN + (3 << 20) + 12) / 4;
        let mut b = HostBlock::uninit(n * 4, 4).unwrap();
        let p = b.as_mut_ptr().cast::<f32>();
        for i in 0..n {
            // SAFETY: `n` f32s were allocated.
            unsafe { p.add(i).write((i % 977) as f32 - 400.5) };
        }
        // SAFETY: all `n` were written.
        unsafe { b.assume_init() };
        let v = b.into_host_data::<f32>(n).ok().unwrap();
        assert!(
            v.iter()
                .enumerate()
                .all(|(i, &x)| x == (i % 977) as f32 - 400.5)
        );
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
