//! The layernorm / rmsnorm row loop ([`super::rowmatch::Norm`]): one program's rows, each
//! read once from memory (a bf16 row widened into a row buffer) and then walked in L1 for
//! the mean (`vmath::sum` per chunk of `bc` columns, added in column order), the sum of
//! squared deviations (or squares) and the write `((x − mean)·rstd)·γ (+ β)`, with the
//! interpreter's arithmetic op for op. Lanes past the row end of the interpreter's chunks
//! read `+0` (or are selected to `+0`), which adds nothing to a lane of `vmath::sum`, so only
//! the row's own columns are computed. At the AVX-512 level the rows into an unrounded f32
//! output run in `normpipe::rows` (each row's memory pass shares its loop with the previous
//! row's squared deviations), the others in `rows_avx512`, both with the sums of `norm512`
//! (the same bits): a bf16 row is widened in registers by its first pass (into a bf16
//! output: by every pass, no f32 row kept), the passes that read a row from memory ask for
//! the next row's lines as they go, and a large f32 or bf16 output takes non-temporal
//! stores (`stream`). The bf16 → bf16 rows run their passes a row or two apart where the
//! rows fit the level-1 cache (`lags`), so no row's write waits on its own `rstd`.

use super::super::vmath;
use super::rowmatch::Norm;
use super::{chunk, stream};
use crate::backend::Buffer;
use tessera_ir::DType;

/// Runs program `pid` (rows `pid·br ..`) of a `[rows, n]` norm whose `γ` and `β` are `[n]`
/// vectors ([`fits`]); `buf` is the worker's row scratch, and `kept` the launch whose `γ`
/// and `β`, widened from bf16, `buf` holds (set to `launch` here): a program of the same
/// launch on the same worker reuses them (a launch's inputs are not written while it runs).
pub(crate) fn run(
    nm: &Norm,
    buf: &mut Vec<f32>,
    kept: (&mut u64, u64),
    pid: usize,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    // Three rows, a chunk of squares, γ and β (widened), and γ and β in `eo_order` (whole
    // 32-column steps each).
    let need = 5 * n + nm.rows.bc + 2 * n.next_multiple_of(32);
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        return unsafe { run_avx2(nm, buf, kept, pid, args, rows, n) };
    }
    body(nm, buf, kept, pid, args, rows, n)
}

/// Whether `γ` and `β` are `[n]` vectors (what [`run`] reads).
pub(crate) fn fits(nm: &Norm, args: &[Buffer], n: usize) -> bool {
    [Some(nm.gamma), nm.beta]
        .into_iter()
        .flatten()
        .all(|p| args[p].dims() == [n] && n * args[p].dtype.size_bytes() == args[p].len)
}

/// [`body`] built with AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(
    nm: &Norm,
    buf: &mut [f32],
    kept: (&mut u64, u64),
    pid: usize,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    body(nm, buf, kept, pid, args, rows, n)
}

/// `n` values of the f32 or bf16 tensor `b` from element `at`: the tensor's own memory
/// (f32) or `w` (bf16, widened unless `done`: `w` holds them already).
#[inline(always)]
fn widen<'a>(b: &'a Buffer, at: usize, n: usize, w: &'a mut [f32], done: bool) -> &'a [f32] {
    if b.dtype == DType::F32 {
        chunk::f32s(b, at, n)
    } else {
        if !done {
            chunk::load(b, at, &mut w[..n]);
        }
        &w[..n]
    }
}

