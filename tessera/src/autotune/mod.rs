//! The autotuner: search space, cost-model pruning and ranking, timed trials with a
//! correctness check, and a persistent cache.
//!
//! A launch asks the tuner for each fused kernel's schedule. What happens depends on the mode:
//!
//! | `TESSERA_AUTOTUNE` | [`Mode`] | on a cache hit | on a miss |
//! |---|---|---|---|
//! | `off` | `Off` | default schedule | default schedule |
//! | `cached` (**default**) | `Cached` | the cached winner | the nearest tuned shape's winner (queued for [`refine`]), else the default; nothing is timed or written unless refined |
//! | `full` | `Full` | the cached winner (zero trials) | tune now (seeded by the nearest tuned shape), store every candidate's timing |
//!
//! **Why `cached` is the default:** a plain `cargo test` or a user's first run must stay fast
//! and deterministic, and must never write into the working tree; tuning a 1024³ matmul costs
//! seconds. Tuning is opted into with [`enable`]`(true)` (the seeds' `autotune.enable(True)`) or
//! `TESSERA_AUTOTUNE=full`; a tuned cache is then reused by every later run (or shipped to
//! another machine of the same arch with [`save_cache`] / [`load_cache`]).
//!
//! **Where the cache lives:** `<dir>/<arch>.json` with `dir` = [`set_cache_dir`], else
//! `TESSERA_CACHE_DIR`, else `.tessera/cache` under the current directory; `arch` is
//! [`arch_id`] (`cpu-x86_64-avx512` …) on the CPU, [`device_arch_id`] on a PTX device.
//! Entries are keyed by kernel name and signature hash, fused-kernel index and fusion plan,
//! dtypes, worker threads (CPU) and the bound sizes (see [`cache`]).
//!
//! **Nearby shapes:** a shape with no entry reuses the winner of the nearest tuned shape of the
//! same kernel, dtypes and thread count, where the distance is the sum over dims of
//! `|log2(a) − log2(b)|` — the number of doublings between the shapes — up to
//! [`NEAR_MAX_DOUBLINGS`]. In `full` mode that shape is then tuned right away (the borrowed
//! winner is the search's first prior). In `cached` mode the launch runs the borrowed winner
//! at once and leaves a copy of its arguments in a queue ([`pending`]); the shape is then
//! refined — tuned as in `full` mode, on the copy, on one thread only — **on request** with
//! [`refine`], or **in the background** by a worker thread when [`set_background`] (or
//! `TESSERA_AUTOTUNE_BACKGROUND=1`) is on. Until then it keeps the borrowed winner. Unlike
//! *bucketing* (rounding shapes to bins that share one entry, so every shape in a bin runs
//! one schedule forever, even where a bin straddles a change of regime), each shape keeps its
//! own exact entry; the neighbour only stands in until the shape itself has been measured.
//!
//! **Correctness:** every candidate runs once into scratch memory and its output is compared
//! with the default schedule's ([`outputs_match`]) before it is timed; a wrong candidate is
//! recorded with `ok: false` and can never be chosen.
//!
//! **Timing:** warm-up, then the median of repeated runs ([`TrialConfig`]); once the search is
//! over, the best few candidates (within 25% of the best, at most 8) are re-timed in
//! interleaved rounds — the *final race* — so the machine's slow spells hit them all alike
//! and the fastest of many noisy medians is not simply the luckiest.
//!
//! **What is searched** ([`SearchSpace`]): per fused kernel, the Schedule IR knobs — tiles
//! (BM, BN, BK), warps, vector width, pipeline stages — and per launch the **fusion depth**:
//! how many elementwise ops may fuse into one kernel's epilogue
//! (`tessera_ir::fuse::fuse_with`). Each depth is a different plan, timed whole under its
//! kernels' default schedules and checked against the deepest plan's output; the cost model
//! weighs each plan's memory traffic against its registers and prunes plans that would spill
//! (`tessera_ir::cost::plan`). The kernels of the chosen plan are then tuned as usual.
//!
//! **Devices:** on the CPU candidates are Tile IR programs timed by the wall clock. On a PTX
//! device (`Device::cuda`, `Device::sim`) each candidate schedule is emitted as PTX for the
//! device's arch, run on the device and checked; a GPU times it with CUDA events, the
//! simulator has no clock, so there the winner is the best-predicted candidate that passed
//! (cost model row: [`tessera_ir::cost::Arch::for_target`]). Device entries go to the device's
//! own file ([`device_arch_id`]: `sm_90a.json`, `sim-sm_90a.json`). The fusion depth is tuned
//! on the CPU only.
//!
//! **Reports:** a progress bar (indicatif) while tuning when stderr is a terminal, nothing
//! otherwise; one `tracing` event per candidate (target `tessera::autotune`: kernel, candidate,
//! predicted, measured, ok) and one per decision (chosen, trials).
//!
//! ```
//! use tessera::autotune::{self, Mode};
//! let dir = std::env::temp_dir().join(format!("tessera-doc-{}", std::process::id()));
//! autotune::set_cache_dir(Some(dir.clone()));
//! autotune::enable(true);                                    // tune on cache misses
//! let a = tessera::Tensor::<f32>::randn(&[64, 48], 1);
//! let b = tessera::Tensor::<f32>::randn(&[48, 40], 2);
//!
//! #[tessera::kernel]
//! fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> { x.matmul(w) }
//!
//! let before = autotune::trials_run();
//! let y1 = mm(&a, &b)?;                                      // tunes, persists
//! assert!(autotune::trials_run() > before);
//! let after = autotune::trials_run();
//! let y2 = mm(&a, &b)?;                                      // cache hit
//! assert_eq!(autotune::trials_run(), after);
//! assert_eq!(y1.shape(), y2.shape());
//! assert!(dir.join(format!("{}.json", autotune::arch_id())).exists());
//! autotune::set_mode(Some(Mode::Off));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), tessera::Error>(())
//! ```

