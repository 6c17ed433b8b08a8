//! AVX-512 loops of the norm row loop (`norm`, `normpipe`): the 32-lane sums of
//! `vmath::sum` over a row (of the values, or of the squared deviations without a buffer of
//! squares; an f32 row, or a bf16 row widened in registers and, with `KEEP`, kept as f32
//! in the row buffer), with the lane accumulators and the final tree in registers, and the
//! steps they are made of. The same operations in the same order as the portable loops, so the same
//! bits (rmsnorm passes `mean = 0`: `x − 0 = x` exactly, `-0` included).

use core::arch::x86_64::*;

/// Elements `j .. j + 16` of the row at `p` (f32 values, or bf16 bit patterns with `BF`)
/// as f32 (exact).
///
/// # Safety
/// Those elements are readable; the CPU supports AVX-512F.
#[inline(always)]
pub(crate) unsafe fn load<const BF: bool>(p: *const u8, j: usize) -> __m512 {
    // SAFETY: the caller's.
    unsafe {
        if BF {
            widen16(_mm256_loadu_si256(
                (p as *const u16).add(j) as *const __m256i
            ))
        } else {
            _mm512_loadu_ps((p as *const f32).add(j))
        }
    }
}

/// Elements `j .. j + t` (`t < 16`) of the row at `p` as f32 in the low lanes, `+0` in the
/// others.
///
/// # Safety
/// Those `t` elements are readable; the CPU supports AVX-512F.
#[inline(always)]
pub(crate) unsafe fn load_part<const BF: bool>(p: *const u8, j: usize, t: usize) -> __m512 {
    // SAFETY: the caller's; the masked load reads only the first `t` lanes.
    unsafe {
        if BF {
            let mut w = [0u16; 16];
            std::ptr::copy_nonoverlapping((p as *const u16).add(j), w.as_mut_ptr(), t);
            widen16(_mm256_loadu_si256(w.as_ptr() as *const __m256i))
        } else {
            _mm512_maskz_loadu_ps(((1u32 << t) - 1) as u16, (p as *const f32).add(j))
        }
    }
}

/// 16 bf16 bit patterns widened to f32 (exact: the bits shifted into the high half).
#[inline(always)]
pub(crate) fn widen16(v: __m256i) -> __m512 {
    // SAFETY: only called from functions built with AVX-512F.
    unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v))) }
}

/// `vmath::sum_lanes` of the 32 lanes `a0 ‖ a1`: the same pairwise tree (lane `i` plus lane
/// `i + w` for `w = 16, 8, 4, 2, 1`), in registers.
#[inline(always)]
pub(crate) fn tree(a0: __m512, a1: __m512) -> f32 {
    // SAFETY: only called from functions built with AVX-512F, AVX2 and FMA.
    unsafe {
        let t = _mm512_add_ps(a0, a1);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(t)));
        let t = _mm256_add_ps(_mm512_castps512_ps256(t), hi);
        let t = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t));
        let t = _mm_add_ps(t, _mm_movehl_ps(t, t));
        _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)))
    }
}

/// The value a lane adds: `v` (`SQ` false) or `(v − m)²`.
#[inline(always)]
fn term<const SQ: bool>(v: __m512, m: __m512) -> __m512 {
    // SAFETY: only called from functions built with AVX-512F.
    unsafe {
        if SQ {
            let d = _mm512_sub_ps(v, m);
            _mm512_mul_ps(d, d)
        } else {
            v
        }
    }
}

/// One pass's view of a row: its first element (f32, or bf16 bit patterns), the mean its
/// squares are taken about (`SQ` passes), where its widened values are kept (bf16 rows,
/// `KEEP` steps),
/// and the first element of a row (of the same type) whose lines are asked for as the pass
/// goes (`AHEAD` passes).
#[derive(Clone, Copy)]
pub(crate) struct Pass {
    pub src: *const u8,
    pub mean: f32,
    pub keep: *mut f32,
    pub ahead: *const u8,
    /// Whether `normpipe::sums` asks for `ahead`'s lines into L2 (`prefetcht1`) itself
    /// instead of the `AHEAD` steps' `prefetcht0`.
    pub l2: bool,
}

