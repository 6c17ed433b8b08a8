//! The AVX-512 gelu kernels ([`super::gelu512`]) lane by lane against the scalar
//! `gelu1::<Fused>` (NaN payloads aside): [`map`] at every length up to 70 and a few longer
//! ones, offsets 0..4, in place and into another slice; [`after`] for every op, side and
//! operand kind, pairs and triples of ops (one FMA each) and a four-op chain (per-vector
//! dispatch), against the ops computed one by one; [`after_rows`] over many rows from a
//! column offset; both with edge lanes (range ends, NaN, ±inf, subnormal results) placed in
//! every vector of a four-vector step, its remainder and its masked last vector.

use super::arith::Fused;
use super::gelu::gelu1;
use super::gelu512::{Pre, after, after_rows, available, map, map_stream};
use super::tests::Rng;
use tessera_ir::graph::BinaryOp;

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Inputs over every form: mostly `|x| < 4.5` (so that pairs skip `fix`), with `x >= 8`,
/// the `exp` form, NaN, ±inf, ±0, subnormals and interval edges mixed in.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut r = Rng(seed);
    let special = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e-40,
        -1e-40,
        4.5,
        -4.5,
        8.0,
        -8.0,
        7.999_999,
        -4.499_999_5,
        0.5,
        -3.5,
        1e30,
        -1e30,
    ];
    (0..n)
        .map(|_| match r.next_u64() % 16 {
            0 => special[(r.next_u64() % special.len() as u64) as usize],
            1 => r.uniform(-16.0, 16.0),
            _ => r.uniform(-4.4, 4.4),
        })
        .collect()
}

#[test]
fn map_matches_gelu1_at_every_length_and_offset() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    let lens = (0..=70).chain([95, 96, 97, 1000, 1037]);
    for (t, n) in lens.enumerate() {
        for off in 0..4 {
            // Central values only, then one lane of another form at each position.
            let mut inputs = vec![values(t as u64 * 4 + off as u64, n + off)];
            let mut calm: Vec<f32> = values(7, n + off)
                .iter()
                .map(|x| x.clamp(-4.4, 4.4))
                .collect();
            calm.iter_mut()
                .for_each(|x| *x = if x.is_nan() { 0.25 } else { *x });
            inputs.push(calm.clone());
            for p in (off..n + off).step_by(7) {
                let mut c = calm.clone();
                c[p] = [-6.0, 9.0, f32::NAN][p % 3];
                inputs.push(c);
            }
            for src in &inputs {
                // A streamed destination `off` floats past a 64-byte boundary (plain stores up
                // to the next one, then streamed).
                check_map(&src[off..], off, "lengths");
            }
        }
    }
}

/// `op(a, b)` as the interpreter computes it in f32.
fn apply(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        _ => unreachable!(),
    }
}

/// Runs `after` on `chain` (op, left, row or constant) over `x` and compares each element
/// with the ops one by one, then `gelu1::<Fused>`.
fn check(chain: &[(BinaryOp, bool, Option<usize>, f32)], rows: &[Vec<f32>], x: &[f32]) {
    let n = x.len();
    let pre: Vec<Pre> = chain
        .iter()
        .map(|&(op, left, row, c)| (op, left, row.map(|r| &rows[r][..n]), c))
        .collect();
    let mut y = vec![f32::NAN; n];
    // SAFETY: AVX-512F/DQ (the caller checked).
    unsafe { after(&pre, x, &mut y) };
    for i in 0..n {
        let mut v = x[i];
        for &(op, left, row, c) in chain {
            let k = row.map_or(c, |r| rows[r][i]);
            v = if left {
                apply(op, v, k)
            } else {
                apply(op, k, v)
            };
        }
        let want = gelu1::<Fused>(v);
        assert!(
            same(y[i], want),
            "{chain:?} n={n} i={i} x={:e}: {:e} vs {want:e}",
            x[i],
            y[i]
        );
    }
}

