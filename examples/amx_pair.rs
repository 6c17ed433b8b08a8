//! Whether AMX scales from one thread to two on this machine: each of T threads (std threads,
//! released together by a barrier) runs a bare loop and the aggregate GFLOP/s is printed.
//! `chrt -f 50 cargo run --release --example amx_pair -- MODE T ITERS ROUNDS`, MODE one of
//! * `tdp`: four `tdpbf16ps` per step on tiles already loaded (no memory: the AMX unit alone;
//!   each 16×16×32 multiply-adds = 32768 flop);
//! * `tdpload`: the GEMM micro-kernel's step (`gemm/x86/amx.rs`: two A and two B tile loads,
//!   four `tdpbf16ps`) over 16 k-tiles of a packed A panel (32 KiB) and B strip (32 KiB), L1/L2
//!   resident, repeated;
//! * `fma`: 12 independent chains of `vfmadd231ps zmm` (32 flop each), for comparison.
//!
//! Prints each round's aggregate GFLOP/s (T × per-thread flop over the slowest thread's time)
//! and each thread's own rate with its A and B buffers' offsets within 4 KiB (`AMX_A_OFF`,
//! `AMX_B_OFF`: bytes to move A past a page start, B past A's end). Pin with `taskset -c N`
//! to time one vCPU. Exits with a message where the CPU or kernel lacks AMX (`tdp`, `tdpload`)
//! or AVX-512F (`fma`), and builds to a stub off x86-64 Linux. On the Xeon of 2026-11-28 (ARCHITECTURE.md, "bf16 GEMM paths by CPU",
//! am19) `tdp` ran ~1900 or ~4400 GFLOP/s per vCPU by the second, `fma` a steady ~155.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod bench {
    use std::arch::asm;
    use std::sync::{Arc, Barrier};
    use std::time::Instant;

    #[repr(C, align(64))]
    struct TileCfg([u8; 64]);

    fn cfg() -> TileCfg {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
        }
        TileCfg(c)
    }

    /// Asks the kernel for the AMX tile data state; false where the CPU or kernel has none.
    fn permission() -> bool {
        // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), integer arguments only.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                0x1023 as libc::c_long,
                18 as libc::c_long,
            )
        };
        r == 0
    }

    /// `iters` steps of four `tdpbf16ps` on loaded tiles; flop done.
    fn tdp(iters: usize, buf: &[u16]) -> f64 {
        let c = cfg();
        // SAFETY: AMX present (permission granted), tiles configured before use, released after;
        // `buf` holds at least 2 KiB.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) &c, options(nostack, readonly));
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "tileloadd tmm4, [{p} + {s}*1]",
                "tileloadd tmm5, [{p} + {s}*1]",
                "tileloadd tmm6, [{p} + {s}*1]",
                "tileloadd tmm7, [{p} + {s}*1]",
                p = in(reg) buf.as_ptr(), s = in(reg) 64usize, options(nostack, readonly)
            );
            asm!(
                "2:",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _, options(nomem, nostack)
            );
            asm!("tilerelease", options(nomem, nostack));
        }
        iters as f64 * 4.0 * 32768.0
    }

    /// `iters` passes over 16 k-tiles of a packed A panel and B strip, as `amx.rs`'s kernel.
    fn tdpload(iters: usize, a: &[u16], b: &[u16]) -> f64 {
        let c = cfg();
        // SAFETY: as `tdp`; `a` and `b` hold 16 × 2 KiB each.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) &c, options(nostack, readonly));
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nomem, nostack)
            );
            for _ in 0..iters {
                asm!(
                    "2:",
                    "tileloadd tmm4, [{a} + {s64}*1]",
                    "tileloadd tmm6, [{b} + {s128}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tileloadd tmm7, [{b} + {s128}*1 + 64]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "add {a}, 2048",
                    "add {b}, 2048",
                    "dec {n}",
                    "jnz 2b",
                    a = inout(reg) a.as_ptr() => _,
                    b = inout(reg) b.as_ptr() => _,
                    n = inout(reg) 16usize => _,
                    s64 = in(reg) 64usize,
                    s128 = in(reg) 128usize,
                    options(nostack, readonly)
                );
            }
            asm!("tilerelease", options(nomem, nostack));
        }
        iters as f64 * 16.0 * 4.0 * 32768.0
    }

    /// `iters` steps of 12 independent `vfmadd231ps zmm`.
    fn fma(iters: usize) -> f64 {
        // SAFETY: AVX-512F present (checked by the caller's CPU: this example is for AMX machines).
        unsafe {
            asm!(
                "vxorps xmm0, xmm0, xmm0",
                "vxorps xmm1, xmm1, xmm1",
                "vxorps xmm2, xmm2, xmm2",
                "vxorps xmm3, xmm3, xmm3",
                "vxorps xmm4, xmm4, xmm4",
                "vxorps xmm5, xmm5, xmm5",
                "vxorps xmm6, xmm6, xmm6",
                "vxorps xmm7, xmm7, xmm7",
                "vxorps xmm8, xmm8, xmm8",
                "vxorps xmm9, xmm9, xmm9",
                "vxorps xmm10, xmm10, xmm10",
                "vxorps xmm11, xmm11, xmm11",
                "vxorps xmm12, xmm12, xmm12",
                "vxorps xmm13, xmm13, xmm13",
                "2:",
                "vfmadd231ps zmm0, zmm12, zmm13",
                "vfmadd231ps zmm1, zmm12, zmm13",
                "vfmadd231ps zmm2, zmm12, zmm13",
                "vfmadd231ps zmm3, zmm12, zmm13",
                "vfmadd231ps zmm4, zmm12, zmm13",
                "vfmadd231ps zmm5, zmm12, zmm13",
                "vfmadd231ps zmm6, zmm12, zmm13",
                "vfmadd231ps zmm7, zmm12, zmm13",
                "vfmadd231ps zmm8, zmm12, zmm13",
                "vfmadd231ps zmm9, zmm12, zmm13",
                "vfmadd231ps zmm10, zmm12, zmm13",
                "vfmadd231ps zmm11, zmm12, zmm13",
                "dec {n}",
                "jnz 2b",
                "vzeroupper",
                n = inout(reg) iters => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _,
                options(nomem, nostack)
            );
        }
        iters as f64 * 12.0 * 32.0
    }

    pub(super) fn main() {
        let args: Vec<String> = std::env::args().collect();
        let mode = args.get(1).cloned().unwrap_or_else(|| "tdp".into());
        let threads: usize = args.get(2).map_or(1, |s| s.parse().unwrap());
        let iters: usize = args.get(3).map_or(1_000_000, |s| s.parse().unwrap());
        let rounds: usize = args.get(4).map_or(5, |s| s.parse().unwrap());
        if !["tdp", "tdpload", "fma"].contains(&mode.as_str()) {
            eprintln!("amx_pair: unknown mode `{mode}` (tdp, tdpload or fma)");
            std::process::exit(2);
        }
        if mode == "fma" {
            if !std::arch::is_x86_feature_detected!("avx512f") {
                eprintln!("amx_pair fma: this CPU has no AVX-512F");
                std::process::exit(1);
            }
        } else if !permission() {
            eprintln!(
                "amx_pair {mode}: no AMX tile data here (arch_prctl(ARCH_REQ_XCOMP_PERM) \
                 refused: the CPU or the kernel lacks AMX)"
            );
            std::process::exit(1);
        }
        for _ in 0..rounds {
            let bar = Arc::new(Barrier::new(threads));
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    let (bar, mode) = (bar.clone(), mode.clone());
                    std::thread::spawn(move || {
                        // One block: A at `AMX_A_OFF` bytes past a page, B `AMX_B_OFF` bytes past A's end.
                        let off =
                            |v: &str| std::env::var(v).map_or(0, |s| s.parse::<usize>().unwrap());
                        let mut blk: Vec<u16> =
                            (0..40 * 1024).map(|i| (0x3f80 + (i % 7)) as u16).collect();
                        let base = blk.as_mut_ptr() as usize;
                        let a0 = (base.next_multiple_of(4096) - base) / 2 + off("AMX_A_OFF") / 2;
                        let b0 = a0 + 16 * 1024 + off("AMX_B_OFF") / 2;
                        let (a, b) = (&blk[a0..a0 + 16 * 1024], &blk[b0..b0 + 16 * 1024]);
                        bar.wait();
                        let t = Instant::now();
                        let f = match mode.as_str() {
                            "tdp" => tdp(iters, a),
                            "tdpload" => tdpload(iters, a, b),
                            _ => fma(iters),
                        };
                        (
                            f,
                            t.elapsed().as_secs_f64(),
                            a.as_ptr() as usize % 4096,
                            b.as_ptr() as usize % 4096,
                        )
                    })
                })
                .collect();
            let r: Vec<(f64, f64, usize, usize)> =
                hs.into_iter().map(|h| h.join().unwrap()).collect();
            let flop: f64 = r.iter().map(|x| x.0).sum();
            let worst = r.iter().map(|x| x.1).fold(0.0, f64::max);
            let each: Vec<String> = r
                .iter()
                .map(|x| format!("{:.0} (A%4K {} B%4K {})", x.0 / x.1 / 1e9, x.2, x.3))
                .collect();
            println!(
                "{mode} T={threads}: {:.0} GFLOP/s aggregate (per thread {})",
                flop / worst / 1e9,
                each.join(" ")
            );
        }
    }
}

fn main() {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    bench::main();
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    eprintln!("amx_pair: x86-64 Linux only (AMX tiles)");
}