/// Lanes `a0 ‖ a1` after the 32 columns from `j` of `p` (values or squares); a bf16 row's
/// values are stored to `p.keep` with `KEEP`.
///
/// # Safety
/// As [`sum`], for columns `j .. j + 32`.
#[inline(always)]
pub(crate) unsafe fn step<const SQ: bool, const BF: bool, const AHEAD: bool, const KEEP: bool>(
    p: &Pass,
    m: __m512,
    j: usize,
    (a0, a1): (__m512, __m512),
) -> (__m512, __m512) {
    // SAFETY: the caller's.
    unsafe {
        if AHEAD {
            let a = p.ahead.wrapping_add(j * if BF { 2 } else { 4 }) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(a);
            if !BF {
                _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(64));
            }
        }
        let (v0, v1) = (load::<BF>(p.src, j), load::<BF>(p.src, j + 16));
        if BF && KEEP {
            _mm512_storeu_ps(p.keep.add(j), v0);
            _mm512_storeu_ps(p.keep.add(j + 16), v1);
        }
        (
            _mm512_add_ps(a0, term::<SQ>(v0, m)),
            _mm512_add_ps(a1, term::<SQ>(v1, m)),
        )
    }
}

/// Lanes `a0 ‖ a1` after the last `t < 32` columns (from `j`) of `p`: the lanes of those
/// columns added as the portable loop adds them (a lane accumulator starts at `+0` and so
/// is never `-0`), the others left as they are; a bf16 row's values are stored to `p.keep`
/// with `KEEP`.
///
/// # Safety
/// As [`sum`], for columns `j .. j + t`.
#[inline(always)]
pub(crate) unsafe fn tail<const SQ: bool, const BF: bool, const KEEP: bool>(
    p: &Pass,
    m: __m512,
    j: usize,
    t: usize,
    (a0, a1): (__m512, __m512),
) -> (__m512, __m512) {
    let (t0, t1) = (t.min(16), t.saturating_sub(16));
    let (k0, k1) = (((1u32 << t0) - 1) as u16, ((1u32 << t1) - 1) as u16);
    // SAFETY: the caller's; `t1 < 16`.
    unsafe {
        let v0 = load_part::<BF>(p.src, j, t0);
        let v1 = if t1 > 0 {
            load_part::<BF>(p.src, j + 16, t1)
        } else {
            _mm512_setzero_ps()
        };
        if BF && KEEP {
            _mm512_mask_storeu_ps(p.keep.add(j), k0, v0);
            _mm512_mask_storeu_ps(p.keep.wrapping_add(j + 16), k1, v1);
        }
        (
            _mm512_mask_add_ps(a0, k0, a0, term::<SQ>(v0, m)),
            _mm512_mask_add_ps(a1, k1, a1, term::<SQ>(v1, m)),
        )
    }
}

/// `vmath::sum` of columns `c0 .. c1` of the row `p` (`SQ` false) or of their
/// `(x − p.mean)²` (`SQ` true), bit for bit: 32 lane accumulators in two registers (column
/// `c0 + k` goes to lane `k mod 32`, in column order), the tail's lanes added as the
/// portable loop adds them, the same final tree. A `BF` row is bf16 (widened in registers,
/// and with `KEEP` stored to `p.keep`); with `AHEAD` the lines of `p.ahead` (columns
/// `c0 .. c1`) are asked for as the pass goes.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; elements `c0 .. c1` of the row (and of
/// `keep`, with `BF` and `KEEP`) are in bounds.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(crate) unsafe fn sum<const SQ: bool, const BF: bool, const AHEAD: bool, const KEEP: bool>(
    p: Pass,
    c0: usize,
    c1: usize,
) -> f32 {
    let full = c0 + (c1 - c0) / 32 * 32;
    let m = _mm512_set1_ps(p.mean);
    let mut a = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for j in (c0..full).step_by(32) {
        // SAFETY: `j + 32 <= c1`.
        a = unsafe { step::<SQ, BF, AHEAD, KEEP>(&p, m, j, a) };
    }
    if full < c1 {
        // SAFETY: the columns `full .. c1` are in bounds.
        a = unsafe { tail::<SQ, BF, KEEP>(&p, m, full, c1 - full, a) };
    }
    tree(a.0, a.1)
}
