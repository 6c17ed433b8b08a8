//! Fusion: groups Graph IR nodes into kernels. Elementwise epilogues fuse into the kernel that
//! produces their operand (a matmul, a row-wise op, a reduction or another elementwise chain)
//! when that operand has no other use and the shapes agree; so does a `causal_mask` into a
//! matmul (the scores of an unfused attention, as its backward graph recomputes them), whose
//! lowering knows each element's row and column. Every
//! decision is recorded so a profiler or `TESSERA_DUMP=fusion` can show it.
//!
//! **Pipeline fusion of column reductions** (seeds §7.4). A reduction over the rows of a matrix
//! (`reduce.* axes=[0]`: a bias gradient `Σ_rows dY`, layernorm's `dγ = Σ_rows dY ⊙ x̂`) whose
//! operand is the sole product of an elementwise kernel takes that kernel over: the chain
//! becomes the reduction's *prologue*, computed tile by tile as the column-reduction kernel
//! walks the rows, so the operand is never written to memory nor read back. The sums keep
//! the column reduction's fixed row order (deterministic, no atomics). The trace records it
//! as `.. (reduce.sum) fused into <kernel> (..) as column reduction (pipeline fusion) ..`.
//!
//! **Fusion depth.** [`fuse_with`] caps how many elementwise ops one kernel's epilogue may
//! hold: depth 0 gives every op its own kernel, `None` fuses as deep as the rules allow.
//! Deeper fusion saves a write and a read of each intermediate; on a GPU it also keeps every
//! epilogue temporary live in registers at once, so the autotuner searches the depth
//! (`SearchSpace::fusion_depths`) and its cost model weighs the traffic against the
//! registers (seeds §4.6).

use crate::graph::{Graph, Op, Value};
use crate::schedule::KernelClass;
use std::fmt;

/// One kernel of the fused program.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedKernel {
    /// The kernel's name, `<graph>_k<index>`.
    pub name: String,
    /// What kind of work it does (matmul, row-wise, elementwise, ...).
    pub class: KernelClass,
    /// The node that defines the kernel's main work.
    pub root: Value,
    /// Elementwise nodes applied to the root's result, in order.
    pub epilogue: Vec<Value>,
    /// Elementwise nodes computed, tile by tile, *before* the root (a column reduction) and
    /// reduced by it: the chain that produces the root's operand, which pipeline fusion moved
    /// into the reduction's kernel. Empty for every other kernel.
    pub prologue: Vec<Value>,
    /// A row program's other nodes (see [`row_programs`]), in graph order: the last-axis
    /// reductions and elementwise ops the root is computed from inside the kernel. Empty for
    /// every other kernel.
    pub members: Vec<Value>,
    /// The value the kernel writes to memory.
    pub output: Value,
}

/// The fused program: kernels in execution order and the decisions that shaped them.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The kernels, in execution order.
    pub kernels: Vec<FusedKernel>,
    /// Each fusion decision in words (printed as `;` comments).
    pub decisions: Vec<String>,
}

impl Plan {
    /// The longest epilogue of any kernel: the plan's fusion depth.
    pub fn depth(&self) -> usize {
        self.kernels
            .iter()
            .map(|k| k.epilogue.len())
            .max()
            .unwrap_or(0)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.decisions {
            writeln!(f, "; {d}")?;
        }
        Ok(())
    }
}

/// Why a graph cannot be fused into kernels the lowering supports.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value}: {message}")]
pub struct FuseError {
    /// The value at fault.
    pub value: String,
    /// Why it cannot be fused, in words.
    pub message: String,
}

