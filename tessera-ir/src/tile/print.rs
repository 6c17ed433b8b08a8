//! Tile IR printer.

use super::{GridDim, Inst, Kernel, Op, TValue};
use crate::text::fmt_float;
use std::fmt::{self, Write};

fn v(x: TValue) -> String {
    format!("%{}", x.0)
}

fn list(xs: &[TValue]) -> String {
    xs.iter().map(|x| v(*x)).collect::<Vec<_>>().join(", ")
}

pub(crate) fn write_grid_dim(f: &mut dyn Write, k: &Kernel, g: &GridDim) -> fmt::Result {
    if g.dims.is_empty() {
        return write!(f, "{}", if g.tile == 1 { 1 } else { 0 });
    }
    let prod: Vec<String> = g
        .dims
        .iter()
        .map(|&(p, a)| format!("dim(%{}, {a})", k.params[p].name))
        .collect();
    write!(f, "cdiv({}, {})", prod.join(" * "), g.tile)
}

/// Writes the kernel; `notes` puts `; error: ...` lines under the given instructions.
pub(crate) fn write_kernel(f: &mut dyn Write, k: &Kernel, notes: &[(Inst, String)]) -> fmt::Result {
    write!(f, "kernel @{}(", k.name)?;
    for (i, p) in k.params.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "%{}: {}<{}>", p.name, p.dtype, p.rank)?;
    }
    f.write_str(") grid=[")?;
    for (i, g) in k.grid.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_grid_dim(f, k, g)?;
    }
    f.write_str("]")?;
    if k.policy != crate::NumericsPolicy::Fast {
        write!(f, " numerics={}", k.policy)?;
    }
    f.write_str(" {\n")?;
    write_block(f, k, &k.body, 1, notes)?;
    f.write_str("}\n")
}

fn write_block(
    f: &mut dyn Write,
    k: &Kernel,
    block: &[Inst],
    depth: usize,
    notes: &[(Inst, String)],
) -> fmt::Result {
    let pad = "  ".repeat(depth);
    for &i in block {
        let d = k.inst(i);
        f.write_str(&pad)?;
        if !d.results.is_empty() {
            write!(f, "{} = ", list(&d.results))?;
        }
        let p = |idx: usize| format!("%{}", k.params[idx].name);
        match &d.op {
            Op::ProgramId(a) => write!(f, "program_id {a}")?,
            Op::Const(x) => write!(f, "const {}", fmt_float(*x))?,
            Op::Dim { param, axis } => write!(f, "dim {}, {axis}", p(*param))?,
            Op::Arange => f.write_str("arange")?,
            Op::Full(x) => write!(f, "full {}", fmt_float(*x))?,
            Op::Expand { a, axis } => write!(f, "expand {} axis={axis}", v(*a))?,
            Op::Reduce {
                a, axis, policy, ..
            } => write!(f, "{} {} axis={axis} policy={policy}", d.op.name(), v(*a))?,
            Op::Load {
                param,
                index,
                mask,
                other,
            } => {
                write!(f, "load {}[{}]", p(*param), list(index))?;
                if let Some(m) = mask {
                    write!(f, " mask {}", v(*m))?;
                }
                if *other != 0.0 || other.is_sign_negative() {
                    write!(f, " other {}", fmt_float(*other))?;
                }
            }
            Op::Im2col {
                param,
                row,
                col,
                chan,
                geom: g,
            } => write!(
                f,
                "im2col {}[{}, {}, {}] height={} kernel=[{}, {}] cg={} stride=[{}, {}] padding=[{}, {}] dilation=[{}, {}]",
                p(*param),
                v(*row),
                v(*col),
                v(*chan),
                g.height,
                g.kernel[0],
                g.kernel[1],
                g.cg,
                g.stride[0],
                g.stride[1],
                g.padding[0],
                g.padding[1],
                g.dilation[0],
                g.dilation[1]
            )?,
            Op::Store {
                param,
                index,
                value,
                mask,
            } => {
                write!(f, "store {}[{}], {}", p(*param), list(index), v(*value))?;
                if let Some(m) = mask {
                    write!(f, " mask {}", v(*m))?;
                }
            }
            Op::For {
                iv,
                lo,
                hi,
                step,
                inits,
                args,
                body,
            } => {
                write!(
                    f,
                    "for {} = {} to {} step {step} iter(",
                    v(*iv),
                    v(*lo),
                    v(*hi)
                )?;
                for (j, (a, init)) in args.iter().zip(inits).enumerate() {
                    if j > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {} = {}", v(*a), k.ty(*a), v(*init))?;
                }
                f.write_str(") {\n")?;
                write_block(f, k, body, depth + 1, notes)?;
                write!(f, "{pad}}}")?;
            }
            Op::Yield(xs) => write!(f, "yield {}", list(xs))?,
            op => write!(f, "{} {}", op.name(), list(&op.operands()))?,
        }
        if let [r] = d.results.as_slice()
            && !matches!(d.op, Op::For { .. })
        {
            write!(f, " : {}", k.ty(*r))?;
        }
        f.write_str("\n")?;
        for (_, m) in notes.iter().filter(|(at, _)| *at == i) {
            writeln!(f, "{pad}; error: {m}")?;
        }
    }
    Ok(())
}
