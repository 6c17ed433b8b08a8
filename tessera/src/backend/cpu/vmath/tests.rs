//! Accuracy and behaviour tests against f64 references (std f64 functions;
//! erf/erfc from an f64 series / continued fraction, since std has no stable
//! f64 erf). Random inputs come from an inline SplitMix64 generator.
//! Run with `--nocapture` to see the measured error tables.

use super::*;

// ---------------------------------------------------------------- rng ----

pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(super) fn uniform(&mut self, a: f64, b: f64) -> f32 {
        (a + (b - a) * self.unit()) as f32
    }
    /// Random sign, magnitude log-uniform in [lo, hi].
    fn logu(&mut self, lo: f64, hi: f64) -> f32 {
        let m = (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp();
        let s = if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        (s * m) as f32
    }
}

// ---------------------------------------------------------- references ----

/// erf(x) for |x| < 3 by the all-positive-terms series
/// erf(x) = 2x/√π · e^{-x²} · Σ (2x²)^n / (1·3·…·(2n+1)).
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = 1.0;
    let mut sum = 1.0;
    let mut n = 0.0;
    while term > 1e-18 * sum {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 * x / std::f64::consts::PI.sqrt() * (-x2).exp() * sum
}

/// erfc(x) for x >= 2 by the continued fraction
/// erfc(x) = e^{-x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …)))).
fn erfc_cf(x: f64) -> f64 {
    let mut f = x;
    for n in (1..400).rev() {
        f = x + (n as f64 * 0.5) / f;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

fn erfc_ref(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else if x < 0.0 {
        2.0 - erfc_ref(-x)
    } else if x < 2.5 {
        1.0 - erf_series(x)
    } else {
        erfc_cf(x)
    }
}

fn erf_ref(x: f64) -> f64 {
    if x.abs() < 2.5 {
        erf_series(x)
    } else {
        (1.0 - erfc_cf(x.abs())).copysign(x)
    }
}

fn sigmoid_ref(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn gelu_ref(x: f64) -> f64 {
    0.5 * x * erfc_ref(-x / std::f64::consts::SQRT_2)
}

#[test]
fn erf_reference_self_consistent() {
    // The two independent f64 evaluations must agree where both converge.
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let x = rng.uniform(2.0, 3.0) as f64;
        let a = 1.0 - erf_series(x);
        let b = erfc_cf(x);
        assert!(((a - b) / b).abs() < 1e-10, "x={x} series={a} cf={b}");
    }
}

// ------------------------------------------------------------ measuring ----

/// Size of one f32 ulp at the magnitude of `r` (subnormal spacing below the
/// normal range).
fn ulp_of(r: f64) -> f64 {
    let e = ((r.abs().to_bits() >> 52) & 0x7FF) as i32 - 1023;
    2f64.powi(e.max(-126) - 23)
}

#[derive(Default)]
struct Stats {
    max_ulp: f64,
    max_rel: f64,
    worst_ulp_x: f32,
    max_sub_ulp: f64, // results in the subnormal range (absolute, in 2^-149)
    n: usize,
    failures: Vec<String>,
}

impl Stats {
    /// Records one result. `ok` decides pass/fail from (ulp, rel).
    fn add(&mut self, x: f32, got: f32, r: f64, ok: &dyn Fn(f64, f64, bool, f64) -> bool) {
        self.n += 1;
        let r32 = r as f32;
        if r.is_nan() || r32.is_infinite() {
            let good = if r.is_nan() { got.is_nan() } else { got == r32 };
            if !good && self.failures.len() < 10 {
                self.failures
                    .push(format!("x={x:e} got={got:e} want={r32:e}"));
            }
            return;
        }
        let err = (got as f64 - r).abs();
        let ulp = err / ulp_of(r);
        let rel = if r != 0.0 {
            err / r.abs()
        } else if err == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        let sub = r.abs() < f32::MIN_POSITIVE as f64;
        if sub {
            self.max_sub_ulp = self.max_sub_ulp.max(ulp);
        } else {
            if ulp > self.max_ulp {
                self.max_ulp = ulp;
                self.worst_ulp_x = x;
            }
            self.max_rel = self.max_rel.max(rel);
        }
        if (!ok(ulp, rel, sub, r.abs()) || got.is_nan()) && self.failures.len() < 10 {
            self.failures.push(format!(
                "x={x:e} got={got:e} want={r:e} ulp={ulp:.2} rel={rel:.2e}"
            ));
        }
    }
}

type Kernel = fn(&mut [f32]);

/// All instantiations of an element-wise kernel available on this CPU.
macro_rules! variants {
    ($m:ident, $public:ident) => {{
        let mut v: Vec<(&'static str, Kernel)> = vec![
            ("public", $public as Kernel),
            ("portable", $m::portable as Kernel),
        ];
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if dispatch::has_avx2_fma() {
            v.push(("avx2+fma", |x: &mut [f32]| unsafe { $m::avx2(x) }));
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if dispatch::has_avx512() {
            v.push(("avx512f", |x: &mut [f32]| unsafe { $m::avx512(x) }));
        }
        v
    }};
}

/// Smallest subnormal f32, 2^-149.
const DENORM: f64 = 1.401_298_464_324_817e-45;

/// Criterion for results in the subnormal range, where relative error is
/// meaningless: `|err| <= rel_tol * |ref| + 2^-149`.
fn sub_ok(ulp: f64, rel_tol: f64, aref: f64) -> bool {
    ulp * DENORM <= rel_tol * aref + DENORM
}

/// Default criterion from the spec: within 3 ulp or relative error <= 4e-7
/// for normal results; subnormal results per [`sub_ok`] with 4e-7.
fn spec_ok(ulp: f64, rel: f64, sub: bool, aref: f64) -> bool {
    if sub {
        sub_ok(ulp, 4e-7, aref)
    } else {
        ulp <= 3.0 || rel <= 4e-7
    }
}

fn check(
    name: &str,
    vars: Vec<(&'static str, Kernel)>,
    inputs: &[f32],
    reference: fn(f64) -> f64,
    ok: &dyn Fn(f64, f64, bool, f64) -> bool,
) {
    let mut all_fail = Vec::new();
    for (vname, f) in vars {
        let mut y = inputs.to_vec();
        f(&mut y);
        let mut st = Stats::default();
        for (&x, &g) in inputs.iter().zip(&y) {
            st.add(x, g, reference(x as f64), ok);
        }
        println!(
            "{name:8} {vname:9} n={:7} max_ulp={:6.3} (x={:e}) max_rel={:.3e} subnormal_max_ulp={:.3}",
            st.n, st.max_ulp, st.worst_ulp_x, st.max_rel, st.max_sub_ulp
        );
        for f in st.failures {
            all_fail.push(format!("{name}/{vname}: {f}"));
        }
    }
    assert!(all_fail.is_empty(), "{}", all_fail.join("\n"));
}

/// A generator of one random input.
type Gen<'a> = &'a dyn Fn(&mut Rng) -> f32;

fn inputs(seed: u64, parts: &[(usize, Gen)]) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut v = Vec::new();
    for (n, g) in parts {
        for _ in 0..*n {
            v.push(g(&mut rng));
        }
    }
    v
}

// -------------------------------------------------------------- accuracy ----

#[test]
fn exp_accuracy() {
    let x = inputs(
        1,
        &[
            (200_000, &|r| r.uniform(-110.0, 95.0)),
            (50_000, &|r| r.uniform(-1.0, 1.0)),
            (50_000, &|r| r.logu(1e-38, 1.0)),
            (20_000, &|r| r.uniform(87.0, 89.0)),
            (50_000, &|r| r.uniform(-105.0, -85.0)),
        ],
    );
    check("exp", variants!(k_exp, exp), &x, f64::exp, &spec_ok);
}

#[test]
fn log_accuracy() {
    let x = inputs(
        2,
        &[
            // every positive finite float, uniform over bit patterns (covers subnormals)
            (200_000, &|r| {
                f32::from_bits(1 + (r.next_u64() % 0x7F7F_FFFF) as u32)
            }),
            (50_000, &|r| r.uniform(0.5, 2.0)),
            (50_000, &|r| 1.0 + r.logu(1e-7, 1e-2)),
            (50_000, &|r| r.uniform(0.0, 100.0)),
        ],
    );
    check("log", variants!(k_log, log), &x, f64::ln, &spec_ok);
}

#[test]
fn tanh_accuracy() {
    let x = inputs(
        3,
        &[
            (200_000, &|r| r.uniform(-12.0, 12.0)),
            (100_000, &|r| r.logu(1e-38, 100.0)),
            (50_000, &|r| r.uniform(-1.0, 1.0)),
        ],
    );
    check("tanh", variants!(k_tanh, tanh), &x, f64::tanh, &spec_ok);
}

#[test]
fn sigmoid_accuracy() {
    let x = inputs(
        4,
        &[
            (200_000, &|r| r.uniform(-110.0, 110.0)),
            (100_000, &|r| r.logu(1e-38, 100.0)),
            (100_000, &|r| r.uniform(-20.0, 20.0)),
        ],
    );
    check(
        "sigmoid",
        variants!(k_sigmoid, sigmoid),
        &x,
        sigmoid_ref,
        &spec_ok,
    );
}

#[test]
fn erf_accuracy() {
    let x = inputs(
        5,
        &[
            (200_000, &|r| r.uniform(-6.0, 6.0)),
            (100_000, &|r| r.logu(1e-38, 100.0)),
            (100_000, &|r| r.uniform(-1.5, 1.5)),
        ],
    );
    check("erf", variants!(k_erf, erf), &x, erf_ref, &spec_ok);
}

#[test]
fn gelu_accuracy() {
    // Spec: relative error <= 1e-6 for normal results (also x < 0);
    // subnormal results: |err| <= 1e-6 |ref| + 2^-149.
    let ok = |ulp: f64, rel: f64, sub: bool, aref: f64| {
        if sub {
            sub_ok(ulp, 1e-6, aref)
        } else {
            rel <= 1e-6
        }
    };
    let x = inputs(
        6,
        &[
            (200_000, &|r| r.uniform(-16.0, 16.0)),
            (100_000, &|r| r.uniform(-100.0, 100.0)),
            (100_000, &|r| r.logu(1e-38, 100.0)),
            (50_000, &|r| r.uniform(-6.0, -4.0)),
        ],
    );
    check("gelu", variants!(k_gelu, gelu), &x, gelu_ref, &ok);
}

/// Each `gelu` variant gives every element of `x` the bits it gives that element alone
/// (a one-element call takes the scalar remainder path).
fn gelu_lanes_match_one_by_one(x: &[f32]) {
    for (vname, f) in variants!(k_gelu, gelu) {
        let mut y = x.to_vec();
        f(&mut y);
        for (&a, &b) in x.iter().zip(&y) {
            let mut one = [a];
            f(&mut one);
            assert_eq!(one[0].to_bits(), b.to_bits(), "{vname} gelu({a:e})");
        }
    }
}

/// The central range's interval edges `k/2` (k = 0..=16: `-4.5` is the switch to the `exp`
/// form, `8` to `gelu(x) = x`) and their neighbouring floats, both signs, in vectors mixed
/// with lanes of the other forms: within the accuracy spec, and each element's bits equal
/// to the kernel applied to that element alone (the scalar remainder path).
#[test]
fn gelu_interval_edges() {
    let mut x = Vec::new();
    for k in 0..=16 {
        let e = k as f32 / 2.0;
        for d in -3i32..=3 {
            let v = f32::from_bits((e.to_bits() as i32 + d).max(0) as u32);
            x.extend([v, -v, 9.0 - v, v - 7.5, v + 2.0, -v - 1.0]);
        }
    }
    let ok = |ulp: f64, rel: f64, sub: bool, aref: f64| {
        if sub {
            sub_ok(ulp, 1e-6, aref)
        } else {
            rel <= 1e-6
        }
    };
    check("gelu", variants!(k_gelu, gelu), &x, gelu_ref, &ok);
    gelu_lanes_match_one_by_one(&x);
}

/// Every vector path gives each element the bits of the kernel applied to that element alone
/// (the scalar `gelu1` remainder path): a block inside |x| < 3.9, where whole vectors take the
/// central form with no lane needing the wider table or the `exp` form (AVX2's single-permute
/// branch), then inputs over every range as in `gelu_accuracy`.
#[test]
fn gelu_vector_lanes_equal_the_scalar_path() {
    let mut x = inputs(44, &[(4096, &|r| r.uniform(-3.9, 3.9))]);
    x.extend(inputs(
        45,
        &[
            (20_000, &|r| r.uniform(-16.0, 16.0)),
            (5_000, &|r| r.logu(1e-38, 100.0)),
            (5_000, &|r| r.uniform(-6.0, -4.0)),
        ],
    ));
    gelu_lanes_match_one_by_one(&x);
}

/// `gelu_into` (source read in the loop) gives `gelu`'s bits at every length and offset.
#[test]
fn gelu_into_matches_gelu() {
    let mut rng = Rng(41);
    let src: Vec<f32> = (0..200).map(|_| rng.uniform(-12.0, 12.0)).collect();
    for off in 0..4 {
        for n in 0..=150 {
            let s = &src[off..off + n];
            let mut want = s.to_vec();
            gelu(&mut want);
            let mut got = vec![f32::NAN; n];
            gelu_into(s, &mut got);
            for i in 0..n {
                assert_eq!(got[i].to_bits(), want[i].to_bits(), "n={n} off={off} i={i}");
            }
        }
    }
}

#[test]
fn sqrt_rsqrt_accuracy() {
    let x = inputs(
        7,
        &[
            (200_000, &|r| {
                f32::from_bits(1 + (r.next_u64() % 0x7F7F_FFFF) as u32)
            }),
            (50_000, &|r| r.uniform(0.0, 4.0)),
        ],
    );
    // sqrt must be correctly rounded (<= 0.5 ulp); rsqrt = 1/sqrt has two
    // correctly rounded steps, so <= 1.5 ulp.
    check(
        "sqrt",
        variants!(k_sqrt, sqrt),
        &x,
        f64::sqrt,
        &|u, _, _, _| u <= 0.5,
    );
    check(
        "rsqrt",
        variants!(k_rsqrt, rsqrt),
        &x,
        |v| 1.0 / v.sqrt(),
        &|u, _, _, _| u <= 1.5,
    );
}

// -------------------------------------------------------------- specials ----

#[test]
fn specials() {
    let all: Vec<(&str, Vec<(&'static str, Kernel)>)> = vec![
        ("exp", variants!(k_exp, exp)),
        ("log", variants!(k_log, log)),
        ("tanh", variants!(k_tanh, tanh)),
        ("sigmoid", variants!(k_sigmoid, sigmoid)),
        ("erf", variants!(k_erf, erf)),
        ("gelu", variants!(k_gelu, gelu)),
        ("sqrt", variants!(k_sqrt, sqrt)),
        ("rsqrt", variants!(k_rsqrt, rsqrt)),
    ];
    let inf = f32::INFINITY;
    for (name, vars) in all {
        for (vname, f) in vars {
            // Pad to 37 elements so both the vector body and the tail run.
            let run = |v: f32| -> f32 {
                let mut a = [v; 37];
                f(&mut a);
                assert_eq!(
                    a[0].to_bits(),
                    a[36].to_bits(),
                    "{name}/{vname} body vs tail at {v}"
                );
                a[0]
            };
            let tag = format!("{name}/{vname}");
            assert!(run(f32::NAN).is_nan(), "{tag}: NaN in must give NaN");
            match name {
                "exp" => {
                    for v in [89.0, 100.0, 1e30, inf] {
                        assert_eq!(run(v), inf, "{tag}({v})");
                    }
                    for v in [-104.0, -1000.0, -1e30, -inf] {
                        assert_eq!(run(v), 0.0, "{tag}({v})");
                    }
                    assert_eq!(run(0.0), 1.0, "{tag}(0)");
                    assert!(run(88.7).is_finite() && run(-100.0) > 0.0, "{tag} edges");
                }
                "log" => {
                    assert_eq!(run(0.0), -inf, "{tag}(0)");
                    assert_eq!(run(-0.0), -inf, "{tag}(-0)");
                    assert_eq!(run(inf), inf, "{tag}(inf)");
                    assert_eq!(run(1.0), 0.0, "{tag}(1)");
                    for v in [-1.0, -1e-40, -inf] {
                        assert!(run(v).is_nan(), "{tag}({v})");
                    }
                }
                "tanh" => {
                    for v in [10.0f32, 20.0, 100.0, 1e30, inf] {
                        assert_eq!(run(v), 1.0, "{tag}({v})");
                        assert_eq!(run(-v), -1.0, "{tag}(-{v})");
                    }
                    assert_eq!(run(-0.0).to_bits(), (-0.0f32).to_bits(), "{tag}(-0)");
                }
                "sigmoid" => {
                    for v in [-104.0f32, -200.0, -1e30, -inf] {
                        assert_eq!(run(v), 0.0, "{tag}({v})");
                    }
                    for v in [20.0f32, 100.0, 1e30, inf] {
                        assert_eq!(run(v), 1.0, "{tag}({v})");
                    }
                    assert_eq!(run(0.0), 0.5, "{tag}(0)");
                }
                "erf" => {
                    for v in [4.0f32, 10.0, 1e30, inf] {
                        assert_eq!(run(v), 1.0, "{tag}({v})");
                        assert_eq!(run(-v), -1.0, "{tag}(-{v})");
                    }
                    assert_eq!(run(-0.0).to_bits(), (-0.0f32).to_bits(), "{tag}(-0)");
                }
                "gelu" => {
                    assert_eq!(run(inf), inf, "{tag}(inf)");
                    assert_eq!(run(-inf), 0.0, "{tag}(-inf)");
                    assert_eq!(run(-1e30), 0.0, "{tag}(-1e30)");
                    assert_eq!(run(1e30), 1e30, "{tag}(1e30)");
                    assert_eq!(run(0.0), 0.0, "{tag}(0)");
                }
                "sqrt" => {
                    assert_eq!(run(inf), inf);
                    assert!(run(-1.0).is_nan());
                    assert_eq!(run(0.0), 0.0);
                }
                "rsqrt" => {
                    assert_eq!(run(inf), 0.0);
                    assert!(run(-1.0).is_nan());
                    assert_eq!(run(0.0), inf);
                }
                _ => unreachable!(),
            }
        }
    }
}

/// Slice lengths 0..=80 at every alignment: the vector body and the scalar
/// tail must agree bit-for-bit with applying the kernel element by element.
#[test]
fn lengths_and_tails() {
    let mut rng = Rng(99);
    let src: Vec<f32> = (0..100).map(|_| rng.uniform(-20.0, 20.0)).collect();
    let kernels: Vec<Vec<(&'static str, Kernel)>> = vec![
        variants!(k_exp, exp),
        variants!(k_log, log),
        variants!(k_tanh, tanh),
        variants!(k_sigmoid, sigmoid),
        variants!(k_erf, erf),
        variants!(k_gelu, gelu),
        variants!(k_sqrt, sqrt),
        variants!(k_rsqrt, rsqrt),
    ];
    for vars in kernels {
        for (vname, f) in vars {
            for off in 0..4 {
                for n in 0..=80 {
                    let mut a = src[off..off + n].to_vec();
                    f(&mut a);
                    for (i, &v) in a.iter().enumerate() {
                        let mut one = [src[off + i]];
                        f(&mut one);
                        assert!(
                            one[0].to_bits() == v.to_bits() || (one[0].is_nan() && v.is_nan()),
                            "{vname} n={n} off={off} i={i}"
                        );
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------ reductions ----

type Red = fn(&[f32]) -> f32;

macro_rules! rvariants {
    ($m:ident, $public:ident) => {{
        let mut v: Vec<(&'static str, Red)> = vec![
            ("public", $public as Red),
            ("portable", $m::portable as Red),
        ];
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if dispatch::has_avx2_fma() {
            v.push(("avx2+fma", |x: &[f32]| unsafe { $m::avx2(x) }));
        }
        v
    }};
}

const U: f64 = 1.0 / (1u64 << 24) as f64; // f32 unit roundoff

#[test]
fn sum_accuracy() {
    let mut rng = Rng(11);
    let mut worst = 0.0f64;
    for (vname, f) in rvariants!(k_sum, sum) {
        assert_eq!(f(&[]), 0.0);
        for t in 0..300 {
            let n = if t < 100 {
                t
            } else {
                (rng.next_u64() % 20_000) as usize
            };
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    if t % 2 == 0 {
                        rng.uniform(-1.0, 1.0)
                    } else {
                        rng.uniform(0.0, 1000.0)
                    }
                })
                .collect();
            let r: f64 = x.iter().map(|&v| v as f64).sum();
            let a: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            let err = (f(&x) as f64 - r).abs();
            // Each of 32 lanes sums n/32 terms sequentially, then a 5-level tree.
            let bound = ((n / 32) as f64 + 7.0) * U * a;
            assert!(err <= bound, "{vname} n={n} err={err:e} bound={bound:e}");
            if a > 0.0 {
                worst = worst.max(err / (U * a));
            }
        }
    }
    println!("sum: worst |err| = {worst:.2} * u * sum|x|");
}

#[test]
fn sum_kahan_accuracy() {
    let mut rng = Rng(12);
    let mut worst_ulp = 0.0f64;
    for (vname, f) in rvariants!(k_sum_kahan, sum_kahan) {
        assert_eq!(f(&[]), 0.0);
        for t in 0..300 {
            let n = if t < 100 {
                t
            } else {
                (rng.next_u64() % 50_000) as usize
            };
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    if t % 2 == 0 {
                        rng.uniform(-1.0, 1.0)
                    } else {
                        rng.uniform(0.0, 1000.0)
                    }
                })
                .collect();
            let r: f64 = x.iter().map(|&v| v as f64).sum();
            let a: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            let err = (f(&x) as f64 - r).abs();
            // Compensated summation (Higham): |err| <= (2u + O(n u^2)) sum|x|;
            // for same-sign data that is 2u|sum| + O(n u^2) sum|x|, i.e. the
            // length-independent accuracy a plain sum cannot reach.
            let nu2 = 4.0 * n as f64 * U * U * a;
            let bound = if t % 2 == 1 {
                2.0 * U * r.abs() + nu2
            } else {
                2.0 * U * a + nu2
            };
            assert!(err <= bound, "{vname} n={n} err={err:e} bound={bound:e}");
            if r != 0.0 {
                worst_ulp = worst_ulp.max(err / ulp_of(r));
            }
        }
        // 1 followed by many tiny terms: a plain f32 sum drops them all.
        let mut x = vec![1.0f32];
        x.extend((0..200_000).map(|_| rng.uniform(0.5e-8, 1.5e-8)));
        let r: f64 = x.iter().map(|&v| v as f64).sum();
        let k = f(&x) as f64;
        let naive = x.iter().fold(0.0f32, |s, &v| s + v) as f64;
        println!("{vname}: 1+tiny: ref={r} kahan={k} naive_sequential={naive}");
        assert!((k - r).abs() <= ulp_of(r), "{vname} kahan={k} ref={r}");
        // Infinities fall back to IEEE semantics.
        assert_eq!(f(&[1.0, f32::INFINITY, 2.0]), f32::INFINITY);
        assert!(f(&[1.0, f32::INFINITY, f32::NEG_INFINITY]).is_nan());
        assert!(f(&[1.0, f32::NAN]).is_nan());
    }
    println!("sum_kahan: worst error = {worst_ulp:.3} ulp of the exact sum");
}

#[test]
fn max_behaviour() {
    let mut rng = Rng(13);
    for (vname, f) in rvariants!(k_max, max) {
        assert_eq!(f(&[]), f32::NEG_INFINITY, "{vname} empty");
        assert_eq!(f(&[f32::NEG_INFINITY; 40]), f32::NEG_INFINITY);
        for t in 0..400 {
            let n = if t < 150 {
                t + 1
            } else {
                1 + (rng.next_u64() % 5000) as usize
            };
            let mut x: Vec<f32> = (0..n).map(|_| rng.uniform(-1e6, -1.0)).collect();
            let want = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(f(&x), want, "{vname} n={n}");
            // A single NaN anywhere (body or tail, first or last) poisons.
            let pos = (rng.next_u64() % n as u64) as usize;
            x[pos] = f32::NAN;
            assert!(f(&x).is_nan(), "{vname} n={n} nan at {pos}");
            x[pos] = f32::INFINITY;
            assert_eq!(f(&x), f32::INFINITY, "{vname} n={n}");
        }
    }
}
