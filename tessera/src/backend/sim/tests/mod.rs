//! Tests of the sim backend: performance counters of library kernels ([`counters`]),
//! agreement with the CPU backend on compiled graphs for every arch and several schedules
//! ([`agree`]), numerics policies bit for bit across threads, tiles and backends ([`policy`]),
//! and fp8 GEMM and quantisation against the CPU ([`fp8`]). The simulator's own tests
//! (instruction semantics, planted bugs, the API) live in the `tessera-sim` crate.

mod agree;
mod counters;
mod fp8;
mod policy;

use crate::backend::Buffer;
use tessera_ir::DType;

/// Owned bytes (8-byte aligned) viewed as a [`Buffer`].
pub(super) struct Buf {
    pub mem: Vec<u64>,
    pub bytes: usize,
    pub dtype: DType,
    pub writable: bool,
}

impl Buf {
    pub fn f32s(v: &[f32], dims: &[usize], writable: bool) -> Buf {
        let mut b = Buf::zeros(DType::F32, dims, writable);
        b.as_bytes_mut().copy_from_slice(bytemuck::cast_slice(v));
        b
    }

    pub fn zeros(dtype: DType, dims: &[usize], writable: bool) -> Buf {
        let bytes = dims.iter().product::<usize>() * dtype.size_bytes();
        Buf {
            mem: vec![0; bytes.div_ceil(8)],
            bytes,
            dtype,
            writable,
        }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.mem)[..self.bytes]
    }

    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.mem)[..self.bytes]
    }

    pub fn to_f32(&self) -> Vec<f32> {
        let b = self.as_bytes();
        match self.dtype {
            DType::F32 => bytemuck::cast_slice::<u8, f32>(b).to_vec(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            d => panic!("to_f32 of {d}"),
        }
    }

    /// A [`Buffer`] over this memory at view dims `view` (writable iff `self.writable`; the
    /// simulator and the CPU backend only write through writable buffers).
    pub fn view(&self, view: &[usize]) -> Buffer {
        let mut shape = [1usize; 3];
        shape[..view.len()].copy_from_slice(view);
        Buffer {
            dtype: self.dtype,
            shape,
            rank: view.len(),
            ptr: self.mem.as_ptr() as *mut u8,
            len: self.bytes,
            writable: self.writable,
        }
    }
}

/// Deterministic pseudo-random f32s in `[-r, r]`.
pub(super) fn rand(n: usize, seed: u64, r: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * r
        })
        .collect()
}
