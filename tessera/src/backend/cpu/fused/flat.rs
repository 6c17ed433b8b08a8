//! Whole-tensor elementwise launches: a plan whose only group is a direct unary chain
//! ([`Group::direct`]), a binary pipe ([`Group::binary`]) or an operand chain
//! ([`Group::chain`]: constants and broadcast rows as operands) whose loads and store index
//! one tile origin computes, over a launch that writes every output element,
//! `out[i] = f(in[i])` (or `f(a[i], b[i])`, or `f(in[i], row[i % C])`) for every element `i`
//! of tensors of one shape. Such a launch runs as
//! one pass over the flat tensors instead of tile by tile: contiguous ranges split among
//! rayon's threads, each walked in order (the hardware prefetchers see one stream per
//! tensor), streamed past the non-temporal threshold ([`super::stream::large`], by the
//! output's size and the thread count) whatever the tile's width. Each element gets the same ops on the same values as in the tile loop.

use super::chain::Op;
use super::chunk::V;
use super::plan::{COp, Group, SOp, Src, Step};
use crate::backend::Buffer;
use rayon::prelude::*;
use tessera_ir::DType;

/// One op of an operand chain ([`Group::chain`]) over whole tensors: what its binary op
/// reads beside the running value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand {
    /// A unary op (no operand).
    None,
    /// A constant (a scalar slot the plan sets to this f32 constant).
    Const(f32),
    /// Row `c` of the output's `[r, c]` shape: this rank-1 f32 parameter, broadcast over rows.
    Row(usize),
}

/// What [`find`] found: the step index of the group, and for an operand chain the operand
/// of each of its ops (empty otherwise).
#[derive(Clone, Debug)]
pub(crate) struct Flat {
    pub step: usize,
    pub operands: Vec<Operand>,
}

/// A group that only materialises one f32 load of a single row (an operand chain's
/// broadcast row): `(mat offset, parameter, index slots, cols)`.
fn row_load(g: &Group) -> Option<(usize, usize, &[u32], usize)> {
    let [m] = &g.members[..] else { return None };
    match (&m.op, m.mat) {
        (COp::Load { param, idx, .. }, Some(off)) if !m.round_bf16 && g.rows == 1 => {
            Some((off, *param, &idx[..], g.cols))
        }
        _ => None,
    }
}

/// The plan's only store group when every other step is scalar or a [`row_load`] and the
/// group is a store-only direct chain, binary pipe or operand chain whose loads and store
/// are rank 2 and index the same scalar slots; an operand chain's binary operands must be
/// f32 constants or rows a [`row_load`] materialises at the group's column slot.
pub(crate) fn find(steps: &[Step]) -> Option<Flat> {
    let mut found = None;
    for (i, st) in steps.iter().enumerate() {
        match st {
            Step::Scalar { .. } => {}
            Step::Group(g) if row_load(g).is_some() => {}
            Step::Group(_) if found.is_none() => found = Some(i),
            _ => return None,
        }
    }
    let Step::Group(g) = &steps[found?] else {
        return None;
    };
    if !g.store_only || (g.direct.is_none() && g.binary.is_none() && g.chain.is_none()) {
        return None;
    }
    let loads = g
        .members
        .iter()
        .filter(|m| matches!(m.op, COp::Load { .. }));
    if loads.count() > 2 {
        return None;
    }
    let mut at: Option<&[u32]> = None;
    for m in &g.members {
        if let COp::Load { idx, rank, .. } | COp::Store { idx, rank, .. } = &m.op {
            if *rank != 2 || at.is_some_and(|a| a != &idx[..]) {
                return None;
            }
            at = Some(idx);
        }
    }
    let operands = match &g.chain {
        None => Vec::new(),
        Some(ch) => {
            let col = at?[1];
            let konst = |slot: u32, f32_only: bool| {
                steps.iter().find_map(|st| match st {
                    Step::Scalar {
                        op: SOp::Const(x),
                        dtype,
                        dst,
                    } if *dst == slot && (*dtype == DType::F32 || !f32_only) => Some(*x),
                    _ => None,
                })
            };
            // The row's load indexes the chain's columns: `[col]`, or `[0, col]`.
            let row = |off: usize, cols: usize| {
                steps.iter().find_map(|st| match st {
                    Step::Group(r) => match row_load(r) {
                        Some((o, p, idx, w)) if o == off && w == cols => match idx {
                            [c] if *c == col => Some(p),
                            [z, c] if *c == col && konst(*z, false) == Some(0.0) => Some(p),
                            _ => None,
                        },
                        _ => None,
                    },
                    _ => None,
                })
            };
            let one = |op: &Op| match op {
                Op::Unary(_) => Some(Operand::None),
                Op::Binary {
                    k: Src::Scalar(s), ..
                } => konst(*s, true).map(|x| Operand::Const(x as f32)),
                Op::Binary {
                    k: Src::Mat { off, rows: 1, cols },
                    ..
                } if *cols == g.cols => row(*off, *cols).map(Operand::Row),
                Op::Binary { .. } => None,
            };
            ch.ops.iter().map(one).collect::<Option<Vec<_>>>()?
        }
    };
    Some(Flat {
        step: found?,
        operands,
    })
}

