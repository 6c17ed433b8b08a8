//! Times the softmax row loop's body on one thread, with the data in L1: `exp16(x - m)` of 32
//! values per step, their sum in two 16-lane accumulators, and a store of the exponentials to
//! a row buffer, for `exp` by the sequence of `vmath::exp` before the `2^(j/16)` table
//! (Cody–Waite to `|r| <= ln2/2`, degree-5 polynomial: `old`) and by the table sequence
//! (`new`), each in the checked form (`vmath::exp16`: a range test, then the single-add form)
//! and the unchecked one (`vmath::exp16_in_range`, what softmax runs when the row's minimum is
//! within 86 of its maximum). Prints cycles per 16 values, the clock measured by a chain of
//! dependent 1-cycle integer adds:
//! `cargo run --release --example exp_loop -- 1024 3` (row length, rounds).
//! The `new` copy here is checked bit for bit against `tessera::backend::cpu::vmath::exp` on
//! the timed values first. AVX-512F, AVX2 and FMA only (prints a line and exits elsewhere).

// Coefficients are written with all the digits of their fit.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::excessive_precision)]
mod body {
    use core::arch::x86_64::*;

    const SHIFTER: f32 = 12_582_912.0;
    const EXP_LO: f32 = -104.0;
    const EXP_HI: f32 = 89.0;
    const FAST_LO: f32 = -86.0;
    const FAST_HI: f32 = 87.0;

