//! Chunk kernels: the loops a group runs over one chunk (at most `CHUNK` values of a tile row).
//! Simple slice loops that LLVM vectorises; transcendental functions call [`vmath`].

use super::super::vmath;
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::graph::{BinaryOp, UnaryOp};
use tessera_ir::tile::TileReduce;

/// An operand over a chunk: a slice, or one value broadcast.
#[derive(Clone, Copy)]
pub(crate) enum V<'a> {
    S(&'a [f32]),
    K(f32),
}

impl V<'_> {
    #[inline(always)]
    pub fn copy_to(&self, o: &mut [f32]) {
        match self {
            V::S(s) => o.copy_from_slice(s),
            V::K(x) => o.fill(*x),
        }
    }

    /// Reduces the first `w` values.
    #[inline(always)]
    pub fn reduce(&self, op: TileReduce, w: usize) -> f32 {
        match (self, op) {
            (V::S(s), TileReduce::Sum) => vmath::sum(s),
            (V::S(s), TileReduce::Max) => vmath::max(s),
            (V::K(x), TileReduce::Sum) => (0..w).fold(0.0, |a, _| a + x),
            (V::K(x), TileReduce::Max) if w > 0 => *x,
            (V::K(_), TileReduce::Max) => f32::NEG_INFINITY,
        }
    }
}

/// `o[j] = f(a[j], b[j])` with broadcasting.
#[inline(always)]
pub(crate) fn zip(a: V, b: V, o: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    match (a, b) {
        (V::S(x), V::S(y)) => {
            for ((o, x), y) in o.iter_mut().zip(x).zip(y) {
                *o = f(*x, *y);
            }
        }
        (V::S(x), V::K(y)) => {
            for (o, x) in o.iter_mut().zip(x) {
                *o = f(*x, y);
            }
        }
        (V::K(x), V::S(y)) => {
            for (o, y) in o.iter_mut().zip(y) {
                *o = f(x, *y);
            }
        }
        (V::K(x), V::K(y)) => o.fill(f(x, y)),
    }
}

/// `o[j] = if m[j] != 0 { a[j] } else { b[j] }`: one loop per operand kind, with no
/// per-element dispatch, so it vectorises.
#[inline(always)]
pub(crate) fn select(m: V, a: V, b: V, o: &mut [f32]) {
    #[inline(always)]
    fn pick(m: f32, a: f32, b: f32) -> f32 {
        if m != 0.0 { a } else { b }
    }
    let m = match m {
        V::S(m) => m,
        V::K(m) if m != 0.0 => return a.copy_to(o),
        V::K(_) => return b.copy_to(o),
    };
    match (a, b) {
        (V::S(a), V::S(b)) => {
            for (((o, m), a), b) in o.iter_mut().zip(m).zip(a).zip(b) {
                *o = pick(*m, *a, *b);
            }
        }
        (V::S(a), V::K(b)) => {
            for ((o, m), a) in o.iter_mut().zip(m).zip(a) {
                *o = pick(*m, *a, b);
            }
        }
        (V::K(a), V::S(b)) => {
            for ((o, m), b) in o.iter_mut().zip(m).zip(b) {
                *o = pick(*m, a, *b);
            }
        }
        (V::K(a), V::K(b)) => {
            for (o, m) in o.iter_mut().zip(m) {
                *o = pick(*m, a, b);
            }
        }
    }
}

/// A float binary op with the interpreter's NaN rules for max/min.
#[inline(always)]
pub(crate) fn bin_f(op: BinaryOp, p: f32, q: f32) -> f32 {
    match op {
        BinaryOp::Add => p + q,
        BinaryOp::Sub => p - q,
        BinaryOp::Mul => p * q,
        BinaryOp::Div => p / q,
        BinaryOp::Max => {
            if p.is_nan() || q.is_nan() {
                f32::NAN
            } else {
                p.max(q)
            }
        }
        BinaryOp::Min => {
            if p.is_nan() || q.is_nan() {
                f32::NAN
            } else {
                p.min(q)
            }
        }
    }
}

/// A bool binary op on 0/1 values: `mul`/`min` is and, the others or.
#[inline(always)]
pub(crate) fn bin_b(op: BinaryOp, p: f32, q: f32) -> f32 {
    match op {
        BinaryOp::Mul | BinaryOp::Min => p.min(q),
        _ => p.max(q),
    }
}

/// In place unary op (the interpreter's definitions).
#[inline(always)]
pub(crate) fn unary(op: UnaryOp, v: &mut [f32]) {
    match op {
        UnaryOp::Neg => v.iter_mut().for_each(|x| *x = -*x),
        UnaryOp::Abs => v.iter_mut().for_each(|x| *x = x.abs()),
        UnaryOp::Relu => v
            .iter_mut()
            .for_each(|x| *x = if x.is_nan() { *x } else { x.max(0.0) }),
        UnaryOp::Exp => vmath::exp(v),
        UnaryOp::Log => vmath::log(v),
        UnaryOp::Sqrt => vmath::sqrt(v),
        UnaryOp::Rsqrt => vmath::rsqrt(v),
        UnaryOp::Tanh => vmath::tanh(v),
        UnaryOp::Sigmoid => vmath::sigmoid(v),
        UnaryOp::Gelu => vmath::gelu(v),
    }
}

