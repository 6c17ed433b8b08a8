//! Planted bugs in hand-written PTX, each caught by a checker or by comparing with a reference
//! computed in Rust; the same kernels without the bug pass.

use super::{buf, f32_bytes, launch, rand, read_f32};
use crate::{
    Checks, FindingKind, LaunchConfig, Location, Memory, Options, Param, Report, SimError,
};

const ROTATE: &str = r#"
.version 7.4
.target sm_80
.address_size 64
.visible .entry rotate(.param .u64 x_ptr, .param .u32 x_d0, .param .u64 out_ptr, .param .u32 out_d0)
.maxntid 64, 1, 1
{
    .reg .b32 %r<10>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b8 buf[256];
    ld.param.u64 %rd1, [x_ptr];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [out_ptr];
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.u32 %r2, buf;
    shl.b32 %r3, %r1, 2;
    add.u32 %r4, %r2, %r3;
    st.shared.f32 [%r4], %f1;
    bar.sync 0;
    add.u32 %r5, %r1, 32;
    and.b32 %r5, %r5, 63;
    shl.b32 %r6, %r5, 2;
    add.u32 %r7, %r2, %r6;
    ld.shared.f32 %f2, [%r7];
    add.s64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f2;
    ret;
}
"#;

fn rotate(text: &str, checks: Checks) -> (Result<Report, SimError>, Vec<f32>, Vec<f32>) {
    let x = rand(64, 1, 1.0);
    let mut mem = Memory::new();
    let xb = buf(&mut mem, "x", &f32_bytes(&x));
    let out = mem.alloc_named("out", 256).unwrap();
    let opts = Options {
        checks,
        ..Options::default()
    };
    let params = [
        Param::Ptr(xb),
        Param::U32(64),
        Param::Ptr(out),
        Param::U32(64),
    ];
    let r = launch(
        text,
        "rotate",
        &mut mem,
        LaunchConfig::linear(1, 64),
        &params,
        &opts,
    );
    let want: Vec<f32> = (0..64).map(|i| x[(i + 32) % 64]).collect();
    (r, read_f32(&mem, out, 64), want)
}

#[test]
fn removed_barrier_is_a_race() {
    let (r, got, want) = rotate(ROTATE, Checks::default());
    assert!(r.as_ref().is_ok_and(|r| r.is_clean()), "{r:?}");
    assert_eq!(got, want);
    let buggy = ROTATE.replace("    bar.sync 0;\n", "");
    let (r, _, _) = rotate(&buggy, Checks::default());
    let r = r.unwrap();
    for f in &r.findings {
        eprintln!("{f}");
    }
    // warp 0 reads slots 32..63 before warp 1 writes them: every one of those bytes is a
    // race, reported at the write (line 23) with the shared variable and offset
    let f = &r.findings[0];
    assert_eq!(f.kind, FindingKind::SharedRace, "{f}");
    assert_eq!(f.line, 23);
    assert_eq!(f.thread, [32, 0, 0]);
    assert_eq!(
        f.location,
        Some(Location::Shared {
            symbol: "buf".into(),
            offset: 128
        })
    );
    assert!(
        f.message.contains("`buf+128`") && f.message.contains("no bar.sync"),
        "{f}"
    );
    // the 32 lanes of warp 1's store merge into one finding
    assert_eq!(f.count, 32, "{f}");
    // Without the checker the bug only shows as wrong numbers (here: warp 0 reads slots that
    // warp 1 has not written yet).
    let (r, got, want) = rotate(&buggy, Checks { shared: false });
    assert!(r.unwrap().is_clean());
    assert_ne!(got, want);
}

const SCALE: &str = r#"
.version 7.4
.target sm_80
.address_size 64
.visible .entry scale(.param .u64 x_ptr, .param .u32 x_d0, .param .u64 out_ptr, .param .u32 out_d0)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x_ptr];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u32 %r1, [x_d0];
    ld.param.u64 %rd2, [out_ptr];
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r5, %r3, %r4, %r2;
    setp.lt.u32 %p1, %r5, %r1;
    @!%p1 bra DONE;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, %f1;
    add.s64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f2;
