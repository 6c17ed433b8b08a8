//! AMX bf16 GEMM (`tdpbf16ps` on tiles): `C (f32) += A (bf16) · B (bf16)`.
//!
//! Micro-kernel: 2×2 accumulator tiles (`tmm0`-`tmm3`, a 32×32 block of C in f32), two A tiles
//! (`tmm4`, `tmm5`: 16 rows × 32 bf16 of k each) and two B tiles (`tmm6`, `tmm7`: 16 k-pairs ×
//! 16 columns × 2 bf16, the pair-interleaved "VNNI" form that `vdpbf16ps` reads too), four
//! `tdpbf16ps` per 32 values of k. Every tile is configured 16 rows × 64 bytes (palette 1).
//!
//! Packed layouts (`u16` = one bf16; depth `kp` = the block's k rounded up to 32, zeros past k):
//! * A: 32-row panels; panel `P`, k-tile `t` (32 values of k) is 32 rows × 32 bf16 (2 KiB) at
//!   `(P * kp / 32 + t) * 1024`: tile `tmm4` its rows 0-15, `tmm5` rows 16-31 (`+512`),
//!   64 bytes a row. Rows past m are zeros.
//! * B: 32-column strips; strip `S`, k-pair `p2` is 32 columns × (k = 2·p2, 2·p2 + 1) at
//!   `S * kp * 32 + p2 * 64` (128 bytes a k-pair): tile `tmm6` is columns 0-15 of 16 k-pairs,
//!   `tmm7` columns 16-31 (`+32`), 128 bytes a row. Columns past n are zeros.
//!
//! Blocks of C on the edge (fewer than 32 rows or columns) run on a zeroed (or loaded) 32×32
//! buffer copied back afterwards. `tdpbf16ps` reads bf16 subnormal inputs as zero and
//! flushes subnormal results, like `vdpbf16ps`, and adds the products of one k-pair before
//! the next: results are within the pairwise bound the `vdpbf16ps` path documents.
//!
//! Each call loads the tile configuration (`ldtilecfg`) on its thread and releases the tiles
//! (`tilerelease`) before returning, so tile state never outlives a call. The tile registers
//! are written only by the `asm!` blocks here (Rust code never uses AMX), so they keep their
//! values from one block to the next.

use core::arch::asm;
use core::arch::x86_64::*;
use std::sync::atomic::{AtomicU8, Ordering};

use super::super::scratch::with_scratch;

/// Values of k per packed block (16 k-tiles): a B strip is `KC × 32` bf16 = 32 KiB (L1),
/// an A block `MC × KC` bf16 = 128 KiB (L2).
const KC: usize = 512;
/// Rows of A per packed block (a multiple of 32).
const MC: usize = 128;
/// Columns of B per packed block (a multiple of 32): `KC × NC` bf16 = 1 MiB (L2).
const NC: usize = 1024;

#[cfg(test)]
thread_local! {
    /// How many [`gemm`] calls this thread made (tests: which paths reach AMX).
    pub(crate) static CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// 0 = not yet detected, 1 = unusable, 2 = usable.
static USABLE: AtomicU8 = AtomicU8::new(0);

/// Whether AMX-BF16 can run in this process: CPUID leaf 7 subleaf 0 EDX bits 22 (AMX-BF16)
/// and 24 (AMX-TILE), the OS enabling tile state (XCR0 bits 17 and 18) and, on Linux, the
/// kernel granting this process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XTILEDATA)`). Detected once per process.
pub(crate) fn usable() -> bool {
    match USABLE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let yes = detect();
            USABLE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

fn detect() -> bool {
    let (max, l1) = (__cpuid_count(0, 0).eax, __cpuid_count(1, 0));
    // Leaf 7 present and OSXSAVE (XGETBV usable).
    if max < 7 || l1.ecx & (1 << 27) == 0 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
        return false;
    }
    let (lo, _hi): (u32, u32);
    // SAFETY: OSXSAVE is set, so XGETBV with ECX = 0 (XCR0) is valid.
    unsafe {
        asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") _hi, options(nomem, nostack, preserves_flags));
    }
    if lo & (3 << 17) != 3 << 17 {
        return false;
    }
    permission()
}

#[cfg(target_os = "linux")]
fn permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it only changes this process's
    // permitted XSAVE features.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn permission() -> bool {
    false
}

