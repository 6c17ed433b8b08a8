//! Schedule IR: how one fused kernel maps onto the machine — tile shape, warps, pipeline
//! stages, vector width — plus the search space the autotuner explores.
//!
//! Text form: `schedule matmul tile=[128, 128, 64] warps=8 stages=3 vector=4`.
//! Defaults follow the seeds' table A.1 (GEMM bf16 128×128×64; layernorm 256 threads, one row
//! per warp).

mod parse;
mod verify;

pub use parse::parse;
pub use verify::{Target, verify, verify_for};

use crate::DType;
use std::fmt;

/// The shape of work a fused kernel does; decides what the tile dims mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelClass {
    /// `tile = [BM, BN, BK]`.
    Matmul,
    /// One or more rows per program, columns in chunks: `tile = [rows, cols]`.
    Rowwise,
    /// Reduction over leading axes: `tile = [rows chunk, cols]`.
    ColReduce,
    /// `tile = [rows, cols]` of a 2-D view of the output.
    Elementwise,
    /// Swap of the last two axes: `tile = [rows, cols]` of the output.
    Transpose,
    /// Fused attention (online softmax): `tile = [BM, BN]`, `BM` query rows per program and
    /// `BN` keys per step of the loop over keys.
    Attention,
    /// Implicit-GEMM convolution: `tile = [BM, BN, BK]`, `BM` output pixels along a row,
    /// `BN` output channels, `BK` input channels per step.
    Conv,
    /// Stockham FFT along one axis: `tile = [T, C]`, `T` positions of the outer axes per
    /// program (a loop), `C` complex columns (`2·C` floats, each column pair one transform) of
    /// the inner axes per block, clamped to the inner extent and to `L·2C ≤ 8192` floats.
    Fft,
    /// Index-mapped copies and small contractions (pad, complex, real, causal_mask,
    /// spectral_mul): `tile = [rows, cols]` of the output's last two view axes.
    Layout,
}

impl KernelClass {
    /// Every class.
    pub const ALL: [KernelClass; 9] = [
        Self::Matmul,
        Self::Rowwise,
        Self::ColReduce,
        Self::Elementwise,
        Self::Transpose,
        Self::Attention,
        Self::Conv,
        Self::Fft,
        Self::Layout,
    ];

    /// Name in text.
    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Matmul => "matmul",
            KernelClass::Rowwise => "rowwise",
            KernelClass::ColReduce => "colreduce",
            KernelClass::Elementwise => "elementwise",
            KernelClass::Transpose => "transpose",
            KernelClass::Attention => "attention",
            KernelClass::Conv => "conv",
            KernelClass::Fft => "fft",
            KernelClass::Layout => "layout",
        }
    }

    /// Looks a class up by name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// How many tile dims a schedule of this class has.
    pub fn tile_rank(self) -> usize {
        if matches!(self, KernelClass::Matmul | KernelClass::Conv) {
            3
        } else {
            2
        }
    }
}

/// Columns of the CPU backend's row-wise tile ([`Schedule::cpu_default`]).
pub const CPU_ROW_COLS: u32 = 4096;

/// Columns of the CPU's row-wise tile for a kernel its row loops do not run
/// ([`Schedule::cpu_general`]).
pub const CPU_ROW_COLS_GENERAL: u32 = 1024;

/// One point of the schedule space.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// The kind of kernel the schedule is for.
    pub class: KernelClass,
    /// The tile dims; their meaning depends on `class` (see [`KernelClass`]).
    pub tile: Vec<u32>,
    /// Warps per block (threads ÷ 32).
    pub warps: u32,
    /// Pipeline stages (shared-memory buffers in flight).
    pub stages: u32,
    /// Vector width of loads and stores, in elements.
    pub vector: u32,
}

