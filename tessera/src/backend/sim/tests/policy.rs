//! Numerics policies across threads, tile shapes and backends (seeds table A.7).
//!
//! Under `deterministic` every reduction (row sum and mean, column sum and mean, softmax,
//! layernorm, rmsnorm, the matmul K loop) must give the same bits on the CPU with 1 and 2
//! rayon threads, under every tile shape the autotuner may choose (the CPU search space
//! `SearchSpace::builtin` and the CPU default; the device space `Schedule::space`), and on the
//! simulator for every arch. Under `kahan_sum` an ill-conditioned sum keeps the bits fast
//! loses, on the CPU and on the simulator alike.

use super::Buf;
use crate::autotune::SearchSpace;
use crate::backend::{Buffer, cpu, sim};
use std::collections::HashMap;
use tessera_ir::pipeline::{self, Compiled, kernel_dtype};
use tessera_ir::schedule::{Schedule, Target};
use tessera_ir::target::ptx::{self, Arch};
use tessera_ir::{DType, Dim, graph};

/// One reduction under a policy: name, graph text, symbol sizes.
pub(super) struct Case {
    pub name: &'static str,
    pub src: String,
    pub syms: Vec<(&'static str, usize)>,
}

/// Every reduction kind, under `policy`. Rows are longer than the largest column chunk of
/// the PTX schedules (1024) and not a multiple of 32, but shorter than the CPU's row-wise
/// tile (`CPU_ROW_COLS`; rows wider than that:
/// `deterministic_rows_wider_than_the_cpu_row_tile_are_bitwise`); K spans several K tiles of
/// every candidate.
fn cases(policy: &str) -> Vec<Case> {
    let rc = vec![("R", 19), ("C", 1100)];
    let case =
        |name, body: &str, params: &str, out: &str, syms: &Vec<(&'static str, usize)>| Case {
            name,
            src: format!("graph @{name}({params}) -> {out} {{\n{body}\n}}"),
            syms: syms.clone(),
        };
    let red = |name, op: &str, axis: usize, out: &str| {
        case(
            name,
            &format!(
                "  %1 = reduce.{op} %x axes=[{axis}] keepdim=false policy={policy} : {out}\n  return %1"
            ),
            "%x: f32[R, C]",
            out,
            &rc,
        )
    };
    vec![
        red("row_sum", "sum", 1, "f32[R]"),
        red("row_mean", "mean", 1, "f32[R]"),
        red("col_sum", "sum", 0, "f32[C]"),
        red("col_mean", "mean", 0, "f32[C]"),
        case(
            "softmax",
            &format!("  %1 = softmax %x policy={policy} : f32[R, C]\n  return %1"),
            "%x: f32[R, C]",
            "f32[R, C]",
            &rc,
        ),
        case(
            "layernorm",
            &format!(
                "  %3 = layernorm %x, %g, %b eps=1e-5 policy={policy} : f32[R, C]\n  return %3"
            ),
            "%x: f32[R, C], %g: f32[C], %b: f32[C]",
            "f32[R, C]",
            &rc,
        ),
        case(
            "rmsnorm",
            &format!("  %2 = rmsnorm %x, %g eps=1e-6 policy={policy} : f32[R, C]\n  return %2"),
            "%x: f32[R, C], %g: f32[C]",
            "f32[R, C]",
            &rc,
        ),
        case(
            "matmul",
            &format!("  %2 = matmul %a, %b acc=f32 policy={policy} : f32[M, N]\n  return %2"),
            "%a: f32[M, K], %b: f32[K, N]",
            "f32[M, N]",
            &vec![("M", 21), ("K", 300), ("N", 37)],
        ),
        case(
            "matmul_bf16",
            &format!("  %2 = matmul %a, %b acc=f32 policy={policy} : f32[M, N]\n  return %2"),
            "%a: bf16[M, K], %b: bf16[K, N]",
            "f32[M, N]",
            &vec![("M", 21), ("K", 300), ("N", 37)],
        ),
    ]
}

/// A compiled single-kernel case with its inputs and output shape.
pub(super) struct Setup {
    pub c: Compiled,
    vals: HashMap<u32, Buf>,
    shapes: HashMap<u32, Vec<usize>>,
    out: (DType, Vec<usize>),
}

pub(super) fn setup(case: &Case, fill: impl Fn(DType, &[usize], u64) -> Buf) -> Setup {
    let g = graph::parse(&case.src).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let c = pipeline::compile(&g, &Default::default()).unwrap();
    assert_eq!(c.kernels.len(), 1, "{}: one kernel", case.name);
    let sym: HashMap<&str, usize> = case.syms.iter().copied().collect();
    let mut shapes = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let s: Vec<usize> =
            n.ty.shape
                .0
                .iter()
                .map(|d| match d {
                    Dim::Const(c) => *c as usize,
                    Dim::Sym(s) => sym[s.as_str()],
                })
                .collect();
        shapes.insert(i as u32, s);
    }
    let mut vals = HashMap::new();
    for (i, &p) in g.params.iter().enumerate() {
        vals.insert(p.0, fill(g.ty(p).dtype, &shapes[&p.0], 40 + i as u64));
    }
    let o = c.kernels[0].fused.output;
    let out = (g.ty(o).dtype, shapes[&o.0].clone());
    Setup {
        c,
        vals,
        shapes,
        out,
    }
}

