//! What the single-test binaries that change the environment share (`mod common;` in each).

/// Sets (`Some`) or removes (`None`) the environment variable `var`, then has Tessera read its
/// settings again ([`tessera::reload_env`]: `TESSERA_DEVICE`, `TESSERA_AUTOTUNE*` and
/// `TESSERA_HOST_CACHE` are read once per process).
///
/// Only for a binary with one test: the environment is process-wide, and no other thread may
/// read it while it changes.
pub fn set(var: &str, value: Option<&str>) {
    // SAFETY (edition 2024): the calling binary runs one test, so no other thread reads the
    // environment while it changes.
    unsafe {
        match value {
            Some(v) => std::env::set_var(var, v),
            None => std::env::remove_var(var),
        }
    }
    tessera::reload_env();
}