#[cfg(test)]
thread_local! {
    /// The row loop this thread's last [`body`] took (tests: `bf16_norms_through_run_…`
    /// checks the path choice with it): 0 another, 1 [`eo_rows`] with `γ` and `β` f32 in
    /// [`eo_order`], 2 [`eo_rows`] with them bf16 as stored ([`eo_bf16_vectors`]).
    static TOOK: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

#[inline(always)]
fn body(
    nm: &Norm,
    buf: &mut [f32],
    (kept, launch): (&mut u64, u64),
    pid: usize,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    let (x, out) = (&args[nm.rows.x], &args[nm.rows.out]);
    let (br, bc) = (nm.rows.br, nm.rows.bc);
    // Three rows (the row and the output row of the loops below, or the pipeline's rows),
    // a chunk of squares, γ and β.
    let (x3, rest) = buf.split_at_mut(3 * n);
    let (q, rest) = rest.split_at_mut(bc);
    let (gw, rest) = rest.split_at_mut(n);
    let (bw, eo) = rest.split_at_mut(n);
    #[cfg(test)]
    TOOK.with(|t| t.set(0));
    #[cfg(target_arch = "x86_64")]
    let eo_path = eo_fits(nm, (x, out), n);
    #[cfg(target_arch = "x86_64")]
    if eo_path && eo_bf16_vectors(nm, args, n) {
        // bf16 `γ` (and `β`) read as they are stored, widened by the write (`EoGb::Bf16`):
        // `buf` is not used, `kept` left as it is.
        let v = |p: usize| {
            // SAFETY: `fits`: `[n]` bf16 vectors (`eo_bf16_vectors` checked the type).
            unsafe { std::slice::from_raw_parts(args[p].ptr as *const u16, n) }
        };
        let gb = EoGb::Bf16(v(nm.gamma), nm.beta.map(v));
        #[cfg(test)]
        TOOK.with(|t| t.set(2));
        // SAFETY: `eo_fits` checked the features and the shapes; `gb` holds `[n]` vectors.
        unsafe { eo_program(nm, (x, out), (pid * br, br, rows), n, gb) };
        return;
    }
    // `γ` and `β` sit at the same place in `buf` for every program of a launch (`n` and
    // `bc` are the launch's).
    let done = launch != 0 && *kept == launch;
    let g = widen(&args[nm.gamma], 0, n, gw, done);
    let b = nm.beta.map(|p| widen(&args[p], 0, n, bw, done));
    *kept = launch;
    #[cfg(target_arch = "x86_64")]
    if eo_path {
        // `γ` and `β` in `eo_order` (once a launch, as their widening), then the rows.
        let n32 = n.next_multiple_of(32);
        let (gx, bx) = eo.split_at_mut(n32);
        if !done {
            eo_order(g, gx);
            if let Some(b) = b {
                eo_order(b, &mut bx[..n32]);
            }
        }
        let gb = EoGb::F32(&gx[..n32], b.map(|_| &bx[..n32]));
        #[cfg(test)]
        TOOK.with(|t| t.set(1));
        // SAFETY: `eo_fits` checked the features and the shapes; `gx` (and `bx`) hold `n`
        // values in `eo_order` (padded to whole steps).
        unsafe { eo_program(nm, (x, out), (pid * br, br, rows), n, gb) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = eo;
    let nf = n as i32 as f32;
    let round = nm.rows.round_bf16;
    // What a row of the AVX-512 f32 pipeline keeps in L1: its rows (layernorm: the row
    // read and the previous one), `γ`, `β` and the output row.
    let kept_rows = 1 + usize::from(nm.layer) + 1 + usize::from(nm.beta.is_some()) + 1;
    // An rmsnorm bf16 row into f32 (no f32 row kept) whose input and output fit the
    // last-level cache together takes plain stores (`stream::wanted_for_rows_reading`).
    let nt = if !nm.layer && x.dtype == DType::BF16 {
        stream::wanted_for_rows_reading(out, round, kept_rows * n * 4, x.len)
    } else {
        stream::wanted_for_rows(out, round, kept_rows * n * 4)
    };
    let r0 = pid * br;
    let r1 = (r0 + br).min(rows);
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512 {
        // SAFETY: the active level is at most the detected one: AVX-512F is present; `g`
        // and `b` are `[n]`; `nt` is `stream::wanted_for_rows` (or `_reading`, true only where
        // it is) of `out`, fenced here.
        unsafe {
            if out.dtype == DType::F32 && !round {
                let far = super::normpipe::ahead_rows(nt, (x, out), kept_rows * n * 4);
                super::normpipe::rows(nm, (x, out), (r0, r1, rows), n, (g, b), x3, (nt, far))
            } else {
                let (xw, rest) = x3.split_at_mut(n);
                rows_avx512(
                    nm,
                    (x, out),
                    (r0, r1, rows),
                    n,
                    (g, b),
                    (xw, &mut rest[..n]),
                    nt,
                )
            }
        };
        if nt {
            stream::fence();
        }
        return;
    }
    let (xw, rest) = x3.split_at_mut(n);
    let ow = &mut rest[..n];
    for row in r0..r1 {
        let at = row * n;
        let xs = widen(x, at, n, xw, false);
        let mean = if nm.layer {
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
            let c1 = (c0 + bc).min(n);
            let q = &mut q[..c1 - c0];
            if nm.layer {
                for (o, v) in q.iter_mut().zip(&xs[c0..c1]) {
                    let d = v - mean;
                    *o = d * d;
                }
            } else {
                for (o, v) in q.iter_mut().zip(&xs[c0..c1]) {
                    *o = v * v;
                }
            }
            ss += vmath::sum(q);
        }
        let mut rstd = [ss / nf + nm.eps];
        vmath::rsqrt(&mut rstd);
        write(out, at, xs, (mean, rstd[0]), (g, b), round, nt, ow);
    }
    #[cfg(target_arch = "x86_64")]
    if nt {
        stream::fence();
    }
}

/// How many rows past the one a pass of sums reads the write that follows it asks for (into
/// L2), in [`rows_avx512`]'s bf16 → bf16 rows where the streamed output and the input lie
/// past the last-level cache together (`stream::past_cache`): the pass of sums already asks
/// for the next row, and memory sat without reads while the write streamed its row (as in
/// `normpipe::ahead_rows`, f32).
///
/// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207; experiment build with
/// the distance and hint on an environment switch, 2026-11-28 02:51–02:57 UTC, load 4.5–5.5
/// from other jobs; `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile layernorm_bf16 8192 4096 20
/// --pool`, interleaved with main's binary, fastest launch in ms): main
/// 13.3/17.6/19.1/21.1/12.8; 3 rows on 16.1/12.8/12.2/14.3/11.7; 2 rows on
/// 13.9/13.8/17.5/19.1/14.3 (into L1, `prefetcht0`: 13.0/16.4). Final build: see the commit.
const WRITE_AHEAD: usize = 3;

/// The rows `r0 .. r1` of [`body`] at the AVX-512 level into a bf16 or bf16-rounded output
/// (an unrounded f32 output takes [`super::normpipe::rows`]), the same bits with the sums
/// of [`super::norm512::sum`] (lane accumulators and the final tree in registers). A bf16
/// row into a bf16 output (with AVX-512BW) is widened in registers by every pass, from
/// memory and then from L1, and written by [`write_bf16`] (streamed when `stream::large`),
/// the passes a row or two apart where [`lags`] (layernorm's mean sums of row `t` and
/// squared deviations of row `t − 1` in one loop, `normpipe::sums`);
/// another bf16 row is widened into `xw` in registers by its first pass (the mean's, or
/// rmsnorm's squares). The pass that reads a row from memory asks for the next row's
/// lines; past the cache a bf16 row's write asks for those of the row [`WRITE_AHEAD`] on
/// from the one last summed.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; `g` (and `b`) hold `n` values; `xw` holds
/// `n`; with `nt` ([`stream::wanted_for_rows`] or [`stream::wanted_for_rows_reading`] of
/// `out`) the caller fences before the program returns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_avx512(
    nm: &Norm,
    (x, out): (&Buffer, &Buffer),
    (r0, r1, rows): (usize, usize, usize),
    n: usize,
    (g, b): (&[f32], Option<&[f32]>),
    (xw, ow): (&mut [f32], &mut [f32]),
    nt: bool,
) {
    use super::norm512::{Pass, sum};
    let bc = nm.rows.bc;
    let nf = n as i32 as f32;
    let size = x.dtype.size_bytes();
    assert!(
        rows * n * size <= x.len && xw.len() >= n && g.len() >= n,
        "fused load out of bounds"
    );
    let f32in = x.dtype == DType::F32;
    let row_ptr = |row: usize| x.ptr.wrapping_add(row.wrapping_mul(n * size)) as *const u8;
    let xwp = xw.as_mut_ptr();
    // A pass over `row` (its values, or `xw`'s with `own` false) that asks for the lines
    // of row `next` while it is in the tensor (else for its own).
    let pass = |row: usize, own: bool, mean: f32, next: usize| {
        let src = if own { row_ptr(row) } else { xwp as *const u8 };
        Pass {
            l2: false,
            src,
            mean,
            keep: xwp,
            ahead: if next < rows { row_ptr(next) } else { src },
        }
    };
    // Chunk sums of a pass (`sum::<SQ, BF, AHEAD, KEEP>`; `KEEP` as `BF` unless given),
    // added in column order.
    macro_rules! sums {
        ($sq:literal, $bf:literal, $ahead:literal, $p:expr) => {
            sums!($sq, $bf, $ahead, $bf, $p)
        };
        ($sq:literal, $bf:literal, $ahead:literal, $keep:literal, $p:expr) => {{
            let p = $p;
            let mut s = 0.0f32;
            for c0 in (0..n).step_by(bc) {
                // SAFETY: the caller's level; the row and `xw` hold `n` values (asserted).
                s += unsafe { sum::<$sq, $bf, $ahead, $keep>(p, c0, (c0 + bc).min(n)) };
            }
            s
        }};
    }
    // A bf16 output row narrowed in registers (`write_bf16`, which narrows with AVX-512BW
    // word permutes, which the AVX-512 level (AVX-512F) does not imply: without BW the row
    // goes through `write`), with `vcvtne2ps2bf16` where the CPU has it.
    let direct = out.dtype == DType::BF16 && !nt && std::arch::is_x86_feature_detected!("avx512bw");
    let cvt = direct && super::bf16io::has_cvt();
    // A large bf16 output takes streaming stores (`stream::large`: by its size and the
    // thread count), fenced below.
    let nt16 = direct && stream::large(out);
    // A streamed bf16 output past the last-level cache with its input: the write after the
    // pass of sums over row `t` asks for row `t + WRITE_AHEAD`'s lines (into L2) as it
    // streams (a bf16 input's rows only).
    let wfar = nt16 && stream::past_cache(x.len + out.len);
    let wpf = |t: usize| {
        if wfar && t + WRITE_AHEAD < rows {
            row_ptr(t + WRITE_AHEAD)
        } else {
            std::ptr::null()
        }
    };
    if direct && !f32in {
        // A bf16 row into a bf16 output: every pass widens the row in registers (from
        // memory, then from the level-1 cache), no f32 row kept. Where [`lags`], the
        // passes run a row or two apart (rmsnorm: row `t`'s squares, then row `t − 1`'s
        // write; layernorm: row `t`'s mean, row `t − 1`'s squared deviations, row `t − 2`'s
        // write), so a row's final tree and `rstd` are computed while the next pass runs
        // instead of holding up its write; else each row's passes run in turn.
        let on = lags(nm, n);
        let sl = usize::from(nm.layer && on);
        let lag = sl + usize::from(on);
        let (mut mean, mut rstd) = ([0.0f32; 3], [0.0f32; 3]);
        for t in r0..r1 + lag {
            let s = t.wrapping_sub(sl);
            let mid = nm.layer && t >= r0 + sl && s < r1;
            if on && nm.layer {
                // Row `t`'s mean sums and row `t − 1`'s squared deviations in one loop
                // (`normpipe::sums`: both rows bf16 widened in registers, the lines of row
                // `t + 1` asked for).
                let r = super::normpipe::Rows {
                    g: std::ptr::null(),
                    b: std::ptr::null(),
                    n,
                    bc,
                    nt: true,
                };
                let (ip, mp) = (pass(t, true, 0.0, t + 1), pass(s, true, mean[s % 3], s));
                use super::normpipe::sums as sums2;
                // SAFETY: the caller's level; rows `t` (with `t < r1`) and `s` (with
                // `mid`) are in the tensor (asserted).
                let (si, sm) = unsafe {
                    match (t < r1, mid) {
                        (true, true) => sums2::<true, false, true, true, false>(&r, ip, mp),
                        (true, false) => sums2::<true, false, true, false, false>(&r, ip, mp),
                        (false, true) => sums2::<false, false, true, true, false>(&r, ip, mp),
                        (false, false) => (0.0, 0.0),
                    }
                };
                if t < r1 {
                    mean[t % 3] = si / nf;
                }
                if mid {
                    rstd[s % 3] = 1.0 / (sm / nf + nm.eps).sqrt();
                }
            } else if t < r1 {
                if nm.layer {
                    mean[t % 3] = sums!(false, true, true, false, pass(t, true, 0.0, t + 1)) / nf;
                } else {
                    let ss = sums!(true, true, true, false, pass(t, true, 0.0, t + 1));
                    // `vmath::rsqrt`'s `1 / sqrt`.
                    rstd[t % 3] = 1.0 / (ss / nf + nm.eps).sqrt();
                }
            }
            if !on && mid {
                let ss = sums!(true, true, false, false, pass(s, true, mean[s % 3], s));
                rstd[s % 3] = 1.0 / (ss / nf + nm.eps).sqrt();
            }
            if t >= r0 + lag {
                let w = t - lag;
                // SAFETY: the caller's level and AVX-512BW (checked); the row (asserted),
                // `g` (and `b`) hold `n` values.
                unsafe {
                    write_bf16(
                        out,
                        w * n,
                        (row_ptr(w), true),
                        (mean[w % 3], rstd[w % 3]),
                        (g, b),
                        nm.layer,
                        cvt,
                        (nt16, wpf(t)),
                    )
                };
            }
        }
        if nt16 {
            stream::fence();
        }
        return;
    }
    for row in r0..r1 {
        let (mean, ss) = match (nm.layer, f32in) {
            (true, true) => {
                let mean = sums!(false, false, false, pass(row, true, 0.0, row)) / nf;
                (
                    mean,
                    sums!(true, false, true, pass(row, true, mean, row + 1)),
                )
            }
            (false, true) => (0.0, sums!(true, false, true, pass(row, true, 0.0, row + 1))),
            (true, false) => {
                let mean = sums!(false, true, true, pass(row, true, 0.0, row + 1)) / nf;
                (mean, sums!(true, false, false, pass(row, false, mean, row)))
            }
            (false, false) => (0.0, sums!(true, true, true, pass(row, true, 0.0, row + 1))),
        };
        // `vmath::rsqrt`'s `1 / sqrt`.
        let rstd = 1.0 / (ss / nf + nm.eps).sqrt();
        let vals = if f32in {
            row_ptr(row) as *const f32
        } else {
            xwp as *const f32
        };
        // SAFETY: the f32 row (in the tensor, asserted) or `xw`'s, `n` values.
        let xs = unsafe { std::slice::from_raw_parts(vals, n) };
        if direct {
            // SAFETY: the caller's level and AVX-512BW (checked); `xs`, `g` (and `b`) hold
            // `n` values.
            unsafe {
                write_bf16(
                    out,
                    row * n,
                    (vals as *const u8, false),
                    (mean, rstd),
                    (g, b),
                    nm.layer,
                    cvt,
                    (nt16, if f32in { std::ptr::null() } else { wpf(row) }),
                )
            };
            continue;
        }
        write(
            out,
            row * n,
            xs,
            (mean, rstd),
            (g, b),
            nm.rows.round_bf16,
            nt,
            ow,
        );
    }
    if nt16 {
        stream::fence();
    }
}

/// The output row `((x − mean)·rstd)·γ (+ β)` of [`write`] into a bf16 tensor at element
/// `at`, from the `n` values at `xs` (f32, or with `bf` bf16 widened in registers), 16 lanes
/// at a time in registers, each lane narrowed as `bf16io::narrow` narrows it and stored:
/// the same bits without an f32 row in between. 32 lanes take one store, narrowed by
/// `vcvtne2ps2bf16` with `cvt` (`bf16io::store32_cvt`), else by integer rounding
/// (`bf16io::store32`); a ragged tail `bf16io::store16`.
/// With a non-null `pf` (a bf16 row of `n` values) each 32-lane step asks for that row's line
/// of the same columns into L2 ([`WRITE_AHEAD`]).
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX2 and FMA (with `cvt` also AVX-512DQ and
/// AVX-512 BF16: `bf16io::has_cvt`); `xs`, `g` (and `b`) hold `n` values.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn write_bf16(
    out: &Buffer,
    at: usize,
    (xs, bf): (*const u8, bool),
    mv: (f32, f32),
    gb: (&[f32], Option<&[f32]>),
    layer: bool,
    cvt: bool,
    (nt, pf): (bool, *const u8),
) {
    // SAFETY: the caller's.
    unsafe {
        match (bf, cvt) {
            (false, false) => write_bf16_512::<false>(out, at, xs, mv, gb, layer, (nt, pf)),
            (true, false) => write_bf16_512::<true>(out, at, xs, mv, gb, layer, (nt, pf)),
            (false, true) => write_bf16_cvt::<false>(out, at, xs, mv, gb, layer, (nt, pf)),
            (true, true) => write_bf16_cvt::<true>(out, at, xs, mv, gb, layer, (nt, pf)),
        }
    }
}

/// [`write_row_bf16`] narrowing by integer rounding.
///
/// # Safety
/// As [`write_bf16`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn write_bf16_512<const BF: bool>(
    out: &Buffer,
    at: usize,
    xs: *const u8,
    mv: (f32, f32),
    gb: (&[f32], Option<&[f32]>),
    layer: bool,
    nt: (bool, *const u8),
) {
    // SAFETY: the caller's.
    unsafe { write_row_bf16::<BF, false>(out, at, xs, mv, gb, layer, nt) }
}

/// [`write_row_bf16`] narrowing by `vcvtne2ps2bf16`.
///
/// # Safety
/// As [`write_bf16`] with `cvt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx2,fma")]
unsafe fn write_bf16_cvt<const BF: bool>(
    out: &Buffer,
    at: usize,
    xs: *const u8,
    mv: (f32, f32),
    gb: (&[f32], Option<&[f32]>),
    layer: bool,
    nt: (bool, *const u8),
) {
    // SAFETY: the caller's.
    unsafe { write_row_bf16::<BF, true>(out, at, xs, mv, gb, layer, nt) }
}

/// The loop of [`write_bf16`] over a row of `g.len()` values (`BF`: bf16 `xs`; `CVT`:
/// `vcvtne2ps2bf16`), inlined into the function built with the features it needs.
///
/// # Safety
/// As [`write_bf16`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn write_row_bf16<const BF: bool, const CVT: bool>(
    out: &Buffer,
    at: usize,
    xs: *const u8,
    (mean, rstd): (f32, f32),
    (g, b): (&[f32], Option<&[f32]>),
    layer: bool,
    (nt, pf): (bool, *const u8),
) {
    use super::norm512::{load, load_part};
    use core::arch::x86_64::*;
    let n = g.len();
    assert!(
        out.dtype == DType::BF16 && (at + n) * 2 <= out.len && b.is_none_or(|b| b.len() >= n),
        "fused store out of bounds"
    );
    // SAFETY: in bounds (asserted; `xs` holds `n` values: the caller's); programs of a
    // launch write disjoint rows.
    unsafe {
        let o = (out.ptr as *mut u16).add(at);
        let (mv, rv) = (_mm512_set1_ps(mean), _mm512_set1_ps(rstd));
        let gp = g.as_ptr();
        let bp = b.map(|b| b.as_ptr());
        // The 16 lanes from column `j`, the first `t` of them (a macro: a closure here is
        // not built with the caller's features).
        macro_rules! lanes {
            ($j:expr, $t:expr) => {
                lanes!($j, $t, layer, bp)
            };
            ($j:expr, $t:expr, $layer:expr, $bp:expr) => {{
                let (j, t): (usize, usize) = ($j, $t);
                let (layer, bp): (bool, Option<*const f32>) = ($layer, $bp);
                let k = if t >= 16 {
                    0xFFFF
                } else {
                    ((1u32 << t) - 1) as __mmask16
                };
                let x = if t >= 16 {
                    load::<BF>(xs, j)
                } else {
                    load_part::<BF>(xs, j, t)
                };
                let gv = _mm512_maskz_loadu_ps(k, gp.add(j));
                // rmsnorm's `x − 0` is `x` (NaN payloads aside): not computed.
                let d = if layer { _mm512_sub_ps(x, mv) } else { x };
                let v = _mm512_mul_ps(_mm512_mul_ps(d, rv), gv);
                match bp {
                    Some(bp) => _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bp.add(j))),
                    None => v,
                }
            }};
        }
        let mut j = 0;
        // With `nt`: plain stores up to the first 64-byte boundary, streaming ones of 32
        // lanes from there.
        let head = if nt { o.align_offset(64).min(n) } else { 0 };
        while j < head {
            let t = (head - j).min(16);
            let k = ((1u32 << t) - 1) as __mmask16;
            super::bf16io::store16(o.add(j), k, lanes!(j, t));
            j += t;
        }
        // The whole 32-lane steps, with `layer`, `β` and `nt` made constants of each loop.
        macro_rules! steps {
            ($layer:expr, $bp:expr, $nt:expr) => {
                while j + 32 <= n {
                    if !pf.is_null() {
                        // The bf16 row's line for these 32 columns; a prefetch never faults.
                        _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(j * 2) as *const i8);
                    }
                    let v0 = lanes!(j, 16, $layer, $bp);
                    let v1 = lanes!(j + 16, 16, $layer, $bp);
                    match ($nt, CVT) {
                        (true, true) => super::bf16io::stream32_cvt(o.add(j), v0, v1),
                        (false, true) => super::bf16io::store32_cvt(o.add(j), v0, v1),
                        (true, false) => super::bf16io::stream32(o.add(j), v0, v1),
                        (false, false) => super::bf16io::store32(o.add(j), v0, v1),
                    }
                    j += 32;
                }
            };
        }
        match (layer, bp, nt) {
            (true, Some(q), false) => steps!(true, Some(q), false),
            (true, Some(q), true) => steps!(true, Some(q), true),
            (false, None, false) => steps!(false, None, false),
            (false, None, true) => steps!(false, None, true),
            _ => steps!(layer, bp, nt),
        }
        while j + 16 <= n {
            super::bf16io::store16(o.add(j), 0xFFFF, lanes!(j, 16));
            j += 16;
        }
        if j < n {
            let k = ((1u32 << (n - j)) - 1) as __mmask16;
            super::bf16io::store16(o.add(j), k, lanes!(j, n - j));
        }
    }
}

