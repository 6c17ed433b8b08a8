//! Running a fused chunk program: one program (block) at a time on a worker's scratch
//! ([`Scratch`]), which is reused across launches so a launch allocates nothing once warm.

use super::chunk::{self, V};
use super::plan::{CHUNK, COp, Copy, DirectStep, Group, Kind, Plan, SLOT, SOp, Src, Step};
use crate::backend::Buffer;
use tessera_ir::DType;
use tessera_ir::graph::{BinaryOp, UnaryOp};
use tessera_ir::tile::TileReduce;

/// A worker's scratch: scalar slots, materialised tiles, chunk slots, reduction accumulators,
/// and where each chunk slot's current value is read from.
#[derive(Default)]
pub(crate) struct Scratch {
    sc: Vec<f64>,
    mat: Vec<f32>,
    ch: Vec<f32>,
    racc: Vec<f32>,
    /// Per chunk slot: the address its current value is read from: the slot itself, or
    /// (for an f32 load whose window covers the chunk, and no-op casts of it) the loaded
    /// tensor's memory, which no program of the launch writes (`plan::compile` declines a
    /// parameter both loaded and stored). Valid for the current chunk only.
    cur: Vec<*const f32>,
    /// The row loops' buffers (`super::softmax`, `super::norm`), grown on first use.
    row: Vec<f32>,
    /// The current launch's column-reduction partials (`super::colpass`), if any.
    pub parts: Option<super::colpass::Parts>,
    /// The current launch's number (`Fused::programs`, from 1; 0 for none).
    pub launch: u64,
    /// The launch whose norm `γ` and `β`, widened from bf16, `row` holds (`super::norm`).
    widened: u64,
}

impl Scratch {
    /// Grows the buffers to what `plan` needs (no allocation when already large enough).
    pub fn fit(&mut self, plan: &Plan) {
        grow(&mut self.sc, plan.scalars);
        grow(&mut self.mat, plan.mat_len);
        grow(&mut self.ch, plan.chunk_slots * SLOT);
        grow(&mut self.racc, plan.reduce_len);
        if self.cur.len() < plan.chunk_slots {
            self.cur.resize(plan.chunk_slots, std::ptr::null());
        }
    }
}

fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// Which loop runs a launch's programs: the chunk program, or a row loop over `[rows, n]`
/// tensors (see [`Plan::rows`]).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Path {
    Chunks,
    Softmax { rows: usize, n: usize },
    Norm { rows: usize, n: usize },
}

impl Plan {
    /// The path these arguments take: a matched row kernel whose tensors have the shapes its
    /// row loop reads, else the chunk program.
    pub fn rows(&self, args: &[Buffer]) -> Path {
        if let Some(sm) = &self.softmax
            && let Some((rows, n)) = sm.rows.dims(args)
        {
            return Path::Softmax { rows, n };
        }
        if let Some(nm) = &self.norm
            && let Some((rows, n)) = nm.rows.dims(args)
            && super::norm::fits(nm, args, n)
        {
            return Path::Norm { rows, n };
        }
        Path::Chunks
    }
}

/// Runs program `ids` of `plan` on `path` ([`Plan::rows`] of these arguments).
pub(crate) fn run_block(
    plan: &Plan,
    path: Path,
    s: &mut Scratch,
    ids: [usize; 3],
    args: &[Buffer],
) {
    match (path, &plan.softmax, &plan.norm) {
        (Path::Softmax { rows, n }, Some(sm), _) => {
            // `row` no longer holds any launch's `γ`: a worker may run another launch's
            // program between two of a norm launch's (rayon steals while it waits).
            s.widened = 0;
            super::softmax::run(sm, &mut s.row, ids[0]..ids[0] + 1, args, rows, n)
        }
        (Path::Norm { rows, n }, _, Some(nm)) => {
            let kept = (&mut s.widened, s.launch);
            super::norm::run(nm, &mut s.row, kept, ids[0], args, rows, n)
        }
        _ => steps(&plan.steps, s, ids, args),
    }
}

/// Runs the softmax row loop's programs `pids` (of a launch whose [`Plan::rows`] is `path`,
/// a [`Path::Softmax`]) as one run of rows: the same values as [`run_block`] of each.
pub(crate) fn softmax_programs(
    plan: &Plan,
    path: Path,
    s: &mut Scratch,
    pids: std::ops::Range<usize>,
    args: &[Buffer],
) {
    match (path, &plan.softmax) {
        (Path::Softmax { rows, n }, Some(sm)) => {
            // As in [`run_block`]: `row` no longer holds a norm's `γ`.
            s.widened = 0;
            super::softmax::run(sm, &mut s.row, pids, args, rows, n)
        }
        _ => unreachable!("softmax_programs on another path"),
    }
}

/// Runs only the top-level scalar steps of program `ids` and returns its scalar slots (for
/// plans whose other steps read them without writing any: [`super::transpose::whole`]).
pub(crate) fn scalars<'a>(
    plan: &Plan,
    s: &'a mut Scratch,
    ids: [usize; 3],
    args: &[Buffer],
) -> &'a [f64] {
    for st in &plan.steps {
        if let Step::Scalar { op, dtype, dst } = st {
            let v = scalar(op, *dtype, &s.sc, ids, args);
            s.sc[*dst as usize] = v;
        }
    }
    &s.sc
}

