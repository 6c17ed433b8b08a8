//! The compiler driver: verify → rewrite → fuse → schedule → lower → verify, with
//! `TESSERA_DUMP`.
//!
//! `TESSERA_DUMP=graph,fusion,schedule,tile` (or `all`) prints each level's text to stderr, or
//! writes files under `TESSERA_DUMP_DIR` when it is set. The fusion trace starts with the
//! rewrite engine's decisions ([`crate::rewrite`]); when a rule applied, the rewritten graph is
//! dumped too (`<name>.rewritten`).

use crate::fuse::{FusedKernel, Plan, fuse_with};
use crate::graph::{self, Graph};
use crate::lower::{Lowered, lower, lower_on};
use crate::rewrite::{Applied, RewriteOptions, rewrite};
use crate::schedule::{KernelClass, Schedule, Target};
use crate::{DType, NumericsPolicy};

/// Options of one compilation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileOptions {
    /// Numerics policy for every reduction that does not name its own (applied with
    /// [`graph::with_policy`]; a reduction naming another non-fast policy is an error).
    pub policy: NumericsPolicy,
    /// Most elementwise ops fused into one kernel's epilogue (`None`: as deep as the fusion
    /// rules allow); see [`crate::fuse::fuse_with`].
    pub fusion_depth: Option<usize>,
    /// Which algebraic rewrites run (all by default).
    pub rewrites: RewriteOptions,
    /// A pinned `[BM, BN, BK]` tile (`#[kernel(tile = (128, 128, 64))]`, seeds §7.2): every
    /// matmul and convolution kernel runs under it on every backend instead of its default,
    /// and the autotuner leaves those kernels alone. `None`: defaults and autotuning.
    pub tile: Option<Vec<u32>>,
}

impl CompileOptions {
    /// Whether a kernel of `class` runs under the pinned tile.
    pub fn pins(&self, class: KernelClass) -> bool {
        self.tile.is_some() && class.tile_rank() == PINNED_TILE_RANK
    }

    /// The schedule a kernel of `class` with inputs of `dtype` compiles under: the class's
    /// default with the pinned tile when [`Self::pins`] it.
    ///
    /// ```
    /// use tessera_ir::{DType, pipeline::CompileOptions, schedule::KernelClass};
    /// let o = CompileOptions { tile: Some(vec![64, 64, 32]), ..Default::default() };
    /// assert_eq!(o.schedule_for(KernelClass::Matmul, DType::F32).tile, vec![64, 64, 32]);
    /// assert_eq!(o.schedule_for(KernelClass::Rowwise, DType::F32).tile, vec![8, 128]);
    /// ```
    pub fn schedule_for(&self, class: KernelClass, dtype: DType) -> Schedule {
        self.pinned(Schedule::default_for(class, dtype))
    }

    /// [`Self::schedule_for`] on the CPU backend: [`Schedule::cpu_default`] unless pinned.
    pub fn cpu_schedule_for(&self, class: KernelClass, dtype: DType) -> Schedule {
        self.pinned(Schedule::cpu_default(class, dtype))
    }

    fn pinned(&self, s: Schedule) -> Schedule {
        match &self.tile {
            Some(t) if self.pins(s.class) => Schedule {
                tile: t.clone(),
                ..s
            },
            _ => s,
        }
    }

    /// Checks the pinned tile on its own (rank, sizes), naming it: what a `#[kernel(tile =
    /// ..)]` attribute is checked against before any graph is compiled.
    ///
    /// ```
    /// use tessera_ir::pipeline::CompileOptions;
    /// let o = CompileOptions { tile: Some(vec![128, 96, 64]), ..Default::default() };
    /// let e = o.check_tile().unwrap_err();
    /// assert!(e.contains("tile (128, 96, 64)") && e.contains("tile[1] = 96"), "{e}");
    /// ```
    pub fn check_tile(&self) -> Result<(), String> {
        let Some(t) = &self.tile else { return Ok(()) };
        let name = tile_name(t);
        if t.len() != PINNED_TILE_RANK {
            return Err(format!(
                "the pinned tile {name} has {} dims; a pinned tile is `(BM, BN, BK)`",
                t.len()
            ));
        }
        let s = Schedule {
            tile: t.clone(),
            ..Schedule::default_for(KernelClass::Matmul, DType::F32)
        };
        crate::schedule::verify(&s)
            .map_err(|e| format!("the pinned tile {name} is not legal: {}", e.join("; ")))
    }
}

/// How many dims a pinned tile has: `(BM, BN, BK)` of matmul and convolution kernels.
pub const PINNED_TILE_RANK: usize = 3;

/// `(128, 128, 64)`: a tile as the `#[kernel(tile = ..)]` attribute writes it.
pub fn tile_name(t: &[u32]) -> String {
    let d: Vec<String> = t.iter().map(|x| x.to_string()).collect();
    format!("({})", d.join(", "))
}

