//! The host cache (`tessera::host_cache`): a launch's large output reuses a block an earlier
//! output freed (counted), the cache stays within its capacity, `release` empties it, launch
//! outputs of 4 KiB or more are 64-byte aligned, tensors made from user `Vec`s behave as before, and results
//! are right whether the block was new or reused, from one thread or several.
//!
//! The cache is one per process: the tests take turns (`SERIAL`).

use std::sync::Mutex;
use tessera::host_cache;
use tessera::prelude::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[tessera::kernel]
fn add(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    x + y
}

#[tessera::kernel]
fn half_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    x * 0.5
}

/// `[r, c]` random values from `seed` (never all zeros).
fn rand(r: usize, c: usize, seed: u64) -> Tensor<f32> {
    Tensor::randn(&[r, c], seed)
}

/// `x + y` elementwise, on the host.
fn sum(x: &Tensor<f32>, y: &Tensor<f32>) -> Vec<f32> {
    let (x, y) = (x.as_slice().unwrap(), y.as_slice().unwrap());
    x.iter().zip(y).map(|(a, b)| a + b).collect()
}

fn ptr<T: Element>(t: &Tensor<T>) -> usize {
    t.as_slice().unwrap().as_ptr() as usize
}

/// 512 x 1024 f32: a 2 MiB output, above `host_cache::MIN_BLOCK`.
const R: usize = 512;
const C: usize = 1024;

#[test]
fn the_host_cache_reuses_bounds_and_releases_blocks() {
    let _turn = serial();
    host_cache::set_capacity(Some(64 << 20));
    host_cache::release();
    let (x, y) = (rand(R, C, 1), rand(R, C, 2));
    let want = sum(&x, &y);

    // Reuse: the second launch's output is the block the first one freed.
    let s0 = host_cache::stats();
    let a = add(&x, &y).unwrap();
    assert_eq!(a.as_slice().unwrap(), &want[..]);
    let pa = ptr(&a);
    drop(a);
    assert_eq!(host_cache::stats().cached_bytes, R * C * 4);
    let b = add(&x, &y).unwrap();
    let s1 = host_cache::stats();
    assert_eq!(ptr(&b), pa, "the freed block was not reused");
    assert_eq!((s1.hits - s0.hits, s1.misses - s0.misses), (1, 1));
    assert_eq!(b.as_slice().unwrap(), &want[..]);

    // A block in use is never handed out: outputs alive together are distinct blocks, each
    // with its own right result.
    let z = rand(R, C, 3);
    let c = add(&x, &z).unwrap();
    let d = add(&y, &z).unwrap();
    assert!(ptr(&b) != ptr(&c) && ptr(&c) != ptr(&d) && ptr(&b) != ptr(&d));
    assert_eq!(b.as_slice().unwrap(), &want[..]);
    assert_eq!(c.as_slice().unwrap(), &sum(&x, &z)[..]);
    assert_eq!(d.as_slice().unwrap(), &sum(&y, &z)[..]);

    // Capacity: three freed 2 MiB blocks in a 5 MiB cache keep two.
    host_cache::set_capacity(Some(5 << 20));
    drop((b, c, d));
    let s = host_cache::stats();
    assert_eq!((s.cached_blocks, s.cached_bytes), (2, 4 << 20));
    // Lowering the capacity frees the excess now.
    host_cache::set_capacity(Some(3 << 20));
    assert_eq!(host_cache::stats().cached_bytes, 2 << 20);
    assert_eq!(host_cache::capacity().unwrap(), 3 << 20);

    // Release: nothing kept, and the next launch allocates anew.
    assert_eq!(host_cache::release(), 2 << 20);
    assert_eq!(host_cache::stats().cached_bytes, 0);
    let s0 = host_cache::stats();
    let e = add(&x, &y).unwrap();
    assert_eq!(host_cache::stats().misses - s0.misses, 1);
    assert_eq!(e.as_slice().unwrap(), &want[..]);
    drop(e);

    // Off: nothing is kept.
    host_cache::set_capacity(Some(0));
    drop(add(&x, &y).unwrap());
    assert_eq!(host_cache::stats().cached_bytes, 0);
    host_cache::set_capacity(Some(64 << 20));

    // A reused block that held other data is fully overwritten: a bf16 output of the same
    // byte size as the f32 one takes its block.
    let xb = Tensor::<bf16>::randn(&[R, 2 * C], 4);
    drop(add(&x, &y).unwrap());
    let h = half_bf16(&xb).unwrap();
    let wb: Vec<bf16> = xb
        .as_slice()
        .unwrap()
        .iter()
        .map(|v| bf16::from_f32(v.to_f32() * 0.5))
        .collect();
    assert_eq!(h.as_slice().unwrap(), &wb[..]);
    assert_eq!(
        host_cache::stats().cached_bytes,
        0,
        "the f32 block was reused"
    );
    drop(h);
}