fn steps(list: &[Step], s: &mut Scratch, ids: [usize; 3], args: &[Buffer]) {
    for st in list {
        match st {
            Step::Scalar { op, dtype, dst } => {
                let v = scalar(op, *dtype, &s.sc, ids, args);
                s.sc[*dst as usize] = v;
            }
            Step::Group(g) => group(g, s, args),
            Step::Transpose(t) => super::transpose::run(t, &s.sc, args),
            Step::ColReduce(c) => {
                super::colreduce::run(c, &mut s.sc, &mut s.mat, s.parts.as_ref(), args)
            }
            Step::Trans {
                src,
                rows,
                cols,
                dst,
            } => {
                let (r, c) = (*rows, *cols);
                let (a, b) = if src < dst {
                    let (lo, hi) = s.mat.split_at_mut(*dst);
                    (&lo[*src..*src + r * c], &mut hi[..r * c])
                } else {
                    let (lo, hi) = s.mat.split_at_mut(*src);
                    (&hi[..r * c], &mut lo[*dst..*dst + r * c])
                };
                transpose(a, b, r, c);
            }
            Step::For {
                iv,
                lo,
                hi,
                step,
                inits,
                body,
                yields,
            } => {
                let (lo, hi) = (s.sc[*lo as usize] as i64, s.sc[*hi as usize] as i64);
                copies(inits, s);
                let mut x = lo;
                while x < hi {
                    s.sc[*iv as usize] = x as i32 as f64;
                    steps(body, s, ids, args);
                    copies(yields, s);
                    x += step;
                }
            }
        }
    }
}

/// `b (c × r) = aᵀ` for `a (r × c)`, in 8 × 8 blocks (both sides stay in a few cache lines).
fn transpose(a: &[f32], b: &mut [f32], r: usize, c: usize) {
    const B: usize = 8;
    assert!(a.len() >= r * c && b.len() >= r * c);
    for i0 in (0..r).step_by(B) {
        for j0 in (0..c).step_by(B) {
            for i in i0..(i0 + B).min(r) {
                for j in j0..(j0 + B).min(c) {
                    // SAFETY: i < r and j < c, so both indices are below r * c (asserted).
                    unsafe { *b.get_unchecked_mut(j * r + i) = *a.get_unchecked(i * c + j) };
                }
            }
        }
    }
}

fn copies(list: &[Copy], s: &mut Scratch) {
    for c in list {
        match c {
            Copy::Sc(a, b) => s.sc[*b as usize] = s.sc[*a as usize],
            Copy::Mat(a, b, n) => s.mat.copy_within(*a..*a + *n, *b),
        }
    }
}

/// Rounds a scalar to its dtype.
fn round(d: DType, v: f64) -> f64 {
    match d {
        DType::I32 => v as i64 as i32 as f64,
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::BF16 => chunk::round_bf16(v as f32) as f64,
        _ => v as f32 as f64,
    }
}

fn scalar(op: &SOp, dtype: DType, sc: &[f64], ids: [usize; 3], args: &[Buffer]) -> f64 {
    let g = |i: &u32| sc[*i as usize];
    let v = match op {
        SOp::ProgramId(a) => ids[*a as usize] as i32 as f64,
        SOp::Const(x) => *x,
        SOp::Dim(p, a) => args[*p].dims()[*a] as i32 as f64,
        SOp::Unary(u, a) => {
            if matches!(dtype, DType::I32 | DType::Bool) {
                g(a)
            } else {
                let mut x = [g(a) as f32];
                chunk::unary(*u, &mut x);
                x[0] as f64
            }
        }
        SOp::Binary(b, kind, x, y) => {
            let (x, y) = (g(x), g(y));
            match kind {
                Kind::F => chunk::bin_f(*b, x as f32, y as f32) as f64,
                Kind::I => {
                    let (p, q) = (x as i32, y as i32);
                    (match b {
                        BinaryOp::Add => p.wrapping_add(q),
                        BinaryOp::Sub => p.wrapping_sub(q),
                        BinaryOp::Mul => p.wrapping_mul(q),
                        BinaryOp::Div => {
                            if q == 0 {
                                0
                            } else {
                                p.wrapping_div(q)
                            }
                        }
                        BinaryOp::Max => p.max(q),
                        BinaryOp::Min => p.min(q),
                    }) as f64
                }
                Kind::B => chunk::bin_b(*b, x as f32, y as f32) as f64,
            }
        }
        SOp::Cmp(c, x, y) => c.eval(g(x), g(y)) as u8 as f64,
        SOp::Select(m, x, y) => {
            if g(m) != 0.0 {
                g(x)
            } else {
                g(y)
            }
        }
        SOp::Cast(from, a) => cast1(*from, dtype, g(a) as f32) as f64,
    };
    round(dtype, v)
}

/// Converts one value of kind `from` (held as f32) to `to` (rounding to bf16 is left to the
/// caller's dtype rounding).
#[inline(always)]
fn cast1(from: Kind, to: DType, x: f32) -> f32 {
    match (from, to) {
        (Kind::F, DType::I32) => x as i32 as f32,
        (_, DType::Bool) => (x != 0.0) as u8 as f32,
        _ => x,
    }
}

