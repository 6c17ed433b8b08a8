//! The AVX-512 kernels of [`super::gelu()`]: [`map`] (`dst[i] = gelu(src[i])`) and [`after`]
//! (`add`/`sub`/`mul`/`div` ops, then gelu), both giving every lane
//! [`gelu1::<Fused>`](super::gelu::gelu1)'s bits, a NaN's sign and payload aside (as
//! everywhere in the CPU backend: [`after`]'s `v − k` with a NaN `k` is `v·1 + (−k)`, which
//! returns `−k`'s NaN where `subss` returns `k`'s). They need AVX-512F and AVX-512DQ
//! ([`available`]).
//!
//! Per 16 lanes ([`central_w`]): `j = ⌊2|x|⌋` by `vcvttps2dq`, `u = (2|x| − ⌊2|x|⌋) − ½` from
//! `vreduceps` (the fraction is exact, so the one rounding is that of `2|x| − (j + ½)`), each
//! coefficient picked by one `vpermps` (from [`table`]'s negated coefficients, so that the
//! polynomial comes out as `−c`), seven FMAs, and one more FMA for the result:
//! `fma(|x|, −c, b)` with `b = x` for a positive sign (`x − x·c`, rounded once) and `b = −0`
//! for a negative sign (`x·c + (−0)`, which is `x·c` rounded, signed zeros included). Lanes
//! outside `|x| < 4.5` (`j ≥ 9` as an unsigned integer, which NaN and huge `|x|` also give)
//! may need [`fix`]: `x` itself from `POS_END` on, [`tail`] lane by lane (out of line) for
//! `x <= NEG_END` and NaN. Loops take four vectors per step ([`map_with`]: each step of the
//! central form on all four before the next, which `gelu_loop` times at 8.0 cycles per 16
//! values against 9.5 for two vectors one after the other; four skip `fix` when no lane has
//! `|x| >= 4.5`, until the first four that have one; then each vector is tested for `fix`'s
//! own lanes, [`special`]), then one, then a masked last one. [`after`]'s loop: [`chain`].

mod chain;

pub(crate) use chain::{Pre, after, after_rows, pre_one, streams};

use super::arith::Fused;
use super::gelu::{CT, NEG_END, POS_END, S, tail};
use core::arch::x86_64::*;

// `2|x|` is formed as `|x| + |x|`.
const _: () = assert!(S == 2.0);
// `odd` (`|x| >= 4.5`) marks every lane `fix` changes (`x <= NEG_END`, `x >= POS_END`), so
// that a step whose lanes are all inside skips `fix`; `table`'s 16 intervals cover `|x| < 8`.
const _: () = assert!(NEG_END <= -4.5 && POS_END >= 4.5 && POS_END <= 8.0);

/// Whether [`map`] and [`after`] may run: the active level is AVX-512 and the CPU has
/// AVX-512DQ (`vreduceps`).
#[inline]
pub(crate) fn available() -> bool {
    super::dispatch::has_avx512() && std::arch::is_x86_feature_detected!("avx512dq")
}

/// How far ahead of a loop step's four vectors their input is asked for ([`ahead`]) where
/// the caller says the data lies past the cache (`far`), in floats: 4 KiB, one page.
///
/// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207, 2026-11-27 23:49–23:52
/// UTC, load 11–17 from other jobs; `chrt -f 50 env RAYON_NUM_THREADS=T cpu_profile K R C N
/// --pool`, two interleaved rounds against the build without it, fastest launch in ms):
/// `[8192, 4096]` (128 MiB in, 128 out) one thread gelu 22.1/23.2/22.5/20.3 → 14.8/17.6
/// (1024 floats ahead; 15.9/16.0 at 4096 floats)/16.9/14.6, `gelu(x · y + 1)` 28.3/22.9 →
/// 20.2/16.3; two threads gelu 12.6/21.1 → 8.7/7.6. The one-thread loop alone left memory
/// idle while it computed (gelu's time near the non-temporal copy's plus its in-L2 compute
/// time), and the hardware prefetchers did not run far enough ahead of it. At `[4096,
/// 1024]` and `[1024, 4096]` (input and output fit the counted last-level cache together,
/// so `far` is off there) the same prefetch measured within the noise on one thread and
/// 0.61–0.64 against 0.70–0.72 of memcpy on two (the chain at `[4096, 1024]`). Unmeasured
/// on the AMD Zen 5 of the older notes (its last-level cache counts 32 MiB too, so the
/// same shapes take it there).
pub(crate) const AHEAD: usize = 1024;

/// Asks for the four cache lines of the 64 floats `d` floats past `p` when `d` is not 0
/// (a hint: no access is made, so an address past the input's end is harmless).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn ahead(p: *const f32, d: usize) {
    if d != 0 {
        crate::backend::cpu::prefetch::lines_l1(p.wrapping_add(d), 4);
    }
}

