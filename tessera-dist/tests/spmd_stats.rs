//! Statistics over a split axis (reductions, softmax, layernorm, rmsnorm): the partial-statistics
//! launch (each device reduces its shard, collectives combine the statistics, each device
//! normalises its shard) and the gather-first launch, each forced once, against an f64
//! reference; the collectives observed are the ones the printed plan lists. Sums over shards
//! round differently from the single-device sum, so float inputs are compared with a tolerance
//! from the f64 reference; integer-valued inputs must match bit for bit where the op allows.
//! Each body runs on the CPU and on the PTX simulator.

use tessera::{Device, Tensor};
use tessera_dist::{
    CollectiveKind, DistTensor, LaunchPlan, Mesh, Replicate, Shard, ShardSpec, SpmdArg, Statistics,
    spmd,
};

#[tessera::kernel]
fn sm(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    softmax(x)
}

#[tessera::kernel]
fn ln(x: Tensor<f32, (M, N)>, g: Tensor<f32, (N,)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
    layernorm(x, g, b, 1e-5)
}

#[tessera::kernel]
fn rms(x: Tensor<f32, (M, N)>, g: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
    rmsnorm(x, g, 1e-6)
}

#[tessera::kernel]
fn row_sum(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.sum(1)
}

#[tessera::kernel]
fn row_mean(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.mean(1)
}

#[tessera::kernel]
fn row_max(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    x.amax(1)
}

/// A prefix (the matmul) feeds the softmax, and a suffix (× 2 − 1) follows it.
#[tessera::kernel]
fn mm_softmax_affine(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    softmax(x.matmul(w)) * 2.0 - 1.0
}

/// A non-linear op after a sum over a split axis: the tabled rules would gather.
#[tessera::kernel]
fn exp_row_sum(x: Tensor<f32, (M, N)>) -> Tensor<f32, (M,)> {
    exp(x.sum(1) * 0.125)
}

fn mesh(dev: &Device) -> Mesh {
    Mesh::new([("dp", 2), ("tp", 2)], vec![dev.clone(); 4]).unwrap()
}

/// Integer-valued uniform values in [-4, 4], seeded.
fn ints(shape: &[usize], seed: u64) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 9) as f32 - 4.0
        })
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

fn f64s(t: &Tensor<f32>) -> Vec<f64> {
    t.to_vec().unwrap().iter().map(|&v| v as f64).collect()
}

/// Row-wise reference of a `[m, n]` input.
fn per_row(x: &[f64], n: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    x.chunks(n).flat_map(f).collect()
}

fn softmax_ref(r: &[f64]) -> Vec<f64> {
    let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
    r.iter().map(|v| (v - m).exp() / s).collect()
}

fn layernorm_ref(r: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let n = r.len() as f64;
    let mean = r.iter().sum::<f64>() / n;
    let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    r.iter()
        .enumerate()
        .map(|(j, v)| (v - mean) / (var + eps).sqrt() * g[j] + b[j])
        .collect()
}

fn rmsnorm_ref(r: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let ms = r.iter().map(|v| v * v).sum::<f64>() / r.len() as f64;
    r.iter()
        .enumerate()
        .map(|(j, v)| v / (ms + eps).sqrt() * g[j])
        .collect()
}

/// `got` within `rel` of the f64 reference (relative to its largest magnitude, at least 1).
fn close(got: &Tensor<f32>, want: &[f64], rel: f64, what: &str) {
    let got = f64s(got);
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1.0f64, |a, v| a.max(v.abs()));
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    assert!(
        worst <= rel * scale,
        "{what}: max error {worst:e} > {rel:e} × {scale}"
    );
}

