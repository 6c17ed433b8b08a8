//! Zeroed host memory for a CPU launch's outputs, aligned to the element size, so the final
//! output becomes the returned tensor's `Vec<T>` without a copy.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// `bytes` zeroed bytes aligned to `align` (a power of two); freed on drop unless turned into
/// a `Vec` by [`HostBlock::into_vec`].
pub(crate) struct HostBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a uniquely owned heap block of plain bytes.
unsafe impl Send for HostBlock {}
// SAFETY: shared access only reads through `as_bytes`.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// Zeroed memory (`calloc`: large blocks come zeroed from the OS, no pass over them).
    /// A size the allocator refuses is [`crate::Error::OutOfMemory`], never an abort.
    pub fn zeroed(bytes: usize, align: usize) -> crate::Result<HostBlock> {
        let oom = crate::Error::OutOfMemory { bytes };
        let layout = Layout::from_size_align(bytes, align.max(1)).map_err(|_| oom.clone())?;
        let ptr = if bytes == 0 {
            // A dangling, aligned pointer: nothing is allocated for an empty block.
            NonNull::new(layout.align() as *mut u8).ok_or_else(|| oom.clone())?
        } else {
            // SAFETY: the layout has a non-zero size.
            NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(oom)?
        };
        Ok(HostBlock { ptr, layout })
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `layout.size()` initialised (zeroed) bytes, or an empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The block as a `Vec<T>` of `len` elements, without a copy, when its layout is exactly
    /// `T`'s array layout; else `Err(self)`.
    pub fn into_vec<T: bytemuck::Pod>(self, len: usize) -> Result<Vec<T>, HostBlock> {
        let size = std::mem::size_of::<T>();
        if size == 0
            || len == 0
            || self.layout.size() != len * size
            || self.layout.align() != std::mem::align_of::<T>()
        {
            return Err(self);
        }
        let p = self.ptr.as_ptr() as *mut T;
        std::mem::forget(self);
        // SAFETY: allocated by the global allocator with `T`'s alignment and `len *
        // size_of::<T>()` bytes, every byte initialised, and `T` is plain old data.
        Ok(unsafe { Vec::from_raw_parts(p, len, len) })
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: allocated in `zeroed` with this layout.
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
    fn a_block_the_allocator_refuses_is_an_error() {
        let bytes = 1usize << 62;
        assert_eq!(
            HostBlock::zeroed(bytes, 8).err(),
            Some(crate::Error::OutOfMemory { bytes })
        );
    }
}
