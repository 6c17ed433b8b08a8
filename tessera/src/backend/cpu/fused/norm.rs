//! The layernorm / rmsnorm row loop ([`super::rowmatch::Norm`]): one program's rows, each
//! read once from memory (a bf16 row widened into a row buffer) and then walked in L1 for
//! the mean (`vmath::sum` per chunk of `bc` columns, added in column order), the sum of
//! squared deviations (or squares) and the write `((x − mean)·rstd)·γ (+ β)`, with the
//! interpreter's arithmetic op for op. Lanes past the row end of the interpreter's chunks
//! read `+0` (or are selected to `+0`), which adds nothing to a lane of `vmath::sum`, so only
//! the row's own columns are computed. At the AVX-512 level the sums and an f32 output row
//! run in `norm512` (the same bits); its pass over the squared deviations of an f32 row asks
//! for the next row's lines as it goes (spread over the pass, not at the start of the row),
//! and a large f32 output takes non-temporal stores (`stream`).

use super::super::vmath;
use super::rowmatch::Norm;
use super::{chunk, stream};
use crate::backend::Buffer;
use tessera_ir::DType;

/// Runs program `pid` (rows `pid·br ..`) of a `[rows, n]` norm whose `γ` and `β` are `[n]`
/// vectors ([`fits`]); `buf` is the worker's row scratch.
pub(crate) fn run(
    nm: &Norm,
    buf: &mut Vec<f32>,
    pid: usize,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    // The row, a chunk of squares, γ and β (widened), the output row.
    let need = 5 * n + nm.rows.bc;
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        return unsafe { run_avx2(nm, buf, pid, args, rows, n) };
    }
    body(nm, buf, pid, args, rows, n)
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
unsafe fn run_avx2(nm: &Norm, buf: &mut [f32], pid: usize, args: &[Buffer], rows: usize, n: usize) {
    body(nm, buf, pid, args, rows, n)
}

/// `n` values of the f32 or bf16 tensor `b` from element `at`: the tensor's own memory
/// (f32) or `w` (bf16, widened).
#[inline(always)]
fn widen<'a>(b: &'a Buffer, at: usize, n: usize, w: &'a mut [f32]) -> &'a [f32] {
    if b.dtype == DType::F32 {
        chunk::f32s(b, at, n)
    } else {
        chunk::load(b, at, &mut w[..n]);
        &w[..n]
    }
}

#[inline(always)]
fn body(nm: &Norm, buf: &mut [f32], pid: usize, args: &[Buffer], rows: usize, n: usize) {
    let (x, out) = (&args[nm.rows.x], &args[nm.rows.out]);
    let (br, bc) = (nm.rows.br, nm.rows.bc);
    let (xw, rest) = buf.split_at_mut(n);
    let (q, rest) = rest.split_at_mut(bc);
    let (gw, rest) = rest.split_at_mut(n);
    let (bw, ow) = rest.split_at_mut(n);
    let g = widen(&args[nm.gamma], 0, n, gw);
    let b = nm.beta.map(|p| widen(&args[p], 0, n, bw));
    let nf = n as i32 as f32;
    let round = nm.rows.round_bf16;
    let nt = stream::wanted(out, round);
    #[cfg(target_arch = "x86_64")]
    let z = crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512;
    let r0 = pid * br;
    let r1 = (r0 + br).min(rows);
    for row in r0..r1 {
        let at = row * n;
        let xs = widen(x, at, n, xw);
        #[cfg(target_arch = "x86_64")]
        if z {
            // SAFETY: the active level is at most the detected one: AVX-512F is present.
            let ahead = (x.dtype == DType::F32).then(|| xs.as_ptr().wrapping_add(n));
            let (mean, rstd) = unsafe { stats_avx512(nm, xs, bc, nf, ahead) };
            if out.dtype == DType::F32 && !round {
                // SAFETY: as above; `g` and `b` are `[n]`; `nt` is `stream::wanted` of
                // `out`, fenced below.
                unsafe { super::norm512::write(out, at, xs, (mean, rstd), g, b, nt) };
            } else {
                write(out, at, xs, (mean, rstd), (g, b), round, nt, ow);
            }
            continue;
        }
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

/// The row's mean (`0` for rmsnorm) and `rstd`, as the portable loops compute them, with the
/// sums of [`super::norm512::sum`].
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn stats_avx512(
    nm: &Norm,
    xs: &[f32],
    bc: usize,
    nf: f32,
    ahead: Option<*const f32>,
) -> (f32, f32) {
    use super::norm512::sum;
    let n = xs.len();
    let mean = if nm.layer {
        let mut acc = 0.0f32;
        for c0 in (0..n).step_by(bc) {
            // SAFETY: the caller's level.
            acc += unsafe { sum::<false>(&xs[c0..(c0 + bc).min(n)], 0.0, None) };
        }
        acc / nf
    } else {
        0.0
    };
    let mut ss = 0.0f32;
    for c0 in (0..n).step_by(bc) {
        // SAFETY: as above.
        let ahead = ahead.map(|p| p.wrapping_add(c0));
        ss += unsafe { sum::<true>(&xs[c0..(c0 + bc).min(n)], mean, ahead) };
    }
    let mut rstd = [ss / nf + nm.eps];
    vmath::rsqrt(&mut rstd);
    (mean, rstd[0])
}

/// The output row `((x − mean)·rstd)·γ (+ β)` (rmsnorm: `(x·rstd)·γ (+ β)`) through
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
    match b {
        Some(b) => stream::write(out, at, n, round, nt, ow, |j| {
            ((xs[j] - mean) * rstd) * g[j] + b[j]
        }),
        None => stream::write(out, at, n, round, nt, ow, |j| {
            ((xs[j] - mean) * rstd) * g[j]
        }),
    }
}
