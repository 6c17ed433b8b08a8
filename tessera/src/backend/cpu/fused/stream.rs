//! Non-temporal stores for the row loops (`softmax`, `norm`) and the chunk program's stores
//! (`run`, `pipe`): values computed in an L1 buffer are copied to a large f32 output with
//! streaming stores, which neither read the output's lines first nor evict the input from
//! the caches.

use crate::backend::Buffer;
use tessera_ir::DType;

/// On one thread, outputs of at least 3/8 of the last-level cache take non-temporal stores
/// (measured on a 32 MiB L3: plain stores faster up to 8 MiB outputs, even at 12 MiB,
/// non-temporal ones faster at 16 MiB, where input and output no longer fit the cache
/// together); see [`streamed`] for two or more threads, and [`wanted_at_any_thread_count`]
/// for the softmax row loop's f32 outputs, which one thread streams from 12 MiB at most. The
/// cache is the one the process can
/// count on ([`crate::backend::cpu::cache::last_level_bytes`]): on a 2-vCPU guest shown its
/// host's 300 MiB L3 that is 32 MiB, so 12 MiB here too, where 3/8 of 300 MiB (112 MiB)
/// left a 64 MiB rmsnorm output to plain stores at 7.5 GB/s against 13.0 streamed at 128 MiB
/// (figures at `LLC_PER_CPU`). On that guest (Intel Xeon family 6 model 207, 2 vCPUs,
/// 2026-11-27 20:31-20:38 UTC, load 8-13), sysfs's 300 MiB → 32 MiB, `chrt -f 50 cpu_profile
/// K R C 60 --pool --into`, two interleaved rounds of each binary, µs: `[4096, 4096]` (64 MiB)
/// one thread rmsnorm 13573/15485 → 7921/11196, layernorm 16583/14557 → 9026/9684, softmax
/// 14750/21107 → 8488/9449, gelu 14965/13745 → 12212/11271; two threads rmsnorm 7507/6646 →
/// 4925/4221, layernorm 7328/9098 → 4517/5361, softmax 7822/7886 → 5097/4848, gelu
/// 6134/3912 → 4492/4508. Where the output now streams at 16 MiB (one thread; on two the
/// softmax row loop and layernorm's wide rows), `[4096, 1024]` one thread: rmsnorm 1495/1751
/// → 1314/1514, layernorm 1581/1556 → 1353/1304, softmax 1927/2040 → 1698/1690, gelu
/// 1610/1716 → 1470/1657, but add 2228/2103 → 2321/2242 and transpose 1595/1693 →
/// 1782/1734; `[1024, 4096]` one thread gelu 1709/2264 → 1404/1458, softmax 2914/2677 →
/// 2064/1861, rmsnorm and add within the noise, layernorm lost (1992/1718 → 2177/2131), as
/// on two threads (1036/1043 → 1170/1126), where softmax `[4096, 1024]` gained (1082/1042 →
/// 842/830).
fn nt_bytes() -> usize {
    crate::backend::cpu::cache::last_level_bytes() / 8 * 3
}

/// Whether an output of `len` bytes takes non-temporal stores: from [`nt_bytes`] when the
/// launch's pool ([`threads`]) has one thread; in a pool of two or more threads only above
/// 3/4 of the last-level cache (by the pool's size, even when a launch's programs happen to
/// run on one of its threads). On the 2-vCPU AMD
/// EPYC (Zen 5, 32 MiB L3; runs under `chrt -f 50`, 2026-11-27) two threads' streaming stores
/// wrote ≈ 45–52 GB/s together, no more than one thread alone (the machine's, not each
/// core's, limit then; other times have measured about twice that), while plain stores
/// leave an output that fits the cache beside its input there. Two threads, `[4096, 1024]`
/// f32, GB/s streamed → plain: rmsnorm 85 → 122–132, layernorm 84 → 104–108, gelu 76–79 →
/// 102–104, depthwise 95 → 107–111, add 90–96 → 102–114, rmsnorm bf16→f32 61–62 →
/// 118–127; rmsnorm `[6144, 1024]` (24 MiB output) 81–82 → 88–95, `[8192, 1024]` (32 MiB)
/// 75 both; `[1024, 4096]`: rmsnorm 86 → 95, gelu 77 → 103, depthwise 91 → 105, layernorm
/// 82 → 78–81 (its 16 KiB rows). In the rarer state where two threads' streaming stores
/// ran twice as fast (a non-temporal copy at 175 GB/s), depthwise lost (140 → 121, one
/// process) while gelu, rmsnorm and layernorm still gained. One thread keeps streaming
/// (rmsnorm 74 → 63, layernorm 74 → 52 with plain stores).
fn streamed(len: usize) -> bool {
    let llc = crate::backend::cpu::cache::last_level_bytes();
    len >= nt_bytes() && (threads() == 1 || len > llc / 4 * 3)
}

