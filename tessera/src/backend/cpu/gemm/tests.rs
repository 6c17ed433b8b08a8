//! Randomised tests against an f64 reference.

use super::*;

/// [`gemm_f32_raw`] on slices, their lengths checked against the shapes and strides.
#[allow(clippy::too_many_arguments)]
fn raw(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    (a, lda): (&[f32], usize),
    (b, ldb): (&[f32], usize),
    c: &mut [f32],
    ldc: usize,
    overwrite: bool,
) {
    assert!(lda >= k && ldb >= n && ldc >= n);
    assert!(m == 0 || (a.len() >= (m - 1) * lda + k && c.len() >= (m - 1) * ldc + n));
    assert!(k == 0 || b.len() >= (k - 1) * ldb + n);
    // SAFETY: the slices hold the described matrices (asserted above).
    unsafe {
        gemm_f32_raw(
            isa,
            m,
            n,
            k,
            a.as_ptr(),
            lda,
            b.as_ptr(),
            ldb,
            c.as_mut_ptr(),
            ldc,
            overwrite,
        )
    }
}

/// Tiny splitmix64 generator (no external crates).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.f32()).collect()
    }
}

fn all_isas() -> Vec<Isa> {
    let mut v = vec![Isa::Portable];
    match detected_isa() {
        Isa::Avx512 => v.extend([Isa::Avx2, Isa::Avx512]),
        Isa::Avx2 => v.push(Isa::Avx2),
        Isa::Portable => {}
    }
    v
}

/// f64 reference of `C += A·B` over strided row-major storage.
#[allow(clippy::too_many_arguments)]
fn reference(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &[f32],
    ldc: usize,
) -> Vec<f64> {
    let mut out: Vec<f64> = c.iter().map(|&x| x as f64).collect();
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                s += a[i * lda + p] as f64 * b[p * ldb + j] as f64;
            }
            out[i * ldc + j] += s;
        }
    }
    out
}

/// Fresh random `A` (`m × k`), `B` (`k × n`) and starting `C` (`m × n`) in row-major storage
/// whose rows are `pad`, `2 × pad` and `3 × pad` elements longer than the matrices', with
/// those strides (`lda`, `ldb`, `ldc`); `m`, `k` and `n` at least 1.
#[allow(clippy::type_complexity)]
fn strided_operands(
    rng: &mut Rng,
    (m, n, k): (usize, usize, usize),
    pad: usize,
) -> ((usize, usize, usize), Vec<f32>, Vec<f32>, Vec<f32>) {
    let (lda, ldb, ldc) = (k + pad, n + 2 * pad, n + 3 * pad);
    let a = rng.vec((m - 1) * lda + k);
    let b = rng.vec((k - 1) * ldb + n);
    let c0 = rng.vec(m * ldc);
    ((lda, ldb, ldc), a, b, c0)
}

/// `C = A·B` (`overwrite`) or `C += A·B` over strided row-major storage, each element one f32
/// FMA chain in k order: what every blocking and micro-tile must give bit for bit. `c` is the
/// starting `C` (its padding columns are returned as they are).
fn in_order_chain(
    (m, n, k): (usize, usize, usize),
    (a, lda): (&[f32], usize),
    (b, ldb): (&[f32], usize),
    c: &[f32],
    ldc: usize,
    overwrite: bool,
) -> Vec<f32> {
    let mut out = c.to_vec();
    for i in 0..m {
        for j in 0..n {
            let mut acc = if overwrite { 0.0 } else { c[i * ldc + j] };
            for p in 0..k {
                acc = a[i * lda + p].mul_add(b[p * ldb + j], acc);
            }
            out[i * ldc + j] = acc;
        }
    }
    out
}

/// Run one case with padding strides; checks the result and that padding is untouched.
fn check(isa: Isa, m: usize, n: usize, k: usize, pad: usize, seed: u64) {
    let mut rng = Rng(seed);
    let (lda, ldb, ldc) = (k + pad, n + 2 * pad, n + 3 * pad);
    let a = rng.vec(if m * k == 0 { 0 } else { (m - 1) * lda + k });
    let b = rng.vec(if k * n == 0 { 0 } else { (k - 1) * ldb + n });
    // Full rows (including padding) so we can check that padding is preserved.
    let c0 = rng.vec(m * ldc);
    let mut c = c0.clone();
    gemm_f32_with(isa, m, n, k, &a, lda, &b, ldb, &mut c, ldc);
    let r = reference(m, n, k, &a, lda, &b, ldb, &c0, ldc);
    // Condition scale: max over entries of |c0| + sum_p |a_ip| |b_pj|.
    let mut max_abs_sum = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| (a[i * lda + p] as f64 * b[p * ldb + j] as f64).abs())
                .sum();
            max_abs_sum = max_abs_sum.max(s + (c0[i * ldc + j] as f64).abs());
        }
    }
    let mut max_err = 0.0f64;
    let mut max_ref = 0.0f64;
    for i in 0..m {
        for j in 0..ldc {
            let idx = i * ldc + j;
            if j < n {
                max_err = max_err.max((c[idx] as f64 - r[idx]).abs());
                max_ref = max_ref.max(r[idx].abs());
            } else {
                assert_eq!(
                    c[idx].to_bits(),
                    c0[idx].to_bits(),
                    "padding clobbered at ({i},{j})"
                );
            }
        }
    }
    let rel = if max_ref == 0.0 {
        max_err
    } else {
        max_err / max_ref
    };
    let rel_abs = if max_abs_sum == 0.0 {
        max_err
    } else {
        max_err / max_abs_sum
    };
    // Error relative to the condition scale is always tiny.
    assert!(
        rel_abs < 1e-6,
        "{isa:?} m={m} n={n} k={k} pad={pad}: err/abs-sum {rel_abs:e}"
    );
    // max|err| / max|ref|: only meaningful with enough entries that the max
    // is not dominated by one cancelling dot product (e.g. a 1×1 result).
    if m * n >= 64 {
        assert!(
            rel < 1e-5,
            "{isa:?} m={m} n={n} k={k} pad={pad}: rel err {rel:e}"
        );
    }
}

#[test]
fn random_sizes_all_isas() {
    let sizes = [0usize, 1, 7, 17, 33, 127, 128, 129, 300];
    let mut seed = 1;
    for isa in all_isas() {
        for &m in &sizes {
            for &n in &sizes {
                for &k in &[0usize, 1, 7, 33, 129, 300] {
                    // Keep the f64 reference affordable in debug builds.
                    if m * n * k > 4_000_000 {
                        continue;
                    }
                    seed += 1;
                    check(isa, m, n, k, (seed % 3) as usize * 5, seed);
                }
            }
        }
    }
}

