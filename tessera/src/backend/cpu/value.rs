//! Run-time values of the CPU interpreter: tiles of f32 / i32 / bool (scalars are rank 0).

use tessera_ir::DType;

/// Element storage: every float dtype is held widened to f32.
#[derive(Clone, Debug)]
pub(crate) enum Data {
    F(Vec<f32>),
    I(Vec<i32>),
    B(Vec<bool>),
}

/// A tile value.
#[derive(Clone, Debug)]
pub(crate) struct Tile {
    pub dtype: DType,
    /// Up to two dims; unused trailing entries are 1.
    pub shape: [usize; 2],
    pub rank: usize,
    pub data: Data,
    /// Rows at and after this index hold only `+0.0` (float tiles): a load that padded the
    /// rows past a tensor's edge with `other = 0`, or a `full(0)`. Equal to `shape[0]` when
    /// nothing is known. [`super::exec`]'s `dot` multiplies only the rows before it (see
    /// `dot_rows`); any op that rewrites a tile's data or shape resets it ([`Tile::unknown_rows`]).
    pub zero_rows_from: usize,
}

impl Tile {
    pub fn dims(&self) -> &[usize] {
        &self.shape[..self.rank]
    }

    pub fn shape_of(dims: &[usize]) -> ([usize; 2], usize) {
        let mut s = [1, 1];
        s[..dims.len()].copy_from_slice(dims);
        (s, dims.len())
    }

    pub fn new_f(dtype: DType, dims: &[usize], v: Vec<f32>) -> Tile {
        let (shape, rank) = Tile::shape_of(dims);
        Tile {
            dtype,
            shape,
            rank,
            data: Data::F(v),
            zero_rows_from: shape[0],
        }
    }

    pub fn new_i(dims: &[usize], v: Vec<i32>) -> Tile {
        let (shape, rank) = Tile::shape_of(dims);
        Tile {
            dtype: DType::I32,
            shape,
            rank,
            data: Data::I(v),
            zero_rows_from: shape[0],
        }
    }

    pub fn new_b(dims: &[usize], v: Vec<bool>) -> Tile {
        let (shape, rank) = Tile::shape_of(dims);
        Tile {
            dtype: DType::Bool,
            shape,
            rank,
            data: Data::B(v),
            zero_rows_from: shape[0],
        }
    }

    /// Forgets what is known about zero rows (after the data or the shape changed).
    pub fn unknown_rows(mut self) -> Tile {
        self.zero_rows_from = self.shape[0];
        self
    }

    pub fn scalar_i(x: i32) -> Tile {
        Tile::new_i(&[], vec![x])
    }

    pub fn f(&self) -> &[f32] {
        match &self.data {
            Data::F(v) => v,
            _ => panic!("tile of {} used as float (verifier bug)", self.dtype),
        }
    }

    pub fn i(&self) -> &[i32] {
        match &self.data {
            Data::I(v) => v,
            _ => panic!("tile of {} used as i32 (verifier bug)", self.dtype),
        }
    }

    pub fn b(&self) -> &[bool] {
        match &self.data {
            Data::B(v) => v,
            _ => panic!("tile of {} used as bool (verifier bug)", self.dtype),
        }
    }

    /// The i32 scalar this tile holds.
    pub fn as_index(&self) -> i64 {
        match &self.data {
            Data::I(v) => v[0] as i64,
            Data::F(v) => v[0] as i64,
            Data::B(v) => v[0] as i64,
        }
    }
}

/// Rounds widened values to the precision of `dtype` (no-op for f32): round to nearest even;
/// fp8 saturates (`cvt.rn.satfinite`, see `tessera_ir::fp8`).
pub(crate) fn round_to(dtype: DType, v: &mut [f32]) {
    match dtype {
        DType::BF16 => v
            .iter_mut()
            .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
        DType::F16 => v
            .iter_mut()
            .for_each(|x| *x = half::f16::from_f32(*x).to_f32()),
        DType::F8E4M3 | DType::F8E5M2 => {
            let f = tessera_ir::fp8::Fp8::of(dtype).expect("fp8 dtype");
            v.iter_mut().for_each(|x| *x = f.round(*x, true))
        }
        _ => {}
    }
}

/// The value of every fp8 code of `dtype` (a decode lookup table, built once).
pub(crate) fn fp8_decode_table(dtype: DType) -> &'static [f32; 256] {
    use std::sync::OnceLock;
    use tessera_ir::fp8::Fp8;
    static E4M3: OnceLock<[f32; 256]> = OnceLock::new();
    static E5M2: OnceLock<[f32; 256]> = OnceLock::new();
    let (cell, f) = match dtype {
        DType::F8E5M2 => (&E5M2, Fp8::E5M2),
        _ => (&E4M3, Fp8::E4M3),
    };
    cell.get_or_init(|| std::array::from_fn(|c| f.decode(c as u8)))
}
