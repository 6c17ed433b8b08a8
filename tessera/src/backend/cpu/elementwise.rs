//! Tile arithmetic: unary math, binary ops and comparisons with broadcasting, select, casts,
//! reshapes and reductions. Inner loops run over contiguous row slices so they vectorise.

use super::value::{Data, Tile, round_to};
use super::vmath;
use tessera_ir::graph::{BinaryOp, UnaryOp};
use tessera_ir::tile::{CmpOp, TileReduce};
use tessera_ir::{DType, NumericsPolicy};

/// `[rows, cols]` of a tile seen as 2-D (rank-1 tiles are one row).
fn as_2d(t: &Tile) -> (usize, usize) {
    match t.rank {
        2 => (t.shape[0], t.shape[1]),
        1 => (1, t.shape[0]),
        _ => (1, 1),
    }
}

/// Output dims of a broadcast, as stated by the IR's result type.
fn out_2d(dims: &[usize]) -> (usize, usize) {
    match dims.len() {
        2 => (dims[0], dims[1]),
        1 => (1, dims[0]),
        _ => (1, 1),
    }
}

/// A broadcast operand row: a full slice or one repeated value.
enum Row<'a, T> {
    Slice(&'a [T]),
    Splat(T),
}

fn row<'a, T: Copy>(v: &'a [T], (r, c): (usize, usize), i: usize) -> Row<'a, T> {
    let ri = if r == 1 { 0 } else { i };
    if c == 1 {
        Row::Splat(v[ri])
    } else {
        Row::Slice(&v[ri * c..(ri + 1) * c])
    }
}

/// Applies `f` elementwise with numpy broadcasting of two 2-D operands into `out_dims`.
fn zip_rows<A: Copy, B: Copy, O: Copy + Default>(
    a: &[A],
    sa: (usize, usize),
    b: &[B],
    sb: (usize, usize),
    out_dims: &[usize],
    f: impl Fn(A, B) -> O + Copy,
) -> Vec<O> {
    let (r, c) = out_2d(out_dims);
    let mut out = vec![O::default(); r * c];
    for i in 0..r {
        let o = &mut out[i * c..(i + 1) * c];
        match (row(a, sa, i), row(b, sb, i)) {
            (Row::Slice(x), Row::Slice(y)) => o
                .iter_mut()
                .zip(x.iter().zip(y))
                .for_each(|(o, (x, y))| *o = f(*x, *y)),
            (Row::Slice(x), Row::Splat(y)) => o.iter_mut().zip(x).for_each(|(o, x)| *o = f(*x, y)),
            (Row::Splat(x), Row::Slice(y)) => o.iter_mut().zip(y).for_each(|(o, y)| *o = f(x, *y)),
            (Row::Splat(x), Row::Splat(y)) => o.iter_mut().for_each(|o| *o = f(x, y)),
        }
    }
    out
}

pub(crate) fn binary(op: BinaryOp, a: &Tile, b: &Tile, out_dims: &[usize]) -> Tile {
    let (sa, sb) = (as_2d(a), as_2d(b));
    match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => {
            let mut v = match op {
                BinaryOp::Add => zip_rows(x, sa, y, sb, out_dims, |p, q| p + q),
                BinaryOp::Sub => zip_rows(x, sa, y, sb, out_dims, |p, q| p - q),
                BinaryOp::Mul => zip_rows(x, sa, y, sb, out_dims, |p, q| p * q),
                BinaryOp::Div => zip_rows(x, sa, y, sb, out_dims, |p, q| p / q),
                BinaryOp::Max => zip_rows(x, sa, y, sb, out_dims, |p: f32, q: f32| {
                    if p.is_nan() || q.is_nan() {
                        f32::NAN
                    } else {
                        p.max(q)
                    }
                }),
                BinaryOp::Min => zip_rows(x, sa, y, sb, out_dims, |p: f32, q: f32| {
                    if p.is_nan() || q.is_nan() {
                        f32::NAN
                    } else {
                        p.min(q)
                    }
                }),
            };
            round_to(a.dtype, &mut v);
            Tile::new_f(a.dtype, out_dims, v)
        }
        (Data::I(x), Data::I(y)) => {
            let v = match op {
                BinaryOp::Add => {
                    zip_rows(x, sa, y, sb, out_dims, |p: i32, q: i32| p.wrapping_add(q))
                }
                BinaryOp::Sub => {
                    zip_rows(x, sa, y, sb, out_dims, |p: i32, q: i32| p.wrapping_sub(q))
                }
                BinaryOp::Mul => {
                    zip_rows(x, sa, y, sb, out_dims, |p: i32, q: i32| p.wrapping_mul(q))
                }
                BinaryOp::Div => zip_rows(x, sa, y, sb, out_dims, |p: i32, q: i32| {
                    if q == 0 { 0 } else { p.wrapping_div(q) }
                }),
                BinaryOp::Max => zip_rows(x, sa, y, sb, out_dims, |p: i32, q: i32| p.max(q)),
                BinaryOp::Min => zip_rows(x, sa, y, sb, out_dims, |p: i32, q: i32| p.min(q)),
            };
            Tile::new_i(out_dims, v)
        }
        (Data::B(x), Data::B(y)) => {
            let v = match op {
                BinaryOp::Mul | BinaryOp::Min => zip_rows(x, sa, y, sb, out_dims, |p, q| p & q),
                _ => zip_rows(x, sa, y, sb, out_dims, |p, q| p | q),
            };
            Tile::new_b(out_dims, v)
        }
        _ => panic!("binary op on mixed tiles (verifier bug)"),
    }
}

