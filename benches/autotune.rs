//! Autotuner sweeps on the CPU backend: for matmul (the `#[kernel]` `tessera_kernels::matmul`,
//! Schedule IR tiles BM, BN, BK ∈ {32, 64, 128, 256}) and depthwise convolution (the `tile!`
//! kernel, BH × BW × BC knobs), at three shapes each:
//!
//! 1. an exhaustive grid search (every candidate timed: warm-up, median), printed as a table
//!    with the default (`D`) and the tuned choice (`*`) marked;
//! 2. the hybrid strategy (cost-model priors + surrogate) from an empty cache: the same table
//!    for the candidates it timed, its pick and its trials;
//! 3. a summary: default and best times (from the exhaustive table), trials used, and the
//!    hybrid's pick vs the exhaustive best **head to head**: both are re-timed in 15
//!    interleaved rounds (each round: one untimed run, then 5 timed runs of each, the order
//!    alternating), and the median over the rounds of each round's ratio is reported — two medians taken minutes apart in different sweeps would compare the
//!    machine's moods, not the schedules. When both picked the same schedule the same duel is
//!    run A against A, and its ratio shows the comparison's noise floor;
//! 4. criterion timings of the default and the tuned schedule side by side: the speed-up of
//!    tuning is the ratio of these two (the summary has no speed-up column, since one sweep
//!    median per candidate is not a speed-up measurement).
//!
//! Run: `cargo bench --bench autotune` (caches go to a temporary folder, not the repo).

use criterion::{BenchmarkId, Criterion};
use tessera::Tensor;
use tessera::autotune::{self, Entry, Mode, SearchSpace, Strategy};
use tessera::ir::{DType, schedule::KernelClass};
use tessera::{Arg, Tensor as T};
use tessera_kernels::conv::{depthwise_conv2d as dw, depthwise_space};

const MM: [(usize, usize, usize); 3] = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024)];
const DW: [(usize, usize, usize, usize); 3] =
    [(58, 58, 128, 3), (114, 114, 64, 3), (32, 32, 256, 5)];

struct Row {
    what: String,
    default_s: f64,
    tuned: String,
    tuned_s: f64,
    hybrid: String,
    hybrid_s: f64,
    hybrid_trials: usize,
    grid_trials: usize,
    /// Head-to-head hybrid / exhaustive-best time.
    duel: f64,
    /// Whether both picked the same schedule (then the duel is an A/A run: the noise floor).
    same: bool,
}

/// Rounds of the head-to-head comparison.
const DUEL_ROUNDS: usize = 15;

/// Times two configurations against each other: `select(side)` switches to side 0 or 1, then
/// `run` is called once untimed and 5 times timed, the sides alternating which goes first.
/// Returns the median over the rounds of each round's ratio of side 1's median to side 0's:
/// the two sides of a round run back to back, so a slow spell of the machine spanning the
/// round cancels.
fn duel(mut select: impl FnMut(usize), mut run: impl FnMut()) -> f64 {
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut ratios = Vec::new();
    for round in 0..DUEL_ROUNDS {
        let mut m = [0.0; 2];
        for k in 0..2 {
            let side = (k + round) % 2;
            select(side);
            run();
            let mut ts = Vec::new();
            for _ in 0..5 {
                let t = std::time::Instant::now();
                run();
                ts.push(t.elapsed().as_secs_f64());
            }
            m[side] = med(&mut ts);
        }
        ratios.push(m[1] / m[0]);
    }
    med(&mut ratios)
}

fn entry_of(kernel: &str) -> Entry {
    autotune::entries()
        .into_values()
        .find(|e| e.kernel == kernel)
        .expect("an entry")
}

fn short(c: &str) -> String {
    c.split_once("tile=").map_or(c.to_string(), |(_, t)| {
        t.split_once(']')
            .map_or(t.to_string(), |(a, _)| format!("{a}]"))
    })
}

