//! The persistent cache: one JSON file per arch, `<dir>/<arch>.json`.
//!
//! An entry per (kernel signature hash, shape, dtypes, threads) holds **every** candidate's
//! record, not just the winner, so a later search over a larger space re-times only the new
//! candidates. Writers take an exclusive lock on `<arch>.json.lock` (fs4, an advisory `flock`),
//! re-read the file, merge their entries, write a temp file in the same folder and rename it
//! over the old one: readers never see a half-written file, and concurrent tuners (threads or
//! processes) never lose each other's entries. A file that is not UTF-8, does not parse, is
//! truncated, has another schema, or was written by another format or tessera version is
//! reported ([`CacheError`]) and ignored: the tuner warns and retunes, and its write replaces
//! the file (with a second warning), so a broken file is repaired once, not retuned forever.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Version of the file layout; a file with another one is ignored (and overwritten).
pub const FORMAT: u32 = 1;

/// Why a cache file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file could not be read or written.
    #[error("cache {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a cache of this layout: bad UTF-8 or JSON, a missing field, a cut-off end.
    #[error("cache {path} is corrupt or truncated: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the parser found wrong.
        message: String,
    },
    /// The file was written by another layout [`FORMAT`] or another tessera version.
    #[error("cache {path} was written by format {format} / tessera {version}; this is format {FORMAT} / tessera {}", env!("CARGO_PKG_VERSION"))]
    OldVersion {
        /// The file.
        path: PathBuf,
        /// Its layout version.
        format: u32,
        /// The tessera version that wrote it.
        version: String,
    },
}

impl CacheError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            CacheError::Io { path, .. }
            | CacheError::Corrupt { path, .. }
            | CacheError::OldVersion { path, .. } => path,
        }
    }
}

/// One measured (or rejected, or pruned) candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// The candidate's text (`schedule matmul tile=[64, 64, 32] …` or `BM=64,BN=64`).
    pub candidate: String,
    /// The cost model's prediction, seconds. JSON has no infinity or NaN: such a prediction is
    /// written as `null` and read back as infinity (no usable prediction).
    #[serde(deserialize_with = "f64_or_null")]
    pub predicted_s: f64,
    /// Median measured time, seconds; `None` when not timed (pruned or wrong).
    pub measured_s: Option<f64>,
    /// False when the output differed from the default schedule's.
    pub ok: bool,
    /// Why it was not timed, if it was not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

fn f64_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// Everything known about one (kernel, shape, dtypes, threads).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The kernel's name.
    pub kernel: String,
    /// The key without the shape: entries of one family are candidates for nearest-shape reuse.
    pub family: String,
    /// The sizes the entry was tuned at.
    pub shape: Vec<u64>,
    /// The default candidate (the correctness reference).
    pub default: String,
    /// The winner, if any candidate was measured correct.
    pub best: Option<String>,
    /// The search strategy that produced it.
    pub strategy: String,
    /// Every candidate tried, in the order tried.
    pub trials: Vec<TrialRecord>,
}

impl Entry {
    /// The record of a candidate.
    pub fn record(&self, candidate: &str) -> Option<&TrialRecord> {
        self.trials.iter().find(|t| t.candidate == candidate)
    }

    /// The winner's measured time.
    pub fn best_time(&self) -> Option<f64> {
        self.best
            .as_deref()
            .and_then(|b| self.record(b))
            .and_then(|r| r.measured_s)
    }
}

/// The file's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheFile {
    /// The layout version ([`FORMAT`]).
    pub format: u32,
    /// The tessera version that wrote it.
    pub tessera: String,
    /// The arch the times were measured on (`cpu`, `sm_80`, ...): one file per arch.
    pub arch: String,
    /// The entries by launch key (kernel, shape, dtypes, threads).
    pub entries: BTreeMap<String, Entry>,
}

