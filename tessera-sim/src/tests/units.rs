//! Instruction semantics and checkers on small hand-written kernels, and the bit-exact
//! conversions.

use super::read_u32;
use crate::convert::{cvt, fp8_to_f16, narrow16, to_fp8};
use crate::module::ir::{FRound, IRound, Ty};
use crate::{
    Finding, FindingKind, LaunchConfig, Location, Memory, Options, Param, Report, SimError,
};

/// The text of a one-CTA kernel `t(out)` over `out: u32[]`; `body` may use `%r1` = tid,
/// `%rd2` = &out[tid] and the registers declared here. The body starts at line 15.
pub(super) fn one_text(body: &str) -> String {
    format!(
        ".version 7.4\n.target sm_80\n.address_size 64\n.visible .entry t(.param .u64 out_ptr)\n{{\n    .reg .pred %p<8>;\n    .reg .b32 %r<40>;\n    .reg .f32 %f<8>;\n    .reg .b64 %rd<8>;\n    .shared .align 16 .b8 sm[1024];\n    ld.param.u64 %rd1, [out_ptr];\n    mov.u32 %r1, %tid.x;\n    mul.wide.u32 %rd2, %r1, 4;\n    add.s64 %rd2, %rd1, %rd2;\n{body}\n    ret;\n}}\n"
    )
}

/// Runs [`one_text`] with `threads` threads over `out: u32[n]` (initially `init`, or zeros).
pub(super) fn one_with(
    body: &str,
    threads: u32,
    n: usize,
    init: Option<&[u32]>,
    opts: &Options,
) -> (Result<Report, SimError>, Vec<u32>) {
    let mut mem = Memory::new();
    let out = mem.alloc_named("out", 4 * n).unwrap();
    if let Some(v) = init {
        mem.upload(out, &super::u32_bytes(v)).unwrap();
    }
    let r = super::launch(
        &one_text(body),
        "t",
        &mut mem,
        LaunchConfig::linear(1, threads),
        &[Param::Ptr(out)],
        opts,
    );
    (r, read_u32(&mem, out, n))
}

/// [`one_with`] with zeros and the default options.
pub(super) fn one(body: &str, threads: u32, n: usize) -> (Result<Report, SimError>, Vec<u32>) {
    one_with(body, threads, n, None, &Options::default())
}

/// [`one`], which must run without findings.
pub(super) fn clean(body: &str, threads: u32, n: usize) -> Vec<u32> {
    let (r, v) = one(body, threads, n);
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    assert!(r.is_clean(), "{:#?}", r.findings);
    v
}

fn shfl(instr: &str) -> (Vec<u32>, Vec<u32>) {
    let body = format!(
        "    mad.lo.s32 %r2, %r1, 10, 7;\n    {instr}\n    st.global.u32 [%rd2], %r3;\n    selp.u32 %r4, 1, 0, %p1;\n    st.global.u32 [%rd2+128], %r4;"
    );
    let v = clean(&body, 32, 64);
    (v[..32].to_vec(), v[32..].to_vec())
}

#[test]
fn shfl_sync_semantics() {
    let val = |l: usize| (l * 10 + 7) as u32;
    let (d, p) = shfl("shfl.sync.bfly.b32 %r3|%p1, %r2, 1, 0x1f, 0xffffffff;");
    assert!((0..32).all(|l| d[l] == val(l ^ 1) && p[l] == 1));
    // down 16: lanes 16..31 get their own value and p = false
    let (d, p) = shfl("shfl.sync.down.b32 %r3|%p1, %r2, 16, 0x1f, 0xffffffff;");
    assert!((0..32).all(|l| if l < 16 {
        d[l] == val(l + 16) && p[l] == 1
    } else {
        d[l] == val(l) && p[l] == 0
    }));
    // up 3 (c = 0): lanes 0..2 keep their value
    let (d, p) = shfl("shfl.sync.up.b32 %r3|%p1, %r2, 3, 0, 0xffffffff;");
    assert!((0..32).all(|l| if l >= 3 {
        d[l] == val(l - 3) && p[l] == 1
    } else {
        d[l] == val(l) && p[l] == 0
    }));
    // idx 1 in segments of 4 (c = 0x1c1f): every lane reads lane (l & ~3) | 1
    let (d, _) = shfl("shfl.sync.idx.b32 %r3|%p1, %r2, 1, 0x1c1f, 0xffffffff;");
    assert!((0..32).all(|l| d[l] == val((l & !3) | 1)));
    // down 1 in segments of 8 (c = 0x181f): the last lane of each segment keeps its value
    let (d, p) = shfl("shfl.sync.down.b32 %r3|%p1, %r2, 1, 0x181f, 0xffffffff;");
    assert!((0..32).all(|l| if l % 8 == 7 {
        d[l] == val(l) && p[l] == 0
    } else {
        d[l] == val(l + 1) && p[l] == 1
    }));
    // a membermask naming lanes that do not execute the shuffle
    let f = first(
        "    setp.lt.u32 %p2, %r1, 16;\n    @%p2 shfl.sync.bfly.b32 %r3, %r1, 1, 0x1f, 0xffffffff;",
        32,
    );
    assert_eq!(f.kind, FindingKind::DivergentCollective);
    assert!(f.message.contains("membermask 0xffffffff"), "{f}");
}

