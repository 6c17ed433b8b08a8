//! Layout kernels: `complex`, `real`, `pad`, `causal_mask` and `spectral_mul`, each written
//! with the ordinary tile ops (loads and stores masked by the tensors' bounds, `arange`/`cmp`/
//! `select` for the `(re, im)` pair and the mask), so the CPU interpreter and the generic PTX
//! emitter run them unchanged. Schedule `tile = [BM, BN]`: `BM` rows per program (a loop),
//! `BN` columns per block.
//!
//! - `complex` / `real`: rows of `[M, n]` against `[M, n, 2]`; the pair is built by selecting
//!   column 0 of a `[BN, 2]` tile (`real` sums the selected column: `re + 0`, exact).
//! - `pad`: the axes after the last padded axis `a` are merged into it (`[.., d_a·I]`, so the
//!   padding of axis `a` becomes a shift of `lo_a·I` along contiguous memory); each output row
//!   is decomposed into its leading indices (constant extents), shifted by `lo` (and, for
//!   interior padding `k − 1`, divided by `k` where it is a multiple of `k`), and read from the
//!   matching input row (a row outside the input, or between two inserted elements, reads
//!   zeros); the columns' shift is a load origin that may lie before 0 or past the end (masked
//!   by the bounds). When axis `a` has interior padding it joins the rows and the columns are
//!   the axes after it (interior padding of the last axis is an error).
//! - `causal_mask`: `[B, Sq, Sk]` blocks of `[BM, BN]`, `select(j ≤ i + Sk − Sq, x, −∞)`.
//! - `spectral_mul`: one output position `(n, p, q)` per row, output channels in blocks of `BN`
//!   inside one group; a loop over the group's input channels accumulates
//!   `Y += Wr·(xr, xi) + Wi·(xi, −xr)` (`X·conj(W)` on interleaved pairs) in f32.
use super::{Lower, LowerError};
use crate::graph::{BinaryOp, Op, Value};
use crate::schedule::Schedule;
use crate::tile::{self, CmpOp, GridDim, TValue, TileReduce, TileType};
use crate::{DType, Dim};

pub(super) fn lower(l: &mut Lower, s: &Schedule) -> Result<(), LowerError> {
    let root = l.k.root;
    let n = l.g.node(root).clone();
    let bm = s.tile[0].max(1) as usize;
    let bn = s.tile.get(1).copied().unwrap_or(1).max(1) as usize;
    match &n.op {
        Op::Complex => complex(l, n.args[0], bm, bn),
        Op::Real => real(l, n.args[0], bm, bn),
        Op::CausalMask => causal_mask(l, n.args[0], bm, bn),
        Op::Pad { lo, hi, interior } => pad(l, n.args[0], lo, hi, interior, bm, bn),
        Op::SpectralMul { groups } => spectral_mul(l, n.args[0], n.args[1], *groups, bm, bn),
        op => Err(l.err(root, format!("{} is not a layout op", op.name()))),
    }
}

fn konst(d: &Dim) -> Option<usize> {
    match d {
        Dim::Const(n) => Some(*n as usize),
        Dim::Sym(_) => None,
    }
}

/// `bn` clamped to the extent (when known), a power of two.
fn block(bn: usize, extent: Option<usize>) -> usize {
    let b = bn.next_power_of_two();
    match extent {
        Some(e) => b.min(e.next_power_of_two()).max(1),
        None => b,
    }
}

impl Lower<'_> {
    fn arange(&mut self, n: usize) -> TValue {
        self.b
            .op(tile::Op::Arange, TileType::tile(DType::I32, &[n]))
    }

    fn cmp(&mut self, op: CmpOp, a: TValue, b: TValue) -> TValue {
        let (ta, tb) = (self.b.ty(a).clone(), self.b.ty(b).clone());
        let shape = TileType::broadcast_shape(&ta.shape, &tb.shape).expect("matching tiles");
        self.b
            .op(tile::Op::Cmp(op, a, b), TileType::tile(DType::Bool, &shape))
    }

    fn select(&mut self, m: TValue, a: TValue, b: TValue) -> TValue {
        let (tm, ta, tb) = (
            self.b.ty(m).clone(),
            self.b.ty(a).clone(),
            self.b.ty(b).clone(),
        );
        let s1 = TileType::broadcast_shape(&tm.shape, &ta.shape).expect("matching tiles");
        let shape = TileType::broadcast_shape(&s1, &tb.shape).expect("matching tiles");
        self.b
            .op(tile::Op::Select(m, a, b), TileType::tile(ta.dtype, &shape))
    }

    /// The `bool[1, 2]` tile `[true, false]`: selects the real part of a pair.
    fn re_lane(&mut self) -> TValue {
        let ar = self.arange(2);
        let ar = self.expand(ar, 0);
        let z = self.c_i32(0);
        self.cmp(CmpOp::Eq, ar, z)
    }

    /// The grid of `[bm, bn]` blocks over the first two view axes of parameter `p`.
    fn block_grid(&mut self, p: usize, bm: usize, bn: usize) {
        self.set_grid([
            GridDim {
                dims: vec![(p, 0)],
                tile: bm as u32,
            },
            GridDim {
                dims: vec![(p, 1)],
                tile: bn as u32,
            },
            GridDim::one(),
        ]);
    }

    /// Opens `for b in 0..bm` and returns `pid0·bm + b`.
    fn row_loop(&mut self, bm: usize) -> TValue {
        let p0 = self.pid(0);
        let bmc = self.c_i32(bm as i64);
        let r0 = self.mul(p0, bmc);
        let zero = self.c_i32(0);
        let (b, _) = self.b.begin_for(zero, bmc, 1, &[]);
        self.bin(BinaryOp::Add, r0, b)
    }
}