/// The coefficient table, negated: `−CT[k]`'s 16 interval values in one register each.
/// Horner's steps on negated coefficients give exactly `−c` (each FMA's rounding is
/// symmetric), so that [`central_w`]'s result `fma(|x|, −c, b)` is `fma(−|x|, c, b)` without
/// forming `−|x|`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn table() -> [__m512; 8] {
    let sign = _mm512_set1_epi32(i32::MIN);
    // SAFETY: `CT[k]` holds 16 floats.
    core::array::from_fn(|k| unsafe {
        let t = _mm512_castps_si512(_mm512_loadu_ps(CT[k].as_ptr()));
        _mm512_castsi512_ps(_mm512_xor_si512(t, sign))
    })
}

/// The central form on `W` vectors of 16 lanes (right for lanes with `NEG_END < x <
/// POS_END`), each step on all `W` vectors before the next, so that their chains of
/// dependent FMAs interleave, and each vector's `j` ([`odd`] marks the lanes [`fix`] must
/// see).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn central_w<const W: usize>(x: &[__m512; W], tab: &[__m512; 8]) -> ([__m512; W], [__m512i; W]) {
    let z = _mm512_setzero_ps();
    let (mut ax, mut u, mut c) = ([z; W], [z; W], [z; W]);
    let mut j = [_mm512_setzero_si512(); W];
    for w in 0..W {
        ax[w] = _mm512_abs_ps(x[w]);
        let v = _mm512_add_ps(ax[w], ax[w]);
        j[w] = _mm512_cvttps_epi32(v);
        // v − ⌊v⌋, exact (imm: M = 0, round down, no precision exception).
        let f = _mm512_reduce_ps::<0x09>(v);
        u[w] = _mm512_sub_ps(f, _mm512_set1_ps(0.5));
        c[w] = _mm512_permutexvar_ps(j[w], tab[7]);
    }
    for k in (0..7).rev() {
        for w in 0..W {
            c[w] = _mm512_fmadd_ps(c[w], u[w], _mm512_permutexvar_ps(j[w], tab[k]));
        }
    }
    let mut r = [z; W];
    let sign = _mm512_set1_epi32(i32::MIN);
    for w in 0..W {
        let xi = _mm512_castps_si512(x[w]);
        // x for a clear sign bit, −0 (0x8000_0000) for a set one; `c` is negated ([`table`]).
        let b = _mm512_castsi512_ps(_mm512_min_epu32(xi, sign));
        r[w] = _mm512_fmadd_ps(ax[w], c[w], b);
    }
    (r, j)
}

/// Whether a lane of `j` (from [`central_w`]) is outside `|x| < 4.5` (`j ≥ 9` unsigned; NaN
/// and huge `|x|` give `j = 0x8000_0000`).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn odd(j: __m512i) -> bool {
    _mm512_cmpge_epu32_mask(j, _mm512_set1_epi32(9)) != 0
}

/// `r` with `x` in the lanes at `x >= POS_END` and [`tail`] in those at `x <= NEG_END` or NaN.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn fix(x: __m512, r: __m512) -> __m512 {
    let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(POS_END));
    let r = _mm512_mask_mov_ps(r, big, x);
    let far = _mm512_cmp_ps_mask::<_CMP_NGT_UQ>(x, _mm512_set1_ps(NEG_END));
    if far == 0 { r } else { far_blend(x, r, far) }
}

/// `r` with [`tail`] in the lanes of `far`; out of line, so that the loops keep their
/// registers for the central form.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline(never)]
#[cold]
fn far_blend(x: __m512, r: __m512, far: __mmask16) -> __m512 {
    let mut t = [0f32; 16];
    // SAFETY: `t` holds 16 floats.
    unsafe { _mm512_storeu_ps(t.as_mut_ptr(), x) };
    for e in t.iter_mut() {
        *e = tail::<Fused>(*e);
    }
    // SAFETY: as above.
    _mm512_mask_blend_ps(far, r, unsafe { _mm512_loadu_ps(t.as_ptr()) })
}

/// Whether a lane of `x` needs [`fix`] (`x >= POS_END`, `x <= NEG_END` or NaN): the bits of
/// `|x|` against those of `POS_END` for a clear sign bit, of `-NEG_END` for a set one
/// (unsigned; NaN's bits are above both).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn special(x: __m512) -> bool {
    let xi = _mm512_castps_si512(x);
    let ax = _mm512_castps_si512(_mm512_abs_ps(x));
    let neg = _mm512_srai_epi32::<31>(xi);
    let lo = _mm512_set1_epi32((-NEG_END).to_bits() as i32);
    let hi = _mm512_set1_epi32(POS_END.to_bits() as i32);
    // neg ? lo : hi, bit by bit.
    let t = _mm512_ternarylogic_epi32::<0xCA>(neg, lo, hi);
    _mm512_cmpge_epu32_mask(ax, t) != 0
}

