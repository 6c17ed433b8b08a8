//! The AVX-512 norm rows into an unrounded f32 output (`norm::body`), two loops per row: a
//! pass of sums that reads row `t` from memory (its mean sums for layernorm, its sums of
//! squares for rmsnorm; a layernorm bf16 row widened and kept in a row buffer, an rmsnorm
//! one read again and widened again by the write (rn16: storing the kept f32 row cost the
//! `[4096, 1024]` rows ≈ 10 %, see ARCHITECTURE.md); into a streamed output, the lines of
//! row `t + 1` asked for as it goes) and, for layernorm, takes the squared deviations of
//! row `t − 1` (in L1) in the same loop, so the adds of the two rows' sums overlap the wait
//! on memory; then the write of the row whose `rstd` is now known (`t`, or `t − 1` for
//! layernorm), with streaming stores into a large output. Writing in the memory
//! pass as well measured slower (streaming stores mixed with the loads that miss). The output
//! row's columns before its first 64-byte boundary take one masked store of the aligned vector
//! that ends there: a masked store of the unaligned vector that starts the row reaches into
//! the first streamed line and measured 2–3× slower (rmsnorm bf16→f32 `[4096, 1024]` 52 → 19
//! GB/s). Every sum is `norm512::sum`'s (lanes by column index, the chunk's tree in registers,
//! chunks added in column order) and every output value the interpreter's `((x − mean)·rstd)·γ
//! (+ β)`, so the bits are the other loops'.

use super::norm512::{Pass, step, tail, tree};
use core::arch::x86_64::*;

/// The row a pass writes: its values (f32, or bf16 bit patterns for a `write::<true>`),
/// mean and `rstd`, and the output row.
#[derive(Clone, Copy)]
pub(crate) struct Write {
    pub xs: *const u8,
    pub mean: f32,
    pub rstd: f32,
    pub out: *mut f32,
    /// A row of the input (f32, or bf16 bit patterns for a `write::<true>`) whose lines are
    /// asked for into the level-2 cache as the write goes ([`ahead_rows`]), or null.
    pub pf: *const u8,
}

/// Whether the write of a row asks for the input row two on (into the level-2 cache, as it
/// streams the output row) where the sums pass asks for the next row's: with streaming
/// stores (`nt`) into an output that lies past the last-level cache together with the input
/// (`super::stream::past_cache`). There the sums pass alone left memory without reads while
/// the write ran, which the hardware prefetchers did not fill.
///
/// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207; experiment build with
/// the choice on an environment switch, 2026-11-28 02:37–02:43 UTC, load 1.2–5.2 from other
/// jobs; `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile K 8192 4096 20 --pool`, interleaved with
/// the build without it, fastest launch in ms): rmsnorm 16.7/16.5/19.6/17.8 → 16.2/14.3/
/// 15.4/16.1, layernorm 19.2/18.8/20.9/23.2 → 16.6/18.2/20.2/19.5. The row three or four on
/// measured the same (rmsnorm 16.0/17.5, 17.7/15.8; layernorm 18.5/19.6, 18.3/18.1), the row
/// after the next asked for into L1 (`prefetcht0`) no better than none (rmsnorm 18.6/17.6,
/// layernorm 17.5/19.9), `prefetcht2` in between (rmsnorm 17.8/15.5, layernorm 16.8/20.7);
/// the sums pass asking for the row two on instead of the next one, no better (rmsnorm
/// 17.6/17.9, layernorm 21.0/18.9). Final build: see the commit.
///
/// Also where a row's working set (`row_bytes`: the rows the pipeline keeps, `γ`, `β` and
/// the output row) takes more than 3/4 of the level-1 cache, within the last-level cache
/// too (rn21): there the write reads its rows partly back from L2 and takes longer, and
/// memory again sat without reads. Same machine, experiment build with the choice on an
/// environment switch, 2026-11-28 09:39–09:40 UTC, load 7–9 from other helpers' builds,
/// `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile K R C 200 --pool`, 4–5 interleaved rounds,
/// fastest launch in µs (ratio to the same run's memcpy), without → with: layernorm `[1024,
/// 4096]` 1T 1616–1932 (0.73–0.84) → 1519–1727 (0.82–0.98) and 1596–2062 (0.74–0.85) →
/// 1475–1644 (0.84–0.93), 2T ratio 0.76–0.88 → 0.83–0.94; rmsnorm `[1024, 4096]` 1T
/// 1458–1774 (0.83–0.99) → 1393–1445 (0.98–1.04); but layernorm `[4096, 1024]` (20 KiB per
/// row) 1T 1229–1456 (0.98–1.15) → 1310–1628 (0.93–1.08): not there. Final build against
/// main's binary a5b9485 (09:44–09:46, load 2.4–3.7, 4–6 rounds): layernorm `[1024, 4096]`
/// 1T 1619–1968 (0.70–0.88) → 1479–1649 (0.89–0.94), 2T 950–1036 (0.74–0.79) → 820–929
/// (0.82–0.93); rmsnorm `[1024, 4096]` 1T 1383–1806 (0.82–1.02) → 1304–1431 (1.03–1.08);
/// rmsnorm bf16 → f32 `[1024, 4096]` 1T 1065–1382 (0.75–0.97) → 1048–1309 (0.81–0.95), 2T
/// (plain stores: unchanged) 651–730 → 637–726; layernorm `[4096, 1024]` 1T 1237–1449 →
/// 1173–1482, 2T 771–818 → 775–814 (unchanged). Not on AMD (measured only on this Xeon).
///
/// And on a Zen 4 (AMD family 0x19: [`zen4_f32_ahead`]) for every streamed row of an f32
/// input `x`, which there also spreads its reads ([`spread`]).
pub(crate) fn ahead_rows(
    nt: bool,
    (x, out): (&crate::backend::Buffer, &crate::backend::Buffer),
    row_bytes: usize,
) -> bool {
    let f32in = x.dtype == tessera_ir::DType::F32;
    nt && (super::stream::past_cache(x.len + out.len)
        || (!crate::backend::cpu::simd::is_amd()
            && row_bytes > crate::backend::cpu::cache::l1_data_bytes() / 4 * 3)
        || (f32in && zen4_f32_ahead()))
}

