//! The decoded form of a PTX entry: one [`Inst`] per instruction, operands resolved to register
//! indices, immediates, shared- and local-window addresses, param offsets and branch targets.

use super::ParamType;

/// A PTX scalar type as written in an instruction suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    B8,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    BF16,
    F32,
    F64,
    F16x2,
    BF16x2,
    E4M3x2,
    E5M2x2,
    /// A single fp8 element (`mma` operand types).
    E4M3,
    E5M2,
    /// `tf32` (`mma` operands, `cvt.rna.tf32.f32`): an f32 bit pattern.
    Tf32,
    Pred,
}

impl Ty {
    pub(crate) fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "bf16" => Ty::BF16,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "f16x2" => Ty::F16x2,
            "bf16x2" => Ty::BF16x2,
            "e4m3x2" => Ty::E4M3x2,
            "e5m2x2" => Ty::E5M2x2,
            "e4m3" => Ty::E4M3,
            "e5m2" => Ty::E5M2,
            "tf32" => Ty::Tf32,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    /// Width in bits (1 for `.pred`).
    pub(crate) fn bits(self) -> u32 {
        match self {
            Ty::Pred => 1,
            Ty::B8 | Ty::U8 | Ty::S8 | Ty::E4M3 | Ty::E5M2 => 8,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::BF16 | Ty::E4M3x2 | Ty::E5M2x2 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::BF16x2 | Ty::Tf32 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
        }
    }

    pub(crate) fn bytes(self) -> u32 {
        self.bits().div_ceil(8)
    }

    pub(crate) fn signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(
            self,
            Ty::F16 | Ty::BF16 | Ty::F32 | Ty::F64 | Ty::F16x2 | Ty::BF16x2
        )
    }

    /// The 16-bit float types and their packed pairs (lane-wise half-precision arithmetic).
    pub(crate) fn is_half(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16 | Ty::F16x2 | Ty::BF16x2)
    }
}

/// A special register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sreg {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    /// `%lanemask_{eq,lt,le,gt,ge}`.
    LaneMask(LaneMask),
}

/// Which `%lanemask_*` register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaneMask {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

/// What an address operand is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    /// A register holding an address (of the instruction's state space).
    Reg(u32),
    /// A constant: a shared- or local-window symbol address, or an absolute address.
    Abs(u64),
    /// A kernel parameter (offset into the param block).
    Param(u32),
}

/// `[base+off]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    pub base: Base,
    pub off: i64,
}

/// An operand.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Opd {
    Reg(u32),
    /// `!%p` (predicate operands of logic ops and `setp`'s combining operand).
    Not(u32),
    Imm(u64),
    Sreg(Sreg),
    /// `{a, b, ...}`; `_` sinks are `Sink`.
    Vec(Box<[Opd]>),
    /// `d|p` (shfl's optional predicate destination, setp's two destinations).
    Pair(u32, u32),
    Mem(Addr),
    /// A branch target (instruction index).
    Target(u32),
    Sink,
}

/// Comparison of `setp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

/// Boolean combiner of `setp.cmp.bop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

/// Float-to-integer / float-to-integral rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IRound {
    Rni,
    Rzi,
    Rmi,
    Rpi,
}

/// Lane-wise arithmetic and logic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Alu {
    Mov,
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    MadLo,
    MadHi,
    MadWide,
    Fma,
    /// `div`: IEEE (`.rn`), or `.full`/`.approx` (computed exactly, then rounded; perturbed
    /// within the documented error when asked).
    Div {
        approx: Approx,
    },
    Rem,
    /// `min`/`max` with `.NaN` and (half types) `.xorsign.abs`.
    Min {
        nan: bool,
        xorsign: bool,
    },
    Max {
        nan: bool,
        xorsign: bool,
    },
    Abs,
    Neg,
    And,
    Or,
    Xor,
    Not,
    Shl,
    Shr,
    Setp {
        cmp: Cmp,
        bop: Option<BoolOp>,
    },
    Selp,
    Testp(Testp),
    Ex2,
    Lg2,
    Rcp {
        approx: bool,
    },
    Rsqrt,
    Sqrt {
        approx: bool,
    },
    Sin,
    Cos,
    Tanh,
    Popc,
    Clz,
    /// `prmt.b32{.mode}`.
    Prmt(Prmt),
    /// `bfe.{u32,u64,s32,s64} d, a, pos, len`.
    Bfe,
    /// `bfi.{b32,b64} f, a, b, pos, len`.
    Bfi,
    Brev,
    /// `lop3.b32 d, a, b, c, immLut`.
    Lop3,
    /// `shf.{l,r}.{wrap,clamp}.b32 d, a, b, c`.
    Shf {
        left: bool,
        clamp: bool,
    },
    /// `cvta.*`: generic ↔ state-space addresses (`space`: global, shared or local).
    Cvta {
        to_generic: bool,
        space: Space,
    },
}

