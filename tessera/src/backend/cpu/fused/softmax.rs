//! The softmax row loop ([`super::rowmatch::Softmax`]): one program's rows, each in two
//! passes over chunks of `bc` columns, with the interpreter's arithmetic op for op. The online
//! pass keeps `m` (running max) and `s` (running sum): per chunk `m' = max(m, max(x))`,
//! `s = s·exp(m − m') + Σ exp(x − m')` (`vmath::max`, `vmath::exp`, `vmath::sum` over the
//! chunk's columns), and it keeps each `exp(x − m')` in a row buffer. The write pass stores
//! `exp(x − m)·(1/s)`; for a chunk whose `m'` has the final `m`'s bits that exponential is the
//! kept one, so a row of one chunk (the common case: `bc` is 1024) takes one `exp` per
//! element. Lanes past the row end add nothing to the interpreter's `-inf`-padded chunk
//! (`max` ignores `-inf`, `exp(-inf) = +0` adds nothing to a lane of `vmath::sum`), so only
//! the row's own columns are computed.

use super::super::vmath;
use super::chunk::{self, bin_f};
use super::rowmatch::Softmax;
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::graph::BinaryOp;

/// Runs program `pid` (rows `pid·br ..`) of a `[rows, n]` softmax; `buf` is the worker's
/// row scratch.
pub(crate) fn run(
    sm: &Softmax,
    buf: &mut Vec<f32>,
    pid: usize,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    let bc = sm.rows.bc;
    let chunks = n.div_ceil(bc);
    // Exponentials of the row, a widened chunk, each chunk's running max.
    let need = n + bc + chunks;
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        return unsafe { run_avx2(sm, buf, pid, args, rows, n) };
    }
    body(sm, buf, pid, args, rows, n)
}

/// [`body`] built with AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(
    sm: &Softmax,
    buf: &mut [f32],
    pid: usize,
    args: &[Buffer],
    rows: usize,
    n: usize,
) {
    body(sm, buf, pid, args, rows, n)
}

#[inline(always)]
fn body(sm: &Softmax, buf: &mut [f32], pid: usize, args: &[Buffer], rows: usize, n: usize) {
    let (x, out) = (&args[sm.rows.x], &args[sm.rows.out]);
    let (br, bc) = (sm.rows.br, sm.rows.bc);
    let (e, rest) = buf.split_at_mut(n);
    let (xw, mk) = rest.split_at_mut(bc);
    let round = sm.rows.round_bf16;
    let r0 = pid * br;
    let r1 = (r0 + br).min(rows);
    for row in r0..r1 {
        let at = row * n;
        // The chunk `c0..c1` of the row as f32 (bf16 widened into `xw`, exactly).
        let chunk = |xw: &mut [f32], c0: usize, c1: usize| -> *const f32 {
            if x.dtype == DType::F32 {
                chunk::f32s(x, at + c0, c1 - c0).as_ptr()
            } else {
                chunk::load(x, at + c0, &mut xw[..c1 - c0]);
                xw.as_ptr()
            }
        };
        let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            // SAFETY: `chunk` returned `c1 - c0` values of the input or of `xw`, which
            // nothing writes until the next call.
            let xs = unsafe { std::slice::from_raw_parts(chunk(xw, c0, c1), c1 - c0) };
            let mn = bin_f(BinaryOp::Max, m, vmath::max(xs));
            let mut scale = [m - mn];
            vmath::exp(&mut scale);
            let es = &mut e[c0..c1];
            for (o, v) in es.iter_mut().zip(xs) {
                *o = v - mn;
            }
            vmath::exp(es);
            let s1 = s * scale[0];
            s = s1 + vmath::sum(es);
            m = mn;
            mk[k] = mn;
        }
        let inv = 1.0f32 / s;
        for (k, c0) in (0..n).step_by(bc).enumerate() {
            let c1 = (c0 + bc).min(n);
            let es = &mut e[c0..c1];
            if mk[k].to_bits() != m.to_bits() {
                // The max grew after this chunk: its exponentials are taken again.
                // SAFETY: as above.
                let xs = unsafe { std::slice::from_raw_parts(chunk(xw, c0, c1), c1 - c0) };
                for (o, v) in es.iter_mut().zip(xs) {
                    *o = v - m;
                }
                vmath::exp(es);
            }
            let es = &*es;
            chunk::write(out, at + c0, c1 - c0, round, |j| es[j] * inv);
        }
    }
}
