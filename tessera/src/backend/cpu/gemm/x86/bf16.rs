//! AVX-512 BF16 micro-kernel (12×32 tile: 24 `zmm` accumulators, `vdpbf16ps`) and its k-pair
//! packing.
//!
//! Packed layouts, one `u32` = two bf16 of consecutive k (`lo` = even k):
//! * A panel: `dst[p2*MR + r] = A[r][2p2] | A[r][2p2+1] << 16`
//! * B panel: `dst[p2*NR + c] = B[2p2][c] | B[2p2+1][c] << 16`
//!
//! An odd trailing k is paired with a zero.

use core::arch::x86_64::*;

use super::super::ahead::{self, Ahead};
use super::super::pack::{edge_load, edge_store};
use super::super::scratch::with_scratch;

const MR: usize = 12;
const NR: usize = 32;
/// k-pairs per block when all rows of A fit one packed block (512 values of k).
const KC2: usize = 256;
/// k-pairs per block when A has more rows than one block (`MC`; 1024 values of k): each
/// micro-tile loads and adds C half as often as with `KC2`, and its `KC2_WIDE × NR`
/// micro-panel of B (64 KiB) is read from L2, as the f32 driver's `KC_WIDE`.
const KC2_WIDE: usize = 512;
/// Rows of A per packed block (a multiple of `MR`).
const MC: usize = 144;
const NC: usize = 4096;
/// Columns of B per packed chunk when all rows of A fit one block (the chunk stays in L2).
const NC_SMALL: usize = 256;

#[inline(always)]
fn pair(lo: u16, hi: u16) -> u32 {
    lo as u32 | ((hi as u32) << 16)
}

/// Pack `mc × kc` of A into `MR`-row k-pair panels (`kc2 = kc.div_ceil(2)` pairs).
#[inline(always)]
unsafe fn pack_a(mc: usize, kc: usize, a: *const u16, lda: usize, dst: *mut u32) {
    unsafe {
        let kc2 = kc.div_ceil(2);
        let mut i = 0;
        let mut out = dst;
        while i < mc {
            let rows = MR.min(mc - i);
            // Full panels, four pairs at a time: three 4×4 transposes of u32 pairs (the
            // element-wise loop below compiles to scatters, which are slow).
            let quads = if rows == MR { kc / 8 } else { 0 };
            for q in 0..quads {
                let p2 = 4 * q;
                for blk in 0..MR / 4 {
                    let s = a.add((i + 4 * blk) * lda + 2 * p2);
                    let r0 = _mm_loadu_si128(s as *const __m128i);
                    let r1 = _mm_loadu_si128(s.add(lda) as *const __m128i);
                    let r2 = _mm_loadu_si128(s.add(2 * lda) as *const __m128i);
                    let r3 = _mm_loadu_si128(s.add(3 * lda) as *const __m128i);
                    let t0 = _mm_unpacklo_epi32(r0, r1);
                    let t1 = _mm_unpacklo_epi32(r2, r3);
                    let t2 = _mm_unpackhi_epi32(r0, r1);
                    let t3 = _mm_unpackhi_epi32(r2, r3);
                    let o = out.add(p2 * MR + 4 * blk);
                    _mm_storeu_si128(o as *mut __m128i, _mm_unpacklo_epi64(t0, t1));
                    _mm_storeu_si128(o.add(MR) as *mut __m128i, _mm_unpackhi_epi64(t0, t1));
                    _mm_storeu_si128(o.add(2 * MR) as *mut __m128i, _mm_unpacklo_epi64(t2, t3));
                    _mm_storeu_si128(o.add(3 * MR) as *mut __m128i, _mm_unpackhi_epi64(t2, t3));
                }
            }
            for r in 0..MR {
                let o = out.add(r);
                if r < rows {
                    let s = a.add((i + r) * lda);
                    for p2 in 4 * quads..kc / 2 {
                        *o.add(p2 * MR) = pair(*s.add(2 * p2), *s.add(2 * p2 + 1));
                    }
                    if kc % 2 == 1 {
                        *o.add((kc2 - 1) * MR) = pair(*s.add(kc - 1), 0);
                    }
                } else {
                    for p2 in 0..kc2 {
                        *o.add(p2 * MR) = 0;
                    }
                }
            }
            out = out.add(MR * kc2);
            i += MR;
        }
    }
}