#[test]
fn after_matches_the_ops_then_gelu1() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    use BinaryOp::*;
    let ops = [Add, Sub, Mul, Div];
    let consts = [1.0, -0.0, 0.0, -2.5, 0.75, f32::INFINITY, f32::NAN];
    let rows: Vec<Vec<f32>> = (0..3).map(|r| values(100 + r, 300)).collect();
    let mut singles = Vec::new();
    for op in ops {
        for left in [true, false] {
            singles.push((op, left, Some(0), 0.0));
            for c in consts {
                singles.push((op, left, None, c));
            }
        }
    }
    let lens = (0..=70).chain([256, 257, 300]);
    for n in lens.clone() {
        let x = values(200 + n as u64, n);
        for &s in &singles {
            check(&[s], &rows, &x);
        }
    }
    // Pairs (every op and side, row then constant and constant then row) and triples.
    let mut r = Rng(9);
    for n in [0, 1, 15, 16, 17, 33, 70, 300] {
        let x = values(300 + n as u64, n);
        for a in ops {
            for b in ops {
                for (la, lb) in [(true, true), (false, true), (true, false), (false, false)] {
                    let c = consts[(r.next_u64() % consts.len() as u64) as usize];
                    check(&[(a, la, Some(0), 0.0), (b, lb, None, c)], &rows, &x);
                    check(&[(a, la, None, c), (b, lb, Some(1), 0.0)], &rows, &x);
                }
            }
        }
        for _ in 0..40 {
            let mut pick = || {
                let op = ops[(r.next_u64() % 3) as usize];
                let left = r.next_u64() & 1 == 0;
                let row = (r.next_u64() % 4) as usize;
                let c = consts[(r.next_u64() % consts.len() as u64) as usize];
                (op, left, (row < 3).then_some(row), c)
            };
            let three = [pick(), pick(), pick()];
            check(&three, &rows, &x);
            let four = [pick(), pick(), pick(), pick()];
            check(&four, &rows, &x);
        }
    }
    // The bench's chain `gelu(x · y + 1)`.
    for n in lens {
        let x = values(400 + n as u64, n);
        check(
            &[(Mul, true, Some(2), 0.0), (Add, true, None, 1.0)],
            &rows,
            &x,
        );
    }
}

/// `after_rows` over `n` values from column `col` of rows `c` long (row operands one row,
/// read at each value's column) against the ops one by one, then `gelu1::<Fused>`.
fn check_rows(
    chain: &[(BinaryOp, bool, Option<usize>, f32)],
    rows: &[Vec<f32>],
    x: &[f32],
    col: usize,
    c: usize,
) {
    check_rows_at(chain, rows, x, col, c, col % 5)
}

/// [`check_rows`] with the streamed destination `off` floats past a 64-byte boundary.
fn check_rows_at(
    chain: &[(BinaryOp, bool, Option<usize>, f32)],
    rows: &[Vec<f32>],
    x: &[f32],
    col: usize,
    c: usize,
    off: usize,
) {
    let n = x.len();
    let pre: Vec<Pre> = chain
        .iter()
        .map(|&(op, left, row, k)| (op, left, row.map(|r| &rows[r][..c]), k))
        .collect();
    let mut y = vec![f32::NAN; n];
    // A destination `off` floats past a 64-byte boundary (streamed from the next one).
    let mut sbuf = vec![f32::NAN; n + 16 + off];
    let a = sbuf.as_ptr().align_offset(64) + off;
    let ys = &mut sbuf[a..a + n];
    // SAFETY: AVX-512F/DQ (the caller checked); the streaming stores are fenced below.
    unsafe {
        after_rows(&pre, x, &mut y, col, c, false, false);
        after_rows(&pre, x, ys, col, c, true, true);
        core::arch::x86_64::_mm_sfence();
    }
    for i in 0..n {
        let mut v = x[i];
        for &(op, left, row, k) in chain {
            let k = row.map_or(k, |r| rows[r][(col + i) % c]);
            v = if left {
                apply(op, v, k)
            } else {
                apply(op, k, v)
            };
        }
        let want = gelu1::<Fused>(v);
        assert!(
            same(y[i], want) && same(ys[i], want),
            "{chain:?} n={n} col={col} c={c} i={i}: {:e} / streamed {:e} vs {want:e}",
            y[i],
            ys[i]
        );
    }
}

