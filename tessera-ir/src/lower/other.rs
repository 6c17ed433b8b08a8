//! Elementwise chains, transposes and reductions over leading axes.

use super::{Axis, Lower, LowerError, PLAIN, view_groups, view_groups_merged};
use crate::graph::{BinaryOp, Op as G, ReduceOp};
use crate::schedule::Schedule;
use crate::tile::{CmpOp, GridDim, Op, TValue, TileReduce, TileType};
use crate::{DType, NumericsPolicy};

/// An elementwise root (and its epilogue) over a 2-D `[rows, cols]` view of the output, or,
/// when an operand does not broadcast along that view (`[B, 1, 1, C]` against `[B, H, W, C]`:
/// neither the merged rows nor 1 along them), over a 3-D `[batch, rows, cols]` view whose
/// groups every operand fits, one batch index per program along grid axis 2.
pub(super) fn elementwise(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (br, bc) = (s.tile[0] as usize, s.tile[1] as usize);
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let (rank, inner) = elementwise_view(l, &out_shape);
    let groups = view_groups_merged(&out_shape, rank, inner);
    let po = l.output_param_merged(rank, inner);
    let mut grid = [
        GridDim {
            dims: vec![(po, rank - 2)],
            tile: br as u32,
        },
        GridDim {
            dims: vec![(po, rank - 1)],
            tile: bc as u32,
        },
        GridDim::one(),
    ];
    if rank == 3 {
        grid[2] = GridDim {
            dims: vec![(po, 0)],
            tile: 1,
        };
    }
    l.set_grid(grid);
    let (p0, p1) = (l.pid(0), l.pid(1));
    let (cbr, cbc) = (l.c_i32(br as i64), l.c_i32(bc as i64));
    let i = l.mul(p0, cbr);
    let j = l.mul(p1, cbc);
    let batch = (rank == 3).then(|| l.pid(2));
    let axes = tile_axes(batch, (i, br), (j, bc));
    let root = l.k.root;
    let y = l.elementwise(root, &groups, &axes)?;
    let y = l.epilogue(y, &groups, &axes)?;
    let y = l.fit(y, &[br, bc]);
    // The output parameter was declared first so the grid can name it; move it last.
    move_output_last(l, po);
    let po = l.bindings.len() - 1;
    let idx: Vec<_> = batch.into_iter().chain([i, j]).collect();
    l.store(po, idx, y);
    Ok(())
}

/// The view an elementwise kernel runs at: rank 2 (`PLAIN`) when every operand it loads
/// matches the output or is 1 along each of `[rows, cols]`, else the first rank-3 split
/// `[lead, mid, last]` (`inner = [mid, 1]`) where each does (rank 2 when none does: the
/// lowering then names the operand).
fn elementwise_view(l: &Lower, out: &[crate::Dim]) -> (usize, [usize; 2]) {
    let kernel: Vec<crate::graph::Value> = std::iter::once(l.k.root)
        .chain(l.k.epilogue.iter().copied())
        .collect();
    let operands: Vec<Vec<crate::Dim>> = kernel
        .iter()
        .flat_map(|v| l.g.node(*v).args.iter())
        .filter(|a| !kernel.contains(a))
        .map(|a| l.g.ty(*a).shape.0.clone())
        .collect();
    let fits = |groups: &[Vec<crate::Dim>]| {
        let rank: usize = groups.iter().map(|g| g.len()).sum();
        operands.iter().all(|shape| {
            if shape.len() > rank {
                return false;
            }
            let mut padded = vec![crate::Dim::Const(1); rank - shape.len()];
            padded.extend(shape.iter().cloned());
            let mut pos = 0;
            groups.iter().all(|g| {
                let mine = &padded[pos..pos + g.len()];
                pos += g.len();
                mine == g.as_slice() || mine.iter().all(|d| d.is_one())
            })
        })
    };
    if out.len() < 3 || fits(&view_groups(out, 2)) {
        return (2, PLAIN);
    }
    (1..out.len() - 1)
        .map(|mid| [mid, 1])
        .find(|inner| fits(&view_groups_merged(out, 3, *inner)))
        .map_or((2, PLAIN), |inner| (3, inner))
}

fn move_output_last(l: &mut Lower, po: usize) {
    let b = l.bindings.remove(po);
    l.bindings.push(b);
    let params = l.b.params_mut();
    let p = params.remove(po);
    params.push(p);
    // Indices above `po` shifted down by one; the output moved to the end. Loads emitted so far
    // name inputs by index, so renumber them.
    let n = params.len();
    let remap = |x: usize| {
        if x == po {
            n - 1
        } else if x > po {
            x - 1
        } else {
            x
        }
    };
    l.b.remap_params(remap);
}

