//! Precision modes run end to end (seeds table A.3): a matmul under `standard` reads bf16,
//! under `aggressive` fp8 e4m3 with per-tensor amax scales and a bf16 accumulator, by the
//! kernel attribute and by the run-time scope, on the CPU and on the simulator (sm_89: fp8
//! needs it; sm_80 reports that). Errors against f64 are asserted to be those of the mode's
//! input precision: small enough to be right, large enough to show the quantisation ran.

use tessera::numerics::{self, Precision};
use tessera::{Device, Tensor};
use tessera_workspace::reference::{self, rel_error};

#[tessera::kernel]
fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

#[tessera::kernel(precision = "aggressive")]
fn mm_fp8(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

fn case(device: Device) {
    let (m, k, n) = (37, 200, 45);
    let x = Tensor::<f32>::randn(&[m, k], 1).to(&device).unwrap();
    let w = Tensor::<f32>::randn(&[k, n], 2).to(&device).unwrap();
    let want = reference::matmul(&x.to_f64_vec().unwrap(), &w.to_f64_vec().unwrap(), m, k, n);
    let err = |mode: Option<Precision>| -> f64 {
        let y = match mode {
            Some(p) => numerics::precision(p, || mm(&x, &w)),
            None => mm(&x, &w),
        };
        rel_error(&y.unwrap().to_f64_vec().unwrap(), &want)
    };
    let (plain, safe, std, aggr) = (
        err(None),
        err(Some(Precision::Safe)),
        err(Some(Precision::Standard)),
        err(Some(Precision::Aggressive)),
    );
    eprintln!(
        "{device:?}: plain {plain:.2e} safe {safe:.2e} standard {std:.2e} aggressive {aggr:.2e}"
    );
    assert!(plain < 1e-5 && safe < 1e-5, "f32: {plain:e} {safe:e}");
    // bf16 inputs (8 significant bits), f32 accumulation.
    assert!(std > 1e-4 && std < 1e-2, "standard: {std:e}");
    // e4m3 inputs (4 significant bits) and a bf16 accumulator.
    assert!(aggr > std && aggr < 0.1, "aggressive: {aggr:e}");
    // The attribute compiles the same graph as the scope.
    let attr = mm_fp8(&x, &w).unwrap();
    let scoped = numerics::precision(Precision::Aggressive, || mm(&x, &w)).unwrap();
    assert_eq!(attr.to_vec().unwrap(), scoped.to_vec().unwrap());
    // A kernel compiled under one mode refuses a scope asking for another.
    let e = numerics::precision(Precision::Standard, || mm_fp8(&x, &w))
        .unwrap_err()
        .to_string();
    assert!(e.contains("aggressive") && e.contains("standard"), "{e}");
}

#[test]
fn cpu() {
    case(Device::cpu());
}

#[test]
fn sim_sm89() {
    case(Device::sim_arch(tessera::ir::target::ptx::Arch::Sm89));
}

#[test]
fn fp8_on_sm80_is_an_error() {
    let x = Tensor::<f32>::randn(&[4, 8], 1).to(&Device::sim()).unwrap();
    let w = Tensor::<f32>::randn(&[8, 3], 2).to(&Device::sim()).unwrap();
    let e = mm_fp8(&x, &w).unwrap_err().to_string();
    assert!(e.contains("sm_89"), "{e}");
}