fn random(dtype: DType, dims: &[usize], seed: u64) -> Buf {
    let n: usize = dims.iter().product();
    // Mixed magnitudes, so the association order shows in the last bits.
    let v: Vec<f32> = super::rand(n, seed, 1.0)
        .iter()
        .zip(super::rand(n, seed + 1000, 6.0))
        .map(|(x, e)| x * e.exp2())
        .collect();
    let mut b = Buf::zeros(dtype, dims, false);
    let bytes = b.as_bytes_mut();
    match dtype {
        DType::F32 => bytes.copy_from_slice(bytemuck::cast_slice(&v)),
        DType::BF16 => {
            for (i, x) in v.iter().enumerate() {
                bytes[2 * i..2 * i + 2].copy_from_slice(&half::bf16::from_f32(*x).to_le_bytes());
            }
        }
        d => panic!("fill {d}"),
    }
    b
}

impl Setup {
    fn bufs(&self, l: &tessera_ir::lower::Lowered, out: &Buf) -> Vec<Buffer> {
        let n = l.bindings.len();
        l.bindings
            .iter()
            .enumerate()
            .map(|(j, b)| {
                let view = b.view(&self.shapes[&b.value.0]).unwrap();
                if j == n - 1 {
                    out.view(&view)
                } else {
                    self.vals[&b.value.0].view(&view)
                }
            })
            .collect()
    }

    fn out_buf(&self) -> Buf {
        let mut b = Buf::zeros(self.out.0, &self.out.1, true);
        b.as_bytes_mut().fill(0xff);
        b
    }

    /// The output of schedule `s` on the CPU with `threads` rayon threads.
    pub(super) fn cpu(&self, s: &Schedule, threads: usize) -> Vec<u8> {
        let l = self.c.lower_on(0, s, Target::Cpu).unwrap();
        let out = self.out_buf();
        let p = cpu::Program::new(l.kernel.clone());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| cpu::launch(&p, &self.bufs(&l, &out)))
            .unwrap_or_else(|e| panic!("{s}: {e}"));
        out.as_bytes().to_vec()
    }

    /// The output of schedule `s` on the simulator for `arch`.
    pub(super) fn sim(&self, s: &Schedule, arch: Arch) -> Result<Vec<u8>, String> {
        let l = self.c.lower_with(0, s).map_err(|e| e.to_string())?;
        let p = ptx::emit(&l.kernel, s, arch).map_err(|e| e.to_string())?;
        let out = self.out_buf();
        sim::run(&p, &self.bufs(&l, &out)).map_err(|e| e.to_string())?;
        Ok(out.as_bytes().to_vec())
    }

    /// The CPU candidates of the autotuner (its built-in space around the compiled default
    /// schedule), the CPU default and the CPU's schedule for kernels off its row loops.
    fn cpu_schedules(&self) -> Vec<Schedule> {
        let k = &self.c.kernels[0];
        let dtype = kernel_dtype(&self.c.graph, &k.fused);
        let mut v =
            SearchSpace::builtin(k.fused.class, dtype).schedules_on(&k.schedule, Target::Cpu);
        v.push(Schedule::cpu_default(k.fused.class, dtype));
        v.push(Schedule::cpu_general(k.fused.class, dtype));
        v
    }

    /// The device candidates of the autotuner (the class's GPU space).
    fn device_schedules(&self) -> Vec<Schedule> {
        let k = &self.c.kernels[0];
        Schedule::space(k.fused.class, kernel_dtype(&self.c.graph, &k.fused))
    }
}

