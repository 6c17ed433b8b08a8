//! `exp`'s table sequence: accuracy over a dense sweep of `[-104, 89]` against f64, the same
//! bits from every vector form at the fused levels (`exp16`, `exp16_in_range`, the AVX2 and
//! AVX-512 slice kernels, the scalar body), and `exp_fused` still `tessera_ir`'s canonical
//! sequence. Run with `--nocapture` to see the sweep's figures.

use super::arith::{Fused, Plain};
use super::exp::exp1;
use super::tests::Rng;
use super::*;
use proptest::prelude::*;

/// A slice kernel.
type Kernel = fn(&mut [f32]);

/// Every `stride`-th f32 bit pattern of `[-104, -0]` and `[0, 89]`.
fn sweep(stride: u32) -> Vec<f32> {
    let mut v = Vec::new();
    for (a, b) in [(0x8000_0000u32, (-104f32).to_bits()), (0, 89f32.to_bits())] {
        v.extend((a..=b).step_by(stride as usize).map(f32::from_bits));
    }
    v
}

/// (max ulp, mean ulp, fraction correctly rounded) of `f` against f64 `exp` on `x`; the ulp
/// is the spacing of f32 at the reference (`2^-149` below the normal range). Results that
/// overflow must be `+inf`.
fn measure(x: &[f32], f: &dyn Fn(&mut [f32])) -> (f64, f64, f64) {
    let mut y = x.to_vec();
    f(&mut y);
    let (mut max, mut sum, mut exact) = (0f64, 0f64, 0usize);
    for (&x, &y) in x.iter().zip(&y) {
        let r = (x as f64).exp();
        if r as f32 == f32::INFINITY {
            assert_eq!(y, f32::INFINITY, "x={x:e}");
            exact += 1;
            continue;
        }
        let e = ((r.to_bits() >> 52) & 0x7FF) as i32 - 1023;
        let ulp = (y as f64 - r).abs() / 2f64.powi(e.max(-126) - 23);
        assert!(ulp.is_finite(), "x={x:e} y={y:e}");
        max = max.max(ulp);
        sum += ulp;
        exact += usize::from(y.to_bits() == (r as f32).to_bits());
    }
    let n = x.len() as f64;
    (max, sum / n, exact as f64 / n)
}

#[test]
fn exp_dense_sweep_within_one_ulp() {
    // ~2.2 M arguments (every 997th float of the range); the whole range (every float) gave
    // max 0.98 ulp, mean 0.07, 98.1 % correctly rounded (the previous degree-5 sequence:
    // 1.01 ulp, 0.065, 99.2 %).
    let x = sweep(997);
    let mut vars: Vec<(&str, Kernel)> = vec![("portable", k_exp::portable)];
    #[cfg(target_arch = "x86_64")]
    {
        if dispatch::has_avx2_fma() {
            vars.push(("avx2", |x| unsafe { k_exp::avx2(x) }));
        }
        if dispatch::has_avx512() {
            vars.push(("avx512", |x| unsafe { k_exp::avx512(x) }));
        }
    }
    for (name, f) in vars {
        let (max, mean, cr) = measure(&x, &f);
        println!(
            "exp {name}: n={} max {max:.4} ulp, mean {mean:.4}, correctly rounded {cr:.4}",
            x.len()
        );
        assert!(max <= 1.0, "{name}: max {max} ulp");
        assert!(cr >= 0.95, "{name}: correctly rounded {cr}");
    }
}

