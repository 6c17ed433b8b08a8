//! `load → elementwise ops → store` groups of f32 tensors whose binary ops take the running
//! value and a broadcast operand (a materialised tile such as a `[C]` row, or a scalar), such
//! as `gelu(x * y + 1.0)` ([`super::plan::Group::chain`]). Where the load's and the store's
//! windows cover the chunk, the chunk runs in the output slice itself (at most a tile row,
//! in L1): the first op reads the input and writes the output, each later op runs in place
//! over the slice (binary ops one loop each, unary ops through `vmath::lanes`, the element
//! kernels of `vmath`'s slice functions with the flavour those use at the active SIMD level,
//! in blocks of 256 floats), so the input is read once and the output written once. At
//! AVX-512, `add`/`sub`/`mul`/`div` ops followed by gelu run inside gelu's vector loop
//! (`vmath::gelu512::after`, or [`rows`] over many rows in one call) instead, in registers.
//! Each op is the interpreter's, in the same order, so the result is its own bit for bit.

use super::chunk::{self, V};
use super::plan::{COp, Group, Kind, Member, Src};
use super::run::{read, window};
use crate::backend::Buffer;
use crate::backend::cpu::prefetch;
use crate::backend::cpu::simd::{self, SimdLevel};
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::vmath::arith::Fused;
use crate::backend::cpu::vmath::{
    self,
    arith::{Arith, Plain},
};
use tessera_ir::DType;
use tessera_ir::graph::{BinaryOp, UnaryOp};
use tessera_ir::tile::Kernel;

/// The most ops a chain may have.
pub(crate) const MAX_OPS: usize = 8;

/// How far ahead of the block being computed its input is prefetched, in floats.
const AHEAD: usize = 1024;

/// One op on the running value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// `v = op(v)`.
    Unary(UnaryOp),
    /// `v = v op k` (`left`) or `v = k op v`, with `k` read from a materialised tile or a
    /// scalar slot (never a chunk slot).
    Binary { op: BinaryOp, k: Src, left: bool },
}

/// A recognised chain: its ops after the load, and the members that load and store it.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    pub ops: Vec<Op>,
    pub load: usize,
    pub store: usize,
}

/// The chain of a store-only group, when it is one: a load of an f32 tensor, float unary and
/// binary ops and f32 → f32 casts each reading the previous op's result (and, for a binary
/// op, a materialised tile or a scalar), a store of the last result into an f32 tensor;
/// nothing rounded or materialised, and at least one binary op (chains of unary ops alone
/// are `Group::direct`'s).
pub(crate) fn recognise(k: &Kernel, members: &[Member]) -> Option<Chain> {
    let (first, rest) = members.split_first()?;
    let (last, mid) = rest.split_last()?;
    let f32_param = |p: usize| k.params[p].dtype == DType::F32;
    let COp::Load { param, dst, .. } = &first.op else {
        return None;
    };
    if !f32_param(*param) {
        return None;
    }
    let mut cur = *dst;
    let mut ops = Vec::new();
    for m in std::iter::once(first).chain(mid).chain([last]) {
        if m.round_bf16 || m.mat.is_some() {
            return None;
        }
    }
    let on = |s: &Src, cur: u16| matches!(s, Src::Chunk(x) if *x == cur);
    let other = |s: &Src| matches!(s, Src::Mat { .. } | Src::Scalar(_));
    for m in mid {
        match &m.op {
            COp::Unary { op, a, dst } if on(a, cur) => {
                ops.push(Op::Unary(*op));
                cur = *dst;
            }
            COp::Binary {
                op,
                kind: Kind::F,
                a,
                b,
                dst,
            } if on(a, cur) && other(b) => {
                ops.push(Op::Binary {
                    op: *op,
                    k: *b,
                    left: true,
                });
                cur = *dst;
            }
            COp::Binary {
                op,
                kind: Kind::F,
                a,
                b,
                dst,
            } if on(b, cur) && other(a) => {
                ops.push(Op::Binary {
                    op: *op,
                    k: *a,
                    left: false,
                });
                cur = *dst;
            }
            COp::Cast {
                a,
                to: DType::F32,
                from: Kind::F,
                dst,
            } if on(a, cur) => cur = *dst,
            _ => return None,
        }
    }
    let COp::Store {
        param,
        src: Src::Chunk(s),
        ..
    } = &last.op
    else {
        return None;
    };
    let binary = ops.iter().any(|o| matches!(o, Op::Binary { .. }));
    (f32_param(*param) && *s == cur && binary && ops.len() <= MAX_OPS).then_some(Chain {
        ops,
        load: 0,
        store: members.len() - 1,
    })
}

