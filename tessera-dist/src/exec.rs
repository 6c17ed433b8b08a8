//! Running a redistribution plan on one rank's shard (SPMD: every rank of the mesh runs the same
//! plan). Each step works from the global index ranges the specs before and after it give every
//! device, so uneven splits need no special case: shards are padded to the specs' chunk length
//! on the wire (the bytes the cost model charges) and trimmed on arrival.

use crate::layout::{copy_region, slice};
use crate::{CommElem, Communicator, Mesh, Pending, Plan, PlannedStep, RankContext, Result, Step};
use std::ops::Range;
use tessera::Tensor;

/// Runs `plan` on one rank's shard (SPMD: every rank of the mesh calls it).
pub fn execute_plan<T: CommElem, X: RankContext>(
    ctx: &X,
    plan: &Plan,
    local: Tensor<T>,
) -> Result<Tensor<T>> {
    let mut shape = local.shape().to_vec();
    let mut data = crate::host::to_vec(&local)?;
    for ps in &plan.steps {
        let comm = match ps.step.kind() {
            Some(_) => Some(ctx.comm(ps.step.axes())?),
            None => None,
        };
        (data, shape) = run_step(
            ctx.mesh(),
            ctx.rank(),
            comm.as_deref(),
            &plan.shape,
            ps,
            data,
            shape,
        )?;
    }
    crate::host::tensor(data, &shape)
}

/// The mesh axes of the one group every collective of `plan` runs over: `Some(vec![])` when it
/// has no collective, `None` when its collectives run over several groups.
pub(crate) fn single_group(plan: &Plan) -> Option<Vec<String>> {
    let mut axes: Option<&[String]> = None;
    for ps in plan.steps.iter().filter(|s| s.step.kind().is_some()) {
        match axes {
            Some(a) if a != ps.step.axes() => return None,
            _ => axes = Some(ps.step.axes()),
        }
    }
    Some(axes.map(<[String]>::to_vec).unwrap_or_default())
}

/// Starts `plan` on one rank's shard without waiting for it: the steps run on the async lane
/// of the plan's group ([`Communicator::lane`]), in issue order with the rank's other
/// non-blocking operations, and the returned [`Pending`] yields the result (a host tensor)
/// mapped by `wrap`. A plan without collectives runs at once; one whose collectives span several
/// groups is an error ([`crate::Plan`]s of one group are what can be started).
pub(crate) fn start_plan<T: CommElem, X: RankContext, R: Send + 'static>(
    ctx: &X,
    plan: &Plan,
    local: Tensor<T>,
    wrap: fn(Tensor<T>) -> R,
) -> Result<Pending<R>> {
    let axes = single_group(plan).ok_or_else(|| crate::DistError::Unsupported {
        backend: X::Comm::BACKEND,
        what: format!("starting a plan over several groups without waiting:\n{plan}"),
    })?;
    if axes.is_empty() {
        return Ok(Pending::ready(execute_plan(ctx, plan, local).map(wrap)));
    }
    let comm = ctx.comm(&axes)?;
    let (mesh, me, plan) = (ctx.mesh().clone(), ctx.rank(), plan.clone());
    let shape = local.shape().to_vec();
    let data = crate::host::to_vec(&local)?;
    Ok(comm.lane().submit(move |c| {
        let (mut data, mut shape) = (data, shape);
        for ps in &plan.steps {
            let comm = ps.step.kind().map(|_| c);
            (data, shape) = run_step(&mesh, me, comm, &plan.shape, ps, data, shape)?;
        }
        crate::host::tensor(data, &shape).map(wrap)
    }))
}

fn ranges(
    mesh: &Mesh,
    shape: &[usize],
    spec: &crate::ShardSpec,
    r: usize,
) -> Result<Vec<Range<usize>>> {
    spec.local_ranges(shape, mesh, r)
}

fn zeros(n: usize) -> Vec<usize> {
    vec![0; n]
}

