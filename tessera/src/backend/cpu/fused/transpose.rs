//! Direct transposes: a `load → trans → store` of one tile (f32 or bf16 storage on both ends)
//! runs as a copy tensor → tensor, in 8 × 8 register transposes (AVX2) or 8 × 8 blocks of
//! scalar copies (portable), with no materialised tile in between.
//!
//! The copy gives the interpreter's bits: f32 elements are moved unchanged; a bf16 NaN comes
//! out quiet (bit 6 set), as the interpreter's store (`half::bf16::from_f32`) writes it.

use super::chunk;
use super::plan::{COp, Src, Step};
use super::rect::{Rect, rect};
use super::uses::mat_uses;
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::tile::Kernel;

/// One `load → trans → store`: the loaded tile is `rows × cols`, the stored one `cols × rows`.
#[derive(Clone, Debug)]
pub(crate) struct Transpose {
    pub src: usize,
    pub src_idx: Vec<u32>,
    pub dst: usize,
    pub dst_idx: Vec<u32>,
    pub rows: usize,
    pub cols: usize,
    /// The value read outside the source (rounded to the storage type).
    pub other: f32,
    pub bf16: bool,
}

/// Replaces each top-level `Group(load) → Trans → Group(store)` whose two tiles nothing else
/// reads by one [`Step::Transpose`] at the store's place.
pub(crate) fn fuse(k: &Kernel, mut steps: Vec<Step>) -> Vec<Step> {
    let uses = mat_uses(&steps);
    let mut i = 0;
    while i < steps.len() {
        if let Some((t, j, l)) = find(k, &steps, i, &uses) {
            steps[l] = Step::Transpose(t);
            steps.remove(j);
            steps.remove(i);
        } else {
            i += 1;
        }
    }
    steps
}

/// The pattern starting with the load group at `i`: the transpose, and where its trans and
/// store steps are.
fn find(
    k: &Kernel,
    steps: &[Step],
    i: usize,
    uses: &std::collections::HashMap<usize, usize>,
) -> Option<(Transpose, usize, usize)> {
    let Step::Group(g) = &steps[i] else {
        return None;
    };
    let [m] = g.members.as_slice() else {
        return None;
    };
    let (
        COp::Load {
            param: pi,
            idx: ii,
            other,
            rank: 2,
            ..
        },
        Some(m1),
    ) = (&m.op, m.mat)
    else {
        return None;
    };
    let (rows, cols) = (g.rows, g.cols);
    let j = (i + 1..steps.len())
        .find(|&j| matches!(&steps[j], Step::Trans { src, .. } if *src == m1))?;
    let Step::Trans {
        rows: tr,
        cols: tc,
        dst: m2,
        ..
    } = &steps[j]
    else {
        return None;
    };
    let m2 = *m2;
    let l = (j + 1..steps.len()).find(|&l| match &steps[l] {
        Step::Group(g) => g.members.iter().any(|m| match &m.op {
            COp::Store { src, .. } => matches!(src, Src::Mat { off, .. } if *off == m2),
            _ => false,
        }),
        _ => false,
    })?;
    let Step::Group(h) = &steps[l] else {
        return None;
    };
    let [s] = h.members.as_slice() else {
        return None;
    };
    let COp::Store {
        param: po,
        idx: io,
        rank: 2,
        src: Src::Mat {
            rows: sr, cols: sc, ..
        },
    } = &s.op
    else {
        return None;
    };
    let dtype = k.params[*pi].dtype;
    let ok = (*tr, *tc) == (rows, cols)
        && (*sr, *sc, h.rows, h.cols) == (cols, rows, cols, rows)
        && uses.get(&m1) == Some(&2)
        && uses.get(&m2) == Some(&2)
        && k.params[*po].dtype == dtype
        && matches!(dtype, DType::F32 | DType::BF16)
        && !m.round_bf16;
    if !ok {
        return None;
    }
    let bf16 = dtype == DType::BF16;
    let t = Transpose {
        src: *pi,
        src_idx: ii.clone(),
        dst: *po,
        dst_idx: io.clone(),
        rows,
        cols,
        other: if bf16 {
            chunk::round_bf16(*other)
        } else {
            *other
        },
        bf16,
    };
    Some((t, j, l))
}

/// Runs one program's transpose.
pub(crate) fn run(t: &Transpose, sc: &[f64], args: &[Buffer]) {
    let (bs, bd) = (&args[t.src], &args[t.dst]);
    // Source tile `rows × cols`, destination tile `cols × rows`: d[a][b] = s[b][a].
    let s = rect(bs, &t.src_idx, sc, t.rows, t.cols);
    let d = rect(bd, &t.dst_idx, sc, t.cols, t.rows);
    if d.is_empty() {
        return;
    }
    let size = if t.bf16 { 2 } else { 4 };
    let end = |r: &Rect, n: usize| r.base + ((r.r.1 - 1) * r.stride + r.c.1) as i64 <= n as i64;
    assert!(
        end(&d, bd.len / size) && d.base + (d.r.0 * d.stride + d.c.0) as i64 >= 0,
        "fused store out of bounds"
    );
    let inside =
        !s.is_empty() && s.c.0 <= d.r.0 && d.r.1 <= s.c.1 && s.r.0 <= d.c.0 && d.c.1 <= s.r.1;
    if !inside {
        return edge(t, &s, &d, bs, bd);
    }
    assert!(end(&s, bs.len / size), "fused load out of bounds");
    let (a0, b0) = (d.r.0, d.c.0);
    let (na, nb) = (d.r.1 - a0, d.c.1 - b0);
    let so = (s.base + (b0 * s.stride + a0) as i64) as usize;
    let dof = (d.base + (a0 * d.stride + b0) as i64) as usize;
    // SAFETY: every element read is `s[b][a]` for `(a, b)` in the destination window, which
    // lies inside the source window (`inside`), whose last element is in bounds (asserted);
    // every element written is in the destination window (asserted). Programs of a launch
    // write disjoint elements, and the destination is never a loaded parameter.
    unsafe {
        if t.bf16 {
            let (sp, dp) = (
                (bs.ptr as *const u16).add(so),
                (bd.ptr as *mut u16).add(dof),
            );
            copy_bf16(sp, s.stride, dp, d.stride, na, nb);
        } else {
            let (sp, dp) = (
                (bs.ptr as *const f32).add(so),
                (bd.ptr as *mut f32).add(dof),
            );
            copy_f32(sp, s.stride, dp, d.stride, na, nb);
        }
    }
}

/// The transpose of a plan whose other steps are all scalar: a launch of it may run as one
/// whole-tensor transpose ([`run_whole`]) when its programs together are one.
pub(crate) fn whole(steps: &[Step]) -> Option<Transpose> {
    let mut found = None;
    for st in steps {
        match st {
            Step::Scalar { .. } => {}
            Step::Transpose(t) if found.is_none() => found = Some(t.clone()),
            _ => return None,
        }
    }
    found
}

