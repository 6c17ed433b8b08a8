//! `ShardSpec`: how a tensor's dims map onto mesh axes, and the uneven-split rule.

use crate::{DistError, Mesh, ReduceOp, Result};
use std::fmt;
use std::ops::Range;

/// One tensor dim's placement: whole on every device, or split over mesh axes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DimSpec {
    /// Every device holds the whole dim.
    Replicated,
    /// Split over these mesh axes, the first major: the shard index is the devices' combined
    /// coordinate along them, as in [`Mesh::index_along`].
    Sharded(Vec<String>),
}

/// `Shard(["tp"])`: split a dim over mesh axes (several axes: the first is major).
#[allow(non_snake_case)]
pub fn Shard<S: AsRef<str>>(axes: impl IntoIterator<Item = S>) -> DimSpec {
    let axes: Vec<String> = axes.into_iter().map(|a| a.as_ref().to_string()).collect();
    if axes.is_empty() {
        DimSpec::Replicated
    } else {
        DimSpec::Sharded(axes)
    }
}

/// `Replicate`: the dim is whole on every device.
#[allow(non_upper_case_globals)]
pub const Replicate: DimSpec = DimSpec::Replicated;

/// The rows of a dim of `size` that shard `index` of `parts` holds.
///
/// **The uneven-split rule** (the only one Tessera uses): chunks are `ceil(size / parts)` long
/// and assigned in order, so leading shards are full and trailing shards are smaller or empty.
/// Collectives pad every shard to the full chunk length on the wire and trim it on arrival.
///
/// ```
/// use tessera_dist::chunk_range;
/// // 5 rows on 4 devices: chunk 2 → 2, 2, 1, 0 rows.
/// let r: Vec<_> = (0..4).map(|i| chunk_range(5, 4, i)).collect();
/// assert_eq!(r, vec![0..2, 2..4, 4..5, 5..5]);
/// // 1 row on 8 devices: the first holds it, seven are empty.
/// assert_eq!(chunk_range(1, 8, 0), 0..1);
/// assert_eq!(chunk_range(1, 8, 7), 1..1);
/// // A 0-size dim: every shard empty.
/// assert_eq!(chunk_range(0, 3, 1), 0..0);
/// ```
pub fn chunk_range(size: usize, parts: usize, index: usize) -> Range<usize> {
    let c = chunk_len(size, parts);
    // Saturating: a shard index past the end is an empty range at `size`, never an overflow.
    let at = |i: usize| i.saturating_mul(c).min(size);
    at(index)..at(index.saturating_add(1))
}

/// `ceil(size / parts)`: the padded length of every shard of a dim.
pub fn chunk_len(size: usize, parts: usize) -> usize {
    size.div_ceil(parts.max(1))
}

/// The role one mesh axis plays for a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisRole {
    /// The tensor is the same on every device along the axis.
    Replicated,
    /// The axis splits tensor dim `dim`, at position `pos` in that dim's axis list.
    Shard {
        /// The tensor dim.
        dim: usize,
        /// The axis's position in that dim's axis list (0: the major one).
        pos: usize,
    },
    /// Devices along the axis hold unreduced contributions.
    Partial(ReduceOp),
}

/// A tensor's placement on a mesh: for each dim the mesh axes it is split over (or replicated),
/// plus an optional **partial** state — mesh axes along which devices hold unreduced
/// contributions (`Partial(op)`: the true value is `op` over them).
///
/// This is the seeds' `ShardSpec(partition=("row","col"), mesh_axes=("tp","pp"))`:
///
/// ```
/// use tessera_dist::{Mesh, ReduceOp, Replicate, Shard, ShardSpec};
/// let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
/// let spec = ShardSpec::new([Shard(["tp"]), Shard(["pp"])]);
/// spec.validate(&mesh, 2)?;
/// assert_eq!(spec.local_shape(&[5, 4], &mesh, 0)?, vec![3, 2]);   // ceil(5/2) rows, 4/2 cols
/// assert_eq!(spec.local_shape(&[5, 4], &mesh, 7)?, vec![2, 2]);   // the trailing tp shard
///
/// // Unreduced partial sums along dp (e.g. after a row-parallel matmul):
/// let p = ShardSpec::new([Shard(["tp"]), Replicate]).partial(["dp"], ReduceOp::Sum);
/// p.validate(&mesh, 2)?;
///
/// // Bad specs are errors that name the problem.
/// let e = ShardSpec::new([Shard(["xx"])]).validate(&mesh, 2).unwrap_err();
/// assert!(e.to_string().contains("unknown mesh axis `xx`"));
/// let e = ShardSpec::new([Shard(["tp"]), Shard(["tp"])]).validate(&mesh, 2).unwrap_err();
/// assert!(e.to_string().contains("`tp` is used twice"));
/// let e = ShardSpec::new([Replicate, Replicate, Replicate]).validate(&mesh, 2).unwrap_err();
/// assert!(e.to_string().contains("3 dim entries but the tensor has rank 2"));
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
///
/// Entries past the last given one are [`Replicate`]. Uneven dims follow [`chunk_range`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ShardSpec {
    dims: Vec<DimSpec>,
    partial: Option<(Vec<String>, ReduceOp)>,
}

impl ShardSpec {
    /// One entry per leading tensor dim.
    pub fn new(dims: impl IntoIterator<Item = DimSpec>) -> ShardSpec {
        ShardSpec {
            dims: dims.into_iter().collect(),
            partial: None,
        }
    }

    /// Whole and identical on every device.
    pub fn replicated() -> ShardSpec {
        ShardSpec::default()
    }

