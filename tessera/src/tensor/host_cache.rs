//! A bounded cache of large freed host blocks: a launch's output of at least [`MIN_BLOCK`]
//! bytes is taken from here when a freed block of a fitting size is kept, instead of from the
//! system allocator.
//!
//! Why: glibc serves a block above its mmap threshold (at most 32 MiB) with a fresh `mmap` and
//! unmaps it on free, so without the cache a 128 MiB output is new memory on every launch,
//! page-faulted in (and zeroed by the kernel) as it is first written. A kept block was faulted
//! in by its earlier user.
//!
//! The cache holds only memory nothing uses: a block enters it when the tensor (or launch
//! intermediate) owning it is dropped, and leaves it owned by exactly one new user. It holds at
//! most [`capacity`] bytes (default [`default_capacity`]: 1/8 of the memory the process may
//! use, at least [`MIN_DEFAULT_CAPACITY`] = 1 GiB; `TESSERA_HOST_CACHE` in bytes with an
//! optional `K`/`M`/`G` suffix (powers of 1024), `0` turns it off, [`set_capacity`] overrides
//! both); a block that would exceed it pushes out the longest-kept blocks, and [`release`]
//! frees every kept block.
//!
//! ```
//! use tessera::host_cache;
//! assert!(host_cache::capacity()? <= host_cache::default_capacity() || std::env::var("TESSERA_HOST_CACHE").is_ok());
//! host_cache::release();
//! assert_eq!(host_cache::stats().cached_bytes, 0);
//! # Ok::<(), tessera::Error>(())
//! ```

use std::alloc::{Layout, dealloc};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The least default limit, 1 GiB ([`default_capacity`]: also the default where the machine's
/// memory cannot be read).
///
/// ```
/// assert_eq!(tessera::host_cache::MIN_DEFAULT_CAPACITY, 1 << 30);
/// assert!(tessera::host_cache::default_capacity() >= 1 << 30);
/// ```
pub const MIN_DEFAULT_CAPACITY: usize = 1 << 30;

/// The default limit is this fraction (1/8) of the memory the process may use.
const MEMORY_SHARE: usize = 8;

/// The cache's size limit unless `TESSERA_HOST_CACHE` or [`set_capacity`] says otherwise:
/// 1/8 of the memory the process may use (the machine's RAM, or its cgroup v2 `memory.max`
/// where that is lower), at least [`MIN_DEFAULT_CAPACITY`] (1 GiB); read once per process.
///
/// Why it scales with memory: a workload that launches on tensors of a size keeps dropping
/// one output and asking for the next, and an output the cache cannot keep is a fresh `mmap`
/// on every launch, page-faulted in and zeroed by the kernel as it is first written. A fixed
/// 1 GiB left that to every tensor above 1 GiB, which is exactly the beyond-the-cache size a
/// large machine runs: `benches/cpu.rs`'s "four times the last-level cache" shape on an Intel
/// Xeon (family 6 model 207, KVM, 2 vCPUs, sysfs L3 300 MiB, 24 GiB RAM) is `[76800, 4096]`,
/// 1.17 GiB per f32 tensor, and its fresh-output rows ran at 0.28-0.42 of the copy with ~1100
/// minor page faults per launch, against 0.57-0.85 launching into a kept output (bench run of
/// 2026-11-27, heavily loaded). With 1/8 of the 24 GiB (3 GiB) the dropped output is kept
/// and taken back by the next launch. There, the library with the fixed 1 GiB and only
/// `TESSERA_HOST_CACHE` set, `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile rmsnorm 76800 4096 4
/// --pool` (fresh outputs), two interleaved rounds, 20:13-20:16 UTC, load 15-20: unset 567 and
/// 749 ms a launch, 1112 minor page faults each, ratio to the copy 0.29 and 0.26; `=4G` 197 and
/// 213 ms, no faults, 0.66 and 0.59 (what the same kernel reaches into a kept output). With
/// this default, nothing set, against the library as it was, the same command, 20:40-20:43
/// UTC, load 9-10, two interleaved rounds: 730 / 547 → 223 / 212 ms, 1112 → 0 faults, ratio
/// 0.24 / 0.24 → 0.65 / 0.68.
///
/// Why 1/8 and not more: a kept block is memory the process held live a moment earlier, so
/// the cache raises the process's resident memory above what it uses now by at most its
/// limit; 1/8 bounds that cost and still keeps a dropped output of an eighth of the memory
/// (3 GiB on 24 GiB). Up to 8 GiB of memory the 1 GiB floor (the earlier fixed default)
/// applies. [`release`] gives every kept block back, and `TESSERA_HOST_CACHE` /
/// [`set_capacity`] set any other limit.
///
/// ```
/// let d = tessera::host_cache::default_capacity();
/// assert!(d >= tessera::host_cache::MIN_DEFAULT_CAPACITY);
/// ```
pub fn default_capacity() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| default_for(process_memory()))
}

