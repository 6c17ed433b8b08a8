//! The `tessera-sim` command line (feature `cli`): `run` launches an entry of a PTX file with
//! the buffers and parameters of a JSON launch file ([`launch_file`]) and prints every finding
//! like compute-sanitizer ([`print`](mod@print)); `info` lists a module's entries.
//!
//! ```text
//! tessera-sim run kernel.ptx --entry k --grid 5 --block 256 --smem 1024 --args launch.json
//! tessera-sim info kernel.ptx
//! ```
//!
//! `run` exits with 0 when the launch is clean, 1 when there are findings, 2 when the launch
//! could not run (a parse error, a bad launch file or configuration).

pub mod launch_file;
pub mod print;

use crate::{Checks, LaunchConfig, Memory, Module, Options};
use clap::{Parser, Subcommand};
use launch_file::LaunchFile;
use std::path::PathBuf;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "tessera-sim",
    about = "Run any PTX kernel on the CPU and check it for GPU bugs"
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// A subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Launch an entry and print every finding, the statistics and (with --counters) the
    /// performance counters.
    Run(RunArgs),
    /// List the entries of a module with their parameters and whether they can run.
    Info {
        /// The PTX file.
        ptx: PathBuf,
    },
}

/// `tessera-sim run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The PTX file.
    pub ptx: PathBuf,
    /// The entry to launch (default: the module's only entry).
    #[arg(long)]
    pub entry: Option<String>,
    /// Grid dimensions: `X`, `X,Y` or `X,Y,Z`.
    #[arg(long, default_value = "1", value_parser = parse_dim3)]
    pub grid: [u32; 3],
    /// Block dimensions: `X`, `X,Y` or `X,Y,Z`.
    #[arg(long, default_value = "32", value_parser = parse_dim3)]
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory.
    #[arg(long, default_value_t = 0)]
    pub smem: u32,
    /// The JSON launch file (buffers and parameters); none for an entry without parameters.
    #[arg(long)]
    pub args: Option<PathBuf>,
    /// Turn the shared-memory checkers (races, uninitialized reads, cp.async) off.
    #[arg(long)]
    pub no_shared_checks: bool,
    /// Perturb `.approx` results within their error bounds, with this seed.
    #[arg(long)]
    pub perturb_approx: Option<u64>,
    /// Print the performance counters.
    #[arg(long)]
    pub counters: bool,
    /// Print each buffer's contents after the launch, as this type (f32, u32, s32).
    #[arg(long)]
    pub dump: Option<String>,
    /// Run CTAs one after another instead of on all cores.
    #[arg(long)]
    pub serial: bool,
}

fn parse_dim3(s: &str) -> Result<[u32; 3], String> {
    let parts: Vec<&str> = s.split([',', 'x']).collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("`{s}`: expected X, X,Y or X,Y,Z"));
    }
    let mut d = [1u32; 3];
    for (i, p) in parts.iter().enumerate() {
        d[i] = p
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: `{p}` is not a number"))?;
    }
    Ok(d)
}

/// Runs the command line, writing to `out`; returns the exit status.
pub fn main_with(cli: Cli, out: &mut impl std::io::Write) -> i32 {
    let r = match cli.command {
        Command::Run(a) => run(&a, out),
        Command::Info { ptx } => info(&ptx, out),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(out, "tessera-sim: error: {e}");
            2
        }
    }
}

type Error = Box<dyn std::error::Error>;

fn read(p: &PathBuf) -> Result<String, Error> {
    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()).into())
}

fn info(ptx: &PathBuf, out: &mut impl std::io::Write) -> Result<i32, Error> {
    let m = Module::parse(&read(ptx)?)?;
    writeln!(out, "target: {}", m.target().unwrap_or("(none)"))?;
    for e in m.entries() {
        let ps: Vec<String> = e
            .params
            .iter()
            .map(|p| format!("{} {}", p.ty, p.name))
            .collect();
        writeln!(out, "entry {}({})", e.name, ps.join(", "))?;
        writeln!(
            out,
            "    static shared {} B, local {} B/thread",
            e.static_shared_bytes, e.local_bytes
        )?;
        if let Some(u) = &e.unsupported {
            writeln!(out, "    cannot run: {u}")?;
        }
    }
    Ok(0)
}

fn run(a: &RunArgs, out: &mut impl std::io::Write) -> Result<i32, Error> {
    let m = Module::parse(&read(&a.ptx)?)?;
    let entry = match &a.entry {
        Some(e) => e.clone(),
        None => {
            let names: Vec<&str> = m.entries().map(|e| e.name.as_str()).collect();
            match names.as_slice() {
                [one] => one.to_string(),
                _ => {
                    return Err(
                        format!("--entry is needed: entries are {}", names.join(", ")).into(),
                    );
                }
            }
        }
    };
    let file = match &a.args {
        Some(p) => LaunchFile::parse(&read(p)?).map_err(|e| format!("{}: {e}", p.display()))?,
        None => LaunchFile::default(),
    };
    let mut mem = Memory::new();
    let alloc = file.allocate(&mut mem)?;
    let cfg = LaunchConfig {
        grid: a.grid,
        block: a.block,
        dyn_smem: a.smem,
    };
    let opts = Options {
        checks: Checks {
            shared: !a.no_shared_checks,
        },
        perturb_approx: a.perturb_approx,
        parallel: !a.serial,
        ..Options::default()
    };
    let report = m.launch(&mut mem, &entry, cfg, &alloc.params, &opts)?;
    print::report(out, &entry, &report, a.counters)?;
    if let Some(ty) = &a.dump {
        print::buffers(out, &mem, &alloc.buffers, ty)?;
    }
    Ok(if report.is_clean() { 0 } else { 1 })
}