#[test]
fn launch_outputs_are_64_byte_aligned_and_user_vecs_still_work() {
    let _turn = serial();
    // 64-byte aligned from 4 KiB on (`[1, 1]` and `[1, 1000]`'s bf16: their element's).
    let align = |bytes: usize| if bytes >= 4096 { 64 } else { bytes.min(4) };
    for (r, c) in [(1, 1), (1, 1000), (37, 300), (9, 1025), (R, C)] {
        let (x, y) = (rand(r, c, 5), rand(r, c, 6));
        let a = add(&x, &y).unwrap();
        assert_eq!(ptr(&a) % align(r * c * 4), 0, "[{r}, {c}]");
        assert_eq!(ptr(&x) % align(r * c * 4), 0, "randn [{r}, {c}]");
        assert_eq!(a.as_slice().unwrap(), &sum(&x, &y)[..]);
        let a2 = a.clone();
        assert_eq!(ptr(&a2) % align(r * c * 4), 0, "a clone of [{r}, {c}]");
        assert_eq!(a2, a);
        let b = half_bf16(&Tensor::<bf16>::randn(&[r, c], 7)).unwrap();
        assert_eq!(ptr(&b) % align(r * c * 2).min(2), 0, "bf16 [{r}, {c}]");
        if r * c * 2 >= 4096 {
            assert_eq!(ptr(&b) % 64, 0, "bf16 [{r}, {c}]");
        }
        // An output as a Vec is a copy with the same elements.
        assert_eq!(a.clone().into_vec().unwrap(), sum(&x, &y));
    }
    // A user Vec stays the tensor's storage: no copy in or out, writable, a launch input and
    // a `launch_into` destination.
    let v: Vec<f32> = (0..R * C).map(|i| (i % 1013) as f32 - 500.25).collect();
    let p = v.as_ptr() as usize;
    let mut t = Tensor::from_vec(v, &[R, C]).unwrap();
    assert_eq!(ptr(&t), p);
    t.as_mut_slice().unwrap()[3] = 9.5;
    let y = rand(R, C, 8);
    let want = sum(&t, &y);
    assert_eq!(add(&t, &y).unwrap().as_slice().unwrap(), &want[..]);
    let mut out = Tensor::from_vec(vec![f32::NAN; R * C], &[R, C]).unwrap();
    let q = ptr(&out);
    add::KERNEL
        .launch_into(&[t.arg(), y.arg()], &mut out)
        .unwrap();
    assert_eq!((ptr(&out), out.as_slice().unwrap()), (q, &want[..]));
    let back = t.into_vec().unwrap();
    assert_eq!((back.as_ptr() as usize, back[3]), (p, 9.5));
}

#[test]
fn launches_from_several_threads_get_right_results() {
    let _turn = serial();
    let (x, y) = (rand(R, C, 9), rand(R, C, 10));
    let want = sum(&x, &y);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let mut kept = Vec::new();
                for i in 0..8 {
                    let a = add(&x, &y).unwrap();
                    assert_eq!(a.as_slice().unwrap(), &want[..]);
                    if i % 3 == 0 {
                        kept.push(a);
                    }
                }
                for a in &kept {
                    assert_eq!(a.as_slice().unwrap(), &want[..]);
                }
            });
        }
    });
}

#[test]
fn the_capacity_follows_tessera_host_cache() {
    let _turn = serial();
    let (x, y) = (rand(R, C, 11), rand(R, C, 12));
    host_cache::set_capacity(None);
    // SAFETY (edition 2024 `set_var`): every test here holds `SERIAL`, so no other thread of
    // this process reads the environment meanwhile.
    unsafe { std::env::set_var("TESSERA_HOST_CACHE", "3M") };
    tessera::reload_env();
    assert_eq!(host_cache::capacity().unwrap(), 3 << 20);
    unsafe { std::env::set_var("TESSERA_HOST_CACHE", "lots") };
    tessera::reload_env();
    let e = host_cache::capacity().unwrap_err().to_string();
    assert!(e.contains("TESSERA_HOST_CACHE=\"lots\""), "{e}");
    // A launch with an output the cache would serve reports it; a small one runs.
    let e = add(&x, &y).unwrap_err().to_string();
    assert!(e.contains("TESSERA_HOST_CACHE"), "{e}");
    let (a, b) = (rand(3, 5, 13), rand(3, 5, 14));
    assert_eq!(add(&a, &b).unwrap().as_slice().unwrap(), &sum(&a, &b)[..]);
    unsafe { std::env::remove_var("TESSERA_HOST_CACHE") };
    tessera::reload_env();
    // Unset: the default, 1/8 of the process's memory and at least 1 GiB.
    assert_eq!(
        host_cache::capacity().unwrap(),
        host_cache::default_capacity()
    );
    assert!(host_cache::default_capacity() >= host_cache::MIN_DEFAULT_CAPACITY);
    assert_eq!(add(&x, &y).unwrap().as_slice().unwrap(), &sum(&x, &y)[..]);
}
