//! Device-resident tensors: a chain of library kernels on a PTX device uploads each input once
//! and downloads each fetched output once, intermediates stay in device memory, the caching
//! allocator hands freed blocks back out, and copies happen only where `.to()` / `to_vec()`
//! ask for them. The chain itself runs on every backend against an f64 reference.

use tessera::ir::target::ptx::Arch;
use tessera::{Device, Tensor};
use tessera_workspace::reference::{self, rel_error};

/// Rows and columns of the chain: not multiples of any tile, so masks matter.
const R: usize = 19;
const C: usize = 37;

/// The chain's inputs, in host memory.
struct Inputs {
    x: Tensor<f32>,
    w: Tensor<f32>,
    g: Tensor<f32>,
    b: Tensor<f32>,
}

fn inputs(seed: u64) -> Inputs {
    // Scaled so the chain's values stay O(1) and the softmax at its end is not saturated.
    let scale = |t: Tensor<f32>, s: f32| {
        let shape = t.shape().to_vec();
        Tensor::from_vec(
            t.into_vec().unwrap().iter().map(|v| v * s).collect(),
            &shape,
        )
        .unwrap()
    };
    Inputs {
        x: Tensor::randn(&[R, C], seed),
        w: scale(Tensor::randn(&[C, C], seed + 1), 1.0 / (C as f32).sqrt()),
        g: Tensor::randn(&[C], seed + 2),
        b: Tensor::randn(&[C], seed + 3),
    }
}

/// Ten library kernels, each reading the previous result where it lives. Returns the tenth
/// result and the third (a second fetched output).
fn chain(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    g: &Tensor<f32>,
    b: &Tensor<f32>,
) -> (Tensor<f32>, Tensor<f32>) {
    use tessera_kernels as k;
    let h1 = k::matmul(x, w).unwrap();
    let h2 = k::gelu(&h1).unwrap();
    let h3 = k::add(&h2, x).unwrap();
    let h4 = k::layernorm(&h3, g, b).unwrap();
    let h5 = k::mul(&h4, g).unwrap();
    let h6 = k::matmul(&h5, w).unwrap();
    let h7 = k::rmsnorm(&h6, g).unwrap();
    let h8 = k::add(&h7, &h3).unwrap();
    let h9 = k::gelu(&h8).unwrap();
    let h10 = k::softmax(&h9).unwrap();
    (h10, h3)
}

/// The chain in f64.
fn chain_ref(i: &Inputs) -> (Vec<f64>, Vec<f64>) {
    let f = |t: &Tensor<f32>| t.to_f64_vec().unwrap();
    let (x, w, g, b) = (f(&i.x), f(&i.w), f(&i.g), f(&i.b));
    let rows = |v: &[f64], op: &dyn Fn(&[f64]) -> Vec<f64>| -> Vec<f64> {
        v.chunks(C).flat_map(op).collect()
    };
    let layernorm = |r: &[f64]| {
        let m = r.iter().sum::<f64>() / C as f64;
        let var = r.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / C as f64;
        let s = 1.0 / (var + 1e-5).sqrt();
        (0..C).map(|j| (r[j] - m) * s * g[j] + b[j]).collect()
    };
    let rmsnorm = |r: &[f64]| {
        let ms = r.iter().map(|v| v * v).sum::<f64>() / C as f64;
        let s = 1.0 / (ms + 1e-6).sqrt();
        (0..C).map(|j| r[j] * s * g[j]).collect()
    };
    let h1 = reference::matmul(&x, &w, R, C, C);
    let h2: Vec<f64> = h1.iter().map(|v| reference::gelu(*v)).collect();
    let h3: Vec<f64> = h2.iter().zip(&x).map(|(a, b)| a + b).collect();
    let h4 = rows(&h3, &layernorm);
    let h5: Vec<f64> = h4.iter().enumerate().map(|(i, v)| v * g[i % C]).collect();
    let h6 = reference::matmul(&h5, &w, R, C, C);
    let h7 = rows(&h6, &rmsnorm);
    let h8: Vec<f64> = h7.iter().zip(&h3).map(|(a, b)| a + b).collect();
    let h9: Vec<f64> = h8.iter().map(|v| reference::gelu(*v)).collect();
    (reference::softmax(&h9, C), h3)
}

/// One body for every backend: the chain on `dev` agrees with f64, and its results live on
/// `dev`.
fn chain_agrees_with_f64(dev: &Device) {
    let i = inputs(11);
    let on = |t: &Tensor<f32>| t.to(dev).unwrap();
    let (y, h3) = chain(&on(&i.x), &on(&i.w), &on(&i.g), &on(&i.b));
    assert_eq!(y.device(), dev);
    assert_eq!(h3.device(), dev);
    let (want_y, want_h3) = chain_ref(&i);
    let ey = rel_error(&y.to_f64_vec().unwrap(), &want_y);
    let e3 = rel_error(&h3.to_f64_vec().unwrap(), &want_h3);
    assert!(ey < 1e-4 && e3 < 1e-5, "on {dev}: {ey:e} {e3:e}");
}

#[test]
fn chain_agrees_with_f64_on_cpu() {
    chain_agrees_with_f64(&Device::cpu());
}

#[test]
fn chain_agrees_with_f64_on_sim() {
    chain_agrees_with_f64(&Device::new_sim(Arch::Sm80));
}