    /// Marks devices along `axes` as holding unreduced contributions combined by `op`.
    pub fn partial<S: AsRef<str>>(
        mut self,
        axes: impl IntoIterator<Item = S>,
        op: ReduceOp,
    ) -> ShardSpec {
        let axes: Vec<String> = axes.into_iter().map(|a| a.as_ref().to_string()).collect();
        self.partial = if axes.is_empty() {
            None
        } else {
            Some((axes, op))
        };
        self
    }

    /// The same placement with the partial state dropped.
    pub fn without_partial(&self) -> ShardSpec {
        ShardSpec {
            dims: self.dims.clone(),
            partial: None,
        }
    }

    /// The dim entries as given.
    pub fn entries(&self) -> &[DimSpec] {
        &self.dims
    }

    /// The mesh axes dim `d` is split over (empty when replicated).
    pub fn dim_axes(&self, d: usize) -> &[String] {
        match self.dims.get(d) {
            Some(DimSpec::Sharded(a)) => a,
            _ => &[],
        }
    }

    /// The partial axes and op, if any.
    pub fn partial_state(&self) -> Option<(&[String], ReduceOp)> {
        self.partial.as_ref().map(|(a, op)| (a.as_slice(), *op))
    }

    /// True when some axis holds unreduced contributions.
    pub fn is_partial(&self) -> bool {
        self.partial.is_some()
    }

    /// An error naming the problem when this spec holds partial values but `context` needs
    /// whole ones.
    pub fn require_whole(&self, context: &str) -> Result<()> {
        match &self.partial {
            Some((axes, op)) => Err(DistError::PartialNotAllowed(format!(
                "{context} needs whole values but the spec is Partial({op}) over {axes:?}"
            ))),
            None => Ok(()),
        }
    }

    /// Checks the spec against a mesh and a tensor rank.
    pub fn validate(&self, mesh: &Mesh, rank: usize) -> Result<()> {
        if self.dims.len() > rank {
            return Err(DistError::TooManyEntries {
                entries: self.dims.len(),
                rank,
            });
        }
        let mut seen: Vec<&str> = Vec::new();
        let partial = self.partial.as_ref().map(|p| p.0.as_slice()).unwrap_or(&[]);
        for a in self
            .dims
            .iter()
            .flat_map(|d| match d {
                DimSpec::Sharded(a) => a.as_slice(),
                DimSpec::Replicated => &[],
            })
            .chain(partial)
        {
            mesh.axis_index(a)?;
            if seen.contains(&a.as_str()) {
                return Err(DistError::AxisUsedTwice(a.clone()));
            }
            seen.push(a);
        }
        Ok(())
    }

    /// The same placement written with exactly one entry per dim (`rank` entries) and the
    /// partial axes in mesh order, so two specs that place a tensor alike compare equal.
    ///
    /// ```
    /// use tessera_dist::{Mesh, ReduceOp, Replicate, Shard, ShardSpec};
    /// let mesh = Mesh::local([("a", 2), ("b", 2)])?;
    /// let x = ShardSpec::new([Shard(["a"])]).partial(["b"], ReduceOp::Sum);
    /// let y = ShardSpec::new([Shard(["a"]), Replicate]).partial(["b"], ReduceOp::Sum);
    /// assert_ne!(x, y);
    /// assert_eq!(x.normalized(&mesh, 2), y.normalized(&mesh, 2));
    /// # Ok::<(), tessera_dist::DistError>(())
    /// ```
    pub fn normalized(&self, mesh: &Mesh, rank: usize) -> ShardSpec {
        let dims = (0..rank).map(|d| Shard(self.dim_axes(d)));
        match self.partial_state() {
            Some((axes, op)) => {
                let mut a = axes.to_vec();
                a.sort_by_key(|x| mesh.axis_index(x).unwrap_or(usize::MAX));
                ShardSpec::new(dims).partial(a, op)
            }
            None => ShardSpec::new(dims),
        }
    }

    /// The role `axis` plays.
    pub fn role(&self, axis: &str) -> AxisRole {
        for (d, spec) in self.dims.iter().enumerate() {
            if let DimSpec::Sharded(a) = spec
                && let Some(pos) = a.iter().position(|x| x == axis)
            {
                return AxisRole::Shard { dim: d, pos };
            }
        }
        match &self.partial {
            Some((a, op)) if a.iter().any(|x| x == axis) => AxisRole::Partial(*op),
            _ => AxisRole::Replicated,
        }
    }

    /// The global index ranges device `rank` holds, one per dim.
    pub fn local_ranges(
        &self,
        global: &[usize],
        mesh: &Mesh,
        rank: usize,
    ) -> Result<Vec<Range<usize>>> {
        self.validate(mesh, global.len())?;
        global
            .iter()
            .enumerate()
            .map(|(d, &size)| {
                let (idx, n) = mesh.index_along(rank, self.dim_axes(d))?;
                Ok(chunk_range(size, n, idx))
            })
            .collect()
    }

    /// The shape of device `rank`'s shard.
    pub fn local_shape(&self, global: &[usize], mesh: &Mesh, rank: usize) -> Result<Vec<usize>> {
        Ok(self
            .local_ranges(global, mesh, rank)?
            .iter()
            .map(|r| r.len())
            .collect())
    }
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match d {
                DimSpec::Replicated => f.write_str("R")?,
                DimSpec::Sharded(a) => write!(f, "S({})", a.join(","))?,
            }
        }
        f.write_str("]")?;
        if let Some((a, op)) = &self.partial {
            write!(f, " Partial({op}: {})", a.join(","))?;
        }
        Ok(())
    }
}
