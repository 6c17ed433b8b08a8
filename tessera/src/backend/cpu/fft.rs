//! The Tile IR `fft` / `ifft` op on the CPU: radix-2/4 Stockham over an `f32[L, W]` tile whose
//! column pairs are `W / 2` independent complex transforms along the rows.
//!
//! Stockham autosort (no bit reversal): each stage reads one buffer and writes the other; a
//! radix-2 stage first when `log2 L` is odd, then radix-4 stages. A butterfly applies one
//! twiddle to every transform of the tile, so its inner loop walks the `W` contiguous floats
//! of a few rows at once (the same twiddle for every column pair). Twiddles are the
//! `L`-th roots of unity computed in f64 and rounded once to f32, cached per length and
//! thread. Independent tiles (programs of the grid) run on rayon, as every CPU kernel does.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    static ROOTS: RefCell<HashMap<usize, Rc<Vec<[f32; 2]>>>> = RefCell::new(HashMap::new());
}

/// `(cos, sin)` of `2πk/l` for `k < l`, rounded from f64.
fn roots(l: usize) -> Rc<Vec<[f32; 2]>> {
    ROOTS.with(|m| {
        m.borrow_mut()
            .entry(l)
            .or_insert_with(|| {
                Rc::new(
                    (0..l)
                        .map(|k| {
                            let t = 2.0 * std::f64::consts::PI * k as f64 / l as f64;
                            [t.cos() as f32, t.sin() as f32]
                        })
                        .collect(),
                )
            })
            .clone()
    })
}

/// The radices of the stages for length `l` (a 2 first when `log2 l` is odd, then 4s), as the
/// PTX emitter runs them.
fn radices(l: usize) -> Vec<usize> {
    let log = l.trailing_zeros() as usize;
    let mut out = if log % 2 == 1 { vec![2] } else { vec![] };
    out.extend(std::iter::repeat_n(4, log / 2));
    out
}

/// Transforms the `w / 2` complex columns of the row-major `[l, w]` tile `x` in place.
pub(crate) fn stockham(x: &mut Vec<f32>, l: usize, w: usize, inverse: bool) {
    debug_assert!(l.is_power_of_two() && w.is_multiple_of(2) && x.len() == l * w);
    if l > 1 {
        let roots = roots(l);
        let sign = if inverse { 1.0f32 } else { -1.0 };
        let mut y = vec![0.0f32; x.len()];
        let mut ns = 1;
        for r in radices(l) {
            stage(x, &mut y, l, w, r, ns, &roots, sign);
            std::mem::swap(x, &mut y);
            ns *= r;
        }
    }
    if inverse && l > 1 {
        let s = 1.0 / l as f32;
        x.iter_mut().for_each(|v| *v *= s);
    }
}

/// One radix-`r` stage from `src` to `dst` with sub-transform size `ns`.
#[allow(clippy::too_many_arguments)]
fn stage(
    src: &[f32],
    dst: &mut [f32],
    l: usize,
    w: usize,
    r: usize,
    ns: usize,
    roots: &[[f32; 2]],
    sign: f32,
) {
    let span = l / r;
    let row = |i: usize| i * w..(i + 1) * w;
    let mut tmp = vec![0.0f32; if r == 4 { 4 * w } else { 0 }];
    for j in 0..span {
        let k = j % ns;
        let m = k * (l / (ns * r));
        let tw = |q: usize| {
            let [c, s] = roots[(q * m) % l];
            [c, sign * s]
        };
        let base = (j - k) * r + k;
        if r == 2 {
            let (a, b) = (&src[row(j)], &src[row(j + span)]);
            let t1 = tw(1);
            let (d0, d1) = two_rows(dst, w, base, base + ns);
            for c in (0..w).step_by(2) {
                let (br, bi) = cmul(b[c], b[c + 1], t1);
                d0[c] = a[c] + br;
                d0[c + 1] = a[c + 1] + bi;
                d1[c] = a[c] - br;
                d1[c + 1] = a[c + 1] - bi;
            }
        } else {
            let (v0, v1, v2, v3) = (
                &src[row(j)],
                &src[row(j + span)],
                &src[row(j + 2 * span)],
                &src[row(j + 3 * span)],
            );
            let (t1, t2, t3) = (tw(1), tw(2), tw(3));
            let mut o = [[0.0f32; 2]; 4];
            for c in (0..w).step_by(2) {
                let a = (v0[c], v0[c + 1]);
                let b = cmul(v1[c], v1[c + 1], t1);
                let cc = cmul(v2[c], v2[c + 1], t2);
                let d = cmul(v3[c], v3[c + 1], t3);
                let (a0, a1) = ((a.0 + cc.0, a.1 + cc.1), (a.0 - cc.0, a.1 - cc.1));
                let (b0, b1) = ((b.0 + d.0, b.1 + d.1), (b.0 - d.0, b.1 - d.1));
                // sign·i·b1 = (−sign·b1.im, sign·b1.re)
                let ib = (-sign * b1.1, sign * b1.0);
                o[0] = [a0.0 + b0.0, a0.1 + b0.1];
                o[1] = [a1.0 + ib.0, a1.1 + ib.1];
                o[2] = [a0.0 - b0.0, a0.1 - b0.1];
                o[3] = [a1.0 - ib.0, a1.1 - ib.1];
                for (q, oq) in o.iter().enumerate() {
                    tmp[q * w + c] = oq[0];
                    tmp[q * w + c + 1] = oq[1];
                }
            }
            for q in 0..4 {
                dst[row(base + q * ns)].copy_from_slice(&tmp[q * w..(q + 1) * w]);
            }
        }
    }
}

fn two_rows(dst: &mut [f32], w: usize, i0: usize, i1: usize) -> (&mut [f32], &mut [f32]) {
    debug_assert!(i0 < i1);
    let (lo, hi) = dst.split_at_mut(i1 * w);
    (&mut lo[i0 * w..(i0 + 1) * w], &mut hi[..w])
}

#[inline(always)]
fn cmul(re: f32, im: f32, t: [f32; 2]) -> (f32, f32) {
    (re * t[0] - im * t[1], re * t[1] + im * t[0])
}

#[cfg(test)]
mod tests {
    use super::stockham;
    use tessera_ir::reference::ops::dft;

    /// Every length up to the limit and three batch widths, both directions, against the f64
    /// naive DFT (seeded random inputs); `ifft(fft(x)) ≈ x`.
    #[test]
    fn stockham_matches_the_naive_dft() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let mut l = 1;
        while l <= tessera_ir::graph::FFT_MAX_LENGTH as usize {
            for w in [2usize, 6, 16] {
                if l * w > 4096 && w > 2 {
                    continue;
                }
                let x64: Vec<f64> = (0..l * w).map(|_| rnd()).collect();
                for inverse in [false, true] {
                    let mut x: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
                    stockham(&mut x, l, w, inverse);
                    let want = dft(&x64, &[l, w / 2, 2], 0, inverse);
                    let norm = want.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-30);
                    let err = x
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (*a as f64 - b).powi(2))
                        .sum::<f64>()
                        .sqrt();
                    assert!(
                        err / norm < 2e-6,
                        "L={l} W={w} inverse={inverse}: {}",
                        err / norm
                    );
                }
                let mut x: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
                stockham(&mut x, l, w, false);
                stockham(&mut x, l, w, true);
                for (a, b) in x.iter().zip(&x64) {
                    assert!((*a as f64 - b).abs() < 1e-5, "round trip at L={l}");
                }
            }
            l *= 2;
        }
    }
}
