//! The CPU's cache sizes, as the CPU path's size thresholds and its benches read them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The last-level cache size the CPU path plans for, in bytes: the value of
/// [`set_last_level_bytes`] when one is set, else the largest cache of CPU 0 (Linux sysfs,
/// `cpu0/cache/index*/size`, read once per process) but at most [`LLC_PER_CPU`] (16 MiB) for
/// each CPU that sysfs says shares it (`shared_cpu_list`), else 32 MiB. One relaxed atomic
/// load once known (launches ask it per launch). The fused path's non-temporal stores start
/// at 3/8 of it on one thread and above 3/4 of it in a pool of two or more
/// (`fused::stream`); the softmax row loop's past-the-cache loop (`fused::softmax`), the
/// column pass's whole tiles (`fused::colpass`) and the transpose's plain-store rows
/// (`fused::transpose`) read it too, and `benches/cpu.rs` sizes its "four times the
/// last-level cache" shape from it.
///
/// ```
/// let llc = tessera::backend::cpu::cache::last_level_bytes();
/// assert!(llc >= 1 << 10, "{llc}");
/// assert!(llc <= tessera::backend::cpu::cache::reported_last_level_bytes());
/// ```
pub fn last_level_bytes() -> usize {
    match LAST_LEVEL.load(Ordering::Relaxed) {
        0 => {
            // Not set and not read yet: a racing `set_last_level_bytes(Some(_))` wins.
            let _ = LAST_LEVEL.compare_exchange(
                0,
                sysfs_last_level_bytes(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            LAST_LEVEL.load(Ordering::Relaxed)
        }
        n => n,
    }
}

/// What [`last_level_bytes`] answers: 0 until it is first asked or set.
static LAST_LEVEL: AtomicUsize = AtomicUsize::new(0);

/// Sets the last-level cache size, in bytes, that the CPU path plans for, process-wide, for
/// the launches that start after it (on any thread); `None` returns it to the size sysfs
/// reports as [`last_level_bytes`] counts it. Returns the size in force before. A value of 0
/// is taken as 1.
///
/// For a machine whose counted size is not the cache a process gets: a virtual machine
/// reports its host's whole shared L3 (300 MiB on a 2-vCPU Xeon guest, counted as 32 MiB
/// by [`LLC_PER_CPU`]), and a process sharing a socket with other work gets less than the
/// socket's cache. The tests that
/// size tensors by the cache (`tests/fused.rs`) pin it to 32 MiB with this, so they build
/// the same shapes and reach the same paths on every machine. Launches running while it
/// changes may plan with either size: the outputs' values are the same either way, only the
/// store and loop choices differ.
///
/// ```
/// use tessera::backend::cpu::cache::{last_level_bytes, set_last_level_bytes};
/// let sysfs = last_level_bytes();
/// assert_eq!(set_last_level_bytes(Some(8 << 20)), sysfs);
/// assert_eq!(last_level_bytes(), 8 << 20);
/// assert_eq!(set_last_level_bytes(None), 8 << 20);
/// assert_eq!(last_level_bytes(), sysfs);
/// ```
pub fn set_last_level_bytes(bytes: Option<usize>) -> usize {
    let n = bytes.map_or_else(sysfs_last_level_bytes, |b| b.max(1));
    match LAST_LEVEL.swap(n, Ordering::Relaxed) {
        0 => sysfs_last_level_bytes(),
        old => old,
    }
}

/// The largest cache of CPU 0 in bytes (Linux sysfs, `cpu0/cache/index*/size`) as
/// [`LLC_PER_CPU`] counts it, else 32 MiB; read once per process.
fn sysfs_last_level_bytes() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let (size, sharing) = reported_last_level();
        counted(size, sharing)
    })
}

/// The most last-level cache counted per CPU that shares it: 16 MiB, above any x86 part's L3
/// per core (AMD's 3D V-Cache parts: 96 MiB over 8 cores, 1152 MiB over 96, 12 MiB a core;
/// Intel Xeon up to Emerald Rapids: at most 5 MiB a core), so it never lowers a cache the
/// CPUs have to themselves. What it lowers is a virtual machine's view of its host's
/// socket-wide L3: a 2-vCPU KVM guest on an Intel Xeon (family 6 model 207, Emerald Rapids)
/// is shown a 300 MiB L3 shared by its 2 CPUs, shared in fact with the host's other cores
/// and guests. There, one thread, 2026-11-27 20:16 UTC, load 10–20, `RAYON_NUM_THREADS=1
/// chrt -f 50 cpu_profile rmsnorm R 4096 N --pool --into` (the copy yardstick and the
/// non-temporal copy it prints, GB/s): R = 1024 (16 MiB a tensor) plain copy 24.9,
/// non-temporal 30.7; 4096 (64 MiB) 13.7 and 18.9, rmsnorm 7.5 (plain stores: its 64 MiB
/// output was under the 112 MiB that 3/8 of 300 MiB made the streaming threshold); 8192
/// (128 MiB, streamed) 19.6 and 18.6, rmsnorm 13.0; 16384 19.8 / 17.8, rmsnorm 11.8; 32768
/// 20.1 / 18.4, rmsnorm 12.7. By 64 MiB a tensor a plain copy runs at memory speed and below
/// a streaming one, so the cache the guest can count on is tens of MiB, not 300: 2 × 16 MiB
/// = 32 MiB, the size the streaming rules were measured on (a Zen 5 with a 32 MiB L3).
pub const LLC_PER_CPU: usize = 16 << 20;