/// Pack `kc × nc` of B into `NR`-column k-pair panels.
#[inline(always)]
unsafe fn pack_b(kc: usize, nc: usize, b: *const u16, ldb: usize, dst: *mut u32) {
    unsafe {
        let kc2 = kc.div_ceil(2);
        let mut j = 0;
        let mut out = dst;
        while j < nc {
            let cols = NR.min(nc - j);
            for p2 in 0..kc2 {
                let r0 = b.add(2 * p2 * ldb + j);
                let has_r1 = 2 * p2 + 1 < kc;
                let o = out.add(p2 * NR);
                if cols == NR && has_r1 {
                    let r1 = r0.add(ldb);
                    // 16 columns at a time: interleave two rows of bf16 into u32 pairs.
                    for h in 0..2 {
                        let lo = _mm256_loadu_si256(r0.add(16 * h) as *const __m256i);
                        let hi = _mm256_loadu_si256(r1.add(16 * h) as *const __m256i);
                        let lo = _mm512_cvtepu16_epi32(lo);
                        let hi = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi));
                        _mm512_storeu_si512(o.add(16 * h) as *mut _, _mm512_or_si512(lo, hi));
                    }
                } else {
                    for c in 0..NR {
                        *o.add(c) = if c < cols {
                            pair(*r0.add(c), if has_r1 { *r0.add(ldb + c) } else { 0 })
                        } else {
                            0
                        };
                    }
                }
            }
            out = out.add(NR * kc2);
            j += NR;
        }
    }
}

/// Where a block's rows of A are read from, as bytes: the k-pair `p2` of row `i` is the
/// `u32` at `a + i * ars + p2 * aks`.
#[derive(Clone, Copy)]
enum ASrc {
    /// `MR`-row k-pair panels packed by [`pack_a`] (`ars = 4`, `aks = 4 * MR`).
    Packed(*const u32),
    /// A in place (row-major bf16, row stride `lda` elements: `ars = 2 * lda`, `aks = 4`),
    /// for a block of even depth: its k-pairs are A's consecutive elements.
    InPlace(*const u16, usize),
}

/// `C[0..M, 0..32] += A·B` over `kc2` k-pairs of A (a packed panel, or in place with
/// `!A_PANEL`: row stride `ars` bytes) and a packed B panel; with `overwrite`,
/// `C = +0.0 + A·B` (C not read; the same bits as adding to a zeroed C).
#[inline(always)]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const M: usize, const A_PANEL: bool>(
    kc2: usize,
    a: *const u8,
    ars: usize,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        if !overwrite {
            // C is read after the k loop: fetch it meanwhile.
            ahead::tile(c, M, NR, ldc, true);
        }
        let (ars, aks) = if A_PANEL { (4, 4 * MR) } else { (ars, 4) };
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        macro_rules! step {
            ($ap:expr, $bp:expr) => {{
                let b0: __m512bh = core::mem::transmute(_mm512_loadu_si512($bp as *const _));
                let b1: __m512bh =
                    core::mem::transmute(_mm512_loadu_si512($bp.add(16) as *const _));
                for i in 0..M {
                    let pair = ($ap.add(i * ars) as *const u32).read_unaligned();
                    let ai: __m512bh = core::mem::transmute(_mm512_set1_epi32(pair as i32));
                    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
                    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
                }
            }};
        }
        let (mut ap, mut bp, mut p) = (a, b, kc2);
        while p >= 2 {
            step!(ap, bp);
            step!(ap.add(aks), bp.add(NR));
            ap = ap.add(2 * aks);
            bp = bp.add(2 * NR);
            p -= 2;
        }
        if p == 1 {
            step!(ap, bp);
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            let (c0, c1) = if overwrite {
                (_mm512_setzero_ps(), _mm512_setzero_ps())
            } else {
                (_mm512_loadu_ps(cr), _mm512_loadu_ps(cr.add(16)))
            };
            _mm512_storeu_ps(cr, _mm512_add_ps(c0, row[0]));
            _mm512_storeu_ps(cr.add(16), _mm512_add_ps(c1, row[1]));
        }
    }
}

/// [`tile`] for the `mr <= MR` rows at `ir` of the block's A.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_rows(
    mr: usize,
    kc2: usize,
    a: ASrc,
    ir: usize,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
) {
    unsafe {
        macro_rules! rows {
            ($panel:literal, $a:expr, $ars:expr) => {{
                let (a, ars) = ($a, $ars);
                match mr {
                    12 => tile::<12, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    11 => tile::<11, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    10 => tile::<10, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    9 => tile::<9, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    8 => tile::<8, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    7 => tile::<7, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    6 => tile::<6, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    5 => tile::<5, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    4 => tile::<4, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    3 => tile::<3, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    2 => tile::<2, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                    _ => tile::<1, $panel>(kc2, a, ars, b, c, ldc, overwrite),
                }
            }};
        }
        match a {
            ASrc::Packed(a) => rows!(true, a.add(ir * kc2) as *const u8, 4),
            ASrc::InPlace(a, lda) => rows!(false, a.add(ir * lda) as *const u8, 2 * lda),
        }
    }
}

