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
    /// The buffers to allocate, in order.
    #[serde(default)]
    pub buffers: Vec<BufferSpec>,
    /// The kernel's parameters, in its `.param` order.
    #[serde(default)]
    pub params: Vec<ParamSpec>,
}

/// One buffer: a name, a size and optional contents.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BufferSpec {
    /// The name findings and `"ptr"` parameters refer to it by.
    pub name: String,
    /// Its size; contents shorter than this are padded with zeros. Needed without contents.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// True for a buffer the kernel must not write (a write is a finding).
    #[serde(default)]
    pub read_only: bool,
    /// Contents as `f32` values (at most one contents field per buffer).
    #[serde(default)]
    pub f32: Option<Vec<f32>>,
    /// Contents as `f64` values.
    #[serde(default)]
    pub f64: Option<Vec<f64>>,
    /// Contents as `u32` values.
    #[serde(default)]
    pub u32: Option<Vec<u32>>,
    /// Contents as `s32` values.
    #[serde(default)]
    pub s32: Option<Vec<i32>>,
    /// Contents as `u64` values.
    #[serde(default)]
    pub u64: Option<Vec<u64>>,
    /// Contents as raw bytes.
    #[serde(default)]
    pub u8: Option<Vec<u8>>,
}

/// One kernel parameter, keyed by its PTX type.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ParamSpec {
    /// A `.u8` value.
    U8(u8),
    /// A `.u16` value.
    U16(u16),
    /// A `.u32` value.
    U32(u32),
    /// A `.u64` value.
    U64(u64),
    /// A `.s8` value.
    S8(i8),
    /// A `.s16` value.
    S16(i16),
    /// A `.s32` value.
    S32(i32),
    /// A `.s64` value.
    S64(i64),
    /// A `.f16` value, written as a number and rounded to f16.
    F16(f32),
    /// A `.f32` value.
    F32(f32),
    /// A `.f64` value.
    F64(f64),
    /// `"name"` or `"name+offset"`.
    Ptr(String),
}

/// What is wrong with a launch file.
#[derive(Debug, thiserror::Error)]
pub enum LaunchFileError {
    /// The file is not JSON of the launch-file layout.
    #[error("launch file: {0}")]
    Json(#[from] serde_json::Error),
    /// A buffer spec is inconsistent (two contents, contents larger than `bytes`, no size).
    #[error("buffer `{name}`: {message}")]
    Buffer {
        /// The buffer's name.
        name: String,
        /// What is wrong, in words.
        message: String,
    },
    /// A parameter is wrong (a `"ptr"` naming no buffer, a bad offset).
    #[error("parameter {index}: {message}")]
    Param {
        /// The parameter's 0-based index.
        index: usize,
        /// What is wrong, in words.
        message: String,
    },
    /// The simulator refused an allocation, an upload or a buffer setting.
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
    /// Each buffer's name, pointer and size in bytes.
    pub buffers: Vec<(String, DevicePtr, usize)>,
    /// The parameters, `"ptr"`s resolved to device pointers.
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
