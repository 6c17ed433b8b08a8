//! Launch manifests: per fused kernel of a compiled graph, what a runtime needs to launch it
//! without compiling — the value it writes, the tensors it binds (in ABI order, with their
//! view ranks), its default schedule and the dtype that chose it.
//!
//! `#[tessera::kernel]` embeds one manifest line per fused kernel beside the Graph IR text and
//! the PTX, so a launch on a PTX device parses texts instead of running [`crate::pipeline`].
//!
//! Text form (one line per kernel; values are named as the graph prints them):
//!
//! ```text
//! kernel @lin_k0 out=%3 dtype=bf16 input=%x bindings=[%x: 2, %w: 2, %3: 2] class=matmul tile=[128, 128, 64] warps=8 stages=3 vector=8
//! ```

use crate::graph::{Graph, Op, Value};
use crate::lower::Binding;
use crate::pipeline::{Compiled, kernel_dtype};
use crate::schedule::{KernelClass, Schedule};
use crate::text::{Cursor, ParseError};
use crate::{DType, graph};
use std::fmt;

/// What launching one fused kernel needs, short of its code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelManifest {
    /// The fused kernel's name (`<graph>_k<i>`).
    pub name: String,
    /// The value the kernel writes.
    pub output: Value,
    /// The dtype that decided the default schedule ([`kernel_dtype`]).
    pub dtype: DType,
    /// The root's first operand, if any (a matmul's left operand: its last dim is K).
    pub input: Option<Value>,
    /// The tensors the kernel takes, in ABI order; the last is `output`.
    pub bindings: Vec<Binding>,
    /// The default schedule (its class is the kernel's).
    pub schedule: Schedule,
}

impl KernelManifest {
    /// The manifest of kernel `i` of a compiled graph.
    ///
    /// ```
    /// use tessera_ir::{graph, manifest::KernelManifest, pipeline};
    /// let g = graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}").unwrap();
    /// let c = pipeline::compile(&g, &Default::default()).unwrap();
    /// let m = KernelManifest::of(&c, 0);
    /// let text = m.display(&c.graph).to_string();
    /// assert!(text.starts_with("kernel @sm_k0 out=%1 dtype=f32 input=%x bindings=[%x: 2, %1: 2] class=rowwise"));
    /// assert_eq!(KernelManifest::parse(&text, &c.graph).unwrap(), m);
    /// ```
    pub fn of(c: &Compiled, i: usize) -> KernelManifest {
        let k = &c.kernels[i];
        KernelManifest {
            name: k.fused.name.clone(),
            output: k.fused.output,
            dtype: kernel_dtype(&c.graph, &k.fused),
            input: c.graph.node(k.fused.root).args.first().copied(),
            bindings: k.lowered.bindings.clone(),
            schedule: k.schedule.clone(),
        }
    }

    /// Every kernel's manifest, in execution order.
    pub fn all(c: &Compiled) -> Vec<KernelManifest> {
        (0..c.kernels.len()).map(|i| Self::of(c, i)).collect()
    }

    /// The kernel's class.
    pub fn class(&self) -> KernelClass {
        self.schedule.class
    }

    /// The text form, naming values as `g` prints them.
    pub fn display<'a>(&'a self, g: &'a Graph) -> impl fmt::Display + 'a {
        Shown(self, g)
    }

    /// Parses the text form against the graph it belongs to, and verifies it.
    pub fn parse(src: &str, g: &Graph) -> Result<KernelManifest, ParseError> {
        let mut c = Cursor::new(src)?;
        c.expect_kw("kernel")?;
        let name = c.symbol()?;
        let key = |c: &mut Cursor, k: &str| -> Result<(), ParseError> {
            c.expect_kw(k)?;
            c.expect("=")
        };
        let value = |c: &mut Cursor| -> Result<Value, ParseError> {
            let n = c.value()?;
            value_named(g, &n).ok_or_else(|| c.error(format!("no value `%{n}` in @{}", g.name)))
        };
        key(&mut c, "out")?;
        let output = value(&mut c)?;
        key(&mut c, "dtype")?;
        let d = c.ident()?;
        let dtype = DType::parse(&d).ok_or_else(|| c.error(format!("unknown dtype `{d}`")))?;
        key(&mut c, "input")?;
        let input = if c.eat_kw("none") {
            None
        } else {
            Some(value(&mut c)?)
        };
        key(&mut c, "bindings")?;
        let bindings = c.list("[", "]", |c| {
            let v = value(c)?;
            c.expect(":")?;
            let view_rank = c.usize()?;
            // `rank/tail` when trailing dims are merged first (see `Binding::view`)
            let tail = if c.eat("/") { c.usize()? } else { 1 };
            Ok(Binding {
                value: v,
                view_rank,
                tail,
            })
        })?;
        key(&mut c, "class")?;
        let cn = c.ident()?;
        let class =
            KernelClass::parse(&cn).ok_or_else(|| c.error(format!("unknown class `{cn}`")))?;
        key(&mut c, "tile")?;
        let tile = c.list("[", "]", |c| c.usize().map(|x| x as u32))?;
        key(&mut c, "warps")?;
        let warps = c.usize()? as u32;
        key(&mut c, "stages")?;
        let stages = c.usize()? as u32;
        key(&mut c, "vector")?;
        let vector = c.usize()? as u32;
        if !c.at_end() {
            return Err(c.error(format!("unexpected {}", c.peek())));
        }
        let m = KernelManifest {
            name,
            output,
            dtype,
            input,
            bindings,
            schedule: Schedule {
                class,
                tile,
                warps,
                stages,
                vector,
            },
        };
        m.verify(g).map_err(|e| c.error(e))?;
        Ok(m)
    }