pub mod cache;
mod device;
mod engine;
mod fusion;
mod kernel;
mod progress;
mod refine;
mod search;
mod space;
mod tile;
mod trial;

pub use cache::{CacheError, Entry, TrialRecord};
pub(crate) use device::{DeviceMemo, select_device_kernel};
pub use engine::Outcome;
pub(crate) use engine::Runner;
pub(crate) use fusion::{FusionMemo, candidate_depths, select_fusion};
pub(crate) use kernel::{KernelMemo, select_kernel};
pub use refine::{
    MAX_PENDING, MAX_PENDING_BYTES, pending, refine, set_background, wait_background,
};
pub(crate) use refine::{defer, take_borrowed};
pub use search::Strategy;
pub use space::{CostModel, ProblemOf, SearchSpace, TileDims, TileSpace};
pub(crate) use tile::{Knobs, TileMemo, tune_tile};
pub use trial::{TrialConfig, outputs_match, outputs_match_with};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// How launches use the tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Default schedules only.
    Off,
    /// Cached winners (and nearest-shape reuse); never time or write.
    Cached,
    /// Tune on a miss and persist.
    Full,
}

impl Mode {
    /// Parses `off`, `cached`, `full`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "false" => Some(Mode::Off),
            "cached" | "cache" => Some(Mode::Cached),
            "full" | "on" | "1" | "true" => Some(Mode::Full),
            _ => None,
        }
    }
}

/// Most doublings between a shape and the tuned shape it borrows a schedule from.
pub const NEAR_MAX_DOUBLINGS: f64 = 4.0;

struct State {
    dir: Option<PathBuf>,
    /// The entries known to this process (the cache folder's files, loaded files, new
    /// tunings), per arch id (the CPU's [`arch_id`], or a device's [`device_arch_id`]).
    memory: BTreeMap<String, BTreeMap<String, Entry>>,
    /// (cache folder, arch id) pairs whose file has been read into memory.
    loaded: Vec<(PathBuf, String)>,
    /// Per-kernel search spaces and settings.
    spaces: BTreeMap<String, SearchSpace>,
}