/// The default limit for `memory` bytes the process may use (`None`: unknown).
fn default_for(memory: Option<usize>) -> usize {
    memory.map_or(MIN_DEFAULT_CAPACITY, |m| {
        (m / MEMORY_SHARE).max(MIN_DEFAULT_CAPACITY)
    })
}

/// The memory this process may use: the machine's physical memory (`sysconf`), or the cgroup
/// v2 `memory.max` of the process's cgroup where that is a lower number; `None` when the
/// machine's memory cannot be read.
fn process_memory() -> Option<usize> {
    #[cfg(target_os = "linux")]
    let ram = {
        // SAFETY: `sysconf` only reads system configuration.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        (pages > 0 && page > 0).then(|| (pages as usize).saturating_mul(page as usize))
    };
    #[cfg(not(target_os = "linux"))]
    let ram: Option<usize> = None;
    let ram = ram?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            let path = s
                .lines()
                .find_map(|l| l.strip_prefix("0::"))?
                .trim()
                .to_string();
            let max = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max")).ok()?;
            max.trim().parse::<usize>().ok()
        });
    Some(cgroup.map_or(ram, |c| c.min(ram)))
}

/// Blocks smaller than this (1 MiB) are never kept: the system allocator reuses them itself.
///
/// ```
/// use tessera::{Tensor, host_cache};
/// host_cache::release();
/// drop(Tensor::<f32>::zeros(&[1000])?);                 // 4000 bytes: freed, not kept
/// assert_eq!(host_cache::stats().cached_bytes, 0);
/// # Ok::<(), tessera::Error>(())
/// ```
pub const MIN_BLOCK: usize = 1 << 20;

/// A block is reused for a request of `bytes` only when it holds at most `bytes / SLACK` more.
const SLACK: usize = 8;

/// Counters and contents of the cache ([`stats`]).
///
/// ```
/// use tessera::{Tensor, host_cache};
/// host_cache::set_capacity(Some(64 << 20));
/// let before = host_cache::stats();
/// drop(Tensor::<f32>::zeros(&[1 << 20])?);            // 4 MiB: kept when dropped
/// let t = Tensor::<f32>::zeros(&[1 << 20])?;          // takes it back (cleared)
/// assert_eq!(host_cache::stats().hits, before.hits + 1);
/// assert!(t.as_slice()?.iter().all(|&v| v == 0.0));
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCacheStats {
    /// Requests of at least [`MIN_BLOCK`] bytes served with a kept block.
    pub hits: u64,
    /// Requests of at least [`MIN_BLOCK`] bytes that found no fitting block (allocated anew).
    pub misses: u64,
    /// Bytes held now.
    pub cached_bytes: usize,
    /// Blocks held now.
    pub cached_blocks: usize,
}

/// Memory from the global allocator with its layout (no drop: whoever holds it frees it with
/// [`Alloc::free`] or hands it on).
pub(crate) struct Alloc {
    pub ptr: NonNull<u8>,
    pub layout: Layout,
}

// SAFETY: a uniquely owned heap block of plain bytes.
unsafe impl Send for Alloc {}

impl Alloc {
    /// Returns the memory to the global allocator.
    pub fn free(self) {
        if self.layout.size() != 0 {
            // SAFETY: allocated by the global allocator with this layout (`Alloc`'s invariant).
            unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }
}

/// The kept blocks, oldest first, and their total size.
pub(crate) struct Cache {
    blocks: Vec<Alloc>,
    bytes: usize,
    /// Set by [`set_capacity`]; `None` follows `TESSERA_HOST_CACHE` (or the default).
    capacity: Option<usize>,
}

impl Cache {
    pub const fn new(capacity: Option<usize>) -> Cache {
        Cache {
            blocks: Vec::new(),
            bytes: 0,
            capacity,
        }
    }

