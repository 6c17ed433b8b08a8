//! The tuner behind `KernelDef::launch`: picks each fused kernel's program for the bound
//! shapes (memo → cache → nearest shape → tuning), and tunes in place with the launch's own
//! inputs.

use super::engine::{self, Job, Runner};
use super::trial::TrialConfig;
use super::{Mode, SearchSpace, borrowed, fnv, generation, lookup, space_of, store, try_mode};
use crate::backend::{Buffer, cpu::Program};
use crate::{Error, Result};
use smallvec::SmallVec;
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ir::DType;
use tessera_ir::cost::{Point, Problem};
use tessera_ir::graph::Graph;
use tessera_ir::manifest::KernelManifest;
use tessera_ir::pipeline::{Compiled, kernel_dtype};
use tessera_ir::schedule::{self, KernelClass, Schedule};

/// Per-definition memo: decisions by (kernel index, shape) and by the launch's own view dims,
/// programs by schedule, and each kernel's manifest (what [`sizes`] reads), built once.
pub(crate) struct KernelMemo {
    inner: Mutex<MemoInner>,
    manifests: OnceLock<Vec<KernelManifest>>,
}

/// (generation, kernel index, shape) → the program to run (`None`: the default).
type Decision = (u64, usize, Vec<u64>, Option<Arc<Program>>);

/// (generation, kernel index, every buffer's view dims in order) → the program to run: a
/// launch with the dims of an earlier one finds its decision without computing [`sizes`].
/// A kernel's buffers have fixed ranks, so the flattened dims name one set of views.
type SeenDims = (u64, usize, SmallVec<[usize; 8]>, Option<Arc<Program>>);

/// The most view-dim sets a memo remembers (a launch scans them all).
const SEEN_MAX: usize = 64;

struct MemoInner {
    decisions: Vec<Decision>,
    seen: Vec<SeenDims>,
    programs: Vec<(usize, String, Arc<Program>)>,
}

impl KernelMemo {
    pub const fn new() -> Self {
        KernelMemo {
            inner: Mutex::new(MemoInner {
                decisions: Vec::new(),
                seen: Vec::new(),
                programs: Vec::new(),
            }),
            manifests: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The manifest of kernel `i` of `compiled` (the plan this memo belongs to).
    fn manifest<'a>(&'a self, compiled: &Compiled, i: usize) -> &'a KernelManifest {
        &self.manifests.get_or_init(|| KernelManifest::all(compiled))[i]
    }
}

/// Whether `seen` holds exactly the view dims of `bufs`, in order.
fn same_dims(seen: &[usize], bufs: &[Buffer]) -> bool {
    let mut s = seen.iter();
    bufs.iter()
        .flat_map(|b| b.dims())
        .all(|d| s.next() == Some(d))
        && s.next().is_none()
}

/// The sizes that key a fused kernel: matmul `[batch, m, n, k]`, otherwise every buffer's
/// dims (`dims`: each binding's view dims, the output last).
pub(super) fn sizes(
    g: &Graph,
    m: &KernelManifest,
    dims: &[&[usize]],
) -> (Vec<u64>, Option<Problem>) {
    let out = dims.last().copied().unwrap_or(&[]);
    let r = out.len();
    let din = m.dtype;
    let dout = g.ty(m.output).dtype;
    if m.class() == KernelClass::Matmul && r >= 2 {
        let kdim = m
            .bindings
            .iter()
            .position(|b| Some(b.value) == m.input)
            .and_then(|j| dims.get(j))
            .and_then(|d| d.last().copied())
            .unwrap_or(1);
        let batch = crate::tensor::size::elements(&out[..r - 2]);
        let s = [batch, out[r - 2], out[r - 1], kdim].map(|x| x as u64);
        return (
            s.to_vec(),
            Some(Problem::for_class(KernelClass::Matmul, &s, din, dout)),
        );
    }
    let flat: Vec<u64> = dims
        .iter()
        .flat_map(|d| d.iter().map(|&x| x as u64))
        .collect();
    if m.class() == KernelClass::Attention
        && let Some(p) = attention_problem(g, m, dims)
    {
        return (flat, Some(p));
    }
    let (rows, cols) = match r {
        0 => (1, 1),
        1 => (1, out[0] as u64),
        _ => (
            crate::tensor::size::elements(&out[..r - 1]) as u64,
            out[r - 1] as u64,
        ),
    };
    (
        flat,
        Some(Problem::for_class(m.class(), &[rows, cols], din, dout)),
    )
}

