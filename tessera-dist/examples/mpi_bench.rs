//! MPI all-reduce bus bandwidth at 1–256 MiB (nccl-tests definition).
//! Run: `mpirun --allow-run-as-root --oversubscribe -np 4 target/release/examples/mpi_bench`.

use std::time::Instant;
use tessera_dist::mpi_backend::MpiWorld;
use tessera_dist::{Algorithm, CollectiveKind, Communicator, ReduceOp, bus_bandwidth};

fn main() {
    let world = MpiWorld::init().expect("MPI init");
    let c = world.comm();
    if c.rank() == 0 {
        println!("MPI all-reduce f32 on {} ranks; GB/s", c.size());
        println!("{:>8} {:>10} {:>10}", "MiB", "algbw", "busbw");
    }
    for mib in [1usize, 4, 16, 64, 256] {
        let bytes = mib << 20;
        let mut x = vec![1.0f32; bytes / 4];
        c.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Auto)
            .unwrap();
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            c.barrier().unwrap();
            let t = Instant::now();
            c.all_reduce(&mut x, ReduceOp::Sum, Algorithm::Auto)
                .unwrap();
            let mut dt = [t.elapsed().as_secs_f64() as f32];
            c.all_reduce(&mut dt, ReduceOp::Max, Algorithm::Auto)
                .unwrap();
            best = best.min(dt[0] as f64);
        }
        if c.rank() == 0 {
            let bus = bus_bandwidth(CollectiveKind::AllReduce, bytes, c.size(), best) / 1e9;
            println!("{mib:>8} {:>10.2} {bus:>10.2}", bytes as f64 / best / 1e9);
        }
    }
    drop(world);
}