/// The class of kernel a root node needs.
pub fn class_of(g: &Graph, v: Value) -> Result<KernelClass, FuseError> {
    let n = g.node(v);
    Ok(match &n.op {
        Op::Matmul { .. } => KernelClass::Matmul,
        Op::Softmax { axis, .. } if axis + 1 != g.ty(n.args[0]).shape.rank() => {
            return Err(FuseError {
                value: g.value_name(v),
                message: format!(
                    "softmax along inner axis {axis} reaches fusion unlegalised: `rewrite::rewrite` moves it last first"
                ),
            });
        }
        Op::Softmax { .. } | Op::LayerNorm { .. } | Op::RmsNorm { .. } => KernelClass::Rowwise,
        Op::Attention { .. } => KernelClass::Attention,
        Op::Conv2d(_) => KernelClass::Conv,
        Op::Fft { .. } => KernelClass::Fft,
        Op::CausalMask | Op::Complex | Op::Real | Op::Pad { .. } | Op::SpectralMul { .. } => {
            KernelClass::Layout
        }
        Op::Transpose | Op::Permute(_) => KernelClass::Transpose,
        Op::Reduce { axes, .. } => {
            let r = g.ty(n.args[0]).shape.rank();
            match axes.as_slice() {
                // The last axis row-wise; any other as a column reduction of the view
                // `[d0·..·dk−1, dk, dk+1·..]`.
                [k] if *k + 1 == r => KernelClass::Rowwise,
                [_] => KernelClass::ColReduce,
                _ => {
                    return Err(FuseError {
                        value: g.value_name(v),
                        message: format!(
                            "reducing axes {axes:?} at once reaches fusion unlegalised: `rewrite::rewrite` splits it into one reduction per axis"
                        ),
                    });
                }
            }
        }
        _ => KernelClass::Elementwise,
    })
}

/// Groups the graph's nodes into kernels.
///
/// ```
/// let g = tessera_ir::graph::parse("graph @lg(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {
///   %3 = matmul %x, %w : f32[M, N]
///   %4 = add %3, %b : f32[M, N]
///   %5 = gelu %4 : f32[M, N]
///   return %5
/// }").unwrap();
/// let plan = tessera_ir::fuse::fuse(&g).unwrap();
/// assert_eq!(plan.kernels.len(), 1);
/// assert!(plan.decisions[1].contains("%4 (add) fused into lg_k0"));
/// ```
pub fn fuse(g: &Graph) -> Result<Plan, FuseError> {
    fuse_with(g, None)
}

