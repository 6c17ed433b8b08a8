//! What the launching thread's last `#[kernel]` launch ran: each fused kernel and the schedule
//! it ran under ([`last_launch`]).

use std::cell::RefCell;
use tessera_ir::schedule::Schedule;

/// One fused kernel a launch ran.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchedKernel {
    /// The fused kernel's name (`k.k0` ...).
    pub kernel: String,
    /// The schedule it ran under: its default on the launch's backend, or the pinned tile of
    /// `#[kernel(tile = ..)]`; `None` when it ran a program the autotuner picked instead.
    pub schedule: Option<Schedule>,
}

thread_local! {
    static LAST: RefCell<Vec<LaunchedKernel>> = const { RefCell::new(Vec::new()) };
}

/// The fused kernels the calling thread's last `#[kernel]` launch ran, in order, with their
/// schedules (empty before the first launch; a launch that failed reports what ran before it
/// failed). Autotuning trials are not reported, only the run whose output the launch returns.
///
/// ```
/// #[tessera::kernel(tile = (64, 64, 32))]
/// fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
///     x.matmul(w)
/// }
/// let x = tessera::Tensor::<f32>::from_vec(vec![1.0; 6], &[2, 3]).unwrap();
/// let w = tessera::Tensor::<f32>::from_vec(vec![1.0; 12], &[3, 4]).unwrap();
/// mm(&x, &w).unwrap();
/// let ran = tessera::last_launch();
/// assert_eq!(ran[0].schedule.as_ref().unwrap().tile, vec![64, 64, 32]);
/// ```
pub fn last_launch() -> Vec<LaunchedKernel> {
    LAST.with(|l| l.borrow().clone())
}

/// Starts the record of a launch.
pub(crate) fn begin() {
    LAST.with(|l| l.borrow_mut().clear());
}

/// Records that fused kernel `kernel` ran under `schedule`.
pub(crate) fn ran(kernel: &str, schedule: Option<Schedule>) {
    LAST.with(|l| {
        l.borrow_mut().push(LaunchedKernel {
            kernel: kernel.to_string(),
            schedule,
        })
    });
}

/// The record so far (to restore it after work that launches again, such as a refinement).
pub(crate) fn take() -> Vec<LaunchedKernel> {
    LAST.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Restores a record taken with [`take`].
pub(crate) fn restore(r: Vec<LaunchedKernel>) {
    LAST.with(|l| *l.borrow_mut() = r);
}