/// Whether the bf16 transpose keeps the tuning measured on the AMD EPYC Zen 5 of the earlier
/// sessions (passes of [`band`]'s 128–512 rows, a one-line source prefetch a step ahead in
/// `bf16_avx512`, 12 of 32 rows plain on one thread below 3/8 of the last-level cache)
/// rather than the one tb18 measured on the Intel Xeon (passes of at most a quarter of the
/// L2, no prefetch, every row streamed on one thread; since tp19 also the paired blocks of
/// [`paired`]): each won on the machine it was measured on and neither was measured on the
/// other, so AMD CPUs keep the Zen's and the others take the Xeon's.
fn zen_tuned() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::backend::cpu::simd::is_amd()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU is an AMD Zen 4 (`simd::is_zen4`: family 0x19 with AVX-512), whose whole
/// transposes ([`run_whole`]) take neither the Zen 5's tuning of [`zen_tuned`] nor the Xeon's
/// paired blocks but the Xeon's single blocks (no source prefetch, every row streamed at any
/// thread count: [`plain_rows`] none) in passes of at most half the L2 ([`band`]'s `share`
/// 2). The per-program tile copies ([`copy_bf16`]) keep [`zen_tuned`]'s choice there (not
/// measured).
///
/// Measured on a 2-vCPU KVM AMD EPYC Zen 4 (family 25 model 17, L1D 32 KiB, L2 1 MiB, L3 32
/// MiB; tr25, 2026-11-28 22:03–22:23 UTC, load 2.6–11.7 from other helpers' builds): one
/// binary with temporary switches for each choice, interleaved with main a362c42's
/// (`RAYON_NUM_THREADS=T chrt -f 50 cpu_profile transpose_bf16|transpose R C N --pool`,
/// fastest launch, µs, 3–4 rounds each). There the same process's one-thread non-temporal
/// copy of 8 MiB runs at ≈ 21–23 GB/s against the plain memcpy's 75, so every choice that
/// holds a block's stores back costs. bf16 one thread: `[1024, 4096]` main (Zen 5 tuning:
/// passes of 512 rows, prefetch, 12 of 32 rows plain) 543–755 (1498 in the lead's probe), the
/// Xeon's (pairs, passes of a quarter of the L2: 32 rows) 572–577, pairs in passes of 128
/// rows 470–530, single blocks with no prefetch in passes of 32 / 64 / 128 / 256 / 512 rows
/// 566–573 / 416–423 / 434–448 / 431–443 / 436–498, those passes of 64 with 8 / 12 / 16 / 20
/// of 32 rows plain 447–531 / 610–1288 / 593–1318 / 1051–1846 (plain rows are the
/// one-thread pathology), no streaming at all 715–1143; Zen 5 tuning with 0 plain rows
/// 507–515, with passes of 32 rows 537–541. `[4096, 1024]` (passes of 128 rows by either
/// rule) main 625–888, single blocks in passes of 64 / 128 / 256 / 512 rows 472–478 /
/// 462–472 / 459–494 / 462–485, with 8 / 12 / 16 / 20 plain 447–489 / 488–672 / 484–537 /
/// 594–1034, pairs 508–589. `[2048, 2048]` main 761–1386, passes of 64 / 128 / 256 493–552 /
/// 502–506 / 509–584. bf16 two threads (main: 8 of 32 plain): `[4096, 1024]` main 285–291
/// and single blocks 304–316 in one batch, 319–386 against 245–254 in the next (8 / 12 / 16
/// plain 265–301 / 282–390 / 274–557, 4 plain 287–334; the Zen 5 tuning with none, where
/// its prefetch runs with every line streamed, 584–602); `[1024, 4096]` main 284–339, single
/// blocks in passes of 64 rows 217–242 and 309–358 in two batches, 128 rows 224–315, 8
/// plain 222–227, 4 / 12 / 16 248–264 / 234–264 / 252–306; in two later batches (22:31–22:37,
/// 6 and 8 rounds) 8 plain rows read `[1024, 4096]` 221–285 against none's 217–358 and
/// `[4096, 1024]` 247–381 against 239–310 (and the Zen 5 tuning built from this code,
/// forced, 480–540, where main's binary read 265–473 in the same rounds: not explained), so
/// none is kept (the Xeon's choice, and simpler; neither ahead in both host states). Beyond the last-level cache
/// (`[8192, 4096]`, 30 launches) one thread main 6047–7228, passes of 32 / 64 / 128 rows
/// 5962–6266 / 5685–5965 / 6194–6582; two threads 5077–5432 against 3662–4373 / 3321–3506 /
/// 3692–3787. f32 (the same blocks as before; the Zen 5's 4 of 16 rows plain on two threads
/// go): two threads `[4096, 1024]` 630–700 → 604–635, `[1024, 4096]` 638–1169 → 617–628;
/// one thread unchanged (passes of 128 rows instead of 64 read 951–1008 against 1022–1059
/// at `[4096, 1024]` and the same at `[1024, 4096]`: not kept, within the noise). The final
/// build's A/B is at [`run_whole`].
fn zen4() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::backend::cpu::simd::is_zen4()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The L2 size [`run_whole`] sizes its bf16 passes for ([`band`]): `None` (uncapped, and the
/// Zen 5's tuning of the blocks) where [`zen_tuned`] holds except on a Zen 4 ([`zen4`]).
fn whole_l2() -> Option<usize> {
    (!zen_tuned() || zen4()).then(crate::backend::cpu::cache::l2_bytes)
}

/// The share of the L2 one bf16 pass of [`run_whole`] may take (`1 / share`): a half on a
/// Zen 4 ([`zen4`]), a quarter elsewhere ([`band`]).
fn l2_share() -> usize {
    if zen4() { 2 } else { 4 }
}

/// Source rows per pass of [`run_whole`] over `c` source columns: 64 f32 at the `avx512`
/// level (else 32), or `c / 8` bf16 (a multiple of 32) from 128 to 512: four to sixteen
/// 64-byte lines into each destination row per pass. With non-temporal stores, 32 f32 or
/// 64 bf16 rows (shorter runs into each destination row) drain ≈ 1.2–1.4× slower; the AVX2
/// 8 × 8 f32 blocks measured ≈ 10–25% slower at 64. bf16, one thread (µs per launch, passes
/// of 128 / 256 / 512): `[4096, 1024]` 277 / 285 / 308, `[8192, 512]` 276 / 274 / 298,
/// `[2048, 2048]` 372 / 364 / 344, `[1024, 4096]` 420 / 380 / 363, `[512, 8192]` 324 / 306
/// / 314.
///
/// Off AMD ([`zen_tuned`]), bf16 passes take at most a quarter of the L2 (`l2`,
/// [`cache::l2_bytes`]; `share` 4) of source rows (at least 32 rows); on a Zen 4 ([`zen4`],
/// figures there) half of it (`share` 2: 64 rows at `[1024, 4096]`, where a quarter's 32
/// measured 1.35× slower). On the 2-vCPU KVM Intel Xeon (family 6 model 207, L2 2 MiB) that is
/// 64 rows of 8 KiB instead of 512 and 128 of 4 KiB instead of 256 (tb18, 23:28–23:41 UTC
/// 2026-11-27, `uptime` 7–25: other helpers' builds; `chrt -f 50 cpu_profile
/// transpose_bf16 R C N --pool`, one thread, fastest launch's ratio to the same process's
/// yardstick, passes forced by a temporary switch, no source prefetch and no plain rows as
/// now): `[8192, 4096]` 512 / 256 / 128 / 64 / 32 rows 0.60 / 0.58–0.69 / 0.56–0.63 /
/// 0.72–1.30 / 1.05–1.13, `[1024, 4096]` 512 / 64 0.59–0.68 / 0.66–0.76; `[2048, 2048]`
/// 256 / 128 / 64 0.54–0.69 / 0.55–0.69 / 0.72–0.93: there 64 rows (an eighth of this
/// L2) read better still, but an eighth would also halve the passes at `[4096, 1024]`
/// on a 1 MiB L2, where 64 rows measured slower (above). On the Zen 5 (L2 1 MiB) the rule
/// keeps 128 rows at `[4096, 1024]` and sets 64 at `[2048, 2048]` and 32 at `[1024, 4096]`
/// where 256 and 512 measured fastest above (with the source prefetch and 12 plain rows of
/// then): not measured again there.
///
/// [`cache::l2_bytes`]: crate::backend::cpu::cache::l2_bytes
fn band(bf16: bool, c: usize, l2: Option<usize>, share: usize) -> usize {
    use crate::backend::cpu::simd::{SimdLevel, active};
    if bf16 {
        let rows = (c / 8 / 32 * 32).clamp(128, 512);
        match l2 {
            Some(l2) => rows.min((l2 / share / (c * 2).max(1) / 32 * 32).max(32)),
            None => rows,
        }
    } else if active() >= SimdLevel::Avx512 {
        64
    } else {
        32
    }
}

/// How many of each full AVX-512 block's destination rows (its last ones, of 16 f32 or 32
/// bf16) [`run_whole`] stores plainly when the rest are streamed, for `out` bytes of output
/// on `threads` threads: on two or more threads, while the output takes at most 3/4 of the
/// last-level cache, 4 of 16 (f32) or 8 of 32 (bf16); on one thread 12 of 32 for bf16 up to
/// 3/8 of it; else none (the blocks take these counts as a const parameter). The plain lines
/// stay in the cache and add to the streamed ones' rate, where streaming alone held a launch
/// at the non-temporal write rate (on two threads ≈ 86 GB/s of writes when the host lets
/// each core stream at its own rate, ≈ 44 GB/s for the whole machine when it does not: a
/// state the host flips within minutes). Measured (`chrt -f 50 cpu_profile
/// transpose|transpose_bf16 R C 300 --pool`, fastest launch, µs, all streamed → mixed).
/// f32 two threads, per-core state: `[4096, 1024]` 201–202 → 181–190 (the same run's
/// two-thread non-temporal copy 192–199), `[1024, 4096]` 198–202 → 178–182, `[2048, 2048]`
/// 198–202 → 177–181; machine-wide state: 381 → 309–319, 380 → 310, 373 → 293 (the
/// non-temporal copy 378–386); 6 of 16 plain read 271–293 there but 179–192 in the other
/// state, 8 of 16 no better, 2 worse; one thread 4 of 16 lost (432 → 491 at `[4096, 1024]`).
/// bf16 one thread: `[4096, 1024]` 222–230 → 207–222, `[1024, 4096]` 233–240 → 214–217,
/// `[2048, 2048]` 247–254 → 228–238 in some runs, unchanged in others (16, 20 or 26 of 32
/// slower). bf16 two threads, machine-wide state, 0 / 4 / 8 / 12 / 16 of 32 plain:
/// `[4096, 1024]` 202 / 175 / 156 / 136 / 143, and 12 read 203 → 134 at `[1024, 4096]`,
/// 210 → 143 at `[2048, 2048]`; per-core state 127–139 / 130–145 / 124–141 / 132–157: 12
/// lost up to 20 % there, 8 none beyond the noise. Beyond the cache plain lines lose:
/// `[8192, 4096]` f32 two threads 5.7 → 6.1 ms, bf16 one thread 4.4–4.5 → 5.4–5.5 ms, two
/// 2.0–2.1 → 2.7–2.8 ms.
///
/// On a 2-vCPU KVM Intel Xeon (family 6 model 207, L2 2 MiB per core; the figures above are
/// the AMD EPYC Zen 5's) under load (tt17, 20:00–20:05 UTC 2026-11-27, `uptime` 18–21: the
/// same process's 16 MiB two-thread yardstick 700–1500 µs where bench run B had ≈ 218) the
/// bf16 one-thread 12 of 32 is shape-dependent (`chrt -f 50 cpu_profile transpose_bf16 R
/// C 200 --pool`, one thread, fastest launch, the count forced by a temporary switch in
/// one binary, 2–8 interleaved rounds; ratio to the same process's yardstick): 0 / 12 of
/// 32 plain `[4096, 1024]` 924–1227 µs (0.55–0.74; under 1020 µs in 6 of 8 rounds) /
/// 1062–1349 µs (0.57–0.65; never under 1060), 4 and 8 of 32 940–1286 and 1060–1345,
/// `[1024, 4096]` 1137–1306 (0.55–0.61) / 1062–1113 (0.63–0.65), `[2048, 2048]` 1052–1091 /
/// 1044–1097, `[8192, 512]` 906–960 / 920–960: the count was kept (a loss at `[1024,
/// 4096]`, and `[4096, 1024]` bimodal in both). One `perf record -e cpu-clock` each at
/// `[4096, 1024]` put 15.5 % of `bf16_avx512`'s samples on the instruction after a block's
/// first source prefetch with 12 plain rows, 7.3 % with none (likely the store side full
/// with the plain lines' reads for ownership). f32 two threads, 0 / 4 / 8 / 16 of 16
/// plain (`transpose 4096 1024`, three rounds): 1737–1773 / 1702–1849 / 1011–2364 /
/// 4340–6933 µs: every row plain is 2.5–4× slower (likely: the 16 KiB-strided lines take
/// a read for ownership each, and a block's 16 destination lines share one L1 set).
///
/// The bf16 one-thread 12 of 32 is kept only on AMD ([`zen_tuned`]) since tb18 (on the same Xeon, with [`band`]'s
/// passes and no source prefetch as now, same runs as there, one thread, 12 / 0 of 32
/// plain): `[4096, 1024]` 0.64–0.78 / 0.69–0.83, `[1024, 4096]` 0.61–0.73 / 0.60–0.73,
/// `[2048, 2048]` 0.59–0.71 / 0.61–0.93; the Zen 5's gain for it (above) was not measured
/// again.
///
/// Off AMD ([`zen_tuned`]) none at any thread count since tr21: on the same Xeon, two threads
/// (`RAYON_NUM_THREADS=2 chrt -f 50 cpu_profile transpose|transpose_bf16 R C 200 --pool`,
/// the count forced by a temporary switch in one build, interleaved with main a5b9485's
/// binary, 2026-11-28 09:01–09:11 UTC, `uptime` 4.6–10.6 from other helpers' work: many
/// launches ran with the second thread waiting for a CPU, so the fastest launch of each
/// process, fastest / median of the rounds where both threads ran, µs, 4 (f32) or 8 (bf16)
/// of the block's rows plain → none): f32 `[4096, 1024]` 827 / 865 → 742 / 767, `[1024,
/// 4096]` 893 / 936 → 707 / 815 (11 rounds each); bf16 `[4096, 1024]` 375–585 → 378–477,
/// `[1024, 4096]` 400–532 → 400–478 (fastest of each batch); the A/B of the final build is
/// at [`run_whole`].
fn plain_rows(bf16: bool, out: usize, threads: usize, zen: bool) -> usize {
    let llc = crate::backend::cpu::cache::last_level_bytes();
    match (bf16, threads) {
        _ if !zen => 0,
        (false, 2..) if out <= llc / 4 * 3 => 4,
        (true, 2..) if out <= llc / 4 * 3 => 8,
        (true, _) if out <= llc / 8 * 3 => 12,
        _ => 0,
    }
}

/// `d[a][b] = s[b][a]` over the whole `[r, c]` source and `[c, r]` destination of `t`
/// (their shapes checked by the caller), the destination rows split among rayon's threads in
/// bands; each band walks the source in passes of [`band`] whole rows (sequential reads)
/// and writes one short run into each of its destination rows per pass.
///
/// Two threads with no plain rows off AMD ([`plain_rows`], tr21), A/B of the final build
/// against main a5b9485's `cpu_profile`, interleaved, five batches 09:16–09:42 UTC
/// 2026-11-28, `uptime` 2.9–12.2 from other helpers' work (`RAYON_NUM_THREADS=2 chrt -f 50
/// cpu_profile transpose|transpose_bf16 R C 200 --pool`; each process's fastest launch,
/// rounds where the second thread waited for a CPU (over 1.4× the fastest) left out: µs
/// fastest / median, then the median ratio to the same process's yardstick): f32 `[4096,
/// 1024]` 698 / 859 (0.85) → 736 / 785 (0.94), `[1024, 4096]` 774 / 951 (0.79) → 747 / 841
/// (0.90); bf16 `[4096, 1024]` 372 / 480 (0.73) → 370 / 420 (0.85), `[1024, 4096]` 381 /
/// 408 (0.85) → 349 / 440 (0.85); beyond the cache (unchanged code: no plain rows there)
/// `[8192, 4096]` f32 6667 / 7620 → 6521 / 7136, bf16 3451 / 3468 → 3405 / 3616. Tried
/// in the same runs as [`plain_rows`]' figures and not kept (medians of five rounds, µs, all
/// streamed): each thread a contiguous half of the source rows instead of the column bands
/// below, f32 `[4096, 1024]` 925 and `[1024, 4096]` 914 against the bands' 865 / 922 with
/// 4 plain rows, bf16 516 / 438 against 413 / 442 (no plain rows as well: 461 / 408); f32
/// blocks in pairs (as bf16's `x86::bf16_avx512`) on two threads 913 / 926 against 865 /
/// 922; f32 source prefetch 2 or 8 steps ahead instead of [`AHEAD`]'s 4, 869 / 938 and 846
/// / 954 against 865 / 922 (min 716 / 764 and 814 / 839 against 790 / 782); 12 of 32 bf16
/// rows plain 565 / 486 against 413 / 442.
///
/// A Zen 4's tuning ([`zen4`]), A/B of the final build against main a362c42's `cpu_profile`
/// on the Zen 4 there (tr25, interleaved, 2026-11-28 22:27–22:38 UTC, load 2.4–5.7 from
/// other helpers' builds; `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile transpose_bf16|transpose
/// R C 200 --pool` (`[8192, 4096]`: 30), fastest launch, µs, 4–8 rounds, main → this): bf16
/// one thread `[1024, 4096]` 615–724 → 420–427, `[4096, 1024]` 687–1259 → 472–630; two
/// threads bimodal with the host's state: `[1024, 4096]` 270–334 → 310–349 in the batches
/// of 22:28–22:29 (a loss of up to 15 %) but 268–381 → 217–308 in that of 22:36 (the
/// switch build's defaults, the same code), `[4096, 1024]` 289–587 → 237–354, `[2048, 2048]`
/// (22:36) 342–413 → 258–269; beyond the last-level cache `[8192, 4096]` one thread
/// 5936–6099 → 5617–6392, two threads 4792–5206 → 2953–3194. f32 one thread unchanged code
/// (`[4096, 1024]` 959–1031 → 931–1041, `[1024, 4096]` 977–1009 → 977–1008); two threads
/// (no plain rows) `[4096, 1024]` 459–583 → 457–547, `[1024, 4096]` 498–730 → 450–600.
pub(crate) fn run_whole(t: &Transpose, args: &[Buffer]) {
    run_whole_l2(t, args, whole_l2(), None)
}

/// Whether the bf16 AVX-512 blocks with streamed output go in pairs (`x86::bf16_avx512`) for
/// `out` bytes of output: off AMD (`zen` false, [`zen_tuned`]) while the output takes at
/// most 3/4 of the last-level cache, the bound [`plain_rows`] uses. Beyond it pairs measured
/// no gain (`[8192, 4096]` one thread, figures at `bf16_avx512`), so the single blocks stay.
/// Never on a Zen 4 ([`zen4`]): pairs lost there (figures at [`zen4`]).
fn paired(out: usize, zen: bool) -> bool {
    !zen && !zen4() && out <= crate::backend::cpu::cache::last_level_bytes() / 4 * 3
}

/// [`run_whole`] with bf16 passes sized for an L2 of `l2` bytes ([`band`], with this CPU's
/// [`l2_share`]; `None`: the Zen 5's tuning, of the blocks as well) and the bf16 blocks
/// paired as `pair` says (`None`: as [`paired`] says).
fn run_whole_l2(t: &Transpose, args: &[Buffer], l2: Option<usize>, pair: Option<bool>) {
    let (bs, bd) = (&args[t.src], &args[t.dst]);
    let (r, c) = (bs.dims()[0], bs.dims()[1]);
    let size = if t.bf16 { 2 } else { 4 };
    assert!(
        r * c * size <= bs.len && r * c * size <= bd.len,
        "fused transpose out of bounds"
    );
    let (sp, dp) = (bs.ptr as usize, bd.ptr as usize);
    let pass = band(t.bf16, c, l2, l2_share());
    // Non-temporal stores need aligned rows: every destination row starts at the same offset
    // in its cache line, and the first `lead` columns (up to the first line boundary) take
    // plain stores. From 1 MiB (f32, one thread, 1 MiB L2: plain stores measured faster up to
    // 768 KiB, non-temporal ones from 896 KiB, 2× faster from 1 MiB to 16 MiB).
    let lead = (64 - dp % 64) % 64 / size;
    let nt = dp % size == 0 && (r * size) % 64 == 0 && lead <= r && r * c * size >= 1 << 20;
    let lead = if nt { lead } else { 0 };
    let threads = rayon::current_num_threads();
    // `l2` is `None` exactly for the Zen 5's tuning (`run_whole`), of the blocks as well.
    let zen = l2.is_none();
    let keep = plain_rows(t.bf16, r * c * size, threads, zen);
    let pair = !zen && pair.unwrap_or_else(|| paired(r * c * size, zen));
    let copy = |a0: usize, a1: usize, b0: usize, nb: usize, nt: bool| {
        // SAFETY: rows b0..b0 + nb of the source at columns a0..a1 and rows a0..a1 of the
        // destination at columns b0..b0 + nb are inside the two tensors (asserted); the
        // destination is never a loaded parameter, and parts write disjoint rows; with `nt`,
        // `d` is 64-byte aligned and so is each row's stride.
        unsafe {
            if t.bf16 {
                let s = (sp as *const u16).add(b0 * c + a0);
                let d = (dp as *mut u16).add(a0 * r + b0);
                let keep = if nt { keep } else { 0 };
                copy_bf16_nt(s, c, d, r, a1 - a0, nb, nt, keep, zen, nt && pair);
            } else {
                let s = (sp as *const f32).add(b0 * c + a0);
                let d = (dp as *mut f32).add(a0 * r + b0);
                copy_f32_nt(s, c, d, r, a1 - a0, nb, nt, if nt { keep } else { 0 });
            }
        }
    };
    // The source columns before the first cache-line boundary (the same in every row when a
    // row is a whole number of lines): the blocks start after them, so each block's row
    // loads are whole lines (glibc's large allocations start 16 bytes past a page boundary;
    // blocks loading rows split across two lines measured 1.5× slower).
    let skew = if (c * size) % 64 == 0 && sp % size == 0 {
        ((64 - sp % 64) % 64 / size).min(c)
    } else {
        0
    };
    // Streaming stores write whole lines only: the columns after the last line boundary
    // that a whole line follows (with a `lead`, the rest of the line that the next
    // destination row's lead ends) take plain stores, as the lead does. (Streaming the
    // first part of that line and storing the rest plainly left one line per destination
    // row written both ways.)
    let body = if nt { r - (r - lead) % (64 / size) } else { r };
    let span = |a0: usize, a1: usize| {
        if lead > 0 {
            copy(a0, a1, 0, lead, false);
        }
        for b0 in (lead..body).step_by(pass) {
            copy(a0, a1, b0, pass.min(body - b0), nt);
        }
        if body < r {
            copy(a0, a1, body, r - body, false);
        }
    };
    let part = |a0: usize, a1: usize| {
        if a0 < skew && skew < a1 {
            span(a0, skew);
            span(skew, a1);
        } else {
            span(a0, a1);
        }
        #[cfg(target_arch = "x86_64")]
        if nt {
            // SAFETY: SSE is part of x86_64; orders the non-temporal stores before the
            // launch returns (or the rayon task ends).
            unsafe { core::arch::x86_64::_mm_sfence() };
        }
    };
    if threads == 1 || r * c < 1 << 16 {
        return part(0, c);
    }
    use rayon::prelude::*;
    // Bands of whole 16-column steps after `skew`; the first band also takes the skew.
    // Tried (tt17, under load as in `plain_rows`, `chrt -f 50 env RAYON_NUM_THREADS=2
    // cpu_profile transpose R C 200 --pool`, five interleaved rounds, ratio to the same
    // process's yardstick, median): each thread a contiguous half of the passes over all
    // columns (both write every destination row, in different lines) `[4096, 1024]`
    // 0.83–0.87 (0.84) against these bands' 0.78–0.82 (0.81), `[1024, 4096]` 0.79–1.24
    // (0.82) against 0.83–1.11 (0.84); these bands with the second one starting half-way
    // through the passes (the two threads reading different source rows) 0.47–0.82 (0.78)
    // and 0.66–0.82 (0.77). Neither beyond the noise: the split is not what holds two
    // threads (as `--halves` found).
    let per = (c - skew).div_ceil(threads).next_multiple_of(16);
    (0..(c - skew).div_ceil(per)).into_par_iter().for_each(|i| {
        let a0 = if i == 0 { 0 } else { skew + i * per };
        part(a0, (skew + (i + 1) * per).min(c));
    });
}

/// A destination window not inside the transposed source window: element by element, with
/// `other` where the source is out of bounds.
fn edge(t: &Transpose, s: &Rect, d: &Rect, bs: &Buffer, bd: &Buffer) {
    let mut v = [0f32];
    for a in d.r.0..d.r.1 {
        for b in d.c.0..d.c.1 {
            let inside = (s.r.0..s.r.1).contains(&b) && (s.c.0..s.c.1).contains(&a);
            if inside {
                chunk::load(bs, (s.base + (b * s.stride + a) as i64) as usize, &mut v);
            } else {
                v[0] = t.other;
            }
            let at = (d.base + (a * d.stride + b) as i64) as usize;
            chunk::store(bd, at, chunk::V::S(&v), 0, 1);
        }
    }
}

/// `d[a · ds + b] = s[b · ss + a]` for `a < na`, `b < nb`, at the active SIMD level.
///
/// # Safety
/// Every such element of `s` is readable and of `d` writable; the two do not overlap.
unsafe fn copy_f32(s: *const f32, ss: usize, d: *mut f32, ds: usize, na: usize, nb: usize) {
    unsafe { copy_f32_nt(s, ss, d, ds, na, nb, false, 0) }
}

/// As [`copy_f32`]; with `nt` (at the AVX2 level) the full 8 × 8 blocks' rows are written
/// with non-temporal stores, which need `d` and `ds` 32-byte aligned and a later
/// `_mm_sfence` before another thread reads them; at the `avx512` level the last `keep`
/// rows of each full 16 × 16 block take plain stores all the same ([`plain_rows`]).
///
/// # Safety
/// As [`copy_f32`].
#[allow(clippy::too_many_arguments)]
unsafe fn copy_f32_nt(
    s: *const f32,
    ss: usize,
    d: *mut f32,
    ds: usize,
    na: usize,
    nb: usize,
    nt: bool,
    keep: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512 {
        // SAFETY: the active level is at most the detected one: AVX-512F is present.
        return unsafe {
            match (nt, keep) {
                (true, 4) => x86::f32_avx512::<true, 4>(s, ss, d, ds, na, nb),
                (true, _) => x86::f32_avx512::<true, 0>(s, ss, d, ds, na, nb),
                _ => x86::f32_avx512::<false, 0>(s, ss, d, ds, na, nb),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 is present.
        return unsafe {
            if nt {
                x86::f32_avx2::<true>(s, ss, d, ds, na, nb)
            } else {
                x86::f32_avx2::<false>(s, ss, d, ds, na, nb)
            }
        };
    }
    let _ = (nt, keep);
    unsafe { blocked(s, ss, d, ds, na, nb, 0, 0, |x: f32| x) }
}

/// As [`copy_f32`] for bf16 bit patterns, NaNs made quiet.
///
/// # Safety
/// As [`copy_f32`].
unsafe fn copy_bf16(s: *const u16, ss: usize, d: *mut u16, ds: usize, na: usize, nb: usize) {
    unsafe { copy_bf16_nt(s, ss, d, ds, na, nb, false, 0, zen_tuned(), false) }
}

/// As [`copy_bf16`], with `nt` and `keep` as in [`copy_f32_nt`] (16-byte alignment; `keep`
/// of each 32 × 32 block's rows); `zen` picks the AVX-512 blocks' tuning ([`zen_tuned`]:
/// the Zen 5's source prefetch), `pair` (with `nt`, not with `zen`) pairs of blocks writing
/// two lines into each destination row at once ([`paired`], `x86::bf16_avx512`).
///
/// # Safety
/// As [`copy_f32`].
#[allow(clippy::too_many_arguments)]
unsafe fn copy_bf16_nt(
    s: *const u16,
    ss: usize,
    d: *mut u16,
    ds: usize,
    na: usize,
    nb: usize,
    nt: bool,
    keep: usize,
    zen: bool,
    pair: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        // SAFETY: AVX-512F (the active level is at most the detected one) and BW present.
        return unsafe {
            use x86::bf16_avx512 as b;
            match (nt, keep, zen, pair) {
                (true, 12, _, _) => b::<true, 12, true, false>(s, ss, d, ds, na, nb),
                (true, 8, true, _) => b::<true, 8, true, false>(s, ss, d, ds, na, nb),
                (true, _, true, _) => b::<true, 0, true, false>(s, ss, d, ds, na, nb),
                (true, _, false, true) => b::<true, 0, false, true>(s, ss, d, ds, na, nb),
                (true, _, false, false) => b::<true, 0, false, false>(s, ss, d, ds, na, nb),
                (false, _, true, _) => b::<false, 0, true, false>(s, ss, d, ds, na, nb),
                (false, _, false, _) => b::<false, 0, false, false>(s, ss, d, ds, na, nb),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: as above.
        return unsafe {
            if nt {
                x86::bf16_avx2_16::<true>(s, ss, d, ds, na, nb)
            } else {
                x86::bf16_avx2_16::<false>(s, ss, d, ds, na, nb)
            }
        };
    }
    let _ = (nt, keep, zen, pair);
    unsafe { blocked(s, ss, d, ds, na, nb, 0, 0, quiet) }
}

/// A bf16 bit pattern with a NaN made quiet.
#[inline(always)]
fn quiet(x: u16) -> u16 {
    if x & 0x7FFF > 0x7F80 { x | 0x0040 } else { x }
}

/// The portable copy (and the SIMD kernels' edges) of the part `a ≥ a0` or `b ≥ b0`… of the
/// window: `d[a][b] = f(s[b][a])` in 8 × 8 blocks, skipping blocks with `a < a0` and `b < b0`
/// (those the caller's full 8 × 8 kernels did).
///
/// # Safety
/// As [`copy_f32`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn blocked<T: std::marker::Copy>(
    s: *const T,
    ss: usize,
    d: *mut T,
    ds: usize,
    na: usize,
    nb: usize,
    a0: usize,
    b0: usize,
    f: impl Fn(T) -> T,
) {
    for ab in (0..na).step_by(8) {
        for bb in (0..nb).step_by(8) {
            if ab + 8 <= a0 && bb + 8 <= b0 {
                continue;
            }
            for a in ab..(ab + 8).min(na) {
                for b in bb..(bb + 8).min(nb) {
                    // SAFETY: a < na and b < nb (the caller's contract).
                    unsafe { *d.add(a * ds + b) = f(*s.add(b * ss + a)) };
                }
            }
        }
    }
}

/// How many 16-column steps ahead [`x86::f32_avx512`] (and `f32_avx2`, once per line)
/// prefetches the source rows of its blocks (`bf16_avx2_16`: one line): measured on `[4096,
/// 1024]` and `[1024, 4096]` (Zen 5), 2–4 steps ≈ 10–20% faster than none (bf16 `[1024,
/// 4096]` ≈ 15%). `bf16_avx512` prefetches only on AMD ([`zen_tuned`]) since tb18: on the Intel Xeon of
/// [`band`] (same runs, one thread, passes as [`band`] sets them here) its one-line prefetch
/// one step ahead read `[4096, 1024]` 0.61–0.65 against none's 0.64–0.78, `[1024, 4096]`
/// 0.59–0.70 against 0.61–0.66 (2 steps ahead 0.56–0.60, an L2 prefetch 2 or 4 steps ahead
/// 0.56–0.67), and one `perf record -e cpu-clock` (`[1024, 4096]`, main's build) put about
/// half of the kernel's samples on its 32 prefetches and the address arithmetic between
/// them (likely: waiting for fill buffers that the block's streamed lines hold). Beyond the cache (`[8192, 4096]`, one thread) none with passes of 64
/// rows read 0.72–1.30 and one step ahead 0.98–1.28: the same within this load's noise.
/// The Zen 5 figure for bf16 (≈ 15 % for 2–4 steps) was not measured again.
/// Prefetching the block each group visits `AHEAD` steps later in its staggered order
/// (also across its wrap to column 0, and the next pass's rows at the pass's end, where
/// the `ahead < na` test here prefetches nothing) lost on two threads (tt17, under load as in [`plain_rows`],
/// five rounds, median ratio to the yardstick): `[4096, 1024]` 0.81 → 0.72 (8 steps: 0.70),
/// `[1024, 4096]` 0.84 → 0.80 (0.70).
#[cfg(target_arch = "x86_64")]
const AHEAD: usize = 4;

/// Column steps by which [`x86::bf16_avx512`] staggers its groups of 32 source rows:
/// measured on one thread (µs per launch, none / 16 / 32 / 64): `[1024, 4096]` 317–344 /
/// 258–259 / 248–256 / 252–253, `[2048, 2048]` 324–331 / 265–267 / 264–274 / 264–272,
/// `[4096, 1024]` 259–266 / 245–251 / 246–248 / 242–245. [`x86::f32_avx512`] staggers its
/// groups of 16 rows by as much (a pass of 64 rows has four groups, so steps 0–3): one
/// thread, fastest of 300 launches, µs, none → staggered, `[1024, 4096]` 463–544 → 422–444,
/// `[2048, 2048]` 441–470 → 409–439, `[4096, 1024]` 425–433 → 406–424; two threads
/// `[4096, 1024]` 222–232 → 201–202.
#[cfg(target_arch = "x86_64")]
const SKEW: usize = 32;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{AHEAD, SKEW};
    use core::arch::x86_64::*;

    /// 32 rows of 32 bf16 values, 64-byte aligned: the first block of a pair in
    /// `bf16_avx512`.
    #[repr(align(64))]
    struct Stage([u16; 1024]);

    /// Prefetches into L1 the cache line at `p` of each of `N` rows `ss` elements apart.
    ///
    /// # Safety
    /// Every `p + i · ss`, `i < N`, lies inside the allocation `p` points into (prefetches
    /// themselves never fault).
    #[inline(always)]
    unsafe fn prefetch_rows<T, const N: usize>(p: *const T, ss: usize) {
        for i in 0..N {
            // SAFETY: in the allocation (the caller's contract).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(i * ss) as *const i8) };
        }
    }

    /// [`super::copy_f32`] with 8 × 8 AVX register transposes over the full blocks.
    ///
    /// # Safety
    /// AVX2 present; as [`super::copy_f32`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn f32_avx2<const NT: bool>(
        s: *const f32,
        ss: usize,
        d: *mut f32,
        ds: usize,
        na: usize,
        nb: usize,
    ) {
        let (a8, b8) = (na & !7, nb & !7);
        for a in (0..a8).step_by(8) {
            // One prefetch per 64-byte line, as far ahead in columns as `f32_avx512`'s.
            let ahead = a + 16 * AHEAD;
            for b in (0..b8).step_by(8) {
                if a % 16 == 0 && ahead < na {
                    // SAFETY: rows b..b+8 of `s` at column `ahead` < na: inside the window.
                    unsafe { prefetch_rows::<_, 8>(s.add(b * ss + ahead), ss) };
                }
                // SAFETY: rows b..b+8 of `s` at columns a..a+8, rows a..a+8 of `d` at
                // columns b..b+8: inside the window (a + 8 ≤ na, b + 8 ≤ nb).
                unsafe { block_f32::<NT>(s.add(b * ss + a), ss, d.add(a * ds + b), ds) };
            }
        }
        unsafe { super::blocked(s, ss, d, ds, na, nb, a8, b8, |x: f32| x) }
    }

    /// [`super::copy_f32_nt`] with 16 × 16 AVX-512 register transposes over the full blocks
    /// (one 64-byte store per destination row and block; with `NT` the last `KEEP` rows of
    /// each block plain), each group of 16 rows starting [`SKEW`] column steps or fewer after
    /// the one above it (as in `bf16_avx512`), the edges (fewer than 16 rows or columns) in
    /// masked 16 × 16 blocks.
    ///
    /// # Safety
    /// AVX-512F present; as [`super::copy_f32_nt`] (with `NT`, `d` and `ds` 64-byte aligned).
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn f32_avx512<const NT: bool, const KEEP: usize>(
        s: *const f32,
        ss: usize,
        d: *mut f32,
        ds: usize,
        na: usize,
        nb: usize,
    ) {
        let (a16, b16) = (na & !15, nb & !15);
        let steps = a16 / 16;
        for t in 0..steps {
            for b in (0..b16).step_by(16) {
                // Staggered as in `bf16_avx512`, by groups of 16 rows.
                let a = (t + b / 16 % SKEW) % steps * 16;
                let ahead = a + 16 * AHEAD;
                if ahead < na {
                    // SAFETY: rows b..b+16 of `s` at column `ahead` < na: inside the window.
                    unsafe { prefetch_rows::<_, 16>(s.add(b * ss + ahead), ss) };
                }
                // SAFETY: rows b..b+16 of `s` at columns a..a+16, rows a..a+16 of `d` at
                // columns b..b+16: inside the window.
                unsafe {
                    let (s, d) = (s.add(b * ss + a), d.add(a * ds + b));
                    block16_f32::<NT, false, KEEP>(s, ss, d, ds, 16, 16)
                };
            }
        }
        // The two strips left, in masked blocks (plain stores): rows a16.. of `d` (all
        // columns), and rows ..a16 at columns b16...
        // SAFETY: each block's rows and columns are inside the window (masked to it).
        unsafe {
            if a16 < na {
                for b in (0..nb).step_by(16) {
                    let (s, d) = (s.add(b * ss + a16), d.add(a16 * ds + b));
                    block16_f32::<false, true, 0>(s, ss, d, ds, na - a16, (nb - b).min(16));
                }
            }
            if b16 < nb {
                for a in (0..a16).step_by(16) {
                    let (s, d) = (s.add(b16 * ss + a), d.add(a * ds + b16));
                    block16_f32::<false, true, 0>(s, ss, d, ds, 16, nb - b16);
                }
            }
        }
    }

    /// The lane mask of the first `n` (≤ 32) lanes.
    #[inline(always)]
    fn lanes(n: usize) -> u32 {
        if n >= 32 { !0 } else { (1u32 << n) - 1 }
    }

    /// `d[i][j] = s[j][i]` for a 16 × 16 block; with `PART` only for `i < na`, `j < nb`
    /// (each at most 16: masked loads and stores, plain even with `NT`). With `NT` rows
    /// `i < 16 - KEEP` are streamed, the others stored plainly.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    unsafe fn block16_f32<const NT: bool, const PART: bool, const KEEP: usize>(
        s: *const f32,
        ss: usize,
        d: *mut f32,
        ds: usize,
        na: usize,
        nb: usize,
    ) {
        unsafe {
            let (lm, sm) = (lanes(na) as __mmask16, lanes(nb) as __mmask16);
            let r: [__m512; 16] = core::array::from_fn(|i| {
                if !PART {
                    _mm512_loadu_ps(s.add(i * ss))
                } else if i < nb {
                    _mm512_maskz_loadu_ps(lm, s.add(i * ss))
                } else {
                    _mm512_setzero_ps()
                }
            });
            // Within each 128-bit lane: pairs of rows interleaved, then groups of four rows.
            let t: [__m512; 16] = core::array::from_fn(|i| {
                let (x, y) = (r[i & !1], r[i | 1]);
                if i & 1 == 0 {
                    _mm512_unpacklo_ps(x, y)
                } else {
                    _mm512_unpackhi_ps(x, y)
                }
            });
            // u[4j + m], lane k: rows 4j..4j+4 at column 4k + m.
            let u: [__m512; 16] = core::array::from_fn(|i| {
                let (j, m) = (i / 4, i % 4);
                let (x, y) = (t[4 * j + m / 2], t[4 * j + 2 + m / 2]);
                if m % 2 == 0 {
                    _mm512_shuffle_ps::<0x44>(x, y)
                } else {
                    _mm512_shuffle_ps::<0xEE>(x, y)
                }
            });
            let w = |i: usize, v: __m512| {
                if PART {
                    if i < na {
                        _mm512_mask_storeu_ps(d.add(i * ds), sm, v)
                    }
                } else if NT && i < 16 - KEEP {
                    _mm512_stream_ps(d.add(i * ds), v)
                } else {
                    _mm512_storeu_ps(d.add(i * ds), v)
                }
            };
            for m in 0..4 {
                let v0 = _mm512_shuffle_f32x4::<0x88>(u[m], u[4 + m]);
                let w0 = _mm512_shuffle_f32x4::<0xDD>(u[m], u[4 + m]);
                let v1 = _mm512_shuffle_f32x4::<0x88>(u[8 + m], u[12 + m]);
                let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + m], u[12 + m]);
                w(m, _mm512_shuffle_f32x4::<0x88>(v0, v1));
                w(4 + m, _mm512_shuffle_f32x4::<0x88>(w0, w1));
                w(8 + m, _mm512_shuffle_f32x4::<0xDD>(v0, v1));
                w(12 + m, _mm512_shuffle_f32x4::<0xDD>(w0, w1));
            }
        }
    }

    /// `d[i][j] = s[j][i]` for an 8 × 8 block.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block_f32<const NT: bool>(s: *const f32, ss: usize, d: *mut f32, ds: usize) {
        unsafe {
            let r = |i: usize| _mm256_loadu_ps(s.add(i * ss));
            let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
            let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
            let t0 = _mm256_unpacklo_ps(r0, r1);
            let t1 = _mm256_unpackhi_ps(r0, r1);
            let t2 = _mm256_unpacklo_ps(r2, r3);
            let t3 = _mm256_unpackhi_ps(r2, r3);
            let t4 = _mm256_unpacklo_ps(r4, r5);
            let t5 = _mm256_unpackhi_ps(r4, r5);
            let t6 = _mm256_unpacklo_ps(r6, r7);
            let t7 = _mm256_unpackhi_ps(r6, r7);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let w = |i: usize, v: __m256| {
                if NT {
                    _mm256_stream_ps(d.add(i * ds), v)
                } else {
                    _mm256_storeu_ps(d.add(i * ds), v)
                }
            };
            w(0, _mm256_permute2f128_ps::<0x20>(u0, u4));
            w(1, _mm256_permute2f128_ps::<0x20>(u1, u5));
            w(2, _mm256_permute2f128_ps::<0x20>(u2, u6));
            w(3, _mm256_permute2f128_ps::<0x20>(u3, u7));
            w(4, _mm256_permute2f128_ps::<0x31>(u0, u4));
            w(5, _mm256_permute2f128_ps::<0x31>(u1, u5));
            w(6, _mm256_permute2f128_ps::<0x31>(u2, u6));
            w(7, _mm256_permute2f128_ps::<0x31>(u3, u7));
        }
    }

    /// [`super::copy_bf16`] with 8 × 8 16-bit register transposes over the full blocks.
    ///
    /// # Safety
    /// AVX2 present; as [`super::copy_f32`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn bf16_avx2<const NT: bool>(
        s: *const u16,
        ss: usize,
        d: *mut u16,
        ds: usize,
        na: usize,
        nb: usize,
    ) {
        let (a8, b8) = (na & !7, nb & !7);
        for a in (0..a8).step_by(8) {
            for b in (0..b8).step_by(8) {
                // SAFETY: as in `f32_avx2`.
                unsafe { block_bf16::<NT>(s.add(b * ss + a), ss, d.add(a * ds + b), ds) };
            }
        }
        unsafe { super::blocked(s, ss, d, ds, na, nb, a8, b8, super::quiet) }
    }

    /// [`super::copy_bf16_nt`] with 16 × 16 AVX2 register transposes of 16-bit values over the
    /// full blocks (one 32-byte store per destination row and block), the rest by
    /// [`bf16_avx2`].
    ///
    /// # Safety
    /// AVX2 present; as [`super::copy_f32_nt`] (with `NT`, `d` and `ds` 32-byte aligned).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn bf16_avx2_16<const NT: bool>(
        s: *const u16,
        ss: usize,
        d: *mut u16,
        ds: usize,
        na: usize,
        nb: usize,
    ) {
        let (a16, b16) = (na & !15, nb & !15);
        for a in (0..a16).step_by(16) {
            // One prefetch per 64-byte line, one line ahead (as `bf16_avx512`).
            let ahead = a + 32;
            for b in (0..b16).step_by(16) {
                if a % 32 == 0 && ahead < na {
                    // SAFETY: rows b..b+16 of `s` at column `ahead` < na: inside the window.
                    unsafe { prefetch_rows::<_, 16>(s.add(b * ss + ahead), ss) };
                }
                // SAFETY: as in `f32_avx512`.
                unsafe { block16_bf16::<NT>(s.add(b * ss + a), ss, d.add(a * ds + b), ds) };
            }
        }
        // SAFETY: as in `f32_avx512`.
        unsafe {
            bf16_avx2::<NT>(s.add(a16), ss, d.add(a16 * ds), ds, na - a16, nb);
            bf16_avx2::<NT>(s.add(b16 * ss), ss, d.add(b16), ds, a16, nb - b16);
        }
    }

    /// [`super::copy_bf16_nt`] with 32 × 32 AVX-512BW register transposes of 16-bit values
    /// over the full blocks (one 64-byte store per destination row and block), each group of
    /// 32 rows starting [`SKEW`] column steps or fewer after the one above it, the edges
    /// (fewer than 32 rows or columns) in masked 32 × 32 blocks.
    ///
    /// With `PAIR` (and `NT`; [`super::paired`]) the groups go in pairs at the same column step,
    /// the first block into an L1 buffer (`Stage`, plain stores), the second storing each
    /// destination row's two lines, the first's and its own (adjacent, a 128-byte aligned pair),
    /// back to back; the bits are the single blocks'. Why (tp19, a C model of this walk, `gcc -O3
    /// -march=native`, `[4096, 1024]`, one thread, 8 MiB each way, best of 200, on the 2-vCPU KVM
    /// Intel Xeon (family 6 model 207) of [`super::band`]): the blocks' streamed stores alone
    /// (loads from an L1 buffer) took 645–724 µs, more than the same process's whole non-temporal 8
    /// MiB copy (505–626 µs in these runs), and the same stores as one sequential run 400 µs; reads
    /// alone 376–445, the arithmetic alone 235. The stores' cost is their addresses: a block's 32
    /// lines are rows `2r` bytes apart, a multiple of 128, so all share address bit 6; destination
    /// rows 64 bytes longer (an odd number of lines apart) ran the stores alone in 435 µs, 128
    /// bytes longer 673, 4 KiB longer 674, and the length of the run written into each row per pass
    /// (64 bytes to 4 KiB, stagger on or off) changed nothing. Pairs (the two lines of each row
    /// back to back) ran the stores alone in 416–516 µs and the whole walk in 683–850 against
    /// 822–1062 (four groups, 256-byte runs: 782–813, no better). Source prefetch (next-pass lines
    /// into L2, or each row's next line into L1 or L2) did not help either form. In the library
    /// (`RAYON_NUM_THREADS=T chrt -f 50 cpu_profile transpose_bf16 R C 200 --pool [--into]`,
    /// fastest launch's ratio to the same process's yardstick, base = main 713eaa3 interleaved with
    /// this code, 02:58–03:00 UTC 2026-11-28, `uptime` 3.8–6.2 from other helpers' work, medians of
    /// 6 rounds (`--into` 4)): one thread `[4096, 1024]` 0.64–0.87 (0.78) → 0.68–0.98 (0.89),
    /// `[1024, 4096]` 0.66–0.87 (0.80) → 0.89–1.02 (0.97); `--into` 0.68–0.76 (0.72) → 0.70–0.95
    /// (0.77), 0.70–0.83 (0.77) → 0.82–0.96 (0.90); two threads 0.61–0.74 (0.70) → 0.70–0.90
    /// (0.80), 0.59–0.68 (0.66) → 0.69–1.01 (0.74); `--into` 0.63–0.69 (0.66) → 0.68–0.74 (0.71),
    /// 0.59–0.66 (0.64) → 0.76–0.83 (0.82). Passes of other heights with pairs (one thread, two
    /// rounds, rows 64 / 128 / 256): `[4096, 1024]` 0.80–0.81 / 0.77–0.94 / 0.62–0.69, `[1024,
    /// 4096]` 0.89–0.93 / 0.73–0.74 / 0.60–0.68, so [`super::band`]'s quarter of the L2 stays (128
    /// and 64 rows here). Not kept: the same pairing of the f32 16 × 16 blocks (one thread `[4096,
    /// 1024]` 0.92–0.95 → 0.80–0.88, `[1024, 4096]` 0.90–0.93 → 0.77–0.85; two threads within the
    /// noise), and pairs beyond the last-level cache: `[8192, 4096]` one thread, 30 launches, 11
    /// rounds, 0.89–1.46 (median 1.14) against the single blocks' 1.02–1.39 (1.25), no gain at
    /// best. Not measured on a Zen 5 (AMD keeps the single blocks, [`super::zen_tuned`]).
    ///
    /// Per byte against `f32_avx512` (tt17, one thread, under load as in
    /// [`super::plain_rows`], fastest launch): in L2 (`cpu_profile transpose 64 1024` and
    /// `transpose_bf16 128 1024`, 5000 launches `--into`, thread pinned, less the `[1, 1]`
    /// launch's 0.5–0.6 µs) 10.8–11.2 µs against 12.8–13.1 µs for the same 512 KiB moved: 1.2×
    /// the time; at 8 MiB each way (`R C 300 --pool`, three rounds) bf16 `[4096, 1024]`
    /// 1052–1231 µs, `[1024, 4096]` 1054–1233, f32 `[2048, 1024]` 737–795, `[4096, 512]`
    /// 751–798, `[1024, 2048]` 749–803: 1.4–1.55×. With no plain rows bf16 `[4096, 1024]`
    /// read 924–1016 µs in most rounds (1.25–1.3× f32, about the in-L2 1.2×), so the rest of
    /// its loss there looks like the 12 plain rows of 32 that one thread stores (see
    /// `plain_rows`: not beyond this load's noise, and a loss at `[1024, 4096]`).
    ///
    /// # Safety
    /// AVX-512F and BW present; as [`super::copy_f32_nt`] (with `NT`, `d` and `ds` 64-byte
    /// aligned).
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    pub(super) unsafe fn bf16_avx512<
        const NT: bool,
        const KEEP: usize,
        const ZEN: bool,
        const PAIR: bool,
    >(
        s: *const u16,
        ss: usize,
        d: *mut u16,
        ds: usize,
        na: usize,
        nb: usize,
    ) {
        let (a32, b32) = (na & !31, nb & !31);
        let steps = a32 / 32;
        // With `PAIR`, groups of 32 rows taken in pairs (rows `64p .. 64p + 64`): the first
        // block of a pair goes into `stage`, the second writes each destination row's two
        // lines back to back (see above); a last odd group goes alone.
        let pairs = if PAIR && NT && !ZEN { b32 / 64 } else { 0 };
        let mut stage = Stage([0; 1024]);
        let st = stage.0.as_mut_ptr();
        for t in 0..steps {
            for p in 0..pairs {
                let (b, a) = (64 * p, (t + p % SKEW) % steps * 32);
                // SAFETY: as in `f32_avx512`, for a 64 × 32 block; `stage` holds 32 rows of
                // 32 values.
                unsafe {
                    let (s, d) = (s.add(b * ss + a), d.add(a * ds + b));
                    block32_bf16::<false, false, 0, false>(s, ss, st, 32, 32, 32, st);
                    block32_bf16::<NT, false, KEEP, true>(s.add(32 * ss), ss, d, ds, 32, 32, st);
                }
            }
            for b in (64 * pairs..b32).step_by(32) {
                // Group `b / 32` of 32 rows starts `b / 32 % SKEW` column steps later (each
                // group still visits every step once): the blocks of one step read lines in
                // up to `SKEW` different cache sets where rows a power of two apart would
                // put all in one.
                // With `ZEN` (the Zen 5's tuning, `zen_tuned`: see [`AHEAD`]), the next
                // step's source line of each of the block's rows.
                let a = (t + b / 32 % SKEW) % steps * 32;
                let ahead = a + 32;
                if ZEN && ahead < na {
                    // SAFETY: rows b..b+32 of `s` at column `ahead` < na: inside the window.
                    unsafe { prefetch_rows::<_, 32>(s.add(b * ss + ahead), ss) };
                }
                // SAFETY: as in `f32_avx512`, for a 32 × 32 block.
                unsafe {
                    let (s, d) = (s.add(b * ss + a), d.add(a * ds + b));
                    block32_bf16::<NT, false, KEEP, false>(s, ss, d, ds, 32, 32, s)
                };
            }
        }
        // SAFETY: as in `f32_avx512`, in masked 32 × 32 blocks.
        unsafe {
            if a32 < na {
                for b in (0..nb).step_by(32) {
                    let (s, d) = (s.add(b * ss + a32), d.add(a32 * ds + b));
                    block32_bf16::<false, true, 0, false>(
                        s,
                        ss,
                        d,
                        ds,
                        na - a32,
                        (nb - b).min(32),
                        s,
                    );
                }
            }
            if b32 < nb {
                for a in (0..a32).step_by(32) {
                    let (s, d) = (s.add(b32 * ss + a), d.add(a * ds + b32));
                    block32_bf16::<false, true, 0, false>(s, ss, d, ds, 32, nb - b32, s);
                }
            }
        }
    }

    /// `d[i][j] = quiet(s[j][i])` for a 32 × 32 block of 16-bit values (with `PART` only for
    /// `i < na`, `j < nb`, each at most 32: masked loads and stores, plain): the 8 × 8 steps of
    /// [`block_bf16`] in each 128-bit lane of rows 0..8, 8..16, 16..24, 24..32, then the lanes
    /// gathered (as in [`block16_f32`]); the NaN check runs once over the block's rows. With
    /// `NT` rows `i < 32 - KEEP` are streamed, the others stored plainly.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    #[inline]
    #[allow(clippy::needless_range_loop)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block32_bf16<
        const NT: bool,
        const PART: bool,
        const KEEP: usize,
        const PAIR: bool,
    >(
        s: *const u16,
        ss: usize,
        d: *mut u16,
        ds: usize,
        na: usize,
        nb: usize,
        pa: *const u16,
    ) {
        unsafe {
            let (lm, sm) = (lanes(na), lanes(nb));
            let abs = _mm512_set1_epi16(0x7FFF);
            let mut top = _mm512_setzero_si512();
            // Rows `j0 .. j0 + 8` of the block (with `PART`, those past `nb` zero).
            let mut group = |j0: usize| -> [__m512i; 8] {
                let r: [__m512i; 8] = core::array::from_fn(|i| {
                    // Rows past `nb` are never addressed: `add` past the allocation is UB.
                    if !PART {
                        _mm512_loadu_si512(s.add((j0 + i) * ss) as *const _)
                    } else if j0 + i < nb {
                        _mm512_maskz_loadu_epi16(lm, s.add((j0 + i) * ss) as *const _)
                    } else {
                        _mm512_setzero_si512()
                    }
                });
                for v in &r {
                    top = _mm512_max_epu16(top, _mm512_and_si512(*v, abs));
                }
                let a: [__m512i; 8] = core::array::from_fn(|i| {
                    let (x, y) = (r[i & !1], r[i | 1]);
                    if i & 1 == 0 {
                        _mm512_unpacklo_epi16(x, y)
                    } else {
                        _mm512_unpackhi_epi16(x, y)
                    }
                });
                let b: [__m512i; 8] = core::array::from_fn(|i| {
                    let base = [0, 0, 1, 1, 4, 4, 5, 5][i];
                    let (x, y) = (a[base], a[base + 2]);
                    if i & 1 == 0 {
                        _mm512_unpacklo_epi32(x, y)
                    } else {
                        _mm512_unpackhi_epi32(x, y)
                    }
                });
                core::array::from_fn(|i| {
                    let (x, y) = (b[i / 2], b[i / 2 + 4]);
                    if i & 1 == 0 {
                        _mm512_unpacklo_epi64(x, y)
                    } else {
                        _mm512_unpackhi_epi64(x, y)
                    }
                })
            };
            let x = [group(0), group(8), group(16), group(24)];
            if _mm512_cmpgt_epu16_mask(top, _mm512_set1_epi16(0x7F80)) != 0 {
                lanes32::<NT, true, PART, KEEP, PAIR>(&x, d, ds, na, sm, pa)
            } else {
                lanes32::<NT, false, PART, KEEP, PAIR>(&x, d, ds, na, sm, pa)
            }
        }
    }

    /// The last step of [`block32_bf16`]: row `8k + c` of the block's destination is lane
    /// `k` of `x[0..4][c]` gathered, NaNs made quiet with `NAN`; with `PART` only rows
    /// `i < na` are stored, each under the column mask `sm`. Unrolled by hand: as a loop
    /// over `c` the compiler kept `x` on the stack and indexed it, and tested the NaN flag
    /// at every store.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    #[inline]
    unsafe fn lanes32<
        const NT: bool,
        const NAN: bool,
        const PART: bool,
        const KEEP: usize,
        const PAIR: bool,
    >(
        x: &[[__m512i; 8]; 4],
        d: *mut u16,
        ds: usize,
        na: usize,
        sm: __mmask32,
        pa: *const u16,
    ) {
        unsafe {
            let (abs, inf, bit) = (
                _mm512_set1_epi16(0x7FFF),
                _mm512_set1_epi16(0x7F80),
                _mm512_set1_epi16(0x0040),
            );
            let w = |i: usize, v: __m512i| {
                let v = if NAN {
                    let m = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, abs), inf);
                    _mm512_mask_blend_epi16(m, v, _mm512_or_si512(v, bit))
                } else {
                    v
                };
                if PART {
                    if i < na {
                        _mm512_mask_storeu_epi16(d.add(i * ds) as *mut _, sm, v)
                    }
                } else if PAIR {
                    // The staged row `i` of the pair's first block, then this one's.
                    let u = _mm512_load_si512(pa.add(i * 32) as *const _);
                    if NT && i < 32 - KEEP {
                        _mm512_stream_si512(d.add(i * ds) as *mut _, u);
                        _mm512_stream_si512(d.add(i * ds + 32) as *mut _, v)
                    } else {
                        _mm512_storeu_si512(d.add(i * ds) as *mut _, u);
                        _mm512_storeu_si512(d.add(i * ds + 32) as *mut _, v)
                    }
                } else if NT && i < 32 - KEEP {
                    _mm512_stream_si512(d.add(i * ds) as *mut _, v)
                } else {
                    _mm512_storeu_si512(d.add(i * ds) as *mut _, v)
                }
            };
            macro_rules! column {
                ($($c:literal)*) => {$({
                    let v0 = _mm512_shuffle_i32x4::<0x88>(x[0][$c], x[1][$c]);
                    let w0 = _mm512_shuffle_i32x4::<0xDD>(x[0][$c], x[1][$c]);
                    let v1 = _mm512_shuffle_i32x4::<0x88>(x[2][$c], x[3][$c]);
                    let w1 = _mm512_shuffle_i32x4::<0xDD>(x[2][$c], x[3][$c]);
                    w($c, _mm512_shuffle_i32x4::<0x88>(v0, v1));
                    w(8 + $c, _mm512_shuffle_i32x4::<0x88>(w0, w1));
                    w(16 + $c, _mm512_shuffle_i32x4::<0xDD>(v0, v1));
                    w(24 + $c, _mm512_shuffle_i32x4::<0xDD>(w0, w1));
                })*};
            }
            column!(0 1 2 3 4 5 6 7);
        }
    }

    /// `d[i][j] = quiet(s[j][i])` for a 16 × 16 block of 16-bit values: the 8 × 8 steps of
    /// [`block_bf16`] in each 128-bit lane of rows 0..8 and 8..16, then the lanes paired.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    #[allow(clippy::needless_range_loop)]
    unsafe fn block16_bf16<const NT: bool>(s: *const u16, ss: usize, d: *mut u16, ds: usize) {
        unsafe {
            let half = |s: *const u16| -> [__m256i; 8] {
                let r: [__m256i; 8] =
                    core::array::from_fn(|i| _mm256_loadu_si256(s.add(i * ss) as *const __m256i));
                let a: [__m256i; 8] = core::array::from_fn(|i| {
                    let (x, y) = (r[i & !1], r[i | 1]);
                    if i & 1 == 0 {
                        _mm256_unpacklo_epi16(x, y)
                    } else {
                        _mm256_unpackhi_epi16(x, y)
                    }
                });
                // b[2k], b[2k + 1] from a[k'] and a[k' + 2], as in `block_bf16`.
                let b: [__m256i; 8] = core::array::from_fn(|i| {
                    let base = [0, 0, 1, 1, 4, 4, 5, 5][i];
                    let (x, y) = (a[base], a[base + 2]);
                    if i & 1 == 0 {
                        _mm256_unpacklo_epi32(x, y)
                    } else {
                        _mm256_unpackhi_epi32(x, y)
                    }
                });
                core::array::from_fn(|i| {
                    let (x, y) = (b[i / 2], b[i / 2 + 4]);
                    if i & 1 == 0 {
                        _mm256_unpacklo_epi64(x, y)
                    } else {
                        _mm256_unpackhi_epi64(x, y)
                    }
                })
            };
            let (x, y) = (half(s), half(s.add(8 * ss)));
            let (abs, inf, bit) = (
                _mm256_set1_epi16(0x7FFF),
                _mm256_set1_epi16(0x7F80),
                _mm256_set1_epi16(0x0040),
            );
            let w = |i: usize, v: __m256i| {
                let nan = _mm256_cmpgt_epi16(_mm256_and_si256(v, abs), inf);
                let v = _mm256_or_si256(v, _mm256_and_si256(nan, bit));
                if NT {
                    _mm256_stream_si256(d.add(i * ds) as *mut __m256i, v)
                } else {
                    _mm256_storeu_si256(d.add(i * ds) as *mut __m256i, v)
                }
            };
            for c in 0..8 {
                w(c, _mm256_permute2x128_si256::<0x20>(x[c], y[c]));
                w(c + 8, _mm256_permute2x128_si256::<0x31>(x[c], y[c]));
            }
        }
    }

    /// `d[i][j] = quiet(s[j][i])` for an 8 × 8 block of 16-bit values.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block_bf16<const NT: bool>(s: *const u16, ss: usize, d: *mut u16, ds: usize) {
        unsafe {
            let r = |i: usize| _mm_loadu_si128(s.add(i * ss) as *const __m128i);
            let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
            let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
            let a0 = _mm_unpacklo_epi16(r0, r1);
            let a1 = _mm_unpackhi_epi16(r0, r1);
            let a2 = _mm_unpacklo_epi16(r2, r3);
            let a3 = _mm_unpackhi_epi16(r2, r3);
            let a4 = _mm_unpacklo_epi16(r4, r5);
            let a5 = _mm_unpackhi_epi16(r4, r5);
            let a6 = _mm_unpacklo_epi16(r6, r7);
            let a7 = _mm_unpackhi_epi16(r6, r7);
            let b0 = _mm_unpacklo_epi32(a0, a2);
            let b1 = _mm_unpackhi_epi32(a0, a2);
            let b2 = _mm_unpacklo_epi32(a1, a3);
            let b3 = _mm_unpackhi_epi32(a1, a3);
            let b4 = _mm_unpacklo_epi32(a4, a6);
            let b5 = _mm_unpackhi_epi32(a4, a6);
            let b6 = _mm_unpacklo_epi32(a5, a7);
            let b7 = _mm_unpackhi_epi32(a5, a7);
            let (abs, inf, bit) = (
                _mm_set1_epi16(0x7FFF),
                _mm_set1_epi16(0x7F80),
                _mm_set1_epi16(0x0040),
            );
            let w = |i: usize, v: __m128i| {
                let nan = _mm_cmpgt_epi16(_mm_and_si128(v, abs), inf);
                let v = _mm_or_si128(v, _mm_and_si128(nan, bit));
                if NT {
                    _mm_stream_si128(d.add(i * ds) as *mut __m128i, v)
                } else {
                    _mm_storeu_si128(d.add(i * ds) as *mut __m128i, v)
                }
            };
            w(0, _mm_unpacklo_epi64(b0, b4));
            w(1, _mm_unpackhi_epi64(b0, b4));
            w(2, _mm_unpacklo_epi64(b1, b5));
            w(3, _mm_unpackhi_epi64(b1, b5));
            w(4, _mm_unpacklo_epi64(b2, b6));
            w(5, _mm_unpackhi_epi64(b2, b6));
            w(6, _mm_unpacklo_epi64(b3, b7));
            w(7, _mm_unpackhi_epi64(b3, b7));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bits from a seeded LCG (every f32 and bf16 pattern, NaN payloads included).
    fn bits(n: usize, seed: u64) -> Vec<u32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 32) as u32
            })
            .collect()
    }

    /// A `[r, c]` view at `ptr` of `size`-byte elements.
    fn buffer(ptr: *mut u8, r: usize, c: usize, bf16: bool, writable: bool) -> Buffer {
        let size = if bf16 { 2 } else { 4 };
        Buffer {
            dtype: if bf16 { DType::BF16 } else { DType::F32 },
            shape: [r, c, 1],
            rank: 2,
            ptr,
            len: r * c * size,
            writable,
        }
    }

    /// [`run_whole`] on a `[r, c]` source starting `so` elements and a destination starting
    /// `dof` elements into their allocations (every offset within a cache line moves the
    /// first line boundary: the blocks' skew and the non-temporal lead), on `threads`
    /// threads: each destination element is its source element, bf16 NaNs made quiet.
    fn check(r: usize, c: usize, bf16: bool, so: usize, dof: usize, threads: usize) {
        let seed = (r * 31 + c * 7 + so * 3 + dof) as u64;
        check_with(r, c, bf16, so, dof, threads, whole_l2(), None, seed)
    }

    /// [`check`] with bf16 passes sized for an L2 of `l2` bytes (`None`: uncapped, the Zen
    /// 5's tuning), bf16 blocks paired as `pair` says (`None`: as [`paired`] says) and the
    /// source's bits drawn from `seed`; bf16 elements of the 64 × 64 squares `(i, j)` with
    /// `i + j` a multiple of 3 have exponent bit 14 cleared (no NaN there), so blocks with
    /// and without NaNs both run.
    #[allow(clippy::too_many_arguments)]
    fn check_with(
        r: usize,
        c: usize,
        bf16: bool,
        so: usize,
        dof: usize,
        threads: usize,
        l2: Option<usize>,
        pair: Option<bool>,
        seed: u64,
    ) {
        let t = Transpose {
            src: 0,
            src_idx: vec![],
            dst: 1,
            dst_idx: vec![],
            rows: r,
            cols: c,
            other: 0.0,
            bf16,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let tag = format!(
            "[{r}, {c}] bf16 {bf16} offsets {so} {dof} threads {threads} L2 {l2:?} pair {pair:?} seed {seed}"
        );
        if bf16 {
            let tame = |i: usize| {
                let (b, a) = (i.wrapping_sub(so) / c, i.wrapping_sub(so) % c);
                i >= so && (b / 64 + a / 64) % 3 == 0
            };
            let s: Vec<u16> = bits(r * c + so, seed)
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    if tame(i) {
                        x as u16 & !0x4000
                    } else {
                        x as u16
                    }
                })
                .collect();
            let mut d = vec![0u16; r * c + dof];
            let args = [
                buffer(s[so..].as_ptr() as *mut u8, r, c, true, false),
                buffer(d[dof..].as_mut_ptr() as *mut u8, c, r, true, true),
            ];
            pool.install(|| run_whole_l2(&t, &args, l2, pair));
            for a in 0..c {
                for b in 0..r {
                    let want = quiet(s[so + b * c + a]);
                    assert_eq!(d[dof + a * r + b], want, "{tag}: d[{a}][{b}]");
                }
            }
        } else {
            let s = bits(r * c + so, seed);
            let mut d = vec![0u32; r * c + dof];
            let args = [
                buffer(s[so..].as_ptr() as *mut u8, r, c, false, false),
                buffer(d[dof..].as_mut_ptr() as *mut u8, c, r, false, true),
            ];
            pool.install(|| run_whole_l2(&t, &args, l2, pair));
            for a in 0..c {
                for b in 0..r {
                    assert_eq!(d[dof + a * r + b], s[so + b * c + a], "{tag}: d[{a}][{b}]");
                }
            }
        }
    }

    /// Whole-tensor transposes at several alignments of source and destination, large
    /// enough for non-temporal stores and two threads, rows of whole cache lines (where the
    /// blocks start at the first line boundary) and ragged ones.
    #[test]
    fn whole_transposes_copy_every_bit_at_every_alignment() {
        let offsets = [(0, 0), (1, 0), (4, 9), (15, 3), (7, 16), (17, 31)];
        for &(so, dof) in &offsets {
            for threads in [1, 2] {
                check(544, 1024, false, so, dof, threads);
                check(1024, 544, true, so, dof, threads);
                check(96, 64, false, so, dof, threads);
                check(64, 96, true, so, dof, threads);
                check(37, 300, false, so, dof, threads);
                check(300, 37, true, so, dof, threads);
                // bf16 passes of 512 source rows (capped by the L2 off AMD: 64 at 2 MiB),
                // the last one ragged.
                check(608, 4096, true, so, dof, threads);
                // Groups of 32 rows staggered over 32 and over 3 column steps.
                check(1024, 1024, true, so, dof, threads);
                check(2048, 96, true, so, dof, threads);
                // f32 groups of 16 rows staggered over 64 column steps (32 per band on two
                // threads), rows of 4 KiB; on two threads on AMD (not a Zen 4) the last 4
                // rows of each block plain, as the Zen 5's tuning (`l2` `None`) does on any
                // machine, none off AMD and on a Zen 4 (`plain_rows`, `zen4`); fresh bits
                // from the clock, ragged rows too.
                check(1024, 1024, false, so, dof, threads);
                let seed = crate::backend::cpu::clock_seed();
                let l2 = whole_l2();
                check_with(1024, 1024, false, so, dof, threads, None, None, seed);
                check_with(1008, 1037, false, so, dof, threads, l2, None, seed + 1);
            }
        }
    }

    /// bf16 passes as [`band`] sizes them for a smaller and a larger L2 than most (rows of
    /// 8 KiB: passes of 32, 64 and 128 rows, the last one ragged; rows of 2 KiB: 128 for
    /// all three) and uncapped (the Zen 5's tuning: 512 and 128), fresh random bits,
    /// non-temporal stores, one and two threads.
    #[test]
    fn bf16_passes_sized_by_the_l2_copy_every_bit() {
        let seed = crate::backend::cpu::clock_seed();
        for l2 in [Some(1 << 20), Some(2 << 20), Some(4 << 20), None] {
            for threads in [1, 2] {
                for (so, dof) in [(0, 0), (5, 11)] {
                    check_with(608, 4096, true, so, dof, threads, l2, None, seed);
                    check_with(1056, 1024, true, so, dof, threads, l2, None, seed + 1);
                }
            }
        }
    }

    /// The paired bf16 blocks ([`paired`]; forced on, and off as beyond the last-level
    /// cache, on any machine with AVX-512BW): passes of 128 rows (two pairs per column
    /// step), 64 (one pair) and 96 (a pair and a lone group), the last pass ragged, lead and
    /// skew offsets, one and two threads (no plain rows off AMD since tr21: [`plain_rows`]),
    /// fresh random bits with NaNs in some blocks and none in others.
    #[test]
    fn paired_bf16_blocks_copy_every_bit() {
        let seed = crate::backend::cpu::clock_seed();
        let k = 1 << 10;
        for pair in [true, false] {
            for threads in [1, 2] {
                for (so, dof) in [(0, 0), (5, 11)] {
                    let l2 = |rows: usize, c: usize| Some(rows * c * 2 * 4);
                    check_with(
                        1056,
                        1024,
                        true,
                        so,
                        dof,
                        threads,
                        l2(128, k),
                        Some(pair),
                        seed,
                    );
                    check_with(
                        608,
                        2048,
                        true,
                        so,
                        dof,
                        threads,
                        l2(64, 2 * k),
                        Some(pair),
                        seed,
                    );
                    check_with(
                        1120,
                        1024,
                        true,
                        so,
                        dof,
                        threads,
                        l2(96, k),
                        Some(pair),
                        seed,
                    );
                    assert_eq!(band(true, 1024, l2(96, k), 4), 96);
                }
            }
        }
    }

    /// A Zen 4's whole transposes ([`zen4`]): on a Zen 4 the choices (passes of half the L2,
    /// single blocks, no plain rows at any thread count, not the Zen 5's tuning) are the ones
    /// measured there; on any machine those single blocks in passes of 64 rows of 8 KiB (a
    /// half of a 1 MiB L2; a quarter of 2 MiB off a Zen 4), all streamed, copy every bit:
    /// ragged columns, an odd row count (no streaming), lead and skew offsets, one and two
    /// threads, fresh random bits with NaNs in some blocks and none in others; then the
    /// machine's own choices (on a Zen 4 these) on f32 and bf16.
    #[test]
    fn zen4_single_blocks_in_half_l2_passes_copy_every_bit() {
        let m = 1 << 20;
        if zen4() {
            assert_eq!(l2_share(), 2);
            assert_eq!(whole_l2(), Some(crate::backend::cpu::cache::l2_bytes()));
            assert!(!paired(8 * m, false));
            assert_eq!(band(true, 4096, Some(m), l2_share()), 64);
            assert_eq!(band(true, 1024, Some(m), l2_share()), 128);
            for threads in [1, 2] {
                assert_eq!(plain_rows(true, 8 * m, threads, false), 0);
                assert_eq!(plain_rows(false, 8 * m, threads, false), 0);
            }
        }
        let l2 = Some(m * l2_share() / 2);
        assert_eq!(band(true, 4096, l2, l2_share()), 64);
        let seed = crate::backend::cpu::clock_seed();
        for threads in [1, 2] {
            for (so, dof) in [(0, 0), (5, 11), (32, 7)] {
                for (r, c) in [(608, 4096), (608, 4100), (1001, 1030), (1056, 1024)] {
                    let seed = seed + (r * c + so) as u64;
                    check_with(r, c, true, so, dof, threads, l2, Some(false), seed);
                    check_with(r, c, true, so, dof, threads, whole_l2(), None, seed + 1);
                }
                check_with(
                    1024,
                    1024,
                    false,
                    so,
                    dof,
                    threads,
                    whole_l2(),
                    None,
                    seed + 2,
                );
                check_with(
                    1008,
                    1037,
                    false,
                    so,
                    dof,
                    threads,
                    whole_l2(),
                    None,
                    seed + 3,
                );
            }
        }
    }

    /// A bf16 pass takes at most a quarter of the L2 of source rows (at least 32 rows),
    /// else `c / 8` rows from 128 to 512.
    #[test]
    fn bf16_passes_fit_a_quarter_of_the_l2() {
        let m = 1 << 20;
        for (c, l2, rows) in [
            (1024, 2 * m, 128),
            (2048, 2 * m, 128),
            (4096, 2 * m, 64),
            (8192, 2 * m, 32),
            (1 << 16, 2 * m, 32),
            (512, 2 * m, 128),
            (1024, m, 128),
            (2048, m, 64),
            (4096, m, 32),
            (4096, 16 * m, 512),
            (2048, 16 * m, 256),
        ] {
            assert_eq!(band(true, c, Some(l2), 4), rows, "c {c}, L2 {l2}");
            // A Zen 4's half of the L2 (`zen4`): a quarter of twice it.
            let half = band(true, c, Some(2 * l2), 4);
            assert_eq!(band(true, c, Some(l2), 2), half, "c {c}, L2 {l2}, half");
            // The Zen 5's tuning (`zen_tuned`): no L2 cap.
            let zen = (c / 8 / 32 * 32).clamp(128, 512);
            assert_eq!(band(true, c, None, 4), zen, "c {c}, no cap");
        }
    }
}