/// Groups the graph's nodes into kernels with at most `depth` elementwise ops fused into each
/// kernel's epilogue (`None`: no limit).
///
/// ```
/// let g = tessera_ir::graph::parse("graph @lg(%x: f32[M, K], %w: f32[K, N], %b: f32[N]) -> f32[M, N] {
///   %3 = matmul %x, %w : f32[M, N]
///   %4 = add %3, %b : f32[M, N]
///   %5 = gelu %4 : f32[M, N]
///   return %5
/// }").unwrap();
/// use tessera_ir::fuse::{fuse, fuse_with};
/// assert_eq!(fuse(&g).unwrap().depth(), 2);
/// let shallow = fuse_with(&g, Some(1)).unwrap();
/// assert_eq!(shallow.kernels.len(), 2);   // matmul+add, then gelu
/// assert!(shallow.decisions[2].contains("fusion depth 1"));
/// assert_eq!(fuse_with(&g, Some(0)).unwrap().kernels.len(), 3);
/// ```
pub fn fuse_with(g: &Graph, depth: Option<usize>) -> Result<Plan, FuseError> {
    let uses = g.use_counts();
    let rows = row_programs(g);
    let mut kernels: Vec<FusedKernel> = Vec::new();
    let mut decisions = Vec::new();
    // kernel index producing each value (as its current output)
    let mut producer: Vec<Option<usize>> = vec![None; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let v = Value(i as u32);
        if matches!(n.op, Op::Param { .. }) || (matches!(n.op, Op::Const { .. }) && v != g.output) {
            continue;
        }
        let name = format!("{} ({})", g.value_name(v), n.op.name());
        if let Some(p) = rows.iter().find(|p| p.members.contains(&v)) {
            decisions.push(format!(
                "{name} computed inside the row program of {}",
                g.value_name(p.root)
            ));
            continue;
        }
        if let Some(p) = rows.iter().find(|p| p.root == v) {
            let k = kernels.len();
            let kname = format!("{}_k{k}", g.name);
            decisions.push(format!(
                "{name} starts {kname} (rowwise): a row program of {} node{} ({} last-axis reduction{})",
                p.members.len() + 1,
                if p.members.is_empty() { "" } else { "s" },
                p.reductions,
                if p.reductions == 1 { "" } else { "s" }
            ));
            kernels.push(FusedKernel {
                name: kname,
                class: KernelClass::Rowwise,
                root: v,
                epilogue: vec![],
                prologue: vec![],
                members: p.members.clone(),
                output: v,
            });
            producer[i] = Some(k);
            continue;
        }
        let mut reason = None;
        // A causal mask is elementwise given each element's position, which the matmul
        // lowering knows: it fuses as a matmul's epilogue.
        let mask = matches!(n.op, Op::CausalMask);
        if n.op.is_elementwise() || mask {
            let cands: Vec<Value> = n
                .args
                .iter()
                .copied()
                .filter(|a| producer[a.index()].is_some())
                .collect();
            for a in &cands {
                let k = producer[a.index()].unwrap();
                if kernels[k].output != *a {
                    continue;
                }
                if matches!(kernels[k].class, KernelClass::Fft | KernelClass::Layout) {
                    reason = Some(format!(
                        "{} kernels take no epilogue",
                        kernels[k].class.name()
                    ));
                    continue;
                }
                if mask && kernels[k].class != KernelClass::Matmul {
                    reason = Some(format!(
                        "a causal mask fuses only into a matmul kernel, not {} ({})",
                        kernels[k].name,
                        kernels[k].class.name()
                    ));
                    continue;
                }
                if uses[a.index()] != 1 {
                    reason = Some(format!(
                        "operand {} has {} uses, so it is written to memory",
                        g.value_name(*a),
                        uses[a.index()]
                    ));
                    continue;
                }
                if g.ty(*a).shape != n.ty.shape {
                    reason = Some(format!(
                        "it broadcasts operand {} to a larger shape",
                        g.value_name(*a)
                    ));
                    continue;
                }
                if let Some(late) = n
                    .args
                    .iter()
                    .find(|b| *b != a && producer[b.index()].is_some_and(|kb| kb >= k))
                {
                    reason = Some(format!(
                        "operand {} is computed after {}",
                        g.value_name(*late),
                        kernels[k].name
                    ));
                    continue;
                }
                if n.args.iter().filter(|b| *b == a).count() > 1 {
                    reason = Some(format!("it uses {} twice", g.value_name(*a)));
                    continue;
                }
                if let Some(d) = depth.filter(|d| kernels[k].epilogue.len() >= *d) {
                    reason = Some(format!(
                        "{} already holds {} epilogue op{} (fusion depth {d})",
                        kernels[k].name,
                        kernels[k].epilogue.len(),
                        if kernels[k].epilogue.len() == 1 {
                            ""
                        } else {
                            "s"
                        }
                    ));
                    continue;
                }
                kernels[k].epilogue.push(v);
                kernels[k].output = v;
                producer[i] = Some(k);
                decisions.push(format!(
                    "{name} fused into {} ({}) as epilogue",
                    kernels[k].name,
                    g.value_name(kernels[k].root)
                ));
                break;
            }
            if producer[i].is_some() {
                continue;
            }
        }
        let class = class_of(g, v)?;
        if class == KernelClass::ColReduce {
            match absorb_producer(g, &uses, &producer, &kernels, v, depth) {
                Ok(k) => {
                    let chain = &kernels[k];
                    decisions.push(format!(
                        "{name} fused into {} ({}) as column reduction (pipeline fusion): its operand {} is reduced tile by tile, never written to memory",
                        chain.name,
                        g.value_name(chain.root),
                        g.value_name(n.args[0]),
                    ));
                    let chain = kernels[k].clone();
                    let mut prologue = vec![chain.root];
                    prologue.extend(chain.epilogue);
                    kernels[k] = FusedKernel {
                        name: chain.name,
                        class,
                        root: v,
                        epilogue: vec![],
                        prologue,
                        members: vec![],
                        output: v,
                    };
                    producer[i] = Some(k);
                    continue;
                }
                Err(Some(r)) => reason = Some(r),
                Err(None) => {}
            }
        }
        let k = kernels.len();
        let kname = format!("{}_k{k}", g.name);
        decisions.push(match reason {
            Some(r) => format!(
                "{name} starts {kname} ({}): not fused because {r}",
                class.name()
            ),
            None => format!("{name} starts {kname} ({})", class.name()),
        });
        kernels.push(FusedKernel {
            name: kname,
            class,
            root: v,
            epilogue: vec![],
            prologue: vec![],
            members: vec![],
            output: v,
        });
        producer[i] = Some(k);
    }
    if kernels.is_empty() {
        return Err(FuseError {
            value: g.value_name(g.output),
            message: "the kernel computes nothing: it returns a parameter".into(),
        });
    }
    Ok(Plan { kernels, decisions })
}