/// Reads an operand for row `r`, columns `c0 .. c0 + w`.
///
/// # Safety
/// `cur[k]` holds `w` readable values for every chunk slot `k` read (set by the member that
/// wrote the slot in this chunk); the slot read is not the one being written.
#[inline(always)]
pub(crate) unsafe fn read<'a>(
    src: Src,
    cur: *const *const f32,
    mat: *const f32,
    sc: &[f64],
    r: usize,
    c0: usize,
    w: usize,
) -> V<'a> {
    match src {
        Src::Chunk(k) => V::S(unsafe { std::slice::from_raw_parts(*cur.add(k as usize), w) }),
        Src::Mat { off, rows, cols } => {
            let ri = if rows == 1 { 0 } else { r };
            // SAFETY: the plan sized `mat` for every materialised tile.
            unsafe {
                if cols == 1 {
                    V::K(*mat.add(off + ri))
                } else {
                    V::S(std::slice::from_raw_parts(mat.add(off + ri * cols + c0), w))
                }
            }
        }
        Src::Scalar(k) => V::K(sc[k as usize] as f32),
    }
}

/// Where row `r`, columns `c0..` of a tile at `idx` lie in a buffer: the element offset of
/// column `c0 + lo` and the in-bounds column range `lo..hi` of the chunk (empty when outside).
#[inline(always)]
pub(crate) fn window(
    buf: &Buffer,
    idx: &[u32],
    sc: &[f64],
    rank: usize,
    r: usize,
    c0: usize,
    w: usize,
) -> (usize, usize, usize) {
    let dims = buf.dims();
    let n = dims.len();
    let mut base = 0usize;
    let mut stride = 1usize;
    // Walk axes from the last: the tile's axes first, then the fixed leading ones.
    let mut col_start = 0i64;
    for a in (0..n).rev() {
        let i = sc[idx[a] as usize] as i64;
        let pos = if a == n - 1 {
            col_start = i + c0 as i64;
            0
        } else if rank == 2 && a == n - 2 {
            i + r as i64
        } else {
            i
        };
        if a != n - 1 {
            if pos < 0 || pos >= dims[a] as i64 {
                return (0, 0, 0);
            }
            base += pos as usize * stride;
        }
        stride *= dims[a];
    }
    let cols = dims[n - 1] as i64;
    let lo = (-col_start).clamp(0, w as i64) as usize;
    let hi = (cols - col_start).clamp(0, w as i64) as usize;
    if lo >= hi {
        return (0, 0, 0);
    }
    (base + (col_start + lo as i64) as usize, lo, hi)
}

/// Runs a group ([`group_at_level`]). A store to a tensor past [`super::stream::large`]'s
/// threshold is streamed ([`super::stream::store`]); this thread's streaming stores are
/// fenced before the group returns.
fn group(g: &Group, s: &mut Scratch, args: &[Buffer]) {
    group_at_level(g, s, args);
    #[cfg(target_arch = "x86_64")]
    if g.members
        .iter()
        .any(|m| matches!(&m.op, COp::Store { param, .. } if super::stream::large(&args[*param])))
    {
        super::stream::fence();
    }
}

/// Runs a group with the loops built for the active SIMD level
/// ([`crate::backend::cpu::simd::active`]).
fn group_at_level(g: &Group, s: &mut Scratch, args: &[Buffer]) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::simd::active() >= crate::backend::cpu::simd::SimdLevel::Avx2 {
        // SAFETY: the active level is at most the detected one: AVX2 and FMA are present.
        return unsafe { group_avx2(g, s, args) };
    }
    group_portable(g, s, args)
}

/// The group loops built for the baseline ISA.
#[inline(never)]
fn group_portable(g: &Group, s: &mut Scratch, args: &[Buffer]) {
    group_body(g, s, args)
}

/// The group loops built with AVX2 and FMA (8-lane loads, stores, arithmetic, bf16
/// widening and rounding).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group_avx2(g: &Group, s: &mut Scratch, args: &[Buffer]) {
    group_body(g, s, args)
}

