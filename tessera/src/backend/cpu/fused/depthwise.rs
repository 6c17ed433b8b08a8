//! The depthwise convolution ([`super::dwmatch::Depthwise`]) as one pass over the whole
//! output, split over the rayon pool by output rows. The channels-last layout makes output
//! row `oh` (`OW·C` floats) and, for tap `(i, j)`, the input span `x[oh + i, j.., ..]` of the
//! same length contiguous, with the filter tap repeating every `C` floats; each tap's filter
//! row is laid out once per launch, repeated to `C + 64` floats, so the taps of any 64-float
//! block of the output row start at offset `block % C` there. Output rows go in pairs
//! ([`two_rows`]: each input row loaded once for both), a block keeping 64 accumulators per
//! row in registers and adding the taps in the kernel's `(i, j)` order, per element
//! `acc = acc + x·f` from `+0.0` with a separate multiply and add (no FMA): the interpreter's
//! ops in its order, so the result is bit for bit its own at every SIMD level (the vector
//! width only changes how many elements run side by side). A 3×3 filter whose output rows
//! hold at least one vector runs [`dwtaps`] instead (bands of output rows, each input vector
//! loaded once for all of them), with the same per-element arithmetic.

use super::dwmatch::Depthwise;
use super::dwtaps;
use crate::backend::Buffer;
use crate::backend::cpu::simd::{self, SimdLevel};
use rayon::prelude::*;
use tessera_ir::DType;

thread_local! {
    /// Launches on this thread that ran the 3×3 kernel with its taps in registers.
    static TAPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The launching thread's laid-out filter rows, kept between launches.
    static FE: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Filter rows taken from `FE` for one launch, put back when dropped.
struct Held(Vec<f32>);

impl Drop for Held {
    fn drop(&mut self) {
        FE.set(std::mem::take(&mut self.0));
    }
}

impl std::ops::Deref for Held {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.0
    }
}

/// How many launches on this thread ran [`dwtaps`] (see `super::depthwise_tap_launches`).
pub(crate) fn tap_launches() -> u64 {
    TAPS.with(|t| t.get())
}

/// Outputs of fewer floats than this run on the calling thread ([`dwtaps`]): splitting them
/// over the pool costs more than it saves.
const PAR_MIN: usize = 1 << 16;

/// Floats per register block of an output row.
const B: usize = 64;

/// The launch's extents.
#[derive(Clone, Copy)]
struct Geom {
    /// Input width.
    w: usize,
    /// Channels.
    c: usize,
    /// Filter height and width.
    kh: usize,
    kw: usize,
}

/// Runs the whole launch; `false` (nothing written) when the arguments are not whole f32
/// tensors `x [H, W, C]`, `f [KH, KW, C]`, `y [OH, OW, C]` with `OH + KH ≤ H + 1` and
/// `OW + KW ≤ W + 1` (every tap of every output element inside `x`).
pub(crate) fn run(d: &Depthwise, args: &[Buffer]) -> bool {
    let Some((g, [oh, ow, c])) = geometry(d, args) else {
        return false;
    };
    let (xb, fb, yb) = (&args[d.x], &args[d.f], &args[d.y]);
    let n = ow * c;
    if oh * n == 0 {
        return true;
    }
    // SAFETY: whole f32 tensors of these lengths (checked above), valid for the launch; `y`
    // is an output, distinct from the inputs.
    let (x, f, y) = unsafe {
        (
            std::slice::from_raw_parts(xb.ptr as *const f32, xb.len / 4),
            std::slice::from_raw_parts(fb.ptr as *const f32, fb.len / 4),
            std::slice::from_raw_parts_mut(yb.ptr as *mut f32, yb.len / 4),
        )
    };
    let level = simd::active();
    let taps = g.kh == dwtaps::K && g.kw == dwtaps::K && n >= dwtaps::lanes(level);
    // Each tap's filter row repeated to `C + 16` floats for `dwtaps`, `C + B` for `rows`.
    let fl = c + if taps { 16 } else { B };
    // The launching thread's buffer, reused across launches (every float is written here).
    let mut fe = Held(FE.take());
    fe.0.resize(g.kh * g.kw * fl, 0.0);
    for (row, tap) in fe.0.chunks_exact_mut(fl).zip(f.chunks_exact(c)) {
        for piece in row.chunks_mut(c) {
            piece.copy_from_slice(&tap[..piece.len()]);
        }
    }
    if taps {
        let nt = super::stream::wanted(yb, false);
        // Bands of 8 rows on AMD, 4 elsewhere (`dwtaps::rows_avx512`).
        #[cfg(target_arch = "x86_64")]
        let tall = simd::is_amd();
        #[cfg(not(target_arch = "x86_64"))]
        let tall = false;
        let band = |oh0| dwtaps::Band {
            x,
            fe: &fe,
            fl,
            w: g.w,
            c,
            oh0,
            ow,
            tall,
            nt,
        };
        let threads = rayon::current_num_threads();
        if threads == 1 || oh * n < PAR_MIN {
            dwtaps::rows(level, &band(0), y);
        } else {
            // Pieces of whole bands (a multiple of 8 rows), four per thread.
            let per = oh.div_ceil(threads * 4).next_multiple_of(8);
            y.par_chunks_mut(per * n)
                .enumerate()
                .for_each(|(t, out)| dwtaps::rows(level, &band(t * per), out));
        }
        TAPS.with(|t| t.set(t.get() + 1));
        return true;
    }
    let threads = rayon::current_num_threads();
    if threads == 1 || oh == 1 {
        rows(level, x, &fe, g, 0, y, n);
    } else {
        let per = oh.div_ceil(threads * 4).max(1);
        y.par_chunks_mut(per * n)
            .enumerate()
            .for_each(|(t, out)| rows(level, x, &fe, g, t * per, out, n));
    }
    true
}