/// Inputs for the bit-equality tests: random over the whole range and beyond, the single-add
/// form's edges, the clamp edges, the subnormal range, specials.
fn mixed() -> Vec<f32> {
    let mut rng = Rng(12);
    let mut v: Vec<f32> = (0..40_000).map(|_| rng.uniform(-120.0, 100.0)).collect();
    v.extend((0..20_000).map(|_| rng.uniform(-2.0, 2.0)));
    v.extend((0..20_000).map(|_| rng.uniform(-104.5, -85.5)));
    v.extend((0..20_000).map(|_| rng.uniform(86.5, 89.5)));
    for e in [-104f32, -103.98, -87.34, -86.0, 0.0, 87.0, 88.72, 89.0] {
        let b = e.to_bits();
        v.extend((0..64).map(|d| f32::from_bits(b.wrapping_add(d).wrapping_sub(32))));
    }
    v.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        -0.0,
        1e-30,
        -1e-30,
    ]);
    v.extend([
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
    ]);
    v
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn exp_forms_give_the_scalar_bits() {
    let x = mixed();
    let want: Vec<f32> = x.iter().map(|&v| exp1::<Fused>(v)).collect();
    let plain: Vec<f32> = x.iter().map(|&v| exp1::<Plain>(v)).collect();
    let mut y = x.clone();
    k_exp::portable(&mut y);
    assert!(y.iter().zip(&plain).all(|(a, b)| same(*a, *b)), "portable");
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::*;
        if dispatch::has_avx2_fma() {
            let mut y = x.clone();
            unsafe { k_exp::avx2(&mut y) };
            for i in 0..x.len() {
                assert!(
                    same(y[i], want[i]),
                    "avx2 x={:e}: {:e} vs {:e}",
                    x[i],
                    y[i],
                    want[i]
                );
            }
        }
        if dispatch::has_avx512() {
            let mut y = x.clone();
            unsafe { k_exp::avx512(&mut y) };
            for i in 0..x.len() {
                assert!(
                    same(y[i], want[i]),
                    "avx512 x={:e}: {:e} vs {:e}",
                    x[i],
                    y[i],
                    want[i]
                );
            }
            for (c, w) in x.chunks_exact(16).zip(want.chunks_exact(16)) {
                let mut o = [0f32; 16];
                unsafe { _mm512_storeu_ps(o.as_mut_ptr(), exp16(_mm512_loadu_ps(c.as_ptr()))) };
                assert!(o.iter().zip(w).all(|(a, b)| same(*a, *b)), "exp16 {c:?}");
                if c.iter().all(|&v| (EXP16_FAST_LO..=87.0).contains(&v)) {
                    unsafe {
                        _mm512_storeu_ps(
                            o.as_mut_ptr(),
                            exp16_in_range(_mm512_loadu_ps(c.as_ptr())),
                        )
                    };
                    assert!(
                        o.iter().zip(w).all(|(a, b)| same(*a, *b)),
                        "exp16_in_range {c:?}"
                    );
                }
            }
            // Whole in-range vectors at the single-add form's edges.
            for (lo, hi) in [(EXP16_FAST_LO, -80.0), (80.0, 87.0), (-1.0, 1.0)] {
                let mut rng = Rng(lo.to_bits() as u64);
                let c: Vec<f32> = (0..16 * 512).map(|_| rng.uniform(lo as f64, hi)).collect();
                for c in c.chunks_exact(16) {
                    let mut o = [0f32; 16];
                    unsafe {
                        _mm512_storeu_ps(
                            o.as_mut_ptr(),
                            exp16_in_range(_mm512_loadu_ps(c.as_ptr())),
                        )
                    };
                    for (a, &v) in o.iter().zip(c) {
                        assert!(same(*a, exp1::<Fused>(v)), "exp16_in_range x={v:e}");
                    }
                }
            }
        }
    }
}

#[test]
fn exp_fused_is_the_canonical_sequence() {
    let x = mixed();
    let mut y = x.clone();
    exp_fused(&mut y);
    for (&v, &g) in x.iter().zip(&y) {
        assert!(same(g, tessera_ir::canonical::exp(v)), "x={v:e}");
    }
}

/// Results of several forms of `exp` on the same arguments, by name.
type Forms = Vec<(&'static str, Vec<f32>)>;

/// `x` through every form of `exp` at every level this CPU has: the portable slice kernel
/// and `exp1::<Plain>` (the portable level's bits), then the AVX2 and AVX-512 slice kernels,
/// `exp16` and `exp1::<Fused>` (the fused levels' bits).
fn every_form(x: &[f32]) -> (Forms, Forms) {
    let mut y = x.to_vec();
    k_exp::portable(&mut y);
    let plain = vec![
        (
            "exp1::<Plain>",
            x.iter().map(|&v| exp1::<Plain>(v)).collect(),
        ),
        ("portable", y),
    ];
    let mut fused = vec![(
        "exp1::<Fused>",
        x.iter().map(|&v| exp1::<Fused>(v)).collect(),
    )];
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::*;
        if dispatch::has_avx2_fma() {
            let mut y = x.to_vec();
            // SAFETY: AVX2 and FMA were detected.
            unsafe { k_exp::avx2(&mut y) };
            fused.push(("avx2", y));
        }
        if dispatch::has_avx512() {
            let mut y = x.to_vec();
            // SAFETY: AVX-512F, AVX2 and FMA were detected.
            unsafe { k_exp::avx512(&mut y) };
            fused.push(("avx512", y));
            let mut y = vec![0f32; x.len().div_ceil(16) * 16];
            for (i, o) in y.chunks_exact_mut(16).enumerate() {
                let mut c = [0f32; 16];
                let n = (x.len() - 16 * i).min(16);
                c[..n].copy_from_slice(&x[16 * i..16 * i + n]);
                // SAFETY: AVX-512F, AVX2 and FMA were detected; `c` and `o` hold 16 floats.
                unsafe { _mm512_storeu_ps(o.as_mut_ptr(), exp16(_mm512_loadu_ps(c.as_ptr()))) };
            }
            y.truncate(x.len());
            fused.push(("exp16", y));
        }
    }
    (plain, fused)
}

