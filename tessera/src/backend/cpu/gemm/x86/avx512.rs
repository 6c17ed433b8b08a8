//! AVX-512F micro-kernels: 8×32 tile, 16 `zmm` accumulators ([`Avx512Kernel`]), and 6×64,
//! 24 accumulators ([`Avx512Wide`], the large-`m` products on Intel CPUs, see
//! `gemm::wide_tile`); `A` packed or in place, `B` packed or packed on the way
//! (`Kernel::run_pack`).

use core::arch::x86_64::*;
use core::ptr::null_mut;

use super::super::ahead::{Copy16, Walk};
use super::super::driver::{C_AHEAD, Kernel, Tile, WALK_STEP};
use super::super::pack::{edge_load, edge_store, pack_a, pack_b, pack_b_rows};

/// 8×32 AVX-512 kernel (rows `M < 8` use narrower instantiations).
pub(crate) struct Avx512Kernel;

/// 6×64 AVX-512 kernel: per step of k four 512-bit loads of `B` and six broadcasts of `A`
/// feed 24 FMAs (the 8×32 tile: two loads and eight broadcasts for 16), and `A`'s rows in
/// place are read for 64 columns of C instead of 32. Its `Kernel::run_pack` packs the
/// `kc × 64` panel first and then runs on it.
pub(crate) struct Avx512Wide;

/// Rows of `B` ahead of the current one that a packing micro-tile prefetches into L1.
const PACK_AHEAD: usize = 16;

/// `C[0..M, 0..16·NV] += A · B` (one FMA chain per element from C's value) for the
/// micro-tile `t` of a `MR × 16·NV` kernel, reading the `M` rows of `A` from a packed
/// `MR`-row panel (`A_PANEL`) or in place (row
/// stride `t.ars`), and `B` from a packed panel (`PACK` false: `t.b` with row stride `NR`) or
/// in place (`PACK`: `t.b` with row stride `ldb`), then each row of `B` is also stored to the
/// packed panel at `bp`. With `WALK`, `w` and `cp` are stepped once per four steps of k (and
/// `cp` finished after).
#[inline(always)]
unsafe fn tile<
    const MR: usize,
    const NR: usize,
    const NV: usize,
    const M: usize,
    const PACK: bool,
    const A_PANEL: bool,
    const WALK: bool,