#[inline(always)]
fn group_body(g: &Group, s: &mut Scratch, args: &[Buffer]) {
    let Scratch {
        sc,
        mat,
        ch,
        racc,
        cur,
        ..
    } = s;
    let curp = cur.as_mut_ptr();
    let (rows, cols) = (g.rows, g.cols);
    let wmax = cols.min(CHUNK);
    let chp = ch.as_mut_ptr();
    let matp = mat.as_mut_ptr();
    // SAFETY (for `matw`): materialised regions of distinct values never overlap, and a
    // member writes only its own result's region.
    let matw = |off: usize, n: usize| unsafe { std::slice::from_raw_parts_mut(matp.add(off), n) };
    // Column reductions start from their identity.
    for m in &g.members {
        if let COp::Reduce {
            op,
            along_cols: false,
            out,
            ..
        } = &m.op
        {
            matw(*out, cols).fill(identity(*op));
        }
    }
    // Whole rows at a time while they qualify (see `direct_rows`); once a row does not, no
    // later row of the group does.
    let mut whole_rows = g.store_only && g.direct.is_some();
    let mut skip = 0;
    for r in 0..rows {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if whole_rows && let Some(ops) = &g.direct {
            // SAFETY: `ch` holds at least one slot (the group's load writes one); no other
            // member runs while the direct chain uses it.
            let buf = unsafe { std::slice::from_raw_parts_mut(chp, SLOT) };
            let k = direct_rows(g, ops, args, sc, buf, r, rows - r);
            if k > 0 {
                skip = k - 1;
                continue;
            }
            whole_rows = false;
        }
        // A store-only group computes just the columns some store writes (a ragged edge
        // tile, a [1, 1] launch of a [16, 1024] tile), and skips rows no store writes.
        let (mut c_lo, mut c_hi) = (0, cols);
        if g.store_only {
            (c_lo, c_hi) = (cols, 0);
            for m in &g.members {
                if let COp::Store {
                    param, idx, rank, ..
                } = &m.op
                {
                    let (_, lo, hi) = window(&args[*param], idx, sc, *rank, r, 0, cols);
                    if hi > lo {
                        (c_lo, c_hi) = (c_lo.min(lo), c_hi.max(hi));
                    }
                }
            }
            if c_lo >= c_hi {
                continue;
            }
        }
        for m in &g.members {
            if let COp::Reduce {
                op,
                along_cols: true,
                acc,
                ..
            } = &m.op
            {
                racc[*acc] = identity(*op);
            }
        }
        let mut c0 = c_lo;
        while c0 < c_hi {
            let w = (c_hi - c0).min(wmax);
            if r + 1 < rows {
                next_row_lines(g, args, sc, r + 1, c0, w);
            }
            if let Some(ops) = &g.direct
                // SAFETY: as for `direct_rows` above.
                && direct(g, ops, args, sc, unsafe { std::slice::from_raw_parts_mut(chp, SLOT) }, r, c0, w)
            {
                c0 += w;
                continue;
            }
            if let Some(p) = &g.binary
                && super::pipe::run(p, g, args, sc, r, c0, w)
            {
                c0 += w;
                continue;
            }
            // SAFETY: `mat` holds this program's materialised tiles (sized by `Scratch::fit`).
            if let Some(ch) = &g.chain
                && unsafe { super::chain::run(ch, g, args, sc, matp, r, c0, w) }
            {
                c0 += w;
                continue;
            }
            for m in &g.members {
                // SAFETY: slots are `SLOT` apart inside `ch` and `cur` has one entry per slot
                // (both sized by `Scratch::fit`); a member's destination slot differs from
                // the slots it reads (plan::group), except an in-place unary op, which reads
                // its operand before writing the slot. Writing a slot points `cur` back at it.
                let own = |d: u16| unsafe { chp.add(d as usize * SLOT) };
                let dst = |d: u16| unsafe {
                    *curp.add(d as usize) = own(d);
                    std::slice::from_raw_parts_mut(own(d), w)
                };
                // Reads a slot's current value (its own memory or the tensor it aliases).
                let cur_of = |d: u16| unsafe { *curp.add(d as usize) };
                let alias = |d: u16, p: *const f32| unsafe { *curp.add(d as usize) = p };
                let rd = |src: Src| unsafe { read(src, curp, matp, sc, r, c0, w) };
                let d = match &m.op {
                    COp::Load {
                        param,
                        idx,
                        other,
                        rank,
                        dst: d,
                    } => {
                        let buf = &args[*param];
                        let (at, lo, hi) = window(buf, idx, sc, *rank, r, c0, w);
                        if (lo, hi) == (0, w) && buf.dtype == DType::F32 && !m.round_bf16 {
                            // The whole chunk is inside an f32 tensor: read it there, no copy.
                            assert!((at + w) * 4 <= buf.len, "fused load out of bounds");
                            // SAFETY: in bounds (checked above); loaded tensors are not
                            // written during the launch (see `Scratch::cur`).
                            alias(*d, unsafe { (buf.ptr as *const f32).add(at) });
                        } else {
                            let o = dst(*d);
                            o[..lo].fill(*other);
                            o[hi..].fill(*other);
                            chunk::load(buf, at, &mut o[lo..hi]);
                        }
                        Some(*d)
                    }
                    COp::Store {
                        param,
                        idx,
                        rank,
                        src,
                    } => {
                        let buf = &args[*param];
                        let (at, lo, hi) = window(buf, idx, sc, *rank, r, c0, w);
                        if hi > lo {
                            let nt = super::stream::streams(buf, at, hi - lo);
                            super::stream::store(buf, at, rd(*src), lo, hi, nt);
                        }
                        None
                    }
                    COp::Unary { op, a, dst: d } => {
                        // In place when the plan gave the result its operand's slot and the
                        // value is in that slot (not read from a tensor).
                        let in_place =
                            matches!(a, Src::Chunk(k) if k == d && cur_of(*d) == own(*d));
                        if !in_place {
                            let v = rd(*a);
                            // SAFETY: `v` is another slot, a tensor or a materialised
                            // tile, never slot `d`'s own memory (`in_place` is false).
                            let o = unsafe { std::slice::from_raw_parts_mut(own(*d), w) };
                            v.copy_to(o);
                        }
                        let o = dst(*d);
                        chunk::unary(*op, o);
                        Some(*d)
                    }
                    COp::Binary {
                        op,
                        kind,
                        a,
                        b,
                        dst: d,
                    } => {
                        let o = dst(*d);
                        let (a, b) = (rd(*a), rd(*b));
                        match kind {
                            Kind::F => match op {
                                BinaryOp::Add => chunk::zip(a, b, o, |x, y| x + y),
                                BinaryOp::Sub => chunk::zip(a, b, o, |x, y| x - y),
                                BinaryOp::Mul => chunk::zip(a, b, o, |x, y| x * y),
                                BinaryOp::Div => chunk::zip(a, b, o, |x, y| x / y),
                                op => chunk::zip(a, b, o, |x, y| chunk::bin_f(*op, x, y)),
                            },
                            Kind::I => match op {
                                BinaryOp::Add => chunk::zip(a, b, o, |x, y| x + y),
                                BinaryOp::Sub => chunk::zip(a, b, o, |x, y| x - y),
                                BinaryOp::Max => chunk::zip(a, b, o, f32::max),
                                _ => chunk::zip(a, b, o, f32::min),
                            },
                            Kind::B => chunk::zip(a, b, o, |x, y| chunk::bin_b(*op, x, y)),
                        }
                        Some(*d)
                    }
                    COp::Cmp { op, a, b, dst: d } => {
                        let o = dst(*d);
                        chunk::zip(rd(*a), rd(*b), o, |x, y| op.eval(x, y) as u8 as f32);
                        Some(*d)
                    }
                    COp::Select {
                        m: mk,
                        a,
                        b,
                        dst: d,
                    } => {
                        let o = dst(*d);
                        chunk::select(rd(*mk), rd(*a), rd(*b), o);
                        Some(*d)
                    }
                    COp::Cast {
                        a,
                        to,
                        from,
                        dst: d,
                    } => {
                        let float = matches!(to, DType::F32 | DType::BF16);
                        match a {
                            // A float cast that rounds nothing of a value read from a tensor
                            // reads that tensor too (a slot's own memory may be reused by a
                            // later member, a tensor's is not).
                            Src::Chunk(k) if float && !m.round_bf16 && cur_of(*k) != own(*k) => {
                                alias(*d, cur_of(*k));
                            }
                            _ => {
                                let o = dst(*d);
                                rd(*a).copy_to(o);
                                if !float {
                                    o.iter_mut().for_each(|x| *x = cast1(*from, *to, *x));
                                }
                            }
                        }
                        Some(*d)
                    }
                    COp::Full { x, dst: d } => {
                        dst(*d).fill(*x);
                        Some(*d)
                    }
                    COp::Arange { dst: d } => {
                        for (j, o) in dst(*d).iter_mut().enumerate() {
                            *o = (c0 + j) as f32;
                        }
                        Some(*d)
                    }
                    COp::Reduce {
                        op,
                        a,
                        along_cols,
                        out,
                        acc,
                        ..
                    } => {
                        let a = rd(*a);
                        if *along_cols {
                            let part = a.reduce(*op, w);
                            racc[*acc] = combine(*op, racc[*acc], part);
                        } else {
                            // One loop per (op, operand kind), with no per-element
                            // dispatch, so it vectorises (the same `combine` per element).
                            let accs = matw(*out + c0, w);
                            match (op, a) {
                                (TileReduce::Sum, V::S(x)) => {
                                    accs.iter_mut().zip(x).for_each(|(t, x)| *t += *x)
                                }
                                (TileReduce::Sum, V::K(x)) => accs.iter_mut().for_each(|t| *t += x),
                                (TileReduce::Max, V::S(x)) => accs
                                    .iter_mut()
                                    .zip(x)
                                    .for_each(|(t, x)| *t = max_nan(*t, *x)),
                                (TileReduce::Max, V::K(x)) => {
                                    accs.iter_mut().for_each(|t| *t = max_nan(*t, x))
                                }
                            }
                        }
                        None
                    }
                };
                if let Some(d) = d {
                    if m.round_bf16 {
                        // Rounded results are always in their slot (never aliased above).
                        // SAFETY: slot `d`'s own `w` values.
                        chunk::round_bf16_slice(unsafe {
                            std::slice::from_raw_parts_mut(own(d), w)
                        });
                    }
                    if let Some(off) = m.mat {
                        let v = rd(Src::Chunk(d));
                        let V::S(v) = v else { unreachable!() };
                        matw(off + r * cols + c0, w).copy_from_slice(v);
                    }
                }
            }
            c0 += w;
        }
        for m in &g.members {
            if let COp::Reduce {
                along_cols: true,
                out,
                scalar,
                acc,
                ..
            } = &m.op
            {
                let mut v = racc[*acc];
                if m.round_bf16 {
                    v = chunk::round_bf16(v);
                }
                matw(*out + r, 1)[0] = v;
                if let Some(k) = scalar {
                    sc[*k as usize] = v as f64;
                }
            }
        }
    }
    for m in &g.members {
        if let COp::Reduce {
            along_cols: false,
            out,
            ..
        } = &m.op
            && m.round_bf16
        {
            chunk::round_bf16_slice(matw(*out, cols));
        }
    }
}