/// Whether [`run`] takes these arguments, and so writes every element of `y`.
pub(crate) fn covers(d: &Depthwise, args: &[Buffer]) -> bool {
    geometry(d, args).is_some()
}

/// The launch's extents and `y`'s dims `[OH, OW, C]` when the arguments are what [`run`]
/// computes (see there), else `None`.
fn geometry(d: &Depthwise, args: &[Buffer]) -> Option<(Geom, [usize; 3])> {
    let (xb, fb, yb) = (&args[d.x], &args[d.f], &args[d.y]);
    let (xd, fd, yd) = (xb.dims(), fb.dims(), yb.dims());
    let whole = |b: &Buffer, d: &[usize]| {
        b.dtype == DType::F32
            && d.len() == 3
            && d.iter()
                .try_fold(4usize, |n, &e| n.checked_mul(e))
                .is_some_and(|n| n == b.len)
    };
    if !(whole(xb, xd) && whole(fb, fd) && whole(yb, yd)) {
        return None;
    }
    let (oh, ow, c) = (yd[0], yd[1], yd[2]);
    let g = Geom {
        w: xd[1],
        c,
        kh: fd[0],
        kw: fd[1],
    };
    let fits = xd[2] == c && fd[2] == c && oh + g.kh <= xd[0] + 1 && ow + g.kw <= g.w + 1;
    fits.then_some((g, [oh, ow, c]))
}

/// Output rows `oh0..` into `out` (whole rows of `n` floats) at the given SIMD level.
fn rows(level: SimdLevel, x: &[f32], fe: &[f32], g: Geom, oh0: usize, out: &mut [f32], n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if level >= SimdLevel::Avx512 {
            // SAFETY: the active level is at most the detected one: AVX-512F is present.
            return unsafe { rows_avx512(x, fe, g, oh0, out, n) };
        }
        if level >= SimdLevel::Avx2 {
            // SAFETY: as above, AVX2 is present.
            return unsafe { rows_avx2(x, fe, g, oh0, out, n) };
        }
    }
    let _ = level;
    rows_body(x, fe, g, oh0, out, n)
}

/// [`rows_body`] built with AVX-512F.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn rows_avx512(x: &[f32], fe: &[f32], g: Geom, oh0: usize, out: &mut [f32], n: usize) {
    rows_body(x, fe, g, oh0, out, n)
}

/// [`rows_body`] built with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2(x: &[f32], fe: &[f32], g: Geom, oh0: usize, out: &mut [f32], n: usize) {
    rows_body(x, fe, g, oh0, out, n)
}