/// Runs columns `c0 .. c0 + w` of row `r`; `false` (nothing done) unless the load's and the
/// store's windows cover all `w` columns.
///
/// # Safety
/// `mat` is the worker's materialised tiles, sized by the plan, holding this program's
/// values of every tile the chain reads.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run(
    ch: &Chain,
    g: &Group,
    args: &[Buffer],
    sc: &[f64],
    mat: *const f32,
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
    let (Some((pi, ii)), Some((po, io))) = (at(ch.load), at(ch.store)) else {
        return false;
    };
    let (bi, bo) = (&args[pi], &args[po]);
    assert!(
        bi.dtype == DType::F32
            && bo.dtype == DType::F32
            && (ii + w) * 4 <= bi.len
            && (io + w) * 4 <= bo.len,
        "fused chain out of bounds"
    );
    // SAFETY: in bounds (checked above); loaded tensors are not written during the launch,
    // the output is never a loaded parameter (`plan::compile`), and programs of a launch
    // write disjoint elements.
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts((bi.ptr as *const f32).add(ii), w),
            std::slice::from_raw_parts_mut((bo.ptr as *mut f32).add(io), w),
        )
    };
    // Each binary op's operand over the whole chunk (a slice of a tile, or one value).
    let mut ks = [V::K(0.0); MAX_OPS];
    for (k, op) in ks.iter_mut().zip(&ch.ops) {
        if let Op::Binary { k: src, .. } = op {
            // SAFETY: `src` is a materialised tile or a scalar slot (`recognise`), read with
            // the plan's sizes; no chunk slot is read, so no slot table is needed.
            *k = unsafe { read(*src, std::ptr::null(), mat, sc, r, c0, w) };
        }
    }
    piece(&ch.ops, &ks[..ch.ops.len()], x, y)
}

/// `y[j] = ops(x[j])` with `ks[o]` op `o`'s operand over the slice, at the active SIMD level.
/// Always `true`.
pub(crate) fn piece(ops: &[Op], ks: &[V], x: &[f32], y: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let level = simd::active();
        if level >= SimdLevel::Avx512 {
            // SAFETY: the active level is at most the detected one: AVX-512F and FMA.
            return unsafe { lanes_avx512(ops, ks, x, y) };
        }
        if level >= SimdLevel::Avx2 {
            // SAFETY: as above, AVX2 and FMA.
            return unsafe { lanes_avx2(ops, ks, x, y) };
        }
    }
    lanes::<Plain, 16>(ops, ks, x, y)
}

/// [`lanes`] built with AVX-512F: blocks of 64 floats, `vmath`'s FMA flavour; chains of
/// [`gelu_pre`]'s form through `vmath::gelu512::after` instead.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn lanes_avx512(ops: &[Op], ks: &[V], x: &[f32], y: &mut [f32]) -> bool {
    if let Some(p) = gelu_pre(ops, ks, true) {
        // SAFETY: `gelu_pre`: `gelu512::available` (AVX-512F/DQ, AVX2 and FMA).
        unsafe { crate::backend::cpu::vmath::gelu512::after(&p[..ops.len() - 1], x, y) };
        return true;
    }
    lanes::<Fused, 64>(ops, ks, x, y)
}

