//! Reading single elements: [`Tensor::get`] and [`Tensor::item`].

use super::{Element, Storage, Tensor};
use crate::{Error, Result};

impl<T: Element> Tensor<T> {
    /// The element at `index` (one index per axis, outermost first); an error when the rank
    /// differs or an index is out of range. For a tensor in device memory this downloads that
    /// one element.
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let t = Tensor::<f32>::arange(6)?.reshape(&[2, 3])?;
    /// assert_eq!(t.get(&[1, 2])?, 5.0);
    /// assert!(t.get(&[2, 0]).is_err());                 // row 2 of 2
    /// assert!(t.get(&[1]).is_err());                    // rank 1 of 2
    /// let d = t.to(&Device::sim())?;
    /// assert_eq!(d.get(&[0, 1])?, 1.0);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn get(&self, index: &[usize]) -> Result<T> {
        let at = self.offset(index)?;
        match &self.storage {
            Storage::Host(v) => Ok(v[at]),
            Storage::Device(b) => {
                let mut x = T::default();
                let size = std::mem::size_of::<T>();
                b.download_range(at * size, bytemuck::bytes_of_mut(&mut x))?;
                Ok(x)
            }
        }
    }

    /// [`Tensor::get`] with the index as an array: `t.at([i, j])`.
    ///
    /// ```
    /// use tessera::Tensor;
    /// let t = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(t.at([1, 1])?, 4);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn at<const N: usize>(&self, index: [usize; N]) -> Result<T> {
        self.get(&index)
    }

    /// The value of a one-element tensor (any rank: `[]`, `[1]`, `[1, 1]`, ...); an error
    /// naming the shape otherwise.
    ///
    /// ```
    /// use tessera::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![2.5f32], &[1, 1])?.item()?, 2.5);
    /// assert!(Tensor::<f32>::zeros(&[2])?.item().is_err());
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn item(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidSetting {
                setting: "Tensor::item".into(),
                message: format!(
                    "needs a tensor of one element, this one has shape {:?}",
                    self.shape
                ),
            });
        }
        self.get(&vec![0; self.shape.len()])
    }

    /// The row-major element offset of `index`, checked against the shape.
    pub(crate) fn offset(&self, index: &[usize]) -> Result<usize> {
        if index.len() != self.shape.len() || index.iter().zip(&self.shape).any(|(i, d)| i >= d) {
            return Err(Error::IndexOutOfBounds {
                index: index.to_vec(),
                shape: self.shape.clone(),
            });
        }
        // In range on every axis, so the offset is below numel (which fits).
        Ok(index
            .iter()
            .zip(&self.shape)
            .fold(0usize, |at, (i, d)| at * d + i))
    }
}

/// A 1-D host tensor over the vector (no copy).
///
/// ```
/// use tessera::Tensor;
/// let t = Tensor::from(vec![1.0f32, 2.0, 3.0]);
/// assert_eq!(t.shape(), &[3]);
/// let u: Tensor<f32> = vec![4.0f32].into();
/// assert_eq!(u.item()?, 4.0);
/// # Ok::<(), tessera::Error>(())
/// ```
impl<T: Element> From<Vec<T>> for Tensor<T> {
    fn from(v: Vec<T>) -> Self {
        Tensor {
            shape: vec![v.len()],
            storage: Storage::Host(super::HostData::Vec(v)),
        }
    }
}
