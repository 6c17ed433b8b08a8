//! Instruction semantics and checkers on small hand-written kernels, the bit-exact
//! conversions, and the tensor-core GEMM template's golden PTX against the CPU backend.

use super::{Buf, gd, kernel, rand};
use crate::Error;
use crate::backend::sim::convert::{cvt, fp8_to_f16, narrow16, to_fp8};
use crate::backend::sim::ir::{FRound, IRound, Ty};
use crate::backend::sim::{self, Checks};

/// A one-CTA kernel over `out: u32[n]` with `threads` threads; `body` may use `%r1` = tid,
/// `%rd2` = &out[tid] and the registers declared here.
fn one(body: &str, threads: u32, n: usize) -> (crate::Result<sim::SimStats>, Vec<u32>) {
    let text = format!(
        ".version 7.4\n.target sm_80\n.address_size 64\n.visible .entry t(.param .u64 out_ptr, .param .u32 out_d0)\n{{\n    .reg .pred %p<8>;\n    .reg .b32 %r<40>;\n    .reg .f32 %f<8>;\n    .reg .b64 %rd<8>;\n    .shared .align 16 .b8 sm[1024];\n    ld.param.u64 %rd1, [out_ptr];\n    mov.u32 %r1, %tid.x;\n    mul.wide.u32 %rd2, %r1, 4;\n    add.s64 %rd2, %rd1, %rd2;\n{body}\n    ret;\n}}\n"
    );
    let out = Buf::zeros(tessera_ir::DType::F32, &[n], true);
    let k = kernel(&text, "t", gd(0, 0, n as u32), threads, &[("out", 1)]);
    let r = sim::simulate(&k, &[out.buffer()], Checks::default());
    (r, bytemuck::cast_slice::<u8, u32>(out.as_bytes()).to_vec())
}

fn shfl(instr: &str) -> (Vec<u32>, Vec<u32>) {
    let body = format!(
        "    mad.lo.s32 %r2, %r1, 10, 7;\n    {instr}\n    st.global.u32 [%rd2], %r3;\n    selp.u32 %r4, 1, 0, %p1;\n    st.global.u32 [%rd2+128], %r4;"
    );
    let (r, v) = one(&body, 32, 64);
    r.unwrap();
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
    let (r, _) = one(
        "    setp.lt.u32 %p2, %r1, 16;\n    @%p2 shfl.sync.bfly.b32 %r3, %r1, 1, 0x1f, 0xffffffff;",
        32,
        32,
    );
    assert!(r.unwrap_err().to_string().contains("membermask 0xffffffff"));
}

#[test]
fn divergent_branches_reconverge() {
    // lane l loops l % 5 times adding l; odd lanes then take an else branch.
    let body = "    mov.u32 %r2, 0;\n    rem.u32 %r3, %r1, 5;\n    mov.u32 %r4, 0;\nLOOP:\n    setp.ge.u32 %p1, %r4, %r3;\n    @%p1 bra END;\n    add.u32 %r2, %r2, %r1;\n    add.u32 %r4, %r4, 1;\n    bra LOOP;\nEND:\n    and.b32 %r5, %r1, 1;\n    setp.eq.u32 %p2, %r5, 1;\n    @%p2 bra ODD;\n    add.u32 %r2, %r2, 1000;\n    bra JOIN;\nODD:\n    add.u32 %r2, %r2, 2000;\nJOIN:\n    shfl.sync.idx.b32 %r6, %r2, 3, 0x1f, 0xffffffff;\n    add.u32 %r2, %r2, %r6;\n    st.global.u32 [%rd2], %r2;";
    let (r, v) = one(body, 32, 32);
    r.unwrap();
    let f = |l: u32| l * (l % 5) + if l % 2 == 1 { 2000 } else { 1000 };
    assert!((0..32u32).all(|l| v[l as usize] == f(l) + f(3)), "{v:?}");
}

#[test]
fn checkers_on_small_kernels() {
    let err = |body: &str, threads: u32| one(body, threads, 64).0.unwrap_err().to_string();
    // misaligned vector access
    let e = err(
        "    mov.u32 %r2, sm;\n    ld.shared.v4.f32 {%f1, %f2, %f3, %f4}, [%r2+4];",
        32,
    );
    assert!(e.contains("misaligned load: 16-byte access at 0x4"), "{e}");
    // uninitialized shared read
    let e = err(
        "    mov.u32 %r2, sm;\n    ld.shared.u32 %r3, [%r2];\n    bar.sync 0;",
        32,
    );
    assert!(e.contains("uninitialized shared memory at 0x0"), "{e}");
    // out-of-bounds shared
    let e = err(
        "    mov.u32 %r2, sm;\n    st.shared.u32 [%r2+1024], %r1;",
        32,
    );
    assert!(
        e.contains("out-of-bounds shared write of 4 bytes at shared address 0x400"),
        "{e}"
    );
    // early exit before a barrier
    let e = err(
        "    setp.ge.u32 %p1, %r1, 32;\n    @%p1 bra SKIP;\n    bar.sync 0;\nSKIP:",
        64,
    );
    assert!(
        e.contains("bar.sync not reached by all threads") || e.contains("different barriers"),
        "{e}"
    );
    let e = err(
        "    setp.ge.u32 %p1, %r1, 32;\n    @%p1 ret;\n    bar.sync 0;",
        64,
    );
    assert!(e.contains("bar.sync not reached by all threads"), "{e}");
    // bra.uni with a divergent predicate
    let e = err("    setp.lt.u32 %p1, %r1, 3;\n    @%p1 bra.uni L;\nL:", 32);
    assert!(e.contains("bra.uni with a divergent predicate"), "{e}");
    // store to a read-only buffer is checked in `memory`; an unknown instruction names itself
    let (r, _) = one("    brev.b32 %r2, %r1;", 32, 32);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("line 15") && e.contains("unknown instruction `brev.b32`"),
        "{e}"
    );
}