/// Asks for the large loaded tensors' lines of chunk `c0 .. c0 + w` of row `r`
/// ([`super::stream::prefetch`]) where that chunk does not follow row `r - 1`'s in memory:
/// a tile's rows narrower than a tensor's lie a page or more apart, where the hardware
/// prefetchers stop.
#[inline(always)]
fn next_row_lines(g: &Group, args: &[Buffer], sc: &[f64], r: usize, c0: usize, w: usize) {
    for m in &g.members {
        if let COp::Load {
            param,
            idx,
            rank: 2,
            ..
        } = &m.op
        {
            let b = &args[*param];
            let (at, lo, hi) = window(b, idx, sc, 2, r, c0, w);
            let (before, lo0, hi0) = window(b, idx, sc, 2, r - 1, c0, w);
            if hi > lo && before + (hi0 - lo0) != at {
                super::stream::prefetch(b, at, hi - lo);
            }
        }
    }
}

/// A direct group's load (first member) and store (last member): (parameter, index, rank)
/// of each.
#[inline(always)]
fn direct_io(g: &Group) -> Option<((usize, &[u32], usize), (usize, &[u32], usize))> {
    match (&g.members.first()?.op, &g.members.last()?.op) {
        (
            COp::Load {
                param: pi,
                idx: ii,
                rank: ri,
                ..
            },
            COp::Store {
                param: po,
                idx: io,
                rank: ro,
                ..
            },
        ) => Some(((*pi, ii, *ri), (*po, io, *ro))),
        _ => None,
    }
}

