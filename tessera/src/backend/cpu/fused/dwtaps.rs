//! The depthwise convolution's 3×3 case with its filter taps held in registers: for a block
//! of `L` channels (`C` a multiple of `L`) the 9 tap vectors are loaded once and reused along
//! a run of output pixels, and `R` output rows are computed together, so each input vector
//! loaded (input row `q`, pixel `w + j`) feeds every output row it is a tap of. Per element
//! it computes what [`super::depthwise`] does (`acc = acc + x·f` from `+0.0`, a separate
//! multiply and add, the taps in `(i, j)` order): input rows go in ascending order and, within
//! one, the columns `j` ascending, so each accumulator still takes tap `(i, j)` after every
//! tap before it.

use crate::backend::cpu::simd::SimdLevel;

/// Output pixels per run sharing one load of the taps (their input rows stay in L1).
const RUN: usize = 16;

/// The filter size this module computes.
pub(crate) const K: usize = 3;

/// Lanes per channel block at `level` (one register: 16 at AVX-512, 8 at AVX2, 4 otherwise).
pub(crate) fn lanes(level: SimdLevel) -> usize {
    match level {
        SimdLevel::Avx512 => 16,
        SimdLevel::Avx2 => 8,
        SimdLevel::Portable => 4,
    }
}

/// Output rows `oh0..` into `out` (whole rows of `ow·c` floats) of the 3×3 convolution of `x`
/// (rows of `w·c` floats) by `f` (`[3, 3, c]`), `c` a multiple of [`lanes`]`(level)`; every
/// tap of every output element lies inside `x` (the caller checked).
pub(crate) fn rows(
    level: SimdLevel,
    x: &[f32],
    f: &[f32],
    (w, c): (usize, usize),
    oh0: usize,
    out: &mut [f32],
    ow: usize,
) {
    let n = ow * c;
    let nrows = out.len() / n;
    assert!(
        nrows * n == out.len()
            && c % lanes(level) == 0
            && f.len() >= K * K * c
            && ow + K - 1 <= w
            && (oh0 + nrows + K - 1) * w * c <= x.len(),
        "depthwise taps out of bounds"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if level >= SimdLevel::Avx512 {
            // SAFETY: the active level is at most the detected one: AVX-512F is present;
            // the extents were checked above.
            return unsafe { rows_avx512(x, f, w * c, c, oh0, out, ow) };
        }
        if level >= SimdLevel::Avx2 {
            // SAFETY: as above, AVX2 is present.
            return unsafe { rows_avx2(x, f, w * c, c, oh0, out, ow) };
        }
    }
    // SAFETY: the extents were checked above.
    unsafe { rows_body::<2, 4>(x, f, w * c, c, oh0, out, ow) }
}

/// [`rows_body`] built with AVX-512F: 16 lanes, 4 output rows at a time.
///
/// # Safety
/// The CPU must support AVX-512F; the extents as [`rows`] checks them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn rows_avx512(
    x: &[f32],
    f: &[f32],
    rs: usize,
    c: usize,
    oh0: usize,
    out: &mut [f32],
    ow: usize,
) {
    unsafe { rows_body::<4, 16>(x, f, rs, c, oh0, out, ow) }
}

/// [`rows_body`] built with AVX2: 8 lanes, 2 output rows at a time.
///
/// # Safety
/// The CPU must support AVX2; the extents as [`rows`] checks them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2(
    x: &[f32],
    f: &[f32],
    rs: usize,
    c: usize,
    oh0: usize,
    out: &mut [f32],
    ow: usize,
) {
    unsafe { rows_body::<2, 8>(x, f, rs, c, oh0, out, ow) }
}

/// Groups of `R` output rows, then the remaining rows one at a time.
///
/// # Safety
/// As [`rows`] checks: `out` whole rows of `ow·c` floats, `c % L == 0`, every tap in `x`.
#[inline(always)]
unsafe fn rows_body<const R: usize, const L: usize>(
    x: &[f32],
    f: &[f32],
    rs: usize,
    c: usize,
    oh0: usize,
    out: &mut [f32],
    ow: usize,
) {
    let n = ow * c;
    let nrows = out.len() / n;
    let (xp, fp, op) = (x.as_ptr(), f.as_ptr(), out.as_mut_ptr());
    let mut r = 0;
    while r + R <= nrows {
        // SAFETY: rows `r..r + R` of `out`, their taps in `x` (the caller's extents).
        unsafe { band::<R, L>(xp.add((oh0 + r) * rs), fp, rs, c, op.add(r * n), n, ow) };
        r += R;
    }
    while r < nrows {
        // SAFETY: as above, one row.
        unsafe { band::<1, L>(xp.add((oh0 + r) * rs), fp, rs, c, op.add(r * n), n, ow) };
        r += 1;
    }
}

/// `R` output rows starting at `y` (row stride `n`) from the input rows starting at `x` (row
/// stride `rs`): runs of [`RUN`] pixels, in each every channel block with its taps loaded once.
///
/// # Safety
/// `y` holds `R` rows of `ow·c` floats `n` apart; `x` holds `R + 2` rows, `rs` apart, of at
/// least `(ow + 2)·c` floats; `f` holds `9·c` floats; `c % L == 0`.
#[inline(always)]
unsafe fn band<const R: usize, const L: usize>(
    x: *const f32,
    f: *const f32,
    rs: usize,
    c: usize,
    y: *mut f32,
    n: usize,
    ow: usize,
) {
    let mut p0 = 0;
    while p0 < ow {
        let p1 = (p0 + RUN).min(ow);
        let mut cb = 0;
        while cb < c {
            let mut taps = [[[0f32; L]; K]; K];
            for (i, row) in taps.iter_mut().enumerate() {
                for (j, t) in row.iter_mut().enumerate() {
                    // SAFETY: tap `(i, j)`'s channels `cb..cb + L` of `f`.
                    *t = unsafe { *(f.add((i * K + j) * c + cb) as *const [f32; L]) };
                }
            }
            for p in p0..p1 {
                let at = p * c + cb;
                // SAFETY: output pixel `p`'s block and its taps (the caller's extents).
                unsafe { pixel::<R, L>(x.add(at), rs, c, &taps, y.add(at), n) };
            }
            cb += L;
        }
        p0 = p1;
    }
}

/// One channel block of one output pixel in `R` rows: input rows `q = 0..R + 2` in order,
/// each one's three columns in order, each vector added to every output row `r` it is tap
/// `(q − r, j)` of.
///
/// # Safety
/// `x` and `y` point at the pixel's block in the first input and output rows (strides `rs`,
/// `n`), `c` floats between columns, all in bounds.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `j` indexes the taps of two rows and the input columns.
unsafe fn pixel<const R: usize, const L: usize>(
    x: *const f32,
    rs: usize,
    c: usize,
    taps: &[[[f32; L]; K]; K],
    y: *mut f32,
    n: usize,
) {
    let mut acc = [[0f32; L]; R];
    for q in 0..R + K - 1 {
        for j in 0..K {
            // SAFETY: input row `q`, column `j` of this block (in bounds by the caller).
            let v = unsafe { *(x.add(q * rs + j * c) as *const [f32; L]) };
            for (r, a) in acc.iter_mut().enumerate() {
                if q >= r && q - r < K {
                    let t = &taps[q - r][j];
                    for k in 0..L {
                        a[k] += v[k] * t[k];
                    }
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: output row `r`'s block.
        unsafe { *(y.add(r * n) as *mut [f32; L]) = *a };
    }
}