#[test]
fn divergent_branches_reconverge() {
    // lane l loops l % 5 times adding l; odd lanes then take an else branch.
    let body = "    mov.u32 %r2, 0;\n    rem.u32 %r3, %r1, 5;\n    mov.u32 %r4, 0;\nLOOP:\n    setp.ge.u32 %p1, %r4, %r3;\n    @%p1 bra END;\n    add.u32 %r2, %r2, %r1;\n    add.u32 %r4, %r4, 1;\n    bra LOOP;\nEND:\n    and.b32 %r5, %r1, 1;\n    setp.eq.u32 %p2, %r5, 1;\n    @%p2 bra ODD;\n    add.u32 %r2, %r2, 1000;\n    bra JOIN;\nODD:\n    add.u32 %r2, %r2, 2000;\nJOIN:\n    shfl.sync.idx.b32 %r6, %r2, 3, 0x1f, 0xffffffff;\n    add.u32 %r2, %r2, %r6;\n    st.global.u32 [%rd2], %r2;";
    let v = clean(body, 32, 32);
    let f = |l: u32| l * (l % 5) + if l % 2 == 1 { 2000 } else { 1000 };
    assert!((0..32u32).all(|l| v[l as usize] == f(l) + f(3)), "{v:?}");
}

/// The findings of [`one`] with `threads` threads (over 64 words of `out`).
fn findings(body: &str, threads: u32) -> Vec<Finding> {
    let r = one(body, threads, 64).0.unwrap_or_else(|e| panic!("{e}"));
    for f in &r.findings {
        eprintln!("{f}");
    }
    r.findings
}

/// The first finding of [`one`].
fn first(body: &str, threads: u32) -> Finding {
    findings(body, threads)
        .into_iter()
        .next()
        .expect("a finding")
}

#[test]
fn checkers_on_small_kernels() {
    let sm = |offset| {
        Some(Location::Shared {
            symbol: "sm".into(),
            offset,
        })
    };
    // misaligned vector access
    let f = first(
        "    mov.u32 %r2, sm;\n    ld.shared.v4.f32 {%f1, %f2, %f3, %f4}, [%r2+4];",
        32,
    );
    assert_eq!(
        (f.kind, f.line, f.location.clone()),
        (FindingKind::Misaligned, 16, sm(4))
    );
    assert!(
        f.message
            .contains("misaligned load: 16-byte access at `sm+4`"),
        "{f}"
    );
    assert_eq!(f.count, 32, "the 32 lanes are one finding");
    // uninitialized shared read
    let f = first(
        "    mov.u32 %r2, sm;\n    ld.shared.u32 %r3, [%r2];\n    bar.sync 0;",
        32,
    );
    assert_eq!(
        (f.kind, f.location.clone()),
        (FindingKind::UninitializedRead, sm(0))
    );
    assert!(
        f.message.contains("uninitialized shared memory at `sm+0`"),
        "{f}"
    );
    // out-of-bounds shared
    let f = first(
        "    mov.u32 %r2, sm;\n    st.shared.u32 [%r2+1024], %r1;",
        32,
    );
    assert_eq!(
        (f.kind, f.location.clone()),
        (FindingKind::OutOfBounds, sm(1024))
    );
    assert!(
        f.message
            .contains("out-of-bounds shared write of 4 bytes at `sm+1024`"),
        "{f}"
    );
    // early exit before a barrier
    let f = first(
        "    setp.ge.u32 %p1, %r1, 32;\n    @%p1 bra SKIP;\n    bar.sync 0;\nSKIP:",
        64,
    );
    assert_eq!(f.kind, FindingKind::BarrierDeadlock);
    assert!(
        f.message.contains("bar.sync not reached by all threads")
            || f.message.contains("different barriers"),
        "{f}"
    );
    let f = first(
        "    setp.ge.u32 %p1, %r1, 32;\n    @%p1 ret;\n    bar.sync 0;",
        64,
    );
    assert!(
        f.message.contains("bar.sync not reached by all threads"),
        "{f}"
    );
    // bra.uni with a divergent predicate
    let f = first("    setp.lt.u32 %p1, %r1, 3;\n    @%p1 bra.uni L;\nL:", 32);
    assert_eq!(f.kind, FindingKind::DivergentCollective);
    assert!(
        f.message.contains("bra.uni with a divergent predicate"),
        "{f}"
    );
    // an instruction the simulator does not implement names itself and its line
    let (r, _) = one("    bfind.u32 %r2, %r1;", 32, 32);
    let e = r.unwrap_err();
    assert!(
        matches!(&e, SimError::Unsupported { unsupported, .. } if unsupported.line == 15),
        "{e}"
    );
    assert!(
        e.to_string().contains("unknown instruction `bfind.u32`"),
        "{e}"
    );
}