    /// Removes and returns the smallest kept block with `layout`'s alignment that holds
    /// `layout.size()` bytes and at most `1/SLACK` more.
    pub fn take(&mut self, layout: Layout) -> Option<Alloc> {
        let want = layout.size();
        let most = want.saturating_add(want / SLACK);
        let (i, _) = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.layout.align() == layout.align() && (want..=most).contains(&b.layout.size())
            })
            .min_by_key(|(_, b)| b.layout.size())?;
        let b = self.blocks.remove(i);
        self.bytes -= b.layout.size();
        Some(b)
    }

    /// Keeps `block` within `capacity` bytes, pushing out the oldest blocks as needed; returns
    /// what the caller must free (the pushed-out blocks, or `block` itself when it is too small
    /// or larger than the capacity).
    pub fn put(&mut self, block: Alloc, capacity: usize) -> Vec<Alloc> {
        let size = block.layout.size();
        if size < MIN_BLOCK || size > capacity {
            let mut out = self.shrink(capacity);
            out.push(block);
            return out;
        }
        let out = self.shrink(capacity - size);
        self.bytes += size;
        self.blocks.push(block);
        out
    }

    /// Removes the oldest blocks until at most `limit` bytes are kept; returns them.
    pub fn shrink(&mut self, limit: usize) -> Vec<Alloc> {
        let mut n = 0;
        let mut left = self.bytes;
        while left > limit {
            left -= self.blocks[n].layout.size();
            n += 1;
        }
        self.bytes = left;
        self.blocks.drain(..n).collect()
    }

    fn len(&self) -> usize {
        self.blocks.len()
    }
}

static CACHE: Mutex<Cache> = Mutex::new(Cache::new(None));
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);

fn lock() -> std::sync::MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The limit in force: [`set_capacity`]'s, else `TESSERA_HOST_CACHE`'s, else
/// [`default_capacity`]. An invalid `TESSERA_HOST_CACHE` is an error ([`crate::Error::Env`]),
/// which a launch or constructor that allocates a block of at least [`MIN_BLOCK`] bytes
/// reports too (nothing is kept while it stands).
///
/// ```
/// tessera::host_cache::set_capacity(Some(256 << 20));
/// assert_eq!(tessera::host_cache::capacity()?, 256 << 20);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn capacity() -> crate::Result<usize> {
    let env = crate::env::host_cache().map_err(crate::Error::from);
    limit(&lock(), env)
}

/// The limit in force for `c`, given what `TESSERA_HOST_CACHE` read as (read before taking
/// the lock, so the setting and the cache's use of it are one step under one guard).
fn limit(c: &Cache, env: crate::Result<Option<usize>>) -> crate::Result<usize> {
    match c.capacity {
        Some(bytes) => Ok(bytes),
        None => Ok(env?.unwrap_or_else(default_capacity)),
    }
}

/// Sets the limit in bytes (`Some(0)` turns the cache off), or with `None` returns it to
/// `TESSERA_HOST_CACHE` / [`default_capacity`]; blocks beyond the new limit are freed now,
/// oldest first.
///
/// ```
/// use tessera::host_cache;
/// host_cache::set_capacity(Some(0));
/// assert_eq!(host_cache::stats().cached_bytes, 0);
/// host_cache::set_capacity(None);
/// ```
pub fn set_capacity(bytes: Option<usize>) {
    let env = crate::env::host_cache().map_err(crate::Error::from);
    let out = {
        let mut c = lock();
        c.capacity = bytes;
        let most = limit(&c, env).unwrap_or(0);
        c.shrink(most)
    };
    out.into_iter().for_each(Alloc::free);
}

/// Frees every kept block; returns how many bytes that gave back.
///
/// ```
/// let freed = tessera::host_cache::release();
/// assert_eq!(tessera::host_cache::stats().cached_bytes, 0);
/// # let _ = freed;
/// ```
pub fn release() -> usize {
    let out = lock().shrink(0);
    let bytes = out.iter().map(|b| b.layout.size()).sum();
    out.into_iter().for_each(Alloc::free);
    bytes
}

/// The counters since the process started, and what is kept now.
///
/// ```
/// let s = tessera::host_cache::stats();
/// assert!(s.cached_bytes <= tessera::host_cache::capacity()?);
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn stats() -> HostCacheStats {
    let c = lock();
    HostCacheStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        cached_bytes: c.bytes,
        cached_blocks: c.len(),
    }
}

