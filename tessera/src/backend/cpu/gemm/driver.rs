//! The BLIS-style five-loop driver, generic over the micro-kernel.

use super::scratch::with_scratch;

/// Depth of a packed k-block (`B` micro-panel `KC × NR` stays in L1).
pub(crate) const KC: usize = 256;
/// Rows of `A` packed per block (the packed `MC × KC` block stays in L2).
pub(crate) const MC_TARGET: usize = 144;
/// Columns of `B` packed per block (the packed `KC × NC` block stays in L3).
pub(crate) const NC_TARGET: usize = 4096;

/// A register-blocked micro-kernel plus its packing routines.
///
/// # Safety
/// Implementors must only be used when the CPU supports their instructions.
pub(crate) unsafe trait Kernel {
    /// Rows of the micro-tile.
    const MR: usize;
    /// Columns of the micro-tile.
    const NR: usize;
    /// Pack `mc × kc` of `A` into `MR`-row panels (see `pack::pack_a`).
    unsafe fn pack_a(mc: usize, kc: usize, a: *const f32, lda: usize, dst: *mut f32);
    /// Pack `kc × nc` of `B` into `NR`-column panels (see `pack::pack_b`).
    unsafe fn pack_b(kc: usize, nc: usize, b: *const f32, ldb: usize, dst: *mut f32);
    /// `C[0..mr, 0..nr] += Apanel · Bpanel` for packed panels of depth `kc`.
    unsafe fn run(
        mr: usize,
        nr: usize,
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
    );
}

/// `C += A·B` with raw pointers; all dimensions non-zero.
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
) {
    unsafe {
        let (mr_, nr_) = (K::MR, K::NR);
        // Balance the k-blocks so the last one is not tiny.
        let kblocks = k.div_ceil(KC);
        let kc_max = k.div_ceil(kblocks);
        let mc_max = (MC_TARGET / mr_).max(1) * mr_;
        let nc_max = (NC_TARGET / nr_).max(1) * nr_;
        let a_len = m.min(mc_max).div_ceil(mr_) * mr_ * kc_max;
        let b_len = n.min(nc_max).div_ceil(nr_) * nr_ * kc_max;

        with_scratch(a_len, b_len, |abuf, bbuf| {
            let mut jc = 0;
            while jc < n {
                let nc = nc_max.min(n - jc);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    K::pack_b(kc, nc, b.add(pc * ldb + jc), ldb, bbuf);
                    let mut ic = 0;
                    while ic < m {
                        let mc = mc_max.min(m - ic);
                        K::pack_a(mc, kc, a.add(ic * lda + pc), lda, abuf);
                        let mut jr = 0;
                        while jr < nc {
                            let nr = nr_.min(nc - jr);
                            let bp = bbuf.add(jr * kc);
                            let mut ir = 0;
                            while ir < mc {
                                let mr = mr_.min(mc - ir);
                                let ap = abuf.add(ir * kc);
                                let cp = c.add((ic + ir) * ldc + jc + jr);
                                K::run(mr, nr, kc, ap, bp, cp, ldc);
                                ir += mr_;
                            }
                            jr += nr_;
                        }
                        ic += mc;
                    }
                    pc += kc;
                }
                jc += nc;
            }
        })
    }
}