fn table(title: &str, e: &Entry) {
    println!("\n### {title}\n\n| candidate | predicted µs | measured µs | note | |");
    println!("|---|---|---|---|---|");
    let mut rows: Vec<_> = e.trials.iter().collect();
    rows.sort_by(|a, b| {
        a.measured_s
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.measured_s.unwrap_or(f64::INFINITY))
    });
    for t in rows {
        let mark = match (
            t.candidate == e.default,
            Some(&t.candidate) == e.best.as_ref(),
        ) {
            (true, true) => "D *",
            (true, false) => "D",
            (false, true) => "*",
            _ => "",
        };
        let m = t
            .measured_s
            .map_or("—".into(), |m| format!("{:.1}", m * 1e6));
        let p = if t.predicted_s < 0.0 {
            "pruned".into()
        } else {
            format!("{:.1}", t.predicted_s * 1e6)
        };
        println!(
            "| {} | {p} | {m} | {} | {mark} |",
            short(&t.candidate),
            t.note
        );
    }
}

fn time_of(e: &Entry, c: &str) -> f64 {
    e.record(c).and_then(|r| r.measured_s).unwrap_or(f64::NAN)
}

fn tuned_trials(e: &Entry) -> usize {
    e.trials
        .iter()
        .filter(|t| t.measured_s.is_some() || !t.ok)
        .count()
}

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn matmul_rows(c: &mut Criterion, rows: &mut Vec<Row>) {
    for (m, k, n) in MM {
        let a = Tensor::<f32>::randn(&[m, k], 1);
        let b = Tensor::<f32>::randn(&[k, n], 2);
        let space = SearchSpace::builtin(KernelClass::Matmul, DType::F32);
        // Exhaustive.
        let gdir = fresh_dir(&format!("mm-grid-{m}"));
        autotune::set_cache_dir(Some(gdir.clone()));
        autotune::enable(true);
        autotune::search_space("matmul_f32", space.clone().strategy(Strategy::Grid));
        tessera_kernels::matmul(&a, &b).unwrap();
        let grid = entry_of("matmul_f32");
        table(&format!("matmul {m}×{k}×{n} (exhaustive)"), &grid);
        // Hybrid from an empty cache.
        let hdir = fresh_dir(&format!("mm-hybrid-{m}"));
        autotune::set_cache_dir(Some(hdir.clone()));
        autotune::search_space("matmul_f32", space.clone().strategy(Strategy::Hybrid));
        tessera_kernels::matmul(&a, &b).unwrap();
        let hyb = entry_of("matmul_f32");
        table(&format!("matmul {m}×{k}×{n} (hybrid)"), &hyb);
        let best = grid.best.clone().unwrap();
        let pick = hyb.best.clone().unwrap();
        autotune::set_mode(Some(Mode::Cached));
        let duel = duel(
            |side| autotune::set_cache_dir(Some([&gdir, &hdir][side].clone())),
            || {
                tessera_kernels::matmul(&a, &b).unwrap();
            },
        );
        rows.push(Row {
            duel,
            same: best == pick,
            what: format!("matmul {m}×{k}×{n}"),
            default_s: time_of(&grid, &grid.default),
            tuned: short(&best),
            tuned_s: time_of(&grid, &best),
            hybrid: short(&pick),
            hybrid_s: time_of(&grid, &pick),
            hybrid_trials: tuned_trials(&hyb),
            grid_trials: tuned_trials(&grid),
        });
        // Criterion: default (tuner off) vs tuned (cached).
        let mut g = c.benchmark_group(format!("autotune_matmul_{m}x{k}x{n}"));
        g.sample_size(10);
        autotune::set_mode(Some(Mode::Off));
        g.bench_function(BenchmarkId::new("default", short(&grid.default)), |bch| {
            bch.iter(|| tessera_kernels::matmul(&a, &b).unwrap())
        });
        autotune::set_mode(Some(Mode::Cached));
        g.bench_function(BenchmarkId::new("tuned", short(&pick)), |bch| {
            bch.iter(|| tessera_kernels::matmul(&a, &b).unwrap())
        });
        g.finish();
        autotune::set_cache_dir(Some(hdir.clone()));
        autotune::clear_search_space("matmul_f32");
    }
}

