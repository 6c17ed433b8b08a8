//! OCP FP8 conversions (the *OCP 8-bit Floating Point Specification*, v1.0): `E4M3` and `E5M2`,
//! bit-exact, decode of every code and round-to-nearest-even encode with or without saturation.
//!
//! | format | bias | max finite | inf | NaN |
//! |---|---|---|---|---|
//! | `E4M3` | 7 | 448 (`S.1111.110`) | none | `S.1111.111` |
//! | `E5M2` | 15 | 57344 (`S.11110.11`) | `S.11111.00` | `S.11111.{01,10,11}` |
//!
//! Encoding rounds to nearest, ties to even, with gradual underflow through the subnormals and
//! the sign of zero kept. An input beyond the largest finite value after rounding (including
//! ±inf) becomes, **non-saturating**, NaN (`E4M3`, which has no infinity) or ±inf (`E5M2`);
//! **saturating** (PTX `cvt.rn.satfinite`, Transformer Engine's casts), the largest finite value
//! of its sign. NaN encodes as the quiet NaN of its sign (`0x7F`/`0xFF` in `E4M3`,
//! `0x7E`/`0xFE` in `E5M2`), as `ml_dtypes` does; NaN decodes to the f32 quiet NaN of its sign.
//!
//! The independent reference is `tests/data/fp8_{decode,encode}.txt`, generated from
//! `ml_dtypes` by `scripts/gen-fp8-table.py` (all 256 codes of each format and every rounding
//! boundary; `tests/fp8.rs` checks every line).
//!
//! Why not the `float8` crate: it implements only the saturating cast (no way to get the OCP
//! non-saturating result) and its published `MAX` constants have been wrong (416 / 49152).
//!
//! ```
//! use tessera_ir::fp8::Fp8;
//! assert_eq!(Fp8::E4M3.decode(0x7E), 448.0);
//! assert_eq!(Fp8::E4M3.encode(464.0, false), 0x7E); // a tie: rounds to even (448)
//! assert!(Fp8::E4M3.decode(Fp8::E4M3.encode(465.0, false)).is_nan()); // overflow: NaN
//! assert_eq!(Fp8::E4M3.encode(1e9, true), 0x7E); // saturating: 448
//! assert_eq!(Fp8::E5M2.encode(f64::INFINITY, false), 0x7C);
//! assert_eq!(Fp8::E5M2.decode(0x7B), 57344.0);
//! ```

use crate::DType;

/// One of the two OCP FP8 formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8 {
    /// 4 exponent bits, 3 mantissa bits, no infinity (`float8_e4m3fn`).
    E4M3,
    /// 5 exponent bits, 2 mantissa bits, IEEE-like specials (`float8_e5m2`).
    E5M2,
}

impl Fp8 {
    /// The format of an fp8 dtype (`None` for every other dtype).
    pub fn of(d: DType) -> Option<Fp8> {
        match d {
            DType::F8E4M3 => Some(Fp8::E4M3),
            DType::F8E5M2 => Some(Fp8::E5M2),
            _ => None,
        }
    }

    /// The dtype of this format.
    pub fn dtype(self) -> DType {
        match self {
            Fp8::E4M3 => DType::F8E4M3,
            Fp8::E5M2 => DType::F8E5M2,
        }
    }

