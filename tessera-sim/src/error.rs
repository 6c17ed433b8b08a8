//! Errors: what is not a bug of the kernel being simulated. Kernel bugs are
//! [`crate::Finding`]s in the launch's [`crate::Report`].

use crate::memory::DevicePtr;
use crate::module::{ParamType, Unsupported};

/// A syntax error in PTX text, at a 1-based line and column.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What the parser expected or found.
    pub message: String,
}

/// Everything that stops the simulator from running a launch or a memory operation.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The PTX text does not parse.
    #[error("PTX parse error: {0}")]
    Parse(#[from] ParseError),
    /// The entry uses an instruction (or a form of one) the simulator does not implement.
    #[error("entry `{entry}`: unsupported instruction at {unsupported}")]
    Unsupported {
        /// The entry's name.
        entry: String,
        /// The instruction and its line.
        unsupported: Unsupported,
    },
    /// No entry of that name in the module.
    #[error("no entry `{name}` in the module (entries: {})", .available.join(", "))]
    NoEntry {
        /// The name asked for.
        name: String,
        /// The module's entries.
        available: Vec<String>,
    },
    /// A launch configuration a GPU would refuse: too many threads per block, a zero or too
    /// large grid dimension, more shared memory than the architecture allows, a block size
    /// that breaks `.maxntid` / `.reqntid`.
    #[error("entry `{entry}`: invalid launch configuration: {message}")]
    LaunchConfig {
        /// The entry's name.
        entry: String,
        /// What a GPU would refuse, in words.
        message: String,
    },
    /// The number of parameters differs from the entry's `.param` list.
    #[error("entry `{entry}` takes {expected} parameter(s), got {got}")]
    ParamCount {
        /// The entry's name.
        entry: String,
        /// Parameters the entry declares.
        expected: usize,
        /// Parameters given.
        got: usize,
    },
    /// A parameter's value does not match its declared type.
    #[error("entry `{entry}`: parameter {index} `{param}` is declared {expected} but got {got}")]
    ParamMismatch {
        /// The entry's name.
        entry: String,
        /// The parameter's 0-based index.
        index: usize,
        /// The parameter's name.
        param: String,
        /// Its declared type.
        expected: ParamType,
        /// The value given, in words.
        got: String,
    },
    /// An allocation the simulated device cannot make (too large for the host's memory).
    #[error("cannot allocate {bytes} bytes: {message}")]
    Alloc {
        /// The size asked for.
        bytes: usize,
        /// Why it failed.
        message: String,
    },
    /// A pointer that is not (or no longer) a live allocation, or a range that leaves it.
    #[error("{message} (pointer {ptr})")]
    BadPointer {
        /// The pointer.
        ptr: DevicePtr,
        /// What is wrong with it.
        message: String,
    },
}
