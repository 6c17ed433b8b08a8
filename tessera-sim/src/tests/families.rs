//! One test per instruction family the emitter or hand-written PTX needs beyond the bf16 GEMM:
//! packed half arithmetic, `mma.sync` m16n8k8 (f16, bf16, tf32) and the sm_89 fp8 m16n8k32
//! shapes, the `.local` state space and `ld.global.nc` — each a hand-written kernel on seeded
//! random inputs, checked against a reference computed here from the PTX ISA's definitions
//! (f64 arithmetic, rounded once; fragment layouts written out from the ISA's tables, not
//! taken from the simulator) — and the barrier-stall counter.
//!
//! Every kernel text is also given to ptxas for its target when `TESSERA_PTXAS` names a ptxas
//! binary (`scripts/ptxas-check` sets it), so the PTX under test is PTX a GPU accepts.

use super::units::one;
use super::{buf, rand, rand_u32, read_u32, u32_bytes};
use crate::{LaunchConfig, Memory, Module, Options, Param};
use half::{bf16, f16};

/// When `TESSERA_PTXAS` is set: ptxas must accept `text` for `-arch=arch`.
fn ptxas_accepts(text: &str, arch: &str) {
    let Ok(ptxas) = std::env::var("TESSERA_PTXAS") else {
        return;
    };
    // retarget as FACTS.md's checks do: raise `.version` to the target's minimum
    let min = match arch {
        "sm_89" => 7.8,
        "sm_90a" => 8.0,
        _ => 7.0,
    };
    let text = &text
        .lines()
        .map(|l| match l.strip_prefix(".version ") {
            Some(v) if v.parse::<f64>().unwrap() < min => format!(".version {min:.1}"),
            Some(_) => l.to_string(),
            None => match l.strip_prefix(".target ") {
                Some(_) => format!(".target {arch}"),
                None => l.to_string(),
            },
        })
        .collect::<Vec<_>>()
        .join("\n");
    let f = std::env::temp_dir().join(format!(
        "tessera-sim-family-{}-{:x}.ptx",
        std::process::id(),
        text.len() as u64 * 31 + text.bytes().map(u64::from).sum::<u64>()
    ));
    std::fs::write(&f, text).unwrap();
    let out = std::process::Command::new(ptxas)
        .args([
            &format!("-arch={arch}"),
            f.to_str().unwrap(),
            "-o",
            "/dev/null",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&f);
    assert!(
        out.status.success(),
        "ptxas -arch={arch} rejected:\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Parses and launches a one-CTA kernel `k(in, out)` with `threads` threads; the report must
/// be clean. Returns the `out` words.
fn run_in_out(text: &str, threads: u32, input: &[u32], out_words: usize) -> Vec<u32> {
    let mut mem = Memory::new();
    let i = buf(&mut mem, "in", &u32_bytes(input));
    let o = mem.alloc_named("out", 4 * out_words).unwrap();
    let r = Module::parse(text)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .launch(
            &mut mem,
            "k",
            LaunchConfig::linear(1, threads),
            &[Param::Ptr(i), Param::Ptr(o)],
            &Options::default(),
        )
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(r.is_clean(), "{:#?}", r.findings);
    read_u32(&mem, o, out_words)
}

fn header(version: &str, target: &str) -> String {
    format!(".version {version}\n.target {target}\n.address_size 64\n")
}

/// A random normal 16-bit float `±(1 + f)·2^e`, `e ∈ [-4, 2)`: products and sums of three
/// such values are exact in f64, so an f64 reference rounded once is the correctly rounded
/// result.
fn normal16(bits: u32, bf: bool) -> u16 {
    let x = (1.0 + (bits & 0xffff) as f64 / 65536.0)
        * 2f64.powi(((bits >> 16) % 6) as i32 - 4)
        * if bits >> 31 == 1 { -1.0 } else { 1.0 };
    if bf {
        bf16::from_f64(x).to_bits()
    } else {
        f16::from_f64(x).to_bits()
    }
}

fn h2f(h: u16, bf: bool) -> f64 {
    if bf {
        bf16::from_bits(h).to_f64()
    } else {
        f16::from_bits(h).to_f64()
    }
}

fn f2h(x: f64, bf: bool) -> u16 {
    if bf {
        bf16::from_f64(x).to_bits()
    } else {
        f16::from_f64(x).to_bits()
    }
}

/// `s + e = a + b` exactly (Knuth's TwoSum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// `add`, `mul`, `fma` on `.f16x2` (sm_80) and `.bf16x2` (`add`/`mul` need sm_90): every lane
/// half-wise, rounded to nearest even once, the low half holding element 0.
#[test]
fn packed_half_arithmetic() {
    for (ty, bf, version, target) in [
        ("f16x2", false, "7.4", "sm_80"),
        ("bf16x2", true, "7.8", "sm_90a"),
    ] {
        let text = format!(
            "{}.visible .entry k(.param .u64 p_in, .param .u64 p_out)\n{{\n    .reg .b32 %r<10>;\n    .reg .b64 %rd<6>;\n    ld.param.u64 %rd1, [p_in];\n    ld.param.u64 %rd2, [p_out];\n    cvta.to.global.u64 %rd1, %rd1;\n    cvta.to.global.u64 %rd2, %rd2;\n    mov.u32 %r1, %tid.x;\n    mul.wide.u32 %rd3, %r1, 12;\n    add.s64 %rd4, %rd1, %rd3;\n    add.s64 %rd5, %rd2, %rd3;\n    ld.global.b32 %r2, [%rd4];\n    ld.global.b32 %r3, [%rd4+4];\n    ld.global.b32 %r4, [%rd4+8];\n    add.rn.{ty} %r5, %r2, %r3;\n    mul.rn.{ty} %r6, %r2, %r3;\n    fma.rn.{ty} %r7, %r2, %r3, %r4;\n    st.global.b32 [%rd5], %r5;\n    st.global.b32 [%rd5+4], %r6;\n    st.global.b32 [%rd5+8], %r7;\n    ret;\n}}\n",
            header(version, target)
        );
        ptxas_accepts(&text, target);
        let threads = 128;
        let raw = rand_u32(6 * threads, if bf { 11 } else { 12 });
        let mut input: Vec<u32> = raw
            .chunks(2)
            .map(|p| normal16(p[0], bf) as u32 | (normal16(p[1], bf) as u32) << 16)
            .collect();
        // fma with an exact product on a rounding tie and an addend far below it: 1.75 ·
        // 0.578125 = 259/256 lies halfway between two bf16 values; c = −2^-70 makes the exact
        // result fall just below the tie (round down), which an f64 fma followed by a second
        // rounding misses (it sees the tie and rounds to even, up). f16 cannot express such
        // an addend, so the case is exercised for both types on lane pairs 0..2 alike.
        if bf {
            let (a, b, c) = (
                bf16::from_f64(1.75).to_bits() as u32,
                bf16::from_f64(0.578125).to_bits() as u32,
                bf16::from_f64(-(2f64.powi(-70))).to_bits() as u32,
            );
            input[0..3].copy_from_slice(&[a | a << 16, b | b << 16, c | c << 16]);
        }
        let out = run_in_out(&text, threads as u32, &input, 3 * threads);
        for t in 0..threads {
            for h in 0..2 {
                let get = |w: u32| (w >> (16 * h)) as u16;
                let [a, b, c] = [0, 1, 2].map(|j| h2f(get(input[3 * t + j]), bf));
                // references: the exact f64 value rounded once (the fma sum is exact by
                // construction, checked by TwoSum, except in the planted tie case)
                let (s, e) = two_sum(a * b, c);
                let fma = if e == 0.0 {
                    f2h(s, bf)
                } else {
                    // round to odd in f64, then to 16 bits: correct for any exact value
                    let odd = if s.to_bits() & 1 == 1 {
                        s
                    } else if e > 0.0 {
                        s.next_up()
                    } else {
                        s.next_down()
                    };
                    f2h(odd, bf)
                };
                let want = [f2h(a + b, bf), f2h(a * b, bf), fma];
                for (j, w) in want.iter().enumerate() {
                    let got = get(out[3 * t + j]);
                    assert_eq!(
                        got,
                        *w,
                        "{ty} {} thread {t} half {h}: {a} {b} {c}: got {} want {}",
                        ["add", "mul", "fma"][j],
                        h2f(got, bf),
                        h2f(*w, bf)
                    );
                }
            }
        }
        if bf {
            assert_eq!(out[2] & 0xffff, 0x3f81, "bf16 fma tie case: 258/256");
        }
    }
}

/// An independent fp8 decoder (OCP FP8: e4m3 has no infinities and NaN at S.1111.111; e5m2
/// is IEEE-like).
fn fp8_value(b: u8, e4m3: bool) -> f64 {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (mb, bias) = if e4m3 { (3, 7) } else { (2, 15) };
    let e = ((b & 0x7f) >> mb) as i32;
    let m = (b & ((1 << mb) - 1)) as f64;
    let f = if e == 0 {
        m / (1 << mb) as f64 * 2f64.powi(1 - bias)
    } else {
        (1.0 + m / (1 << mb) as f64) * 2f64.powi(e - bias)
    };
    s * f
}

/// An mma element kind: its PTX name and how a register's bits hold it.
#[derive(Clone, Copy)]
enum El {
    F16,
    Bf16,
    Tf32,
    E4m3,
    E5m2,
}

impl El {
    fn name(self) -> &'static str {
        match self {
            El::F16 => "f16",
            El::Bf16 => "bf16",
            El::Tf32 => "tf32",
            El::E4m3 => "e4m3",
            El::E5m2 => "e5m2",
        }
    }
    fn bits(self) -> usize {
        match self {
            El::F16 | El::Bf16 => 16,
            El::Tf32 => 32,
            El::E4m3 | El::E5m2 => 8,
        }
    }
    /// A random element: its bits and value (finite, no NaN/Inf codes; tf32 rounded with
    /// `cvt.rna.tf32.f32`'s rule so the low 13 bits are zero).
    fn random(self, u: u32) -> (u32, f64) {
        match self {
            El::F16 | El::Bf16 => {
                let bf = matches!(self, El::Bf16);
                let x = (u as i32 as f64) / 2f64.powi(31) * 4.0;
                let h = f2h(x, bf);
                (h as u32, h2f(h, bf))
            }
            El::Tf32 => {
                let x = (u as i32 as f32) / 2f32.powi(31) * 4.0;
                let b = (x.to_bits() + 0x1000) & 0xffff_e000;
                (b, f32::from_bits(b) as f64)
            }
            El::E4m3 | El::E5m2 => {
                let e4 = matches!(self, El::E4m3);
                let mut b = (u & 0xff) as u8;
                let special = if e4 {
                    b & 0x7f == 0x7f
                } else {
                    b & 0x7c == 0x7c
                };
                if special {
                    b &= 0xbf; // clear the top exponent bit: finite
                }
                (b as u32, fp8_value(b, e4))
            }
        }
    }
}

/// The (row, col) of element `i` of A (`m16 × k`) and B (`k × n8`) held by lane (g, t), from
/// the PTX ISA's fragment tables (§9.7.14.5.6 m16n8k4, §9.7.14.5.7 m16n8k8, §9.7.14.5.10
/// m16n8k32; FACTS.md §6).
fn a_rc(k: usize, el: El, g: usize, t: usize, i: usize) -> (usize, usize) {
    match (k, el) {
        // f16/bf16 m16n8k8: a0,a1 row g, a2,a3 row g+8; col 2t + (i & 1)
        (8, El::F16 | El::Bf16) => (if i < 2 { g } else { g + 8 }, 2 * t + (i & 1)),
        // tf32 m16n8k8: a0,a2 row g, a1,a3 row g+8; a0,a1 col t, a2,a3 col t+4
        (8, El::Tf32) => (
            if i % 2 == 0 { g } else { g + 8 },
            if i < 2 { t } else { t + 4 },
        ),
        // tf32 m16n8k4 (§9.7.14.5.6): a0 row g, a1 row g+8; col t
        (4, El::Tf32) => (if i == 0 { g } else { g + 8 }, t),
        // fp8 m16n8k32: row g + 8·((i>>2)&1), col 4t + (i&3) + 16·(i>>3)
        (32, _) => (g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)),
        _ => unreachable!(),
    }
}

fn b_rc(k: usize, el: El, g: usize, t: usize, i: usize) -> (usize, usize) {
    match (k, el) {
        (8, El::F16 | El::Bf16) => (2 * t + i, g),
        (8, El::Tf32) => (if i == 0 { t } else { t + 4 }, g),
        (4, El::Tf32) => (t, g),
        (32, _) => (4 * t + (i & 3) + 16 * (i >> 2), g),
        _ => unreachable!(),
    }
}

/// `mma.sync.aligned.m16n8k{k}.row.col.f32.{a}.{b}.f32` on random A, B, C: every lane's D
/// fragment (C/D: row g + 8·(i>>1), col 2t + (i&1)) equals the f64 `C + A·B` within f32
/// rounding of the accumulation (the ISA leaves its order unspecified).
fn check_mma(k: usize, ea: El, eb: El, version: &str, targets: &[&str], seed: u64) {
    let (na, nb) = (16 * k / 32, 8 * k / 32);
    let (ra, rb) = (na * ea.bits() / 32, nb * eb.bits() / 32);
    let regs = |p: &str, n: usize| -> String {
        (0..n)
            .map(|i| format!("%{p}{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let vload = |n: usize, list: String, off: usize| -> String {
        match n {
            1 => format!("    ld.global.b32 {list}, [%rd4+{off}];\n"),
            2 | 4 => format!("    ld.global.v{n}.b32 {{{list}}}, [%rd4+{off}];\n"),
            _ => unreachable!(),
        }
    };
    let shape = format!(
        "mma.sync.aligned.m16n8k{k}.row.col.f32.{}.{}.f32",
        ea.name(),
        eb.name()
    );
    // per lane, 16 words: A regs at word 0, B regs at word 4, C at word 8
    let text = format!(
        "{}.visible .entry k(.param .u64 p_in, .param .u64 p_out)\n{{\n    .reg .b32 %a<4>;\n    .reg .b32 %b<2>;\n    .reg .f32 %c<4>;\n    .reg .f32 %d<4>;\n    .reg .b32 %r<2>;\n    .reg .b64 %rd<6>;\n    ld.param.u64 %rd1, [p_in];\n    ld.param.u64 %rd2, [p_out];\n    cvta.to.global.u64 %rd1, %rd1;\n    cvta.to.global.u64 %rd2, %rd2;\n    mov.u32 %r1, %laneid;\n    mul.wide.u32 %rd3, %r1, 64;\n    add.s64 %rd4, %rd1, %rd3;\n{}{}    ld.global.v4.f32 {{%c0, %c1, %c2, %c3}}, [%rd4+32];\n    {shape}\n        {{%d0, %d1, %d2, %d3}}, {{{}}}, {{{}}}, {{%c0, %c1, %c2, %c3}};\n    mul.wide.u32 %rd3, %r1, 16;\n    add.s64 %rd5, %rd2, %rd3;\n    st.global.v4.f32 [%rd5], {{%d0, %d1, %d2, %d3}};\n    ret;\n}}\n",
        header(version, targets[0]),
        vload(ra, regs("a", ra), 0),
        vload(rb, regs("b", rb), 16),
        regs("a", ra),
        regs("b", rb),
    );
    for t in targets {
        ptxas_accepts(&text, t);
    }
    // random matrices
    let u = rand_u32(16 * k + k * 8, seed);
    let a: Vec<(u32, f64)> = u[..16 * k].iter().map(|x| ea.random(*x)).collect();
    let b: Vec<(u32, f64)> = u[16 * k..].iter().map(|x| eb.random(*x)).collect();
    let c = rand(128, seed + 1, 2.0);
    let mut input = vec![0u32; 32 * 16];
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        let w = &mut input[16 * lane..16 * lane + 16];
        for i in 0..na {
            let (r, col) = a_rc(k, ea, g, t, i);
            let per = 32 / ea.bits();
            w[i / per] |= a[r * k + col].0 << (ea.bits() * (i % per));
        }
        for i in 0..nb {
            let (r, col) = b_rc(k, eb, g, t, i);
            let per = 32 / eb.bits();
            w[4 + i / per] |= b[r * 8 + col].0 << (eb.bits() * (i % per));
        }
        for i in 0..4 {
            w[8 + i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)].to_bits();
        }
    }
    let out = run_in_out(&text, 32, &input, 128);
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for i in 0..4 {
            let (r, col) = (g + 8 * (i >> 1), 2 * t + (i & 1));
            let cv = c[r * 8 + col] as f64;
            let (mut want, mut mag) = (cv, cv.abs());
            for kk in 0..k {
                let p = a[r * k + kk].1 * b[kk * 8 + col].1;
                want += p;
                mag += p.abs();
            }
            let got = f32::from_bits(out[4 * lane + i]) as f64;
            assert!(
                (got - want).abs() <= mag * 2f64.powi(-22),
                "{shape} lane {lane} d{i} (row {r}, col {col}): got {got}, want {want}"
            );
        }
    }
}