#[test]
fn cp_async_lands_at_the_wait() {
    // thread t copies out[t] (its own u32, 4 bytes) into smem with src-size 4, or 0 for t >= 16
    let pre = "    st.global.u32 [%rd2], %r1;\n    mov.u32 %r2, sm;\n    shl.b32 %r3, %r1, 2;\n    add.u32 %r2, %r2, %r3;\n    setp.lt.u32 %p1, %r1, 16;\n    selp.u32 %r5, 4, 0, %p1;\n    cp.async.ca.shared.global [%r2], [%rd2], 4, %r5;\n    cp.async.commit_group;\n";
    let (r, _) = one(&format!("{pre}    ld.shared.u32 %r6, [%r2];"), 32, 32);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("read of cp.async destination") && e.contains("before its cp.async.wait_group"),
        "{e}"
    );
    // a newer group still in flight does not block wait_group 1 for the older one
    let (r, v) = one(
        &format!(
            "{pre}    cp.async.ca.shared.global [%r2+128], [%rd2], 4;\n    cp.async.commit_group;\n    cp.async.wait_group 1;\n    ld.shared.u32 %r6, [%r2];\n    add.u32 %r6, %r6, 100;\n    st.global.u32 [%rd2], %r6;\n    cp.async.wait_all;"
        ),
        32,
        32,
    );
    r.unwrap();
    assert!(
        (0..32).all(|t| v[t] == if t < 16 { t as u32 + 100 } else { 100 }),
        "src-size 0 must zero-fill: {v:?}"
    );
    // reading another thread's landed data needs a barrier
    let (r, _) = one(
        &format!(
            "{pre}    cp.async.wait_all;\n    xor.b32 %r3, %r3, 4;\n    mov.u32 %r2, sm;\n    add.u32 %r2, %r2, %r3;\n    ld.shared.u32 %r6, [%r2];"
        ),
        32,
        32,
    );
    assert!(r.unwrap_err().to_string().contains("shared-memory race"));
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

/// The GEMM template's golden PTX (ldmatrix, mma.sync, cp.async pipeline, epilogue) run on
/// the simulator agrees with the CPU backend on the same Tile IR.
#[test]
fn gemm_template_golden_ptx() {
    use tessera_ir::schedule::{KernelClass, Schedule};
    use tessera_ir::target::ptx::{self, Arch};
    use tessera_ir::{DType, graph, pipeline};
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tessera-ir/tests/golden/gemm_bf16_32x32x16_bias_gelu.sm_80.ptx"
    );
    let text = std::fs::read_to_string(path).expect("golden GEMM PTX");
    let src = "graph @linear_gelu(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> bf16[M, N] {\n  %3 = matmul %x, %w : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  %6 = cast %5 : bf16[M, N]\n  return %6\n}";
    let g = graph::parse(src).unwrap();
    let c = pipeline::compile(&g, &Default::default()).unwrap();
    let s = Schedule {
        tile: vec![32, 32, 16],
        warps: 2,
        stages: 2,
        ..Schedule::default_for(KernelClass::Matmul, DType::BF16)
    };
    let l = c.lower_with(0, &s).unwrap();
    let mut k = ptx::emit(&l.kernel, &s, Arch::Sm80).unwrap();
    k.text = text;
    k.threads = 64;
    k.dyn_smem = 2 * 2048;
    // (M, K, N): 16-byte cp.async path (K, N multiples of 8) and the element-wise edge path
    for (m, kk, n) in [(70, 40, 88), (37, 29, 45)] {
        let bf = |v: Vec<f32>, dims: &[usize]| {
            let mut b = Buf::zeros(DType::BF16, dims, false);
            let q: Vec<half::bf16> = v.iter().map(|x| half::bf16::from_f32(*x)).collect();
            b.as_bytes_mut().copy_from_slice(bytemuck::cast_slice(&q));
            b
        };
        let x = bf(rand(m * kk, 5, 1.0), &[m, kk]);
        let w = bf(rand(kk * n, 6, 1.0), &[kk, n]);
        let bias = Buf::f32s(&rand(n, 7, 1.0), &[n], false);
        let want = Buf::zeros(DType::BF16, &[m, n], true);
        let got = Buf::zeros(DType::BF16, &[m, n], true);
        let views = |o: &Buf| {
            vec![
                x.view(&[m, kk]),
                w.view(&[kk, n]),
                bias.view(&[1, n]),
                o.view(&[m, n]),
            ]
        };
        assert_eq!(
            l.kernel.params.iter().map(|p| p.rank).collect::<Vec<_>>(),
            vec![2, 2, 2, 2]
        );
        crate::backend::cpu::launch(
            &crate::backend::cpu::Program::new(l.kernel.clone()),
            &views(&want),
        )
        .unwrap();
        let st = sim::run(&k, &views(&got)).unwrap_or_else(|e| panic!("{e}"));
        assert!(st.warp_instructions > 0);
        let (w_, g_) = (want.to_f32(), got.to_f32());
        for i in 0..w_.len() {
            assert!(
                (w_[i] - g_[i]).abs() <= 1e-2 * w_[i].abs().max(1.0),
                "({m},{kk},{n}) element {i}: cpu {} sim {}",
                w_[i],
                g_[i]
            );
        }
    }
    let _ = Error::DeviceUnavailable(String::new());
}
