//! The one error type of `tessera-dist`.

/// Everything that can go wrong in meshes, specs, plans and collectives.
///
/// Spec errors name the problem (the axis, the entry count, the partial state) so a user can fix
/// the spec without reading this crate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DistError {
    /// A mesh whose axis sizes do not multiply to the device count.
    #[error("mesh axes {axes:?} hold {product} devices but {devices} were given")]
    MeshSize {
        /// The axes as given: name and size.
        axes: Vec<(String, usize)>,
        /// The product of the sizes.
        product: usize,
        /// The number of devices given.
        devices: usize,
    },
    /// Two mesh axes with one name.
    #[error("mesh axis `{0}` is declared twice")]
    DuplicateMeshAxis(String),
    /// A mesh axis of size zero.
    #[error("mesh axis `{0}` has size 0")]
    ZeroMeshAxis(String),
    /// A spec or a group names an axis the mesh does not have.
    #[error("unknown mesh axis `{axis}` (the mesh has {known:?})")]
    UnknownAxis {
        /// The name asked for.
        axis: String,
        /// The mesh's axis names.
        known: Vec<String>,
    },
    /// A spec uses one mesh axis for two purposes (two dims, or a dim and the partial state).
    #[error("mesh axis `{0}` is used twice in one ShardSpec")]
    AxisUsedTwice(String),
    /// More dim entries than the tensor has dims.
    #[error("ShardSpec has {entries} dim entries but the tensor has rank {rank}")]
    TooManyEntries {
        /// Dim entries of the spec.
        entries: usize,
        /// The tensor's rank.
        rank: usize,
    },
    /// A partial (unreduced) value where a whole one is required.
    #[error("partial value where a whole one is required: {0}")]
    PartialNotAllowed(String),
    /// Partial axes with different reduction ops.
    #[error("a ShardSpec has one partial op; got {0}")]
    MixedPartialOps(String),
    /// Buffers of the wrong length for a collective, or ranks that disagree on a length.
    #[error("buffer length: {0}")]
    Length(String),
    /// A rank index outside a group.
    #[error("rank {rank} is outside a group of {size}")]
    BadRank {
        /// The rank asked for.
        rank: usize,
        /// The group's size.
        size: usize,
    },
    /// Replicas that should be bit-identical are not.
    #[error("replicas differ: {0}")]
    ReplicaMismatch(String),
    /// A shape that does not fit.
    #[error("shape: {0}")]
    Shape(String),
    /// The backend cannot do this (dtype, op or algorithm).
    #[error("unsupported by the {backend} backend: {what}")]
    Unsupported {
        /// The backend or layer (`local`, `mpi`, `nccl`, `spmd`, ...).
        backend: &'static str,
        /// What it cannot do, in words.
        what: String,
    },
    /// No GPU / driver / NCCL library on this machine.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A backend call failed (MPI, NCCL, a peer thread that panicked).
    #[error("{backend} backend: {message}")]
    Backend {
        /// The backend or layer (`local`, `mpi`, `nccl`, `spmd`, ...).
        backend: &'static str,
        /// The failure, in words.
        message: String,
    },
    /// A kernel uses an op the SPMD launch has no sharding rule for.
    #[error(
        "kernel `{kernel}`: op `{op}` has no sharding rule (tessera-dist/src/spmd/rules.rs), so it cannot run over a mesh"
    )]
    NoShardingRule {
        /// The op's name in Graph IR.
        op: String,
        /// The kernel's name.
        kernel: String,
    },
    /// An SPMD launch whose arguments do not fit the kernel.
    #[error("SPMD launch of `{kernel}`: {message}")]
    Launch {
        /// The kernel's name.
        kernel: String,
        /// What does not fit, in words.
        message: String,
    },
    /// An error from a tessera kernel or tensor.
    #[error(transparent)]
    Tensor(#[from] tessera::Error),
    /// Building a prefix or suffix kernel of a partial-statistics launch failed: one of its
    /// nodes broke a Graph IR typing rule.
    #[error("building a partial-statistics kernel: {0}")]
    Graph(#[from] tessera::ir::graph::TypeError),
}

/// `Result` with [`DistError`].
pub type Result<T, E = DistError> = std::result::Result<T, E>;