    /// Mantissa bits.
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8::E4M3 => 3,
            Fp8::E5M2 => 2,
        }
    }

    /// Exponent bias.
    pub const fn bias(self) -> i32 {
        match self {
            Fp8::E4M3 => 7,
            Fp8::E5M2 => 15,
        }
    }

    /// The largest finite value: 448 (`E4M3`) or 57344 (`E5M2`).
    pub const fn max(self) -> f64 {
        match self {
            Fp8::E4M3 => 448.0,
            Fp8::E5M2 => 57344.0,
        }
    }

    /// The code of the largest finite positive value.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8::E4M3 => 0x7E,
            Fp8::E5M2 => 0x7B,
        }
    }

    /// The positive quiet NaN code.
    pub const fn nan_code(self) -> u8 {
        match self {
            Fp8::E4M3 => 0x7F,
            Fp8::E5M2 => 0x7E,
        }
    }

    /// The value of `code`, exactly (every fp8 value is an f32).
    pub fn decode(self, code: u8) -> f32 {
        let m = self.mantissa_bits();
        let neg = code & 0x80 != 0;
        let e = ((code & 0x7F) >> m) as i32;
        let mant = (code & ((1 << m) - 1)) as i32;
        let emax_field = (0x7F >> m) as i32;
        let mag = match self {
            Fp8::E4M3 if e == emax_field && mant == (1 << m) - 1 => f32::NAN,
            Fp8::E5M2 if e == emax_field && mant == 0 => f32::INFINITY,
            Fp8::E5M2 if e == emax_field => f32::NAN,
            // Subnormal: mant · 2^(1 − bias − m).
            _ if e == 0 => mant as f32 * pow2(1 - self.bias() - m as i32) as f32,
            _ => ((1 << m) + mant) as f32 * pow2(e - self.bias() - m as i32) as f32,
        };
        if neg { -mag } else { mag }
    }

    /// The code of `x` rounded to nearest even; see the module docs for overflow (`saturate`)
    /// and NaN. Exact for any f64 input (no double rounding through f32).
    pub fn encode(self, x: f64, saturate: bool) -> u8 {
        let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return sign | self.nan_code();
        }
        let overflow = || {
            if saturate {
                sign | self.max_code()
            } else {
                match self {
                    Fp8::E4M3 => sign | 0x7F,
                    Fp8::E5M2 => sign | 0x7C,
                }
            }
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow();
        }
        let m = self.mantissa_bits() as i32;
        let emin = 1 - self.bias();
        // The spacing of representable values around `a`: 2^(E − m) in binade E ≥ emin, the
        // subnormal spacing below it. Scaling by a power of two is exact in f64.
        let e = if a == 0.0 {
            emin
        } else {
            exponent(a).max(emin)
        };
        let q = pow2(e - m);
        let r = (a / q).round_ties_even() * q;
        if r > self.max() {
            return overflow();
        }
        if r == 0.0 {
            return sign;
        }
        let re = exponent(r);
        let code = if re < emin {
            (r / pow2(emin - m)) as u8
        } else {
            let mant = (r / pow2(re - m)) as i32 - (1 << m);
            (((re + self.bias()) << m) | mant) as u8
        };
        sign | code
    }

    /// `x` rounded to this format and widened back (what a value of this dtype can hold).
    pub fn round(self, x: f32, saturate: bool) -> f32 {
        self.decode(self.encode(x as f64, saturate))
    }
}

/// `2^e` as an f64 (for |e| < 1000).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// `floor(log2 a)` of a positive finite f64.
fn exponent(a: f64) -> i32 {
    let b = a.to_bits();
    let field = ((b >> 52) & 0x7FF) as i32;
    if field == 0 {
        // f64 subnormal (never an fp8 magnitude; below every fp8 subnormal).
        -1075
    } else {
        field - 1023
    }
}

#[cfg(test)]
mod tests {
    use super::Fp8;

    #[test]
    fn largest_values_and_specials() {
        assert_eq!(Fp8::E4M3.decode(0x7E), 448.0);
        assert_eq!(Fp8::E4M3.decode(0xFE), -448.0);
        assert_eq!(Fp8::E5M2.decode(0x7B), 57344.0);
        assert_eq!(Fp8::E5M2.decode(0xFC), f32::NEG_INFINITY);
        assert!(Fp8::E4M3.decode(0xFF).is_nan());
        assert_eq!(Fp8::E4M3.decode(0x01), 2f32.powi(-9));
        assert_eq!(Fp8::E5M2.decode(0x01), 2f32.powi(-16));
        assert_eq!(Fp8::E4M3.encode(-0.0, false), 0x80);
        // Half the smallest subnormal is a tie with zero: rounds to even (zero).
        assert_eq!(Fp8::E4M3.encode(2f64.powi(-10), false), 0x00);
        assert_eq!(Fp8::E4M3.encode(1.5 * 2f64.powi(-10), false), 0x01);
    }

    #[test]
    fn every_code_round_trips() {
        for f in [Fp8::E4M3, Fp8::E5M2] {
            for c in 0..=255u8 {
                let v = f.decode(c);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(f.encode(v as f64, false), c, "{f:?} {c:#x}");
            }
        }
    }
}