#[test]
fn mma_m16n8k8_f16_bf16_tf32_and_k4_tf32() {
    check_mma(8, El::F16, El::F16, "7.4", &["sm_80", "sm_90a"], 21);
    check_mma(8, El::Bf16, El::Bf16, "7.4", &["sm_80", "sm_90a"], 22);
    check_mma(8, El::Tf32, El::Tf32, "7.4", &["sm_80", "sm_90a"], 23);
    check_mma(4, El::Tf32, El::Tf32, "7.4", &["sm_80", "sm_90a"], 24);
}

#[test]
fn mma_m16n8k32_fp8() {
    check_mma(32, El::E4m3, El::E4m3, "8.4", &["sm_89", "sm_90a"], 31);
    check_mma(32, El::E5m2, El::E5m2, "8.4", &["sm_89", "sm_90a"], 32);
    check_mma(32, El::E4m3, El::E5m2, "8.4", &["sm_89", "sm_90a"], 33);
}

/// `.local`: every thread owns its own copy of `lbuf`. Each thread scatters its 16 input
/// words into `lbuf` (permuted, through `st.local`), then reads them back in order through
/// generic addresses (`cvta.local`) after a barrier — one shared copy would mix the threads'
/// values. A read past `lbuf` is an out-of-bounds finding naming the local variable.
#[test]
fn local_state_space_is_per_thread() {
    let mut body = String::new();
    for i in 0..16 {
        let j = (5 * i + 3) % 16;
        body += &format!(
            "    ld.global.u32 %r2, [%rd4+{}];\n    st.local.u32 [%rd6+{}], %r2;\n",
            4 * i,
            4 * j
        );
    }
    body += "    bar.sync 0;\n    cvta.local.u64 %rd7, %rd6;\n";
    for j in 0..16 {
        body += &format!(
            "    ld.u32 %r3, [%rd7+{}];\n    st.global.u32 [%rd5+{}], %r3;\n",
            4 * j,
            4 * j
        );
    }
    let text = format!(
        "{}.visible .entry k(.param .u64 p_in, .param .u64 p_out)\n{{\n    .reg .b32 %r<4>;\n    .reg .b64 %rd<8>;\n    .local .align 4 .b8 lbuf[64];\n    ld.param.u64 %rd1, [p_in];\n    ld.param.u64 %rd2, [p_out];\n    cvta.to.global.u64 %rd1, %rd1;\n    cvta.to.global.u64 %rd2, %rd2;\n    mov.u32 %r1, %tid.x;\n    mul.wide.u32 %rd3, %r1, 64;\n    add.s64 %rd4, %rd1, %rd3;\n    add.s64 %rd5, %rd2, %rd3;\n    mov.u64 %rd6, lbuf;\n{body}    ret;\n}}\n",
        header("7.4", "sm_80")
    );
    ptxas_accepts(&text, "sm_80");
    let threads = 64;
    let input = rand_u32(16 * threads, 41);
    let out = run_in_out(&text, threads as u32, &input, 16 * threads);
    for t in 0..threads {
        for i in 0..16 {
            let j = (5 * i + 3) % 16;
            assert_eq!(out[16 * t + j], input[16 * t + i], "thread {t} word {i}");
        }
    }
    // one word past the end of lbuf
    let bad = text.replace("[%rd7+60]", "[%rd7+64]");
    let mut mem = Memory::new();
    let i = buf(&mut mem, "in", &u32_bytes(&input));
    let o = mem.alloc_named("out", 4 * 16 * threads).unwrap();
    let r = Module::parse(&bad)
        .unwrap()
        .launch(
            &mut mem,
            "k",
            LaunchConfig::linear(1, threads as u32),
            &[Param::Ptr(i), Param::Ptr(o)],
            &Options::default(),
        )
        .unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == crate::FindingKind::OutOfBounds)
        .unwrap_or_else(|| panic!("no out-of-bounds finding: {:#?}", r.findings));
    assert!(f.message.contains("local"), "{f}");
}