/// Whether streamed norm rows of an f32 input ask for their rows ahead into L2 and spread
/// those reads over both passes ([`ahead_rows`], [`spread`]) within the last-level cache
/// too: on a Zen 4 (AMD family 0x19, [`crate::backend::cpu::simd::is_zen4`]), where that
/// measured faster (why is not measured: no hardware counters there; the Zen 5's rule, not
/// asking, kept for family 0x1A; bf16 inputs keep it too: asking ahead measured slower there).
///
/// Measured (nm25) on the 2-vCPU AMD EPYC KVM guest (family 25 model 17, 32 KiB L1D, 32 MiB
/// L3, other helpers' builds and benches running: load 2.5–6), 2026-11-28, experiment build
/// with `nt`, `far` and `spread` on an environment switch, `RAYON_NUM_THREADS=T chrt -f 50
/// cpu_profile K R C N --pool` (N = 300 one thread, 1000 two), interleaved rounds with
/// main's binary (a362c42), fastest launch in µs. Layernorm `[1024, 4096]` 1T (22:24 UTC,
/// four rounds): main 999–1108, as before 1080–1419, `far` alone 871–932, `far` and spread
/// 766–823; 2T (22:24, four): main 432–488, before 437–474, `far` 430–476, both 377–439.
/// Rmsnorm `[1024, 4096]` 1T (22:25, three): main 707–845, both 656–665 (`far` alone
/// 686–810 at 22:13: the same as without). `[4096, 1024]` 1T (20 KiB / 12 KiB rows, 22:26,
/// three): layernorm main 710–1014 → 632–636, rmsnorm 647–989 → 612–617. Rmsnorm bf16 → f32
/// `[1024, 4096]` 1T (22:14, four): `far` 1066–1077 against 914–948 without (main 879–898):
/// not taken. Two threads' `[4096, 1024]` rows store plainly (not streamed): unchanged.
/// Final build against main's binary (five interleaved rounds each, load 2.5–5.6): layernorm
/// `[1024, 4096]` 1T 1256–1301 → 782–875 µs (22:29 UTC), 2T 442–495 (ratio 0.59–0.70) →
/// 382–425 (0.68–0.76; 22:55, both cores free); rmsnorm `[1024, 4096]` 1T 707–1012 → 624–661,
/// 2T the same within the noise (330 and 330 in the round with both cores free, 22:55);
/// `[4096, 1024]` 1T layernorm 745–1020 → 639–666, rmsnorm 671–878 → 614–644 (22:31). Past
/// the cache (unchanged path) layernorm `[8192, 4096]` 1T read 7.3–7.7 ms with main's binary
/// and 7.9–8.2 with a build of this commit's parent and this one alike (22:39): the build,
/// not the rule.
fn zen4_f32_ahead() -> bool {
    crate::backend::cpu::simd::is_zen4()
}

/// What every pass of a launch shares: `γ`, `β` (null without), the row length, the chunk
/// width `bc` of the sums, and whether the body of an output row takes streaming stores
/// (`nt`; then the passes of sums also ask for the next row's lines as they go: with plain
/// stores the output row's lines share L1 with the row, `γ` (and `β`), and asking for the
/// next row too measured slower, see ARCHITECTURE.md). `norm::rows_avx512` calls [`sums`]
/// alone (its bf16 → bf16 layernorm rows) with null `γ` and `β` and `nt` set: the passes ask
/// for the next row's lines.
#[derive(Clone, Copy)]
pub(crate) struct Rows {
    pub g: *const f32,
    pub b: *const f32,
    pub n: usize,
    pub bc: usize,
    pub nt: bool,
}

