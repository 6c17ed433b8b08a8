//! The BLIS-style five-loop driver, generic over the micro-kernel.

use super::ahead::{self, Ahead};
use super::scratch::with_scratch;

/// Depth of a packed k-block (`B` micro-panel `KC × NR` stays in L1).
pub(crate) const KC: usize = 256;
/// Rows of `A` per block (the `MC × KC` block of `A` stays in L2 while every column panel
/// of the packed `B` block reads it).
pub(crate) const MC_TARGET: usize = 144;
/// Columns of `B` packed per block (the packed `KC × NC` block stays in L3).
pub(crate) const NC_TARGET: usize = 4096;
/// Columns of `B` packed per chunk when all of `A`'s rows fit one block (the packed
/// `KC × NC_SMALL` chunk stays in L2 while every row of `A` uses it).
pub(crate) const NC_SMALL: usize = 256;

/// A register-blocked micro-kernel plus its `B` packing routine (`A` is read in place).
///
/// # Safety
/// Implementors must only be used when the CPU supports their instructions.
pub(crate) unsafe trait Kernel {
    /// Rows of the micro-tile.
    const MR: usize;
    /// Columns of the micro-tile.
    const NR: usize;
    /// Pack `kc × nc` of `B` into `NR`-column panels (see `pack::pack_b`).
    unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32);
    /// `C[0..mr, 0..nr] += A · Bpanel` for the `mr × kc` block of `A` at `a` (row stride
    /// `lda`, read in place) and a packed panel of depth `kc`; with `overwrite`,
    /// `C[0..mr, 0..nr] = A · Bpanel` (the accumulators start at `+0.0` instead of C's
    /// values, which are not read).
    #[allow(clippy::too_many_arguments)]
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
    );
}

/// `C += A·B` (or, with `overwrite`, `C = A·B` without reading C) with raw pointers; all
/// dimensions non-zero. `overwrite` gives the bits that zeroing C and accumulating would.
///
/// # Safety
/// Pointers must address matrices of the given shapes/strides; the kernel's
/// instruction set must be available.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<K: Kernel>(
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        let (mr_, nr_) = (K::MR, K::NR);
        // Balance the k-blocks so the last one is not tiny.
        let kblocks = k.div_ceil(KC);
        let kc_max = k.div_ceil(kblocks);
        let mc_max = (MC_TARGET / mr_).max(1) * mr_;
        if m > mr_ && m <= mc_max {
            // All rows of A fit one block (of more than one micro-tile: with one, each packed
            // B panel is read once and long sequential rows of B pack faster): B is packed a
            // chunk at a time that stays in L2 while the micro-kernels read it.
            let nc_max = (NC_SMALL / nr_).max(1) * nr_;
            let b_len = n.min(nc_max).div_ceil(nr_) * nr_ * kc_max;
            with_scratch(0, b_len, |_, bbuf| {
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let first = overwrite && pc == 0;
                    let mut jc = 0;
                    while jc < n {
                        let nc = nc_max.min(n - jc);
                        K::pack_b(kc, nc, b.add(pc * ldb + jc), ldb, bbuf);
                        // The chunk packed next: B's next columns, or the next k-block's first.
                        let next = if jc + nc < n {
                            let cols = nc_max.min(n - jc - nc);
                            Ahead::new(b.wrapping_add(pc * ldb + jc + nc), kc, cols, ldb)
                        } else if pc + kc < k {
                            let rows = kc_max.min(k - pc - kc);
                            Ahead::new(b.wrapping_add((pc + kc) * ldb), rows, nc_max.min(n), ldb)
                        } else {
                            Ahead::NONE
                        };
                        let ak = a.add(pc);
                        block::<K>(m, nc, kc, ak, lda, bbuf, c.add(jc), ldc, first, next);
                        jc += nc;
                    }
                    pc += kc;
                }
            });
            return;
        }
        let nc_max = (NC_TARGET / nr_).max(1) * nr_;
        let b_len = n.min(nc_max).div_ceil(nr_) * nr_ * kc_max;

        with_scratch(0, b_len, |_, bbuf| {
            let mut jc = 0;
            while jc < n {
                let nc = nc_max.min(n - jc);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let first = overwrite && pc == 0;
                    K::pack_b(kc, nc, b.add(pc * ldb + jc), ldb, bbuf);
                    let mut ic = 0;
                    while ic < m {
                        let mc = mc_max.min(m - ic);
                        block::<K>(
                            mc,
                            nc,
                            kc,
                            a.add(ic * lda + pc),
                            lda,
                            bbuf,
                            c.add(ic * ldc + jc),
                            ldc,
                            first,
                            Ahead::NONE,
                        );
                        ic += mc;
                    }
                    pc += kc;
                }
                jc += nc;
            }
        })
    }
}

/// The two inner loops: every micro-tile of the `mc × nc` block of C at `c` from the
/// `mc × kc` block of A at `a` (row stride `lda`) and packed B (`bbuf`, `nc` columns of
/// depth `kc`).
///
/// # Safety
/// As [`gemm`], with `bbuf` holding the packed block.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn block<K: Kernel>(
    mc: usize,
    nc: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    bbuf: *const f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
    next: Ahead,
) {
    unsafe {
        let (mr_, nr_) = (K::MR, K::NR);
        let tiles = nc.div_ceil(nr_) * mc.div_ceil(mr_);
        let mut t = 0;
        let mut jr = 0;
        while jr < nc {
            let nr = nr_.min(nc - jr);
            let bp = bbuf.add(jr * kc);
            let mut ir = 0;
            while ir < mc {
                let mr = mr_.min(mc - ir);
                let ap = a.add(ir * lda);
                next.part(t, tiles);
                if !overwrite {
                    // The micro-kernel's FMA chains start from C: fetch the next tile's C
                    // into L2 while this one computes (into L1, C rows `ldc` apart can evict
                    // the B panel where they share cache sets).
                    let (ni, nj) = if ir + mr_ < mc {
                        (ir + mr_, jr)
                    } else {
                        (0, jr + nr_)
                    };
                    if nj < nc {
                        let (rows, cols) = (mr_.min(mc - ni), nr_.min(nc - nj));
                        ahead::tile(c.wrapping_add(ni * ldc + nj), rows, cols, ldc, false);
                    }
                }
                t += 1;
                K::run(
                    mr,
                    nr,
                    kc,
                    ap,
                    lda,
                    bp,
                    c.add(ir * ldc + jr),
                    ldc,
                    overwrite,
                );
                ir += mr_;
            }
            jr += nr_;
        }
    }
}