/// The bf16 bit pattern nearest `x` (round to nearest even; NaN stays a quiet NaN), as
/// `half::bf16::from_f32` computes it.
#[inline(always)]
pub(crate) fn bf16_bits(x: f32) -> u32 {
    let b = x.to_bits();
    if b & 0x7FFF_FFFF > 0x7F80_0000 {
        (b >> 16) | 0x0040
    } else {
        b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16
    }
}

/// `x` rounded to bf16 precision, as f32.
#[inline(always)]
pub(crate) fn round_bf16(x: f32) -> f32 {
    f32::from_bits(bf16_bits(x) << 16)
}

#[inline(always)]
pub(crate) fn round_bf16_slice(v: &mut [f32]) {
    super::bf16io::round(v);
}

/// Reads `o.len()` elements at element offset `at` of `buf`, widened to f32.
#[inline(always)]
pub(crate) fn load(buf: &Buffer, at: usize, o: &mut [f32]) {
    let n = o.len();
    if n == 0 {
        return;
    }
    match buf.dtype {
        DType::BF16 => {
            assert!((at + n) * 2 <= buf.len, "fused load out of bounds");
            // SAFETY: in bounds (checked above); bf16 storage is u16 bit patterns.
            let s = unsafe { std::slice::from_raw_parts((buf.ptr as *const u16).add(at), n) };
            super::bf16io::widen(s, o);
        }
        _ => {
            assert!((at + n) * 4 <= buf.len, "fused load out of bounds");
            // SAFETY: in bounds (checked above); f32 storage.
            let s = unsafe { std::slice::from_raw_parts((buf.ptr as *const f32).add(at), n) };
            o.copy_from_slice(s);
        }
    }
}

/// Writes columns `lo..hi` of `v` to `buf` starting at element offset `at`.
#[inline(always)]
pub(crate) fn store(buf: &Buffer, at: usize, v: V, lo: usize, hi: usize) {
    let n = hi - lo;
    match buf.dtype {
        DType::BF16 => {
            assert!((at + n) * 2 <= buf.len, "fused store out of bounds");
            // SAFETY: in bounds (checked above); programs of a launch write disjoint elements.
            let d = unsafe { std::slice::from_raw_parts_mut((buf.ptr as *mut u16).add(at), n) };
            match v {
                V::S(s) => super::bf16io::narrow(&s[lo..hi], d),
                V::K(x) => d.fill(bf16_bits(x) as u16),
            }
        }
        _ => {
            assert!((at + n) * 4 <= buf.len, "fused store out of bounds");
            // SAFETY: as above, f32 storage.
            let d = unsafe { std::slice::from_raw_parts_mut((buf.ptr as *mut f32).add(at), n) };
            match v {
                V::S(s) => d.copy_from_slice(&s[lo..hi]),
                V::K(x) => d.fill(x),
            }
        }
    }
}

/// The `n` f32 values at element offset `at` of an f32 tensor.
#[inline(always)]
pub(crate) fn f32s(buf: &Buffer, at: usize, n: usize) -> &[f32] {
    assert!(
        buf.dtype == DType::F32 && (at + n) * 4 <= buf.len,
        "fused read out of bounds"
    );
    // SAFETY: in bounds (checked above); f32 storage not written during the launch (loaded
    // tensors are never stored, `plan::compile`).
    unsafe { std::slice::from_raw_parts((buf.ptr as *const f32).add(at), n) }
}

/// Elements per piece of [`write`]'s bf16 output (computed, then rounded or narrowed).
const WRITE_PIECE: usize = 256;

/// Writes `f(j)` for `j in 0..n` at element offset `at` of `buf` (f32 or bf16), rounded to
/// bf16 first when `round` (a bf16 tensor always rounds).
#[inline(always)]
pub(crate) fn write(buf: &Buffer, at: usize, n: usize, round: bool, f: impl Fn(usize) -> f32) {
    match buf.dtype {
        DType::BF16 => {
            assert!((at + n) * 2 <= buf.len, "fused store out of bounds");
            // SAFETY: in bounds (checked above); programs of a launch write disjoint rows.
            let d = unsafe { std::slice::from_raw_parts_mut((buf.ptr as *mut u16).add(at), n) };
            // Pieces of `f` computed into a stack buffer (L1), then narrowed.
            let mut t = [0f32; WRITE_PIECE];
            for (k, d) in d.chunks_mut(WRITE_PIECE).enumerate() {
                let t = &mut t[..d.len()];
                let j0 = k * WRITE_PIECE;
                t.iter_mut().enumerate().for_each(|(j, o)| *o = f(j0 + j));
                super::bf16io::narrow(t, d);
            }
        }
        _ => {
            assert!((at + n) * 4 <= buf.len, "fused store out of bounds");
            // SAFETY: as above, f32 storage.
            let d = unsafe { std::slice::from_raw_parts_mut((buf.ptr as *mut f32).add(at), n) };
            if round {
                for (k, d) in d.chunks_mut(WRITE_PIECE).enumerate() {
                    let j0 = k * WRITE_PIECE;
                    d.iter_mut().enumerate().for_each(|(j, o)| *o = f(j0 + j));
                    super::bf16io::round(d);
                }
            } else {
                for (j, o) in d.iter_mut().enumerate() {
                    *o = f(j);
                }
            }
        }
    }
}
