//! Whole-tensor elementwise launches: a plan whose only group is a direct unary chain
//! ([`Group::direct`]) or a binary pipe ([`Group::binary`]) whose loads and store index one
//! tile origin computes, over a launch that writes every output element, `out[i] = f(in[i])`
//! (or `f(a[i], b[i])`) for every element `i` of tensors of one shape. Such a launch runs as
//! one pass over the flat tensors instead of tile by tile: contiguous ranges split among
//! rayon's threads, each walked in order (the hardware prefetchers see one stream per
//! tensor), streamed past the non-temporal threshold ([`super::stream::large`]) whatever the
//! tile's width. Each element gets the same ops on the same values as in the tile loop.

use super::plan::{COp, Group, Step};
use crate::backend::Buffer;
use rayon::prelude::*;

/// The index in `steps` of the plan's only group when every other step is scalar and the
/// group is a store-only direct chain or binary pipe whose loads and store are rank 2 and
/// index the same scalar slots.
pub(crate) fn find(steps: &[Step]) -> Option<usize> {
    let mut found = None;
    for (i, st) in steps.iter().enumerate() {
        match st {
            Step::Scalar { .. } => {}
            Step::Group(_) if found.is_none() => found = Some(i),
            _ => return None,
        }
    }
    let Step::Group(g) = &steps[found?] else {
        return None;
    };
    if !g.store_only || (g.direct.is_none() && g.binary.is_none()) {
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
    found
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
pub(crate) fn shaped(g: &Group, args: &[Buffer]) -> Option<usize> {
    let (loads, store) = params(g);
    let o = &args[store?];
    let d = o.dims();
    let n: usize = d.iter().product();
    let exact = |b: &Buffer| b.dims() == d && n * b.dtype.size_bytes() == b.len;
    let inputs = loads.iter().flatten().all(|p| exact(&args[*p]));
    (d.len() == 2 && exact(o) && inputs).then_some(store?)
}

/// Elements per call of the direct chain's loop.
const PIECE: usize = 4096;

/// Elements per task below which a launch runs on the calling thread alone.
const MIN_TASK: usize = 1 << 15;

/// Runs [`find`]'s group `g` over all `n` elements of its [`shaped`] tensors.
pub(crate) fn run(g: &Group, args: &[Buffer]) {
    let (_, Some(o)) = params(g) else { return };
    let n: usize = args[o].dims().iter().product();
    let threads = rayon::current_num_threads();
    let tasks = (threads * 4).min(n / MIN_TASK).max(1);
    if threads == 1 || tasks == 1 {
        return span(g, args, 0, n);
    }
    // Task boundaries on 64-element multiples: whole cache lines for f32 and bf16 alike.
    let per = n.div_ceil(tasks).next_multiple_of(64);
    (0..n.div_ceil(per)).into_par_iter().for_each(|t| {
        let lo = t * per;
        span(g, args, lo, per.min(n - lo));
    });
}

/// Elements `lo .. lo + n` at the active SIMD level, fenced when streamed.
fn span(g: &Group, args: &[Buffer], lo: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        unsafe { span_avx2(g, args, lo, n) };
        super::stream::fence();
        return;
    }
    span_body(g, args, lo, n)
}

/// [`span_body`] built with AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn span_avx2(g: &Group, args: &[Buffer], lo: usize, n: usize) {
    span_body(g, args, lo, n)
}

#[inline(always)]
fn span_body(g: &Group, args: &[Buffer], lo: usize, n: usize) {
    let (loads, Some(o)) = params(g) else { return };
    let out = &args[o];
    let nt = super::stream::large(out);
    if let Some(ops) = &g.direct {
        let mut buf = [0f32; super::plan::CHUNK];
        let Some(i) = loads[0] else { return };
        let i = &args[i];
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
    }
}