#[test]
fn large_and_deep() {
    for isa in all_isas() {
        // k spans several KC blocks; m spans several MC blocks.
        check(isa, 300, 129, 600, 3, 77);
        check(isa, 5, 4200, 9, 1, 78); // n spans two NC blocks
        // Three `KC_WIDE` k-blocks over two row blocks, B packed by the micro-tiles.
        check(isa, 160, 300, 1100, 2, 79);
    }
}

#[test]
fn tile_wise_accumulation_matches_single_call() {
    // The backend's calling pattern: C(128×128) += A_tile(128×BK)·B_tile(BK×128) per K step.
    let (bm, bn, kk) = (128, 128, 512);
    let mut rng = Rng(99);
    let a = rng.vec(bm * kk);
    let b = rng.vec(kk * bn);
    for isa in all_isas() {
        for bk in [64usize, 128, 256] {
            let mut acc = vec![0.0f32; bm * bn];
            let mut at = vec![0.0f32; bm * bk];
            let mut bt = vec![0.0f32; bk * bn];
            for k0 in (0..kk).step_by(bk) {
                for i in 0..bm {
                    at[i * bk..(i + 1) * bk].copy_from_slice(&a[i * kk + k0..i * kk + k0 + bk]);
                }
                bt.copy_from_slice(&b[k0 * bn..(k0 + bk) * bn]);
                gemm_f32_with(isa, bm, bn, bk, &at, bk, &bt, bn, &mut acc, bn);
            }
            let r = reference(bm, bn, kk, &a, kk, &b, bn, &vec![0.0; bm * bn], bn);
            let max_ref = r.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let max_err = acc
                .iter()
                .zip(&r)
                .fold(0.0f64, |m, (x, y)| m.max((*x as f64 - y).abs()));
            assert!(
                max_err / max_ref < 1e-5,
                "{isa:?} bk={bk}: {}",
                max_err / max_ref
            );
        }
    }
}

#[test]
fn accumulates_into_c() {
    // C starts at a known non-zero value; two calls must add twice.
    let (m, n, k) = (19, 37, 23);
    let mut rng = Rng(5);
    let a = rng.vec(m * k);
    let b = rng.vec(k * n);
    for isa in all_isas() {
        let mut c = vec![1.5f32; m * n];
        gemm_f32_with(isa, m, n, k, &a, k, &b, n, &mut c, n);
        gemm_f32_with(isa, m, n, k, &a, k, &b, n, &mut c, n);
        let r = reference(m, n, k, &a, k, &b, n, &vec![0.0; m * n], n);
        for (x, y) in c.iter().zip(&r) {
            assert!(
                (*x as f64 - (1.5 + 2.0 * y)).abs() < 1e-4,
                "{x} vs {}",
                1.5 + 2.0 * y
            );
        }
        // k = 0 leaves C untouched.
        let before = c.clone();
        gemm_f32_with(isa, m, n, 0, &[], 0, &[], n, &mut c, n);
        assert_eq!(before, c);
    }
}

#[test]
fn default_entry_point_uses_detected_isa() {
    let mut rng = Rng(11);
    let (m, n, k) = (70, 50, 40);
    let a = rng.vec(m * k);
    let b = rng.vec(k * n);
    let mut c = vec![0.0f32; m * n];
    gemm_f32(m, n, k, &a, k, &b, n, &mut c, n);
    let r = reference(m, n, k, &a, k, &b, n, &vec![0.0; m * n], n);
    let max_ref = r.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let max_err = c
        .iter()
        .zip(&r)
        .fold(0.0f64, |m, (x, y)| m.max((*x as f64 - y).abs()));
    assert!(max_err / max_ref < 1e-5);
}

#[test]
#[should_panic]
fn short_slice_panics() {
    let a = vec![0.0f32; 10];
    let b = vec![0.0f32; 16];
    let mut c = vec![0.0f32; 16];
    gemm_f32(4, 4, 4, &a, 4, &b, 4, &mut c, 4);
}

fn bf16_vec(rng: &mut Rng, len: usize) -> Vec<u16> {
    (0..len).map(|_| bf16::f32_to_bf16(rng.f32())).collect()
}

fn check_bf16(native: Bf16Path, m: usize, n: usize, k: usize, pad: usize, seed: u64) {
    let mut rng = Rng(seed);
    let (lda, ldb, ldc) = (k + pad, n + pad, n + 2 * pad);
    let a = bf16_vec(&mut rng, if m * k == 0 { 0 } else { (m - 1) * lda + k });
    let b = bf16_vec(&mut rng, if k * n == 0 { 0 } else { (k - 1) * ldb + n });
    let c0 = rng.vec(m * ldc);
    let mut c = c0.clone();
    bf16::gemm_bf16_impl(native, m, n, k, &a, lda, &b, ldb, &mut c, ldc);
    let af: Vec<f32> = a.iter().map(|&x| bf16_to_f32(x)).collect();
    let bf: Vec<f32> = b.iter().map(|&x| bf16_to_f32(x)).collect();
    let r = reference(m, n, k, &af, lda, &bf, ldb, &c0, ldc);
    let (mut max_err, mut max_ref, mut max_abs) = (0.0f64, 0.0f64, 0.0f64);
    for i in 0..m {
        for j in 0..ldc {
            let idx = i * ldc + j;
            if j < n {
                max_err = max_err.max((c[idx] as f64 - r[idx]).abs());
                max_ref = max_ref.max(r[idx].abs());
                let s: f64 = (0..k)
                    .map(|p| (af[i * lda + p] as f64 * bf[p * ldb + j] as f64).abs())
                    .sum();
                max_abs = max_abs.max(s + (c0[idx] as f64).abs());
            } else {
                assert_eq!(c[idx].to_bits(), c0[idx].to_bits(), "padding clobbered");
            }
        }
    }
    if max_abs > 0.0 {
        assert!(
            max_err / max_abs < 1e-6,
            "bf16 {native:?} m={m} n={n} k={k}: {}",
            max_err / max_abs
        );
    }
    if m * n >= 64 && max_ref > 0.0 {
        assert!(
            max_err / max_ref < 1e-5,
            "bf16 {native:?} m={m} n={n} k={k}: {}",
            max_err / max_ref
        );
    }
}

