//! The CPU fast path (fused chunk programs) against the Tile IR interpreter, its oracle: every
//! library kernel class, f32 and bf16 storage, on `[37, 300]`, `[1, 1]`, shapes wider than a
//! chunk and seeded random shapes. Each case checks that the fast path really ran.

use tessera::autotune::TileSpace;
use tessera::backend::cpu::simd;
use tessera::backend::cpu::{fused, matmul};
use tessera::prelude::*;
use tessera::{Arg, TileDef};
use tessera_workspace::reference::{self, rel_error};

/// `every_simd_level_agrees` forces the process-wide SIMD level: it holds this for writing,
/// every other test for reading, so no test compares two launches made at different levels.
static LEVEL: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    /// Set while this thread holds `LEVEL` for writing (the tests it calls take no guard).
    static FORCING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The last-level cache size the tests pin the CPU path to (`cache::set_last_level_bytes`),
/// whatever sysfs reports (a VM reports its host's shared L3, 300 MiB on one): the tests that
/// size tensors by the cache (outputs past the non-temporal threshold at 3/8 of it, inputs
/// past it) then build the same shapes, and reach the same paths, on every machine. Every size
/// rule of the CPU path reads the cache size as a fraction of it, so a small pin reaches each
/// path with small tensors: 3 to 10 MiB through the interpreter, which the tests run at the
/// test profile's `opt-level = 1` (32 MiB, the size first pinned, made this file the longest
/// part of CI: 373 s of test time on a 2-vCPU Xeon).
const TEST_LLC: usize = 8 << 20;

/// Pins the CPU path's last-level cache size to [`TEST_LLC`], once per process; every test
/// calls it (through [`level_guard`], [`on_threads`] or [`llc`]) before it launches.
fn pin_llc() {
    static PIN: std::sync::Once = std::sync::Once::new();
    PIN.call_once(|| {
        tessera::backend::cpu::cache::set_last_level_bytes(Some(TEST_LLC));
    });
}

/// The last-level cache size the CPU path plans for in these tests: [`TEST_LLC`].
fn llc() -> usize {
    pin_llc();
    let llc = tessera::backend::cpu::cache::last_level_bytes();
    assert_eq!(llc, TEST_LLC, "the pinned last-level cache size");
    llc
}

fn level_guard() -> Option<std::sync::RwLockReadGuard<'static, ()>> {
    pin_llc();
    if FORCING.with(|c| c.get()) {
        None
    } else {
        Some(LEVEL.read().unwrap_or_else(|e| e.into_inner()))
    }
}

#[tessera::kernel]
fn chain(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu(x * y + 1.0)
}

#[tessera::kernel]
fn chain_sub3(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu((x - y) * 0.5 + y)
}

#[tessera::kernel]
fn chain_row_minus(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu(y - x * 0.25)
}

#[tessera::kernel]
fn chain_scalars(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    gelu(x * 1.5 - 0.75)
}

#[tessera::kernel]
fn chain_div(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu(x / y + 1.0)
}

#[tessera::kernel]
fn chain_four(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu((x * y + 1.0) * 0.5 - y)
}

#[tessera::kernel]
fn chain_full(x: Tensor<f32, (R, C)>, z: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    gelu(x * z + 1.0)
}

#[tessera::kernel]
fn chain_mixed(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    tanh(y / x) * y - 0.5
}

#[tessera::kernel]
fn col_mean(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.mean(0)
}

#[tessera::kernel]
fn col_max(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.amax(0)
}

#[tessera::kernel]
fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    x.sum(1)
}

#[tessera::kernel(numerics = "deterministic")]
fn matmul_bf16_det(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<f32, (M, N)> {
    a.matmul(b)
}

#[tessera::kernel(numerics = "kahan_sum")]
fn row_sum_kahan(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    x.sum(1)
}

#[tessera::kernel]
fn transpose_scale(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
    transpose(x) * 2.0
}

#[tessera::kernel]
fn gelu_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    gelu(x)
}

#[tessera::kernel]
fn add_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    x + y
}

#[tessera::kernel]
fn chain_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (C,)>) -> Tensor<bf16, (R, C)> {
    gelu(x * y - x)
}

#[tessera::kernel]
fn softmax_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn layernorm_bf16(
    x: Tensor<bf16, (R, C)>,
    g: Tensor<bf16, (C,)>,
    b: Tensor<bf16, (C,)>,
) -> Tensor<f32, (R, C)> {
    layernorm(x, g, b, 1e-5)
}

#[tessera::kernel]
fn rmsnorm_bf16(x: Tensor<bf16, (R, C)>, g: Tensor<bf16, (C,)>) -> Tensor<f32, (R, C)> {
    rmsnorm(x, g, 1e-6)
}

/// A bf16 rmsnorm widened to f32: an f32 output whose values are rounded to bf16 first.
#[tessera::kernel]
fn rmsnorm_bf16_widened(x: Tensor<bf16, (R, C)>, g: Tensor<bf16, (C,)>) -> Tensor<f32, (R, C)> {
    rmsnorm(x, g, 1e-6).cast::<f32>()
}

#[tessera::kernel]
fn sub_f32(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    x - y
}

#[tessera::kernel]
fn div_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    x / y
}

#[tessera::kernel]
fn softmax_twice(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x) * 2.0
}

#[tessera::kernel(numerics = "deterministic")]
fn softmax_det(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel(numerics = "deterministic")]
fn layernorm_det(
    x: Tensor<f32, (R, C)>,
    g: Tensor<f32, (C,)>,
    b: Tensor<f32, (C,)>,
) -> Tensor<f32, (R, C)> {
    layernorm(x, g, b, 1e-5)
}

#[tessera::kernel]
fn col_sum_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
    x.sum(0)
}

#[tessera::kernel]
fn transpose_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (C, R)> {
    transpose(x)
}

#[tessera::kernel]
fn transpose_f32(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
    transpose(x)
}

#[tessera::kernel]
fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.sum(0)
}

#[tessera::kernel]
fn col_mean_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
    x.mean(0)
}

#[tessera::kernel]
fn col_max_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
    x.amax(0)
}

#[tessera::kernel(numerics = "deterministic")]
fn matmul_det(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    a.matmul(b)
}

#[tessera::kernel(numerics = "kahan_sum")]
fn matmul_kahan(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    a.matmul(b)
}

#[tessera::kernel]
fn matmul_scale_tanh(
    a: Tensor<f16, (M, K)>,
    b: Tensor<f16, (K, N)>,
    s: Tensor<f32, (M, N)>,
) -> Tensor<f32, (M, N)> {
    tanh(a.matmul(b) * s)
}

fn shapes() -> Vec<(usize, usize)> {
    let mut v = vec![(37, 300), (1, 1), (3, 1030), (5, 2100), (70, 9)];
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..4 {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = 1 + (s >> 33) as usize % 150;
        let c = 1 + (s >> 13) as usize % 700;
        v.push((r, c));
    }
    v
}

/// Runs `f` on the fast path (checking that it ran) and on the interpreter; the two agree to
/// `tol` (relative, over the whole output).
fn agree<T: Element>(name: &str, tol: f64, f: impl Fn() -> Tensor<T>) {
    let before = fused::launches();
    let fast = f();
    assert!(
        fused::launches() > before,
        "{name}: the fused fast path did not run"
    );
    let slow = fused::with_interpreter(&f);
    assert_eq!(fast.shape(), slow.shape(), "{name}");
    let e = rel_error(&fast.to_f64_vec().unwrap(), &slow.to_f64_vec().unwrap());
    assert!(
        e <= tol,
        "{name}: fast path vs interpreter: relative error {e:e} > {tol:e}"
    );
}

const F32_TOL: f64 = 1e-6;
/// One bf16 rounding step apart at most.
const BF16_TOL: f64 = 1.0 / 128.0;

#[test]
fn rowwise_kernels_agree_f32_and_bf16() {
    let _level = level_guard();
    for (i, &(r, c)) in shapes().iter().enumerate() {
        let s = 10 * i as u64;
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let g = Tensor::<f32>::randn(&[c], s + 2);
        let b = Tensor::<f32>::randn(&[c], s + 3);
        let tag = format!("[{r}, {c}]");
        agree(&format!("softmax {tag}"), F32_TOL, || {
            tessera_kernels::softmax(&x).unwrap()
        });
        agree(&format!("layernorm {tag}"), F32_TOL, || {
            tessera_kernels::layernorm(&x, &g, &b).unwrap()
        });
        agree(&format!("rmsnorm {tag}"), F32_TOL, || {
            tessera_kernels::rmsnorm(&x, &g).unwrap()
        });
        agree(&format!("row sum {tag}"), F32_TOL, || row_sum(&x).unwrap());
        agree(&format!("tile! softmax {tag}"), F32_TOL, || {
            let mut y = Tensor::<f32>::zeros(&[r, c]).unwrap();
            tessera_kernels::tiled::softmax_rows::launch(&x, &mut y).unwrap();
            y
        });
        let xb = Tensor::<bf16>::randn(&[r, c], s + 4);
        let (gb, bb) = (
            Tensor::<bf16>::randn(&[c], s + 5),
            Tensor::<bf16>::randn(&[c], s + 6),
        );
        agree(&format!("softmax bf16 {tag}"), F32_TOL, || {
            softmax_bf16(&xb).unwrap()
        });
        agree(&format!("layernorm bf16 {tag}"), F32_TOL, || {
            layernorm_bf16(&xb, &gb, &bb).unwrap()
        });
        agree(&format!("rmsnorm bf16 {tag}"), F32_TOL, || {
            rmsnorm_bf16(&xb, &gb).unwrap()
        });
    }
}

#[test]
fn elementwise_kernels_and_chains_agree_f32_and_bf16() {
    let _level = level_guard();
    for (i, &(r, c)) in shapes().iter().enumerate() {
        let s = 100 + 10 * i as u64;
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let y = Tensor::<f32>::randn(&[r, c], s + 2);
        let v = Tensor::<f32>::randn(&[c], s + 3);
        let tag = format!("[{r}, {c}]");
        agree(&format!("gelu {tag}"), F32_TOL, || {
            tessera_kernels::gelu(&x).unwrap()
        });
        agree(&format!("add {tag}"), F32_TOL, || {
            tessera_kernels::add(&x, &y).unwrap()
        });
        agree(&format!("mul {tag}"), F32_TOL, || {
            tessera_kernels::mul(&x, &v).unwrap()
        });
        agree(&format!("chain {tag}"), F32_TOL, || chain(&x, &v).unwrap());
        let xb = Tensor::<bf16>::randn(&[r, c], s + 4);
        let yb = Tensor::<bf16>::randn(&[r, c], s + 5);
        let vb = Tensor::<bf16>::randn(&[c], s + 6);
        agree(&format!("gelu bf16 {tag}"), BF16_TOL, || {
            gelu_bf16(&xb).unwrap()
        });
        agree(&format!("add bf16 {tag}"), BF16_TOL, || {
            add_bf16(&xb, &yb).unwrap()
        });
        agree(&format!("chain bf16 {tag}"), BF16_TOL, || {
            chain_bf16(&xb, &vb).unwrap()
        });
    }
}

#[tessera::kernel]
fn tanh_gelu_f32(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    tanh(gelu(x))
}

#[tessera::kernel]
fn unary_chain3(x: Tensor<f32, (B, R, C)>) -> Tensor<f32, (B, R, C)> {
    tanh(sigmoid(x))
}

/// Elementwise kernels whose tiles cover whole rows of their tensors (the runner loads and
/// transforms several rows in one piece) and ragged ones (row by row, chunk by chunk): rows
/// that end a tile, a tensor, or a leading-axis slice; a rank-3 tensor (leading dims merged).
#[test]
fn elementwise_whole_rows_agree() {
    let _level = level_guard();
    for (i, &(b, r, c)) in [
        (1, 16, 1024),
        (1, 33, 1024),
        (1, 48, 64),
        (2, 37, 300),
        (3, 5, 7),
        (4, 16, 1),
        (5, 17, 1025),
        (1, 1, 1),
    ]
    .iter()
    .enumerate()
    {
        let x = Tensor::<f32>::randn(&[b, r, c], 900 + i as u64);
        let tag = format!("[{b}, {r}, {c}]");
        // The direct path runs the interpreter's ops on the same values: every bit agrees.
        direct_same_bits(
            &format!("tanh(sigmoid) {tag}"),
            fused::launches,
            false,
            || unary_chain3(&x).unwrap(),
        );
        let x2 = Tensor::<f32>::randn(&[b * r, c], 950 + i as u64);
        direct_same_bits(
            &format!("gelu [{}, {c}]", b * r),
            fused::launches,
            false,
            || tessera_kernels::gelu(&x2).unwrap(),
        );
    }
}

#[test]
fn column_reductions_and_transposes_agree_f32_and_bf16() {
    let _level = level_guard();
    for (i, &(r, c)) in shapes().iter().enumerate() {
        let s = 200 + 10 * i as u64;
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let xb = Tensor::<bf16>::randn(&[r, c], s + 2);
        let tag = format!("[{r}, {c}]");
        agree(&format!("col mean {tag}"), F32_TOL, || {
            col_mean(&x).unwrap()
        });
        agree(&format!("col max {tag}"), F32_TOL, || col_max(&x).unwrap());
        agree(&format!("transpose {tag}"), F32_TOL, || {
            transpose_scale(&x).unwrap()
        });
        agree(&format!("col sum bf16 {tag}"), F32_TOL, || {
            col_sum_bf16(&xb).unwrap()
        });
        agree(&format!("transpose bf16 {tag}"), BF16_TOL, || {
            transpose_bf16(&xb).unwrap()
        });
    }
}

/// Raw bit patterns of a tensor's elements (NaN payloads included).
trait Bits: Element {
    fn bits(&self) -> u32;
}

impl Bits for f32 {
    fn bits(&self) -> u32 {
        self.to_bits()
    }
}

impl Bits for bf16 {
    fn bits(&self) -> u32 {
        self.to_bits() as u32
    }
}

/// `f`'s result, run inside a new rayon pool of `threads` threads.
fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    pin_llc();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// bf16 column sum, mean and max of `x` on the direct path, bit for bit the interpreter's
/// ([`direct_same_bits`] with the counter `cr`).
fn col_bf16_bits(tag: &str, cr: fn() -> u64, x: &Tensor<bf16>) {
    direct_same_bits(&format!("col sum bf16 {tag}"), cr, true, || {
        col_sum_bf16(x).unwrap()
    });
    direct_same_bits(&format!("col mean bf16 {tag}"), cr, true, || {
        col_mean_bf16(x).unwrap()
    });
    direct_same_bits(&format!("col max bf16 {tag}"), cr, true, || {
        col_max_bf16(x).unwrap()
    });
}

/// Runs `f` on the fast path, checking that `counter` (a direct-kernel counter) moved, and on
/// the interpreter: the same shape and the same bits, except that with `any_nan` a NaN
/// matches any NaN (Rust leaves the payload of an arithmetic result's NaN unspecified, so
/// sums of NaNs may differ there; a copy keeps every bit).
fn direct_same_bits<T: Bits>(
    name: &str,
    counter: fn() -> u64,
    any_nan: bool,
    f: impl Fn() -> Tensor<T>,
) {
    let before = counter();
    let fast = f();
    assert!(counter() > before, "{name}: the direct kernel did not run");
    let slow = fused::with_interpreter(&f);
    assert_eq!(fast.shape(), slow.shape(), "{name}");
    let (a, b) = (fast.as_slice().unwrap(), slow.as_slice().unwrap());
    let nan = |x: &T| x.to_f64().is_nan();
    let differ = |i: usize| a[i].bits() != b[i].bits() && !(any_nan && nan(&a[i]) && nan(&b[i]));
    if let Some(i) = (0..a.len()).find(|&i| differ(i)) {
        panic!(
            "{name}: element {i}: fast path {:#x}, interpreter {:#x}",
            a[i].bits(),
            b[i].bits()
        );
    }
}

/// `[rows, cols]` random values with NaNs (quiet and signalling), infinities and signed zeros
/// at seeded places when `specials`.
fn with_specials<T: Element>(r: usize, c: usize, seed: u64, specials: &[T]) -> Tensor<T> {
    let x = Tensor::<T>::randn(&[r, c], seed);
    let mut v = x.as_slice().unwrap().to_vec();
    let mut s = seed | 1;
    for k in specials
        .iter()
        .cycle()
        .take(specials.len() * (1 + r * c / 500))
    {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (s >> 33) as usize % v.len();
        v[i] = *k;
    }
    Tensor::from_vec(v, &[r, c]).unwrap()
}

/// Direct transposes and column reductions (f32 and bf16 storage) give the interpreter's
/// bits, on ragged shapes, a `[1, 1]`, a large one, and inputs with NaNs and signed zeros.
#[test]
fn direct_transposes_and_column_reductions_match_the_interpreter_bit_for_bit() {
    let shapes = [
        (37, 300),
        (300, 37),
        (1, 1),
        (1, 200),
        (200, 1),
        (65, 63),
        (129, 257),
        (1031, 4100),
        (520, 528),
        (1024, 520),
        (17, 4099),
        (2048, 300),
        (9, 1025),
        (17, 2048),
        (300, 1),
        (130, 1000),
        // Rows of whole cache lines on both sides, large enough for non-temporal stores:
        // the whole-tensor transpose starts its blocks at the source's first line boundary.
        (1056, 544),
        (4099, 17),
        // Source rows of 8 KiB: the bf16 blocks' staggered row groups (128 column steps,
        // 32 groups), and three column steps for 64 groups (the stagger wraps).
        (1024, 4096),
        (2048, 96),
        // Rows a multiple of 4 KiB on both sides (f32 `[1024, 1024]`, bf16 `[4096, 512]`
        // destination rows): streamed blocks whose last rows take plain stores (f32 on two
        // threads, bf16 on one and two) and staggered f32 row groups.
        (1024, 1024),
        (4096, 512),
    ];
    let f_specials = [
        f32::NAN,
        f32::from_bits(0x7FA0_0001),
        f32::NEG_INFINITY,
        f32::INFINITY,
        -0.0,
    ];
    let b_specials = [
        bf16::from_bits(0x7FC1),
        bf16::from_bits(0x7F81),
        bf16::from_bits(0xFF85),
        bf16::NEG_INFINITY,
        bf16::from_bits(0x8000),
    ];
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let seed = 700 + 10 * i as u64;
        for specials in [false, true] {
            let tag = format!("[{r}, {c}] specials {specials}");
            let fs: &[f32] = if specials { &f_specials } else { &[] };
            let bs: &[bf16] = if specials { &b_specials } else { &[] };
            let x = with_specials(r, c, seed + 1, fs);
            let xb = with_specials(r, c, seed + 2, bs);
            let t = fused::whole_transposes;
            let cr = fused::direct_column_reductions;
            direct_same_bits(&format!("transpose {tag}"), t, false, || {
                transpose_f32(&x).unwrap()
            });
            direct_same_bits(&format!("transpose bf16 {tag}"), t, false, || {
                transpose_bf16(&xb).unwrap()
            });
            // Two threads: the whole-tensor transpose splits its destination rows in bands.
            on_threads(2, || {
                direct_same_bits(&format!("transpose 2 threads {tag}"), t, false, || {
                    transpose_f32(&x).unwrap()
                });
                direct_same_bits(&format!("transpose bf16 2 threads {tag}"), t, false, || {
                    transpose_bf16(&xb).unwrap()
                });
            });
            // Column reductions on one thread and on two (the whole-row pass splits the
            // columns among threads); more than one program's columns (256 each) take the
            // whole-row pass (`fused::column_passes`).
            for pool in [1, 2] {
                let (passes, folds) = on_threads(pool, || {
                    let before = fused::column_passes();
                    let folded = fused::folded_column_loops();
                    let tag = format!("{tag} {pool} threads");
                    direct_same_bits(&format!("col sum {tag}"), cr, true, || col_sum(&x).unwrap());
                    direct_same_bits(&format!("col mean {tag}"), cr, true, || {
                        col_mean(&x).unwrap()
                    });
                    direct_same_bits(&format!("col max {tag}"), cr, true, || col_max(&x).unwrap());
                    col_bf16_bits(&tag, cr, &xb);
                    (
                        fused::column_passes() - before,
                        fused::folded_column_loops() - folded,
                    )
                });
                assert_eq!(
                    passes,
                    if c > 256 { 6 } else { 0 },
                    "[{r}, {c}]: whole-row column passes on {pool} threads"
                );
                // Every program of a launch with the pass takes the folded accumulators.
                assert_eq!(
                    folds,
                    if c > 256 {
                        6 * c.div_ceil(256) as u64
                    } else {
                        0
                    },
                    "[{r}, {c}]: folded program loops on {pool} threads"
                );
            }
        }
    }
}

