//! The autotuner end to end: trial counting, the cache's round trips, broken files, concurrent
//! writers, and the correctness check. The tuner's settings are process-wide, so every test
//! holds `SERIAL` and uses its own temporary cache folder.

use std::sync::Mutex;
use tessera::autotune::{self, Mode, SearchSpace, Strategy, TileSpace, TrialConfig};
use tessera::{Arg, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A quick trial configuration so tests stay fast.
fn quick() -> TrialConfig {
    TrialConfig {
        warmup: 1,
        warmup_budget: std::time::Duration::from_millis(1),
        samples: 3,
        sample_budget: std::time::Duration::from_millis(5),
        race_rounds: 1,
        ..TrialConfig::default()
    }
}

#[tessera::kernel]
fn tmm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

fn setup(dir: &std::path::Path) {
    autotune::set_cache_dir(Some(dir.to_path_buf()));
    autotune::search_space(
        "tmm",
        SearchSpace::new()
            .tiles([(32, 32, 32), (64, 64, 32), (32, 64, 64), (128, 128, 64)])
            .strategy(Strategy::Grid)
            .trial(quick()),
    );
    autotune::enable(true);
}

fn inputs() -> (Tensor<f32>, Tensor<f32>) {
    (
        Tensor::<f32>::randn(&[70, 50], 1),
        Tensor::<f32>::randn(&[50, 90], 2),
    )
}

fn close(a: &Tensor<f32>, b: &Tensor<f32>) {
    assert_eq!(a.shape(), b.shape());
    for (x, y) in a.as_slice().unwrap().iter().zip(b.as_slice().unwrap()) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

fn cache_file(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(format!("{}.json", autotune::arch_id()))
}

#[test]
fn second_launch_performs_zero_trials() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let (a, b) = inputs();
    let t0 = autotune::trials_run();
    let y1 = tmm(&a, &b).unwrap();
    let first = autotune::trials_run() - t0;
    assert_eq!(
        first, 4,
        "the default (128×128×64, also listed) + 3 candidates, grid"
    );
    let t1 = autotune::trials_run();
    let y2 = tmm(&a, &b).unwrap();
    assert_eq!(autotune::trials_run() - t1, 0);
    close(&y1, &y2);
    // A "new process": memory dropped, the folder's file read back. Still zero trials.
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    let t2 = autotune::trials_run();
    let y3 = tmm(&a, &b).unwrap();
    assert_eq!(autotune::trials_run() - t2, 0);
    close(&y1, &y3);
    // Every candidate's timing is kept, not just the winner.
    let e = autotune::entries();
    let entry = e.values().find(|e| e.kernel == "tmm").unwrap();
    assert_eq!(entry.trials.len(), 4);
    assert!(
        entry
            .trials
            .iter()
            .all(|t| t.ok && t.measured_s.unwrap() > 0.0)
    );
    // The tuned result equals the default schedule's.
    autotune::set_mode(Some(Mode::Off));
    close(&tmm(&a, &b).unwrap(), &y1);
    autotune::clear_search_space("tmm");
}

#[test]
fn a_grown_space_retimes_only_new_candidates() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let (a, b) = inputs();
    tmm(&a, &b).unwrap();
    autotune::search_space(
        "tmm",
        SearchSpace::new()
            .tiles([
                (32, 32, 32),
                (64, 64, 32),
                (32, 64, 64),
                (128, 128, 64),
                (64, 32, 32),
            ])
            .strategy(Strategy::Grid)
            .trial(quick()),
    );
    let t = autotune::trials_run();
    tmm(&a, &b).unwrap();
    assert_eq!(autotune::trials_run() - t, 1);
    autotune::clear_search_space("tmm");
}

