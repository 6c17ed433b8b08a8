//! SPMD launch: kernels over a mesh equal the single-device launch bit for bit (integer-valued
//! random inputs, so every sum is exact in any order), with the propagated specs the rules say.
//! Each test body runs on the CPU and on the PTX simulator (the reference on the same device).

use tessera::{Device, Tensor, bf16};
use tessera_dist::{
    CollectiveKind, DistTensor, Mesh, ReduceOp, Replicate, Shard, ShardSpec, Statistics, spmd,
};

#[tessera::kernel]
fn mm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    x.matmul(w)
}

#[tessera::kernel]
fn linear_gelu(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    gelu(x.matmul(w) + b)
}

#[tessera::kernel]
fn mm_softmax(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    softmax(x.matmul(w))
}

/// A generic kernel: `spmd(&mm_generic::KERNEL)` picks the instantiation by argument types.
#[tessera::kernel]
fn mm_generic<T: Float>(x: Tensor<T, (M, K)>, w: Tensor<T, (K, N)>) -> Tensor<T, (M, N)> {
    x.matmul(w).cast::<T>()
}

/// Integer-valued uniform values in [-4, 4], seeded.
fn ints(shape: &[usize], seed: u64) -> Tensor<f32> {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 9) as f32 - 4.0
        })
        .collect();
    Tensor::from_vec(data, shape).unwrap()
}

fn bf(t: &Tensor<f32>) -> Tensor<bf16> {
    Tensor::from_vec(
        t.as_slice()
            .unwrap()
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect(),
        t.shape(),
    )
    .unwrap()
}

fn bits_eq(a: &Tensor<f32>, b: &Tensor<f32>) -> bool {
    a.shape() == b.shape()
        && a.to_vec()
            .unwrap()
            .iter()
            .zip(b.to_vec().unwrap())
            .all(|(x, y)| x.to_bits() == y.to_bits())
}

fn mesh(devices: &Device) -> Mesh {
    let d = vec![devices.clone(); 4];
    Mesh::new([("dp", 2), ("tp", 2)], d).unwrap()
}

fn spec(s: &[&[&str]]) -> ShardSpec {
    ShardSpec::new(s.iter().map(|a| {
        if a.is_empty() {
            Replicate
        } else {
            Shard(a.iter().copied())
        }
    }))
}

/// The three matmul rules: S(m)×R → S(m), R×S(n) → S(n), S(k)×S(k) → Partial(sum).
fn matmul_rules(dev: &Device) {
    let mesh = mesh(dev);
    let (m, k, n) = (9, 14, 7);
    let x = ints(&[m, k], 1);
    let w = ints(&[k, n], 2);
    let want = mm(&x, &w).unwrap();
    let cases: [(ShardSpec, ShardSpec, ShardSpec); 3] = [
        (spec(&[&["dp"]]), spec(&[]), spec(&[&["dp"], &[]])),
        (spec(&[]), spec(&[&[], &["tp"]]), spec(&[&[], &["tp"]])),
        (
            spec(&[&[], &["tp"]]),
            spec(&[&["tp"]]),
            spec(&[&[], &[]]).partial(["tp"], ReduceOp::Sum),
        ),
    ];
    for (sx, sw, out) in cases {
        let xd = DistTensor::distribute(&x, sx.clone(), &mesh).unwrap();
        let wd = DistTensor::distribute(&w, sw.clone(), &mesh).unwrap();
        let (y, plan, seen) = spmd(&mm::KERNEL).run_traced::<f32>(&[&xd, &wd]).unwrap();
        assert_eq!(plan.output, out, "{sx} × {sw}\n{plan}");
        assert_eq!(
            seen.total(),
            0,
            "no collective needed for {sx} × {sw}:\n{plan}"
        );
        assert!(bits_eq(&y.gather().unwrap(), &want), "{sx} × {sw}");
    }
}

/// `S(k)` with a bias and GELU after the matmul: the partial sum cannot pass the GELU, so the
/// contraction is gathered first; the result is rows over dp, asked-for columns over tp.
fn linear_gelu_gathers_contraction(dev: &Device) {
    let mesh = mesh(dev);
    let (m, k, n) = (11, 16, 10);
    let (x, w, b) = (ints(&[m, k], 3), ints(&[k, n], 4), ints(&[n], 5));
    let (x, w) = (bf(&x), bf(&w));
    let want = linear_gelu(
        &x.clone().to(dev).unwrap(),
        &w.clone().to(dev).unwrap(),
        &b.clone().to(dev).unwrap(),
    )
    .unwrap();
    let xd = DistTensor::distribute(&x, spec(&[&["dp"], &["tp"]]), &mesh).unwrap();
    let wd = DistTensor::distribute(&w, spec(&[&["tp"]]), &mesh).unwrap();
    let bd = DistTensor::distribute(&b, spec(&[]), &mesh).unwrap();
    let to = spec(&[&["dp"], &["tp"]]);
    let launch = spmd(&linear_gelu::KERNEL).to(to.clone());
    let (y, plan, seen) = launch.run_traced::<f32>(&[&xd, &wd, &bd]).unwrap();
    assert_eq!(plan.output.partial_state(), None, "{plan}");
    assert_eq!(plan.counts(), seen, "{plan}");
    assert!(seen.get(CollectiveKind::AllGather) >= 1, "{plan}");
    assert_eq!(y.spec(), &to);
    assert!(bits_eq(&y.gather().unwrap(), &want), "{plan}");
}