/// Whole-tensor transposes launched at one shape after another, each shape again later (a
/// kernel keeps the proof that a launch's programs form one transpose per argument shapes):
/// every launch runs whole and gives the interpreter's bits, f32 and bf16 (NaNs in some
/// 32 × 32 bf16 blocks, none in others), on one thread and on two.
#[test]
fn whole_transposes_at_alternating_shapes_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let shapes = [
        (64, 96),
        (96, 64),
        (64, 96),
        (1056, 544),
        (1056, 544),
        (544, 1056),
        (37, 300),
        (300, 37),
        (1, 1),
        (64, 96),
        (17, 34),
        (544, 1056),
        (300, 37),
        // bf16 rows of 8 KiB: passes capped by the L2 off AMD (64 rows at 2 MiB, the last
        // one ragged; 32 at 1 MiB), one pass of 160 on other AMD CPUs (`transpose::zen_tuned`),
        // passes of 64 on a Zen 4 (half its 1 MiB L2, `transpose::whole_l2`).
        (160, 4096),
        (64, 96),
        (160, 4096),
    ];
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(r, c)) in shapes.iter().enumerate() {
                let seed = 900 + 10 * i as u64 + threads as u64;
                let x = with_specials(r, c, seed, &[f32::NAN, -0.0]);
                let xb = with_specials(r, c, seed + 5, &[bf16::from_bits(0x7F81)]);
                let tag = format!("[{r}, {c}] launch {i} threads {threads}");
                let t = fused::whole_transposes;
                direct_same_bits(&format!("transpose {tag}"), t, false, || {
                    transpose_f32(&x).unwrap()
                });
                direct_same_bits(&format!("transpose bf16 {tag}"), t, false, || {
                    transpose_bf16(&xb).unwrap()
                });
            }
        });
    }
}

// Column sums as block programs: `col_sum_tile` is the loop the library's column sum lowers
// to (the whole-row pass folds it); `col_sum_from_one` starts its accumulator at 1.0 and
// `col_sum_skip_first` skips the first tile of rows, so the pass runs but their programs must
// run their loops.
tessera::tile! {
    fn col_sum_tile<const BR: i64 = 64, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 1>)
        grid = (cdiv(x.dim(1), BC))
    {
        let c0 = program_id(0) * BC;
        let mut acc = zeros::<f32>([BC]);
        for r in range(0, x.dim(0), BR) {
            acc = acc + sum(load(x, [r, c0], [BR, BC]), 0);
        }
        store(y, [c0], acc);
    }
}

tessera::tile! {
    fn col_sum_from_one<const BR: i64 = 64, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 1>)
        grid = (cdiv(x.dim(1), BC))
    {
        let c0 = program_id(0) * BC;
        let mut acc = full::<f32>([BC], 1.0);
        for r in range(0, x.dim(0), BR) {
            acc = acc + sum(load(x, [r, c0], [BR, BC]), 0);
        }
        store(y, [c0], acc);
    }
}

tessera::tile! {
    fn col_sum_skip_first<const BR: i64 = 64, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 1>)
        grid = (cdiv(x.dim(1), BC))
    {
        let c0 = program_id(0) * BC;
        let mut acc = zeros::<f32>([BC]);
        for r in range(BR, x.dim(0), BR) {
            acc = acc + sum(load(x, [r, c0], [BR, BC]), 0);
        }
        store(y, [c0], acc);
    }
}

/// The whole-row column pass (`fused::column_passes`) under block programs, on one and two
/// threads, against the interpreter bit for bit: `col_sum_tile`'s programs take the folded
/// accumulators (`fused::folded_column_loops` moves by its program count, also with other
/// tile heights and widths), the two others' do not and run their loops. Ragged shapes
/// (columns not a multiple of 16 or of the tile; rows not a multiple of the tile height) and
/// inputs with NaN, ±inf and -0.0.
#[test]
fn column_pass_folds_only_the_loops_it_computed() {
    let _level = level_guard();
    column_pass_bits();
    column_pass_bf16_bits();
}

/// bf16 column sums, means and maxes through the whole-row pass on one and two threads,
/// rows of whole cache lines (the AVX-512 sum's 32-column pair blocks and eight-row passes,
/// strips of 2048 columns) with ragged row counts (tiles ending in 4- and 1-row leftovers),
/// from a 64-byte-aligned block (`randn`) and from `from_vec` (its start may sit inside a
/// cache line: a head and tail of single vectors), random and with NaN/±inf/-0.0: equal to
/// the interpreter's bits.
fn column_pass_bf16_bits() {
    let specials = [
        bf16::from_bits(0x7FC1),
        bf16::NEG_INFINITY,
        bf16::INFINITY,
        bf16::from_bits(0x8000),
    ];
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(r, c)) in [(77, 2080), (130, 4160), (64, 2048), (9, 4128), (205, 320)]
                .iter()
                .enumerate()
            {
                let seed = 1700 + 10 * i as u64;
                for (x, kind) in [
                    (Tensor::<bf16>::randn(&[r, c], seed), "aligned"),
                    (with_specials(r, c, seed + 1, &[]), "from_vec"),
                    (with_specials(r, c, seed + 2, &specials), "specials"),
                ] {
                    let tag = format!("[{r}, {c}] {kind} {threads}T");
                    let before = fused::column_passes();
                    let cr = fused::direct_column_reductions;
                    col_bf16_bits(&tag, cr, &x);
                    assert_eq!(fused::column_passes(), before + 3, "{tag}: column passes");
                }
            }
        });
    }
}

/// bf16 `add`, `sub`, `mul` and `div` (the AVX-512 loop of 32 elements per step and the
/// tail after it) and bf16 column sums (the whole-row pass's tile sums from zero, added into
/// the accumulators in their last pass) on odd shapes and two with whole strips, on one and
/// two threads, inputs with NaN/±inf/-0.0 and subnormals: the interpreter's bits.
#[test]
fn bf16_pair_loops_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    bf16_pair_loops_bits();
}

/// `add`, `sub`, `mul` and `div` of bf16 `x` and `y` on the direct elementwise loops, bit for
/// bit against the interpreter (named `"<op> bf16 {tag}"`).
fn bf16_binary_ops_same_bits(tag: &str, x: &Tensor<bf16>, y: &Tensor<bf16>) {
    let launches = fused::launches;
    direct_same_bits(&format!("add bf16 {tag}"), launches, true, || {
        add_bf16(x, y).unwrap()
    });
    direct_same_bits(&format!("sub bf16 {tag}"), launches, true, || {
        sub_bf16(x, y).unwrap()
    });
    direct_same_bits(&format!("mul bf16 {tag}"), launches, true, || {
        mul_bf16(x, y).unwrap()
    });
    direct_same_bits(&format!("div bf16 {tag}"), launches, true, || {
        div_bf16(x, y).unwrap()
    });
}

fn bf16_pair_loops_bits() {
    let sp = bf16_specials();
    for threads in [1, 2] {
        on_threads(threads, || {
            let shapes = [
                (37, 300),
                (1, 1),
                (9, 1025),
                (300, 1),
                (64, 4096),
                (130, 2048),
            ];
            for (i, &(r, c)) in shapes.iter().enumerate() {
                let s = 4100 + 10 * i as u64;
                let tag = format!("[{r}, {c}] {threads}T");
                let (x, y) = (
                    with_specials(r, c, s + 1, &sp),
                    with_specials(r, c, s + 2, &sp),
                );
                bf16_binary_ops_same_bits(&tag, &x, &y);
                let cr = fused::direct_column_reductions;
                direct_same_bits(&format!("col sum bf16 {tag}"), cr, true, || {
                    col_sum_bf16(&x).unwrap()
                });
            }
        });
    }
}

/// Column sums through the whole-row pass (its tile sums start from zero registers) where
/// columns hold only -0.0, or -0.0 in the first rows of every tile, or -0.0 everywhere but one
/// row: the interpreter starts each tile's sum and the accumulators at +0.0 (`+0.0 + -0.0 =
/// +0.0`), so an all -0.0 column sums to +0.0. (The sign a tile's partial starts from cannot
/// show here: the accumulator it is added to is never -0.0; the tile kernels' own start is
/// checked by `colreduce`'s `tile_sums_start_from_positive_zero`.) f32 and bf16, tiles whose
/// rows all lie inside the tensor and a last partial one, one and two threads, random values
/// in the other columns.
#[test]
fn column_sums_of_negative_zeros_keep_the_interpreters_sign() {
    let _level = level_guard();
    negative_zero_column_bits();
}

fn negative_zero_column_bits() {
    // Column `j`'s kind by `j % 5`: 0 all -0.0, 1 -0.0 in each 64-row tile's first 5 rows, 2
    // -0.0 but row 7 +0.0, 3 and 4 random.
    let zeros = |r: usize, c: usize, v: &mut [f32]| {
        for u in 0..r {
            for j in 0..c {
                match j % 5 {
                    0 => v[u * c + j] = -0.0,
                    1 if u % 64 < 5 => v[u * c + j] = -0.0,
                    2 => v[u * c + j] = if u == 7 { 0.0 } else { -0.0 },
                    _ => {}
                }
            }
        }
    };
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(r, c)) in [(128, 4160), (130, 1000), (64, 2080), (200, 513)]
                .iter()
                .enumerate()
            {
                let seed = 4300 + 10 * i as u64;
                let mut v = Tensor::<f32>::randn(&[r, c], seed)
                    .as_slice()
                    .unwrap()
                    .to_vec();
                zeros(r, c, &mut v);
                let x = Tensor::from_vec(v.clone(), &[r, c]).unwrap();
                let xb = Tensor::from_vec(v.iter().map(|&f| bf16::from_f32(f)).collect(), &[r, c])
                    .unwrap();
                let tag = format!("[{r}, {c}] {threads}T");
                let cr = fused::direct_column_reductions;
                let passes = fused::column_passes();
                direct_same_bits(&format!("col sum -0.0 {tag}"), cr, true, || {
                    col_sum(&x).unwrap()
                });
                direct_same_bits(&format!("col sum bf16 -0.0 {tag}"), cr, true, || {
                    col_sum_bf16(&xb).unwrap()
                });
                assert!(fused::column_passes() >= passes + 2, "{tag}: column passes");
                // The all -0.0 columns are +0.0 (the interpreter's sign), as a check of the
                // inputs above.
                let s = col_sum(&x).unwrap();
                assert_eq!(s.as_slice().unwrap()[0].to_bits(), 0, "{tag}: column 0");
            }
        });
    }
}

fn column_pass_bits() {
    let specials = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, -0.0];
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(r, c)) in [(130, 1000), (1031, 4100), (64, 300), (9, 1025), (700, 513)]
                .iter()
                .enumerate()
            {
                for (x, kind) in [
                    (with_specials(r, c, 1500 + i as u64, &[]), "randn"),
                    (with_specials(r, c, 1550 + i as u64, &specials), "specials"),
                ] {
                    let launch = |def: &'static TileDef, knobs: &[(&str, i64)]| {
                        let mut y = Tensor::<f32>::full(&[c], f32::NAN).unwrap();
                        let mut args = [Arg::In(x.arg()), Arg::Out(y.arg_mut().unwrap())];
                        def.launch(knobs, &mut args).unwrap();
                        y
                    };
                    for (def, name, knobs, folds) in [
                        (&col_sum_tile::DEF, "tile", &[][..], c.div_ceil(256)),
                        (
                            &col_sum_tile::DEF,
                            "tile 16x128",
                            &[("BR", 16), ("BC", 128)][..],
                            c.div_ceil(128),
                        ),
                        // Tiles of 13 rows: three four-row passes and a one-row pass each.
                        (
                            &col_sum_tile::DEF,
                            "tile 13x256",
                            &[("BR", 13)][..],
                            c.div_ceil(256),
                        ),
                        (&col_sum_from_one::DEF, "from one", &[][..], 0),
                        (&col_sum_skip_first::DEF, "skip first", &[][..], 0),
                    ] {
                        let tag = format!("col sum {name} [{r}, {c}] {kind} {threads}T");
                        let (passes, folded) =
                            (fused::column_passes(), fused::folded_column_loops());
                        let fast = launch(def, knobs);
                        assert_eq!(fused::column_passes(), passes + 1, "{tag}: no column pass");
                        assert_eq!(
                            fused::folded_column_loops(),
                            folded + folds as u64,
                            "{tag}: folded program loops"
                        );
                        let slow = fused::with_interpreter(|| launch(def, knobs));
                        assert_same_bits(&tag, &fast, &slow);
                    }
                }
            }
        });
    }
}

// Column reductions whose rows past the tensor read an `other` of 1.5 (a sum that must add
// it once per such row), of -0.0 (adding it changes nothing), and a max reading 2.5.
tessera::tile! {
    fn col_sum_other<const BR: i64 = 64, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 1>)
        grid = (cdiv(x.dim(1), BC))
    {
        let c0 = program_id(0) * BC;
        let mut acc = zeros::<f32>([BC]);
        for r in range(0, x.dim(0), BR) {
            acc = acc + sum(load(x, [r, c0], [BR, BC], other = 1.5), 0);
        }
        store(y, [c0], acc);
    }
}

tessera::tile! {
    fn col_sum_neg_zero<const BR: i64 = 64, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 1>)
        grid = (cdiv(x.dim(1), BC))
    {
        let c0 = program_id(0) * BC;
        let mut acc = zeros::<f32>([BC]);
        for r in range(0, x.dim(0), BR) {
            acc = acc + sum(load(x, [r, c0], [BR, BC], other = -0.0), 0);
        }
        store(y, [c0], acc);
    }
}

tessera::tile! {
    fn col_max_other<const BR: i64 = 64, const BC: i64 = 256>(x: In<f32, 2>, y: Out<f32, 1>)
        grid = (cdiv(x.dim(1), BC))
    {
        let c0 = program_id(0) * BC;
        let mut acc = full::<f32>([BC], -inf);
        for r in range(0, x.dim(0), BR) {
            acc = maximum(acc, max(load(x, [r, c0], [BR, BC], other = 2.5), 0));
        }
        store(y, [c0], acc);
    }
}

/// Column reductions whose last tile of rows reaches past the tensor (row counts just below,
/// at and above the 64-row tile, and tiles of 16 rows), where the rows past the tensor
/// combine the load's `other` into every column (once where that is idempotent: a zero
/// added, a max), on one and two threads, with columns of -0.0 and NaN: the library's
/// column sum, mean and max (f32 and bf16) and block programs with an `other` of 1.5, -0.0
/// and (a max) 2.5, against the interpreter bit for bit; with more columns than one
/// program's tile the whole-row pass runs (`fused::column_passes`), with fewer each
/// program's loop.
#[test]
fn column_reductions_of_padded_row_tiles_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    padded_column_bits();
}

fn padded_column_bits() {
    let specials = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, -0.0];
    let cr = fused::direct_column_reductions;
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(r, c)) in [
                (1, 300),
                (2, 257),
                (37, 300),
                (63, 300),
                (64, 300),
                (65, 300),
                (127, 255),
                (129, 513),
                (15, 200),
                (17, 16),
            ]
            .iter()
            .enumerate()
            {
                let seed = 3100 + 10 * i as u64 + threads as u64;
                let mut v = with_specials(r, c, seed, &specials).to_vec().unwrap();
                // A column of -0.0 and one of NaN.
                for u in 0..r {
                    v[u * c] = -0.0;
                    v[u * c + c - 1] = f32::NAN;
                }
                let x = Tensor::from_vec(v, &[r, c]).unwrap();
                let xb = to_bf16(&x);
                let tag = format!("[{r}, {c}] {threads}T");
                direct_same_bits(&format!("col sum {tag}"), cr, true, || col_sum(&x).unwrap());
                direct_same_bits(&format!("col mean {tag}"), cr, true, || {
                    col_mean(&x).unwrap()
                });
                direct_same_bits(&format!("col max {tag}"), cr, true, || col_max(&x).unwrap());
                col_bf16_bits(&tag, cr, &xb);
                for (def, name) in [
                    (&col_sum_other::DEF, "other 1.5"),
                    (&col_sum_neg_zero::DEF, "other -0.0"),
                    (&col_max_other::DEF, "max other 2.5"),
                ] {
                    for knobs in [&[][..], &[("BR", 16), ("BC", 128)][..]] {
                        let launch = || {
                            let mut y = Tensor::<f32>::full(&[c], f32::NAN).unwrap();
                            let mut args = [Arg::In(x.arg()), Arg::Out(y.arg_mut().unwrap())];
                            def.launch(knobs, &mut args).unwrap();
                            y
                        };
                        let tag = format!("col {name} {knobs:?} {tag}");
                        let before = cr();
                        let fast = launch();
                        assert!(cr() > before, "{tag}: the direct kernel did not run");
                        let slow = fused::with_interpreter(launch);
                        assert_same_bits(&tag, &fast, &slow);
                    }
                }
            }
        });
    }
}

/// Whole-tensor transposes (f32 and bf16, random values with NaNs, ±inf and -0.0) whose
/// source rows and columns are just below, at and above multiples of the AVX-512 blocks
/// (16 f32, 32 bf16 values), so the edges take the masked partial blocks, on one thread
/// and two: the interpreter's bits (a bf16 NaN made quiet as it does).
#[test]
fn transposes_of_ragged_edges_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    ragged_transpose_bits();
}