/// The output row `((x − mean)·rstd)·γ (+ β)` (rmsnorm: `(x·rstd)·γ (+ β)`): computed into
/// `ow` and stored (narrowed, or rounded with `round`) when not `nt`, else through
/// `stream::write`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write(
    out: &Buffer,
    at: usize,
    xs: &[f32],
    (mean, rstd): (f32, f32),
    (g, b): (&[f32], Option<&[f32]>),
    round: bool,
    nt: bool,
    ow: &mut [f32],
) {
    let n = xs.len();
    if !nt {
        // The row into `ow` over zipped slices (no index checks: the loop vectorises; as a
        // closure of the column index through `chunk::write` it was partly scalar), then
        // stored as `chunk::write` stores it: narrowed into a bf16 tensor, rounded to bf16
        // first into an f32 one with `round`.
        let (o, g) = (&mut ow[..n], &g[..n]);
        match b {
            Some(b) => {
                for (((o, &x), &g), &b) in o.iter_mut().zip(xs).zip(g).zip(&b[..n]) {
                    *o = ((x - mean) * rstd) * g + b;
                }
            }
            None => {
                for ((o, &x), &g) in o.iter_mut().zip(xs).zip(g) {
                    *o = ((x - mean) * rstd) * g;
                }
            }
        }
        if round && out.dtype != DType::BF16 {
            super::bf16io::round(o);
        }
        return chunk::store(out, at, chunk::V::S(o), 0, n);
    }
    match b {
        Some(b) => stream::write(out, at, n, round, nt, ow, |j| {
            ((xs[j] - mean) * rstd) * g[j] + b[j]
        }),
        None => stream::write(out, at, n, round, nt, ow, |j| {
            ((xs[j] - mean) * rstd) * g[j]
        }),
    }
}

/// Whether a norm's rows take [`eo_rows_512`] / [`eo_rows_cvt`]: a layernorm or rmsnorm of
/// a bf16 row into a bf16 output at the AVX-512 level with AVX-512BW, rows whose chunks of
/// `bc` columns start on a 32-column step (one chunk, or `bc` a multiple of 32; a row's
/// last step may be ragged: `n` need not be a multiple of 32), and, where the output
/// streams (`stream::large`), rows of whole steps (`n` a multiple of 32) and a 64-byte
/// aligned output (every row then starts on a line); not on AMD, which keeps the measured
/// [`rows_avx512`] (these rows and their wider lag, [`eo_lags`], were measured only on the
/// Intel Xeon of their figures: on the Zen 5, rn16 found a lag at 4096 columns slower).
///
/// Ragged rows (nm22; before, `n % 32 ≠ 0` took [`rows_avx512`]): on the Intel Xeon (family
/// 6 model 207, 2-vCPU KVM guest), 2026-11-28 12:36–12:37 UTC, load 3.7–5.2 from other
/// helpers, `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile K (307200/C) C 400 --pool`, three
/// interleaved rounds with main's binary (bc6447d), fastest launch in ns per element, main →
/// this: layernorm_bf16 1T C = 300 0.393–0.403 → 0.273–0.291 (C = 288: 0.245–0.363, 320:
/// 0.242–0.272), 1000 0.267–0.276 → 0.210–0.218, 1023 0.272–0.281 → 0.205–0.213 (1024:
/// 0.198–0.205); 2T 300 0.388–0.395 → 0.277–0.284, 1000 0.269–0.335 → 0.212–0.220, 1023
/// 0.269–0.279 → 0.208–0.217; rmsnorm_bf16 1T 300 0.279–0.291 → 0.187–0.188 (288:
/// 0.158–0.166, 320: 0.150–0.160), 1000 0.180–0.182 → 0.144–0.149, 1023 0.189–0.192 →
/// 0.144–0.149 (1024: 0.138–0.142); 2T 300 0.285–0.289 → 0.112–0.184. The ragged step costs
/// about a whole one: a row of 300 columns costs a little more than one of 320 (5–10 %),
/// so per element 10–15 % over its aligned neighbours; 1000 and 1023 within ~5 % of 1024.
/// Tried, not kept: narrowing the ragged step by `vcvtne2ps2bf16` (a masked zero check) as
/// the whole steps are: C = 300 layernorm 0.278–0.388 against 0.282–0.408, rmsnorm
/// 0.186–0.189 against 0.187–0.189 (12:42, four rounds); `γ` and `β` in `eo_order` from a
/// 64-byte boundary: the same within noise at 300, 320, 1000 and 1024 (12:46, three rounds).
#[cfg(target_arch = "x86_64")]
fn eo_fits(nm: &Norm, (x, out): (&Buffer, &Buffer), n: usize) -> bool {
    use crate::backend::cpu::simd::{SimdLevel, active};
    let bc = nm.rows.bc;
    !crate::backend::cpu::simd::is_amd()
        && x.dtype == DType::BF16
        && out.dtype == DType::BF16
        && n > 0
        && (bc >= n || bc % 32 == 0)
        && active() >= SimdLevel::Avx512
        && std::arch::is_x86_feature_detected!("avx512bw")
        && ((n % 32 == 0 && out.ptr as usize % 64 == 0) || !stream::large(out))
}

