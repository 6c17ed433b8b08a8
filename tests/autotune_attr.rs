//! `#[tessera::kernel(autotune(...))]` registers its search space at the first launch.

use tessera::autotune;
use tessera::prelude::*;

#[tessera::kernel(autotune(tiles = [(64, 64, 32), (128, 128, 64)], vectorize = [1, 2, 4], stages = [2, 3], fusion_depth = [0, 1], max_trials = 50, strategy = "grid", cost_model = "none"))]
fn tuned_matmul(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    relu(x.matmul(w))
}

#[test]
fn attribute_registers_the_space_on_first_launch() {
    assert!(
        autotune::space_of("tuned_matmul").is_none(),
        "registered before any launch"
    );
    let x = Tensor::<f32>::randn(&[9, 7], 1);
    let w = Tensor::<f32>::randn(&[7, 5], 2);
    let y = tuned_matmul(&x, &w).unwrap();
    assert_eq!(y.shape(), &[9, 5]);
    let space = autotune::space_of("tuned_matmul").expect("registered by the attribute");
    assert_eq!(space.fusion_depths, vec![0, 1]);
    assert_eq!(space.cost_model, autotune::CostModel::Off);
    let s = format!(
        "{:?}",
        autotune::space_of("tuned_matmul").expect("registered by the attribute")
    );
    for needle in [
        "[64, 64, 32]",
        "[128, 128, 64]",
        "max_trials: Some(50)",
        "Grid",
    ] {
        assert!(s.contains(needle), "{needle} missing from {s}");
    }
}
