//! A host tensor's elements: a `Vec` the user gave, or a block the library allocated
//! ([`HostMem`]: 64-byte aligned from 4 KiB, back to the host cache when dropped).

use super::host_mem::HostMem;
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// The alignment of the blocks of at least [`ALIGNED_MIN`] bytes that the library allocates
/// (a cache line: no vector load or store of a row that starts at a multiple of 64 bytes
/// splits a line).
pub(crate) const BLOCK_ALIGN: usize = 64;

/// Smaller blocks keep their element's alignment: a 64-byte-aligned allocation
/// (`posix_memalign`) costs a tiny launch ≈ 0.05 µs more than `malloc`, and a block under a
/// page sits in L1 after its first touch.
pub(crate) const ALIGNED_MIN: usize = 4096;

/// The alignment of a library-allocated block of `bytes` bytes for elements aligned to
/// `align`.
pub(crate) fn block_align(bytes: usize, align: usize) -> usize {
    if bytes >= ALIGNED_MIN {
        align.max(BLOCK_ALIGN)
    } else {
        align.max(1)
    }
}

/// Elements in host memory; derefs to `[T]`.
pub(crate) enum HostData<T> {
    /// A `Vec` as given (freed as a `Vec`, with the layout it was allocated with).
    Vec(Vec<T>),
    /// `len` elements at the start of `mem`, every byte of them initialised.
    Block {
        mem: HostMem,
        len: usize,
        _t: PhantomData<T>,
    },
}

impl<T: bytemuck::Pod> HostData<T> {
    /// `len` elements in `mem`.
    ///
    /// # Safety
    /// `mem` holds at least `len * size_of::<T>()` bytes, all initialised, and is aligned for
    /// `T`.
    pub unsafe fn from_block(mem: HostMem, len: usize) -> HostData<T> {
        debug_assert!(mem.capacity() >= len * std::mem::size_of::<T>());
        debug_assert_eq!(mem.ptr().as_ptr() as usize % std::mem::align_of::<T>(), 0);
        HostData::Block {
            mem,
            len,
            _t: PhantomData,
        }
    }

    /// A block of `n` elements taken from `items` in order (which must yield at least `n`;
    /// panics otherwise). Memory the system refuses is [`crate::Error::OutOfMemory`].
    pub fn try_from_iter(n: usize, items: impl IntoIterator<Item = T>) -> crate::Result<Self> {
        let mem = HostMem::new(Self::layout(n)?, false)?;
        let p = mem.ptr().as_ptr().cast::<T>();
        let mut items = items.into_iter();
        for i in 0..n {
            let v = items.next().expect("fewer items than elements");
            // SAFETY: `mem` holds `n` aligned `T`s; element `i < n`.
            unsafe { p.add(i).write(v) };
        }
        // SAFETY: all `n` elements written above; `layout` aligns for `T`.
        Ok(unsafe { HostData::from_block(mem, n) })
    }

    /// A block of `n` zero elements (a reused block is cleared; a new one is zeroed by the
    /// global allocator, see [`HostMem::new`]).
    pub fn try_zeroed(n: usize) -> crate::Result<Self> {
        let mem = HostMem::new(Self::layout(n)?, true)?;
        // SAFETY: `n` aligned elements, every byte zero (a valid `T`: plain old data).
        Ok(unsafe { HostData::from_block(mem, n) })
    }

    /// `n` elements' layout, aligned by [`block_align`].
    fn layout(n: usize) -> crate::Result<Layout> {
        let oom = || crate::Error::OutOfMemory {
            bytes: n.saturating_mul(std::mem::size_of::<T>()),
        };
        let bytes = n.checked_mul(std::mem::size_of::<T>()).ok_or_else(oom)?;
        Layout::from_size_align(bytes, block_align(bytes, std::mem::align_of::<T>()))
            .map_err(|_| oom())
    }

    /// The elements as a `Vec`: as they are when given as one, else a copy.
    pub fn into_vec(self) -> crate::Result<Vec<T>> {
        match self {
            HostData::Vec(v) => Ok(v),
            b => {
                let mut v = super::size::try_with_capacity(b.len())?;
                v.extend_from_slice(&b);
                Ok(v)
            }
        }
    }
}

