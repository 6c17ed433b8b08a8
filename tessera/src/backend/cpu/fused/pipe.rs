//! `load, load → binary → store` groups (an elementwise kernel such as `add`,
//! [`super::plan::Group::binary`]) as one loop per chunk: each output element is computed
//! from the two inputs in registers (bf16 widened there, exactly) and written straight to the
//! output, rounded to bf16 when the output is bf16, with no chunk slot in between. The loop
//! ([`span`]) also runs the whole-tensor pass ([`super::flat`]).

use super::chunk::bin_f;
use super::plan::{COp, Group, Pipe};
use super::run::window;
use crate::backend::Buffer;
use crate::backend::cpu::prefetch;
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

/// How far ahead of the 64 elements being combined an f32 operand's lines are asked for
/// (`prefetch::lines_l1`) where the operands and the streamed output lie past the last-level cache
/// together (`super::stream::past_cache`), in floats: 4 KiB, one page, as `gelu512::AHEAD`.
/// There the one-thread loop left memory idle while it computed, as gelu's did.
///
/// Measured on the 2-vCPU Intel Xeon KVM guest (family 6 model 207; experiment build with
/// the distance on an environment switch, 2026-11-28 02:44–02:49 UTC, load 4.4–8.0 from other
/// jobs; `RAYON_NUM_THREADS=1 chrt -f 50 cpu_profile add 8192 4096 20 --pool`, interleaved
/// with the build without it, fastest launch in ms): without 28.8/25.7/25.4/31.7/28.7
/// (main's binary 35.0/31.3/33.1/32.9/31.6), 1024 floats ahead 26.1/21.8/23.4/25.0/28.1,
/// 2048 ahead 24.9/28.7/23.2/31.7/27.5, 1024 ahead into L2 (`prefetcht1`) 31.5/22.5, 4096
/// into L2 22.6/30.4. Final build: see the commit.
const AHEAD_F32: usize = 1024;

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
            let far = super::stream::past_cache(a.len + b.len + o.len);
            for k in (0..n).step_by(PIECE) {
                let m = (n - k).min(PIECE);
                let (x, y) = (f32s(a, ia + k, m), f32s(b, ib + k, m));
                if far {
                    for s in (0..m).step_by(64) {
                        let e = (s + 64).min(m);
                        // The four lines of 64 floats each (past an operand's end: harmless).
                        prefetch::lines_l1(x.as_ptr().wrapping_add(s + AHEAD_F32), 4);
                        prefetch::lines_l1(y.as_ptr().wrapping_add(s + AHEAD_F32), 4);
                        zip(&mut t[s..e], &x[s..e], &y[s..e]);
                    }
                } else {
                    zip(&mut t[..m], x, y);
                }
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
            binary_bf16(op, u16s(a, ia, n), u16s(b, ib, n), unsafe {
                out_u16(o, io, n)
            });
        }
        (_, DType::BF16) if super::bf16io::has_binary(op) => {
            let mut h = [0u16; PIECE];
            for k in (0..n).step_by(PIECE) {
                let m = (n - k).min(PIECE);
                binary_bf16(op, u16s(a, ia + k, m), u16s(b, ib + k, m), &mut h[..m]);
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

/// `o[i] = op(a[i], b[i])` for bf16 `a`, `b` and `o` and an op [`super::bf16io::has_binary`]
/// takes, with [`super::bf16io::binary`]'s bits: at the AVX-512 level (with BW) 32 elements
/// per step by [`x86::pairs`] (one 64-byte load per operand and one 64-byte store, where
/// `bf16io::binary` loads 32 and stores 32 bytes per 16 elements through a narrowing store),
/// the last `n mod 32` by `bf16io::binary`.
#[inline(always)]
fn binary_bf16(op: BinaryOp, a: &[u16], b: &[u16], o: &mut [u16]) {
    let n = o.len();
    assert!(a.len() >= n && b.len() >= n, "bf16 binary out of bounds");
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx512
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        let m = n & !31;
        // SAFETY: AVX-512F and BW present (the active level is at most the detected one);
        // `m` elements readable at `a` and `b` and writable at `o` (asserted above).
        unsafe { x86::pairs(op, a.as_ptr(), b.as_ptr(), o.as_mut_ptr(), m) };
        super::bf16io::binary(op, &a[m..n], &b[m..n], &mut o[m..]);
        return;
    }
    super::bf16io::binary(op, a, b, o);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;
    use tessera_ir::graph::BinaryOp;

    /// `o[i] = op(a[i], b[i])` for `i < n` (a multiple of 32), bf16 in and out: each
    /// 64-byte load holds 32 elements as 16 pairs, widened exactly without a shuffle (the
    /// even elements `<< 16`, the odd ones `& 0xFFFF_0000`), combined as even and odd lanes,
    /// each lane rounded to bf16 in its high half (round to nearest even, a NaN made quiet:
    /// `super::super::bf16io`'s narrowing) and the pairs put back by one bitwise select.
    /// `op` is `Add`, `Sub`, `Mul`, else `Div`.
    ///
    /// # Safety
    /// AVX-512F and BW present; `n` elements readable at `a` and `b` and writable at `o`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn pairs(op: BinaryOp, a: *const u16, b: *const u16, o: *mut u16, n: usize) {
        // SAFETY (all four): the caller's contract.
        unsafe {
            match op {
                BinaryOp::Add => lanes(a, b, o, n, |x, y| _mm512_add_ps(x, y)),
                BinaryOp::Sub => lanes(a, b, o, n, |x, y| _mm512_sub_ps(x, y)),
                BinaryOp::Mul => lanes(a, b, o, n, |x, y| _mm512_mul_ps(x, y)),
                _ => lanes(a, b, o, n, |x, y| _mm512_div_ps(x, y)),
            }
        }
    }

    /// [`pairs`] with the op `f`.
    ///
    /// # Safety
    /// As [`pairs`].
    #[inline(always)]
    unsafe fn lanes(
        a: *const u16,
        b: *const u16,
        o: *mut u16,
        n: usize,
        f: impl Fn(__m512, __m512) -> __m512,
    ) {
        // SAFETY: AVX-512F and BW present and elements `i .. i + 32 <= n` of each (the
        // caller's contract).
        unsafe {
            let hi = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
            let ev = |v: __m512i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
            let od = |v: __m512i| _mm512_castsi512_ps(_mm512_and_si512(v, hi));
            let mut i = 0;
            while i < n {
                let x = _mm512_loadu_si512(a.add(i) as *const _);
                let y = _mm512_loadu_si512(b.add(i) as *const _);
                let e = high(f(ev(x), ev(y)));
                let d = high(f(od(x), od(y)));
                // Each 32-bit lane: the odd element's bits from `d`'s high half, the even
                // one's from `e`'s high half moved down (`hi ? d : e >> 16`).
                let r = _mm512_ternarylogic_epi32::<0xE4>(d, _mm512_srli_epi32::<16>(e), hi);
                _mm512_storeu_si512(o.add(i) as *mut _, r);
                i += 32;
            }
        }
    }

    /// Each lane of `v` rounded to bf16 in its high 16 bits (`b + 0x7FFF + lsb`, lsb: bit 16
    /// of `b`; a NaN's own high half with the quiet bit `0x0040_0000` set), the low half
    /// left over.
    ///
    /// # Safety
    /// AVX-512F present.
    #[inline(always)]
    unsafe fn high(v: __m512) -> __m512i {
        // SAFETY: AVX-512F present (the caller's).
        unsafe {
            let b = _mm512_castps_si512(v);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
            let r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x0040_0000))
        }
    }
}