/// The number of threads a launch made here runs on: the current rayon pool's on one of its
/// threads, else the global pool's (fixed once built, so read once: outside a pool
/// `rayon::current_num_threads` took ≈ 11 ns a call, and a one-thread layernorm launched from
/// outside asks once per program, 4096 times at `[4096, 1024]`: ≈ 50 µs of a 440 µs launch).
fn threads() -> usize {
    if rayon::current_thread_index().is_some() {
        rayon::current_num_threads()
    } else {
        static GLOBAL: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *GLOBAL.get_or_init(rayon::current_num_threads)
    }
}

/// Whether a launch's tensors of `bytes` bytes together (its input and output) lie past the
/// last-level cache ([`crate::backend::cpu::cache::last_level_bytes`]): then the gelu loops
/// ask for their input ahead (`vmath::gelu512::AHEAD`, measured there), which at the shapes
/// that fit it changed nothing or cost (`[4096, 1024]`: 16 + 16 MiB against 32 MiB here);
/// so do the f32 binary pipe (`pipe::AHEAD_F32`), the bf16 gelu (`gelubf16`'s `AHEAD`) and
/// the streamed norm rows' writes (`normpipe::ahead_rows`, `norm::WRITE_AHEAD`).
pub(crate) fn past_cache(bytes: usize) -> bool {
    bytes > crate::backend::cpu::cache::last_level_bytes()
}

/// Whether a launch writes `out` with [`copy`]: an unrounded f32 output [`streamed`] by its
/// size and the thread count, at the AVX2 level or higher.
pub(crate) fn wanted(out: &Buffer, round: bool) -> bool {
    wanted_if(out, round, streamed(out.len))
}

/// As [`wanted`], and also (on two or more threads, from [`nt_bytes`]) when a row loop's
/// working set per row, `row_bytes` (the rows it keeps, `γ`, `β` and the output row), is
/// more than the level-1 data cache: then a plain store's output line pushes out a line the
/// loop reads again (`super::normpipe`). Two threads, `[1024, 4096]` f32 (layernorm: 80 KiB
/// per row on a 48 KiB L1; `chrt -f 50 env RAYON_NUM_THREADS=2 cpu_profile layernorm 1024
/// 4096 200 --pool`, 2026-11-27 11:14 UTC, the slow-write state), plain → streamed 71–75 →
/// 81–82 GB/s; `[2048, 2048]` (40 KiB) 90–93 → 87 (plain kept); rmsnorm `[1024, 4096]`
/// (48 KiB: not more) 166 → 151 in the fast-write state, 84 → 85–86 in the slow one.
pub(crate) fn wanted_for_rows(out: &Buffer, round: bool, row_bytes: usize) -> bool {
    let wide = out.len >= nt_bytes() && row_bytes > crate::backend::cpu::cache::l1_data_bytes();
    wanted_if(out, round, streamed(out.len) || wide)
}

/// As [`wanted_for_rows`], but never when the launch's input (`in_bytes`) and output fit 3/4
/// of the last-level cache together and `row_bytes` fits 3/4 of the level-1 data cache: then
/// plain stores leave the output in the cache beside the input. The norm row loop asks this
/// for rmsnorm rows of a bf16 input (half the output's bytes). One thread, rmsnorm bf16→f32
/// (rn16, `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile rmsnorm_bf16_f32 R C 200 --pool`, four
/// interleaved rounds, 17:29 UTC, load 4.7–4.9, streamed → plain): `[4096, 1024]` (8 + 16
/// MiB) 376–380 → 347–351 µs; `[1024, 4096]` (48 KiB per row, over the L1 limit) 385–388 →
/// 402–441, streamed as before.
pub(crate) fn wanted_for_rows_reading(
    out: &Buffer,
    round: bool,
    row_bytes: usize,
    in_bytes: usize,
) -> bool {
    let fits = in_bytes + out.len <= crate::backend::cpu::cache::last_level_bytes() / 4 * 3
        && row_bytes <= crate::backend::cpu::cache::l1_data_bytes() / 4 * 3;
    !fits && wanted_for_rows(out, round, row_bytes)
}

