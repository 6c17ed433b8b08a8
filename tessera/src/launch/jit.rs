//! The JIT PTX cache: PTX of schedules nothing precompiled (autotuner candidates and winners,
//! non-default `tile!` knobs, shallower fusion plans) is compiled once per process and kept in
//! memory, and on disk next to the autotune cache, in `<cache dir>/ptx/` (the cache dir is
//! [`crate::autotune::cache_dir`]: `TESSERA_CACHE_DIR`, default `.tessera/cache`).
//!
//! A module is keyed by the kernel's IR (a hash of its Graph IR text, the fused kernel and the
//! fusion plan; or of a `tile!` program and its knobs), the schedule, the arch and the tessera
//! version. A file is `<fnv of the key>.ptx`:
//!
//! ```text
//! // tessera jit ptx 1
//! // key: <the key, in full>
//! // check: <FNV-1a of everything after this line, hex>
//! // launch: ptx @entry sm_80 threads=.. (the launch header)
//! <the PTX module>
//! ```
//!
//! A file whose key differs (a hash collision or another version), whose checksum fails
//! (truncated, edited, corrupt) or whose header does not parse is never used: it is rebuilt
//! and rewritten, with a warning. Files are written to a temporary name and renamed, so a
//! reader never sees half a file.

use crate::{Error, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tessera_ir::target::ptx::{self, Arch, PtxKernel};

const MAGIC: &str = "// tessera jit ptx 1";

/// What identifies one JIT-compiled module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct JitKey {
    /// The IR the module is compiled from: `kernel lin#<graph hash>.k0` (and `.f1` for a plan
    /// of fusion depth 1) or `tile scale#<program hash> BR=4,BC=64`.
    pub ir: String,
    /// The Schedule IR text.
    pub schedule: String,
    pub arch: Arch,
}