fn dw_rows(c: &mut Criterion, rows: &mut Vec<Row>) {
    for (h, w, ch, kk) in DW {
        let x = T::<f32>::randn(&[h, w, ch], 1);
        let f = T::<f32>::randn(&[kk, kk, ch], 2);
        let oshape = [h - kk + 1, w - kk + 1, ch];
        let run = |space: &tessera::autotune::TileSpace| {
            let mut y = T::<f32>::zeros(&oshape).unwrap();
            dw::DEF
                .launch_tuned(
                    space,
                    &mut [
                        Arg::In(x.arg()),
                        Arg::In(f.arg()),
                        Arg::Out(y.arg_mut().unwrap()),
                    ],
                )
                .unwrap()
        };
        autotune::set_cache_dir(Some(fresh_dir(&format!("dw-grid-{h}"))));
        autotune::enable(true);
        run(&depthwise_space().strategy(Strategy::Grid));
        let grid = entry_of("depthwise_conv2d");
        table(
            &format!("depthwise {h}×{w}×{ch}, {kk}×{kk} filter (exhaustive)"),
            &grid,
        );
        autotune::set_cache_dir(Some(fresh_dir(&format!("dw-hybrid-{h}"))));
        let knobs = run(&depthwise_space().strategy(Strategy::Hybrid));
        let hyb = entry_of("depthwise_conv2d");
        table(
            &format!("depthwise {h}×{w}×{ch}, {kk}×{kk} filter (hybrid)"),
            &hyb,
        );
        let best = grid.best.clone().unwrap();
        let pick = hyb.best.clone().unwrap();
        let duel = {
            let knobs_of = |t: &str| -> Vec<(String, i64)> {
                t.split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
                    .collect()
            };
            let sides = [knobs_of(&best), knobs_of(&pick)];
            let mut y = T::<f32>::zeros(&oshape).unwrap();
            let side = std::cell::Cell::new(0);
            let mut go = |s: usize| {
                let refs: Vec<(&str, i64)> =
                    sides[s].iter().map(|(n, v)| (n.as_str(), *v)).collect();
                dw::launch_with(&refs, &x, &f, &mut y).unwrap();
            };
            duel(|s| side.set(s), || go(side.get()))
        };
        rows.push(Row {
            duel,
            same: best == pick,
            what: format!("depthwise {h}×{w}×{ch} k{kk}"),
            default_s: time_of(&grid, &grid.default),
            tuned: best.clone(),
            tuned_s: time_of(&grid, &best),
            hybrid: pick.clone(),
            hybrid_s: time_of(&grid, &pick),
            hybrid_trials: tuned_trials(&hyb),
            grid_trials: tuned_trials(&grid),
        });
        let refs: Vec<(&str, i64)> = knobs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let mut g = c.benchmark_group(format!("autotune_depthwise_{h}x{w}x{ch}_k{kk}"));
        g.sample_size(10);
        let mut y = T::<f32>::zeros(&oshape).unwrap();
        g.bench_function(BenchmarkId::new("default", &grid.default), |bch| {
            bch.iter(|| dw::launch(&x, &f, &mut y).unwrap())
        });
        g.bench_function(BenchmarkId::new("tuned", &pick), |bch| {
            bch.iter(|| dw::launch_with(&refs, &x, &f, &mut y).unwrap())
        });
        g.finish();
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut rows = Vec::new();
    // `cargo bench --bench autotune -- matmul` (or `depthwise`) runs one family.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |f: &str| only.is_empty() || only.iter().any(|o| f.contains(o.as_str()));
    if wanted("matmul") {
        matmul_rows(&mut c, &mut rows);
    }
    if wanted("depthwise") {
        dw_rows(&mut c, &mut rows);
    }
    println!(
        "\n## Summary (times from the exhaustive sweep, µs; {} threads)\n",
        rayon::current_num_threads()
    );
    println!(
        "| problem | default | exhaustive best | best µs | hybrid pick | hybrid µs | hybrid / best (head to head) | trials hybrid / grid |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {} | {:.1} | {} | {:.1} | {} | {} / {} |",
            r.what,
            r.default_s * 1e6,
            r.tuned,
            r.tuned_s * 1e6,
            r.hybrid,
            r.hybrid_s * 1e6,
            if r.same {
                format!("same schedule (A/A noise: {:.3})", r.duel)
            } else {
                format!("{:.3}", r.duel)
            },
            r.hybrid_trials,
            r.grid_trials
        );
    }
    println!(
        "\nThe sweep's columns are one median per candidate, taken minutes apart: they rank \
         candidates but are not a speed-up measurement. The default-vs-tuned speed-up is the \
         ratio of criterion's `default` and `tuned` timings printed above for each problem \
         (`tuned` runs the hybrid pick from its cache)."
    );
    autotune::set_mode(None);
    c.final_summary();
}