/// One step on rank `me`'s shard; `comm` is the rank's communicator of the step's group (`None`
/// for a slice).
fn run_step<T: CommElem, C: Communicator>(
    mesh: &Mesh,
    me: usize,
    comm: Option<&C>,
    gshape: &[usize],
    ps: &PlannedStep,
    data: Vec<T>,
    shape: Vec<usize>,
) -> Result<(Vec<T>, Vec<usize>)> {
    let comm = || {
        comm.ok_or_else(|| crate::DistError::Backend {
            backend: C::BACKEND,
            message: format!("no communicator for step {}", ps.step),
        })
    };
    let rank = gshape.len();
    let before = ranges(mesh, gshape, &ps.from, me)?;
    let after = ranges(mesh, gshape, &ps.to, me)?;
    let pad_from = crate::plan::padded_extents(mesh, gshape, &ps.from)?;
    let pad_to = crate::plan::padded_extents(mesh, gshape, &ps.to)?;
    let ext = |r: &[Range<usize>]| r.iter().map(|x| x.len()).collect::<Vec<usize>>();
    match &ps.step {
        Step::Slice { .. } => {
            let rel: Vec<Range<usize>> = after
                .iter()
                .zip(&before)
                .map(|(a, b)| {
                    if a.is_empty() {
                        0..0
                    } else {
                        a.start - b.start..a.end - b.start
                    }
                })
                .collect();
            Ok((slice(&data, &shape, &rel), ext(&after)))
        }
        Step::AllReduce { op, algo, .. } => {
            let mut data = data;
            comm()?.all_reduce(&mut data, *op, *algo)?;
            Ok((data, shape))
        }
        Step::ReduceScatter { axes, op, dim } => {
            let d = *dim;
            let comm = comm()?;
            let members = mesh.group(axes)?.group_of(me).to_vec();
            let mut bshape = shape.clone();
            bshape[d] = pad_to[d];
            let bsize: usize = bshape.iter().product();
            let mut send = vec![op.identity::<T>(); bsize * members.len()];
            for (j, &m) in members.iter().enumerate() {
                let r = &ranges(mesh, gshape, &ps.to, m)?[d];
                let mut extent = shape.clone();
                extent[d] = r.len();
                let mut soff = zeros(rank);
                soff[d] = r.start.saturating_sub(before[d].start);
                copy_region(
                    &data,
                    &shape,
                    &soff,
                    &mut send[j * bsize..(j + 1) * bsize],
                    &bshape,
                    &zeros(rank),
                    &extent,
                );
            }
            let mut recv = vec![T::default(); bsize];
            comm.reduce_scatter(&send, &mut recv, *op)?;
            let mine = after[d].len();
            let mut out_shape = shape;
            out_shape[d] = mine;
            let mut keep: Vec<Range<usize>> = bshape.iter().map(|&s| 0..s).collect();
            keep[d] = 0..mine;
            Ok((slice(&recv, &bshape, &keep), out_shape))
        }
        Step::AllGather { axes, dim } => {
            let d = *dim;
            let comm = comm()?;
            let members = mesh.group(axes)?.group_of(me).to_vec();
            let mut bshape = shape.clone();
            bshape[d] = pad_from[d];
            let bsize: usize = bshape.iter().product();
            let mut send = vec![T::default(); bsize];
            copy_region(
                &data,
                &shape,
                &zeros(rank),
                &mut send,
                &bshape,
                &zeros(rank),
                &shape,
            );
            let mut recv = vec![T::default(); bsize * members.len()];
            comm.all_gather(&send, &mut recv)?;
            let out_shape = ext(&after);
            let mut out = vec![T::default(); out_shape.iter().product()];
            for (j, &m) in members.iter().enumerate() {
                let r = &ranges(mesh, gshape, &ps.from, m)?[d];
                let mut extent = out_shape.clone();
                extent[d] = r.len();
                let mut doff = zeros(rank);
                doff[d] = r.start.saturating_sub(after[d].start);
                copy_region(
                    &recv[j * bsize..(j + 1) * bsize],
                    &bshape,
                    &zeros(rank),
                    &mut out,
                    &out_shape,
                    &doff,
                    &extent,
                );
            }
            Ok((out, out_shape))
        }
        Step::AllToAll {
            axes,
            from_dim,
            to_dim,
        } => {
            let (d, e) = (*from_dim, *to_dim);
            let comm = comm()?;
            let members = mesh.group(axes)?.group_of(me).to_vec();
            let mut bshape = shape.clone();
            bshape[d] = pad_from[d];
            bshape[e] = pad_to[e];
            let bsize: usize = bshape.iter().product();
            let n = members.len();
            let mut send = vec![T::default(); bsize * n];
            let mut theirs = Vec::with_capacity(n);
            for (j, &m) in members.iter().enumerate() {
                let (rf, rt) = (
                    ranges(mesh, gshape, &ps.from, m)?,
                    ranges(mesh, gshape, &ps.to, m)?,
                );
                // Member j gets my rows of its e-range.
                let mut extent = shape.clone();
                extent[e] = rt[e].len();
                let mut soff = zeros(rank);
                soff[e] = rt[e].start.saturating_sub(before[e].start);
                copy_region(
                    &data,
                    &shape,
                    &soff,
                    &mut send[j * bsize..(j + 1) * bsize],
                    &bshape,
                    &zeros(rank),
                    &extent,
                );
                theirs.push(rf[d].clone());
            }
            let mut recv = vec![T::default(); bsize * n];
            comm.all_to_all(&send, &mut recv)?;
            let out_shape = ext(&after);
            let mut out = vec![T::default(); out_shape.iter().product()];
            for (j, r) in theirs.iter().enumerate() {
                let mut extent = out_shape.clone();
                extent[d] = r.len();
                let mut doff = zeros(rank);
                doff[d] = r.start.saturating_sub(after[d].start);
                copy_region(
                    &recv[j * bsize..(j + 1) * bsize],
                    &bshape,
                    &zeros(rank),
                    &mut out,
                    &out_shape,
                    &doff,
                    &extent,
                );
            }
            Ok((out, out_shape))
        }
    }
}
