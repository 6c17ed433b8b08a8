//! The BLIS-style five-loop driver, generic over the micro-kernel.

use super::ahead::{self, Ahead, Copy16, Walk};
use super::scratch::with_scratch;

/// Depth of a packed k-block when all of `A`'s rows fit one block or one micro-tile (`B`
/// micro-panel `KC × NR` stays in L1).
pub(crate) const KC: usize = 256;
/// Depth of a k-block when `A` has more rows than one block (`MC`) and is read in place:
/// each micro-tile's accumulators load and store C half as often as with `KC`, and its
/// `KC_WIDE × NR` micro-panel of B (64 KiB with the 8×32 tile) is read from L2; `KC` is kept
/// where A has few rows (`512` measured slower at `m = 8` and `m = 64`, `k = n = 4096`).
pub(crate) const KC_WIDE: usize = 512;
/// Rows of `A` per block (the `MC × KC` block of `A` stays in L2 while every column panel
/// of the packed `B` block reads it).
pub(crate) const MC_TARGET: usize = 144;
/// Most bytes that the rows of a k-block of `B` span (`kc × ldb` elements) for the first
/// micro-tile of each panel to pack it while computing (`Kernel::run_pack`): the rows then
/// sit in L2 close together, and the strided walk down a panel costs less than a separate
/// packing pass; farther apart, the walk waits on memory and the separate pass is faster.
pub(crate) const FUSE_BYTES: usize = 1 << 20;
/// Columns of `B` packed per block (the packed `KC × NC` block stays in L3).
pub(crate) const NC_TARGET: usize = 4096;
/// Columns of `B` packed per chunk when all of `A`'s rows fit one block (the packed
/// `KC × NC_SMALL` chunk stays in L2 while every row of `A` uses it, beside the next chunk
/// that its micro-tiles pack, see [`Pipe`]).
pub(crate) const NC_SMALL: usize = 256;

/// Steps of k per [`Walk::step`] in [`Kernel::run_walk`] (the micro-kernels' unrolling).
pub(crate) const WALK_STEP: usize = 4;

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
    /// Pack rows `p0..p1` of `kc × nc` of `B` into their places in its `NR`-column panels
    /// (see `pack::pack_b_rows`).
    #[allow(clippy::too_many_arguments)]
    unsafe fn pack_b_rows(
        kc: usize,
        p0: usize,
        p1: usize,
        nc: usize,
        b: *const f32,
        ldb: usize,
        dst: *mut f32,
    );
    /// `C[0..mr, 0..nr] += A · Bpanel` for the micro-tile `t` (see [`Tile`]) whose `t.b` is a
    /// packed panel of depth `t.kc`; with `t.overwrite`, `C[0..mr, 0..nr] = A · Bpanel` (the
    /// accumulators start at `+0.0` instead of C's values, which are not read).
    unsafe fn run(t: Tile);
    /// [`Kernel::run`] that also prefetches the lines of `w` into L2 and copies the units of
    /// `cp`, both spread over its k loop ([`Walk::step`] and [`Copy16::step`] once per
    /// [`WALK_STEP`] steps of k, the rest after it). The default prefetches them all first
    /// and copies after.
    ///
    /// # Safety
    /// As [`Kernel::run`], with `cp` describing a chunk of `B` and its packed buffer that
    /// the tile does not read.
    unsafe fn run_walk(t: Tile, mut w: Walk, mut cp: Copy16) {
        unsafe {
            w.rest();
            Self::run(t);
            cp.rest()
        }
    }
    /// [`Kernel::run`] for a full-width tile (`t.nr == NR`) whose `kc × NR` block of `B` is
    /// read in place at `t.b` (row stride `ldb`) and written packed to `bp` on the way, for
    /// the panel's later micro-tiles. The default packs first, then runs.
    unsafe fn run_pack(t: Tile, ldb: usize, bp: *mut f32) {
        unsafe {
            Self::pack_b(t.kc, Self::NR, t.b, ldb, bp);
            Self::run(Tile { b: bp, ..t })
        }
    }
}

