//! bf16 matmul kernels on the CPU: the `vdpbf16ps` GEMM (the `fast` policy on a CPU with
//! AVX-512 BF16) and its fallbacks (AVX-512F without it, AVX2, portable: the operands widened
//! to f32), against f64 references on random bf16 inputs, on ragged shapes; the
//! `deterministic` policy bit for bit the interpreter's at every level.
//!
//! One test (the SIMD level is process-wide, so the levels are forced in turn here alone).

use tessera::backend::cpu::simd::{self, SimdLevel};
use tessera::backend::cpu::{fused, gemm, matmul};
use tessera::prelude::*;
use tessera_workspace::reference;

#[tessera::kernel(numerics = "deterministic")]
fn matmul_bf16_det(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<f32, (M, N)> {
    a.matmul(b)
}

/// `(m, k, n)`: m = 1, odd k, k = 1, k across the GEMM's 512-deep k-blocks, m and n not
/// multiples of the 12×32 micro-tile.
/// `(157, 1025, 160)`: rows past one 144-row block (A read in place), k in two uneven
/// k-blocks (514 and an odd 511, whose A is packed), ragged rows and columns.
const SHAPES: [(usize, usize, usize); 10] = [
    (1, 300, 70),
    (1, 1, 1),
    (37, 301, 45),
    (13, 1, 33),
    (130, 65, 260),
    (25, 1025, 31),
    (64, 1100, 96),
    (7, 2, 129),
    (150, 513, 70),
    (157, 1025, 160),
];

/// `|c - ref| ≤ (k + 2)·ε_f32·Σ_p |a_ip·b_pj|` for every element (`out` adds a relative
/// allowance for a rounded output). The products of bf16 values are exact in f32 and in
/// f64; an f32 sum over k rounds at most k + 2 times (a `vdpbf16ps` step adds two products
/// with up to two roundings, per k-block partial sums and the final add into C once more),
/// each rounding off by at most ε_f32/2 of a partial sum bounded by Σ|a·b|, so the bound
/// holds with a factor of two to spare for second-order terms.
fn check(name: &str, got: &[f64], a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize)) {
    let want = reference::matmul(a, b, m, k, n);
    let abs: Vec<f64> = a.iter().map(|x| x.abs()).collect();
    let bbs: Vec<f64> = b.iter().map(|x| x.abs()).collect();
    let mag = reference::matmul(&abs, &bbs, m, k, n);
    let eps = f32::EPSILON as f64;
    for j in 0..m * n {
        let bound = (k + 2) as f64 * eps * mag[j];
        let err = (got[j] - want[j]).abs();
        assert!(
            err <= bound,
            "{name} {m}x{k}x{n}: element {j}: {} vs f64 {} (err {err:e} > bound {bound:e})",
            got[j],
            want[j]
        );
    }
    // Not a vacuous bound: the inputs are random and most products non-zero.
    assert!(mag.iter().any(|&x| x > 0.0), "{name}: all-zero inputs");
}

