//! bf16 storage read and written at the active SIMD level: widening (`bits << 16`, exact),
//! narrowing (round to nearest even, a NaN made quiet: [`bf16_bits`], the
//! interpreter's `half::bf16::from_f32`), rounding f32 values to bf16 precision in place, and
//! a bf16 `add`/`sub`/`mul`/`div` over two inputs with each element widened, combined and
//! narrowed in registers. AVX-512BW runs 16 lanes (`vpmovzxwd` widen, integer rounding add and
//! a NaN blend, `vpmovdw` narrow, masked tails); AVX2 runs 8 lanes (16 per `vpackusdw`
//! narrow) with a scalar tail; the portable build runs the scalar forms. The three give the
//! same bits.

use super::chunk::{bf16_bits, round_bf16};
use tessera_ir::graph::BinaryOp;

/// Which kernels run: chosen per call from the active level.
#[derive(Clone, Copy, PartialEq)]
enum Lvl {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

#[inline(always)]
fn level() -> Lvl {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::backend::cpu::simd::{SimdLevel, active};
        let a = active();
        if a >= SimdLevel::Avx512 && std::arch::is_x86_feature_detected!("avx512bw") {
            return Lvl::Avx512;
        }
        if a >= SimdLevel::Avx2 {
            return Lvl::Avx2;
        }
    }
    Lvl::Portable
}

/// How many calls of [`super::without_bf16_convert`] are running (on any thread): while
/// any is, [`has_cvt`] answers false.
pub(super) static CVT_OFF: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `o[i]` = `s[i]` widened to f32 (exact), over `o.len()` elements.
pub(crate) fn widen(s: &[u16], o: &mut [f32]) {
    let n = o.len();
    assert!(s.len() >= n, "bf16 widen out of bounds");
    match level() {
        // SAFETY: the level's features are present (`level`); `n` elements of both are in
        // bounds (asserted).
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx512 => unsafe { x86::widen_512(s.as_ptr(), o.as_mut_ptr(), n) },
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx2 => unsafe { x86::widen_256(s.as_ptr(), o.as_mut_ptr(), n) },
        Lvl::Portable => widen_portable(s, o),
    }
}

fn widen_portable(s: &[u16], o: &mut [f32]) {
    o.iter_mut()
        .zip(s)
        .for_each(|(o, x)| *o = f32::from_bits((*x as u32) << 16));
}

/// `o[i]` = the bf16 bits nearest `s[i]` ([`bf16_bits`]), over `o.len()` elements.
pub(crate) fn narrow(s: &[f32], o: &mut [u16]) {
    let n = o.len();
    assert!(s.len() >= n, "bf16 narrow out of bounds");
    match level() {
        // SAFETY: as in `widen`.
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx512 => unsafe { x86::narrow_512(s.as_ptr(), o.as_mut_ptr(), n) },
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx2 => unsafe { x86::narrow_256(s.as_ptr(), o.as_mut_ptr(), n) },
        Lvl::Portable => narrow_portable(s, o),
    }
}

/// `o[i]` = the bf16 bits nearest the f32 product `s[i]·k` ([`bf16_bits`] of it: the product
/// rounded once to f32, then to bf16), over `o.len()` elements.
pub(crate) fn narrow_scaled(s: &[f32], k: f32, o: &mut [u16]) {
    let n = o.len();
    assert!(s.len() >= n, "bf16 narrow out of bounds");
    match level() {
        // SAFETY: as in `widen`.
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx512 => unsafe { x86::narrow_scaled_512(s.as_ptr(), k, o.as_mut_ptr(), n) },
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx2 => unsafe { x86::narrow_scaled_256(s.as_ptr(), k, o.as_mut_ptr(), n) },
        Lvl::Portable => narrow_scaled_portable(s, k, o),
    }
}

fn narrow_scaled_portable(s: &[f32], k: f32, o: &mut [u16]) {
    o.iter_mut()
        .zip(s)
        .for_each(|(o, x)| *o = bf16_bits(*x * k) as u16);
}

fn narrow_portable(s: &[f32], o: &mut [u16]) {
    o.iter_mut()
        .zip(s)
        .for_each(|(o, x)| *o = bf16_bits(*x) as u16);
}

/// Each value of `v` rounded to bf16 precision ([`round_bf16`]), in place.
pub(crate) fn round(v: &mut [f32]) {
    let n = v.len();
    match level() {
        // SAFETY: as in `widen`; each lane is read before it is written.
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx512 => unsafe { x86::round_512(v.as_mut_ptr(), n) },
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx2 => unsafe { x86::round_256(v.as_mut_ptr(), n) },
        Lvl::Portable => v.iter_mut().for_each(|x| *x = round_bf16(*x)),
    }
}

/// Whether [`binary`] runs `op`.
pub(crate) fn has_binary(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
    )
}

/// `o[i]` = `op(a[i], b[i])` for bf16 `a`, `b`, `o`: both widened, combined in f32, the
/// result narrowed. Runs `Add`, `Sub`, `Mul` and `Div`; `false` (nothing done) for another op.
pub(crate) fn binary(op: BinaryOp, a: &[u16], b: &[u16], o: &mut [u16]) -> bool {
    if !has_binary(op) {
        return false;
    }
    let n = o.len();
    assert!(a.len() >= n && b.len() >= n, "bf16 binary out of bounds");
    match level() {
        // SAFETY: as in `widen`.
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx512 => unsafe { x86::binary_512(op, a.as_ptr(), b.as_ptr(), o.as_mut_ptr(), n) },
        #[cfg(target_arch = "x86_64")]
        Lvl::Avx2 => unsafe { x86::binary_256(op, a.as_ptr(), b.as_ptr(), o.as_mut_ptr(), n) },
        Lvl::Portable => binary_portable(op, a, b, o),
    }
    true
}

fn binary_portable(op: BinaryOp, a: &[u16], b: &[u16], o: &mut [u16]) {
    let w = |x: u16| f32::from_bits((x as u32) << 16);
    for ((o, x), y) in o.iter_mut().zip(a).zip(b) {
        *o = bf16_bits(scalar(op, w(*x), w(*y))) as u16;
    }
}

