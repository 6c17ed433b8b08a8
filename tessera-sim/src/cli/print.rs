//! Printing a [`Report`] the way compute-sanitizer does: one block per finding, prefixed with
//! `=========`, then an error summary.

use crate::{DevicePtr, Memory, Report};
use std::io::{self, Write};

const P: &str = "=========";

/// Prints every finding of `r`, the statistics, the error summary and (when `counters`) the
/// performance counters.
pub fn report(out: &mut impl Write, entry: &str, r: &Report, counters: bool) -> io::Result<()> {
    writeln!(out, "{P} TESSERA-SIM")?;
    for f in &r.findings {
        let [cx, cy, cz] = f.cta;
        let [tx, ty, tz] = f.thread;
        writeln!(
            out,
            "{P} {} in entry `{entry}` at line {}",
            f.kind.title(),
            f.line
        )?;
        writeln!(out, "{P}     {}", f.instruction.trim())?;
        writeln!(
            out,
            "{P}     by thread ({tx},{ty},{tz}) in block ({cx},{cy},{cz})"
        )?;
        if let Some(l) = &f.location {
            writeln!(out, "{P}     at {l}")?;
        }
        writeln!(out, "{P}     {}", f.message)?;
        if f.count > 1 {
            writeln!(out, "{P}     ({} occurrences)", f.count)?;
        }
        writeln!(out, "{P}")?;
    }
    if r.findings_dropped > 0 {
        writeln!(
            out,
            "{P} {} further occurrences not listed (raise the finding limit)",
            r.findings_dropped
        )?;
    }
    let s = &r.stats;
    writeln!(
        out,
        "{P} {} CTAs, {} warp instructions, {} thread instructions, {} barriers",
        s.ctas, s.warp_instructions, s.thread_instructions, s.barriers
    )?;
    writeln!(out, "{P} ERROR SUMMARY: {} errors", r.error_count())?;
    if counters {
        let c = &r.counters;
        writeln!(out, "counters:")?;
        for (name, a) in [
            ("shared loads", c.shared_loads),
            ("shared stores", c.shared_stores),
            ("ldmatrix", c.ldmatrix),
        ] {
            writeln!(
                out,
                "  {name}: {} requests, {} wavefronts (ideal {}), {} bank conflicts",
                a.requests,
                a.wavefronts,
                a.ideal_wavefronts,
                a.bank_conflicts()
            )?;
        }
        for (name, g) in [
            ("global loads", c.global_loads),
            ("global stores", c.global_stores),
        ] {
            writeln!(
                out,
                "  {name}: {} requests, {} sectors (ideal {}), {:.2} sectors/request, efficiency {:.0}%",
                g.requests,
                g.sectors,
                g.ideal_sectors,
                g.sectors_per_request(),
                100.0 * g.efficiency()
            )?;
        }
        writeln!(
            out,
            "  branches: {} ({} divergent); barrier stall steps: {}",
            c.branches, c.divergent_branches, c.barrier_stall_steps
        )?;
        writeln!(out, "  instruction mix: {:?}", c.mix)?;
    }
    Ok(())
}

/// Prints each buffer's contents as `ty` (`f32`, `u32` or `s32`).
pub fn buffers(
    out: &mut impl Write,
    mem: &Memory,
    bufs: &[(String, DevicePtr, usize)],
    ty: &str,
) -> io::Result<()> {
    for (name, p, n) in bufs {
        let mut b = vec![0u8; *n];
        if mem.download(*p, &mut b).is_err() {
            continue;
        }
        let vals: Vec<String> = b
            .chunks_exact(4)
            .map(|c| {
                let w = [c[0], c[1], c[2], c[3]];
                match ty {
                    "u32" => u32::from_le_bytes(w).to_string(),
                    "s32" => i32::from_le_bytes(w).to_string(),
                    _ => f32::from_le_bytes(w).to_string(),
                }
            })
            .collect();
        writeln!(out, "{name}: [{}]", vals.join(", "))?;
    }
    Ok(())
}
