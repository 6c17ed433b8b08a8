use super::*;
use crate::DType;

fn mm(n: u64, eb: u32) -> Problem {
    Problem::matmul(1, n, n, n, eb, 4)
}

#[test]
fn smaller_tiles_move_more_bytes() {
    let p = mm(4096, 2);
    let small = estimate(&Arch::H100, &p, &Point::new([64, 64, 32], 4, 2, 8));
    let big = estimate(&Arch::H100, &p, &Point::new([128, 128, 64], 8, 3, 8));
    // A is re-read once per column block: 64 vs 32 column blocks.
    assert!(
        small.bytes > 1.9 * big.bytes,
        "{} vs {}",
        small.bytes,
        big.bytes
    );
    assert!(big.time_s < small.time_s);
}

#[test]
fn shared_memory_limits_are_the_hardwares_and_guidelines_only_report() {
    let p = mm(4096, 2);
    // Three stages of 48 KB = 144 KB: over table A.2's 96 KB guideline on H100 and GB200, but
    // within every part's hardware limit (H100/GB200 227 KB, A100 163 KB): it runs, the
    // guideline is reported.
    let s = Point::new([256, 128, 64], 8, 3, 8);
    for arch in [Arch::H100, Arch::GB200, Arch::A100] {
        let e = estimate(&arch, &p, &s);
        assert!(e.pruned.is_none(), "{}: {:?}", arch.name, e.pruned);
        assert_eq!(e.smem_bytes, 144 * 1024, "{}", arch.name);
    }
    let over = |a: &Arch| {
        estimate(a, &p, &s)
            .over_guidelines
            .iter()
            .any(|g| matches!(g, Guideline::SharedMemory { .. }))
    };
    assert!(over(&Arch::H100) && over(&Arch::GB200) && over(&Arch::A100));
    // Ada (sm_89) holds 99 KB per block: two of the three stages would fit, so the schedule is
    // rejected with that figure, not silently run with two.
    assert_eq!(
        estimate(&Arch::L40S, &p, &s).pruned,
        Some(Prune::Stages {
            requested: 3,
            fit: 2,
            stage_bytes: 48 * 1024,
            limit: 99 * 1024
        })
    );
    // One stage of 128 KB does not fit Ada at all.
    let big = Point::new([128, 128, 256], 8, 1, 8);
    assert!(matches!(
        estimate(&Arch::L40S, &p, &big).pruned,
        Some(Prune::SharedMemory {
            need: 131072,
            limit: 101376
        })
    ));
    assert!(estimate(&Arch::H100, &p, &big).pruned.is_none());
}

#[test]
fn cost_model_and_emitter_agree_on_what_fits() {
    use crate::target::ptx::Arch as Ptx;
    for t in Ptx::ALL {
        let limit = t.limits().smem_per_block_optin as u64;
        assert_eq!(Arch::for_target(t).block_smem_limit(), limit, "{t}");
        for stage in [16u64 << 10, 48 << 10, 64 << 10, 100 << 10, 200 << 10] {
            for requested in 1..=4 {
                let fit = stages_that_fit(stage, requested, limit);
                match fit {
                    Some(f) => {
                        assert!(f >= 1 && f <= requested && f as u64 * stage <= limit);
                        assert!(f == requested || (f as u64 + 1) * stage > limit);
                    }
                    None => assert!(stage > limit),
                }
            }
        }
    }
}

#[test]
fn guidelines_break_near_ties_only() {
    // Two schedules predicted within 2% of each other: the one inside the guidelines ranks
    // first; a clearly faster one over a guideline still wins.
    let p = mm(4096, 2);
    let pts = [
        Point::new([128, 128, 64], 8, 3, 8),
        Point::new([64, 64, 32], 4, 2, 8),
    ];
    let e: Vec<Estimate> = pts.iter().map(|s| estimate(&Arch::H100, &p, s)).collect();
    let order = rank(&Arch::H100, &p, &pts);
    let key = |e: &Estimate| e.time_s * (1.0 + 0.02 * e.over_guidelines.len() as f64);
    assert_eq!(order.len(), 2);
    assert!(key(&e[order[0]]) <= key(&e[order[1]]));
}

#[test]
fn register_spills_are_pruned() {
    let p = mm(4096, 2);
    // 256×256 accumulator over 4 warps: 512 f32 registers per thread.
    let e = estimate(&Arch::H100, &p, &Point::new([256, 256, 32], 4, 1, 8));
    assert!(
        matches!(e.pruned, Some(Prune::Registers { cap: 255, .. })),
        "{e:?}"
    );
    assert!(e.time_s.is_infinite());
}

#[test]
fn occupancy_limiters() {
    use occupancy::{Limiter, occupancy};
    // 32 warps per block, few registers: two blocks fill H100's 64 warps.
    let o = occupancy(&Arch::H100, 32, 32, 0);
    assert_eq!((o.blocks_per_unit, o.limiter), (2, Limiter::Warps));
    assert_eq!(o.fraction, 1.0);
    // 128 registers × 256 threads = 32768: two blocks by registers.
    let o = occupancy(&Arch::H100, 8, 128, 1024);
    assert_eq!((o.blocks_per_unit, o.limiter), (2, Limiter::Registers));
    // GB200 (compute capability 10.0) holds 64 warps, as CUDA's table says.
    let o = occupancy(&Arch::GB200, 4, 32, 0);
    assert_eq!(o.blocks_per_unit, 16);
    assert_eq!(o.fraction, 1.0);
    // CPU: one block per core.
    assert_eq!(occupancy(&Arch::cpu(2), 8, 1000, 1 << 20).fraction, 1.0);
}