/// `ld.global.nc` (scalar `.u8 .s16 .b32 .f32 .u64`, `.v2`, `.v4`, with an L1 hint) reads the
/// same bytes as `ld.global`, sign- and zero-extended as its type says.
#[test]
fn ld_global_nc_reads_global_memory() {
    let text = format!(
        "{}.visible .entry k(.param .u64 p_in, .param .u64 p_out)\n{{\n    .reg .b16 %h<2>;\n    .reg .b32 %r<12>;\n    .reg .f32 %f<2>;\n    .reg .b64 %rd<8>;\n    ld.param.u64 %rd1, [p_in];\n    ld.param.u64 %rd2, [p_out];\n    cvta.to.global.u64 %rd1, %rd1;\n    cvta.to.global.u64 %rd2, %rd2;\n    mov.u32 %r1, %tid.x;\n    mul.wide.u32 %rd3, %r1, 32;\n    add.s64 %rd4, %rd1, %rd3;\n    add.s64 %rd5, %rd2, %rd3;\n    ld.global.nc.v4.b32 {{%r2, %r3, %r4, %r5}}, [%rd4];\n    ld.global.nc.L1::no_allocate.v2.b32 {{%r6, %r7}}, [%rd4+16];\n    ld.global.nc.u8 %r8, [%rd4+25];\n    ld.global.nc.s16 %r9, [%rd4+26];\n    ld.global.nc.f32 %f1, [%rd4+28];\n    ld.global.nc.u64 %rd6, [%rd4+8];\n    st.global.v4.b32 [%rd5], {{%r2, %r3, %r4, %r5}};\n    st.global.v2.b32 [%rd5+16], {{%r6, %r7}};\n    st.global.u32 [%rd5+24], %r8;\n    st.global.u32 [%rd5+28], %r9;\n    add.s64 %rd7, %rd2, 8192;\n    add.s64 %rd7, %rd7, %rd3;\n    st.global.f32 [%rd7], %f1;\n    st.global.u64 [%rd7+8], %rd6;\n    ret;\n}}\n",
        header("7.4", "sm_80")
    );
    ptxas_accepts(&text, "sm_80");
    let threads = 256;
    let input = rand_u32(8 * threads, 51);
    let out = run_in_out(&text, threads as u32, &input, 8 * threads + 2048);
    for t in 0..threads {
        let w = &input[8 * t..8 * t + 8];
        let o = &out[8 * t..8 * t + 8];
        assert_eq!(&o[..6], &w[..6], "thread {t}: vector loads");
        assert_eq!(o[6], (w[6] >> 8) & 0xff, "thread {t}: .u8 zero-extends");
        assert_eq!(
            o[7],
            (w[6] >> 16) as u16 as i16 as i32 as u32,
            "thread {t}: .s16 sign-extends"
        );
        let x = &out[2048 + 8 * t..];
        assert_eq!(x[0], w[7], "thread {t}: .f32");
        assert_eq!((x[2], x[3]), (w[2], w[3]), "thread {t}: .u64");
    }
}