/// The attention problem of an attention-class kernel: its root's `q, k, v` found among the
/// bindings (views `[BH, S, D]`).
fn attention_problem(g: &Graph, m: &KernelManifest, dims: &[&[usize]]) -> Option<Problem> {
    let node = g.nodes.iter().find(|n| {
        matches!(n.op, tessera_ir::graph::Op::Attention { .. })
            && n.args.first() == m.input.as_ref()
    })?;
    let tessera_ir::graph::Op::Attention { causal, .. } = node.op else {
        return None;
    };
    let view = |v| {
        let j = m.bindings.iter().position(|b| b.value == v)?;
        let d = dims.get(j)?;
        (d.len() == 3).then(|| [d[0], d[1], d[2]].map(|x| x as u64))
    };
    let (q, k, v) = (
        view(node.args[0])?,
        view(node.args[1])?,
        view(node.args[2])?,
    );
    Some(Problem::Attention {
        batch: q[0].max(1),
        sq: q[1],
        sk: k[1],
        d: q[2],
        dv: v[2],
        causal,
        in_bytes: m.dtype.size_bytes() as u32,
        out_bytes: g.ty(m.output).dtype.size_bytes() as u32,
    })
}

fn program_for(
    memo: &KernelMemo,
    compiled: &Compiled,
    i: usize,
    s: &Schedule,
) -> std::result::Result<Arc<Program>, String> {
    let text = s.to_string();
    if let Some(p) = memo
        .lock()
        .programs
        .iter()
        .find(|p| p.0 == i && p.1 == text)
    {
        return Ok(p.2.clone());
    }
    let lowered = compiled
        .lower_on(i, s, tessera_ir::schedule::Target::Cpu)
        .map_err(|e| e.to_string())?;
    if lowered.bindings != compiled.kernels[i].lowered.bindings {
        return Err(format!("{s} binds other tensors than the default"));
    }
    tessera_ir::tile::verify(&lowered.kernel).map_err(|e| e.to_string())?;
    let p = Arc::new(Program::new(lowered.kernel));
    memo.lock().programs.push((i, text, p.clone()));
    Ok(p)
}

/// The program to run for fused kernel `i` of a `#[kernel]` launch on `bufs` (its inputs
/// already computed, its output last); `None` means `default`, the plan's own program (the
/// CPU's schedule, `Schedule::cpu_default` or `cpu_general`), which the tuner times as its
/// first candidate. `tag` names the fusion plan (empty for the default plan, `.f1` for
/// fusion depth 1 …): kernel `i` of another plan is another kernel, with its own cache
/// entries.
#[allow(clippy::too_many_arguments)]
pub(crate) fn select_kernel(
    memo: &KernelMemo,
    name: &str,
    graph_text: &str,
    tag: &str,
    compiled: &Compiled,
    i: usize,
    bufs: &[Buffer],
    default: &Program,
) -> Result<Option<Arc<Program>>> {
    let m = try_mode()?;
    if m == Mode::Off {
        return Ok(None);
    }
    let generation_now = generation(m);
    if let Some(d) = memo
        .lock()
        .seen
        .iter()
        .find(|d| d.0 == generation_now && d.1 == i && same_dims(&d.2, bufs))
    {
        return Ok(d.3.clone());
    }
    let chosen = decide(memo, name, graph_text, tag, compiled, i, bufs, default, m)?;
    let mut inner = memo.lock();
    // Entries of older generations are never found again, and the list is scanned on every
    // launch: keep it short (a dropped entry is decided again, from `decisions`).
    inner.seen.retain(|d| d.0 == generation_now);
    if inner.seen.len() >= SEEN_MAX {
        inner.seen.remove(0);
    }
    inner.seen.push((
        generation_now,
        i,
        bufs.iter().flat_map(|b| b.dims()).copied().collect(),
        chosen.clone(),
    ));
    Ok(chosen)
}

