//! Portable micro-kernel in plain Rust (any target; LLVM auto-vectorises it).

use super::driver::Kernel;
use super::pack::{edge_load, edge_store, pack_a, pack_b};

const MR: usize = 4;
const NR: usize = 16;

/// 4×16 kernel written without intrinsics.
pub(crate) struct PortableKernel;

/// `C[0..MR, 0..NR] += A·B` on packed panels: every element one fused-multiply-add chain
/// over k in order, starting from C's value (the `dot` order every ISA shares; `mul_add` is
/// an instruction where the target has FMA, a correctly rounded library call elsewhere).
#[inline(always)]
unsafe fn full(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, overwrite: bool) {
    unsafe {
        // With `overwrite` they start at `+0.0`, as from a zeroed C.
        let mut acc = [[0.0f32; NR]; MR];
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
            let ap = &*(a.add(p * MR) as *const [f32; MR]);
            let bp = &*(b.add(p * NR) as *const [f32; NR]);
            for i in 0..MR {
                for j in 0..NR {
                    acc[i][j] = ap[i].mul_add(bp[j], acc[i][j]);
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

    unsafe fn run(
        mr: usize,
        nr: usize,
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        overwrite: bool,
    ) {
        unsafe {
            if mr == MR && nr == NR {
                full(kc, a, b, c, ldc, overwrite)
            } else {
                let mut t = edge_load::<MR, NR>(mr, nr, c, ldc, overwrite);
                full(kc, a, b, t.as_mut_ptr() as *mut f32, NR, overwrite);
                edge_store::<MR, NR>(mr, nr, c, ldc, &t);
            }
        }
    }
}