fn ragged_transpose_bits() {
    let f_specials = [
        f32::NAN,
        f32::from_bits(0x7FA0_0001),
        f32::NEG_INFINITY,
        -0.0,
    ];
    let b_specials = [
        bf16::from_bits(0x7FC1),
        bf16::from_bits(0x7F81),
        bf16::NEG_INFINITY,
        bf16::from_bits(0x8000),
    ];
    let t = fused::whole_transposes;
    let sizes = [1, 5, 15, 16, 17, 31, 32, 33, 47, 63, 65, 300];
    for (i, &r) in sizes.iter().enumerate() {
        for (j, &c) in sizes.iter().enumerate() {
            let seed = 4000 + 100 * i as u64 + 2 * j as u64;
            let x = with_specials(r, c, seed, &f_specials);
            let xb = with_specials(r, c, seed + 1, &b_specials);
            for threads in [1, 2] {
                on_threads(threads, || {
                    let tag = format!("[{r}, {c}] {threads}T");
                    direct_same_bits(&format!("transpose {tag}"), t, false, || {
                        transpose_f32(&x).unwrap()
                    });
                    direct_same_bits(&format!("transpose bf16 {tag}"), t, false, || {
                        transpose_bf16(&xb).unwrap()
                    });
                });
            }
        }
    }
}

/// Whole-tensor transposes of one-row and one-column tensors of 0.5 to 2 MiB (f32 and
/// bf16, NaNs, ±inf and -0.0), on one thread and two: a `[N, 1]` source of at least 1 MiB
/// with `N` a multiple of the cache line takes the non-temporal branch with no full block
/// (its passes all masked edge blocks), `N + 1` or `N + 17` the plain one; a `[1, N]` source
/// is split in column bands on two threads, each one row of masked 16 × 16 / 32 × 32 edge
/// blocks. The interpreter's bits (a bf16 NaN made quiet as it does). Each launch follows a
/// freed block of its output's size filled with a NaN no input holds, alone in the host cache
/// (`host_cache::release` first), so an output of 1 MiB or more takes it (a smaller one may
/// get it back from the system allocator): the cache hands back its oldest block of a size,
/// and the launches before transposed the same source, so without this an element left
/// unwritten (a band skipped on two threads) could read back their correct value.
#[test]
fn one_wide_transposes_of_a_mebibyte_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let f_specials = [f32::NAN, f32::from_bits(0x7FA0_0001), f32::INFINITY, -0.0];
    let b_specials = [
        bf16::from_bits(0x7F81),
        bf16::from_bits(0xFFC3),
        bf16::NEG_INFINITY,
        bf16::from_bits(0x8000),
    ];
    let t = fused::whole_transposes;
    for (i, n) in [1 << 18, (1 << 18) + 1, 1 << 19, (1 << 19) + 17]
        .into_iter()
        .enumerate()
    {
        for (k, (r, c)) in [(n, 1), (1, n)].into_iter().enumerate() {
            let seed = 9000 + 10 * i as u64 + 2 * k as u64;
            let x = with_specials(r, c, seed, &f_specials);
            let xb = with_specials(r, c, seed + 1, &b_specials);
            for threads in [1, 2] {
                on_threads(threads, || {
                    let tag = format!("[{r}, {c}] {threads}T");
                    direct_same_bits(&format!("transpose {tag}"), t, false, || {
                        tessera::host_cache::release();
                        drop(Tensor::<f32>::full(&[c, r], f32::from_bits(0x7FC0_0BAD)).unwrap());
                        transpose_f32(&x).unwrap()
                    });
                    direct_same_bits(&format!("transpose bf16 {tag}"), t, false, || {
                        tessera::host_cache::release();
                        drop(Tensor::<bf16>::full(&[c, r], bf16::from_bits(0x7FDB)).unwrap());
                        transpose_bf16(&xb).unwrap()
                    });
                });
            }
        }
    }
}

/// Row loops (layernorm, rmsnorm, softmax; f32 and bf16) on two threads, on tensors just
/// below and just above the 4 MiB from which a launch splits its programs among the threads
/// at once (below it the first programs run on the calling thread until a time budget
/// passes), and on small ones that the calling thread finishes alone: the interpreter's
/// bits.
#[test]
fn row_loops_around_the_serial_launch_size_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let programs = fused::norm_programs;
    on_threads(2, || {
        // f32 rows of 1023 and 1025 values: 1024 rows hold 4 MiB - 4 KiB and 4 MiB + 4 KiB.
        for (i, &(r, c)) in [(37, 300), (3, 5), (1024, 1023), (1024, 1025)]
            .iter()
            .enumerate()
        {
            let s = 5200 + 10 * i as u64;
            let tag = format!("[{r}, {c}] 2T");
            let x = Tensor::<f32>::randn(&[r, c], s + 1);
            let g = Tensor::<f32>::randn(&[c], s + 2);
            let b = Tensor::<f32>::randn(&[c], s + 3);
            norms_bits_match(&tag, &x, &g, &b);
            bits_match(&format!("softmax {tag}"), fused::softmax_programs, || {
                tessera_kernels::softmax(&x).unwrap()
            });
            let xb = to_bf16(&x);
            let gb = to_bf16(&g);
            bits_match(&format!("rmsnorm bf16 {tag}"), programs, || {
                tessera_kernels::rmsnorm(&xb, &gb).unwrap()
            });
        }
    });
}

#[test]
fn depthwise_conv_agrees() {
    let _level = level_guard();
    depthwise_bits();
    depthwise_taps_bits();
    fresh_outputs_bits();
}

// Doubles `x` into the rows of `y` it shares with `x`: a `y` with more rows than `x` is
// only partly written (the grid follows `x`).
tessera::tile! {
    fn twice_top<const BR: i64 = 4, const BC: i64 = 64>(x: In<f32, 2>, y: Out<f32, 2>)
        grid = (cdiv(x.dim(0), BR), cdiv(x.dim(1), BC))
    {
        let i = program_id(0) * BR;
        let j = program_id(1) * BC;
        store(y, [i, j], load(x, [i, j], [BR, BC]) * 2.0);
    }
}

/// Fresh outputs of `TileDef::launch_tuned_new` (`depthwise_conv2d`'s), on one and two
/// threads: where the direct depthwise path writes the whole output (every shape here) it
/// is proven covered (`fused::covered_outputs` moves) and not zeroed first, and equals the
/// interpreter's bit for bit (each launch follows a freed NaN block of its output's size,
/// which the allocator may hand back, so a stale element would show); the swapped-loop
/// depthwise kernel (not the direct path) and `twice_top` into a taller output (rows its
/// grid never reaches) are not proven covered, so their outputs are zeroed first: the
/// swapped kernel equals the interpreter's, and `twice_top`'s unreached rows read `+0.0`.
fn fresh_outputs_bits() {
    let dspace = tessera_kernels::conv::depthwise_space();
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(h, w, ch, kh, kw)) in [
                (10, 12, 8, 3, 3),
                (17, 9, 70, 3, 3),
                (42, 34, 64, 3, 3),
                (6, 40, 130, 5, 5),
                (1, 1, 1, 1, 1),
                (3, 3, 16, 3, 3),
                (300, 3, 16, 3, 3),
            ]
            .iter()
            .enumerate()
            {
                let x = Tensor::<f32>::randn(&[h, w, ch], 1300 + i as u64);
                let f = Tensor::<f32>::randn(&[kh, kw, ch], 1350 + i as u64);
                let xs = specials(&x, w * ch);
                let shape = [h - kh + 1, w - kw + 1, ch];
                let tag = format!("fresh depthwise [{h}, {w}, {ch}] * [{kh}, {kw}], {threads}T");
                let fresh = |x: &Tensor<f32>| {
                    drop(Tensor::<f32>::full(&shape, f32::NAN).unwrap());
                    tessera_kernels::depthwise_conv2d(x, &f).unwrap()
                };
                for x in [&x, &xs] {
                    let before = fused::covered_outputs();
                    let fast = fresh(x);
                    assert_eq!(
                        fused::covered_outputs(),
                        before + 1,
                        "{tag}: output not proven covered"
                    );
                    let slow = fused::with_interpreter(|| fresh(x));
                    assert_eq!(
                        fused::covered_outputs(),
                        before + 1,
                        "{tag}: an interpreter launch must zero its output"
                    );
                    assert_same_bits(&tag, &fast, &slow);
                }
                let before = fused::covered_outputs();
                let swapped = |_: ()| {
                    drop(Tensor::<f32>::full(&shape, f32::NAN).unwrap());
                    depthwise_ji::DEF
                        .launch_tuned_new::<f32>(&dspace, &[x.arg(), f.arg()], &shape)
                        .unwrap()
                        .0
                };
                let fast = swapped(());
                assert_eq!(
                    fused::covered_outputs(),
                    before,
                    "{tag}: the swapped kernel's stores are not a proven cover"
                );
                let slow = fused::with_interpreter(|| swapped(()));
                assert_same_bits(&format!("{tag} swapped"), &fast, &slow);
            }
            let space = TileSpace::grid(&[("BR", &[1, 4]), ("BC", &[32, 128])]);
            for (i, &(r, c)) in [(37, 300), (1, 1), (9, 1025), (300, 1)].iter().enumerate() {
                let x = Tensor::<f32>::randn(&[r, c], 1400 + i as u64);
                let launch = |rows: usize| {
                    drop(Tensor::<f32>::full(&[rows, c], f32::NAN).unwrap());
                    twice_top::DEF
                        .launch_tuned_new::<f32>(&space, &[x.arg()], &[rows, c])
                        .unwrap()
                        .0
                };
                let tag = format!("twice_top [{r}, {c}], {threads}T");
                let before = fused::covered_outputs();
                let same = launch(r);
                assert_eq!(fused::covered_outputs(), before + 1, "{tag}: not covered");
                let tall = launch(2 * r + 3);
                assert_eq!(
                    fused::covered_outputs(),
                    before + 1,
                    "{tag}: a taller output is not covered"
                );
                let (xv, sv, tv) = (
                    x.to_vec().unwrap(),
                    same.to_vec().unwrap(),
                    tall.to_vec().unwrap(),
                );
                for k in 0..r * c {
                    assert_eq!(sv[k].to_bits(), (2.0 * xv[k]).to_bits(), "{tag} at {k}");
                    assert_eq!(
                        tv[k].to_bits(),
                        (2.0 * xv[k]).to_bits(),
                        "{tag} tall at {k}"
                    );
                }
                assert!(
                    tv[r * c..].iter().all(|v| v.to_bits() == 0),
                    "{tag}: rows the grid never reaches must read +0.0"
                );
                let slow = fused::with_interpreter(|| launch(2 * r + 3));
                assert_same_bits(&format!("{tag} tall"), &tall, &slow);
            }
        });
    }
}

/// The 3×3 depthwise kernel in bands of output rows (`fused::depthwise_tap_launches` moves:
/// every shape here has output rows of at least 16 floats, so every SIMD level takes it)
/// against the interpreter, bit for bit: output heights that leave 1 to 7 rows after the
/// bands of 4 (AVX-512 off AMD and AVX2; 8 at AVX-512 on AMD, 2 portable), one-pixel and one-row outputs, ragged channel counts
/// (1, 3, 70, 130: rows not a whole number of vectors), the bench's `[37, 300]` image
/// (`[37, 4, 64]`), inputs larger than the output needs, and inputs with NaN, ±inf, -0.0 and
/// ±1e30.
fn depthwise_taps_bits() {
    let counter = fused::depthwise_tap_launches;
    for (i, &(h, w, ch)) in [
        (3, 3, 16),
        (4, 3, 16),
        (23, 19, 32),
        (7, 40, 48),
        (10, 18, 64),
        (9, 35, 128),
        (6, 5, 80),
        (37, 4, 64),
        (17, 9, 70),
        (13, 21, 3),
        (12, 40, 1),
        (5, 6, 130),
        (20, 3, 16),
    ]
    .iter()
    .enumerate()
    {
        let seed = 900 + 10 * i as u64;
        let x = Tensor::<f32>::randn(&[h, w, ch], seed);
        let f = Tensor::<f32>::randn(&[3, 3, ch], seed + 1);
        let xs = specials(&x, w * ch);
        let mut fv = f.to_vec().unwrap();
        fv[ch + 1] = f32::NAN;
        fv[2 * ch] = -0.0;
        let fs = Tensor::from_vec(fv, &[3, 3, ch]).unwrap();
        for (x, f, kind) in [
            (&x, &f, "randn"),
            (&xs, &f, "specials"),
            (&x, &fs, "filter"),
        ] {
            let tag = format!("depthwise taps [{h}, {w}, {ch}] {kind}");
            bits_match(&tag, counter, || {
                tessera_kernels::depthwise_conv2d(x, f).unwrap()
            });
        }
        // An output smaller than the input allows: the taps stop short of `x`'s edges.
        let (oh, ow) = ((h - 2).div_ceil(2), (w - 2).div_ceil(2));
        let tag = format!("depthwise taps [{h}, {w}, {ch}] into [{oh}, {ow}]");
        bits_match(&tag, counter, || {
            let mut y = Tensor::<f32>::zeros(&[oh, ow, ch]).unwrap();
            let mut args = [
                Arg::In(x.arg()),
                Arg::In(f.arg()),
                Arg::Out(y.arg_mut().unwrap()),
            ];
            tessera_kernels::conv::depthwise_conv2d::DEF
                .launch(&[], &mut args)
                .unwrap();
            y
        });
    }
}

/// A 3×3 depthwise convolution whose output is past the non-temporal threshold (streamed
/// stores), fresh and into a kept output, against the interpreter, bit for bit; also a
/// ragged one (70 channels, rows of 35 vectors, a height leaving 5 rows after bands of 8
/// (AVX-512 on AMD) and 1 after bands of 4 (AVX-512 off AMD, AVX2)) from fresh clock-seeded
/// inputs.
#[test]
fn depthwise_streamed_to_a_large_output_matches_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    // Streamed on one thread; plain stores on two (an output under 3/4 of the LLC).
    for threads in [1, 2] {
        on_threads(threads, depthwise_large_bits);
        on_threads(threads, depthwise_large_ragged_bits);
    }
}

fn depthwise_large_ragged_bits() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let (w, ch) = (10, 70);
    let oh = ((llc() / 8 * 3).div_ceil(4 * (w - 2) * ch) + 1).next_multiple_of(8) + 5;
    let x = Tensor::<f32>::randn(&[oh + 2, w, ch], seed);
    let f = Tensor::<f32>::randn(&[3, 3, ch], seed ^ 0x9E37_79B9);
    let counter = fused::depthwise_tap_launches;
    let tag = format!("depthwise large ragged [{oh}, {w}, {ch}] seed {seed}");
    bits_match(&tag, counter, || {
        tessera_kernels::depthwise_conv2d(&x, &f).unwrap()
    });
}

fn depthwise_large_bits() {
    let (w, ch) = (34, 64);
    let oh = (llc() / 8 * 3).div_ceil(4 * (w - 2) * ch) + 1;
    let x = Tensor::<f32>::randn(&[oh + 2, w, ch], 990);
    let f = Tensor::<f32>::randn(&[3, 3, ch], 991);
    let counter = fused::depthwise_tap_launches;
    bits_match("depthwise large", counter, || {
        tessera_kernels::depthwise_conv2d(&x, &f).unwrap()
    });
    bits_match("depthwise large into", counter, || {
        let mut y = Tensor::<f32>::full(&[oh, w - 2, ch], f32::NAN).unwrap();
        tessera_kernels::conv::depthwise_conv2d_into(&x, &f, &mut y).unwrap();
        y
    });
}

// The library's depthwise kernel with its tap loops swapped (`j` outside `i`): it sums the
// taps in another order, so it must not run on the direct depthwise path.
tessera::tile! {
    fn depthwise_ji<const BH: i64 = 4, const BW: i64 = 16, const BC: i64 = 64>(x: In<f32, 3>, f: In<f32, 3>, y: Out<f32, 3>)
        grid = (cdiv(y.dim(0), BH), cdiv(y.dim(1), BW), cdiv(y.dim(2), BC))
    {
        let h0 = program_id(0) * BH;
        let w0 = program_id(1) * BW;
        let c0 = program_id(2) * BC;
        for r in range(0, BH, 1) {
            let mut acc = zeros::<f32>([BW, BC]);
            for j in range(0, f.dim(1), 1) {
                for i in range(0, f.dim(0), 1) {
                    let xv = load(x, [h0 + r + i, w0 + j, c0], [BW, BC]);
                    let fv = load(f, [i, j, c0], [BC]);
                    acc = acc + xv * expand(fv, 0);
                }
            }
            store(y, [h0 + r, w0, c0], acc);
        }
    }
}

/// `depthwise_conv2d` on the direct depthwise path (`fused::depthwise_launches` moves) against
/// the interpreter, bit for bit: ragged heights, widths and channel counts (3, 70, 130: not
/// multiples of 8, 16 or 64), images as small as the filter, 1×1, 3×3, 5×5 and non-square
/// filters, the default knobs and other tiles; the kernel with its tap loops swapped
/// declines the path and still agrees.
fn depthwise_bits() {
    let counter = fused::depthwise_launches;
    for (i, &(h, w, ch, kh, kw)) in [
        (10, 12, 8, 3, 3),
        (1, 1, 1, 1, 1),
        (17, 9, 70, 3, 3),
        (6, 40, 130, 5, 5),
        (3, 3, 3, 3, 3),
        (5, 5, 130, 5, 5),
        (3, 29, 70, 3, 3),
        (40, 5, 3, 5, 5),
        (33, 21, 64, 3, 5),
        (70, 18, 130, 5, 3),
        (9, 9, 16, 1, 1),
    ]
    .iter()
    .enumerate()
    {
        let x = Tensor::<f32>::randn(&[h, w, ch], 300 + i as u64);
        let f = Tensor::<f32>::randn(&[kh, kw, ch], 350 + i as u64);
        let tag = format!("depthwise [{h}, {w}, {ch}] * [{kh}, {kw}]");
        bits_match(&tag, counter, || {
            tessera_kernels::depthwise_conv2d(&x, &f).unwrap()
        });
        let launch = |def: &'static TileDef, knobs: &[(&str, i64)]| {
            let mut y = Tensor::<f32>::zeros(&[h - kh + 1, w - kw + 1, ch]).unwrap();
            let mut args = [
                Arg::In(x.arg()),
                Arg::In(f.arg()),
                Arg::Out(y.arg_mut().unwrap()),
            ];
            def.launch(knobs, &mut args).unwrap();
            y
        };
        let dw = &tessera_kernels::conv::depthwise_conv2d::DEF;
        for knobs in [
            [("BH", 1), ("BW", 8), ("BC", 16)],
            [("BH", 8), ("BW", 64), ("BC", 128)],
        ] {
            bits_match(&format!("{tag} {knobs:?}"), counter, || launch(dw, &knobs));
        }
        let before = counter();
        let swapped = launch(&depthwise_ji::DEF, &[]);
        assert_eq!(
            counter(),
            before,
            "{tag}: the swapped tap loops ran the direct path"
        );
        let slow = fused::with_interpreter(|| launch(&depthwise_ji::DEF, &[]));
        assert_eq!(
            swapped.to_vec().unwrap(),
            slow.to_vec().unwrap(),
            "{tag} swapped"
        );
    }
}