#[test]
fn after_rows_matches_the_ops_then_gelu1() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    use BinaryOp::*;
    let rows: Vec<Vec<f32>> = (0..2).map(|r| values(500 + r, 1100)).collect();
    let chains: [&[(BinaryOp, bool, Option<usize>, f32)]; 4] = [
        &[(Mul, true, Some(0), 0.0), (Add, true, None, 1.0)],
        &[
            (Sub, false, Some(1), 0.0),
            (Mul, true, None, -0.5),
            (Sub, true, Some(0), 0.0),
        ],
        &[(Add, false, None, 2.0)],
        &[(Div, true, Some(0), 0.0), (Add, true, None, 1.0)],
    ];
    for (t, (c, col, n)) in [
        (1, 0, 5),
        (300, 0, 11100),
        (300, 17, 2000),
        (1025, 1000, 3000),
        (16, 3, 1037),
        (1100, 5, 1095),
    ]
    .into_iter()
    .enumerate()
    {
        let x = values(600 + t as u64, n);
        for ch in chains {
            check_rows(ch, &rows, &x, col, c);
        }
    }
}

/// Inputs with many lanes in the `exp` form (`x <= -4.5`), NaN of both signs, ±inf and
/// `x >= 8`: vectors with several tail lanes, and whole runs of them.
fn tail_heavy(seed: u64, n: usize) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| match r.next_u64() % 8 {
            0 => {
                [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY][(r.next_u64() % 4) as usize]
            }
            1 | 2 => r.uniform(-20.0, -4.5),
            3 => r.uniform(8.0, 30.0),
            _ => r.uniform(-4.4, 7.9),
        })
        .collect()
}

#[test]
fn after_rows_with_many_tail_lanes_matches_the_ops_then_gelu1() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    use BinaryOp::*;
    let rows: Vec<Vec<f32>> = (0..2).map(|r| tail_heavy(700 + r, 1100)).collect();
    let ones = vec![1.0f32; 1100];
    let rows = [rows[0].clone(), rows[1].clone(), ones];
    let chains: [&[(BinaryOp, bool, Option<usize>, f32)]; 5] = [
        &[(Mul, true, Some(2), 0.0)],
        &[(Mul, true, Some(0), 0.0), (Add, true, None, 1.0)],
        &[(Sub, true, None, 3.0), (Mul, false, Some(1), 0.0)],
        &[(Sub, true, Some(0), 0.0), (Sub, false, None, -1.5)],
        &[
            (Add, false, Some(1), 0.0),
            (Mul, true, None, 0.5),
            (Sub, false, Some(0), 0.0),
        ],
    ];
    // Rows of every kind of width; the vectors waiting for the tail cross rows and blocks.
    for (t, (c, col, n)) in [
        (1024, 0, 8192),
        (300, 7, 6000),
        (37, 0, 37 * 20),
        (1, 0, 40),
        (1100, 1099, 4400),
    ]
    .into_iter()
    .enumerate()
    {
        let x = tail_heavy(800 + t as u64, n);
        for ch in chains {
            check_rows(ch, &rows, &x, col, c);
        }
    }
}

#[test]
fn after_rows_finds_every_lane_at_the_range_edges() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    // Floats within 40 ulps of 8, -4.5 (and of the central values' edges at ±0), each at
    // every lane of a vector of central values, through `x · 1`.
    let mut x = Vec::new();
    for e in [8.0f32, -4.5, 4.5, -8.0, 0.0, -0.0] {
        for d in -40i32..=40 {
            let v = f32::from_bits(e.to_bits().wrapping_add_signed(d));
            for lane in 0..16 {
                let mut vec = [0.25f32; 16];
                vec[lane] = v;
                x.extend_from_slice(&vec);
            }
        }
    }
    let n = x.len();
    let ones = vec![vec![1.0f32; n]];
    check_rows(&[(BinaryOp::Mul, true, Some(0), 0.0)], &ones, &x, 0, n);
    check_rows(&[(BinaryOp::Mul, true, None, 1.0)], &ones, &x, 0, n);
}