static STATE: Mutex<State> = Mutex::new(State {
    dir: None,
    memory: BTreeMap::new(),
    loaded: Vec::new(),
    spaces: BTreeMap::new(),
});
static TRIALS: AtomicU64 = AtomicU64::new(0);
static WARNINGS: AtomicU64 = AtomicU64::new(0);
/// Bumped whenever a decision made earlier may no longer hold (mode, folder, loaded entries).
static GENERATION: AtomicU64 = AtomicU64::new(1);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn bump() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The epoch of memoised decisions under mode `m` (the caller's [`mode`]): changes with
/// [`bump`], and differs per mode, so a decision made in one mode (a borrowed schedule in
/// `cached`) never serves another (a refinement, which tunes as in `full`).
pub(crate) fn generation(m: Mode) -> u64 {
    GENERATION.load(Ordering::SeqCst) * 4 + m as u64
}

/// Turns tuning on (`Mode::Full`) or off (`Mode::Off`) for this process, over the environment.
///
/// ```
/// tessera::autotune::enable(false);
/// assert_eq!(tessera::autotune::mode(), tessera::autotune::Mode::Off);
/// tessera::autotune::set_mode(None);   // back to TESSERA_AUTOTUNE / the default
/// ```
pub fn enable(on: bool) {
    set_mode(Some(if on { Mode::Full } else { Mode::Off }));
}

/// Sets the mode for this process; `None` goes back to `TESSERA_AUTOTUNE` (default `cached`).
pub fn set_mode(mode: Option<Mode>) {
    MODE.store(mode.map_or(0, |m| m as u8 + 1), Ordering::SeqCst);
    bump();
}

/// The mode [`set_mode`] set: 0 for none, else the mode's discriminant + 1 (an atomic, so a
/// launch reads it without taking the state lock).
static MODE: AtomicU8 = AtomicU8::new(0);

fn set_mode_value() -> Option<Mode> {
    match MODE.load(Ordering::SeqCst) {
        0 => None,
        1 => Some(Mode::Off),
        2 => Some(Mode::Cached),
        _ => Some(Mode::Full),
    }
}

/// The mode in force: [`set_mode`]/[`enable`], else `TESSERA_AUTOTUNE`, else `Cached`.
/// An invalid `TESSERA_AUTOTUNE` reads as `Cached` here; [`try_mode`] (what a launch asks)
/// returns it as an error.
pub fn mode() -> Mode {
    try_mode().unwrap_or(Mode::Cached)
}

/// Values `TESSERA_AUTOTUNE` accepts (any case).
pub const MODE_VALUES: &str = "off, cached or full (also 0/false = off, 1/true/on = full)";

/// [`mode`], with an invalid `TESSERA_AUTOTUNE` or `TESSERA_AUTOTUNE_BACKGROUND` as an error
/// naming the variable and the accepted values: every launch that consults the tuner asks
/// this, so a mistyped setting fails the launch instead of being ignored.
///
/// ```
/// // SAFETY (edition 2024 `set_var`): this doc test runs in its own process.
/// unsafe { std::env::set_var("TESSERA_AUTOTUNE_BACKGROUND", "maybe") };
/// tessera::reload_env(); // the variables are read once per process
/// let e = tessera::autotune::try_mode().unwrap_err();
/// assert!(e.to_string().contains("TESSERA_AUTOTUNE_BACKGROUND=\"maybe\" is not valid"), "{e}");
/// unsafe { std::env::remove_var("TESSERA_AUTOTUNE_BACKGROUND") };
/// unsafe { std::env::set_var("TESSERA_AUTOTUNE", "fulll") };
/// tessera::reload_env();
/// let e = tessera::autotune::try_mode().unwrap_err();
/// assert!(e.to_string().contains("TESSERA_AUTOTUNE=\"fulll\" is not valid: expected off, cached or full"), "{e}");
/// ```
pub fn try_mode() -> crate::Result<Mode> {
    refine::background_env()?;
    if refine::refining() {
        return Ok(Mode::Full);
    }
    if let Some(m) = set_mode_value() {
        return Ok(m);
    }
    Ok(crate::env::autotune()?.unwrap_or(Mode::Cached))
}

/// Sets the cache folder for this process (`None`: `TESSERA_CACHE_DIR`, else
/// `.tessera/cache`). The entries held in memory are dropped: they mirror the folder.
pub fn set_cache_dir(dir: Option<PathBuf>) {
    let mut s = state();
    s.dir = dir;
    s.memory.clear();
    s.loaded.clear();
    drop(s);
    bump();
}

/// The cache folder in force.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = &state().dir {
        return d.clone();
    }
    match std::env::var_os("TESSERA_CACHE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(".tessera").join("cache"),
    }
}

/// The cache file's stem for this machine: `cpu-<target arch>[-<widest SIMD>]`.
pub fn arch_id() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = if std::arch::is_x86_feature_detected!("avx512f") {
            "-avx512"
        } else if std::arch::is_x86_feature_detected!("avx2") {
            "-avx2"
        } else {
            ""
        };
        format!("cpu-x86_64{simd}")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        format!("cpu-{}", std::env::consts::ARCH)
    }
}