/// `gelu1::<Fused>` on 16 lanes.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
fn gelu16(x: __m512, tab: &[__m512; 8]) -> __m512 {
    let [r] = central_w(&[x], tab).0;
    if special(x) { fix(x, r) } else { r }
}

/// The mask of the first `n < 16` lanes.
#[inline]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// `dst[i] = gelu1::<Fused>(src[i])` for `i < n`: 64 lanes (four vectors) per step, then
/// up to three vectors of 16, then a masked vector for the last `n % 16`.
///
/// # Safety
/// [`available`]; `src` readable and `dst` writable for `n` floats, either the same pointer
/// or not overlapping.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn map(src: *const f32, dst: *mut f32, n: usize) {
    // SAFETY: this function's contract.
    unsafe { map_with::<false>(src, dst, n, &table(), &mut true, 0) }
}

/// [`map`] with non-temporal stores ([`put`]) into `dst`, which must not be `src`; the
/// caller orders them (`sfence`) before the output is read. With `far` (data past the
/// cache) the input is asked for [`AHEAD`] floats ahead of the loop.
///
/// # Safety
/// As [`map`], `dst` not overlapping `src`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn map_stream(src: *const f32, dst: *mut f32, n: usize, far: bool) {
    let d = if far { AHEAD } else { 0 };
    let tab = table();
    // Plain stores up to the first 64-byte boundary of `dst`, so that the rest streams.
    let h = dst.align_offset(64).min(n);
    // SAFETY: this function's contract; `h <= n`.
    unsafe {
        map_with::<false>(src, dst, h, &tab, &mut true, d);
        map_with::<true>(src.add(h), dst.add(h), n - h, &tab, &mut true, d)
    }
}

/// Stores the 16 floats of `r` at `p`: non-temporally (`vmovntps`) when `stream` and `p`
/// is 64-byte aligned, else a plain store.
///
/// # Safety
/// [`available`]; `p` writable for 16 floats.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn put(p: *mut f32, r: __m512, stream: bool) {
    // SAFETY: the caller's contract; the streaming store's address is 64-byte aligned.
    unsafe {
        if stream && (p as usize).is_multiple_of(64) {
            _mm512_stream_ps(p, r)
        } else {
            _mm512_storeu_ps(p, r)
        }
    }
}

/// [`map`] with the table and `test` from the caller: while `test` holds, four vectors
/// skip [`fix`] when every lane has `|x| < 4.5` (one compare and one branch per four
/// vectors); the first four with a lane outside clear `test`, and from then on each vector
/// takes [`fix`] when [`special`] (one compare and one branch per vector, on a condition that
/// holds more rarely), so that data often outside `|x| < 4.5` (such as `x · y + 1` of two
/// normal samples) does not pay a mispredicted branch per step. Each step asks for the
/// input `d` floats on ([`ahead`]; none when `d` is 0).
///
/// # Safety
/// As [`map`].
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn map_with<const S: bool>(
    src: *const f32,
    dst: *mut f32,
    n: usize,
    tab: &[__m512; 8],
    test: &mut bool,
    d: usize,
) {
    let mut i = 0;
    // SAFETY (every access): within the first `n` floats, masked lanes not accessed.
    while i + 64 <= n {
        ahead(src.wrapping_add(i), d);
        unsafe {
            let x = [
                _mm512_loadu_ps(src.add(i)),
                _mm512_loadu_ps(src.add(i + 16)),
                _mm512_loadu_ps(src.add(i + 32)),
                _mm512_loadu_ps(src.add(i + 48)),
            ];
            let (mut r, j) = central_w(&x, tab);
            if *test {
                let m =
                    _mm512_max_epu32(_mm512_max_epu32(j[0], j[1]), _mm512_max_epu32(j[2], j[3]));
                if odd(m) {
                    *test = false;
                }
            }
            if !*test {
                for w in 0..4 {
                    if special(x[w]) {
                        r[w] = fix(x[w], r[w]);
                    }
                }
            }
            for (w, r) in r.into_iter().enumerate() {
                put(dst.add(i + 16 * w), r, S);
            }
        }
        i += 64;
    }
    while i + 16 <= n {
        unsafe { put(dst.add(i), gelu16(_mm512_loadu_ps(src.add(i)), tab), S) };
        i += 16;
    }
    if i < n {
        let k = first(n - i);
        unsafe {
            let x = _mm512_maskz_loadu_ps(k, src.add(i));
            _mm512_mask_storeu_ps(dst.add(i), k, gelu16(x, tab));
        }
    }
}