fn bits(t: &Tensor<f32>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// Runs the shapes at the active level: `fast` bf16 kernels (plain, bias + GELU epilogue on
/// the per-block path) against f64, with `vdpbf16ps` counted iff `dot` says it applies;
/// `deterministic` bit for bit the interpreter's, never on `vdpbf16ps`.
fn run_shapes(tag: &str, dot: bool, seed: u64) {
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let s = seed + 10 * i as u64;
        let a = Tensor::<bf16>::randn(&[m, k], s);
        let b = Tensor::<bf16>::randn(&[k, n], s + 1);
        let bias = Tensor::<f32>::randn(&[n], s + 2);
        let (af, bf) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        let name = format!("{tag} seed {s}");

        let d0 = matmul::dot_launches();
        let c = tessera_kernels::matmul_bf16_f32(&a, &b).unwrap();
        assert_eq!(
            matmul::dot_launches() - d0,
            dot as u64,
            "{name}: matmul_bf16_f32 on vdpbf16ps"
        );
        check(
            &format!("{name} matmul_bf16_f32"),
            &c.to_f64_vec().unwrap(),
            &af,
            &bf,
            (m, k, n),
        );

        // The per-block path (an epilogue): gelu is 1.13-Lipschitz, so the product's bound
        // (one more rounding for the bias), scaled by 1.2, bounds the error gelu's input
        // carries; gelu's own f32 evaluation adds a relative 1e-6 at most (`vmath`'s stated
        // accuracy), allowed twice over.
        let d0 = matmul::dot_launches();
        let y = tessera_kernels::linear_bias_gelu_bf16_f32(&a, &b, &bias).unwrap();
        assert_eq!(
            matmul::dot_launches() - d0,
            dot as u64,
            "{name}: linear_bias_gelu_bf16_f32 on vdpbf16ps"
        );
        let want = reference::matmul(&af, &bf, m, k, n);
        let abs: Vec<f64> = af.iter().map(|x| x.abs()).collect();
        let bbs: Vec<f64> = bf.iter().map(|x| x.abs()).collect();
        let mag = reference::matmul(&abs, &bbs, m, k, n);
        let bv = bias.to_f64_vec().unwrap();
        let yv = y.to_f64_vec().unwrap();
        for j in 0..m * n {
            let g = reference::gelu(want[j] + bv[j % n]);
            let bound = 1.2 * (k + 3) as f64 * f32::EPSILON as f64 * (mag[j] + bv[j % n].abs())
                + 2e-6 * g.abs()
                + f32::MIN_POSITIVE as f64;
            assert!(
                (yv[j] - g).abs() <= bound,
                "{name} linear_bias_gelu_bf16_f32 {m}x{k}x{n}: element {j}: {} vs {g}",
                yv[j]
            );
        }

        // `deterministic`: the exact path, bit for bit the interpreter's K loop.
        let (l0, d0) = (matmul::launches(), matmul::dot_launches());
        let c = matmul_bf16_det(&a, &b).unwrap();
        assert!(matmul::launches() > l0, "{name}: deterministic direct path");
        assert_eq!(
            matmul::dot_launches(),
            d0,
            "{name}: deterministic on vdpbf16ps"
        );
        let slow = fused::with_interpreter(|| matmul_bf16_det(&a, &b).unwrap());
        assert!(
            bits(&c) == bits(&slow),
            "{name}: deterministic bf16 matmul differs from the interpreter"
        );
        check(
            &format!("{name} deterministic"),
            &c.to_f64_vec().unwrap(),
            &af,
            &bf,
            (m, k, n),
        );
    }
}

#[test]
fn bf16_matmul_every_level() {
    // Fresh inputs each run (the seed is in every failure message).
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000_007;
    let has = gemm::has_vdpbf16ps();
    if !has {
        println!("this CPU has no AVX-512 BF16: the vdpbf16ps path is not tested here");
    }
    // The k-pair paths run by default where AMX is usable or `vdpbf16ps` is preferred.
    let pairwise = gemm::has_amx() || gemm::prefers_vdpbf16ps();
    for level in simd::supported() {
        simd::force(Some(level)).unwrap();
        let dot = pairwise && level >= SimdLevel::Avx512;
        assert_eq!(gemm::dot_enabled(), dot, "{level:?}");
        // Which k-pair path: AMX first where usable (`dot_enabled` is true on either).
        let want = if !dot {
            gemm::Bf16Path::Widen
        } else if gemm::has_amx() {
            gemm::Bf16Path::Amx
        } else {
            gemm::Bf16Path::Dot
        };
        assert_eq!(gemm::bf16_path(), want, "{level:?}");
        run_shapes(&format!("{level:?}"), dot, seed);
        if has && level >= SimdLevel::Avx512 {
            // Each k-pair path forced (the launches' decision); without AMX a forced `Amx`
            // runs `vdpbf16ps` (`with_bf16_path`), checked as such.
            for path in [gemm::Bf16Path::Amx, gemm::Bf16Path::Dot] {
                let runs = gemm::with_bf16_path(path, gemm::bf16_path);
                let want = match path {
                    gemm::Bf16Path::Amx if gemm::has_amx() => gemm::Bf16Path::Amx,
                    _ => gemm::Bf16Path::Dot,
                };
                assert_eq!(runs, want, "{level:?}: forced {path:?}");
                gemm::with_bf16_path(path, || {
                    run_shapes(
                        &format!("{level:?} {path:?} (runs {runs:?})"),
                        true,
                        seed + 2,
                    )
                });
            }
        }
        if dot {
            // AVX-512F without vdpbf16ps: the widening fallback at the same level.
            gemm::without_dot(|| {
                assert!(!gemm::dot_enabled());
                run_shapes(&format!("{level:?} without vdpbf16ps"), false, seed + 1);
            });
        }
    }
    simd::force(None).unwrap();
}