impl JitKey {
    fn text(&self) -> String {
        format!(
            "{} | {} | {} | tessera {}",
            self.ir,
            self.schedule,
            self.arch,
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// What the cache did in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtxCacheStats {
    /// Modules served from memory.
    pub memory_hits: u64,
    /// Modules read from a cache file.
    pub disk_hits: u64,
    /// Modules compiled (lowered and emitted).
    pub compiled: u64,
    /// Cache files found unusable (corrupt, stale, another key) and rebuilt.
    pub rejected: u64,
}

static MEMORY: Mutex<Option<HashMap<JitKey, Arc<PtxKernel>>>> = Mutex::new(None);
static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static COMPILED: AtomicU64 = AtomicU64::new(0);
static REJECTED: AtomicU64 = AtomicU64::new(0);

/// The cache's counters for this process.
///
/// ```
/// let s = tessera::ptx_cache::stats();
/// assert!(s.compiled >= s.rejected);
/// ```
pub fn stats() -> PtxCacheStats {
    PtxCacheStats {
        memory_hits: MEMORY_HITS.load(Ordering::SeqCst),
        disk_hits: DISK_HITS.load(Ordering::SeqCst),
        compiled: COMPILED.load(Ordering::SeqCst),
        rejected: REJECTED.load(Ordering::SeqCst),
    }
}

/// Forgets the modules held in memory (the files stay): the next use of each reads its file.
pub fn clear_memory() {
    *MEMORY.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The folder of the cache files: `<autotune cache dir>/ptx`.
pub fn dir() -> PathBuf {
    crate::autotune::cache_dir().join("ptx")
}

/// The module for `key`: from memory, else its file, else `build` (then written to both).
pub(crate) fn get(
    key: &JitKey,
    build: impl FnOnce() -> Result<PtxKernel>,
) -> Result<Arc<PtxKernel>> {
    if let Some(p) = MEMORY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(key)
    {
        MEMORY_HITS.fetch_add(1, Ordering::SeqCst);
        return Ok(p.clone());
    }
    let text = key.text();
    let path = dir().join(format!(
        "{:016x}.ptx",
        crate::autotune::fnv(text.as_bytes())
    ));
    let p = match read(&path, &text, key.arch) {
        Ok(Some(p)) => {
            DISK_HITS.fetch_add(1, Ordering::SeqCst);
            p
        }
        found => {
            if let Err(why) = found {
                REJECTED.fetch_add(1, Ordering::SeqCst);
                crate::autotune::warn(&format!(
                    "PTX cache file {} is unusable ({why}); rebuilding it",
                    path.display()
                ));
            }
            let p = build()?;
            COMPILED.fetch_add(1, Ordering::SeqCst);
            if let Err(e) = write(&path, &text, &p) {
                crate::autotune::warn(&format!(
                    "cannot write the PTX cache file {}: {e}",
                    path.display()
                ));
            }
            p
        }
    };
    let p = Arc::new(p);
    MEMORY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key.clone(), p.clone());
    Ok(p)
}

/// The module in `path` if it holds `key`'s; `Ok(None)` when there is no file, `Err(why)` when
/// there is one that must not be used.
fn read(
    path: &std::path::Path,
    key: &str,
    arch: Arch,
) -> std::result::Result<Option<PtxKernel>, String> {
    let data = match std::fs::read_to_string(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut lines = data.splitn(4, '\n');
    if lines.next() != Some(MAGIC) {
        return Err("not a tessera PTX cache file of this format".into());
    }
    let got_key = lines
        .next()
        .and_then(|l| l.strip_prefix("// key: "))
        .ok_or("no key line")?;
    if got_key != key {
        return Err(format!("it holds `{got_key}`"));
    }
    let check = lines
        .next()
        .and_then(|l| l.strip_prefix("// check: "))
        .ok_or("no check line")?;
    let rest = lines.next().ok_or("truncated")?;
    if format!("{:016x}", crate::autotune::fnv(rest.as_bytes())) != check {
        return Err("checksum mismatch: truncated or modified".into());
    }
    let (launch, text) = rest.split_once('\n').ok_or("truncated")?;
    let launch = launch
        .strip_prefix("// launch: ")
        .ok_or("no launch header")?;
    let p = ptx::parse_launch(launch, text).map_err(|e| format!("launch header: {e}"))?;
    if p.arch != arch {
        return Err(format!("it targets {}", p.arch));
    }
    Ok(Some(p))
}

fn write(path: &std::path::Path, key: &str, p: &PtxKernel) -> std::io::Result<()> {
    let dir = path.parent().expect("cache files live in a folder");
    std::fs::create_dir_all(dir)?;
    let rest = format!("// launch: {}\n{}", ptx::print_launch(p), p.text);
    let data = format!(
        "{MAGIC}\n// key: {key}\n// check: {:016x}\n{rest}",
        crate::autotune::fnv(rest.as_bytes())
    );
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("ptx"),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A compile error of a JIT build, naming the kernel.
pub(crate) fn compile_error(kernel: &str, e: impl std::fmt::Display) -> Error {
    Error::Compile {
        kernel: kernel.into(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ir::{graph, pipeline};

    fn kernel(arch: Arch) -> PtxKernel {
        let g = graph::parse("graph @jit_t(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}").unwrap();
        let c = pipeline::compile(&g, &Default::default()).unwrap();
        ptx::emit(&c.kernels[0].lowered.kernel, &c.kernels[0].schedule, arch).unwrap()
    }

    #[test]
    fn files_round_trip_and_bad_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("tessera-jit-{}", std::process::id()));
        let path = dir.join("k.ptx");
        let p = kernel(Arch::Sm80);
        write(&path, "the key", &p).unwrap();
        assert_eq!(read(&path, "the key", Arch::Sm80).unwrap(), Some(p.clone()));
        assert!(
            read(&path, "another key", Arch::Sm80)
                .unwrap_err()
                .contains("it holds `the key`")
        );
        assert!(
            read(&path, "the key", Arch::Sm90a)
                .unwrap_err()
                .contains("targets sm_80")
        );
        let good = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, &good[..good.len() - 10]).unwrap();
        assert!(
            read(&path, "the key", Arch::Sm80)
                .unwrap_err()
                .contains("checksum")
        );
        std::fs::write(&path, good.replace("ld.global", "ld.glabol")).unwrap();
        assert!(
            read(&path, "the key", Arch::Sm80)
                .unwrap_err()
                .contains("checksum")
        );
        std::fs::write(&path, "garbage").unwrap();
        assert!(
            read(&path, "the key", Arch::Sm80)
                .unwrap_err()
                .contains("not a tessera")
        );
        assert_eq!(read(&dir.join("none.ptx"), "the key", Arch::Sm80), Ok(None));
        std::fs::remove_dir_all(&dir).ok();
    }
}
