//! Software prefetch hints: a loop asks for the cache lines it will read a little later, so
//! that memory works while it computes. A prefetch reads nothing architecturally and never
//! faults, so any address (one past a buffer's end, or unmapped) is harmless. On targets
//! other than x86-64 these do nothing.

/// Asks for the cache line holding `p` in L1 (`prefetcht0`).
#[inline(always)]
pub(crate) fn l1<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults (SSE is part of the
    // x86-64 baseline).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the cache line holding `p` in L2 (`prefetcht1`).
#[inline(always)]
pub(crate) fn l2<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as `l1`.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the `lines` consecutive 64-byte cache lines from `p` in L1 (one `prefetcht0`
/// each: with `p` 64-byte aligned, exactly the lines of bytes `p .. p + 64·lines`).
#[inline(always)]
pub(crate) fn lines_l1<T>(p: *const T, lines: usize) {
    let p = p.cast::<u8>();
    for l in 0..lines {
        l1(p.wrapping_add(64 * l));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefetch is a hint: addresses no allocation holds (null, the top of the address
    /// space, far past a buffer) must not fault, as a load there would.
    #[test]
    fn unmapped_addresses_do_not_fault() {
        let v = vec![1.5f32; 16];
        for p in [
            std::ptr::null::<f32>(),
            usize::MAX as *const f32,
            (usize::MAX - 4095) as *const f32,
            v.as_ptr().wrapping_add(1 << 40),
        ] {
            l1(p);
            l2(p);
            lines_l1(p, 4);
        }
        assert_eq!(v.iter().sum::<f32>(), 24.0);
    }
}
