//! Times one library kernel's launches on the CPU (for profiling the launch path):
//! `RAYON_NUM_THREADS=1 cargo run --release --example cpu_profile -- gelu 37 300 2000`
//! (kernels: gelu, softmax, layernorm, rmsnorm, add, their bf16 forms softmax_bf16,
//! layernorm_bf16, rmsnorm_bf16, add_bf16 (bf16 in and out), softmax_bf16_f32 and
//! rmsnorm_bf16_f32 (bf16 in, f32 out, as `benches/cpu.rs`), col_mean, transpose, col_sum_bf16,
//! transpose_bf16, gelu_bf16 and tanh_bf16 (bf16 in and out), sigmoid_bf16_f32 (bf16 in, f32
//! out), chain (`gelu(x * y + 1.0)` with `y` a `[C]`
//! row broadcast, as `benches/cpu.rs`'s `mul+add+gelu`), softmax_x2 (`softmax(x) * 2`: the
//! chunk program, not the row loop), softmax_det (softmax under `deterministic`: the
//! interpreter), depthwise (a channels-last `[R, C/64, 64]` image, 3×3 filter), memcpy (a
//! fresh output filled by a copy: the yardstick); `vmath` times the bare `vmath::gelu` loop, `vmath_chain` the fastest `vmath::gelu` on `x` and on the chain's `x * y + 1`;
//! `matmul M N` multiplies `[M, N] · [N, N]`, e.g. `-- matmul 1 4096 20`; `matmul-interp`
//! runs the same launch on the interpreter's step-by-step K loop, `faer` the same product in
//! faer, on the rayon pool's threads; `matmul_bf16` the same product of bf16 operands
//! (`matmul_bf16_f32`: on `gemm::bf16_path`, AMX tiles or `vdpbf16ps` where the CPU has and
//! prefers them), `matmul_bf16_widen` that launch with k-pair products disabled
//! (`gemm::without_dot`: operands widened to f32), `matmul_bf16_dot` forced onto `vdpbf16ps`
//! (`gemm::with_bf16_path`); `gemm_f32` and
//! `gemm_bf16` the bare single-threaded GEMMs into a preallocated output), `memcpy_kept` the
//! copy into a buffer kept across launches (what `benches/cpu.rs`'s memcpy yardstick times).
//! `--into` (anywhere on the line) launches the memory-bound kernels with
//! `KernelDef::launch_into` (depthwise: `depthwise_conv2d_into`) into one output tensor kept
//! across launches instead of returning a fresh one: `-- add 8192 4096 20 --into`.
//! `--pool` times the launches on a thread of a pool of `RAYON_NUM_THREADS` threads (as
//! `benches/cpu.rs` does: no wake-up of the pool from outside per launch) and then prints,
//! from the same process, the bench's memcpy yardstick for the kernel's bytes (a parallel
//! copy of half of them into a kept destination) and the same copy with non-temporal
//! stores, with the kernel's ratio to each and when each thread's chunk started and ended:
//! `RAYON_NUM_THREADS=2 cargo run --release --example cpu_profile -- rmsnorm 4096 1024 200 --pool`.
//! On a machine shared with other work, two-thread figures mostly time the scheduler (the
//! second worker waits for a CPU: the printed chunk starts show it); run the binary under
//! `chrt -f 50` (real-time FIFO, root) for repeatable ones.
//! `--halves` (gelu, softmax, layernorm, rmsnorm, transpose) runs the launch split by hand
//! instead: each of `RAYON_NUM_THREADS` threads launches on its own `[R / T, C]` input in a
//! one-thread pool, all released together by a barrier, and the fastest round is printed
//! with each thread's start and time.
//! Prints wall time and this thread's CPU time per launch (one thread: the launch runs on
//! the calling thread), the process's minor page faults per launch and the fastest single
//! launch's wall time; for gelu also the launch's work (a copy of the input and
//! `vmath::gelu` over it, as `benches/cpu.rs` counts it) and the CPU time beyond it.
//! Also prints the input's and the first output's addresses (and their offsets within
//! 4 KiB) and how many launch outputs the process allocated uninitialised
//! (`fused::covered_outputs`); `CPU_PROFILE_PAD=B` keeps a `B`-byte block allocated before
//! the first launch, which moves a heap-allocated output (a fresh output after the first
//! free raises glibc's mmap threshold, or `--into`'s kept one) to another address.
//! `CPU_PROFILE_INPUT=launch` makes the f32 input `x` a launch's output (the same values,
//! transposed twice, as in a chain of launches), `CPU_PROFILE_INPUT=vec` a user `Vec`
//! (`Tensor::from_vec`: glibc's 16-byte alignment), instead of `Tensor::randn`'s 64-byte
//! aligned block. `CPU_PROFILE_RELU=1` makes every negative value of the inputs `x` and
//! `xb` (f32 and bf16) `+0`, as a ReLU before the kernel would: about half the values zero
//! (`-0` and NaN, which `randn` does not draw, would be kept), e.g. for paths that treat
//! zeros apart.
use std::time::Instant;
use tessera::Tensor;
use tessera::prelude::*;