/// The parameters `g` loads (at most two: a direct chain's one, a pipe's two) and the one it
/// stores.
fn params(g: &Group) -> ([Option<usize>; 2], Option<usize>) {
    let (mut loads, mut store) = ([None; 2], None);
    let mut k = 0;
    for m in &g.members {
        match &m.op {
            COp::Load { param, .. } if k < 2 => {
                loads[k] = Some(*param);
                k += 1;
            }
            COp::Store { param, .. } => store = Some(*param),
            _ => {}
        }
    }
    (loads, store)
}

/// Whether these arguments give [`find`]'s group the same `[r, c]` shape for every loaded
/// and stored tensor, each exactly `r · c` elements long; the caller checks that the launch
/// writes every output element.
pub(crate) fn shaped(g: &Group, f: &Flat, args: &[Buffer]) -> Option<usize> {
    let (loads, store) = params(g);
    let o = &args[store?];
    let d = o.dims();
    let n: usize = d.iter().product();
    let exact = |b: &Buffer| b.dims() == d && n * b.dtype.size_bytes() == b.len;
    let inputs = loads.iter().flatten().all(|p| exact(&args[*p]));
    // An operand chain's rows: f32 tensors of the output's row length (its loads and store
    // are f32, `chain::recognise`).
    let rows = d.len() == 2
        && f.operands.iter().all(|k| match k {
            Operand::Row(p) => {
                let b = &args[*p];
                let one = b.dims() == [d[1]] || b.dims() == [1, d[1]];
                b.dtype == DType::F32 && one && d[1] * 4 == b.len
            }
            _ => true,
        });
    (d.len() == 2 && exact(o) && inputs && rows).then_some(store?)
}

/// Elements per call of the direct chain's loop.
const PIECE: usize = 4096;

/// Elements per task below which a launch runs on the calling thread alone.
const MIN_TASK: usize = 1 << 15;

/// Elements per piece a direct chain's threads take from the shared counter ([`run`]): a
/// sixteenth of a thread's share, at least [`MIN_TASK`] and at most `1 << 18`.
fn direct_piece(n: usize, threads: usize) -> usize {
    (n / (threads * 16))
        .clamp(MIN_TASK, 1 << 18)
        .next_multiple_of(64)
}