/// Outputs a fast-path launch provably writes whole are not zeroed first
/// (`fused::covered_outputs` counts them): every elementwise, row-wise, column-reduction and
/// transpose class, f32 and bf16, ragged shapes included, and a plain matmul (its direct GEMM
/// writes the whole output); an interpreter launch zeroes its output. Whether the unzeroed outputs hold the right values is
/// what the `agree` tests above check (fresh allocations reuse freed, non-zero memory).
#[test]
fn outputs_written_whole_are_not_zeroed_first() {
    let _level = level_guard();
    for (i, &(r, c)) in [(37, 300), (1, 1), (5, 2100), (70, 9)].iter().enumerate() {
        let s = 500 + 10 * i as u64;
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let y = Tensor::<f32>::randn(&[r, c], s + 2);
        let g = Tensor::<f32>::randn(&[c], s + 3);
        let xb = Tensor::<bf16>::randn(&[r, c], s + 4);
        let gb = Tensor::<bf16>::randn(&[c], s + 5);
        let covered = |name: &str, f: &dyn Fn()| {
            let before = fused::covered_outputs();
            f();
            assert_eq!(
                fused::covered_outputs(),
                before + 1,
                "{name} [{r}, {c}]: output not proven covered"
            );
            fused::with_interpreter(f);
            assert_eq!(
                fused::covered_outputs(),
                before + 1,
                "{name} [{r}, {c}]: an interpreter launch must zero its output"
            );
        };
        covered("softmax", &|| drop(tessera_kernels::softmax(&x).unwrap()));
        covered("layernorm", &|| {
            drop(tessera_kernels::layernorm(&x, &g, &g).unwrap())
        });
        covered("rmsnorm bf16", &|| drop(rmsnorm_bf16(&xb, &gb).unwrap()));
        covered("gelu", &|| drop(tessera_kernels::gelu(&x).unwrap()));
        covered("add", &|| drop(tessera_kernels::add(&x, &y).unwrap()));
        covered("mul", &|| drop(tessera_kernels::mul(&x, &g).unwrap()));
        covered("add bf16", &|| drop(add_bf16(&xb, &xb).unwrap()));
        covered("row sum", &|| drop(row_sum(&x).unwrap()));
        covered("col mean", &|| drop(col_mean(&x).unwrap()));
        covered("col sum bf16", &|| drop(col_sum_bf16(&xb).unwrap()));
        covered("transpose", &|| drop(transpose_scale(&x).unwrap()));
        covered("transpose bf16", &|| drop(transpose_bf16(&xb).unwrap()));
    }
    let a = Tensor::<f32>::randn(&[37, 300], 590);
    let b = Tensor::<f32>::randn(&[300, 20], 591);
    let before = fused::covered_outputs();
    let direct = tessera_kernels::matmul(&a, &b).unwrap();
    assert_eq!(
        fused::covered_outputs(),
        before + 1,
        "a plain matmul's direct GEMM writes its whole output"
    );
    let interp = fused::with_interpreter(|| tessera_kernels::matmul(&a, &b).unwrap());
    assert_eq!(
        fused::covered_outputs(),
        before + 1,
        "an interpreter matmul must zero its output"
    );
    assert_eq!(direct.as_slice().unwrap(), interp.as_slice().unwrap());
}

/// A policy the fast path does not implement is left to the interpreter, never approximated.
#[test]
fn kahan_reductions_stay_on_the_interpreter() {
    let _level = level_guard();
    let x = Tensor::<f32>::randn(&[37, 300], 400);
    let before = fused::launches();
    let y = row_sum_kahan(&x).unwrap();
    assert_eq!(fused::launches(), before, "kahan_sum must not run fused");
    let want = fused::with_interpreter(|| row_sum_kahan(&x).unwrap());
    assert_eq!(y.to_vec().unwrap(), want.to_vec().unwrap());
}

/// Matmul kernels take the direct GEMM path, not the fused chunk executor.
#[test]
fn matmul_stays_on_the_gemm_path() {
    let _level = level_guard();
    let a = Tensor::<f32>::randn(&[37, 300], 401);
    let b = Tensor::<f32>::randn(&[300, 20], 402);
    let (before, direct) = (fused::launches(), matmul::launches());
    tessera_kernels::matmul(&a, &b).unwrap();
    assert_eq!(fused::launches(), before);
    assert_eq!(matmul::launches(), direct + 1);
}

/// Seeded `(m, k, n)` GEMM shapes: `m = 1`, ragged edges of the CPU's `[128, 256, 64]`
/// matmul tile on every axis, `k` below one K step, and random ones.
fn gemm_shapes() -> Vec<(usize, usize, usize)> {
    let mut v = vec![
        (1, 300, 70),
        (37, 300, 45),
        (130, 65, 260),
        (140, 200, 30),
        (3, 1, 5),
        (8, 129, 257),
    ];
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..3 {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.push((
            1 + (s >> 33) as usize % 140,
            1 + (s >> 20) as usize % 200,
            1 + (s >> 7) as usize % 300,
        ));
    }
    v
}

/// Runs `f` on the direct GEMM path (checking that it ran) and on the interpreter's K loop:
/// bit for bit the same output.
fn same_bits<T: Element>(name: &str, f: impl Fn() -> Tensor<T>) -> Tensor<T> {
    let before = matmul::launches();
    let fast = f();
    assert!(
        matmul::launches() > before,
        "{name}: the direct GEMM path did not run"
    );
    let slow = fused::with_interpreter(&f);
    let bits = |t: &Tensor<T>| -> Vec<u64> {
        t.to_f64_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    assert_eq!(fast.shape(), slow.shape(), "{name}");
    assert!(
        bits(&fast) == bits(&slow),
        "{name}: direct GEMM and interpreter differ"
    );
    fast
}

/// A `fast` bf16 product: on the direct path; when that launch ran on `vdpbf16ps` (pairs of
/// k per step, `matmul::dot_launches`), within `(k + 2)·ε_f32` of the interpreter's result
/// relative to the largest magnitude of either (both are f32 sums of the same exact
/// products), else bit for bit the interpreter's.
fn bf16_product<T: Element>(name: &str, k: usize, f: impl Fn() -> Tensor<T>) -> Tensor<T> {
    let (before, dot) = (matmul::launches(), matmul::dot_launches());
    let fast = f();
    assert!(
        matmul::launches() > before,
        "{name}: the direct GEMM path did not run"
    );
    let slow = fused::with_interpreter(&f);
    let (x, y) = (fast.to_f64_vec().unwrap(), slow.to_f64_vec().unwrap());
    if matmul::dot_launches() == dot {
        // (This launch's own count: another test may force the SIMD level meanwhile.)
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(
            bits(&x) == bits(&y),
            "{name}: direct GEMM and interpreter differ"
        );
        return fast;
    }
    let scale = x.iter().chain(&y).fold(0.0f64, |m, v| m.max(v.abs()));
    // A bf16 output adds one rounding of each result (2^-8 relative, both sides).
    let out = if T::DTYPE == tessera::DType::BF16 {
        1.0 / 256.0
    } else {
        0.0
    };
    let tol = ((k + 2) as f64 * f32::EPSILON as f64 + out) * scale;
    for (j, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p - q).abs() <= tol,
            "{name}: element {j}: vdpbf16ps {p} vs interpreter {q} (tolerance {tol:e})"
        );
    }
    fast
}

/// The direct GEMM path of matmul kernels against the interpreter's step-by-step K loop (bit
/// for bit: both are one FMA chain per element in increasing k) and against f64 references:
/// plain f32, `deterministic`, bf16 and f16 inputs, epilogues (bias + GELU, an elementwise
/// product with a tensor and tanh), bf16 output. `fast` bf16 products on `vdpbf16ps` agree
/// within a tolerance instead (`bf16_product`); `deterministic` bf16 ones bit for bit.
#[test]
fn matmul_direct_gemm_agrees() {
    let _level = level_guard();
    let f64s = |t: &Tensor<f32>| t.to_f64_vec().unwrap();
    for (i, &(m, k, n)) in gemm_shapes().iter().enumerate() {
        let s = 700 + 10 * i as u64;
        let tag = format!("{m}x{k}x{n}");
        let a = Tensor::<f32>::randn(&[m, k], s + 1);
        let b = Tensor::<f32>::randn(&[k, n], s + 2);
        let bias = Tensor::<f32>::randn(&[n], s + 3);
        let want = reference::matmul(&f64s(&a), &f64s(&b), m, k, n);
        let c = same_bits(&format!("matmul {tag}"), || {
            tessera_kernels::matmul(&a, &b).unwrap()
        });
        let e = rel_error(&f64s(&c), &want);
        assert!(e < 1e-5, "matmul {tag} vs f64: {e:e}");
        let c = same_bits(&format!("matmul deterministic {tag}"), || {
            matmul_det(&a, &b).unwrap()
        });
        assert!(rel_error(&f64s(&c), &want) < 1e-5, "deterministic {tag}");
        let y = same_bits(&format!("linear+bias+gelu {tag}"), || {
            tessera_kernels::linear_bias_gelu(&a, &b, &bias).unwrap()
        });
        let bv = f64s(&bias);
        let want_g: Vec<f64> = (0..m * n)
            .map(|j| reference::gelu(want[j] + bv[j % n]))
            .collect();
        let e = rel_error(&f64s(&y), &want_g);
        assert!(e < 1e-5, "linear+bias+gelu {tag} vs f64: {e:e}");
        // bf16 inputs, f32 output: the inputs' values are exact in f32.
        let (ab, bb) = (
            Tensor::<bf16>::randn(&[m, k], s + 4),
            Tensor::<bf16>::randn(&[k, n], s + 5),
        );
        let c = bf16_product(&format!("matmul bf16→f32 {tag}"), k, || {
            tessera_kernels::matmul_bf16_f32(&ab, &bb).unwrap()
        });
        let c_det = same_bits(&format!("matmul bf16→f32 deterministic {tag}"), || {
            matmul_bf16_det(&ab, &bb).unwrap()
        });
        let e = rel_error(
            &f64s(&c_det),
            &reference::matmul(
                &ab.to_f64_vec().unwrap(),
                &bb.to_f64_vec().unwrap(),
                m,
                k,
                n,
            ),
        );
        assert!(
            e < 1e-5,
            "matmul bf16→f32 deterministic {tag} vs f64: {e:e}"
        );
        let want_b = reference::matmul(
            &ab.to_f64_vec().unwrap(),
            &bb.to_f64_vec().unwrap(),
            m,
            k,
            n,
        );
        let e = rel_error(&f64s(&c), &want_b);
        assert!(e < 1e-5, "matmul bf16→f32 {tag} vs f64: {e:e}");
        // bf16 output: one rounding of the f32 result.
        let c = bf16_product(&format!("matmul bf16 {tag}"), k, || {
            tessera_kernels::matmul(&ab, &bb).unwrap()
        });
        let e = rel_error(&c.to_f64_vec().unwrap(), &want_b);
        assert!(e < 1.0 / 128.0, "matmul bf16 {tag} vs f64: {e:e}");
        // f16 inputs, an epilogue reading another tensor.
        let (ah, bh) = (
            Tensor::<f16>::randn(&[m, k], s + 6),
            Tensor::<f16>::randn(&[k, n], s + 7),
        );
        let sc = Tensor::<f32>::randn(&[m, n], s + 8);
        let y = same_bits(&format!("tanh(matmul f16 * s) {tag}"), || {
            matmul_scale_tanh(&ah, &bh, &sc).unwrap()
        });
        let p = reference::matmul(
            &ah.to_f64_vec().unwrap(),
            &bh.to_f64_vec().unwrap(),
            m,
            k,
            n,
        );
        let sv = f64s(&sc);
        let want_t: Vec<f64> = (0..m * n).map(|j| (p[j] * sv[j]).tanh()).collect();
        let e = rel_error(&f64s(&y), &want_t);
        assert!(e < 1e-5, "tanh(matmul f16 * s) {tag} vs f64: {e:e}");
    }
}

/// Products of more rows than one 144-row block (`gemm::wide_tile`: on an AVX-512 CPU that
/// is not AMD they run on the 6×64 micro-tile, `Avx512Wide`; elsewhere on the others)
/// through the matmul launch, bit for bit the interpreter's K loop and close to f64: `m`
/// just over the block and over two (partial row tiles of 1, 3 and 5 rows), column
/// strips per thread with partial 64-column panels, row strips that each stay over one
/// block, one and two 512-deep k-blocks (the second accumulating into C), and `B`
/// packed by the first row block's micro-tiles or, with its k-block over 1 MiB, by the
/// separate pass. (`gemm_shapes` stays under 141 rows: none of its products reach it.)
#[test]
fn matmul_of_more_rows_than_one_block_agrees() {
    let _level = level_guard();
    let f64s = |t: &Tensor<f32>| t.to_f64_vec().unwrap();
    for (i, &(m, k, n)) in [
        (145, 521, 300),
        (151, 70, 333),
        (317, 600, 100),
        (147, 150, 1800),
        (295, 33, 65),
    ]
    .iter()
    .enumerate()
    {
        let s = 900 + 10 * i as u64;
        let tag = format!("{m}x{k}x{n}");
        let a = Tensor::<f32>::randn(&[m, k], s + 1);
        let b = Tensor::<f32>::randn(&[k, n], s + 2);
        let want = reference::matmul(&f64s(&a), &f64s(&b), m, k, n);
        let c = same_bits(&format!("matmul {tag}"), || {
            tessera_kernels::matmul(&a, &b).unwrap()
        });
        let e = rel_error(&f64s(&c), &want);
        assert!(e < 1e-5, "matmul {tag} vs f64: {e:e}");
        let c = same_bits(&format!("matmul deterministic {tag}"), || {
            matmul_det(&a, &b).unwrap()
        });
        assert!(rel_error(&f64s(&c), &want) < 1e-5, "deterministic {tag}");
    }
}

/// `kahan_sum` compensates across K tiles: its loop is not a plain K loop, so it keeps the
/// interpreter (the direct path never changes that policy's results).
#[test]
fn kahan_matmul_stays_on_the_interpreter() {
    let _level = level_guard();
    let a = Tensor::<f32>::randn(&[37, 300], 800);
    let b = Tensor::<f32>::randn(&[300, 20], 801);
    let before = matmul::launches();
    let c = matmul_kahan(&a, &b).unwrap();
    assert_eq!(
        matmul::launches(),
        before,
        "kahan_sum must not take the direct path"
    );
    let want = fused::with_interpreter(|| matmul_kahan(&a, &b).unwrap());
    assert_eq!(c.to_vec().unwrap(), want.to_vec().unwrap());
}

/// Runs `f` on the fast path (checking with `counter` that the path under test ran) and on
/// the interpreter: bit for bit the same output, except that any two NaNs match (the payload
/// and sign of an arithmetic NaN are unspecified: x86 returns a negative default NaN where
/// LLVM's constant folding returns a positive one, and which operand's NaN a binary op keeps
/// depends on the operand order the compiler picked; the release build of this test saw
/// `chain bf16 [300, 1]` differ only there).
/// f32 `layernorm(x, g, b)` and `rmsnorm(x, g)` on the row loops, bit for bit against the
/// interpreter (named `"<op> {tag}"`).
fn norms_bits_match(tag: &str, x: &Tensor<f32>, g: &Tensor<f32>, b: &Tensor<f32>) {
    let programs = fused::norm_programs;
    bits_match(&format!("layernorm {tag}"), programs, || {
        tessera_kernels::layernorm(x, g, b).unwrap()
    });
    bits_match(&format!("rmsnorm {tag}"), programs, || {
        tessera_kernels::rmsnorm(x, g).unwrap()
    });
}

fn bits_match<T: Element>(name: &str, counter: fn() -> u64, f: impl Fn() -> Tensor<T>) {
    let before = counter();
    let fast = f();
    assert!(counter() > before, "{name}: the row loop did not run");
    let slow = fused::with_interpreter(&f);
    assert_same_bits(name, &fast, &slow);
}

/// `fast` and `slow` hold the same bits, any two NaNs matching (see [`bits_match`]).
fn assert_same_bits<T: Element>(name: &str, fast: &Tensor<T>, slow: &Tensor<T>) {
    assert_eq!(fast.shape(), slow.shape(), "{name}");
    let bits = |t: &Tensor<T>| -> Vec<u64> {
        t.to_f64_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    let (a, b) = (bits(fast), bits(slow));
    let nan = |x: u64| f64::from_bits(x).is_nan();
    if let Some(j) = (0..a.len()).find(|&j| a[j] != b[j] && !(nan(a[j]) && nan(b[j]))) {
        panic!(
            "{name}: fast path and interpreter differ first at element {j}: {} vs {}",
            f64::from_bits(a[j]),
            f64::from_bits(b[j])
        );
    }
}

/// Row shapes for the row loops: `[37, 300]`, one element, ragged widths, rows of one chunk
/// of the CPU's 4096-column row tile (`Schedule::cpu_default`), rows of two and three chunks
/// (a ragged last chunk of 3 and 1 columns), one wide block of rows.
fn row_shapes() -> Vec<(usize, usize)> {
    vec![
        (37, 300),
        (1, 1),
        (5, 7),
        (300, 1),
        (9, 1025),
        (4, 3000),
        (256, 1024),
        (17, 2048),
        (3, 4099),
        (5, 8193),
    ]
}

/// Softmax (f32, bf16 in and out, bf16 in and f32 out) on the softmax row loop against the
/// interpreter, on random rows and on rows whose max grows from chunk to chunk (so earlier
/// chunks' exponentials are taken again).
#[test]
fn softmax_rows_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    softmax_rows_bits();
}

fn softmax_rows_bits() {
    softmax_rows_bits_on(&row_shapes());
}

fn softmax_rows_bits_on(shapes: &[(usize, usize)]) {
    let programs = fused::softmax_programs;
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 900 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        bits_match(&format!("softmax {tag}"), programs, || {
            tessera_kernels::softmax(&x).unwrap()
        });
        let ramp: Vec<f32> = x
            .to_vec()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(j, v)| v + (j % c) as f32 * 0.01)
            .collect();
        let ramp = Tensor::from_vec(ramp, &[r, c]).unwrap();
        bits_match(&format!("softmax of a ramp {tag}"), programs, || {
            tessera_kernels::softmax(&ramp).unwrap()
        });
        let xb = Tensor::<bf16>::randn(&[r, c], s + 2);
        bits_match(&format!("softmax bf16 {tag}"), programs, || {
            tessera_kernels::softmax(&xb).unwrap()
        });
        bits_match(&format!("softmax bf16→f32 {tag}"), programs, || {
            softmax_bf16(&xb).unwrap()
        });
        // ±inf, -0.0, huge values, (with two rows or more) a row of -inf and (with three or
        // more) a NaN: the same bits, a NaN matching any NaN (arithmetic NaN payloads are
        // unspecified).
        let sp = specials(&x, c);
        direct_same_bits(&format!("softmax specials {tag}"), programs, true, || {
            tessera_kernels::softmax(&sp).unwrap()
        });
        let spb = to_bf16(&sp);
        direct_same_bits(
            &format!("softmax bf16→f32 specials {tag}"),
            programs,
            true,
            || softmax_bf16(&spb).unwrap(),
        );
        let zb = zero_max_bf16(&xb, c);
        direct_same_bits(
            &format!("softmax bf16→f32 zero maxima {tag}"),
            programs,
            true,
            || softmax_bf16(&zb).unwrap(),
        );
        bits_match(&format!("softmax bf16 zero maxima {tag}"), programs, || {
            tessera_kernels::softmax(&zb).unwrap()
        });
        // bf16 in and out: the specials, and rows whose products round at a tie or to a
        // subnormal.
        softmax_bf16_specials_and_ties(&tag, programs, &spb, &xb, c);
    }
}