/// As [`wanted`] but from [`nt_bytes`] whatever the thread count: the softmax row loop,
/// whose plain stores measured slower than its streaming ones on two threads too (`[4096,
/// 1024]` f32: 88–89 GB/s streamed, 66–68 plain). On one thread from [`ONE_THREAD_NT_MAX`]
/// at most, where a larger last-level cache is reported: the Zen 5's 32 MiB L3's own
/// [`nt_bytes`] (so unchanged there); on an AMD Zen 4 (`simd::is_zen4`) from
/// [`ZEN4_ONE_THREAD_NT_MAX`] at most.
pub(crate) fn wanted_at_any_thread_count(out: &Buffer, round: bool) -> bool {
    let from = if threads() == 1 {
        #[cfg(target_arch = "x86_64")]
        let max = if crate::backend::cpu::simd::is_zen4() {
            ZEN4_ONE_THREAD_NT_MAX
        } else {
            ONE_THREAD_NT_MAX
        };
        #[cfg(not(target_arch = "x86_64"))]
        let max = ONE_THREAD_NT_MAX;
        nt_bytes().min(max)
    } else {
        nt_bytes()
    };
    wanted_if(out, round, out.len >= from)
}

/// The most output bytes below which the one-thread softmax row loop keeps plain stores
/// ([`wanted_at_any_thread_count`]): 12 MiB, [`nt_bytes`] of the AMD EPYC's 32 MiB L3, so
/// nothing changes there (its 4–8 MiB outputs measured faster with plain stores, see
/// [`nt_bytes`]). On a 2-vCPU Intel Xeon KVM guest (family 6 model 207, AVX-512, sysfs L3
/// 300 MiB, so [`nt_bytes`] was 112.5 MiB before `cache::LLC_PER_CPU` counted that as
/// 32 MiB, making [`nt_bytes`] 12 MiB there too) its streaming stores were faster from 4 MiB outputs
/// on (not taken below 12 MiB: unmeasured on the AMD machine), though input and output fit
/// the reported L3 (sx17, `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile softmax R C
/// N --pool` with the store choice forced, 2026-11-27 19:56–20:00 UTC, load 6–20 from other
/// jobs, fastest launch in µs, plain → streamed): softmax `[4096, 1024]` 1687–1708 →
/// 1143–1526, `[1024, 4096]` 1774–1870 → 1546–1557, `[2048, 1024]` 872–1011 → 595–598,
/// `[1024, 1024]` 429–430 → 290–294; softmax bf16→f32 `[4096, 1024]` 1280–1755 → 1155–1170,
/// `[1024, 4096]` 1549–1724 → 1321–1342. Two threads there (`[4096, 1024]`, the rounds
/// where the second thread ran: the copy near 600–800 µs) plain stores were faster (911–1013
/// → 1153–1217), and [`nt_bytes`] keeps them.
const ONE_THREAD_NT_MAX: usize = 12 << 20;

/// [`ONE_THREAD_NT_MAX`] on an AMD Zen 4 (`simd::is_zen4`): 2 MiB, the least output measured
/// faster streamed there. On the 2-vCPU Zen 4 KVM guest (AMD EPYC family 25 model 17, 1 MiB
/// L2, 32 MiB L3; sx25, the store kind forced at run time in a throwaway build, 2026-11-28
/// 22:13–22:15 UTC, load 3.3–4.3 from other helpers; `RAYON_NUM_THREADS=1 chrt -f 50
/// cpu_profile softmax R C N --pool`, rounds interleaved, fastest launch in µs, plain →
/// streamed): `[2048, 1024]` f32 (8 MiB output) 516–757 → 446–450 (four rounds),
/// `[1024, 2048]` 664–993 → 411–417 (three), `[1024, 1024]` (4 MiB) 232–234 → 222–223,
/// `[512, 1024]` (2 MiB) 116–120 → 112 (three rounds each). Two threads keep [`nt_bytes`]:
/// `[2048, 1024]` there measured 250–257 plain against 318–376 streamed (in the rounds where
/// the second thread ran, the copy near 90 µs). Below 2 MiB unmeasured (a streamed output
/// leaves the cache its reader would find it in). This build against the base (22:19 UTC,
/// load 2.8–3.2): `[2048, 1024]` one thread 571–1106 → 451–602 (four rounds). The cap takes
/// the bf16 → f32 softmax's output too (`softmax_bf16_f32`, sx25's same A/B, 22:19–22:29,
/// load 2.8–4.9): `[2048, 1024]` 479–515 → 464, `[1024, 1024]` 233–234 → 231–232.
const ZEN4_ONE_THREAD_NT_MAX: usize = 2 << 20;