#[test]
fn bf16_random_sizes() {
    let sizes = [0usize, 1, 7, 17, 33, 128, 129];
    let mut seed = 1000;
    for native in [Bf16Path::Widen, Bf16Path::Dot, Bf16Path::Amx] {
        for &m in &sizes {
            for &n in &sizes {
                for &k in &[0usize, 1, 2, 7, 64, 129, 300] {
                    seed += 1;
                    check_bf16(native, m, n, k, (seed % 3) as usize * 3, seed);
                }
            }
        }
        check_bf16(native, 150, 70, 1100, 2, 4242); // several k blocks, odd k
        // More rows than one 144-row block: uneven k-blocks (684, 684, odd 683; 514, odd 511).
        check_bf16(native, 157, 70, 2051, 1, 4243);
        check_bf16(native, 300, 45, 1025, 0, 4244);
    }
}

#[test]
fn bf16_round_trip() {
    for x in [0.0f32, 1.0, -2.5, 3.140625, 1e-3, -65504.0] {
        let y = bf16_to_f32(f32_to_bf16(x));
        assert!((x - y).abs() <= x.abs() / 128.0, "{x} -> {y}");
    }
    assert_eq!(f32_to_bf16(1.0), 0x3F80);
    assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
}

/// Every ISA computes each element as one FMA chain over k in order from C's value: bit for
/// bit the scalar chain, for any shape (edges, several k blocks) — the `dot` order that
/// `deterministic` relies on.
#[test]
fn every_isa_is_one_fma_chain_in_k_order() {
    let mut rng = Rng(0xD07);
    for &(m, n, k) in &[
        (1, 1, 1),
        (1, 70, 40),
        (2, 97, 300),
        (3, 33, 19),
        (7, 33, 19),
        (9, 17, 300),
        (16, 48, 513),
        // More rows than one block: A read in place; B packed by each panel's first
        // micro-tile (rows of B close together), a partial last panel, a partial row block.
        (150, 100, 300),
        // The same with B's rows farther apart (a k-block of B spans 720 000 bytes, under
        // `FUSE_BYTES`): still packed by the micro-tiles.
        (150, 600, 300),
        // Two k-blocks (`KC_WIDE`) and three row blocks, B packed by the micro-tiles.
        (300, 45, 513),
        // Three uneven `KC_WIDE` k-blocks, two row blocks, B packed by the micro-tiles (a
        // k-block of B spans under `FUSE_BYTES`), a partial last panel.
        (150, 300, 1100),
        // Three k-blocks of 344 rows whose B spans 963 200 bytes each, just under
        // `FUSE_BYTES`: packed by the micro-tiles.
        (150, 700, 1030),
        // Two uneven `KC_WIDE` k-blocks (261, 260) whose B spans 1 148 400 bytes, over
        // `FUSE_BYTES`: the separate packing pass.
        (150, 1100, 521),
    ] {
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let c0 = rng.vec(m * n);
        let want = in_order_chain((m, n, k), (&a, k), (&b, n), &c0, n, false);
        for isa in all_isas() {
            let mut c = c0.clone();
            gemm_f32_with(isa, m, n, k, &a, k, &b, n, &mut c, n);
            let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{isa:?} {m}x{n}x{k}: not the in-order FMA chain");
        }
    }
}

/// Products whose rows of `A` fit one block (`MR < m <= MC`: the next chunk of `B` packed in
/// parts between the micro-tiles of the current one, its lines prefetched by the micro-tiles
/// before) give the in-order FMA chain bit for bit, on every ISA, with and without
/// `overwrite`, on fresh random inputs (the seed is in every failure message): row counts at
/// the edges of the path (both micro-tile heights, one block) and just outside it (the
/// two-row path, one micro-tile), several chunks of `B` with a partial last chunk and panel,
/// one to three k-blocks, more micro-tiles than rows in a k-block, strided operands.
#[test]
fn small_m_chunks_packed_ahead_are_the_in_order_chain() {
    let seed = crate::backend::cpu::clock_seed();
    let mut rng = Rng(seed);
    for &(m, n, k, pad) in &[
        (1, 70, 300, 2),
        (2, 290, 513, 0),
        (5, 33, 129, 1),
        (6, 300, 40, 1),
        (7, 290, 300, 0),
        (8, 545, 300, 1),
        (9, 600, 300, 2),
        (13, 33, 7, 0),
        (16, 530, 513, 1),
        (17, 257, 129, 3),
        (31, 100, 260, 0),
        (33, 545, 3, 2),
        (57, 288, 300, 0),
        (63, 300, 257, 1),
        (64, 600, 513, 0),
        (65, 47, 33, 2),
        (143, 70, 300, 1),
        (144, 290, 40, 0),
        (145, 40, 300, 3),
    ] {
        let ((lda, ldb, ldc), a, b, c0) = strided_operands(&mut rng, (m, n, k), pad);
        let want = in_order_chain((m, n, k), (&a, lda), (&b, ldb), &c0, ldc, false);
        let fresh = in_order_chain(
            (m, n, k),
            (&a, lda),
            (&b, ldb),
            &vec![0.0; m * ldc],
            ldc,
            true,
        );
        for isa in all_isas() {
            let mut c = c0.clone();
            gemm_f32_with(isa, m, n, k, &a, lda, &b, ldb, &mut c, ldc);
            let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{isa:?} {m}x{n}x{k} pad {pad}: not the in-order FMA chain"
            );
            // Overwrite: C's garbage (NaN) is not read; its padding is kept.
            let mut c = vec![f32::NAN; m * ldc];
            raw(isa, (m, n, k), (&a, lda), (&b, ldb), &mut c, ldc, true);
            for i in 0..m {
                for j in 0..ldc {
                    let (x, y) = (c[i * ldc + j], fresh[i * ldc + j]);
                    if j < n {
                        let at = format!("{isa:?} {m}x{n}x{k} ({i},{j}) seed {seed}");
                        assert_eq!(x.to_bits(), y.to_bits(), "{at}: overwrite");
                    } else {
                        assert!(x.is_nan(), "{isa:?} {m}x{n}x{k}: padding written");
                    }
                }
            }
        }
        check(Isa::Avx512, m, n, k, pad, seed ^ (m as u64 * 31 + n as u64));
        check(Isa::Avx2, m, n, k, pad, seed ^ (k as u64 * 17 + n as u64));
    }
}

