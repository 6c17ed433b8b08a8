//! bf16 → bf16 `gelu` at the AVX-512 level without a lookup per element: a piecewise
//! polynomial gives each lane's result, and the lanes whose bf16 rounding it cannot decide
//! take the chain's table entry ([`super::lut`]), so every output is the table's (the
//! interpreter's) bits.
//!
//! For `-4.125 <= x < 3.875` a lane computes `x · q(u)` in f32, `q` a degree-5 polynomial
//! fitted to `Φ(x)` (minimax relative error) on each of the 32 intervals of width 1/4
//! (`j = round(4x)`, `u = 4x - j`, coefficients [`CT`] picked by one `vpermt2ps` each);
//! over the bf16 inputs of that range its result is within 5 f32 units in the last place of
//! `gelu(x)` rounded to f32 (computed in f64 when the coefficients were fitted). From
//! `3.875` on (and `+inf`) the lane's result is `x` itself. The f32 result is rounded to bf16
//! by adding `0x8000` (round half up, then the top 16 bits); a lane whose low 16 bits lie
//! within [`HALF`] units of the midpoint `0x8000`, where that rounding and the exact result's
//! could differ, takes the table's entry instead, as do inputs below `-4.125`, `-inf` and
//! NaN. That the result equals the table for every one of the 65 536 inputs, in every lane
//! and the scalar tail, is checked exhaustively by this module's test; with
//! standard-normal inputs about 0.08 % of the lanes take the table's entry.

use super::lut;
use super::plan::DirectStep;
use tessera_ir::graph::UnaryOp;

/// Half the width of the undecided window around the bf16 midpoint, in f32 units in the
/// last place (a power of two, above the polynomial's error plus `vmath::gelu`'s).
const HALF: u32 = 16;
/// The polynomial's range: `LO <= x < HI`.
const LO: f32 = -4.125;
/// From here on a lane's result is `x`.
const HI: f32 = 3.875;

/// Whether `ops` (a direct chain) is one gelu with its rounding: the table of such a chain
/// holds each input's `gelu` rounded to bf16.
pub(crate) fn is_gelu(ops: &[DirectStep]) -> bool {
    matches!(
        ops,
        [DirectStep::Unary(UnaryOp::Gelu)] | [DirectStep::Unary(UnaryOp::Gelu), DirectStep::Round]
    )
}