/// The chain's ops before gelu as `vmath::gelu512`'s [`Pre`](crate::backend::cpu::vmath::gelu512::Pre)
/// ops (the first `ops.len() - 1`), when the chain is `add`/`sub`/`mul`/`div` ops then gelu
/// (and, with `avx512`, `gelu512` may run): those ops run inside gelu's vector loop, each on
/// the value in registers, so the input is read and the output written once.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn gelu_pre<'a>(
    ops: &[Op],
    ks: &[V<'a>],
    avx512: bool,
) -> Option<[crate::backend::cpu::vmath::gelu512::Pre<'a>; MAX_OPS]> {
    use crate::backend::cpu::vmath::gelu512::{Pre, available};
    let arith = |o: &BinaryOp| {
        matches!(
            o,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
        )
    };
    let [pre @ .., Op::Unary(UnaryOp::Gelu)] = ops else {
        return None;
    };
    let ok = pre.len() < MAX_OPS
        && pre
            .iter()
            .all(|o| matches!(o, Op::Binary { op, .. } if arith(op)));
    if !ok || (avx512 && !available()) {
        return None;
    }
    let mut p: [Pre; MAX_OPS] = [(BinaryOp::Add, true, None, 0.0); MAX_OPS];
    for ((d, o), k) in p.iter_mut().zip(pre).zip(ks) {
        if let Op::Binary { op, left, .. } = o {
            *d = match *k {
                V::S(s) => (*op, *left, Some(s), 0.0),
                V::K(c) => (*op, *left, None, c),
            };
        }
    }
    Some(p)
}

/// `y[j] = ops(x[j])` for values from column `col` of rows `c` long (row-major), each slice
/// operand of `ks` one whole row of `c` values read at the value's column: one call of
/// `vmath::gelu512::after_rows` over all the rows when the chain is of [`gelu_pre`]'s form
/// at the AVX-512 level when that call streams (`gelu512::streams`; its stores non-temporal
/// where aligned when `stream`: the caller fences) or `stream` is off, or of `vmath::gelu_simd::avx2_after_rows` at the AVX2 level without `stream`;
/// `false` (nothing done) otherwise. `far` (data past the cache,
/// [`super::stream::past_cache`]): the AVX-512 loop asks for its input ahead.
pub(crate) fn rows(
    ops: &[Op],
    ks: &[V],
    x: &[f32],
    y: &mut [f32],
    col: usize,
    c: usize,
    stream: bool,
    far: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if simd::active() >= SimdLevel::Avx512
        && let Some(p) = gelu_pre(ops, ks, true)
        && (!stream || crate::backend::cpu::vmath::gelu512::streams(&p[..ops.len() - 1]))
    {
        // SAFETY: `gelu_pre`: `gelu512::available`.
        unsafe {
            crate::backend::cpu::vmath::gelu512::after_rows(
                &p[..ops.len() - 1],
                x,
                y,
                col,
                c,
                stream,
                far,
            )
        };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if simd::active() >= SimdLevel::Avx2
        && !stream
        && let Some(p) = gelu_pre(ops, ks, false)
    {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA.
        unsafe {
            crate::backend::cpu::vmath::gelu_simd::avx2_after_rows(
                &p[..ops.len() - 1],
                x,
                y,
                col,
                c,
            )
        };
        return true;
    }
    let _ = (ops, ks, x, y, col, c, stream, far);
    false
}

/// [`lanes`] built with AVX2: blocks of 32 floats, `vmath`'s FMA flavour; chains of
/// [`gelu_pre`]'s form through `vmath::gelu_simd::avx2_after_rows` instead (one row).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lanes_avx2(ops: &[Op], ks: &[V], x: &[f32], y: &mut [f32]) -> bool {
    if let Some(p) = gelu_pre(ops, ks, false)
        && !x.is_empty()
    {
        // SAFETY: AVX2 and FMA (this function's contract); one row of `x.len()` values.
        unsafe {
            crate::backend::cpu::vmath::gelu_simd::avx2_after_rows(
                &p[..ops.len() - 1],
                x,
                y,
                0,
                x.len(),
            )
        };
        return true;
    }
    lanes::<Fused, 32>(ops, ks, x, y)
}

/// Floats per unary call on the output slice: one call of a `vmath` kernel (gelu's
/// coefficient tables loaded once) per 256 values.
const WIDE: usize = 256;

