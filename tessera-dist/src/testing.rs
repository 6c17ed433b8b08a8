//! nccl-tests-style collective checks, generic over the backend, shared by the local test suite
//! and the MPI suite (`examples/mpi_suite.rs` under `mpirun`). Not a stable API.
//!
//! Inputs are small integers stored as floats, so every sum is exact whatever the order and
//! each result is compared bit for bit with an independently computed expectation on every rank.

use crate::{Algorithm, CommElem, Communicator, DistError, ReduceOp, Result};

/// Rank `r`'s element `i`: an integer in −8..=8, distinct per rank and position.
pub fn input<T: CommElem>(r: usize, i: usize) -> T {
    T::from_f64_round((((r * 7 + i * 3 + r * i) % 17) as i64 - 8) as f64)
}

fn expect_reduce<T: CommElem>(n: usize, i: usize, op: ReduceOp) -> T {
    let vals = (0..n).map(|r| (((r * 7 + i * 3 + r * i) % 17) as i64 - 8) as f64);
    let v = match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
    };
    T::from_f64_round(v)
}

fn same<T: CommElem>(got: &[T], want: &[T], what: &str, rank: usize) -> Result<()> {
    if bytemuck::cast_slice::<T, u8>(got) == bytemuck::cast_slice::<T, u8>(want) {
        return Ok(());
    }
    let i = (0..got.len().min(want.len()))
        .find(|&i| got[i].to_f64() != want[i].to_f64())
        .unwrap_or(0);
    Err(DistError::Backend {
        backend: "check",
        message: format!(
            "{what}: rank {rank} differs at {i} of {}: got {:?}, want {:?}",
            got.len(),
            got.get(i),
            want.get(i)
        ),
    })
}

/// Runs every collective at every size in `sizes` (elements per rank, or per block) and
/// returns how many checks passed; the first mismatch is an error.
pub fn check_all<T: CommElem, C: Communicator>(
    c: &C,
    sizes: &[usize],
    algos: &[Algorithm],
    ops: &[ReduceOp],
) -> Result<usize> {
    let (n, r) = (c.size(), c.rank());
    let mut passed = 0;
    let own = |len: usize| (0..len).map(|i| input::<T>(r, i)).collect::<Vec<T>>();
    for &len in sizes {
        for &op in ops {
            let want: Vec<T> = (0..len).map(|i| expect_reduce(n, i, op)).collect();
            for &algo in algos {
                let mut x = own(len);
                c.all_reduce(&mut x, op, algo)?;
                same(
                    &x,
                    &want,
                    &format!("all_reduce in-place {op} {algo} len {len}"),
                    r,
                )?;
                let mut y = vec![T::default(); len];
                c.all_reduce_into(&own(len), &mut y, op, algo)?;
                same(
                    &y,
                    &want,
                    &format!("all_reduce out-of-place {op} {algo} len {len}"),
                    r,
                )?;
                passed += 2;
            }
            // reduce-scatter: block `len`, rank r keeps block r of the reduced n·len buffer.
            let full = own(n * len);
            let want_blk: Vec<T> = (r * len..(r + 1) * len)
                .map(|i| expect_reduce(n, i, op))
                .collect();
            let mut out = vec![T::default(); len];
            c.reduce_scatter(&full, &mut out, op)?;
            same(
                &out,
                &want_blk,
                &format!("reduce_scatter out-of-place {op} len {len}"),
                r,
            )?;
            let mut inplace = full.clone();
            c.reduce_scatter_in_place(&mut inplace, op)?;
            same(
                &inplace[r * len..(r + 1) * len],
                &want_blk,
                &format!("reduce_scatter in-place {op} len {len}"),
                r,
            )?;
            let p = c.start_reduce_scatter(full, op).wait()?;
            same(
                &p,
                &want_blk,
                &format!("reduce_scatter non-blocking {op} len {len}"),
                r,
            )?;
            let p = c.start_all_reduce(own(len), op, algos[0]);
            same(
                &p.wait()?,
                &want,
                &format!("all_reduce non-blocking {op} len {len}"),
                r,
            )?;
            passed += 4;
        }
        // all-gather: block j of the result is rank j's input.
        let want: Vec<T> = (0..n)
            .flat_map(|j| (0..len).map(move |i| input::<T>(j, i)))
            .collect();
        let mut out = vec![T::default(); n * len];
        c.all_gather(&own(len), &mut out)?;
        same(
            &out,
            &want,
            &format!("all_gather out-of-place len {len}"),
            r,
        )?;
        let mut inplace = vec![T::default(); n * len];
        inplace[r * len..(r + 1) * len].copy_from_slice(&own(len));
        c.all_gather_in_place(&mut inplace)?;
        same(
            &inplace,
            &want,
            &format!("all_gather in-place len {len}"),
            r,
        )?;
        same(
            &c.start_all_gather(own(len)).wait()?,
            &want,
            &format!("all_gather non-blocking len {len}"),
            r,
        )?;
        passed += 3;
        // broadcast from the first and the last rank.
        for root in [0, n - 1] {
            let mut x = if r == root {
                own(len)
            } else {
                vec![T::default(); len]
            };
            c.broadcast(&mut x, root)?;
            let want: Vec<T> = (0..len).map(|i| input::<T>(root, i)).collect();
            same(&x, &want, &format!("broadcast root {root} len {len}"), r)?;
            let x = if r == root {
                own(len)
            } else {
                vec![T::default(); len]
            };
            same(
                &c.start_broadcast(x, root).wait()?,
                &want,
                &format!("broadcast non-blocking root {root} len {len}"),
                r,
            )?;
            passed += 2;
        }
        // all-to-all: rank r sends block j = its elements j·len.. to rank j.
        let send = own(n * len);
        let want: Vec<T> = (0..n)
            .flat_map(|j| (r * len..(r + 1) * len).map(move |i| input::<T>(j, i)))
            .collect();
        let mut recv = vec![T::default(); n * len];
        c.all_to_all(&send, &mut recv)?;
        same(&recv, &want, &format!("all_to_all len {len}"), r)?;
        same(
            &c.start_all_to_all(send).wait()?,
            &want,
            &format!("all_to_all non-blocking len {len}"),
            r,
        )?;
        passed += 2;
        // send/recv around the ring (even ranks send first so blocking backends never deadlock).
        if n > 1 {
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut got = vec![T::default(); len];
            if r % 2 == 0 {
                c.send(&own(len), next)?;
                c.recv(&mut got, prev)?;
            } else {
                c.recv(&mut got, prev)?;
                c.send(&own(len), next)?;
            }
            let want: Vec<T> = (0..len).map(|i| input::<T>(prev, i)).collect();
            same(&got, &want, &format!("send/recv len {len}"), r)?;
            // The lane runs ops in issue order, so alternate the order by parity here too.
            let (s, g) = if r % 2 == 0 {
                let s = c.start_send(own(len), next);
                (s, c.start_recv::<T>(len, prev))
            } else {
                let g = c.start_recv::<T>(len, prev);
                (c.start_send(own(len), next), g)
            };
            s.wait()?;
            same(
                &g.wait()?,
                &want,
                &format!("send/recv non-blocking len {len}"),
                r,
            )?;
            passed += 2;
        }
    }
    c.barrier()?;
    Ok(passed)
}