/// The `γ` (and `β`) of [`eo_rows`]' write: f32 in [`eo_order`] (`n` rounded up to whole
/// 32-column steps), or bf16 in column order (`n`; widened by [`widen_eo`] as the row is,
/// which puts them in that order).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) enum EoGb<'a> {
    F32(&'a [f32], Option<&'a [f32]>),
    Bf16(&'a [u16], Option<&'a [u16]>),
}

#[cfg(target_arch = "x86_64")]
impl EoGb<'_> {
    /// Whether `γ` (and `β`) hold at least `n` values (f32 ones: `n` rounded up to whole
    /// 32-column steps).
    fn holds(&self, n: usize) -> bool {
        match self {
            EoGb::F32(g, b) => {
                let n = n.next_multiple_of(32);
                g.len() >= n && b.is_none_or(|b| b.len() >= n)
            }
            EoGb::Bf16(g, b) => g.len() >= n && b.is_none_or(|b| b.len() >= n),
        }
    }

    /// The first elements of `γ` and `β` (null without one) and whether they are bf16.
    fn ptrs(&self) -> (*const u8, *const u8, bool) {
        match self {
            EoGb::F32(g, b) => (
                g.as_ptr() as *const u8,
                b.map_or(std::ptr::null(), |b| b.as_ptr() as *const u8),
                false,
            ),
            EoGb::Bf16(g, b) => (
                g.as_ptr() as *const u8,
                b.map_or(std::ptr::null(), |b| b.as_ptr() as *const u8),
                true,
            ),
        }
    }
}

/// Whether [`eo_rows`] reads a bf16 `γ` (and `β`) as stored ([`EoGb::Bf16`], widened by the
/// write: one integer op per 16 columns each) rather than widened once a launch into f32
/// in [`eo_order`]: when all of them are bf16 and the f32 ones would not leave room in L1
/// (the bf16 rows `t − 2 ..= t + 1` of a layernorm, `t − 1 ..= t + 1` of an rmsnorm, and the
/// f32 vectors over 3/4 of it: 4096 columns, not 1024, on the Xeon's 48 KiB).
///
/// Intel Xeon (family 6 model 207, 2-vCPU KVM guest), experiment build with the choice on
/// an environment switch, 2026-11-28 09:09–09:16 UTC, load 4.6–8 from other helpers' builds,
/// `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile layernorm_bf16 R C 200 --pool`, 5 interleaved
/// rounds, fastest launch in µs (ratio to the same run's memcpy), f32 → bf16 `γ`/`β`:
/// `[1024, 4096]` 1T 1215–1625 (0.47–0.64) → 1033–1393 (0.59–0.71), 2T 1108–1260
/// (0.53–0.62) → 916–1050 (0.68–0.74) (main: 1083–1382 (0.55–0.66), 676–1214 (0.52–0.62));
/// `[4096, 1024]` 1T 947–1621 (0.53–0.80) → 1001–1350 (0.55–0.72): kept f32 there.
#[cfg(target_arch = "x86_64")]
fn eo_bf16_vectors(nm: &Norm, args: &[Buffer], n: usize) -> bool {
    let rows = 3 + usize::from(nm.layer);
    let vectors = 1 + usize::from(nm.beta.is_some());
    let wide = (rows * 2 + vectors * 4) * n > crate::backend::cpu::cache::l1_data_bytes() / 4 * 3;
    let all = [Some(nm.gamma), nm.beta]
        .into_iter()
        .flatten()
        .all(|p| args[p].dtype == DType::BF16);
    all && wide
}

/// One program's rows `r0 .. r0 + br` (of `rows`) on [`eo_rows_cvt`] where the CPU has
/// `bf16io::has_cvt`, else [`eo_rows_512`], lagged as [`eo_lags`] says for `gb`'s kind.
///
/// # Safety
/// As [`eo_rows`]: [`eo_fits`] holds; `gb` holds `n` values per vector.
#[cfg(target_arch = "x86_64")]
unsafe fn eo_program(
    nm: &Norm,
    xo: (&Buffer, &Buffer),
    (r0, br, rows): (usize, usize, usize),
    n: usize,
    gb: EoGb,
) {
    let r1 = (r0 + br).min(rows);
    let lag = eo_lags(nm, n, matches!(gb, EoGb::Bf16(..)));
    // SAFETY: the caller's.
    unsafe {
        if super::bf16io::has_cvt() {
            eo_rows_cvt(nm, xo, (r0, r1, rows), n, gb, lag)
        } else {
            eo_rows_512(nm, xo, (r0, r1, rows), n, gb, lag)
        }
    }
}

/// `v` reordered as [`eo_rows_512`] keeps a row: each 32-column step's even columns, then
/// its odd ones (`w[32k + i] = v[32k + 2i]`, `w[32k + 16 + i] = v[32k + 2i + 1]`, `i < 16`),
/// a ragged last step padded with `+0` (`w` holds `v.len()` rounded up to whole steps).
#[cfg(target_arch = "x86_64")]
fn eo_order(v: &[f32], w: &mut [f32]) {
    let n = v.len();
    for (k, d) in w[..n.next_multiple_of(32)].chunks_exact_mut(32).enumerate() {
        let at = |c: usize| v.get(32 * k + c).copied().unwrap_or(0.0);
        for i in 0..16 {
            d[i] = at(2 * i);
            d[16 + i] = at(2 * i + 1);
        }
    }
}

/// The 32 bf16 values from column `j` of `p`, widened by one 64-byte load and two integer
/// ops: the even columns (`x << 16` of each 32-bit lane) and the odd ones (its high half),
/// lane `i` holding column `j + 2i` and `j + 2i + 1` (no word permute, as
/// `norm512::widen16`'s `vpmovzxwd` is).
///
/// # Safety
/// AVX-512F present (the caller is built with it); the 32 values are readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen_eo(
    p: *const u16,
    j: usize,
    hi: core::arch::x86_64::__m512i,
) -> (core::arch::x86_64::__m512, core::arch::x86_64::__m512) {
    use core::arch::x86_64::*;
    // SAFETY: the caller's.
    unsafe {
        let v = _mm512_loadu_si512(p.add(j) as *const __m512i);
        (
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)),
            _mm512_castsi512_ps(_mm512_and_si512(v, hi)),
        )
    }
}

/// [`widen_eo`] of the columns `k` selects (a row's last, ragged step: a masked word load),
/// the others `+0`.
///
/// # Safety
/// AVX-512F and BW present (the caller is built with them); the words of `k` are readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen_eo_part(
    p: *const u16,
    j: usize,
    k: core::arch::x86_64::__mmask32,
    hi: core::arch::x86_64::__m512i,
) -> (core::arch::x86_64::__m512, core::arch::x86_64::__m512) {
    use core::arch::x86_64::*;
    // SAFETY: the caller's; a masked load does not read the words it leaves out.
    unsafe {
        let v = _mm512_maskz_loadu_epi16(k, p.add(j) as *const i16);
        (
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)),
            _mm512_castsi512_ps(_mm512_and_si512(v, hi)),
        )
    }
}

/// The word mask of a ragged step's first `t < 32` columns, and the lane masks of its even
/// and odd columns as [`widen_eo`] splits them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn eo_masks(t: usize) -> (u32, u16, u16) {
    (
        ((1u64 << t) - 1) as u32,
        ((1u32 << t.div_ceil(2)) - 1) as u16,
        ((1u32 << (t / 2)) - 1) as u16,
    )
}

/// `norm512::tree` of 32 lane accumulators kept split as [`widen_eo`] splits the columns
/// (`e`'s lane `i` is accumulator `2i`, `o`'s accumulator `2i + 1`): put back in lane order
/// first, so the same tree and the same bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tree_eo(e: core::arch::x86_64::__m512, o: core::arch::x86_64::__m512) -> f32 {
    use core::arch::x86_64::*;
    // SAFETY: only called from functions built with AVX-512F, AVX2 and FMA.
    unsafe {
        let lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        let hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        super::norm512::tree(
            _mm512_permutex2var_ps(e, lo, o),
            _mm512_permutex2var_ps(e, hi, o),
        )
    }
}