/// A [`Group::direct`] chunk (see [`direct_run`]). `false` (nothing done) unless both
/// windows cover all `w` columns.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn direct(
    g: &Group,
    ops: &[DirectStep],
    args: &[Buffer],
    sc: &[f64],
    buf: &mut [f32],
    r: usize,
    c0: usize,
    w: usize,
) -> bool {
    let Some(((pi, ii, ri), (po, io, ro))) = direct_io(g) else {
        return false;
    };
    let (bi, bo) = (&args[pi], &args[po]);
    let (at_i, lo_i, hi_i) = window(bi, ii, sc, ri, r, c0, w);
    let (at_o, lo_o, hi_o) = window(bo, io, sc, ro, r, c0, w);
    if (lo_i, hi_i, lo_o, hi_o) != (0, w, 0, w) {
        return false;
    }
    let nt = super::stream::streams(bo, at_o, w);
    direct_run(ops, &g.lut, bi, at_i, bo, at_o, w, buf, nt);
    true
}

/// Runs a direct chain over `n` contiguous elements: input `bi` from element `at_i`, output
/// `bo` from `at_o`, streamed when `nt` ([`super::stream::large`] of `bo`; the caller
/// fences). A bf16 input is looked up in the chain's table ([`super::lut`]; a bf16 gelu
/// computed where [`super::gelubf16`] can, with the same results, and streamed from its loop
/// when `nt`). Otherwise an f32
/// output written without `nt` receives the widened input and the steps run there; other
/// outputs are written from `buf` (f32, the ops run there) piece by piece with
/// [`super::stream::store`], a bf16 output's last rounding left to the store, which rounds
/// the same way (rounding twice changes nothing).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn direct_run(
    ops: &[DirectStep],
    lut: &super::lut::Lut,
    bi: &Buffer,
    at_i: usize,
    bo: &Buffer,
    at_o: usize,
    n: usize,
    buf: &mut [f32],
    nt: bool,
) {
    use super::stream::{out_f32, out_u16, put_f32, put_u16};
    if bi.dtype == DType::BF16 {
        assert!((at_i + n) * 2 <= bi.len, "fused load out of bounds");
        // SAFETY: in bounds (checked above); bf16 storage, not written during the launch.
        let s = unsafe { std::slice::from_raw_parts((bi.ptr as *const u16).add(at_i), n) };
        let piece = buf.len().min(CHUNK);
        if bo.dtype == DType::BF16 {
            let t = lut.bf16(ops);
            if !nt {
                // SAFETY: this program's or range's output elements (disjoint within a launch;
                // the output is never a loaded parameter, `plan::compile`).
                return super::gelubf16::look(ops, t, s, unsafe { out_u16(bo, at_o, n) });
            }
            // SAFETY: as above; `nt`: the caller fences.
            let far = super::stream::past_cache(bi.len + bo.len);
            if unsafe { super::gelubf16::look_stream(ops, t, s, out_u16(bo, at_o, n), far) } {
                return;
            }
            // SAFETY: as above.
            if unsafe { super::lut::look_u16_stream(t, s, out_u16(bo, at_o, n)) } {
                return;
            }
            let mut h = [0u16; CHUNK];
            for k in (0..n).step_by(piece) {
                let m = (n - k).min(piece);
                super::gelubf16::look(ops, t, &s[k..k + m], &mut h[..m]);
                // SAFETY: `nt`: the caller's contract (`large`, fenced).
                unsafe { put_u16(bo, at_o + k, &h[..m], true) };
            }
        } else {
            let t = lut.f32(ops);
            if !nt {
                // SAFETY: as above.
                return super::lut::look_f32(t, s, unsafe { out_f32(bo, at_o, n) });
            }
            // SAFETY: as above; `nt`: the caller fences.
            if unsafe { super::lut::look_f32_stream(t, s, out_f32(bo, at_o, n)) } {
                return;
            }
            // SAFETY: as above.
            if unsafe { super::lut::look_f32_each_stream(t, s, out_f32(bo, at_o, n)) } {
                return;
            }
            for k in (0..n).step_by(piece) {
                let m = (n - k).min(piece);
                super::lut::look_f32(t, &s[k..k + m], &mut buf[..m]);
                // SAFETY: as above.
                unsafe { put_f32(bo, at_o + k, &buf[..m], true) };
            }
        }
        return;
    }
    if bo.dtype == DType::F32 && !nt {
        // SAFETY: as above.
        let o = unsafe { out_f32(bo, at_o, n) };
        let rest = load_first(ops, bi, at_i, o);
        super::lut::steps(rest, o);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if let (DType::F32, [DirectStep::Unary(UnaryOp::Gelu)]) = (bo.dtype, ops)
        && crate::backend::cpu::vmath::gelu512::available()
    {
        // gelu alone at AVX-512: streamed from gelu's loop itself (`nt` here).
        assert!(
            (at_i + n) * 4 <= bi.len && (at_o + n) * 4 <= bo.len,
            "fused gelu out of bounds"
        );
        // SAFETY: in bounds (checked above); an f32 input (bf16 returned above) not written
        // during the launch, an output that is never a loaded parameter (`plan::compile`),
        // so the two do not overlap; this range's output elements; AVX-512F/DQ
        // (`available`); the caller fences the streaming stores (`nt`).
        unsafe {
            crate::backend::cpu::vmath::gelu512::map_stream(
                (bi.ptr as *const f32).add(at_i),
                (bo.ptr as *mut f32).add(at_o),
                n,
                super::stream::past_cache(bi.len + bo.len),
            )
        };
        return;
    }
    let ops = match ops.split_last() {
        Some((DirectStep::Round, rest)) if bo.dtype == DType::BF16 => rest,
        _ => ops,
    };
    let piece = buf.len().min(CHUNK);
    let mut k = 0;
    while k < n {
        let m = (n - k).min(piece);
        let v = &mut buf[..m];
        let rest = load_first(ops, bi, at_i + k, v);
        super::lut::steps(rest, v);
        super::stream::store(bo, at_o + k, chunk::V::S(v), 0, m, nt);
        k += m;
    }
}

/// Fills `o` with f32 input `bi`'s elements from `at` with the chain's first step applied,
/// and returns the steps left: a leading gelu of an f32 input reads the input in
/// `vmath::gelu_into`'s loop (the same bits as loading, then `vmath::gelu` in place), other
/// chains load (widen) the input as is and return every step.
#[inline(always)]
fn load_first<'a>(
    ops: &'a [DirectStep],
    bi: &Buffer,
    at: usize,
    o: &mut [f32],
) -> &'a [DirectStep] {
    let n = o.len();
    if let (DType::F32, Some((DirectStep::Unary(UnaryOp::Gelu), rest))) =
        (bi.dtype, ops.split_first())
    {
        assert!((at + n) * 4 <= bi.len, "fused load out of bounds");
        // SAFETY: in bounds (checked above); f32 storage, not written during the launch (the
        // output is never a loaded parameter, `plan::compile`), so it does not overlap `o`.
        let s = unsafe { std::slice::from_raw_parts((bi.ptr as *const f32).add(at), n) };
        crate::backend::cpu::vmath::gelu_into(s, o);
        return rest;
    }
    chunk::load(bi, at, o);
    ops
}