/// bf16 → bf16 softmax on fresh random rows (seeded from the clock, named in each failure)
/// against the interpreter, bit for bit, on one thread and on two: widths that are whole
/// 32-column steps with 64-byte-aligned output rows (the AVX-512 loop's unpacked widen and
/// word-permuted stores, `softmax::widen_perm`: one chunk, two chunks, an output past the
/// L2 size that streams off AMD) and widths that are not (the column-order loop), each with
/// NaNs, infinities and signed zeros sprinkled in, the specials rows, rows rounding at ties
/// or to subnormals, and rows of zero maxima.
#[test]
fn bf16_softmax_rows_on_fresh_inputs_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let programs = fused::softmax_programs;
    let specials_b = [
        bf16::from_bits(0x7fc0),
        bf16::from_bits(0xffc1),
        bf16::from_bits(0x7f80),
        bf16::from_bits(0xff80),
        bf16::from_bits(0x8000),
        bf16::from_bits(0x0001),
    ];
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, &(r, c)) in [
                (9, 1024),
                (4, 4096),
                (3, 2 * ROW_CHUNK),
                (5, 96),
                (270, 4096),
                (7, 1000),
                (4, 4099),
                (37, 300),
            ]
            .iter()
            .enumerate()
            {
                let s = seed.wrapping_add(97 * i as u64 + threads as u64);
                let tag = format!("[{r}, {c}] seed {s} threads {threads}");
                let xb = Tensor::<bf16>::randn(&[r, c], s);
                bits_match(&format!("softmax bf16 {tag}"), programs, || {
                    tessera_kernels::softmax(&xb).unwrap()
                });
                let sb = with_specials(r, c, s ^ 0x5555, &specials_b);
                direct_same_bits(
                    &format!("softmax bf16 sprinkled {tag}"),
                    programs,
                    true,
                    || tessera_kernels::softmax(&sb).unwrap(),
                );
                let x = Tensor::<f32>::randn(&[r, c], s ^ 0xaaaa);
                let spb = to_bf16(&specials(&x, c));
                softmax_bf16_specials_and_ties(&tag, programs, &spb, &xb, c);
                let zb = zero_max_bf16(&xb, c);
                bits_match(&format!("softmax bf16 zero maxima {tag}"), programs, || {
                    tessera_kernels::softmax(&zb).unwrap()
                });
            }
        });
    }
}

/// bf16 rows `[0, d1, d2]` (`d1`, `d2` negative, from `-1/64` to `-16`) where the
/// interpreter's softmax has an f32 product `exp(x − m)·(1/s)` whose low 16 bits are
/// `0x8000`: a tie for the rounding to bf16 (found with the interpreter's bf16→f32 softmax).
fn softmax_tie_triples() -> &'static [[bf16; 3]] {
    static T: std::sync::OnceLock<Vec<[bf16; 3]>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let ds: Vec<bf16> = (0x3C80u16..0x4180)
            .map(|b| bf16::from_bits(b | 0x8000))
            .collect();
        let mut v = Vec::new();
        for (i, d1) in ds.iter().enumerate() {
            for d2 in ds.iter().skip(i % 5).step_by(5) {
                v.extend([bf16::from_bits(0), *d1, *d2]);
            }
        }
        let n = v.len() / 3;
        let x = Tensor::from_vec(v.clone(), &[n, 3]).unwrap();
        let y = fused::with_interpreter(|| softmax_bf16(&x).unwrap());
        let y = y.as_slice().unwrap();
        let t: Vec<[bf16; 3]> = (0..n)
            .filter(|&i| {
                y[3 * i..3 * i + 3]
                    .iter()
                    .any(|e| e.to_bits() & 0xFFFF == 0x8000)
            })
            .map(|i| [v[3 * i], v[3 * i + 1], v[3 * i + 2]])
            .collect();
        assert!(t.len() >= 4, "only {} tie rows found", t.len());
        t
    })
}

/// `x` (bf16, rows of `c >= 3` columns) with rows whose bf16 softmax rounds at ties or to
/// subnormals, by row: a tie triple ([`softmax_tie_triples`]) at columns 0..3, the rest
/// `-inf`; one at the last 32-aligned columns of the first chunk (`ROW_CHUNK`; the same sum:
/// the `-inf` lanes add `+0`), the rest `-inf`; a `0` and otherwise values from `-104` to
/// `-86` (exponentials and products subnormal in f32, and in bf16); a row kept.
fn ties_bf16(x: &Tensor<bf16>, c: usize) -> Tensor<bf16> {
    let ties = softmax_tie_triples();
    let mut v = x.to_vec().unwrap();
    for (r, row) in v.chunks_mut(c).enumerate() {
        let t = ties[r % ties.len()];
        match r % 4 {
            0 | 1 => {
                row.fill(bf16::from_bits(0xff80));
                let at = if r % 4 == 0 {
                    0
                } else {
                    (c.min(ROW_CHUNK) - 3) / 32 * 32
                };
                row[at..at + 3].copy_from_slice(&t);
            }
            2 => {
                for (j, e) in row.iter_mut().enumerate() {
                    let f = e.to_f32().abs().fract();
                    *e = bf16::from_f32(-86.0 - 18.0 * f - (j % 3) as f32);
                }
                row[(r * 7) % c] = bf16::from_bits(0);
            }
            _ => {}
        }
    }
    Tensor::from_vec(v, x.shape()).unwrap()
}

/// Rows of bf16 values whose max is a zero of either sign or both, or a subnormal (the
/// AVX-512 loop takes bf16 maxima on the raw bit patterns, `MaxMin16`: as `i16` `+0` is the
/// least pattern with the sign clear, as `u16` `-0` the least with it set): every value
/// made `-|x|`, then row by row `+0` and `-0` at scattered columns, `-0` only, `+0` only,
/// the least positive subnormal, a row of zeros alone, a row with a negative NaN (`0xffc1`)
/// and one with a row of `-inf` but for one `-0`.
fn zero_max_bf16(x: &Tensor<bf16>, c: usize) -> Tensor<bf16> {
    let mut v: Vec<bf16> = x
        .to_vec()
        .unwrap()
        .into_iter()
        .map(|e| bf16::from_bits(e.to_bits() | 0x8000))
        .collect();
    for (r, row) in v.chunks_mut(c).enumerate() {
        let n = row.len();
        match r % 7 {
            0 => {
                for j in (0..n).step_by(37) {
                    row[j] = bf16::from_bits(if j % 2 == 0 { 0x8000 } else { 0x0000 });
                }
            }
            1 => row[n / 2] = bf16::from_bits(0x8000),
            2 => row[n - 1] = bf16::from_bits(0x0000),
            3 => row[n / 3] = bf16::from_bits(0x0001),
            4 => {
                for (j, e) in row.iter_mut().enumerate() {
                    *e = bf16::from_bits(if j % 3 == 0 { 0x8000 } else { 0x0000 });
                }
            }
            5 => row[(n * 2) / 3] = bf16::from_bits(0xffc1),
            _ => {
                row.fill(bf16::from_bits(0xff80));
                row[n / 4] = bf16::from_bits(0x8000);
            }
        }
    }
    Tensor::from_vec(v, x.shape()).unwrap()
}

/// Columns of one chunk of the CPU's row-wise tile (`Schedule::cpu_default`): a row of the
/// row loops is `⌈c / ROW_CHUNK⌉` chunks of the interpreter's online softmax and sums.
const ROW_CHUNK: usize = tessera::ir::schedule::CPU_ROW_COLS as usize;

/// Row shapes whose f32 output is past the row loops' non-temporal threshold: a ragged width
/// (rows start off a cache line, so each row has plain-store head and tail) and rows of two
/// chunks.
fn large_row_shapes() -> Vec<(usize, usize)> {
    let rows = |c: usize| (llc() / 8 * 3).div_ceil(4 * c) + 1;
    vec![(rows(1031), 1031), (rows(2 * ROW_CHUNK), 2 * ROW_CHUNK)]
}

/// Layernorm and rmsnorm (f32, bf16, bf16→f32, specials) on one thread and on two against
/// the interpreter, bit for bit: programs of several rows, ragged rows, wide rows (one
/// whole chunk, two chunks the last ragged, three chunks), and streamed outputs (the f32 rows pipeline each row's memory pass with the previous row's
/// squared deviations within a program).
#[test]
fn norm_rows_on_one_and_two_threads_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    for threads in [1, 2] {
        on_threads(threads, || {
            norm_rows_bits_on(&[
                (1, 1),
                (37, 300),
                (9, 1025),
                (17, 2048),
                (6, 4096),
                (3, 4099),
                (1024, 4096),
                (5, 8193),
                large_row_shapes()[0],
                // Streamed (on one thread) rows of 4099 columns, ragged against the lines.
                ((llc() / 8 * 3).div_ceil(4 * 4099) + 1, 4099),
            ])
        });
    }
}

/// Layernorm and rmsnorm rows of 4096 and 4100 (ragged) columns, outputs past the
/// one-thread non-temporal threshold, on one and two threads against the interpreter, bit
/// for bit. On two threads an output streams when the row loop's rows, `γ`, `β` and output
/// row exceed the level-1 data cache (`stream::wanted_for_rows`); on a 48 KiB L1 that is
/// layernorm at both widths and rmsnorm at 4100, while rmsnorm at 4096 (exactly 48 KiB)
/// takes plain stores.
#[test]
fn wide_norm_rows_on_one_and_two_threads_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let big = |c: usize| ((llc() / 8 * 3).div_ceil(4 * c) + 1, c);
    for threads in [1, 2] {
        on_threads(threads, || norm_rows_bits_on(&[big(4096), big(4100)]));
    }
}

/// Softmax (f32, bf16, bf16→f32, specials: rows of `-inf`, NaN, `±inf`) on one thread and on
/// two against the interpreter, bit for bit: programs of several one-chunk rows, whose AVX-512
/// loop takes a later row's max and stores an earlier row during each row's exponentials,
/// at odd widths (whole 32-value steps and a tail, rows off cache lines), and outputs past the
/// non-temporal threshold (streamed, ragged and aligned rows; rows narrower than the store
/// lag, whose streamed stores all follow the loop, and rows of one 32-value step past it).
#[test]
fn softmax_rows_on_one_and_two_threads_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let big = |c: usize| ((llc() / 8 * 3).div_ceil(4 * c) + 3, c);
    for threads in [1, 2] {
        on_threads(threads, || {
            softmax_rows_bits_on(&[
                (37, 300),
                (9, 1025),
                (33, 17),
                (2, 5),
                (3, 32),
                (65, 1000),
                (40, 1024),
                big(1000),
                big(1024),
                big(300),
                big(40),
                big(97),
                (7, 4096),
                (7, 4099),
                // An f32 input of half the last-level cache: on an AMD Zen 4 its long rows
                // run 2 apart (`softmax::zen4_wide`), elsewhere 1 apart; ragged, streamed.
                ((llc() / 2).div_ceil(4 * 4099) + 1, 4099),
                (1024, 4096),
                (5, 8193),
            ])
        });
    }
}

/// bf16 → bf16 softmax rows whose output is past the non-temporal threshold (the AVX-512
/// loop stores each row narrowed during the next rows' loop, streamed), on one thread and on
/// two, with and without the `vcvtne2ps2bf16` narrowing
/// (`fused::without_bf16_convert`, process-wide: the test holds `LEVEL` for writing), against
/// the interpreter, bit for bit: ragged and aligned widths (rows off and on cache lines),
/// rows narrower than the store lag and of one 32-value step past it, an output of the L2's
/// size (streamed off AMD), and smaller outputs (plain stores) at odd widths.
#[test]
fn bf16_softmax_rows_streamed_and_plain_match_the_interpreter_bit_for_bit() {
    let _level = LEVEL.write().unwrap_or_else(|e| e.into_inner());
    let big = |c: usize| ((llc() / 8 * 3).div_ceil(2 * c) + 3, c);
    // An output of the L2's size: streamed off AMD (`stream::wanted_bf16_softmax`), plain on
    // AMD below the threshold above.
    let l2 = (
        tessera::backend::cpu::cache::l2_bytes().div_ceil(2 * 1000) + 3,
        1000,
    );
    let shapes = [
        big(1000),
        big(1024),
        big(97),
        big(40),
        l2,
        (9, 1025),
        (33, 17),
        (65, 1000),
        (3, 4099),
    ];
    for threads in [1, 2] {
        on_threads(threads, || {
            softmax_bf16_rows_bits_on(&shapes);
            fused::without_bf16_convert(|| softmax_bf16_rows_bits_on(&shapes));
        });
    }
}

/// bf16 → bf16 softmax on the row loop against the interpreter at each shape: random rows,
/// specials ([`specials`]) and rows that round at ties or to subnormals ([`ties_bf16`]).
fn softmax_bf16_rows_bits_on(shapes: &[(usize, usize)]) {
    let programs = fused::softmax_programs;
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1700 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let xb = Tensor::<bf16>::randn(&[r, c], s);
        bits_match(&format!("softmax bf16 {tag}"), programs, || {
            tessera_kernels::softmax(&xb).unwrap()
        });
        let spb = to_bf16(&specials(&Tensor::<f32>::randn(&[r, c], s + 1), c));
        softmax_bf16_specials_and_ties(&tag, programs, &spb, &xb, c);
    }
}

/// bf16 → bf16 softmax on the row loop (`programs` moves) against the interpreter, bit for
/// bit (NaNs as any NaN): of `spb` (rows with specials) and, for rows of 3 columns or more,
/// of `xb`'s rows made to round at a tie or to a subnormal ([`ties_bf16`]).
fn softmax_bf16_specials_and_ties(
    tag: &str,
    programs: fn() -> u64,
    spb: &Tensor<bf16>,
    xb: &Tensor<bf16>,
    c: usize,
) {
    direct_same_bits(
        &format!("softmax bf16 specials {tag}"),
        programs,
        true,
        || tessera_kernels::softmax(spb).unwrap(),
    );
    if c >= 3 {
        let tb = ties_bf16(xb, c);
        direct_same_bits(
            &format!("softmax bf16 ties and subnormals {tag}"),
            programs,
            true,
            || tessera_kernels::softmax(&tb).unwrap(),
        );
    }
}

/// Softmax rows whose f32 input is larger than the last-level cache (where every chunk takes
/// the AVX-512 loop that computes the output's exponentials apart from the sum's, with the
/// row's max: the same bits) on one thread and on two against the interpreter, bit for bit:
/// rows off cache lines (1000), two chunks: a whole one and a tail (4099).
#[test]
fn softmax_rows_past_the_last_level_cache_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let past = |c: usize| (llc().div_ceil(4 * c) + 3, c);
    for threads in [1, 2] {
        on_threads(threads, || softmax_rows_bits_on(&[past(1000), past(4099)]));
    }
}

/// Softmax rows of several column chunks (the AVX-512 loop takes row `r`'s chunk maxima two
/// steps before, then each chunk's exponentials, redone with the row's max in the same
/// loop where the running max grew later) on one thread and on two against the interpreter,
/// bit for bit: two, three (ragged) and four chunks, a last chunk of one 32-value step, of a
/// tail only, streamed outputs; and rows whose chunks differ in kind: a chunk of `-inf`, a
/// NaN, a value of `1e30` or `-1e30` in one chunk, the max in the first or the last chunk.
#[test]
fn softmax_rows_of_several_chunks_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let big = |c: usize| ((llc() / 8 * 3).div_ceil(4 * c) + 2, c);
    let w = ROW_CHUNK;
    let shapes = [
        (9, 4 * w),
        (5, 2 * w + 953),
        (3, w + 32),
        (7, w + 6),
        (1, 2 * w + 17),
        (2, 2 * w),
        big(4 * w),
        big(2 * w + 953),
    ];
    for threads in [1, 2] {
        on_threads(threads, || {
            softmax_rows_bits_on(&shapes);
            for (i, &(r, c)) in shapes.iter().enumerate() {
                let tag = format!("[{r}, {c}]");
                let x = chunk_specials(&Tensor::<f32>::randn(&[r, c], 1700 + i as u64), c);
                direct_same_bits(
                    &format!("softmax chunk specials {tag}"),
                    fused::softmax_programs,
                    true,
                    || tessera_kernels::softmax(&x).unwrap(),
                );
                let xb = to_bf16(&x);
                direct_same_bits(
                    &format!("softmax bf16→f32 chunk specials {tag}"),
                    fused::softmax_programs,
                    true,
                    || softmax_bf16(&xb).unwrap(),
                );
            }
        });
    }
}

/// `x` (`c` columns) with one kind of row per row index mod 8, on the `ROW_CHUNK`-column
/// chunks of the CPU softmax: a first chunk of `-inf`, a middle chunk of `-inf`, a NaN in the last
/// chunk, `1e30` in the second chunk, `-1e30` in the first, the row's max (`+8`) in the last
/// chunk, in the first chunk, and a plain row.
fn chunk_specials(x: &Tensor<f32>, c: usize) -> Tensor<f32> {
    let mut v = x.to_vec().unwrap();
    let chunk = ROW_CHUNK;
    for (r, row) in v.chunks_mut(c).enumerate() {
        let last = (c - 1) / chunk * chunk;
        match r % 8 {
            0 => row[..chunk.min(c)].fill(f32::NEG_INFINITY),
            1 => row[chunk.min(c)..(2 * chunk).min(c)].fill(f32::NEG_INFINITY),
            2 => row[c - 1 - (c - 1 - last) / 2] = f32::NAN,
            3 => row[(chunk + 5).min(c - 1)] = 1e30,
            4 => row[7.min(c - 1)] = -1e30,
            5 => row[c - 1] = 8.0,
            6 => row[3.min(c - 1)] = 8.0,
            _ => {}
        }
    }
    Tensor::from_vec(v, x.shape()).unwrap()
}

/// Softmax, layernorm and rmsnorm with outputs large enough for non-temporal stores against
/// the interpreter, bit for bit.
#[test]
fn rows_streamed_to_large_outputs_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    // Streamed on one thread; on two the norms' outputs (under 3/4 of the LLC) take plain
    // stores and softmax's stay streamed.
    for threads in [1, 2] {
        on_threads(threads, || {
            softmax_rows_bits_on(&large_row_shapes());
            norm_rows_bits_on(&large_row_shapes());
        });
    }
}