/// Inputs as `x · y + 1` of two normal samples gives them: central values with a lane
/// outside the central range now and then (one vector in `every`, at a random lane, a value
/// at `x <= -4.5`, NaN or `x >= 8`), so that most four-vector steps with such a lane have it
/// in one vector only, the other three stored at once.
fn sparse_tails(seed: u64, n: usize, every: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    let mut x: Vec<f32> = (0..n).map(|_| r.uniform(-4.4, 7.9)).collect();
    for v in x.chunks_mut(16) {
        if r.next_u64() % every == 0 {
            let lane = (r.next_u64() % v.len() as u64) as usize;
            v[lane] = match r.next_u64() % 4 {
                0 => r.uniform(-30.0, -4.5),
                1 => f32::NAN,
                2 => -4.5,
                _ => r.uniform(8.0, 30.0),
            };
        }
    }
    x
}

#[test]
fn after_rows_with_sparse_tail_lanes_matches_the_ops_then_gelu1() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    use BinaryOp::*;
    let y = values(900, 1024);
    let ones = vec![1.0f32; 1024];
    let rows = [y, ones];
    // Rows of whole steps (streamed from their first value, `col % 5 == 0`), rows of a step
    // and a part, and a start inside a row.
    for (t, (c, col, n, every)) in [
        (1024, 0, 16384, 7),
        (1024, 0, 8192, 40),
        (80, 0, 8000, 3),
        (1000, 333, 9000, 11),
    ]
    .into_iter()
    .enumerate()
    {
        let x = sparse_tails(950 + t as u64, n, every);
        check_rows(&[(Mul, true, Some(1), 0.0)], &rows, &x, col, c);
        check_rows(
            &[(Mul, true, Some(0), 0.0), (Add, true, None, 1.0)],
            &rows,
            &x,
            col,
            c,
        );
    }
}

/// `after_rows` where rows are whole 64-value steps (`c` and `col` multiples of 64: one
/// loop over every step of all rows, the rows' column wrapping, `pend` flushed between
/// steps), with and without a remainder of `n % 64` values (from the column the steps
/// reached: the first's, another in the row, the next row's first), streamed into an
/// aligned and into an unaligned destination, on fresh inputs each run (seeded from the
/// clock: the seed is printed on failure) with sparse and with frequent lanes outside the
/// central range.
#[test]
fn after_rows_over_whole_steps_matches_the_ops_then_gelu1() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    use BinaryOp::*;
    let seed = crate::backend::cpu::clock_seed();
    eprintln!("after_rows_over_whole_steps seed {seed}");
    let chains: [&[(BinaryOp, bool, Option<usize>, f32)]; 4] = [
        &[(Mul, true, Some(0), 0.0), (Add, true, None, 1.0)],
        &[(Add, false, Some(1), 0.0)],
        &[(Sub, false, Some(1), 0.0), (Mul, true, None, -0.5)],
        &[
            (Mul, true, Some(0), 0.0),
            (Add, true, Some(1), 0.0),
            (Sub, true, None, 0.25),
        ],
    ];
    for (t, (c, col, n)) in [
        (64, 0, 64 * 41),
        (1024, 0, 1024 * 6),
        (1024, 512, 1024 * 3 + 64 * 5),
        (192, 128, 192 * 9 + 37),
        (4096, 0, 4096 * 2 + 5),
        // Remainders that start at another column than the whole steps did: mid-row, and
        // at the start of the next row.
        (256, 64, 256 * 3 + 64 * 2 + 37),
        (256, 192, 64 + 37),
    ]
    .into_iter()
    .enumerate()
    {
        let s = seed.wrapping_add(97 * t as u64);
        let rows: Vec<Vec<f32>> = (0..2).map(|r| values(s ^ (0x5EED + r), c)).collect();
        for x in [sparse_tails(s, n, 9), values(s.rotate_left(17), n)] {
            for ch in chains {
                for off in [0, 3] {
                    check_rows_at(ch, &rows, &x, col, c, off);
                }
            }
        }
    }
}

/// Edge inputs: both ends of the central range and their neighbours, ±inf, NaN of both signs,
/// huge values, a subnormal, and `tail` inputs whose results are subnormal or zero.
fn edges() -> Vec<f32> {
    let up = |x: f32| f32::from_bits(x.to_bits() + 1);
    vec![
        -4.5,
        up(-4.5),
        -4.499_999_5,
        8.0,
        7.999_999_5,
        4.5,
        -8.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e30,
        -1e30,
        -1e-40,
        1e-40,
        -0.0,
        -13.0,
        -13.7,
        -14.2,
        -16.0,
    ]
}