impl Schedule {
    /// The default schedule of a class for inputs of `dtype` (seeds table A.1).
    ///
    /// ```
    /// use tessera_ir::{DType, schedule::{KernelClass, Schedule}};
    /// assert_eq!(Schedule::default_for(KernelClass::Matmul, DType::BF16).to_string(),
    ///            "schedule matmul tile=[128, 128, 64] warps=8 stages=3 vector=8");
    /// ```
    pub fn default_for(class: KernelClass, dtype: DType) -> Schedule {
        let vector = (16 / dtype.size_bytes().max(1)).min(8) as u32;
        match class {
            KernelClass::Matmul => Schedule {
                class,
                tile: vec![128, 128, 64],
                warps: 8,
                stages: 3,
                vector,
            },
            // 256 threads, one row per warp; a warp covers 32 lanes × vector columns per step.
            KernelClass::Rowwise => Schedule {
                class,
                tile: vec![8, 32 * vector],
                warps: 8,
                stages: 1,
                vector,
            },
            KernelClass::ColReduce => Schedule {
                class,
                tile: vec![32, 256],
                warps: 8,
                stages: 1,
                vector: 1,
            },
            KernelClass::Elementwise => Schedule {
                class,
                tile: vec![8, 256],
                warps: 8,
                stages: 1,
                vector: 4,
            },
            KernelClass::Transpose => Schedule {
                class,
                tile: vec![64, 64],
                warps: 4,
                stages: 1,
                vector: 1,
            },
            // Table A.1's attention tile is 128 × 64 (× the head dim). 16-bit inputs take the
            // table's tile on the tensor-core attention template (one m16 tile of query rows
            // per warp, 2 cp.async K/V stages); f32 takes a 32 × 32 tile on the generic
            // emitter (FFMA, rows over warps: tf32 would miss f32 accuracy).
            KernelClass::Attention if dtype.size_bytes() == 2 => Schedule {
                class,
                tile: vec![128, 64],
                warps: 8,
                stages: 2,
                vector,
            },
            KernelClass::Attention => Schedule {
                class,
                tile: vec![32, 32],
                warps: 4,
                stages: 1,
                vector: 1,
            },
            // Table A.1: convolution 128 × 128 × 32 by implicit GEMM.
            KernelClass::Conv => Schedule {
                class,
                tile: vec![128, 128, 32],
                warps: 8,
                stages: 3,
                vector,
            },
            KernelClass::Fft => Schedule {
                class,
                tile: vec![1, 16],
                warps: 4,
                stages: 1,
                vector: 1,
            },
            KernelClass::Layout => Schedule {
                class,
                tile: vec![8, 128],
                warps: 4,
                stages: 1,
                vector: 1,
            },
        }
    }

    /// The schedule a `tile!` block program runs under on a PTX device: 4 warps (the program
    /// fixes its own tiles through its knobs; the rest are the elementwise defaults). The
    /// `tile!` macro emits its default knobs' PTX under it and the runtime launches it so.
    ///
    /// ```
    /// use tessera_ir::schedule::Schedule;
    /// assert_eq!(Schedule::block_program().warps, 4);
    /// ```
    pub fn block_program() -> Schedule {
        Schedule {
            warps: 4,
            ..Schedule::default_for(KernelClass::Elementwise, DType::F32)
        }
    }

    /// The default schedule of a class on the CPU backend. The GPU defaults size tiles for a
    /// warp's registers; a CPU core wants larger tiles: the 128×256 f32 matmul accumulator
    /// (128 KiB) sits in a Zen 4 core's L2 and still gives two blocks at n = 256 (the sweeps in
    /// `benches/matmul.rs` and `benches/autotune.rs`: 0.51/0.74/0.73 of faer on one thread at
    /// n = 256/512/1024, against 0.70/0.69/0.54 with the GPU's 128×128×64), elementwise tiles
    /// span 1024 columns per step, and a row-wise tile spans 4096 columns: a row of up to 4096
    /// columns is one chunk of the online softmax (one `exp` per value in the fast path, where
    /// a row of several chunks takes two for each chunk whose running max is not the row's).
    /// Its tile is beyond the PTX limit (see [`Target`]): it is legal under
    /// [`verify_for`]`(_, Target::Cpu)` only. A row-wise kernel the CPU's row loops do not
    /// run takes [`Self::cpu_general`] instead. The autotuner refines per shape.
    ///
    /// ```
    /// use tessera_ir::{DType, schedule::{KernelClass, Schedule, Target, verify_for}};
    /// let s = Schedule::cpu_default(KernelClass::Rowwise, DType::F32);
    /// assert_eq!(s.tile, vec![8, 4096]);
    /// assert!(verify_for(&s, Target::Cpu).is_ok() && verify_for(&s, Target::Ptx).is_err());
    /// ```
    pub fn cpu_default(class: KernelClass, dtype: DType) -> Schedule {
        let d = Schedule::default_for(class, dtype);
        let tile = match class {
            KernelClass::Matmul => vec![128, 256, 64],
            KernelClass::Rowwise => vec![8, CPU_ROW_COLS],
            KernelClass::ColReduce => vec![64, 256],
            KernelClass::Elementwise => vec![16, 1024],
            KernelClass::Transpose => vec![64, 64],
            KernelClass::Attention => vec![64, 64],
            KernelClass::Conv => vec![64, 64, 64],
            KernelClass::Fft => vec![4, 64],
            KernelClass::Layout => vec![16, 256],
        };
        Schedule { tile, ..d }
    }