/// The operands of one micro-tile: `C[0..mr, 0..nr] (+)= A · B` over `kc` steps of k.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// Rows (at most the kernel's `MR`).
    pub(crate) mr: usize,
    /// Columns (at most the kernel's `NR`).
    pub(crate) nr: usize,
    /// Depth.
    pub(crate) kc: usize,
    /// `A`'s element `(i, p)` is at `a + i * ars + p * aks`: `(lda, 1)` in place, `(1, MR)`
    /// a packed panel.
    pub(crate) a: *const f32,
    /// `A`'s row stride.
    pub(crate) ars: usize,
    /// `A`'s k stride.
    pub(crate) aks: usize,
    /// `B`: a packed panel (row stride `NR`), or, for [`Kernel::run_pack`], `B` in place.
    pub(crate) b: *const f32,
    /// The C tile.
    pub(crate) c: *mut f32,
    /// C's row stride.
    pub(crate) ldc: usize,
    /// `C =` instead of `C +=`: C is not read.
    pub(crate) overwrite: bool,
    /// The C tile that the next micro-tile reads (same `ldc`), or null: a kernel may fetch
    /// its lines into L1 near the end of its k loop ([`C_AHEAD`]). A ragged tile computed
    /// in an edge buffer (another `ldc`) fetches no next tile.
    pub(crate) next: *const f32,
}

/// Steps of k before the end of its k loop at which the AVX-512 micro-kernel fetches its
/// own C tile (for its stores) and the next tile's ([`Tile::next`]) into L1.
pub(crate) const C_AHEAD: usize = 64;

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
        let mc_max = (MC_TARGET / mr_).max(1) * mr_;
        // Balance the k-blocks so the last one is not tiny.
        let kblocks = k.div_ceil(if m > mc_max { KC_WIDE } else { KC });
        let kc_max = k.div_ceil(kblocks);
        if m > mr_ && m <= mc_max {
            // All rows of A fit one block (of more than one micro-tile: with one, each packed
            // B panel is read once and long sequential rows of B pack faster): pack it once
            // per k-block (every chunk of B reuses it; read in place it measured ~3 % slower
            // at m = 64, k = n = 4096), and B a chunk at a time that stays in L2 while the
            // micro-kernels read it. Each chunk of B is packed while the one before computes
            // (`Pipe`), into the other half of a two-chunk buffer; the first before.
            let nc_max = (NC_SMALL / nr_).max(1) * nr_;
            let a_len = m.div_ceil(mr_) * mr_ * kc_max;
            let b_len = n.min(nc_max).div_ceil(nr_) * nr_ * kc_max;
            with_scratch(a_len, 2 * b_len, |abuf, bbuf| {
                let (mut cur, mut other) = (bbuf, bbuf.add(b_len));
                K::pack_b(kc_max.min(k), nc_max.min(n), b, ldb, cur);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let first = overwrite && pc == 0;
                    K::pack_a(m, kc, a.add(pc), lda, abuf);
                    let mut jc = 0;
                    while jc < n {
                        let nc = nc_max.min(n - jc);
                        // The chunk packed next: B's next columns, or the next k-block's first.
                        let (np, nj) = if jc + nc < n {
                            (pc, jc + nc)
                        } else {
                            (pc + kc, 0)
                        };
                        let next = (np < k).then(|| Pipe {
                            src: b.add(np * ldb + nj),
                            kc: kc_max.min(k - np),
                            nc: nc_max.min(n - nj),
                            ldb,
                            dst: other,
                        });
                        let (ak, ck) = (ASrc::Packed(abuf), c.add(jc));
                        block::<K, true>(m, nc, kc, ak, None, cur, ck, ldc, first, next);
                        (cur, other) = (other, cur);
                        jc += nc;
                    }
                    pc += kc;
                }
            });
            return;
        }
        // A is read in place (its `MC × KC` block stays in L2 while the column panels of B
        // use it). B is packed a `KC × NC` block at a time, in one pass that reads eight
        // rows of B together, or, when those rows lie close together (`FUSE_BYTES`) and A has
        // more than one micro-tile of rows, by each panel's first micro-tile as it computes.
        let nc_max = (NC_TARGET / nr_).max(1) * nr_;
        let b_len = n.min(nc_max).div_ceil(nr_) * nr_ * kc_max;
        let fuse = m > mr_ && kc_max * ldb * size_of::<f32>() <= FUSE_BYTES;
        with_scratch(0, b_len, |_, bbuf| {
            let mut jc = 0;
            while jc < n {
                let nc = nc_max.min(n - jc);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let first = overwrite && pc == 0;
                    let bk = b.add(pc * ldb + jc);
                    if !fuse {
                        K::pack_b(kc, nc, bk, ldb, bbuf);
                    }
                    let mut ic = 0;
                    while ic < m {
                        let mc = mc_max.min(m - ic);
                        let ak = ASrc::InPlace(a.add(ic * lda + pc), lda);
                        // With `fuse`, the first row block packs B as it goes.
                        let src = (fuse && ic == 0).then_some((bk, ldb));
                        let ck = c.add(ic * ldc + jc);
                        block::<K, false>(mc, nc, kc, ak, src, bbuf, ck, ldc, first, None);
                        ic += mc;
                    }
                    pc += kc;
                }
                jc += nc;
            }
        })
    }
}