/// Runs [`find`]'s group `g` over all `n` elements of its [`shaped`] tensors.
///
/// A direct chain ([`Group::direct`]) runs in pieces of [`direct_piece`] elements which each
/// of the pool's threads takes in turn from a shared counter until none is left, so a thread
/// that runs slower does fewer of them; other groups split the elements into `4 ·
/// threads` ranges for rayon, which (its adaptive split) left each of two threads one
/// contiguous half unless a half was stolen. On the 2-vCPU Intel Xeon KVM guest (family 6
/// model 207) one vCPU often ran the bf16 gelu at ≈ 0.30 ns per element against ≈ 0.19 on
/// the other for a whole process (gb23: per-task timestamps, `RAYON_NUM_THREADS=2 chrt -f 50
/// cpu_profile gelu_bf16 4096 1024 150 --pool`, 2026-11-28 15:40 UTC, load 6.4–7.8: tasks of
/// 512 Ki elements took 150–160 µs on one thread, 96–100 on the other; with halves the
/// launch took 595–671 µs, the slow thread's four tasks). Pieces from the counter (with
/// `gelubf16`'s input prefetch), the same command interleaved with main `5ad586c`'s binary,
/// 2026-11-28 15:45–15:48 UTC, load 2.9–10, fastest launch in µs, 13 / 9 rounds:
/// `gelu_bf16 [4096, 1024]` 377–658 (median 514; ratio to memcpy 0.53–0.85) → 367–621
/// (median 459; 0.55–0.92); `[1024, 4096]` 404–622 (median 534; 0.57–0.84) → 397–508
/// (median 470; 0.68–0.83); f32 `gelu` `[4096, 1024]` 747–809 → 710–736, `[1024, 4096]`
/// 647–831 → 644–832 (10 rounds, no difference beyond the spread).
pub(crate) fn run(g: &Group, f: &Flat, args: &[Buffer]) {
    let (_, Some(o)) = params(g) else { return };
    let n: usize = args[o].dims().iter().product();
    let threads = rayon::current_num_threads();
    let tasks = (threads * 4).min(n / MIN_TASK).max(1);
    if threads == 1 || tasks == 1 {
        return span(g, f, args, 0, n);
    }
    if g.direct.is_some() {
        let per = direct_piece(n, threads);
        let pieces = n.div_ceil(per);
        let next = std::sync::atomic::AtomicUsize::new(0);
        // One job per thread, each taking pieces until none is left: a job that starts late
        // (or never, its thread busy) leaves its pieces to the others.
        (0..threads.min(pieces)).into_par_iter().for_each(|_| {
            loop {
                let t = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if t >= pieces {
                    break;
                }
                let lo = t * per;
                span(g, f, args, lo, per.min(n - lo));
            }
        });
        return;
    }
    // Task boundaries on 64-element multiples: whole cache lines for f32 and bf16 alike.
    let per = n.div_ceil(tasks).next_multiple_of(64);
    (0..n.div_ceil(per)).into_par_iter().for_each(|t| {
        let lo = t * per;
        span(g, f, args, lo, per.min(n - lo));
    });
}

/// Elements `lo .. lo + n` at the active SIMD level, fenced when streamed.
fn span(g: &Group, f: &Flat, args: &[Buffer], lo: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        unsafe { span_avx2(g, f, args, lo, n) };
        super::stream::fence();
        return;
    }
    span_body(g, f, args, lo, n)
}

/// [`span_body`] built with AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn span_avx2(g: &Group, f: &Flat, args: &[Buffer], lo: usize, n: usize) {
    span_body(g, f, args, lo, n)
}

