//! Fused scaled-dot-product attention: `softmax(q·kᵀ / √D [causal mask]) · v` as one
//! online-softmax kernel (Graph IR `attention`; the `[S, L]` scores never reach memory).
//!
//! Layout: `q: T[B, H, S, D]`, `k, v: T[B, H, L, D]` → `T[B, H, S, D]` (batch, heads, query
//! length, key length, head dim). `T` is f32, bf16 or f16; scores, the running max and sum and
//! the output accumulate in f32, the probabilities are rounded to `T` before the second product
//! (as a tensor-core kernel feeds them), and the result is rounded once to `T`. The causal mask
//! lets query `i` see keys `j ≤ i + L − S` (bottom-right aligned, as in FlashAttention 2); a
//! query that sees no key (rows `i < S − L`) gets NaN, as the softmax of an all-masked row
//! does. The head dim is a compile-time tile extent, so there is one kernel per head dim: 64
//! ([`mod@d64`], [`mod@d64_causal`]) and 128 ([`mod@d128`], [`mod@d128_causal`]);
//! [`attention`](fn@crate::attention) picks among them. On a PTX device bf16/f16 run on tensor
//! cores (`mma.sync` for both products, a `cp.async` K/V pipeline), f32 on FFMA.
//!
//! Tiles: each kernel is tuned over the attention class's search space,
//! `tessera::ir::schedule::Schedule::space(KernelClass::Attention, dtype)` — `[BM, BN]` query
//! rows × key columns per step (`block_q × block_kv`) — and every point of it is precompiled
//! for sm_80/89/90a (`crate::ptx`), so a tuned launch on a GPU loads its module without
//! compiling; the tuner checks each candidate's output against the default schedule's before
//! timing it.
//!
//! ```
//! use tessera::Tensor;
//! let q = Tensor::<f32>::randn(&[1, 2, 5, 64], 1);
//! let k = Tensor::<f32>::randn(&[1, 2, 7, 64], 2);
//! let v = Tensor::<f32>::randn(&[1, 2, 7, 64], 3);
//! let y = tessera_kernels::attention(&q, &k, &v, true)?;
//! assert_eq!(y.shape(), &[1, 2, 5, 64]);
//! # Ok::<(), tessera::Error>(())
//! ```

use tessera::{Error, Float, Result, Tensor};

/// Attention with head dim 64, scale `1/8`.
#[tessera::kernel(dims(D = 64), precompiled = crate::ptx::PRECOMPILED)]
pub fn d64<T: Float>(
    q: Tensor<T, (B, H, S, D)>,
    k: Tensor<T, (B, H, L, D)>,
    v: Tensor<T, (B, H, L, D)>,
) -> Tensor<T, (B, H, S, D)> {
    attention(q, k, v, 0.125).cast::<T>()
}

/// Causal attention with head dim 64, scale `1/8`.
#[tessera::kernel(dims(D = 64), precompiled = crate::ptx::PRECOMPILED)]
pub fn d64_causal<T: Float>(
    q: Tensor<T, (B, H, S, D)>,
    k: Tensor<T, (B, H, L, D)>,
    v: Tensor<T, (B, H, L, D)>,
) -> Tensor<T, (B, H, S, D)> {
    causal_attention(q, k, v, 0.125).cast::<T>()
}

/// Attention with head dim 128, scale `1/√128`.
#[tessera::kernel(dims(D = 128), precompiled = crate::ptx::PRECOMPILED)]
pub fn d128<T: Float>(
    q: Tensor<T, (B, H, S, D)>,
    k: Tensor<T, (B, H, L, D)>,
    v: Tensor<T, (B, H, L, D)>,
) -> Tensor<T, (B, H, S, D)> {
    attention(q, k, v, 0.08838834764831845).cast::<T>()
}

/// Causal attention with head dim 128, scale `1/√128`.
#[tessera::kernel(dims(D = 128), precompiled = crate::ptx::PRECOMPILED)]
pub fn d128_causal<T: Float>(
    q: Tensor<T, (B, H, S, D)>,
    k: Tensor<T, (B, H, L, D)>,
    v: Tensor<T, (B, H, L, D)>,
) -> Tensor<T, (B, H, S, D)> {
    causal_attention(q, k, v, 0.08838834764831845).cast::<T>()
}

/// The head dims with a kernel.
pub const HEAD_DIMS: [usize; 2] = [64, 128];

/// `softmax(q·kᵀ / √D [causal]) · v` for `q: T[B, H, S, D]`, `k, v: T[B, H, L, D]`, as one
/// fused kernel on the device the arguments are on; `D` must be one of [`HEAD_DIMS`].
///
/// A head dim without a kernel, or an argument of another rank, is an error naming the shape;
/// mismatched dims are the kernel's own shape error.
///
/// ```
/// use tessera::{Tensor, bf16};
/// let q = Tensor::<bf16>::randn(&[2, 1, 3, 128], 1);
/// let kv = Tensor::<bf16>::randn(&[2, 1, 9, 128], 2);
/// let y = tessera_kernels::attention(&q, &kv, &kv, false)?;
/// assert_eq!(y.shape(), &[2, 1, 3, 128]);
/// let bad = Tensor::<bf16>::randn(&[2, 1, 3, 32], 3);
/// assert!(tessera_kernels::attention(&bad, &bad, &bad, false).unwrap_err().to_string().contains("[2, 1, 3, 32]"));
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn attention<T: Float>(
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    causal: bool,
) -> Result<Tensor<T>> {
    let err = |message: String| Error::ShapeMismatch {
        kernel: "attention".into(),
        param: "q".into(),
        message,
    };
    if q.shape().len() != 4 {
        return Err(err(format!(
            "must be [B, H, S, D], got shape {:?}",
            q.shape()
        )));
    }
    match (q.shape()[3], causal) {
        (64, false) => d64(q, k, v),
        (64, true) => d64_causal(q, k, v),
        (128, false) => d128(q, k, v),
        (128, true) => d128_causal(q, k, v),
        (d, _) => Err(err(format!(
            "has shape {:?}: no kernel for head dim {d}; head dims with a kernel: {HEAD_DIMS:?}",
            q.shape()
        ))),
    }
}