    /// The CPU schedule of a kernel the CPU's row loops do not run: [`Self::cpu_default`] with
    /// a row-wise tile of [`CPU_ROW_COLS_GENERAL`] columns. The interpreter and the fused
    /// chunk program compute a row-wise tile whole, the padding past a narrower row included,
    /// so a wide tile costs them on narrow rows (`softmax(x)·2`, the chunk program, one
    /// thread, `[4096, 1024]`: 3.4 ms with `[8, 1024]`, 12.8 ms with `[8, 4096]`), while the
    /// row loops (softmax, layernorm, rmsnorm) compute only a row's own columns.
    ///
    /// ```
    /// use tessera_ir::{DType, schedule::{KernelClass, Schedule}};
    /// assert_eq!(Schedule::cpu_general(KernelClass::Rowwise, DType::F32).tile, vec![8, 1024]);
    /// assert_eq!(Schedule::cpu_general(KernelClass::Matmul, DType::F32),
    ///            Schedule::cpu_default(KernelClass::Matmul, DType::F32));
    /// ```
    pub fn cpu_general(class: KernelClass, dtype: DType) -> Schedule {
        let d = Schedule::cpu_default(class, dtype);
        match class {
            KernelClass::Rowwise => Schedule {
                tile: vec![8, CPU_ROW_COLS_GENERAL],
                ..d
            },
            _ => d,
        }
    }

    /// The search space of a class: the default first, then the alternatives, all verified.
    pub fn space(class: KernelClass, dtype: DType) -> Vec<Schedule> {
        let d = Schedule::default_for(class, dtype);
        let mut out = vec![d.clone()];
        let tiles: Vec<Vec<u32>> = match class {
            KernelClass::Matmul => vec![
                vec![64, 64, 32],
                vec![128, 64, 64],
                vec![64, 128, 64],
                vec![128, 128, 32],
                vec![128, 256, 64],
                vec![256, 128, 64],
            ],
            KernelClass::Rowwise => vec![vec![1, 256], vec![4, 128], vec![8, 512], vec![16, 128]],
            KernelClass::ColReduce => vec![vec![16, 128], vec![64, 512]],
            KernelClass::Elementwise => {
                vec![vec![8, 128], vec![16, 256], vec![8, 512], vec![32, 128]]
            }
            KernelClass::Transpose => vec![vec![32, 32], vec![64, 128]],
            // `[BM, BN]` = query rows per block × keys per step. 16-bit: the tensor-core
            // template (one m16 tile per warp; at 128 × 128 head dim 128 needs more than 255
            // registers and spills); f32: the generic FFMA emitter, whose score and output
            // tiles live in registers, so its tiles stay small (at 64 × 64 and above, head dim
            // 128 spills). Both measured by ptxas 12.9 (`scripts/ptxas-check`).
            KernelClass::Attention if dtype.size_bytes() == 2 => {
                vec![vec![64, 64], vec![64, 32], vec![128, 32]]
            }
            KernelClass::Attention => vec![vec![16, 32], vec![32, 64], vec![16, 64]],
            KernelClass::Conv => vec![vec![64, 64, 32], vec![128, 64, 32], vec![64, 128, 64]],
            // `[T, C]`: transforms per program (a loop) × complex columns per block; one
            // alternative keeps the library's precompiled FFT modules few
            KernelClass::Fft => vec![vec![4, 16]],
            KernelClass::Layout => vec![vec![8, 256], vec![32, 64]],
        };
        for tile in tiles {
            // A row-wise tile of 512 columns with 16-bit inputs (vector = 8) keeps 16 widened
            // values per lane per row live across layernorm's passes: ptxas 12.9 gives its
            // bf16/f16 instances 255 registers and 92–112 spill bytes on sm_80/89/90a
            // (`scripts/ptxas-check`), so the space leaves that point out.
            if class == KernelClass::Rowwise && dtype.size_bytes() == 2 && tile[1] / 32 > 8 {
                continue;
            }
            // 16-bit attention runs one m16 tile of query rows per warp (the tensor-core
            // template): BM / 16 warps, at most 8.
            let warps = if class == KernelClass::Attention && dtype.size_bytes() == 2 {
                (tile[0] / 16).clamp(1, 8)
            } else {
                d.warps
            };
            let s = Schedule {
                tile,
                warps,
                ..d.clone()
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t: Vec<String> = self.tile.iter().map(|x| x.to_string()).collect();
        write!(
            f,
            "schedule {} tile=[{}] warps={} stages={} vector={}",
            self.class.name(),
            t.join(", "),
            self.warps,
            self.stages,
            self.vector
        )
    }
}
