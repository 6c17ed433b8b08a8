//! Refining borrowed schedules. In `cached` mode a launch whose shape has no cache entry runs
//! the nearest tuned shape's winner; it also leaves a copy of its arguments here, so the shape
//! can be tuned later: on request ([`refine`]) or right away by a background worker
//! ([`set_background`]). Each refinement re-runs the launch on the copied arguments as a
//! `full` launch on the refining thread only, so every candidate is checked and timed as in
//! any tuning, and the winner is stored; later launches of that shape then use it.

use crate::{Error, Result};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Most launches kept waiting; later ones are not queued (they still run the borrowed
/// schedule, and a `full` run tunes them).
pub const MAX_PENDING: usize = 64;
/// Most argument bytes kept by waiting launches.
pub const MAX_PENDING_BYTES: usize = 1 << 28;

/// A launch to re-run as a `full` launch.
struct Deferred {
    key: String,
    bytes: usize,
    run: Box<dyn FnOnce() -> Result<()> + Send>,
}

struct Queue {
    waiting: Vec<Deferred>,
    /// Keys being tuned now.
    busy: Vec<String>,
    /// Keys refined (or failed) by this process: never queued again.
    done: BTreeSet<String>,
    worker: bool,
    background: Option<bool>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    waiting: Vec::new(),
    busy: Vec::new(),
    done: BTreeSet::new(),
    worker: false,
    background: None,
});
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// Set when a launch on this thread ran a schedule borrowed from a nearby shape.
    static BORROWED: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread refines: its launches tune as in `full` mode.
    static REFINING: Cell<bool> = const { Cell::new(false) };
}

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that the current launch runs a borrowed schedule.
pub(crate) fn note_borrowed() {
    BORROWED.with(|b| b.set(true));
}

/// Whether a borrowed schedule ran on this thread since the last call; resets the flag.
pub(crate) fn take_borrowed() -> bool {
    BORROWED.with(|b| b.replace(false))
}

/// Whether this thread is refining (its launches tune as in `full` mode).
pub(crate) fn refining() -> bool {
    REFINING.with(|r| r.get())
}

/// Queues a launch that ran a borrowed schedule: `key` names the kernel and its argument
/// shapes and dtypes (a key already queued, being tuned or done is ignored); `copy` copies its
/// `bytes` bytes of arguments and returns what re-runs the launch on them. Nothing is copied
/// when the queue is full ([`MAX_PENDING`], [`MAX_PENDING_BYTES`]).
pub(crate) fn defer<F>(key: String, bytes: usize, copy: impl FnOnce() -> F)
where
    F: FnOnce() -> Result<()> + Send + 'static,
{
    let mut q = queue();
    if q.done.contains(&key) || q.busy.contains(&key) || q.waiting.iter().any(|d| d.key == key) {
        return;
    }
    let held: usize = q.waiting.iter().map(|d| d.bytes).sum();
    if q.waiting.len() >= MAX_PENDING || held + bytes > MAX_PENDING_BYTES {
        drop(q);
        super::warn_once(&format!(
            "the refinement queue is full ({MAX_PENDING} launches or {} MiB of arguments): \
             `{key}` and later borrowed shapes are not queued; call autotune::refine() or \
             turn on background refinement",
            MAX_PENDING_BYTES >> 20
        ));
        return;
    }
    q.waiting.push(Deferred {
        key,
        bytes,
        run: Box::new(copy()),
    });
    if background_on(&q) {
        start_worker(&mut q);
    }
}

fn background_on(q: &Queue) -> bool {
    q.background
        .unwrap_or_else(|| background_env().ok().flatten().unwrap_or(false))
}

/// `TESSERA_AUTOTUNE_BACKGROUND`: `None` when unset; an invalid value is an error
/// ([`super::try_mode`] returns it at the launch).
pub(crate) fn background_env() -> Result<Option<bool>, tessera_ir::env::EnvError> {
    crate::env::background()
}

fn start_worker(q: &mut Queue) {
    if q.worker || q.waiting.is_empty() {
        return;
    }
    q.worker = true;
    let spawned = std::thread::Builder::new()
        .name("tessera-autotune-refine".into())
        .spawn(|| {
            while let Some(d) = take_next() {
                if let Err(e) = run(d) {
                    super::warn(&format!("background refinement failed: {e}"));
                }
            }
        });
    if let Err(e) = spawned {
        q.worker = false;
        super::warn(&format!(
            "cannot start the background refinement thread ({e}); the shapes stay queued for autotune::refine()"
        ));
    }
}