/// A `fast` bf16 product that `matmul::whole` splits into row strips on two threads (`m > n`:
/// 50 rows in strips of 48 and 2, k = 300 past its one-job size), the last strip shorter than
/// AMX's least rows: the same bits on one thread and two on each k-pair path the CPU has
/// (AMX and `vdpbf16ps` round differently, so a strip on the other path would differ), and
/// within the k-pair bound of the f64 reference. Fresh random inputs (the seed is in the
/// message).
#[test]
fn bf16_row_strips_same_bits_on_one_and_two_threads() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let (m, k, n) = (50, 300, 40);
    let a = Tensor::<bf16>::randn(&[m, k], seed);
    let b = Tensor::<bf16>::randn(&[k, n], seed + 1);
    let (af, bf) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    for path in [gemm::Bf16Path::Amx, gemm::Bf16Path::Dot] {
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    gemm::with_bf16_path(path, || tessera_kernels::matmul_bf16_f32(&a, &b)).unwrap()
                })
        };
        let (one, two) = (run(1), run(2));
        let name = format!("{path:?} seed {seed}");
        if gemm::has_vdpbf16ps() {
            check(&name, &one.to_f64_vec().unwrap(), &af, &bf, (m, k, n));
        }
        let (x, y) = (bits(&one), bits(&two));
        let diff = x.iter().zip(&y).position(|(p, q)| p != q);
        assert_eq!(
            diff, None,
            "{name}: one thread and two differ at element {diff:?}"
        );
    }
}

/// Few-row `fast` bf16 products (1, 5 and 8 rows: the streamed, widened path on an AMX CPU,
/// `vdpbf16ps` on AMD) split into two column strips on two threads (k·n past the one-job
/// size, columns not a multiple of the strips' 32): the same bits on one thread and two on
/// each path the CPU has, within the k-pair bound of the f64 reference; on AMX the bits of
/// the widening path (`gemm::without_dot`). Fresh random inputs (the seed is in the message).
#[test]
fn few_row_products_same_bits_on_one_and_two_threads() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for (i, m) in [1usize, 5, 8].into_iter().enumerate() {
        // k·n past `matmul::whole`'s least for splitting a few-row product.
        let (k, n) = (300, 2001);
        let s = seed + 2 * i as u64;
        let a = Tensor::<bf16>::randn(&[m, k], s);
        let b = Tensor::<bf16>::randn(&[k, n], s + 1);
        let (af, bf) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        let on = |threads: usize, f: &(dyn Fn() -> Tensor<f32> + Sync)| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(f)
        };
        let widen = gemm::without_dot(|| tessera_kernels::matmul_bf16_f32(&a, &b).unwrap());
        for path in [gemm::Bf16Path::Amx, gemm::Bf16Path::Dot] {
            let run =
                || gemm::with_bf16_path(path, || tessera_kernels::matmul_bf16_f32(&a, &b).unwrap());
            let (one, two) = (on(1, &run), on(2, &run));
            let name = format!("{path:?} m={m} seed {s}");
            check(&name, &one.to_f64_vec().unwrap(), &af, &bf, (m, k, n));
            assert_eq!(bits(&one), bits(&two), "{name}: one thread and two differ");
            if path == gemm::Bf16Path::Amx && gemm::has_amx() {
                assert_eq!(bits(&one), bits(&widen), "{name}: not the widened bits");
            }
        }
    }
}