/// The cache file's stem for a PTX device: the GPU's arch (`sm_90a`), or `sim-sm_90a` for the
/// simulator (whose entries are checked but not timed, and must never pass for a GPU's); the
/// CPU's [`arch_id`] for the CPU.
///
/// ```
/// use tessera::{Device, autotune::device_arch_id};
/// use tessera::ir::target::ptx::Arch;
/// assert_eq!(device_arch_id(&Device::sim_arch(Arch::Sm80)), "sim-sm_80");
/// assert_eq!(device_arch_id(&Device::Cpu), tessera::autotune::arch_id());
/// ```
pub fn device_arch_id(device: &crate::Device) -> String {
    match (device, device.arch()) {
        (crate::Device::Sim(_), Some(a)) => format!("sim-{a}"),
        (crate::Device::Cpu, _) | (_, None) => arch_id(),
        (_, Some(a)) => a.to_string(),
    }
}

/// The cost model's arch for the CPU with the current rayon pool.
pub fn cost_arch() -> tessera_ir::cost::Arch {
    tessera_ir::cost::Arch::cpu(rayon::current_num_threads() as u32)
}

/// Candidates timed or checked by this process so far (the default counts when it is timed;
/// cache hits count nothing).
pub fn trials_run() -> u64 {
    TRIALS.load(Ordering::SeqCst)
}

/// Cache problems reported (corrupt, truncated, old-version files) by this process so far.
pub fn warnings() -> u64 {
    WARNINGS.load(Ordering::SeqCst)
}

pub(crate) fn warn(msg: &str) {
    WARNINGS.fetch_add(1, Ordering::SeqCst);
    tracing::warn!(target: "tessera::autotune", "{msg}");
    eprintln!("tessera autotune: warning: {msg}");
}

fn warn_once(msg: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut s = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !s.iter().any(|m| m == msg) {
        s.push(msg.to_string());
        drop(s);
        warn(msg);
    }
}

/// Sets the search space (and strategy, trial budget) of the `#[kernel]` or `tile!` kernel
/// named `kernel` — the API form of the seeds' `schedule.search_space(...)` /
/// `schedule.autotune(cost_model = "roofline", max_trials = 50)`.
///
/// ```
/// use tessera::autotune::{self, CostModel, SearchSpace, Strategy};
/// autotune::search_space("matmul", SearchSpace::new()
///     .tiles([(64, 64, 32), (128, 128, 64)])
///     .vectorize([1, 2, 4])
///     .stages([2, 3])
///     .strategy(Strategy::Hybrid)
///     .cost_model(CostModel::Roofline)
///     .max_trials(50));
/// assert_eq!(autotune::space_of("matmul").unwrap().tiles.len(), 2);
/// # autotune::clear_search_space("matmul");
/// ```
pub fn search_space(kernel: &str, space: SearchSpace) {
    state().spaces.insert(kernel.to_string(), space);
    bump();
}

/// Removes a kernel's configured space (back to the built-in one).
pub fn clear_search_space(kernel: &str) {
    state().spaces.remove(kernel);
    bump();
}

/// The configured space of a kernel, if any.
pub fn space_of(kernel: &str) -> Option<SearchSpace> {
    state().spaces.get(kernel).cloned()
}

/// Writes every entry this process knows (its cache folder's file, loaded files, new
/// tunings) to `path`, atomically. Ship it to another machine of the same arch and
/// [`load_cache`] it there.
pub fn save_cache(path: impl AsRef<Path>) -> Result<usize, CacheError> {
    save_cache_for(&arch_id(), path)
}

/// [`save_cache`] for another arch id: a device's entries ([`device_arch_id`]).
pub fn save_cache_for(arch: &str, path: impl AsRef<Path>) -> Result<usize, CacheError> {
    ensure_loaded(arch);
    let mut file = cache::CacheFile::new(arch);
    file.entries = state().memory.get(arch).cloned().unwrap_or_default();
    let n = file.entries.len();
    let _lock = cache::Lock::acquire(path.as_ref())?;
    cache::write_atomic(path.as_ref(), &file)?;
    Ok(n)
}

