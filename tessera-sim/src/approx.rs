//! Results of the `.approx` instructions. By default the simulator computes each exactly
//! (in f64) and rounds once to f32, which is within every documented bound. With
//! [`crate::Options::perturb_approx`] it moves the result deterministically (a hash of the
//! seed, the PTX line and the input bits) to a different value *within the PTX ISA's
//! documented maximum error*, so a test sees the kind of error a GPU produces:
//!
//! | instruction | documented maximum error (PTX ISA 9.0) | perturbation |
//! |---|---|---|
//! | `ex2.approx.f32` | 2 ulp from the correctly rounded result | ±1 or ±2 ulp from it |
//! | `lg2.approx.f32` | absolute 2^-22 for x in (0.5, 2), relative 2^-22 elsewhere | absolute / relative, 1/2 to 1 of the bound less the final rounding |
//! | `sin.approx.f32`, `cos.approx.f32` | absolute 2^-20.5 in [-2π, 2π], 2^-14.7 in [-100π, 100π] | absolute, 1/2 to 1 of the bound less the rounding; none outside [-100π, 100π] (no guarantee there) |
//! | `tanh.approx.f32` | relative 2^-11 | relative, 1/2 to 1 of the bound less the rounding |
//! | `rsqrt.approx.f32` | relative 2^-22.9 | relative, 1/2 to 1 of the bound less the rounding |
//! | `rcp.approx.f32` | 1 ulp | the other neighbour of the exact value (error < 1 ulp; exact results unchanged) |
//! | `sqrt.approx.f32` | relative 2^-23 | the other neighbour of the exact value (error < 1 ulp ≤ 2^-23 relative) |
//! | `div.approx.f32`, `div.full.f32` | 2 ulp | ±1 ulp from the correctly rounded result |
//!
//! Results the ISA fixes exactly (±0, ±Inf, NaN, and 1 for `ex2(±0)`) are never moved.

/// An instruction with `.approx` (or `.full`) semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fn {
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
    Rsqrt,
    Rcp,
    Sqrt,
    Div,
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `y` moved by `k` ulps (same sign), or `y` if that leaves the finite numbers.
fn step(y: f32, k: i32) -> f32 {
    let b = y.to_bits() as i64;
    let mag = (b & 0x7fff_ffff) + k as i64;
    if !(0..0x7f80_0000).contains(&mag) {
        return y;
    }
    f32::from_bits(((b & !0x7fff_ffff) | mag) as u32)
}

/// The neighbour of the exact `x` that round-to-nearest does not pick.
fn other_neighbour(x: f64) -> f32 {
    let r = x as f32;
    if r as f64 == x || !r.is_finite() {
        return r;
    }
    let toward = if (r as f64) < x { 1 } else { -1 };
    let sign = if r < 0.0 { -toward } else { toward };
    let o = step(r, sign);
    if o == 0.0 && r != 0.0 && o.is_sign_negative() != r.is_sign_negative() {
        return r;
    }
    o
}

/// The f32 result of `f` whose exact value is `exact` (input bits in `key`).
pub(crate) fn result(f: Fn, x: f32, exact: f64, key: u64, seed: Option<u64>) -> f32 {
    let cr = exact as f32;
    let Some(seed) = seed else { return cr };
    if !cr.is_finite() || cr == 0.0 || !x.is_finite() || x == 0.0 {
        return cr;
    }
    if f == Fn::Tanh && x.is_subnormal() {
        return cr;
    }
    let h = splitmix(seed ^ splitmix(key));
    let sign = if h & 1 == 0 { 1.0 } else { -1.0 };
    // u in [0.5, 1)
    let u = 0.5 + ((h >> 11) as f64 / (1u64 << 53) as f64) * 0.5;
    let rel = |bound: f64| -> f32 { (exact * (1.0 + sign * u * (bound - 2f64.powi(-23)))) as f32 };
    let abs = |bound: f64| -> f32 { (exact + sign * u * (bound - 2f64.powi(-24))) as f32 };
    match f {
        Fn::Ex2 => step(cr, if h & 2 == 0 { 1 } else { 2 } * sign as i32),
        Fn::Div => step(cr, sign as i32),
        Fn::Rcp | Fn::Sqrt => other_neighbour(exact),
        Fn::Rsqrt => rel(2f64.powf(-22.9)),
        Fn::Tanh => rel(2f64.powi(-11)),
        Fn::Lg2 if x > 0.5 && x < 2.0 => abs(2f64.powi(-22)),
        Fn::Lg2 => rel(2f64.powi(-22)),
        Fn::Sin | Fn::Cos => {
            let ax = (x as f64).abs();
            if ax <= 2.0 * std::f64::consts::PI {
                abs(2f64.powf(-20.5))
            } else if ax <= 100.0 * std::f64::consts::PI {
                abs(2f64.powf(-14.7))
            } else {
                cr
            }
        }
    }
}
