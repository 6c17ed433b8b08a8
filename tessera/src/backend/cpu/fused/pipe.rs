//! `load, load → binary → store` groups (an elementwise kernel such as `add`,
//! [`super::plan::Group::binary`]) as one loop per chunk: each output element is computed
//! from the two inputs in registers (bf16 widened there, exactly) and written straight to the
//! output, rounded to bf16 when the output is bf16, with no chunk slot in between. The loop
//! ([`span`]) also runs the whole-tensor pass ([`super::flat`]).

use super::chunk::bin_f;
use super::plan::{COp, Group, Pipe};
use super::run::window;
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::graph::BinaryOp;

/// Runs columns `c0 .. c0 + w` of row `r`; `false` (nothing done) unless both loads' and the
/// store's windows cover all `w` columns.
#[inline(always)]
pub(crate) fn run(
    p: &Pipe,
    g: &Group,
    args: &[Buffer],
    sc: &[f64],
    r: usize,
    c0: usize,
    w: usize,
) -> bool {
    let at = |m: usize| -> Option<(usize, usize)> {
        let (COp::Load {
            param, idx, rank, ..
        }
        | COp::Store {
            param, idx, rank, ..
        }) = &g.members[m].op
        else {
            return None;
        };
        let (at, lo, hi) = window(&args[*param], idx, sc, *rank, r, c0, w);
        ((lo, hi) == (0, w)).then_some((*param, at))
    };
    let (Some((a, ia)), Some((b, ib)), Some((o, io))) = (at(p.a), at(p.b), at(p.store)) else {
        return false;
    };
    // The inputs' windows `AHEAD` rows on, asked for now when a window is not a whole row:
    // a tile narrower than its tensor reads short strided runs, which the hardware
    // prefetcher alone streams too late.
    for m in [p.a, p.b] {
        if let COp::Load {
            param, idx, rank, ..
        } = &g.members[m].op
        {
            let buf = &args[*param];
            let (at, lo, hi) = window(buf, idx, sc, *rank, r + AHEAD, c0, w);
            if (lo, hi) == (0, w) && buf.dims().last() != Some(&w) {
                super::stream::prefetch_lines(buf, at, w);
            }
        }
    }
    let (a, b, o) = (&args[a], &args[b], &args[o]);
    // Whole rows of an output past the non-temporal threshold are streamed (the caller
    // fences).
    let nt = super::stream::streams(o, io, w);
    span(p.op, (a, ia), (b, ib), (o, io), w, nt);
    true
}

/// Elements per piece computed into an L1 buffer before it is narrowed or streamed.
const PIECE: usize = 1024;

/// `o[io + j] = op(a[ia + j], b[ib + j])` for `j < n`: `a` and `b` both f32 or both bf16
/// (widened exactly), `o` f32 or bf16 (narrowed: [`super::chunk::bf16_bits`]); bf16 operands give a bf16
/// value, rounded before it is stored to an f32 output. Streamed when `nt`.
///
/// The caller checks that `n` elements of each tensor lie at those offsets (asserted here
/// too) and, with `nt`, that [`super::stream::large`] holds for `o` and it fences before its
/// program returns.
#[inline(always)]
pub(crate) fn span(
    op: BinaryOp,
    a: (&Buffer, usize),
    b: (&Buffer, usize),
    o: (&Buffer, usize),
    n: usize,
    nt: bool,
) {
    match op {
        BinaryOp::Add => span_f(op, a, b, o, n, nt, |x, y| x + y),
        BinaryOp::Sub => span_f(op, a, b, o, n, nt, |x, y| x - y),
        BinaryOp::Mul => span_f(op, a, b, o, n, nt, |x, y| x * y),
        BinaryOp::Div => span_f(op, a, b, o, n, nt, |x, y| x / y),
        op => span_f(op, a, b, o, n, nt, move |x, y| bin_f(op, x, y)),
    }
}

