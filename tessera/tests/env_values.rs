//! `TESSERA_*` variables set to a value they do not accept are errors naming the variable and
//! the accepted values. One test in its own binary: the environment is process-wide.

mod common;

use common::set;
use tessera::Tensor;

#[tessera::kernel]
fn ev(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

#[tessera::kernel]
fn ev_first(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M, K)> {
    exp(x)
}

#[test]
fn invalid_env_values_fail_the_launch_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    set("TESSERA_CACHE_DIR", Some(dir.path().to_str().unwrap()));
    let x = Tensor::<f32>::randn(&[8, 4], 1);
    let w = Tensor::<f32>::randn(&[4, 6], 2);
    // A launch under valid (unset) values first: launches keep what they read (one byte
    // each, `env.rs`) until `reload_env`, which `set` calls; the invalid values below must
    // still fail the launches that follow.
    assert_eq!(ev(&x, &w).unwrap().shape(), &[8, 6]);
    for (var, value, accepted) in [
        ("TESSERA_AUTOTUNE", "zzz", "off, cached or full"),
        (
            "TESSERA_AUTOTUNE_BACKGROUND",
            "maybe",
            "1, on, true, yes, 0, off",
        ),
    ] {
        set(var, Some(value));
        let e = ev(&x, &w).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{var}=\"{value}\" is not valid: expected"))
                && e.contains(accepted),
            "{var}: {e}"
        );
        set(var, None);
    }
    // TESSERA_DUMP is read when a kernel is compiled (at its first launch).
    set("TESSERA_DUMP", Some("zzz"));
    let e = ev_first(&x).unwrap_err().to_string();
    assert!(
        e.contains("TESSERA_DUMP=\"zzz\" is not valid: expected")
            && e.contains("graph, fusion, schedule, tile, or all"),
        "{e}"
    );
    set("TESSERA_DUMP", None);
    // Accepted values run.
    for (var, value) in [
        ("TESSERA_AUTOTUNE", "OFF"),
        ("TESSERA_AUTOTUNE_BACKGROUND", "0"),
        ("TESSERA_DUMP", ""),
    ] {
        set(var, Some(value));
        let y = ev(&x, &w).unwrap();
        assert_eq!(y.shape(), &[8, 6]);
        set(var, None);
    }
}