/// Softmax rows whose f32 output is just past 12 MiB, from which one thread streams it
/// whatever the last-level cache (`stream::wanted_at_any_thread_count`; on two threads from
/// 3/8 of the cache: plain stores where it is larger than 32 MiB), on one thread and on two,
/// against the interpreter bit for bit: a ragged width (rows off cache lines, plain-store
/// heads and tails) and rows of two chunks; f32, bf16, bf16→f32 and specials
/// (`softmax_rows_bits_on`).
#[test]
fn softmax_rows_past_twelve_mib_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let rows = |c: usize| (12usize << 20).div_ceil(4 * c) + 1;
    let shapes = [(rows(1031), 1031), (rows(2 * ROW_CHUNK), 2 * ROW_CHUNK)];
    for threads in [1, 2] {
        on_threads(threads, || softmax_rows_bits_on(&shapes));
    }
}

/// Elementwise kernels whose f32 output is past the non-temporal threshold (the binary pipe,
/// the direct unary chain over whole rows, a broadcast chain on the chunk loop, bf16 inputs'
/// tables into f32 and bf16 outputs) against the interpreter, bit for bit; ragged widths put
/// the runs' starts and ends off 32-byte boundaries.
#[test]
fn elementwise_streamed_to_large_outputs_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let mut shapes = large_row_shapes();
    shapes.push(large_whole_tile_rows());
    // Streamed on one thread; plain stores on two (outputs under 3/4 of the LLC).
    for threads in [1, 2] {
        on_threads(threads, || elementwise_bits_on(&shapes));
    }
}

/// A ragged width narrower than a `[_, 1024]` tile, rows past the non-temporal threshold: the
/// programs write whole rows (streamed, rows off 32-byte boundaries).
fn large_whole_tile_rows() -> (usize, usize) {
    let c = 1001;
    ((llc() / 8 * 3).div_ceil(4 * c) + 1, c)
}

fn elementwise_bits_on(shapes: &[(usize, usize)]) {
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1400 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let y = Tensor::<f32>::randn(&[r, c], s + 2);
        let row = Tensor::<f32>::randn(&[c], s + 3);
        bits_match(&format!("add {tag}"), fused::launches, || {
            tessera_kernels::add(&x, &y).unwrap()
        });
        bits_match(&format!("sub {tag}"), fused::launches, || {
            sub_f32(&x, &y).unwrap()
        });
        bits_match(&format!("gelu {tag}"), fused::direct_chains, || {
            tessera_kernels::gelu(&x).unwrap()
        });
        bits_match(&format!("mul+add+gelu {tag}"), fused::launches, || {
            chain(&x, &row).unwrap()
        });
        // bf16 inputs looked up in the chains' tables (16-lane gathers where the CPU path
        // gathers: `gelubf16::gathers`), every bit pattern from a fresh clock-seeded start: an
        // f32 output of this shape streamed on one thread, a bf16 one of twice the rows too.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
        let xb = bf16_patterns(r, c, seed);
        let name = format!("gelu bf16 → f32 {tag} (seed {seed})");
        direct_same_bits(&name, fused::direct_chains, false, || {
            gelu_bf16_f32(&xb).unwrap()
        });
        let xb = bf16_patterns(2 * r, c, seed);
        let name = format!("tanh bf16 [{}, {c}] (seed {seed})", 2 * r);
        direct_same_bits(&name, fused::direct_chains, false, || {
            tanh_bf16(&xb).unwrap()
        });
    }
}

/// `x` (`[r, c]`) with ±inf, -0.0 and ±1e30 sprinkled in, its first row all -inf when it
/// has more than one row, and a NaN in its second row when it has three or more.
fn specials(x: &Tensor<f32>, c: usize) -> Tensor<f32> {
    let mut v = x.to_vec().unwrap();
    for (j, e) in v.iter_mut().enumerate() {
        *e = match j % 97 {
            3 => f32::INFINITY,
            11 => f32::NEG_INFINITY,
            17 => -0.0,
            29 => 1e30,
            41 => -1e30,
            _ => *e,
        };
    }
    if v.len() > c {
        v[..c].fill(f32::NEG_INFINITY);
    }
    // With three rows or more, a NaN in the second row.
    if v.len() > 2 * c {
        v[c + c / 2] = f32::NAN;
    }
    Tensor::from_vec(v, x.shape()).unwrap()
}

/// `x` rounded to bf16 (infinities, `-0` and NaN kept as such).
fn to_bf16(x: &Tensor<f32>) -> Tensor<bf16> {
    let v = x
        .to_vec()
        .unwrap()
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    Tensor::from_vec(v, x.shape()).unwrap()
}

/// Layernorm and rmsnorm (f32, bf16 in and out, bf16 in and f32 out) on the norm row loop
/// against the interpreter.
#[test]
fn norm_rows_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    norm_rows_bits();
}

fn norm_rows_bits() {
    norm_rows_bits_on(&row_shapes());
}

fn norm_rows_bits_on(shapes: &[(usize, usize)]) {
    let programs = fused::norm_programs;
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1000 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let g = Tensor::<f32>::randn(&[c], s + 2);
        let b = Tensor::<f32>::randn(&[c], s + 3);
        norms_bits_match(&tag, &x, &g, &b);
        let sp = specials(&x, c);
        direct_same_bits(&format!("layernorm specials {tag}"), programs, true, || {
            tessera_kernels::layernorm(&sp, &g, &b).unwrap()
        });
        direct_same_bits(&format!("rmsnorm specials {tag}"), programs, true, || {
            tessera_kernels::rmsnorm(&sp, &g).unwrap()
        });
        let xb = Tensor::<bf16>::randn(&[r, c], s + 4);
        let gb = Tensor::<bf16>::randn(&[c], s + 5);
        let bb = Tensor::<bf16>::randn(&[c], s + 6);
        bits_match(&format!("layernorm bf16→f32 {tag}"), programs, || {
            layernorm_bf16(&xb, &gb, &bb).unwrap()
        });
        bits_match(&format!("rmsnorm bf16→f32 {tag}"), programs, || {
            rmsnorm_bf16(&xb, &gb).unwrap()
        });
        bits_match(
            &format!("rmsnorm bf16 widened to f32 {tag}"),
            programs,
            || rmsnorm_bf16_widened(&xb, &gb).unwrap(),
        );
        // The specials in bf16 (widened in registers by the AVX-512 first pass).
        let spb = to_bf16(&sp);
        direct_same_bits(
            &format!("layernorm bf16→f32 specials {tag}"),
            programs,
            true,
            || layernorm_bf16(&spb, &gb, &bb).unwrap(),
        );
        direct_same_bits(
            &format!("rmsnorm bf16→f32 specials {tag}"),
            programs,
            true,
            || rmsnorm_bf16(&spb, &gb).unwrap(),
        );
    }
    // bf16 in and out at the same shapes.
    norm_bf16_rows_bits_on(shapes);
}

/// bf16 → bf16 layernorm and rmsnorm whose output streams (`stream::large`: past the
/// non-temporal threshold on one thread, past 3/4 of the last-level cache on two), rows
/// ragged against the cache lines (plain-store heads) and whole, with and without the
/// `vcvtne2ps2bf16` narrowing (`fused::without_bf16_convert`, process-wide: the test holds
/// `LEVEL` for writing), against the interpreter, bit for bit.
#[test]
fn streamed_bf16_norm_rows_match_the_interpreter_bit_for_bit() {
    let _level = LEVEL.write().unwrap_or_else(|e| e.into_inner());
    let llc = llc();
    let one = |c: usize| ((llc / 8 * 3).div_ceil(2 * c) + 1, c);
    let two = |c: usize| ((llc / 4 * 3).div_ceil(2 * c) + 1, c);
    on_threads(1, || {
        norm_bf16_rows_bits_on(&[one(1031), one(4096)]);
        fused::without_bf16_convert(|| norm_bf16_rows_bits_on(&[one(1031)]));
    });
    on_threads(2, || norm_bf16_rows_bits_on(&[two(1031)]));
}

/// bf16 → bf16 layernorm and rmsnorm whose AVX-512 passes run a row or two apart
/// (`norm::lags`: rmsnorm's write a row after its squares, layernorm's two rows after its
/// mean) or in turn (rows too wide for the level-1 cache), against the interpreter, bit for
/// bit: programs of fewer rows than the lag (1, 2, 3 rows), a last program cut short (10,
/// 11, 19 rows), widths on both sides of where (on a 48 KiB L1) layernorm stops lagging and
/// rmsnorm goes on (2048, 2049, 3000, 3072, 3073), odd widths (33, 47: rows off cache
/// lines, masked tails), on one thread and on two, with and without `vcvtne2ps2bf16`; and
/// rmsnorm bf16 → f32 (whose write widens the bf16 row again at every width) at narrow odd
/// widths past the non-temporal threshold, with input and output beyond 3/4 of the
/// last-level cache (streamed heads at every line offset at width 47) and within it (plain
/// stores: `stream::wanted_for_rows_reading`).
#[test]
fn bf16_norm_rows_a_row_or_two_apart_match_the_interpreter_bit_for_bit() {
    let _level = LEVEL.write().unwrap_or_else(|e| e.into_inner());
    let shapes = [
        (1, 1031),
        (2, 1031),
        (3, 47),
        (10, 33),
        (11, 2048),
        (19, 2049),
        (9, 3000),
        (10, 3072),
        (3, 3073),
    ];
    for threads in [1, 2] {
        on_threads(threads, || {
            norm_bf16_rows_bits_on(&shapes);
            fused::without_bf16_convert(|| norm_bf16_rows_bits_on(&shapes[..4]));
        });
    }
    let llc = llc();
    // Outputs past the one-thread threshold; `streamed` ones with 2 + 4 bytes per element
    // past 3/4 of the last-level cache.
    let plain = |c: usize| ((llc / 8 * 3).div_ceil(4 * c) + 1, c);
    let streamed = |c: usize| ((llc / 4 * 3).div_ceil(6 * c) + 1, c);
    on_threads(1, || {
        for (r, c) in [streamed(47), streamed(100), plain(47)] {
            let xb = Tensor::<bf16>::randn(&[r, c], 2301 + c as u64);
            let gb = Tensor::<bf16>::randn(&[c], 2302 + c as u64);
            bits_match(
                &format!("rmsnorm bf16→f32 [{r}, {c}]"),
                fused::norm_programs,
                || rmsnorm_bf16(&xb, &gb).unwrap(),
            );
        }
    });
}

/// bf16 → bf16 layernorm and rmsnorm against the interpreter at each shape: random rows,
/// the specials, and a `γ` (and `β`) of about 2e-39 (outputs mostly bf16 subnormals).
fn norm_bf16_rows_bits_on(shapes: &[(usize, usize)]) {
    let programs = fused::norm_programs;
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1900 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let xb = Tensor::<bf16>::randn(&[r, c], s);
        let g = Tensor::<f32>::randn(&[c], s + 1);
        let (gb, bb) = (to_bf16(&g), Tensor::<bf16>::randn(&[c], s + 2));
        bits_match(&format!("layernorm bf16 {tag}"), programs, || {
            tessera_kernels::layernorm(&xb, &gb, &bb).unwrap()
        });
        bits_match(&format!("rmsnorm bf16 {tag}"), programs, || {
            tessera_kernels::rmsnorm(&xb, &gb).unwrap()
        });
        let spb = to_bf16(&specials(&Tensor::<f32>::randn(&[r, c], s + 3), c));
        direct_same_bits(
            &format!("layernorm bf16 specials {tag}"),
            programs,
            true,
            || tessera_kernels::layernorm(&spb, &gb, &bb).unwrap(),
        );
        direct_same_bits(
            &format!("rmsnorm bf16 specials {tag}"),
            programs,
            true,
            || tessera_kernels::rmsnorm(&spb, &gb).unwrap(),
        );
        let tiny = Tensor::<f32>::from_vec(
            g.to_vec().unwrap().iter().map(|v| v * 2e-39).collect(),
            &[c],
        )
        .unwrap();
        let (gt, bt) = (to_bf16(&tiny), to_bf16(&tiny));
        bits_match(&format!("layernorm bf16 subnormal {tag}"), programs, || {
            tessera_kernels::layernorm(&xb, &gt, &bt).unwrap()
        });
        bits_match(&format!("rmsnorm bf16 subnormal {tag}"), programs, || {
            tessera_kernels::rmsnorm(&xb, &gt).unwrap()
        });
    }
}

/// Norms with a bf16 `γ` (and `β`) launched again and again with new values, on one thread
/// and on two, against the interpreter: a worker widens `γ` once per launch and keeps it for
/// that launch's later programs only, so no launch reads an earlier launch's `γ`. At 1024
/// columns (whole 32-column steps) the layernorm and rmsnorm bf16 → bf16 take `norm::eo_rows`
/// (off AMD), which also keeps `γ` and `β` reordered even/odd once per launch (at 4096
/// columns it reads a bf16 `γ`/`β` as stored: `norm::eo_bf16_vectors`).
#[test]
fn norm_rows_with_a_new_bf16_gamma_each_launch_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    for c in [1031, 1024] {
        new_gamma_each_launch(300, c);
    }
}

/// Four launches of each norm on `[r, c]` with a new bf16 `γ` and `β` each, on one thread and
/// on two, against the interpreter.
fn new_gamma_each_launch(r: usize, c: usize) {
    let xb = Tensor::<bf16>::randn(&[r, c], 1801);
    for threads in [1, 2] {
        on_threads(threads, || {
            for k in 0..4u64 {
                let gb = Tensor::<bf16>::randn(&[c], 1810 + k);
                let bb = Tensor::<bf16>::randn(&[c], 1820 + k);
                let tag = format!("[{r}, {c}] launch {k}, threads {threads}");
                bits_match(
                    &format!("rmsnorm bf16→f32 {tag}"),
                    fused::norm_programs,
                    || rmsnorm_bf16(&xb, &gb).unwrap(),
                );
                bits_match(&format!("rmsnorm bf16 {tag}"), fused::norm_programs, || {
                    tessera_kernels::rmsnorm(&xb, &gb).unwrap()
                });
                bits_match(
                    &format!("layernorm bf16→f32 {tag}"),
                    fused::norm_programs,
                    || layernorm_bf16(&xb, &gb, &bb).unwrap(),
                );
                bits_match(
                    &format!("layernorm bf16 {tag}"),
                    fused::norm_programs,
                    || tessera_kernels::layernorm(&xb, &gb, &bb).unwrap(),
                );
            }
        });
    }
}

/// Binary elementwise kernels (`add`, `sub`, `div`; f32 and bf16) on the fast path against
/// the interpreter.
#[test]
fn binary_elementwise_matches_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    binary_elementwise_bits();
}

fn binary_elementwise_bits() {
    for (i, &(r, c)) in row_shapes().iter().enumerate() {
        let s = 1100 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = Tensor::<f32>::randn(&[r, c], s + 1);
        let y = Tensor::<f32>::randn(&[r, c], s + 2);
        bits_match(&format!("add {tag}"), fused::launches, || {
            tessera_kernels::add(&x, &y).unwrap()
        });
        bits_match(&format!("sub {tag}"), fused::launches, || {
            sub_f32(&x, &y).unwrap()
        });
        let xb = Tensor::<bf16>::randn(&[r, c], s + 3);
        let yb = Tensor::<bf16>::randn(&[r, c], s + 4);
        bits_match(&format!("add bf16 {tag}"), fused::launches, || {
            tessera_kernels::add(&xb, &yb).unwrap()
        });
        bits_match(&format!("add bf16 (kernel) {tag}"), fused::launches, || {
            add_bf16(&xb, &yb).unwrap()
        });
        bits_match(&format!("div bf16 {tag}"), fused::launches, || {
            div_bf16(&xb, &yb).unwrap()
        });
    }
}

#[tessera::kernel]
fn sub_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    x - y
}

#[tessera::kernel]
fn mul_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    x * y
}

/// bf16 values that stress widening and narrowing: NaNs (quiet, signalling, negative),
/// ±inf, ±0, subnormals, the largest finite values (sums round to inf), values whose products
/// are subnormal, and pairs whose sums fall exactly halfway between two bf16 values (ties of
/// both parities: 1 + 2⁻⁸, 1.0078125 + 2⁻⁸, -3 - 2⁻⁷).
fn bf16_specials() -> Vec<bf16> {
    [
        0x7FC1u16, 0x7F81, 0xFF85, 0xFFC0, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x0001, 0x807F, 0x0040,
        0x8003, 0x0080, 0x7F7F, 0xFF7F, 0x1E00, 0x9E40, 0x3F80, 0x3F81, 0x3B80, 0xC040, 0xBC00,
    ]
    .into_iter()
    .map(bf16::from_bits)
    .collect()
}

/// bf16 storage read and written by the fast path's widening and narrowing loops
/// (`add`/`sub`/`mul`/`div` of two bf16 tensors, rmsnorm, layernorm and softmax with bf16
/// output, a unary chain) against the interpreter, bit for bit (a NaN matching any NaN:
/// arithmetic NaN payloads are unspecified), on inputs dense with [`bf16_specials`] and
/// widths that leave every tail length of a 16- or 32-lane loop.
#[test]
fn bf16_storage_matches_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    bf16_storage_bits();
}

fn bf16_storage_bits() {
    let sp = bf16_specials();
    let shapes = [
        (1, 1),
        (3, 17),
        (5, 31),
        (7, 33),
        (2, 47),
        (4, 1030),
        (37, 300),
        (1, 4099),
        (64, 1024),
    ];
    let launches = fused::launches;
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1700 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        // Specials at a fifth of the elements or more (`with_specials` adds
        // `len · (1 + n/500)` of them), so they meet each other and random values.
        let dense = |seed: u64| {
            let x = with_specials(r, c, seed, &sp);
            let mut v = x.as_slice().unwrap().to_vec();
            let mut k = seed;
            for e in v.iter_mut() {
                k = k
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if (k >> 60) < 4 {
                    *e = sp[(k >> 33) as usize % sp.len()];
                }
            }
            Tensor::from_vec(v, &[r, c]).unwrap()
        };
        let (x, y) = (dense(s + 1), dense(s + 2));
        bf16_binary_ops_same_bits(&tag, &x, &y);
        direct_same_bits(&format!("unary chain bf16 {tag}"), launches, true, || {
            unary_chain_bf16(&x).unwrap()
        });
        // Row loops: random rows with a few specials (a NaN or inf makes its whole row NaN).
        let xr = with_specials(r, c, s + 3, &sp[10..16]);
        let g = with_specials(1, c, s + 4, &sp[12..16])
            .reshape(&[c])
            .unwrap();
        let b = Tensor::<bf16>::randn(&[c], s + 5);
        let rows = fused::norm_programs;
        direct_same_bits(&format!("rmsnorm bf16 {tag}"), rows, true, || {
            tessera_kernels::rmsnorm(&xr, &g).unwrap()
        });
        direct_same_bits(&format!("layernorm bf16 {tag}"), rows, true, || {
            tessera_kernels::layernorm(&xr, &g, &b).unwrap()
        });
        direct_same_bits(
            &format!("softmax bf16 {tag}"),
            fused::softmax_programs,
            true,
            || tessera_kernels::softmax(&xr).unwrap(),
        );
    }
}