/// `o[i] = t[s[i]]` over `o.len()` elements (`s` at least as long), `t` the bf16 table of
/// `ops`: computed as described in the module docs when `ops` is a gelu ([`is_gelu`]) and the
/// active SIMD level is AVX-512, else looked up ([`lut::look_u16`]).
#[inline(always)]
pub(crate) fn look(ops: &[DirectStep], t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if is_gelu(ops)
        && crate::backend::cpu::simd::active() == crate::backend::cpu::simd::SimdLevel::Avx512
    {
        let n = o.len();
        // SAFETY: AVX-512F, AVX2 and FMA are present at this level; `s` holds at least `n`.
        return unsafe { x86::gelu(t, &s[..n], o) };
    }
    lut::look_u16(t, s, o)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CT, HALF, HI, LO};
    use core::arch::x86_64::*;

    /// `1.5 · 2^23`: `4x + MAGIC` holds `round(4x)` in its low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;

    /// `o[i] = t[s[i]]` for gelu's table `t` (equal lengths): blocks of 256 elements (8
    /// steps of 32, each step's lanes left to the table kept as a mask, and the table's
    /// entries written after the block's steps), then single steps, then a lookup per element.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn gelu(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16]) {
        let n = o.len();
        assert_eq!(s.len(), n);
        // SAFETY: `CT[k]` holds 32 floats.
        let lo: [__m512; 6] = core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr()) });
        // SAFETY: as above.
        let hi: [__m512; 6] =
            core::array::from_fn(|k| unsafe { _mm512_loadu_ps(CT[k].as_ptr().add(16)) });
        let mut i = 0;
        let mut masks = [0u32; 8];
        while i + 256 <= n {
            let mut any = 0;
            for (k, m) in masks.iter_mut().enumerate() {
                let at = i + 32 * k;
                // SAFETY: `at + 32 <= n` elements of `s` and `o`.
                *m = unsafe { step(s.as_ptr().add(at), o.as_mut_ptr().add(at), &lo, &hi) };
                any |= *m;
            }
            if any != 0 {
                for (k, m) in masks.iter().enumerate() {
                    let at = i + 32 * k;
                    fix(t, &s[at..at + 32], &mut o[at..at + 32], *m);
                }
            }
            i += 256;
        }
        while i + 32 <= n {
            // SAFETY: `i + 32 <= n`.
            let m = unsafe { step(s.as_ptr().add(i), o.as_mut_ptr().add(i), &lo, &hi) };
            fix(t, &s[i..i + 32], &mut o[i..i + 32], m);
            i += 32;
        }
        for (o, x) in o[i..].iter_mut().zip(&s[i..]) {
            *o = t[*x as usize];
        }
    }

    /// The 32 elements from `s` into `o`; returns the lanes left to the table: bit `k` for
    /// element `2k`, bit `16 + k` for element `2k + 1`.
    ///
    /// # Safety
    /// As [`gelu`]; `s` readable and `o` writable for 32 elements.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    unsafe fn step(s: *const u16, o: *mut u16, lo: &[__m512; 6], hi: &[__m512; 6]) -> u32 {
        let top = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        // SAFETY: the caller's contract.
        let v = unsafe { _mm512_loadu_si512(s.cast()) };
        // Dword k holds elements 2k (low half) and 2k + 1 (high half).
        let (we, be) = lanes(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)), lo, hi);
        let (wo, bo) = lanes(_mm512_castsi512_ps(_mm512_and_si512(v, top)), lo, hi);
        // (top & wo) | (!top & we >> 16)
        let out = _mm512_ternarylogic_epi32::<0xCA>(top, wo, _mm512_srli_epi32::<16>(we));
        // SAFETY: as above.
        unsafe { _mm512_storeu_si512(o.cast(), out) };
        u32::from(be) | u32::from(bo) << 16
    }

    /// The table's entries for the lanes of `m` ([`step`]'s mask) of one step's 32 elements.
    #[inline(always)]
    fn fix(t: &[u16; 1 << 16], s: &[u16], o: &mut [u16], mut m: u32) {
        while m != 0 {
            let b = m.trailing_zeros() as usize;
            let e = 2 * (b & 15) + (b >> 4);
            o[e] = t[s[e] as usize];
            m &= m - 1;
        }
    }

    /// One vector of inputs `x`: the f32 result's bits plus `0x8000 + HALF` (the top 16 bits
    /// the bf16 result where decided) and the lanes left to the table.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    fn lanes(x: __m512, lo: &[__m512; 6], hi: &[__m512; 6]) -> (__m512i, u16) {
        let magic = _mm512_set1_ps(MAGIC);
        let four = _mm512_set1_ps(4.0);
        let t = _mm512_fmadd_ps(x, four, magic);
        let j = _mm512_castps_si512(t);
        // u = 4x - round(4x), exact.
        let u = _mm512_fmsub_ps(x, four, _mm512_sub_ps(t, magic));
        let mut q = _mm512_permutex2var_ps(lo[5], j, hi[5]);
        for k in (0..5).rev() {
            q = _mm512_fmadd_ps(q, u, _mm512_permutex2var_ps(lo[k], j, hi[k]));
        }
        let r = _mm512_mul_ps(x, q);
        let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(HI));
        let r = _mm512_mask_mov_ps(r, big, x);
        let w = _mm512_add_epi32(
            _mm512_castps_si512(r),
            _mm512_set1_epi32((0x8000 + HALF) as i32),
        );
        // Decided: `x >= LO` (not NaN) and the low 16 bits of `w` at least `2 HALF` (not
        // within `HALF` of the midpoint).
        let ge = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(LO));
        let window = _mm512_set1_epi32((0xFFFF & !(2 * HALF - 1)) as i32);
        (w, !_mm512_mask_test_epi32_mask(ge, w, window))
    }
}

