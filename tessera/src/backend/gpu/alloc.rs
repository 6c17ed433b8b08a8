//! The caching allocator: device memory is requested in bucketed sizes, and a block freed by a
//! tensor goes back to a free list of its bucket instead of to the device, so the next launch
//! that needs a block of that size reuses it without a device allocation (PyTorch's and
//! CubeCL's approach).
//!
//! Buckets: multiples of 512 bytes up to 1 MiB, then four steps per power of two (at most 25%
//! over the request). A request takes a free block of exactly its bucket, else a new one.
//!
//! Reuse is safe without events because every device has one stream: a block released while a
//! kernel that reads it is still queued is handed out again only to work queued after it.

use super::stats::MemoryStats;
use std::collections::{BTreeMap, HashMap};

/// Smallest allocation and granularity of small buckets.
pub(crate) const SMALL_STEP: usize = 512;
/// Largest small bucket.
pub(crate) const SMALL_MAX: usize = 1 << 20;

/// The bucket of a request of `bytes` (at least one byte is allocated).
///
/// ```ignore
/// assert_eq!(bucket(1), Some(512));
/// assert_eq!(bucket((1 << 20) + 1), Some((1 << 20) + (1 << 18)));
/// ```
pub(crate) fn bucket(bytes: usize) -> Option<usize> {
    let b = bytes.max(1);
    if b <= SMALL_MAX {
        return Some(b.div_ceil(SMALL_STEP) * SMALL_STEP);
    }
    // Four steps per octave: the step is a quarter of the largest power of two ≤ b. `None`
    // when the bucket itself overflows (no device holds that much).
    let step = (1usize << (usize::BITS - 1 - b.leading_zeros())) / 4;
    b.div_ceil(step).checked_mul(step)
}

/// Blocks in use (by address) and free blocks (by bucket) of one device.
pub(crate) struct Pool<B> {
    free: BTreeMap<usize, Vec<B>>,
    used: HashMap<u64, (B, usize)>,
    stats: MemoryStats,
}

impl<B> Pool<B> {
    pub fn new() -> Self {
        Pool {
            free: BTreeMap::new(),
            used: HashMap::new(),
            stats: MemoryStats::default(),
        }
    }

    /// A cached block of exactly `bucket` bytes, if one is free.
    pub fn take_free(&mut self, bucket: usize) -> Option<B> {
        let list = self.free.get_mut(&bucket)?;
        let b = list.pop();
        if list.is_empty() {
            self.free.remove(&bucket);
        }
        if b.is_some() {
            self.stats.bytes_cached -= bucket as u64;
        }
        b
    }

    /// Records `block` (at `addr`, `bucket` bytes) as in use.
    pub fn mark_used(&mut self, addr: u64, block: B, bucket: usize, reused: bool) {
        let s = &mut self.stats;
        s.allocations += 1;
        if reused {
            s.reuses += 1;
        } else {
            s.device_allocations += 1;
        }
        s.bytes_in_use += bucket as u64;
        s.peak_bytes_in_use = s.peak_bytes_in_use.max(s.bytes_in_use);
        self.used.insert(addr, (block, bucket));
    }

    /// Moves the block at `addr` to its bucket's free list; false if no block is in use there.
    pub fn release(&mut self, addr: u64) -> bool {
        let Some((b, bucket)) = self.used.remove(&addr) else {
            return false;
        };
        let s = &mut self.stats;
        s.releases += 1;
        s.bytes_in_use -= bucket as u64;
        s.bytes_cached += bucket as u64;
        self.free.entry(bucket).or_default().push(b);
        true
    }

    /// Every free block, removed from the cache (to hand back to the device).
    pub fn drain_free(&mut self) -> Vec<B> {
        let blocks: Vec<B> = std::mem::take(&mut self.free)
            .into_values()
            .flatten()
            .collect();
        self.stats.device_frees += blocks.len() as u64;
        self.stats.bytes_cached = 0;
        blocks
    }

    /// Every block, free or in use (when the device itself goes away).
    pub fn drain_all(&mut self) -> Vec<B> {
        let mut all = self.drain_free();
        all.extend(self.used.drain().map(|(_, (b, _))| b));
        all
    }

    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// Zeroes the cumulative counters (the gauges stay).
    pub fn reset_counters(&mut self) {
        let s = &mut self.stats;
        *s = MemoryStats {
            bytes_in_use: s.bytes_in_use,
            bytes_cached: s.bytes_cached,
            peak_bytes_in_use: s.bytes_in_use,
            ..MemoryStats::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_up_by_at_most_a_step() {
        assert_eq!(bucket(0), Some(512));
        assert_eq!(bucket(1), Some(512));
        assert_eq!(bucket(512), Some(512));
        assert_eq!(bucket(513), Some(1024));
        assert_eq!(bucket(SMALL_MAX), Some(SMALL_MAX));
        assert_eq!(bucket(SMALL_MAX + 1), Some(SMALL_MAX + SMALL_MAX / 4));
        assert_eq!(bucket(3 << 20), Some(3 << 20));
        assert_eq!(bucket((3 << 20) + 1), Some((3 << 20) + (1 << 19)));
        let mut x = 1usize;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = (x >> 33) % (64 << 20) + 1;
            let b = bucket(n as usize).unwrap();
            assert!(
                b >= n as usize && (b - n as usize) * 4 <= b.max(4 * SMALL_STEP),
                "{n} -> {b}"
            );
            assert_eq!(bucket(b), Some(b), "a bucket is its own bucket");
        }
        assert_eq!(bucket(usize::MAX), None);
        assert_eq!(bucket(usize::MAX - 1), None);
    }

    #[test]
    fn freed_blocks_are_reused_by_their_bucket_only() {
        let mut p: Pool<u32> = Pool::new();
        p.mark_used(0x100, 1, 512, false);
        p.mark_used(0x200, 2, 1024, false);
        assert!(p.release(0x100));
        assert!(!p.release(0x100), "a block is released once");
        assert_eq!(p.take_free(1024), None);
        assert_eq!(p.take_free(512), Some(1));
        p.mark_used(0x100, 1, 512, true);
        let s = p.stats();
        assert_eq!((s.allocations, s.device_allocations, s.reuses), (3, 2, 1));
        assert_eq!(
            (s.bytes_in_use, s.bytes_cached, s.peak_bytes_in_use),
            (1536, 0, 1536)
        );
        p.release(0x200);
        assert_eq!(p.stats().bytes_cached, 1024);
        assert_eq!(p.drain_free(), vec![2]);
        assert_eq!(p.stats().device_frees, 1);
        assert_eq!(p.drain_all(), vec![1]);
    }
}