#[test]
fn save_then_load_round_trip() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let (a, b) = inputs();
    let y = tmm(&a, &b).unwrap();
    let saved = autotune::entries();
    let shipped = dir.path().join("shipped.json");
    assert_eq!(autotune::save_cache(&shipped).unwrap(), saved.len());
    // Another "machine": an empty cache folder, then the shipped file.
    let other = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(other.path().to_path_buf()));
    assert!(autotune::entries().is_empty());
    assert_eq!(autotune::load_cache(&shipped).unwrap(), saved.len());
    assert_eq!(autotune::entries(), saved);
    let t = autotune::trials_run();
    close(&tmm(&a, &b).unwrap(), &y);
    assert_eq!(autotune::trials_run() - t, 0);
    autotune::clear_search_space("tmm");
}

fn broken_file_retunes(contents: impl Fn(&str) -> Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    // A valid file first, to corrupt.
    setup(dir.path());
    let (a, b) = inputs();
    let reference = tmm(&a, &b).unwrap();
    let good = std::fs::read_to_string(cache_file(dir.path())).unwrap();
    std::fs::write(cache_file(dir.path()), contents(&good)).unwrap();
    // Cached mode: a warning, the default schedule, no crash, nothing timed.
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::set_mode(Some(Mode::Cached));
    let (w, t) = (autotune::warnings(), autotune::trials_run());
    close(&tmm(&a, &b).unwrap(), &reference);
    assert_eq!(autotune::warnings() - w, 1);
    assert_eq!(autotune::trials_run(), t);
    // Full mode: a retune, and the file is valid again.
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::enable(true);
    let t = autotune::trials_run();
    close(&tmm(&a, &b).unwrap(), &reference);
    assert_eq!(autotune::trials_run() - t, 4);
    let text = std::fs::read_to_string(cache_file(dir.path())).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    // Repaired once, not retuned forever: a fresh read of the folder finds every entry.
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    let (w, t) = (autotune::warnings(), autotune::trials_run());
    close(&tmm(&a, &b).unwrap(), &reference);
    assert_eq!(autotune::trials_run() - t, 0);
    assert_eq!(autotune::warnings() - w, 0);
    // load_cache of a broken file is an error that changes nothing.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, contents(&good)).unwrap();
    let before = autotune::entries();
    assert!(autotune::load_cache(&bad).is_err());
    assert_eq!(autotune::entries(), before);
    autotune::clear_search_space("tmm");
}

#[test]
fn corrupt_cache_warns_and_retunes() {
    let _g = serial();
    broken_file_retunes(|_| b"{ this is not json".to_vec());
}

#[test]
fn truncated_cache_warns_and_retunes() {
    let _g = serial();
    broken_file_retunes(|good| good.as_bytes()[..good.len() / 2].to_vec());
}

#[test]
fn old_version_cache_warns_and_retunes() {
    let _g = serial();
    broken_file_retunes(|good| {
        good.replacen("\"format\": 1", "\"format\": 0", 1)
            .into_bytes()
    });
    let _ = serial;
}

#[test]
fn non_utf8_cache_is_repaired() {
    let _g = serial();
    broken_file_retunes(|good| {
        let mut b = good.as_bytes().to_vec();
        b[good.len() / 3] = 0xff;
        b
    });
}

#[test]
fn wrong_schema_cache_is_repaired() {
    let _g = serial();
    broken_file_retunes(|_| {
        format!(
            "{{\"format\": 1, \"tessera\": \"{}\", \"entries\": [1, 2]}}",
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes()
    });
}

#[test]
fn load_cache_of_a_missing_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let e = autotune::load_cache(&missing).unwrap_err();
    assert!(e.to_string().contains("missing.json"), "{e}");
    let e: tessera::Error = e.into();
    assert!(
        matches!(&e, tessera::Error::Cache { path, .. } if *path == missing),
        "{e:?}"
    );
}

