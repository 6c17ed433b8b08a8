//! Row programs ([`crate::fuse::row_programs`]): elementwise ops over whole rows and their
//! last-axis reductions in one kernel. `BR` rows per program; each reduction is a pass over the
//! row in chunks of `BC` columns that recomputes its operand from the inputs (columns past the
//! row masked to the reduction's identity); the row statistics (`[BR, 1]` tiles) stay in
//! registers; a last pass computes the root and its epilogue and stores them.

use super::{Axis, Lower, LowerError, view_groups};
use crate::graph::{BinaryOp, Op as G, ReduceOp, Value};
use crate::schedule::Schedule;
use crate::tile::{CmpOp, GridDim, Op, TValue, TileReduce, TileType};
use crate::{DType, Dim};

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (br, bc) = (s.tile[0] as usize, s.tile[1] as usize);
    let root = l.k.root;
    let members: Vec<Value> = l.k.members.clone();
    let full = l.g.ty(root).shape.0.clone();
    let r = full.len();
    let mut row = full.clone();
    row[r - 1] = Dim::Const(1);
    // A whole-row input names the grid: its rows, and its row length.
    let is_member = |v: &Value| *v == root || members.contains(v);
    let lead = members
        .iter()
        .chain([&root])
        .flat_map(|m| l.g.node(*m).args.iter())
        .find(|a| !is_member(a) && l.g.ty(**a).shape.0 == full)
        .copied()
        .ok_or_else(|| l.err(root, "a row program needs an input of whole rows"))?;
    let px = l.param(lead, 2);
    l.set_grid([
        GridDim {
            dims: vec![(px, 0)],
            tile: br as u32,
        },
        GridDim::one(),
        GridDim::one(),
    ]);
    let pid = l.pid(0);
    let cbr = l.c_i32(br as i64);
    let i = l.mul(pid, cbr);
    let zero = l.c_i32(0);
    let n = l.dim(px, 1);
    let groups = view_groups(&full, 2);
    let axes_at = |c: TValue| {
        [
            Axis {
                origin: i,
                extent: Some(br),
            },
            Axis {
                origin: c,
                extent: Some(bc),
            },
        ]
    };
    for &m in &members {
        let node = l.g.node(m).clone();
        match node.op {
            G::Reduce { op, .. } => {
                let x = node.args[0];
                let (init, comb, red) = match op {
                    ReduceOp::Max => (f64::NEG_INFINITY, BinaryOp::Max, TileReduce::Max),
                    _ => (0.0, BinaryOp::Add, TileReduce::Sum),
                };
                let acc0 = l.b.op(Op::Full(init), TileType::tile(DType::F32, &[br]));
                let saved = l.vals.clone();
                let (c, acc) = l.b.begin_for(zero, n, bc as i64, &[acc0]);
                let axes = axes_at(c);
                let v = eval(l, x, &members, root, &groups, &axes)?;
                let v = l.cast(v, DType::F32);
                let v = l.fit(v, &[br, bc]);
                // Columns past the row read as the reduction's identity.
                let ar = l.b.op(Op::Arange, TileType::tile(DType::I32, &[bc]));
                let cols = l.bin(BinaryOp::Add, ar, c);
                let inside = l.b.op(
                    Op::Cmp(CmpOp::Lt, cols, n),
                    TileType::tile(DType::Bool, &[bc]),
                );
                let inside = l.expand(inside, 0);
                let id = l.c(init, DType::F32);
                let v = l.b.op(
                    Op::Select(inside, v, id),
                    TileType::tile(DType::F32, &[br, bc]),
                );
                let part = l.reduce(red, v, 1);
                let next = l.bin(comb, acc[0], part);
                let mut y = l.b.end_for(&[next])[0];
                l.vals = saved;
                if op == ReduceOp::Mean {
                    let nf = l.cast(n, DType::F32);
                    y = l.bin(BinaryOp::Div, y, nf);
                }
                let y = l.cast(y, node.ty.dtype);
                let y = l.expand(y, 1);
                l.vals.insert(m, y);
            }
            // Row statistics' arithmetic runs once per row, outside the passes.
            _ if l.g.ty(m).shape.0 == row => {
                let axes = axes_at(zero);
                let y = eval(l, m, &members, root, &groups, &axes)?;
                l.vals.insert(m, y);
            }
            // Whole-row values are recomputed inside each pass that reads them.
            _ => {}
        }
    }
    let (c, _) = l.b.begin_for(zero, n, bc as i64, &[]);
    let axes = axes_at(c);
    let y = eval(l, root, &members, root, &groups, &axes)?;
    let y = l.epilogue(y, &groups, &axes)?;
    let y = l.fit(y, &[br, bc]);
    let po = l.output_param(2);
    l.store(po, vec![i, c], y);
    l.b.end_for(&[]);
    Ok(())
}

/// The value of program node `v` (or an input) at the current chunk: members from their
/// operands, inputs loaded once per pass against the rows' tiles.
fn eval(
    l: &mut Lower,
    v: Value,
    members: &[Value],
    root: Value,
    groups: &[Vec<Dim>],
    axes: &[Axis],
) -> Result<TValue, LowerError> {
    if let Some(t) = l.vals.get(&v) {
        return Ok(*t);
    }
    let node = l.g.node(v).clone();
    if v != root && !members.contains(&v) {
        let t = match node.op {
            G::Const { value, dtype } => l.c(value, dtype),
            _ => l.load_broadcast(v, groups, axes)?,
        };
        l.vals.insert(v, t);
        return Ok(t);
    }
    for a in &node.args {
        eval(l, *a, members, root, groups, axes)?;
    }
    let t = l.elementwise(v, groups, axes)?;
    // The root is handed to the epilogue, which records it.
    if v != root {
        l.vals.insert(v, t);
    }
    Ok(t)
}