/// The forms of each group give the same bits (NaNs included), and a result is NaN exactly
/// when its argument is.
fn check_every_form(x: &[f32]) -> Result<(), String> {
    let (plain, fused) = every_form(x);
    for group in [plain, fused] {
        let (first, want) = &group[0];
        for (name, got) in &group {
            for (i, &v) in x.iter().enumerate() {
                if got[i].to_bits() != want[i].to_bits() {
                    return Err(format!(
                        "x={v:e} ({:#010x}): {name} {:#010x} vs {first} {:#010x}",
                        v.to_bits(),
                        got[i].to_bits(),
                        want[i].to_bits()
                    ));
                }
                if got[i].is_nan() != v.is_nan() {
                    return Err(format!(
                        "x={:#010x}: {name} gives {:e}",
                        v.to_bits(),
                        got[i]
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn exp_of_every_nan_payload_is_nan_at_every_level() {
    // Quiet and signalling NaNs of both signs, every 61st payload.
    let x: Vec<f32> = (1..1u32 << 23)
        .step_by(61)
        .flat_map(|p| [0x7F80_0000 | p, 0xFF80_0000 | p])
        .map(f32::from_bits)
        .collect();
    check_every_form(&x).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random bit patterns (any f32, NaN exponents, the clamp and single-add ranges).
    #[test]
    fn exp_levels_agree_on_random_bit_patterns(
        bits in proptest::collection::vec(
            prop_oneof![
                any::<u32>(),
                any::<u32>().prop_map(|b| b | 0x7F80_0000),
                (-110f32..95f32).prop_map(f32::to_bits),
                (-87f32..-85f32).prop_map(f32::to_bits),
            ],
            1..80,
        )
    ) {
        let x: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
        if let Err(e) = check_every_form(&x) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Every `stride`-th f32 of `[lo, hi]` (both finite, `lo < hi`), in order.
fn floats(lo: f32, hi: f32, stride: usize) -> Vec<f32> {
    let key = |v: f32| {
        let b = v.to_bits() as i64;
        if b >> 31 == 1 { -(b & 0x7FFF_FFFF) } else { b }
    };
    let from = |k: i64| {
        f32::from_bits(if k < 0 {
            0x8000_0000 | (-k) as u32
        } else {
            k as u32
        })
    };
    (key(lo)..=key(hi)).step_by(stride).map(from).collect()
}

/// `exp_finish` as it was before the two-multiply scale: an integer add of `n1` to the
/// exponent field of `p = pre·e^r`, then a multiply by `2^n2`. `p` is `exp_finish` at `n = 0`
/// (`k = SHIFTER`, both scales 1).
fn exp_finish_exponent_add<A: arith::Arith>(r: f32, k: f32, pre: f32) -> f32 {
    use super::exp::{SHIFTER, exp_finish};
    let p = exp_finish::<A>(r, SHIFTER, pre);
    let ni = (k.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let scale = f32::from_bits((n2.wrapping_add(127) as u32) << 23);
    f32::from_bits(p.to_bits().wrapping_add((n1 as u32) << 23)) * scale
}

/// `exp_finish` and `exp_mid` give the bits of their former exponent-field adds for every
/// non-NaN argument they are used on: `exp_finish` on every f32 at both ends of
/// `[EXP_LO, EXP_HI]` and every 61st elsewhere, with `pre = 1` (`exp_core`, `exp_fused`,
/// sigmoid, erf) and with `pre` of either sign from `2^-40` to `2^40` (gelu's tail passes
/// `erfcx` or `x/2 · erfcx`); `exp_mid` (tanh) on every 61st f32 of `[-87, 87]`.
#[test]
fn exp_scale_by_multiplies_gives_the_exponent_add_bits() {
    use super::exp::{EXP_HI, EXP_LO, exp_finish, exp_mid, exp_reduce};
    fn check<A: arith::Arith>(x: &[f32], pres: &[f32]) {
        for &v in x {
            let v = v.clamp(EXP_LO, EXP_HI);
            let (r, k) = exp_reduce::<A>(v);
            for &pre in pres {
                let (got, want) = (
                    exp_finish::<A>(r, k, pre),
                    exp_finish_exponent_add::<A>(r, k, pre),
                );
                assert_eq!(got.to_bits(), want.to_bits(), "x={v:e} pre={pre:e}");
            }
        }
    }
    let mut x = floats(-105.0, -86.0, 1);
    x.extend(floats(86.0, 90.0, 1));
    x.extend(floats(-86.0, 86.0, 61));
    x.extend([f32::NEG_INFINITY, f32::INFINITY, f32::MAX, f32::MIN]);
    check::<Fused>(&x, &[1.0]);
    check::<Plain>(&x, &[1.0]);
    let mut rng = Rng(15);
    let pres: Vec<f32> = (0..24)
        .map(|i| {
            let m = 2f32.powf(rng.uniform(-40.0, 40.0));
            if i % 2 == 0 { m } else { -m }
        })
        .chain([2f32.powi(-40), -(2f32.powi(40)), 0.5, -7.2])
        .collect();
    let x: Vec<f32> = x.iter().step_by(13).copied().collect();
    check::<Fused>(&x, &pres);
    check::<Plain>(&x, &pres);
    fn check_mid<A: arith::Arith>(v: f32) {
        let (r, k) = exp_reduce::<A>(v);
        let p = exp_finish::<A>(r, SHIFTER_K, 1.0);
        let ni = (k.to_bits() as i32).wrapping_sub(0x4B40_0000);
        let want = f32::from_bits(p.to_bits().wrapping_add((ni as u32) << 23));
        assert_eq!(exp_mid::<A>(v).to_bits(), want.to_bits(), "exp_mid x={v:e}");
    }
    for v in floats(-87.0, 87.0, 61) {
        check_mid::<Fused>(v);
        check_mid::<Plain>(v);
    }
}

/// `k` for `n = 0`.
const SHIFTER_K: f32 = 12_582_912.0;

/// A NaN argument gives NaN from every function built on the canonical `exp` pieces, at every
/// level (quiet and signalling NaNs of both signs, every 61st payload): the exponent-field
/// add made `exp_fused` of `0x7FFFFFFF` `f32::MAX`, and sigmoid and tanh of it finite.
#[test]
fn canonical_exp_users_give_nan_for_every_nan_payload() {
    let x: Vec<f32> = (1..1u32 << 23)
        .step_by(61)
        .chain([0x7F_FFFF, 0x40_0000])
        .flat_map(|p| [0x7F80_0000 | p, 0xFF80_0000 | p])
        .map(f32::from_bits)
        .collect();
    for v in &x {
        assert!(
            tessera_ir::canonical::exp(*v).is_nan(),
            "canonical {:#010x}",
            v.to_bits()
        );
    }
    macro_rules! levels {
        ($m:ident, $public:ident) => {{
            let mut v: Vec<(&'static str, Kernel)> = vec![
                ("public", $public as Kernel),
                ("portable", $m::portable as Kernel),
            ];
            #[cfg(target_arch = "x86_64")]
            if dispatch::has_avx2_fma() {
                // SAFETY: AVX2 and FMA were detected.
                v.push(("avx2", |x: &mut [f32]| unsafe { $m::avx2(x) }));
            }
            #[cfg(target_arch = "x86_64")]
            if dispatch::has_avx512() {
                // SAFETY: AVX-512F, AVX2 and FMA were detected.
                v.push(("avx512", |x: &mut [f32]| unsafe { $m::avx512(x) }));
            }
            v
        }};
    }
    let mut fused: Vec<(&'static str, Kernel)> = vec![("public", exp_fused as Kernel)];
    #[cfg(target_arch = "x86_64")]
    {
        if dispatch::has_avx2_fma() {
            // SAFETY: AVX2 and FMA were detected.
            fused.push(("avx2", |x: &mut [f32]| unsafe { k_exp::canonical_avx2(x) }));
        }
        if dispatch::has_avx512() {
            // SAFETY: AVX-512F, AVX2 and FMA were detected.
            fused.push(("avx512", |x: &mut [f32]| unsafe {
                k_exp::canonical_avx512(x)
            }));
        }
    }
    let all: Vec<(&str, Vec<(&'static str, Kernel)>)> = vec![
        ("exp_fused", fused),
        ("sigmoid", levels!(k_sigmoid, sigmoid)),
        ("tanh", levels!(k_tanh, tanh)),
        ("erf", levels!(k_erf, erf)),
        ("gelu", levels!(k_gelu, gelu)),
    ];
    for (name, vars) in all {
        for (vname, f) in vars {
            let mut y = x.clone();
            f(&mut y);
            for (v, g) in x.iter().zip(&y) {
                assert!(g.is_nan(), "{name}/{vname}({:#010x}) = {g:e}", v.to_bits());
            }
        }
    }
}
