//! AVX2 + FMA micro-kernel: 6×16 tile, 12 `ymm` accumulators; `A` packed or in place.

use core::arch::x86_64::*;

use super::super::driver::{Kernel, Tile};
use super::super::pack::{edge_load, edge_store, pack_a, pack_b, pack_b_rows};

const MR: usize = 6;
const NR: usize = 16;

/// 6×16 AVX2/FMA kernel (rows `M < 6` use narrower instantiations).
pub(crate) struct Avx2Kernel;

/// `C[0..M, 0..16] += A · Bpanel` for the micro-tile `t`, reading the `M` rows of `A` from a
/// packed `MR`-row panel (`A_PANEL`) or in place (row stride `t.ars`).
#[inline(always)]
unsafe fn tile<const M: usize, const A_PANEL: bool>(t: &Tile) {
    let Tile {
        kc,
        a,
        ars: lda,
        b,
        c,
        ldc,
        overwrite,
        ..
    } = *t;
    unsafe {
        // Constant strides for a packed panel of A (`A_PANEL`) or in-place rows.
        let (ars, aks) = if A_PANEL { (1, MR) } else { (lda, 1) };
        // The accumulators start from C, so every element is one FMA chain over k in order
        // (C = fma(a_k, b_k, C) for k = 0, 1, ...) whatever the blocking: the CPU's `dot`
        // order, shared with the PTX FFMA paths (`tessera_ir::tile::Op::Dot`).
        // With `overwrite` they start at `+0.0`, as from a zeroed C.
        let mut acc = [[_mm256_setzero_ps(); 2]; M];
        for (i, row) in acc.iter_mut().enumerate() {
            if overwrite {
                break;
            }
            let cr = c.add(i * ldc);
            row[0] = _mm256_loadu_ps(cr);
            row[1] = _mm256_loadu_ps(cr.add(8));
        }
        macro_rules! step {
            ($ap:expr, $bp:expr) => {{
                let b0 = _mm256_loadu_ps($bp);
                let b1 = _mm256_loadu_ps($bp.add(8));
                for i in 0..M {
                    let ai = _mm256_broadcast_ss(&*$ap.add(i * ars));
                    acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
                    acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
                }
            }};
        }
        let (mut ap, mut bp, mut p) = (a, b, kc);
        while p >= 4 {
            step!(ap, bp);
            step!(ap.add(aks), bp.add(NR));
            step!(ap.add(2 * aks), bp.add(2 * NR));
            step!(ap.add(3 * aks), bp.add(3 * NR));
            ap = ap.add(4 * aks);
            bp = bp.add(4 * NR);
            p -= 4;
        }
        while p > 0 {
            step!(ap, bp);
            ap = ap.add(aks);
            bp = bp.add(NR);
            p -= 1;
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            _mm256_storeu_ps(cr, row[0]);
            _mm256_storeu_ps(cr.add(8), row[1]);
        }
    }
}

/// [`tile`] for the `t.mr <= MR` rows of a micro-tile.
#[inline(always)]
unsafe fn tile_rows(t: &Tile) {
    unsafe {
        // A packed panel has `aks == MR`, rows in place `aks == 1`.
        macro_rules! rows {
            ($panel:literal) => {
                match t.mr {
                    6 => tile::<6, $panel>(t),
                    5 => tile::<5, $panel>(t),
                    4 => tile::<4, $panel>(t),
                    3 => tile::<3, $panel>(t),
                    2 => tile::<2, $panel>(t),
                    _ => tile::<1, $panel>(t),
                }
            };
        }
        if t.aks == 1 {
            rows!(false)
        } else {
            rows!(true)
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(t: Tile) {
    unsafe {
        if t.nr == NR {
            tile_rows(&t)
        } else {
            let mut e = edge_load::<MR, NR>(t.mr, t.nr, t.c, t.ldc, t.overwrite);
            let c = e.as_mut_ptr() as *mut f32;
            tile_rows(&Tile { c, ldc: NR, ..t });
            edge_store::<MR, NR>(t.mr, t.nr, t.c, t.ldc, &e);
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn pack_a_avx2(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
    unsafe { pack_a::<MR>(mc, kc, a, lda, dst) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b_avx2(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
    unsafe { pack_b::<NR>(kc, nc, b, ldb, dst) }
}

#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_b_rows_avx2(
    kc: usize,
    p0: usize,
    p1: usize,
    nc: usize,
    b: *const f32,
    ldb: usize,
    dst: *mut f32,
) {
    unsafe { pack_b_rows::<NR>(kc, p0, p1, nc, b, ldb, dst) }
}

// SAFETY: only dispatched to after runtime detection of AVX2 and FMA.
unsafe impl Kernel for Avx2Kernel {
    const MR: usize = MR;
    const NR: usize = NR;

    unsafe fn pack_a(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
        unsafe { pack_a_avx2(mc, kc, a, lda, dst) }
    }

    unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
        unsafe { pack_b_avx2(kc, nc, b, ldb, dst) }
    }

    unsafe fn pack_b_rows(
        kc: usize,
        p0: usize,
        p1: usize,
        nc: usize,
        b: *const f32,
        ldb: usize,
        dst: *mut f32,
    ) {
        unsafe { pack_b_rows_avx2(kc, p0, p1, nc, b, ldb, dst) }
    }

    unsafe fn run(t: Tile) {
        unsafe { run_avx2(t) }
    }
}