fn bits(t: &Tensor<f32>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Runs `kernel` on `args` with `how` forced; checks the plan it printed is what ran.
fn run(
    launch: tessera_dist::Spmd,
    how: Statistics,
    args: &[&dyn SpmdArg],
) -> (DistTensor<f32>, LaunchPlan) {
    let (y, plan, seen) = launch
        .statistics(how)
        .run_traced::<f32>(args)
        .unwrap_or_else(|e| panic!("{how}: {e}"));
    assert_eq!(
        plan.counts(),
        seen,
        "{how}: collectives seen vs printed\n{plan}"
    );
    match how {
        Statistics::Partial => assert!(plan.stats.is_some(), "{plan}"),
        Statistics::GatherFirst => assert!(plan.stats.is_none(), "{plan}"),
        Statistics::Auto => {}
    }
    (y, plan)
}

fn spec(s: &[&[&str]]) -> ShardSpec {
    ShardSpec::new(s.iter().map(|a| {
        if a.is_empty() {
            Replicate
        } else {
            Shard(a.iter().copied())
        }
    }))
}

/// Softmax, layernorm and rmsnorm with the normalised axis split over tp (rows over dp), even
/// (12 columns) and uneven (7: shards of 4 and 3, so Chan's combination weighs unequal counts):
/// both launches within 1e-5 of f64; the partial launch keeps the input's split and all-reduces
/// (softmax, rmsnorm) or all-gathers (layernorm) only per-row statistics.
fn normalisations_match_f64(dev: &Device) {
    let mesh = mesh(dev);
    for (n, seed) in [(12usize, 1u64), (7, 2)] {
        let m = 6;
        let x = Tensor::<f32>::randn(&[m, n], seed);
        let g = Tensor::<f32>::randn(&[n], seed + 10);
        let b = Tensor::<f32>::randn(&[n], seed + 20);
        let (xv, gv, bv) = (f64s(&x), f64s(&g), f64s(&b));
        let split = spec(&[&["dp"], &["tp"]]);
        let xd = DistTensor::distribute(&x, split.clone(), &mesh).unwrap();
        let gd = DistTensor::distribute(&g, spec(&[&["tp"]]), &mesh).unwrap();
        let bd = DistTensor::distribute(&b, spec(&[&["tp"]]), &mesh).unwrap();
        type Case<'a> = (&'a str, tessera_dist::Spmd, Vec<&'a dyn SpmdArg>, Vec<f64>);
        let cases: Vec<Case<'_>> = vec![
            (
                "softmax",
                spmd(&sm::KERNEL),
                vec![&xd],
                per_row(&xv, n, softmax_ref),
            ),
            (
                "layernorm",
                spmd(&ln::KERNEL),
                vec![&xd, &gd, &bd],
                per_row(&xv, n, |r| layernorm_ref(r, &gv, &bv, 1e-5)),
            ),
            (
                "rmsnorm",
                spmd(&rms::KERNEL),
                vec![&xd, &gd],
                per_row(&xv, n, |r| rmsnorm_ref(r, &gv, 1e-6)),
            ),
        ];
        for (what, launch, args, want) in cases {
            let (y, plan) = run(launch.clone(), Statistics::Partial, &args);
            assert_eq!(y.spec(), &split, "{what} n={n}\n{plan}");
            let st = plan.stats.as_ref().unwrap();
            assert_eq!(st.axes, ["tp"], "{plan}");
            let c = plan.counts();
            if what == "layernorm" {
                assert_eq!(c.get(CollectiveKind::AllGather), 2 * 2, "{plan}");
            } else {
                assert_eq!(c.get(CollectiveKind::AllGather), 0, "{plan}");
                assert!(c.get(CollectiveKind::AllReduce) >= 2, "{plan}");
            }
            close(
                &y.gather().unwrap(),
                &want,
                1e-5,
                &format!("{what} partial n={n}"),
            );
            let (y, plan) = run(launch, Statistics::GatherFirst, &args);
            assert_eq!(y.spec().dim_axes(1), &[] as &[String], "{plan}");
            close(
                &y.gather().unwrap(),
                &want,
                1e-5,
                &format!("{what} gather n={n}"),
            );
        }
    }
}

/// Sum, mean and max over the split axis with integer-valued inputs: the partial launch equals
/// the single-device launch bit for bit (every partial sum is an exact integer; the mean divides
/// by 16, a power of two), and so does the gather-first launch.
fn reductions_bit_exact(dev: &Device) {
    let mesh = mesh(dev);
    let x = ints(&[6, 16], 3);
    let xd = DistTensor::distribute(&x, spec(&[&["dp"], &["tp"]]), &mesh).unwrap();
    let on = x.clone().to(dev).unwrap();
    let cases = [
        ("sum", spmd(&row_sum::KERNEL), row_sum(&on).unwrap()),
        ("mean", spmd(&row_mean::KERNEL), row_mean(&on).unwrap()),
        ("max", spmd(&row_max::KERNEL), row_max(&on).unwrap()),
    ];
    let xv = f64s(&x);
    for (what, launch, single) in cases {
        // The premise: the single-device result is the exact f64 one.
        let exact: Vec<f64> = per_row(&xv, 16, |r| {
            vec![match what {
                "sum" => r.iter().sum(),
                "mean" => r.iter().sum::<f64>() / 16.0,
                _ => r.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            }]
        });
        assert_eq!(f64s(&single), exact, "{what}");
        for how in [Statistics::Partial, Statistics::GatherFirst] {
            let (y, plan) = run(launch.clone(), how, &[&xd]);
            assert_eq!(y.spec(), &spec(&[&["dp"]]), "{what} {how}\n{plan}");
            assert_eq!(
                bits(&y.gather().unwrap()),
                bits(&single),
                "{what} {how}\n{plan}"
            );
        }
    }
}

