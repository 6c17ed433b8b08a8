//! `load, load → binary → store` groups (an elementwise kernel such as `add`,
//! [`super::plan::Group::binary`]) as one loop per chunk: each output element is computed
//! from the two inputs in registers (bf16 widened there, exactly) and written straight to the
//! output, rounded to bf16 when the output is bf16, with no chunk slot in between.

use super::chunk::{V, bf16_bits, bin_f, round_bf16};
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
    let f32s = |b: &Buffer, at: usize| {
        assert!(
            b.dtype == DType::F32 && (at + w) * 4 <= b.len,
            "fused access out of bounds"
        );
        // SAFETY: in bounds (checked above); loaded tensors are not written during the launch.
        unsafe { std::slice::from_raw_parts((b.ptr as *const f32).add(at), w) }
    };
    let u16s = |b: &Buffer, at: usize| {
        assert!(
            b.dtype == DType::BF16 && (at + w) * 2 <= b.len,
            "fused access out of bounds"
        );
        // SAFETY: as above, bf16 storage.
        unsafe { std::slice::from_raw_parts((b.ptr as *const u16).add(at), w) }
    };
    let wide = |x: &u16| f32::from_bits((*x as u32) << 16);
    // The output; the plan made it f32 or bf16 and never a loaded parameter.
    // f32 values for whole rows of an output past `stream::wanted`'s threshold are streamed
    // from an L1 buffer (the caller fences).
    let nt = a.dtype == DType::F32 && super::stream::streams(o, io, w);
    let (of, mut ob) = match o.dtype {
        _ if nt => (None, None),
        DType::F32 => {
            assert!((io + w) * 4 <= o.len, "fused store out of bounds");
            // SAFETY: in bounds; programs of a launch write disjoint elements.
            let s = unsafe { std::slice::from_raw_parts_mut((o.ptr as *mut f32).add(io), w) };
            (Some(s), None)
        }
        _ => {
            assert!((io + w) * 2 <= o.len, "fused store out of bounds");
            // SAFETY: as above, bf16 storage.
            let s = unsafe { std::slice::from_raw_parts_mut((o.ptr as *mut u16).add(io), w) };
            (None, Some(s))
        }
    };
    // bf16 in and out: widened, combined and narrowed in registers (`bf16io::binary`).
    if a.dtype == DType::BF16
        && let Some(o) = ob.as_deref_mut()
        && super::bf16io::binary(p.op, u16s(a, ia), u16s(b, ib), o)
    {
        return true;
    }
    macro_rules! lanes {
        ($f:expr) => {{
            let f = $f;
            match (a.dtype, of, ob) {
                (DType::F32, None, None) => {
                    let (x, y) = (f32s(a, ia), f32s(b, ib));
                    let mut t = [0f32; 256];
                    for k in (0..w).step_by(256) {
                        let m = (w - k).min(256);
                        for ((t, x), y) in t[..m].iter_mut().zip(&x[k..]).zip(&y[k..]) {
                            *t = f(*x, *y);
                        }
                        super::stream::store(o, io + k, V::S(&t[..m]), 0, m, true);
                    }
                }
                (DType::F32, Some(o), _) => {
                    for ((o, x), y) in o.iter_mut().zip(f32s(a, ia)).zip(f32s(b, ib)) {
                        *o = f(*x, *y);
                    }
                }
                (DType::F32, _, Some(o)) => {
                    for ((o, x), y) in o.iter_mut().zip(f32s(a, ia)).zip(f32s(b, ib)) {
                        *o = bf16_bits(f(*x, *y)) as u16;
                    }
                }
                (_, Some(o), _) => {
                    // bf16 operands give a bf16 value, rounded before it is widened to the f32
                    // output (`plan::binary_pipe` routes this case to the general loop today).
                    for ((o, x), y) in o.iter_mut().zip(u16s(a, ia)).zip(u16s(b, ib)) {
                        *o = round_bf16(f(wide(x), wide(y)));
                    }
                }
                (_, _, Some(o)) => {
                    for ((o, x), y) in o.iter_mut().zip(u16s(a, ia)).zip(u16s(b, ib)) {
                        *o = bf16_bits(f(wide(x), wide(y))) as u16;
                    }
                }
                _ => unreachable!("one output slice"),
            }
        }};
    }
    match p.op {
        BinaryOp::Add => lanes!(|x: f32, y: f32| x + y),
        BinaryOp::Sub => lanes!(|x: f32, y: f32| x - y),
        BinaryOp::Mul => lanes!(|x: f32, y: f32| x * y),
        BinaryOp::Div => lanes!(|x: f32, y: f32| x / y),
        op => lanes!(|x: f32, y: f32| bin_f(op, x, y)),
    }
    true
}

/// Rows ahead of the current one whose inputs [`run`] prefetches.
const AHEAD: usize = 2;