/// The four ops of [`binary`] on one pair of f32 values.
#[inline(always)]
fn scalar(op: BinaryOp, x: f32, y: f32) -> f32 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        _ => x / y,
    }
}

/// Narrows 16 f32 lanes to bf16 in registers and stores the lanes a mask selects (row loops
/// that compute their output in registers, e.g. `norm`'s bf16 rows).
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{
    has_cvt, pack2_cvt as pack32_cvt, pack2_cvt_normal as pack32_cvt_normal, store_512 as store16,
    store2_512 as store32, store2_cvt as store32_cvt, store2_cvt_normal as store32_cvt_normal,
    store2_eo_512 as store32_eo, store2_eo_cvt as store32_eo_cvt,
    store2_eo_part_512 as store32_eo_part, stream2_512 as stream32, stream2_cvt as stream32_cvt,
    stream2_cvt_normal as stream32_cvt_normal, stream2_eo_512 as stream32_eo,
    stream2_eo_cvt as stream32_eo_cvt,
};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{bf16_bits, round_bf16, scalar};
    use core::arch::x86_64::*;
    use tessera_ir::graph::BinaryOp;

    /// The bf16 bits nearest each lane of `v`, one per 32-bit lane: `(b + 0x7FFF + lsb) >> 16`
    /// (lsb: bit 16 of `b`), and `(b >> 16) | 0x40` for a NaN.
    #[inline(always)]
    unsafe fn bits_512(v: __m512) -> __m512i {
        // SAFETY: the caller's.
        unsafe { _mm512_srli_epi32::<16>(high_512(v)) }
    }

    /// Each lane's [`bits_512`] in its high 16 bits (round to nearest even by adding
    /// `0x7FFF + lsb`; a NaN's own high half with the quiet bit `0x0040_0000` set), the low
    /// half left over.
    #[inline(always)]
    unsafe fn high_512(v: __m512) -> __m512i {
        unsafe {
            let b = _mm512_castps_si512(v);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
            let r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x0040_0000))
        }
    }

    /// 16 bf16 values at `p` (`k` selects the lanes read; others read as 0), widened.
    #[inline(always)]
    unsafe fn load_512(p: *const u16, k: __mmask16) -> __m512 {
        unsafe {
            let h = if k == 0xFFFF {
                _mm256_loadu_si256(p as *const __m256i)
            } else {
                _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(k as __mmask32, p as *const i16))
            };
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
    }

    /// Narrows the 16 lanes of `v` to `p` (`k` selects the lanes written): the bits of
    /// [`bf16_bits`] (round to nearest even, subnormals kept, a NaN made quiet).
    ///
    /// # Safety
    /// AVX-512F present (the caller is built with it); the lanes of `k` are writable at `p`.
    #[inline(always)]
    pub(crate) unsafe fn store_512(p: *mut u16, k: __mmask16, v: __m512) {
        unsafe {
            let r = bits_512(v);
            if k == 0xFFFF {
                _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtepi32_epi16(r));
            } else {
                _mm512_mask_cvtepi32_storeu_epi16(p as *mut i16, k, r);
            }
        }
    }

    /// Narrows the 32 lanes of `v0 ‖ v1` to `p` (the bits of [`store_512`] twice): the
    /// rounded lanes' high halves gathered by one two-source word permute, one 64-byte
    /// store.
    ///
    /// # Safety
    /// AVX-512F and BW present (the caller is built with them); 32 elements writable at `p`.
    #[inline(always)]
    pub(crate) unsafe fn store2_512(p: *mut u16, v0: __m512, v1: __m512) {
        unsafe { _mm512_storeu_si512(p as *mut __m512i, pack2_512(v0, v1)) }
    }

    /// The 32 bf16 bits of [`store2_512`] for `v0 ‖ v1`, in one register.
    #[inline(always)]
    unsafe fn pack2_512(v0: __m512, v1: __m512) -> __m512i {
        unsafe {
            let odd = _mm512_set_epi16(
                63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23,
                21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
            );
            _mm512_permutex2var_epi16(high_512(v0), odd, high_512(v1))
        }
    }

    /// [`store2_512`] with a streaming store.
    ///
    /// # Safety
    /// As [`store2_512`], and `p` is 64-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn stream2_512(p: *mut u16, v0: __m512, v1: __m512) {
        unsafe { _mm512_stream_si512(p as *mut __m512i, pack2_512(v0, v1)) }
    }

    /// Whether [`store2_cvt`] and [`stream2_cvt`] may run: AVX-512F, BW, DQ and BF16
    /// detected, and not turned off by [`super::super::without_bf16_convert`].
    pub(crate) fn has_cvt() -> bool {
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512bf16")
        }) && super::CVT_OFF.load(std::sync::atomic::Ordering::Relaxed) == 0
    }

    /// The bits of [`pack2_512`] by one `vcvtne2ps2bf16` (round to nearest even, a NaN made
    /// quiet as [`high_512`] makes it), which reads an f32 subnormal as zero: a pair with a
    /// subnormal lane takes [`pack2_512`].
    ///
    /// # Safety
    /// AVX-512F, BW, DQ and BF16 present (the caller is built with them: [`has_cvt`]).
    #[inline(always)]
    pub(crate) unsafe fn pack2_cvt(v0: __m512, v1: __m512) -> __m512i {
        unsafe {
            // `vfpclassps` category 0x20: denormal.
            let sub = _mm512_fpclass_ps_mask::<0x20>(v0) | _mm512_fpclass_ps_mask::<0x20>(v1);
            if sub == 0 {
                std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(v1, v0))
            } else {
                pack2_512(v0, v1)
            }
        }
    }

    /// `vcvtne2ps2bf16` of `v0 ‖ v1` (the words of [`pack2_cvt`], `v0`'s lanes first): no
    /// lane may be an f32 subnormal.
    ///
    /// # Safety
    /// As [`pack2_cvt`].
    #[inline(always)]
    pub(crate) unsafe fn pack2_cvt_normal(v0: __m512, v1: __m512) -> __m512i {
        unsafe { std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(v1, v0)) }
    }

    /// `vcvtne2ps2bf16` of `v0 ‖ v1` to `p`: no lane may be an f32 subnormal.
    #[inline(always)]
    pub(crate) unsafe fn store2_cvt_normal(p: *mut u16, v0: __m512, v1: __m512) {
        unsafe {
            _mm512_storeu_si512(
                p as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(v1, v0)),
            )
        }
    }

    /// [`store2_cvt_normal`] with a streaming store (`p` 64-byte aligned).
    #[inline(always)]
    pub(crate) unsafe fn stream2_cvt_normal(p: *mut u16, v0: __m512, v1: __m512) {
        unsafe {
            _mm512_stream_si512(
                p as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(v1, v0)),
            )
        }
    }

    /// [`store2_512`] by [`pack2_cvt`].
    ///
    /// # Safety
    /// As [`store2_512`] and [`pack2_cvt`].
    #[inline(always)]
    pub(crate) unsafe fn store2_cvt(p: *mut u16, v0: __m512, v1: __m512) {
        unsafe { _mm512_storeu_si512(p as *mut __m512i, pack2_cvt(v0, v1)) }
    }

    /// [`stream2_512`] by [`pack2_cvt`].
    ///
    /// # Safety
    /// As [`stream2_512`] and [`pack2_cvt`].
    #[inline(always)]
    pub(crate) unsafe fn stream2_cvt(p: *mut u16, v0: __m512, v1: __m512) {
        unsafe { _mm512_stream_si512(p as *mut __m512i, pack2_cvt(v0, v1)) }
    }

    /// The 32 bf16 bits of [`pack2_512`] for the 32 columns whose even ones are the lanes of
    /// `e` and odd ones those of `o` (lane `i` of `e`: column `2i`; of `o`: column `2i + 1`),
    /// in column order: each rounded lane's high half, `e`'s shifted down into the low word
    /// and `o`'s kept in the high word of each 32-bit lane.
    #[inline(always)]
    unsafe fn pack2_eo_512(e: __m512, o: __m512) -> __m512i {
        unsafe {
            _mm512_mask_mov_epi16(
                _mm512_srli_epi32::<16>(high_512(e)),
                0xAAAA_AAAA,
                high_512(o),
            )
        }
    }

    /// [`pack2_eo_512`] by one `vcvtne2ps2bf16` (as [`pack2_cvt`], which reads a subnormal
    /// as zero: a step with a `±0` word and a subnormal lane takes [`pack2_eo_512`]) and one
    /// word permute into column order.
    ///
    /// # Safety
    /// As [`pack2_cvt`].
    #[inline(always)]
    unsafe fn pack2_eo_cvt(e: __m512, o: __m512) -> __m512i {
        unsafe {
            let w = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(o, e));
            // Words `0 .. 16` are `e`'s lanes, `16 .. 32` `o`'s: word `2i` of the result is
            // word `i`, word `2i + 1` word `16 + i`.
            let at = _mm512_set_epi16(
                31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                20, 4, 19, 3, 18, 2, 17, 1, 16, 0,
            );
            let p = _mm512_permutexvar_epi16(at, w);
            // A subnormal lane comes out `±0`, which a normal one never rounds to: with no
            // `±0` word every lane is exact (one `vptestnmw` instead of two `vfpclassps`;
            // on the permuted words, which LLVM does not turn into a bf16 compare with zero,
            // scalar lane by lane, as it did the converted ones). A step with a `±0` word asks
            // `vfpclassps` whether any lane is subnormal, so that zeros (a ReLU-sparse row's
            // rmsnorm: half its values) keep the convert. `[CPU_PROFILE_RELU=1]
            // RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile rmsnorm_bf16 R 1024 N --pool`,
            // 2026-11-28 19:20 UTC (load 4.1–5.2: two helpers' builds), 3 interleaved rounds,
            // fastest launch, µs, integer rounding for every step with a zero → this check:
            // ReLU-sparse `[256, 1024]` 58.0–59.7 → 38.3–39.9, `[4096, 1024]` 962–1031 →
            // 692–722; dense 37.3–46.4 → 35.8–48.1 and 674–822 → 692–723 (no difference);
            // layernorm_bf16 `[256, 1024]` sparse 54.0–54.1 → 52.1–54.0.
            let zero = _mm512_testn_epi16_mask(p, _mm512_set1_epi16(0x7FFF));
            if zero == 0 {
                return p;
            }
            // `vfpclassps` category 0x20: denormal.
            let sub = _mm512_fpclass_ps_mask::<0x20>(e) | _mm512_fpclass_ps_mask::<0x20>(o);
            if sub == 0 { p } else { pack2_eo_512(e, o) }
        }
    }

    /// [`store2_512`] of the 32 columns split into even (`e`) and odd (`o`) lanes
    /// ([`pack2_eo_512`]).
    ///
    /// # Safety
    /// As [`store2_512`].
    #[inline(always)]
    pub(crate) unsafe fn store2_eo_512(p: *mut u16, e: __m512, o: __m512) {
        unsafe { _mm512_storeu_si512(p as *mut __m512i, pack2_eo_512(e, o)) }
    }

    /// [`store2_eo_512`] of the columns `k` selects (a row's last, ragged step: the words
    /// of [`pack2_eo_512`], masked store).
    ///
    /// # Safety
    /// AVX-512F and BW present (the caller is built with them); the words of `k` are
    /// writable at `p`.
    #[inline(always)]
    pub(crate) unsafe fn store2_eo_part_512(p: *mut u16, k: __mmask32, e: __m512, o: __m512) {
        unsafe { _mm512_mask_storeu_epi16(p as *mut i16, k, pack2_eo_512(e, o)) }
    }

    /// [`store2_eo_512`] with a streaming store.
    ///
    /// # Safety
    /// As [`stream2_512`].
    #[inline(always)]
    pub(crate) unsafe fn stream2_eo_512(p: *mut u16, e: __m512, o: __m512) {
        unsafe { _mm512_stream_si512(p as *mut __m512i, pack2_eo_512(e, o)) }
    }

    /// [`store2_eo_512`] by [`pack2_eo_cvt`].
    ///
    /// # Safety
    /// As [`store2_cvt`].
    #[inline(always)]
    pub(crate) unsafe fn store2_eo_cvt(p: *mut u16, e: __m512, o: __m512) {
        unsafe { _mm512_storeu_si512(p as *mut __m512i, pack2_eo_cvt(e, o)) }
    }

    /// [`stream2_eo_512`] by [`pack2_eo_cvt`].
    ///
    /// # Safety
    /// As [`stream2_cvt`].
    #[inline(always)]
    pub(crate) unsafe fn stream2_eo_cvt(p: *mut u16, e: __m512, o: __m512) {
        unsafe { _mm512_stream_si512(p as *mut __m512i, pack2_eo_cvt(e, o)) }
    }

    /// The lane mask of the first `m` (< 16) lanes.
    #[inline(always)]
    fn tail(m: usize) -> __mmask16 {
        ((1u32 << m) - 1) as __mmask16
    }

    /// `p[i]` as f32 into `o[i]`, `i < n`.
    ///
    /// # Safety
    /// AVX-512F and BW present; `n` elements readable at `s` and writable at `o`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn widen_512(s: *const u16, o: *mut f32, n: usize) {
        unsafe {
            let mut i = 0;
            while i + 16 <= n {
                _mm512_storeu_ps(o.add(i), load_512(s.add(i), 0xFFFF));
                i += 16;
            }
            if i < n {
                let k = tail(n - i);
                _mm512_mask_storeu_ps(o.add(i), k, load_512(s.add(i), k));
            }
        }
    }

    /// `s[i]` narrowed into `o[i]`, `i < n`.
    ///
    /// # Safety
    /// As [`widen_512`].
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn narrow_512(s: *const f32, o: *mut u16, n: usize) {
        unsafe {
            let mut i = 0;
            while i + 16 <= n {
                store_512(o.add(i), 0xFFFF, _mm512_loadu_ps(s.add(i)));
                i += 16;
            }
            if i < n {
                let k = tail(n - i);
                store_512(o.add(i), k, _mm512_maskz_loadu_ps(k, s.add(i)));
            }
        }
    }

    /// `s[i]·k` narrowed into `o[i]`, `i < n`.
    ///
    /// # Safety
    /// As [`widen_512`].
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn narrow_scaled_512(s: *const f32, k: f32, o: *mut u16, n: usize) {
        unsafe {
            let kv = _mm512_set1_ps(k);
            let mut i = 0;
            while i + 32 <= n {
                let v0 = _mm512_mul_ps(_mm512_loadu_ps(s.add(i)), kv);
                let v1 = _mm512_mul_ps(_mm512_loadu_ps(s.add(i + 16)), kv);
                store_512(o.add(i), 0xFFFF, v0);
                store_512(o.add(i + 16), 0xFFFF, v1);
                i += 32;
            }
            while i < n {
                let t = if n - i >= 16 { 0xFFFF } else { tail(n - i) };
                store_512(
                    o.add(i),
                    t,
                    _mm512_mul_ps(_mm512_maskz_loadu_ps(t, s.add(i)), kv),
                );
                i += 16;
            }
        }
    }

    /// Rounds `v[i]` to bf16 precision, `i < n`.
    ///
    /// # Safety
    /// As [`widen_512`], `n` elements read and written at `v`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn round_512(v: *mut f32, n: usize) {
        unsafe {
            let r = |x: __m512| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(bits_512(x)));
            let mut i = 0;
            while i + 16 <= n {
                _mm512_storeu_ps(v.add(i), r(_mm512_loadu_ps(v.add(i))));
                i += 16;
            }
            if i < n {
                let k = tail(n - i);
                _mm512_mask_storeu_ps(v.add(i), k, r(_mm512_maskz_loadu_ps(k, v.add(i))));
            }
        }
    }

    /// `o[i]` = `op(a[i], b[i])` in bf16, `i < n` (`op` one of [`super::binary`]'s).
    ///
    /// # Safety
    /// As [`widen_512`], for `a` and `b` read and `o` written.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn binary_512(
        op: BinaryOp,
        a: *const u16,
        b: *const u16,
        o: *mut u16,
        n: usize,
    ) {
        #[inline(always)]
        unsafe fn lanes(
            a: *const u16,
            b: *const u16,
            o: *mut u16,
            n: usize,
            f: impl Fn(__m512, __m512) -> __m512,
        ) {
            unsafe {
                let mut i = 0;
                while i + 16 <= n {
                    let (x, y) = (load_512(a.add(i), 0xFFFF), load_512(b.add(i), 0xFFFF));
                    store_512(o.add(i), 0xFFFF, f(x, y));
                    i += 16;
                }
                if i < n {
                    let k = tail(n - i);
                    let (x, y) = (load_512(a.add(i), k), load_512(b.add(i), k));
                    store_512(o.add(i), k, f(x, y));
                }
            }
        }
        unsafe {
            match op {
                BinaryOp::Add => lanes(a, b, o, n, |x, y| _mm512_add_ps(x, y)),
                BinaryOp::Sub => lanes(a, b, o, n, |x, y| _mm512_sub_ps(x, y)),
                BinaryOp::Mul => lanes(a, b, o, n, |x, y| _mm512_mul_ps(x, y)),
                _ => lanes(a, b, o, n, |x, y| _mm512_div_ps(x, y)),
            }
        }
    }

    /// As [`bits_512`] on 8 lanes.
    #[inline(always)]
    unsafe fn bits_256(v: __m256) -> __m256i {
        unsafe {
            let b = _mm256_castps_si256(v);
            let hi = _mm256_srli_epi32::<16>(b);
            let lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
            let r = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
            let r = _mm256_srli_epi32::<16>(r);
            let q = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
            let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            _mm256_blendv_epi8(r, q, nan)
        }
    }

    /// 8 bf16 values at `p`, widened.
    #[inline(always)]
    unsafe fn load_256(p: *const u16) -> __m256 {
        unsafe {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        }
    }

    /// Narrows `v0` (lanes 0..8) and `v1` (8..16) to 16 bf16 values at `p`.
    #[inline(always)]
    unsafe fn store_256(p: *mut u16, v0: __m256, v1: __m256) {
        unsafe {
            // Every 32-bit lane is at most 0xFFFF: the unsigned saturating pack keeps it;
            // the pack interleaves 128-bit halves, which the permute puts back in order.
            let pk = _mm256_packus_epi32(bits_256(v0), bits_256(v1));
            let pk = _mm256_permute4x64_epi64::<0b11_01_10_00>(pk);
            _mm256_storeu_si256(p as *mut __m256i, pk);
        }
    }

    /// As [`widen_512`] with AVX2.
    ///
    /// # Safety
    /// AVX2 present; as [`widen_512`] otherwise.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn widen_256(s: *const u16, o: *mut f32, n: usize) {
        unsafe {
            let mut i = 0;
            while i + 8 <= n {
                _mm256_storeu_ps(o.add(i), load_256(s.add(i)));
                i += 8;
            }
            for j in i..n {
                *o.add(j) = f32::from_bits((*s.add(j) as u32) << 16);
            }
        }
    }

    /// As [`narrow_512`] with AVX2.
    ///
    /// # Safety
    /// As [`widen_256`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn narrow_256(s: *const f32, o: *mut u16, n: usize) {
        unsafe {
            let mut i = 0;
            while i + 16 <= n {
                store_256(
                    o.add(i),
                    _mm256_loadu_ps(s.add(i)),
                    _mm256_loadu_ps(s.add(i + 8)),
                );
                i += 16;
            }
            for j in i..n {
                *o.add(j) = bf16_bits(*s.add(j)) as u16;
            }
        }
    }

    /// As [`narrow_scaled_512`] with AVX2.
    ///
    /// # Safety
    /// As [`widen_256`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn narrow_scaled_256(s: *const f32, k: f32, o: *mut u16, n: usize) {
        unsafe {
            let kv = _mm256_set1_ps(k);
            let mut i = 0;
            while i + 16 <= n {
                let v0 = _mm256_mul_ps(_mm256_loadu_ps(s.add(i)), kv);
                let v1 = _mm256_mul_ps(_mm256_loadu_ps(s.add(i + 8)), kv);
                store_256(o.add(i), v0, v1);
                i += 16;
            }
            for j in i..n {
                *o.add(j) = bf16_bits(*s.add(j) * k) as u16;
            }
        }
    }

    /// As [`round_512`] with AVX2.
    ///
    /// # Safety
    /// As [`widen_256`], `n` elements read and written at `v`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn round_256(v: *mut f32, n: usize) {
        unsafe {
            let mut i = 0;
            while i + 8 <= n {
                let r = bits_256(_mm256_loadu_ps(v.add(i)));
                _mm256_storeu_ps(v.add(i), _mm256_castsi256_ps(_mm256_slli_epi32::<16>(r)));
                i += 8;
            }
            for j in i..n {
                *v.add(j) = round_bf16(*v.add(j));
            }
        }
    }

    /// As [`binary_512`] with AVX2.
    ///
    /// # Safety
    /// As [`widen_256`], for `a` and `b` read and `o` written.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn binary_256(
        op: BinaryOp,
        a: *const u16,
        b: *const u16,
        o: *mut u16,
        n: usize,
    ) {
        #[inline(always)]
        unsafe fn lanes(
            op: BinaryOp,
            a: *const u16,
            b: *const u16,
            o: *mut u16,
            n: usize,
            f: impl Fn(__m256, __m256) -> __m256,
        ) {
            unsafe {
                let mut i = 0;
                while i + 16 <= n {
                    let v0 = f(load_256(a.add(i)), load_256(b.add(i)));
                    let v1 = f(load_256(a.add(i + 8)), load_256(b.add(i + 8)));
                    store_256(o.add(i), v0, v1);
                    i += 16;
                }
                let w = |x: u16| f32::from_bits((x as u32) << 16);
                for j in i..n {
                    *o.add(j) = bf16_bits(scalar(op, w(*a.add(j)), w(*b.add(j)))) as u16;
                }
            }
        }
        unsafe {
            match op {
                BinaryOp::Add => lanes(op, a, b, o, n, |x, y| _mm256_add_ps(x, y)),
                BinaryOp::Sub => lanes(op, a, b, o, n, |x, y| _mm256_sub_ps(x, y)),
                BinaryOp::Mul => lanes(op, a, b, o, n, |x, y| _mm256_mul_ps(x, y)),
                _ => lanes(op, a, b, o, n, |x, y| _mm256_div_ps(x, y)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f32 bit patterns around every bf16 rounding boundary: each upper half with lower
    /// halves 0, 1, just below, at and above the tie, and all ones (every NaN payload class,
    /// ±inf, subnormals and ties of both parities among them).
    fn patterns() -> Vec<f32> {
        let lows = [0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234];
        (0..=0xFFFFu32)
            .flat_map(|hi| lows.iter().map(move |lo| f32::from_bits(hi << 16 | lo)))
            .collect()
    }

    /// Each kernel available on this CPU (the portable loop always), with `n` from 0 to 40
    /// over the start of the patterns and once over all of them (every tail length).
    fn each_level(mut check: impl FnMut(&str, Lvl)) {
        check("portable", Lvl::Portable);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                check("avx2", Lvl::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512bw") {
                check("avx512", Lvl::Avx512);
            }
        }
    }

    fn narrow_at(l: Lvl, s: &[f32], o: &mut [u16]) {
        let n = o.len();
        match l {
            #[cfg(target_arch = "x86_64")]
            Lvl::Avx512 => unsafe { x86::narrow_512(s.as_ptr(), o.as_mut_ptr(), n) },
            #[cfg(target_arch = "x86_64")]
            Lvl::Avx2 => unsafe { x86::narrow_256(s.as_ptr(), o.as_mut_ptr(), n) },
            Lvl::Portable => narrow_portable(s, o),
        }
    }

    #[test]
    fn narrow_and_round_give_half_from_f32_bits() {
        let p = patterns();
        let want: Vec<u16> = p
            .iter()
            .map(|x| half::bf16::from_f32(*x).to_bits())
            .collect();
        each_level(|name, l| {
            let mut lens: Vec<usize> = (0..=40).collect();
            lens.push(p.len());
            for n in lens {
                let mut o = vec![0xAAAAu16; n + 3];
                narrow_at(l, &p[..n], &mut o[..n]);
                assert_eq!(&o[..n], &want[..n], "{name}: narrow of {n}");
                assert!(
                    o[n..].iter().all(|v| *v == 0xAAAA),
                    "{name}: wrote past {n}"
                );
            }
            let mut v = p.clone();
            let n = v.len();
            match l {
                #[cfg(target_arch = "x86_64")]
                Lvl::Avx512 => unsafe { x86::round_512(v.as_mut_ptr(), n - 5) },
                #[cfg(target_arch = "x86_64")]
                Lvl::Avx2 => unsafe { x86::round_256(v.as_mut_ptr(), n - 5) },
                Lvl::Portable => v[..n - 5].iter_mut().for_each(|x| *x = round_bf16(*x)),
            }
            for (i, x) in v.iter().enumerate() {
                let w = if i < n - 5 {
                    (want[i] as u32) << 16
                } else {
                    p[i].to_bits()
                };
                assert_eq!(x.to_bits(), w, "{name}: round at {i}");
            }
        });
    }

    /// [`narrow_scaled`] at each level: `half::bf16::from_f32` of the f32 product, over the
    /// rounding patterns (ties, subnormals, NaNs, infinities) times 1, times a factor that
    /// turns some into subnormals and ties of their own, and times a random one, at every
    /// tail length up to 40 and once over all of them; nothing written past `n`.
    #[test]
    fn narrow_scaled_gives_half_from_f32_of_the_product() {
        let p = patterns();
        let seed = crate::backend::cpu::clock_seed();
        let r = 0.25 + (seed % 1_000_000) as f32 / 1_000_000.0;
        for k in [1.0f32, 2f32.powi(-100), 0.5, r] {
            let want: Vec<u16> = p
                .iter()
                .map(|x| half::bf16::from_f32(x * k).to_bits())
                .collect();
            each_level(|name, l| {
                for n in (0..=40).chain([p.len()]) {
                    let mut o = vec![0xAAAAu16; n + 3];
                    let (s, d) = (p.as_ptr(), o.as_mut_ptr());
                    match l {
                        #[cfg(target_arch = "x86_64")]
                        Lvl::Avx512 => unsafe { x86::narrow_scaled_512(s, k, d, n) },
                        #[cfg(target_arch = "x86_64")]
                        Lvl::Avx2 => unsafe { x86::narrow_scaled_256(s, k, d, n) },
                        Lvl::Portable => narrow_scaled_portable(&p[..n], k, &mut o[..n]),
                    }
                    for i in 0..n {
                        // A NaN product: x86 keeps the operand's payload, quieted.
                        let ok = o[i] == want[i]
                            || ((p[i] * k).is_nan()
                                && o[i] == half::bf16::from_f32(p[i]).to_bits());
                        assert!(ok, "{name}: k {k} at {i}: {:#x} vs {:#x}", o[i], want[i]);
                    }
                    assert!(
                        o[n..].iter().all(|v| *v == 0xAAAA),
                        "{name}: wrote past {n}"
                    );
                }
            });
        }
    }

    /// Which 32-lane narrowing the bf16 kernels pick on this CPU: `vcvtne2ps2bf16`
    /// ([`x86::store2_cvt`]) with AVX-512F, BW, DQ and BF16, the word permute
    /// ([`x86::store2_512`]) with AVX-512F and BW, else none (they narrow through
    /// [`narrow`] at the AVX2 or portable level). The features themselves, not `has_cvt`
    /// (which another test's `without_bf16_convert` may turn off meanwhile).
    #[cfg(target_arch = "x86_64")]
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Narrow32 {
        Cvt,
        Permute,
        Dispatched,
    }

    #[cfg(target_arch = "x86_64")]
    fn narrow32_here() -> Narrow32 {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512bw") {
            if has!("avx512dq") && has!("avx512bf16") {
                return Narrow32::Cvt;
            }
            return Narrow32::Permute;
        }
        Narrow32::Dispatched
    }

    /// `top` and the narrowings below it (each of which the CPU has too).
    #[cfg(target_arch = "x86_64")]
    fn narrow32_from(top: Narrow32) -> Vec<Narrow32> {
        let all = [Narrow32::Cvt, Narrow32::Permute, Narrow32::Dispatched];
        all.into_iter().skip_while(|h| *h != top).collect()
    }

    /// `s` narrowed 32 lanes at a time into `o` by `how` (`s.len()` a multiple of 32).
    #[cfg(target_arch = "x86_64")]
    fn narrow32(how: Narrow32, s: &[f32], o: &mut [u16]) {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
        unsafe fn cvt(s: &[f32], o: &mut [u16]) {
            use core::arch::x86_64::_mm512_loadu_ps;
            for (k, w) in s.chunks_exact(32).zip(o.chunks_exact_mut(32)) {
                // SAFETY: 32 values read and 32 written; the features are present.
                unsafe {
                    let (v0, v1) = (
                        _mm512_loadu_ps(k.as_ptr()),
                        _mm512_loadu_ps(k.as_ptr().add(16)),
                    );
                    x86::store2_cvt(w.as_mut_ptr(), v0, v1);
                }
            }
        }
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn permute(s: &[f32], o: &mut [u16]) {
            use core::arch::x86_64::_mm512_loadu_ps;
            for (k, w) in s.chunks_exact(32).zip(o.chunks_exact_mut(32)) {
                // SAFETY: as in `cvt`.
                unsafe {
                    let (v0, v1) = (
                        _mm512_loadu_ps(k.as_ptr()),
                        _mm512_loadu_ps(k.as_ptr().add(16)),
                    );
                    x86::store2_512(w.as_mut_ptr(), v0, v1);
                }
            }
        }
        assert_eq!(s.len() % 32, 0);
        assert!(o.len() >= s.len());
        match how {
            // SAFETY: `how` is at most `narrow32_here()`'s, whose features are detected.
            Narrow32::Cvt => unsafe { cvt(s, o) },
            Narrow32::Permute => unsafe { permute(s, o) },
            Narrow32::Dispatched => narrow(s, &mut o[..s.len()]),
        }
    }

    /// [`x86::store2_512`] (32 lanes narrowed by one word permute) gives
    /// `half::bf16::from_f32` of each lane over the rounding patterns (ties, subnormals,
    /// NaNs, infinities), 32 at a time, and writes nothing past them. Without AVX-512F and
    /// BW the kernels never call it: then the narrowing they do call ([`narrow`]) is
    /// checked the same way; where the CPU has it, the dispatched narrowing is checked too,
    /// and the test says what ran.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn store32_gives_half_from_f32_of_each_lane() {
        let how = match narrow32_here() {
            Narrow32::Cvt | Narrow32::Permute => Narrow32::Permute,
            Narrow32::Dispatched => Narrow32::Dispatched,
        };
        let p = patterns();
        let n = p.len() / 32 * 32;
        for how in narrow32_from(how) {
            eprintln!("ran: {how:?}");
            let mut o = vec![0xAAAAu16; n + 3];
            narrow32(how, &p[..n], &mut o[..n]);
            assert_narrowed(&p[..n], &o);
        }
    }

    /// `o` holds `half::bf16::from_f32` of each value of `s` and, past them, only the
    /// `0xAAAA` it was filled with.
    #[cfg(target_arch = "x86_64")]
    fn assert_narrowed(s: &[f32], o: &[u16]) {
        for (i, v) in s.iter().enumerate() {
            let want = half::bf16::from_f32(*v).to_bits();
            assert_eq!(o[i], want, "at {i}: {:#x}", v.to_bits());
        }
        let n = s.len();
        assert!(o[n..].iter().all(|v| *v == 0xAAAA), "wrote past {n}");
    }

    /// [`x86::store2_cvt`] (`vcvtne2ps2bf16`, or integer rounding for 32 lanes with an f32
    /// subnormal) gives `half::bf16::from_f32` of each lane over the rounding patterns, as
    /// they come (pairs with subnormals among them) and with the subnormals left out (every
    /// pair converted by the instruction: ties, NaNs, infinities, overflow to infinity).
    /// On a CPU without AVX-512F, BW, DQ and BF16 the kernels cannot take it (`has_cvt` is
    /// false, asserted): the narrowing they take instead is checked on the same patterns.
    /// Every narrowing below the CPU's best runs too, and the test says what ran.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn store32_cvt_gives_half_from_f32_of_each_lane() {
        let how = narrow32_here();
        if how != Narrow32::Cvt {
            assert!(!x86::has_cvt(), "has_cvt without the features");
        }
        let all = patterns();
        let normal: Vec<f32> = all.iter().copied().filter(|v| !v.is_subnormal()).collect();
        assert!(normal.len() >= 1024, "too few patterns");
        for how in narrow32_from(how) {
            eprintln!("ran: {how:?}");
            for p in [&all, &normal] {
                let n = p.len() / 32 * 32;
                let mut o = vec![0xAAAAu16; n + 3];
                narrow32(how, &p[..n], &mut o[..n]);
                assert_narrowed(&p[..n], &o);
            }
        }
    }

    /// [`x86::store2_eo_512`] and [`x86::store2_eo_cvt`] (32 columns split into even and odd
    /// lanes, narrowed into column order; the `_cvt` form by `vcvtne2ps2bf16` unless a `±0`
    /// word comes out of a subnormal lane, then by integer rounding) give
    /// `half::bf16::from_f32` of each column over the rounding patterns as they come (steps of
    /// negative subnormals alone among them), over the normal ones alone, over steps of
    /// normal values with one subnormal of either sign at each lane position (a lone `-0`
    /// word from a negative subnormal must send the step to the integer rounding as a `+0`
    /// one does), over steps with `±0` at a third of the lanes, and over those with one
    /// subnormal added.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn store32_eo_gives_half_from_f32_of_each_column() {
        use core::arch::x86_64::{__m512, _mm512_loadu_ps};
        /// The even and odd columns of the 32 values at `c`.
        fn split(c: &[f32]) -> ([f32; 16], [f32; 16]) {
            (
                core::array::from_fn(|i| c[2 * i]),
                core::array::from_fn(|i| c[2 * i + 1]),
            )
        }
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn int(s: &[f32], o: &mut [u16]) {
            for (k, w) in s.chunks_exact(32).zip(o.chunks_exact_mut(32)) {
                let (e, q) = split(k);
                // SAFETY: 16 values read from each array, 32 written; the features are present.
                unsafe {
                    let (e, q): (__m512, __m512) =
                        (_mm512_loadu_ps(e.as_ptr()), _mm512_loadu_ps(q.as_ptr()));
                    x86::store2_eo_512(w.as_mut_ptr(), e, q);
                }
            }
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
        unsafe fn cvt(s: &[f32], o: &mut [u16]) {
            for (k, w) in s.chunks_exact(32).zip(o.chunks_exact_mut(32)) {
                let (e, q) = split(k);
                // SAFETY: as in `int`.
                unsafe {
                    let (e, q): (__m512, __m512) =
                        (_mm512_loadu_ps(e.as_ptr()), _mm512_loadu_ps(q.as_ptr()));
                    x86::store2_eo_cvt(w.as_mut_ptr(), e, q);
                }
            }
        }
        let how = narrow32_here();
        if how == Narrow32::Dispatched {
            eprintln!("not run: no AVX-512F/BW (the even/odd rows need BW)");
            return;
        }
        let all = patterns();
        let normal: Vec<f32> = all.iter().copied().filter(|v| v.is_normal()).collect();
        let subs: Vec<f32> = all.iter().copied().filter(|v| v.is_subnormal()).collect();
        assert!(subs.iter().any(|v| v.is_sign_negative()) && subs.len() > 64);
        let lone: Vec<f32> = normal
            .chunks_exact(32)
            .enumerate()
            .flat_map(|(b, c)| {
                let mut c = c.to_vec();
                c[b % 32] = subs[(b * 7919) % subs.len()];
                c
            })
            .collect();
        // ReLU-like steps: normal values with `±0` at a third of the lanes (the convert kept),
        // and the same with one subnormal among them (the step must still go to the integer
        // rounding: its `±0` words are not all zeros of the input).
        let zeros: Vec<f32> = normal
            .chunks_exact(32)
            .enumerate()
            .flat_map(|(b, c)| {
                let mut c = c.to_vec();
                for (i, v) in c.iter_mut().enumerate() {
                    if (i + b) % 3 == 0 {
                        *v = if (i + b) % 2 == 0 { 0.0 } else { -0.0 };
                    }
                }
                c
            })
            .collect();
        let zeros_sub: Vec<f32> = zeros
            .chunks_exact(32)
            .enumerate()
            .flat_map(|(b, c)| {
                let mut c = c.to_vec();
                c[(b * 5 + 1) % 32] = subs[(b * 7919) % subs.len()];
                c
            })
            .collect();
        for p in [&all, &normal, &lone, &zeros, &zeros_sub] {
            let n = p.len() / 32 * 32;
            let mut o = vec![0xAAAAu16; n + 3];
            // SAFETY: AVX-512F and BW detected (`how`).
            unsafe { int(&p[..n], &mut o[..n]) };
            assert_narrowed(&p[..n], &o);
            if how == Narrow32::Cvt {
                let mut o = vec![0xAAAAu16; n + 3];
                // SAFETY: AVX-512F, BW, DQ and BF16 detected (`how`).
                unsafe { cvt(&p[..n], &mut o[..n]) };
                assert_narrowed(&p[..n], &o);
            }
        }
        eprintln!("ran: {how:?}");
    }

    /// [`x86::store2_eo_part_512`] (a row's ragged last step) writes `half::bf16::from_f32`
    /// of the first `t` columns only (`t` = 1 ..= 31 in turn), the words past them left as
    /// they were, over the rounding patterns (subnormals and zeros among them, in the
    /// columns written and in those left out).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn store32_eo_part_writes_its_columns_narrowed_and_no_others() {
        use core::arch::x86_64::{__m512, _mm512_loadu_ps};
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn part(c: &[f32], t: usize, o: &mut [u16]) {
            let e: [f32; 16] = core::array::from_fn(|i| c[2 * i]);
            let q: [f32; 16] = core::array::from_fn(|i| c[2 * i + 1]);
            let k = ((1u64 << t) - 1) as u32;
            // SAFETY: 16 values read from each array, the first `t` of 32 written; the
            // features are present (the caller's check).
            unsafe {
                let (e, q): (__m512, __m512) =
                    (_mm512_loadu_ps(e.as_ptr()), _mm512_loadu_ps(q.as_ptr()));
                x86::store2_eo_part_512(o.as_mut_ptr(), k, e, q);
            }
        }
        if narrow32_here() == Narrow32::Dispatched {
            eprintln!("not run: no AVX-512F/BW");
            return;
        }
        let all = patterns();
        let mut ran = 0;
        for (b, c) in all.chunks_exact(32).enumerate() {
            let t = 1 + b % 31;
            let mut o = [0xAAAAu16; 32];
            // SAFETY: AVX-512F and BW detected (`narrow32_here`).
            unsafe { part(c, t, &mut o) };
            for j in 0..32 {
                let want = if j < t {
                    half::bf16::from_f32(c[j]).to_bits()
                } else {
                    0xAAAA
                };
                assert_eq!(o[j], want, "step {b} t {t} column {j}");
            }
            ran += 1;
        }
        assert!(ran > 0);
    }

    /// Two calls of [`super::super::without_bf16_convert`] on two threads that overlap without
    /// nesting (the first returns while the second runs): the setting stays off until the
    /// second returns, and is on again after it (no other test of this crate calls it).
    #[test]
    fn without_bf16_convert_holds_until_every_overlapping_call_returns() {
        use std::sync::Barrier;
        use std::sync::atomic::Ordering;
        let (a_in, b_in, a_out) = (Barrier::new(2), Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                super::super::without_bf16_convert(|| {
                    a_in.wait();
                    b_in.wait();
                });
                a_out.wait();
            });
            s.spawn(|| {
                a_in.wait();
                super::super::without_bf16_convert(|| {
                    b_in.wait();
                    a_out.wait();
                    assert!(CVT_OFF.load(Ordering::Relaxed) > 0, "on while a call runs");
                });
            });
        });
        assert_eq!(
            CVT_OFF.load(Ordering::Relaxed),
            0,
            "off after every call returned"
        );
    }

    #[test]
    fn widen_is_exact_and_binary_rounds_once() {
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let w = |x: u16| f32::from_bits((x as u32) << 16);
        // A second operand: the patterns reversed and shifted, so NaNs, infinities,
        // subnormals and ordinary values meet each other.
        let other: Vec<u16> = all.iter().map(|x| x.rotate_left(5) ^ 0x0101).collect();
        each_level(|name, l| {
            for n in (0..=40).chain([all.len()]) {
                let mut o = vec![1.5f32; n + 3];
                match l {
                    #[cfg(target_arch = "x86_64")]
                    Lvl::Avx512 => unsafe { x86::widen_512(all.as_ptr(), o.as_mut_ptr(), n) },
                    #[cfg(target_arch = "x86_64")]
                    Lvl::Avx2 => unsafe { x86::widen_256(all.as_ptr(), o.as_mut_ptr(), n) },
                    Lvl::Portable => widen_portable(&all[..n], &mut o[..n]),
                }
                for i in 0..n {
                    assert_eq!(o[i].to_bits(), w(all[i]).to_bits(), "{name}: widen {i}");
                }
                assert!(o[n..].iter().all(|v| *v == 1.5), "{name}: wrote past {n}");
                for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
                    let mut o = vec![0xAAAAu16; n + 3];
                    let (a, b, d) = (all.as_ptr(), other.as_ptr(), o.as_mut_ptr());
                    match l {
                        #[cfg(target_arch = "x86_64")]
                        Lvl::Avx512 => unsafe { x86::binary_512(op, a, b, d, n) },
                        #[cfg(target_arch = "x86_64")]
                        Lvl::Avx2 => unsafe { x86::binary_256(op, a, b, d, n) },
                        Lvl::Portable => binary_portable(op, &all[..n], &other[..n], &mut o[..n]),
                    }
                    for i in 0..n {
                        let r = scalar(op, w(all[i]), w(other[i]));
                        let want = half::bf16::from_f32(r).to_bits();
                        // Both NaN: x86 keeps one operand's payload, which either order may
                        // pick; NaN-ness is what must agree.
                        let ok = o[i] == want || (r.is_nan() && w(o[i]).is_nan());
                        assert!(ok, "{name}: {op:?} at {i}: {:#x} vs {want:#x}", o[i]);
                    }
                    assert!(
                        o[n..].iter().all(|v| *v == 0xAAAA),
                        "{name}: wrote past {n}"
                    );
                }
            }
        });
    }
}