/// The last-level cache as `cpu0`'s sysfs reports it, in bytes (else 32 MiB), before
/// [`last_level_bytes`]'s limit per sharing CPU.
///
/// ```
/// assert!(tessera::backend::cpu::cache::reported_last_level_bytes() >= 1 << 10);
/// ```
pub fn reported_last_level_bytes() -> usize {
    reported_last_level().0
}

/// `size` bytes of last-level cache shared by `sharing` CPUs (`None`: unknown), as
/// [`last_level_bytes`] counts it.
fn counted(size: usize, sharing: Option<usize>) -> usize {
    match sharing {
        Some(n) if n > 0 => size.min(LLC_PER_CPU.saturating_mul(n)),
        _ => size,
    }
}

/// The largest cache of `cpu0` in bytes (else 32 MiB) and how many CPUs its
/// `shared_cpu_list` names (`None` when unread).
fn reported_last_level() -> (usize, Option<usize>) {
    let read = |i: usize, f: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/{f}")).ok()
    };
    (0..8)
        .filter_map(|i| {
            let s = read(i, "size")?;
            let s = s.trim();
            let (n, m) = match s.strip_suffix('K') {
                Some(n) => (n, 1 << 10),
                None => (s.strip_suffix('M')?, 1 << 20),
            };
            let size = n.parse::<usize>().ok()? * m;
            Some((size, read(i, "shared_cpu_list").and_then(|l| cpus_in(&l))))
        })
        .max_by_key(|&(size, _)| size)
        .unwrap_or((32 << 20, None))
}

/// How many CPUs a sysfs CPU list (`0-3,8,10-11`) names; `None` when it does not parse.
fn cpus_in(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// The level-1 data cache of CPU 0 in bytes (Linux sysfs: the `cpu0/cache/index*` whose
/// `level` is 1 and `type` is `Data`), else 32 KiB; read once per process. A norm row loop
/// whose rows, `γ`, `β` and output row take more than this streams its output on two or
/// more threads too (`fused::stream`).
///
/// ```
/// let l1 = tessera::backend::cpu::cache::l1_data_bytes();
/// assert!(l1 >= 1 << 10, "{l1}");
/// ```
pub fn l1_data_bytes() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| sysfs_cache("1", "Data").unwrap_or(32 << 10))
}

/// The level-2 cache of CPU 0 in bytes (Linux sysfs: the `cpu0/cache/index*` whose `level`
/// is 2 and `type` is `Unified`), else 1 MiB; read once per process. The bf16 whole-tensor
/// transpose sizes its passes of source rows by it (`fused::transpose`).
///
/// ```
/// let l2 = tessera::backend::cpu::cache::l2_bytes();
/// assert!(l2 >= 1 << 10, "{l2}");
/// ```
pub fn l2_bytes() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| sysfs_cache("2", "Unified").unwrap_or(1 << 20))
}

/// The size in bytes of `cpu0`'s sysfs cache of this `level` and `kind` (`Data`,
/// `Unified`), when sysfs names one and its size parses (`48K`, `2048K`, `2M`).
fn sysfs_cache(level: &str, kind: &str) -> Option<usize> {
    (0..8).find_map(|i| {
        let at = |f: &str| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/{f}")).ok()
        };
        if at("level")?.trim() != level || at("type")?.trim() != kind {
            return None;
        }
        let s = at("size")?;
        let s = s.trim();
        match s.strip_suffix('K') {
            Some(n) => Some(n.parse::<usize>().ok()? << 10),
            None => Some(s.strip_suffix('M')?.parse::<usize>().ok()? << 20),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{LLC_PER_CPU, counted, cpus_in};

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpus_in("0-1\n"), Some(2));
        assert_eq!(cpus_in("0"), Some(1));
        assert_eq!(cpus_in("0-3,8,10-11"), Some(7));
        assert_eq!(cpus_in(""), None);
        assert_eq!(cpus_in("3-1"), None);
        assert_eq!(cpus_in("x"), None);
    }

    #[test]
    fn a_cache_counts_at_most_16_mib_per_sharing_cpu() {
        let m = 1usize << 20;
        // A 2-vCPU guest shown its host's 300 MiB L3.
        assert_eq!(counted(300 * m, Some(2)), 2 * LLC_PER_CPU);
        // A Zen 5 L3 of 32 MiB over 8 cores, or over the 2 vCPUs a guest sees: as reported.
        assert_eq!(counted(32 * m, Some(8)), 32 * m);
        assert_eq!(counted(32 * m, Some(2)), 32 * m);
        // A 3D V-Cache part: 96 MiB over 8 cores, as reported.
        assert_eq!(counted(96 * m, Some(8)), 96 * m);
        // Sharing unknown: as reported.
        assert_eq!(counted(300 * m, None), 300 * m);
    }
}
