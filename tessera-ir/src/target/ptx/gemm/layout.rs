//! Work and memory layouts: the warp tiling of the tensor-core path, the thread micro-tiles
//! of the FFMA path, the XOR-swizzled shared-memory tiles, and how many stages fit.

use crate::target::ptx::Arch;

/// How the warps of a block split a BM×BN tile (tensor-core path).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct WarpTiling {
    /// Warps along M and N (`wm · wn = warps`, warp `w` sits at `(w / wn, w % wn)`).
    pub wm: usize,
    pub wn: usize,
    /// Each warp's tile: `wtm × wtn`, made of `mt × nt` mma tiles of 16×8.
    pub wtm: usize,
    pub wtn: usize,
    pub mt: usize,
    pub nt: usize,
}

/// The most square warp tile with `wtm` a multiple of 16 and `wtn` a multiple of 16 (B
/// fragments are loaded for two n8 tiles at once with `ldmatrix.x4.trans`).
pub(super) fn warp_tiling(bm: usize, bn: usize, warps: usize) -> Option<WarpTiling> {
    let mut best: Option<(usize, WarpTiling)> = None;
    let mut wm = 1;
    while wm <= warps {
        let wn = warps / wm;
        if wm * wn == warps && bm.is_multiple_of(wm) && bn.is_multiple_of(wn) {
            let (wtm, wtn) = (bm / wm, bn / wn);
            if wtm % 16 == 0 && wtn % 16 == 0 {
                // Prefer square warp tiles, then taller (along M) ones: 2×4 warps of 64×32 at 128×128.
                let skew = (wtm.trailing_zeros() as i64 - wtn.trailing_zeros() as i64)
                    .unsigned_abs() as usize
                    * 2
                    + usize::from(wtm < wtn);
                let t = WarpTiling {
                    wm,
                    wn,
                    wtm,
                    wtn,
                    mt: wtm / 16,
                    nt: wtn / 8,
                };
                if best.as_ref().is_none_or(|(s, _)| skew < *s) {
                    best = Some((skew, t));
                }
            }
        }
        wm *= 2;
    }
    best.map(|(_, t)| t)
}

/// Thread micro-tiles of the FFMA path: thread `t` owns rows `tr·tm ..` and columns `tc·tn ..`
/// with `tc = t % (bn / tn)`, `tr = t / (bn / tn)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct MicroTiling {
    pub tm: usize,
    pub tn: usize,
    /// Threads along N.
    pub tcols: usize,
}

/// `tm × tn` elements per thread, as square as possible (`tn ≥ tm`, `tn ≥ 2`).
pub(super) fn micro_tiling(bm: usize, bn: usize, threads: usize) -> Option<MicroTiling> {
    let e = bm * bn / threads;
    if e == 0 || !(bm * bn).is_multiple_of(threads) || !e.is_power_of_two() {
        return None;
    }
    let tn = 1usize << e.trailing_zeros().div_ceil(2);
    let tm = e / tn;
    // The epilogue walks column pairs, so a thread owns at least 2 columns.
    if tn < 2
        || !bn.is_multiple_of(tn)
        || !bm.is_multiple_of(tm)
        || (bn / tn) * (bm / tm) != threads
    {
        return None;
    }
    Some(MicroTiling {
        tm,
        tn,
        tcols: bn / tn,
    })
}

/// A `rows × cols` tile of 16-bit elements in shared memory, rows of 16-byte chunks, with the
/// chunk index XOR-swizzled so that 8 consecutive rows read by one `ldmatrix` phase land in 8
/// different 16-byte bank groups: physical chunk = `chunk ^ ((row >> shift) & mask)`.
///
/// With `C` chunks per row, a 128-byte bank line holds `8 / C` rows (`shift = log2(8 / C)`), and
/// the XOR spreads the `min(C, 8)` rows that would collide (`mask = min(C, 8) - 1`). No padding:
/// the stage size stays `rows · cols · 2` bytes, which is what lets the default 128×128×64,
/// 3-stage bf16 tile (96 KiB) fit sm_89's 99 KiB.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct SmemTile {
    pub rows: usize,
    pub cols: usize,
    /// Bytes per row.
    pub row_bytes: usize,
    pub chunks: usize,
    pub shift: u32,
    pub mask: usize,
}

impl SmemTile {
    pub fn new(rows: usize, cols: usize) -> SmemTile {
        let chunks = cols / 8;
        let shift = (8 / chunks.min(8)).trailing_zeros();
        SmemTile {
            rows,
            cols,
            row_bytes: cols * 2,
            chunks,
            shift,
            mask: chunks.min(8) - 1,
        }
    }

    /// Bytes of one stage.
    pub fn bytes(&self) -> usize {
        self.rows * self.row_bytes
    }

    /// The swizzle term of `row` (compile-time form, for tests and docs).
    #[cfg(test)]
    pub fn swz(&self, row: usize) -> usize {
        (row >> self.shift) & self.mask
    }
}

/// The number of pipeline stages that fit the arch's shared memory per block (the schedule's
/// request, or fewer when `stages · stage_bytes` exceeds the hardware's opt-in limit); `None`
/// if even one does not. The same rule as the cost model's ([`crate::cost::stages_that_fit`]).
pub(super) fn stages_that_fit(stage_bytes: usize, requested: u32, arch: Arch) -> Option<u32> {
    crate::cost::stages_that_fit(
        stage_bytes as u64,
        requested,
        arch.limits().smem_per_block_optin as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tiling_is_2x4_warps_of_64x32() {
        let t = warp_tiling(128, 128, 8).unwrap();
        assert_eq!((t.wm, t.wn, t.wtm, t.wtn, t.mt, t.nt), (2, 4, 64, 32, 4, 4));
        assert_eq!(warp_tiling(32, 32, 2).unwrap().wtn, 16);
        assert!(warp_tiling(16, 16, 8).is_none());
    }

    #[test]
    fn swizzle_makes_ldmatrix_phases_conflict_free() {
        for cols in [16, 32, 64, 128, 256] {
            let t = SmemTile::new(64, cols);
            for base in (0..64).step_by(8) {
                for chunk in 0..t.chunks {
                    let mut groups: Vec<usize> = (base..base + 8)
                        .map(|r| (r * t.row_bytes + (chunk ^ t.swz(r)) * 16) / 16 % 8)
                        .collect();
                    groups.sort();
                    groups.dedup();
                    assert_eq!(groups.len(), 8, "cols {cols} rows {base}.. chunk {chunk}");
                }
            }
        }
    }

    #[test]
    fn micro_tiles() {
        assert_eq!(
            micro_tiling(128, 128, 256),
            Some(MicroTiling {
                tm: 8,
                tn: 8,
                tcols: 16
            })
        );
        assert_eq!(micro_tiling(128, 256, 256).unwrap().tn, 16);
    }
}