/// `overwrite` (what `matmul::whole` uses) writes C without reading it: bit for bit what
/// zeroing C and accumulating gives, on every ISA and blocking path (two-row, small-m chunks
/// of B over several k-blocks, several row blocks), padding untouched.
#[test]
fn overwrite_is_zeroed_accumulate_all_isas() {
    let mut rng = Rng(0x0E11);
    for &(m, n, k, pad) in &[
        (1, 70, 40, 0),
        (2, 300, 33, 3),
        (3, 33, 19, 1),
        (13, 600, 300, 2),
        (64, 290, 513, 0),
        (150, 70, 300, 5),
        (150, 600, 300, 1),
        (300, 45, 513, 2),
        (150, 300, 1100, 3),
        (150, 700, 1030, 1),
        (150, 1100, 521, 2),
    ] {
        let (lda, ldb, ldc) = (k + pad, n + 2 * pad, n + 3 * pad);
        let a = rng.vec((m - 1) * lda + k);
        let b = rng.vec((k - 1) * ldb + n);
        // C holds garbage (NaN among it): none of it may reach the result.
        let mut garbage = rng.vec(m * ldc);
        for x in garbage.iter_mut().step_by(7) {
            *x = f32::NAN;
        }
        for isa in all_isas() {
            let mut want = garbage.clone();
            for i in 0..m {
                want[i * ldc..i * ldc + n].fill(0.0);
            }
            gemm_f32_with(isa, m, n, k, &a, lda, &b, ldb, &mut want, ldc);
            let mut c = garbage.clone();
            raw(isa, (m, n, k), (&a, lda), (&b, ldb), &mut c, ldc, true);
            let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{isa:?} {m}x{n}x{k} pad {pad}: overwrite differs");
        }
    }
}

/// The `vdpbf16ps` GEMM's `overwrite` matches zeroing C and accumulating, bit for bit (odd
/// strides: k-pairs read unaligned; full and partial row panels; several B chunks and
/// k-blocks; the row-blocked path).
#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_overwrite_is_zeroed_accumulate() {
    if !has_vdpbf16ps() {
        return;
    }
    let mut rng = Rng(0xB0F);
    for &(m, n, k, pad) in &[
        (1, 33, 9, 1),
        (12, 40, 17, 1),
        (13, 600, 301, 0),
        (40, 290, 1100, 3),
        (150, 70, 64, 1),
    ] {
        let (lda, ldb, ldc) = (k + pad, n + pad, n + 2 * pad);
        let a = bf16_vec(&mut rng, (m - 1) * lda + k);
        let b = bf16_vec(&mut rng, (k - 1) * ldb + n);
        let mut garbage = rng.vec(m * ldc);
        for x in garbage.iter_mut().step_by(5) {
            *x = f32::NAN;
        }
        let run = |c: &mut [f32], overwrite: bool| {
            // SAFETY: the slices hold the described matrices; the CPU has AVX-512 BF16.
            unsafe {
                gemm_bf16_dot_raw(
                    Bf16Path::Dot,
                    m,
                    n,
                    k,
                    a.as_ptr(),
                    lda,
                    b.as_ptr(),
                    ldb,
                    c.as_mut_ptr(),
                    ldc,
                    overwrite,
                )
            }
        };
        let mut want = garbage.clone();
        for i in 0..m {
            want[i * ldc..i * ldc + n].fill(0.0);
        }
        run(&mut want, false);
        let mut c = garbage.clone();
        run(&mut c, true);
        let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{m}x{n}x{k} pad {pad}: overwrite differs");
        // And the result is the product (within the pairwise-sum bound).
        let mut c0 = vec![0.0f32; m * ldc];
        for i in 0..m {
            c0[i * ldc + n..(i + 1) * ldc].copy_from_slice(&garbage[i * ldc + n..(i + 1) * ldc]);
        }
        let af: Vec<f32> = a.iter().map(|&x| bf16_to_f32(x)).collect();
        let bf: Vec<f32> = b.iter().map(|&x| bf16_to_f32(x)).collect();
        let r = reference(m, n, k, &af, lda, &bf, ldb, &c0, ldc);
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| (af[i * lda + p] as f64 * bf[p * ldb + j] as f64).abs())
                    .sum();
                let err = (c[i * ldc + j] as f64 - r[i * ldc + j]).abs();
                assert!(err <= (k + 2) as f64 * f32::EPSILON as f64 * s, "({i},{j})");
            }
        }
    }
}

/// With more rows than one 144-row block, the `vdpbf16ps` GEMM reads A in place for a
/// k-block of even depth (k ≤ 1024: one block); with at most 144 rows it packs A (k ≤ 512:
/// one block). The two give the same bits where the k-blocks agree: the rows computed as one
/// call and as calls of at most 144 rows each (same 12-row tiles), even and odd k (odd: the
/// block is packed both ways), odd strides (k-pairs read unaligned), ragged rows and columns.
#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_a_in_place_matches_packed_bit_for_bit() {
    if !has_vdpbf16ps() {
        return;
    }
    let mut rng = Rng(0xA1B);
    for &(m, n, k, pad) in &[
        (157, 45, 300, 1),
        (150, 70, 512, 0),
        (289, 33, 2, 3),
        (145, 40, 301, 1),
        (160, 32, 64, 2),
    ] {
        let (lda, ldb, ldc) = (k + pad, n + pad, n + 2 * pad);
        let a = bf16_vec(&mut rng, (m - 1) * lda + k);
        let b = bf16_vec(&mut rng, (k - 1) * ldb + n);
        let c0 = rng.vec(m * ldc);
        let run = |c: &mut [f32], rows: std::ops::Range<usize>| {
            // SAFETY: the slices hold the described matrices (rows `rows` of A and C); the
            // CPU has AVX-512 BF16.
            unsafe {
                gemm_bf16_dot_raw(
                    Bf16Path::Dot,
                    rows.len(),
                    n,
                    k,
                    a.as_ptr().add(rows.start * lda),
                    lda,
                    b.as_ptr(),
                    ldb,
                    c.as_mut_ptr().add(rows.start * ldc),
                    ldc,
                    false,
                )
            }
        };
        let mut whole = c0.clone();
        run(&mut whole, 0..m);
        let mut blocks = c0.clone();
        for i in (0..m).step_by(144) {
            run(&mut blocks, i..(i + 144).min(m));
        }
        let same = whole
            .iter()
            .zip(&blocks)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{m}x{n}x{k} pad {pad}: in place differs from packed");
    }
}