DONE:
    ret;
}
"#;

fn scale(text: &str) -> (Result<Report, SimError>, Vec<f32>, Vec<f32>) {
    let x = rand(100, 2, 1.0);
    let mut mem = Memory::new();
    let xb = buf(&mut mem, "x", &f32_bytes(&x));
    let out = mem.alloc_named("out", 400).unwrap();
    mem.set_read_only(xb, true).unwrap();
    let params = [
        Param::Ptr(xb),
        Param::U32(100),
        Param::Ptr(out),
        Param::U32(100),
    ];
    let r = launch(
        text,
        "scale",
        &mut mem,
        LaunchConfig::linear(2, 64),
        &params,
        &Options::default(),
    );
    (
        r,
        read_f32(&mem, out, 100),
        x.iter().map(|v| 2.0 * v).collect(),
    )
}

#[test]
fn off_by_one_mask_is_out_of_bounds() {
    let (r, got, want) = scale(SCALE);
    let r = r.unwrap();
    assert!(r.is_clean() && r.stats.ctas == 2, "{r:?}");
    assert_eq!(got, want);
    let (r, got, _) = scale(&SCALE.replace("setp.lt.u32", "setp.le.u32"));
    let r = r.unwrap();
    for f in &r.findings {
        eprintln!("{f}");
    }
    // every finding, not only the first: thread 36 of CTA 1 reads x[100] (line 24), and its
    // store of the (suppressed, zero) value to out[100] (line 27) is a second one
    assert_eq!(r.findings.len(), 2, "{:?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(
        (f.kind, f.line, f.cta, f.thread),
        (FindingKind::OutOfBounds, 24, [1, 0, 0], [36, 0, 0]),
        "{f}"
    );
    assert_eq!(
        f.location,
        Some(Location::Global {
            buffer: "x".into(),
            offset: 400,
            size: 400
        })
    );
    assert!(
        f.message.contains("out-of-bounds global read of 4 bytes")
            && f.message
                .contains("0 bytes after the end of `x` (400 bytes)"),
        "{f}"
    );
    let g = &r.findings[1];
    assert_eq!((g.kind, g.line), (FindingKind::OutOfBounds, 27), "{g}");
    assert!(
        g.message.contains("global write") && g.message.contains("`out`"),
        "{g}"
    );
    // the in-bounds elements were still computed
    assert_eq!(got[99], 2.0 * rand(100, 2, 1.0)[99]);
}

