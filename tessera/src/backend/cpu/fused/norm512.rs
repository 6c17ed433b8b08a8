//! AVX-512 loops of the norm row loop (`norm`) over an f32 row in L1: the 32-lane sums of
//! `vmath::sum` (of the values, or of the squared deviations without a buffer of squares) and
//! the f32 output row `((x − mean)·rstd)·γ (+ β)`, plain or non-temporal stores. The same
//! operations in the same order as the portable loops, so the same bits (rmsnorm passes
//! `mean = 0`: `x − 0 = x` exactly, `-0` included).

use super::super::vmath;
use crate::backend::Buffer;
use core::arch::x86_64::*;

/// `vmath::sum` of `xs` (`SQ` false) or of `(x − mean)²` (`SQ` true), bit for bit: 32 lane
/// accumulators in two registers, the tail added lane by lane, the same final tree.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn sum<const SQ: bool>(xs: &[f32], mean: f32, ahead: Option<*const f32>) -> f32 {
    let n = xs.len();
    let full = n / 32 * 32;
    let mv = _mm512_set1_ps(mean);
    let f = |v: __m512| {
        if SQ {
            let d = _mm512_sub_ps(v, mv);
            _mm512_mul_ps(d, d)
        } else {
            v
        }
    };
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for j in (0..full).step_by(32) {
        if let Some(p) = ahead {
            let p = p.wrapping_add(j) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
        // SAFETY: `j + 32 <= n`.
        unsafe {
            a0 = _mm512_add_ps(a0, f(_mm512_loadu_ps(xs.as_ptr().add(j))));
            a1 = _mm512_add_ps(a1, f(_mm512_loadu_ps(xs.as_ptr().add(j + 16))));
        }
    }
    let mut acc = [0.0f32; vmath::SUM_LANES];
    // SAFETY: `acc` holds 32 f32.
    unsafe {
        _mm512_storeu_ps(acc.as_mut_ptr(), a0);
        _mm512_storeu_ps(acc.as_mut_ptr().add(16), a1);
    }
    for (a, &v) in acc.iter_mut().zip(&xs[full..]) {
        *a += if SQ {
            let d = v - mean;
            d * d
        } else {
            v
        };
    }
    vmath::sum_lanes(acc)
}

/// `out[at + j] = ((xs[j] − mean)·rstd)·g[j] (+ b[j])` for the f32 tensor `out`; with `nt`,
/// streaming stores from the first 64-byte boundary to the last whole vector.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; `g` (and `b`) hold at least `xs.len()`
/// values; with `nt`, nothing else accesses those elements before `stream::fence` runs on
/// this thread.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn write(
    out: &Buffer,
    at: usize,
    xs: &[f32],
    (mean, rstd): (f32, f32),
    g: &[f32],
    b: Option<&[f32]>,
    nt: bool,
) {
    let n = xs.len();
    assert!(
        (at + n) * 4 <= out.len && g.len() >= n && b.is_none_or(|b| b.len() >= n),
        "fused store out of bounds"
    );
    // SAFETY: in bounds (checked above); programs of a launch write disjoint rows.
    let d = unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut f32).add(at), n) };
    let one = |j: usize| {
        let y = ((xs[j] - mean) * rstd) * g[j];
        match b {
            Some(b) => y + b[j],
            None => y,
        }
    };
    let head = if nt {
        d.as_ptr().align_offset(64).min(n)
    } else {
        0
    };
    for (j, o) in d[..head].iter_mut().enumerate() {
        *o = one(j);
    }
    let body = (n - head) / 16 * 16;
    let (mv, rv) = (_mm512_set1_ps(mean), _mm512_set1_ps(rstd));
    for j in (head..head + body).step_by(16) {
        // SAFETY: `j + 16 <= n` for every slice; with `nt`, `d[j]` is 64-byte aligned.
        unsafe {
            let x = _mm512_loadu_ps(xs.as_ptr().add(j));
            let y = _mm512_mul_ps(
                _mm512_mul_ps(_mm512_sub_ps(x, mv), rv),
                _mm512_loadu_ps(g.as_ptr().add(j)),
            );
            let y = match b {
                Some(b) => _mm512_add_ps(y, _mm512_loadu_ps(b.as_ptr().add(j))),
                None => y,
            };
            if nt {
                _mm512_stream_ps(d.as_mut_ptr().add(j), y);
            } else {
                _mm512_storeu_ps(d.as_mut_ptr().add(j), y);
            }
        }
    }
    for j in head + body..n {
        d[j] = one(j);
    }
}