/// Values `j .. j + 16` of the row `xs` (f32, or bf16 widened with `BF`) where `k` is set,
/// `+0` in the other lanes.
///
/// # Safety
/// Those lanes are readable; the CPU supports AVX-512F.
#[inline(always)]
unsafe fn xload<const BF: bool>(xs: *const u8, j: usize, k: __mmask16) -> __m512 {
    // SAFETY: the caller's; only the set lanes are read.
    unsafe {
        if !BF {
            _mm512_maskz_loadu_ps(k, (xs as *const f32).add(j))
        } else if k == !0 {
            super::norm512::load::<true>(xs, j)
        } else {
            let mut w = [0u16; 16];
            for (l, w) in w.iter_mut().enumerate() {
                if k >> l & 1 != 0 {
                    // `wrapping_add`: the head's `xs` may point before the row's allocation
                    // (`finish`), so only the set lanes' addresses are in bounds.
                    *w = *(xs as *const u16).wrapping_add(j + l);
                }
            }
            super::norm512::load::<true>(w.as_ptr() as *const u8, 0)
        }
    }
}

/// Output values `j .. j + 16` of `w` (its row bf16 with `BF`) where `k` (a lane mask) is
/// set; streamed (`d[j]` 64-byte aligned, `k` full) with `NT`.
///
/// # Safety
/// Those lanes are in bounds of `w.xs`, `w.out`, `r.g` (and `r.b`); the CPU supports
/// AVX-512F.
#[inline(always)]
unsafe fn put<const NT: bool, const BF: bool>(r: &Rows, w: &Write, j: usize, k: __mmask16) {
    // SAFETY: the caller's; masked loads read only the set lanes.
    unsafe {
        let (mv, rv) = (_mm512_set1_ps(w.mean), _mm512_set1_ps(w.rstd));
        let x = xload::<BF>(w.xs, j, k);
        let y = _mm512_mul_ps(
            _mm512_mul_ps(_mm512_sub_ps(x, mv), rv),
            _mm512_maskz_loadu_ps(k, r.g.add(j)),
        );
        let y = if r.b.is_null() {
            y
        } else {
            _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, r.b.add(j)))
        };
        if NT {
            _mm512_stream_ps(w.out.add(j), y);
        } else {
            _mm512_mask_storeu_ps(w.out.add(j), k, y);
        }
    }
}

/// Output values `j .. j + 32` of `w` (full vectors), streamed with `r.nt`.
///
/// # Safety
/// As [`put`], for 32 lanes; with `r.nt`, `w.out + j` is 64-byte aligned.
#[inline(always)]
unsafe fn put32<const BF: bool>(r: &Rows, w: &Write, j: usize) {
    // SAFETY: the caller's.
    unsafe {
        if r.nt {
            put::<true, BF>(r, w, j, !0);
            put::<true, BF>(r, w, j + 16, !0);
        } else {
            put::<false, BF>(r, w, j, !0);
            put::<false, BF>(r, w, j + 16, !0);
        }
    }
}

/// One pass of sums: with `IN` the sums of the row `i` (of its values, or with `SQ` of
/// their squares about `i.mean`; bf16 with `BF`, widened and, with `KEEP`, stored to
/// `i.keep`; with `r.nt` the lines of `i.ahead` asked for as it goes), with `MID` the sums
/// of the squared deviations of the row `m` about `m.mean` (f32 values: the f32 row, or
/// with `BF` and `KEEP` the widened row an earlier pass kept; with `BF` and not `KEEP` a
/// bf16 row, widened in registers), in one loop. Returns the two
/// sums (`0` for a stage not run), each `norm512::sum`'s bits over the row's chunks, added
/// in column order.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; the rows (and `keep`) hold `r.n` values.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn sums<
    const IN: bool,
    const SQ: bool,
    const BF: bool,
    const MID: bool,
    const KEEP: bool,
>(
    r: &Rows,
    i: Pass,
    m: Pass,
) -> (f32, f32) {
    let n = r.n;
    let (mi, mm) = (_mm512_set1_ps(i.mean), _mm512_set1_ps(m.mean));
    let (mut si, mut sm) = (0.0f32, 0.0f32);
    let z = _mm512_setzero_ps();
    let mut c0 = 0;
    while c0 < n {
        let c1 = (c0 + r.bc).min(n);
        let full = c0 + (c1 - c0) / 32 * 32;
        let (mut a, mut b) = ((z, z), (z, z));
        let mut j = c0;
        while j < full {
            // SAFETY: `j + 32 <= n`; the caller's level and bounds.
            unsafe {
                if IN {
                    a = if r.nt && i.l2 {
                        // The lines of `i.ahead` for these columns into L2 (one bf16 line,
                        // two f32 ones; a prefetch never faults).
                        let p = i.ahead.wrapping_add(j * if BF { 2 } else { 4 }) as *const i8;
                        _mm_prefetch::<_MM_HINT_T1>(p);
                        if !BF {
                            _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(64));
                        }
                        step::<SQ, BF, false, KEEP>(&i, mi, j, a)
                    } else if r.nt {
                        step::<SQ, BF, true, KEEP>(&i, mi, j, a)
                    } else {
                        step::<SQ, BF, false, KEEP>(&i, mi, j, a)
                    };
                }
                if MID {
                    b = if BF && !KEEP {
                        step::<true, true, false, false>(&m, mm, j, b)
                    } else {
                        step::<true, false, false, false>(&m, mm, j, b)
                    };
                }
            }
            j += 32;
        }
        if full < c1 {
            // SAFETY: the columns `full .. c1` are in bounds.
            unsafe {
                if IN {
                    a = tail::<SQ, BF, KEEP>(&i, mi, full, c1 - full, a);
                }
                if MID {
                    b = if BF && !KEEP {
                        tail::<true, true, false>(&m, mm, full, c1 - full, b)
                    } else {
                        tail::<true, false, false>(&m, mm, full, c1 - full, b)
                    };
                }
            }
        }
        if IN {
            si += tree(a.0, a.1);
        }
        if MID {
            sm += tree(b.0, b.1);
        }
        c0 = c1;
    }
    (si, sm)
}