/// The 64-byte tile configuration `ldtilecfg` reads: palette 1, every tile 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileCfg {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CFG: TileCfg = TileCfg {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Pack `mc × kc` of A (row-major, stride `lda`) into 32-row panels of depth `kp`.
#[inline(always)]
unsafe fn pack_a(mc: usize, kc: usize, kp: usize, a: *const u16, lda: usize, dst: *mut u16) {
    unsafe {
        let kt = kp / 32;
        let panels = mc.div_ceil(32);
        for p in 0..panels {
            for r in 0..32 {
                let i = 32 * p + r;
                for t in 0..kt {
                    let o = dst.add((p * kt + t) * 1024 + r * 32);
                    let k0 = 32 * t;
                    let len = if i < mc {
                        kc.saturating_sub(k0).min(32)
                    } else {
                        0
                    };
                    if len > 0 {
                        core::ptr::copy_nonoverlapping(a.add(i * lda + k0), o, len);
                    }
                    if len < 32 {
                        core::ptr::write_bytes(o.add(len), 0, 32 - len);
                    }
                }
            }
        }
    }
}

/// Pack `kc × nc` of B (row-major, stride `ldb`) into 32-column k-pair strips of depth `kp`.
#[inline(always)]
unsafe fn pack_b(kc: usize, nc: usize, kp: usize, b: *const u16, ldb: usize, dst: *mut u16) {
    unsafe {
        let kp2 = kp / 2;
        let strips = nc.div_ceil(32);
        for s in 0..strips {
            let j = 32 * s;
            let cols = 32.min(nc - j);
            let out = dst.add(s * kp * 32) as *mut u32;
            for p2 in 0..kp2 {
                let o = out.add(p2 * 32);
                let (k0, k1) = (2 * p2, 2 * p2 + 1);
                if cols == 32 && k1 < kc {
                    let r0 = b.add(k0 * ldb + j);
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
                    for c in 0..32 {
                        let lo = if c < cols && k0 < kc {
                            *b.add(k0 * ldb + j + c)
                        } else {
                            0
                        };
                        let hi = if c < cols && k1 < kc {
                            *b.add(k1 * ldb + j + c)
                        } else {
                            0
                        };
                        *o.add(c) = lo as u32 | (hi as u32) << 16;
                    }
                }
            }
        }
    }
}

/// `C[0..32, 0..32] (+)= A·B` over `kt` k-tiles of a packed A panel `a` and B strip `b`;
/// C has row stride `ldc` elements; `load` adds to C, else C is overwritten.
///
/// # Safety
/// Tiles configured ([`CFG`]); the pointers address the packed panel, strip and a 32×32 C.
#[inline(always)]
unsafe fn kernel(kt: usize, a: *const u16, b: *const u16, c: *mut f32, ldc: usize, load: bool) {
    unsafe {
        let cs = ldc * 4;
        let c2 = c.add(16 * ldc);
        if load {
            asm!(
                "tileloadd tmm0, [{c} + {cs}*1]",
                "tileloadd tmm1, [{c} + {cs}*1 + 64]",
                "tileloadd tmm2, [{c2} + {cs}*1]",
                "tileloadd tmm3, [{c2} + {cs}*1 + 64]",
                c = in(reg) c,
                c2 = in(reg) c2,
                cs = in(reg) cs,
                options(nostack, readonly, preserves_flags)
            );
        } else {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nomem, nostack, preserves_flags)
            );
        }
        asm!(
            "2:",
            "tileloadd tmm4, [{a} + {s64}*1]",
            "tileloadd tmm6, [{b} + {s128}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b} + {s128}*1 + 64]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a}, 2048",
            "add {b}, 2048",
            "dec {n}",
            "jnz 2b",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n = inout(reg) kt => _,
            s64 = in(reg) 64usize,
            s128 = in(reg) 128usize,
            options(nostack, readonly)
        );
        asm!(
            "tilestored [{c} + {cs}*1], tmm0",
            "tilestored [{c} + {cs}*1 + 64], tmm1",
            "tilestored [{c2} + {cs}*1], tmm2",
            "tilestored [{c2} + {cs}*1 + 64], tmm3",
            c = in(reg) c,
            c2 = in(reg) c2,
            cs = in(reg) cs,
            options(nostack, preserves_flags)
        );
    }
}

