//! The per-axis communicator cache every [`crate::RankContext`] keeps: for each list of mesh
//! axes asked for, every rank's communicator over its group along those axes, created on first
//! use. The local, NCCL and MPI contexts differ only in how they build one group's
//! communicators.

use crate::{AxisGroups, Mesh, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Communicators by axes, then by mesh rank (`None` where this process built none: an MPI
/// process holds only its own).
pub(crate) struct CommCache<C> {
    map: Mutex<HashMap<Vec<String>, Vec<Option<Arc<C>>>>>,
}

impl<C> Default for CommCache<C> {
    fn default() -> Self {
        CommCache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<C> CommCache<C> {
    /// `rank`'s communicator along `axes`. On the first request for `axes`, `build` runs once
    /// with the mesh's groups along them and returns, per mesh rank, the communicators it made
    /// (every group's, in one process; only the caller's, under MPI). The lock is held while
    /// `build` runs, so concurrent first requests build once.
    pub(crate) fn get(
        &self,
        mesh: &Mesh,
        axes: &[String],
        rank: usize,
        build: impl FnOnce(&AxisGroups) -> Result<Vec<Option<C>>>,
    ) -> Result<Arc<C>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(axes) {
            let groups = mesh.group(axes)?;
            let built = build(&groups)?;
            map.insert(
                axes.to_vec(),
                built.into_iter().map(|c| c.map(Arc::new)).collect(),
            );
        }
        map[axes]
            .get(rank)
            .and_then(Clone::clone)
            .ok_or_else(|| crate::DistError::Backend {
                backend: "comm cache",
                message: format!("no communicator built for rank {rank} along {axes:?}"),
            })
    }

    /// [`CommCache::get`] for a backend that creates one group's communicators in one call (the
    /// local threads, NCCL in one process): `make` gets a group's mesh ranks (in position
    /// order) and returns their communicators in that order.
    pub(crate) fn get_per_group(
        &self,
        mesh: &Mesh,
        axes: &[String],
        rank: usize,
        mut make: impl FnMut(&[usize]) -> Result<Vec<C>>,
    ) -> Result<Arc<C>> {
        self.get(mesh, axes, rank, |groups| {
            let mut by_rank: Vec<Option<C>> = (0..mesh.size()).map(|_| None).collect();
            for g in groups.groups() {
                for (c, &r) in make(g)?.into_iter().zip(g) {
                    by_rank[r] = Some(c);
                }
            }
            Ok(by_rank)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_once_per_axes_and_hands_each_rank_its_own() {
        let mesh = Mesh::local([("a", 2), ("b", 3)]).unwrap();
        let cache = CommCache::<(usize, Vec<usize>)>::default();
        let mut calls = 0;
        let get = |axes: &[&str], rank: usize, calls: &mut usize| {
            let axes: Vec<String> = axes.iter().map(|s| s.to_string()).collect();
            cache
                .get_per_group(&mesh, &axes, rank, |g| {
                    *calls += 1;
                    Ok(g.iter().map(|&r| (r, g.to_vec())).collect())
                })
                .unwrap()
        };
        let c = get(&["b"], 4, &mut calls);
        assert_eq!(*c, (4, vec![3, 4, 5]));
        let c = get(&["b"], 0, &mut calls);
        assert_eq!(*c, (0, vec![0, 1, 2]));
        assert_eq!(
            calls, 2,
            "one build call per group, on the first request only"
        );
        let c = get(&["a"], 5, &mut calls);
        assert_eq!(*c, (5, vec![2, 5]));
        assert_eq!(calls, 5);
    }

    #[test]
    fn a_rank_without_a_communicator_is_an_error() {
        let mesh = Mesh::local([("a", 2)]).unwrap();
        let cache = CommCache::<usize>::default();
        let e = cache
            .get(&mesh, &["a".to_string()], 1, |_| Ok(vec![Some(0), None]))
            .unwrap_err();
        assert!(e.to_string().contains("rank 1"), "{e}");
    }
}
