//! Graph IR printer.

use super::{Graph, Op};
use crate::text::fmt_float;
use std::fmt::{self, Write};

/// Writes `g`; `notes` attaches `; error: ...` comments under node lines (used by the verifier).
pub(crate) fn write_graph(f: &mut dyn Write, g: &Graph, notes: &[(usize, String)]) -> fmt::Result {
    write!(f, "graph @{}(", g.name)?;
    for (i, p) in g.params.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{}: {}", g.value_name(*p), g.ty(*p))?;
    }
    let out_ty = g
        .nodes
        .get(g.output.index())
        .map(|n| n.ty.to_string())
        .unwrap_or_else(|| "?".into());
    writeln!(f, ") -> {out_ty} {{")?;
    for (i, n) in g.nodes.iter().enumerate() {
        if !matches!(n.op, Op::Param { .. }) {
            write!(f, "  %{i} = {}", n.op.name())?;
            let args: Vec<String> = n.args.iter().map(|a| g.value_name(*a)).collect();
            if !args.is_empty() {
                write!(f, " {}", args.join(", "))?;
            }
            match &n.op {
                Op::Const { value, .. } => write!(f, " {}", fmt_float(*value))?,
                Op::Reduce {
                    axes,
                    keepdim,
                    policy,
                    ..
                } => {
                    let axes: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
                    write!(
                        f,
                        " axes=[{}] keepdim={keepdim} policy={policy}",
                        axes.join(", ")
                    )?;
                }
                Op::LayerNorm { eps, policy } | Op::RmsNorm { eps, policy } => {
                    write!(f, " eps={} policy={policy}", fmt_float(*eps))?
                }
                Op::Attention {
                    scale,
                    causal,
                    policy,
                } => write!(
                    f,
                    " scale={} causal={causal} policy={policy}",
                    fmt_float(*scale)
                )?,
                Op::Conv2d(c) => write!(
                    f,
                    " stride=[{}, {}] padding=[{}, {}] dilation=[{}, {}] groups={}",
                    c.stride[0],
                    c.stride[1],
                    c.padding[0],
                    c.padding[1],
                    c.dilation[0],
                    c.dilation[1],
                    c.groups
                )?,
                Op::Fft { axis, .. } => write!(f, " axis={axis}")?,
                Op::Pad { lo, hi, interior } => {
                    let l = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(", ");
                    let (lo, hi) = (
                        l(&mut lo.iter().map(|x| x.to_string())),
                        l(&mut hi.iter().map(|x| x.to_string())),
                    );
                    write!(f, " lo=[{lo}] hi=[{hi}]")?;
                    if interior.iter().any(|&i| i != 0) {
                        let i = l(&mut interior.iter().map(|x| x.to_string()));
                        write!(f, " interior=[{i}]")?
                    }
                }
                Op::SpectralMul { groups } => write!(f, " groups={groups}")?,
                Op::Matmul { acc, policy } => write!(f, " acc={acc} policy={policy}")?,
                Op::Softmax { axis, policy } => {
                    // The last axis is the default and is left out.
                    let last = n
                        .args
                        .first()
                        .and_then(|a| g.nodes.get(a.index()))
                        .map(|a| a.ty.shape.rank().saturating_sub(1));
                    if last != Some(*axis) {
                        write!(f, " axis={axis}")?;
                    }
                    write!(f, " policy={policy}")?
                }
                Op::Permute(perm) => {
                    let p: Vec<String> = perm.iter().map(|a| a.to_string()).collect();
                    write!(f, " perm=[{}]", p.join(", "))?
                }
                _ => {}
            }
            writeln!(f, " : {}", n.ty)?;
        }
        for (_, msg) in notes.iter().filter(|(at, _)| *at == i) {
            writeln!(f, "  ; error: {msg}")?;
        }
    }
    writeln!(f, "  return {}", g.value_name(g.output))?;
    f.write_str("}\n")
}