/// The output row `w` (its row bf16, widened here, with `BF`): `((x − mean)·rstd)·γ (+ β)`
/// for its `r.n` values, with `r.nt`
/// streaming stores from its first 64-byte boundary to its last whole vector and masked
/// plain stores around them.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; `w.xs`, `γ`, `β` and the output row hold
/// `r.n` values; with `r.nt`, nothing else accesses the output row before `stream::fence`
/// runs on this thread.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn write<const BF: bool>(r: &Rows, w: Write) {
    let head = head(r, &w);
    // SAFETY: the caller's.
    unsafe { finish::<BF>(r, &w, head, head) }
}

/// The columns before the output row's first 64-byte boundary (streamed rows).
fn head(r: &Rows, w: &Write) -> usize {
    if r.nt {
        w.out.align_offset(64).min(r.n).min(15)
    } else {
        0
    }
}

/// [`write`] of the columns from `j` (64-byte aligned with `r.nt`) and the `head` first ones.
///
/// # Safety
/// As [`write`].
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn finish<const BF: bool>(r: &Rows, w: &Write, mut j: usize, head: usize) {
    let n = r.n;
    let w = *w;
    // SAFETY: every lane written is below `n`; `j` stays 64-byte aligned with `r.nt`.
    unsafe {
        while j + 32 <= n {
            if !w.pf.is_null() {
                // The row's lines for these 32 columns (one bf16 line, two f32 ones); a
                // prefetch never faults.
                let a = w.pf.wrapping_add(j * if BF { 2 } else { 4 }) as *const i8;
                _mm_prefetch::<_MM_HINT_T1>(a);
                if !BF {
                    _mm_prefetch::<_MM_HINT_T1>(a.wrapping_add(64));
                }
            }
            put32::<BF>(r, &w, j);
            j += 32;
        }
        while j + 16 <= n {
            if r.nt {
                put::<true, BF>(r, &w, j, !0);
            } else {
                put::<false, BF>(r, &w, j, !0);
            }
            j += 16;
        }
        if j < n {
            put::<false, BF>(r, &w, j, ((1u32 << (n - j)) - 1) as u16);
        }
        if head > 0 {
            // The line before the first boundary, as one aligned vector whose last `head`
            // lanes are the row's first values: a store that crossed into the next line would
            // touch a line that streaming stores are writing.
            let w0 = Write {
                xs: w.xs.wrapping_sub((16 - head) * if BF { 2 } else { 4 }),
                out: w.out.wrapping_sub(16 - head),
                ..w
            };
            let r0 = Rows {
                g: r.g.wrapping_sub(16 - head),
                b: if r.b.is_null() {
                    r.b
                } else {
                    r.b.wrapping_sub(16 - head)
                },
                ..*r
            };
            put::<false, BF>(&r0, &w0, 0, (0xffffu32 << (16 - head)) as u16);
        }
    }
}

/// Whether [`rows`] spreads the reads of an f32 input from memory over both passes of a row:
/// with the launch's tensors of `bytes` together past the last-level cache
/// (`super::stream::past_cache`; a test may force it on its own thread) and [`ahead_rows`]'s
/// `far`, the sums pass of row `t` asks for row `t + 2` into L2 (`prefetcht1`, instead of
/// row `t + 1` into L1) and the write for row `t + 3` (instead of `t + 2`). Before, the rows
/// reached L2 only by the write's prefetch, one row per write, and the sums pass (reading
/// from L2) left memory without reads. Measured (dr24, 2026-11-28; throwaway build with
/// run-time switches 19:37–19:39 UTC, load 2.5–3.9, `RAYON_NUM_THREADS=1 chrt -f 50
/// cpu_profile layernorm 8192 4096 10 --pool`, five interleaved rounds, fastest launch in µs
/// and its ratio to the same run's copy): as before 14929–17905 (0.73–0.83), this
/// 14169–14975 (0.82–0.85); the sums pass asking for row `t + 2` with the write's on `t + 2`
/// 14565–19874 (0.68–0.83); with the rows asked for in four interleaved quarters
/// (`prefetch::quarter_at`) 14369–15727 (0.79–0.93), quarters alone 0.68–0.80 against
/// 0.65–0.78. This build against main `47673e3`'s binary (19:41–19:47, load 2.1–4.2, twelve
/// interleaved rounds, base → this): one thread 14532–17792 µs (0.76–1.09; ≥ 0.80 in five,
/// one where the copy ran slow) → 13889–16351 (0.75–0.87; ≥ 0.80 in nine), faster in eleven
/// rounds; two threads (eight rounds) 7498–8762 → 7413–8635 (ratios 1.26–1.60 → 1.37–1.52);
/// rmsnorm one thread (four rounds) 13756–15440 → 13503–14518. Not taken (the same path):
/// `[4096, 1024]` and `[1024, 4096]`, where layernorm measured the same within the noise
/// (one thread 1263–1348 / 1473–1657 against 1252–1407 / 1484–1610 µs, two threads 697–752
/// / 797–845 against 718–801 / 814–839).
///
/// On a Zen 4 wherever [`ahead_rows`] answers true for an f32 input ([`zen4_f32_ahead`],
/// measured there).
fn spread(bytes: usize) -> bool {
    #[cfg(test)]
    if let Some(f) = tests::FORCE_PAST.with(|f| f.get()) {
        return f;
    }
    super::stream::past_cache(bytes) || zen4_f32_ahead()
}