/// `map`, in place and streamed (from `off` floats past a 64-byte boundary), against
/// `gelu1::<Fused>`.
fn check_map(s: &[f32], off: usize, what: &str) {
    let n = s.len();
    let mut into = vec![f32::NAN; n];
    let mut inplace = s.to_vec();
    let mut sbuf = vec![f32::NAN; n + 20];
    let a = sbuf.as_ptr().align_offset(64) + off;
    let streamed = &mut sbuf[a..a + n];
    // SAFETY: AVX-512F/DQ (the caller checked); `n` floats each; fenced below.
    unsafe {
        map(s.as_ptr(), into.as_mut_ptr(), n);
        map(inplace.as_ptr(), inplace.as_mut_ptr(), n);
        map_stream(s.as_ptr(), streamed.as_mut_ptr(), n, true);
        core::arch::x86_64::_mm_sfence();
    }
    for i in 0..n {
        let want = gelu1::<Fused>(s[i]);
        assert!(
            same(into[i], want) && same(inplace[i], want) && same(streamed[i], want),
            "{what} n={n} off={off} i={i} x={:e}: {:e} / {:e} / {:e} vs {want:e}",
            s[i],
            into[i],
            inplace[i],
            streamed[i]
        );
    }
}

#[test]
fn map_fixes_an_edge_lane_in_every_vector_of_the_first_step_that_has_one() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    // Two calm steps (the four-vector range test still on), then a step, up to three whole
    // vectors and a masked one.
    for n in [192, 208, 240, 255, 257] {
        let mut r = Rng(n as u64);
        let calm: Vec<f32> = (0..n).map(|_| r.uniform(-4.4, 4.4)).collect();
        for (e, &v) in edges().iter().enumerate() {
            for p in (128..n).filter(|p| matches!(p % 16, 0 | 7 | 15) || *p == n - 1) {
                let mut x = calm.clone();
                x[p] = v;
                check_map(&x, e % 5, "one edge lane");
            }
        }
        // A lane in `4.5 <= |x| < 8` (ends the four-vector test, needs no fix) in vector `a`
        // of the third step, an edge lane in vector `b` of that step or later.
        for a in 0..4 {
            for b in (0..(n - 128).div_ceil(16)).filter(|&b| b != a) {
                for (e, &v) in [-4.5, -6.0, 8.0, f32::NAN, -f32::NAN, f32::NEG_INFINITY]
                    .iter()
                    .enumerate()
                {
                    let mut x = calm.clone();
                    x[128 + 16 * a + 3] = [5.0, -5.0, 7.5, -4.5 + 0.25][e % 4];
                    let q = (128 + 16 * b + 9).min(n - 1);
                    x[q] = v;
                    check_map(&x, e % 5, "odd lane then edge lane");
                }
            }
        }
    }
}

#[test]
fn after_rows_fixes_an_edge_lane_in_every_vector_of_a_step() {
    if !available() {
        eprintln!("no AVX-512F/DQ: gelu512 not tested");
        return;
    }
    use BinaryOp::*;
    let ones = vec![1.0f32; 1024];
    let rows = [ones];
    for (n, c, col) in [
        (257, 1024, 0),
        (240, 1024, 0),
        (1100, 300, 7),
        (700, 256, 250),
    ] {
        let mut r = Rng(n as u64 + 77);
        let calm: Vec<f32> = (0..n).map(|_| r.uniform(-4.4, 7.9)).collect();
        for &v in &edges() {
            for p in (0..n).filter(|p| matches!(p % 16, 0 | 13) || *p == n - 1) {
                let mut x = calm.clone();
                x[p] = v;
                // Two or three sparse tail vectors held at once: `p`, and `p + 40` when in range.
                if p + 40 < n {
                    x[p + 40] = -7.0;
                }
                check_rows(&[(Mul, true, Some(0), 0.0)], &rows, &x, col, c);
                check_rows(&[(Add, true, None, 0.0)], &rows, &x, col, c);
            }
        }
    }
}