#[test]
fn wrong_schedule_in_file_is_never_trusted_blindly() {
    // A hand-edited entry naming a schedule that does not parse: the default runs.
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let (a, b) = inputs();
    let y = tmm(&a, &b).unwrap();
    let good = std::fs::read_to_string(cache_file(dir.path())).unwrap();
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let best = v["entries"].as_object().unwrap().values().next().unwrap()["best"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(
        cache_file(dir.path()),
        good.replace(&best, "schedule matmul tile=[banana]"),
    )
    .unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::set_mode(Some(Mode::Cached));
    close(&tmm(&a, &b).unwrap(), &y);
    autotune::clear_search_space("tmm");
}

#[test]
fn cached_mode_never_times_or_writes() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    autotune::set_mode(Some(Mode::Cached));
    let (a, b) = inputs();
    let t = autotune::trials_run();
    tmm(&a, &b).unwrap();
    assert_eq!(autotune::trials_run(), t);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    autotune::clear_search_space("tmm");
}

#[test]
fn nearby_shape_borrows_the_nearest_winner_then_is_refined_on_request() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    autotune::refine().unwrap(); // launches queued by other tests
    let (a, b) = inputs();
    tmm(&a, &b).unwrap();
    // 72×50×90 is 0.04 doublings away: cached mode borrows, times nothing, writes nothing new,
    // and queues the launch.
    autotune::set_mode(Some(Mode::Cached));
    let a2 = Tensor::<f32>::randn(&[72, 50], 3);
    let n = autotune::entries().len();
    let t = autotune::trials_run();
    let y = tmm(&a2, &b).unwrap();
    assert_eq!((autotune::trials_run(), autotune::entries().len()), (t, n));
    let pending = autotune::pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(
        pending[0].starts_with("tmm(f32[72x50],f32[50x90])@"),
        "{pending:?}"
    );
    // The same shape again: a memoised decision, not queued twice.
    tmm(&a2, &b).unwrap();
    assert_eq!(autotune::pending().len(), 1);
    autotune::set_mode(Some(Mode::Off));
    close(&y, &tmm(&a2, &b).unwrap());
    // On request: tuned on the copied arguments (the mode stays `cached` for everyone else).
    autotune::set_mode(Some(Mode::Cached));
    let t = autotune::trials_run();
    assert_eq!(autotune::refine().unwrap(), 1);
    assert!(
        autotune::trials_run() >= t + 4,
        "every candidate of the grid"
    );
    assert!(autotune::pending().is_empty());
    assert_eq!(autotune::mode(), Mode::Cached);
    let key = autotune::entries()
        .into_keys()
        .find(|k| k.starts_with("tmm#") && k.ends_with("/1x72x90x50"))
        .expect("the refined shape's entry");
    assert!(autotune::entry(&key).unwrap().best.is_some());
    assert!(
        std::fs::read_to_string(cache_file(dir.path()))
            .unwrap()
            .contains(&key)
    );
    // Later launches run its own entry: zero trials, nothing queued, same numbers.
    let t = autotune::trials_run();
    close(&tmm(&a2, &b).unwrap(), &y);
    assert_eq!(autotune::trials_run(), t);
    assert!(autotune::pending().is_empty());
    // Full mode tunes a new shape right away, the borrowed winner first; nothing is queued.
    autotune::enable(true);
    let a3 = Tensor::<f32>::randn(&[66, 50], 4);
    tmm(&a3, &b).unwrap();
    assert_eq!(autotune::entries().len(), n + 2);
    assert!(autotune::pending().is_empty());
    autotune::clear_search_space("tmm");
}

#[test]
fn background_refinement_tunes_a_borrowed_shape() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    autotune::refine().unwrap();
    let (a, b) = inputs();
    tmm(&a, &b).unwrap();
    autotune::set_mode(Some(Mode::Cached));
    autotune::set_background(Some(true));
    let a2 = Tensor::<f32>::randn(&[68, 50], 5);
    let n = autotune::entries().len();
    let t = autotune::trials_run();
    let y = tmm(&a2, &b).unwrap();
    autotune::wait_background();
    autotune::set_background(None);
    assert!(autotune::trials_run() >= t + 4);
    assert!(autotune::pending().is_empty());
    assert_eq!(autotune::entries().len(), n + 1);
    assert!(
        autotune::entries()
            .keys()
            .any(|k| k.starts_with("tmm#") && k.ends_with("/1x68x90x50"))
    );
    // The borrowed schedule's output was right too.
    autotune::set_mode(Some(Mode::Off));
    close(&y, &tmm(&a2, &b).unwrap());
    autotune::clear_search_space("tmm");
}