/// As documented (`gemm_bf16`, `matmul`): `vdpbf16ps` reads a subnormal bf16 input as zero,
/// while the widening path multiplies it exactly (also where [`pair_path`] sends a one-row
/// product on the AMX path: `x86::rows`).
#[test]
fn bf16_dot_reads_subnormal_inputs_as_zero() {
    // 2^-133 (the smallest positive bf16 subnormal) times 2^100: 2^-33, a normal f32.
    let (a, b) = ([0x0001u16, 0], [0x7180u16, 0]);
    let mut widened = [0.0f32];
    bf16::gemm_bf16_impl(Bf16Path::Widen, 1, 1, 2, &a, 2, &b, 1, &mut widened, 1);
    assert_eq!(widened[0], 2f32.powi(-33));
    for path in [Bf16Path::Dot, Bf16Path::Amx] {
        let mut dot = [0.0f32];
        bf16::gemm_bf16_impl(path, 1, 1, 2, &a, 2, &b, 1, &mut dot, 1);
        // The rule itself (not `pair_path`'s answer): one row on an AMX CPU's `Amx` widens.
        #[cfg(target_arch = "x86_64")]
        let rows = super::x86::rows::usable();
        #[cfg(not(target_arch = "x86_64"))]
        let rows = false;
        let widens = path == Bf16Path::Amx && has_amx() && rows;
        let want = if has_vdpbf16ps() && !widens {
            0.0
        } else {
            2f32.powi(-33)
        };
        assert_eq!(dot[0], want, "{path:?}");
    }
}

/// The AVX-512 micro-kernel fetches its C tile and the next tile's into L1 once, at the
/// iteration of its 4-step k loop that is `C_AHEAD` steps from the end, or before the loop
/// when the k-block is shorter: depths on each side of that point (and not multiples of the
/// unrolling), tiles narrower and shorter than `MR × NR`, odd strides, several row blocks,
/// with and without `overwrite`, give the in-order FMA chain bit for bit on every ISA.
#[test]
fn c_fetch_points_keep_the_in_order_chain() {
    use super::driver::C_AHEAD;
    let mut rng = Rng(0xCA11);
    let depths = [
        1,
        C_AHEAD - 1,
        C_AHEAD,
        C_AHEAD + 1,
        C_AHEAD + 3,
        C_AHEAD + 4,
        C_AHEAD + 5,
        2 * C_AHEAD + 7,
    ];
    for &k in &depths {
        for &(m, n, pad) in &[(3, 7, 1), (8, 32, 0), (9, 31, 2), (17, 65, 3), (150, 33, 1)] {
            let ((lda, ldb, ldc), a, b, c0) = strided_operands(&mut rng, (m, n, k), pad);
            for overwrite in [false, true] {
                let want = in_order_chain((m, n, k), (&a, lda), (&b, ldb), &c0, ldc, overwrite);
                for isa in all_isas() {
                    let mut c = c0.clone();
                    raw(isa, (m, n, k), (&a, lda), (&b, ldb), &mut c, ldc, overwrite);
                    let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "{isa:?} {m}x{n}x{k} pad {pad} overwrite {overwrite}: not the chain"
                    );
                }
            }
        }
    }
}

/// The AMX GEMM itself for [`Bf16Path::Amx`] (whatever the rows: [`pair_path`], which the
/// entry points apply, sends fewer than `AMX_MIN_ROWS` to widening), `vdpbf16ps` for
/// [`Bf16Path::Dot`], and for
/// [`Bf16Path::Widen`] the public [`gemm_bf16`] forced onto that path (with `overwrite`, C's
/// rows zeroed first: the bits `overwrite` promises).
///
/// # Safety
/// As [`gemm_bf16_dot_raw`]'s (except [`has_vdpbf16ps`] for `Widen`), and [`has_amx`] for `Amx`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn pairwise_raw(
    path: Bf16Path,
    m: usize,
    n: usize,
    k: usize,
    a: *const u16,
    lda: usize,
    b: *const u16,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    // SAFETY: the caller's contract.
    unsafe {
        match path {
            Bf16Path::Amx => super::x86::amx::gemm(m, n, k, a, lda, b, ldb, c, ldc, overwrite),
            Bf16Path::Dot => gemm_bf16_dot_raw(path, m, n, k, a, lda, b, ldb, c, ldc, overwrite),
            Bf16Path::Widen => {
                let a = std::slice::from_raw_parts(a, (m - 1) * lda + k);
                let b = std::slice::from_raw_parts(b, (k - 1) * ldb + n);
                let c = std::slice::from_raw_parts_mut(c, (m - 1) * ldc + n);
                if overwrite {
                    for i in 0..m {
                        c[i * ldc..i * ldc + n].fill(0.0);
                    }
                }
                with_bf16_path(path, || gemm_bf16(m, n, k, a, lda, b, ldb, c, ldc));
            }
        }
    }
}

/// Runs [`Bf16Path`] `path` on `(m, n, k)` with strides padded by `pad` (C too, its padding
/// checked untouched), adding to random C or (`overwrite`) writing over NaN garbage, and
/// checks every element against the f64 reference of the bf16 inputs within the k-pair bound
/// `(k + 2)·ε_f32·(Σ|a·b| + |c|)`. Returns C.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn check_pairwise(
    path: Bf16Path,
    (m, n, k): (usize, usize, usize),
    pad: usize,
    overwrite: bool,
    rng: &mut Rng,
    what: &str,
) -> Vec<f32> {
    let (lda, ldb, ldc) = (k + pad, n + 2 * pad, n + 3 * pad);
    let a = bf16_vec(rng, (m - 1) * lda + k);
    let b = bf16_vec(rng, (k - 1) * ldb + n);
    let mut c0 = rng.vec(m * ldc);
    if overwrite {
        for x in c0.iter_mut().step_by(3) {
            *x = f32::NAN;
        }
    }
    let mut c = c0.clone();
    // SAFETY: the slices hold the described matrices; the CPU has AVX-512 BF16 and, for
    // `Amx`, AMX (callers check).
    unsafe {
        pairwise_raw(
            path,
            m,
            n,
            k,
            a.as_ptr(),
            lda,
            b.as_ptr(),
            ldb,
            c.as_mut_ptr(),
            ldc,
            overwrite,
        )
    };
    let af: Vec<f32> = a.iter().map(|&x| bf16_to_f32(x)).collect();
    let bf: Vec<f32> = b.iter().map(|&x| bf16_to_f32(x)).collect();
    let mut base = c0.clone();
    if overwrite {
        for i in 0..m {
            base[i * ldc..i * ldc + n].fill(0.0);
        }
    }
    let r = reference(m, n, k, &af, lda, &bf, ldb, &base, ldc);
    for i in 0..m {
        for j in 0..ldc {
            let idx = i * ldc + j;
            if j >= n {
                assert_eq!(
                    c[idx].to_bits(),
                    c0[idx].to_bits(),
                    "{what}: padding clobbered"
                );
                continue;
            }
            let s: f64 = (0..k)
                .map(|p| (af[i * lda + p] as f64 * bf[p * ldb + j] as f64).abs())
                .sum::<f64>()
                + (base[idx] as f64).abs();
            let err = (c[idx] as f64 - r[idx]).abs();
            assert!(
                err <= (k + 2) as f64 * f32::EPSILON as f64 * s,
                "{what} {path:?} {m}x{n}x{k} pad {pad} overwrite {overwrite}: ({i},{j}) {} vs {}",
                c[idx],
                r[idx]
            );
        }
    }
    c
}

