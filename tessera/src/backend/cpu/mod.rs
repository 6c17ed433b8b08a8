//! The CPU backend: runs Tile IR over a rayon grid, one program (block) per task.
//!
//! Tile ops work on whole tiles: loads and stores copy rows with dtype conversion, `dot` calls
//! the packed SIMD GEMM in [`gemm`], transcendental functions run the vectorised kernels in
//! [`vmath`], and elementwise arithmetic runs row-slice loops. bf16/f16 values are widened to
//! f32 in tiles and rounded back to their type after every op, so results match the types the
//! IR declares; `dot` accumulates in f32.
//!
//! Kernels that [`fused`] can compile (every elementwise, row-wise, column-reduction and
//! transpose kernel of the library, and `tile!` programs without `dot`) run as fused chunk
//! programs instead; the interpreter is their reference and runs the rest. A matmul kernel's
//! K loop runs as one GEMM straight from the tensors ([`matmul`]): the whole launch when the
//! kernel stores `A·B` unchanged into an f32 output, else each block's loop, with the
//! epilogue interpreted.

pub mod cache;
mod elementwise;
mod exec;
mod fft;
pub mod fused;
pub mod gemm;
pub mod matmul;
mod memory;
mod prefetch;
pub mod simd;
mod value;
pub mod vmath;

use super::Buffer;
use crate::{Error, Result};
use rayon::prelude::*;
use tessera_ir::tile::Kernel;

pub(crate) use exec::Program;

/// The kernel's grid over the argument shapes, every product checked.
pub(crate) fn grid_of(k: &Kernel, shapes: &[Vec<usize>]) -> Result<Vec<usize>> {
    let mut grid = vec![1usize; 3];
    for (g, e) in grid.iter_mut().zip(&k.grid) {
        *g = e.try_eval(shapes).map_err(|m| grid_error(k, m))?;
    }
    Ok(grid)
}

fn grid_error(k: &Kernel, message: String) -> Error {
    Error::ShapeMismatch {
        kernel: k.name.clone(),
        param: "grid".into(),
        message,
    }
}

/// Runs `kernel` over its grid with `args` bound to its parameters (same order).
///
/// `program` is the kernel prepared by [`Program::new`] (liveness computed once).
pub(crate) fn launch(program: &Program, args: &[Buffer]) -> Result<()> {
    let k: &Kernel = &program.kernel;
    if args.len() != k.params.len() {
        return Err(Error::ArgCount {
            kernel: k.name.clone(),
            expected: k.params.len(),
            got: args.len(),
        });
    }
    simd::check_env()?;
    if let Some(f) = &program.fused
        && f.launch(k, args)
    {
        return Ok(());
    }
    let shapes: Vec<Vec<usize>> = args.iter().map(|a| a.dims().to_vec()).collect();
    let grid = grid_of(k, &shapes)?;
    let total = grid
        .iter()
        .try_fold(1usize, |n, &g| n.checked_mul(g))
        .ok_or_else(|| grid_error(k, format!("a grid of {grid:?} blocks overflows")))?;
    if total == 0 {
        return Ok(());
    }
    let direct = program
        .kloop
        .as_ref()
        .and_then(|lp| matmul::operands(lp, args));
    if let (Some(ops), Some(out)) = (&direct, program.kloop.as_ref().and_then(|lp| lp.plain))
        && matmul::whole(ops, &args[out])
    {
        return Ok(());
    }
    let run = |regs: &mut exec::Registers, pid: usize| {
        let ids = [
            pid % grid[0],
            (pid / grid[0]) % grid[1],
            pid / (grid[0] * grid[1]),
        ];
        program.run_block(regs, ids, args, direct.as_ref())
    };
    if total == 1 || rayon::current_num_threads() == 1 {
        let mut regs = exec::Registers::new(k);
        return (0..total).try_for_each(|p| run(&mut regs, p));
    }
    (0..total)
        .into_par_iter()
        .try_for_each_init(|| exec::Registers::new(k), run)
}

/// Nanoseconds since the Unix epoch: a fresh seed for the unit tests' random inputs (each test
/// names its seed in its failure messages).
#[cfg(test)]
pub(crate) fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}