/// Reads a cache file written by [`save_cache`] (or a cache folder's `<arch>.json`) and adds
/// its entries to this process, under the arch the file names; returns how many. A missing,
/// unreadable, corrupt or old-version file is an error and changes nothing; the error converts
/// into [`crate::Error`] with `?`.
///
/// ```
/// let e = tessera::autotune::load_cache("/nonexistent/tessera.json").unwrap_err();
/// assert!(e.to_string().contains("/nonexistent/tessera.json"), "{e}");
/// let e: tessera::Error = e.into();
/// assert!(matches!(e, tessera::Error::Cache { .. }));
/// ```
pub fn load_cache(path: impl AsRef<Path>) -> Result<usize, CacheError> {
    let file = cache::read_existing(path.as_ref())?;
    let n = file.entries.len();
    state()
        .memory
        .entry(file.arch.clone())
        .or_default()
        .extend(file.entries);
    bump();
    Ok(n)
}

/// The CPU entry for a key, if this process knows it.
pub fn entry(key: &str) -> Option<Entry> {
    entries().remove(key)
}

/// Every CPU entry this process knows, by key.
pub fn entries() -> BTreeMap<String, Entry> {
    entries_for(&arch_id())
}

/// Every entry of an arch id ([`device_arch_id`]) this process knows, by key.
pub fn entries_for(arch: &str) -> BTreeMap<String, Entry> {
    ensure_loaded(arch);
    state().memory.get(arch).cloned().unwrap_or_default()
}

/// Reads the cache folder's file into memory once per folder; an unusable file is warned
/// about (and will be replaced by the next write).
fn ensure_loaded(arch: &str) {
    let dir = cache_dir();
    let id = (dir, arch.to_string());
    if state().loaded.contains(&id) {
        return;
    }
    let path = cache::file_path(&id.0, arch);
    let res = cache::read(&path, arch);
    let mut s = state();
    if s.loaded.contains(&id) {
        return;
    }
    s.loaded.push(id);
    match res {
        Ok(f) => {
            let m = s.memory.entry(arch.to_string()).or_default();
            for (k, e) in f.entries {
                m.entry(k).or_insert(e);
            }
        }
        Err(e) => {
            drop(s);
            warn(&format!("{e}; ignoring it and retuning"));
        }
    }
}

/// Looks a key of an arch up; on a miss, the nearest tuned shape of the same family.
fn lookup(arch: &str, key: &str, family: &str, shape: &[u64]) -> (Option<Entry>, Option<Entry>) {
    ensure_loaded(arch);
    let s = state();
    let Some(m) = s.memory.get(arch) else {
        return (None, None);
    };
    if let Some(e) = m.get(key) {
        return (Some(e.clone()), None);
    }
    let near = m
        .values()
        .filter(|e| e.family == family && e.shape.len() == shape.len() && e.best.is_some())
        .map(|e| (doublings(&e.shape, shape), e))
        .filter(|(d, _)| *d <= NEAR_MAX_DOUBLINGS)
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, e)| e.clone());
    (None, near)
}

/// The nearest tuned shape's winner, run by a `cached` launch in place of its own: noted, so
/// the launch is queued for refinement.
fn borrowed(near: &Option<Entry>) -> Option<&str> {
    let best = near.as_ref().and_then(|e| e.best.as_deref());
    if best.is_some() {
        refine::note_borrowed();
    }
    best
}

/// Distance between two shapes: the sum of `|log2 a − log2 b|` over dims.
///
/// ```
/// assert_eq!(tessera::autotune::doublings(&[512, 512], &[1024, 256]), 2.0);
/// ```
pub fn doublings(a: &[u64], b: &[u64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| ((x.max(1) as f64).log2() - (y.max(1) as f64).log2()).abs())
        .sum()
}

/// Records a new entry of an arch in memory and in the cache folder's file (under the lock).
fn store(arch: &str, key: String, entry: Entry) {
    let dir = cache_dir();
    state()
        .memory
        .entry(arch.to_string())
        .or_default()
        .insert(key.clone(), entry.clone());
    match cache::merge(&cache::file_path(&dir, arch), arch, [(key, entry)]) {
        Ok(None) => {}
        Ok(Some(old)) => warn(&format!("{old}; replaced it")),
        Err(e) => warn(&format!("cannot write the cache: {e}")),
    }
}

/// FNV-1a, stable across runs and Rust versions (cache keys must be).
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Whether a compiled kernel runs under the deterministic policy: its tuning then demands
/// candidates that reproduce the default's output bit for bit ([`TrialConfig::bitwise`]).
pub(crate) fn deterministic(c: &tessera_ir::pipeline::Compiled) -> bool {
    tessera_ir::graph::policies(&c.graph).contains(&tessera_ir::NumericsPolicy::Deterministic)
}