/// Coefficients: `CT[k][j mod 32]` multiplies `u^k` on the interval `round(4x) = j`,
/// `-16 <= j < 16` (fitted in f64 to `Φ(j/4 + u/4)` for `u ∈ [-1/2, 1/2]`, minimax relative
/// error by reweighted least squares, rounded to f32).
#[allow(clippy::excessive_precision)]
pub(crate) const CT: [[f32; 32]; 6] = [
    [
        0.5,
        0.5987063050270081,
        0.6914624571800232,
        0.7733726501464844,
        0.8413447737693787,
        0.8943502306938171,
        0.933192789554596,
        0.9599408507347107,
        0.9772498607635498,
        0.9877755045890808,
        0.993790328502655,
        0.9970202445983887,
        0.998650074005127,
        0.9994229674339294,
        0.9997673630714417,
        0.9999116063117981,
        3.167125032632612e-05,
        8.841729868436232e-05,
        0.00023262909962795675,
        0.0005770250572822988,
        0.0013498980551958084,
        0.0029797633178532124,
        0.006209665443748236,
        0.012224472127854824,
        0.0227501317858696,
        0.040059156715869904,
        0.06680720299482346,
        0.10564977675676346,
        0.15865525603294373,
        0.22662734985351562,
        0.3085375428199768,
        0.40129366517066956,
    ],
    [
        0.0997355729341507,
        0.09666702896356583,
        0.0880163311958313,
        0.07528436183929443,
        0.060492683202028275,
        0.04566227272152901,
        0.032379399985075,
        0.021569330245256424,
        0.013497741892933846,
        0.007934913039207458,
        0.004382075276225805,
        0.0022733905352652073,
        0.001107962103560567,
        0.0005072620115242898,
        0.00021817068045493215,
        8.814892498776317e-05,
        3.345750883454457e-05,
        8.814885222818702e-05,
        0.00021817057859152555,
        0.000507261895108968,
        0.001107961987145245,
        0.0022733905352652073,
        0.004382075276225805,
        0.007934913039207458,
        0.013497741892933846,
        0.021569330245256424,
        0.032379399985075,
        0.04566227272152901,
        0.060492679476737976,
        0.07528435438871384,
        0.0880163311958313,
        0.09666702896356583,
    ],
    [
        2.0342056164524003e-11,
        -0.0030208281241357327,
        -0.005500994622707367,
        -0.007057882379740477,
        -0.007561567705124617,
        -0.007134724874049425,
        -0.006071142852306366,
        -0.00471830228343606,
        -0.0033744468819350004,
        -0.0022317026741802692,
        -0.0013694028602913022,
        -0.0007814790587872267,
        -0.00041548485751263797,
        -0.00020607355691026896,
        -9.54481220105663e-05,
        -4.131866808165796e-05,
        1.6728106857044622e-05,
        4.1318726289318874e-05,
        9.544818749418482e-05,
        0.00020607361511792988,
        0.00041548488661646843,
        0.0007814790587872267,
        0.0013694027438759804,
        0.0022317026741802692,
        0.0033744468819350004,
        0.004718301817774773,
        0.006071142852306366,
        0.007134724874049425,
        0.007561567705124617,
        0.007057882845401764,
        0.005500994622707367,
        0.0030208281241357327,
    ],
    [
        -0.0010389081435278058,
        -0.0009440126596018672,
        -0.0006876298575662076,
        -0.0003430971410125494,
        -4.8544483988166576e-09,
        0.00026754839927889407,
        0.00042160446173511446,
        0.00046340300468727946,
        0.00042180513264611363,
        0.00033578858710825443,
        0.00023964594583958387,
        0.00015540838649030775,
        9.233055607182905e-05,
        5.052811320638284e-05,
        2.5566783733665943e-05,
        1.1994083251920529e-05,
        5.228450390859507e-06,
        1.1995331988146063e-05,
        2.5568378987372853e-05,
        5.0529710279079154e-05,
        9.233141463482752e-05,
        0.00015540751337539405,
        0.00023964248248375952,
        0.0003357824170961976,
        0.0004217973619233817,
        0.00046339601976796985,
        0.0004216012021061033,
        0.00026755104772746563,
        3.83225495781403e-09,
        -0.00034308474278077483,
        -0.0006876178085803986,
        -0.0009440052672289312,
    ],
    [
        -1.0748418127759507e-10,
        4.604087371262722e-05,
        7.850985275581479e-05,
        8.932433411246166e-05,
        7.858200115151703e-05,
        5.336476897355169e-05,
        2.377532291575335e-05,
        -1.4162012575980043e-06,
        -1.7451711755711585e-05,
        -2.388249777141027e-05,
        -2.3132835849537514e-05,
        -1.855928530858364e-05,
        -1.2994001735933125e-05,
        -8.134420568239875e-06,
        -4.615012585418299e-06,
        -2.3928673726913985e-06,
        1.140087761086761e-06,
        2.3926381800265517e-06,
        4.6147297325660475e-06,
        8.134144081850536e-06,
        1.2993834388907999e-05,
        1.8559343516244553e-05,
        2.3133205104386434e-05,
        2.3883159883553162e-05,
        1.745251938700676e-05,
        1.416915665686247e-06,
        -2.3774919100105762e-05,
        -5.336476897355169e-05,
        -7.858232129365206e-05,
        -8.932478522183374e-05,
        -7.851026020944118e-05,
        -4.604115747497417e-05,
    ],
    [
        9.707703611638863e-06,
        8.253268788394053e-06,
        4.478682512853993e-06,
        -1.2413505601216457e-07,
        -3.910509803972673e-06,
        -5.821179911436047e-06,
        -5.7149063650285825e-06,
        -4.205242476018611e-06,
        -2.2010347038303735e-06,
        -4.5928499048386584e-07,
        6.427443395295995e-07,
        1.0909603815889568e-06,
        1.079419462257647e-06,
        8.448701009911019e-07,
        5.656827397615416e-07,
        3.34866825824065e-07,
        1.756536676111864e-07,
        3.3084879191846994e-07,
        5.60548414796358e-07,
        8.397382202929293e-07,
        1.0766515288196388e-06,
        1.093727519219101e-06,
        6.53824770324718e-07,
        -4.3948364236712223e-07,
        -2.176133875764208e-06,
        -4.182899829174858e-06,
        -5.704518116544932e-06,
        -5.829622296005255e-06,
        -3.938288955396274e-06,
        -1.638446036622554e-07,
        4.440146312845172e-06,
        8.229634659073781e-06,
    ],
];

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{HI, LO, x86};
    use crate::backend::cpu::fused::chunk::bf16_bits;

    /// The AVX-512 level's table: `vmath::gelu`'s AVX-512 kernel on every bf16 input,
    /// rounded to bf16.
    fn table() -> Box<[u16; 1 << 16]> {
        let mut v: Vec<f32> = (0..=0xFFFFu32).map(|x| f32::from_bits(x << 16)).collect();
        // SAFETY: only called where AVX-512F, AVX2 and FMA are detected.
        unsafe { crate::backend::cpu::vmath::gelu_simd::avx512(&mut v) };
        let t: Vec<u16> = v.iter().map(|x| bf16_bits(*x) as u16).collect();
        t.into_boxed_slice().try_into().unwrap()
    }

    fn avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
    }

    /// Every one of the 65 536 inputs, in order, in a shuffled order and from every offset
    /// 0..32 (so each input meets every lane and the scalar tail), gives the table's bits.
    #[test]
    fn every_bf16_input_gives_the_tables_bits() {
        if !avx512() {
            return;
        }
        let t = table();
        let all: Vec<u16> = (0..=0xFFFFu16).collect();
        let mut shuffled = all.clone();
        let mut z = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..shuffled.len()).rev() {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            shuffled.swap(i, (z % (i as u64 + 1)) as usize);
        }
        for s in [&all, &shuffled] {
            for off in 0..32 {
                let s = &s[off..];
                let mut o = vec![0u16; s.len()];
                // SAFETY: AVX-512F, AVX2 and FMA detected.
                unsafe { x86::gelu(&t, s, &mut o) };
                for (x, y) in s.iter().zip(&o) {
                    assert_eq!(*y, t[*x as usize], "input {x:#06x}");
                }
            }
        }
    }

    /// The polynomial decides the lanes: with a table of a value gelu never gives
    /// (`0x7FC1`, a NaN), all but the lanes left to the table still get the true bits, and
    /// those are few: under 1 % of the inputs in the polynomial's range and of
    /// standard-normal ones.
    #[test]
    fn the_polynomial_decides_most_lanes() {
        if !avx512() {
            return;
        }
        let t = table();
        let poison = Box::new([0x7FC1u16; 1 << 16]);
        let count = |s: &[u16]| {
            let mut o = vec![0u16; s.len()];
            // SAFETY: AVX-512F, AVX2 and FMA detected.
            unsafe { x86::gelu(&poison, s, &mut o) };
            let mut left = 0;
            for (x, y) in s.iter().zip(&o) {
                if *y == 0x7FC1 {
                    left += 1;
                } else {
                    assert_eq!(*y, t[*x as usize], "input {x:#06x}");
                }
            }
            left
        };
        let range: Vec<u16> = (0..=0xFFFFu16)
            .filter(|x| (LO..HI).contains(&f32::from_bits(u32::from(*x) << 16)))
            .collect();
        let left = count(&range);
        assert!(
            left > 0 && left < range.len() / 100,
            "{left} of {}",
            range.len()
        );
        let normal: Vec<u16> = crate::Tensor::<crate::bf16>::randn(&[1 << 16], 11)
            .to_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let left = count(&normal);
        assert!(left < (1 << 16) / 100, "{left}");
    }
}