/// The elementwise kernel whose sole product is the operand of column reduction `v`, when
/// pipeline fusion may move it into the reduction: `Err(Some(why))` when there is such a
/// kernel but it cannot be absorbed, `Err(None)` when the operand comes from elsewhere.
fn absorb_producer(
    g: &Graph,
    uses: &[usize],
    producer: &[Option<usize>],
    kernels: &[FusedKernel],
    v: Value,
    depth: Option<usize>,
) -> Result<usize, Option<String>> {
    let a = g.node(v).args[0];
    let Some(k) = producer[a.index()] else {
        return Err(None);
    };
    let kern = &kernels[k];
    if kern.output != a || kern.class != KernelClass::Elementwise {
        return Err(None);
    }
    let what = format!("{} ({})", kern.name, g.value_name(a));
    let leading = matches!(&g.node(v).op, Op::Reduce { axes, .. } if axes.as_slice() == [0]);
    if !leading || g.ty(a).shape.rank() != 2 {
        return Err(Some(format!(
            "pipeline fusion covers column reductions over axis 0 of a rank-2 operand, so {what} writes {} to memory",
            g.value_name(a)
        )));
    }
    if uses[a.index()] != 1 {
        return Err(Some(format!(
            "operand {} of the column reduction has {} uses, so {what} writes it to memory",
            g.value_name(a),
            uses[a.index()]
        )));
    }
    if depth == Some(0) {
        return Err(Some(format!(
            "fusion depth 0 keeps {what} a kernel of its own"
        )));
    }
    // The kernel's grid and row count come from an input of the operand's full shape.
    let chain: Vec<Value> = std::iter::once(kern.root)
        .chain(kern.epilogue.iter().copied())
        .collect();
    let full = chain.iter().flat_map(|c| &g.node(*c).args).any(|x| {
        !chain.contains(x)
            && !matches!(g.node(*x).op, Op::Const { .. })
            && g.ty(*x).shape == g.ty(a).shape
    });
    if !full {
        return Err(Some(format!(
            "{what} reads no input of the full shape {} (it broadcasts every operand)",
            g.ty(a).shape
        )));
    }
    Ok(k)
}

/// A row program found by [`row_programs`].
#[derive(Clone, Debug, PartialEq)]
pub struct RowProgram {
    /// The value the kernel writes: an elementwise node over whole rows.
    pub root: Value,
    /// The other nodes computed inside the kernel, in graph order.
    pub members: Vec<Value>,
    /// How many of them are reductions.
    pub reductions: usize,
}

