//! The error table of `docs/numerics.md`: every library kernel × dtype × numerics policy, max
//! relative error against an f64 reference, measured here on the CPU backend and on the PTX
//! simulator (`Device::sim()`, small shapes to keep the test fast). The test fails if any error
//! on either backend exceeds its bound, or if the page's table names other bounds than this
//! file. Regenerate the page's
//! table (measured column included) with
//!
//!     TESSERA_BLESS=1 cargo test --test numerics_table
//!
//! Error measure: `max_i |got_i − want_i| / max_i |want_i|` (normwise), where `want` is the
//! f64 result on the inputs as stored in the dtype (so input rounding is not counted; the
//! kernel's arithmetic and the final rounding to the output dtype are).

use tessera::numerics::{self, NumericsPolicy};
use tessera::{DType, Device, Float, Tensor, bf16, f16};
use tessera_workspace::reference::{self, rel_error};

#[tessera::kernel]
fn row_sum<T: Float>(x: Tensor<T, (R, C)>) -> Tensor<f32, (R,)> {
    sum(x, 1)
}

const POLICIES: [NumericsPolicy; 3] = [
    NumericsPolicy::Fast,
    NumericsPolicy::Deterministic,
    NumericsPolicy::KahanSum,
];

/// The bound of a kernel returning `out` (f32 accumulation everywhere, then one rounding).
fn bound(kernel: &str, out: DType, policy: NumericsPolicy) -> f64 {
    if kernel == "sum (ill-conditioned)" {
        // |Σx| is ~10^-3 of Σ|x| over 10^5 terms: only compensation keeps f32 accuracy.
        return if policy == NumericsPolicy::KahanSum {
            1e-6
        } else {
            1e-1
        };
    }
    match out {
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        _ => 8e-3,
    }
}

fn ill_conditioned(rows: usize, cols: usize) -> Vec<f32> {
    // splitmix64, seeded.
    let mut s = 0x7AB1_Eu64;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    };
    let mut v = Vec::with_capacity(rows * cols);
    while v.len() < rows * cols {
        let a = ((0.5 + next()) * 2f64.powi((next() * 24.0) as i32 - 12)) as f32;
        let a = if next() < 0.5 { a } else { -a };
        v.push(a);
        v.push((-(a as f64) * (1.0 + 1e-3 * (next() - 0.3))) as f32);
    }
    v.truncate(rows * cols);
    v
}

/// The shapes measured on `dev`: `(rows, cols, matmul k, ill-conditioned rows, its terms)`.
/// The simulator runs every thread of the PTX on the CPU, so it gets small shapes that still
/// straddle tile edges (100 columns, k = 48).
fn shapes(dev: &Device) -> (usize, usize, usize, usize, usize) {
    match dev {
        Device::Cpu => (64, 1000, 512, 8, 100_000),
        _ => (8, 100, 48, 2, 4000),
    }
}

/// `(kernel, dtype, policy, error)` for every library kernel at `T` on `dev`.
fn measure<T: Float>(dev: &Device) -> Vec<(String, DType, NumericsPolicy, f64)> {
    let (r, c, k, ir, ic) = shapes(dev);
    let on = |t: Tensor<T>| t.to(dev).unwrap();
    let x = on(Tensor::<T>::randn(&[r, c], 1));
    let y = on(Tensor::<T>::randn(&[r, c], 2));
    let g = on(Tensor::<T>::randn(&[c], 3));
    let b = on(Tensor::<T>::randn(&[c], 4));
    let a = on(Tensor::<T>::randn(&[r, k], 5));
    let w = on(Tensor::<T>::randn(&[k, c], 6));
    let bias = Tensor::<f32>::randn(&[c], 7).to(dev).unwrap();
    let (xv, yv, gv, bv) = (
        x.to_f64_vec().unwrap(),
        y.to_f64_vec().unwrap(),
        g.to_f64_vec().unwrap(),
        b.to_f64_vec().unwrap(),
    );
    let rows = |f: &dyn Fn(&[f64]) -> Vec<f64>| -> Vec<f64> { xv.chunks(c).flat_map(f).collect() };
    let mm = reference::matmul(&a.to_f64_vec().unwrap(), &w.to_f64_vec().unwrap(), r, k, c);
    let biasv = bias.to_f64_vec().unwrap();
    let want: Vec<(&str, Vec<f64>)> = vec![
        ("add", xv.iter().zip(&yv).map(|(p, q)| p + q).collect()),
        (
            "mul",
            xv.iter().enumerate().map(|(j, p)| p * gv[j % c]).collect(),
        ),
        ("gelu", xv.iter().map(|p| reference::gelu(*p)).collect()),
        ("softmax", rows(&|row| reference::softmax(row, c))),
        (
            "layernorm",
            rows(&|row| {
                let n = row.len() as f64;
                let m = row.iter().sum::<f64>() / n;
                let v = row.iter().map(|p| (p - m).powi(2)).sum::<f64>() / n;
                row.iter()
                    .enumerate()
                    .map(|(j, p)| (p - m) / (v + 1e-5).sqrt() * gv[j] + bv[j])
                    .collect()
            }),
        ),
        (
            "rmsnorm",
            rows(&|row| {
                let ms = row.iter().map(|p| p * p).sum::<f64>() / row.len() as f64;
                row.iter()
                    .enumerate()
                    .map(|(j, p)| p / (ms + 1e-6).sqrt() * gv[j])
                    .collect()
            }),
        ),
        ("matmul", mm.clone()),
        (
            "linear_bias_gelu",
            mm.iter()
                .enumerate()
                .map(|(j, v)| reference::gelu(v + biasv[j % c]))
                .collect(),
        ),
        ("sum", rows(&|row| vec![row.iter().sum::<f64>()])),
    ];
    let mut out = Vec::new();
    for p in POLICIES {
        let got = numerics::policy(p, || -> tessera::Result<Vec<(DType, Vec<f64>)>> {
            // every result must have been computed on `dev`, not fallen back to the host
            let t = |t: Tensor<T>| {
                assert_eq!(t.device(), dev, "result not on {dev:?}");
                (T::DTYPE, t.to_f64_vec().unwrap())
            };
            Ok(vec![
                t(tessera_kernels::add(&x, &y)?),
                t(tessera_kernels::mul(&x, &g)?),
                t(tessera_kernels::gelu(&x)?),
                t(tessera_kernels::softmax(&x)?),
                t(tessera_kernels::layernorm(&x, &g, &b)?),
                t(tessera_kernels::rmsnorm(&x, &g)?),
                t(tessera_kernels::matmul(&a, &w)?),
                t(tessera_kernels::linear_bias_gelu(&a, &w, &bias)?),
                {
                    let s = row_sum(&x)?;
                    assert_eq!(s.device(), dev, "row_sum not on {dev:?}");
                    (DType::F32, s.to_f64_vec().unwrap())
                },
            ])
        })
        .unwrap_or_else(|e| panic!("{} under {p} on {dev:?}: {e}", T::DTYPE));
        for ((name, w), (_, g)) in want.iter().zip(got) {
            out.push((name.to_string(), T::DTYPE, p, rel_error(&g, w)));
        }
    }
    if T::DTYPE == DType::F32 {
        let (r, c) = (ir, ic);
        let data = ill_conditioned(r, c);
        let x = Tensor::from_vec(data.clone(), &[r, c])
            .unwrap()
            .to(dev)
            .unwrap();
        for p in POLICIES {
            let got = numerics::policy(p, || row_sum(&x))
                .unwrap()
                .to_vec()
                .unwrap();
            // Per row, relative to that row's sum (the ill-conditioned quantity).
            let e = data
                .chunks(c)
                .zip(&got)
                .map(|(row, g)| {
                    let exact: f64 = row.iter().map(|v| *v as f64).sum();
                    (*g as f64 - exact).abs() / exact.abs()
                })
                .fold(0.0, f64::max);
            out.push(("sum (ill-conditioned)".into(), DType::F32, p, e));
        }
    }
    out
}