/// The sums of [`eo_rows`]: with `IN` the mean's sum of row `xi` (with `SQIN` rmsnorm's
/// sum of its squares; from memory, asking for the lines of `ahead` as it goes), with `MID` the squared deviations' sum of row `xm`
/// about `mean`; per chunk of `bc` columns 32 lane accumulators (column `c0 + k` to lane
/// `k mod 32`) and [`tree_eo`], added in column order: `vmath::sum`'s bits.
///
/// # Safety
/// As [`eo_rows`]; `n` values at `xi` (`IN`) and `xm` (`MID`); chunks that start on a
/// step (a ragged step only at the row's end).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn eo_sums<const IN: bool, const MID: bool, const SQIN: bool>(
    (xi, ahead): (*const u16, *const u16),
    (xm, mean): (*const u16, f32),
    n: usize,
    bc: usize,
) -> (f32, f32) {
    use core::arch::x86_64::*;
    // SAFETY: the caller's.
    unsafe {
        let mm = _mm512_set1_ps(mean);
        let hi = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        let z = _mm512_setzero_ps();
        let (mut si, mut sm) = (0.0f32, 0.0f32);
        let mut c0 = 0;
        while c0 < n {
            let c1 = (c0 + bc).min(n);
            let (mut a, mut b) = ((z, z), (z, z));
            // The 32 columns of `p` from `j`, or (`part`) those of the word mask `k`.
            macro_rules! wid {
                (full, $p:expr, $j:expr) => {
                    widen_eo($p, $j, hi)
                };
                (part $k:expr, $p:expr, $j:expr) => {
                    widen_eo_part($p, $j, $k, hi)
                };
            }
            // A step of 32 columns from `j`, or (`part`, lane masks `ke`, `ko` of
            // `eo_masks`) the row's ragged last one: its other lanes read `+0`, which adds
            // nothing to a lane accumulator (never `-0`: it starts at `+0`), as
            // `vmath::sum`'s tail leaves those lanes; their deviations are selected to `+0`
            // before squaring.
            macro_rules! step {
                ($j:expr, $ke:expr, $ko:expr, $($w:tt)+) => {{
                    let (j, ke, ko): (usize, u16, u16) = ($j, $ke, $ko);
                    if IN {
                        // The next row's line for these columns (a prefetch never faults).
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(j) as *const i8);
                        let (e, o) = wid!($($w)+, xi, j);
                        a = if SQIN {
                            // rmsnorm's squares (`x − 0 = x` exactly: not computed).
                            (
                                _mm512_add_ps(a.0, _mm512_mul_ps(e, e)),
                                _mm512_add_ps(a.1, _mm512_mul_ps(o, o)),
                            )
                        } else {
                            (_mm512_add_ps(a.0, e), _mm512_add_ps(a.1, o))
                        };
                    }
                    if MID {
                        let (e, o) = wid!($($w)+, xm, j);
                        let (de, dq) = if ke & ko == 0xFFFF {
                            (_mm512_sub_ps(e, mm), _mm512_sub_ps(o, mm))
                        } else {
                            (_mm512_maskz_sub_ps(ke, e, mm), _mm512_maskz_sub_ps(ko, o, mm))
                        };
                        b = (
                            _mm512_add_ps(b.0, _mm512_mul_ps(de, de)),
                            _mm512_add_ps(b.1, _mm512_mul_ps(dq, dq)),
                        );
                    }
                }};
            }
            let mut j = c0;
            while j + 32 <= c1 {
                step!(j, 0xFFFF, 0xFFFF, full);
                j += 32;
            }
            if j < c1 {
                let (k, ke, ko) = eo_masks(c1 - j);
                step!(j, ke, ko, part k);
            }
            if IN {
                si += tree_eo(a.0, a.1);
            }
            if MID {
                sm += tree_eo(b.0, b.1);
            }
            c0 = c1;
        }
        (si, sm)
    }
}

/// The output row `((x − mean)·rstd)·γ (+ β)` (rmsnorm, without `LAYER`: `(x·rstd)·γ (+
/// β)`) at `o` from the bf16 row `x` ([`widen_eo`]) and `γ`, `β` (f32 in [`eo_order`], or
/// with `GBF` bf16 in column order, widened as the row is), 32 columns a step narrowed in
/// column order (`bf16io::store32_eo`, or `_cvt` with `CVT`; streamed with `NT`), a ragged
/// last step (`n` not a multiple of 32) by masked loads ([`widen_eo_part`]; an f32 `γ`,
/// `β` padded in [`eo_order`]) and a masked store (`bf16io::store32_eo_part`); with a
/// non-null `pf` each step asks for that bf16 row's line of the same columns into L2
/// ([`WRITE_AHEAD`]).
///
/// # Safety
/// As [`eo_rows`] (with `CVT` also AVX-512DQ and BF16); `n` values at `x` (and bf16 ones at
/// `gp`, `bp` with `GBF`; `n` rounded up to whole steps of f32 ones) and writable at `o`,
/// with `NT` 64-byte aligned and `n` a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn eo_write<
    const CVT: bool,
    const BETA: bool,
    const NT: bool,
    const LAYER: bool,
    const GBF: bool,
>(
    o: *mut u16,
    (x, mean, rstd): (*const u16, f32, f32),
    (gp, bp): (*const u8, *const u8),
    n: usize,
    pf: *const u16,
) {
    use core::arch::x86_64::*;
    // SAFETY: the caller's.
    unsafe {
        let (mv, rv) = (_mm512_set1_ps(mean), _mm512_set1_ps(rstd));
        let hi = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        // `γ` or `β`'s 32 columns from `j`, split as the row is.
        macro_rules! vec32 {
            ($p:expr, $j:expr) => {{
                let (p, j): (*const u8, usize) = ($p, $j);
                if GBF {
                    widen_eo(p as *const u16, j, hi)
                } else {
                    let p = p as *const f32;
                    (_mm512_loadu_ps(p.add(j)), _mm512_loadu_ps(p.add(j + 16)))
                }
            }};
        }
        macro_rules! lanes {
            ($x:expr, $g:expr, $b:expr) => {{
                // rmsnorm's `x − 0` is `x` (NaN payloads aside): not computed.
                let d = if LAYER { _mm512_sub_ps($x, mv) } else { $x };
                let v = _mm512_mul_ps(_mm512_mul_ps(d, rv), $g);
                if BETA { _mm512_add_ps(v, $b) } else { v }
            }};
        }
        let z = _mm512_setzero_ps();
        let mut j = 0;
        while j + 32 <= n {
            if !pf.is_null() {
                _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(j) as *const i8);
            }
            let (e, q) = widen_eo(x, j, hi);
            let (ge, gq) = vec32!(gp, j);
            let (be, bq) = if BETA { vec32!(bp, j) } else { (z, z) };
            let (e, q) = (lanes!(e, ge, be), lanes!(q, gq, bq));
            match (NT, CVT) {
                (true, true) => super::bf16io::stream32_eo_cvt(o.add(j), e, q),
                (false, true) => super::bf16io::store32_eo_cvt(o.add(j), e, q),
                (true, false) => super::bf16io::stream32_eo(o.add(j), e, q),
                (false, false) => super::bf16io::store32_eo(o.add(j), e, q),
            }
            j += 32;
        }
        if j < n {
            // The ragged last step: the row's (and a bf16 `γ`, `β`'s) other words read as
            // `+0`, an f32 `γ`, `β` padded; only the row's columns stored.
            let (k, _, _) = eo_masks(n - j);
            let (e, q) = widen_eo_part(x, j, k, hi);
            let (ge, gq, be, bq) = if GBF {
                let (ge, gq) = widen_eo_part(gp as *const u16, j, k, hi);
                let (be, bq) = if BETA {
                    widen_eo_part(bp as *const u16, j, k, hi)
                } else {
                    (z, z)
                };
                (ge, gq, be, bq)
            } else {
                let (ge, gq) = vec32!(gp, j);
                let (be, bq) = if BETA { vec32!(bp, j) } else { (z, z) };
                (ge, gq, be, bq)
            };
            let (e, q) = (lanes!(e, ge, be), lanes!(q, gq, bq));
            super::bf16io::store32_eo_part(o.add(j), k, e, q);
        }
    }
}

/// [`eo_rows`] narrowing by integer rounding.
///
/// # Safety
/// As [`eo_rows`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
unsafe fn eo_rows_512(
    nm: &Norm,
    xo: (&Buffer, &Buffer),
    rr: (usize, usize, usize),
    n: usize,
    gb: EoGb,
    lag: bool,
) {
    // SAFETY: the caller's.
    unsafe { eo_rows::<false>(nm, xo, rr, n, gb, lag) }
}

/// [`eo_rows`] narrowing by `vcvtne2ps2bf16`.
///
/// # Safety
/// As [`eo_rows`], and `bf16io::has_cvt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx2,fma")]
unsafe fn eo_rows_cvt(
    nm: &Norm,
    xo: (&Buffer, &Buffer),
    rr: (usize, usize, usize),
    n: usize,
    gb: EoGb,
    lag: bool,
) {
    // SAFETY: the caller's.
    unsafe { eo_rows::<true>(nm, xo, rr, n, gb, lag) }
}