#[test]
fn cp_async_lands_at_the_wait() {
    // thread t copies out[t] (its own u32, 4 bytes) into smem with src-size 4, or 0 for t >= 16
    let pre = "    st.global.u32 [%rd2], %r1;\n    mov.u32 %r2, sm;\n    shl.b32 %r3, %r1, 2;\n    add.u32 %r2, %r2, %r3;\n    setp.lt.u32 %p1, %r1, 16;\n    selp.u32 %r5, 4, 0, %p1;\n    cp.async.ca.shared.global [%r2], [%rd2], 4, %r5;\n    cp.async.commit_group;\n";
    let f = first(&format!("{pre}    ld.shared.u32 %r6, [%r2];"), 32);
    assert_eq!(f.kind, FindingKind::AsyncCopyInFlight);
    assert!(
        f.message.contains("read of cp.async destination `sm+0`")
            && f.message.contains("before its cp.async.wait_group"),
        "{f}"
    );
    // a newer group still in flight does not block wait_group 1 for the older one
    let v = clean(
        &format!(
            "{pre}    cp.async.ca.shared.global [%r2+128], [%rd2], 4;\n    cp.async.commit_group;\n    cp.async.wait_group 1;\n    ld.shared.u32 %r6, [%r2];\n    add.u32 %r6, %r6, 100;\n    st.global.u32 [%rd2], %r6;\n    cp.async.wait_all;"
        ),
        32,
        32,
    );
    assert!(
        (0..32).all(|t| v[t] == if t < 16 { t as u32 + 100 } else { 100 }),
        "src-size 0 must zero-fill: {v:?}"
    );
    // reading another thread's landed data needs a barrier
    let f = first(
        &format!(
            "{pre}    cp.async.wait_all;\n    xor.b32 %r3, %r3, 4;\n    mov.u32 %r2, sm;\n    add.u32 %r2, %r2, %r3;\n    ld.shared.u32 %r6, [%r2];"
        ),
        32,
    );
    assert_eq!(f.kind, FindingKind::SharedRace);
    assert!(f.message.contains("shared-memory race"), "{f}");
}

#[test]
fn conversions_are_bit_exact() {
    let c = |d, s, r, v: u32| cvt(d, s, r, false, false, v as u64).unwrap() as u32;
    // bf16 round-to-nearest-even: ties go to even, just above a tie rounds up
    assert_eq!(c(Ty::BF16, Ty::F32, FRound::Rn, 0x3f80_8000), 0x3f80);
    assert_eq!(c(Ty::BF16, Ty::F32, FRound::Rn, 0x3f81_8000), 0x3f82);
    assert_eq!(c(Ty::BF16, Ty::F32, FRound::Rn, 0x3f80_8001), 0x3f81);
    assert_eq!(
        c(Ty::F16, Ty::F32, FRound::Rn, 1.0005f32.to_bits()),
        half::f16::from_f32(1.0005).to_bits() as u32
    );
    assert_eq!(c(Ty::F32, Ty::BF16, FRound::None, 0x3fc0), 1.5f32.to_bits());
    assert_eq!(
        c(
            Ty::S32,
            Ty::F32,
            FRound::Int(IRound::Rzi),
            (-2.7f32).to_bits()
        ),
        -2i32 as u32
    );
    assert_eq!(
        c(Ty::S32, Ty::F32, FRound::Int(IRound::Rni), 2.5f32.to_bits()),
        2
    );
    assert_eq!(
        c(
            Ty::S32,
            Ty::F32,
            FRound::Int(IRound::Rni),
            f32::NAN.to_bits()
        ),
        0
    );
    assert_eq!(
        c(
            Ty::U32,
            Ty::F32,
            FRound::Int(IRound::Rzi),
            1e20f32.to_bits()
        ),
        u32::MAX
    );
    assert_eq!(
        c(Ty::F32, Ty::S32, FRound::Rn, 16_777_217),
        16_777_216f32.to_bits()
    );
    assert_eq!(
        cvt(Ty::S64, Ty::S32, FRound::None, false, false, 0xffff_fffe).unwrap(),
        u64::MAX - 1
    );
    assert_eq!(
        narrow16(Ty::BF16, f32::MAX, true, false),
        half::bf16::MAX.to_bits()
    );
    // fp8 e4m3 / e5m2 with satfinite
    assert_eq!(to_fp8(1.0, true), 0x38);
    assert_eq!(to_fp8(448.0, true), 0x7e);
    assert_eq!(to_fp8(1e6, true), 0x7e);
    assert_eq!(to_fp8(f32::NEG_INFINITY, true), 0xfe);
    assert_eq!(to_fp8(f32::NAN, true), 0x7f);
    assert_eq!(to_fp8(1.0, false), 0x3c);
    assert_eq!(to_fp8(2f32.powi(-9), true), 0x01); // smallest e4m3 subnormal
    assert_eq!(to_fp8(1.0625, true), 0x38); // tie between 1.0 and 1.125 -> even
    for b in 0..=255u8 {
        for e4 in [true, false] {
            let h = half::f16::from_bits(fp8_to_f16(b, e4));
            if h.is_finite() {
                assert_eq!(to_fp8(h.to_f32(), e4), b, "fp8 {b:#x} e4m3={e4} round trip");
            }
        }
    }
}