/// Parts of the next chunk of `B` whose lines a micro-tile prefetches ahead of the part it
/// packs (see [`Pipe`]).
pub(crate) const PIPE_AHEAD: usize = 2;

/// The `kc × nc` chunk of `B` (in place at `src`, row stride `ldb`) that a block packs to
/// `dst` (the layout of `pack::pack_b`) while it computes: its micro-tile `t` of `tiles`
/// packs part `t`, rows `t·kc/tiles .. (t+1)·kc/tiles` (the full panels inside its k loop,
/// a partial last panel after it), and prefetches into L2 the lines of part
/// `t + PIPE_AHEAD`, both spread over its k loop ([`Kernel::run_walk`]); the block's first
/// parts are prefetched at its start. So the reads of `B` (64 MiB at `m = 64`,
/// `k = n = 4096`) overlap the micro-kernels' FMAs, and the copy is loads and stores inside
/// the FMA-bound loop, where a separate packing pass waited on memory (ARCHITECTURE.md,
/// f32 GEMM). Only a few KiB of `B` are prefetched ahead at a time.
#[derive(Clone, Copy)]
struct Pipe {
    src: *const f32,
    kc: usize,
    nc: usize,
    ldb: usize,
    dst: *mut f32,
}

/// Where a block's rows of `A` are read from.
#[derive(Clone, Copy)]
enum ASrc {
    /// In place: the block's first element and `A`'s row stride.
    InPlace(*const f32, usize),
    /// `MR`-row panels packed by [`Kernel::pack_a`] at this address.
    Packed(*const f32),
}