/// The rows `r0 .. r1` of a layernorm or rmsnorm bf16 → bf16 ([`eo_fits`]) with fewer vector ops per
/// column than [`rows_avx512`]'s, the same bits: each pass widens its 32 columns by
/// [`widen_eo`] (one 64-byte load and one integer op per 16 columns instead of a
/// `vpmovzxwd`, on the shuffle port, and a shift), its sums kept split into even and odd
/// columns ([`tree_eo`]), and the write takes `γ` and `β` in that order ([`eo_order`]) and
/// narrows 32 columns with one `vcvtne2ps2bf16` and one word permute (`CVT`; its subnormal
/// check one `vptestnmw`, not two `vfpclassps`). The passes run a row or two apart as in
/// [`rows_avx512`]'s (row `t`'s mean with row `t − 1`'s squared deviations in one loop, then
/// row `t − 2`'s write; rmsnorm: row `t`'s squares, then row `t − 1`'s write) with `lag`
/// ([`eo_lags`]), else in turn. Past the cache the write asks for the lines of row `t +
/// WRITE_AHEAD`. A bf16 `γ` (and `β`) may be read as stored ([`EoGb::Bf16`]).
///
/// Intel Xeon (family 6 model 207, 2-vCPU KVM guest), 2026-11-28 06:14–06:15 UTC, load
/// 3.5–4.0 from other jobs, `RAYON_NUM_THREADS=T chrt -f 50 cpu_profile layernorm_bf16 R C
/// 200 --pool`, four interleaved rounds with main's binary (c5e45d2), fastest launch in µs
/// (ratio to the same run's memcpy): `[4096, 1024]` 1T 978–1091 (0.63–0.64) → 822–943
/// (0.68–0.78), 2T 502–544 (0.62–0.65) → 423–444 (0.73–0.77); `[1024, 4096]` 1T 1229–1454
/// (0.49–0.54) → 1034–1305 (0.57–0.60), 2T 640–673 (0.49–0.56) → 542–721 (0.49–0.60).
/// Tried, not kept (06:01–06:11, same commands, load 3–9): keeping `x − mean` (f32) from
/// the squares' pass for the write (two ops fewer per 32 columns; no faster at `[4096,
/// 1024]`, slower at `[1024, 4096]`, whose 16 KiB f32 rows leave L1), keeping the row
/// widened by the mean's pass (slower), asking for row `t + 2` or `t + 4` in the write.
///
/// rmsnorm (rn21; the same machine, 2026-11-28 09:24–09:25 UTC, load 4.6–5.3 from other
/// helpers' builds, `cpu_profile rmsnorm_bf16 …` as above, five interleaved rounds with main's
/// binary a5b9485, which ran [`rows_avx512`]): `[4096, 1024]` 1T 716–895 (0.75–0.94) → 676–753
/// (0.85–1.01), 2T 481–530 (0.66–0.74) → 424–450 (0.78–0.84); `[1024, 4096]` (bf16 `γ`,
/// [`eo_bf16_vectors`]) 1T 742–1011 (0.69–0.92) → 741–915 (0.76–0.92), 2T 469–516 (0.75–0.81)
/// → 402–491 (0.78–0.88); `[8192, 4096]` 1T (09:30, six rounds) 8226–11059 → 7749–10533 µs.
/// Tried, not kept (layernorm, 09:15–09:18, load 4–20): the write one row behind the sums
/// instead of two at 4096 columns (a row less in L1): `[1024, 4096]` 1T 911–1205 µs against
/// 912–1223, 2T the same within noise; `[4096, 1024]` 1T slower (926–970 against 883–948).
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW, AVX2 and FMA (with `CVT` `bf16io::has_cvt`);
/// [`eo_fits`]; `gb` holds `n` values each (f32 ones in [`eo_order`]), a `β` where `nm`
/// has one.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn eo_rows<const CVT: bool>(
    nm: &Norm,
    (x, out): (&Buffer, &Buffer),
    (r0, r1, rows): (usize, usize, usize),
    n: usize,
    gb: EoGb,
    lag: bool,
) {
    // Streaming stores only where every row starts on a line: `eo_fits` asked the same, but
    // `stream::large` may answer otherwise by now (`cache::set_last_level_bytes` while the
    // launch runs, which changes only the store choice), and a ragged or unaligned row would
    // then fail the bounds check or stream to an address off a line.
    let nt = stream::large(out) && n % 32 == 0 && (out.ptr as usize).is_multiple_of(64);
    assert!(
        rows * n * 2 <= x.len && rows * n * 2 <= out.len && (n % 32 == 0 || !nt) && gb.holds(n),
        "fused load out of bounds"
    );
    let (gp, bp, gbf) = gb.ptrs();
    let beta = !bp.is_null();
    let layer = nm.layer;
    let bc = nm.rows.bc;
    let nf = n as i32 as f32;
    let row = |r: usize| (x.ptr as *const u16).wrapping_add(r.wrapping_mul(n));
    let orow = |r: usize| (out.ptr as *mut u16).wrapping_add(r.wrapping_mul(n));
    let wfar = nt && stream::past_cache(x.len + out.len);
    let wpf = |t: usize| {
        if wfar && t + WRITE_AHEAD < rows {
            row(t + WRITE_AHEAD)
        } else {
            std::ptr::null()
        }
    };
    let ahead = |t: usize| if t + 1 < rows { row(t + 1) } else { row(t) };
    let gb = (gp, bp);
    // A row's write (macros: a closure here is not built with the caller's features).
    macro_rules! go {
        ($w:expr, $xm:expr, $pf:expr, $beta:literal, $nt:literal, $layer:literal, $gbf:literal) => {
            eo_write::<CVT, $beta, $nt, $layer, $gbf>(orow($w), $xm, gb, n, $pf)
        };
    }
    macro_rules! write {
        ($w:expr, $mean:expr, $rstd:expr, $pf:expr) => {{
            let (w, pf): (usize, *const u16) = ($w, $pf);
            let xm = (row(w), $mean, $rstd);
            // SAFETY: the caller's level; rows below `rows` are in the tensors (asserted);
            // programs of a launch write disjoint rows.
            unsafe {
                match (beta, nt, layer, gbf) {
                    (true, false, true, false) => go!(w, xm, pf, true, false, true, false),
                    (true, true, true, false) => go!(w, xm, pf, true, true, true, false),
                    (false, false, true, false) => go!(w, xm, pf, false, false, true, false),
                    (false, true, true, false) => go!(w, xm, pf, false, true, true, false),
                    (true, false, false, false) => go!(w, xm, pf, true, false, false, false),
                    (true, true, false, false) => go!(w, xm, pf, true, true, false, false),
                    (false, false, false, false) => go!(w, xm, pf, false, false, false, false),
                    (false, true, false, false) => go!(w, xm, pf, false, true, false, false),
                    (true, false, true, true) => go!(w, xm, pf, true, false, true, true),
                    (true, true, true, true) => go!(w, xm, pf, true, true, true, true),
                    (false, false, true, true) => go!(w, xm, pf, false, false, true, true),
                    (false, true, true, true) => go!(w, xm, pf, false, true, true, true),
                    (true, false, false, true) => go!(w, xm, pf, true, false, false, true),
                    (true, true, false, true) => go!(w, xm, pf, true, true, false, true),
                    (false, false, false, true) => go!(w, xm, pf, false, false, false, true),
                    (false, true, false, true) => go!(w, xm, pf, false, true, false, true),
                }
            }
        }};
    }
    let null = std::ptr::null();
    if !layer {
        // rmsnorm: row `t`'s squares (from memory), then, `lag`, row `t − 1`'s write.
        let l = usize::from(lag);
        let mut rstd = [0.0f32; 2];
        for t in r0..r1 + l {
            if t < r1 {
                // SAFETY: row `t` is in the tensor.
                let (ss, _) =
                    unsafe { eo_sums::<true, false, true>((row(t), ahead(t)), (null, 0.0), n, bc) };
                // `vmath::rsqrt`'s `1 / sqrt`.
                rstd[t % 2] = 1.0 / (ss / nf + nm.eps).sqrt();
            }
            if t >= r0 + l {
                let w = t - l;
                write!(w, 0.0, rstd[w % 2], wpf(t));
            }
        }
    } else if lag {
        let (mut mean, mut rstd) = ([0.0f32; 3], [0.0f32; 3]);
        for t in r0..r1 + 2 {
            let s = t.wrapping_sub(1);
            let (first, mid) = (t < r1, t > r0 && s < r1);
            let (ip, mp) = ((row(t), ahead(t)), (row(s), mean[s % 3]));
            // SAFETY: rows `t` (with `first`) and `s` (with `mid`) are in the tensor.
            let (si, sm) = unsafe {
                match (first, mid) {
                    (true, true) => eo_sums::<true, true, false>(ip, mp, n, bc),
                    (true, false) => eo_sums::<true, false, false>(ip, mp, n, bc),
                    (false, true) => eo_sums::<false, true, false>(ip, mp, n, bc),
                    (false, false) => (0.0, 0.0),
                }
            };
            if first {
                mean[t % 3] = si / nf;
            }
            if mid {
                // `vmath::rsqrt`'s `1 / sqrt`.
                rstd[s % 3] = 1.0 / (sm / nf + nm.eps).sqrt();
            }
            if t >= r0 + 2 {
                let w = t - 2;
                write!(w, mean[w % 3], rstd[w % 3], wpf(t));
            }
        }
    } else {
        for t in r0..r1 {
            // SAFETY: row `t` is in the tensor.
            let (si, _) =
                unsafe { eo_sums::<true, false, false>((row(t), ahead(t)), (null, 0.0), n, bc) };
            let mean = si / nf;
            // SAFETY: as above.
            let (_, sm) =
                unsafe { eo_sums::<false, true, false>((null, null), (row(t), mean), n, bc) };
            write!(t, mean, 1.0 / (sm / nf + nm.eps).sqrt(), wpf(t));
        }
    }
    if nt {
        stream::fence();
    }
}

/// Whether [`eo_rows`] runs its passes a row or two apart: when the bf16 rows
/// `t − 2 ..= t + 1` and the widened `γ` (and `β`) take at most half the level-2 cache
/// (further than [`lags`]' level-1 limit). On the Intel Xeon of [`eo_rows`]' figures (06:09–06:11 UTC,
/// load 3.7–8.8, three interleaved rounds, experiment build with the choice on an
/// environment switch), `[1024, 4096]` (8 KiB rows) in turn → apart, fastest launch in µs:
/// 1T 1203/1437/1698 → 1207/1176/1223, 2T apart 762–780 against main's 883–936.
///
/// rmsnorm keeps the bf16 rows `t − 1 ..= t + 1`; bf16 `γ` and `β` read as stored (`gbf`)
/// take 2 bytes a value.
#[cfg(target_arch = "x86_64")]
fn eo_lags(nm: &Norm, n: usize, gbf: bool) -> bool {
    let rows = 3 + usize::from(nm.layer);
    let vectors = 1 + usize::from(nm.beta.is_some());
    let size = if gbf { 2 } else { 4 };
    (rows * 2 + vectors * size) * n <= crate::backend::cpu::cache::l2_bytes() / 2
}

/// Whether the bf16 → bf16 rows of [`rows_avx512`] run their passes a row or two apart:
/// when what stays in the level-1 cache meanwhile (the bf16 rows `t − lag ..= t`, the row
/// asked for, the widened `γ` (and `β`) and the output row) takes at most 3/4 of it. One
/// thread (rn16, `cpu_profile K R C 200 --pool`, load 6–7, µs, in turn → apart): `[4096,
/// 1024]` rmsnorm bf16 355–359 → 324–325, layernorm bf16 573 → 474–479; `[1024, 4096]`
/// (over the limit) rmsnorm bf16 271–280 → 295–301, layernorm bf16 505–515 → 531–541.
fn lags(nm: &Norm, n: usize) -> bool {
    let rows = 4 + usize::from(nm.layer);
    let vectors = 1 + usize::from(nm.beta.is_some());
    (rows * 2 + vectors * 4) * n <= crate::backend::cpu::cache::l1_data_bytes() / 4 * 3
}