#[test]
fn a_borrowed_tile_launch_is_refined_on_request() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::refine().unwrap();
    let space = TileSpace::grid(&[("BR", &[1, 4, 16]), ("BC", &[32, 128])]).trial(quick());
    let run = |rows: usize, seed: u64| {
        let x = Tensor::<f32>::randn(&[rows, 100], seed);
        let mut y = Tensor::<f32>::randn(&[rows, 100], seed + 1);
        tscale::DEF
            .launch_tuned(
                &space,
                &mut [Arg::In(x.arg()), Arg::Out(y.arg_mut().unwrap())],
            )
            .unwrap();
        for (v, x) in y.as_slice().unwrap().iter().zip(x.as_slice().unwrap()) {
            assert_eq!(*v, 2.0 * x);
        }
    };
    autotune::enable(true);
    run(33, 1);
    autotune::set_mode(Some(Mode::Cached));
    let t = autotune::trials_run();
    run(40, 3);
    assert_eq!(autotune::trials_run(), t);
    assert_eq!(autotune::pending().len(), 1);
    assert!(autotune::pending()[0].starts_with("tscale(f32[40x100],f32[40x100])@"));
    assert_eq!(autotune::refine().unwrap(), 1);
    assert!(autotune::trials_run() > t);
    assert!(
        autotune::entries()
            .keys()
            .any(|k| k.starts_with("tscale#") && k.ends_with("/40x100x40x100"))
    );
    autotune::set_mode(Some(Mode::Off));
}

tessera::tile! {
    /// `y = 2x`, blocked by rows and columns.
    fn tscale<const BR: i64 = 4, const BC: i64 = 64>(x: In<f32, 2>, y: Out<f32, 2>)
        grid = (cdiv(x.dim(0), BR), cdiv(x.dim(1), BC))
    {
        let i = program_id(0) * BR;
        let j = program_id(1) * BC;
        store(y, [i, j], load(x, [i, j], [BR, BC]) * 2.0);
    }
}

#[test]
fn concurrent_writers_keep_every_entry() {
    use autotune::cache::{Entry, merge, read};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cpu-test.json");
    let entry = |k: usize| Entry {
        kernel: format!("k{k}"),
        family: "f".into(),
        shape: vec![k as u64],
        default: "d".into(),
        best: Some("d".into()),
        strategy: "grid".into(),
        trials: vec![],
    };
    std::thread::scope(|s| {
        for t in 0..8 {
            let path = path.clone();
            s.spawn(move || {
                for i in 0..10 {
                    let k = t * 10 + i;
                    merge(&path, "cpu-test", [(format!("key{k}"), entry(k))]).unwrap();
                }
            });
        }
    });
    let f = read(&path, "cpu-test").unwrap();
    assert_eq!(f.entries.len(), 80);
    // No temp files are left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
}

/// Child half of `concurrent_processes_keep_every_entry`: merges 20 entries into the file
/// named by `TESSERA_TEST_CHILD_CACHE`. A no-op when run by the normal test harness.
#[test]
fn child_writer() {
    let Ok(path) = std::env::var("TESSERA_TEST_CHILD_CACHE") else {
        return;
    };
    let who = std::env::var("TESSERA_TEST_CHILD_ID").unwrap();
    for i in 0..20 {
        let e = autotune::cache::Entry {
            kernel: format!("p{who}"),
            family: "f".into(),
            shape: vec![i],
            default: "d".into(),
            best: None,
            strategy: "grid".into(),
            trials: vec![],
        };
        autotune::cache::merge(
            std::path::Path::new(&path),
            "cpu-test",
            [(format!("{who}/{i}"), e)],
        )
        .unwrap();
    }
}