/// The rows `r0 .. r1` of a norm into the f32 output `out` (unrounded): pass `t` of
/// [`sums`] reads row `t` from memory (asking for row `t + 1`'s lines with `nt`) and, for
/// layernorm, takes row `t − 1`'s squared deviations; [`write`] then writes row `t` (rmsnorm)
/// or `t − 1` (layernorm), asking for row `t + 2`'s lines (into L2) with `nt` and `far`
/// ([`ahead_rows`]). A layernorm bf16 row is kept widened in `keep` until its write;
/// an rmsnorm bf16 row is read again (from L1) by its write and widened again.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; with `nt` ([`super::stream::wanted_for_rows`]
/// or [`super::stream::wanted_for_rows_reading`] of `out`) the caller fences before the
/// program returns.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn rows(
    nm: &super::rowmatch::Norm,
    (x, out): (&crate::backend::Buffer, &crate::backend::Buffer),
    (r0, r1, rows): (usize, usize, usize),
    n: usize,
    (g, b): (&[f32], Option<&[f32]>),
    keep: &mut [f32],
    (nt, far): (bool, bool),
) {
    use tessera_ir::DType;
    let size = x.dtype.size_bytes();
    assert!(
        r1 <= rows
            && rows * n * size <= x.len
            && rows * n * 4 <= out.len
            && out.dtype == DType::F32
            && keep.len() >= 3 * n
            && g.len() >= n
            && b.is_none_or(|b| b.len() >= n),
        "fused norm rows out of bounds"
    );
    let (layer, f32in) = (nm.layer, x.dtype == DType::F32);
    let nf = n as i32 as f32;
    let row_ptr = |row: usize| x.ptr.wrapping_add(row.wrapping_mul(n * size)) as *const u8;
    let kp = keep.as_mut_ptr();
    // A layernorm bf16 row is kept until its write: two rows (its squared deviations and
    // write follow the next row's mean sums).
    let ring = 2;
    let kept = |row: usize| kp.wrapping_add(row % ring * n);
    // An rmsnorm bf16 row is not kept: the write reads the bf16 row again (from L1).
    let again = !layer && !f32in;
    let vals = |row: usize| {
        if f32in || again {
            row_ptr(row)
        } else {
            kept(row) as *const u8
        }
    };
    let r = Rows {
        g: g.as_ptr(),
        b: b.map_or(std::ptr::null(), |b| b.as_ptr()),
        n,
        bc: nm.rows.bc,
        nt,
    };
    // Layernorm's squared deviations lag its mean sums by one row.
    let lag = usize::from(layer);
    // Each row's mean and `rstd`, by row index mod 3.
    let (mut mean, mut rstd) = ([0.0f32; 3], [0.0f32; 3]);
    // The writes ask for row `t + 2` with `far` (the caller's [`ahead_rows`]).
    let far = far && nt;
    // An f32 input past the last-level cache with the output ([`spread`]): the sums pass of
    // row `t` asks for row `t + 2` (into L2) and the write for row `t + 3`.
    let spread = far && f32in && spread(x.len + out.len);
    #[cfg(test)]
    if spread {
        tests::SPREAD.with(|q| q.set(q.get() + 1));
    }
    let (sa, wa) = if spread { (2, 3) } else { (1, 2) };
    for t in r0..r1 + lag {
        let (hi, hm) = (t < r1, layer && t > r0);
        let ip = Pass {
            src: row_ptr(t),
            mean: 0.0,
            keep: kept(t),
            ahead: if t + sa < rows {
                row_ptr(t + sa)
            } else {
                row_ptr(t)
            },
            l2: spread,
        };
        let prev = t.wrapping_sub(1);
        let mp = Pass {
            src: vals(prev),
            mean: mean[prev % 3],
            keep: kp,
            ahead: std::ptr::null(),
            l2: false,
        };
        // SAFETY: the caller's level; every row a stage runs on is in `r0 .. r1` (so in
        // the tensors, asserted), its kept row written by an earlier pass.
        macro_rules! go {
            ($sq:literal, $bf:literal) => {
                unsafe {
                    match (hi, hm) {
                        (true, false) => sums::<true, $sq, $bf, false, $bf>(&r, ip, mp),
                        (true, true) => sums::<true, $sq, $bf, true, $bf>(&r, ip, mp),
                        (false, true) => sums::<false, $sq, $bf, true, $bf>(&r, ip, mp),
                        (false, false) => (0.0, 0.0),
                    }
                }
            };
        }
        let (si, sm) = match (layer, f32in) {
            (true, true) => go!(false, false),
            (true, false) => go!(false, true),
            (false, true) => go!(true, false),
            // SAFETY: as above.
            (false, false) => unsafe {
                if hi {
                    sums::<true, true, true, false, false>(&r, ip, mp)
                } else {
                    (0.0, 0.0)
                }
            },
        };
        // `vmath::rsqrt`'s `1 / sqrt`.
        let done = if layer {
            if hi {
                mean[t % 3] = si / nf;
            }
            if !hm {
                continue;
            }
            rstd[prev % 3] = 1.0 / (sm / nf + nm.eps).sqrt();
            prev
        } else {
            if !hi {
                continue;
            }
            mean[t % 3] = 0.0;
            rstd[t % 3] = 1.0 / (si / nf + nm.eps).sqrt();
            t
        };
        let w = Write {
            xs: vals(done),
            mean: mean[done % 3],
            rstd: rstd[done % 3],
            out: (out.ptr as *mut f32).wrapping_add(done * n),
            pf: if far && t + wa < rows {
                row_ptr(t + wa)
            } else {
                std::ptr::null()
            },
        };
        // SAFETY: as above; `done` is in `r0 .. r1`.
        unsafe {
            if again {
                write::<true>(&r, w)
            } else {
                write::<false>(&r, w)
            }
        };
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    thread_local! {
        /// What [`spread`] answers on this thread (a test's), when set.
        pub(super) static FORCE_PAST: std::cell::Cell<Option<bool>> =
            const { std::cell::Cell::new(None) };
        /// Calls of [`rows`] on this thread that spread their reads ([`spread`]).
        pub(super) static SPREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// A `[r, c]` buffer of `dtype` over the bytes at `ptr` (the norm tests' too).
    pub(in crate::backend::cpu::fused) fn buffer(
        dtype: tessera_ir::DType,
        ptr: *mut u8,
        (r, c): (usize, usize),
    ) -> crate::backend::Buffer {
        crate::backend::Buffer {
            dtype,
            shape: [r, c, 1],
            rank: 2,
            ptr,
            len: r * c * dtype.size_bytes(),
            writable: true,
        }
    }

    /// Fresh pseudo-random values (a xorshift seeded from the clock; the seed is in every
    /// failure message).
    fn values(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                (*seed >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
            })
            .collect()
    }

    /// The interpreter's norm of one row into f32 (`norm::body`'s portable loop): sums per chunk of
    /// `bc` columns by `vmath::sum`, added in column order, `vmath::rsqrt`. Also `norm`'s tests'
    /// reference (narrowed there).
    pub(in crate::backend::cpu::fused) fn reference_f32(
        xs: &[f32],
        bc: usize,
        g: &[f32],
        b: Option<&[f32]>,
        layer: bool,
    ) -> Vec<f32> {
        use crate::backend::cpu::vmath;
        let n = xs.len();
        let nf = n as i32 as f32;
        let mean = if layer {
            let mut acc = 0.0f32;
            for c0 in (0..n).step_by(bc) {
                acc += vmath::sum(&xs[c0..(c0 + bc).min(n)]);
            }
            acc / nf
        } else {
            0.0
        };
        let mut ss = 0.0f32;
        for c0 in (0..n).step_by(bc) {
            let q: Vec<f32> = xs[c0..(c0 + bc).min(n)]
                .iter()
                .map(|v| {
                    if layer {
                        (v - mean) * (v - mean)
                    } else {
                        v * v
                    }
                })
                .collect();
            ss += vmath::sum(&q);
        }
        let mut rstd = [ss / nf + 1e-5];
        vmath::rsqrt(&mut rstd);
        (0..n)
            .map(|j| {
                let y = ((xs[j] - mean) * rstd[0]) * g[j];
                b.map_or(y, |b| y + b[j])
            })
            .collect()
    }

    /// [`rows`] into an f32 output, streamed or not (streamed also with the writes asking for
    /// the row two on, `far`, as past the cache, and with [`spread`] forced, asserted to run
    /// for f32 rows): layernorm and rmsnorm of f32 and bf16
    /// rows, with and without `β`, widths that are not whole vectors, several chunks per row
    /// (`bc`), programs of 1, 2, 3 and 8 rows (a last one cut short), against the
    /// interpreter's row, bit for bit. Every row's values differ (fresh random rows), so a
    /// row written with another row's mean or `rstd` (layernorm's squared deviations run a
    /// row behind its mean sums, its bf16 rows kept in a ring of two) fails, and the output
    /// starts as NaN, so a row not written fails.
    #[test]
    fn rows_match_the_interpreter_streamed_or_not() {
        use tessera_ir::DType;
        if !(std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma"))
        {
            return;
        }
        let start = crate::backend::cpu::clock_seed() | 1;
        let mut seed = start;
        for (rows, n) in [(5, 47), (9, 1031), (7, 3000), (4, 4099), (6, 16), (5, 1024)] {
            for bc in [64, 1000, 4096] {
                for br in [1, 2, 3, 8] {
                    for (layer, beta, bf) in [
                        (true, true, false),
                        (true, false, false),
                        (false, false, false),
                        (false, true, false),
                        (false, false, true),
                        (true, true, true),
                    ] {
                        for (nt, far, past) in [
                            (false, false, false),
                            (true, false, false),
                            (true, true, false),
                            (true, true, true),
                        ] {
                            FORCE_PAST.with(|f| f.set(Some(past)));
                            let xs = values(&mut seed, rows * n);
                            // bf16 rows: the values' high halves (what `xs` holds then).
                            let mut bits: Vec<u16> =
                                xs.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
                            let mut xs: Vec<f32> = if bf {
                                bits.iter()
                                    .map(|&b| f32::from_bits((b as u32) << 16))
                                    .collect()
                            } else {
                                xs
                            };
                            let g = values(&mut seed, n);
                            let bv = values(&mut seed, n);
                            let b = beta.then_some(&bv[..]);
                            let mut ob = vec![f32::from_bits(0x7fc0_1234); rows * n];
                            let nm = super::super::norm::test_norm(br, bc, beta, layer);
                            let x = if bf {
                                buffer(DType::BF16, bits.as_mut_ptr() as *mut u8, (rows, n))
                            } else {
                                buffer(DType::F32, xs.as_mut_ptr() as *mut u8, (rows, n))
                            };
                            let out = buffer(DType::F32, ob.as_mut_ptr() as *mut u8, (rows, n));
                            let mut keep = vec![0.0f32; 3 * n];
                            for r0 in (0..rows).step_by(br) {
                                let r1 = (r0 + br).min(rows);
                                // SAFETY: AVX-512F, AVX2 and FMA are present; `g` and `b`
                                // hold `n` values, `keep` 3 rows; fenced below.
                                unsafe {
                                    super::rows(
                                        &nm,
                                        (&x, &out),
                                        (r0, r1, rows),
                                        n,
                                        (&g, b),
                                        &mut keep,
                                        (nt, far),
                                    );
                                    core::arch::x86_64::_mm_sfence();
                                }
                            }
                            for r in 0..rows {
                                let want = reference_f32(&xs[r * n..(r + 1) * n], bc, &g, b, layer);
                                let got = &ob[r * n..(r + 1) * n];
                                if let Some(j) =
                                    (0..n).find(|&j| got[j].to_bits() != want[j].to_bits())
                                {
                                    panic!(
                                        "[{rows}, {n}] bc {bc} br {br} layer {layer} beta {beta} \
                                         bf16 {bf} nt {nt} far {far} past {past}: row {r} column \
                                         {j}: {} != {} \
                                         (seed {start})",
                                        got[j], want[j]
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        FORCE_PAST.with(|f| f.set(None));
        assert!(SPREAD.with(|q| q.get()) > 0, "no rows spread their reads");
    }

    /// The choice of `norm::body` within the last-level cache, [`ahead_rows`] with a launch's
    /// own sizes and [`spread`] unforced: on a Zen 4 ([`zen4_f32_ahead`]) streamed rows of an
    /// f32 input ask for rows ahead and spread their reads ([`SPREAD`] counts them), bf16 rows
    /// do not; elsewhere the rows spread nothing (the tensors fit the cache) and ask ahead
    /// only off AMD for rows wider than 3/4 of L1. Every row bit for bit the interpreter's
    /// (fresh random rows, a NaN-filled output), programs of two rows.
    #[test]
    fn zen4_streamed_f32_rows_within_the_cache_ask_ahead_and_spread() {
        use crate::backend::cpu::simd;
        use tessera_ir::DType;
        if !(std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma"))
        {
            return;
        }
        FORCE_PAST.with(|f| f.set(None));
        let zen4 = simd::is_zen4();
        let start = crate::backend::cpu::clock_seed() | 1;
        let mut seed = start;
        for (rows, n) in [(6, 1024), (5, 4099), (5, 300)] {
            for (layer, beta, bf) in [
                (true, true, false),
                (false, false, false),
                (false, true, true),
                (true, true, true),
            ] {
                let xs = values(&mut seed, rows * n);
                let mut bits: Vec<u16> = xs.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
                let mut xs: Vec<f32> = if bf {
                    bits.iter()
                        .map(|&b| f32::from_bits((b as u32) << 16))
                        .collect()
                } else {
                    xs
                };
                let g = values(&mut seed, n);
                let bv = values(&mut seed, n);
                let b = beta.then_some(&bv[..]);
                let mut ob = vec![f32::from_bits(0x7fc0_1234); rows * n];
                let nm = super::super::norm::test_norm(2, 1024, beta, layer);
                let x = if bf {
                    buffer(DType::BF16, bits.as_mut_ptr() as *mut u8, (rows, n))
                } else {
                    buffer(DType::F32, xs.as_mut_ptr() as *mut u8, (rows, n))
                };
                let out = buffer(DType::F32, ob.as_mut_ptr() as *mut u8, (rows, n));
                // `norm::body`'s row working set.
                let row_bytes = (1 + usize::from(layer) + 1 + usize::from(beta) + 1) * n * 4;
                let far = ahead_rows(true, (&x, &out), row_bytes);
                let wide = row_bytes > crate::backend::cpu::cache::l1_data_bytes() / 4 * 3;
                assert_eq!(
                    far,
                    (zen4 && !bf) || (!simd::is_amd() && wide),
                    "[{rows}, {n}] layer {layer} bf16 {bf}: ahead_rows"
                );
                let before = SPREAD.with(|q| q.get());
                let mut keep = vec![0.0f32; 3 * n];
                for r0 in (0..rows).step_by(2) {
                    // SAFETY: AVX-512F, AVX2 and FMA are present; `g` and `b` hold `n`
                    // values, `keep` 3 rows; fenced below.
                    unsafe {
                        super::rows(
                            &nm,
                            (&x, &out),
                            (r0, (r0 + 2).min(rows), rows),
                            n,
                            (&g, b),
                            &mut keep,
                            (true, far),
                        );
                        core::arch::x86_64::_mm_sfence();
                    }
                }
                assert_eq!(
                    SPREAD.with(|q| q.get()) > before,
                    zen4 && !bf,
                    "[{rows}, {n}] layer {layer} bf16 {bf}: spread"
                );
                for r in 0..rows {
                    let want = reference_f32(&xs[r * n..(r + 1) * n], 1024, &g, b, layer);
                    let got = &ob[r * n..(r + 1) * n];
                    if let Some(j) = (0..n).find(|&j| got[j].to_bits() != want[j].to_bits()) {
                        panic!(
                            "[{rows}, {n}] layer {layer} beta {beta} bf16 {bf}: row {r} column \
                             {j}: {} != {} (seed {start})",
                            got[j], want[j]
                        );
                    }
                }
            }
        }
    }

    /// [`write`] gives `((x − mean)·rstd)·γ (+ β)` bit for bit at every offset of the output
    /// row within a cache line, streamed or not, from an f32 row or a bf16 one (widened), and
    /// writes nothing outside the row.
    #[test]
    fn write_matches_the_formula_at_every_line_offset() {
        if !std::is_x86_feature_detected!("avx512f") {
            return;
        }
        let start = crate::backend::cpu::clock_seed() | 1;
        let mut seed = start;
        for n in [1, 7, 15, 16, 17, 31, 33, 100, 1031] {
            for off in 0..16 {
                for (nt, beta, bf) in [
                    (false, false, false),
                    (false, true, false),
                    (true, false, false),
                    (true, true, false),
                    (false, true, true),
                    (true, false, true),
                    (true, true, true),
                ] {
                    let xs = values(&mut seed, n);
                    // The bf16 row: the values' high halves (what `xs` holds then).
                    let bits: Vec<u16> = xs.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
                    let xs: Vec<f32> = if bf {
                        bits.iter()
                            .map(|&b| f32::from_bits((b as u32) << 16))
                            .collect()
                    } else {
                        xs
                    };
                    let g = values(&mut seed, n);
                    let b = values(&mut seed, n);
                    let (mean, rstd) = (values(&mut seed, 1)[0], 0.37);
                    let mut buf = vec![f32::from_bits(0x7fc0_1234); n + 48];
                    let at = buf.as_ptr().align_offset(64) + off;
                    let r = Rows {
                        g: g.as_ptr(),
                        b: if beta { b.as_ptr() } else { std::ptr::null() },
                        n,
                        bc: 1024,
                        nt,
                    };
                    let w = Write {
                        xs: if bf {
                            bits.as_ptr() as *const u8
                        } else {
                            xs.as_ptr() as *const u8
                        },
                        mean,
                        rstd,
                        out: buf[at..].as_mut_ptr(),
                        // Streamed writes ask for a row's lines as they go (`ahead_rows`).
                        pf: if nt {
                            xs.as_ptr() as *const u8
                        } else {
                            std::ptr::null()
                        },
                    };
                    // SAFETY: AVX-512F is present; every row holds `n` values; nothing else
                    // touches `buf` before the fence.
                    unsafe {
                        if bf {
                            write::<true>(&r, w);
                        } else {
                            write::<false>(&r, w);
                        }
                        core::arch::x86_64::_mm_sfence();
                    }
                    for (j, &v) in buf.iter().enumerate() {
                        let want = if (at..at + n).contains(&j) {
                            let k = j - at;
                            let y = ((xs[k] - mean) * rstd) * g[k];
                            if beta { y + b[k] } else { y }
                        } else {
                            f32::from_bits(0x7fc0_1234)
                        };
                        assert_eq!(
                            v.to_bits(),
                            want.to_bits(),
                            "n {n} offset {off} nt {nt} beta {beta} bf16 {bf} element {j} (seed {start})"
                        );
                    }
                }
            }
        }
    }
}