/// The barrier-stall counter: warp 1 runs `n` loop iterations (3 warp instructions each) plus
/// one `mov` before `bar.sync` while warp 0 goes straight there, so warp 0 idles `3n + 1`
/// warp-steps; when both warps run the loop, nobody waits.
#[test]
fn late_warp_at_bar_sync_counts_stalls() {
    let body = |skip_warp0: bool, n: u32| {
        format!(
            "    setp.lt.u32 %p1, %r1, {};\n    @%p1 bra ARRIVE;\n    mov.u32 %r2, 0;\nLOOP:\n    add.u32 %r2, %r2, 1;\n    setp.lt.u32 %p2, %r2, {n};\n    @%p2 bra LOOP;\nARRIVE:\n    bar.sync 0;\n    st.global.u32 [%rd2], %r2;",
            if skip_warp0 { 32 } else { 0 }
        )
    };
    let stalls = |skip: bool, n: u32| {
        let (r, v) = one(&body(skip, n), 64, 64);
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        assert!(r.is_clean(), "{:#?}", r.findings);
        let want_r2 = |tid: usize| if skip && tid < 32 { 0 } else { n };
        assert!((0..64).all(|t| v[t] == want_r2(t)), "{v:?}");
        r.counters.barrier_stall_steps
    };
    assert_eq!(stalls(true, 10), 31);
    assert_eq!(stalls(true, 25), 76);
    assert_eq!(stalls(false, 25), 0);
}

