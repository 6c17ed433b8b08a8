//! AVX-512F micro-kernel: 8×32 tile, 16 `zmm` accumulators; `A` packed or in place, `B`
//! packed or packed on the way (`Kernel::run_pack`).

use core::arch::x86_64::*;
use core::ptr::null_mut;

use super::super::ahead::{Copy16, Walk};
use super::super::driver::{C_AHEAD, Kernel, Tile, WALK_STEP};
use super::super::pack::{edge_load, edge_store, pack_a, pack_b, pack_b_rows};

const MR: usize = 8;
const NR: usize = 32;

/// 8×32 AVX-512 kernel (rows `M < 8` use narrower instantiations).
pub(crate) struct Avx512Kernel;

/// Rows of `B` ahead of the current one that a packing micro-tile prefetches into L1.
const PACK_AHEAD: usize = 16;

/// `C[0..M, 0..32] += A · B` (one FMA chain per element from C's value) for the micro-tile
/// `t`, reading the `M` rows of `A` from a packed `MR`-row panel (`A_PANEL`) or in place (row
/// stride `t.ars`), and `B` from a packed panel (`PACK` false: `t.b` with row stride `NR`) or
/// in place (`PACK`: `t.b` with row stride `ldb`), then each row of `B` is also stored to the
/// packed panel at `bp`. With `WALK`, `w` and `cp` are stepped once per four steps of k (and
/// `cp` finished after).
#[inline(always)]
unsafe fn tile<const M: usize, const PACK: bool, const A_PANEL: bool, const WALK: bool>(
    t: &Tile,
    ldb: usize,
    bp: *mut f32,
    mut w: Walk,
    mut cp: Copy16,
) {
    let Tile {
        kc,
        a,
        ars: lda,
        b,
        c,
        ldc,
        overwrite,
        next,
        ..
    } = *t;
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
        let ldb = if PACK { ldb } else { NR };
        // Constant strides for a packed panel of A (`A_PANEL`) or in-place rows.
        let (ars, aks) = if A_PANEL { (1, MR) } else { (lda, 1) };
        // `A[i][p]` at `ap + i * ars` for the step's `ap`: broadcast to all lanes.
        macro_rules! step {
            ($ap:expr, $bs:expr, $bd:expr) => {{
                let b0 = _mm512_loadu_ps($bs);
                let b1 = _mm512_loadu_ps($bs.add(16));
                if PACK {
                    _mm512_storeu_ps($bd, b0);
                    _mm512_storeu_ps($bd.add(16), b1);
                    // The row's first, middle and last bytes: its two or three lines.
                    let ahead = $bs.wrapping_add(PACK_AHEAD * ldb) as *const i8;
                    _mm_prefetch::<_MM_HINT_T0>(ahead);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(4 * NR - 1));
                }
                for i in 0..M {
                    let ai = _mm512_set1_ps(*$ap.add(i * ars));
                    acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
                }
            }};
        }
        // This tile's C lines (which its stores write) and the next tile's (which its
        // loads read) into L1, `C_AHEAD` steps of k before the end: by then the k loop's
        // stream of B has evicted the lines loaded at the start.
        let fetch_c = || {
            for i in 0..M {
                let cr = c.wrapping_add(i * ldc) as *const i8;
                _mm_prefetch::<_MM_HINT_T0>(cr);
                _mm_prefetch::<_MM_HINT_T0>(cr.wrapping_add(4 * NR - 1));
            }
            if !next.is_null() {
                for i in 0..MR {
                    let cr = next.wrapping_add(i * ldc) as *const i8;
                    _mm_prefetch::<_MM_HINT_T0>(cr);
                    _mm_prefetch::<_MM_HINT_T0>(cr.wrapping_add(4 * NR - 1));
                }
            }
        };
        if kc < C_AHEAD + 4 {
            fetch_c();
        }
        // `bd` is only written with `PACK`.
        let (mut ap, mut bs, mut bd, mut p) = (a, b, bp, kc);
        const _: () = assert!(WALK_STEP == 4);
        while p >= 4 {
            if WALK {
                w.step();
                cp.step();
            }
            if (C_AHEAD..C_AHEAD + 4).contains(&p) && kc >= C_AHEAD + 4 {
                fetch_c();
            }
            step!(ap, bs, bd);
            step!(ap.add(aks), bs.add(ldb), bd.wrapping_add(NR));
            step!(ap.add(2 * aks), bs.add(2 * ldb), bd.wrapping_add(2 * NR));
            step!(ap.add(3 * aks), bs.add(3 * ldb), bd.wrapping_add(3 * NR));
            ap = ap.add(4 * aks);
            // In place, the row after the block's last may lie past the end of B.
            bs = bs.wrapping_add(4 * ldb);
            bd = bd.wrapping_add(4 * NR);
            p -= 4;
        }
        while p > 0 {
            step!(ap, bs, bd);
            ap = ap.add(aks);
            bs = bs.wrapping_add(ldb);
            bd = bd.wrapping_add(NR);
            p -= 1;
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            _mm512_storeu_ps(cr, row[0]);
            _mm512_storeu_ps(cr.add(16), row[1]);
        }
        if WALK {
            cp.rest();
        }
    }
}