    /// Checks the manifest against its graph: the output is a computed value and the last
    /// binding, every binding is a parameter or a computed value with a view rank of 1 to 3
    /// and no more than its rank allows to merge, and the schedule is valid.
    pub fn verify(&self, g: &Graph) -> Result<(), String> {
        let who = format!("kernel @{}", self.name);
        if matches!(g.node(self.output).op, Op::Param { .. }) {
            return Err(format!(
                "{who}: writes parameter {}",
                g.value_name(self.output)
            ));
        }
        if self.bindings.last().map(|b| b.value) != Some(self.output) {
            return Err(format!(
                "{who}: the last binding must be the output {}",
                g.value_name(self.output)
            ));
        }
        for b in &self.bindings {
            if !(1..=3).contains(&b.view_rank) {
                return Err(format!(
                    "{who}: {} has view rank {} (1 to 3)",
                    g.value_name(b.value),
                    b.view_rank
                ));
            }
        }
        crate::schedule::verify(&self.schedule).map_err(|e| format!("{who}: {}", e.join("; ")))?;
        Ok(())
    }
}

struct Shown<'a>(&'a KernelManifest, &'a Graph);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, g) = (self.0, self.1);
        let bindings: Vec<String> = m
            .bindings
            .iter()
            .map(|b| match b.tail {
                0 | 1 => format!("{}: {}", g.value_name(b.value), b.view_rank),
                t => format!("{}: {}/{t}", g.value_name(b.value), b.view_rank),
            })
            .collect();
        let tile: Vec<String> = m.schedule.tile.iter().map(|t| t.to_string()).collect();
        write!(
            f,
            "kernel @{} out={} dtype={} input={} bindings=[{}] class={} tile=[{}] warps={} stages={} vector={}",
            m.name,
            g.value_name(m.output),
            m.dtype,
            m.input.map_or("none".into(), |v| g.value_name(v)),
            bindings.join(", "),
            m.schedule.class.name(),
            tile.join(", "),
            m.schedule.warps,
            m.schedule.stages,
            m.schedule.vector
        )
    }
}

/// The value `g` prints as `%name`: a parameter's name, or a node index.
fn value_named(g: &Graph, name: &str) -> Option<Value> {
    if let Some(p) = g
        .params
        .iter()
        .find(|p| matches!(&g.node(**p).op, graph::Op::Param { name: n, .. } if n == name))
    {
        return Some(*p);
    }
    let i: u32 = name.parse().ok()?;
    let v = Value(i);
    (v.index() < g.nodes.len() && g.value_name(v) == format!("%{name}")).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{CompileOptions, compile};

    const GRAPHS: &[&str] = &[
        "graph @lin(%x: bf16[M, K], %w: bf16[K, N], %b: f32[N]) -> f32[M, N] {\n  %3 = matmul %x, %w : f32[M, N]\n  %4 = add %3, %b : f32[M, N]\n  %5 = gelu %4 : f32[M, N]\n  return %5\n}",
        "graph @two(%x: f32[B, R, C], %g: f32[C], %b: f32[C]) -> f32[B, C, R] {\n  %3 = softmax %x : f32[B, R, C]\n  %4 = exp %3 : f32[B, R, C]\n  %5 = layernorm %4, %g, %b eps=0.00001 : f32[B, R, C]\n  %6 = transpose %5 : f32[B, C, R]\n  return %6\n}",
    ];

    #[test]
    fn manifests_round_trip_at_every_fusion_depth() {
        for src in GRAPHS {
            let g = graph::parse(src).unwrap();
            for depth in [None, Some(0), Some(1)] {
                let opts = CompileOptions {
                    fusion_depth: depth,
                    ..Default::default()
                };
                let c = compile(&g, &opts).unwrap();
                for m in KernelManifest::all(&c) {
                    let text = m.display(&g).to_string();
                    let back =
                        KernelManifest::parse(&text, &g).unwrap_or_else(|e| panic!("{text}: {e}"));
                    assert_eq!(back, m, "{text}");
                    assert_eq!(back.display(&g).to_string(), text);
                }
            }
        }
    }

    #[test]
    fn a_manifest_that_disagrees_with_its_graph_is_an_error() {
        let g = graph::parse(GRAPHS[0]).unwrap();
        let c = compile(&g, &Default::default()).unwrap();
        let text = KernelManifest::of(&c, 0).display(&g).to_string();
        let cases = [
            (text.replace("out=%5", "out=%9"), "no value `%9`"),
            (text.replace("out=%5", "out=%x"), "writes parameter %x"),
            (text.replace("%5: 2]", "%5: 4]"), "view rank 4"),
            (text.replace("%5: 2]", "%5: 2, %x: 2]"), "last binding"),
            (
                text.replace("class=matmul", "class=warp"),
                "unknown class `warp`",
            ),
            (text.replace("dtype=bf16", "dtype=f8"), "unknown dtype `f8`"),
        ];
        for (bad, want) in cases {
            assert_ne!(bad, text);
            let e = KernelManifest::parse(&bad, &g).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