/// A compilation failure, naming the value or kernel at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// The graph breaks a typing rule (the verifier's message names the value).
    #[error("{0}")]
    Verify(String),
    /// The graph cannot be fused into kernels the lowering supports.
    #[error("{0}")]
    Fuse(#[from] crate::fuse::FuseError),
    /// A fused kernel cannot be lowered to Tile IR.
    #[error("{0}")]
    Lower(#[from] crate::lower::LowerError),
    /// A rewrite rule built an ill-typed replacement (a compiler bug).
    #[error("{0}")]
    Rewrite(#[from] crate::rewrite::RewriteError),
    /// A numerics policy the graph's reductions cannot all honour.
    #[error("{0}")]
    Policy(String),
    /// A pinned tile (`CompileOptions::tile`) that is illegal or fits no kernel.
    #[error("{0}")]
    Tile(String),
    /// A `TESSERA_*` variable the compiler reads (`TESSERA_DUMP`) has an invalid value.
    #[error("{0}")]
    Env(#[from] crate::env::EnvError),
}

/// One fused kernel with its default schedule, lowered.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledKernel {
    /// The fused kernel.
    pub fused: FusedKernel,
    /// Its default schedule (or the pinned tile's).
    pub schedule: Schedule,
    /// Its Tile IR under that schedule.
    pub lowered: Lowered,
}

/// A compiled graph: the plan and every kernel lowered under its default schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    /// The graph after the rewrites: what the plan's kernels compute.
    pub graph: Graph,
    /// The rewrite engine's decisions (applied or not), in order.
    pub rewrites: Vec<Applied>,
    /// The fusion plan.
    pub plan: Plan,
    /// The options it was compiled with.
    pub options: CompileOptions,
    /// Every kernel of the plan, in execution order.
    pub kernels: Vec<CompiledKernel>,
}

impl Compiled {
    /// The Tile IR text of every kernel, in execution order.
    pub fn tile_texts(&self) -> Vec<String> {
        self.kernels
            .iter()
            .map(|k| k.lowered.kernel.to_string())
            .collect()
    }

    /// The fusion trace: the rewrite decisions, then the fusion decisions, one `; ` line each
    /// (what `TESSERA_DUMP=fusion` prints).
    pub fn trace(&self) -> String {
        trace(&self.rewrites, &self.plan)
    }

    /// Lowers kernel `i` under another schedule (for tuning, or a backend's own defaults),
    /// checked under the PTX rules: [`Self::lower_on`] with [`Target::Ptx`].
    pub fn lower_with(&self, i: usize, s: &Schedule) -> Result<Lowered, CompileError> {
        self.lower_on(i, s, Target::Ptx)
    }

    /// Lowers kernel `i` under a schedule of `target` (see [`crate::lower::lower_on`]): the
    /// CPU backend lowers its own schedules ([`Schedule::cpu_default`], its tuner's) with
    /// [`Target::Cpu`].
    ///
    /// ```
    /// use tessera_ir::{pipeline::{compile, kernel_dtype, CompileOptions}, schedule::{Schedule, Target}};
    /// let g = tessera_ir::graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {
    ///   %1 = softmax %x : f32[R, C]
    ///   return %1
    /// }").unwrap();
    /// let c = compile(&g, &CompileOptions::default()).unwrap();
    /// let k = &c.kernels[0];
    /// let s = Schedule::cpu_default(k.fused.class, kernel_dtype(&c.graph, &k.fused));
    /// assert!(c.lower_on(0, &s, Target::Cpu).is_ok());
    /// assert!(c.lower_with(0, &s).is_err());
    /// ```
    pub fn lower_on(
        &self,
        i: usize,
        s: &Schedule,
        target: Target,
    ) -> Result<Lowered, CompileError> {
        Ok(lower_on(
            &self.graph,
            &self.kernels[i].fused,
            s,
            self.options.policy,
            target,
        )?)
    }
}

/// The dtype that decides a kernel's default schedule: its root's first operand.
pub fn kernel_dtype(g: &Graph, k: &FusedKernel) -> DType {
    let root = g.node(k.root);
    root.args
        .first()
        .map(|a| g.ty(*a).dtype)
        .unwrap_or(root.ty.dtype)
}

/// Compiles a graph.
///
/// ```
/// use tessera_ir::pipeline::{compile, CompileOptions};
/// let g = tessera_ir::graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {
///   %1 = softmax %x : f32[R, C]
///   return %1
/// }").unwrap();
/// let c = compile(&g, &CompileOptions::default()).unwrap();
/// assert!(c.tile_texts()[0].contains("reduce.max"));
/// ```
pub fn compile(g: &Graph, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    crate::invocations::compiled();
    dump_levels()?;
    opts.check_tile().map_err(CompileError::Tile)?;
    graph::verify(g).map_err(|e| CompileError::Verify(e.to_string()))?;
    let g = &graph::with_policy(g, opts.policy)
        .map_err(|e| CompileError::Policy(format!("@{}: {e}", g.name)))?;
    // A plan of limited fusion depth (the autotuner's candidates) dumps under its own names.
    let tag = opts
        .fusion_depth
        .map_or(String::new(), |d| format!(".depth{d}"));
    dump("graph", &g.name, || g.to_string());
    let (rewritten, rewrites) = rewrite(g, &opts.rewrites)?;
    let g = &rewritten;
    if rewrites.iter().any(|r| r.applied) {
        graph::verify(g).map_err(|e| {
            CompileError::Verify(format!(
                "the rewritten graph does not verify (a rule bug):\n{e}"
            ))
        })?;
        dump("graph", &format!("{}.rewritten", g.name), || g.to_string());
    }
    let plan = fuse_with(g, opts.fusion_depth)?;
    dump("fusion", &format!("{}{tag}", g.name), || {
        trace(&rewrites, &plan)
    });
    let mut kernels = Vec::new();
    for k in &plan.kernels {
        let schedule = opts.schedule_for(k.class, kernel_dtype(g, k));
        let name = format!("{}{tag}", k.name);
        dump("schedule", &name, || format!("{schedule}\n"));
        let lowered = lower(g, k, &schedule, opts.policy).map_err(|e| match &opts.tile {
            Some(t) if opts.pins(k.class) => CompileError::Tile(format!(
                "the pinned tile {} does not fit kernel {}: {e}",
                tile_name(t),
                k.name
            )),
            _ => CompileError::Lower(e),
        })?;
        dump("tile", &name, || lowered.kernel.to_string());
        kernels.push(CompiledKernel {
            fused: k.clone(),
            schedule,
            lowered,
        });
    }
    if let Some(t) = &opts.tile
        && !plan.kernels.iter().any(|k| opts.pins(k.class))
    {
        return Err(CompileError::Tile(format!(
            "the pinned tile {} fits no kernel of @{}: it pins matmul and convolution kernels, \
             and its kernels are {}",
            tile_name(t),
            g.name,
            plan.kernels
                .iter()
                .map(|k| format!("{} ({})", k.name, k.class.name()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let c = Compiled {
        graph: g.clone(),
        rewrites,
        plan,
        options: opts.clone(),
        kernels,
    };
    Ok(c)
}

fn trace(rewrites: &[Applied], plan: &Plan) -> String {
    let mut s = String::new();
    for r in rewrites {
        s.push_str(&format!("; {r}\n"));
    }
    s.push_str(&plan.to_string());
    s
}

/// The IR levels `TESSERA_DUMP` can name.
pub const DUMP_LEVELS: [&str; 4] = ["graph", "fusion", "schedule", "tile"];

/// The levels `TESSERA_DUMP` asks for (a comma-separated list of [`DUMP_LEVELS`], or `all`);
/// empty when it is unset. Any other word is an error naming the variable and the accepted
/// values ([`compile`] returns it).
///
/// ```
/// // SAFETY (edition 2024 `set_var`): this doc test runs in its own single-threaded process.
/// unsafe { std::env::set_var("TESSERA_DUMP", "graph,zzz") };
/// let e = tessera_ir::pipeline::dump_levels().unwrap_err();
/// assert!(e.to_string().contains("TESSERA_DUMP=\"graph,zzz\" is not valid"), "{e}");
/// unsafe { std::env::set_var("TESSERA_DUMP", "tile, graph") };
/// assert_eq!(tessera_ir::pipeline::dump_levels().unwrap(), ["tile", "graph"]);
/// ```
pub fn dump_levels() -> Result<Vec<&'static str>, crate::env::EnvError> {
    const ACCEPTED: &str = "a comma-separated list of graph, fusion, schedule, tile, or all";
    let Some(want) = crate::env::var("TESSERA_DUMP", ACCEPTED)? else {
        return Ok(vec![]);
    };
    let mut levels = Vec::new();
    for w in want.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match DUMP_LEVELS.iter().find(|l| **l == w) {
            Some(l) => levels.push(*l),
            None if w == "all" => levels.extend(DUMP_LEVELS),
            None => {
                return Err(crate::env::EnvError::new("TESSERA_DUMP", &want, ACCEPTED));
            }
        }
    }
    Ok(levels)
}

/// Writes one level's text when `TESSERA_DUMP` asks for it (an invalid `TESSERA_DUMP` writes
/// nothing here; [`compile`] reports it).
pub fn dump(level: &str, name: &str, text: impl FnOnce() -> String) {
    if !dump_levels().is_ok_and(|l| l.contains(&level)) {
        return;
    }
    let text = text();
    match std::env::var("TESSERA_DUMP_DIR") {
        Ok(dir) => {
            let path = std::path::Path::new(&dir).join(format!("{name}.{level}.txt"));
            if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, &text))
            {
                eprintln!("tessera: cannot write {}: {e}", path.display());
            }
        }
        Err(_) => eprintln!("--- tessera {level}: {name} ---\n{text}"),
    }
}