/// The two inner loops: every micro-tile of the `mc × nc` block of C at `c` from the
/// `mc × kc` block of A at `a` (row stride `lda`) and packed B (`bbuf`, `nc` columns of
/// depth `kc`). With `src` (the `kc × nc` block of B in place and its row stride), `bbuf`
/// is packed here: each panel's first micro-tile packs it while computing
/// ([`Kernel::run_pack`]; a partial last panel is packed before its tiles). With `pipe`,
/// the micro-tiles pack the next chunk of B as they compute (see [`Pipe`]); `PIPE` is
/// false where it is always `None` (that loop then has none of its code).
///
/// # Safety
/// As [`gemm`], with `bbuf` holding the packed block, or room for it with `src`; `pipe`'s
/// chunk lies in B and its `dst` has room for it, apart from `bbuf`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn block<K: Kernel, const PIPE: bool>(
    mc: usize,
    nc: usize,
    kc: usize,
    asrc: ASrc,
    src: Option<(*const f32, usize)>,
    bbuf: *mut f32,
    c: *mut f32,
    ldc: usize,
    overwrite: bool,
    pipe: Option<Pipe>,
) {
    unsafe {
        let (mr_, nr_) = (K::MR, K::NR);
        let tiles = nc.div_ceil(nr_) * mc.div_ceil(mr_);
        let pipe = pipe.filter(|_| PIPE);
        let region = pipe.map_or(Ahead::NONE, |p| Ahead::new(p.src, p.kc, p.nc, p.ldb));
        if PIPE {
            // The parts that no micro-tile prefetches: all at once.
            for part in 0..PIPE_AHEAD.min(tiles) {
                region.walk(part, tiles, 1).rest();
            }
        }
        let mut t = 0;
        let mut jr = 0;
        while jr < nc {
            let nr = nr_.min(nc - jr);
            let bp = bbuf.add(jr * kc);
            let pack = src.map(|(b, ldb)| (b.add(jr), ldb));
            if let Some((b, ldb)) = pack.filter(|_| nr < nr_) {
                K::pack_b(kc, nr, b, ldb, bp);
            }
            let mut ir = 0;
            while ir < mc {
                let mr = mr_.min(mc - ir);
                let (ap, ars, aks) = match asrc {
                    ASrc::InPlace(a, lda) => (a.add(ir * lda), lda, 1),
                    ASrc::Packed(a) => (a.add(ir * kc), 1, mr_),
                };
                let mut next = core::ptr::null();
                if !overwrite {
                    // The micro-kernel's FMA chains start from C: fetch the next tile's C
                    // into L2 while this one computes (into L1 only near the end of its k
                    // loop, `Tile::next`: C rows `ldc` apart can evict the B panel where
                    // they share cache sets).
                    let (ni, nj) = if ir + mr_ < mc {
                        (ir + mr_, jr)
                    } else {
                        (0, jr + nr_)
                    };
                    if nj < nc {
                        let (rows, cols) = (mr_.min(mc - ni), nr_.min(nc - nj));
                        next = c.wrapping_add(ni * ldc + nj) as *const f32;
                        ahead::tile(next, rows, cols, ldc, false);
                    }
                }
                t += 1;
                let tile = Tile {
                    mr,
                    nr,
                    kc,
                    a: ap,
                    ars,
                    aks,
                    b: bp,
                    c: c.add(ir * ldc + jr),
                    ldc,
                    overwrite,
                    next,
                };
                match pack {
                    Some((b, ldb)) if ir == 0 && nr == nr_ => {
                        K::run_pack(Tile { b, ..tile }, ldb, bp)
                    }
                    _ => match pipe {
                        Some(p) => {
                            let steps = kc / WALK_STEP;
                            let w = region.walk(t - 1 + PIPE_AHEAD, tiles, steps);
                            let rows = ((t - 1) * p.kc / tiles, t * p.kc / tiles);
                            // Full panels copied by the micro-kernel, a partial one after.
                            let full = p.nc / nr_;
                            let cp = Copy16::new(p.src, p.dst, rows, full, p.ldb, p.kc, nr_, steps);
                            K::run_walk(tile, w, cp);
                            let (j, (p0, p1)) = (full * nr_, rows);
                            if j < p.nc {
                                let (src, dst) = (p.src.add(j), p.dst.add(j * p.kc));
                                K::pack_b_rows(p.kc, p0, p1, p.nc - j, src, p.ldb, dst);
                            }
                        }
                        None => K::run(tile),
                    },
                }
                ir += mr_;
            }
            jr += nr_;
        }
    }
}
