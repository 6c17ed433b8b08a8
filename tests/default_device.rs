//! Kernels whose arguments are all in host memory run on `Device::default()`, which
//! `TESSERA_DEVICE` selects: here the simulator. One test in its own binary: the environment
//! is process-wide.

use tessera::{Device, Tensor};
use tessera_workspace::reference::{matmul, rel_error};

fn set(value: Option<&str>) {
    // SAFETY (edition 2024): the only test of this binary; no other thread reads the
    // environment while it changes.
    unsafe {
        match value {
            Some(v) => std::env::set_var("TESSERA_DEVICE", v),
            None => std::env::remove_var("TESSERA_DEVICE"),
        }
    }
    // Tessera reads TESSERA_DEVICE and TESSERA_AUTOTUNE* once per process: read them again.
    tessera::reload_env();
}

#[test]
fn host_arguments_run_on_the_default_device() {
    let (m, k, n) = (37, 29, 23);
    let x = Tensor::<f32>::randn(&[m, k], 11);
    let w = Tensor::<f32>::randn(&[k, n], 12);
    let want = matmul(&x.to_f64_vec().unwrap(), &w.to_f64_vec().unwrap(), m, k, n);

    set(Some("sim"));
    let sim = Device::sim();
    assert_eq!(Device::default(), sim);
    let launches = sim.stats().launches;
    let y = tessera_kernels::matmul(&x, &w).unwrap();
    assert_eq!(y.device(), &sim, "the result stays on the default device");
    assert!(
        sim.stats().launches > launches,
        "the launch ran on the simulator"
    );
    assert!(rel_error(&y.to_f64_vec().unwrap(), &want) < 1e-5);
    assert!(x.is_host(), "the arguments are unchanged");

    // A `tile!` kernel writes its host output in place, through the default device.
    let mut c = Tensor::<f32>::zeros(&[m, n]).unwrap();
    let launches = sim.stats().launches;
    tessera_kernels::tiled::matmul_tiled::launch(&x, &w, &mut c).unwrap();
    assert!(sim.stats().launches > launches);
    assert!(c.is_host());
    assert!(rel_error(&c.to_f64_vec().unwrap(), &want) < 1e-5);

    // Arguments already on a device run there whatever the default is.
    set(Some("cpu"));
    let other = Device::new_sim(tessera::ir::target::ptx::Arch::Sm90a);
    let y = tessera_kernels::matmul(&x.to(&other).unwrap(), &w.to(&other).unwrap()).unwrap();
    assert_eq!(y.device(), &other);
    // With the CPU as default, host arguments stay on the host.
    let y = tessera_kernels::matmul(&x, &w).unwrap();
    assert!(y.is_host());

    // An invalid value is an error naming the variable and the value wherever it is read: at
    // a `#[kernel]` launch, a `tile!` launch and `Device::try_default`; `Device::default`
    // panics with the same message instead of falling back to another device.
    set(Some("tpu"));
    let named = |e: &str| e.contains("TESSERA_DEVICE") && e.contains("\"tpu\"");
    let e = tessera_kernels::matmul(&x, &w).unwrap_err();
    assert!(matches!(e, tessera::Error::Env(_)), "{e:?}");
    assert!(
        named(&e.to_string()) && e.to_string().contains("sim:sm_90a"),
        "{e}"
    );
    let e = tessera_kernels::tiled::matmul_tiled::launch(&x, &w, &mut c).unwrap_err();
    assert!(named(&e.to_string()), "{e}");
    let e = Device::try_default().unwrap_err();
    assert!(named(&e.to_string()), "{e}");
    let panic = std::panic::catch_unwind(Device::default).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(named(&message), "{message}");
    assert!(std::panic::catch_unwind(<Device as Default>::default).is_err());

    // A GPU it names that cannot be opened is an error naming the variable too (no driver here;
    // with one, an ordinal no machine has).
    set(Some("cuda:4096"));
    let e = Device::try_default().unwrap_err().to_string();
    assert!(
        e.contains("TESSERA_DEVICE") && e.contains("cuda:4096"),
        "{e}"
    );
    assert!(tessera_kernels::matmul(&x, &w).is_err());

    // Launches keep the CPU default they read (one atomic load each) until `reload_env`: the
    // simulator named next takes the following launches, and the CPU again after it.
    set(Some("cpu"));
    for _ in 0..3 {
        assert!(tessera_kernels::matmul(&x, &w).unwrap().is_host());
        assert!(Device::try_default().unwrap().is_cpu());
    }
    set(Some("sim"));
    let launches = sim.stats().launches;
    let y = tessera_kernels::matmul(&x, &w).unwrap();
    assert_eq!(y.device(), &sim);
    assert!(sim.stats().launches > launches);
    set(Some("cpu"));
    assert!(tessera_kernels::matmul(&x, &w).unwrap().is_host());
    set(None);
}
