//! AVX-512F micro-kernel: 8×32 tile, 16 `zmm` accumulators, `A` read in place.

use core::arch::x86_64::*;

use super::super::driver::Kernel;
use super::super::pack::{edge_load, edge_store, pack_b};

const MR: usize = 8;
const NR: usize = 32;

/// 8×32 AVX-512 kernel (rows `M < 8` use narrower instantiations).
pub(crate) struct Avx512Kernel;

/// `C[0..M, 0..32] += A · Bpanel` (one FMA chain per element from C's value), reading the
/// `M` rows of `A` in place (row stride `lda`).
#[inline(always)]
unsafe fn tile<const M: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        // The accumulators start from C, so every element is one FMA chain over k in order
        // (C = fma(a_k, b_k, C) for k = 0, 1, ...) whatever the blocking: the CPU's `dot`
        // order, shared with the PTX FFMA paths (`tessera_ir::tile::Op::Dot`).
        // With `overwrite` they start at `+0.0`, as from a zeroed C.
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        for (i, row) in acc.iter_mut().enumerate() {
            if overwrite {
                break;
            }
            let cr = c.add(i * ldc);
            row[0] = _mm512_loadu_ps(cr);
            row[1] = _mm512_loadu_ps(cr.add(16));
        }
        // Row `i` of A at `a + i * lda`: broadcast `A[i][p]` straight from its row.
        macro_rules! step {
            ($ap:expr, $bp:expr) => {{
                let b0 = _mm512_loadu_ps($bp);
                let b1 = _mm512_loadu_ps($bp.add(16));
                for i in 0..M {
                    let ai = _mm512_set1_ps(*$ap.add(i * lda));
                    acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
                }
            }};
        }
        let (mut ap, mut bp, mut p) = (a, b, kc);
        while p >= 4 {
            step!(ap, bp);
            step!(ap.add(1), bp.add(NR));
            step!(ap.add(2), bp.add(2 * NR));
            step!(ap.add(3), bp.add(3 * NR));
            ap = ap.add(4);
            bp = bp.add(4 * NR);
            p -= 4;
        }
        while p > 0 {
            step!(ap, bp);
            ap = ap.add(1);
            bp = bp.add(NR);
            p -= 1;
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            _mm512_storeu_ps(cr, row[0]);
            _mm512_storeu_ps(cr.add(16), row[1]);
        }
    }
}

#[inline(always)]
unsafe fn tile_rows(
    mr: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        match mr {
            8 => tile::<8>(kc, a, lda, b, c, ldc, overwrite),
            7 => tile::<7>(kc, a, lda, b, c, ldc, overwrite),
            6 => tile::<6>(kc, a, lda, b, c, ldc, overwrite),
            5 => tile::<5>(kc, a, lda, b, c, ldc, overwrite),
            4 => tile::<4>(kc, a, lda, b, c, ldc, overwrite),
            3 => tile::<3>(kc, a, lda, b, c, ldc, overwrite),
            2 => tile::<2>(kc, a, lda, b, c, ldc, overwrite),
            _ => tile::<1>(kc, a, lda, b, c, ldc, overwrite),
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma")]
unsafe fn run_avx512(
    mr: usize,
    nr: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        if nr == NR {
            tile_rows(mr, kc, a, lda, b, c, ldc, overwrite)
        } else {
            let mut t = edge_load::<MR, NR>(mr, nr, c, ldc, overwrite);
            tile_rows(mr, kc, a, lda, b, t.as_mut_ptr() as *mut f32, NR, overwrite);
            edge_store::<MR, NR>(mr, nr, c, ldc, &t);
        }
    }
}

#[target_feature(enable = "avx512f,fma")]
unsafe fn pack_b_avx512(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
    unsafe { pack_b::<NR>(kc, nc, b, ldb, dst) }
}

// SAFETY: only dispatched to after runtime detection of AVX-512F and FMA.
unsafe impl Kernel for Avx512Kernel {
    const MR: usize = MR;
    const NR: usize = NR;

    unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
        unsafe { pack_b_avx512(kc, nc, b, ldb, dst) }
    }

    unsafe fn run(
        mr: usize,
        nr: usize,
        kc: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        unsafe { run_avx512(mr, nr, kc, a, lda, b, c, ldc, overwrite) }
    }
}