/// The norm of this file's tests and `normpipe`'s: `x` argument 0, `out` 1, `γ` 2 (`β` 3
/// with `beta`), programs of `br` rows, chunks of `bc` columns, `eps` 1e-5.
#[cfg(test)]
pub(super) fn test_norm(br: usize, bc: usize, beta: bool, layer: bool) -> Norm {
    Norm {
        rows: super::rowmatch::Rows {
            x: 0,
            out: 1,
            br,
            bc,
            round_bf16: false,
        },
        gamma: 2,
        beta: beta.then_some(3),
        layer,
        eps: 1e-5,
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::rowmatch::Rows;
    use super::*;

    use crate::backend::cpu::fused::normpipe::tests::buffer;

    /// Whether this CPU lacks what the even/odd rows need (AVX-512F/BW, AVX2, FMA); a test
    /// that gets `true` says it did not run and returns.
    fn lacks_avx512bw() -> bool {
        let has = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma");
        if !has {
            eprintln!("not run: no AVX-512F/BW");
        }
        !has
    }

    /// Fresh pseudo-random bf16 values about `[-4, 4)` (a xorshift; the seed is in every
    /// failure message).
    fn values(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                let v = (*seed >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0;
                half::bf16::from_f32(v).to_f32()
            })
            .collect()
    }

    /// `normpipe`'s [`reference_f32`](super::super::normpipe::tests::reference_f32), the row
    /// narrowed to bf16.
    fn reference(xs: &[f32], bc: usize, g: &[f32], b: Option<&[f32]>, layer: bool) -> Vec<u16> {
        super::super::normpipe::tests::reference_f32(xs, bc, g, b, layer)
            .into_iter()
            .map(|y| half::bf16::from_f32(y).to_bits())
            .collect()
    }

    /// The layernorm and rmsnorm bf16 → bf16 rows of [`eo_rows_512`] and [`eo_rows_cvt`]
    /// (where the CPU has `vcvtne2ps2bf16`), with `γ` and `β` f32 in [`eo_order`] or bf16 as
    /// stored ([`EoGb`]), their passes a row or two apart or in turn: rows of
    /// one to 128 steps of 32 columns, and of every width 1 ..= 70, 300, 1000, 1023 and 4095
    /// (a ragged last step: masked loads and store), chunks of `bc` columns (64, 1024, 4096: several
    /// chunks a row, or one), programs of 1, 2, 3 and 8 rows (a last program cut short),
    /// with and without `β`, and a `γ` scaled to about `2^-130` (no `β`: most outputs
    /// subnormal, which `vcvtne2ps2bf16` reads as zero, so its steps take the integer
    /// narrowing), against the interpreter's sums, bit for bit, with fresh random inputs.
    /// First, which shapes [`eo_fits`] sends there: chunks of `bc` columns narrower than the
    /// row that are not whole 32-column steps stay on [`rows_avx512`] (`eo_sums` would add
    /// across the chunks' ends); rows of any width otherwise; rmsnorms as layernorms.
    #[test]
    fn norm_bf16_rows_split_even_odd_match_the_interpreter() {
        if lacks_avx512bw() {
            return;
        }
        // Which rows take the even/odd path: chunks of whole 32-column steps (or one chunk a
        // row) only, since `eo_sums` adds a chunk 32 columns at a time; not on AMD.
        for (n, bc, fits) in [
            (2048, 64, true),
            (2048, 4096, true),
            (2048, 2048, true),
            (1024, 1031, true),
            (1031, 2048, true),
            (1031, 64, true),
            (300, 300, true),
            (7, 64, true),
            (2048, 48, false),
            (2048, 1000, false),
            (1031, 1000, false),
            (1056, 1040, false),
        ] {
            let mut xb = vec![0u16; 2 * n];
            let mut ob = vec![0u16; 2 * n];
            let x = buffer(DType::BF16, xb.as_mut_ptr() as *mut u8, (2, n));
            let out = buffer(DType::BF16, ob.as_mut_ptr() as *mut u8, (2, n));
            let rows = Rows {
                x: 0,
                out: 1,
                br: 1,
                bc,
                round_bf16: false,
            };
            let nm = Norm {
                rows,
                gamma: 2,
                beta: Some(3),
                layer: true,
                eps: 1e-5,
            };
            let want = fits && !crate::backend::cpu::simd::is_amd();
            assert_eq!(eo_fits(&nm, (&x, &out), n), want, "[2, {n}] bc {bc}");
            let rms = Norm {
                layer: false,
                beta: None,
                ..nm
            };
            assert_eq!(
                eo_fits(&rms, (&x, &out), n),
                want,
                "rmsnorm [2, {n}] bc {bc}"
            );
        }
        let start = crate::backend::cpu::clock_seed() | 1;
        let mut seed = start;
        let mut ran = [0usize; 2];
        let cases = [
            (true, true, false),
            (true, false, false),
            (true, false, true),
        ];
        let rms = [
            (false, false, false),
            (false, true, false),
            (false, false, true),
        ];
        let widths = [(5, 32), (19, 1024), (10, 2048), (4, 3072), (3, 4096)]
            .into_iter()
            .chain((1..=70).map(|n| (3 + n % 5, n)))
            .chain([(7, 300), (5, 1000), (4, 1023), (3, 4095)]);
        for (rows, n) in widths {
            for bc in [64, 1024, 4096] {
                for br in [1, 2, 3, 8] {
                    for (layer, beta, tiny) in cases.into_iter().chain(rms) {
                        let xs = values(&mut seed, rows * n);
                        let mut xb: Vec<u16> = xs
                            .iter()
                            .map(|&v| half::bf16::from_f32(v).to_bits())
                            .collect();
                        let mut g = values(&mut seed, n);
                        if tiny {
                            // (bf16 values, for `EoGb::Bf16`.)
                            for v in &mut g {
                                *v = half::bf16::from_f32(*v * f32::from_bits(0x0080_0000) / 16.0)
                                    .to_f32();
                            }
                        }
                        let bv = values(&mut seed, n);
                        let bits = |v: &[f32]| -> Vec<u16> {
                            v.iter()
                                .map(|&v| half::bf16::from_f32(v).to_bits())
                                .collect()
                        };
                        let (g16, b16) = (bits(&g), bits(&bv));
                        let b = beta.then_some(&bv[..]);
                        let nm = test_norm(br, bc, beta, layer);
                        let n32 = n.next_multiple_of(32);
                        let (mut go, mut bo) = (vec![f32::NAN; n32], vec![f32::NAN; n32]);
                        eo_order(&g, &mut go);
                        eo_order(&bv, &mut bo);
                        for (cvt, lag, gbf) in [
                            (false, true, false),
                            (true, true, false),
                            (false, false, false),
                            (true, false, false),
                            (false, true, true),
                            (true, true, true),
                            (false, false, true),
                            (true, false, true),
                        ] {
                            if cvt && !super::super::bf16io::has_cvt() {
                                continue;
                            }
                            let mut ob = vec![0x7fc1u16; rows * n];
                            let x = buffer(DType::BF16, xb.as_mut_ptr() as *mut u8, (rows, n));
                            let out = buffer(DType::BF16, ob.as_mut_ptr() as *mut u8, (rows, n));
                            // AMD keeps `rows_avx512` (`eo_fits` is false there); the
                            // rows are called directly below on any CPU with the features.
                            assert!(
                                crate::backend::cpu::simd::is_amd() || eo_fits(&nm, (&x, &out), n)
                            );
                            let gb = if gbf {
                                EoGb::Bf16(&g16, beta.then_some(&b16[..]))
                            } else {
                                EoGb::F32(&go, beta.then_some(&bo[..]))
                            };
                            for r0 in (0..rows).step_by(br) {
                                let rr = (r0, (r0 + br).min(rows), rows);
                                // SAFETY: AVX-512F/BW, AVX2 and FMA are present (and the
                                // `vcvtne2ps2bf16` features with `cvt`); `eo_fits`; `gb`
                                // holds `n` values each (f32 ones in `eo_order`).
                                unsafe {
                                    if cvt {
                                        eo_rows_cvt(&nm, (&x, &out), rr, n, gb, lag)
                                    } else {
                                        eo_rows_512(&nm, (&x, &out), rr, n, gb, lag)
                                    }
                                }
                            }
                            ran[usize::from(cvt)] += 1;
                            for r in 0..rows {
                                let want = reference(&xs[r * n..(r + 1) * n], bc, &g, b, layer);
                                let got = &ob[r * n..(r + 1) * n];
                                if let Some(j) = (0..n).find(|&j| got[j] != want[j]) {
                                    panic!(
                                        "[{rows}, {n}] bc {bc} br {br} layer {layer} beta \
                                         {beta} tiny {tiny} cvt {cvt} lag {lag} gbf {gbf}: row \
                                         {r} column {j}: {:#06x} != {:#06x} (seed {start})",
                                        got[j], want[j]
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        eprintln!(
            "ran: integer narrowing {}, vcvtne2ps2bf16 {}",
            ran[0], ran[1]
        );
    }

    /// bf16 → bf16 layernorms and rmsnorms through [`run`] (the choice of path included:
    /// [`eo_rows`] with `γ` and `β` bf16 as stored or f32 in [`eo_order`], or
    /// [`rows_avx512`] for chunks not of whole 32-column steps; widths of whole steps and
    /// ragged ones), with `γ` and `β` f32, bf16 or one of each, programs of one and three
    /// rows sharing the worker's row scratch (`kept`), against the interpreter's sums, bit
    /// for bit, with fresh random inputs. Each launch's path ([`TOOK`]) is checked: the
    /// even/odd rows exactly where [`eo_fits`]; `γ` and `β` read as stored only when all
    /// are bf16, and always so at 4096 columns where the level-1 cache is at most 48 KiB
    /// (as on the Xeon of [`eo_bf16_vectors`]' figures), where at least one launch must
    /// have taken that path.
    #[test]
    fn bf16_norms_through_run_match_the_interpreter_for_each_storage_of_gamma_and_beta() {
        let start = crate::backend::cpu::clock_seed() | 1;
        let mut seed = start;
        let vector = |dtype: DType, ptr: *mut u8, n: usize| Buffer {
            dtype,
            shape: [n, 1, 1],
            rank: 1,
            ptr,
            len: n * dtype.size_bytes(),
            writable: false,
        };
        let mut launch = 0u64;
        let mut ran = [0usize; 3];
        let small_l1 = crate::backend::cpu::cache::l1_data_bytes() <= 48 << 10;
        for (rows, n) in [
            (5, 32),
            (7, 1000),
            (9, 1024),
            (4, 1056),
            (3, 4096),
            (6, 2050),
            (5, 300),
            (4, 37),
            (3, 1023),
            (2, 4095),
        ] {
            for bc in [64, 1000, 1024, 4096] {
                for br in [1, 3] {
                    for (layer, beta) in
                        [(true, true), (true, false), (false, false), (false, true)]
                    {
                        for (g16, b16) in
                            [(false, false), (true, true), (true, false), (false, true)]
                        {
                            let xs = values(&mut seed, rows * n);
                            let mut xb: Vec<u16> = xs
                                .iter()
                                .map(|&v| half::bf16::from_f32(v).to_bits())
                                .collect();
                            let (mut g, mut bv) = (values(&mut seed, n), values(&mut seed, n));
                            let bits = |v: &[f32]| -> Vec<u16> {
                                v.iter()
                                    .map(|&v| half::bf16::from_f32(v).to_bits())
                                    .collect()
                            };
                            let (mut gb16, mut bb16) = (bits(&g), bits(&bv));
                            let mut ob = vec![0x7fc1u16; rows * n];
                            let args = [
                                buffer(DType::BF16, xb.as_mut_ptr() as *mut u8, (rows, n)),
                                buffer(DType::BF16, ob.as_mut_ptr() as *mut u8, (rows, n)),
                                if g16 {
                                    vector(DType::BF16, gb16.as_mut_ptr() as *mut u8, n)
                                } else {
                                    vector(DType::F32, g.as_mut_ptr() as *mut u8, n)
                                },
                                if b16 {
                                    vector(DType::BF16, bb16.as_mut_ptr() as *mut u8, n)
                                } else {
                                    vector(DType::F32, bv.as_mut_ptr() as *mut u8, n)
                                },
                            ];
                            let nm = test_norm(br, bc, beta, layer);
                            assert!(fits(&nm, &args, n));
                            let eo = eo_fits(&nm, (&args[0], &args[1]), n);
                            let all16 = g16 && (b16 || !beta);
                            launch += 1;
                            let mut buf = Vec::new();
                            let mut kept = 0u64;
                            for pid in 0..rows.div_ceil(br) {
                                run(&nm, &mut buf, (&mut kept, launch), pid, &args, rows, n);
                                let took = TOOK.with(|t| t.get());
                                let what = format!(
                                    "[{rows}, {n}] bc {bc} br {br} layer {layer} beta {beta} \
                                     γ bf16 {g16} β bf16 {b16}: path {took}"
                                );
                                assert_eq!(eo, took != 0, "{what}");
                                assert!(took != 2 || all16, "{what}");
                                if eo && all16 && n == 4096 && small_l1 {
                                    assert_eq!(took, 2, "{what}");
                                }
                                if pid == 0 {
                                    ran[usize::from(took)] += 1;
                                }
                            }
                            let b = beta.then_some(&bv[..]);
                            for r in 0..rows {
                                let want = reference(&xs[r * n..(r + 1) * n], bc, &g, b, layer);
                                let got = &ob[r * n..(r + 1) * n];
                                if let Some(j) = (0..n).find(|&j| got[j] != want[j]) {
                                    panic!(
                                        "[{rows}, {n}] bc {bc} br {br} layer {layer} beta \
                                         {beta} γ bf16 {g16} β bf16 {b16}: row {r} column \
                                         {j}: {:#06x} != {:#06x} (seed {start})",
                                        got[j], want[j]
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        eprintln!(
            "ran: other rows {}, even/odd rows {} (γ, β f32) and {} (bf16 as stored)",
            ran[0], ran[1], ran[2]
        );
        let here = std::is_x86_feature_detected!("avx512bw")
            && crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
            && !crate::backend::cpu::simd::is_amd();
        if here && small_l1 {
            assert!(ran[2] > 0 && ran[1] > 0 && ran[0] > 0, "{ran:?}");
        }
    }

    /// [`eo_rows`] streams only rows that start on a 64-byte line (`n` a multiple of 32, the
    /// output 64-byte aligned), whatever `stream::large` answers when it runs: [`eo_fits`]
    /// asked it before, and a launch may get another answer by then
    /// (`cache::set_last_level_bytes` while it runs, which is to change only the store
    /// choice). Here the rows run in a one-thread pool, where an output of `nt_bytes`
    /// streams, as [`eo_fits`] would not have taken them there: ragged (300 columns) and
    /// unaligned (320 columns, the output one bf16 off a line): no panic, no streaming store
    /// off a line, and bit for bit the same rows as outside the pool.
    #[test]
    fn eo_rows_stream_only_rows_that_start_on_a_line() {
        if lacks_avx512bw() {
            return;
        }
        let mut seed = crate::backend::cpu::clock_seed() | 1;
        let start = seed;
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        // `stream::nt_bytes`: what a one-thread launch streams from.
        let from = crate::backend::cpu::cache::last_level_bytes() / 8 * 3;
        for (n, off) in [(300usize, 0usize), (320, 1)] {
            let rows = from / (2 * n) + 2;
            if rows * n * 2 > 1 << 28 {
                eprintln!("not run at {n} columns: the last-level cache is counted too large");
                continue;
            }
            let xs = values(&mut seed, rows * n);
            let mut xb: Vec<u16> = xs
                .iter()
                .map(|&v| half::bf16::from_f32(v).to_bits())
                .collect();
            let gb16 = |seed: &mut u64| -> Vec<u16> {
                values(seed, n)
                    .iter()
                    .map(|&v| half::bf16::from_f32(v).to_bits())
                    .collect()
            };
            let (g16, b16) = (gb16(&mut seed), gb16(&mut seed));
            let nm = test_norm(8, 4096, true, true);
            // (Addresses: a `Buffer` is not `Send`.)
            let xa = xb.as_mut_ptr() as usize;
            let mut outs = Vec::new();
            for pool in [false, true] {
                let mut ob = vec![0u16; rows * n + 32 + off];
                let at = ob.as_ptr().align_offset(64) + off;
                let oa = ob[at..].as_mut_ptr() as usize;
                let go = || {
                    let x = buffer(DType::BF16, xa as *mut u8, (rows, n));
                    let out = buffer(DType::BF16, oa as *mut u8, (rows, n));
                    if pool {
                        assert!(stream::large(&out), "{n} columns: not streamed");
                    }
                    let gb = EoGb::Bf16(&g16, Some(&b16));
                    // SAFETY: AVX-512F/BW, AVX2 and FMA are present; `gb` holds `n` values
                    // each; the rows are in `x` and `out`.
                    unsafe { eo_rows_512(&nm, (&x, &out), (0, rows, rows), n, gb, true) }
                };
                if pool {
                    one.install(go)
                } else {
                    go()
                }
                outs.push(ob[at..at + rows * n].to_vec());
            }
            assert!(
                outs[0] == outs[1],
                "{n} columns: streamed rows differ (seed {start})"
            );
        }
    }

    /// The bf16 → bf16 rows of [`rows_avx512`], their passes a row or two apart ([`lags`])
    /// or in turn, with rows of several chunks (a row-wise tile narrower than the row, as
    /// an autotuned schedule runs: `bc` of 64, 1000 and 1024 columns, ragged last chunks),
    /// programs of 1, 2, 3 and 8 rows (the lag's first and last rows of each program, a
    /// last program cut short), against the interpreter's sums, bit for bit.
    #[test]
    fn bf16_rows_of_several_chunks_match_the_interpreter_apart_and_in_turn() {
        if lacks_avx512bw() {
            return;
        }
        let start = crate::backend::cpu::clock_seed() | 1;
        let mut seed = start;
        for (rows, n) in [
            (5, 47),
            (19, 1031),
            (10, 2049),
            (7, 3000),
            (4, 3072),
            (3, 4099),
        ] {
            for bc in [64, 1000, 1024, 4096] {
                for br in [1, 2, 3, 8] {
                    for (layer, beta) in [(true, true), (false, false), (true, false)] {
                        let xs = values(&mut seed, rows * n);
                        let mut xb: Vec<u16> = xs
                            .iter()
                            .map(|&v| half::bf16::from_f32(v).to_bits())
                            .collect();
                        let g = values(&mut seed, n);
                        let bv = values(&mut seed, n);
                        let b = beta.then_some(&bv[..]);
                        let mut ob = vec![0x7fc1u16; rows * n];
                        let nm = test_norm(br, bc, beta, layer);
                        let x = buffer(DType::BF16, xb.as_mut_ptr() as *mut u8, (rows, n));
                        let out = buffer(DType::BF16, ob.as_mut_ptr() as *mut u8, (rows, n));
                        let (mut xw, mut ow) = (vec![0.0f32; n], vec![0.0f32; n]);
                        for r0 in (0..rows).step_by(br) {
                            let r1 = (r0 + br).min(rows);
                            // SAFETY: AVX-512F/BW, AVX2 and FMA are present; `g` and `b`
                            // hold `n` values; bf16 outputs are not streamed here (`nt`
                            // false; `stream::large` outputs are fenced by the loop).
                            unsafe {
                                rows_avx512(
                                    &nm,
                                    (&x, &out),
                                    (r0, r1, rows),
                                    n,
                                    (&g, b),
                                    (&mut xw, &mut ow),
                                    false,
                                )
                            };
                        }
                        for r in 0..rows {
                            let want = reference(&xs[r * n..(r + 1) * n], bc, &g, b, layer);
                            let got = &ob[r * n..(r + 1) * n];
                            if let Some(j) = (0..n).find(|&j| got[j] != want[j]) {
                                panic!(
                                    "[{rows}, {n}] bc {bc} br {br} layer {layer} beta {beta} \
                                     lags {}: row {r} column {j}: {:#06x} != {:#06x} (seed {start})",
                                    lags(&nm, n),
                                    got[j],
                                    want[j]
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