#[test]
fn concurrent_processes_keep_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cpu-test.json");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|id| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_writer", "--test-threads=1"])
                .env("TESSERA_TEST_CHILD_CACHE", &path)
                .env("TESSERA_TEST_CHILD_ID", id.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let f = autotune::cache::read(&path, "cpu-test").unwrap();
    assert_eq!(f.entries.len(), 80);
}

tessera::tile! {
    /// A matmul with a planted bug: the K loop steps by `BK` but always loads 32 columns, so
    /// any `BK > 32` skips part of K — and is faster, since it does less work.
    fn buggy_mm<const BM: i64 = 32, const BN: i64 = 32, const BK: i64 = 32>(a: In<f32, 2>, b: In<f32, 2>, c: Out<f32, 2>)
        grid = (cdiv(a.dim(0), BM), cdiv(b.dim(1), BN), 1)
    {
        let i = program_id(0) * BM;
        let j = program_id(1) * BN;
        let mut acc = zeros::<f32>([BM, BN]);
        for k in range(0, a.dim(1), BK) {
            acc = dot(load(a, [i, k], [BM, 32]), load(b, [k, j], [32, BN]), acc);
        }
        store(c, [i, j], acc);
    }
}

#[test]
fn planted_wrong_candidate_is_rejected() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::enable(true);
    let a = Tensor::<f32>::randn(&[96, 256], 1);
    let b = Tensor::<f32>::randn(&[256, 64], 2);
    let mut c = Tensor::<f32>::zeros(&[96, 64]).unwrap();
    let space = TileSpace::grid(&[("BM", &[32]), ("BN", &[32]), ("BK", &[32, 64, 256])])
        .strategy(Strategy::Grid)
        .trial(quick());
    let knobs = buggy_mm::DEF
        .launch_tuned(
            &space,
            &mut [
                Arg::In(a.arg()),
                Arg::In(b.arg()),
                Arg::Out(c.arg_mut().unwrap()),
            ],
        )
        .unwrap();
    assert_eq!(knobs[2], ("BK".to_string(), 32));
    let e = autotune::entries();
    let entry = e.values().find(|e| e.kernel == "buggy_mm").unwrap();
    let rejected: Vec<_> = entry.trials.iter().filter(|t| !t.ok).collect();
    assert_eq!(rejected.len(), 2, "{:?}", entry.trials);
    assert!(
        rejected
            .iter()
            .all(|t| t.measured_s.is_none() && t.note.contains("wrong output"))
    );
    // The result is the correct product.
    let mut want = Tensor::<f32>::zeros(&[96, 64]).unwrap();
    buggy_mm::DEF
        .launch(
            &[],
            &mut [
                Arg::In(a.arg()),
                Arg::In(b.arg()),
                Arg::Out(want.arg_mut().unwrap()),
            ],
        )
        .unwrap();
    close(&c, &want);
}

#[tessera::kernel]
fn tlin(
    x: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    tanh(x.matmul(w) + b)
}

/// Normal values scaled by 0.2, so `tanh` is not saturated.
fn scaled(shape: &[usize], seed: u64) -> Tensor<f32> {
    let t = Tensor::<f32>::randn(shape, seed);
    Tensor::from_vec(
        t.as_slice().unwrap().iter().map(|v| v * 0.2).collect(),
        shape,
    )
    .unwrap()
}