impl<T: bytemuck::Pod> Deref for HostData<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            HostData::Vec(v) => v,
            // SAFETY: `from_block`'s contract: `len` initialised, aligned elements.
            HostData::Block { mem, len, .. } => unsafe {
                std::slice::from_raw_parts(mem.ptr().as_ptr().cast::<T>(), *len)
            },
        }
    }
}

impl<T: bytemuck::Pod> DerefMut for HostData<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            HostData::Vec(v) => v,
            // SAFETY: as in `deref`, and `mem` is owned by this value alone.
            HostData::Block { mem, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(mem.ptr().as_ptr().cast::<T>(), *len)
            },
        }
    }
}

/// A block's copy is a block of the same alignment (from the host cache when one fits).
impl<T: bytemuck::Pod> Clone for HostData<T> {
    fn clone(&self) -> Self {
        match self {
            HostData::Vec(v) => HostData::Vec(v.clone()),
            HostData::Block { mem, len, .. } => {
                let bytes = len * std::mem::size_of::<T>();
                let layout = Layout::from_size_align(bytes, mem.align()).expect("a valid layout");
                // An unreadable `TESSERA_HOST_CACHE` makes `new` an error; a copy then skips
                // the cache. Only memory the system refuses aborts, as `Vec::clone` does.
                let copy = HostMem::new(layout, false)
                    .or_else(|_| HostMem::fresh(layout, false))
                    .unwrap_or_else(|_| std::alloc::handle_alloc_error(layout));
                // SAFETY: `bytes` initialised bytes copied into a new block of at least
                // `bytes`; the copy has `mem`'s alignment.
                unsafe {
                    std::ptr::copy_nonoverlapping(mem.ptr().as_ptr(), copy.ptr().as_ptr(), bytes);
                    HostData::from_block(copy, *len)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BLOCK_ALIGN, HostData, HostMem};
    use std::alloc::Layout;

    #[test]
    fn a_block_reads_writes_clones_and_becomes_a_vec() {
        let n = 37;
        let layout = Layout::from_size_align(n * 4, BLOCK_ALIGN).unwrap();
        let mem = HostMem::new(layout, true).unwrap();
        // SAFETY: `n` zeroed f32s, 64-byte aligned.
        let mut d = unsafe { HostData::<f32>::from_block(mem, n) };
        d.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32 - 3.5);
        let c = d.clone();
        assert!(matches!(c, HostData::Block { .. }));
        assert_eq!(c.as_ptr() as usize % BLOCK_ALIGN, 0);
        assert_eq!(&c[..], &d[..]);
        let v = d.into_vec().unwrap();
        assert_eq!(v, (0..n).map(|i| i as f32 - 3.5).collect::<Vec<_>>());
        let z = HostData::<u16>::try_zeroed(2049).unwrap();
        assert_eq!(
            (&z[..], z.as_ptr() as usize % BLOCK_ALIGN),
            (&[0u16; 2049][..], 0)
        );
        let z = HostData::<u16>::try_zeroed(5).unwrap();
        assert_eq!((&z[..], z.as_ptr() as usize % 2), (&[0u16; 5][..], 0));
        assert_eq!(
            (super::block_align(4095, 4), super::block_align(4096, 4)),
            (4, 64)
        );
        assert_eq!(super::block_align(0, 128), 128);
        let f = HostData::try_from_iter(4, (0..).map(|i| i as f64 * 0.25)).unwrap();
        assert_eq!(&f[..], &[0.0, 0.25, 0.5, 0.75]);
        assert_eq!(HostData::<u8>::try_from_iter(0, []).unwrap().len(), 0);
        let u = HostData::Vec(vec![1u16, 2, 3]);
        assert_eq!(
            (&u.clone()[..], u.into_vec().unwrap()),
            (&[1u16, 2, 3][..], vec![1, 2, 3])
        );
    }
}