/// Whether the softmax row loop streams its bf16 output `out` (values narrowed in the loop):
/// from [`nt_bytes`] whatever the thread count (as [`wanted_at_any_thread_count`] an f32
/// one on two or more threads; one thread's cap at [`ONE_THREAD_NT_MAX`] is for f32 outputs
/// only, bf16 ones unmeasured), at the AVX-512 level (the loop that streams them).
pub(crate) fn wanted_bf16_at_any_thread_count(out: &Buffer) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        out.dtype == DType::BF16
            && out.len >= nt_bytes()
            && crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = out;
        false
    }
}

/// Whether the softmax row loop streams its bf16 output `out`: as
/// [`wanted_bf16_at_any_thread_count`] on AMD CPUs (the Zen 5's choice: streaming
/// `[4096, 1024]`'s 8 MiB changed nothing there); on others at the AVX-512 level already from
/// the size of the L2 (`cache::l2_bytes`), whatever the thread count. Measured on the 2-vCPU
/// Intel Xeon (family 6 model 207, 2 MiB L2; sm20, 2026-11-28 06:09-06:22 UTC, load 3.7-9.9
/// from other jobs; `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile softmax_bf16 R C N --pool`
/// with the store kind forced in one build, rounds interleaved, fastest launch in µs, min /
/// median of 6-8 runs, plain → streamed), one thread: `[4096, 1024]` 1181 / 1264 → 1121 /
/// 1172, `[1024, 4096]` 1139 / 1220 → 1084 / 1114, `[2048, 1024]` 578 / 581 → 546 / 553,
/// `[1024, 1024]` (2 MiB output) 281 / 281 → 270 / 271; two threads `[4096, 1024]` 615 → 564
/// (min of 8: most runs had the second thread wait for a CPU). Below the L2 not taken
/// (`[512, 1024]`: 137 / 138 → 131 / 135, within the runs' spread, and a streamed output
/// leaves the cache that its reader would find it in).
pub(crate) fn wanted_bf16_softmax(out: &Buffer) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        wanted_bf16_at_any_thread_count(out)
            || (!crate::backend::cpu::simd::is_amd()
                && out.dtype == DType::BF16
                && out.len >= crate::backend::cpu::cache::l2_bytes()
                && crate::backend::cpu::simd::active()
                    >= crate::backend::cpu::simd::SimdLevel::Avx512)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = out;
        false
    }
}

/// [`wanted`] with the size rule's answer `big`.
fn wanted_if(out: &Buffer, round: bool, big: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        out.dtype == DType::F32
            && !round
            && big
            && crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (out, round, big);
        false
    }
}

/// Whether stores to `out` may stream ([`copy`], [`copy_u16`]): an f32 or bf16 output
/// [`streamed`] by its size and the thread count, at the AVX2 level or higher (values
/// already rounded to what the tensor holds).
pub(crate) fn large(out: &Buffer) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(out.dtype, DType::F32 | DType::BF16)
            && streamed(out.len)
            && crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = out;
        false
    }
}

/// Copies the bf16 bits `s` to element offset `at` of the bf16 tensor `out`: plain stores up
/// to the first 64-byte boundary and after the last whole cache line, streaming stores of
/// whole lines between (see [`copy`]).
///
/// # Safety
/// [`large`] returned true for `out` (AVX is present); nothing else accesses those elements
/// before [`fence`] runs on this thread.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
pub(crate) unsafe fn copy_u16(out: &Buffer, at: usize, s: &[u16]) {
    use core::arch::x86_64::*;
    let n = s.len();
    assert!(
        out.dtype == DType::BF16 && (at + n) * 2 <= out.len,
        "fused store out of bounds"
    );
    // SAFETY: in bounds (checked above); programs of a launch write disjoint elements.
    let d = unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut u16).add(at), n) };
    let head = (d.as_ptr().align_offset(64)).min(n);
    d[..head].copy_from_slice(&s[..head]);
    let body = (n - head) / 32 * 32;
    for j in (head..head + body).step_by(16) {
        // SAFETY: `j + 16 <= n`; `d[j]` is 32-byte aligned.
        unsafe {
            let v = _mm256_loadu_si256(s.as_ptr().add(j) as *const __m256i);
            _mm256_stream_si256(d.as_mut_ptr().add(j) as *mut __m256i, v);
        }
    }
    d[head + body..].copy_from_slice(&s[head + body..]);
}