/// `y[j] = ops(x[j])`, computed in the output slice itself, in blocks of [`WIDE`] floats
/// (every op of the chain on one block, in L1, before the next): each binary op one loop
/// over the block (the first
/// reading `x`), each unary op `vmath::lanes`'s kernel over the whole block, or blocks of
/// `L` in a last partial one, padded with zeros (its extra lanes are dropped). Every element
/// gets the ops in the chain's order.
#[inline(always)]
fn lanes<A: Arith, const L: usize>(ops: &[Op], ks: &[V], x: &[f32], y: &mut [f32]) -> bool {
    let w = x.len();
    for b0 in (0..w).step_by(WIDE) {
        let b1 = w.min(b0 + WIDE);
        for i in (b0..b1).step_by(16) {
            prefetch::l1(x.as_ptr().wrapping_add(i + AHEAD));
        }
        let (xb, yb) = (&x[b0..b1], &mut y[b0..b1]);
        let mut first = true;
        for (op, k) in ops.iter().zip(ks) {
            match op {
                Op::Unary(u) => {
                    if first {
                        yb.copy_from_slice(xb);
                    }
                    unary_slice::<A, L>(*u, yb);
                }
                Op::Binary { op, left, .. } => {
                    let kb = match *k {
                        V::S(s) => V::S(&s[b0..b1]),
                        V::K(c) => V::K(c),
                    };
                    binary_slice(*op, *left, &kb, first.then_some(xb), yb);
                }
            }
            first = false;
        }
    }
    true
}

/// `v = op(v)` over a slice through `vmath::lanes::unary` (blocks of [`WIDE`], then `L`).
#[inline(always)]
fn unary_slice<A: Arith, const L: usize>(u: UnaryOp, v: &mut [f32]) {
    let mut wide = v.chunks_exact_mut(WIDE);
    for c in &mut wide {
        vmath::lanes::unary::<A, WIDE>(u, c.try_into().unwrap());
    }
    for c in wide.into_remainder().chunks_mut(L) {
        if c.len() == L {
            vmath::lanes::unary::<A, L>(u, c.try_into().unwrap());
        } else {
            let mut b = [0f32; L];
            b[..c.len()].copy_from_slice(c);
            vmath::lanes::unary::<A, L>(u, &mut b);
            let n = c.len();
            c.copy_from_slice(&b[..n]);
        }
    }
}

/// `d = a op k` (`left`) or `k op a` element by element over `d`, with `a` read from `src`
/// (the chain's input) when given, else from `d` itself.
#[inline(always)]
fn binary_slice(op: BinaryOp, left: bool, k: &V, src: Option<&[f32]>, d: &mut [f32]) {
    macro_rules! each {
        ($f:expr) => {{
            let f = $f;
            macro_rules! go {
                ($g:expr) => {{
                    let g = $g;
                    match (src, k) {
                        (Some(s), V::S(kk)) => {
                            for ((o, a), b) in d.iter_mut().zip(s).zip(&kk[..]) {
                                *o = g(*a, *b);
                            }
                        }
                        (Some(s), V::K(c)) => {
                            for (o, a) in d.iter_mut().zip(s) {
                                *o = g(*a, *c);
                            }
                        }
                        (None, V::S(kk)) => {
                            for (o, b) in d.iter_mut().zip(&kk[..]) {
                                *o = g(*o, *b);
                            }
                        }
                        (None, V::K(c)) => {
                            for o in d.iter_mut() {
                                *o = g(*o, *c);
                            }
                        }
                    }
                }};
            }
            if left {
                go!(|a: f32, b: f32| f(a, b))
            } else {
                go!(|a: f32, b: f32| f(b, a))
            }
        }};
    }
    match op {
        BinaryOp::Add => each!(|x: f32, y: f32| x + y),
        BinaryOp::Sub => each!(|x: f32, y: f32| x - y),
        BinaryOp::Mul => each!(|x: f32, y: f32| x * y),
        BinaryOp::Div => each!(|x: f32, y: f32| x / y),
        op => each!(|x: f32, y: f32| chunk::bin_f(op, x, y)),
    }
}