/// A kernel cut at its statistics: the matmul runs as a prefix kernel, the softmax from partial
/// statistics, the affine tail as a suffix kernel; and a sum over the split axis followed by
/// `exp` (which the tabled rules gather for) all-reduces the partial sums in the middle.
fn prefix_and_suffix(dev: &Device) {
    let mesh = mesh(dev);
    let (m, k, n) = (6, 5, 12);
    let (x, w) = (
        Tensor::<f32>::randn(&[m, k], 7),
        Tensor::<f32>::randn(&[k, n], 8),
    );
    let xd = DistTensor::distribute(&x, spec(&[&["dp"]]), &mesh).unwrap();
    let wd = DistTensor::distribute(&w, spec(&[&[], &["tp"]]), &mesh).unwrap();
    let (xv, wv) = (f64s(&x), f64s(&w));
    let mut h = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            h[i * n + j] = (0..k).map(|l| xv[i * k + l] * wv[l * n + j]).sum();
        }
    }
    let want: Vec<f64> = per_row(&h, n, softmax_ref)
        .iter()
        .map(|v| v * 2.0 - 1.0)
        .collect();
    for how in [Statistics::Partial, Statistics::GatherFirst] {
        let (y, plan) = run(spmd(&mm_softmax_affine::KERNEL), how, &[&xd, &wd]);
        if how == Statistics::Partial {
            assert_eq!(y.spec(), &spec(&[&["dp"], &["tp"]]), "{plan}");
            let text = plan.to_string();
            assert!(
                text.contains("(prefix)") && text.contains("the rest"),
                "{text}"
            );
        }
        close(
            &y.gather().unwrap(),
            &want,
            1e-5,
            &format!("mm_softmax_affine {how}"),
        );
    }
    let x = Tensor::<f32>::randn(&[6, 16], 9);
    let xd = DistTensor::distribute(&x, spec(&[&["dp"], &["tp"]]), &mesh).unwrap();
    let want = per_row(&f64s(&x), 16, |r| {
        vec![(r.iter().sum::<f64>() * 0.125).exp()]
    });
    for how in [Statistics::Partial, Statistics::GatherFirst] {
        let (y, plan) = run(spmd(&exp_row_sum::KERNEL), how, &[&xd]);
        close(
            &y.gather().unwrap(),
            &want,
            1e-5,
            &format!("exp_row_sum {how}"),
        );
        let ar = plan.counts().get(CollectiveKind::AllReduce);
        let ag = plan.counts().get(CollectiveKind::AllGather);
        match how {
            Statistics::Partial => assert_eq!((ar, ag), (2, 0), "{plan}"),
            _ => assert_eq!((ar, ag), (0, 2), "{plan}"),
        }
    }
}

macro_rules! backend_tests {
    ($($name:ident),*) => {
        mod cpu {
            $(#[test] fn $name() { super::$name(&tessera::Device::Cpu) })*
        }
        mod sim {
            $(#[test] fn $name() { super::$name(&tessera::Device::sim()) })*
        }
    };
}

backend_tests!(
    normalisations_match_f64,
    reductions_bit_exact,
    prefix_and_suffix
);

/// Auto picks the cheaper under the model and prints both costs; the choice flips with the row
/// length on the local mesh (α = 5 µs): short rows gather (one all-gather beats two latency-bound
/// all-reduces), long rows keep their split (gathering moves the whole tensor). The forced
/// launches cost what the choice line says. Asking for partial statistics where no statistics
/// op has a split axis is an error naming the kernel.
#[test]
fn auto_choice_is_printed_and_follows_the_model() {
    let mesh = mesh(&Device::Cpu);
    let split = spec(&[&["dp"], &["tp"]]);
    for (n, partial) in [(256usize, false), (65536, true)] {
        let x = Tensor::<f32>::randn(&[8, n], 4);
        let xd = DistTensor::distribute(&x, split.clone(), &mesh).unwrap();
        let plan = spmd(&sm::KERNEL).plan(&[&xd]).unwrap();
        println!("{plan}");
        let c = plan.choice.clone().expect("both ways considered");
        let gf = c.gather_first_seconds.unwrap();
        assert_eq!(c.partial_seconds < gf, partial, "{plan}");
        assert_eq!(plan.stats.is_some(), partial, "{plan}");
        let text = plan.to_string();
        assert!(text.contains("statistics (auto): partial"), "{text}");
        let chose = if partial {
            "→ partial"
        } else {
            "→ gather first"
        };
        assert!(text.contains(chose), "{text}");
        let forced = |how| spmd(&sm::KERNEL).statistics(how).plan(&[&xd]).unwrap();
        let g = forced(Statistics::GatherFirst);
        assert!((g.modelled_seconds() - gf).abs() <= 1e-12, "{g}");
        let p = forced(Statistics::Partial);
        assert!(
            (p.modelled_seconds() - c.partial_seconds).abs() <= 1e-12,
            "{p}"
        );
        assert!((plan.modelled_seconds() - gf.min(c.partial_seconds)).abs() <= 1e-12);
    }
    // Replicated input: nothing split, so no partial launch exists.
    let x = Tensor::<f32>::randn(&[8, 64], 5);
    let xr = DistTensor::distribute(&x, ShardSpec::replicated(), &mesh).unwrap();
    let e = spmd(&sm::KERNEL)
        .statistics(Statistics::Partial)
        .plan(&[&xr])
        .unwrap_err();
    assert!(e.to_string().contains("`sm`"), "{e}");
}