fn complex(l: &mut Lower, x: Value, bm: usize, bn: usize) -> Result<(), LowerError> {
    let ty = l.g.ty(x).clone();
    let bn = block(bn, ty.shape.0.last().and_then(konst));
    let xp = l.param(x, 2);
    let op = l.output_param(3);
    l.block_grid(xp, bm, bn);
    let p1 = l.pid(1);
    let bnc = l.c_i32(bn as i64);
    let c0 = l.mul(p1, bnc);
    let re = l.re_lane();
    let r = l.row_loop(bm);
    let v = l.load(xp, vec![r, c0], &[bn], 0.0);
    let v = l.cast(v, DType::F32);
    let v = l.expand(v, 1);
    let v = l.fit(v, &[bn, 2]);
    let zf = l.c(0.0, DType::F32);
    let y = l.select(re, v, zf);
    let z = l.c_i32(0);
    l.store(op, vec![r, c0, z], y);
    l.b.end_for(&[]);
    Ok(())
}

fn real(l: &mut Lower, x: Value, bm: usize, bn: usize) -> Result<(), LowerError> {
    let ty = l.g.ty(x).clone();
    let r_ = ty.shape.rank();
    let bn = block(bn, konst(&ty.shape.0[r_ - 2]));
    let xp = l.param(x, 3);
    let op = l.output_param(2);
    l.block_grid(xp, bm, bn);
    let p1 = l.pid(1);
    let bnc = l.c_i32(bn as i64);
    let c0 = l.mul(p1, bnc);
    let re = l.re_lane();
    let r = l.row_loop(bm);
    let z = l.c_i32(0);
    let v = l.load(xp, vec![r, c0, z], &[bn, 2], 0.0);
    let zf = l.c(0.0, DType::F32);
    let v = l.select(re, v, zf);
    let y = l.reduce(TileReduce::Sum, v, 1);
    l.store(op, vec![r, c0], y);
    l.b.end_for(&[]);
    Ok(())
}

fn causal_mask(l: &mut Lower, x: Value, bm: usize, bn: usize) -> Result<(), LowerError> {
    let ty = l.g.ty(x).clone();
    let r_ = ty.shape.rank();
    let bm = block(bm, konst(&ty.shape.0[r_ - 2]));
    let bn = block(bn, konst(&ty.shape.0[r_ - 1]));
    let xp = l.param(x, 3);
    let op = l.output_param(3);
    l.set_grid([
        GridDim {
            dims: vec![(xp, 1)],
            tile: bm as u32,
        },
        GridDim {
            dims: vec![(xp, 0)],
            tile: 1,
        },
        GridDim::one(),
    ]);
    let (p0, bat) = (l.pid(0), l.pid(1));
    let bmc = l.c_i32(bm as i64);
    let i0 = l.mul(p0, bmc);
    let (sq, sk) = (l.dim(xp, 1), l.dim(xp, 2));
    let shift = l.bin(BinaryOp::Sub, sk, sq);
    // i + Sk − Sq as a [BM, 1] column
    let ai = l.arange(bm);
    let ai = l.expand(ai, 1);
    let rows = l.bin(BinaryOp::Add, ai, i0);
    let lim = l.bin(BinaryOp::Add, rows, shift);
    let zero = l.c_i32(0);
    let (j0, _) = l.b.begin_for(zero, sk, bn as i64, &[]);
    let v = l.load(xp, vec![bat, i0, j0], &[bm, bn], 0.0);
    let aj = l.arange(bn);
    let aj = l.expand(aj, 0);
    let cols = l.bin(BinaryOp::Add, aj, j0);
    let vis = l.cmp(CmpOp::Le, cols, lim);
    let ninf = l.c(f64::NEG_INFINITY, ty.dtype);
    let y = l.select(vis, v, ninf);
    l.store(op, vec![bat, i0, j0], y);
    l.b.end_for(&[]);
    Ok(())
}

