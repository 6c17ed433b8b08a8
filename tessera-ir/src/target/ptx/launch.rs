//! The launch header of an emitted kernel as text: what a launcher needs besides the module
//! text (entry, arch, threads, dynamic shared memory, grid expression, parameters), so PTX
//! embedded at build time can be launched without running the emitter again.
//!
//! Text form (one line):
//!
//! ```text
//! ptx @softmax_k0 sm_80 threads=256 dyn_smem=0 grid=[cdiv(dim(0, 0), 8), 1, 1] params=[%x: 2, %_1: 2]
//! ```
//!
//! A default schedule built with fewer pipeline stages than it asked for (see
//! `PtxKernel::lowered_stages`) adds `stages=[requested, used]` after `dyn_smem`.
//!
//! A grid dimension is `1`, `0` or `cdiv(dim(p, a) * …, tile)` over parameter `p`'s view axis
//! `a`, as in Tile IR; each parameter is `%name: view rank`, in ABI order.

use super::{Arch, PtxKernel};
use crate::text::{Cursor, ParseError, Tok};
use crate::tile::GridDim;
use std::fmt::Write;

/// The launch header of `k` (see the module docs for the form).
///
/// ```
/// use tessera_ir::{graph, pipeline, target::ptx};
/// let g = graph::parse("graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}").unwrap();
/// let c = pipeline::compile(&g, &Default::default()).unwrap();
/// let k = ptx::emit(&c.kernels[0].lowered.kernel, &c.kernels[0].schedule, ptx::Arch::Sm80).unwrap();
/// let header = ptx::print_launch(&k);
/// assert!(header.starts_with("ptx @sm_k0 sm_80 threads="));
/// assert_eq!(ptx::parse_launch(&header, &k.text).unwrap(), k);
/// ```
pub fn print_launch(k: &PtxKernel) -> String {
    let mut s = format!(
        "ptx @{} {} threads={} dyn_smem={}",
        k.entry,
        k.arch.target(),
        k.threads,
        k.dyn_smem
    );
    if let Some((requested, used)) = k.lowered_stages {
        let _ = write!(s, " stages=[{requested}, {used}]");
    }
    s.push_str(" grid=[");
    for (i, g) in k.grid.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        if g.dims.is_empty() {
            s.push_str(if g.tile == 1 { "1" } else { "0" });
        } else {
            let dims: Vec<String> = g
                .dims
                .iter()
                .map(|(p, a)| format!("dim({p}, {a})"))
                .collect();
            let _ = write!(s, "cdiv({}, {})", dims.join(" * "), g.tile);
        }
    }
    s.push_str("] params=[");
    let params: Vec<String> = k.params.iter().map(|(n, r)| format!("%{n}: {r}")).collect();
    s.push_str(&params.join(", "));
    s.push(']');
    s
}

/// Rebuilds a [`PtxKernel`] from its launch header and module text, checking that they agree:
/// the module targets the header's arch and declares its entry, the grid names existing
/// parameters and axes.
pub fn parse_launch(header: &str, text: &str) -> Result<PtxKernel, ParseError> {
    let mut c = Cursor::new(header)?;
    c.expect_kw("ptx")?;
    let entry = c.symbol()?;
    let arch_name = c.ident()?;
    let arch =
        Arch::parse(&arch_name).ok_or_else(|| c.error(format!("unknown arch `{arch_name}`")))?;
    let key = |c: &mut Cursor, k: &str| -> Result<(), ParseError> {
        c.expect_kw(k)?;
        c.expect("=")
    };
    key(&mut c, "threads")?;
    let threads = u32_of(&mut c)?;
    key(&mut c, "dyn_smem")?;
    let dyn_smem = u32_of(&mut c)?;
    let lowered_stages = if c.eat_kw("stages") {
        c.expect("=")?;
        let st = c.list("[", "]", u32_of)?;
        match st[..] {
            [requested, used] => Some((requested, used)),
            _ => {
                return Err(c.error(format!(
                    "stages=[requested, used] takes 2 numbers, not {}",
                    st.len()
                )));
            }
        }
    } else {
        None
    };
    key(&mut c, "grid")?;
    let grid = c.list("[", "]", grid_dim)?;
    let grid: [GridDim; 3] = grid
        .try_into()
        .map_err(|g: Vec<GridDim>| c.error(format!("the grid has {} dims, not 3", g.len())))?;
    key(&mut c, "params")?;
    let params = c.list("[", "]", |c| {
        let name = c.value()?;
        c.expect(":")?;
        Ok((name, c.usize()?))
    })?;
    if !c.at_end() {
        return Err(c.error(format!("unexpected {}", c.peek())));
    }
    for g in &grid {
        for &(p, a) in &g.dims {
            if params.get(p).is_none_or(|(_, r)| a >= *r) {
                return Err(c.error(format!(
                    "the grid reads dim({p}, {a}) but the kernel has {} parameter(s) of ranks {:?}",
                    params.len(),
                    params.iter().map(|p| p.1).collect::<Vec<_>>()
                )));
            }
        }
    }
    let target = format!(".target {}", arch.target());
    if !text.lines().any(|l| l.trim() == target) {
        return Err(c.error(format!("the module text does not declare `{target}`")));
    }
    if !text.contains(&format!(".entry {entry}(")) {
        return Err(c.error(format!("the module text has no entry `{entry}`")));
    }
    Ok(PtxKernel {
        entry,
        arch,
        text: text.to_string(),
        threads,
        dyn_smem,
        grid,
        params,
        lowered_stages,
    })
}