/// Every micro-tile of the `mc × nc` block of C at `c` from A (`asrc`) and packed B
/// (`bbuf`), both of `kc2` k-pairs, prefetching `next` a part per micro-tile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    mc: usize,
    nc: usize,
    kc2: usize,
    asrc: ASrc,
    bbuf: *const u32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
    next: Ahead,
) {
    unsafe {
        let tiles = nc.div_ceil(NR) * mc.div_ceil(MR);
        let mut t = 0;
        let mut jr = 0;
        while jr < nc {
            let nr = NR.min(nc - jr);
            let bp = bbuf.add(jr * kc2);
            let mut ir = 0;
            while ir < mc {
                let mr = MR.min(mc - ir);
                let cp = c.add(ir * ldc + jr);
                next.part(t, tiles);
                t += 1;
                if nr == NR {
                    tile_rows(mr, kc2, asrc, ir, bp, cp, ldc, overwrite);
                } else {
                    let mut t = edge_load::<MR, NR>(mr, nr, cp, ldc, overwrite);
                    let tp = t.as_mut_ptr() as *mut f32;
                    tile_rows(mr, kc2, asrc, ir, bp, tp, NR, overwrite);
                    edge_store::<MR, NR>(mr, nr, cp, ldc, &t);
                }
                ir += MR;
            }
            jr += NR;
        }
    }
}

/// Blocked `C += A·B` for bf16 inputs; with `overwrite`, `C = A·B` without reading C (the
/// bits that adding to a zeroed C gives).
///
/// # Safety
/// Pointers must address matrices of the given shapes/strides (all dims > 0)
/// and the CPU must support AVX-512F and AVX-512 BF16.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn gemm(
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
    unsafe {
        let kc_target = 2 * if m <= MC { KC2 } else { KC2_WIDE };
        let kblocks = k.div_ceil(kc_target);
        // Even block depth so that only the last block can have an odd k.
        let kc_max = k.div_ceil(kblocks).div_ceil(2) * 2;
        let kc2_max = kc_max / 2;
        if m <= MC {
            // All rows of A fit one packed block: pack it once per k-block, and B a chunk
            // at a time that stays in L2 while the micro-kernels read it.
            let a_len = m.div_ceil(MR) * MR * kc2_max;
            let b_len = n.min(NC_SMALL).div_ceil(NR) * NR * kc2_max;
            with_scratch(a_len, b_len, |abuf, bbuf| {
                let (abuf, bbuf) = (abuf as *mut u32, bbuf as *mut u32);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let kc2 = kc.div_ceil(2);
                    let first = overwrite && pc == 0;
                    pack_a(m, kc, a.add(pc), lda, abuf);
                    let mut jc = 0;
                    while jc < n {
                        let nc = NC_SMALL.min(n - jc);
                        pack_b(kc, nc, b.add(pc * ldb + jc), ldb, bbuf);
                        // The chunk packed next: B's next columns, or the next k-block's first.
                        let next = if jc + nc < n {
                            let cols = NC_SMALL.min(n - jc - nc);
                            Ahead::new(b.wrapping_add(pc * ldb + jc + nc), kc, cols, ldb)
                        } else if pc + kc < k {
                            let rows = kc_max.min(k - pc - kc);
                            Ahead::new(b.wrapping_add((pc + kc) * ldb), rows, NC_SMALL.min(n), ldb)
                        } else {
                            Ahead::NONE
                        };
                        let asrc = ASrc::Packed(abuf);
                        block(m, nc, kc2, asrc, bbuf, c.add(jc), ldc, first, next);
                        jc += nc;
                    }
                    pc += kc;
                }
            });
            return;
        }
        let a_len = MC * kc2_max;
        let b_len = n.min(NC).div_ceil(NR) * NR * kc2_max;
        with_scratch(a_len, b_len, |abuf, bbuf| {
            let (abuf, bbuf) = (abuf as *mut u32, bbuf as *mut u32);
            let mut jc = 0;
            while jc < n {
                let nc = NC.min(n - jc);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let kc2 = kc.div_ceil(2);
                    let first = overwrite && pc == 0;
                    pack_b(kc, nc, b.add(pc * ldb + jc), ldb, bbuf);
                    let mut ic = 0;
                    while ic < m {
                        let mc = MC.min(m - ic);
                        let ak = a.add(ic * lda + pc);
                        // A block of even depth is read in place (its k-pairs are A's
                        // consecutive elements); an odd one is packed, its last k paired
                        // with zero.
                        let asrc = if kc % 2 == 0 {
                            ASrc::InPlace(ak, lda)
                        } else {
                            pack_a(mc, kc, ak, lda, abuf);
                            ASrc::Packed(abuf)
                        };
                        block(
                            mc,
                            nc,
                            kc2,
                            asrc,
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
