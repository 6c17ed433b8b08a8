//! f64 reference functions shared by the IR's reference semantics and the tests.

/// Complementary error function in f64 (from `libm`).
pub fn erfc(x: f64) -> f64 {
    libm::erfc(x)
}