/// Row programs: an elementwise value over whole rows `[.., C]` computed from last-axis
/// reductions (`keepdim`, `fast` policy) of elementwise expressions of the same rows, the way
/// `x · rsqrt(mean_keepdim(x·x, -1) + eps)` or a layernorm written from primitives is. Each
/// becomes one row-wise kernel: a pass over each row per reduction (its operand recomputed from
/// the inputs), then a pass that writes the root; nothing in between reaches memory.
///
/// The members are the root's operands, transitively, that are elementwise ops of a row's
/// shape (`[.., C]`) or of its statistics' shape (`[.., 1]`), or such reductions, and that are
/// used only inside the program; the other operands (inputs) must be whole rows, row
/// statistics, `[C]` vectors or scalars. A program needs a reduction whose result flows back
/// into a whole-row value (else the plain row-wise kernel with an epilogue already is one
/// kernel).
///
/// ```
/// let g = tessera_ir::graph::parse("graph @rms(%x: f32[R, C], %e: f32[]) -> f32[R, C] {
///   %2 = mul %x, %x : f32[R, C]
///   %3 = reduce.mean %2 axes=[1] keepdim=true : f32[R, 1]
///   %4 = add %3, %e : f32[R, 1]
///   %5 = rsqrt %4 : f32[R, 1]
///   %6 = mul %x, %5 : f32[R, C]
///   return %6
/// }").unwrap();
/// let plan = tessera_ir::fuse::fuse(&g).unwrap();
/// assert_eq!(plan.kernels.len(), 1);
/// assert_eq!(plan.kernels[0].members.len(), 4);
/// ```
pub fn row_programs(g: &Graph) -> Vec<RowProgram> {
    use crate::{Dim, NumericsPolicy};
    let n = g.nodes.len();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in g.nodes.iter().enumerate() {
        for a in &node.args {
            users[a.index()].push(i);
        }
    }
    let mut claimed = vec![false; n];
    let mut out = Vec::new();
    for o in (0..n).rev() {
        let on = &g.nodes[o];
        let r = on.ty.shape.rank();
        if claimed[o] || !matches!(on.op, Op::Unary(_) | Op::Binary(_) | Op::Cast(_)) || r == 0 {
            continue;
        }
        let full = on.ty.shape.0.clone();
        let mut row = full.clone();
        row[r - 1] = Dim::Const(1);
        if full[r - 1] == Dim::Const(1) {
            continue;
        }
        let mut member = vec![false; n];
        member[o] = true;
        // Users come after their operands: one pass downwards decides each candidate.
        for v in (0..o).rev() {
            if claimed[v] || Value(v as u32) == g.output {
                continue;
            }
            let node = &g.nodes[v];
            let used_by_member = users[v].iter().any(|u| member[*u]);
            if !used_by_member || !users[v].iter().all(|u| member[*u]) {
                continue;
            }
            let shape = &node.ty.shape.0;
            member[v] = match &node.op {
                Op::Unary(_) | Op::Binary(_) | Op::Cast(_) => *shape == full || *shape == row,
                Op::Reduce {
                    axes,
                    keepdim: true,
                    policy: NumericsPolicy::Fast,
                    ..
                } => axes.as_slice() == [r - 1] && g.ty(node.args[0]).shape.0 == full,
                _ => false,
            };
        }
        // The inputs must line up with the rows: whole rows, statistics, `[C]` or scalars.
        let fits = |v: usize| {
            let s = &g.nodes[v].ty.shape.0;
            let ones = s.iter().all(|d| d.is_one());
            *s == full || *s == row || ones || s.as_slice() == &full[r - 1..]
        };
        let members: Vec<usize> = (0..o).filter(|v| member[*v]).collect();
        let inputs_fit = members.iter().chain([&o]).all(|m| {
            g.nodes[*m]
                .args
                .iter()
                .all(|a| member[a.index()] || fits(a.index()))
        });
        let is_red = |v: usize| matches!(g.nodes[v].op, Op::Reduce { .. });
        let reductions = members.iter().filter(|m| is_red(**m)).count();
        // Some whole-row member reads a statistic: the broadcast back that splits kernels.
        let mut after_red = vec![false; n];
        let mut back = false;
        for &m in members.iter().chain([&o]) {
            let from_red = g.nodes[m]
                .args
                .iter()
                .any(|a| member[a.index()] && (is_red(a.index()) || after_red[a.index()]));
            after_red[m] = from_red;
            if from_red && g.nodes[m].ty.shape.0 == full {
                back = true;
            }
        }
        let whole_input = members.iter().chain([&o]).any(|m| {
            g.nodes[*m]
                .args
                .iter()
                .any(|a| !member[a.index()] && g.ty(*a).shape.0 == full)
        });
        if !inputs_fit || reductions == 0 || !back || !whole_input {
            continue;
        }
        for &m in members.iter().chain([&o]) {
            claimed[m] = true;
        }
        out.push(RowProgram {
            root: Value(o as u32),
            members: members.into_iter().map(|m| Value(m as u32)).collect(),
            reductions,
        });
    }
    out
}