/// The path a forced [`Bf16Path::Amx`] runs on this CPU ([`with_bf16_path`]: AMX where
/// [`has_amx`], else `vdpbf16ps` where [`has_vdpbf16ps`], else widening), checked to be that
/// one and said on stdout when it is not AMX.
#[cfg(target_arch = "x86_64")]
fn forced_amx() -> Bf16Path {
    let path = with_bf16_path(Bf16Path::Amx, bf16_path);
    let want = if has_amx() {
        Bf16Path::Amx
    } else if has_vdpbf16ps() {
        Bf16Path::Dot
    } else {
        Bf16Path::Widen
    };
    assert_eq!(
        path, want,
        "a forced Amx runs the first path down the CPU has"
    );
    if path != Bf16Path::Amx {
        println!("no AMX on this CPU (or OS): a forced Amx runs {path:?}, which this test checks");
    }
    path
}

/// The GEMM a forced [`Bf16Path::Amx`] runs ([`forced_amx`]: the AMX kernel where the CPU has
/// it) against the f64 reference on fresh random bf16 inputs (the seed is in every failure
/// message), every combination of M, N, K in {1, 15, 16, 17, 31, 33, 100, 257} (one tile and
/// its edges, one and several 32×32 blocks, partial k-tiles), and shapes across the AMX
/// kernel's blocks (`MC` = 128 rows, `NC` = 1024 columns, `KC` = 512 of k, uneven last
/// blocks), adding to C and overwriting it; `overwrite` gives the bits of accumulating into
/// a zeroed C; and another path (`vdpbf16ps`, else widening) agrees within the bound.
#[cfg(target_arch = "x86_64")]
#[test]
fn forced_amx_matches_f64_reference_on_every_edge() {
    let path = forced_amx();
    let other = if path != Bf16Path::Dot && has_vdpbf16ps() {
        Bf16Path::Dot
    } else {
        Bf16Path::Widen
    };
    let seed = crate::backend::cpu::clock_seed();
    let mut rng = Rng(seed);
    let what = format!("seed {seed}");
    let dims = [1usize, 15, 16, 17, 31, 33, 100, 257];
    let mut shapes = Vec::new();
    for &m in &dims {
        for &n in &dims {
            for &k in &dims {
                shapes.push((m, n, k));
            }
        }
    }
    shapes.extend([
        (130, 1030, 1100),
        (257, 33, 1025),
        (33, 2100, 64),
        (300, 64, 513),
    ]);
    for (t, &(m, n, k)) in shapes.iter().enumerate() {
        let pad = t % 3;
        let overwrite = t % 2 == 1;
        let s = rng.0;
        let c = check_pairwise(path, (m, n, k), pad, overwrite, &mut rng, &what);
        // The same inputs on the other path, within the bound of the f64 reference.
        let mut again = Rng(s);
        let d = check_pairwise(other, (m, n, k), pad, overwrite, &mut again, &what);
        assert_eq!(c.len(), d.len());
        if overwrite {
            // Overwriting gives the bits of accumulating into a zeroed C.
            let mut again = Rng(s);
            let (lda, ldb, ldc) = (k + pad, n + 2 * pad, n + 3 * pad);
            let a = bf16_vec(&mut again, (m - 1) * lda + k);
            let b = bf16_vec(&mut again, (k - 1) * ldb + n);
            let mut z = vec![0.0f32; m * ldc];
            // SAFETY: the slices hold the described matrices; the CPU has `path` (`forced_amx`).
            unsafe {
                pairwise_raw(
                    path,
                    m,
                    n,
                    k,
                    a.as_ptr(),
                    lda,
                    b.as_ptr(),
                    ldb,
                    z.as_mut_ptr(),
                    ldc,
                    false,
                )
            };
            for i in 0..m {
                for j in 0..n {
                    let idx = i * ldc + j;
                    assert_eq!(
                        c[idx].to_bits(),
                        z[idx].to_bits(),
                        "{what} {m}x{n}x{k}: overwrite differs at ({i},{j})"
                    );
                }
            }
        }
    }
}

/// Two threads run the GEMM a forced [`Bf16Path::Amx`] runs ([`forced_amx`]) at once (on AMX
/// each loads its own tile configuration and releases it): each result within the bound of
/// the f64 reference, fresh random inputs.
#[cfg(target_arch = "x86_64")]
#[test]
fn forced_amx_on_two_threads_at_once() {
    let path = forced_amx();
    let seed = crate::backend::cpu::clock_seed();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            s.spawn(move || {
                let mut rng = Rng(seed + t);
                let what = format!("seed {} thread {t}", seed + t);
                for &(m, n, k) in &[
                    (257, 100, 300),
                    (64, 64, 1030),
                    (17, 300, 33),
                    (100, 257, 16),
                ] {
                    check_pairwise(path, (m, n, k), t as usize, t == 1, &mut rng, &what);
                }
            });
        }
    });
}