#[test]
fn ten_kernel_chain_uploads_each_input_once_and_downloads_each_fetched_output_once() {
    let dev = Device::new_sim(Arch::Sm80);
    let i = inputs(21);
    let (x, w, g, b) = (
        i.x.to(&dev).unwrap(),
        i.w.to(&dev).unwrap(),
        i.g.to(&dev).unwrap(),
        i.b.to(&dev).unwrap(),
    );
    let up = dev.transfer_stats();
    assert_eq!(up.uploads, 4);
    assert_eq!(up.bytes_up as usize, 4 * (R * C + C * C + 2 * C));
    let (y, h3) = chain(&x, &w, &g, &b);
    let s = dev.stats();
    assert_eq!(
        s.transfers, up,
        "the chain itself moves nothing between host and device"
    );
    assert!(s.launches >= 10, "{} launches", s.launches);
    let y = y.to_vec().unwrap();
    let h3 = h3.to_vec().unwrap();
    let t = dev.transfer_stats();
    assert_eq!((t.uploads, t.downloads, t.device_copies), (4, 2, 0));
    assert_eq!(t.bytes_down as usize, 4 * 2 * R * C);
    // The fetched values are the chain's (not stale or zero blocks).
    let (want_y, want_h3) = chain_ref(&i);
    let f = |v: &[f32]| v.iter().map(|x| *x as f64).collect::<Vec<_>>();
    assert!(rel_error(&f(&y), &want_y) < 1e-4);
    assert!(rel_error(&f(&h3), &want_h3) < 1e-5);
}

#[test]
fn the_caching_allocator_reuses_blocks_across_launches() {
    let dev = Device::new_sim(Arch::Sm80);
    let i = inputs(31);
    let (x, w, g, b) = (
        i.x.to(&dev).unwrap(),
        i.w.to(&dev).unwrap(),
        i.g.to(&dev).unwrap(),
        i.b.to(&dev).unwrap(),
    );
    let baseline = dev.memory_stats().bytes_in_use;
    let first = chain(&x, &w, &g, &b).0.to_vec().unwrap();
    let m = dev.memory_stats();
    assert_eq!(
        m.bytes_in_use, baseline,
        "every intermediate went back to the cache"
    );
    assert!(m.bytes_cached > 0);
    // The ten results are alive until the chain returns, so the first chain takes every block
    // from the device; when it returns, all ten go back to the cache.
    assert_eq!((m.reuses, m.releases), (0, 10), "{m:?}");
    dev.reset_stats();
    let second = chain(&x, &w, &g, &b).0.to_vec().unwrap();
    let m = dev.memory_stats();
    assert_eq!(
        m.device_allocations, 0,
        "the second chain allocates nothing new: {m:?}"
    );
    assert_eq!(m.reuses, m.allocations);
    assert!(m.allocations >= 10);
    assert_eq!(
        first, second,
        "reused blocks hold no stale data that changes the result"
    );
    dev.empty_cache();
    let m = dev.memory_stats();
    assert_eq!(m.bytes_cached, 0);
    assert!(m.device_frees > 0);
}

#[test]
fn to_and_to_vec_copy_and_same_device_shares() {
    let a = Device::new_sim(Arch::Sm80);
    let b = Device::new_sim(Arch::Sm90a);
    let t = Tensor::<f32>::randn(&[5, 7], 41);
    let on_a = t.to(&a).unwrap();
    assert!(!on_a.is_host());
    let e = on_a.as_slice().unwrap_err().to_string();
    assert!(e.contains(&a.name()), "{e}");
    let again = on_a.to(&a).unwrap();
    assert_eq!(
        a.transfer_stats().uploads,
        1,
        "same device: shared, no copy"
    );
    let on_b = again.to(&b).unwrap();
    assert_eq!(a.transfer_stats().downloads, 1);
    assert_eq!(b.transfer_stats().uploads, 1);
    let back = on_b.to(&Device::cpu()).unwrap();
    assert!(back.is_host());
    assert_eq!(back.as_slice().unwrap(), t.as_slice().unwrap());
    assert_eq!(b.transfer_stats().downloads, 1);
    // Tensors of two devices cannot meet in one launch.
    let e = tessera_kernels::add(&on_a, &on_b).unwrap_err().to_string();
    assert!(e.contains(&b.name()), "{e}");
}

#[test]
fn launches_are_ordered_on_the_device_stream_with_events() {
    let dev = Device::new_sim(Arch::Sm80);
    let x = Tensor::<f32>::randn(&[6, 33], 51).to(&dev).unwrap();
    let start = dev.record_event().unwrap();
    let y = tessera_kernels::softmax(&x).unwrap();
    let end = dev.record_event().unwrap();
    end.synchronize().unwrap();
    dev.synchronize().unwrap();
    assert_eq!(end.device(), &dev);
    // The simulator has no clock: the interval is known to be unknown, not zero.
    assert_eq!(end.elapsed_since(&start).unwrap(), None);
    let other = Device::new_sim(Arch::Sm80).record_event().unwrap();
    assert!(end.elapsed_since(&other).is_err());
    let want = reference::softmax(&x.to_f64_vec().unwrap(), 33);
    assert!(rel_error(&y.to_f64_vec().unwrap(), &want) < 1e-5);
}
