//! The PTX precompiled by `build.rs` for every (kernel, schedule in its search space, arch).
//!
//! ```
//! let all = tessera_kernels::ptx::PRECOMPILED;
//! assert!(all.iter().any(|p| p.kernel == "softmax" && p.arch == "sm_90a"));
//! assert!(all.iter().all(|p| p.text.starts_with("//")));
//! ```

/// One precompiled module.
#[derive(Clone, Copy, Debug)]
pub struct Precompiled {
    /// The `#[kernel]` fn it belongs to.
    pub kernel: &'static str,
    /// The fused kernel inside it (`<fn>_k<i>`).
    pub fused: &'static str,
    /// The Schedule IR text of the candidate.
    pub schedule: &'static str,
    /// `sm_80`, `sm_89` or `sm_90a`.
    pub arch: &'static str,
    /// A file name unique to this module.
    pub file: &'static str,
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory bytes.
    pub dyn_smem: u32,
    /// The module text.
    pub text: &'static str,
}

/// Every precompiled module, in source order.
pub static PRECOMPILED: &[Precompiled] = include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));

/// Writes every precompiled module to `dir` (one `.ptx` file each); returns how many.
pub fn write_all(dir: &std::path::Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    for p in PRECOMPILED {
        std::fs::write(dir.join(p.file), p.text)?;
    }
    Ok(PRECOMPILED.len())
}
