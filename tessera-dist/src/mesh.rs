//! Device meshes: named axes over a list of devices, their sub-groups, and the topology the cost
//! model reads.

use crate::{DistError, Result};
use tessera::Device;

/// One kind of link: latency α (seconds per message) and bandwidth (bytes per second, 1/β).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// α: seconds per message (launch + handshake).
    pub latency_s: f64,
    /// 1/β: bytes per second one rank can push over this link.
    pub bandwidth_bps: f64,
}

impl Link {
    /// Threads of one process exchanging through shared memory (α ≈ a barrier).
    pub fn shared_memory() -> Link {
        Link {
            latency_s: 5e-6,
            bandwidth_bps: 10e9,
        }
    }
    /// An NVLink-4 class fast domain (per-GPU bandwidth one way).
    pub fn nvlink() -> Link {
        Link {
            latency_s: 3e-6,
            bandwidth_bps: 450e9,
        }
    }
    /// An InfiniBand NDR class network link.
    pub fn infiniband() -> Link {
        Link {
            latency_s: 8e-6,
            bandwidth_bps: 50e9,
        }
    }
    /// β: seconds per byte.
    pub fn beta(&self) -> f64 {
        1.0 / self.bandwidth_bps
    }
}

/// Which devices share a fast domain, and the links inside and between domains.
///
/// ```
/// use tessera_dist::{Link, Topology};
/// // 8 GPUs, 4 per NVLink domain, InfiniBand between domains.
/// let t = Topology::domains(8, 4, Link::nvlink(), Link::infiniband());
/// assert!(t.same_domain(&[0, 1, 2, 3]));
/// assert!(!t.same_domain(&[3, 4]));
/// assert_eq!(t.domain_shape(&[0, 1, 4, 5]), Some((2, 2)));   // 2 domains × 2 ranks each
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    domain_of: Vec<usize>,
    /// The link between two devices of one domain.
    pub intra: Link,
    /// The link between domains.
    pub inter: Link,
    /// γ: seconds per byte to apply a reduction op (read two, write one).
    pub gamma_s_per_byte: f64,
}

impl Topology {
    /// Every device in one domain.
    pub fn single_domain(devices: usize, link: Link) -> Topology {
        Topology {
            domain_of: vec![0; devices],
            intra: link,
            inter: link,
            gamma_s_per_byte: 1.0 / 20e9,
        }
    }

    /// Consecutive devices in domains of `domain_size` (the last one may be smaller).
    pub fn domains(devices: usize, domain_size: usize, intra: Link, inter: Link) -> Topology {
        let d = domain_size.max(1);
        Topology {
            domain_of: (0..devices).map(|r| r / d).collect(),
            intra,
            inter,
            gamma_s_per_byte: 1.0 / 20e9,
        }
    }

    /// An explicit domain id per device.
    pub fn from_domains(domain_of: Vec<usize>, intra: Link, inter: Link) -> Topology {
        Topology {
            domain_of,
            intra,
            inter,
            gamma_s_per_byte: 1.0 / 20e9,
        }
    }

    /// Number of devices described.
    pub fn devices(&self) -> usize {
        self.domain_of.len()
    }

    /// The domain of a device.
    pub fn domain(&self, device: usize) -> usize {
        self.domain_of[device]
    }

    /// True when all these devices share one fast domain.
    pub fn same_domain(&self, ranks: &[usize]) -> bool {
        ranks
            .windows(2)
            .all(|w| self.domain_of[w[0]] == self.domain_of[w[1]])
    }

    /// The slowest link a flat algorithm over these ranks crosses.
    pub fn link_for(&self, ranks: &[usize]) -> Link {
        if self.same_domain(ranks) {
            self.intra
        } else {
            self.inter
        }
    }

    /// `(domains, ranks per domain)` when the group spans several domains with the same number
    /// of its ranks in each, ranks of one domain consecutive in group order; else `None`.
    pub fn domain_shape(&self, ranks: &[usize]) -> Option<(usize, usize)> {
        if ranks.is_empty() {
            return None;
        }
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &r in ranks {
            let d = self.domain_of[r];
            match runs.last_mut() {
                Some((last, n)) if *last == d => *n += 1,
                _ => runs.push((d, 1)),
            }
        }
        let m = runs[0].1;
        let distinct = {
            let mut ds: Vec<usize> = runs.iter().map(|r| r.0).collect();
            ds.sort_unstable();
            ds.dedup();
            ds.len()
        };
        (runs.iter().all(|r| r.1 == m) && distinct == runs.len()).then_some((runs.len(), m))
    }
}

