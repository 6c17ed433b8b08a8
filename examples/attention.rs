//! Attention written in algebraic form, `softmax(q·kᵀ · s) · v`, which the `flash_attention`
//! rewrite turns into one online-softmax kernel; the same body with the rewrite switched off
//! (`#[kernel(rewrites(flash_attention = false))]`) runs as separate kernels with the `[S, S]`
//! scores in memory. For each length the example prints both times, the peak bytes the
//! process allocated during each call (counted by a wrapper around the system allocator), and
//! the difference of the two outputs.
//!
//! Run: `cargo run --release --example attention -- 8192`
//! (the argument is the largest S; S = 1024, 2048, .. up to it; add `TESSERA_DUMP=fusion` to
//! see the fusion trace with the rewrite's decision).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;
use tessera::prelude::*;
use tessera_workspace::reference::rel_error;

/// The system allocator, counting the bytes live now and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f`, returning its result, seconds, and the peak bytes allocated above what was live
/// when it started.
fn measured<T>(f: impl FnOnce() -> T) -> (T, f64, usize) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let t = Instant::now();
    let out = f();
    let dt = t.elapsed().as_secs_f64();
    (out, dt, PEAK.load(Relaxed) - base)
}

#[tessera::kernel(dims(D = 64))]
fn attention(
    q: Tensor<f32, (B, S, D)>,
    k: Tensor<f32, (B, S, D)>,
    v: Tensor<f32, (B, S, D)>,
) -> Tensor<f32, (B, S, D)> {
    softmax(q.matmul(k.t()) * 0.125).matmul(v)
}

#[tessera::kernel(dims(D = 64), rewrites(flash_attention = false))]
fn attention_unfused(
    q: Tensor<f32, (B, S, D)>,
    k: Tensor<f32, (B, S, D)>,
    v: Tensor<f32, (B, S, D)>,
) -> Tensor<f32, (B, S, D)> {
    softmax(q.matmul(k.t()) * 0.125).matmul(v)
}

fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() -> tessera::Result<()> {
    let max: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("S is a number"))
        .unwrap_or(4096);
    let d = 64;
    println!("device: cpu; one batch, head dim {d}; peak = most bytes allocated during the call");
    println!(
        "| S | q, k, v, out | fused time | fused peak | unfused time | unfused peak | [S, S] f32 | fused vs unfused |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut s = 1024;
    while s <= max {
        let q = Tensor::<f32>::randn(&[1, s, d], 1);
        let k = Tensor::<f32>::randn(&[1, s, d], 2);
        let v = Tensor::<f32>::randn(&[1, s, d], 3);
        // First calls compile and allocate caches; measure the second.
        attention(&q, &k, &v)?;
        let (y, tf, pf) = measured(|| attention(&q, &k, &v));
        attention_unfused(&q, &k, &v)?;
        let (z, tu, pu) = measured(|| attention_unfused(&q, &k, &v));
        let e = rel_error(&y?.to_f64_vec()?, &z?.to_f64_vec()?);
        println!(
            "| {s} | {} each | {:.3} s | {} | {:.3} s | {} | {} | {e:.1e} |",
            mib(s * d * 4),
            tf,
            mib(pf),
            tu,
            mib(pu),
            mib(s * s * 4)
        );
        s *= 2;
    }
    Ok(())
}