fn row(kernel: &str, dtype: DType, p: NumericsPolicy) -> String {
    format!("| {kernel} | {dtype} | {p} |")
}

#[test]
fn error_table_within_bounds_and_documented() {
    let all_on = |dev: &Device| {
        let mut all = measure::<f32>(dev);
        all.extend(measure::<bf16>(dev));
        all.extend(measure::<f16>(dev));
        all
    };
    let all = all_on(&Device::cpu());
    let sim = all_on(&Device::sim());
    assert_eq!(all.len(), sim.len());
    let mut table = String::from(
        "| kernel | dtype | policy | cpu: max rel error | sim: max rel error | bound |\n|---|---|---|---|---|---|\n",
    );
    let mut over = Vec::new();
    for ((k, d, p, e), (ks, ds, ps, es)) in all.iter().zip(&sim) {
        assert_eq!((k, d, p), (ks, ds, ps));
        // `sum` returns f32 for every input dtype.
        let out = if k.starts_with("sum") { DType::F32 } else { *d };
        let b = bound(k, out, *p);
        for (dev, e) in [("cpu", e), ("sim", es)] {
            if !(*e <= b) {
                over.push(format!("{k} {d} {p} on {dev}: {e:.2e} > {b:.0e}"));
            }
        }
        table.push_str(&format!(
            "{} {e:.2e} | {es:.2e} | {b:.0e} |\n",
            row(k, *d, *p)
        ));
    }
    eprintln!("{table}");
    assert!(
        over.is_empty(),
        "errors over their bounds:\n{}",
        over.join("\n")
    );

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/numerics.md");
    let doc = std::fs::read_to_string(path).expect("docs/numerics.md");
    let (begin, end) = ("<!-- error-table:begin -->\n", "<!-- error-table:end -->");
    let (Some(i), Some(j)) = (doc.find(begin), doc.find(end)) else {
        panic!("docs/numerics.md lacks the error-table markers");
    };
    if std::env::var_os("TESSERA_BLESS").is_some() {
        let new = format!("{}{begin}{table}{}", &doc[..i], &doc[j..]);
        std::fs::write(path, new).expect("write docs/numerics.md");
        return;
    }
    // The page must list every row with this file's bound, and a measured value within it.
    let documented = &doc[i + begin.len()..j];
    for (k, d, p, _) in &all {
        let out = if k.starts_with("sum") { DType::F32 } else { *d };
        let b = bound(k, out, *p);
        let prefix = row(k, *d, *p);
        let line = documented
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("docs/numerics.md has no row `{prefix}`"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (cpu, sim, doc_bound): (f64, f64, f64) = (
            cells[4].parse().unwrap(),
            cells[5].parse().unwrap(),
            cells[6].parse().unwrap(),
        );
        assert_eq!(
            doc_bound, b,
            "`{prefix}`: the page's bound is not the test's"
        );
        assert!(
            cpu <= b && sim <= b,
            "`{prefix}`: the page's measurement exceeds its bound"
        );
    }
    assert_eq!(
        documented
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| kernel"))
            .count(),
        all.len(),
        "the page's table has rows this test does not measure"
    );
}