/// Writes the f32 values `s` at element offset `at` of the f32 tensor `out`, streamed
/// ([`copy`]) when `nt`.
///
/// # Safety
/// With `nt`, as [`copy`].
#[inline(always)]
pub(crate) unsafe fn put_f32(out: &Buffer, at: usize, s: &[f32], nt: bool) {
    #[cfg(target_arch = "x86_64")]
    if nt {
        // SAFETY: the caller's contract.
        return unsafe { copy(out, at, s) };
    }
    let _ = nt;
    super::chunk::store(out, at, super::chunk::V::S(s), 0, s.len())
}

/// Writes the bf16 bits `s` at element offset `at` of the bf16 tensor `out`, streamed
/// ([`copy_u16`]) when `nt`.
///
/// # Safety
/// As [`out_u16`]; with `nt`, as [`copy_u16`].
#[inline(always)]
pub(crate) unsafe fn put_u16(out: &Buffer, at: usize, s: &[u16], nt: bool) {
    #[cfg(target_arch = "x86_64")]
    if nt {
        // SAFETY: the caller's contract.
        return unsafe { copy_u16(out, at, s) };
    }
    let _ = nt;
    // SAFETY: the caller's elements (put_u16's contract).
    unsafe { out_u16(out, at, s.len()) }.copy_from_slice(s)
}

/// The `n` bf16 elements at element offset `at` of the bf16 tensor `out`, to write.
///
/// # Safety
/// Nothing else reads or writes those elements while the slice lives (programs and ranges
/// of a launch write disjoint elements, and an output is never a loaded parameter:
/// `plan::compile`).
#[inline(always)]
pub(crate) unsafe fn out_u16<'a>(out: &Buffer, at: usize, n: usize) -> &'a mut [u16] {
    assert!(
        out.dtype == DType::BF16 && (at + n) * 2 <= out.len,
        "fused store out of bounds"
    );
    // SAFETY: in bounds (checked above); exclusive by the caller's contract.
    unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut u16).add(at), n) }
}

/// The `n` f32 elements at element offset `at` of the f32 tensor `out`, to write.
///
/// # Safety
/// As [`out_u16`].
#[inline(always)]
pub(crate) unsafe fn out_f32<'a>(out: &Buffer, at: usize, n: usize) -> &'a mut [f32] {
    assert!(
        out.dtype == DType::F32 && (at + n) * 4 <= out.len,
        "fused store out of bounds"
    );
    // SAFETY: as in `out_u16`.
    unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut f32).add(at), n) }
}

/// Copies `s` to element offset `at` of the f32 tensor `out`: plain stores up to the first
/// 64-byte boundary and after the last whole cache line, streaming stores of whole lines
/// between. No line takes both kinds of store: a plain store into a line whose other half
/// was just streamed measured 1.6× slower over a whole `[4096, 1024]` add (pieces of 1024
/// values into an output 48 bytes past a line boundary, the streamed half-line then the
/// plain rest on every piece boundary), and an output's offset within a line is whatever
/// `malloc` gave it.
///
/// # Safety
/// [`wanted`] or [`large`] returned true for `out` (AVX is present); nothing else accesses those elements
/// before [`fence`] runs on this thread.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
pub(crate) unsafe fn copy(out: &Buffer, at: usize, s: &[f32]) {
    use core::arch::x86_64::*;
    let n = s.len();
    assert!((at + n) * 4 <= out.len, "fused store out of bounds");
    // SAFETY: in bounds (checked above); programs of a launch write disjoint rows.
    let d = unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut f32).add(at), n) };
    let head = (d.as_ptr().align_offset(64)).min(n);
    d[..head].copy_from_slice(&s[..head]);
    let body = (n - head) / 16 * 16;
    for j in (head..head + body).step_by(8) {
        // SAFETY: `j + 8 <= n`; `d[j]` is 32-byte aligned.
        unsafe { _mm256_stream_ps(d.as_mut_ptr().add(j), _mm256_loadu_ps(s.as_ptr().add(j))) };
    }
    d[head + body..].copy_from_slice(&s[head + body..]);
}

