//! The runtime's error type: every user mistake is an `Err`, never a panic.

/// What went wrong in a launch or a tensor operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A symbolic dim was bound to two different sizes.
    #[error(
        "kernel `{kernel}`: dim `{dim}` is {expected} (from {bound_by}) but `{param}` has {got}"
    )]
    DimMismatch {
        /// The kernel's name.
        kernel: String,
        /// The symbolic dim, as the signature spells it (`M`, `K`, ...).
        dim: String,
        /// The argument whose size disagrees.
        param: String,
        /// The argument that bound the dim first.
        bound_by: String,
        /// The size `bound_by` gave the dim.
        expected: usize,
        /// The size `param` has along it.
        got: usize,
    },
    /// A tensor has the wrong rank or a constant dim differs.
    #[error("kernel `{kernel}`: `{param}` {message}")]
    ShapeMismatch {
        /// The kernel's name.
        kernel: String,
        /// The argument at fault.
        param: String,
        /// What is wrong with its shape, in words.
        message: String,
    },
    /// A tensor argument has the wrong element type.
    #[error("kernel `{kernel}`: `{param}` must be {expected}, got {got}")]
    DTypeMismatch {
        /// The kernel's name.
        kernel: String,
        /// The argument at fault.
        param: String,
        /// The element type the signature declares (`f32`, `bf16`, ...).
        expected: String,
        /// The element type passed.
        got: String,
    },
    /// The number of arguments differs from the kernel's signature.
    #[error("kernel `{kernel}`: expected {expected} argument(s), got {got}")]
    ArgCount {
        /// The kernel's name.
        kernel: String,
        /// Parameters of the signature.
        expected: usize,
        /// Arguments passed.
        got: usize,
    },
    /// A scalar argument (`eps: f32`) outside what the kernel accepts for it (see
    /// [`tessera_ir::scalar::ScalarRule`]).
    #[error("kernel `{kernel}`: scalar `{param}` {message}")]
    ScalarArg {
        /// The kernel's name.
        kernel: String,
        /// The scalar parameter at fault (`eps`).
        param: String,
        /// What its value breaks, in words (`is -1 but must be finite and > 0`).
        message: String,
    },
    /// `Tensor::from_vec` with a buffer whose length differs from the shape's element count.
    #[error("shape {shape:?} needs {expected} elements, the buffer has {got}")]
    BufferLength {
        /// The shape asked for.
        shape: Vec<usize>,
        /// Its element count.
        expected: usize,
        /// The buffer's length, in elements.
        got: usize,
    },
    /// A shape whose element count or byte size does not fit in memory (the product overflows,
    /// or exceeds the largest possible allocation).
    #[error("{what}: shape {shape:?} is too large: {reason}")]
    TooLarge {
        /// The tensor: the constructor, or the kernel and the value it computes.
        what: String,
        /// The shape asked for.
        shape: Vec<usize>,
        /// Why it does not fit: the overflowing product or the byte size.
        reason: String,
    },
    /// An allocation the system refused (host memory, or a device's).
    #[error("out of memory: allocating {bytes} bytes failed")]
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
    },
    /// A tensor view ([`crate::TensorRef`], [`crate::TensorMut`]) whose shape does not match its
    /// bytes.
    #[error("a {dtype} view of shape {shape:?} needs {expected} bytes, the buffer has {got}")]
    ViewLength {
        /// The view's shape.
        shape: Vec<usize>,
        /// The view's element type.
        dtype: String,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes the buffer has.
        got: usize,
    },
    /// An element index outside a tensor's shape, or of the wrong rank.
    #[error("index {index:?} is out of bounds for shape {shape:?}")]
    IndexOutOfBounds {
        /// The index asked for, outermost first.
        index: Vec<usize>,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// A kernel definition failed to compile at run time (a bug: the macro checked it).
    #[error("kernel `{kernel}` failed to compile: {message}")]
    Compile {
        /// The kernel's name.
        kernel: String,
        /// The compiler's message.
        message: String,
    },
    /// The device cannot run this kernel or feature.
    #[error("{device}: {message}")]
    Unsupported {
        /// The device's name (`cpu`, `sim:sm_80`, `cuda:0`).
        device: String,
        /// What it cannot do, in words.
        message: String,
    },
    /// The PTX simulator caught a bug in a kernel: an out-of-bounds or misaligned access, a
    /// shared-memory race, a read of uninitialized shared memory, a barrier not reached by all
    /// threads, a `cp.async` destination used before its wait, ...
    #[error(
        "kernel `{kernel}`, PTX line {line}, CTA ({}, {}, {}), thread {thread}{}: {message}{}",
        .cta[0], .cta[1], .cta[2], .location.as_ref().map(|l| format!(", at {l}")).unwrap_or_default(),
        if *.findings > 1 { format!(" ({} findings in all)", .findings) } else { String::new() }
    )]
    SimCheck {
        /// The PTX entry's name.
        kernel: String,
        /// 1-based line in the PTX text.
        line: u32,
        /// The `(x, y, z)` index of the CTA where the finding was made.
        cta: [u32; 3],
        /// Linear thread index in the CTA.
        thread: u32,
        /// The buffer (named after its kernel parameter) or shared symbol and the byte offset
        /// inside it, for memory findings.
        location: Option<String>,
        /// What the checker found, in words.
        message: String,
        /// Findings of the launch in all (this is the first).
        findings: u64,
    },
    /// Arguments of one launch live on different devices.
    #[error("kernel `{kernel}`: `{param}` is on {got} but the launch runs on {expected}")]
    DeviceMismatch {
        /// The kernel's name.
        kernel: String,
        /// The argument on another device.
        param: String,
        /// The launch's device (its first argument's).
        expected: String,
        /// The argument's device.
        got: String,
    },
    /// An accessor that needs host memory was called on a tensor in device memory.
    #[error(
        "`{what}` needs the tensor in host memory, but it is on {device}; copy it back with `.to_vec()` or `.to(&Device::cpu())`"
    )]
    NotOnHost {
        /// The accessor.
        what: String,
        /// Where the tensor is.
        device: String,
    },
    /// A setting was given a value it cannot take (say a loss scale of zero).
    #[error("`{setting}` {message}")]
    InvalidSetting {
        /// The setting: an environment variable, a knob or an option's name.
        setting: String,
        /// Why the value is refused, in words.
        message: String,
    },
    /// A device could not be opened.
    #[error("device unavailable: {0}")]
    DeviceUnavailable(String),
    /// Refining a borrowed schedule ([`crate::autotune::refine`]) failed for one launch.
    #[error("autotune: refining `{key}`: {source}")]
    Refine {
        /// The launch: kernel, argument shapes and dtypes.
        key: String,
        /// The error of the refining launch.
        source: Box<Error>,
    },
    /// A `TESSERA_*` environment variable has a value it does not accept.
    #[error("{0}")]
    Env(#[from] tessera_ir::env::EnvError),
    /// The autotune cache could not be read or written ([`crate::autotune::CacheError`]).
    #[error("{message}")]
    Cache {
        /// The file at fault.
        path: std::path::PathBuf,
        /// The cache error, in words (it names the path).
        message: String,
    },
}

impl From<crate::autotune::CacheError> for Error {
    fn from(e: crate::autotune::CacheError) -> Self {
        Error::Cache {
            path: e.path().to_path_buf(),
            message: e.to_string(),
        }
    }
}

/// Result alias used throughout the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;