/// A direct group over whole tensor rows: when row `r`'s load and store windows each span a
/// whole row of their tensor (`w` columns from column 0, the same `w` in both) and the next
/// rows follow in memory, runs rows `r ..` (at most `left`, while both tensors have rows) as
/// one [`direct_run`]. Returns how many rows
/// it ran (0 when fewer than two qualify: the caller runs row `r` and the rows after it chunk
/// by chunk, as none of them qualifies either: the windows' columns are the same on every
/// row, and rows past the end of a tensor stay past it). The tile's columns past `w` are
/// outside both tensors, which a store-only group skips anyway. Inlined into the caller, so
/// that widening and narrowing bf16 are compiled for the caller's SIMD level.
#[inline(always)]
fn direct_rows(
    g: &Group,
    ops: &[DirectStep],
    args: &[Buffer],
    sc: &[f64],
    buf: &mut [f32],
    r: usize,
    left: usize,
) -> usize {
    let Some(((pi, ii, 2), (po, io, 2))) = direct_io(g) else {
        return 0;
    };
    let (bi, bo) = (&args[pi], &args[po]);
    let (di, dout) = (bi.dims(), bo.dims());
    let (Some(&w), Some(&wi)) = (dout.last(), di.last()) else {
        return 0;
    };
    if w != wi || w == 0 || w > g.cols || left < 2 || di.len() < 2 || dout.len() < 2 {
        return 0;
    }
    if di[di.len() - 2] < 2 || dout[dout.len() - 2] < 2 {
        return 0;
    }
    let (at_i, lo_i, hi_i) = window(bi, ii, sc, 2, r, 0, w);
    let (at_o, lo_o, hi_o) = window(bo, io, sc, 2, r, 0, w);
    if (lo_i, hi_i, lo_o, hi_o) != (0, w, 0, w) {
        return 0;
    }
    // Row r starts a row of each tensor (column 0 to its end): the rows after it follow
    // contiguously up to the end of the tensor's second-to-last axis.
    let rows_from = |d: &[usize], at: usize| {
        let n = d[d.len() - 2];
        n - (at / w) % n
    };
    let k = left.min(rows_from(di, at_i)).min(rows_from(dout, at_o));
    if k < 2 {
        return 0;
    }
    let nt = super::stream::streams(bo, at_o, k * w);
    direct_run(ops, &g.lut, bi, at_i, bo, at_o, k * w, buf, nt);
    k
}