/// The index of the first differing element of two outputs of 4-byte elements.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.chunks(4).zip(b.chunks(4)).position(|(x, y)| x != y)
}

#[test]
fn deterministic_is_bitwise_across_threads_tiles_and_backends() {
    for case in cases("deterministic") {
        let s = setup(&case, random);
        let want = s.cpu(&s.c.kernels[0].schedule, 1);
        let mut runs = 0;
        for (j, sch) in s.cpu_schedules().iter().enumerate() {
            // Two threads on every candidate; one thread on a few (the default ran on one).
            let threads: &[usize] = if j % 8 == 0 { &[1, 2] } else { &[2] };
            for &t in threads {
                let got = s.cpu(sch, t);
                if let Some(at) = first_diff(&got, &want) {
                    panic!("{}: cpu {sch} on {t} threads differs at {at}", case.name);
                }
                runs += 1;
            }
        }
        for (j, sch) in s.device_schedules().iter().enumerate() {
            // Every device candidate on sm_80; the default on every arch.
            let archs: &[Arch] = if j == 0 { &Arch::ALL } else { &[Arch::Sm80] };
            for &arch in archs {
                let got = s
                    .sim(sch, arch)
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                if let Some(at) = first_diff(&got, &want) {
                    let f =
                        |b: &[u8]| f32::from_le_bytes(b[4 * at..4 * at + 4].try_into().unwrap());
                    panic!(
                        "{}: sim {arch} {sch} differs at {at}: {} vs cpu {}",
                        case.name,
                        f(&got),
                        f(&want)
                    );
                }
                runs += 1;
            }
        }
        assert!(runs >= 6, "{}: only {runs} runs", case.name);
    }
}

/// The row reductions under `deterministic` on rows of more than one chunk of the CPU's
/// row-wise tile (`Schedule::cpu_default`, `[8, CPU_ROW_COLS]`; the last chunk ragged): the
/// same bits on every CPU candidate, on 1 and 2 threads.
#[test]
fn deterministic_rows_wider_than_the_cpu_row_tile_are_bitwise() {
    let c = tessera_ir::schedule::CPU_ROW_COLS as usize + 1100;
    let rows = ["row_sum", "row_mean", "softmax", "layernorm", "rmsnorm"];
    let mut runs = 0;
    for mut case in cases("deterministic") {
        if !rows.contains(&case.name) {
            continue;
        }
        case.syms = vec![("R", 5), ("C", c)];
        let s = setup(&case, random);
        let want = s.cpu(&s.c.kernels[0].schedule, 1);
        let cpu = s.cpu_schedules();
        let k = &s.c.kernels[0];
        let dtype = kernel_dtype(&s.c.graph, &k.fused);
        assert!(cpu.contains(&Schedule::cpu_default(k.fused.class, dtype)));
        for sch in &cpu {
            for t in [1, 2] {
                if let Some(at) = first_diff(&s.cpu(sch, t), &want) {
                    panic!("{}: cpu {sch} on {t} threads differs at {at}", case.name);
                }
                runs += 1;
            }
        }
    }
    assert!(runs >= 5 * 6, "only {runs} runs");
}

/// The control: under `fast` the same candidates do disagree in the last bits somewhere,
/// so the test above can fail.
#[test]
fn fast_differs_across_tiles_or_backends() {
    let mut differing = Vec::new();
    for case in cases("fast") {
        let s = setup(&case, random);
        let want = s.cpu(&s.c.kernels[0].schedule, 1);
        let cpu_differs = s.cpu_schedules().iter().any(|sch| s.cpu(sch, 2) != want);
        let sim_differs = s
            .sim(&s.c.kernels[0].schedule, Arch::Sm80)
            .is_ok_and(|got| got != want);
        if cpu_differs || sim_differs {
            differing.push(case.name);
        }
    }
    // Row reductions, softmax and the norms reassociate with the chunk width; a tensor-core
    // matmul sums in the hardware's order.
    for name in ["row_sum", "softmax", "layernorm", "matmul_bf16"] {
        assert!(
            differing.contains(&name),
            "{name} under fast gave the same bits everywhere ({differing:?})"
        );
    }
}