/// Named axes with sizes over a list of devices.
///
/// Ranks are numbered row-major over the axes as listed: the **first axis varies slowest**, the
/// last fastest (`numpy.reshape(devices, sizes)`). Put the axis that needs the fastest links
/// last, so its groups are consecutive devices and fall inside one [`Topology`] domain.
///
/// ```
/// use tessera_dist::Mesh;
/// let mesh = Mesh::local([("tp", 2), ("pp", 2), ("dp", 2)])?;
/// assert_eq!(mesh.size(), 8);
/// assert_eq!(mesh.coords(5), vec![1, 0, 1]);              // tp=1, pp=0, dp=1
/// let tp = mesh.axis("tp")?;                             // 4 groups of 2
/// assert_eq!(tp.groups().len(), 4);
/// assert_eq!(tp.group_of(5), &[1, 5]);
/// assert_eq!(tp.position(5), 1);
/// assert!(Mesh::local([("tp", 3)]).is_ok());
/// assert!(Mesh::local([("tp", 2), ("tp", 2)]).is_err()); // names must be unique
/// # Ok::<(), tessera_dist::DistError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Mesh {
    axes: Vec<(String, usize)>,
    devices: Vec<Device>,
    topology: Topology,
}

/// The product of the axis sizes, or an error naming the axes when it overflows.
fn checked_product(axes: &[(String, usize)]) -> Result<usize> {
    axes.iter()
        .try_fold(1usize, |n, a| n.checked_mul(a.1))
        .ok_or_else(|| {
            DistError::Shape(format!("the mesh axes {axes:?} overflow the device count"))
        })
}

impl Mesh {
    /// A mesh over `devices`; the product of the axis sizes must equal the device count and the
    /// names must be unique. The topology defaults to one shared-memory domain.
    pub fn new<S: Into<String>>(
        axes: impl IntoIterator<Item = (S, usize)>,
        devices: Vec<Device>,
    ) -> Result<Mesh> {
        let axes: Vec<(String, usize)> = axes.into_iter().map(|(n, s)| (n.into(), s)).collect();
        for (i, (name, size)) in axes.iter().enumerate() {
            if axes[..i].iter().any(|(n, _)| n == name) {
                return Err(DistError::DuplicateMeshAxis(name.clone()));
            }
            if *size == 0 {
                return Err(DistError::ZeroMeshAxis(name.clone()));
            }
        }
        let product = checked_product(&axes)?;
        if product != devices.len() {
            return Err(DistError::MeshSize {
                axes,
                product,
                devices: devices.len(),
            });
        }
        let topology = Topology::single_domain(devices.len(), Link::shared_memory());
        Ok(Mesh {
            axes,
            devices,
            topology,
        })
    }

    /// A mesh of CPU devices, one per mesh position (the local backend runs a thread for each).
    pub fn local<S: Into<String>>(axes: impl IntoIterator<Item = (S, usize)>) -> Result<Mesh> {
        let axes: Vec<(String, usize)> = axes.into_iter().map(|(n, s)| (n.into(), s)).collect();
        let n = checked_product(&axes)?;
        let mut devices = Vec::new();
        devices.try_reserve_exact(n).map_err(|_| {
            DistError::Shape(format!(
                "a local mesh of {n} devices ({axes:?}) does not fit in memory"
            ))
        })?;
        devices.resize(n, Device::cpu());
        Mesh::new(axes, devices)
    }