/// `es[j]·inv` to element offset `at` of the f32 tensor `out`, with streaming stores between
/// the first 64-byte boundary and the last whole vector.
///
/// # Safety
/// As [`copy`]; the CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn scale_avx512(out: &Buffer, at: usize, es: &[f32], inv: f32) {
    use core::arch::x86_64::*;
    let n = es.len();
    assert!((at + n) * 4 <= out.len, "fused store out of bounds");
    // SAFETY: in bounds (checked above); programs of a launch write disjoint rows.
    let d = unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut f32).add(at), n) };
    let head = (d.as_ptr().align_offset(64)).min(n);
    for (o, e) in d[..head].iter_mut().zip(es) {
        *o = e * inv;
    }
    let body = (n - head) / 16 * 16;
    let v = _mm512_set1_ps(inv);
    for j in (head..head + body).step_by(16) {
        // SAFETY: `j + 16 <= n`; `d[j]` is 64-byte aligned.
        unsafe {
            let e = _mm512_loadu_ps(es.as_ptr().add(j));
            _mm512_stream_ps(d.as_mut_ptr().add(j), _mm512_mul_ps(e, v));
        }
    }
    for (o, e) in d[head + body..].iter_mut().zip(&es[head + body..]) {
        *o = e * inv;
    }
}

/// Whether elements `at .. at + n` of `buf` are whole rows (last-axis runs) of it: such
/// runs of a launch's programs follow one another in memory. Streaming stores measured
/// slower than plain ones where each run is part of a row and the next run a page or more
/// away (`[8192, 4096]` f32 in tiles narrower than a row), faster where runs follow one
/// another.
pub(crate) fn whole_rows(buf: &Buffer, at: usize, n: usize) -> bool {
    let row = buf.dims().last().copied().unwrap_or(1).max(1);
    n > 0 && at.is_multiple_of(row) && n.is_multiple_of(row)
}

/// Asks for the cache lines of elements `at .. at + n` of `buf` when `buf` is at least
/// [`nt_bytes`] long (see [`prefetch_lines`]).
#[inline(always)]
pub(crate) fn prefetch(buf: &Buffer, at: usize, n: usize) {
    if buf.len >= nt_bytes() {
        prefetch_lines(buf, at, n);
    }
}

/// Asks for the cache lines of elements `at .. at + n` of `buf` (a hint: no access is made,
/// and none outside the buffer is asked for).
#[inline(always)]
pub(crate) fn prefetch_lines(buf: &Buffer, at: usize, n: usize) {
    let size = buf.dtype.size_bytes();
    if (at + n) * size <= buf.len {
        let p = buf.ptr.wrapping_add(at * size);
        for b in (0..n * size).step_by(64) {
            // Inside `buf`.
            crate::backend::cpu::prefetch::l1(p.wrapping_add(b));
        }
    }
}

/// Orders this thread's streaming stores before whatever follows (the end of a launch),
/// or, inside [`fenced_once`] on this thread, leaves that to the one fence at its end. Not
/// inlined: its callers' loops stay as they were before the thread-local test.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub(crate) fn fence() {
    if !DEFER.with(|d| d.get()) {
        // SAFETY: SSE is part of x86_64.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
}

thread_local! {
    /// Whether this thread runs inside [`fenced_once`].
    static DEFER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (a run of programs on this thread) with this thread's [`fence`] calls left to one
/// `sfence` when `f` returns or unwinds. A fence after each program drains the streaming
/// stores' buffers before the next program's loads and stores start: one fence per row of a
/// C model of the bf16→f32 norm write (`[4096, 1024]`, one thread) measured 2.4× slower
/// than one per launch, one per 4 rows 1.33×, one per 16 rows 1.06×. `f` must not wait on
/// other rayon work (a job this thread ran meanwhile would end unfenced); the programs of a
/// launch do not.
pub(crate) fn fenced_once<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the outer setting and fences (also when `f` panics).
    struct Done(bool);
    impl Drop for Done {
        fn drop(&mut self) {
            DEFER.with(|d| d.set(self.0));
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE is part of x86_64.
            unsafe {
                core::arch::x86_64::_mm_sfence()
            };
        }
    }
    let _done = Done(DEFER.with(|d| d.replace(true)));
    f()
}

/// Whether a launch writes elements `at .. at + n` of `out` with [`copy`] or [`copy_u16`]:
/// [`large`] and [`whole_rows`].
pub(crate) fn streams(out: &Buffer, at: usize, n: usize) -> bool {
    large(out) && whole_rows(out, at, n)
}

