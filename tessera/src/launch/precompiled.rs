//! Build-time PTX of a kernel library: a table of modules, one per (kernel, schedule, arch),
//! that a crate's `build.rs` generates (see `tessera-kernels/build.rs`) and hands to its
//! kernels with `#[tessera::kernel(precompiled = crate::ptx::PRECOMPILED)]`. A launch on a PTX
//! device whose schedule is in the table (an autotuned winner, a candidate) loads the module
//! from it instead of compiling; schedules outside it go to the JIT cache.

use super::gpu::EmbeddedPtx;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tessera_ir::target::ptx::Arch;

/// One precompiled module. Its text is stored raw-deflate compressed ([`Self::deflated`]):
/// PTX shrinks about 5x, which keeps the library and every binary linking it small;
/// [`Self::text`] inflates it on first use and keeps it for the life of the process.
///
/// A library's `build.rs` writes the table (see `tessera-kernels/build.rs`); here, one entry by
/// hand:
///
/// ```
/// let ptx = "//\n.version 8.0\n.target sm_80\n.address_size 64\n// ...\n";
/// let deflated = miniz_oxide::deflate::compress_to_vec(ptx.as_bytes(), 9);
/// let p = tessera::PrecompiledPtx {
///     kernel: "my_kernel",
///     fused: "my_kernel_k0",
///     schedule: "schedule elementwise tile=[8, 128] warps=4 stages=1 vector=4",
///     arch: "sm_80",
///     file: "my_kernel_k0__8x128_w4_s1_v4__sm_80.ptx",
///     threads: 128,
///     dyn_smem: 0,
///     launch: "",
///     deflated: deflated.leak(),
/// };
/// assert_eq!(p.text().unwrap(), ptx);
/// // A second call returns the same text without inflating again.
/// assert!(std::ptr::eq(p.text().unwrap(), p.text().unwrap()));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PrecompiledPtx {
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
    /// The launch header (`tessera_ir::target::ptx::print_launch`).
    pub launch: &'static str,
    /// The module text, raw deflate (RFC 1951, as `miniz_oxide::deflate::compress_to_vec`
    /// writes it).
    pub deflated: &'static [u8],
}

/// The most bytes a module may inflate to: far above any module the library emits, it only
/// stops a corrupt table from exhausting memory.
const MAX_TEXT: usize = 64 << 20;

impl PrecompiledPtx {
    /// The module text, inflated once per process (later calls return the same `&'static str`).
    /// An `Error::Compile` naming the module if the stored bytes are not valid deflate data
    /// holding UTF-8 text.
    pub fn text(&self) -> Result<&'static str> {
        static TEXTS: OnceLock<Mutex<HashMap<(usize, usize), &'static str>>> = OnceLock::new();
        let key = (self.deflated.as_ptr() as usize, self.deflated.len());
        let texts = TEXTS.get_or_init(Default::default);
        if let Some(t) = texts.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(t);
        }
        let err = |message: String| Error::Compile {
            kernel: self.kernel.into(),
            message: format!("precompiled module {}: {message}", self.file),
        };
        let bytes = miniz_oxide::inflate::decompress_to_vec_with_limit(self.deflated, MAX_TEXT)
            .map_err(|e| err(format!("not valid deflate data ({e})")))?;
        let text = String::from_utf8(bytes).map_err(|e| err(format!("not UTF-8 ({e})")))?;
        let mut texts = texts.lock().unwrap_or_else(|e| e.into_inner());
        // Leaked once per module and kept (a racing thread finds the first one stored).
        Ok(*texts
            .entry(key)
            .or_insert_with(|| Box::leak(text.into_boxed_str())))
    }
}

/// The entry of `table` for (kernel, fused kernel, schedule, arch), if any, with its text.
pub(crate) fn find(
    table: &'static [PrecompiledPtx],
    kernel: &str,
    fused: &str,
    schedule: &str,
    arch: Arch,
) -> Result<Option<EmbeddedPtx>> {
    let Some(p) = table.iter().find(|p| {
        p.kernel == kernel && p.fused == fused && p.schedule == schedule && p.arch == arch.target()
    }) else {
        return Ok(None);
    };
    Ok(Some(EmbeddedPtx {
        launch: p.launch,
        text: p.text()?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(deflated: &'static [u8]) -> PrecompiledPtx {
        PrecompiledPtx {
            kernel: "k",
            fused: "k_k0",
            schedule: "schedule 64x64x32 warps=4 stages=2 vector=4",
            arch: "sm_80",
            file: "k_k0__test.ptx",
            threads: 128,
            dyn_smem: 0,
            launch: "",
            deflated,
        }
    }

    #[test]
    fn text_inflates_once_and_returns_the_same_str() {
        // A module-sized text of random lines (not a constant: the round trip must hold for
        // whatever the emitter writes).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut text = String::from("// generated\n");
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(&format!(
                "\tadd.f32 %f{}, %f{}, 0f{:08X};\n",
                x % 97,
                x % 31,
                x as u32
            ));
        }
        let deflated: &'static [u8] =
            Box::leak(miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 9).into_boxed_slice());
        assert!(deflated.len() < text.len() / 2);
        let p = entry(deflated);
        let a = p.text().unwrap();
        assert_eq!(a, text);
        let b = p.text().unwrap();
        assert!(
            std::ptr::eq(a, b),
            "the second call reuses the first inflation"
        );
    }

    #[test]
    fn corrupt_or_non_utf8_data_is_an_error_naming_the_module() {
        for bad in [
            &b"\xff\xff\xff not deflate"[..],
            &miniz_oxide::deflate::compress_to_vec(b"\xc3\x28", 6).leak()[..],
        ] {
            let e = entry(bad).text().unwrap_err().to_string();
            assert!(e.contains("k_k0__test.ptx"), "{e}");
        }
    }
}
