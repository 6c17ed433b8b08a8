//! `Options::perturb_approx`: `.approx` results move within the PTX ISA's documented error
//! bounds (checked against f64), deterministically per seed; without it they are the exact
//! value rounded once.

use super::rand;
use super::units::one_with;
use crate::Options;

/// Runs `inst %f2, %f1` on each of `xs` (one thread each) and returns the results.
fn run(inst: &str, xs: &[f32], seed: Option<u64>) -> Vec<f32> {
    let body = format!(
        "    ld.global.f32 %f1, [%rd2];\n    {inst} %f2, %f1;\n    st.global.f32 [%rd2], %f2;"
    );
    let init: Vec<u32> = xs.iter().map(|x| x.to_bits()).collect();
    let opts = Options {
        perturb_approx: seed,
        ..Options::default()
    };
    let (r, v) = one_with(&body, xs.len() as u32, xs.len(), Some(&init), &opts);
    let r = r.unwrap_or_else(|e| panic!("{inst}: {e}"));
    assert!(r.is_clean(), "{:#?}", r.findings);
    v.into_iter().map(f32::from_bits).collect()
}

fn ulps(a: f32, b: f32) -> u32 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

enum Bound {
    /// At most this many ulps from the correctly rounded result.
    Ulps(u32),
    Rel(f64),
    Abs(f64),
}

#[test]
fn perturbed_approx_results_stay_within_documented_bounds() {
    let cases: [(&str, fn(f64) -> f64, Vec<f32>, Bound); 5] = [
        (
            "ex2.approx.f32",
            f64::exp2,
            rand(256, 1, 20.0),
            Bound::Ulps(2),
        ),
        (
            "tanh.approx.f32",
            f64::tanh,
            rand(256, 2, 4.0),
            Bound::Rel(2f64.powi(-11)),
        ),
        (
            "rsqrt.approx.f32",
            |x| 1.0 / x.sqrt(),
            rand(256, 3, 50.0).iter().map(|x| x.abs() + 0.01).collect(),
            Bound::Rel(2f64.powf(-22.9)),
        ),
        (
            "sin.approx.f32",
            f64::sin,
            rand(256, 4, 6.0),
            Bound::Abs(2f64.powf(-20.5)),
        ),
        (
            "lg2.approx.f32",
            f64::log2,
            rand(256, 5, 0.7).iter().map(|x| 1.25 + x).collect(),
            Bound::Abs(2f64.powi(-22)),
        ),
    ];
    for (inst, exact, xs, bound) in cases {
        let plain = run(inst, &xs, None);
        let p1 = run(inst, &xs, Some(1));
        let p1_again = run(inst, &xs, Some(1));
        let p2 = run(inst, &xs, Some(2));
        assert_eq!(
            p1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            p1_again.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "{inst}: not deterministic"
        );
        let mut moved = 0;
        for (i, &x) in xs.iter().enumerate() {
            let e = exact(x as f64);
            // unperturbed: within half an ulp of the exact value (rounded once)
            assert!(
                ulps(plain[i], e as f32) == 0,
                "{inst}({x}): {} vs {e}",
                plain[i]
            );
            for p in [p1[i], p2[i]] {
                let ok = match bound {
                    Bound::Ulps(n) => ulps(p, e as f32) <= n,
                    Bound::Rel(b) => ((p as f64 - e) / e).abs() <= b,
                    Bound::Abs(b) => (p as f64 - e).abs() <= b,
                };
                assert!(ok, "{inst}({x}) = {p}, exact {e}: outside the bound");
            }
            moved += (p1[i] != plain[i]) as usize;
        }
        // the option does something: most results move, except for rsqrt, whose bound
        // (2^-22.9 relative) leaves little room beyond the final rounding
        let least = if inst.starts_with("rsqrt") {
            1
        } else {
            xs.len() / 2
        };
        assert!(moved >= least, "{inst}: only {moved} results moved");
        assert_ne!(p1, p2, "{inst}: seeds 1 and 2 agree everywhere");
    }
}