#[tessera::kernel]
fn col_mean(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
    x.mean(0)
}

#[tessera::kernel]
fn transpose_f32(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
    transpose(x)
}

#[tessera::kernel]
fn col_sum_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
    x.sum(0)
}

#[tessera::kernel]
fn gelu_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    gelu(x)
}

#[tessera::kernel]
fn tanh_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    tanh(x)
}

#[tessera::kernel]
fn sigmoid_bf16_f32(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    sigmoid(x).cast::<f32>()
}

#[tessera::kernel]
fn chain(x: Tensor<f32, (R, C)>, y: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    gelu(x * y + 1.0)
}

/// Softmax with an epilogue op: the row loop declines it, so it runs the chunk program.
#[tessera::kernel]
fn softmax_x2(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x) * 2.0
}

/// Softmax under `deterministic`: it runs on the interpreter.
#[tessera::kernel(numerics = "deterministic")]
fn softmax_det(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn softmax_bf16_f32(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R, C)> {
    softmax(x)
}

#[tessera::kernel]
fn rmsnorm_bf16_f32(x: Tensor<bf16, (R, C)>, g: Tensor<bf16, (C,)>) -> Tensor<f32, (R, C)> {
    rmsnorm(x, g, 1e-6)
}

#[tessera::kernel]
fn transpose_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (C, R)> {
    transpose(x)
}

fn main() {
    let mut a: Vec<String> = std::env::args().collect();
    // `--into`: launch into an output kept across launches (`KernelDef::launch_into`).
    let into = a.iter().any(|s| s == "--into");
    // `--pool`: the timed launches run on a pool thread (`ThreadPool::install`), as
    // `benches/cpu.rs` times them, and the run ends with the pool's memcpy yardstick.
    let in_pool = a.iter().any(|s| s == "--pool");
    // `--halves`: the launch split by hand (see `halves`).
    let by_halves = a.iter().any(|s| s == "--halves");
    a.retain(|s| !matches!(s.as_str(), "--into" | "--pool" | "--halves"));
    let name = a.get(1).map_or("gelu", |s| s.as_str()).to_string();
    let r: usize = a.get(2).map_or(37, |s| s.parse().unwrap());
    let c: usize = a.get(3).map_or(300, |s| s.parse().unwrap());
    let n: usize = a.get(4).map_or(1000, |s| s.parse().unwrap());
    let launches = n;
    if name == "vmath_chain" {
        // `vmath::gelu` alone on the chain's values `x · y + 1` and on `x` itself.
        let x = Tensor::<f32>::randn(&[r, c], 1);
        let y = Tensor::<f32>::randn(&[c], 2);
        let (x, y) = (x.as_slice().unwrap(), y.as_slice().unwrap());
        let v: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, e)| e * y[i % c] + 1.0)
            .collect();
        for (what, d) in [("x", x), ("x * y + 1", &v[..])] {
            let s = vmath_min(d, n);
            println!(
                "vmath gelu on {what} [{r}, {c}]: fastest {:.2} µs, {:.3} ns/elem",
                s * 1e6,
                s * 1e9 / d.len() as f64
            );
        }
        return;
    }
    if name == "vmath" {
        let s = vmath_only(r * c, n);
        println!(
            "vmath gelu {}: {:.2} µs, {:.3} ns/elem",
            r * c,
            s * 1e6,
            s * 1e9 / (r * c) as f64
        );
        return;
    }
    // `CPU_PROFILE_RELU`: every negative input value made +0 (as after a ReLU: half zeros).
    let relu = std::env::var_os("CPU_PROFILE_RELU").is_some();
    let mut x = Tensor::<f32>::randn(&[r, c], 1);
    if relu {
        for v in x.as_mut_slice().unwrap().iter_mut().filter(|v| **v < 0.0) {
            *v = 0.0;
        }
    }
    let x = match std::env::var("CPU_PROFILE_INPUT").as_deref() {
        Ok("launch") => transpose_f32(&transpose_f32(&x).unwrap()).unwrap(),
        Ok("vec") => Tensor::from_vec(x.to_vec().unwrap(), &[r, c]).unwrap(),
        Ok(v) => panic!("CPU_PROFILE_INPUT={v:?}: expected launch or vec"),
        Err(_) => x,
    };
    let g = Tensor::<f32>::randn(&[c], 2);
    let gemm = name.starts_with("matmul") || name.starts_with("gemm") || name == "faer";
    let w = Tensor::<f32>::randn(&[if gemm { c } else { 1 }, c], 3);
    let (fa, fb) = if name == "faer" {
        let (xv, wv) = (x.as_slice().unwrap(), w.as_slice().unwrap());
        (
            faer::Mat::from_fn(r, c, |i, j| xv[i * c + j]),
            faer::Mat::from_fn(c, c, |i, j| wv[i * c + j]),
        )
    } else {
        (faer::Mat::zeros(0, 0), faer::Mat::zeros(0, 0))
    };
    let mut fc = faer::Mat::<f32>::zeros(if name == "faer" { r } else { 0 }, c);
    let threads = rayon::current_num_threads();
    let mut xb = Tensor::<bf16>::randn(&[r, c], 4);
    if relu {
        for v in xb
            .as_mut_slice()
            .unwrap()
            .iter_mut()
            .filter(|v| **v < bf16::ZERO)
        {
            *v = bf16::ZERO;
        }
    }
    // The second operand of add / add_bf16 (a distinct tensor, as `benches/cpu.rs` adds).
    let elementwise = name.starts_with("add");
    let y = Tensor::<f32>::randn(&[if elementwise { r } else { 1 }, c], 8);
    let yb = Tensor::<bf16>::randn(&[if elementwise { r } else { 1 }, c], 9);
    let gb = Tensor::<bf16>::randn(&[c], 7);
    let wb = Tensor::<bf16>::randn(&[if gemm { c } else { 1 }, c], 7);
    let (dh, dw) = (r, (c / 64).max(3));
    let dx = Tensor::<f32>::randn(&[dh, dw, 64], 5);
    let df = Tensor::<f32>::randn(&[3, 3, 64], 6);
    // Raw single-threaded GEMMs into a preallocated C (no launch, no output allocation).
    let (xbits, wbits): (Vec<u16>, Vec<u16>) = if name.starts_with("gemm") {
        let bits = |t: &Tensor<bf16>| t.as_slice().unwrap().iter().map(|v| v.to_bits()).collect();
        (bits(&xb), bits(&wb))
    } else {
        (Vec::new(), Vec::new())
    };
    let mut craw = vec![0.0f32; if name.starts_with("gemm") { r * c } else { 0 }];
    let mut kept = vec![0.0f32; if name == "memcpy_kept" { r * c } else { 0 }];
    // The kept outputs of `--into` (made by the warm-up launch).
    let (mut o32, mut ob): (Option<Tensor<f32>>, Option<Tensor<bf16>>) = (None, None);
    // `CPU_PROFILE_PAD=B`: B bytes allocated (and kept) before the first launch, moving the
    // kept output within the heap.
    let pad: usize = std::env::var("CPU_PROFILE_PAD").map_or(0, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("CPU_PROFILE_PAD={v:?}: expected a byte count"))
    });
    let _pad = vec![1u8; pad];
    let shown = std::sync::atomic::AtomicBool::new(false);
    let show = |o: *const u8| {
        if !shown.swap(true, std::sync::atomic::Ordering::Relaxed) {
            println!(
                "input at {:#x} (mod 4096: {}), output at {:#x} (mod 4096: {})",
                x.as_slice().unwrap().as_ptr() as usize,
                x.as_slice().unwrap().as_ptr() as usize % 4096,
                o as usize,
                o as usize % 4096
            );
        }
    };
    // A launch returning a fresh output, or with `--into` one writing into the kept one.
    macro_rules! go {
        ($slot:ident, $fresh:expr, $def:expr, [$($arg:expr),*]) => {
            match (&mut $slot, into) {
                (Some(o), true) => $def.launch_into(&[$($arg.arg()),*], o).unwrap(),
                (None, true) => {
                    let o = $fresh.unwrap();
                    show(o.as_slice().unwrap().as_ptr() as *const u8);
                    $slot = Some(o)
                }
                (_, false) => {
                    let o = $fresh.unwrap();
                    show(o.as_slice().unwrap().as_ptr() as *const u8);
                    drop(o)
                }
            }
        };
    }
    let mut run = || match name.as_str() {
        "gemm_bf16" => {
            tessera::backend::cpu::gemm::gemm_bf16(r, c, c, &xbits, c, &wbits, c, &mut craw, c)
        }
        "gemm_f32" => tessera::backend::cpu::gemm::gemm_f32(
            r,
            c,
            c,
            x.as_slice().unwrap(),
            c,
            w.as_slice().unwrap(),
            c,
            &mut craw,
            c,
        ),
        "matmul-interp" => drop(tessera::backend::cpu::fused::with_interpreter(|| {
            tessera_kernels::matmul(&x, &w).unwrap()
        })),
        "faer" => faer::linalg::matmul::matmul(
            fc.as_mut(),
            faer::Accum::Replace,
            fa.as_ref(),
            fb.as_ref(),
            1.0f32,
            if threads == 1 {
                faer::Par::Seq
            } else {
                faer::Par::rayon(threads)
            },
        ),
        "gelu" => go!(
            o32,
            tessera_kernels::gelu(&x),
            tessera_kernels::gelu::KERNEL,
            [x]
        ),
        "softmax" => go!(
            o32,
            tessera_kernels::softmax(&x),
            tessera_kernels::softmax::KERNEL,
            [x]
        ),
        "layernorm" => go!(
            o32,
            tessera_kernels::layernorm(&x, &g, &g),
            tessera_kernels::layernorm::KERNEL,
            [x, g, g]
        ),
        "rmsnorm" => go!(
            o32,
            tessera_kernels::rmsnorm(&x, &g),
            tessera_kernels::rmsnorm::KERNEL,
            [x, g]
        ),
        "add" => go!(
            o32,
            tessera_kernels::add(&x, &y),
            tessera_kernels::add::KERNEL,
            [x, y]
        ),
        "softmax_bf16" => go!(
            ob,
            tessera_kernels::softmax(&xb),
            tessera_kernels::softmax::KERNEL,
            [xb]
        ),
        "layernorm_bf16" => go!(
            ob,
            tessera_kernels::layernorm(&xb, &gb, &gb),
            tessera_kernels::layernorm::KERNEL,
            [xb, gb, gb]
        ),
        "rmsnorm_bf16" => go!(
            ob,
            tessera_kernels::rmsnorm(&xb, &gb),
            tessera_kernels::rmsnorm::KERNEL,
            [xb, gb]
        ),
        "add_bf16" => go!(
            ob,
            tessera_kernels::add(&xb, &yb),
            tessera_kernels::add::KERNEL,
            [xb, yb]
        ),
        "col_mean" => go!(o32, col_mean(&x), col_mean::KERNEL, [x]),
        "transpose" => go!(o32, transpose_f32(&x), transpose_f32::KERNEL, [x]),
        "softmax_bf16_f32" => go!(o32, softmax_bf16_f32(&xb), softmax_bf16_f32::KERNEL, [xb]),
        "rmsnorm_bf16_f32" => go!(
            o32,
            rmsnorm_bf16_f32(&xb, &gb),
            rmsnorm_bf16_f32::KERNEL,
            [xb, gb]
        ),
        "col_sum_bf16" => go!(o32, col_sum_bf16(&xb), col_sum_bf16::KERNEL, [xb]),
        "transpose_bf16" => go!(ob, transpose_bf16(&xb), transpose_bf16::KERNEL, [xb]),
        "gelu_bf16" => go!(ob, gelu_bf16(&xb), gelu_bf16::KERNEL, [xb]),
        "tanh_bf16" => go!(ob, tanh_bf16(&xb), tanh_bf16::KERNEL, [xb]),
        "sigmoid_bf16_f32" => go!(o32, sigmoid_bf16_f32(&xb), sigmoid_bf16_f32::KERNEL, [xb]),
        "chain" => go!(o32, chain(&x, &g), chain::KERNEL, [x, g]),
        "softmax_x2" => go!(o32, softmax_x2(&x), softmax_x2::KERNEL, [x]),
        "softmax_det" => go!(o32, softmax_det(&x), softmax_det::KERNEL, [x]),
        // A `tile!` kernel: `--into` runs `depthwise_conv2d_into`.
        "depthwise" => match (&mut o32, into) {
            (Some(o), true) => tessera_kernels::conv::depthwise_conv2d_into(&dx, &df, o).unwrap(),
            (None, true) => o32 = Some(tessera_kernels::depthwise_conv2d(&dx, &df).unwrap()),
            (_, false) => drop(tessera_kernels::depthwise_conv2d(&dx, &df).unwrap()),
        },
        "matmul" => drop(tessera_kernels::matmul(&x, &w).unwrap()),
        "matmul_bf16" => drop(tessera_kernels::matmul_bf16_f32(&xb, &wb).unwrap()),
        "matmul_bf16_widen" => drop(tessera::backend::cpu::gemm::without_dot(|| {
            tessera_kernels::matmul_bf16_f32(&xb, &wb).unwrap()
        })),
        "matmul_bf16_dot" => drop(tessera::backend::cpu::gemm::with_bf16_path(
            tessera::backend::cpu::gemm::Bf16Path::Dot,
            || tessera_kernels::matmul_bf16_f32(&xb, &wb).unwrap(),
        )),
        // The yardstick: a fresh output tensor filled by a copy of the input.
        "memcpy" => drop(Tensor::from_vec(x.as_slice().unwrap().to_vec(), &[r, c]).unwrap()),
        // The same copy into a buffer kept across launches (what `benches/cpu.rs` times).
        "memcpy_kept" => kept.copy_from_slice(x.as_slice().unwrap()),
        _ => panic!("unknown kernel {name}"),
    };
    if by_halves {
        return halves(&name, &x, &g, n, into);
    }
    let mut timed = || {
        run();
        let (t, cpu, faults) = (Instant::now(), thread_cpu_ns(), minor_faults());
        // The fastest single launch too: on a machine shared with other work it is the
        // figure least disturbed by preemption.
        let mut fastest = f64::INFINITY;
        for _ in 0..n {
            let l = Instant::now();
            run();
            fastest = fastest.min(l.elapsed().as_secs_f64());
        }
        let s = t.elapsed().as_secs_f64() / n as f64;
        let c_s = (thread_cpu_ns() - cpu) as f64 * 1e-9 / n as f64;
        let faults = (minor_faults() - faults) as f64 / n as f64;
        (s, c_s, faults, fastest)
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    // `CPU_PROFILE_ROUNDS=k` (with `--pool`): k rounds of the launches and the yardsticks,
    // one line each (whether the machine's state changes within a process).
    let rounds: usize = std::env::var("CPU_PROFILE_ROUNDS").map_or(1, |v| v.parse().unwrap());
    for _ in 1..if in_pool { rounds } else { 1 } {
        let (_, _, _, fastest) = pool.install(&mut timed);
        println!(
            "round: {name} fastest launch {:.2} µs ({:.2} GB/s)",
            fastest * 1e6,
            bytes_of(&name, r, c) / fastest / 1e9
        );
        yardsticks(&pool, bytes_of(&name, r, c) as usize, launches, fastest);
    }
    let (s, c_s, faults, fastest) = if in_pool {
        pool.install(timed)
    } else {
        timed()
    };
    let bytes = bytes_of(&name, r, c);
    if gemm {
        let flops = 2.0 * (r * c * c) as f64;
        println!(
            "{name} {r}x{c}x{c}: wall {:.2} ms ({:.2} GFLOP/s), this thread's CPU time {:.2} ms ({:.2} GFLOP/s)",
            s * 1e3,
            flops / s / 1e9,
            c_s * 1e3,
            flops / c_s / 1e9
        );
        return;
    }
    println!(
        "{name} [{r}, {c}]: wall {:.2} µs ({:.2} GB/s), this thread's CPU time {:.2} µs ({:.2} GB/s), {faults:.1} minor page faults per launch, fastest launch {:.2} µs ({:.2} GB/s)",
        s * 1e6,
        bytes / s / 1e9,
        c_s * 1e6,
        bytes / c_s / 1e9,
        fastest * 1e6,
        bytes / fastest / 1e9
    );
    if in_pool {
        yardsticks(&pool, bytes as usize, launches, fastest);
    }
    println!(
        "outputs allocated uninitialised (fused cover proof), whole process: {}",
        tessera::backend::cpu::fused::covered_outputs()
    );
    let hc = tessera::host_cache::stats();
    println!(
        "host cache, whole process: {} hits, {} misses, {} bytes kept",
        hc.hits, hc.misses, hc.cached_bytes
    );
    if name == "gelu" {
        // The launch's work as `benches/cpu.rs` counts it: a fresh copy of the input, gelu'd.
        let xs = x.as_slice().unwrap();
        let work = || {
            let mut v = xs.to_vec();
            tessera::backend::cpu::vmath::gelu(&mut v);
            std::hint::black_box(v);
        };
        work();
        let reps = a.get(4).map_or(1000, |s| s.parse().unwrap());
        let cpu = thread_cpu_ns();
        for _ in 0..reps {
            work();
        }
        let w = (thread_cpu_ns() - cpu) as f64 * 1e-9 / reps as f64;
        println!(
            "gelu [{r}, {c}]: work (copy + vmath::gelu) {:.2} µs, beyond work {:.2} µs (this thread's CPU time)",
            w * 1e6,
            (c_s - w) * 1e6
        );
    }
}