#[inline(always)]
fn span_f(
    op: BinaryOp,
    (a, ia): (&Buffer, usize),
    (b, ib): (&Buffer, usize),
    (o, io): (&Buffer, usize),
    n: usize,
    nt: bool,
    f: impl Fn(f32, f32) -> f32,
) {
    use super::stream::{out_f32, out_u16, put_f32, put_u16};
    let zip = |t: &mut [f32], x: &[f32], y: &[f32]| {
        for ((t, x), y) in t.iter_mut().zip(x).zip(y) {
            *t = f(*x, *y);
        }
    };
    // SAFETY (for `out_f32`, `out_u16`, `put_f32` and `put_u16` below): the caller's
    // elements of the output, which no other program or range of the launch touches and no
    // input aliases (`plan::compile`); with `nt` the caller's contract (`large`, fenced).
    match (a.dtype, o.dtype) {
        (DType::F32, DType::F32) if !nt => {
            zip(unsafe { out_f32(o, io, n) }, f32s(a, ia, n), f32s(b, ib, n))
        }
        (DType::F32, DType::F32) => {
            let mut t = [0f32; PIECE];
            for k in (0..n).step_by(PIECE) {
                let m = (n - k).min(PIECE);
                zip(&mut t[..m], f32s(a, ia + k, m), f32s(b, ib + k, m));
                unsafe { put_f32(o, io + k, &t[..m], true) };
            }
        }
        (DType::F32, _) => {
            let (mut t, mut h) = ([0f32; PIECE], [0u16; PIECE]);
            for k in (0..n).step_by(PIECE) {
                let m = (n - k).min(PIECE);
                zip(&mut t[..m], f32s(a, ia + k, m), f32s(b, ib + k, m));
                if nt {
                    super::bf16io::narrow(&t[..m], &mut h[..m]);
                    unsafe { put_u16(o, io + k, &h[..m], true) };
                } else {
                    super::bf16io::narrow(&t[..m], unsafe { out_u16(o, io + k, m) });
                }
            }
        }
        // bf16 in and out: widened, combined and narrowed in registers (`bf16io::binary`).
        (_, DType::BF16) if super::bf16io::has_binary(op) && !nt => {
            super::bf16io::binary(op, u16s(a, ia, n), u16s(b, ib, n), unsafe {
                out_u16(o, io, n)
            });
        }
        (_, DType::BF16) if super::bf16io::has_binary(op) => {
            let mut h = [0u16; PIECE];
            for k in (0..n).step_by(PIECE) {
                let m = (n - k).min(PIECE);
                super::bf16io::binary(op, u16s(a, ia + k, m), u16s(b, ib + k, m), &mut h[..m]);
                unsafe { put_u16(o, io + k, &h[..m], true) };
            }
        }
        _ => {
            // bf16 operands of another op, or an f32 output: both widened into L1, combined,
            // then narrowed (bf16 output) or rounded and stored (f32 output).
            let (mut t, mut u, mut h) = ([0f32; PIECE], [0f32; PIECE], [0u16; PIECE]);
            for k in (0..n).step_by(PIECE) {
                let m = (n - k).min(PIECE);
                let (t, u) = (&mut t[..m], &mut u[..m]);
                super::bf16io::widen(u16s(a, ia + k, m), t);
                super::bf16io::widen(u16s(b, ib + k, m), u);
                for (t, u) in t.iter_mut().zip(u.iter()) {
                    *t = f(*t, *u);
                }
                if o.dtype == DType::BF16 {
                    if nt {
                        super::bf16io::narrow(t, &mut h[..m]);
                        unsafe { put_u16(o, io + k, &h[..m], true) };
                    } else {
                        super::bf16io::narrow(t, unsafe { out_u16(o, io + k, m) });
                    }
                } else {
                    super::bf16io::round(t);
                    unsafe { put_f32(o, io + k, t, nt) };
                }
            }
        }
    }
}

/// The `n` values at element offset `at` of the f32 tensor `b`.
#[inline(always)]
fn f32s(b: &Buffer, at: usize, n: usize) -> &[f32] {
    assert!(
        b.dtype == DType::F32 && (at + n) * 4 <= b.len,
        "fused access out of bounds"
    );
    // SAFETY: in bounds (checked above); loaded tensors are not written during the launch.
    unsafe { std::slice::from_raw_parts((b.ptr as *const f32).add(at), n) }
}

/// The `n` bf16 bit patterns at element offset `at` of the bf16 tensor `b`.
#[inline(always)]
fn u16s(b: &Buffer, at: usize, n: usize) -> &[u16] {
    assert!(
        b.dtype == DType::BF16 && (at + n) * 2 <= b.len,
        "fused access out of bounds"
    );
    // SAFETY: as in `f32s`, bf16 storage.
    unsafe { std::slice::from_raw_parts((b.ptr as *const u16).add(at), n) }
}

/// Rows ahead of the current one whose inputs [`run`] prefetches.
const AHEAD: usize = 2;
