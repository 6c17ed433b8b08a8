//! The CPU's cache sizes, as the CPU path's size thresholds and its benches read them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The last-level cache size the CPU path plans for, in bytes: the value of
/// [`set_last_level_bytes`] when one is set, else the largest cache of CPU 0 (Linux sysfs,
/// `cpu0/cache/index*/size`, read once per process), else 32 MiB. One relaxed atomic load
/// once known (launches ask it per launch). The fused path's non-temporal stores start at
/// 3/8 of it on one thread and above 3/4 of it in a pool of two or more (`fused::stream`);
/// the softmax row loop's past-the-cache loop (`fused::softmax`), the column pass's whole
/// tiles (`fused::colpass`) and the transpose's plain-store rows (`fused::transpose`) read
/// it too, and `benches/cpu.rs` sizes its "four times the last-level cache" shape from it.
///
/// ```
/// let llc = tessera::backend::cpu::cache::last_level_bytes();
/// assert!(llc >= 1 << 10, "{llc}");
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
/// reports. Returns the size in force before. A value of 0 is taken as 1.
///
/// For a machine whose sysfs size is not the cache a process gets: a virtual machine
/// reports its host's whole shared L3 (300 MiB on a 2-vCPU Xeon guest), which moves the
/// non-temporal thresholds (`fused::stream`) to outputs of 112 MiB and more. The tests that
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

/// The largest cache of CPU 0 in bytes (Linux sysfs, `cpu0/cache/index*/size`), else 32 MiB;
/// read once per process.
fn sysfs_last_level_bytes() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        (0..8)
            .filter_map(|i| {
                let p = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
                let s = std::fs::read_to_string(p).ok()?;
                let s = s.trim();
                let (n, m) = match s.strip_suffix('K') {
                    Some(n) => (n, 1 << 10),
                    None => (s.strip_suffix('M')?, 1 << 20),
                };
                Some(n.parse::<usize>().ok()? * m)
            })
            .max()
            .unwrap_or(32 << 20)
    })
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
    *V.get_or_init(|| {
        (0..8)
            .find_map(|i| {
                let at = |f: &str| {
                    std::fs::read_to_string(format!(
                        "/sys/devices/system/cpu/cpu0/cache/index{i}/{f}"
                    ))
                    .ok()
                };
                if at("level")?.trim() != "1" || at("type")?.trim() != "Data" {
                    return None;
                }
                let s = at("size")?;
                let n = s.trim().strip_suffix('K')?;
                Some(n.parse::<usize>().ok()? << 10)
            })
            .unwrap_or(32 << 10)
    })
}