/// Bytes a launch of `name` on `[r, c]` reads and writes, each once (as `benches/cpu.rs`
/// counts them).
fn bytes_of(name: &str, r: usize, c: usize) -> f64 {
    let n = (r * c) as f64;
    let (dh, dw) = (r, (c / 64).max(3));
    match name {
        "add" => 12.0 * n,
        "add_bf16" => 6.0 * n,
        "softmax_bf16" | "layernorm_bf16" | "rmsnorm_bf16" => 4.0 * n,
        "softmax_bf16_f32" | "rmsnorm_bf16_f32" => 6.0 * n,
        "col_mean" => 4.0 * n,
        "col_sum_bf16" => 2.0 * n,
        "transpose_bf16" | "gelu_bf16" | "tanh_bf16" => 4.0 * n,
        "sigmoid_bf16_f32" => 6.0 * n,
        "depthwise" => 4.0 * (dh * dw * 64 + dh.saturating_sub(2) * (dw - 2) * 64) as f64,
        _ => 8.0 * n,
    }
}

/// `--pool`: the yardsticks beside the kernel's fastest launch `kernel` (seconds), on `pool`'s
/// threads as the launches ran: `benches/cpu.rs`'s memcpy (a `par_chunks` copy of `bytes / 2`
/// into a kept destination, one chunk per thread, timed inside the pool) and the same copy
/// with non-temporal 64-byte stores (what the kernels' streamed outputs do), each the fastest
/// of `reps` copies, with when each chunk started and how long it took in that copy.
fn yardsticks(pool: &rayon::ThreadPool, bytes: usize, reps: usize, kernel: f64) {
    let half = bytes / 2 / 64 * 64;
    if half == 0 {
        println!("no memcpy yardstick: {bytes} bytes read + written is under two 64-byte lines");
        return;
    }
    let t = pool.current_num_threads();
    let src = vec![1u8; half];
    // 64 bytes of slack: the streamed copy starts its destination on a line.
    let mut dst = vec![0u8; half + 64];
    let at = dst.as_ptr().align_offset(64);
    let chunk = half.div_ceil(t).div_ceil(64) * 64;
    for (what, nt) in [
        ("memcpy (bench yardstick)", false),
        ("non-temporal copy", true),
    ] {
        let d = &mut dst[at..at + half];
        let (best, spans) = pool.install(|| {
            let mut best = (f64::INFINITY, Vec::new());
            for i in 0..=reps {
                let spans = std::sync::Mutex::new(vec![(0.0, 0.0); t]);
                let t0 = Instant::now();
                use rayon::prelude::*;
                d.par_chunks_mut(chunk)
                    .zip(src.par_chunks(chunk))
                    .enumerate()
                    .for_each(|(k, (d, s))| {
                        let a = t0.elapsed().as_secs_f64();
                        copy(d, s, nt);
                        let b = t0.elapsed().as_secs_f64();
                        spans.lock().unwrap()[k] = (a, b - a);
                    });
                let w = t0.elapsed().as_secs_f64();
                if i > 0 && w < best.0 {
                    best = (w, spans.into_inner().unwrap());
                }
            }
            best
        });
        let parts: Vec<String> = spans
            .iter()
            .map(|(a, d)| format!("start +{:.1} µs, took {:.1} µs", a * 1e6, d * 1e6))
            .collect();
        println!(
            "{t}-thread {what} of {} MiB: fastest {:.2} µs ({:.2} GB/s read + written); kernel / it {:.2}; chunks: {}",
            half >> 20,
            best * 1e6,
            2.0 * half as f64 / best / 1e9,
            best / kernel,
            parts.join("; ")
        );
    }
}