/// Which approximation a `div` computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Approx {
    /// `.rn`: IEEE round to nearest even.
    Exact,
    /// `.approx`: `a * (1/b)`, ≤ 2 ulp for |b| in [2^-126, 2^126], 0 above.
    Approx,
    /// `.full`: ≤ 2 ulp over the full range.
    Full,
}

/// `prmt` modes (`None` is the generic form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prmt {
    Generic,
    F4e,
    B4e,
    Rc8,
    Ecl,
    Ecr,
    Rc16,
}

/// `testp` predicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Testp {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

/// A state space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
    /// Per-thread memory (`.local` declarations of the entry).
    Local,
    Param,
    /// Generic addressing (no space suffix).
    Generic,
}

/// `cvt` rounding of a float destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FRound {
    Rn,
    Int(IRound),
    None,
}

/// Shuffle modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shfl {
    Up,
    Down,
    Bfly,
    Idx,
}

/// Atomic operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    And,
    Or,
    Xor,
    Exch,
    Cas,
    Inc,
    Dec,
}

/// Vote modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vote {
    All,
    Any,
    Uni,
    Ballot,
}

/// A decoded operation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Alu {
        op: Alu,
        ty: Ty,
        ftz: bool,
        sat: bool,
        /// `.relu` (half-precision `fma`): negative results become +0.
        relu: bool,
    },
    /// `mov` with a vector operand: pack (`mov.b32 r, {lo, hi}`) or unpack.
    MovVec {
        ty: Ty,
    },
    Cvt {
        dst: Ty,
        src: Ty,
        rnd: FRound,
        ftz: bool,
        sat: bool,
    },
    /// `cvt.rn[.satfinite].{bf16x2,f16x2,e4m3x2,e5m2x2}.f32 d, a, b` (d.hi = a) or the widening
    /// `cvt.rn.f16x2.{e4m3x2,e5m2x2} d, a`.
    CvtPack {
        dst: Ty,
        src: Ty,
        relu: bool,
    },
    Ld {
        space: Space,
        ty: Ty,
        vec: u8,
        /// `ld.global.nc`: the read-only (non-coherent) path.
        nc: bool,
    },
    St {
        space: Space,
        ty: Ty,
        vec: u8,
    },
    Atom {
        space: Space,
        op: AtomOp,
        ty: Ty,
        ret: bool,
    },
    Bra {
        uni: bool,
    },
    Exit,
    Bar {
        id: u32,
    },
    /// `membar` / `fence`: no-op in a sequentially consistent simulator.
    Fence,
    Shfl {
        mode: Shfl,
    },
    Vote {
        mode: Vote,
    },
    Ldmatrix {
        num: u8,
        trans: bool,
    },
    /// `mma.sync.aligned.m16n8k{k}.row.col.f32.{a}.{b}.f32` (see [`crate::mma`] for the
    /// shapes and types).
    Mma {
        k: u8,
        a: Ty,
        b: Ty,
    },
    CpAsync {
        bytes: u8,
    },
    CpCommit,
    CpWait {
        n: u32,
    },
    CpWaitAll,
}

/// What an instruction counts as in the instruction mix ([`crate::InstMix`]); generic loads
/// and stores are classified at run time by the state space their address falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Mma,
    Ldmatrix,
    GlobalLoad,
    GlobalStore,
    SharedLoad,
    SharedStore,
    LocalLoad,
    LocalStore,
    ParamLoad,
    GenericLoad,
    GenericStore,
    Atomic,
    AsyncCopy,
    Collective,
    Alu,
    Sfu,
    Control,
}

/// One instruction.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Inst {
    /// 1-based line in the module text.
    pub line: u32,
    pub class: Class,
    /// `@%p` / `@!%p`: (register, negated).
    pub guard: Option<(u32, bool)>,
    pub op: Op,
    pub args: Box<[Opd]>,
    /// The instruction as written (for error messages).
    pub text: Box<str>,
}

/// A named region of the shared or local window (for naming addresses in findings).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Symbol {
    pub name: String,
    pub start: u32,
    /// Bytes; `None` for the dynamic `.extern .shared` array (sized at launch).
    pub bytes: Option<u32>,
}

/// A parsed entry, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// `(name, type)` of each `.param`, with its offset in the param block.
    pub params: Vec<(String, ParamType, u32)>,
    pub param_bytes: u32,
    pub nregs: u32,
    pub insts: Vec<Inst>,
    /// Bytes of static shared memory; dynamic shared memory starts at `dyn_offset`.
    pub static_smem: u32,
    pub dyn_offset: u32,
    /// Shared symbols in address order (static ones, then the dynamic array if declared).
    pub shared_syms: Vec<Symbol>,
    /// Bytes of `.local` memory per thread.
    pub local_bytes: u32,
    /// `.maxntid` / `.reqntid` (x, y, z).
    pub maxntid: Option<[u32; 3]>,
    pub reqntid: Option<[u32; 3]>,
}