/// [`select_kernel`] for view dims not seen before under this generation: the decision by
/// shape (memo → cache → nearest shape → tuning).
#[allow(clippy::too_many_arguments)]
fn decide(
    memo: &KernelMemo,
    name: &str,
    graph_text: &str,
    tag: &str,
    compiled: &Compiled,
    i: usize,
    bufs: &[Buffer],
    default: &Program,
    m: Mode,
) -> Result<Option<Arc<Program>>> {
    let dims: Vec<&[usize]> = bufs.iter().map(|b| b.dims()).collect();
    let (shape, problem) = sizes(&compiled.graph, memo.manifest(compiled, i), &dims);
    let generation_now = generation(m);
    if let Some(d) = memo
        .lock()
        .decisions
        .iter()
        .find(|d| d.0 == generation_now && d.1 == i && d.2 == shape)
    {
        return Ok(d.3.clone());
    }
    let k = &compiled.kernels[i];
    let dtypes: Vec<&str> = bufs.iter().map(|b| b.dtype.name()).collect();
    let family = format!(
        "{name}#{:016x}.k{i}{tag}/{}/t{}",
        fnv(graph_text.as_bytes()),
        dtypes.join(","),
        rayon::current_num_threads()
    );
    let key = format!(
        "{family}/{}",
        shape
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("x")
    );
    let space = space_of(name).unwrap_or_else(|| {
        SearchSpace::builtin(k.fused.class, kernel_dtype(&compiled.graph, &k.fused))
    });
    let cands = space.schedules_on(&k.schedule, schedule::Target::Cpu);
    let names: Vec<String> = cands.iter().map(|s| s.to_string()).collect();
    let (hit, near) = lookup(&super::arch_id(), &key, &family, &shape);
    let pick = |text: &str| -> Option<Arc<Program>> {
        let s = schedule::parse(text).ok()?;
        if s == k.schedule {
            return None;
        }
        program_for(memo, compiled, i, &s).ok()
    };
    let complete = hit
        .as_ref()
        .is_some_and(|e| names.iter().all(|n| e.record(n).is_some()));
    let chosen = match (&hit, m) {
        (Some(e), _) if complete || m == Mode::Cached => e.best.as_deref().and_then(pick),
        (None, Mode::Cached) => borrowed(&near).and_then(pick),
        _ => {
            let job = Job {
                kernel: name.to_string(),
                family,
                shape: shape.clone(),
                names: names.clone(),
                points: cands.iter().map(Point::from_schedule).collect(),
                arch: super::cost_arch(),
                problem,
                strategy: space.strategy,
                cost_model: space.cost_model,
                max_trials: space.max_trials,
                trial: TrialConfig {
                    bitwise: super::deterministic(compiled),
                    ..space.trial
                },
                predicted: None,
                prior: near.and_then(|e| e.best),
                known: hit,
            };
            let mut runner = KernelRunner::new(memo, compiled, i, &cands, bufs, default);
            let out = engine::tune(job, &mut runner)?;
            store(&super::arch_id(), key, out.entry.clone());
            if out.best == 0 {
                None
            } else {
                runner.programs[out.best].clone()
            }
        }
    };
    memo.lock()
        .decisions
        .push((generation_now, i, shape, chosen.clone()));
    Ok(chosen)
}

/// Runs schedules of one fused kernel on the launch's inputs into a scratch output; candidate
/// 0 (the compiled default schedule's name) runs `default`, the program a launch runs when the
/// tuner picks no other.
struct KernelRunner<'a> {
    memo: &'a KernelMemo,
    compiled: &'a Compiled,
    i: usize,
    cands: &'a [Schedule],
    programs: Vec<Option<Arc<Program>>>,
    default: &'a Program,
    bufs: Vec<Buffer>,
    scratch: Vec<u64>,
    out_dtype: DType,
    out_len: usize,
}