#[tessera::kernel]
fn tanh_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    tanh(x)
}

#[tessera::kernel]
fn exp_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    exp(x)
}

#[tessera::kernel]
fn sigmoid_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    sigmoid(x)
}

#[tessera::kernel]
fn unary_chain_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    sigmoid(exp(tanh(gelu(x))))
}

#[tessera::kernel]
fn unary_chain3_bf16(x: Tensor<bf16, (B, R, C)>) -> Tensor<bf16, (B, R, C)> {
    tanh(sigmoid(x))
}

/// bf16 `gelu` (computed by a polynomial with table fix-ups at the AVX-512 level on AMD; off
/// AMD two steps of 32 in six so and the rest by `vpgatherdd` from the table;
/// `fused/gelubf16.rs`; looked up in the table at the others) against the interpreter, bit for
/// bit, on the whole-tensor path and tile by tile, with one and two threads: standard-normal
/// inputs with [`bf16_specials`] (±0, subnormals, ±inf, NaNs), values at both ends of the
/// polynomial's range and in both tails, at `[37, 300]`, `[1, 1]`, `[9, 1025]`, `[300, 1]`, a
/// `[256, 256]` holding every bf16 pattern, and (`large`) a streamed output of 1001 columns
/// (tile by tile, its rows start at every even byte offset of a 64-byte line; streamed from
/// the AVX-512 loop on one thread, plain stores on two).
#[test]
fn gelu_bf16_matches_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    gelu_bf16_bits(true, &[1, 2]);
}

fn gelu_bf16_bits(large: bool, threads: &[usize]) {
    let mut sp = bf16_specials();
    sp.extend(
        [
            -4.125f32, -4.1, -4.0, -3.9, -3.875, -2.6, 3.86, 3.875, 3.9, 4.0, 8.0, 1e4, -4.2, -5.0,
            -13.0, -14.5, -1e4, 1e-3, -1e-3, 1e-30, -1e-30, 0.125, -0.125,
        ]
        .map(bf16::from_f32),
    );
    sp.extend([0x8001u16, 0x007F, 0x0081, 0x8080].map(bf16::from_bits));
    let mut shapes: Vec<_> = [(37, 300), (1, 1), (9, 1025), (300, 1), (256, 256)]
        .map(|s| (s, false))
        .to_vec();
    if large {
        shapes.extend(large_flat_shapes());
    }
    for &threads in threads {
        on_threads(threads, || {
            for (i, &((r, c), nt)) in shapes.iter().enumerate() {
                let x = if (r, c) == (256, 256) {
                    bf16_patterns(r, c, 3 + threads as u64)
                } else {
                    with_specials(r, c, 2600 + 10 * i as u64 + threads as u64, &sp)
                };
                flat_and_tiles(&format!("gelu bf16 [{r}, {c}] {threads}T"), nt, || {
                    gelu_bf16(&x).unwrap()
                });
            }
        });
    }
}

#[tessera::kernel]
fn gelu_f32(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    gelu(x)
}

/// Whole-tensor direct chains on two threads, which take pieces of at least 32 768 elements
/// from a shared counter until none is left (`fused/flat.rs`, `run`): bf16 and f32 `gelu` of
/// fresh random inputs (a clock seed, in the failure message) against the interpreter, bit
/// for bit, at shapes of 32 pieces and of 32 with a ragged last one. A piece skipped or run
/// twice at the wrong offset leaves output elements that differ.
#[test]
fn flat_direct_chains_in_pieces_match_the_interpreter() {
    let _level = level_guard();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    on_threads(2, || {
        for (i, (r, c)) in [(1024, 1024), (1023, 1001)].into_iter().enumerate() {
            let s = seed.wrapping_add(10 * i as u64);
            let tag = format!("[{r}, {c}] 2T seed {s}");
            let xb = Tensor::<bf16>::randn(&[r, c], s);
            flat_and_tiles(&format!("gelu bf16 in pieces {tag}"), false, || {
                gelu_bf16(&xb).unwrap()
            });
            let x = Tensor::<f32>::randn(&[r, c], s + 1);
            flat_and_tiles(&format!("gelu f32 in pieces {tag}"), false, || {
                gelu_f32(&x).unwrap()
            });
        }
    });
}

/// Unary chains of bf16 tensors (`gelu`, `tanh`, `exp`, `sigmoid`, a chain of four, a
/// rank-3 chain whose tiles cover whole rows; inputs with NaNs, infinities, -0 and large
/// values) on the direct chain against the interpreter,
/// bit for bit (each op's result rounded to bf16, as the interpreter rounds it), with the
/// f32 `gelu` and broadcast chains beside them.
#[test]
fn unary_chains_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    unary_chains_bits();
}

fn unary_chains_bits() {
    let mut shapes = row_shapes();
    shapes.push((1, 5000));
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1300 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let specials = [
            bf16::INFINITY,
            bf16::NEG_INFINITY,
            bf16::from_bits(0x8000),
            bf16::from_bits(0x7FC1),
            bf16::from_f32(9.5),
            bf16::from_f32(-12.25),
        ];
        let xb = with_specials(r, c, s + 1, &specials);
        direct_same_bits(
            &format!("gelu bf16 {tag}"),
            fused::direct_chains,
            false,
            || gelu_bf16(&xb).unwrap(),
        );
        direct_same_bits(
            &format!("gelu bf16 (library) {tag}"),
            fused::direct_chains,
            false,
            || tessera_kernels::gelu(&xb).unwrap(),
        );
        direct_same_bits(
            &format!("tanh bf16 {tag}"),
            fused::direct_chains,
            false,
            || tanh_bf16(&xb).unwrap(),
        );
        direct_same_bits(
            &format!("exp bf16 {tag}"),
            fused::direct_chains,
            false,
            || exp_bf16(&xb).unwrap(),
        );
        direct_same_bits(
            &format!("sigmoid bf16 {tag}"),
            fused::direct_chains,
            false,
            || sigmoid_bf16(&xb).unwrap(),
        );
        direct_same_bits(
            &format!("4-op chain bf16 {tag}"),
            fused::direct_chains,
            false,
            || unary_chain_bf16(&xb).unwrap(),
        );
        let x3 = Tensor::<bf16>::randn(&[2, r, c], s + 2);
        direct_same_bits(
            &format!("rank-3 chain bf16 {tag}"),
            fused::direct_chains,
            false,
            || unary_chain3_bf16(&x3).unwrap(),
        );
        let x = Tensor::<f32>::randn(&[r, c], s + 3);
        bits_match(&format!("gelu f32 {tag}"), fused::direct_chains, || {
            tessera_kernels::gelu(&x).unwrap()
        });
        let y = Tensor::<f32>::randn(&[c], s + 4);
        bits_match(&format!("chain f32 {tag}"), fused::launches, || {
            chain(&x, &y).unwrap()
        });
        let yb = Tensor::<bf16>::randn(&[c], s + 5);
        bits_match(&format!("chain bf16 {tag}"), fused::launches, || {
            chain_bf16(&xb, &yb).unwrap()
        });
    }
}

/// Operand chains: `gelu(x * y + 1.0)` (`fused::operand_chains` moves) and
/// `tanh(y / x) * y - 0.5` (whichever path its plan takes) against the interpreter, bit for
/// bit, on the row shapes (tails of every
/// vector width, rows longer than a chunk) with NaN, ±inf, -0.0 and large values in `x` and
/// `y`.
#[test]
fn operand_chains_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    operand_chains_bits();
}

fn operand_chains_bits() {
    let mut shapes = row_shapes();
    shapes.push((1, 5000));
    shapes.push((3, 2100));
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        1e30,
        -1e30,
    ];
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 1700 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = Tensor::<f32>::randn(&[r, c], s);
        let xs = with_specials(r, c, s + 1, &specials);
        let mut yv = Tensor::<f32>::randn(&[c], s + 2).to_vec().unwrap();
        yv[c / 2] = f32::INFINITY;
        yv[c - 1] = f32::NAN;
        let y = Tensor::from_vec(yv, &[c]).unwrap();
        for (x, kind) in [(&x, "randn"), (&xs, "specials")] {
            bits_match(
                &format!("chain {kind} {tag}"),
                fused::operand_chains,
                || chain(x, &y).unwrap(),
            );
            bits_match(
                &format!("mixed chain {kind} {tag}"),
                fused::launches,
                || chain_mixed(x, &y).unwrap(),
            );
        }
    }
}

/// `gelu(x * y + 1.0)` with `y` a broadcast row on the whole-tensor path
/// (`fused::flat_elementwise`; streamed for the large shape) and tile by tile, each bit for
/// bit with the interpreter, on one thread and two: odd shapes, one column, a shape whose
/// thread ranges split rows (64-element boundaries in 1001-column rows), and one past the
/// non-temporal threshold; fresh random `x` with NaN, ±inf, ±0 and huge values, and `y`
/// holding inf and NaN.
#[test]
fn flat_operand_chains_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    flat_chain_bits(&[((37, 300), false), ((9, 1025), false), ((1, 1), false)]);
    flat_chain_bits(&[((300, 1), false), ((300, 1001), false)]);
    flat_chain_bits(&large_flat_shapes());
}

fn flat_chain_bits(shapes: &[((usize, usize), bool)]) {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        1e30,
        -1e30,
    ];
    for (i, &((r, c), nt)) in shapes.iter().enumerate() {
        let s = 3100 + 10 * i as u64 + (r * c) as u64;
        let tag = format!("[{r}, {c}]");
        let x = with_specials(r, c, s, &specials);
        let mut yv = Tensor::<f32>::randn(&[c], s + 1).to_vec().unwrap();
        yv[c / 2] = f32::INFINITY;
        yv[c - 1] = f32::NAN;
        let y = Tensor::from_vec(yv, &[c]).unwrap();
        for threads in [1, 2] {
            on_threads(threads, || {
                flat_and_tiles(&format!("flat chain {tag} {threads}T"), nt, || {
                    chain(&x, &y).unwrap()
                })
            });
        }
    }
}

/// `gelu(x * y + 1.0)` whose values `x · y + 1` fall in gelu's `exp` form (`<= -4.5`) in
/// about a quarter of the lanes (`x = 6 · randn − 4`), with NaN, ±inf, ±0 and huge values
/// in `x` and inf, NaN and 0 in `y`: whole-tensor and tile by tile, on one thread and two,
/// on odd shapes (one column, one element, rows of every tail width), and past the
/// non-temporal threshold, bit for bit with the interpreter.
#[test]
fn flat_operand_chains_with_many_tail_lanes_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    flat_tail_chain_bits(&[((37, 300), false), ((9, 1025), false), ((1, 1), false)]);
    flat_tail_chain_bits(&[((300, 1), false), ((300, 1001), false), ((5, 17), false)]);
    flat_tail_chain_bits(&large_flat_shapes());
}

fn flat_tail_chain_bits(shapes: &[((usize, usize), bool)]) {
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        1e30,
        -1e30,
        -4.5,
        8.0,
    ];
    for (i, &((r, c), nt)) in shapes.iter().enumerate() {
        let s = 5200 + 10 * i as u64 + (r * c) as u64;
        let tag = format!("[{r}, {c}]");
        let v: Vec<f32> = with_specials(r, c, s, &specials)
            .to_vec()
            .unwrap()
            .into_iter()
            .map(|x| 6.0 * x - 4.0)
            .collect();
        let x = Tensor::from_vec(v, &[r, c]).unwrap();
        let mut yv = Tensor::<f32>::randn(&[c], s + 1).to_vec().unwrap();
        yv[c / 2] = f32::INFINITY;
        yv[c - 1] = f32::NAN;
        yv[c / 3] = 0.0;
        let y = Tensor::from_vec(yv, &[c]).unwrap();
        for threads in [1, 2] {
            on_threads(threads, || {
                flat_and_tiles(&format!("tail chain {tag} {threads}T"), nt, || {
                    chain(&x, &y).unwrap()
                })
            });
        }
    }
}

/// Operand chains ending in gelu of other forms than `gelu(x * y + 1)`, on the whole-tensor
/// path and tile by tile (`flat_and_tiles`), on one thread and two, bit for bit with the
/// interpreter: a row operand on either side of `sub` and three ops (`gelu((x - y) * 0.5 +
/// y)`, `gelu(y - x * 0.25)`), constants only (`gelu(x * 1.5 - 0.75)`), a `div`
/// (`gelu(x / y + 1)`) and four ops (`gelu((x * y + 1) * 0.5 - y)`), the last two on the
/// per-vector dispatch; and a full `[R, C]` operand (`gelu(x * z + 1)`, whichever path its
/// plan takes). Fresh [`gelu_inputs`] for `x` (every gelu form), `randn` rows with inf, NaN
/// and a zero.
#[test]
fn gelu_operand_chains_of_every_form_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    gelu_chain_forms_bits();
}

/// The chain forms past the non-temporal threshold, on one thread and two: three ops stream
/// from gelu's loop at AVX-512; a `div` and four ops (which that loop stores plainly) take
/// the buffered pieces and `stream::copy`; each bit for bit with the interpreter.
#[test]
fn streamed_gelu_operand_chains_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    for ((r, c), nt) in large_flat_shapes() {
        let x = gelu_inputs(r, c, 4700);
        let mut yv = Tensor::<f32>::randn(&[c], 4701).to_vec().unwrap();
        yv[c / 2] = f32::INFINITY;
        yv[1] = 0.0;
        let y = Tensor::from_vec(yv, &[c]).unwrap();
        for threads in [1, 2] {
            on_threads(threads, || {
                let t = format!("[{r}, {c}] {threads}T");
                flat_and_tiles(&format!("gelu((x-y)*0.5+y) {t}"), nt, || {
                    chain_sub3(&x, &y).unwrap()
                });
                flat_and_tiles(&format!("gelu(x/y+1) {t}"), nt, || {
                    chain_div(&x, &y).unwrap()
                });
                flat_and_tiles(&format!("gelu((x*y+1)*0.5-y) {t}"), nt, || {
                    chain_four(&x, &y).unwrap()
                });
            });
        }
    }
}

fn gelu_chain_forms_bits() {
    let shapes = [(37, 300), (1, 1), (9, 1025), (300, 1), (2, 4100)];
    for (i, &(r, c)) in shapes.iter().enumerate() {
        let s = 4100 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = gelu_inputs(r, c, s);
        let mut yv = Tensor::<f32>::randn(&[c], s + 1).to_vec().unwrap();
        if c > 2 {
            yv[c / 2] = f32::INFINITY;
            yv[c - 1] = f32::NAN;
            yv[1] = 0.0;
        }
        let y = Tensor::from_vec(yv, &[c]).unwrap();
        let z = Tensor::<f32>::randn(&[r, c], s + 2);
        for threads in [1, 2] {
            on_threads(threads, || {
                let t = format!("{tag} {threads}T");
                flat_and_tiles(&format!("gelu((x-y)*0.5+y) {t}"), false, || {
                    chain_sub3(&x, &y).unwrap()
                });
                flat_and_tiles(&format!("gelu(y-x*0.25) {t}"), false, || {
                    chain_row_minus(&x, &y).unwrap()
                });
                flat_and_tiles(&format!("gelu(x*1.5-0.75) {t}"), false, || {
                    chain_scalars(&x).unwrap()
                });
                flat_and_tiles(&format!("gelu(x/y+1) {t}"), false, || {
                    chain_div(&x, &y).unwrap()
                });
                flat_and_tiles(&format!("gelu((x*y+1)*0.5-y) {t}"), false, || {
                    chain_four(&x, &y).unwrap()
                });
                bits_match(&format!("gelu(x*z+1) {t}"), fused::launches, || {
                    chain_full(&x, &z).unwrap()
                });
            });
        }
    }
}

/// Inputs of `vmath::gelu`'s three forms: `randn · 5` (about 18% of the lanes at
/// `x <= -4.5`, the `exp` form, and 5% at `x >= 8`, mixed in a vector with central-range
/// lanes), every central interval's edges `±k/2` (k = 1..=16) and their neighbouring floats,
/// subnormals, `±0`, `±inf`, NaN and huge values; `[r, c]` row-major.
fn gelu_inputs(r: usize, c: usize, seed: u64) -> Tensor<f32> {
    let mut v: Vec<f32> = Tensor::<f32>::randn(&[r, c], seed)
        .to_vec()
        .unwrap()
        .into_iter()
        .map(|x| 5.0 * x)
        .collect();
    let mut edges = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-45,
        -1e-45,
        -3e-39,
        1e30,
        -1e30,
        -14.4,
        -20.0,
    ];
    for k in 1..=16 {
        let e = k as f32 / 2.0;
        for d in [-2i32, -1, 0, 1, 2] {
            let x = f32::from_bits((e.to_bits() as i32 + d) as u32);
            edges.extend([x, -x]);
        }
    }
    let n = v.len();
    for (i, e) in edges.into_iter().enumerate() {
        // Spread over the tensor: every 7th element (then wrapping), so vectors mix them
        // with `randn · 5` lanes.
        v[(7 * i + seed as usize) % n] = e;
    }
    Tensor::from_vec(v, &[r, c]).unwrap()
}

/// gelu (whole-tensor pass and tile loop), `gelu(x * y + 1)` (operand chain) and gelu into
/// bf16 on [`gelu_inputs`] against the interpreter, bit for bit, and gelu against the f64
/// reference (relative error below 1e-6 where the result is normal).
fn gelu_ranges_bits() {
    for (i, &(r, c)) in [(37, 300), (1, 1), (9, 1025), (300, 1), (4, 17)]
        .iter()
        .enumerate()
    {
        let s = 2900 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = gelu_inputs(r, c, s);
        let y = Tensor::<f32>::randn(&[c], s + 1);
        let g = fused::with_interpreter(|| tessera_kernels::gelu(&x).unwrap());
        let fast = tessera_kernels::gelu(&x).unwrap();
        assert_same_bits(&format!("gelu {tag}"), &fast, &g);
        let tiles = fused::without_flat(|| tessera_kernels::gelu(&x).unwrap());
        assert_same_bits(&format!("gelu tiles {tag}"), &tiles, &g);
        let tg = fused::with_interpreter(|| tanh_gelu_f32(&x).unwrap());
        assert_same_bits(
            &format!("tanh(gelu) {tag}"),
            &tanh_gelu_f32(&x).unwrap(),
            &tg,
        );
        let tiles = fused::without_flat(|| tanh_gelu_f32(&x).unwrap());
        assert_same_bits(&format!("tanh(gelu) tiles {tag}"), &tiles, &tg);
        bits_match(&format!("gelu(x*y+1) {tag}"), fused::launches, || {
            chain(&x, &y).unwrap()
        });
        let xb = to_bf16(&x);
        bits_match(&format!("gelu bf16 {tag}"), fused::launches, || {
            gelu_bf16(&xb).unwrap()
        });
        for (&a, &b) in x.to_vec().unwrap().iter().zip(&g.to_vec().unwrap()) {
            let want = reference::gelu(a as f64);
            if a.is_nan() {
                assert!(b.is_nan(), "gelu({a}) = {b}, want NaN");
            } else if a.is_infinite() {
                assert_eq!(b, a.max(0.0), "gelu({a})");
            } else if want.abs() >= f32::MIN_POSITIVE as f64 {
                let e = ((b as f64 - want) / want).abs();
                assert!(e <= 1e-6, "gelu({a:e}) = {b:e}, want {want:e}: rel {e:e}");
            }
        }
    }
}

