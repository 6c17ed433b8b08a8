//! The PTX precompiled by `build.rs` for every (kernel, schedule in its search space, arch).
//!
//! Every kernel of this library names this table in its attribute
//! (`#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]`), so a launch on a PTX device
//! whose schedule is in the table — an autotuned winner — loads the module from here instead
//! of compiling it.
//!
//! ```
//! let all = tessera_kernels::ptx::PRECOMPILED;
//! // A generic kernel's entries are named per instance (`softmax_f32`, `softmax_bf16`, …).
//! assert!(all.iter().any(|p| p.kernel == "softmax_bf16" && p.arch == "sm_90a"));
//! assert!(all.iter().all(|p| p.text().unwrap().starts_with("//")));
//! ```

/// One precompiled module (with its launch header, so a launch needs no compiler).
pub use tessera::PrecompiledPtx as Precompiled;

// `static TABLE: [Precompiled; N]`, written by `build.rs`.
include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));

/// Every precompiled module, in source order.
pub static PRECOMPILED: &[Precompiled] = &TABLE;

/// Writes every precompiled module to `dir` (one `.ptx` file each); returns how many.
pub fn write_all(dir: &std::path::Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    for p in PRECOMPILED {
        let text = p.text().map_err(std::io::Error::other)?;
        std::fs::write(dir.join(p.file), text)?;
    }
    Ok(PRECOMPILED.len())
}

#[cfg(test)]
mod tests {
    use super::PRECOMPILED;
    use std::collections::HashSet;

    /// Launches look a module up by (kernel, fused kernel, schedule, arch): a second entry under
    /// the same key would be shadowed by the first (or serve the wrong kernel).
    #[test]
    fn every_module_key_and_file_is_unique() {
        let mut keys = HashSet::new();
        let mut files = HashSet::new();
        for p in PRECOMPILED {
            assert!(
                keys.insert((p.kernel, p.fused, p.schedule, p.arch)),
                "two modules for {} / {} / {} / {}",
                p.kernel,
                p.fused,
                p.schedule,
                p.arch
            );
            assert!(files.insert(p.file), "two modules in file {}", p.file);
        }
        assert!(PRECOMPILED.len() > 100, "{} modules", PRECOMPILED.len());
    }
}