/// The two adjacent groups of trailing axes a permutation exchanges:
/// `perm = [0, .., k−1, j, .., r−1, k, .., j−1]` gives `Some((r − j, j − k))`, the sizes of
/// the moved-forward and moved-back groups (`None` for another permutation).
fn group_swap(perm: &[usize]) -> Option<(usize, usize)> {
    let r = perm.len();
    let k = perm.iter().enumerate().take_while(|(i, a)| i == *a).count();
    if k + 1 >= r {
        return None;
    }
    let j = perm[k];
    let want: Vec<usize> = (0..k).chain(j..r).chain(k..j).collect();
    (j > k && perm == want.as_slice()).then_some((r - j, j - k))
}

/// Swaps the last two axes (or, for `permute`, two adjacent groups of trailing axes, each
/// merged into one view axis): out tile `[BR, BC]` at `(i, j)` reads the input tile at
/// `(j, i)`.
pub(super) fn transpose(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (br, bc) = (s.tile[0] as usize, s.tile[1] as usize);
    let root = l.g.node(l.k.root).clone();
    let x = root.args[0];
    // The input view `[B, P, Q]` and the output view `[B, Q, P]` (`P`, `Q`: merged groups).
    let (x_inner, out_inner) = match &root.op {
        G::Permute(perm) => match group_swap(perm) {
            Some((q, p)) => ([p, q], [q, p]),
            None => {
                return Err(l.err(
                    l.k.root,
                    format!("permute {perm:?} is not a swap of two adjacent groups of trailing axes (`[0, .., k−1, j, .., r−1, k, .., j−1]`), the permutations kernels run"),
                ));
            }
        },
        _ => (PLAIN, PLAIN),
    };
    let r = if l.g.ty(x).shape.rank() > x_inner[0] + x_inner[1] {
        3
    } else {
        2
    };
    // A rank-2 view merges only into its last axis: pad to rank 3 when `P` merges dims.
    let r = if x_inner[0] > 1 || out_inner[0] > 1 {
        3
    } else {
        r
    };
    let px = l.param_merged(x, r, x_inner);
    let mut grid = [
        GridDim {
            dims: vec![(px, r - 1)],
            tile: br as u32,
        },
        GridDim {
            dims: vec![(px, r - 2)],
            tile: bc as u32,
        },
        GridDim::one(),
    ];
    if r == 3 {
        grid[2] = GridDim {
            dims: vec![(px, 0)],
            tile: 1,
        };
    }
    l.set_grid(grid);
    let (p0, p1) = (l.pid(0), l.pid(1));
    let (cbr, cbc) = (l.c_i32(br as i64), l.c_i32(bc as i64));
    let i = l.mul(p0, cbr);
    let j = l.mul(p1, cbc);
    let batch = if r == 3 { Some(l.pid(2)) } else { None };
    let idx: Vec<_> = batch.into_iter().chain([j, i]).collect();
    let t = l.load(px, idx, &[bc, br], 0.0);
    let dtype = l.g.ty(x).dtype;
    let y = l.b.op(Op::Trans(t), TileType::tile(dtype, &[br, bc]));
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let groups = view_groups_merged(&out_shape, r, out_inner);
    let axes = tile_axes(batch, (i, br), (j, bc));
    let y = l.epilogue(y, &groups, &axes)?;
    let y = l.fit(y, &[br, bc]);
    let po = l.output_param_merged(r, out_inner);
    let idx: Vec<_> = batch.into_iter().chain([i, j]).collect();
    l.store(po, idx, y);
    Ok(())
}

/// Most elements of one step's tile in a column reduction with a prologue.
const PROLOGUE_TILE: usize = 2048;

