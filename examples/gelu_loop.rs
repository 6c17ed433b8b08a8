//! Times the AVX-512 gelu central loop on one thread, with the data in L1: `dst[i] =
//! central(src[i])` for a row of normal samples clamped to `|x| <= 4.4` (no lane takes the
//! tail), with one range test per step as `vmath/gelu512`'s `map`, for several sequences.
//! Prints cycles per 16 values, the clock measured by a chain of dependent 1-cycle integer
//! adds: `cargo run --release --example gelu_loop -- 1024 3` (row length, rounds).
//! Two vectors per step, one after the other: `cur` (`vmath::gelu`'s sequence before it took
//! four vectors per step: 16 intervals, 8 `vpermps`, 8 FMAs; checked bit for bit against
//! `tessera::backend::cpu::vmath::gelu` first, as are `w2`, `w4`, `w8`), `noperm` (every `vpermps` replaced by the
//! table register itself), `perm4` (4 `vpermps`, each result used twice), `t2d6` / `t2d5`
//! (32 intervals, one `vpermt2ps` per coefficient, degree 6 / 5), `pack2` (`cur` with
//! `(c7, c6)` and `(c5, c4)` each one register: the lane and the lane shifted left by 16),
//! `t2p` (`t2d6` with `(c6, c5)` and `(c4, c3)` packed), `estrin` (`cur` by Estrin's scheme),
//! `t2e` (`t2d6` by Estrin's scheme), `eo` (even and odd Horner chains in `u²`). `wW_*`: `W`
//! vectors per step, each step on all `W` before the next (`w4` is `vmath::gelu`'s loop now;
//! `_t2`, `_pack2`, `_t2p`, `_noperm`, `_estrin`, `_t2e` as above; `_pack1` packs `(c7,
//! c6)` only; `_nosub` drops the `− ½` of `u`). Every sequence but `cur` and `wW` computes
//! other values than `vmath::gelu` (placeholder tables): timing only. AVX-512F/DQ, AVX2 and
//! FMA only (prints a line and exits elsewhere).
//! `cargo run --release --example gelu_loop -- 1024 3 chain` times the operand chain
//! `gelu(x · y + 1)` instead (`vmath/gelu512/chain.rs`'s loop: `ch4` and its variants, see
//! `run_chain`), each form checked bit for bit against `vmath::gelu` on `x · y + 1` first.

#[cfg(target_arch = "x86_64")]
#[allow(clippy::excessive_precision)]
mod body {
    use core::arch::x86_64::*;

    /// 16 registers of table values (each sequence uses its first few).
    type Tab = [__m512; 16];

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn tail_of(x: __m512, c: __m512, ax: __m512) -> __m512 {
        let xi = _mm512_castps_si512(x);
        let sign = _mm512_set1_epi32(i32::MIN);
        let b = _mm512_castsi512_ps(_mm512_min_epu32(xi, sign));
        _mm512_fmadd_ps(ax, c, b)
    }

