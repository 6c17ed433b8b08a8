//! Depthwise convolution against an f64 reference, at odd shapes and across its knob space.

use tessera::Tensor;
use tessera_kernels::conv::depthwise_conv2d as dw;

fn reference(x: &Tensor<f32>, f: &Tensor<f32>) -> Vec<f64> {
    let (xs, fs) = (x.shape(), f.shape());
    let (oh, ow, c) = (xs[0] - fs[0] + 1, xs[1] - fs[1] + 1, xs[2]);
    let (xv, fv) = (x.as_slice().unwrap(), f.as_slice().unwrap());
    let mut y = vec![0f64; oh * ow * c];
    for h in 0..oh {
        for w in 0..ow {
            for ch in 0..c {
                let mut s = 0f64;
                for i in 0..fs[0] {
                    for j in 0..fs[1] {
                        s += xv[((h + i) * xs[1] + w + j) * c + ch] as f64
                            * fv[(i * fs[1] + j) * c + ch] as f64;
                    }
                }
                y[(h * ow + w) * c + ch] = s;
            }
        }
    }
    y
}

fn check(got: &Tensor<f32>, want: &[f64]) {
    assert_eq!(got.as_slice().unwrap().len(), want.len());
    for (k, (g, w)) in got.as_slice().unwrap().iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "at {k}: {g} vs {w}"
        );
    }
}

#[test]
fn matches_f64_reference_at_odd_shapes() {
    for (h, w, c, kh, kw) in [
        (9, 11, 5, 3, 3),
        (17, 13, 70, 5, 3),
        (6, 6, 3, 1, 1),
        (4, 40, 129, 4, 7),
    ] {
        let x = Tensor::<f32>::randn(&[h, w, c], 1);
        let f = Tensor::<f32>::randn(&[kh, kw, c], 2);
        check(
            &tessera_kernels::depthwise_conv2d(&x, &f).unwrap(),
            &reference(&x, &f),
        );
    }
}

#[test]
fn every_knob_setting_agrees() {
    let x = Tensor::<f32>::randn(&[13, 21, 37], 3);
    let f = Tensor::<f32>::randn(&[3, 5, 37], 4);
    let want = reference(&x, &f);
    for bh in [1, 2, 8] {
        for bw in [8, 64] {
            for bc in [16, 128] {
                let mut y = Tensor::<f32>::zeros(&[11, 17, 37]).unwrap();
                dw::launch_with(&[("BH", bh), ("BW", bw), ("BC", bc)], &x, &f, &mut y).unwrap();
                check(&y, &want);
            }
        }
    }
}

#[test]
fn bad_filter_is_an_error() {
    let x = Tensor::<f32>::randn(&[5, 5, 4], 1);
    let f = Tensor::<f32>::randn(&[3, 3, 5], 2);
    assert!(tessera_kernels::depthwise_conv2d(&x, &f).is_err());
}

#[test]
fn into_a_kept_output_overwrites_it_bit_for_bit() {
    // Channel counts on the nine-taps path (multiples of 16) and off it, odd heights/widths;
    // `y` starts as NaN and as the previous shape's result, so nothing it held may survive.
    for (i, &(h, w, c)) in [(9, 13, 16), (5, 40, 48), (12, 7, 5), (3, 3, 64)]
        .iter()
        .enumerate()
    {
        let x = Tensor::<f32>::randn(&[h, w, c], 40 + i as u64);
        let f = Tensor::<f32>::randn(&[3, 3, c], 50 + i as u64);
        let want = tessera_kernels::depthwise_conv2d(&x, &f).unwrap();
        let mut y = Tensor::<f32>::full(want.shape(), f32::NAN).unwrap();
        for _ in 0..2 {
            tessera_kernels::conv::depthwise_conv2d_into(&x, &f, &mut y).unwrap();
            let bits = |t: &Tensor<f32>| -> Vec<u32> {
                t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
            };
            assert_eq!(bits(&y), bits(&want), "[{h}, {w}, {c}]");
        }
    }
    let x = Tensor::<f32>::randn(&[6, 7, 8], 1);
    let f = Tensor::<f32>::randn(&[3, 3, 8], 2);
    let mut wrong = Tensor::<f32>::zeros(&[5, 4, 8]).unwrap();
    let e = tessera_kernels::conv::depthwise_conv2d_into(&x, &f, &mut wrong).unwrap_err();
    assert!(
        e.to_string().contains("[4, 5, 8]") && e.to_string().contains("[5, 4, 8]"),
        "{e}"
    );
    assert_eq!(
        wrong.to_vec().unwrap(),
        vec![0.0; 160],
        "a refused `y` is left as it was"
    );
}
