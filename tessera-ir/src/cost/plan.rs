//! The cost of a whole fused plan: what the autotuner's fusion-depth search ranks (seeds §4.6:
//! "balances lower memory traffic (deep fusion) vs register pressure; prunes fusions that
//! cause spills").
//!
//! A plan is its kernels, each with its problem, schedule point and the number of elementwise
//! ops fused into its epilogue. Its time is the sum of the kernels' [`estimate`]s, so an op
//! left unfused costs what its own streaming kernel costs: a write and a read of the
//! intermediate, plus that kernel's block overheads. On a GPU every fused op also keeps
//! [`REGS_PER_EPILOGUE_OP`] more registers live per thread; a kernel pushed over the
//! register cap would spill, and prunes the plan.

use super::{Arch, Point, Problem, Prune, estimate};
use crate::schedule::Target;

/// One kernel of a plan as the cost model sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanKernel {
    /// The kernel's work and sizes.
    pub problem: Problem,
    /// The schedule it runs under.
    pub point: Point,
    /// Elementwise ops fused into the kernel's epilogue.
    pub epilogue_ops: u32,
}

/// Registers a GPU thread keeps live per fused epilogue op: its result, a loaded operand,
/// and that operand's address (two registers).
pub const REGS_PER_EPILOGUE_OP: u32 = 4;

/// Predicted time of a plan in seconds, or why it is pruned.
///
/// ```
/// use tessera_ir::cost::{Arch, Point, Problem, plan::{PlanKernel, plan_estimate}};
/// let mm = Problem::matmul(1, 512, 512, 512, 4, 4);
/// let ew = Problem::Stream { rows: 512, cols: 512, bytes: 8, flops: 1 };
/// let p = Point::new([128, 128, 64], 8, 3, 4);
/// let e = Point::new([16, 1024, 1], 8, 1, 4);
/// let fused = [PlanKernel { problem: mm, point: p, epilogue_ops: 2 }];
/// let split = [
///     PlanKernel { problem: mm, point: p, epilogue_ops: 1 },
///     PlanKernel { problem: ew, point: e, epilogue_ops: 0 },
/// ];
/// let (t_fused, _) = plan_estimate(&Arch::H100, &fused);
/// let (t_split, _) = plan_estimate(&Arch::H100, &split);
/// assert!(t_fused < t_split);   // the unfused op writes and re-reads the intermediate
/// // 40 fused ops push the 128×128 tile's ~130 registers past the cap of 255: pruned.
/// let deep = [PlanKernel { problem: mm, point: p, epilogue_ops: 40 }];
/// assert!(plan_estimate(&Arch::H100, &deep).1.is_some());
/// ```
pub fn plan_estimate(arch: &Arch, kernels: &[PlanKernel]) -> (f64, Option<Prune>) {
    let mut total = 0.0;
    for k in kernels {
        let e = estimate(arch, &k.problem, &k.point);
        if let Some(p) = e.pruned {
            return (f64::INFINITY, Some(p));
        }
        if arch.target != Target::Cpu {
            let need = e.regs_per_thread + REGS_PER_EPILOGUE_OP * k.epilogue_ops;
            if need > arch.hw.max_regs_per_thread {
                return (
                    f64::INFINITY,
                    Some(Prune::Registers {
                        need,
                        cap: arch.hw.max_regs_per_thread,
                    }),
                );
            }
        }
        total += e.time_s;
    }
    (total, None)
}
