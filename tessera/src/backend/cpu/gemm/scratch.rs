//! Thread-local, 64-byte aligned packing buffers reused across calls.

use std::cell::RefCell;

/// One cache line of `f32`s; gives the buffers 64-byte alignment.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

thread_local! {
    static SCRATCH: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

fn lines(len: usize) -> usize {
    len.div_ceil(16)
}

/// Run `f` with two uninitialised-but-valid (zero on first use) `f32` buffers of
/// at least `a_len` and `b_len` elements, each 64-byte aligned.
///
/// The buffers come from a per-thread scratch that only grows, so steady-state
/// calls do not allocate. A re-entrant call (not expected) gets fresh memory.
pub(crate) fn with_scratch<R>(
    a_len: usize,
    b_len: usize,
    f: impl FnOnce(*mut f32, *mut f32) -> R,
) -> R {
    let (la, lb) = (lines(a_len), lines(b_len));
    let run = |v: &mut Vec<Line>| {
        if v.len() < la + lb {
            v.resize(la + lb, Line([0.0; 16]));
        }
        let base = v.as_mut_ptr() as *mut f32;
        // SAFETY: `la * 16` elements are within the `la + lb` lines.
        f(base, unsafe { base.add(la * 16) })
    };
    let mut f_opt = Some(run);
    let res = SCRATCH.try_with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => Some((f_opt.take().unwrap())(&mut v)),
        Err(_) => None,
    });
    match res {
        Ok(Some(r)) => r,
        // Re-entrant use or thread-local already destroyed: private buffer.
        _ => {
            let mut v = Vec::new();
            (f_opt.take().expect("scratch closure used once"))(&mut v)
        }
    }
}
