//! All-reduce bus bandwidth (nccl-tests definition: busbw = bytes/time × 2(n−1)/n) of the local
//! backend (ring and tree, n threads), against this machine's memcpy bandwidth, at 1–256 MiB.
//!
//! Run: `cargo bench --bench allreduce` (MPI: `mpirun -np 4 .../examples/mpi_bench`).

use std::time::Instant;
use tessera_dist::{Algorithm, CollectiveKind, Communicator, LocalComm, ReduceOp, bus_bandwidth};

fn best(reps: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..reps).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn memcpy_gbs(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let t = best(5, || {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&dst);
        t.elapsed().as_secs_f64()
    });
    bytes as f64 / t / 1e9
}

fn allreduce_busbw(n: usize, bytes: usize, algo: Algorithm) -> f64 {
    let len = bytes / 4;
    let times = LocalComm::run(n, |c| {
        let mut x = vec![1.0f32; len];
        c.all_reduce(&mut x, ReduceOp::Sum, algo)?; // warm-up, page faults
        Ok(best(3, || {
            c.barrier().unwrap();
            let t = Instant::now();
            c.all_reduce(&mut x, ReduceOp::Sum, algo).unwrap();
            t.elapsed().as_secs_f64()
        }))
    })
    .expect("all-reduce");
    let t = times.into_iter().fold(0.0, f64::max);
    bus_bandwidth(CollectiveKind::AllReduce, bytes, n, t) / 1e9
}

fn main() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("local backend all-reduce f32, {cores} cores; GB/s (busbw = algbw × 2(n−1)/n)");
    println!(
        "{:>8} {:>9} {:>11} {:>11} {:>11} {:>11}",
        "MiB", "memcpy", "ring n=2", "tree n=2", "ring n=4", "ring n=8"
    );
    for mib in [1usize, 4, 16, 64, 256] {
        let bytes = mib << 20;
        let m = memcpy_gbs(bytes);
        let r2 = allreduce_busbw(2, bytes, Algorithm::Ring);
        let t2 = allreduce_busbw(2, bytes, Algorithm::Tree);
        let r4 = allreduce_busbw(4, bytes, Algorithm::Ring);
        let r8 = if mib <= 64 {
            allreduce_busbw(8, bytes, Algorithm::Ring)
        } else {
            f64::NAN
        };
        println!("{mib:>8} {m:>9.2} {r2:>11.2} {t2:>11.2} {r4:>11.2} {r8:>11.2}");
    }
}