/// Sum/max/mean over one axis `k` that is not the last: the input is viewed as
/// `[outer, n, inner]` (`outer = d0·..·dk−1`, `n = dk`, `inner = dk+1·..·dr−1`; without the
/// `outer` axis when `k = 0`) and the output as `[outer, inner]`. Each program owns `BC`
/// columns of one `outer` index and walks the `n` rows (`BR` at a time; one at a time, in
/// order, under `deterministic` and `kahan_sum`). With a prologue (pipeline fusion, see
/// [`crate::fuse`]; axis 0 of a rank-2 operand) each tile of the operand is computed from the
/// chain's inputs instead of loaded, `min(BR, 2048 / BC)` rows at a time.
pub(super) fn col_reduce(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let (mut br, bc) = (s.tile[0] as usize, s.tile[1] as usize);
    if !l.k.prologue.is_empty() {
        // A prologue keeps a tile per chain input live at once: fewer rows per step keep it
        // in registers (at most PROLOGUE_TILE elements, at least one row).
        br = br.min(PROLOGUE_TILE / bc).max(1);
    }
    let root = l.g.node(l.k.root).clone();
    let G::Reduce { op, axes, .. } = &root.op else {
        return Err(l.err(l.k.root, "column reduction of a non-reduction"));
    };
    let x = root.args[0];
    let r = l.g.ty(x).shape.rank();
    let k = match axes.as_slice() {
        [k] if k + 1 < r => *k,
        _ => {
            return Err(l.err(
                l.k.root,
                format!("a column reduction reduces one axis that is not the last, not {axes:?}"),
            ));
        }
    };
    // The trailing dims merged into the column axis.
    let inner = [1, r - 1 - k];
    let batched = k > 0;
    let prologue = l.k.prologue.clone();
    if !prologue.is_empty() && (batched || r != 2) {
        return Err(l.err(
            l.k.root,
            "a column reduction with a prologue (pipeline fusion) reduces axis 0 of a rank-2 operand",
        ));
    }
    // With a prologue the operand is never in memory: an input of its full shape gives the
    // grid and the row count.
    let shape_source = if prologue.is_empty() {
        x
    } else {
        let xs = l.g.ty(x).shape.0.clone();
        prologue
            .iter()
            .flat_map(|c| l.g.node(*c).args.clone())
            .find(|a| {
                !prologue.contains(a)
                    && !matches!(l.g.node(*a).op, G::Const { .. })
                    && l.g.ty(*a).shape.0 == xs
            })
            .ok_or_else(|| {
                l.err(
                    x,
                    "the column reduction's prologue reads no input of its full shape",
                )
            })?
    };
    let (px, rows_axis, cols_axis) = if batched {
        (l.param_merged(x, 3, inner), 1, 2)
    } else {
        (l.param_merged(shape_source, 2, inner), 0, 1)
    };
    l.set_grid([
        GridDim {
            dims: vec![(px, cols_axis)],
            tile: bc as u32,
        },
        GridDim::one(),
        if batched {
            GridDim {
                dims: vec![(px, 0)],
                tile: 1,
            }
        } else {
            GridDim::one()
        },
    ]);
    let pid = l.pid(0);
    let cbc = l.c_i32(bc as i64);
    let j = l.mul(pid, cbc);
    let batch = if batched { Some(l.pid(2)) } else { None };
    let at = |row: TValue| -> Vec<TValue> { batch.into_iter().chain([row, j]).collect() };
    let zero = l.c_i32(0);
    let rows = l.dim(px, rows_axis);
    let is_max = *op == ReduceOp::Max;
    let init = if is_max { f64::NEG_INFINITY } else { 0.0 };
    let acc0 = l.b.op(Op::Full(init), TileType::tile(DType::F32, &[bc]));
    let ordered = l.policy != NumericsPolicy::Fast && !is_max;
    let mut y = if ordered {
        // Deterministic / Kahan: the rows are added one at a time, in row order, into the
        // carried column sums (compensated under kahan_sum), whatever `BR` is.
        let kahan = l.policy == NumericsPolicy::KahanSum;
        let inits = if kahan { vec![acc0, acc0] } else { vec![acc0] };
        let (r, carried) = l.b.begin_for(zero, rows, br as i64, &inits);
        let (mut s, mut comp) = (carried[0], carried.get(1).copied());
        for u in 0..br {
            let off = l.c_i32(u as i64);
            let ru = l.bin(BinaryOp::Add, r, off);
            let v = if prologue.is_empty() {
                l.load(px, at(ru), &[bc], 0.0)
            } else {
                let axes = [
                    Axis {
                        origin: ru,
                        extent: None,
                    },
                    Axis {
                        origin: j,
                        extent: Some(bc),
                    },
                ];
                let v = run_prologue(l, &prologue, &axes)?;
                // A row past the end contributes 0 (the chain may map the 0s read there to
                // anything).
                let inside =
                    l.b.op(Op::Cmp(CmpOp::Lt, ru, rows), TileType::scalar(DType::Bool));
                let z = l.c(0.0, l.b.ty(v).dtype);
                let t = l.b.ty(v).clone();
                l.b.op(Op::Select(inside, v, z), t)
            };
            let x = l.cast(v, DType::F32);
            match comp {
                None => s = l.bin(BinaryOp::Add, s, x),
                Some(k) => {
                    let (t, k) = l.two_sum_step(s, k, x);
                    comp = Some(k);
                    s = t;
                }
            }
        }
        let next: Vec<_> = std::iter::once(s).chain(comp).collect();
        let r = l.b.end_for(&next);
        match r.get(1) {
            Some(k) => l.bin(BinaryOp::Add, r[0], *k),
            None => r[0],
        }
    } else {
        let (r, acc) = l.b.begin_for(zero, rows, br as i64, &[acc0]);
        let v = if prologue.is_empty() {
            l.load(px, at(r), &[br, bc], init)
        } else {
            let axes = [
                Axis {
                    origin: r,
                    extent: Some(br),
                },
                Axis {
                    origin: j,
                    extent: Some(bc),
                },
            ];
            let v = run_prologue(l, &prologue, &axes)?;
            let v = l.fit(v, &[br, bc]);
            // Rows past the end read the reduction's identity.
            let ar = l.b.op(Op::Arange, TileType::tile(DType::I32, &[br]));
            let rr = l.bin(BinaryOp::Add, ar, r);
            let inside = l.b.op(
                Op::Cmp(CmpOp::Lt, rr, rows),
                TileType::tile(DType::Bool, &[br]),
            );
            let inside = l.expand(inside, 1);
            let z = l.c(init, l.b.ty(v).dtype);
            let t = l.b.ty(v).clone();
            l.b.op(Op::Select(inside, v, z), t)
        };
        let v = l.cast(v, DType::F32);
        let (red, comb) = if is_max {
            (TileReduce::Max, BinaryOp::Max)
        } else {
            (TileReduce::Sum, BinaryOp::Add)
        };
        let part = l.reduce(red, v, 0);
        let next = l.bin(comb, acc[0], part);
        l.b.end_for(&[next])[0]
    };
    if *op == ReduceOp::Mean {
        let rf = l.cast(rows, DType::F32);
        y = l.bin(BinaryOp::Div, y, rf);
    }
    let y = l.cast(y, root.ty.dtype);
    let out_shape = l.g.ty(l.k.output).shape.0.clone();
    let out_rank = if batched { 2 } else { 1 };
    let out_inner = if batched { inner } else { PLAIN };
    let groups = if batched {
        view_groups_merged(&out_shape, 2, inner)
    } else {
        view_groups(&out_shape, 1)
    };
    let mut axes_t: Vec<Axis> = batch
        .map(|b| Axis {
            origin: b,
            extent: None,
        })
        .into_iter()
        .collect();
    axes_t.push(Axis {
        origin: j,
        extent: Some(bc),
    });
    let y = l.epilogue(y, &groups, &axes_t)?;
    let y = l.fit(y, &[bc]);
    let po = l.output_param_merged(out_rank, out_inner);
    l.store(po, batch.into_iter().chain([j]).collect(), y);
    Ok(())
}

/// The prologue chain of a column reduction over the `[rows, cols]` tile at `axes`: each node
/// computed from its inputs (loaded broadcast against the tile) and the node before it.
fn run_prologue(
    l: &mut Lower,
    chain: &[crate::graph::Value],
    axes: &[Axis],
) -> Result<crate::tile::TValue, LowerError> {
    let shape = l.g.ty(*chain.last().expect("a prologue")).shape.0.clone();
    let groups = view_groups(&shape, 2);
    let mut last = None;
    for &v in chain {
        let t = l.elementwise(v, &groups, axes)?;
        l.vals.insert(v, t);
        last = Some(t);
    }
    Ok(last.expect("a prologue"))
}

/// The axes of a `[br, bc]` tile at origins `(i, j)`, after a batch axis indexed one position
/// at a time when there is one.
fn tile_axes(
    batch: Option<TValue>,
    (i, br): (TValue, usize),
    (j, bc): (TValue, usize),
) -> Vec<Axis> {
    let batch = batch.map(|b| Axis {
        origin: b,
        extent: None,
    });
    batch
        .into_iter()
        .chain([
            Axis {
                origin: i,
                extent: Some(br),
            },
            Axis {
                origin: j,
                extent: Some(bc),
            },
        ])
        .collect()
}