>(
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
    const { assert!(NR == 16 * NV) };
    let nr = NR;
    unsafe {
        // The accumulators start from C, so every element is one FMA chain over k in order
        // (C = fma(a_k, b_k, C) for k = 0, 1, ...) whatever the blocking: the CPU's `dot`
        // order, shared with the PTX FFMA paths (`tessera_ir::tile::Op::Dot`).
        // With `overwrite` they start at `+0.0`, as from a zeroed C.
        let mut acc = [[_mm512_setzero_ps(); NV]; M];
        for (i, row) in acc.iter_mut().enumerate() {
            if overwrite {
                break;
            }
            let cr = c.add(i * ldc);
            for (v, x) in row.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(cr.add(16 * v));
            }
        }
        let ldb = if PACK { ldb } else { nr };
        // Constant strides for a packed panel of A (`A_PANEL`) or in-place rows.
        let (ars, aks) = if A_PANEL { (1, MR) } else { (lda, 1) };
        // `A[i][p]` at `ap + i * ars` for the step's `ap`: broadcast to all lanes.
        macro_rules! step {
            ($ap:expr, $bs:expr, $bd:expr) => {{
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = _mm512_loadu_ps($bs.add(16 * v));
                }
                if PACK {
                    for (v, x) in bv.iter().enumerate() {
                        _mm512_storeu_ps($bd.add(16 * v), *x);
                    }
                    // The row's first byte, one per 64 bytes after it, and its last byte:
                    // all its lines.
                    let ahead = $bs.wrapping_add(PACK_AHEAD * ldb) as *const i8;
                    for v in 0..NV {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * v));
                    }
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(4 * nr - 1));
                }
                for i in 0..M {
                    let ai = _mm512_set1_ps(*$ap.add(i * ars));
                    for v in 0..NV {
                        acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
                    }
                }
            }};
        }
        // This tile's C lines (which its stores write) and the next tile's (which its
        // loads read) into L1, `C_AHEAD` steps of k before the end: by then the k loop's
        // stream of B has evicted the lines loaded at the start.
        // A row's first byte, one per 64 bytes after it but the last 64, and its last byte
        // (two per 128-byte row: its two or three lines).
        let fetch_row = |cr: *const i8| {
            for v in 0..NV - 1 {
                _mm_prefetch::<_MM_HINT_T0>(cr.wrapping_add(64 * v));
            }
            _mm_prefetch::<_MM_HINT_T0>(cr.wrapping_add(4 * nr - 1));
        };
        let fetch_c = || {
            for i in 0..M {
                fetch_row(c.wrapping_add(i * ldc) as *const i8);
            }
            if !next.is_null() {
                for i in 0..MR {
                    fetch_row(next.wrapping_add(i * ldc) as *const i8);
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
            step!(ap.add(aks), bs.add(ldb), bd.wrapping_add(nr));
            step!(ap.add(2 * aks), bs.add(2 * ldb), bd.wrapping_add(2 * nr));
            step!(ap.add(3 * aks), bs.add(3 * ldb), bd.wrapping_add(3 * nr));
            ap = ap.add(4 * aks);
            // In place, the row after the block's last may lie past the end of B.
            bs = bs.wrapping_add(4 * ldb);
            bd = bd.wrapping_add(4 * nr);
            p -= 4;
        }
        while p > 0 {
            step!(ap, bs, bd);
            ap = ap.add(aks);
            bs = bs.wrapping_add(ldb);
            bd = bd.wrapping_add(nr);
            p -= 1;
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            for (v, x) in row.iter().enumerate() {
                _mm512_storeu_ps(cr.add(16 * v), *x);
            }
        }
        if WALK {
            cp.rest();
        }
    }
}

/// [`tile`] for the `t.mr <= MR` rows of a micro-tile.
#[inline(always)]
unsafe fn tile_rows<
    const MR: usize,
    const NR: usize,
    const NV: usize,
    const PACK: bool,
    const WALK: bool,
>(
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
                    8 if MR >= 8 => tile::<MR, NR, NV, 8, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    7 if MR >= 7 => tile::<MR, NR, NV, 7, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    6 => tile::<MR, NR, NV, 6, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    5 => tile::<MR, NR, NV, 5, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    4 => tile::<MR, NR, NV, 4, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    3 => tile::<MR, NR, NV, 3, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    2 => tile::<MR, NR, NV, 2, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                    _ => tile::<MR, NR, NV, 1, PACK, $panel, WALK>(t, ldb, bp, w, cp),
                }
            };
        }
        const { assert!(MR == 6 || MR == 8) };
        if t.aks == 1 {
            rows!(false)
        } else {
            rows!(true)
        }
    }
}

