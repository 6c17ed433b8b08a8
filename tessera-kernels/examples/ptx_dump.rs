//! Writes every precompiled PTX module of the kernel library to a folder, plus `index.tsv`
//! (file, kernel, fused kernel, schedule, arch, threads, dynamic shared memory).
//!
//! Run: `cargo run -p tessera-kernels --example ptx_dump -- target/ptx`

use std::fmt::Write;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/ptx".into());
    let dir = std::path::Path::new(&dir);
    let n = tessera_kernels::ptx::write_all(dir)?;
    let mut index = String::from("file\tkernel\tfused\tschedule\tarch\tthreads\tdyn_smem\n");
    for p in tessera_kernels::ptx::PRECOMPILED {
        let _ = writeln!(
            index,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            p.file, p.kernel, p.fused, p.schedule, p.arch, p.threads, p.dyn_smem
        );
    }
    std::fs::write(dir.join("index.tsv"), index)?;
    println!("wrote {n} PTX modules to {}", dir.display());
    Ok(())
}