/// Which calls reach the AMX GEMM (`x86::amx::CALLS`, this thread's count): [`gemm_bf16`] on
/// a forced [`Bf16Path::Amx`] from `AMX_MIN_ROWS` rows (and `gemm_bf16_dot_raw` on `Amx`, as
/// `matmul::whole` calls it), not below that nor on [`Bf16Path::Dot`] or [`Bf16Path::Widen`]. The
/// `vdpbf16ps` path's results are within the same bound as AMX's, so the reference tests
/// alone pass with a dispatch that never takes AMX; this one does not. On a CPU (or OS)
/// without AMX: that no entry point reaches the AMX kernel, forced or not (its instructions
/// would fault there).
#[cfg(target_arch = "x86_64")]
#[test]
fn amx_is_reached_from_the_bf16_entry_points_where_the_cpu_has_it() {
    let amx = usize::from(has_amx());
    let min = bf16::AMX_MIN_ROWS;
    let (k, n) = (70, 40);
    let mut rng = Rng(crate::backend::cpu::clock_seed());
    let a = bf16_vec(&mut rng, min * k);
    let b = bf16_vec(&mut rng, k * n);
    let mut c = vec![0.0f32; min * n];
    let calls = || super::x86::amx::CALLS.with(|c| c.get());
    let mut reached = |path: Bf16Path, m: usize| {
        let before = calls();
        with_bf16_path(path, || {
            gemm_bf16(m, n, k, &a, k, &b, n, &mut c, n);
        });
        calls() - before
    };
    assert_eq!(reached(Bf16Path::Amx, min), amx, "Amx, {min} rows");
    assert_eq!(reached(Bf16Path::Amx, min - 1), 0, "Amx, {} rows", min - 1);
    assert_eq!(reached(Bf16Path::Dot, min), 0, "Dot");
    assert_eq!(reached(Bf16Path::Widen, min), 0, "Widen");
    if !has_vdpbf16ps() {
        println!("no AVX-512 BF16 on this CPU: gemm_bf16_dot_raw not called");
        return;
    }
    let before = calls();
    // SAFETY: the slices hold the described matrices; the CPU has AVX-512 BF16.
    unsafe {
        gemm_bf16_dot_raw(
            Bf16Path::Amx,
            min,
            n,
            k,
            a.as_ptr(),
            k,
            b.as_ptr(),
            n,
            c.as_mut_ptr(),
            n,
            true,
        )
    };
    assert_eq!(calls() - before, amx, "gemm_bf16_dot_raw");
}

/// The AVX-512 few-row path (`x86::rows`, `m <= ROWS_MAX`: B streamed a block of its rows at
/// a time) on fresh random inputs (the seed is in every message): every row count, ragged
/// columns (not multiples of 16, 32 or a chunk), k across blocks of `KB`, strided A, B and C,
/// accumulating and overwriting, and the product split into two column strips run on two
/// threads (as `matmul::whole` splits it). f32: bit for bit the scalar in-order FMA chain
/// and the packed micro-kernels (`driver::gemm`), within `(k + 2)·ε` of the f64 reference,
/// padding untouched. bf16: bit for bit the same chain on the widened operands (what
/// `Bf16Path::Widen` computes), also through [`gemm_bf16`] on a forced [`Bf16Path::Amx`]
/// on an AMX CPU (where `pair_path` must send every row count here). Without AVX-512 it does
/// not run, and says so.
#[cfg(target_arch = "x86_64")]
#[test]
fn few_rows_stream_is_the_packed_chain() {
    use super::x86::rows::{self as xr, KB, ROWS_MAX};
    if detected_isa() != Isa::Avx512 || !xr::usable() {
        // The kernel needs AVX-512 (`streams_rows_on` sends no product to it here).
        println!("not run: no AVX-512, the few-row kernel cannot run on this CPU");
        return;
    }
    let seed = crate::backend::cpu::clock_seed();
    let mut rng = Rng(seed);
    let shapes = [
        (1, 1),
        (15, 17),
        (33, KB),
        (47, KB + 1),
        (100, 3 * KB - 1),
        (257, 300),
        (130, 513),
    ];
    for m in 1..=ROWS_MAX {
        for &(n, k) in &shapes {
            for overwrite in [false, true] {
                let pad = (rng.next_u64() % 3) as usize;
                let ((lda, ldb, ldc), a, b, c0) = strided_operands(&mut rng, (m, n, k), pad);
                let name = format!("seed {seed} m={m} n={n} k={k} pad={pad} overwrite={overwrite}");
                // The scalar chain from C's value (+0.0 with `overwrite`), in increasing k.
                let chain = |af: &[f32], bf: &[f32]| {
                    in_order_chain((m, n, k), (af, lda), (bf, ldb), &c0, ldc, overwrite)
                };
                let want = chain(&a, &b);
                // The product in two column strips on two threads (one strip when n <= 32).
                let split = (n / 2).div_ceil(32) * 32;
                let two = |f: &(dyn Fn(usize, usize, usize) + Sync)| {
                    rayon::join(|| f(0, split.min(n), 0), || f(split.min(n), n, 1));
                };
                let mut got = c0.clone();
                let cp = got.as_mut_ptr() as usize;
                two(&|j0, j1, _| {
                    if j1 > j0 {
                        // SAFETY: the slices hold the described matrices; the strips are
                        // disjoint columns of C; the CPU has AVX-512F/BW/VL and FMA.
                        unsafe {
                            xr::gemm_f32(
                                m,
                                j1 - j0,
                                k,
                                a.as_ptr(),
                                lda,
                                b.as_ptr().add(j0),
                                ldb,
                                (cp as *mut f32).add(j0),
                                ldc,
                                overwrite,
                            )
                        }
                    }
                });
                let mut packed = c0.clone();
                // SAFETY: as above; the AVX-512 micro-kernels whatever the rows.
                unsafe {
                    driver::gemm::<x86::Avx512Kernel>(
                        m,
                        n,
                        k,
                        a.as_ptr(),
                        lda,
                        b.as_ptr(),
                        ldb,
                        packed.as_mut_ptr(),
                        ldc,
                        overwrite,
                    )
                };
                let same =
                    |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same(&got, &want), "f32 {name}: not the in-order chain");
                assert!(
                    same(&got, &packed),
                    "f32 {name}: not the packed kernels' bits"
                );
                // And through the entry point (one thread).
                let mut entry = c0.clone();
                raw(
                    Isa::Avx512,
                    (m, n, k),
                    (&a, lda),
                    (&b, ldb),
                    &mut entry,
                    ldc,
                    overwrite,
                );
                assert!(same(&entry, &want), "f32 {name}: gemm_f32_raw");
                let start: Vec<f32> = if overwrite {
                    vec![0.0; m * ldc]
                } else {
                    c0.clone()
                };
                let r = reference(m, n, k, &a, lda, &b, ldb, &start, ldc);
                for i in 0..m {
                    for j in 0..ldc {
                        let idx = i * ldc + j;
                        if j >= n {
                            assert_eq!(got[idx].to_bits(), c0[idx].to_bits(), "{name}: padding");
                            continue;
                        }
                        let mag: f64 = (0..k)
                            .map(|p| (a[i * lda + p] as f64 * b[p * ldb + j] as f64).abs())
                            .sum::<f64>()
                            + (start[idx] as f64).abs();
                        let err = (got[idx] as f64 - r[idx]).abs();
                        let bound = (k + 2) as f64 * f32::EPSILON as f64 * mag;
                        assert!(
                            err <= bound,
                            "f32 {name}: ({i},{j}) err {err:e} > {bound:e}"
                        );
                    }
                }
                // bf16 operands, widened as they are read.
                let a16 = bf16_vec(&mut rng, a.len());
                let b16 = bf16_vec(&mut rng, b.len());
                let af: Vec<f32> = a16.iter().map(|&x| bf16_to_f32(x)).collect();
                let bf: Vec<f32> = b16.iter().map(|&x| bf16_to_f32(x)).collect();
                let want = chain(&af, &bf);
                let mut got = c0.clone();
                let cp = got.as_mut_ptr() as usize;
                two(&|j0, j1, _| {
                    if j1 > j0 {
                        // SAFETY: as for f32.
                        unsafe {
                            xr::gemm_bf16(
                                m,
                                j1 - j0,
                                k,
                                a16.as_ptr(),
                                lda,
                                b16.as_ptr().add(j0),
                                ldb,
                                (cp as *mut f32).add(j0),
                                ldc,
                                overwrite,
                            )
                        }
                    }
                });
                assert!(same(&got, &want), "bf16 {name}: not the widened chain");
                if !overwrite && has_amx() {
                    // The rule (`AMX_MIN_ROWS`), not skipped where `pair_path` breaks it.
                    assert_eq!(
                        bf16::pair_path(Bf16Path::Amx, m),
                        Bf16Path::Widen,
                        "{name}: Amx's few rows widen"
                    );
                    let mut entry = c0.clone();
                    with_bf16_path(Bf16Path::Amx, || {
                        gemm_bf16(m, n, k, &a16, lda, &b16, ldb, &mut entry, ldc)
                    });
                    assert!(same(&entry, &want), "bf16 {name}: gemm_bf16 on Amx");
                }
            }
        }
    }
}