/// [`Kernel::run`] of the `MR × NR` kernel (`NR = 16·NV`).
#[inline(always)]
unsafe fn run_k<const MR: usize, const NR: usize, const NV: usize>(t: Tile) {
    unsafe {
        if t.nr == NR {
            tile_rows::<MR, NR, NV, false, false>(&t, NR, null_mut(), Walk::NONE, Copy16::NONE)
        } else {
            let mut e = edge_load::<MR, NR>(t.mr, t.nr, t.c, t.ldc, t.overwrite);
            let c = e.as_mut_ptr() as *mut f32;
            // `next` is dropped: its rows are `t.ldc` apart, not the edge buffer's `NR`.
            tile_rows::<MR, NR, NV, false, false>(
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

/// [`Kernel::run_walk`] of the `MR × NR` kernel.
#[inline(always)]
unsafe fn run_walk_k<const MR: usize, const NR: usize, const NV: usize>(
    t: Tile,
    mut w: Walk,
    mut cp: Copy16,
) {
    unsafe {
        if t.nr == NR && t.mr == MR {
            if t.aks == 1 {
                tile::<MR, NR, NV, MR, false, false, true>(&t, NR, null_mut(), w, cp)
            } else {
                tile::<MR, NR, NV, MR, false, true, true>(&t, NR, null_mut(), w, cp)
            }
        } else {
            w.rest();
            run_k::<MR, NR, NV>(t);
            cp.rest()
        }
    }
}

/// The [`Kernel`] impl of an `MR × NR` AVX-512 kernel type (`NR = 16·NV`), each entry point
/// a `#[target_feature]` function.
macro_rules! avx512_kernel {
    ($ty:ty, $mr:literal, $nr:literal, $nv:literal) => {
        // SAFETY: only dispatched to after runtime detection of AVX-512F and FMA.
        unsafe impl Kernel for $ty {
            const MR: usize = $mr;
            const NR: usize = $nr;

            unsafe fn pack_a(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
                #[target_feature(enable = "avx512f,fma")]
                unsafe fn go(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
                    unsafe { pack_a::<$mr>(mc, kc, a, lda, dst) }
                }
                unsafe { go(mc, kc, a, lda, dst) }
            }

            unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
                #[target_feature(enable = "avx512f,fma")]
                unsafe fn go(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
                    unsafe { pack_b::<$nr>(kc, nc, b, ldb, dst) }
                }
                unsafe { go(kc, nc, b, ldb, dst) }
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
                #[target_feature(enable = "avx512f,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn go(
                    kc: usize,
                    p0: usize,
                    p1: usize,
                    nc: usize,
                    b: *const f32,
                    ldb: usize,
                    dst: *mut f32,
                ) {
                    unsafe { pack_b_rows::<$nr>(kc, p0, p1, nc, b, ldb, dst) }
                }
                unsafe { go(kc, p0, p1, nc, b, ldb, dst) }
            }

            unsafe fn run(t: Tile) {
                #[target_feature(enable = "avx512f,fma")]
                unsafe fn go(t: Tile) {
                    unsafe { run_k::<$mr, $nr, $nv>(t) }
                }
                unsafe { go(t) }
            }

            unsafe fn run_pack(t: Tile, ldb: usize, bp: *mut f32) {
                #[target_feature(enable = "avx512f,fma")]
                unsafe fn go(t: Tile, ldb: usize, bp: *mut f32) {
                    if $nv > 2 {
                        // Wider tiles pack the panel first, then run on it: the fused
                        // loop (four more stores and five prefetches per step of k beside
                        // 24 accumulators) spilled accumulators to the stack (a third of
                        // its samples at `256³`), and `256³` ran 159-163 GFLOP/s against
                        // 165-168 this way (see `gemm::wide_tile`).
                        unsafe {
                            pack_b::<$nr>(t.kc, $nr, t.b, ldb, bp);
                            return run_k::<$mr, $nr, $nv>(Tile { b: bp, ..t });
                        }
                    }
                    unsafe {
                        tile_rows::<$mr, $nr, $nv, true, false>(
                            &t,
                            ldb,
                            bp,
                            Walk::NONE,
                            Copy16::NONE,
                        )
                    }
                }
                unsafe { go(t, ldb, bp) }
            }

            unsafe fn run_walk(t: Tile, w: Walk, cp: Copy16) {
                #[target_feature(enable = "avx512f,fma")]
                unsafe fn go(t: Tile, w: Walk, cp: Copy16) {
                    unsafe { run_walk_k::<$mr, $nr, $nv>(t, w, cp) }
                }
                unsafe { go(t, w, cp) }
            }
        }
    };
}

avx512_kernel!(Avx512Kernel, 8, 32, 2);
avx512_kernel!(Avx512Wide, 6, 64, 4);