impl<'a> KernelRunner<'a> {
    fn new(
        memo: &'a KernelMemo,
        compiled: &'a Compiled,
        i: usize,
        cands: &'a [Schedule],
        bufs: &[Buffer],
        default: &'a Program,
    ) -> Self {
        let out = *bufs.last().expect("a kernel writes one output");
        let mut scratch = vec![0u64; out.len.div_ceil(8)];
        let mut bufs = bufs.to_vec();
        let last = bufs.len() - 1;
        bufs[last].ptr = scratch.as_mut_ptr() as *mut u8;
        KernelRunner {
            memo,
            compiled,
            i,
            cands,
            programs: vec![None; cands.len()],
            default,
            bufs,
            scratch,
            out_dtype: out.dtype,
            out_len: out.len,
        }
    }
}

impl Runner for KernelRunner<'_> {
    fn run(&mut self, j: usize) -> Result<()> {
        if j == 0 {
            return crate::backend::cpu::launch(self.default, &self.bufs);
        }
        let p = match &self.programs[j] {
            Some(p) => p.clone(),
            None => {
                let p =
                    program_for(self.memo, self.compiled, self.i, &self.cands[j]).map_err(|m| {
                        Error::Compile {
                            kernel: self.compiled.kernels[self.i].fused.name.clone(),
                            message: m,
                        }
                    })?;
                self.programs[j] = Some(p.clone());
                p
            }
        };
        crate::backend::cpu::launch(&p, &self.bufs)
    }

    fn clear(&mut self) {
        self.scratch.fill(0);
    }

    fn outputs(&self) -> Vec<(DType, &[u8])> {
        vec![(
            self.out_dtype,
            &bytemuck::cast_slice::<u64, u8>(&self.scratch)[..self.out_len],
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ir::graph;
    use tessera_ir::pipeline::{CompileOptions, compile};
    use tessera_ir::schedule::Target;

    /// The tuner's first candidate runs the program a launch runs when the tuner picks no
    /// other (the plan's, under the CPU's schedule), not the compiled default schedule's: on
    /// rows of several of that schedule's 128-column chunks their `fast` softmax sums differ
    /// in the last bits, and the first candidate must give the plan's.
    #[test]
    fn the_default_candidate_runs_the_plans_program() {
        let g = graph::parse(
            "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}",
        )
        .unwrap();
        let c = compile(&g, &CompileOptions::default()).unwrap();
        let k = &c.kernels[0];
        let cpu = Schedule::cpu_default(k.fused.class, kernel_dtype(&c.graph, &k.fused));
        assert_ne!(cpu, k.schedule);
        let plan = Program::new(c.lower_on(0, &cpu, Target::Cpu).unwrap().kernel);
        let (r, n) = (5, 3000);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let x: Vec<f32> = (0..r * n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 16.0
            })
            .collect();
        let buf = |p: *mut f32, writable| Buffer {
            dtype: DType::F32,
            shape: [r, n, 1],
            rank: 2,
            ptr: p as *mut u8,
            len: r * n * 4,
            writable,
        };
        let out = |p: &Program| {
            let mut o = vec![0f32; r * n];
            let bufs = [
                buf(x.as_ptr() as *mut f32, false),
                buf(o.as_mut_ptr(), true),
            ];
            crate::backend::cpu::launch(p, &bufs).unwrap();
            o
        };
        let want = out(&plan);
        // The control: the compiled default schedule's program gives other bits.
        let compiled_default = Program::new(k.lowered.kernel.clone());
        assert_ne!(out(&compiled_default), want);
        let memo = KernelMemo::new();
        let cands = [k.schedule.clone()];
        let mut o = vec![0f32; r * n];
        let bufs = [
            buf(x.as_ptr() as *mut f32, false),
            buf(o.as_mut_ptr(), true),
        ];
        let mut runner = KernelRunner::new(&memo, &c, 0, &cands, &bufs, &plan);
        runner.run(0).unwrap();
        assert_eq!(
            runner.outputs()[0].1,
            bytemuck::cast_slice::<f32, u8>(&want)
        );
    }
}