fn pad(
    l: &mut Lower,
    x: Value,
    lo: &[i64],
    hi: &[i64],
    interior: &[u64],
    bm: usize,
    bn: usize,
) -> Result<(), LowerError> {
    let xt = l.g.ty(x).clone();
    let yt = l.g.ty(l.k.output).clone();
    let r = xt.shape.rank();
    // the last padded axis (the last axis when nothing is padded)
    let a = (0..r)
        .rev()
        .find(|&i| lo[i] != 0 || hi[i] != 0 || interior[i] != 0)
        .unwrap_or(r - 1);
    // The columns merge the axes from `cs` on: from `a` when its padding is a shift of
    // contiguous memory, from `a + 1` when `a` has interior padding (it joins the rows).
    let cs = if interior[a] == 0 {
        a
    } else if a + 1 < r {
        a + 1
    } else {
        return Err(l.err(
            x,
            format!(
                "pad with interior padding on the last axis of {xt} has no lowering (interior padding lowers on the other axes)"
            ),
        ));
    };
    let inner: usize = match xt.shape.0[cs + 1..].iter().map(konst).product() {
        Some(i) => i,
        None => {
            return Err(l.err(
                x,
                format!("pad needs constant extents after axis {cs} (got {xt})"),
            ));
        }
    };
    let tail = r - cs;
    let (lo_c, n_out) = (
        lo[cs] * inner as i64,
        konst(&yt.shape.0[cs]).map(|e| e * inner),
    );
    let bn = block(bn, n_out);
    let xp = l.param_merged(x, 2, [1, tail]);
    let op = l.output_param_merged(2, [1, tail]);
    l.block_grid(op, bm, bn);
    // leading axes 1..cs need constant extents (axis 0 may be symbolic when not padded)
    for ax in 1..cs {
        if konst(&xt.shape.0[ax]).is_none() {
            return Err(l.err(
                x,
                format!("pad needs a constant extent on axis {ax} (got {xt})"),
            ));
        }
    }
    if cs > 0 && (lo[0] != 0 || hi[0] != 0 || interior[0] != 0) && konst(&xt.shape.0[0]).is_none() {
        return Err(l.err(x, format!("pad of symbolic axis 0 of {xt}")));
    }
    let p1 = l.pid(1);
    let bnc = l.c_i32(bn as i64);
    let c0 = l.mul(p1, bnc);
    let loc = l.c_i32(lo_c);
    let src_c = l.bin(BinaryOp::Sub, c0, loc);
    let x_rows = l.dim(xp, 0);
    let row = l.row_loop(bm);
    // decompose the output row into leading indices, innermost first
    let mut rem = row;
    let mut src_row = l.c_i32(0);
    let mut stride = 1i64;
    let mut checks: Vec<TValue> = Vec::new();
    for ax in (0..cs).rev() {
        let (idx, next) = if ax == 0 {
            (rem, rem)
        } else {
            let od = konst(&yt.shape.0[ax]).unwrap() as i64;
            let odc = l.c_i32(od);
            let q = l.bin(BinaryOp::Div, rem, odc);
            let qd = l.mul(q, odc);
            (l.bin(BinaryOp::Sub, rem, qd), q)
        };
        rem = next;
        let loa = l.c_i32(lo[ax]);
        let mut si = l.bin(BinaryOp::Sub, idx, loa);
        if lo[ax] != 0 || hi[ax] != 0 || interior[ax] != 0 {
            let xd = konst(&xt.shape.0[ax]).unwrap() as i64;
            let z = l.c_i32(0);
            let ge = l.cmp(CmpOp::Ge, si, z);
            checks.push(ge);
            if interior[ax] != 0 {
                // `si` must be a multiple of `k`; the source index is `si / k` (a negative
                // `si` fails the check above whatever the division rounds to)
                let k = l.c_i32(interior[ax] as i64 + 1);
                let q = l.bin(BinaryOp::Div, si, k);
                let qk = l.mul(q, k);
                let on = l.cmp(CmpOp::Eq, qk, si);
                checks.push(on);
                si = q;
            }
            let xdc = l.c_i32(xd);
            let lt = l.cmp(CmpOp::Lt, si, xdc);
            checks.push(lt);
        }
        let st = l.c_i32(stride);
        let term = l.mul(si, st);
        src_row = l.bin(BinaryOp::Add, src_row, term);
        if ax > 0 {
            stride *= konst(&xt.shape.0[ax]).unwrap() as i64;
        }
    }
    // an invalid row reads row `rows` of the input: out of bounds, zeros
    for ok in checks {
        src_row = l.select(ok, src_row, x_rows);
    }
    let t = l.load(xp, vec![src_row, src_c], &[bn], 0.0);
    l.store(op, vec![row, c0], t);
    l.b.end_for(&[]);
    Ok(())
}