/// [`gelu_ranges_bits`] at the detected SIMD level (every level: `every_simd_level_agrees`).
#[test]
fn gelu_central_and_tail_forms_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    gelu_ranges_bits();
}

/// The CPU's row-wise schedules: the row loops' kernels (softmax, layernorm) run the
/// `[8, CPU_ROW_COLS]` tile (`Schedule::cpu_default`), a kernel they do not run (an epilogue op
/// after softmax: the chunk program; `deterministic`: the interpreter) the narrower
/// `[8, CPU_ROW_COLS_GENERAL]` one (`Schedule::cpu_general`), at a narrow and a wide shape.
#[test]
fn row_loop_kernels_take_the_wide_cpu_row_tile() {
    let _level = level_guard();
    use tessera::ir::schedule::{CPU_ROW_COLS, CPU_ROW_COLS_GENERAL};
    let tile = || {
        let ran = tessera::last_launch();
        assert_eq!(ran.len(), 1, "{ran:?}");
        ran[0]
            .schedule
            .as_ref()
            .expect("the default schedule ran")
            .tile
            .clone()
    };
    for (i, (r, c)) in [(37, 300), (5, 4099)].into_iter().enumerate() {
        let x = Tensor::<f32>::randn(&[r, c], 1250 + i as u64);
        let g = Tensor::<f32>::randn(&[c], 1260 + i as u64);
        tessera_kernels::softmax(&x).unwrap();
        assert_eq!(tile(), [8, CPU_ROW_COLS], "softmax [{r}, {c}]");
        tessera_kernels::layernorm(&x, &g, &g).unwrap();
        assert_eq!(tile(), [8, CPU_ROW_COLS], "layernorm [{r}, {c}]");
        softmax_twice(&x).unwrap();
        assert_eq!(tile(), [8, CPU_ROW_COLS_GENERAL], "softmax * 2 [{r}, {c}]");
        softmax_det(&x).unwrap();
        assert_eq!(
            tile(),
            [8, CPU_ROW_COLS_GENERAL],
            "deterministic softmax [{r}, {c}]"
        );
    }
}

/// Kernels that differ from the matched patterns keep the general paths (the row loop
/// counters do not move) and still agree with the interpreter: an epilogue op after softmax,
/// the `tile!` softmax (it divides by the sum instead of multiplying by its inverse), and
/// the `deterministic` softmax and layernorm (fixed-order sums, on the interpreter).
#[test]
fn row_loops_decline_other_kernels() {
    let x = Tensor::<f32>::randn(&[37, 300], 1200);
    let g = Tensor::<f32>::randn(&[300], 1201);
    let (s0, n0) = (fused::softmax_programs(), fused::norm_programs());
    agree("softmax * 2", F32_TOL, || softmax_twice(&x).unwrap());
    agree("tile! softmax", F32_TOL, || {
        let mut y = Tensor::<f32>::zeros(&[37, 300]).unwrap();
        tessera_kernels::tiled::softmax_rows::launch(&x, &mut y).unwrap();
        y
    });
    let det = softmax_det(&x).unwrap();
    assert_eq!(
        det.to_vec().unwrap(),
        fused::with_interpreter(|| softmax_det(&x).unwrap())
            .to_vec()
            .unwrap()
    );
    layernorm_det(&x, &g, &g).unwrap();
    assert_eq!(
        (fused::softmax_programs(), fused::norm_programs()),
        (s0, n0),
        "a row loop ran a kernel it does not match"
    );
}

/// Every SIMD level this CPU supports, forced in turn (`simd::force`): the fast path agrees
/// with the interpreter on every library kernel class, and softmax, gelu and the f32 GEMM
/// agree with f64 references.
#[test]
fn every_simd_level_agrees() {
    let _level = LEVEL.write().unwrap_or_else(|e| e.into_inner());
    FORCING.with(|c| c.set(true));
    for level in simd::supported() {
        simd::force(Some(level)).unwrap();
        assert_eq!(simd::active(), level);
        rowwise_kernels_agree_f32_and_bf16();
        elementwise_kernels_and_chains_agree_f32_and_bf16();
        column_reductions_and_transposes_agree_f32_and_bf16();
        direct_transposes_and_column_reductions_match_the_interpreter_bit_for_bit();
        depthwise_bits();
        depthwise_taps_bits();
        // The large outputs on one thread: streamed at every level.
        on_threads(1, depthwise_large_bits);
        fresh_outputs_bits();
        column_pass_bits();
        column_pass_bf16_bits();
        bf16_pair_loops_bits();
        negative_zero_column_bits();
        padded_column_bits();
        ragged_transpose_bits();
        matmul_direct_gemm_agrees();
        softmax_rows_bits();
        norm_rows_bits();
        if level == simd::SimdLevel::Avx512 {
            // bf16 outputs narrowed by integer rounding, as where the CPU lacks AVX-512 BF16.
            fused::without_bf16_convert(|| {
                softmax_rows_bits();
                norm_rows_bits();
            });
        }
        on_threads(1, || {
            softmax_rows_bits_on(&large_row_shapes()[..1]);
            norm_rows_bits_on(&large_row_shapes()[..1]);
            elementwise_bits_on(&[large_whole_tile_rows(), large_row_shapes()[0]]);
        });
        binary_elementwise_bits();
        flat_elementwise_bits(&[((37, 300), false), ((256, 256), false), ((9, 1025), false)]);
        on_threads(1, || flat_elementwise_bits(&large_flat_shapes()));
        operand_chains_bits();
        flat_chain_bits(&[((37, 300), false), ((9, 1025), false), ((1, 1), false)]);
        flat_chain_bits(&large_flat_shapes());
        flat_tail_chain_bits(&[((37, 300), false), ((9, 1025), false), ((300, 1), false)]);
        gelu_chain_forms_bits();
        gelu_ranges_bits();
        unary_chains_bits();
        gelu_bf16_bits(false, &[1, 2]);
        // The streamed output (one thread) at every level: from the AVX-512 loop, through
        // the table and a copy at the others.
        gelu_bf16_bits(true, &[1]);
        bf16_storage_bits();
        let (m, k, n) = (37, 300, 45);
        let a = Tensor::<f32>::randn(&[m, k], 500);
        let b = Tensor::<f32>::randn(&[k, n], 501);
        let f64s = |t: &Tensor<f32>| t.to_f64_vec().unwrap();
        let c = tessera_kernels::matmul(&a, &b).unwrap();
        let want = reference::matmul(&f64s(&a), &f64s(&b), m, k, n);
        let e = rel_error(&f64s(&c), &want);
        assert!(e < 1e-5, "{level:?}: matmul vs f64: {e:e}");
        let y = tessera_kernels::gelu(&a).unwrap();
        let want: Vec<f64> = f64s(&a).into_iter().map(reference::gelu).collect();
        let e = rel_error(&f64s(&y), &want);
        assert!(e < 1e-6, "{level:?}: gelu vs f64: {e:e}");
        let y = tessera_kernels::softmax(&a).unwrap();
        let e = rel_error(&f64s(&y), &reference::softmax(&f64s(&a), k));
        assert!(e < 1e-6, "{level:?}: softmax vs f64: {e:e}");
    }
    simd::force(None).unwrap();
    FORCING.with(|c| c.set(false));
}

/// `TESSERA_CPU_SIMD` is validated: a child process of this test binary with `portable` runs
/// at that level; one with an unknown value has its launches fail, naming the variable.
#[test]
fn simd_env_var_is_honoured_and_validated() {
    let _level = level_guard();
    let x = Tensor::<f32>::randn(&[3, 5], 600);
    match std::env::var("TESSERA_TEST_SIMD_CHILD").as_deref() {
        Ok("portable") => {
            assert_eq!(simd::active(), simd::SimdLevel::Portable);
            tessera_kernels::gelu(&x).unwrap();
            return;
        }
        Ok("bad") => {
            let e = tessera_kernels::gelu(&x).unwrap_err().to_string();
            assert!(e.contains("TESSERA_CPU_SIMD"), "{e}");
            return;
        }
        _ => {}
    }
    for (value, child) in [("portable", "portable"), ("sse9", "bad")] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["simd_env_var_is_honoured_and_validated", "--exact"])
            .env("TESSERA_CPU_SIMD", value)
            .env("TESSERA_TEST_SIMD_CHILD", child)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "TESSERA_CPU_SIMD={value}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[tessera::kernel]
fn add_bf16_f32(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    (x + y).cast::<f32>()
}

#[tessera::kernel]
fn mul_f32_bf16(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<bf16, (R, C)> {
    (x * y).cast::<bf16>()
}

#[tessera::kernel]
fn max_bf16(x: Tensor<bf16, (R, C)>, y: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    maximum(x, y)
}

#[tessera::kernel]
fn gelu_bf16_f32(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    gelu(x.cast::<f32>())
}

#[tessera::kernel]
fn tanh_gelu_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    tanh(gelu(x))
}

/// `[r, c]` bf16 values walking the bit patterns with an odd stride: every one of the 65 536
/// patterns (NaNs of both signs and payloads, ±inf, ±0, subnormals) once per 65 536 elements.
fn bf16_patterns(r: usize, c: usize, seed: u64) -> Tensor<bf16> {
    let v = (0..r * c)
        .map(|j| bf16::from_bits((j as u64 * 40503 + seed) as u16))
        .collect();
    Tensor::from_vec(v, &[r, c]).unwrap()
}

/// Runs `f` on the whole-tensor path (`fused::flat_elementwise`, streamed exactly when
/// `streamed` at the AVX2 level or higher and, on two or more threads, the output takes more
/// than 3/4 of the last-level cache: `fused::flat_streamed`) and tile by tile
/// (`fused::without_flat`), each against the interpreter bit for bit.
fn flat_and_tiles<T: Element>(name: &str, streamed: bool, f: impl Fn() -> Tensor<T>) {
    let slow = fused::with_interpreter(&f);
    let (flat, nt) = (fused::flat_elementwise(), fused::flat_streamed());
    let fast = f();
    assert!(fused::flat_elementwise() > flat, "{name}: not run whole");
    let bytes = fast.shape().iter().product::<usize>() * std::mem::size_of::<T>();
    let llc = llc();
    let shared = rayon::current_num_threads() > 1 && bytes <= llc / 4 * 3;
    let want = streamed && simd::active() >= simd::SimdLevel::Avx2 && !shared;
    assert_eq!(fused::flat_streamed() > nt, want, "{name}: streamed");
    assert_same_bits(name, &fast, &slow);
    let (flat, launches) = (fused::flat_elementwise(), fused::launches());
    let tiles = fused::without_flat(&f);
    assert!(
        fused::launches() > launches,
        "{name}: the fast path did not run"
    );
    assert_eq!(fused::flat_elementwise(), flat, "{name}: tiles ran whole");
    assert_same_bits(&format!("{name} (tiles)"), &tiles, &slow);
}

/// Binary ops (f32, bf16, bf16 → f32, f32 → bf16, a bf16 op without a vector loop) and unary
/// chains (f32; bf16 input through the table with bf16 and f32 outputs) on the whole-tensor
/// path and tile by tile against the interpreter, bit for bit: the row shapes, one holding
/// every bf16 pattern, and outputs past the non-temporal threshold at a ragged 1001-column
/// width (bf16 and f32 outputs streamed).
#[test]
fn flat_elementwise_matches_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let mut shapes: Vec<_> = row_shapes().into_iter().map(|s| (s, false)).collect();
    shapes.push(((256, 256), false));
    flat_elementwise_bits(&shapes);
    // One thread streams every output of the large shape; two stream only the f32 ones
    // (more than 3/4 of the last-level cache), the bf16 ones taking plain stores.
    for threads in [1, 2] {
        on_threads(threads, || flat_elementwise_bits(&large_flat_shapes()));
    }
}

/// A 1001-column shape whose bf16 output passes the non-temporal threshold (so f32 ones do
/// too).
fn large_flat_shapes() -> Vec<((usize, usize), bool)> {
    let c = 1001;
    let r = (llc() / 8 * 3).div_ceil(2 * c) + 1;
    vec![((r, c), true)]
}

fn flat_elementwise_bits(shapes: &[((usize, usize), bool)]) {
    let sp = bf16_specials();
    for (i, &((r, c), nt)) in shapes.iter().enumerate() {
        let s = 2100 + 10 * i as u64;
        let tag = format!("[{r}, {c}]");
        let x = specials(&Tensor::<f32>::randn(&[r, c], s + 1), c);
        let y = Tensor::<f32>::randn(&[r, c], s + 2);
        let xb = bf16_patterns(r, c, s);
        let yb = with_specials(r, c, s + 3, &sp);
        flat_and_tiles(&format!("add {tag}"), nt, || {
            tessera_kernels::add(&x, &y).unwrap()
        });
        flat_and_tiles(&format!("mul f32 -> bf16 {tag}"), nt, || {
            mul_f32_bf16(&x, &y).unwrap()
        });
        flat_and_tiles(&format!("add bf16 {tag}"), nt, || {
            add_bf16(&xb, &yb).unwrap()
        });
        flat_and_tiles(&format!("add bf16 -> f32 {tag}"), nt, || {
            add_bf16_f32(&xb, &yb).unwrap()
        });
        flat_and_tiles(&format!("gelu bf16 {tag}"), nt, || gelu_bf16(&xb).unwrap());
        if nt {
            // The large shape: the streamed stores above; the ops below are the same loops.
            continue;
        }
        flat_and_tiles(&format!("gelu {tag}"), nt, || {
            tessera_kernels::gelu(&x).unwrap()
        });
        flat_and_tiles(&format!("div bf16 {tag}"), nt, || {
            div_bf16(&yb, &xb).unwrap()
        });
        flat_and_tiles(&format!("max bf16 {tag}"), nt, || {
            max_bf16(&xb, &yb).unwrap()
        });
        flat_and_tiles(&format!("gelu bf16 -> f32 {tag}"), nt, || {
            gelu_bf16_f32(&xb).unwrap()
        });
        flat_and_tiles(&format!("tanh(gelu) bf16 {tag}"), nt, || {
            tanh_gelu_bf16(&yb).unwrap()
        });
    }
}

/// Column sums and means of small tensors (up to 64 KiB of f32: every row's adds in
/// registers, `colreduce::REGS_MAX`; bf16 with single-vector head and tail columns around
/// the pair blocks) on the direct path, on one and two threads: 1 to 40 rows, ragged
/// columns below and above one program's 256 (the program loops and the whole-row pass),
/// fresh random inputs (a clock seed) with NaNs and signed zeros in half of them; bit for
/// bit the interpreter's.
#[test]
fn small_column_reductions_match_the_interpreter_bit_for_bit() {
    let _level = level_guard();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let cr = fused::direct_column_reductions;
    for threads in [1, 2] {
        on_threads(threads, || {
            for (i, r) in (1..=40usize).enumerate() {
                for (k, c) in [16usize, 17, 31, 100, 257, 300, 303, 400]
                    .into_iter()
                    .enumerate()
                {
                    let s = seed.wrapping_add(100 * i as u64 + 10 * k as u64);
                    let (x, xb) = if (r + k) % 2 == 0 {
                        (
                            Tensor::<f32>::randn(&[r, c], s),
                            Tensor::<bf16>::randn(&[r, c], s + 1),
                        )
                    } else {
                        (
                            with_specials(r, c, s, &[f32::NAN, -0.0]),
                            with_specials(
                                r,
                                c,
                                s + 1,
                                &[bf16::from_bits(0x7FC1), bf16::from_bits(0x8000)],
                            ),
                        )
                    };
                    let tag = format!("[{r}, {c}] {threads}T seed {seed}");
                    direct_same_bits(&format!("col sum {tag}"), cr, true, || col_sum(&x).unwrap());
                    direct_same_bits(&format!("col mean {tag}"), cr, true, || {
                        col_mean(&x).unwrap()
                    });
                    col_bf16_bits(&tag, cr, &xb);
                }
            }
        });
    }
}

/// Small launches on one and on two threads: the flat path's short spans (at most 64
/// elements take a buffer of 64, `flat::span_body`) and row loops of fewer than
/// `serial::ROWS_MIN` elements (run on the calling thread without the probe) as well as one
/// above it (probed, then split): the interpreter's values, and the same bits on either pool.
#[test]
fn small_launches_agree_on_one_and_two_threads() {
    let _level = level_guard();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let same = |name: &str, a: &Tensor<f32>, b: &Tensor<f32>| {
        assert_eq!(a.shape(), b.shape(), "{name}");
        let (a, b) = (a.as_slice().unwrap(), b.as_slice().unwrap());
        if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
            panic!(
                "{name} (seed {seed}): element {i}: {} on one thread, {} on two",
                a[i], b[i]
            );
        }
    };
    // Each kernel on one and two threads (its counter moved on both), against the
    // interpreter on two.
    let check = |name: &str, counter: fn() -> u64, f: &(dyn Fn() -> Tensor<f32> + Sync)| {
        let name = format!("{name} (seed {seed})");
        let run = |t: usize| {
            on_threads(t, || {
                let before = counter();
                let y = f();
                assert!(
                    counter() > before,
                    "{name}: the fast path did not run on {t} threads"
                );
                y
            })
        };
        let (one, two) = (run(1), run(2));
        same(&name, &one, &two);
        on_threads(2, || agree(&name, F32_TOL, f));
    };
    for (i, &(r, c)) in [(1, 1), (3, 7), (8, 8), (5, 13), (1, 65)]
        .iter()
        .enumerate()
    {
        let s = seed.wrapping_add(10 * i as u64);
        let x = Tensor::<f32>::randn(&[r, c], s);
        let v = Tensor::<f32>::randn(&[c], s + 1);
        check(
            &format!("gelu [{r}, {c}]"),
            fused::flat_elementwise,
            &|| tessera_kernels::gelu(&x).unwrap(),
        );
        check(&format!("chain [{r}, {c}]"), fused::operand_chains, &|| {
            chain(&x, &v).unwrap()
        });
    }
    for (i, &(r, c)) in [(1, 1), (37, 300), (63, 1024), (300, 256)]
        .iter()
        .enumerate()
    {
        let s = seed.wrapping_add(100 + 10 * i as u64);
        let x = Tensor::<f32>::randn(&[r, c], s);
        let g = Tensor::<f32>::randn(&[c], s + 1);
        let b = Tensor::<f32>::randn(&[c], s + 2);
        check(
            &format!("softmax [{r}, {c}]"),
            fused::softmax_programs,
            &|| tessera_kernels::softmax(&x).unwrap(),
        );
        check(
            &format!("layernorm [{r}, {c}]"),
            fused::norm_programs,
            &|| tessera_kernels::layernorm(&x, &g, &b).unwrap(),
        );
        check(
            &format!("rmsnorm [{r}, {c}]"),
            fused::norm_programs,
            &|| tessera_kernels::rmsnorm(&x, &g).unwrap(),
        );
    }
}
