//! Device selection: the no-driver path of the CUDA backend, device mismatch errors, and the
//! same kernels run on the PTX simulator agreeing with the CPU.

use tessera::{Device, Tensor};
use tessera_workspace::reference::rel_error;

#[test]
fn without_a_driver_cuda_is_an_error_and_default_is_cpu() {
    if tessera::backend::cuda_driver_present() {
        eprintln!("a CUDA driver is present: the no-driver path is not exercised here");
        return;
    }
    let e = Device::cuda(0).unwrap_err().to_string();
    assert!(e.contains("no CUDA driver"), "{e}");
    assert!(Device::default().is_cpu());
}

#[test]
fn mixing_devices_in_one_launch_is_an_error() {
    let a = Tensor::<f32>::randn(&[4, 5], 1);
    let b = Tensor::<f32>::randn(&[5, 3], 2).to(&Device::sim()).unwrap();
    let e = tessera_kernels::matmul(&a, &b).unwrap_err().to_string();
    assert!(
        e.contains("`w` is on sim:sm_80 but the launch runs on cpu"),
        "{e}"
    );
}

#[test]
fn embedded_ptx_runs_on_the_sm90a_simulator() {
    use tessera::ir::target::ptx::Arch;
    // The macro embedded PTX for the default schedule; the launch runs it as embedded.
    let x = Tensor::<f32>::randn(&[3, 40], 3)
        .to(&Device::sim_arch(Arch::Sm90a))
        .unwrap();
    let y = tessera_kernels::softmax(&x).unwrap();
    let want = tessera_workspace::reference::softmax(&x.to_f64_vec().unwrap(), 40);
    assert!(rel_error(&y.to_f64_vec().unwrap(), &want) < 1e-5);
}