/// The row of the issue: `1e8`, 4000 ones, `−1e8` (exact sum 4000). `fast` loses the ones;
/// `kahan_sum` keeps them on the CPU and on the simulator, row and column alike.
#[test]
fn kahan_sum_keeps_what_fast_loses_on_cpu_and_sim() {
    let ones = |dtype: DType, dims: &[usize], _seed: u64| {
        assert_eq!(dtype, DType::F32);
        let n: usize = dims.iter().product();
        let cols = *dims.last().unwrap();
        let mut v = vec![1f32; n];
        // Each row (or, transposed, each column) of 4002 terms: 1e8 first, −1e8 last.
        let (r, c) = (dims[0], cols);
        for i in 0..r {
            for j in 0..c {
                let pos = if c == 4002 { j } else { i };
                v[i * c + j] = match pos {
                    0 => 1e8,
                    4001 => -1e8,
                    _ => 1.0,
                };
            }
        }
        Buf::f32s(&v, dims, false)
    };
    for (policy, want) in [("fast", None), ("kahan_sum", Some(4000.0f32))] {
        let row = Case {
            name: "row_sum",
            src: format!(
                "graph @rs(%x: f32[R, C]) -> f32[R] {{\n  %1 = reduce.sum %x axes=[1] keepdim=false policy={policy} : f32[R]\n  return %1\n}}"
            ),
            syms: vec![("R", 3), ("C", 4002)],
        };
        let col = Case {
            name: "col_sum",
            src: format!(
                "graph @cs(%x: f32[R, C]) -> f32[C] {{\n  %1 = reduce.sum %x axes=[0] keepdim=false policy={policy} : f32[C]\n  return %1\n}}"
            ),
            syms: vec![("R", 4002), ("C", 5)],
        };
        for case in [row, col] {
            let s = setup(&case, ones);
            let sch = s.c.kernels[0].schedule.clone();
            let as_f32 = |b: Vec<u8>| -> Vec<f32> {
                b.chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            };
            let cpu = as_f32(s.cpu(&sch, 2));
            let sim = as_f32(s.sim(&sch, Arch::Sm80).unwrap());
            match want {
                Some(w) => {
                    for (backend, got) in [("cpu", &cpu), ("sim", &sim)] {
                        assert!(
                            got.iter().all(|x| *x == w),
                            "{policy} {} on {backend}: {got:?}",
                            case.name
                        );
                    }
                }
                // The control: the row sum under fast loses ones on some backend (the issue
                // measured 3984 on sim), so the kahan assertion can fail.
                None if case.name == "row_sum" => assert!(
                    cpu.iter().chain(&sim).any(|x| *x != 4000.0),
                    "fast kept every one on cpu {cpu:?} and sim {sim:?}: the case is too easy"
                ),
                None => {}
            }
        }
    }
}

/// Under `deterministic` a NaN in a row makes that row's softmax NaN on the CPU and on the
/// simulator alike, whatever the NaN's payload (the simulator makes every NaN `0x7FFFFFFF`,
/// which the canonical `exp` turned into `f32::MAX` while its `2^n` scale was an integer add
/// to the exponent field); the other rows keep the same bits on both.
#[test]
fn deterministic_softmax_of_a_nan_row_is_nan_on_cpu_and_sim() {
    let case = cases("deterministic")
        .into_iter()
        .find(|c| c.name == "softmax")
        .unwrap();
    let rows = [0usize, 5, 12, 18];
    let payloads = [0x7FC0_0000u32, 0x7FFF_FFFF, 0xFFC0_0020, 0x7F80_0001];
    let s = setup(&case, |dtype, dims, seed| {
        let mut b = random(dtype, dims, seed);
        let bytes = b.as_bytes_mut();
        for (i, (&r, &p)) in rows.iter().zip(&payloads).enumerate() {
            let at = 4 * (r * dims[1] + 7 + 300 * i);
            bytes[at..at + 4].copy_from_slice(&p.to_le_bytes());
        }
        b
    });
    let f = |b: &[u8]| -> Vec<f32> {
        b.chunks(4)
            .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
            .collect()
    };
    let cpu = f(&s.cpu(&s.c.kernels[0].schedule, 1));
    let sim = f(&s.sim(&s.device_schedules()[0], Arch::Sm80).unwrap());
    let c = cpu.len() / 19;
    for (i, (a, b)) in cpu.iter().zip(&sim).enumerate() {
        let nan_row = rows.contains(&(i / c));
        assert_eq!(a.is_nan(), nan_row, "cpu at {i}: {a:e}");
        assert_eq!(b.is_nan(), nan_row, "sim at {i}: {b:e}");
        if !nan_row {
            assert_eq!(a.to_bits(), b.to_bits(), "at {i}: cpu {a:e} vs sim {b:e}");
        }
    }
}