/// Copies `s` to `d` (same length), with non-temporal 64-byte stores when `nt` (AVX-512F
/// present, `d` starting on a 64-byte line, whole lines), else `copy_from_slice`.
fn copy(d: &mut [u8], s: &[u8], nt: bool) {
    #[cfg(target_arch = "x86_64")]
    if nt && is_x86_feature_detected!("avx512f") && d.as_ptr() as usize % 64 == 0 {
        // SAFETY: AVX-512F is present (checked above).
        return unsafe { stream_copy(d, s) };
    }
    d.copy_from_slice(s);
}

/// The non-temporal copy of [`copy`]: whole 64-byte lines streamed, the tail copied.
///
/// # Safety
/// AVX-512F is present; `d` starts on a 64-byte boundary.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_copy(d: &mut [u8], s: &[u8]) {
    use std::arch::x86_64::*;
    let lines = d.len().min(s.len()) / 64;
    for i in 0..lines {
        // SAFETY: `i * 64 + 64 <= len`; `d`'s line is 64-byte aligned.
        unsafe {
            let v = _mm512_loadu_si512(s.as_ptr().add(i * 64) as *const _);
            _mm512_stream_si512(d.as_mut_ptr().add(i * 64) as *mut _, v);
        }
    }
    _mm_sfence();
    d[lines * 64..].copy_from_slice(&s[lines * 64..]);
}

