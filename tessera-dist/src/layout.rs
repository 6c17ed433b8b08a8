//! Row-major block copies: slicing, padding and reassembling shards.

use std::ops::Range;

/// Copies the box `extent` at `src_off` in `src` (shape `src_shape`) to `dst_off` in `dst`.
pub(crate) fn copy_region<T: Copy>(
    src: &[T],
    src_shape: &[usize],
    src_off: &[usize],
    dst: &mut [T],
    dst_shape: &[usize],
    dst_off: &[usize],
    extent: &[usize],
) {
    let rank = extent.len();
    if extent.contains(&0) {
        return;
    }
    if rank == 0 {
        dst[0] = src[0];
        return;
    }
    let strides = |s: &[usize]| {
        let mut st = vec![1; s.len()];
        for i in (0..s.len().saturating_sub(1)).rev() {
            st[i] = st[i + 1] * s[i + 1];
        }
        st
    };
    let (ss, ds) = (strides(src_shape), strides(dst_shape));
    let inner = extent[rank - 1];
    let mut idx = vec![0usize; rank - 1];
    loop {
        let so: usize = (0..rank)
            .map(|d| (src_off[d] + if d < rank - 1 { idx[d] } else { 0 }) * ss[d])
            .sum();
        let dof: usize = (0..rank)
            .map(|d| (dst_off[d] + if d < rank - 1 { idx[d] } else { 0 }) * ds[d])
            .sum();
        dst[dof..dof + inner].copy_from_slice(&src[so..so + inner]);
        // odometer over the outer dims
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < extent[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The sub-box `ranges` of a tensor.
pub(crate) fn slice<T: Copy + Default>(
    data: &[T],
    shape: &[usize],
    ranges: &[Range<usize>],
) -> Vec<T> {
    let ext: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    let off: Vec<usize> = ranges.iter().map(|r| r.start).collect();
    let mut out = vec![T::default(); ext.iter().product()];
    copy_region(data, shape, &off, &mut out, &ext, &vec![0; ext.len()], &ext);
    out
}