    /// The degree-5 sequence (`vmath/exp16.rs` at 0ddae94).
    mod old {
        use super::*;
        const LOG2E: f32 = core::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_359_375;
        const LN2_LO: f32 = -2.121_944_4e-4;
        const POLY: [f32; 6] = [
            1.987_569_2e-4,
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            5.000_000_1e-1,
        ];

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        fn reduce_poly(x: __m512) -> (__m512, __m512i) {
            let shifter = _mm512_set1_ps(SHIFTER);
            let k = _mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), shifter);
            let n = _mm512_sub_ps(k, shifter);
            let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
            let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
            let mut p = _mm512_set1_ps(POLY[0]);
            for c in &POLY[1..] {
                p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
            }
            let p = _mm512_add_ps(
                _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
                _mm512_set1_ps(1.0),
            );
            let ni = _mm512_sub_epi32(_mm512_castps_si512(k), _mm512_set1_epi32(0x4B40_0000));
            (p, ni)
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        pub(super) fn in_range(x: __m512) -> __m512 {
            let (p, ni) = reduce_poly(x);
            _mm512_castsi512_ps(_mm512_add_epi32(
                _mm512_castps_si512(p),
                _mm512_slli_epi32::<23>(ni),
            ))
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        fn full(x: __m512) -> __m512 {
            let x = clamp(x);
            let (p, ni) = reduce_poly(x);
            scale2(p, ni)
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        pub(super) fn checked(x: __m512) -> __m512 {
            if inside(x) { in_range(x) } else { full(x) }
        }
    }

    /// The table sequence (`vmath/exp16.rs` now).
    mod new {
        use super::*;
        const T_LOG2E: f32 = 23.083_120_654_223_414;
        const T_LN2_HI: f32 = 0.043_319_702_148_437_5;
        const T_LN2_LO: f32 = 1.996_636_559_5e-6;
        const T_C2: f32 = 0.500_016_274_841_592_1;
        const T_C3: f32 = 0.166_673_233_039_846_63;
        pub(super) const T_BITS: [u32; 16] = [
            0x3F80_0000,
            0x3F85_AAC3,
            0x3F8B_95C2,
            0x3F91_C3D3,
            0x3F98_37F0,
            0x3F9E_F532,
            0x3FA5_FED7,
            0x3FAD_583F,
            0x3FB5_04F3,
            0x3FBD_08A4,
            0x3FC5_672A,
            0x3FCE_248C,
            0x3FD7_44FD,
            0x3FE0_CCDF,
            0x3FEA_C0C7,
            0x3FF5_257D,
        ];

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        fn reduce(x: __m512) -> (__m512, __m512i) {
            let shifter = _mm512_set1_ps(SHIFTER);
            let k = _mm512_fmadd_ps(x, _mm512_set1_ps(T_LOG2E), shifter);
            let m = _mm512_sub_ps(k, shifter);
            let r = _mm512_fmadd_ps(m, _mm512_set1_ps(-T_LN2_HI), x);
            let r = _mm512_fmadd_ps(m, _mm512_set1_ps(-T_LN2_LO), r);
            (r, _mm512_castps_si512(k))
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        fn poly(r: __m512, t: __m512) -> __m512 {
            let q = _mm512_fmadd_ps(_mm512_set1_ps(T_C3), r, _mm512_set1_ps(T_C2));
            let e = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), r);
            _mm512_fmadd_ps(t, e, t)
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        pub(super) fn in_range(x: __m512, adj: __m512i) -> __m512 {
            let (r, k) = reduce(x);
            let ts = _mm512_add_epi32(_mm512_permutexvar_epi32(k, adj), _mm512_slli_epi32::<19>(k));
            poly(r, _mm512_castsi512_ps(ts))
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        fn full(x: __m512, tab: __m512) -> __m512 {
            let (r, k) = reduce(clamp(x));
            let y = poly(r, _mm512_permutexvar_ps(k, tab));
            // `2^n` as two multiplies: exponent fields `(m + 4064) >> 5`, `((m + 4064) >> 4) − that`.
            let a = _mm512_sub_epi32(k, _mm512_set1_epi32(0x4B40_0000 - 4064));
            let p1 = _mm512_srai_epi32::<5>(a);
            let p2 = _mm512_sub_epi32(_mm512_srai_epi32::<4>(a), p1);
            let y = _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(p1)));
            _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(p2)))
        }

        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        pub(super) fn checked(x: __m512, adj: __m512i, tab: __m512) -> __m512 {
            if inside(x) {
                in_range(x, adj)
            } else {
                full(x, tab)
            }
        }
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    fn inside(x: __m512) -> bool {
        let k = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(FAST_LO))
            & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, _mm512_set1_ps(FAST_HI));
        k == 0xFFFF
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    fn clamp(x: __m512) -> __m512 {
        let lo = _mm512_set1_ps(EXP_LO);
        let x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo), lo);
        let hi = _mm512_set1_ps(EXP_HI);
        _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi), hi)
    }

    /// `p · 2^n` in two halves (exponent-field add of `n >> 1`, multiply by the rest).
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    fn scale2(p: __m512, n: __m512i) -> __m512 {
        let n1 = _mm512_srai_epi32::<1>(n);
        let n2 = _mm512_sub_epi32(n, n1);
        let scaled = _mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32::<23>(n1));
        let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(n2, _mm512_set1_epi32(127)));
        _mm512_mul_ps(_mm512_castsi512_ps(scaled), _mm512_castsi512_ps(pow2))
    }

    /// The loop body of softmax's fused row pass (`fused/softmax.rs`), `exp` by `$e`.
    macro_rules! row {
        ($name:ident, |$v:ident, $adj:ident, $tab:ident| $e:expr) => {
            #[target_feature(enable = "avx512f,avx2,fma")]
            #[inline(never)]
            fn $name(xs: &[f32], es: &mut [f32], m: f32, $adj: __m512i, $tab: __m512) -> f32 {
                let _ = (&$adj, &$tab);
                let mv = _mm512_set1_ps(m);
                let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                for (x, e) in xs.chunks_exact(32).zip(es.chunks_exact_mut(32)) {
                    // SAFETY: `x` and `e` hold 32 floats.
                    unsafe {
                        let $v = _mm512_sub_ps(_mm512_loadu_ps(x.as_ptr()), mv);
                        let e0 = $e;
                        let $v = _mm512_sub_ps(_mm512_loadu_ps(x.as_ptr().add(16)), mv);
                        let e1 = $e;
                        a0 = _mm512_add_ps(a0, e0);
                        a1 = _mm512_add_ps(a1, e1);
                        _mm512_storeu_ps(e.as_mut_ptr(), e0);
                        _mm512_storeu_ps(e.as_mut_ptr().add(16), e1);
                    }
                }
                _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
            }
        };
    }
    row!(old_checked, |v, adj, tab| old::checked(v));
    row!(old_in_range, |v, adj, tab| old::in_range(v));
    row!(new_checked, |v, adj, tab| new::checked(v, adj, tab));
    row!(new_in_range, |v, adj, tab| new::in_range(v, adj));

    type Row = unsafe fn(&[f32], &mut [f32], f32, __m512i, __m512) -> f32;

    pub fn run(n: usize, rounds: usize) {
        // The loops are compiled with `avx512f,avx2,fma`.
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            println!("exp_loop: this CPU lacks AVX-512F, AVX2 or FMA");
            return;
        }
        let n = n.div_ceil(32) * 32;
        let x = tessera::Tensor::<f32>::randn(&[n], 7);
        let xs = x.as_slice().unwrap().to_vec();
        let m = xs.iter().cloned().fold(f32::MIN, f32::max);
        let mut es = vec![0f32; n];
        let adj: [u32; 16] =
            core::array::from_fn(|j| new::T_BITS[j].wrapping_sub((j as u32) << 19));
        // SAFETY: AVX-512F, AVX2 and FMA were detected; the arrays hold 16 values.
        let (adj, tab) = unsafe {
            (
                _mm512_loadu_si512(adj.as_ptr() as *const _),
                _mm512_loadu_ps(new::T_BITS.as_ptr() as *const f32),
            )
        };
        // The `new` copy is `vmath::exp`, bit for bit, on these values.
        let mut want: Vec<f32> = xs.iter().map(|v| v - m).collect();
        tessera::backend::cpu::vmath::exp(&mut want);
        for f in [new_checked as Row, new_in_range] {
            // SAFETY: AVX-512F, AVX2 and FMA were detected.
            unsafe { f(&xs, &mut es, m, adj, tab) };
            super::loop_timing::assert_same_bits(&es, &want);
        }
        let rows: [(&str, Row); 4] = [
            ("old checked", old_checked),
            ("new checked", new_checked),
            ("old in range", old_in_range),
            ("new in range", new_in_range),
        ];
        super::loop_timing::print_rounds(rounds, n, &rows, |f: Row| {
            // SAFETY: AVX-512F, AVX2 and FMA were detected.
            unsafe { f(&xs, &mut es, m, adj, tab) }
        });
    }
}

#[path = "loop_timing/mod.rs"]
mod loop_timing;

fn main() {
    let (n, rounds) = loop_timing::args();
    #[cfg(target_arch = "x86_64")]
    body::run(n, rounds);
    #[cfg(not(target_arch = "x86_64"))]
    println!("exp_loop: x86_64 only ({n}, {rounds})");
}
