//! Sizes that do not fit: every listed input of issue 17 returns an error (a shape error naming
//! the shape, or `OutOfMemory` with the bytes), never a panic, an abort or a hang. One body per
//! behaviour, run on the CPU and the simulator.

use tessera::{DType, Data, Device, Error, Tensor, TensorRef};

fn devices() -> Vec<Device> {
    vec![Device::cpu(), Device::sim()]
}

/// An empty tensor of `shape` on `dev` (no bytes, whatever the other dims).
fn empty(shape: &[usize], dev: &Device) -> Tensor<f32> {
    Tensor::from_vec(vec![], shape).unwrap().to(dev).unwrap()
}

#[test]
fn a_shape_whose_size_overflows_is_an_error_naming_it() {
    let e = Tensor::<f32>::from_vec(vec![], &[1 << 32, 1 << 32]).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("[4294967296, 4294967296]"), "{e}");
    for f in [
        Tensor::<f32>::zeros(&[1 << 32, 1 << 32]),
        Tensor::<f32>::full(&[usize::MAX, 2], 1.0),
        Tensor::<f32>::try_randn(&[1 << 32, 1 << 32, 3], 1),
        Tensor::<f32>::from_slice(&[], &[1 << 62, 8]),
        Tensor::<f32>::zeros_on(&[1 << 62, 8], &Device::sim()),
    ] {
        assert!(matches!(f, Err(Error::TooLarge { .. })), "{f:?}");
    }
    // A zero dim makes any shape empty, not an overflow.
    assert_eq!(empty(&[1 << 40, 0, 1 << 40], &Device::cpu()).numel(), 0);
    let t = Tensor::<f32>::zeros(&[2, 3]).unwrap();
    assert!(matches!(
        t.reshape(&[1 << 32, 1 << 32]),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn memory_the_system_refuses_is_out_of_memory_not_an_abort() {
    // 4 TiB: more than any test machine has, so the allocator refuses it.
    let e = Tensor::<f32>::zeros(&[1 << 20, 1 << 20]).unwrap_err();
    assert_eq!(e, Error::OutOfMemory { bytes: 1 << 42 });
    let e = Tensor::<f32>::zeros_on(
        &[1 << 20, 1 << 20],
        &Device::new_sim(tessera::ir::target::ptx::Arch::Sm80),
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
}

#[test]
fn a_matmul_whose_output_overflows_fails_before_allocating() {
    for dev in devices() {
        let (x, w) = (empty(&[1 << 40, 0], &dev), empty(&[0, 1 << 40], &dev));
        let e = tessera_kernels::matmul(&x, &w).unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{dev}: {e:?}");
        let s = e.to_string();
        assert!(
            s.contains("kernel `matmul_f32`") && s.contains("[1099511627776, 1099511627776]"),
            "{dev}: {s}"
        );
    }
}

#[test]
fn a_kernel_output_too_large_for_memory_is_out_of_memory() {
    for dev in devices() {
        // [2^20, 0] × [0, 2^20]: the inputs are empty, the output 2^40 floats (4 TiB).
        let (x, w) = (empty(&[1 << 20, 0], &dev), empty(&[0, 1 << 20], &dev));
        let e = tessera_kernels::matmul(&x, &w).unwrap_err();
        assert_eq!(e, Error::OutOfMemory { bytes: 1 << 42 }, "{dev}");
    }
}

#[test]
fn kernels_on_empty_tensors_with_huge_dims_return_empty_results() {
    for dev in devices() {
        let x = empty(&[1 << 40, 0], &dev);
        let y = tessera_kernels::softmax(&x).unwrap();
        assert_eq!((y.shape(), y.device()), (&[1usize << 40, 0][..], &dev));
        let g = tessera_kernels::gelu(&empty(&[0, 1 << 40], &dev)).unwrap();
        assert_eq!(g.numel(), 0);
        // Empty, but the dims before the zero multiply past usize (a fuzz find on the
        // simulator: the output's byte count was taken as a plain product).
        let (a, b) = (
            empty(&[1 << 40, 1 << 40, 0], &dev),
            empty(&[1 << 40, 0, 0], &dev),
        );
        assert_eq!(a.numel(), 0);
        let y = tessera_kernels::matmul_batched(&a, &b).unwrap();
        assert_eq!(y.shape(), &[1usize << 40, 1 << 40, 0][..], "{dev}");
    }
}

#[test]
fn a_view_whose_shape_exceeds_its_bytes_is_an_error() {
    let cpu = Device::cpu();
    let bytes = vec![0u8; 16];
    let e = TensorRef::new(&cpu, DType::F32, &[1000, 1000], Data::Host(&bytes)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ViewLength {
                expected: 4_000_000,
                got: 16,
                ..
            }
        ),
        "{e:?}"
    );
    let e = TensorRef::new(&cpu, DType::F32, &[1 << 62, 4], Data::Host(&bytes)).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    // Host bytes cannot be a view on the simulator.
    let sim = Device::sim();
    assert!(TensorRef::new(&sim, DType::F32, &[4], Data::Host(&bytes)).is_err());
    assert!(TensorRef::new(&cpu, DType::F32, &[2, 2], Data::Host(&bytes)).is_ok());
}