#[test]
fn small_problems_prefer_tiles_that_fill_the_machine() {
    // 256×256 on 132 SMs: 128×128 tiles give 4 blocks, 64×64 give 16 → 64×64 predicted faster.
    let p = mm(256, 2);
    let a = estimate(&Arch::H100, &p, &Point::new([128, 128, 64], 8, 3, 8));
    let b = estimate(&Arch::H100, &p, &Point::new([64, 64, 64], 4, 3, 8));
    assert!(b.time_s < a.time_s);
    // On two CPU cores a single block leaves one core idle.
    let cpu = Arch::cpu(2);
    let one = estimate(&cpu, &p, &Point::new([256, 256, 64], 1, 1, 1));
    let four = estimate(&cpu, &p, &Point::new([128, 128, 64], 1, 1, 1));
    assert_eq!((one.blocks, four.blocks), (1, 4));
    assert!(four.compute_s < one.compute_s);
}

#[test]
fn bound_is_never_beaten() {
    for arch in Arch::all() {
        for n in [64u64, 1000, 4096] {
            let p = mm(n, 4);
            for t in [32u32, 64, 128, 256] {
                let e = estimate(&arch, &p, &Point::new([t, t, 32], 4, 2, 4));
                assert!(e.time_s >= e.bound_s * 0.999, "{} n={n} t={t}", arch.name);
                assert!(e.flops >= p.flops());
            }
        }
    }
}

#[test]
fn cpu_working_set_must_fit_l2() {
    let p = mm(2048, 4);
    // (512·512 + 512·512 + 512·512) · 4 B = 3 MB > 1 MB.
    let e = estimate(&Arch::cpu(1), &p, &Point::new([512, 512, 512], 1, 1, 1));
    assert!(matches!(e.pruned, Some(Prune::SharedMemory { .. })));
    assert!(
        estimate(&Arch::cpu(1), &p, &Point::new([128, 128, 64], 1, 1, 1))
            .pruned
            .is_none()
    );
}

#[test]
fn depthwise_is_memory_bound_and_halo_costs() {
    let p = Problem::Depthwise {
        oh: 112,
        ow: 112,
        c: 64,
        kh: 3,
        kw: 3,
        in_bytes: 2,
    };
    let s = Point::new([8, 8, 64], 4, 2, 4);
    let l = Point::new([32, 32, 64], 4, 2, 4);
    let es = estimate(&Arch::GB200, &p, &s);
    let el = estimate(&Arch::GB200, &p, &l);
    assert!(es.memory_s > es.compute_s);
    // Small tiles re-read more halo.
    assert!(es.bytes > el.bytes);
}

#[test]
fn rank_skips_pruned_and_sorts() {
    let p = mm(4096, 2);
    let mut pts: Vec<Point> = crate::schedule::Schedule::space(KernelClass::Matmul, DType::BF16)
        .iter()
        .map(Point::from_schedule)
        .collect();
    pts.push(Point::new([256, 256, 128], 8, 3, 8)); // one stage over H100's shared memory
    let order = rank(&Arch::H100, &p, &pts);
    assert!(!order.is_empty() && order.len() < pts.len());
    let t: Vec<f64> = order
        .iter()
        .map(|&i| estimate(&Arch::H100, &p, &pts[i]).time_s)
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn class_problems() {
    let p = Problem::for_class(KernelClass::Elementwise, &[10, 20], DType::F32, DType::F32);
    assert_eq!(p.min_bytes(), 10.0 * 20.0 * 8.0);
}

fn attn(sq: u64, sk: u64, causal: bool) -> Problem {
    Problem::Attention {
        batch: 8,
        sq,
        sk,
        d: 64,
        dv: 64,
        causal,
        in_bytes: 2,
        out_bytes: 2,
    }
}

#[test]
fn attention_work_traffic_and_the_causal_triangle() {
    // Every (query, key) pair costs 2·(d + dv) FLOPs; causal sq = sk sees s(s+1)/2 pairs,
    // sq < sk sees sq·(2·sk − sq + 1)/2 (bottom-right aligned).
    assert_eq!(
        attn(1024, 1024, false).flops(),
        2.0 * 8.0 * 1024.0 * 1024.0 * 128.0
    );
    assert_eq!(attn(4, 4, true).flops(), 2.0 * 8.0 * 10.0 * 128.0);
    assert_eq!(attn(2, 5, true).flops(), 2.0 * 8.0 * (4.0 + 5.0) * 128.0);
    assert_eq!(attn(5, 2, true).flops(), 2.0 * 8.0 * 3.0 * 128.0);
    // K and V are re-read once per query block: half the block rows, twice the K/V bytes.
    let p = attn(4096, 4096, false);
    let small = estimate(&Arch::H100, &p, &Point::new([64, 64, 1], 4, 2, 8));
    let big = estimate(&Arch::H100, &p, &Point::new([128, 64, 1], 8, 2, 8));
    let kv = 8.0 * 4096.0 * 128.0 * 2.0;
    assert!(
        (small.bytes - big.bytes - kv * (64.0 - 32.0)).abs() < 1.0,
        "{} vs {}",
        small.bytes,
        big.bytes
    );
    // The causal kernel skips the blocks above the diagonal: about half the time.
    let c = estimate(
        &Arch::H100,
        &attn(4096, 4096, true),
        &Point::new([128, 64, 1], 8, 2, 8),
    );
    assert!(c.flops < 0.55 * big.flops && c.flops > 0.45 * big.flops);
    assert!(c.time_s < big.time_s);
}