    /// 16 intervals of width 1/2: `|x|`, `j = ⌊2|x|⌋` (`2|x|` by an add) and `u = 2|x| − j − ½`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn split2(x: __m512) -> (__m512, __m512i, __m512) {
        let ax = _mm512_abs_ps(x);
        let v = _mm512_add_ps(ax, ax);
        let j = _mm512_cvttps_epi32(v);
        let f = _mm512_reduce_ps::<0x09>(v);
        (ax, j, _mm512_sub_ps(f, _mm512_set1_ps(0.5)))
    }

    /// 32 intervals of width 1/4: `|x|`, `j = ⌊4|x|⌋` and `u = 4|x| − j − ½`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn split4(x: __m512) -> (__m512, __m512i, __m512) {
        let ax = _mm512_abs_ps(x);
        let v = _mm512_mul_ps(ax, _mm512_set1_ps(4.0));
        let j = _mm512_cvttps_epi32(v);
        let f = _mm512_reduce_ps::<0x09>(v);
        (ax, j, _mm512_sub_ps(f, _mm512_set1_ps(0.5)))
    }

    /// `vmath/gelu512`'s `central`: returns the result and `j` for the range test.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn cur(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split2(x);
        let mut c = _mm512_permutexvar_ps(j, tab[7]);
        for k in (0..7).rev() {
            c = _mm512_fmadd_ps(c, u, _mm512_permutexvar_ps(j, tab[k]));
        }
        (tail_of(x, c, ax), j)
    }

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn noperm(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split2(x);
        let mut c = tab[7];
        for k in (0..7).rev() {
            c = _mm512_fmadd_ps(c, u, tab[k]);
        }
        (tail_of(x, c, ax), j)
    }

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn perm4(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split2(x);
        let p: [__m512; 4] = core::array::from_fn(|k| _mm512_permutexvar_ps(j, tab[k]));
        let mut c = p[3];
        for k in (0..7).rev() {
            c = _mm512_fmadd_ps(c, u, p[k / 2]);
        }
        (tail_of(x, c, ax), j)
    }

    /// 32 intervals of width 1/4: `j = ⌊4|x|⌋`, `u = 4|x| − j − ½`, degree `D`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn t2<const D: usize>(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split4(x);
        let mut c = _mm512_permutex2var_ps(tab[2 * D], j, tab[2 * D + 1]);
        for k in (0..D).rev() {
            c = _mm512_fmadd_ps(c, u, _mm512_permutex2var_ps(tab[2 * k], j, tab[2 * k + 1]));
        }
        (tail_of(x, c, ax), _mm512_srli_epi32::<1>(j))
    }

    /// `cur` with `(c7, c6)` and `(c5, c4)` each packed in one register (`c_hi` the lane,
    /// `c_lo` the lane shifted left by 16): 6 `vpermps`, 2 shifts, 8 FMAs (timing only).
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn pack2(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split2(x);
        let lo = |p: __m512| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_castps_si512(p)));
        let p76 = _mm512_permutexvar_ps(j, tab[7]);
        let p54 = _mm512_permutexvar_ps(j, tab[5]);
        let mut c = _mm512_fmadd_ps(p76, u, lo(p76));
        c = _mm512_fmadd_ps(c, u, p54);
        c = _mm512_fmadd_ps(c, u, lo(p54));
        for k in (0..4).rev() {
            c = _mm512_fmadd_ps(c, u, _mm512_permutexvar_ps(j, tab[k]));
        }
        (tail_of(x, c, ax), j)
    }

    /// `t2::<6>` with `(c6, c5)` and `(c4, c3)` packed: 5 `vpermt2ps`, 2 shifts, 7 FMAs
    /// (timing only).
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn t2p(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split4(x);
        let lo = |p: __m512| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_castps_si512(p)));
        let p65 = _mm512_permutex2var_ps(tab[12], j, tab[13]);
        let p43 = _mm512_permutex2var_ps(tab[8], j, tab[9]);
        let mut c = _mm512_fmadd_ps(p65, u, lo(p65));
        c = _mm512_fmadd_ps(c, u, p43);
        c = _mm512_fmadd_ps(c, u, lo(p43));
        for k in (0..3).rev() {
            c = _mm512_fmadd_ps(c, u, _mm512_permutex2var_ps(tab[2 * k], j, tab[2 * k + 1]));
        }
        (tail_of(x, c, ax), _mm512_srli_epi32::<1>(j))
    }

    /// `cur` with the polynomial by Estrin's scheme (`u²`, `u⁴`, pairs, then pairs of
    /// pairs): 8 `vpermps`, 7 FMAs and 2 multiplies, 3 FMA latencies deep (timing only).
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn estrin(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split2(x);
        let p = |k: usize| _mm512_permutexvar_ps(j, tab[k]);
        let u2 = _mm512_mul_ps(u, u);
        let u4 = _mm512_mul_ps(u2, u2);
        let p01 = _mm512_fmadd_ps(p(1), u, p(0));
        let p23 = _mm512_fmadd_ps(p(3), u, p(2));
        let p45 = _mm512_fmadd_ps(p(5), u, p(4));
        let p67 = _mm512_fmadd_ps(p(7), u, p(6));
        let q0 = _mm512_fmadd_ps(p23, u2, p01);
        let q1 = _mm512_fmadd_ps(p67, u2, p45);
        let c = _mm512_fmadd_ps(q1, u4, q0);
        (tail_of(x, c, ax), j)
    }

    /// `t2::<6>` by Estrin's scheme: 7 `vpermt2ps`, 6 FMAs and 2 multiplies (timing only).
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn t2e(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split4(x);
        let p = |k: usize| _mm512_permutex2var_ps(tab[2 * k], j, tab[2 * k + 1]);
        let u2 = _mm512_mul_ps(u, u);
        let u4 = _mm512_mul_ps(u2, u2);
        let p01 = _mm512_fmadd_ps(p(1), u, p(0));
        let p23 = _mm512_fmadd_ps(p(3), u, p(2));
        let p45 = _mm512_fmadd_ps(p(5), u, p(4));
        let q0 = _mm512_fmadd_ps(p23, u2, p01);
        let q1 = _mm512_fmadd_ps(p(6), u2, p45);
        let c = _mm512_fmadd_ps(q1, u4, q0);
        (tail_of(x, c, ax), _mm512_srli_epi32::<1>(j))
    }

    /// `cur` with two Horner chains in `u²` (even and odd coefficients), joined by one FMA:
    /// 8 `vpermps`, 7 FMAs, 1 multiply (timing only).
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn eo(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        let (ax, j, u) = split2(x);
        let p = |k: usize| _mm512_permutexvar_ps(j, tab[k]);
        let u2 = _mm512_mul_ps(u, u);
        let mut e = _mm512_fmadd_ps(p(6), u2, p(4));
        let mut o = _mm512_fmadd_ps(p(7), u2, p(5));
        e = _mm512_fmadd_ps(e, u2, p(2));
        o = _mm512_fmadd_ps(o, u2, p(3));
        e = _mm512_fmadd_ps(e, u2, p(0));
        o = _mm512_fmadd_ps(o, u2, p(1));
        let c = _mm512_fmadd_ps(o, u, e);
        (tail_of(x, c, ax), j)
    }

    /// The central form on `W` vectors, each step on all `W` before the next (as
    /// `vmath/gelu512`'s `central_w`), by sequence `M`: 0 `cur`, 1 `t2d6` (Horner), 2
    /// `pack2`, 3 `t2d6` with `(c6, c5)` packed, 4 `cur` with `(c7, c6)` packed, 5 `noperm`,
    /// 6 `estrin`, 7 `t2e`, 8 `cur` without the `− ½` of `u`.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn var_w<const W: usize, const M: u32>(
        x: &[__m512; W],
        tab: &Tab,
    ) -> ([__m512; W], [__m512i; W]) {
        let z = _mm512_setzero_ps();
        let (mut ax, mut u, mut c) = ([z; W], [z; W], [z; W]);
        let mut j = [_mm512_setzero_si512(); W];
        let t2 = M == 1 || M == 3 || M == 7;
        let s = _mm512_set1_ps(if t2 { 4.0 } else { 2.0 });
        for w in 0..W {
            ax[w] = _mm512_abs_ps(x[w]);
            let v = _mm512_mul_ps(ax[w], s);
            j[w] = _mm512_cvttps_epi32(v);
            let f = _mm512_reduce_ps::<0x09>(v);
            u[w] = if M == 8 {
                f
            } else {
                _mm512_sub_ps(f, _mm512_set1_ps(0.5))
            };
        }
        let p = |w: usize, k: usize, j: &[__m512i; W]| {
            if t2 {
                _mm512_permutex2var_ps(tab[2 * k], j[w], tab[2 * k + 1])
            } else if M == 5 {
                tab[k]
            } else {
                _mm512_permutexvar_ps(j[w], tab[k])
            }
        };
        let lo = |p: __m512| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_castps_si512(p)));
        let top = if t2 { 6 } else { 7 };
        if M == 6 || M == 7 {
            let mut r = [z; W];
            for w in 0..W {
                let u2 = _mm512_mul_ps(u[w], u[w]);
                let u4 = _mm512_mul_ps(u2, u2);
                let p01 = _mm512_fmadd_ps(p(w, 1, &j), u[w], p(w, 0, &j));
                let p23 = _mm512_fmadd_ps(p(w, 3, &j), u[w], p(w, 2, &j));
                let p45 = _mm512_fmadd_ps(p(w, 5, &j), u[w], p(w, 4, &j));
                let p67 = if M == 6 {
                    _mm512_fmadd_ps(p(w, 7, &j), u[w], p(w, 6, &j))
                } else {
                    p(w, 6, &j)
                };
                let q0 = _mm512_fmadd_ps(p23, u2, p01);
                let q1 = _mm512_fmadd_ps(p67, u2, p45);
                r[w] = tail_of(x[w], _mm512_fmadd_ps(q1, u4, q0), ax[w]);
            }
            return (r, j);
        }
        let mut k = top;
        if M == 2 || M == 3 || M == 4 {
            // top pair packed
            for w in 0..W {
                let q = p(w, top, &j);
                c[w] = _mm512_fmadd_ps(q, u[w], lo(q));
            }
            k -= 2;
            if M == 2 {
                for w in 0..W {
                    let q = p(w, 5, &j);
                    c[w] = _mm512_fmadd_ps(c[w], u[w], q);
                    c[w] = _mm512_fmadd_ps(c[w], u[w], lo(q));
                }
                k -= 2;
            }
        } else {
            c = core::array::from_fn(|w| p(w, top, &j));
            k -= 1;
        }
        loop {
            for w in 0..W {
                c[w] = _mm512_fmadd_ps(c[w], u[w], p(w, k, &j));
            }
            if k == 0 {
                break;
            }
            k -= 1;
        }
        let mut r = [z; W];
        for w in 0..W {
            r[w] = tail_of(x[w], c[w], ax[w]);
        }
        (r, j)
    }

    macro_rules! row_w {
        ($name:ident, $w:literal, $m:literal) => {
            #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
            #[inline(never)]
            fn $name(xs: &[f32], ys: &mut [f32], tab: &Tab) -> u32 {
                let mut odd = 0u32;
                for (x, y) in xs.chunks_exact(16 * $w).zip(ys.chunks_exact_mut(16 * $w)) {
                    // SAFETY: `x` and `y` hold `16 W` floats.
                    unsafe {
                        let v: [__m512; $w] =
                            core::array::from_fn(|w| _mm512_loadu_ps(x.as_ptr().add(16 * w)));
                        let (r, j) = var_w::<$w, $m>(&v, tab);
                        let mut m = j[0];
                        for w in 1..$w {
                            m = _mm512_max_epu32(m, j[w]);
                        }
                        if _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(9)) != 0 {
                            odd += 1;
                        }
                        for w in 0..$w {
                            _mm512_storeu_ps(y.as_mut_ptr().add(16 * w), r[w]);
                        }
                    }
                }
                odd
            }
        };
    }
    row_w!(row_w2, 2, 0);
    row_w!(row_w4, 4, 0);
    row_w!(row_w8, 8, 0);
    row_w!(row_w4_t2, 4, 1);
    row_w!(row_w4_pack2, 4, 2);
    row_w!(row_w4_t2p, 4, 3);
    row_w!(row_w4_pack1, 4, 4);
    row_w!(row_w4_noperm, 4, 5);
    row_w!(row_w4_estrin, 4, 6);
    row_w!(row_w4_t2e, 4, 7);
    row_w!(row_w2_estrin, 2, 6);
    row_w!(row_w4_nosub, 4, 8);

    macro_rules! row {
        ($name:ident, $f:ident) => {
            #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
            #[inline(never)]
            fn $name(xs: &[f32], ys: &mut [f32], tab: &Tab) -> u32 {
                let mut odd = 0u32;
                for (x, y) in xs.chunks_exact(32).zip(ys.chunks_exact_mut(32)) {
                    // SAFETY: `x` and `y` hold 32 floats.
                    unsafe {
                        let (r0, j0) = $f(_mm512_loadu_ps(x.as_ptr()), tab);
                        let (r1, j1) = $f(_mm512_loadu_ps(x.as_ptr().add(16)), tab);
                        let m = _mm512_max_epu32(j0, j1);
                        if _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(9)) != 0 {
                            odd += 1;
                        }
                        _mm512_storeu_ps(y.as_mut_ptr(), r0);
                        _mm512_storeu_ps(y.as_mut_ptr().add(16), r1);
                    }
                }
                odd
            }
        };
    }
    row!(row_cur, cur);
    row!(row_noperm, noperm);
    row!(row_perm4, perm4);
    row!(row_t2d6, t2_6);
    row!(row_t2d5, t2_5);
    row!(row_pack2, pack2);
    row!(row_t2p, t2p);
    row!(row_estrin, estrin);
    row!(row_t2e, t2e);
    row!(row_eo, eo);

    /// The chain's form (`vmath/gelu512/chain.rs`'s `lanes_run` for `gelu(x · y + 1)`): four
    /// vectors per step, `v = x · y` then `v + 1` (each rounded), the central form, then a
    /// range test per step: `C = 0` the chain's own (`outside`: signed and unsigned maxima
    /// of the bits, two compares), `C = 1` gelu's (`j ≥ 9` on the maximum of `j`), `C = 2`
    /// none, `C = 3` as 0 with the `1` read from 16 copies in memory each vector (as
    /// `Lanes` reads a constant through its pointer).
    type ChainRow = unsafe fn(&[f32], &[f32], &mut [f32], &Tab) -> u32;

    /// `n + 1`, out of line: the range test's branch stays a branch.
    #[inline(never)]
    fn bump(n: &mut u32) {
        *n += 1;
    }

    macro_rules! row_chain {
        ($name:ident, $c:literal) => {
            #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
            #[inline(never)]
            fn $name(xs: &[f32], ks: &[f32], ys: &mut [f32], tab: &Tab) -> u32 {
                let mut odd = 0u32;
                let ones = [1f32; 16];
                let one = std::hint::black_box(ones.as_ptr());
                for ((x, k), y) in xs
                    .chunks_exact(64)
                    .zip(ks.chunks_exact(64))
                    .zip(ys.chunks_exact_mut(64))
                {
                    // SAFETY: `x`, `k` and `y` hold 64 floats, `one` 16.
                    unsafe {
                        let v: [__m512; 4] = core::array::from_fn(|w| {
                            let p = _mm512_mul_ps(
                                _mm512_loadu_ps(x.as_ptr().add(16 * w)),
                                _mm512_loadu_ps(k.as_ptr().add(16 * w)),
                            );
                            let c = if $c == 3 {
                                _mm512_loadu_ps(one)
                            } else {
                                _mm512_set1_ps(1.0)
                            };
                            _mm512_add_ps(p, c)
                        });
                        let (r, j) = var_w::<4, 0>(&v, tab);
                        let out = match $c {
                            1 => {
                                let m = _mm512_max_epu32(
                                    _mm512_max_epu32(j[0], j[1]),
                                    _mm512_max_epu32(j[2], j[3]),
                                );
                                _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(9)) != 0
                            }
                            2 => false,
                            _ => {
                                let mut s = _mm512_castps_si512(v[0]);
                                let mut u = s;
                                for w in 1..4 {
                                    let xi = _mm512_castps_si512(v[w]);
                                    s = _mm512_max_epi32(s, xi);
                                    u = _mm512_max_epu32(u, xi);
                                }
                                let hi = _mm512_cmpge_epi32_mask(
                                    s,
                                    _mm512_set1_epi32(8f32.to_bits() as i32),
                                );
                                let lo = _mm512_cmpge_epu32_mask(
                                    u,
                                    _mm512_set1_epi32((-4.5f32).to_bits() as i32),
                                );
                                hi | lo != 0
                            }
                        };
                        if out {
                            bump(&mut odd);
                        }
                        for w in 0..4 {
                            _mm512_storeu_ps(y.as_mut_ptr().add(16 * w), r[w]);
                        }
                    }
                }
                odd
            }
        };
    }
    row_chain!(row_ch4, 0);
    row_chain!(row_ch4_j, 1);
    row_chain!(row_ch4_none, 2);
    row_chain!(row_ch4_mem, 3);

    /// `ch4` software-pipelined: each step loads `x` and `y` and runs the ops for the next
    /// step's four vectors before the central form of its own, so that the ops are off the
    /// central form's dependency chain; `C = 0` tests as `ch4`, `C = 1` tests the next
    /// step's values at once.
    macro_rules! row_chain_pipe {
        ($name:ident, $c:literal) => {
            #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
            #[inline(never)]
            fn $name(xs: &[f32], ks: &[f32], ys: &mut [f32], tab: &Tab) -> u32 {
                let mut odd = 0u32;
                let n = xs.len();
                let ops = |i: usize| -> [__m512; 4] {
                    core::array::from_fn(|w| unsafe {
                        // SAFETY: the caller keeps `i + 64 <= n`.
                        let p = _mm512_mul_ps(
                            _mm512_loadu_ps(xs.as_ptr().add(i + 16 * w)),
                            _mm512_loadu_ps(ks.as_ptr().add(i + 16 * w)),
                        );
                        _mm512_add_ps(p, _mm512_set1_ps(1.0))
                    })
                };
                let test = |v: &[__m512; 4]| -> bool {
                    let mut s = _mm512_castps_si512(v[0]);
                    let mut u = s;
                    for w in 1..4 {
                        let xi = _mm512_castps_si512(v[w]);
                        s = _mm512_max_epi32(s, xi);
                        u = _mm512_max_epu32(u, xi);
                    }
                    let hi = _mm512_cmpge_epi32_mask(s, _mm512_set1_epi32(8f32.to_bits() as i32));
                    let lo =
                        _mm512_cmpge_epu32_mask(u, _mm512_set1_epi32((-4.5f32).to_bits() as i32));
                    hi | lo != 0
                };
                if n < 64 {
                    return 0;
                }
                let mut v = ops(0);
                let mut out = test(&v);
                let mut i = 0;
                loop {
                    let more = i + 128 <= n;
                    let next = if more { ops(i + 64) } else { v };
                    let nout = if $c == 1 && more { test(&next) } else { false };
                    let (r, _) = var_w::<4, 0>(&v, tab);
                    let o = if $c == 1 { out } else { test(&v) };
                    if o {
                        bump(&mut odd);
                    }
                    for w in 0..4 {
                        // SAFETY: `i + 64 <= n`.
                        unsafe { _mm512_storeu_ps(ys.as_mut_ptr().add(i + 16 * w), r[w]) };
                    }
                    i += 64;
                    if !more {
                        break;
                    }
                    v = next;
                    out = nout;
                }
                odd
            }
        };
    }
    row_chain_pipe!(row_ch4_pipe, 0);
    row_chain_pipe!(row_ch4_pipe_t, 1);

    /// Times the chain's forms (and `w4` on the chain's values `x · y + 1`), the values kept
    /// in `|x · y + 1| <= 4.4` (no lane outside the central range).
    pub fn run_chain(n: usize, rounds: usize) {
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            println!("gelu_loop: this CPU lacks AVX-512F/DQ, AVX2 or FMA");
            return;
        }
        let n = n.div_ceil(64) * 64;
        let x = tessera::Tensor::<f32>::randn(&[n], 7);
        let k = tessera::Tensor::<f32>::randn(&[n], 8);
        let ks: Vec<f32> = k.as_slice().unwrap().to_vec();
        // `x` halved until `x · y + 1` is within `[-4.4, 4.4]`.
        let xs: Vec<f32> = x
            .as_slice()
            .unwrap()
            .iter()
            .zip(&ks)
            .map(|(&a, &b)| {
                let mut a = a;
                while (a * b + 1.0).abs() > 4.4 {
                    a *= 0.5;
                }
                a
            })
            .collect();
        let vs: Vec<f32> = xs.iter().zip(&ks).map(|(a, b)| a * b + 1.0).collect();
        let mut ys = vec![0f32; n];
        let tab = table(&coefficients());
        let mut want = vs.clone();
        tessera::backend::cpu::vmath::gelu(&mut want);
        let rows: [(&str, ChainRow); 6] = [
            ("ch4", row_ch4),
            ("ch4_pipe", row_ch4_pipe),
            ("ch4_pipe_t", row_ch4_pipe_t),
            ("ch4_j", row_ch4_j),
            ("ch4_none", row_ch4_none),
            ("ch4_mem", row_ch4_mem),
        ];
        for (_, f) in rows {
            ys.fill(0.0);
            // SAFETY: AVX-512F/DQ, AVX2 and FMA were detected above.
            unsafe { f(&xs, &ks, &mut ys, &tab) };
            assert!(
                ys.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
        }
        // Timed rows: `w4` on the chain's values, each chain form, and `ch4` on unclamped `x`
        // (about one step in 20 has a lane outside the central range: the cost of the range
        // test's branch, timing only).
        let mut timed: Vec<(&str, usize)> = vec![("w4(x*y+1)", 0)];
        timed.extend(rows.iter().enumerate().map(|(i, &(name, _))| (name, i + 1)));
        timed.push(("ch4_raw", rows.len() + 1));
        let raw = x.as_slice().unwrap();
        let mut out = vec![0f32; n];
        super::loop_timing::print_rounds(rounds, n, &timed, |i: usize| {
            // SAFETY: AVX-512F/DQ, AVX2 and FMA were detected above.
            unsafe {
                match i {
                    0 => row_w4(&vs, &mut out, &tab),
                    i if i <= rows.len() => (rows[i - 1].1)(&xs, &ks, &mut out, &tab),
                    _ => row_ch4(raw, &ks, &mut out, &tab),
                }
            }
        });
    }

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn t2_6(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        t2::<6>(x, tab)
    }
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    fn t2_5(x: __m512, tab: &Tab) -> (__m512, __m512i) {
        t2::<5>(x, tab)
    }

    type Row = unsafe fn(&[f32], &mut [f32], &Tab) -> u32;

    /// `vmath/gelu.rs`'s `CT` (read from its source text): `CT[k][j]` multiplies `u^k` on
    /// interval `j`.
    fn coefficients() -> [[f32; 16]; 8] {
        let src = include_str!("../tessera/src/backend/cpu/vmath/gelu.rs");
        let at = src.find("const CT:").expect("CT in gelu.rs");
        let body = &src[at..];
        let body = &body[body.find("= [").unwrap() + 3..body.find("\n];").unwrap()];
        let v: Vec<f32> = body
            .split(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(v.len(), 128);
        core::array::from_fn(|k| core::array::from_fn(|j| v[16 * k + j]))
    }

    /// The negated coefficients, one register per `k` (repeated to fill 16 registers).
    fn table(ct: &[[f32; 16]; 8]) -> Tab {
        // SAFETY: AVX-512F was detected by the caller; each row holds 16 floats.
        core::array::from_fn(|k| unsafe {
            let t = _mm512_loadu_ps(ct[k % 8].as_ptr());
            _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(t),
                _mm512_set1_epi32(i32::MIN),
            ))
        })
    }

    pub fn run(n: usize, rounds: usize) {
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            println!("gelu_loop: this CPU lacks AVX-512F/DQ, AVX2 or FMA");
            return;
        }
        // Whole steps of every form (`w8` takes 128 values per step): a shorter last step
        // would leave values unwritten and fail the bit-for-bit check below.
        let n = n.div_ceil(128) * 128;
        let x = tessera::Tensor::<f32>::randn(&[n], 7);
        let xs: Vec<f32> = x
            .as_slice()
            .unwrap()
            .iter()
            .map(|v| v.clamp(-4.4, 4.4))
            .collect();
        let mut ys = vec![0f32; n];
        let tab = table(&coefficients());
        // The `cur` and `wW` copies are `vmath::gelu`, bit for bit, on these values.
        let mut want = xs.clone();
        tessera::backend::cpu::vmath::gelu(&mut want);
        for f in [row_cur as Row, row_w2, row_w4, row_w8] {
            ys.fill(0.0);
            // SAFETY: AVX-512F/DQ, AVX2 and FMA were detected.
            unsafe { f(&xs, &mut ys, &tab) };
            super::loop_timing::assert_same_bits(&ys, &want);
        }
        let rows: [(&str, Row); 22] = [
            ("cur", row_cur),
            ("noperm", row_noperm),
            ("perm4", row_perm4),
            ("t2d6", row_t2d6),
            ("t2d5", row_t2d5),
            ("pack2", row_pack2),
            ("t2p", row_t2p),
            ("estrin", row_estrin),
            ("t2e", row_t2e),
            ("eo", row_eo),
            ("w2", row_w2),
            ("w4", row_w4),
            ("w8", row_w8),
            ("w4_t2", row_w4_t2),
            ("w4_pack2", row_w4_pack2),
            ("w4_t2p", row_w4_t2p),
            ("w4_pack1", row_w4_pack1),
            ("w4_noperm", row_w4_noperm),
            ("w4_estrin", row_w4_estrin),
            ("w4_t2e", row_w4_t2e),
            ("w2_estrin", row_w2_estrin),
            ("w4_nosub", row_w4_nosub),
        ];
        super::loop_timing::print_rounds(rounds, n, &rows, |f: Row| {
            // SAFETY: AVX-512F/DQ, AVX2 and FMA were detected.
            unsafe { f(&xs, &mut ys, &tab) }
        });
    }
}

#[path = "loop_timing/mod.rs"]
mod loop_timing;

fn main() {
    let (n, rounds) = loop_timing::args();
    #[cfg(target_arch = "x86_64")]
    if std::env::args().nth(3).is_some_and(|s| s == "chain") {
        body::run_chain(n, rounds)
    } else {
        body::run(n, rounds)
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("gelu_loop: x86_64 only ({n}, {rounds})");
}
