//! Numerics policies and precision modes at run time (seeds tables A.7 and A.3).
//!
//! A kernel's reductions run under the policy its attribute names
//! (`#[tessera::kernel(numerics = "deterministic")]`), or, for a kernel that names none, the
//! policy of the innermost [`policy`] scope on the launching thread; likewise a kernel compiled
//! without `precision = ".."` follows the innermost [`precision`] scope. A kernel whose own
//! policy conflicts with the scope's (say `kahan_sum` under a `deterministic` scope) is an
//! error at launch, never a silent choice of one. What each policy guarantees is documented on
//! [`NumericsPolicy`]; the modes on [`Precision`].
//!
//! ```
//! use tessera::{NumericsPolicy, Tensor, numerics};
//!
//! #[tessera::kernel]
//! fn row_sums(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
//!     sum(x, 1)
//! }
//!
//! let x = Tensor::<f32>::randn(&[4, 1000], 1);
//! let a = numerics::policy(NumericsPolicy::Deterministic, || row_sums(&x))?;
//! let b = numerics::policy(NumericsPolicy::Deterministic, || row_sums(&x))?;
//! assert_eq!(a, b); // bit for bit, whatever the schedule, thread count or backend
//! # Ok::<(), tessera::Error>(())
//! ```

use std::cell::Cell;
pub use tessera_ir::{LossScaling, NumericsPolicy, Precision};

mod loss_scale;
pub use loss_scale::{LossScaler, Step};

thread_local! {
    static POLICY: Cell<Option<NumericsPolicy>> = const { Cell::new(None) };
    static PRECISION: Cell<Option<Precision>> = const { Cell::new(None) };
}

/// Restores a thread-local setting when a scope ends (also on unwinding).
struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<Option<T>>>, Option<T>);

impl<T: Copy + 'static> Drop for Restore<T> {
    fn drop(&mut self) {
        self.0.with(|c| c.set(self.1));
    }
}

/// Runs `f` with `p` as the numerics policy of every kernel launched on this thread that does
/// not name its own (`fast` asks nothing: it changes no kernel).
///
/// ```
/// use tessera::{NumericsPolicy, numerics};
/// assert_eq!(numerics::current_policy(), None);
/// numerics::policy(NumericsPolicy::KahanSum, || {
///     assert_eq!(numerics::current_policy(), Some(NumericsPolicy::KahanSum));
/// });
/// assert_eq!(numerics::current_policy(), None);
/// ```
pub fn policy<R>(p: NumericsPolicy, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(&POLICY, POLICY.with(|c| c.replace(Some(p))));
    f()
}

/// The policy of the innermost [`policy`] scope on this thread, if any.
pub fn current_policy() -> Option<NumericsPolicy> {
    POLICY.with(|c| c.get())
}

/// Runs `f` with every kernel launched on this thread that was compiled without a precision
/// mode compiled under `mode` (casts before its matmuls, their accumulator, the mode's policy;
/// see [`Precision`]).
///
/// ```
/// use tessera::{Precision, numerics};
/// numerics::precision(Precision::Standard, || {
///     assert_eq!(numerics::current_precision(), Some(Precision::Standard));
/// });
/// ```
pub fn precision<R>(mode: Precision, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(&PRECISION, PRECISION.with(|c| c.replace(Some(mode))));
    f()
}

/// The mode of the innermost [`precision`] scope on this thread, if any.
pub fn current_precision() -> Option<Precision> {
    PRECISION.with(|c| c.get())
}
