//! Portable micro-kernel in plain Rust (any target; LLVM auto-vectorises it).

use super::driver::{Kernel, Tile};
use super::pack::{edge_load, edge_store, pack_a, pack_b, pack_b_rows};

const MR: usize = 4;
const NR: usize = 16;

/// 4×16 kernel written without intrinsics.
pub(crate) struct PortableKernel;

/// `C[0..M, 0..NR] += A·B` for the micro-tile `t`, with `A[i][p]` at `a + i * ars + p * aks`
/// (a packed panel or rows in place) and `B` a packed panel: every element one
/// fused-multiply-add chain over k in order, starting from C's value (the `dot` order every
/// ISA shares; `mul_add` is an instruction where the target has FMA, a correctly rounded
/// library call elsewhere).
#[inline(always)]
unsafe fn full<const M: usize>(t: &Tile) {
    let Tile {
        kc,
        a,
        ars,
        aks,
        b,
        c,
        ldc,
        overwrite,
        ..
    } = *t;
    unsafe {
        // With `overwrite` they start at `+0.0`, as from a zeroed C.
        let mut acc = [[0.0f32; NR]; M];
        for (i, row) in acc.iter_mut().enumerate() {
            if overwrite {
                break;
            }
            let cr = c.add(i * ldc);
            for (j, v) in row.iter_mut().enumerate() {
                *v = *cr.add(j);
            }
        }
        for p in 0..kc {
            let bp = &*(b.add(p * NR) as *const [f32; NR]);
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = *a.add(i * ars + p * aks);
                for (v, &bj) in row.iter_mut().zip(bp) {
                    *v = ai.mul_add(bj, *v);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            for (j, v) in row.iter().enumerate() {
                *cr.add(j) = *v;
            }
        }
    }
}

/// [`full`] for the `t.mr <= MR` rows of a micro-tile.
#[inline(always)]
unsafe fn rows(t: &Tile) {
    unsafe {
        match t.mr {
            4 => full::<4>(t),
            3 => full::<3>(t),
            2 => full::<2>(t),
            _ => full::<1>(t),
        }
    }
}

// SAFETY: plain Rust, valid on every CPU.
unsafe impl Kernel for PortableKernel {
    const MR: usize = MR;
    const NR: usize = NR;

    unsafe fn pack_a(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32) {
        unsafe { pack_a::<MR>(mc, kc, a, lda, dst) }
    }

    unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32) {
        unsafe { pack_b::<NR>(kc, nc, b, ldb, dst) }
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
        unsafe { pack_b_rows::<NR>(kc, p0, p1, nc, b, ldb, dst) }
    }

    unsafe fn run(t: Tile) {
        unsafe {
            if t.nr == NR {
                rows(&t)
            } else {
                let mut e = edge_load::<MR, NR>(t.mr, t.nr, t.c, t.ldc, t.overwrite);
                let c = e.as_mut_ptr() as *mut f32;
                rows(&Tile { c, ldc: NR, ..t });
                edge_store::<MR, NR>(t.mr, t.nr, t.c, t.ldc, &e);
            }
        }
    }
}