/// Both AVX-512 micro-kernels (`x86::Avx512Kernel`, 8×32, and `x86::Avx512Wide`, 6×64,
/// which `gemm_f32_raw` picks for more rows than one block on a CPU that is not AMD) run
/// through the driver give the in-order FMA chain bit for bit, whichever the entry point
/// picks on this CPU, on fresh random inputs (the seed is in every failure message): A read
/// in place (`m > MC_TARGET`) with B packed by the micro-tiles (`FUSE_BYTES`) or by the
/// separate pass, one to three `KC_WIDE` k-blocks, partial row tiles (`m % 6`, `m % 8`),
/// partial and full 64-column panels, several row blocks; also all rows in one block (the
/// packed-ahead chunks of `driver::Pipe`) and the entry point itself; with and without
/// `overwrite`, strided operands, padding untouched, and the C-fetch points (`C_AHEAD`).
#[cfg(target_arch = "x86_64")]
#[test]
fn both_avx512_tiles_are_the_in_order_chain() {
    use super::driver::{C_AHEAD, KC_WIDE, MC_TARGET};
    if detected_isa() != Isa::Avx512 {
        println!("not run: no AVX-512, neither micro-kernel can run on this CPU");
        return;
    }
    let seed = crate::backend::cpu::clock_seed();
    let mut rng = Rng(seed);
    let mc = MC_TARGET;
    let shapes = [
        (mc + 1, 64, 7),
        (mc + 5, 100, C_AHEAD + 3),
        (2 * mc + 7, 129, 300),
        (300, 256, KC_WIDE + 1),
        (mc + 13, 97, 2 * KC_WIDE + 37),
        // B's k-block spans over `FUSE_BYTES` (1 MiB): the separate packing pass.
        (mc + 3, 1100, 521),
        (3 * mc, 31, 2 * C_AHEAD + 7),
        // All rows in one block: packed A, B packed ahead by the micro-tiles.
        (9, 300, 300),
        (64, 513, 260),
        (mc, 65, KC_WIDE + 3),
    ];
    type Gemm =
        unsafe fn(usize, usize, usize, *const f32, usize, *const f32, usize, *mut f32, usize, bool);
    let kernels: [(&str, Gemm); 2] = [
        ("8x32", driver::gemm::<x86::Avx512Kernel>),
        ("6x64", driver::gemm::<x86::Avx512Wide>),
    ];
    for &(m, n, k) in &shapes {
        for overwrite in [false, true] {
            let pad = (rng.next_u64() % 3) as usize;
            let ((lda, ldb, ldc), a, b, c0) = strided_operands(&mut rng, (m, n, k), pad);
            let name = format!("seed {seed} m={m} n={n} k={k} pad={pad} overwrite={overwrite}");
            let want = in_order_chain((m, n, k), (&a, lda), (&b, ldb), &c0, ldc, overwrite);
            let same = |x: &[f32]| x.iter().zip(&want).all(|(p, q)| p.to_bits() == q.to_bits());
            for (kn, gemm) in kernels {
                let mut c = c0.clone();
                // SAFETY: the slices hold the described matrices; the CPU has AVX-512F and
                // FMA (`detected_isa`).
                unsafe {
                    gemm(
                        m,
                        n,
                        k,
                        a.as_ptr(),
                        lda,
                        b.as_ptr(),
                        ldb,
                        c.as_mut_ptr(),
                        ldc,
                        overwrite,
                    )
                };
                assert!(same(&c), "{kn} {name}: not the in-order chain");
            }
            let mut c = c0.clone();
            raw(
                Isa::Avx512,
                (m, n, k),
                (&a, lda),
                (&b, ldb),
                &mut c,
                ldc,
                overwrite,
            );
            assert!(same(&c), "gemm_f32_raw {name}: not the in-order chain");
        }
    }
}
