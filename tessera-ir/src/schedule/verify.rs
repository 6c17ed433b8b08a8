//! Schedule IR verifier: every rule broken is reported.

use super::Schedule;

/// What a kernel runs on: the one type both the Schedule IR verifier (a tile dim has the
/// target's upper bound, [`Target::max_tile`]) and the cost model
/// ([`Arch::target`](crate::cost::Arch::target): which occupancy and overhead rules apply)
/// read.
///
/// ```
/// use tessera_ir::{cost::Arch, schedule::Target};
/// assert_eq!(Arch::H100.target, Target::Ptx);
/// assert_eq!(Arch::cpu(2).target, Target::Cpu);
/// assert_eq!(format!("{} {}", Target::Ptx, Target::Cpu), "PTX CPU");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A GPU, through PTX (or the simulator that runs it): SMs with warps, a register file and
    /// shared memory. A tile dim is bounded by a block's threads and shared memory.
    Ptx,
    /// The CPU backend: cores running one block at a time from a rayon pool (the cost model's
    /// "shared memory" limit is the per-core L2 a block's tiles should fit in). A tile is a
    /// loop step over memory, bounded by the interpreter's per-op tile scratch (a tile per
    /// op) and the fast path's row buffers.
    Cpu,
}

impl std::fmt::Display for Target {
    /// `PTX` or `CPU`, as the verifier's messages name the target.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Ptx => "PTX",
            Target::Cpu => "CPU",
        })
    }
}

impl Target {
    /// The largest tile dim of a schedule on this target (tile dims are powers of two).
    ///
    /// ```
    /// use tessera_ir::schedule::Target;
    /// assert_eq!(Target::Ptx.max_tile(), 1024);
    /// assert_eq!(Target::Cpu.max_tile(), 8192);
    /// ```
    pub fn max_tile(self) -> u32 {
        match self {
            Target::Ptx => 1024,
            Target::Cpu => 8192,
        }
    }
}

/// Checks tile rank and sizes, warps, stages and vector width under the PTX rules
/// ([`verify_for`] with [`Target::Ptx`]).
///
/// ```
/// let s = tessera_ir::schedule::parse("schedule matmul tile=[128, 96, 64] warps=3 stages=0 vector=4").unwrap();
/// let errs = tessera_ir::schedule::verify(&s).unwrap_err();
/// assert_eq!(errs.len(), 3);
/// assert!(errs[0].contains("tile[1] = 96"));
/// ```
pub fn verify(s: &Schedule) -> Result<(), Vec<String>> {
    verify_for(s, Target::Ptx)
}

/// Checks `s` for `target`: the rules of [`verify`], each tile dim a power of two at most
/// [`Target::max_tile`]. A tile dim past the limit is reported naming the target and its
/// limit; [`crate::lower::lower_on`] adds the kernel and the schedule.
///
/// ```
/// use tessera_ir::{DType, schedule::{parse, verify_for, KernelClass, Schedule, Target}};
/// let s = parse("schedule rowwise tile=[8, 4096] warps=8 stages=1 vector=4").unwrap();
/// assert!(verify_for(&s, Target::Cpu).is_ok());
/// let e = verify_for(&s, Target::Ptx).unwrap_err();
/// assert_eq!(e, ["tile[1] = 4096 exceeds the PTX limit 1024"]);
/// assert_eq!(parse(&s.to_string()).unwrap(), s);
/// let s = parse("schedule rowwise tile=[8, 16384] warps=8 stages=1 vector=4").unwrap();
/// assert_eq!(verify_for(&s, Target::Cpu).unwrap_err(), ["tile[1] = 16384 exceeds the CPU limit 8192"]);
/// let s = parse("schedule rowwise tile=[8, 3000] warps=8 stages=1 vector=4").unwrap();
/// assert_eq!(verify_for(&s, Target::Cpu).unwrap_err(), ["tile[1] = 3000 is not a power of two"]);
/// assert_eq!(verify_for(&s, Target::Ptx).unwrap_err(),
///            ["tile[1] = 3000 is not a power of two and exceeds the PTX limit 1024"]);
/// // The CPU defaults are CPU schedules; the GPU defaults and search spaces PTX ones.
/// for c in KernelClass::ALL {
///     for d in [DType::F32, DType::BF16] {
///         assert!(verify_for(&Schedule::cpu_default(c, d), Target::Cpu).is_ok());
///         for s in Schedule::space(c, d) {
///             assert!(verify_for(&s, Target::Ptx).is_ok(), "{s}");
///         }
///     }
/// }
/// ```
pub fn verify_for(s: &Schedule, target: Target) -> Result<(), Vec<String>> {
    let mut e = Vec::new();
    if s.tile.len() != s.class.tile_rank() {
        e.push(format!(
            "{} schedules have {} tile dims, got {}",
            s.class.name(),
            s.class.tile_rank(),
            s.tile.len()
        ));
    }
    let max = target.max_tile();
    for (i, t) in s.tile.iter().enumerate() {
        match (t.is_power_of_two(), *t > max) {
            (true, false) => {}
            (true, true) => e.push(format!("tile[{i}] = {t} exceeds the {target} limit {max}")),
            (false, false) => e.push(format!("tile[{i}] = {t} is not a power of two")),
            (false, true) => e.push(format!(
                "tile[{i}] = {t} is not a power of two and exceeds the {target} limit {max}"
            )),
        }
    }
    if !s.warps.is_power_of_two() || s.warps > 32 {
        e.push(format!("warps = {} must be a power of two ≤ 32", s.warps));
    }
    if !(1..=8).contains(&s.stages) {
        e.push(format!("stages = {} must be in 1..=8", s.stages));
    }
    if !s.vector.is_power_of_two() || s.vector > 16 {
        e.push(format!("vector = {} must be a power of two ≤ 16", s.vector));
    }
    if e.is_empty() { Ok(()) } else { Err(e) }
}
