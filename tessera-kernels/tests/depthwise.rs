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