/// [`super::chunk::store`], through [`copy`] (f32) or a narrowing into an L1 buffer and
/// [`copy_u16`] (bf16, in pieces of [`super::plan::CHUNK`]) when `v` is a slice and `nt`
/// ([`streams`] of the run this piece belongs to). The caller runs [`fence`] before its
/// program returns when [`large`] holds for `buf`.
#[inline(always)]
pub(crate) fn store(buf: &Buffer, at: usize, v: super::chunk::V, lo: usize, hi: usize, nt: bool) {
    #[cfg(target_arch = "x86_64")]
    if let super::chunk::V::S(s) = v
        && nt
    {
        if buf.dtype == DType::BF16 {
            const P: usize = super::plan::CHUNK;
            let mut t = [0u16; P];
            for k in (lo..hi).step_by(P) {
                let m = (hi - k).min(P);
                super::bf16io::narrow(&s[k..k + m], &mut t[..m]);
                // SAFETY: `nt` implies `large` (AVX is present); the caller fences before
                // its program returns.
                unsafe { copy_u16(buf, at + (k - lo), &t[..m]) };
            }
            return;
        }
        // SAFETY: `nt` implies `large` (AVX is present); the caller fences before its
        // program returns.
        return unsafe { copy(buf, at, &s[lo..hi]) };
    }
    let _ = nt;
    super::chunk::store(buf, at, v, lo, hi)
}