/// `--halves`: the launch split by hand, for comparison with one launch on rayon's threads:
/// `RAYON_NUM_THREADS` threads, each with a one-thread pool and its own `[R / T, C]` input
/// (contiguous rows, 64-byte aligned), launch together after a barrier, `n` rounds; prints
/// the fastest round's wall time (first start to last finish) and each thread's start and
/// time in it. Kernels: gelu, softmax, layernorm, rmsnorm, transpose (f32).
fn halves(name: &str, x: &Tensor<f32>, g: &Tensor<f32>, n: usize, into: bool) {
    let t = rayon::current_num_threads();
    let (r, c) = (x.shape()[0], x.shape()[1]);
    let rows = r / t;
    let barrier = std::sync::Barrier::new(t);
    let base = Instant::now();
    let spans: Vec<Vec<(f64, f64)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..t)
            .map(|k| {
                let barrier = &barrier;
                sc.spawn(move || {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(1)
                        .build()
                        .unwrap();
                    let x = Tensor::<f32>::randn(&[rows, c], 11 + k as u64);
                    let mut out = None;
                    pool.install(|| {
                        launch_f32(name, &x, g, &mut out, into);
                        (0..n)
                            .map(|_| {
                                barrier.wait();
                                let a = base.elapsed().as_secs_f64();
                                launch_f32(name, &x, g, &mut out, into);
                                (a, base.elapsed().as_secs_f64())
                            })
                            .collect()
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = |i: usize| {
        let a = spans.iter().map(|s| s[i].0).fold(f64::INFINITY, f64::min);
        let b = spans.iter().map(|s| s[i].1).fold(0.0, f64::max);
        (b - a, a)
    };
    let best = (0..n)
        .min_by(|&i, &j| wall(i).0.total_cmp(&wall(j).0))
        .unwrap();
    let (w, a) = wall(best);
    let parts: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "start +{:.1} µs, took {:.1} µs",
                (s[best].0 - a) * 1e6,
                (s[best].1 - s[best].0) * 1e6
            )
        })
        .collect();
    let bytes = 8.0 * (rows * t * c) as f64;
    println!(
        "{name} [{r}, {c}] by hand on {t} threads ({}): fastest round {:.2} µs ({:.2} GB/s); threads: {}",
        if into {
            "kept outputs"
        } else {
            "fresh outputs"
        },
        w * 1e6,
        bytes / w / 1e9,
        parts.join("; ")
    );
}

/// One launch of the f32 kernel `name` on `x` (`g` its γ / β), into `out` with `into` (the
/// first launch makes it), else a fresh output dropped at once.
fn launch_f32(
    name: &str,
    x: &Tensor<f32>,
    g: &Tensor<f32>,
    out: &mut Option<Tensor<f32>>,
    into: bool,
) {
    macro_rules! one {
        ($fresh:expr, $def:expr, [$($arg:expr),*]) => {
            match (out.as_mut(), into) {
                (Some(o), true) => $def.launch_into(&[$($arg.arg()),*], o).unwrap(),
                (None, true) => *out = Some($fresh.unwrap()),
                (_, false) => drop($fresh.unwrap()),
            }
        };
    }
    match name {
        "gelu" => one!(tessera_kernels::gelu(x), tessera_kernels::gelu::KERNEL, [x]),
        "softmax" => one!(
            tessera_kernels::softmax(x),
            tessera_kernels::softmax::KERNEL,
            [x]
        ),
        "layernorm" => one!(
            tessera_kernels::layernorm(x, g, g),
            tessera_kernels::layernorm::KERNEL,
            [x, g, g]
        ),
        "rmsnorm" => one!(
            tessera_kernels::rmsnorm(x, g),
            tessera_kernels::rmsnorm::KERNEL,
            [x, g]
        ),
        "transpose" => one!(transpose_f32(x), transpose_f32::KERNEL, [x]),
        _ => panic!("--halves: {name} is not one of gelu, softmax, layernorm, rmsnorm, transpose"),
    }
}

/// CPU time of this thread in ns (Linux `schedstat`; 0 elsewhere): on a shared machine it
/// excludes the time other processes held the core.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Minor page faults of the whole process so far (Linux `/proc/self/stat` field 10; 0
/// elsewhere): the pages the kernel mapped (and zeroed) on first touch.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name, which may hold spaces.
            let rest = &s[s.rfind(')')? + 2..];
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Fastest of `reps` runs of `vmath::gelu` in place on a copy of `x` (the copy not timed).
pub fn vmath_min(x: &[f32], reps: usize) -> f64 {
    let mut v = x.to_vec();
    let mut best = f64::MAX;
    for _ in 0..reps {
        v.copy_from_slice(x);
        let t = Instant::now();
        tessera::backend::cpu::vmath::gelu(std::hint::black_box(&mut v));
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

/// Times `vmath::gelu` alone on `n` elements (the work of a gelu launch).
#[allow(dead_code)]
pub fn vmath_only(n: usize, reps: usize) -> f64 {
    let x = Tensor::<f32>::randn(&[n], 1);
    let x = x.as_slice().unwrap();
    let mut v = x.to_vec();
    let t = Instant::now();
    for _ in 0..reps {
        v.copy_from_slice(x);
        tessera::backend::cpu::vmath::gelu(std::hint::black_box(&mut v));
    }
    t.elapsed().as_secs_f64() / reps as f64
}
