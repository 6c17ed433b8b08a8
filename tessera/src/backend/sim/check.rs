//! What a simulated instruction reports when it goes wrong: a checker finding ([`Fault`] with
//! `check: true`, surfaced as [`crate::Error::SimCheck`]) or something the simulator does not
//! implement at run time (surfaced as [`crate::Error::Unsupported`]).

/// A finding at one instruction of one thread; the CTA and kernel are added by the launcher.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fault {
    pub line: u32,
    /// Linear thread index in the CTA (`%tid.x` for the 1-D blocks we launch).
    pub thread: u32,
    pub address: Option<u64>,
    pub message: String,
    /// True for checker findings (bugs in the kernel), false for simulator limitations.
    pub check: bool,
}

impl Fault {
    /// A checker finding.
    pub(crate) fn check(
        line: u32,
        thread: u32,
        address: Option<u64>,
        message: impl Into<String>,
    ) -> Fault {
        Fault {
            line,
            thread,
            address,
            message: message.into(),
            check: true,
        }
    }

    /// A simulator limitation.
    pub(crate) fn unsupported(line: u32, thread: u32, message: impl Into<String>) -> Fault {
        Fault {
            line,
            thread,
            address: None,
            message: message.into(),
            check: false,
        }
    }
}

/// Which checkers run. All are on by default; turning them off exists for the planted-bug
/// tests (to show the bug slips through without them) and for measuring their cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checks {
    /// Shared-memory races, reads of never-written shared memory and cp.async destinations
    /// read before their wait. (Bounds, alignment and barrier checks cannot be turned off: the
    /// simulator could not continue past them.)
    pub shared: bool,
}

impl Default for Checks {
    fn default() -> Self {
        Checks { shared: true }
    }
}