/// Takes the next waiting launch and marks it busy; `None` (and the worker flag cleared)
/// when there is none.
fn take_next() -> Option<Deferred> {
    let mut q = queue();
    let d = pop(&mut q);
    if d.is_none() {
        q.worker = false;
        CHANGED.notify_all();
    }
    d
}

/// The oldest waiting launch, marked busy.
fn pop(q: &mut Queue) -> Option<Deferred> {
    if q.waiting.is_empty() {
        return None;
    }
    let d = q.waiting.remove(0);
    q.busy.push(d.key.clone());
    Some(d)
}

/// Runs one deferred launch as a `full` launch on this thread, then lets every thread's next
/// launch see the new entry.
fn run(d: Deferred) -> Result<()> {
    // Decisions memoised before now were made without this shape's own entry.
    super::bump();
    let was = REFINING.with(|r| r.replace(true));
    let res = (d.run)();
    REFINING.with(|r| r.set(was));
    let mut q = queue();
    q.busy.retain(|k| *k != d.key);
    q.done.insert(d.key.clone());
    drop(q);
    super::bump();
    CHANGED.notify_all();
    res.map_err(|e| Error::Refine {
        key: d.key,
        source: Box::new(e),
    })
}

/// The launches waiting to be refined, each as `kernel(dtype[dims],…)@arch`, e.g.
/// `mm(f32[96x48],f32[48x40])@cpu-x86_64-avx2` ([`refine`] shows one queued and refined).
///
/// ```
/// for key in tessera::autotune::pending() {
///     println!("waiting for refinement: {key}");
/// }
/// ```
pub fn pending() -> Vec<String> {
    queue().waiting.iter().map(|d| d.key.clone()).collect()
}

/// Refines on request: tunes, on this thread, every shape that ran a schedule borrowed from a
/// nearby shape (see [`pending`]), as a `full` launch on a copy of its arguments, and stores
/// the winners. Returns how many shapes were refined. A failure stops the refinement and is
/// returned; that shape is not queued again, the others stay queued.
///
/// ```
/// use tessera::autotune::{self, Mode};
/// let dir = std::env::temp_dir().join(format!("tessera-refine-doc-{}", std::process::id()));
/// autotune::set_cache_dir(Some(dir.clone()));
///
/// #[tessera::kernel]
/// fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> { x.matmul(w) }
/// let run = |m: usize| {
///     let a = tessera::Tensor::<f32>::randn(&[m, 48], 1);
///     let b = tessera::Tensor::<f32>::randn(&[48, 40], 2);
///     mm(&a, &b)
/// };
/// autotune::set_mode(Some(Mode::Full));
/// run(64)?;                                   // tunes 64x40x48
/// autotune::set_mode(Some(Mode::Cached));
/// run(96)?;                                   // borrows 64's winner, queues 96
/// assert_eq!(autotune::pending().len(), 1);
/// assert_eq!(autotune::refine()?, 1);         // tunes 96 now
/// assert!(autotune::pending().is_empty());
/// autotune::set_mode(Some(Mode::Off));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn refine() -> Result<usize> {
    let mut n = 0;
    loop {
        // The lock is released before the launch runs (it takes the lock again).
        let next = pop(&mut queue());
        let Some(d) = next else { return Ok(n) };
        run(d)?;
        n += 1;
    }
}

/// Turns background refinement on or off for this process (`None`: the environment,
/// `TESSERA_AUTOTUNE_BACKGROUND=1`; off by default). When on, a launch that borrows a nearby
/// shape's schedule returns at once with it, and a worker thread tunes that shape right away;
/// launches after the worker stored it run the shape's own winner.
///
/// The worker times candidates on the same cores and thread pool as the program's own
/// launches, so its timings are only as quiet as the machine is; where that matters, leave it
/// off and call [`refine`] at a quiet moment. A program that exits while the worker tunes
/// loses that shape's trials, never the cache (writes are atomic).
pub fn set_background(on: Option<bool>) {
    let mut q = queue();
    q.background = on;
    if background_on(&q) {
        start_worker(&mut q);
    }
}

/// Blocks until the background worker has nothing left to tune (returns at once when it is
/// off or idle); launches still waiting with the worker off stay queued.
pub fn wait_background() {
    let mut q = queue();
    while q.worker || !q.busy.is_empty() {
        q = CHANGED.wait(q).unwrap_or_else(|e| e.into_inner());
    }
}