pub(crate) fn cmp(op: CmpOp, a: &Tile, b: &Tile, out_dims: &[usize]) -> Tile {
    let (sa, sb) = (as_2d(a), as_2d(b));
    let v = match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => zip_rows(x, sa, y, sb, out_dims, move |p, q| op.eval(p, q)),
        (Data::I(x), Data::I(y)) => zip_rows(x, sa, y, sb, out_dims, move |p, q| op.eval(p, q)),
        (Data::B(x), Data::B(y)) => zip_rows(x, sa, y, sb, out_dims, move |p, q| op.eval(p, q)),
        _ => panic!("comparison of mixed tiles (verifier bug)"),
    };
    Tile::new_b(out_dims, v)
}

/// `op` on every element; a deterministic kernel's `exp` is the canonical sequence
/// (`tessera_ir::canonical::exp`), the one its PTX computes.
pub(crate) fn unary(op: UnaryOp, mut t: Tile, policy: NumericsPolicy) -> Tile {
    let dtype = t.dtype;
    if let Data::F(v) = &mut t.data {
        match op {
            UnaryOp::Exp if policy == NumericsPolicy::Deterministic => vmath::exp_fused(v),
            UnaryOp::Neg => v.iter_mut().for_each(|x| *x = -*x),
            UnaryOp::Abs => v.iter_mut().for_each(|x| *x = x.abs()),
            UnaryOp::Relu => v
                .iter_mut()
                .for_each(|x| *x = if x.is_nan() { *x } else { x.max(0.0) }),
            UnaryOp::Exp => vmath::exp(v),
            UnaryOp::Log => vmath::log(v),
            UnaryOp::Sqrt => vmath::sqrt(v),
            UnaryOp::Rsqrt => vmath::rsqrt(v),
            UnaryOp::Tanh => vmath::tanh(v),
            UnaryOp::Sigmoid => vmath::sigmoid(v),
            UnaryOp::Gelu => vmath::gelu(v),
        }
        round_to(dtype, v);
    }
    t.unknown_rows()
}

pub(crate) fn select(m: &Tile, a: &Tile, b: &Tile, out_dims: &[usize]) -> Tile {
    // Broadcast the mask first, then pick.
    let mb = broadcast(m, out_dims);
    let (sa, sb) = (as_2d(a), as_2d(b));
    let (r, c) = out_2d(out_dims);
    let pick = |i: usize, j: usize, sa: (usize, usize)| {
        (if sa.0 == 1 { 0 } else { i }) * sa.1 + if sa.1 == 1 { 0 } else { j }
    };
    let mv = mb.b();
    match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => {
            let v = (0..r * c)
                .map(|k| {
                    if mv[k] {
                        x[pick(k / c, k % c, sa)]
                    } else {
                        y[pick(k / c, k % c, sb)]
                    }
                })
                .collect();
            Tile::new_f(a.dtype, out_dims, v)
        }
        (Data::I(x), Data::I(y)) => {
            let v = (0..r * c)
                .map(|k| {
                    if mv[k] {
                        x[pick(k / c, k % c, sa)]
                    } else {
                        y[pick(k / c, k % c, sb)]
                    }
                })
                .collect();
            Tile::new_i(out_dims, v)
        }
        (Data::B(x), Data::B(y)) => {
            let v = (0..r * c)
                .map(|k| {
                    if mv[k] {
                        x[pick(k / c, k % c, sa)]
                    } else {
                        y[pick(k / c, k % c, sb)]
                    }
                })
                .collect();
            Tile::new_b(out_dims, v)
        }
        _ => panic!("select of mixed tiles (verifier bug)"),
    }
}

pub(crate) fn cast(t: Tile, to: DType) -> Tile {
    let dims = t.dims().to_vec();
    let from = t.dtype;
    match (t.data, to) {
        (Data::F(mut v), DType::F32 | DType::BF16 | DType::F16 | DType::F8E4M3 | DType::F8E5M2) => {
            if to != from {
                round_to(to, &mut v);
            }
            // Rounding keeps +0.0 rows +0.0.
            let z = t.zero_rows_from;
            let mut out = Tile::new_f(to, &dims, v);
            out.zero_rows_from = z;
            out
        }
        (Data::F(v), DType::I32) => Tile::new_i(&dims, v.iter().map(|x| *x as i32).collect()),
        (Data::F(v), _) => Tile::new_b(&dims, v.iter().map(|x| *x != 0.0).collect()),
        (Data::I(v), DType::I32) => Tile::new_i(&dims, v),
        (Data::I(v), DType::Bool) => Tile::new_b(&dims, v.iter().map(|x| *x != 0).collect()),
        (Data::I(v), _) => {
            let mut f: Vec<f32> = v.iter().map(|x| *x as f32).collect();
            round_to(to, &mut f);
            Tile::new_f(to, &dims, f)
        }
        (Data::B(v), DType::Bool) => Tile::new_b(&dims, v),
        (Data::B(v), DType::I32) => Tile::new_i(&dims, v.iter().map(|x| *x as i32).collect()),
        (Data::B(v), _) => Tile::new_f(to, &dims, v.iter().map(|x| *x as u8 as f32).collect()),
    }
}