/// `tanh(x · w + b)` in f64.
fn tlin_reference(x: &Tensor<f32>, w: &Tensor<f32>, b: &Tensor<f32>) -> Vec<f64> {
    let (m, k, n) = (x.shape()[0], x.shape()[1], w.shape()[1]);
    let (xs, ws, bs) = (
        x.as_slice().unwrap(),
        w.as_slice().unwrap(),
        b.as_slice().unwrap(),
    );
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| xs[i * k + p] as f64 * ws[p * n + j] as f64)
                .sum();
            out.push((dot + bs[j] as f64).tanh());
        }
    }
    out
}

fn check_tlin(y: &Tensor<f32>, want: &[f64]) {
    assert_eq!(y.as_slice().unwrap().len(), want.len());
    for (g, w) in y.as_slice().unwrap().iter().zip(want) {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{g} vs {w}"
        );
    }
}

fn fusion_entry() -> autotune::Entry {
    autotune::entries()
        .into_values()
        .find(|e| e.kernel == "tlin" && e.family.contains(".fusion/"))
        .expect("a fusion-depth entry")
}

#[test]
fn fusion_depth_is_searched_checked_and_cached() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::search_space(
        "tlin",
        SearchSpace::new()
            .tiles([(32, 32, 32), (64, 64, 32)])
            .strategy(Strategy::Grid)
            .trial(quick()),
    );
    autotune::enable(true);
    let x = Tensor::<f32>::randn(&[37, 45], 11);
    let w = scaled(&[45, 29], 12);
    let b = Tensor::<f32>::randn(&[29], 13);
    let want = tlin_reference(&x, &w, &b);
    let t0 = autotune::trials_run();
    check_tlin(&tlin(&x, &w, &b).unwrap(), &want);
    assert!(autotune::trials_run() > t0);
    // `add` and `tanh` fuse into the matmul: depths 2 (the default), 0 and 1 are three plans,
    // each timed whole and checked against the default's output.
    let e = fusion_entry();
    let names: Vec<&str> = e.trials.iter().map(|t| t.candidate.as_str()).collect();
    assert_eq!(e.default, "fusion_depth=2");
    for d in ["fusion_depth=2", "fusion_depth=0", "fusion_depth=1"] {
        assert!(names.contains(&d), "{d} missing from {names:?}");
    }
    assert!(e.trials.iter().all(|t| t.ok && t.measured_s.is_some()));
    assert!(e.trials.iter().all(|t| t.predicted_s > 0.0));
    // The cost model sees the intermediates' round trips on the CPU: deeper predicts faster.
    let pred = |c: &str| e.record(c).unwrap().predicted_s;
    assert!(pred("fusion_depth=2") < pred("fusion_depth=1"));
    assert!(pred("fusion_depth=1") < pred("fusion_depth=0"));
    // The chosen plan's kernels were tuned under keys naming the plan.
    let best = e.best.clone().unwrap();
    let tag = match best.as_str() {
        "fusion_depth=2" => ".k0/".to_string(),
        d => format!(".f{}/", d.trim_start_matches("fusion_depth=")),
    };
    assert!(
        autotune::entries()
            .values()
            .any(|e| e.kernel == "tlin" && e.family.contains(&tag)),
        "no kernel entry tagged {tag} for {best}"
    );
    // A second launch: zero trials, same result.
    let t1 = autotune::trials_run();
    check_tlin(&tlin(&x, &w, &b).unwrap(), &want);
    assert_eq!(autotune::trials_run() - t1, 0);
    autotune::clear_search_space("tlin");
    autotune::set_mode(None);
}

