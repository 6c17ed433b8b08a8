//! The launch file of `tessera-sim run --args launch.json`: the buffers to allocate (name,
//! size, contents) and the kernel's parameters in order.
//!
//! ```json
//! {
//!   "buffers": [
//!     { "name": "x", "f32": [1.0, 2.0, 3.0] },
//!     { "name": "out", "bytes": 4096 },
//!     { "name": "lut", "u32": [7, 9], "bytes": 64, "read_only": true }
//!   ],
//!   "params": [ { "ptr": "x" }, { "ptr": "out+16" }, { "u32": 3 }, { "f32": 0.5 } ]
//! }
//! ```
//!
//! A buffer's size is `bytes`, or the length of its contents when `bytes` is absent; contents
//! shorter than `bytes` are followed by zeros. Contents are one of `f32`, `f64`, `u32`, `s32`,
//! `u64`, `u8` (arrays, little-endian). A parameter is one object with one key, its PTX type:
//! `u8`, `u16`, `u32`, `u64`, `s8`, `s16`, `s32`, `s64`, `f16` (given as a number, rounded to
//! f16), `f32`, `f64`, or `ptr` (`"name"` or `"name+offset"`, a buffer of the file).

use crate::{DevicePtr, Memory, Param, SimError};
use serde::Deserialize;
use std::collections::HashMap;

/// A parsed launch file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LaunchFile {
    #[serde(default)]
    pub buffers: Vec<BufferSpec>,
    #[serde(default)]
    pub params: Vec<ParamSpec>,
}

/// One buffer: a name, a size and optional contents.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BufferSpec {
    pub name: String,
    #[serde(default)]
    pub bytes: Option<u64>,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub f32: Option<Vec<f32>>,
    #[serde(default)]
    pub f64: Option<Vec<f64>>,
    #[serde(default)]
    pub u32: Option<Vec<u32>>,
    #[serde(default)]
    pub s32: Option<Vec<i32>>,
    #[serde(default)]
    pub u64: Option<Vec<u64>>,
    #[serde(default)]
    pub u8: Option<Vec<u8>>,
}

/// One kernel parameter, keyed by its PTX type.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ParamSpec {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    S8(i8),
    S16(i16),
    S32(i32),
    S64(i64),
    F16(f32),
    F32(f32),
    F64(f64),
    /// `"name"` or `"name+offset"`.
    Ptr(String),
}

/// What is wrong with a launch file.
#[derive(Debug, thiserror::Error)]
pub enum LaunchFileError {
    #[error("launch file: {0}")]
    Json(#[from] serde_json::Error),
    #[error("buffer `{name}`: {message}")]
    Buffer { name: String, message: String },
    #[error("parameter {index}: {message}")]
    Param { index: usize, message: String },
    #[error(transparent)]
    Sim(#[from] SimError),
}

impl BufferSpec {
    /// The buffer's initial bytes (contents, then zeros up to `bytes`).
    pub fn contents(&self) -> Result<Vec<u8>, LaunchFileError> {
        let err = |m: String| LaunchFileError::Buffer {
            name: self.name.clone(),
            message: m,
        };
        let mut given: Vec<Vec<u8>> = Vec::new();
        if let Some(v) = &self.f32 {
            given.push(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        if let Some(v) = &self.f64 {
            given.push(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        if let Some(v) = &self.u32 {
            given.push(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        if let Some(v) = &self.s32 {
            given.push(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        if let Some(v) = &self.u64 {
            given.push(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        if let Some(v) = &self.u8 {
            given.push(v.clone());
        }
        if given.len() > 1 {
            return Err(err("has contents of more than one type".into()));
        }
        let mut data = given.pop().unwrap_or_default();
        match self.bytes {
            Some(b) if (b as usize) < data.len() => {
                return Err(err(format!(
                    "{} bytes of contents do not fit its {b} bytes",
                    data.len()
                )));
            }
            Some(b) => data.resize(b as usize, 0),
            None if data.is_empty() => {
                return Err(err("needs `bytes` or contents".into()));
            }
            None => {}
        }
        Ok(data)
    }
}

/// The allocations a launch file made: name → pointer, in file order.
#[derive(Clone, Debug, Default)]
pub struct Allocated {
    pub buffers: Vec<(String, DevicePtr, usize)>,
    pub params: Vec<Param>,
}

impl LaunchFile {
    /// Parses JSON text.
    pub fn parse(text: &str) -> Result<LaunchFile, LaunchFileError> {
        Ok(serde_json::from_str(text)?)
    }

    /// Allocates and fills every buffer in `mem` (256-byte aligned, like `cudaMalloc`) and
    /// resolves the parameters.
    pub fn allocate(&self, mem: &mut Memory) -> Result<Allocated, LaunchFileError> {
        let mut out = Allocated::default();
        let mut by_name: HashMap<&str, (DevicePtr, usize)> = HashMap::new();
        for b in &self.buffers {
            if by_name.contains_key(b.name.as_str()) {
                return Err(LaunchFileError::Buffer {
                    name: b.name.clone(),
                    message: "is declared twice".into(),
                });
            }
            let data = b.contents()?;
            let p = mem.alloc_named(&b.name, data.len())?;
            mem.upload(p, &data)?;
            if b.read_only {
                mem.set_read_only(p, true)?;
            }
            by_name.insert(&b.name, (p, data.len()));
            out.buffers.push((b.name.clone(), p, data.len()));
        }
        for (index, p) in self.params.iter().enumerate() {
            out.params.push(match p {
                ParamSpec::U8(v) => Param::U8(*v),
                ParamSpec::U16(v) => Param::U16(*v),
                ParamSpec::U32(v) => Param::U32(*v),
                ParamSpec::U64(v) => Param::U64(*v),
                ParamSpec::S8(v) => Param::S8(*v),
                ParamSpec::S16(v) => Param::S16(*v),
                ParamSpec::S32(v) => Param::S32(*v),
                ParamSpec::S64(v) => Param::S64(*v),
                ParamSpec::F16(v) => Param::F16Bits(half::f16::from_f32(*v).to_bits()),
                ParamSpec::F32(v) => Param::F32(*v),
                ParamSpec::F64(v) => Param::F64(*v),
                ParamSpec::Ptr(s) => {
                    let (name, off) = match s.split_once('+') {
                        Some((n, o)) => {
                            let o =
                                o.trim()
                                    .parse::<u64>()
                                    .map_err(|_| LaunchFileError::Param {
                                        index,
                                        message: format!("`{s}`: the offset is not a number"),
                                    })?;
                            (n.trim(), o)
                        }
                        None => (s.trim(), 0),
                    };
                    let Some((ptr, _)) = by_name.get(name) else {
                        return Err(LaunchFileError::Param {
                            index,
                            message: format!("`{s}` names no buffer of the file"),
                        });
                    };
                    Param::Ptr(ptr.offset(off))
                }
            });
        }
        Ok(out)
    }
}
