//! A parsed PTX module: its entries (name, parameters, launch bounds, memory) ready to launch.
//!
//! [`Module::parse`] reads the whole module once: every `.entry` is parsed and decoded. A syntax
//! error (an undeclared register, a malformed operand, an unknown label) is a [`ParseError`]
//! with its line and column. An instruction the simulator does not implement does not fail the
//! parse: the entry records it ([`Entry::unsupported`]) and launching that entry is a
//! [`crate::SimError::Unsupported`] naming the instruction and its line, so `tessera-sim info`
//! can still list every entry of a module it cannot fully run.

pub(crate) mod decode;
pub(crate) mod ir;
pub(crate) mod parse;

use crate::error::ParseError;
use ir::Program;
use std::fmt;
use std::sync::Arc;

/// A parsed PTX module.
///
/// ```
/// let m = tessera_sim::Module::parse(
///     ".version 7.4\n.target sm_80\n.address_size 64\n\
///      .visible .entry k(.param .u64 p, .param .f32 s)\n{\n    ret;\n}\n",
/// )?;
/// let e = m.entries().next().unwrap();
/// assert_eq!(e.name, "k");
/// assert_eq!(e.params[1].ty, tessera_sim::ParamType::F32);
/// assert_eq!(m.target(), Some("sm_80"));
/// # Ok::<(), tessera_sim::ParseError>(())
/// ```
#[derive(Debug)]
pub struct Module {
    target: Option<String>,
    entries: Vec<Entry>,
    pub(crate) programs: Vec<Option<Arc<Program>>>,
}

/// One `.entry` of a module: what a launch needs to know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The entry's name.
    pub name: String,
    /// The `.param` list, in order.
    pub params: Vec<ParamDecl>,
    /// `.maxntid` / `.reqntid` (x, y, z), when declared.
    pub maxntid: Option<[u32; 3]>,
    /// `.reqntid` (x, y, z): the block a launch must use exactly, when declared.
    pub reqntid: Option<[u32; 3]>,
    /// Bytes of static shared memory (module-level and entry-level `.shared` declarations).
    pub static_shared_bytes: u32,
    /// Bytes of `.local` memory per thread.
    pub local_bytes: u32,
    /// The first instruction the simulator does not implement, if any: launching this entry is
    /// then an error.
    pub unsupported: Option<Unsupported>,
}

/// An instruction the simulator does not implement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// 1-based line in the module text.
    pub line: u32,
    /// The instruction as written.
    pub instruction: String,
    /// Why (which modifier, type or form is missing).
    pub reason: String,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: `{}`: {}",
            self.line, self.instruction, self.reason
        )
    }
}

/// A kernel parameter as declared: `.param .u32 n` is `ParamDecl { name: "n", ty: U32 }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    /// The parameter's name.
    pub name: String,
    /// Its type.
    pub ty: ParamType,
}

/// The type of a kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `.u8`.
    U8,
    /// `.u16`.
    U16,
    /// `.u32`.
    U32,
    /// `.u64`.
    U64,
    /// `.s8`.
    S8,
    /// `.s16`.
    S16,
    /// `.s32`.
    S32,
    /// `.s64`.
    S64,
    /// `.f16`.
    F16,
    /// `.f32`.
    F32,
    /// `.f64`.
    F64,
    /// `.b8`.
    B8,
    /// `.b16`.
    B16,
    /// `.b32`.
    B32,
    /// `.b64`.
    B64,
    /// A by-value byte array: `.param .align A .b8 name[N]` (a struct or a `CUtensorMap`).
    Bytes {
        /// The array's length in bytes (`N`).
        size: u32,
        /// Its alignment in bytes (`A`).
        align: u32,
    },
}

impl ParamType {
    /// Size in bytes.
    pub fn size(self) -> u32 {
        match self {
            ParamType::U8 | ParamType::S8 | ParamType::B8 => 1,
            ParamType::U16 | ParamType::S16 | ParamType::B16 | ParamType::F16 => 2,
            ParamType::U32 | ParamType::S32 | ParamType::B32 | ParamType::F32 => 4,
            ParamType::U64 | ParamType::S64 | ParamType::B64 | ParamType::F64 => 8,
            ParamType::Bytes { size, .. } => size,
        }
    }

    /// Alignment in the parameter block.
    pub fn align(self) -> u32 {
        match self {
            ParamType::Bytes { align, .. } => align.max(1),
            t => t.size(),
        }
    }

    pub(crate) fn parse(s: &str) -> Option<ParamType> {
        Some(match s {
            "u8" => ParamType::U8,
            "u16" => ParamType::U16,
            "u32" => ParamType::U32,
            "u64" => ParamType::U64,
            "s8" => ParamType::S8,
            "s16" => ParamType::S16,
            "s32" => ParamType::S32,
            "s64" => ParamType::S64,
            "f16" => ParamType::F16,
            "f32" => ParamType::F32,
            "f64" => ParamType::F64,
            "b8" => ParamType::B8,
            "b16" => ParamType::B16,
            "b32" => ParamType::B32,
            "b64" => ParamType::B64,
            _ => return None,
        })
    }
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ParamType::U8 => ".u8",
            ParamType::U16 => ".u16",
            ParamType::U32 => ".u32",
            ParamType::U64 => ".u64",
            ParamType::S8 => ".s8",
            ParamType::S16 => ".s16",
            ParamType::S32 => ".s32",
            ParamType::S64 => ".s64",
            ParamType::F16 => ".f16",
            ParamType::F32 => ".f32",
            ParamType::F64 => ".f64",
            ParamType::B8 => ".b8",
            ParamType::B16 => ".b16",
            ParamType::B32 => ".b32",
            ParamType::B64 => ".b64",
            ParamType::Bytes { size, align } => {
                return write!(f, ".align {align} .b8[{size}]");
            }
        };
        f.write_str(s)
    }
}

impl Module {
    /// Parses a PTX module (every entry). A syntax error is a [`ParseError`] with its line and
    /// column; an instruction the simulator does not implement is recorded in its entry
    /// ([`Entry::unsupported`]) and fails only a launch of that entry.
    pub fn parse(text: &str) -> Result<Module, ParseError> {
        let parsed = parse::parse_module(text)?;
        let mut entries = Vec::new();
        let mut programs = Vec::new();
        for e in parsed.entries {
            let (p, unsupported) = match e.program {
                Ok(p) => (Some(Arc::new(p)), None),
                Err(u) => (None, Some(u)),
            };
            entries.push(Entry {
                name: e.name,
                params: e.params,
                maxntid: e.maxntid,
                reqntid: e.reqntid,
                static_shared_bytes: e.static_smem,
                local_bytes: e.local_bytes,
                unsupported,
            });
            programs.push(p);
        }
        Ok(Module {
            target: parsed.target,
            entries,
            programs,
        })
    }

    /// The entries, in module order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The `.target` (`sm_80`, `sm_90a`, ...), when the module declares one.
    pub fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// Index of entry `name`.
    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.name == name)
    }

    pub(crate) fn entry_at(&self, i: usize) -> &Entry {
        &self.entries[i]
    }
}
