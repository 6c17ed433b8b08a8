//! GPU architectures we emit PTX for, with the `.version`/`.target` each needs
//! (see `shared/ptx/FACTS.md` §1: minimum ISA per target as checked with ptxas 12.9).

use std::fmt;

/// A PTX target architecture.
///
/// ```
/// use tessera_ir::target::ptx::Arch;
/// assert_eq!(Arch::Sm90a.target(), "sm_90a");
/// assert_eq!(Arch::parse("sm_89"), Some(Arch::Sm89));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// A100 (Ampere).
    Sm80,
    /// L40 / RTX 40 (Ada).
    Sm89,
    /// H100 (Hopper), arch-specific features enabled.
    Sm90a,
}

impl Arch {
    /// Every architecture we emit for.
    pub const ALL: [Arch; 3] = [Arch::Sm80, Arch::Sm89, Arch::Sm90a];

    /// The `.target` (and `ptxas -arch`) name.
    pub fn target(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm89 => "sm_89",
            Arch::Sm90a => "sm_90a",
        }
    }

    /// The `.version` we emit: the target's minimum, raised to 7.8 where `cvt.f32.bf16`
    /// (7.1) and `.L2` hints (7.4) are used, so one feature set works on every target; sm_89
    /// needs 8.1 for the fp8 `cvt` forms (sm_90 has them from 7.8).
    pub fn ptx_version(self) -> &'static str {
        match self {
            Arch::Sm80 => "7.4",
            Arch::Sm89 => "8.1",
            Arch::Sm90a => "8.0",
        }
    }

    /// Parses `sm_80`, `sm_89`, `sm_90a`.
    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.target() == s)
    }

    /// The hardware limits of this target's compute capability (one table, shared with the
    /// cost model: [`crate::cost::arch::HwLimits`]).
    ///
    /// ```
    /// use tessera_ir::target::ptx::Arch;
    /// assert_eq!(Arch::Sm89.limits().smem_per_block_optin, 99 * 1024);
    /// assert_eq!(Arch::Sm90a.limits().max_warps_per_sm(), 64);
    /// ```
    pub fn limits(self) -> crate::cost::arch::HwLimits {
        use crate::cost::arch::HwLimits;
        match self {
            Arch::Sm80 => HwLimits::SM80,
            Arch::Sm89 => HwLimits::SM89,
            Arch::Sm90a => HwLimits::SM90,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.target())
    }
}