/// Materialises a broadcast to `out_dims`.
pub(crate) fn broadcast(t: &Tile, out_dims: &[usize]) -> Tile {
    let s = as_2d(t);
    let (r, c) = out_2d(out_dims);
    macro_rules! bc {
        ($v:expr) => {{
            let mut out = Vec::with_capacity(r * c);
            for i in 0..r {
                match row($v, s, i) {
                    Row::Slice(x) => out.extend_from_slice(x),
                    Row::Splat(x) => out.extend(std::iter::repeat_n(x, c)),
                }
            }
            out
        }};
    }
    match &t.data {
        Data::F(v) => Tile::new_f(t.dtype, out_dims, bc!(v)),
        Data::I(v) => Tile::new_i(out_dims, bc!(v)),
        Data::B(v) => Tile::new_b(out_dims, bc!(v)),
    }
}

pub(crate) fn trans(t: &Tile) -> Tile {
    let (r, c) = as_2d(t);
    macro_rules! tr {
        ($v:expr) => {{
            let mut out = Vec::with_capacity(r * c);
            for j in 0..c {
                out.extend((0..r).map(|i| $v[i * c + j]));
            }
            out
        }};
    }
    match &t.data {
        Data::F(v) => Tile::new_f(t.dtype, &[c, r], tr!(v)),
        Data::I(v) => Tile::new_i(&[c, r], tr!(v)),
        Data::B(v) => Tile::new_b(&[c, r], tr!(v)),
    }
}

pub(crate) fn reduce(op: TileReduce, t: &Tile, axis: usize, policy: NumericsPolicy) -> Tile {
    let (r, c) = as_2d(t);
    let along_rows = t.rank == 2 && axis == 0;
    let out_dims: Vec<usize> = t
        .dims()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != axis)
        .map(|(_, d)| *d)
        .collect();
    match &t.data {
        Data::F(v) => {
            let out: Vec<f32> = if along_rows {
                let mut acc = vec![
                    if op == TileReduce::Max {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    };
                    c
                ];
                let mut comp = vec![0.0f32; c];
                for i in 0..r {
                    let rowv = &v[i * c..(i + 1) * c];
                    match (op, policy) {
                        (TileReduce::Max, _) => acc.iter_mut().zip(rowv).for_each(|(a, x)| {
                            *a = if a.is_nan() || x.is_nan() {
                                f32::NAN
                            } else {
                                a.max(*x)
                            }
                        }),
                        (TileReduce::Sum, NumericsPolicy::KahanSum) => {
                            // Sum2 (TwoSum errors carried per column; the sum is
                            // acc + comp), as the lowering's `two_sum_step`.
                            for ((a, k), x) in acc.iter_mut().zip(comp.iter_mut()).zip(rowv) {
                                let t = *a + x;
                                let bp = t - *a;
                                *k += (*a - (t - bp)) + (x - bp);
                                *a = t;
                            }
                        }
                        (TileReduce::Sum, _) => acc.iter_mut().zip(rowv).for_each(|(a, x)| *a += x),
                    }
                }
                if (op, policy) == (TileReduce::Sum, NumericsPolicy::KahanSum) {
                    acc.iter_mut().zip(&comp).for_each(|(a, k)| *a += k);
                }
                acc
            } else {
                (0..r)
                    .map(|i| {
                        let rowv = &v[i * c..(i + 1) * c];
                        match (op, policy) {
                            (TileReduce::Max, _) => vmath::max(rowv),
                            (TileReduce::Sum, NumericsPolicy::KahanSum) => vmath::sum_kahan(rowv),
                            (TileReduce::Sum, _) => vmath::sum(rowv),
                        }
                    })
                    .collect()
            };
            let mut out = out;
            round_to(t.dtype, &mut out);
            Tile::new_f(t.dtype, &out_dims, out)
        }
        Data::I(v) => {
            let f = |it: &mut dyn Iterator<Item = i32>| match op {
                TileReduce::Max => it.max().unwrap_or(i32::MIN),
                TileReduce::Sum => it.fold(0i32, |a, x| a.wrapping_add(x)),
            };
            let out: Vec<i32> = if along_rows {
                (0..c)
                    .map(|j| f(&mut (0..r).map(|i| v[i * c + j])))
                    .collect()
            } else {
                (0..r)
                    .map(|i| f(&mut v[i * c..(i + 1) * c].iter().copied()))
                    .collect()
            };
            Tile::new_i(&out_dims, out)
        }
        Data::B(_) => panic!("reduce of a bool tile (verifier bug)"),
    }
}