impl CacheFile {
    /// An empty file for `arch`.
    pub fn new(arch: &str) -> Self {
        CacheFile {
            format: FORMAT,
            tessera: env!("CARGO_PKG_VERSION").to_string(),
            arch: arch.to_string(),
            entries: BTreeMap::new(),
        }
    }
}

/// `<dir>/<arch>.json`.
pub fn file_path(dir: &Path, arch: &str) -> PathBuf {
    dir.join(format!("{arch}.json"))
}

/// Reads a cache folder's file. A missing file is an empty cache; anything unusable is an
/// error.
pub fn read(path: &Path, arch: &str) -> Result<CacheFile, CacheError> {
    match read_existing(path) {
        Err(CacheError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(CacheFile::new(arch))
        }
        r => r,
    }
}

/// Reads a cache file that must exist. Bytes that are not UTF-8, truncated or malformed JSON
/// and JSON of another schema are [`CacheError::Corrupt`] (a writer replaces such a file);
/// only a failure to read the file at all is [`CacheError::Io`].
pub fn read_existing(path: &Path) -> Result<CacheFile, CacheError> {
    let bytes = fs::read(path).map_err(|e| CacheError::Io {
        path: path.into(),
        source: e,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| CacheError::Corrupt {
        path: path.into(),
        message: format!("not UTF-8 text ({e})"),
    })?;
    // Look at the header first, so an old layout is told apart from a broken file.
    #[derive(Deserialize)]
    struct Header {
        format: u32,
        tessera: String,
    }
    let corrupt = |e: serde_json::Error| CacheError::Corrupt {
        path: path.into(),
        message: e.to_string(),
    };
    let header: Header = serde_json::from_str(&text).map_err(corrupt)?;
    if header.format != FORMAT || header.tessera != env!("CARGO_PKG_VERSION") {
        return Err(CacheError::OldVersion {
            path: path.into(),
            format: header.format,
            version: header.tessera,
        });
    }
    serde_json::from_str(&text).map_err(corrupt)
}

/// Writes `file` to `path` atomically (temp file in the same folder, fsync, rename).
pub fn write_atomic(path: &Path, file: &CacheFile) -> Result<(), CacheError> {
    static N: AtomicU64 = AtomicU64::new(0);
    let io = |e| CacheError::Io {
        path: path.into(),
        source: e,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("cache"),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let text = serde_json::to_string_pretty(file).map_err(|e| CacheError::Corrupt {
        path: path.into(),
        message: format!("cannot serialise the entries: {e}"),
    })?;
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res.map_err(io)
}

/// Holds the exclusive lock on `<path>.lock` while alive.
pub struct Lock(File);

impl Lock {
    /// Blocks until this process holds the lock of the cache file at `path`.
    pub fn acquire(path: &Path) -> Result<Lock, CacheError> {
        let lock_path = path.with_extension("json.lock");
        let io = |e| CacheError::Io {
            path: lock_path.clone(),
            source: e,
        };
        if let Some(dir) = lock_path.parent() {
            fs::create_dir_all(dir).map_err(io)?;
        }
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io)?;
        fs4::fs_std::FileExt::lock_exclusive(&f).map_err(io)?;
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs4::fs_std::FileExt::unlock(&self.0);
    }
}

/// Merges `entries` into the file at `path` under the lock: re-reads it (an unusable file is
/// replaced, and its error returned alongside), inserts, writes atomically.
pub fn merge(
    path: &Path,
    arch: &str,
    entries: impl IntoIterator<Item = (String, Entry)>,
) -> Result<Option<CacheError>, CacheError> {
    let _lock = Lock::acquire(path)?;
    let (mut file, warning) = match read(path, arch) {
        Ok(f) => (f, None),
        Err(e @ CacheError::Io { .. }) => return Err(e),
        Err(e) => (CacheFile::new(arch), Some(e)),
    };
    file.entries.extend(entries);
    write_atomic(path, &file)?;
    Ok(warning)
}
