//! The CPU's cache sizes, as the CPU path's size thresholds and its benches read them.

/// The largest cache of CPU 0 in bytes (Linux sysfs, `cpu0/cache/index*/size`), else 32 MiB;
/// read once per process. The fused path's non-temporal stores start at 3/8 of it on one
/// thread and above 3/4 of it in a pool of two or more (`fused::stream`), and
/// `benches/cpu.rs` sizes its "four times the last-level cache" shape from it.
///
/// ```
/// let llc = tessera::backend::cpu::cache::last_level_bytes();
/// assert!(llc >= 1 << 10, "{llc}");
/// ```
pub fn last_level_bytes() -> usize {
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
