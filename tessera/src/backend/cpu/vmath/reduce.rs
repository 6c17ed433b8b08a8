//! Reductions over `&[f32]`: multi-accumulator sum, NaN-propagating max and
//! a lane-wise Kahan-compensated sum. Each uses a fixed array of independent
//! lane accumulators (a whole number of SIMD registers) so that LLVM
//! vectorises the loop without reassociating anything itself; the lanes are
//! combined at the end in a fixed order, so results are deterministic for a
//! given length and instruction set.

use super::arith::Arith;

/// Lanes for `sum` / `max`: 4 AVX registers (8 SSE registers).
pub(crate) const L: usize = 32;
/// Lanes for `sum_kahan` (sum + compensation arrays = 8 AVX registers).
const LK: usize = 32;

/// Pairwise (tree) combination of the lane accumulators.
#[inline(always)]
fn tree<const N: usize>(mut a: [f32; N], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = N;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            a[i] = op(a[i], a[i + w]);
        }
    }
    a[0]
}

/// Body of [`super::sum`]: 32 independent f32 accumulators.
#[inline(always)]
pub(crate) fn sum_body<A: Arith>(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<L>();
    let mut acc = [0.0f32; L];
    for c in chunks {
        for i in 0..L {
            acc[i] += c[i];
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a += v;
    }
    tree(acc, |a, b| a + b)
}

/// NaN-sticky max step: takes `v` if it is larger or NaN; once the
/// accumulator is NaN it stays NaN.
#[inline(always)]
fn max_step(m: f32, v: f32) -> f32 {
    #[allow(clippy::eq_op)]
    let take = v > m || v != v;
    if take { v } else { m }
}

/// Body of [`super::max`].
#[inline(always)]
pub(crate) fn max_body<A: Arith>(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<L>();
    let mut acc = [f32::NEG_INFINITY; L];
    for c in chunks {
        for i in 0..L {
            acc[i] = max_step(acc[i], c[i]);
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a = max_step(*a, v);
    }
    tree(acc, max_step)
}

/// One Kahan step on a lane.
#[inline(always)]
fn kahan_step(s: &mut f32, c: &mut f32, v: f32) {
    let y = v - *c;
    let t = *s + y;
    *c = (t - *s) - y;
    *s = t;
}

/// Body of [`super::sum_kahan`]: 32 lanes, each a Kahan sum with its own
/// compensation; the 32 sums and 32 compensations are then combined with
/// Neumaier's (improved Kahan) summation.
#[inline(always)]
pub(crate) fn sum_kahan_body<A: Arith>(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<LK>();
    let mut s = [0.0f32; LK];
    let mut c = [0.0f32; LK];
    for ch in chunks {
        for i in 0..LK {
            kahan_step(&mut s[i], &mut c[i], ch[i]);
        }
    }
    for ((si, ci), &v) in s.iter_mut().zip(c.iter_mut()).zip(tail) {
        kahan_step(si, ci, v);
    }
    // Neumaier over s[i] and -c[i].
    let mut sum = 0.0f32;
    let mut comp = 0.0f32;
    for v in s.iter().copied().chain(c.iter().map(|&ci| -ci)) {
        let t = sum + v;
        if sum.abs() >= v.abs() {
            comp += (sum - t) + v;
        } else {
            comp += (v - t) + sum;
        }
        sum = t;
    }
    let r = sum + comp;
    if r.is_finite() {
        r
    } else {
        // inf / overflow / NaN inputs poison the compensation terms with
        // `inf - inf`; fall back to the plain IEEE sum (inf, -inf or NaN).
        sum_body::<A>(x)
    }
}