#[inline(always)]
fn rows_body(x: &[f32], fe: &[f32], g: Geom, oh0: usize, out: &mut [f32], n: usize) {
    let paired = out.len() / (2 * n) * 2;
    let (two, rest) = out.split_at_mut(paired * n);
    for (q, two) in two.chunks_exact_mut(2 * n).enumerate() {
        two_rows(x, fe, g, oh0 + 2 * q, two, n);
    }
    if !rest.is_empty() {
        one_row(x, fe, g, oh0 + paired, rest);
    }
}

/// `acc[k] = acc[k] + xs[k]·fs[k]` for `k < B`.
#[inline(always)]
fn tap(acc: &mut [f32; B], xs: &[f32; B], fs: &[f32]) {
    let fs: &[f32; B] = fs[..B].try_into().unwrap();
    for k in 0..B {
        acc[k] += xs[k] * fs[k];
    }
}

/// Output rows `oh` and `oh + 1` (`out`: both, `n` floats each), blocks of `B` floats: input
/// row `oh + q` is read once for both, as tap row `q` of the first and `q − 1` of the
/// second, so each accumulator still takes its taps in `(i, j)` order; the tail as
/// [`one_row`].
#[inline(always)]
fn two_rows(x: &[f32], fe: &[f32], g: Geom, oh: usize, out: &mut [f32], n: usize) {
    let (c, fl, rs, kw) = (g.c, g.c + B, g.w * g.c, g.kw);
    let mut t0 = 0;
    while t0 + B <= n {
        let m = t0 % c;
        let (mut a, mut b) = ([0f32; B], [0f32; B]);
        let xs = |q: usize, j: usize| -> &[f32; B] {
            x[(oh + q) * rs + t0 + j * c..][..B].try_into().unwrap()
        };
        let fs = |i: usize, j: usize| &fe[(i * kw + j) * fl + m..];
        if g.kh > 0 {
            for j in 0..kw {
                tap(&mut a, xs(0, j), fs(0, j));
            }
            for q in 1..g.kh {
                for j in 0..kw {
                    let v = xs(q, j);
                    tap(&mut a, v, fs(q, j));
                    tap(&mut b, v, fs(q - 1, j));
                }
            }
            for j in 0..kw {
                tap(&mut b, xs(g.kh, j), fs(g.kh - 1, j));
            }
        }
        out[t0..t0 + B].copy_from_slice(&a);
        out[n + t0..n + t0 + B].copy_from_slice(&b);
        t0 += B;
    }
    if t0 < n {
        let (first, second) = out.split_at_mut(n);
        tail(x, fe, g, oh, t0, &mut first[t0..]);
        tail(x, fe, g, oh + 1, t0, &mut second[t0..]);
    }
}

/// Output row `oh`: blocks of `B` floats, then the tail.
#[inline(always)]
fn one_row(x: &[f32], fe: &[f32], g: Geom, oh: usize, out: &mut [f32]) {
    let (c, fl, rs) = (g.c, g.c + B, g.w * g.c);
    let n = out.len();
    let mut t0 = 0;
    while t0 + B <= n {
        let m = t0 % c;
        let mut acc = [0f32; B];
        for i in 0..g.kh {
            let xr = &x[(oh + i) * rs + t0..];
            for j in 0..g.kw {
                let xs: &[f32; B] = xr[j * c..][..B].try_into().unwrap();
                let fs: &[f32; B] = fe[(i * g.kw + j) * fl + m..][..B].try_into().unwrap();
                for k in 0..B {
                    acc[k] += xs[k] * fs[k];
                }
            }
        }
        out[t0..t0 + B].copy_from_slice(&acc);
        t0 += B;
    }
    if t0 < n {
        tail(x, fe, g, oh, t0, &mut out[t0..]);
    }
}

/// Output row `oh` from float `t0` to its end (`acc`, fewer than `B` floats).
#[inline(always)]
fn tail(x: &[f32], fe: &[f32], g: Geom, oh: usize, t0: usize, acc: &mut [f32]) {
    let (c, fl, rs) = (g.c, g.c + B, g.w * g.c);
    let (m, len) = (t0 % c, acc.len());
    acc.fill(0.0);
    for i in 0..g.kh {
        let xr = &x[(oh + i) * rs + t0..];
        for j in 0..g.kw {
            let xs = &xr[j * c..][..len];
            let fs = &fe[(i * g.kw + j) * fl + m..][..len];
            for ((a, xv), fv) in acc.iter_mut().zip(xs).zip(fs) {
                *a += xv * fv;
            }
        }
    }
}
