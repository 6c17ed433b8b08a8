//! Fuzzing kernel launches with random shapes (proptest, stable Rust): dims drawn from 0, small
//! sizes and huge ones (2^40, 2^62, `usize::MAX`), ranks 0 to 4, arguments that agree or not.
//! Every tensor constructor and every launch must return `Ok` or an `Err` — never panic, abort
//! or hang; an `Ok` result must have the shape the kernel's contract gives.
//!
//! 10,000 cases per target by default (CI); `FUZZ_CASES=1000000 cargo test --release --test
//! fuzz_launch` runs longer. A failure prints the shrunk shapes: add them to `tests/limits.rs`
//! with the fix.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use tessera::{Device, Error, Tensor};

fn config() -> Config {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    }
}

/// A dim: mostly small, sometimes 0, sometimes huge. Huge dims are at least 2^40 so that a
/// tensor holding one with no zero dim beside it needs ≥ 4 TiB and is refused, never
/// allocated.
fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 1usize..7,
        3 => Just(0usize),
        1 => prop_oneof![Just(1usize << 40), Just(1usize << 62), Just(usize::MAX)],
    ]
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(dim(), 0..=4)
}

/// A tensor of `shape` on `dev`: random values when it is small, else an error the constructor
/// must return (or an empty tensor when a dim is 0).
fn tensor(shape: &[usize], dev: &Device, seed: u64) -> Result<Tensor<f32>, Error> {
    match tessera::tensor::size::numel("fuzz", shape) {
        Ok(0) => Tensor::from_vec(vec![], shape)?.to(dev),
        Ok(n) if n <= 4096 => Tensor::<f32>::try_randn(shape, seed)?.to(dev),
        _ => {
            let e = Tensor::<f32>::zeros(shape).expect_err("a huge shape cannot be allocated");
            assert!(
                matches!(e, Error::TooLarge { .. } | Error::OutOfMemory { .. }),
                "{e:?}"
            );
            Err(e)
        }
    }
}

/// Runs every library kernel that takes these arguments; checks `Ok` shapes.
fn launch_all(a: &[usize], b: &[usize], c: &[usize], dev: &Device) {
    let (Ok(x), Ok(y), Ok(z)) = (tensor(a, dev, 1), tensor(b, dev, 2), tensor(c, dev, 3)) else {
        return;
    };
    if let Ok(r) = tessera_kernels::matmul(&x, &y) {
        assert_eq!(r.shape(), &[a[0], b[1]], "matmul {a:?} × {b:?}");
    }
    if let Ok(r) = tessera_kernels::softmax(&x) {
        assert_eq!(r.shape(), a, "softmax {a:?}");
    }
    if let Ok(r) = tessera_kernels::gelu(&x) {
        assert_eq!(r.shape(), a);
    }
    if let Ok(r) = tessera_kernels::add(&x, &y) {
        assert_eq!(r.shape(), a);
    }
    if let Ok(r) = tessera_kernels::mul(&x, &z) {
        assert_eq!(r.shape(), a);
    }
    if let Ok(r) = tessera_kernels::rmsnorm(&x, &z) {
        assert_eq!(r.shape(), a);
    }
    if let Ok(r) = tessera_kernels::layernorm(&x, &z, &z) {
        assert_eq!(r.shape(), a);
    }
    if let Ok(r) = tessera_kernels::matmul_batched(&x, &y) {
        assert_eq!(
            r.shape(),
            &[a[0], a[1], b[2]],
            "matmul_batched {a:?} × {b:?}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn launches_on_the_cpu_never_panic(a in shape(), b in shape(), c in shape()) {
        launch_all(&a, &b, &c, &Device::cpu());
    }
}

proptest! {
    // The simulator runs each kernel's PTX thread by thread: a tenth of the cases (1,000 by
    // default) keeps the target within CI's budget; `FUZZ_CASES` scales it too.
    #![proptest_config(Config { cases: (config().cases / 10).max(1), ..config() })]

    #[test]
    fn launches_on_the_simulator_never_panic(a in shape(), b in shape(), c in shape()) {
        launch_all(&a, &b, &c, &Device::sim());
    }
}