/// [`tile`] for the `t.mr <= MR` rows of a micro-tile.
#[inline(always)]
unsafe fn tile_rows<const PACK: bool, const WALK: bool>(
    t: &Tile,
    ldb: usize,
    bp: *mut f32,
    w: Walk,
    cp: Copy16,
) {
    unsafe {
        // A packed panel has `aks == MR`, rows in place `aks == 1`.
        macro_rules! rows {
            ($panel:literal) => {
                match t.mr {
                    8 => tile::<8, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    7 => tile::<7, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    6 => tile::<6, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    5 => tile::<5, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    4 => tile::<4, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    3 => tile::<3, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    2 => tile::<2, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    _ => tile::<1, PACK, $panel, WALK>(t, ldb, bp, w, cp),
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

#[target_feature(enable = "avx512f,fma")]
unsafe fn run_avx512(t: Tile) {
    unsafe {
        if t.nr == NR {
            tile_rows::<false, false>(&t, NR, null_mut(), Walk::NONE, Copy16::NONE)
        } else {
            let mut e = edge_load::<MR, NR>(t.mr, t.nr, t.c, t.ldc, t.overwrite);
            let c = e.as_mut_ptr() as *mut f32;
            // `next` is dropped: its rows are `t.ldc` apart, not the edge buffer's `NR`.
            tile_rows::<false, false>(
                &Tile {
                    c,
                    ldc: NR,
                    next: core::ptr::null(),
                    ..t
                },
                NR,
                null_mut(),
                Walk::NONE,
                Copy16::NONE,
            );
            edge_store::<MR, NR>(t.mr, t.nr, t.c, t.ldc, &e);
        }
    }
}

#[target_feature(enable = "avx512f,fma")]
unsafe fn run_pack_avx512(t: Tile, ldb: usize, bp: *mut f32) {
    unsafe { tile_rows::<true, false>(&t, ldb, bp, Walk::NONE, Copy16::NONE) }
}

#[target_feature(enable = "avx512f,fma")]
unsafe fn run_walk_avx512(t: Tile, mut w: Walk, mut cp: Copy16) {
    unsafe {
        if t.nr == NR && t.mr == MR {
            if t.aks == 1 {
                tile::<MR, false, false, true>(&t, NR, null_mut(), w, cp)
            } else {
                tile::<MR, false, true, true>(&t, NR, null_mut(), w, cp)
            }
        } else {
            w.rest();
            run_avx512(t);
            cp.rest()
        }
    }
}

#[target_feature(enable = "avx512f,fma")]
unsafe fn pack_a_avx512(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
    unsafe { pack_a::<MR>(mc, kc, a, lda, dst) }
}

#[target_feature(enable = "avx512f,fma")]
unsafe fn pack_b_avx512(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
    unsafe { pack_b::<NR>(kc, nc, b, ldb, dst) }
}

#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_b_rows_avx512(
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

// SAFETY: only dispatched to after runtime detection of AVX-512F and FMA.
unsafe impl Kernel for Avx512Kernel {
    const MR: usize = MR;
    const NR: usize = NR;

    unsafe fn pack_a(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
        unsafe { pack_a_avx512(mc, kc, a, lda, dst) }
    }

    unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
        unsafe { pack_b_avx512(kc, nc, b, ldb, dst) }
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
        unsafe { pack_b_rows_avx512(kc, p0, p1, nc, b, ldb, dst) }
    }

    unsafe fn run(t: Tile) {
        unsafe { run_avx512(t) }
    }

    unsafe fn run_pack(t: Tile, ldb: usize, bp: *mut f32) {
        unsafe { run_pack_avx512(t, ldb, bp) }
    }

    unsafe fn run_walk(t: Tile, w: Walk, cp: Copy16) {
        unsafe { run_walk_avx512(t, w, cp) }
    }
}