/// Softmax over a split axis, gathered before the launch (asked for: the partial-statistics
/// launch is tested in `spmd_stats.rs`).
fn softmax_over_split_axis(dev: &Device) {
    let mesh = mesh(dev);
    let (m, k, n) = (6, 5, 12);
    let (x, w) = (ints(&[m, k], 6), ints(&[k, n], 7));
    let want = mm_softmax(&x.clone().to(dev).unwrap(), &w.clone().to(dev).unwrap()).unwrap();
    let xd = DistTensor::distribute(&x, spec(&[&["dp"]]), &mesh).unwrap();
    let wd = DistTensor::distribute(&w, spec(&[&[], &["tp"]]), &mesh).unwrap();
    let (y, plan, _) = spmd(&mm_softmax::KERNEL)
        .statistics(Statistics::GatherFirst)
        .run_traced::<f32>(&[&xd, &wd])
        .unwrap();
    assert_eq!(plan.output, spec(&[&["dp"], &[]]), "{plan}");
    assert!(bits_eq(&y.gather().unwrap(), &want), "{plan}");
}

/// Random specs of both operands over every mesh axis subset: always the single-device result.
fn random_specs(dev: &Device) {
    let mesh = mesh(dev);
    let choices: [&[&str]; 5] = [&[], &["dp"], &["tp"], &["dp", "tp"], &["tp", "dp"]];
    let mut s = 0x1234_5678_u64;
    let mut next = |n: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n as u64) as usize
    };
    for case in 0..12 {
        let (m, k, n) = (1 + next(9), 1 + next(9), 1 + next(9));
        let x = ints(&[m, k], 10 + case);
        let w = ints(&[k, n], 20 + case);
        let want = mm(&x, &w).unwrap();
        let pick = |a: usize, b: usize| -> Option<ShardSpec> {
            let (ca, cb) = (choices[a], choices[b]);
            ca.iter().all(|x| !cb.contains(x)).then(|| spec(&[ca, cb]))
        };
        let (Some(sx), Some(sw)) = (pick(next(5), next(5)), pick(next(5), next(5))) else {
            continue;
        };
        let xd = DistTensor::distribute(&x, sx.clone(), &mesh).unwrap();
        let wd = DistTensor::distribute(&w, sw.clone(), &mesh).unwrap();
        let (y, plan, seen) = spmd(&mm::KERNEL).run_traced::<f32>(&[&xd, &wd]).unwrap();
        assert_eq!(plan.counts(), seen, "{plan}");
        assert!(bits_eq(&y.gather().unwrap(), &want), "{sx} × {sw}\n{plan}");
    }
}

/// A generic kernel over the mesh, in f32 and bf16: each launches its own instantiation and
/// equals the single-device call of that instantiation bit for bit.
fn generic_kernel(dev: &Device) {
    let mesh = mesh(dev);
    let (m, k, n) = (7, 12, 6);
    let (x, w) = (ints(&[m, k], 8), ints(&[k, n], 9));
    let (sx, sw) = (spec(&[&["dp"], &["tp"]]), spec(&[&["tp"]]));
    let to = spec(&[&["dp"]]);
    let xd = DistTensor::distribute(&x, sx.clone(), &mesh).unwrap();
    let wd = DistTensor::distribute(&w, sw.clone(), &mesh).unwrap();
    let (y, plan, _) = spmd(&mm_generic::KERNEL)
        .to(to.clone())
        .run_traced::<f32>(&[&xd, &wd])
        .unwrap();
    assert_eq!(plan.kernel, "mm_generic_f32", "{plan}");
    let want = mm_generic(&x.clone().to(dev).unwrap(), &w.clone().to(dev).unwrap()).unwrap();
    assert!(bits_eq(&y.gather().unwrap(), &want), "{plan}");
    let (xb, wb) = (bf(&x), bf(&w));
    let xd = DistTensor::distribute(&xb, sx, &mesh).unwrap();
    let wd = DistTensor::distribute(&wb, sw, &mesh).unwrap();
    let y = spmd(&mm_generic::KERNEL)
        .to(to)
        .run::<bf16>(&[&xd, &wd])
        .unwrap();
    let want = mm_generic(&xb.to(dev).unwrap(), &wb.to(dev).unwrap()).unwrap();
    let bits = |t: &Tensor<bf16>| {
        t.to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&y.gather().unwrap()), bits(&want));
}

/// A generic kernel given element types it has no instantiation for: an error naming it.
#[test]
fn generic_kernel_without_instantiation_is_an_error() {
    let mesh = mesh(&Device::Cpu);
    let i = Tensor::from_vec(vec![1i32; 4], &[2, 2]).unwrap();
    let x = DistTensor::distribute(&i, spec(&[]), &mesh).unwrap();
    let e = spmd(&mm_generic::KERNEL).run::<i32>(&[&x, &x]).unwrap_err();
    assert!(e.to_string().contains("mm_generic"), "{e}");
    assert!(e.to_string().contains("I32"), "{e}");
}

/// A wrong element type or argument count is an error naming the kernel.
#[test]
fn bad_arguments_are_errors() {
    let mesh = mesh(&Device::Cpu);
    let x = DistTensor::distribute(&ints(&[3, 4], 1), spec(&[]), &mesh).unwrap();
    let e = spmd(&linear_gelu::KERNEL)
        .run::<f32>(&[&x, &x, &x])
        .unwrap_err();
    assert!(e.to_string().contains("linear_gelu"), "{e}");
    let e = spmd(&mm::KERNEL).run::<f32>(&[&x]).unwrap_err();
    assert!(e.to_string().contains("1 arguments"), "{e}");
}

macro_rules! backend_tests {
    ($($name:ident),*) => {
        mod cpu {
            $(#[test] fn $name() { super::$name(&tessera::Device::Cpu) })*
        }
        mod sim {
            $(#[test] fn $name() { super::$name(&tessera::Device::sim()) })*
        }
    };
}

backend_tests!(
    matmul_rules,
    linear_gelu_gathers_contraction,
    softmax_over_split_axis,
    random_specs,
    generic_kernel
);