fn spectral_mul(
    l: &mut Lower,
    x: Value,
    w: Value,
    groups: u64,
    bm: usize,
    bn: usize,
) -> Result<(), LowerError> {
    let wt = l.g.ty(w).clone();
    let need = |l: &Lower, v: Value, d: &Dim, what: &str| {
        konst(d).ok_or_else(|| l.err(v, format!("spectral_mul needs a constant {what}, got {d}")))
    };
    let p = need(l, w, &wt.shape.0[0], "transform height")?;
    let q = need(l, w, &wt.shape.0[1], "transform width")?;
    let cg = need(l, w, &wt.shape.0[2], "channels per group")?;
    let f = konst(&wt.shape.0[3]);
    let groups = groups.max(1) as usize;
    let fg = match (groups, f) {
        (1, _) => None,
        (_, Some(f)) => Some(f / groups),
        (_, None) => {
            return Err(l.err(
                w,
                "spectral_mul with groups needs a constant output-channel count",
            ));
        }
    };
    // a block of output channels stays inside one group
    let mut bn = block(bn, f);
    if let Some(fg) = fg {
        bn = bn.min(1 << fg.trailing_zeros());
    }
    let xp = l.param(x, 3);
    let wp = l.param(w, 3);
    let op = l.output_param(3);
    l.block_grid(op, bm, bn);
    let p1 = l.pid(1);
    let bnc = l.c_i32(bn as i64);
    let f0 = l.mul(p1, bnc);
    let cgc = l.c_i32(cg as i64);
    let cbase = match fg {
        Some(fg) => {
            let fgc = l.c_i32(fg as i64);
            let g = l.bin(BinaryOp::Div, f0, fgc);
            l.mul(g, cgc)
        }
        None => l.c_i32(0),
    };
    let re = l.re_lane();
    let row = l.row_loop(bm);
    let pqc = l.c_i32((p * q) as i64);
    let nq = l.bin(BinaryOp::Div, row, pqc);
    let nqm = l.mul(nq, pqc);
    let pq = l.bin(BinaryOp::Sub, row, nqm);
    let wrow0 = l.mul(pq, cgc);
    let acc0 =
        l.b.op(tile::Op::Full(0.0), TileType::tile(DType::F32, &[bn, 2]));
    let zero = l.c_i32(0);
    let (c, args) = l.b.begin_for(zero, cgc, 1, &[acc0]);
    let acc = args[0];
    let ch = l.bin(BinaryOp::Add, cbase, c);
    let z = l.c_i32(0);
    let xz = l.load(xp, vec![row, ch, z], &[2], 0.0);
    let xz = l.expand(xz, 0);
    let zf = l.c(0.0, DType::F32);
    let xr_t = l.select(re, xz, zf);
    let xr = l.reduce(TileReduce::Sum, xr_t, 1);
    let xs = l.bin(BinaryOp::Sub, xz, xr_t); // (0, xi)
    let xi = l.reduce(TileReduce::Sum, xs, 1);
    // [1] tiles → [1, 1]
    let xr = l.expand(xr, 1);
    let xi = l.expand(xi, 1);
    let nxr = l.bin(BinaryOp::Sub, zf, xr);
    let coef_a = l.select(re, xr, xi); // (xr, xi)
    let coef_b = l.select(re, xi, nxr); // (xi, −xr)
    let wr_row = l.bin(BinaryOp::Add, wrow0, c);
    let wz = l.load(wp, vec![wr_row, f0, z], &[bn, 2], 0.0);
    let wre = l.select(re, wz, zf);
    let wr = l.reduce(TileReduce::Sum, wre, 1);
    let wim = l.bin(BinaryOp::Sub, wz, wre);
    let wi = l.reduce(TileReduce::Sum, wim, 1);
    let wr = l.expand(wr, 1);
    let wi = l.expand(wi, 1);
    let ta = l.mul(wr, coef_a);
    let tb = l.mul(wi, coef_b);
    let t = l.bin(BinaryOp::Add, ta, tb);
    let next = l.bin(BinaryOp::Add, acc, t);
    let out = l.b.end_for(&[next]);
    let z2 = l.c_i32(0);
    l.store(op, vec![row, f0, z2], out[0]);
    l.b.end_for(&[]);
    Ok(())
}