#[inline(always)]
fn identity(op: TileReduce) -> f32 {
    match op {
        TileReduce::Sum => 0.0,
        TileReduce::Max => f32::NEG_INFINITY,
    }
}

#[inline(always)]
fn combine(op: TileReduce, a: f32, x: f32) -> f32 {
    match op {
        TileReduce::Sum => a + x,
        TileReduce::Max => max_nan(a, x),
    }
}

/// The max of two values, NaN if either is NaN (the interpreter's rule), without branches
/// (so a loop of it vectorises).
#[inline(always)]
fn max_nan(a: f32, x: f32) -> f32 {
    let m = a.max(x);
    if a.is_nan() | x.is_nan() { f32::NAN } else { m }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::fused::rowmatch::{Norm, Rows, Softmax};

    fn plan(softmax: Option<Softmax>, norm: Option<Norm>) -> Plan {
        Plan {
            steps: Vec::new(),
            scalars: 0,
            mat_len: 0,
            chunk_slots: 0,
            reduce_len: 0,
            covers: Vec::new(),
            softmax,
            norm,
        }
    }

    fn buffer(dtype: DType, ptr: *mut u8, shape: [usize; 3], rank: usize) -> Buffer {
        Buffer {
            dtype,
            shape,
            rank,
            ptr,
            len: shape.iter().product::<usize>() * dtype.size_bytes(),
            writable: true,
        }
    }

    /// A worker's scratch keeps a norm launch's widened bf16 `γ` for that launch's later
    /// programs (`widened`); a softmax program of another launch run on the same worker in
    /// between (rayon runs other jobs while a worker waits) overwrites `row`, so the norm's
    /// next program must widen `γ` again: its output the same bits as from a fresh scratch.
    /// (The softmax's first row of exponentials covers offsets 1023 .. 4096 of `row` at
    /// every level, so the norm's `γ`, widened to offsets 1024 .. 1280, is overwritten.)
    #[test]
    fn a_softmax_program_between_a_norm_launchs_programs_does_not_leave_a_stale_gamma() {
        let n = 256;
        let seed = crate::backend::cpu::clock_seed() | 1;
        let mut s0 = seed;
        let mut rnd = move || {
            s0 ^= s0 << 13;
            s0 ^= s0 >> 7;
            s0 ^= s0 << 17;
            (s0 >> 40) as f32 / (1u64 << 24) as f32
        };
        let x: Vec<f32> = (0..2 * n).map(|_| rnd() * 8.0 - 4.0).collect();
        // `γ` in [2, 4): never an exponential of the softmax (at most 1).
        let g: Vec<u16> = (0..n)
            .map(|_| half::bf16::from_f32(2.0 + 2.0 * rnd()).to_bits())
            .collect();
        let nm = Norm {
            rows: Rows {
                x: 0,
                out: 1,
                br: 1,
                bc: n,
                round_bf16: false,
            },
            gamma: 2,
            beta: None,
            layer: false,
            eps: 1e-5,
        };
        let norm = plan(None, Some(nm));
        let npath = Path::Norm { rows: 2, n };
        let run_norm = |s: &mut Scratch, launch: u64, out: &mut Vec<f32>, pid: usize| {
            let args = [
                buffer(DType::F32, x.as_ptr() as *mut u8, [2, n, 1], 2),
                buffer(DType::F32, out.as_mut_ptr() as *mut u8, [2, n, 1], 2),
                buffer(DType::BF16, g.as_ptr() as *mut u8, [n, 1, 1], 1),
            ];
            s.launch = launch;
            run_block(&norm, npath, s, [pid, 0, 0], &args);
        };
        let sn = 4096;
        let mut sx: Vec<f32> = (0..sn).map(|_| rnd() * 8.0 - 4.0).collect();
        let mut so = vec![0.0f32; sn];
        let softmax = plan(
            Some(Softmax {
                rows: Rows {
                    x: 0,
                    out: 1,
                    br: 1,
                    bc: sn,
                    round_bf16: false,
                },
            }),
            None,
        );
        let sargs = [
            buffer(DType::F32, sx.as_mut_ptr() as *mut u8, [1, sn, 1], 2),
            buffer(DType::F32, so.as_mut_ptr() as *mut u8, [1, sn, 1], 2),
        ];
        let (mut got, mut want) = (vec![0.0f32; 2 * n], vec![0.0f32; 2 * n]);
        let mut s = Scratch::default();
        run_norm(&mut s, 7, &mut got, 0);
        s.launch = 8;
        run_block(
            &softmax,
            Path::Softmax { rows: 1, n: sn },
            &mut s,
            [0, 0, 0],
            &sargs,
        );
        run_norm(&mut s, 7, &mut got, 1);
        let mut fresh = Scratch::default();
        for pid in 0..2 {
            run_norm(&mut fresh, 7, &mut want, pid);
        }
        if let Some(j) = (0..2 * n).find(|&j| got[j].to_bits() != want[j].to_bits()) {
            panic!("element {j}: {} != {} (seed {seed})", got[j], want[j]);
        }
    }
}