#[test]
fn a_shallower_plan_from_the_cache_runs_correctly() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(dir.path().to_path_buf()));
    autotune::search_space(
        "tlin",
        SearchSpace::new()
            .tiles([(32, 32, 32)])
            .fusion_depths([0])
            .strategy(Strategy::Grid)
            .trial(quick()),
    );
    autotune::enable(true);
    let x = Tensor::<f32>::randn(&[20, 33], 21);
    let w = scaled(&[33, 40], 22);
    let b = Tensor::<f32>::randn(&[40], 23);
    let want = tlin_reference(&x, &w, &b);
    check_tlin(&tlin(&x, &w, &b).unwrap(), &want);
    // Only the asked depth besides the default.
    let e = fusion_entry();
    assert_eq!(e.trials.len(), 2);
    // Ship a cache whose winner is the unfused plan (as another machine might find).
    let path = dir.path().join("shipped.json");
    autotune::save_cache(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (_, entry) in v["entries"].as_object_mut().unwrap() {
        if entry["family"].as_str().unwrap().contains(".fusion/") {
            entry["best"] = "fusion_depth=0".into();
        }
    }
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    let other = tempfile::tempdir().unwrap();
    autotune::set_cache_dir(Some(other.path().to_path_buf()));
    assert!(autotune::load_cache(&path).unwrap() > 0);
    // Three kernels now (matmul, add, tanh): their schedules are tuned under `.f0` keys.
    check_tlin(&tlin(&x, &w, &b).unwrap(), &want);
    let f0: Vec<String> = autotune::entries()
        .values()
        .filter(|e| e.kernel == "tlin" && e.family.contains(".f0/"))
        .map(|e| e.family.clone())
        .collect();
    assert_eq!(f0.len(), 3, "{f0:?}");
    autotune::clear_search_space("tlin");
    autotune::set_mode(None);
}

#[test]
fn the_simulator_checks_every_candidate_and_the_model_ranks_them() {
    use tessera::Device;
    use tessera::ir::target::ptx::Arch;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let dev = Device::sim_arch(Arch::Sm80);
    let a = Tensor::<f32>::randn(&[40, 24], 31);
    let b = Tensor::<f32>::randn(&[24, 36], 32);
    autotune::set_mode(Some(Mode::Off));
    let want = tmm(&a, &b).unwrap();
    autotune::enable(true);
    let t0 = autotune::trials_run();
    let (ad, bd) = (a.clone().to(&dev).unwrap(), b.clone().to(&dev).unwrap());
    let got = tmm(&ad, &bd).unwrap();
    assert!(autotune::trials_run() > t0);
    close(&got.to(&Device::Cpu).unwrap(), &want);
    drop((a, b));
    // The entries live under the simulator's arch id, never the CPU's or a GPU's.
    let sim = autotune::entries_for("sim-sm_80");
    let e = sim
        .values()
        .find(|e| e.kernel == "tmm")
        .expect("a sim entry");
    assert!(e.family.ends_with("/sim-sm_80"), "{}", e.family);
    assert!(
        !autotune::entries()
            .values()
            .any(|x| x.family.contains("sim-"))
    );
    // Every candidate ran on the simulator and passed the check; none has a time.
    assert!(e.trials.len() >= 4, "{:?}", e.trials);
    for t in &e.trials {
        assert!(t.ok, "{} failed: {}", t.candidate, t.note);
        assert!(t.measured_s.is_none());
        assert!(t.note.contains("not timed"), "{}", t.note);
    }
    // The winner is the best-predicted of those the cost model (A100 row) accepts; pruned
    // predictions are stored as -1 (the default's three 64 KB f32 stages exceed A100's 163 KB
    // per block: it still runs, as the reference, with the two that fit).
    let best = e
        .trials
        .iter()
        .filter(|t| t.predicted_s >= 0.0)
        .min_by(|x, y| x.predicted_s.total_cmp(&y.predicted_s))
        .unwrap();
    assert_eq!(
        e.best.as_deref(),
        Some(best.candidate.as_str()),
        "{:?}",
        e.trials
    );
    let file = dir.path().join("sim-sm_80.json");
    assert!(file.exists(), "no {}", file.display());
    // Second launch: zero trials, same result.
    let t1 = autotune::trials_run();
    let again = tmm(&ad, &bd).unwrap();
    assert_eq!(autotune::trials_run() - t1, 0);
    close(&again.to(&Device::Cpu).unwrap(), &want);
    autotune::clear_search_space("tmm");
    autotune::set_mode(None);
}
