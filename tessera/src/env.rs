//! The launch settings taken from the environment — `TESSERA_DEVICE`,
//! `TESSERA_AUTOTUNE`, `TESSERA_AUTOTUNE_BACKGROUND` and `TESSERA_HOST_CACHE` — read once per
//! process, on first use, and kept parsed: a launch asks them without reading the environment. A process that
//! changes these variables calls [`reload_env`] for launches to see the new values.

use crate::autotune::{MODE_VALUES, Mode};
use crate::{Device, Error, Result};
use std::sync::RwLock;
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
        return f(s);
    }
    let fresh = Settings::read();
    let mut w = SETTINGS.write().unwrap_or_else(|e| e.into_inner());
    f(w.get_or_insert(fresh))
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
    *SETTINGS.write().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
    // Parsed again when a launch next needs the default device.
    *DEVICE.write().unwrap_or_else(|e| e.into_inner()) = None;
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

/// `TESSERA_AUTOTUNE` as parsed: `None` when unset.
pub(crate) fn autotune() -> std::result::Result<Option<Mode>, EnvError> {
    with(|s| s.autotune.clone())
}

/// `TESSERA_AUTOTUNE_BACKGROUND` as parsed: `None` when unset or empty.
pub(crate) fn background() -> std::result::Result<Option<bool>, EnvError> {
    with(|s| s.background.clone())
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
