//! Checked size arithmetic and fallible allocation: every shape product, byte size and large
//! allocation of the runtime goes through here, so a shape too large for memory is an
//! [`Error::TooLarge`] naming it and an allocation the system refuses is an
//! [`Error::OutOfMemory`], never an overflow, a panic or an abort.

use crate::{Error, Result};

/// The element count of `shape`, or [`Error::TooLarge`] naming `what` and the shape when the
/// product overflows `usize`.
///
/// ```
/// use tessera::tensor::size::numel;
/// assert_eq!(numel("x", &[2, 3, 4])?, 24);
/// assert_eq!(numel("x", &[1 << 40, 0])?, 0);
/// let e = numel("x", &[1 << 32, 1 << 32]).unwrap_err().to_string();
/// assert!(e.contains("[4294967296, 4294967296]"), "{e}");
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn numel(what: &str, shape: &[usize]) -> Result<usize> {
    // A zero dim makes the product zero whatever the other dims are.
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| too_large(what, shape, "its element count overflows usize".into()))
}

/// The product of `dims` for a shape already checked with [`numel`] (a tensor's shape, a
/// kernel's output): exact whenever the whole shape is non-empty, and 0 when a dim is 0 — the
/// dims of an empty tensor may multiply past `usize` (`[2^40, 2^40, 0]`), so the product is
/// taken zero-first and saturates instead of overflowing. Sub-shapes of an empty shape (its
/// batch dims, its rows) may saturate; nothing is allocated or read for them.
///
/// ```
/// use tessera::tensor::size::elements;
/// assert_eq!(elements(&[2, 3, 4]), 24);
/// assert_eq!(elements(&[1 << 40, 1 << 40, 0]), 0);
/// assert_eq!(elements(&[1 << 40, 1 << 40]), usize::MAX);
/// ```
pub fn elements(dims: &[usize]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    dims.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

/// The byte size of `shape` with `elem`-byte elements, or [`Error::TooLarge`] when it exceeds
/// `isize::MAX` (the most any allocation can hold).
///
/// ```
/// use tessera::tensor::size::byte_len;
/// assert_eq!(byte_len("x", &[2, 3], 4)?, 24);
/// assert!(byte_len("x", &[1 << 62], 4).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn byte_len(what: &str, shape: &[usize], elem: usize) -> Result<usize> {
    let n = numel(what, shape)?;
    n.checked_mul(elem)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            too_large(
                what,
                shape,
                format!("{n} elements of {elem} bytes exceed the largest possible allocation"),
            )
        })
}

/// A vector of `n` copies of `value`, its memory reserved fallibly: [`Error::OutOfMemory`]
/// (with the bytes asked for) when the allocator refuses, instead of aborting the process.
///
/// ```
/// use tessera::tensor::size::try_filled;
/// assert_eq!(try_filled(3, 1.5f32)?, vec![1.5; 3]);
/// let e = try_filled(1usize << 42, 0f32).unwrap_err();
/// assert_eq!(e, tessera::Error::OutOfMemory { bytes: 1 << 44 });
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn try_filled<T: Clone>(n: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_with_capacity(n)?;
    v.resize(n, value);
    Ok(v)
}

/// An empty vector with room for `n` elements, reserved fallibly ([`Error::OutOfMemory`]).
pub fn try_with_capacity<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
    })?;
    Ok(v)
}

fn too_large(what: &str, shape: &[usize], reason: String) -> Error {
    Error::TooLarge {
        what: what.into(),
        shape: shape.to_vec(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_are_checked() {
        assert_eq!(numel("t", &[]).unwrap(), 1);
        assert_eq!(numel("t", &[usize::MAX, 0]).unwrap(), 0);
        assert!(numel("t", &[usize::MAX, 2]).is_err());
        assert_eq!(byte_len("t", &[3], 2).unwrap(), 6);
        assert!(byte_len("t", &[(isize::MAX as usize) / 2 + 1], 2).is_err());
    }

    #[test]
    fn refused_allocations_are_errors() {
        let e = try_with_capacity::<u64>(1 << 50).unwrap_err();
        assert_eq!(e, Error::OutOfMemory { bytes: 1 << 53 });
    }
}
