//! The `tessera-sim` command line; see `tessera_sim::cli`.

use clap::Parser;

fn main() {
    let cli = tessera_sim::cli::Cli::parse();
    let mut out = std::io::stdout().lock();
    std::process::exit(tessera_sim::cli::main_with(cli, &mut out));
}
