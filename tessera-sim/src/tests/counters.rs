//! Performance counters on hand-written kernels where the ideal and the strided (unswizzled)
//! access patterns differ only in a stride: the strided one raises the bank conflicts and the
//! sectors per request by exactly the amount the hardware rules give.

use super::units::one_with;
use crate::{Counters, Options};

/// Runs `body` with 32 threads over `out: u32[256]` and returns the counters.
fn counters(body: &str) -> Counters {
    let (r, _) = one_with(body, 32, 256, None, &Options::default());
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    assert!(r.is_clean(), "{:#?}", r.findings);
    r.counters
}

/// Every thread fills 32 bytes of `sm`, a barrier, then a load of one word per lane at
/// `stride` bytes.
fn shared_read(stride: u32) -> Counters {
    counters(&format!(
        "    mov.u32 %r2, sm;\n    shl.b32 %r3, %r1, 5;\n    add.u32 %r4, %r2, %r3;\n    st.shared.v4.u32 [%r4], {{%r1, %r1, %r1, %r1}};\n    st.shared.v4.u32 [%r4+16], {{%r1, %r1, %r1, %r1}};\n    bar.sync 0;\n    mul.lo.u32 %r5, %r1, {stride};\n    add.u32 %r6, %r2, %r5;\n    ld.shared.u32 %r7, [%r6];\n    st.global.u32 [%rd2], %r7;"
    ))
}

#[test]
fn strided_shared_reads_raise_bank_conflicts() {
    // 4-byte stride: 32 lanes on 32 banks, one wavefront
    let c = shared_read(4);
    assert_eq!(c.shared_loads.requests, 1);
    assert_eq!(c.shared_loads.wavefronts, 1);
    assert_eq!(c.shared_loads.bank_conflicts(), 0);
    // 32-byte stride: banks 8t mod 32 — 4 banks, 8 distinct words each: 8 wavefronts
    let c = shared_read(32);
    assert_eq!(c.shared_loads.requests, 1);
    assert_eq!(c.shared_loads.wavefronts, 8);
    assert_eq!(c.shared_loads.bank_conflicts(), 7);
    // 0 stride: every lane reads one word (a broadcast), one wavefront
    assert_eq!(shared_read(0).shared_loads.bank_conflicts(), 0);
}

fn global_read(stride: u32) -> Counters {
    counters(&format!(
        "    mul.wide.u32 %rd3, %r1, {stride};\n    add.s64 %rd4, %rd1, %rd3;\n    ld.global.u32 %r5, [%rd4];\n    st.global.u32 [%rd2], %r5;"
    ))
}

#[test]
fn strided_global_reads_raise_sectors_per_request() {
    // 32 lanes x 4 bytes contiguous: 128 bytes, 4 sectors, the ideal
    let c = global_read(4);
    assert_eq!((c.global_loads.requests, c.global_loads.sectors), (1, 4));
    assert_eq!(c.global_loads.ideal_sectors, 4);
    assert_eq!(c.global_loads.efficiency(), 1.0);
    // 32-byte stride: a sector per lane, 8x the ideal
    let c = global_read(32);
    assert_eq!((c.global_loads.requests, c.global_loads.sectors), (1, 32));
    assert_eq!(c.global_loads.ideal_sectors, 4);
    assert_eq!(c.global_loads.efficiency(), 0.125);
    // the stores are contiguous in both
    assert_eq!(c.global_stores.sectors, 4);
}

#[test]
fn divergent_branches_are_counted() {
    let body = |limit: u32| {
        format!(
            "    setp.lt.u32 %p1, %r1, {limit};\n    @%p1 bra SKIP;\n    st.global.u32 [%rd2], %r1;\nSKIP:\n    add.u32 %r2, %r1, 1;\n    st.global.u32 [%rd2+128], %r2;"
        )
    };
    let c = counters(&body(16));
    assert_eq!((c.branches, c.divergent_branches), (1, 1));
    let c = counters(&body(64));
    assert_eq!((c.branches, c.divergent_branches), (1, 0));
    assert!(c.mix.global_stores >= 1 && c.mix.alu >= 1, "{:?}", c.mix);
}
