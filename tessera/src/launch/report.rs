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

/// The record: its first `len` entries are the current launch's; entries past `len` are kept
/// from earlier launches so the next launch overwrites them in place (a launch that runs the
/// same kernels under the same schedules as the one before allocates nothing here).
struct Record {
    entries: Vec<LaunchedKernel>,
    len: usize,
}

thread_local! {
    static LAST: RefCell<Record> = const {
        RefCell::new(Record {
            entries: Vec::new(),
            len: 0,
        })
    };
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
    LAST.with(|l| {
        let l = l.borrow();
        l.entries[..l.len].to_vec()
    })
}

/// Starts the record of a launch.
pub(crate) fn begin() {
    LAST.with(|l| l.borrow_mut().len = 0);
}

/// Records that fused kernel `kernel` ran under `schedule`, in the entry an earlier launch
/// left at this position when there is one (its name and schedule are replaced only when
/// they differ).
pub(crate) fn ran(kernel: &str, schedule: Option<&Schedule>) {
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        let at = l.len;
        l.len += 1;
        match l.entries.get_mut(at) {
            Some(e) => {
                if e.kernel != kernel {
                    e.kernel.clear();
                    e.kernel.push_str(kernel);
                }
                if e.schedule.as_ref() != schedule {
                    e.schedule = schedule.cloned();
                }
            }
            None => l.entries.push(LaunchedKernel {
                kernel: kernel.to_string(),
                schedule: schedule.cloned(),
            }),
        }
    });
}

/// The record so far (to restore it after work that launches again, such as a refinement).
pub(crate) fn take() -> Vec<LaunchedKernel> {
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        let mut r = std::mem::take(&mut l.entries);
        r.truncate(l.len);
        l.len = 0;
        r
    })
}

/// Restores a record taken with [`take`].
pub(crate) fn restore(r: Vec<LaunchedKernel>) {
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        l.len = r.len();
        l.entries = r;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ir::schedule::KernelClass;

    fn record(kernels: &[(&str, Option<&Schedule>)]) {
        begin();
        for (k, s) in kernels {
            ran(k, *s);
        }
    }

    #[test]
    fn a_launch_reuses_the_entries_of_the_one_before() {
        let s = Schedule::cpu_default(KernelClass::Elementwise, tessera_ir::DType::F32);
        record(&[("k.k0", Some(&s)), ("k.k1", None)]);
        let name_at = LAST.with(|l| l.borrow().entries[0].kernel.as_ptr());
        record(&[("k.k0", Some(&s))]);
        // Only this launch's kernel is reported, from the entry the first launch left.
        assert_eq!(
            last_launch(),
            vec![LaunchedKernel {
                kernel: "k.k0".into(),
                schedule: Some(s.clone()),
            }]
        );
        assert_eq!(
            LAST.with(|l| l.borrow().entries[0].kernel.as_ptr()),
            name_at
        );
        // Other kernels and schedules replace what the entries held.
        record(&[("m.k0", None), ("m.k1", Some(&s)), ("m.k2", None)]);
        let ran = last_launch();
        let names: Vec<&str> = ran.iter().map(|k| k.kernel.as_str()).collect();
        assert_eq!(names, ["m.k0", "m.k1", "m.k2"]);
        assert_eq!(ran[0].schedule, None);
        assert_eq!(ran[1].schedule.as_ref(), Some(&s));
        // A record taken and restored is the launch's, whatever ran in between.
        let taken = take();
        record(&[("z.k0", None)]);
        restore(taken);
        assert_eq!(last_launch(), ran);
    }
}