/// [`super::chunk::write`] of `f(j)` for `j in 0..n` at element offset `at` of `out`; with
/// `nt` ([`wanted`]) the values go through `buf` (at least `n` long) and [`copy`].
#[inline(always)]
pub(crate) fn write(
    out: &Buffer,
    at: usize,
    n: usize,
    round: bool,
    nt: bool,
    buf: &mut [f32],
    f: impl Fn(usize) -> f32,
) {
    #[cfg(target_arch = "x86_64")]
    if nt {
        let b = &mut buf[..n];
        for (j, o) in b.iter_mut().enumerate() {
            *o = f(j);
        }
        // SAFETY: the caller's `nt` is [`wanted`] of `out`, and it calls [`fence`] before the
        // program returns.
        return unsafe { copy(out, at, b) };
    }
    let _ = (nt, buf);
    super::chunk::write(out, at, n, round, f)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// A one-row f32 or bf16 buffer over `len` bytes at `ptr`.
    fn buffer(dtype: DType, ptr: *mut u8, len: usize) -> Buffer {
        let n = len / dtype.size_bytes();
        Buffer {
            dtype,
            shape: [1, n, 1],
            rank: 2,
            ptr,
            len,
            writable: true,
        }
    }

    /// [`wanted_for_rows_reading`] takes plain stores where input and output fit 3/4 of the
    /// last-level cache together and the row's working set 3/4 of the L1, and answers as
    /// [`wanted_for_rows`] elsewhere, on one thread and on two.
    #[test]
    fn rows_reading_streams_only_past_the_cache() {
        let llc = crate::backend::cpu::cache::last_level_bytes();
        let l1 = crate::backend::cpu::cache::l1_data_bytes();
        // The rule reads only the size: the buffer points nowhere.
        let at = |len: usize| buffer(DType::F32, std::ptr::NonNull::dangling().as_ptr(), len);
        let cases = [
            // Output, input, row bytes.
            (llc / 2, llc / 4, l1 / 4),
            (llc / 2, llc / 4 + 64, l1 / 4),
            (llc / 2, llc / 4, l1 / 4 * 3 + 4),
            (llc / 2, llc / 4, l1 + 4),
            (llc, llc / 2, l1 / 4),
            (llc / 4, llc / 8, l1 / 4),
        ];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                for &(o, i, row) in &cases {
                    let out = at(o);
                    let fits = o + i <= llc / 4 * 3 && row <= l1 / 4 * 3;
                    let want = !fits && wanted_for_rows(&out, false, row);
                    assert_eq!(
                        wanted_for_rows_reading(&out, false, row, i),
                        want,
                        "{threads} threads, output {o}, input {i}, row {row}"
                    );
                    if fits {
                        assert!(!wanted_for_rows_reading(&out, false, row, i));
                    }
                }
                // On one thread the first case streamed before (an output past the
                // threshold): the rule changes its answer.
                if threads == 1
                    && crate::backend::cpu::simd::active()
                        >= crate::backend::cpu::simd::SimdLevel::Avx2
                {
                    assert!(wanted_for_rows(&at(llc / 2), false, l1 / 4));
                    assert!(!wanted_for_rows_reading(
                        &at(llc / 2),
                        false,
                        l1 / 4,
                        llc / 4
                    ));
                    assert!(wanted_for_rows_reading(
                        &at(llc / 2),
                        false,
                        l1 / 4,
                        llc / 4 + 64
                    ));
                }
            });
        }
    }

    /// [`wanted_at_any_thread_count`] on one thread streams an f32 output of
    /// [`ZEN4_ONE_THREAD_NT_MAX`] on a Zen 4 only (elsewhere from [`ONE_THREAD_NT_MAX`] at
    /// most), and on two threads from [`nt_bytes`].
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn softmax_streams_from_two_mib_on_one_zen4_thread() {
        let at = |len: usize| buffer(DType::F32, std::ptr::NonNull::dangling().as_ptr(), len);
        let avx2 =
            crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2;
        let zen4 = crate::backend::cpu::simd::is_zen4();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                for len in [ZEN4_ONE_THREAD_NT_MAX - 64, ZEN4_ONE_THREAD_NT_MAX, 8 << 20] {
                    let from = if threads == 1 && zen4 {
                        nt_bytes().min(ZEN4_ONE_THREAD_NT_MAX)
                    } else if threads == 1 {
                        nt_bytes().min(ONE_THREAD_NT_MAX)
                    } else {
                        nt_bytes()
                    };
                    assert_eq!(
                        wanted_at_any_thread_count(&at(len), false),
                        avx2 && len >= from,
                        "{threads} threads, {len} bytes"
                    );
                }
                if threads == 1 && zen4 && avx2 {
                    assert!(wanted_at_any_thread_count(
                        &at(ZEN4_ONE_THREAD_NT_MAX),
                        false
                    ));
                }
            });
        }
    }

    /// [`fenced_once`] defers this thread's fences inside it (nested runs restore the outer
    /// setting), and a panic inside it restores the setting.
    #[test]
    fn fenced_once_restores_the_outer_setting() {
        let deferred = || DEFER.with(|d| d.get());
        assert!(!deferred());
        let inner = fenced_once(|| {
            assert!(deferred());
            fenced_once(deferred)
        });
        assert!(inner);
        assert!(!deferred());
        let r = std::panic::catch_unwind(|| fenced_once(|| panic!("inside")));
        assert!(r.is_err());
        assert!(!deferred());
        // Streamed values written inside are all there, in order, after it returns (one
        // thread: this checks the values and the deferral, not the ordering a fence gives
        // other threads).
        let src: Vec<f32> = (0..64).map(|j| j as f32 + 0.5).collect();
        let mut out = vec![0.0f32; 64 + 16];
        let at = out.as_ptr().align_offset(64);
        let b = buffer(DType::F32, out.as_mut_ptr() as *mut u8, 4 * out.len());
        if std::is_x86_feature_detected!("avx") {
            // SAFETY: AVX is present; the elements are in `out`; fenced by `fenced_once`.
            fenced_once(|| unsafe {
                copy(&b, at, &src);
                fence();
            });
            assert_eq!(&out[at..at + 64], &src[..]);
        }
    }

    /// [`copy`] and [`copy_u16`] write exactly their elements at every offset within a cache
    /// line and every length up to three lines and a bit.
    #[test]
    fn copies_write_their_elements_at_every_line_offset() {
        if !std::is_x86_feature_detected!("avx") {
            return;
        }
        let seed = crate::backend::cpu::clock_seed() % 4096;
        // Distinct small integers: exact in f32 and u16, never a sentinel (-1.0, 0xffff).
        let value = |j: usize| seed as usize + 7 * j + 1;
        for n in 0..60 {
            for off in 0..32 {
                let src: Vec<f32> = (0..n).map(|j| value(j) as f32).collect();
                let mut out = vec![-1.0f32; 128];
                let at = out.as_ptr().align_offset(64);
                let b = buffer(DType::F32, out.as_mut_ptr() as *mut u8, 4 * out.len());
                if off < 16 {
                    // SAFETY: AVX is present; the elements are in `out`; fenced below.
                    unsafe { copy(&b, at + off, &src) };
                    fence();
                    for (j, &v) in out.iter().enumerate() {
                        let want = if (at + off..at + off + n).contains(&j) {
                            src[j - at - off]
                        } else {
                            -1.0
                        };
                        assert_eq!(v, want, "f32 n {n} offset {off} element {j} (seed {seed})");
                    }
                }
                let srcu: Vec<u16> = (0..n).map(|j| value(j) as u16).collect();
                let mut outu = vec![0xffffu16; 192];
                let atu = outu.as_ptr().align_offset(64);
                let b = buffer(DType::BF16, outu.as_mut_ptr() as *mut u8, 2 * outu.len());
                // SAFETY: as above.
                unsafe { copy_u16(&b, atu + off, &srcu) };
                fence();
                for (j, &v) in outu.iter().enumerate() {
                    let want = if (atu + off..atu + off + n).contains(&j) {
                        srcu[j - atu - off]
                    } else {
                        0xffff
                    };
                    assert_eq!(v, want, "bf16 n {n} offset {off} element {j} (seed {seed})");
                }
            }
        }
    }
}
