//! Packing of `A` into `MR`-row panels and `B` into `NR`-column panels, and the stack
//! tiles of partial micro-tiles.
//!
//! Packed layouts (both k-major, zero padded to full panels):
//! * A panel `i`: `dst[i*kc*MR + p*MR + r] = A[i*MR + r][p]`
//! * B panel `j`: `dst[j*kc*NR + p*NR + c] = B[p][j*NR + c]`
//!
//! The micro-kernels read `A` either packed or in place (see `driver`).
//!
//! The functions are `#[inline(always)]` so that each kernel can instantiate
//! them inside a `#[target_feature]` wrapper and get vectorised copies.

/// Pack the `mc × kc` block of `A` at `a` (row stride `lda`) into `mr`-row panels.
///
/// # Safety
/// `a` must address `mc` rows of `kc` readable elements with stride `lda`;
/// `dst` must hold `mc.div_ceil(mr) * mr * kc` writable elements.
#[inline(always)]
pub(crate) unsafe fn pack_a<const MR: usize>(
    mc: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    dst: *mut f32,
) {
    unsafe {
        let mut i = 0;
        let mut out = dst;
        while i < mc {
            let rows = MR.min(mc - i);
            let src = a.add(i * lda);
            if rows == MR {
                // Full panel: read MR rows in lock-step, write MR-wide columns.
                for p in 0..kc {
                    let o = out.add(p * MR);
                    for r in 0..MR {
                        *o.add(r) = *src.add(r * lda + p);
                    }
                }
            } else {
                for p in 0..kc {
                    let o = out.add(p * MR);
                    for r in 0..MR {
                        *o.add(r) = if r < rows { *src.add(r * lda + p) } else { 0.0 };
                    }
                }
            }
            out = out.add(MR * kc);
            i += MR;
        }
    }
}

/// Pack the `kc × nc` block of `B` at `b` (row stride `ldb`) into `nr`-column panels.
///
/// # Safety
/// `b` must address `kc` rows of `nc` readable elements with stride `ldb`;
/// `dst` must hold `nc.div_ceil(nr) * nr * kc` writable elements.
#[inline(always)]
pub(crate) unsafe fn pack_b<const NR: usize>(
    kc: usize,
    nc: usize,
    b: *const f32,
    ldb: usize,
    dst: *mut f32,
) {
    unsafe { pack_b_rows::<NR>(kc, 0, kc, nc, b, ldb, dst) }
}

/// Pack rows `p0..p1` of the `kc × nc` block of `B` at `b` (row stride `ldb`) into their
/// places in the `nr`-column panels of the whole block at `dst` (the layout of
/// [`pack_b`]; the other rows are not written).
///
/// # Safety
/// `p0 <= p1 <= kc`; `b` must address `kc` rows of `nc` readable elements with stride
/// `ldb`; `dst` must hold `nc.div_ceil(nr) * nr * kc` writable elements.
#[inline(always)]
pub(crate) unsafe fn pack_b_rows<const NR: usize>(
    kc: usize,
    p0: usize,
    p1: usize,
    nc: usize,
    b: *const f32,
    ldb: usize,
    dst: *mut f32,
) {
    unsafe {
        // Full panels, a few rows of B at a time across all panels: B is read as `ROWS`
        // sequential streams (a panel-at-a-time walk reads one cache line per row, `ldb`
        // apart, which defeats the prefetchers and was 30 % of an `m = 64`, `k = n = 4096`
        // product), and each panel receives `ROWS × NR` contiguous floats.
        const ROWS: usize = 8;
        let full = nc / NR;
        let mut p = p0;
        while p < p1 {
            let rows = ROWS.min(p1 - p);
            for jp in 0..full {
                let src = b.add(p * ldb + jp * NR);
                let o = dst.add(jp * NR * kc + p * NR);
                for r in 0..rows {
                    // Fixed-size copy: lowered to a few vector moves.
                    core::ptr::copy_nonoverlapping(src.add(r * ldb), o.add(r * NR), NR);
                }
            }
            p += rows;
        }
        let j = full * NR;
        if j < nc {
            let cols = nc - j;
            let out = dst.add(full * NR * kc);
            for p in p0..p1 {
                let s = b.add(p * ldb + j);
                let o = out.add(p * NR);
                for c in 0..NR {
                    *o.add(c) = if c < cols { *s.add(c) } else { 0.0 };
                }
            }
        }
    }
}

/// Copy the valid `mr × nr` part of the `C` tile at `c` (stride `ldc`) into a
/// zeroed `MR × NR` stack tile (row stride `NR`), for partial micro-tiles; with `skip`,
/// C is not read (the tile stays zero).
///
/// # Safety
/// `c` must address `mr × nr` elements with stride `ldc`, `mr <= MR`, `nr <= NR`.
#[inline(always)]
pub(crate) unsafe fn edge_load<const MR: usize, const NR: usize>(
    mr: usize,
    nr: usize,
    c: *const f32,
    ldc: usize,
    skip: bool,
) -> [[f32; NR]; MR] {
    unsafe {
        let mut tmp = [[0.0f32; NR]; MR];
        if skip {
            return tmp;
        }
        for (r, row) in tmp.iter_mut().enumerate().take(mr) {
            for (j, v) in row.iter_mut().enumerate().take(nr) {
                *v = *c.add(r * ldc + j);
            }
        }
        tmp
    }
}

/// Write the valid `mr × nr` part of a stack tile back to `C` (inverse of [`edge_load`]).
///
/// # Safety
/// Same as [`edge_load`], with `c` writable.
#[inline(always)]
pub(crate) unsafe fn edge_store<const MR: usize, const NR: usize>(
    mr: usize,
    nr: usize,
    c: *mut f32,
    ldc: usize,
    tmp: &[[f32; NR]; MR],
) {
    unsafe {
        for (r, row) in tmp.iter().enumerate().take(mr) {
            for (j, v) in row.iter().enumerate().take(nr) {
                *c.add(r * ldc + j) = *v;
            }
        }
    }
}