#[inline(always)]
fn span_body(g: &Group, f: &Flat, args: &[Buffer], lo: usize, n: usize) {
    let (loads, Some(o)) = params(g) else { return };
    let out = &args[o];
    let nt = super::stream::large(out);
    if let Some(ops) = &g.direct {
        let Some(i) = loads[0] else { return };
        let i = &args[i];
        // A span of at most `SMALL` elements takes a buffer of that many (`direct_run` works
        // in pieces of its buffer's length, which change no bit): zeroing a whole `CHUNK`
        // on the stack took ≈ 5 % of a `[1, 1]` gelu launch (`perf record -e cpu-clock`).
        const SMALL: usize = 64;
        if n <= SMALL {
            let mut buf = [0f32; SMALL];
            super::run::direct_run(ops, &g.lut, i, lo, out, lo, n, &mut buf, nt);
            return;
        }
        let mut buf = [0f32; super::plan::CHUNK];
        // Pieces of `PIECE` elements: an f32 chain written in place runs its steps over
        // values still in L1.
        for k in (lo..lo + n).step_by(PIECE) {
            let m = (lo + n - k).min(PIECE);
            super::run::direct_run(ops, &g.lut, i, k, out, k, m, &mut buf, nt);
        }
    } else if let Some(p) = &g.binary {
        let param = |m: usize| match &g.members[m].op {
            COp::Load { param, .. } => *param,
            _ => unreachable!("a pipe's operands are loads"),
        };
        let (a, b) = (&args[param(p.a)], &args[param(p.b)]);
        super::pipe::span(p.op, (a, lo), (b, lo), (out, lo), n, nt);
    } else if let Some(ch) = &g.chain {
        let Some(i) = loads[0] else { return };
        let x = &args[i];
        let c = out.dims()[1];
        assert!(
            (lo + n) * 4 <= x.len && (lo + n) * 4 <= out.len,
            "flat chain out of bounds"
        );
        if chain_rows(ch, f, args, x, out, lo, n, nt) {
            return;
        }
        // As the direct chain's: a short span zeroes a short buffer (pieces of at most
        // its length).
        let mut small;
        let mut whole;
        let buf: &mut [f32] = if n <= 64 {
            small = [0f32; 64];
            &mut small
        } else {
            whole = [0f32; PIECE];
            &mut whole
        };
        let piece = buf.len();
        let mut k = lo;
        // Pieces of at most `PIECE` elements within one row: each row operand is one slice.
        while k < lo + n {
            let col = k % c;
            let m = (lo + n - k).min(piece).min(c - col);
            let mut ks = [V::K(0.0); super::chain::MAX_OPS];
            for (v, op) in ks.iter_mut().zip(&f.operands) {
                *v = match *op {
                    Operand::None => V::K(0.0),
                    Operand::Const(s) => V::K(s),
                    // SAFETY: `shaped`: an f32 tensor of `c` elements, not written during
                    // the launch (the output is never a loaded parameter).
                    Operand::Row(p) => V::S(unsafe {
                        std::slice::from_raw_parts((args[p].ptr as *const f32).add(col), m)
                    }),
                };
            }
            let ks = &ks[..ch.ops.len()];
            // SAFETY: in bounds (asserted above); the input is not written during the launch.
            let xs = unsafe { std::slice::from_raw_parts((x.ptr as *const f32).add(k), m) };
            if nt {
                super::chain::piece(&ch.ops, ks, xs, &mut buf[..m]);
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `nt` (`large`: AVX present); the span is fenced after its last store.
                unsafe {
                    super::stream::copy(out, k, &buf[..m])
                };
            } else {
                // SAFETY: this range's output elements (ranges are disjoint; the output is
                // never a loaded parameter).
                let ys = unsafe { std::slice::from_raw_parts_mut((out.ptr as *mut f32).add(k), m) };
                super::chain::piece(&ch.ops, ks, xs, ys);
            }
            k += m;
        }
    }
}

/// Elements `lo .. lo + n` of an operand chain through [`super::chain::rows`] (many rows
/// per call, each row operand one whole row), straight into the output, its stores
/// non-temporal when `nt` (the span is fenced after; `chain::rows` declines a chain it
/// would not stream, which then takes the buffered, streamed path). `false` (nothing done) when
/// `chain::rows` does not take the chain.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chain_rows(
    ch: &super::chain::Chain,
    f: &Flat,
    args: &[Buffer],
    x: &Buffer,
    out: &Buffer,
    lo: usize,
    n: usize,
    nt: bool,
) -> bool {
    if n == 0 {
        // Nothing to write (and `c` may be 0: no `lo % c`).
        return true;
    }
    let c = out.dims()[1];
    let mut ks = [V::K(0.0); super::chain::MAX_OPS];
    for (v, op) in ks.iter_mut().zip(&f.operands) {
        *v = match *op {
            Operand::None => V::K(0.0),
            Operand::Const(s) => V::K(s),
            // SAFETY: `shaped`: an f32 tensor of `c` elements, not written during the launch
            // (the output is never a loaded parameter).
            Operand::Row(p) => {
                V::S(unsafe { std::slice::from_raw_parts(args[p].ptr as *const f32, c) })
            }
        };
    }
    let (ops, ks) = (&ch.ops[..], &ks[..ch.ops.len()]);
    // SAFETY: in bounds (the caller asserted `(lo + n) * 4` against both lengths); the input
    // is not written during the launch; this range's output elements are this task's alone
    // (the output is never a loaded parameter).
    let (xs, ys) = unsafe {
        (
            std::slice::from_raw_parts((x.ptr as *const f32).add(lo), n),
            std::slice::from_raw_parts_mut((out.ptr as *mut f32).add(lo), n),
        )
    };
    let far = super::stream::past_cache(x.len + out.len);
    super::chain::rows(ops, ks, xs, ys, lo % c, c, nt, far)
}