/// C[16x8] = A[16x16] · B[16x8] (bf16 in, f32 out) with cp.async, ldmatrix (x4 for A, x2.trans
/// for B) and one mma.sync; `{A_FRAG}` is the A operand register list.
const MMA: &str = r#"
.version 7.4
.target sm_80
.address_size 64
.visible .entry mma1(.param .u64 a_ptr, .param .u32 a_d0, .param .u64 b_ptr, .param .u32 b_d0, .param .u64 c_ptr, .param .u32 c_d0)
.reqntid 32, 1, 1
{
    .reg .b32 %a<4>;
    .reg .b32 %b<2>;
    .reg .f32 %c<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 sA[512];
    .shared .align 16 .b8 sB[256];
    ld.param.u64 %rd1, [a_ptr];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [b_ptr];
    cvta.to.global.u64 %rd2, %rd2;
    ld.param.u64 %rd3, [c_ptr];
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %laneid;
    // each lane copies 16 B of A and 8 B of B
    shl.b32 %r2, %r1, 4;
    mov.u32 %r3, sA;
    add.u32 %r3, %r3, %r2;
    cvt.u64.u32 %rd4, %r2;
    add.s64 %rd4, %rd1, %rd4;
    cp.async.cg.shared.global [%r3], [%rd4], 16;
    shl.b32 %r2, %r1, 3;
    mov.u32 %r3, sB;
    add.u32 %r3, %r3, %r2;
    cvt.u64.u32 %rd4, %r2;
    add.s64 %rd4, %rd2, %rd4;
    cp.async.ca.shared.global [%r3], [%rd4], 8;
    cp.async.commit_group;
    cp.async.wait_group 0;
    bar.sync 0;
    // A: lane L gives &A[L%16][8*(L/16)]
    and.b32 %r4, %r1, 15;
    shl.b32 %r4, %r4, 5;
    shr.u32 %r5, %r1, 4;
    shl.b32 %r5, %r5, 4;
    add.u32 %r4, %r4, %r5;
    mov.u32 %r6, sA;
    add.u32 %r4, %r4, %r6;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%a0, %a1, %a2, %a3}, [%r4];
    // B: lanes 0..15 give &B[L][0]
    and.b32 %r7, %r1, 15;
    shl.b32 %r7, %r7, 4;
    mov.u32 %r8, sB;
    add.u32 %r7, %r7, %r8;
    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%b0, %b1}, [%r7];
    mov.f32 %c0, 0f00000000;
    mov.f32 %c1, 0f00000000;
    mov.f32 %c2, 0f00000000;
    mov.f32 %c3, 0f00000000;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%c0, %c1, %c2, %c3}, {A_FRAG}, {%b0, %b1}, {%c0, %c1, %c2, %c3};
    // c0,c1 -> (g, 2t..2t+1); c2,c3 -> (g+8, 2t..)
    shr.u32 %r9, %r1, 2;
    and.b32 %r10, %r1, 3;
    shl.b32 %r10, %r10, 1;
    mad.lo.s32 %r11, %r9, 8, %r10;
    mul.wide.u32 %rd5, %r11, 4;
    add.s64 %rd5, %rd3, %rd5;
    st.global.v2.f32 [%rd5], {%c0, %c1};
    st.global.v2.f32 [%rd5+256], {%c2, %c3};
    ret;
}
"#;

/// bf16 bytes of `v` and the values they hold.
fn bf16_bytes(v: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let q: Vec<half::bf16> = v.iter().map(|x| half::bf16::from_f32(*x)).collect();
    (
        q.iter().flat_map(|x| x.to_le_bytes()).collect(),
        q.iter().map(|x| x.to_f32()).collect(),
    )
}

fn mma(a_frag: &str) -> f32 {
    let (ab, af) = bf16_bytes(&rand(256, 3, 1.0));
    let (bb, bf) = bf16_bytes(&rand(128, 4, 1.0));
    let mut mem = Memory::new();
    let a = buf(&mut mem, "a", &ab);
    let b = buf(&mut mem, "b", &bb);
    let c = mem.alloc_named("c", 512).unwrap();
    let params = [
        Param::Ptr(a),
        Param::U32(256),
        Param::Ptr(b),
        Param::U32(128),
        Param::Ptr(c),
        Param::U32(128),
    ];
    let r = launch(
        &MMA.replace("A_FRAG", a_frag),
        "mma1",
        &mut mem,
        LaunchConfig::linear(1, 32),
        &params,
        &Options::default(),
    )
    .unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
    let got = read_f32(&mem, c, 128);
    let mut worst = 0f32;
    for i in 0..16 {
        for j in 0..8 {
            let want: f64 = (0..16)
                .map(|k| af[i * 16 + k] as f64 * bf[k * 8 + j] as f64)
                .sum();
            worst = worst.max((got[i * 8 + j] - want as f32).abs() / (want.abs() as f32).max(1.0));
        }
    }
    worst
}

#[test]
fn wrong_fragment_index_is_a_mismatch() {
    let ok = mma("%a0, %a1, %a2, %a3");
    assert!(ok < 1e-6, "correct fragments: error {ok}");
    // a1 holds rows g+8 and a2 columns 8..15: swapping them is the classic fragment mix-up.
    let bad = mma("%a0, %a2, %a1, %a3");
    assert!(
        bad > 0.1,
        "the swapped fragment must not match the reference (error {bad})"
    );
}