/// A 32×32 f32 block, aligned for the edge tiles.
#[repr(C, align(64))]
struct Edge([f32; 32 * 32]);

/// Blocked `C += A·B` for bf16 inputs on AMX; with `overwrite`, `C = A·B` without reading C
/// (the bits that adding to a zeroed C gives).
///
/// # Safety
/// Pointers must address matrices of the given shapes/strides (all dims > 0) and
/// [`usable`] must be true.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw")]
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
    #[cfg(test)]
    CALLS.with(|c| c.set(c.get() + 1));
    unsafe {
        let kblocks = k.div_ceil(KC);
        let kc_max = k.div_ceil(kblocks).div_ceil(32) * 32;
        let mc_max = m.min(MC).div_ceil(32) * 32;
        let nc_max = n.min(NC).div_ceil(32) * 32;
        // Scratch is counted in f32: two bf16 per element.
        let a_len = mc_max * kc_max / 2;
        let b_len = nc_max * kc_max / 2;
        asm!("ldtilecfg [{}]", in(reg) &CFG, options(nostack, readonly, preserves_flags));
        with_scratch(a_len, b_len, |abuf, bbuf| {
            let (abuf, bbuf) = (abuf as *mut u16, bbuf as *mut u16);
            let mut edge = Edge([0.0; 32 * 32]);
            let e = edge.0.as_mut_ptr();
            let mut jc = 0;
            while jc < n {
                let nc = NC.min(n - jc);
                let mut pc = 0;
                while pc < k {
                    let kc = kc_max.min(k - pc);
                    let kp = kc.div_ceil(32) * 32;
                    let kt = kp / 32;
                    let load = !(overwrite && pc == 0);
                    pack_b(kc, nc, kp, b.add(pc * ldb + jc), ldb, bbuf);
                    let mut ic = 0;
                    while ic < m {
                        let mc = MC.min(m - ic);
                        pack_a(mc, kc, kp, a.add(ic * lda + pc), lda, abuf);
                        let mut jr = 0;
                        while jr < nc {
                            let nr = 32.min(nc - jr);
                            let bp = bbuf.add(jr * kp);
                            let mut ir = 0;
                            while ir < mc {
                                let mr = 32.min(mc - ir);
                                let ap = abuf.add(ir * kp);
                                let cp = c.add((ic + ir) * ldc + jc + jr);
                                if mr == 32 && nr == 32 {
                                    kernel(kt, ap, bp, cp, ldc, load);
                                } else {
                                    for r in 0..32 {
                                        let row = e.add(r * 32);
                                        if r < mr && load {
                                            core::ptr::copy_nonoverlapping(
                                                cp.add(r * ldc),
                                                row,
                                                nr,
                                            );
                                            core::ptr::write_bytes(row.add(nr), 0, 32 - nr);
                                        } else {
                                            core::ptr::write_bytes(row, 0, 32);
                                        }
                                    }
                                    kernel(kt, ap, bp, e, 32, true);
                                    for r in 0..mr {
                                        core::ptr::copy_nonoverlapping(
                                            e.add(r * 32),
                                            cp.add(r * ldc),
                                            nr,
                                        );
                                    }
                                }
                                ir += 32;
                            }
                            jr += 32;
                        }
                        ic += mc;
                    }
                    pc += kc;
                }
                jc += nc;
            }
        });
        asm!("tilerelease", options(nomem, nostack, preserves_flags));
    }
}