    /// Replaces the topology (it must describe as many devices as the mesh has).
    pub fn with_topology(mut self, topology: Topology) -> Result<Mesh> {
        if topology.devices() != self.size() {
            return Err(DistError::Shape(format!(
                "topology describes {} devices, the mesh has {}",
                topology.devices(),
                self.size()
            )));
        }
        self.topology = topology;
        Ok(self)
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Number of devices.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    /// The devices, by rank.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// `(name, size)` per axis, slowest first.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    /// The axis names.
    pub fn axis_names(&self) -> Vec<String> {
        self.axes.iter().map(|a| a.0.clone()).collect()
    }

    /// Index of an axis, or an error naming it.
    pub fn axis_index(&self, name: &str) -> Result<usize> {
        self.axes
            .iter()
            .position(|a| a.0 == name)
            .ok_or_else(|| DistError::UnknownAxis {
                axis: name.to_string(),
                known: self.axis_names(),
            })
    }

    /// Size of an axis.
    pub fn axis_size(&self, name: &str) -> Result<usize> {
        Ok(self.axes[self.axis_index(name)?].1)
    }

    /// Coordinates of a rank, one per axis.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.axes.len()];
        let mut r = rank;
        for i in (0..self.axes.len()).rev() {
            c[i] = r % self.axes[i].1;
            r /= self.axes[i].1;
        }
        c
    }

    /// The rank at these coordinates.
    pub fn rank_of(&self, coords: &[usize]) -> usize {
        coords
            .iter()
            .zip(&self.axes)
            .fold(0, |r, (c, a)| r * a.1 + c)
    }

    /// The combined index of `rank` along `axes` (first axis major) and the combined size.
    pub fn index_along(&self, rank: usize, axes: &[String]) -> Result<(usize, usize)> {
        let c = self.coords(rank);
        let mut idx = 0;
        let mut n = 1;
        for a in axes {
            let i = self.axis_index(a)?;
            idx = idx * self.axes[i].1 + c[i];
            n *= self.axes[i].1;
        }
        Ok((idx, n))
    }

    /// The groups of one axis: each device's communicator group along it.
    pub fn axis(&self, name: &str) -> Result<AxisGroups> {
        self.group(&[name])
    }

    /// The groups along several axes at once (first listed axis major in the group order).
    pub fn group<S: AsRef<str>>(&self, axes: &[S]) -> Result<AxisGroups> {
        let axes: Vec<String> = axes.iter().map(|a| a.as_ref().to_string()).collect();
        let mut idx = Vec::with_capacity(axes.len());
        for a in &axes {
            let i = self.axis_index(a)?;
            if idx.contains(&i) {
                return Err(DistError::AxisUsedTwice(a.clone()));
            }
            idx.push(i);
        }
        let n = self.size();
        let gsize: usize = idx.iter().map(|&i| self.axes[i].1).product();
        let mut keys: Vec<Vec<usize>> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of = vec![0; n];
        let mut pos_of = vec![0; n];
        for r in 0..n {
            let mut c = self.coords(r);
            let pos = idx.iter().fold(0, |p, &i| p * self.axes[i].1 + c[i]);
            for &i in &idx {
                c[i] = 0;
            }
            let g = match keys.iter().position(|k| *k == c) {
                Some(g) => g,
                None => {
                    keys.push(c);
                    groups.push(vec![usize::MAX; gsize]);
                    groups.len() - 1
                }
            };
            groups[g][pos] = r;
            group_of[r] = g;
            pos_of[r] = pos;
        }
        Ok(AxisGroups {
            axes,
            groups,
            group_of,
            pos_of,
        })
    }
}

/// The sub-groups of a mesh along one or more axes: for every device, the ranks it communicates
/// with along those axes and its position among them.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisGroups {
    axes: Vec<String>,
    groups: Vec<Vec<usize>>,
    group_of: Vec<usize>,
    pos_of: Vec<usize>,
}

impl AxisGroups {
    /// The axes, major first.
    pub fn axes(&self) -> &[String] {
        &self.axes
    }
    /// All groups, each listing mesh ranks in group order.
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups
    }
    /// Ranks per group.
    pub fn group_size(&self) -> usize {
        self.groups[0].len()
    }
    /// The group that holds `rank`.
    pub fn group_of(&self, rank: usize) -> &[usize] {
        &self.groups[self.group_of[rank]]
    }
    /// Index of `rank`'s group in [`AxisGroups::groups`].
    pub fn group_index(&self, rank: usize) -> usize {
        self.group_of[rank]
    }
    /// `rank`'s position (its rank inside the group communicator).
    pub fn position(&self, rank: usize) -> usize {
        self.pos_of[rank]
    }
}