fn u32_of(c: &mut Cursor) -> Result<u32, ParseError> {
    let n = c.usize()?;
    u32::try_from(n).map_err(|_| c.error(format!("{n} does not fit 32 bits")))
}

fn grid_dim(c: &mut Cursor) -> Result<GridDim, ParseError> {
    if let Tok::Int(i) = c.peek().clone() {
        c.next();
        return match i {
            0 | 1 => Ok(GridDim {
                dims: vec![],
                tile: i as u32,
            }),
            _ => Err(c.error(format!("a constant grid dim is 0 or 1, not {i}"))),
        };
    }
    c.expect_kw("cdiv")?;
    c.expect("(")?;
    let mut dims = Vec::new();
    loop {
        c.expect_kw("dim")?;
        c.expect("(")?;
        let p = c.usize()?;
        c.expect(",")?;
        let a = c.usize()?;
        c.expect(")")?;
        dims.push((p, a));
        if !c.eat("*") {
            break;
        }
    }
    c.expect(",")?;
    let tile = u32_of(c)?;
    c.expect(")")?;
    Ok(GridDim { dims, tile })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{graph, pipeline};

    fn kernels() -> Vec<PtxKernel> {
        let srcs = [
            "graph @sm(%x: f32[R, C]) -> f32[R, C] {\n  %1 = softmax %x : f32[R, C]\n  return %1\n}",
            "graph @mm(%a: bf16[M, K], %b: bf16[K, N]) -> f32[M, N] {\n  %2 = matmul %a, %b : f32[M, N]\n  return %2\n}",
            "graph @ew(%x: f32[B, R, C], %y: f32[B, R, C]) -> f32[B, R, C] {\n  %2 = add %x, %y : f32[B, R, C]\n  %3 = exp %2 : f32[B, R, C]\n  return %3\n}",
        ];
        let mut out = Vec::new();
        for src in srcs {
            let g = graph::parse(src).unwrap();
            let c = pipeline::compile(&g, &Default::default()).unwrap();
            for k in &c.kernels {
                for arch in Arch::ALL {
                    out.push(super::super::emit(&k.lowered.kernel, &k.schedule, arch).unwrap());
                }
            }
        }
        out
    }

    #[test]
    fn launch_headers_round_trip() {
        for k in kernels() {
            let h = print_launch(&k);
            assert_eq!(parse_launch(&h, &k.text).unwrap(), k, "{h}");
            assert_eq!(print_launch(&parse_launch(&h, &k.text).unwrap()), h);
        }
    }

    #[test]
    fn lowered_stages_round_trip() {
        let mut k = kernels()[3].clone();
        k.lowered_stages = Some((4, 2));
        let h = print_launch(&k);
        assert!(
            h.contains(" dyn_smem=") && h.contains(" stages=[4, 2] grid=["),
            "{h}"
        );
        assert_eq!(parse_launch(&h, &k.text).unwrap(), k, "{h}");
        let bad = h.replace("stages=[4, 2]", "stages=[4]");
        let e = parse_launch(&bad, &k.text).unwrap_err().to_string();
        assert!(e.contains("takes 2 numbers, not 1"), "{e}");
    }

    #[test]
    fn a_header_that_disagrees_with_its_module_is_an_error() {
        let k = &kernels()[0];
        let h = print_launch(k);
        let other_arch = h.replace(" sm_80 ", " sm_90a ");
        let e = parse_launch(&other_arch, &k.text).unwrap_err().to_string();
        assert!(e.contains("does not declare `.target sm_90a`"), "{e}");
        let other_entry = h.replace("ptx @sm_k0", "ptx @nope");
        let e = parse_launch(&other_entry, &k.text).unwrap_err().to_string();
        assert!(e.contains("no entry `nope`"), "{e}");
        let bad_axis = h.replace("dim(0, 0)", "dim(0, 7)");
        assert_ne!(bad_axis, h);
        let e = parse_launch(&bad_axis, &k.text).unwrap_err().to_string();
        assert!(e.contains("dim(0, 7)"), "{e}");
        let e = parse_launch("ptx @sm_k0 sm_80 threads=1", &k.text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected `dyn_smem`"), "{e}");
    }
}