/// One instance of every form the crate docs' supported-instruction table names decodes
/// (no [`crate::Entry::unsupported`]), and the same text is PTX that ptxas accepts for
/// sm_90a: the table says what the decoder takes, and those forms are real PTX.
#[test]
fn supported_instruction_table_decodes() {
    let body = [
        // data movement
        "ld.param.u64 %rd1, [p_in];",
        "cvta.to.global.u64 %rd2, %rd1;",
        "mov.u32 %r1, %tid.x;",
        "ld.global.nc.u32 %r2, [%rd2];",
        "ldu.global.u32 %r3, [%rd2+4];",
        "ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];",
        "ld.u32 %r2, [%rd1];",
        "st.global.v2.u32 [%rd2], {%r2, %r3};",
        "mov.u32 %r4, sm;",
        "st.shared.v2.u32 [%r4], {%r2, %r3};",
        "ld.shared.u32 %r5, [%r4];",
        "mov.u64 %rd3, lb;",
        "st.local.u32 [%rd3], %r5;",
        "ld.local.u32 %r5, [%rd3];",
        "cvta.local.u64 %rd4, %rd3;",
        "mov.u64 %rd5, sm;",
        "cvta.shared.u64 %rd5, %rd5;",
        "cvta.to.shared.u64 %rd6, %rd5;",
        // asynchronous copies
        "cp.async.ca.shared.global [%r4], [%rd2], 4;",
        "cp.async.cg.shared.global [%r4+16], [%rd2], 16, %r5;",
        "cp.async.commit_group;",
        "cp.async.wait_group 0;",
        "cp.async.wait_all;",
        // integer
        "add.s32 %r6, %r1, %r2;",
        "sub.s32 %r6, %r6, %r2;",
        "mul.lo.s32 %r6, %r6, 3;",
        "mul.hi.u32 %r7, %r6, %r2;",
        "mul.wide.u32 %rd7, %r1, %r2;",
        "mad.lo.s32 %r6, %r6, %r2, %r1;",
        "mad.hi.u32 %r7, %r6, %r2, %r1;",
        "mad.wide.u32 %rd7, %r1, %r2, %rd7;",
        "div.u32 %r7, %r6, 7;",
        "rem.u32 %r7, %r7, 5;",
        "min.s32 %r7, %r7, %r6;",
        "max.u32 %r7, %r7, %r6;",
        "abs.s32 %r7, %r7;",
        "neg.s32 %r7, %r7;",
        "and.b32 %r7, %r7, %r6;",
        "or.b32 %r7, %r7, %r6;",
        "xor.b32 %r7, %r7, %r6;",
        "not.b32 %r7, %r7;",
        "shl.b32 %r7, %r7, 3;",
        "shr.u32 %r7, %r7, 1;",
        "popc.b32 %r8, %r7;",
        "clz.b32 %r8, %r7;",
        "brev.b32 %r8, %r7;",
        "prmt.b32 %r8, %r7, %r6, 0x3210;",
        "bfe.u32 %r8, %r7, 4, 8;",
        "bfi.b32 %r8, %r7, %r6, 4, 8;",
        "lop3.b32 %r8, %r7, %r6, %r5, 0xe8;",
        "shf.l.wrap.b32 %r8, %r7, %r6, %r5;",
        "shf.r.clamp.b32 %r8, %r7, %r6, %r5;",
        // floating point
        "add.f32 %f5, %f1, %f2;",
        "sub.f32 %f5, %f5, %f2;",
        "mul.f32 %f5, %f5, %f3;",
        "fma.rn.f32 %f5, %f5, %f3, %f4;",
        "mad.rn.f32 %f5, %f5, %f3, %f4;",
        "min.f32 %f5, %f5, %f1;",
        "max.f32 %f5, %f5, %f1;",
        "abs.f32 %f5, %f5;",
        "neg.f32 %f5, %f5;",
        "div.rn.f32 %f6, %f5, %f1;",
        "div.full.f32 %f6, %f6, %f1;",
        "div.approx.f32 %f6, %f6, %f1;",
        "testp.finite.f32 %p1, %f6;",
        "cvt.f64.f32 %fd1, %f6;",
        "add.f64 %fd1, %fd1, %fd1;",
        "fma.rn.f64 %fd1, %fd1, %fd1, %fd1;",
        "div.rn.f64 %fd1, %fd1, %fd1;",
        "rcp.rn.f64 %fd2, %fd1;",
        "sqrt.rn.f64 %fd2, %fd2;",
        "cvt.rn.f16.f32 %h1, %f1;",
        "cvt.rn.f16.f32 %h2, %f2;",
        "add.rn.f16 %h3, %h1, %h2;",
        "fma.rn.relu.bf16x2 %r9, %r7, %r6, %r5;",
        "add.rn.bf16x2 %r9, %r9, %r6;",
        "sub.rn.f16x2 %r9, %r9, %r6;",
        "mul.rn.f16x2 %r9, %r9, %r6;",
        "min.xorsign.abs.f16x2 %r9, %r9, %r6;",
        "max.bf16x2 %r9, %r9, %r6;",
        "abs.bf16x2 %r9, %r9;",
        "neg.f16x2 %r9, %r9;",
        "ex2.approx.f32 %f7, %f1;",
        "lg2.approx.f32 %f7, %f7;",
        "sin.approx.f32 %f7, %f7;",
        "cos.approx.f32 %f7, %f7;",
        "tanh.approx.f32 %f7, %f7;",
        "rsqrt.approx.f32 %f7, %f7;",
        "rcp.approx.f32 %f7, %f7;",
        "sqrt.approx.f32 %f7, %f7;",
        "rcp.rn.f32 %f7, %f7;",
        "sqrt.rn.f32 %f7, %f7;",
        // compare / select
        "setp.lt.and.f32 %p2, %f1, %f2, %p1;",
        "setp.ne.xor.u32 %p2, %r1, %r2, %p1;",
        "selp.b32 %r10, %r1, %r2, %p2;",
        // conversion
        "cvt.rn.bf16.f32 %h1, %f1;",
        "cvt.f32.bf16 %f7, %h1;",
        "cvt.rna.tf32.f32 %r10, %f1;",
        "cvt.rzi.s32.f32 %r10, %f1;",
        "cvt.rni.s32.f32 %r10, %f1;",
        "cvt.rn.f32.s32 %f7, %r10;",
        "cvt.u64.u32 %rd7, %r10;",
        "cvt.rn.satfinite.e4m3x2.f32 %h2, %f1, %f2;",
        "cvt.rn.satfinite.e5m2x2.f32 %h3, %f1, %f2;",
        "cvt.rn.f16x2.e4m3x2 %r11, %h2;",
        "cvt.rn.relu.bf16x2.f32 %r11, %f1, %f2;",
        "cvt.rn.f16x2.f32 %r11, %f1, %f2;",
        // atomics
        "atom.global.add.u32 %r12, [%rd2], 1;",
        "atom.global.add.f32 %f7, [%rd2], %f1;",
        "red.shared.add.u32 [%r4], 1;",
        "atom.cas.b32 %r12, [%rd1], 0, 1;",
        "atom.global.exch.b32 %r12, [%rd2], %r1;",
        "atom.global.inc.u32 %r12, [%rd2], 10;",
        "atom.shared.max.s32 %r12, [%r4], %r1;",
        // control and barriers
        "bar.sync 0;",
        "barrier.sync 0;",
        "membar.gl;",
        "fence.acq_rel.gpu;",
        // warp collectives
        "shfl.sync.bfly.b32 %r13|%p3, %r1, 1, 0x1f, 0xffffffff;",
        "shfl.sync.idx.b32 %r13, %r1, 0, 0x1f, 0xffffffff;",
        "vote.sync.ballot.b32 %r14, %p1, 0xffffffff;",
        "vote.sync.all.pred %p3, %p1, 0xffffffff;",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%a0, %a1, %a2, %a3}, [%r4];",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%b0, %b1}, [%r4];",
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%b0}, [%r4];",
        // tensor cores
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3};",
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1}, {%b0}, {%c0, %c1, %c2, %c3};",
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3};",
        "mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1}, {%b0}, {%c0, %c1, %c2, %c3};",
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3};",
        "ld.param.u64 %rd1, [p_out];",
        "st.global.v4.f32 [%rd1], {%c0, %c1, %c2, %c3};",
        "st.global.f32 [%rd1+16], %f7;",
        "st.global.u32 [%rd1+20], %r13;",
        "@%p3 bra.uni DONE;",
        "exit;",
    ];
    let text = format!(
        "{}.visible .entry k(.param .u64 p_in, .param .u64 p_out)\n{{\n    .reg .pred %p<4>;\n    .reg .b16 %h<4>;\n    .reg .b32 %r<16>;\n    .reg .b32 %a<4>;\n    .reg .b32 %b<2>;\n    .reg .f32 %c<4>;\n    .reg .f32 %f<8>;\n    .reg .f64 %fd<3>;\n    .reg .b64 %rd<8>;\n    .shared .align 16 .b8 sm[1024];\n    .local .align 4 .b8 lb[16];\n{}\nDONE:\n    ret;\n}}\n",
        header("8.4", "sm_90a"),
        body.iter()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    ptxas_accepts(&text, "sm_90a");
    let m = Module::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let e = m.entry("k").unwrap();
    assert!(e.unsupported.is_none(), "{:?}", e.unsupported);
}
