//! The launch settings taken from the environment — `TESSERA_DEVICE`,
//! `TESSERA_AUTOTUNE`, `TESSERA_AUTOTUNE_BACKGROUND` and `TESSERA_HOST_CACHE` — read once per
//! process, on first use, and kept parsed: a launch asks them without reading the environment. A process that
//! changes these variables calls [`reload_env`] for launches to see the new values.

use crate::autotune::{MODE_VALUES, Mode};
use crate::{Device, Error, Result};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU8, Ordering};
use tessera_ir::env::EnvError;

/// The parsed autotuner settings (an invalid value kept as the error each launch returns).
struct Settings {
    /// `TESSERA_AUTOTUNE`: `None` when unset.
    autotune: std::result::Result<Option<Mode>, EnvError>,
    /// `TESSERA_AUTOTUNE_BACKGROUND`: `None` when unset or empty.
    background: std::result::Result<Option<bool>, EnvError>,
    /// `TESSERA_HOST_CACHE` in bytes: `None` when unset or empty.
    host_cache: std::result::Result<Option<usize>, EnvError>,
}

/// What `TESSERA_HOST_CACHE` accepts, in words.
const BYTES_VALUES: &str = "a byte count, optionally with a K, M or G suffix (powers of 1024)";

/// `s` as a byte count: digits, optionally followed by `K`, `M` or `G` (any case, an optional
/// `iB`/`B` after it, spaces trimmed); `None` when it is not one or overflows.
fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: usize = s[..digits].parse().ok()?;
    let shift = match s[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

static SETTINGS: RwLock<Option<Settings>> = RwLock::new(None);

/// What every launch asks of the settings, kept as one byte each beside [`SETTINGS`] so that
/// a launch reads it with one atomic load instead of taking the lock and cloning a `Result`
/// (the lock and the clone of `TESSERA_AUTOTUNE`, `TESSERA_AUTOTUNE_BACKGROUND` and
/// `TESSERA_DEVICE` took ≈ 9 % of a `[1, 1]` gelu launch, `perf record -e cpu-clock`).
/// With the launch's other cuts of the same change (a short flat span's short buffer,
/// `flat.rs`; one grid for `Fused::launch`'s proofs), `RAYON_NUM_THREADS=1 chrt -f 50
/// cpu_profile gelu 1 1 2000000 --pool` interleaved with main `47673e3`'s binary on the
/// 2-vCPU Intel Xeon KVM guest, 2026-11-28 19:16 and 19:24 UTC, load 4.0–5.5, 6 rounds:
/// fastest launch 0.47–0.51 → 0.40–0.41 µs, wall per launch 0.65–0.91 → 0.61–0.69 µs;
/// `softmax` and `layernorm` `[1, 64]` (19:24 UTC, load 5.5–8, 2 rounds each) fastest
/// 0.56–0.58 → 0.51–0.56 µs.
/// 0: not known (read [`SETTINGS`]: not yet read, or an invalid value, which stays an error
/// the slow path returns). Written only while the lock is held (read for a value computed
/// from the settings it guards, write by [`reload_env`], which clears it), so a byte never
/// outlives the settings it was computed from.
///
/// `TESSERA_AUTOTUNE`: 1 = unset, 2 + the mode's discriminant.
static AUTOTUNE_FAST: AtomicU8 = AtomicU8::new(0);
/// `TESSERA_AUTOTUNE_BACKGROUND`: 1 = unset or empty, 2 = false, 3 = true.
static BACKGROUND_FAST: AtomicU8 = AtomicU8::new(0);
/// The default device (`TESSERA_DEVICE`, else the automatic choice): 1 = the CPU (the only
/// device kept here; any other is read from [`DEVICE`]).
static DEFAULT_CPU: AtomicU8 = AtomicU8::new(0);

fn autotune_byte(m: Option<Mode>) -> u8 {
    match m {
        None => 1,
        Some(Mode::Off) => 2,
        Some(Mode::Cached) => 3,
        Some(Mode::Full) => 4,
    }
}

fn byte_autotune(b: u8) -> Option<Option<Mode>> {
    match b {
        1 => Some(None),
        2 => Some(Some(Mode::Off)),
        3 => Some(Some(Mode::Cached)),
        4 => Some(Some(Mode::Full)),
        _ => None,
    }
}

/// `TESSERA_DEVICE`, parsed (and its device opened) only when a launch first needs the
/// default device, apart from the autotuner's settings: a process whose launches all name
/// their device never opens the one the variable names.
static DEVICE: RwLock<Option<Result<Option<Device>>>> = RwLock::new(None);

fn read_device() -> Result<Option<Device>> {
    match tessera_ir::env::var("TESSERA_DEVICE", crate::device::DEVICE_VALUES) {
        Err(e) => Err(e.into()),
        Ok(None) => Ok(None),
        Ok(Some(v)) => Device::parse(&v).map(Some).map_err(|e| match e {
            Error::DeviceUnavailable(m) => {
                Error::DeviceUnavailable(format!("TESSERA_DEVICE={v:?}: {m}"))
            }
            e => e,
        }),
    }
}

impl Settings {
    fn read() -> Settings {
        Settings {
            autotune: tessera_ir::env::var("TESSERA_AUTOTUNE", MODE_VALUES).and_then(|v| {
                v.map(|v| {
                    Mode::parse(&v)
                        .ok_or_else(|| EnvError::new("TESSERA_AUTOTUNE", &v, MODE_VALUES))
                })
                .transpose()
            }),
            background: tessera_ir::env::flag("TESSERA_AUTOTUNE_BACKGROUND"),
            host_cache: tessera_ir::env::var("TESSERA_HOST_CACHE", BYTES_VALUES).and_then(|v| {
                v.filter(|v| !v.trim().is_empty())
                    .map(|v| {
                        parse_bytes(&v)
                            .ok_or_else(|| EnvError::new("TESSERA_HOST_CACHE", &v, BYTES_VALUES))
                    })
                    .transpose()
            }),
        }
    }
}

/// Runs `f` on the settings, reading them first when this process has not yet (or not since
/// [`reload_env`]).
fn with<R>(f: impl FnOnce(&Settings) -> R) -> R {
    if let Some(s) = &*SETTINGS.read().unwrap_or_else(|e| e.into_inner()) {
        s.keep_fast();
        return f(s);
    }
    let fresh = Settings::read();
    let mut w = SETTINGS.write().unwrap_or_else(|e| e.into_inner());
    let s = w.get_or_insert(fresh);
    s.keep_fast();
    f(s)
}

impl Settings {
    /// Stores the valid settings' bytes ([`AUTOTUNE_FAST`], [`BACKGROUND_FAST`]); called with
    /// [`SETTINGS`] locked (read or write) and holding these settings.
    fn keep_fast(&self) {
        if let Ok(m) = &self.autotune {
            AUTOTUNE_FAST.store(autotune_byte(*m), Ordering::Release);
        }
        if let Ok(b) = &self.background {
            let v = match b {
                None => 1,
                Some(false) => 2,
                Some(true) => 3,
            };
            BACKGROUND_FAST.store(v, Ordering::Release);
        }
    }
}

/// Reads `TESSERA_DEVICE`, `TESSERA_AUTOTUNE`, `TESSERA_AUTOTUNE_BACKGROUND` and
/// `TESSERA_HOST_CACHE` again: the launches that follow (on any thread) use the values they
/// have now. Tessera reads them once
/// per process, at the first launch that needs them; a process that changes them afterwards
/// calls this. An invalid value is reported by the launches that read it, as before.
///
/// ```
/// use tessera::autotune::{Mode, mode};
/// // SAFETY (edition 2024 `set_var`): this doc test runs in its own process.
/// unsafe { std::env::set_var("TESSERA_AUTOTUNE", "off") };
/// tessera::reload_env();
/// assert_eq!(mode(), Mode::Off);
/// unsafe { std::env::set_var("TESSERA_AUTOTUNE", "full") };
/// // Not read again until `reload_env`.
/// assert_eq!(mode(), Mode::Off);
/// tessera::reload_env();
/// assert_eq!(mode(), Mode::Full);
/// unsafe { std::env::remove_var("TESSERA_AUTOTUNE") };
/// tessera::reload_env();
/// assert_eq!(mode(), Mode::Cached);
/// ```
pub fn reload_env() {
    let fresh = Settings::read();
    {
        let mut w = SETTINGS.write().unwrap_or_else(|e| e.into_inner());
        *w = Some(fresh);
        // Kept again from the new settings by the next launch that reads them.
        AUTOTUNE_FAST.store(0, Ordering::Release);
        BACKGROUND_FAST.store(0, Ordering::Release);
    }
    // Parsed again when a launch next needs the default device.
    let mut d = DEVICE.write().unwrap_or_else(|e| e.into_inner());
    *d = None;
    DEFAULT_CPU.store(0, Ordering::Release);
}

/// `TESSERA_DEVICE` as parsed: `None` when unset.
pub(crate) fn device() -> Result<Option<Device>> {
    if let Some(d) = &*DEVICE.read().unwrap_or_else(|e| e.into_inner()) {
        return d.clone();
    }
    // Read outside the lock: opening the device the variable names may take a while.
    let fresh = read_device();
    let mut w = DEVICE.write().unwrap_or_else(|e| e.into_inner());
    w.get_or_insert(fresh).clone()
}

/// The default device: `TESSERA_DEVICE` as parsed, else `auto()` (the automatic choice, a
/// process-wide constant). One atomic load when it is the CPU and was asked before (since the
/// last [`reload_env`]).
pub(crate) fn default_device(auto: impl FnOnce() -> Device) -> Result<Device> {
    if DEFAULT_CPU.load(Ordering::Acquire) == 1 {
        return Ok(Device::Cpu);
    }
    device()?; // parsed (and its device opened) outside the lock below
    let r = DEVICE.read().unwrap_or_else(|e| e.into_inner());
    match &*r {
        Some(d) => {
            let d = d.clone()?.unwrap_or_else(auto);
            if d.is_cpu() {
                // Under the read lock: `reload_env` clears the byte under the write lock.
                DEFAULT_CPU.store(1, Ordering::Release);
            }
            Ok(d)
        }
        // A `reload_env` in between: read it again (without keeping the byte).
        None => {
            drop(r);
            Ok(device()?.unwrap_or_else(auto))
        }
    }
}

/// `TESSERA_AUTOTUNE` as parsed: `None` when unset.
pub(crate) fn autotune() -> std::result::Result<Option<Mode>, EnvError> {
    if let Some(m) = byte_autotune(AUTOTUNE_FAST.load(Ordering::Acquire)) {
        return Ok(m);
    }
    with(|s| s.autotune.clone())
}

/// `TESSERA_AUTOTUNE_BACKGROUND` as parsed: `None` when unset or empty.
pub(crate) fn background() -> std::result::Result<Option<bool>, EnvError> {
    match BACKGROUND_FAST.load(Ordering::Acquire) {
        1 => Ok(None),
        2 => Ok(Some(false)),
        3 => Ok(Some(true)),
        _ => with(|s| s.background.clone()),
    }
}

/// `TESSERA_HOST_CACHE` in bytes: `None` when unset or empty.
pub(crate) fn host_cache() -> std::result::Result<Option<usize>, EnvError> {
    with(|s| s.host_cache.clone())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes(" 4096 "), Some(4096));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("2 GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("64kb"), Some(64 << 10));
        for bad in ["", "M", "1T", "1.5G", "-1", "99999999999999999999G"] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
    }
}
