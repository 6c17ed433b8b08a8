//! Printing tensors: `Display` is a numpy-like summarised view with the shape, dtype and
//! device; `Debug` is a short struct with at most a few elements.

use super::{Element, Storage, Tensor};
use std::fmt;
use tessera_ir::DType;

/// Tensors with more elements than this are summarised (the first and last
/// [`EDGE`] entries of every axis).
const SUMMARISE_OVER: usize = 1000;
const EDGE: usize = 3;
/// Elements `Debug` shows.
const DEBUG_ELEMENTS: usize = 8;

/// The numpy-like view: every element up to 1000 elements, else the first and last three
/// entries of each axis with `...` between; then the shape, dtype and device. Printing a
/// tensor in device memory downloads the elements it shows (the whole tensor when it is not
/// summarised, else one element at a time).
///
/// ```
/// use tessera::Tensor;
/// let t = Tensor::<f32>::arange(6)?.reshape(&[2, 3])?;
/// assert_eq!(
///     t.to_string(),
///     "tensor([[0.0000, 1.0000, 2.0000],\n        [3.0000, 4.0000, 5.0000]], shape=[2, 3], dtype=f32, device=cpu)"
/// );
/// let big = Tensor::<i32>::arange(2000)?;
/// assert_eq!(
///     big.to_string(),
///     "tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=i32, device=cpu)"
/// );
/// # Ok::<(), tessera::Error>(())
/// ```
impl<T: Element> fmt::Display for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let summarise = self.numel() > SUMMARISE_OVER;
        // The indices shown on each axis (`None`: the `...` gap).
        let axes: Vec<Vec<Option<usize>>> = self
            .shape
            .iter()
            .map(|&d| {
                if summarise && d > 2 * EDGE {
                    (0..EDGE)
                        .map(Some)
                        .chain([None])
                        .chain((d - EDGE..d).map(Some))
                        .collect()
                } else {
                    (0..d).map(Some).collect()
                }
            })
            .collect();
        let mut offsets = Vec::new();
        if self.numel() > 0 {
            collect(&self.shape, &axes, 0, 0, &mut offsets);
        }
        let values = match self.values(&offsets, summarise) {
            Ok(v) => v,
            Err(e) => return write!(f, "tensor(<unreadable: {e}>, shape={:?})", self.shape),
        };
        let texts: Vec<String> = values.iter().map(|&x| number(T::DTYPE, x)).collect();
        let width = texts.iter().map(String::len).max().unwrap_or(0);
        let mut out = String::from("tensor(");
        if self.numel() == 0 {
            out.push_str(&"[".repeat(self.shape.len().max(1)));
            out.push_str(&"]".repeat(self.shape.len().max(1)));
        } else {
            let mut it = texts.iter();
            render(&axes, 0, width, &mut it, &mut out);
        }
        write!(
            f,
            "{out}, shape={:?}, dtype={}, device={})",
            self.shape,
            T::DTYPE,
            self.device()
        )
    }
}

/// A short form that never prints more than a few elements:
/// `Tensor { shape: [2, 3], dtype: f32, device: cpu, data: [0.0, 1.0, …] }`.
///
/// ```
/// use tessera::Tensor;
/// let t = Tensor::<f32>::zeros(&[1000, 1000])?;
/// let s = format!("{t:?}");
/// assert!(s.len() < 200, "{s}");
/// assert!(s.contains("shape: [1000, 1000]") && s.contains("999992 more"), "{s}");
/// # Ok::<(), tessera::Error>(())
/// ```
impl<T: Element> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor {{ shape: {:?}, dtype: {}, device: {}",
            self.shape,
            T::DTYPE,
            self.device()
        )?;
        match &self.storage {
            Storage::Host(v) => {
                let shown: Vec<String> = v
                    .iter()
                    .take(DEBUG_ELEMENTS)
                    .map(|x| format!("{x:?}"))
                    .collect();
                write!(f, ", data: [{}", shown.join(", "))?;
                if v.len() > DEBUG_ELEMENTS {
                    write!(f, ", … {} more", v.len() - DEBUG_ELEMENTS)?;
                }
                write!(f, "] }}")
            }
            Storage::Device(b) => write!(f, ", block: {b:?} }}"),
        }
    }
}