/// A kept block for `layout` (counted as a hit), or `None` (counted as a miss for a request
/// of at least [`MIN_BLOCK`]). An invalid `TESSERA_HOST_CACHE` is an error.
pub(crate) fn take(layout: Layout) -> crate::Result<Option<Alloc>> {
    if layout.size() < MIN_BLOCK {
        return Ok(None);
    }
    capacity()?;
    let got = lock().take(layout);
    match got {
        Some(_) => HITS.fetch_add(1, Ordering::Relaxed),
        None => MISSES.fetch_add(1, Ordering::Relaxed),
    };
    Ok(got)
}

/// Keeps `block` for a later [`take`], or frees it (too small, larger than the limit, or the
/// limit unreadable); frees whatever it pushes out.
pub(crate) fn give_back(block: Alloc) {
    if block.layout.size() < MIN_BLOCK {
        return block.free();
    }
    let env = crate::env::host_cache().map_err(crate::Error::from);
    let out = {
        let mut c = lock();
        let most = limit(&c, env).unwrap_or(0);
        c.put(block, most)
    };
    out.into_iter().for_each(Alloc::free);
}

#[cfg(test)]
mod tests {
    use super::{Alloc, Cache, MIN_BLOCK, MIN_DEFAULT_CAPACITY, default_for};
    use std::alloc::Layout;
    use std::ptr::NonNull;

    /// A fake block: the cache's bookkeeping never touches the memory.
    fn fake(size: usize, at: usize) -> Alloc {
        Alloc {
            ptr: NonNull::new((at * 64) as *mut u8).unwrap(),
            layout: Layout::from_size_align(size, 64).unwrap(),
        }
    }

    fn addrs(v: &[Alloc]) -> Vec<usize> {
        v.iter().map(|b| b.ptr.as_ptr() as usize / 64).collect()
    }

    #[test]
    fn takes_the_smallest_fitting_block_once() {
        let mut c = Cache::new(None);
        let m = MIN_BLOCK;
        for (i, s) in [4 * m, 2 * m, 2 * m + 64, 3 * m].into_iter().enumerate() {
            assert!(c.put(fake(s, i + 1), 100 * m).is_empty());
        }
        let want = Layout::from_size_align(2 * m, 64).unwrap();
        assert_eq!(addrs(&[c.take(want).unwrap()]), [2]);
        assert_eq!(addrs(&[c.take(want).unwrap()]), [3]);
        // 3 MiB and 4 MiB are more than 1/8 above 2 MiB.
        assert!(c.take(want).is_none());
        assert!(
            c.take(Layout::from_size_align(3 * m, 128).unwrap())
                .is_none()
        );
        assert_eq!(c.bytes, 7 * m);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn stays_within_its_capacity_pushing_out_the_oldest() {
        let mut c = Cache::new(None);
        let m = MIN_BLOCK;
        assert!(c.put(fake(2 * m, 1), 5 * m).is_empty());
        assert!(c.put(fake(2 * m, 2), 5 * m).is_empty());
        assert_eq!(addrs(&c.put(fake(2 * m, 3), 5 * m)), [1]);
        assert_eq!(c.bytes, 4 * m);
        // Larger than the capacity, or below the minimum: handed back as is.
        assert_eq!(addrs(&c.put(fake(6 * m, 4), 5 * m)), [4]);
        assert_eq!(addrs(&c.put(fake(m - 64, 5), 5 * m)), [5]);
        assert_eq!(addrs(&c.shrink(2 * m)), [2]);
        assert_eq!(addrs(&c.put(fake(m, 6), 0)), [3, 6]);
        assert_eq!((c.bytes, c.len()), (0, 0));
    }

    #[test]
    fn the_default_is_an_eighth_of_memory_and_at_least_1_gib() {
        let g = 1usize << 30;
        assert_eq!(default_for(None), MIN_DEFAULT_CAPACITY);
        assert_eq!(default_for(Some(4 * g)), g);
        assert_eq!(default_for(Some(8 * g)), g);
        assert_eq!(default_for(Some(24 * g)), 3 * g);
        // A 1.17 GiB output (`[76800, 4096]` f32) fits the default of a 24 GiB machine.
        assert!(default_for(Some(24 * g)) >= 76800 * 4096 * 4);
        let mut c = Cache::new(None);
        assert!(
            c.put(fake(76800 * 4096 * 4, 1), default_for(Some(24 * g)))
                .is_empty()
        );
        assert_eq!(
            addrs(&c.put(fake(76800 * 4096 * 4, 2), MIN_DEFAULT_CAPACITY)),
            [1, 2]
        );
    }
}