impl<T: Element> Tensor<T> {
    /// The elements at `offsets` as f64: read in place on the host; on a device, one download
    /// of the whole tensor unless `summarised`, else one per element.
    fn values(&self, offsets: &[usize], summarised: bool) -> crate::Result<Vec<f64>> {
        match &self.storage {
            Storage::Host(v) => Ok(offsets.iter().map(|&i| v[i].to_f64()).collect()),
            Storage::Device(_) if !summarised => {
                let all = self.to_vec()?;
                Ok(offsets.iter().map(|&i| all[i].to_f64()).collect())
            }
            Storage::Device(b) => offsets
                .iter()
                .map(|&i| {
                    let mut x = T::default();
                    b.download_range(i * std::mem::size_of::<T>(), bytemuck::bytes_of_mut(&mut x))?;
                    Ok(x.to_f64())
                })
                .collect(),
        }
    }
}

/// Row-major offsets of the shown elements, in print order.
fn collect(
    shape: &[usize],
    axes: &[Vec<Option<usize>>],
    axis: usize,
    base: usize,
    out: &mut Vec<usize>,
) {
    if axis == shape.len() {
        out.push(base);
        return;
    }
    for i in axes[axis].iter().flatten() {
        collect(shape, axes, axis + 1, base * shape[axis] + i, out);
    }
}

/// Writes axis `axis` and below, taking the element texts in print order.
fn render<'a>(
    axes: &[Vec<Option<usize>>],
    axis: usize,
    width: usize,
    texts: &mut impl Iterator<Item = &'a String>,
    out: &mut String,
) {
    if axis == axes.len() {
        if let Some(t) = texts.next() {
            out.push_str(&format!("{t:>width$}"));
        }
        return;
    }
    let inner = axis + 1 == axes.len();
    // Continuation lines line up under the first element: `tensor(` plus one `[` per axis.
    let sep = if inner {
        ", ".to_string()
    } else {
        format!(
            ",{}{}",
            "\n".repeat(axes.len() - axis - 1),
            " ".repeat("tensor(".len() + axis + 1)
        )
    };
    out.push('[');
    for (k, i) in axes[axis].iter().enumerate() {
        if k > 0 {
            out.push_str(&sep);
        }
        match i {
            Some(_) => render(axes, axis + 1, width, texts, out),
            None => out.push_str("..."),
        }
    }
    out.push(']');
}

/// One element as text: integers and booleans exactly, floats with four decimals (or in
/// scientific notation when very large or small).
fn number(dtype: DType, x: f64) -> String {
    match dtype {
        DType::I32 => format!("{}", x as i64),
        DType::Bool => (x != 0.0).to_string(),
        _ if !x.is_finite() => format!("{x}"),
        _ if x != 0.0 && (x.abs() >= 1e6 || x.abs() < 1e-4) => format!("{x:.4e}"),
        _ => format!("{x:.4}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    #[test]
    fn scalars_empties_and_rank3_summaries_print() {
        let s = Tensor::from_vec(vec![1.5f32], &[]).unwrap();
        assert_eq!(
            s.to_string(),
            "tensor(1.5000, shape=[], dtype=f32, device=cpu)"
        );
        let e = Tensor::<f32>::zeros(&[0, 3]).unwrap();
        assert_eq!(
            e.to_string(),
            "tensor([[]], shape=[0, 3], dtype=f32, device=cpu)"
        );
        let big = Tensor::<i32>::arange(10 * 10 * 20)
            .unwrap()
            .reshape(&[10, 10, 20])
            .unwrap();
        let text = big.to_string();
        // 6 × 6 × 6 shown elements plus the gaps; the last element is 1999.
        assert!(text.contains("1999]]], shape=[10, 10, 20]"), "{text}");
        assert_eq!(text.matches("...").count(), 1 + 6 + 6 * 6, "{text}");
        assert!(text.lines().count() < 60, "{text}");
    }
}
