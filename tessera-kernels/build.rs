//! Precompiles PTX for every (kernel, schedule in its search space, arch) of this library.
//!
//! The kernels are found by scanning `src/` for `#[tessera::kernel]` items and compiled with
//! the same front end the macro uses (`tessera-front`), so the PTX matches what the macro
//! checked. Output: `$OUT_DIR/ptx/*.ptx.deflate` (each module's text, raw-deflate compressed:
//! PTX is repetitive text and shrinks about 5x, which keeps every binary that links the library,
//! and the library's rlib, small) and `$OUT_DIR/precompiled.rs`, the table included by
//! `src/ptx.rs`.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use tessera_ir::schedule::Schedule;
use tessera_ir::target::ptx::{self, Arch};

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let dir = out.join("ptx");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create ptx dir");
    println!("cargo::rerun-if-changed=src");
    let mut index = String::new();
    let mut count = 0usize;
    // Kernel (instance) name -> the `#[kernel]` fn it came from.
    let mut owners = std::collections::HashMap::<String, String>::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir("src")
        .expect("src")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    for file in files {
        let src = std::fs::read_to_string(&file).expect("read source");
        let tokens =
            TokenStream::from_str(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (attr, item) in kernel_items(tokens) {
            let (k, instances) = match tessera_front::compile_kernel(attr, item) {
                Ok(x) => x,
                // The macro reports the error with its span; nothing to precompile here.
                Err(_) => continue,
            };
            for (inst, compiled) in &instances {
                // The name the macro gives this instantiation's `KernelDef` (`add_bf16`).
                let kname = format!("{}{}", k.name, inst.suffix);
                // Launches find their module by this name: two kernels under one name (a
                // generic `matmul<T>`'s bf16 instance and a plain `fn matmul_bf16`) would load
                // each other's PTX.
                if let Some(first) = owners.insert(kname.clone(), k.name.to_string()) {
                    panic!(
                        "{}: kernel `{}` and kernel `{first}` are both named `{kname}` \
                         (a generic kernel's instance is named `<fn>_<dtype>`); rename one",
                        file.display(),
                        k.name
                    );
                }
                for (i, ck) in compiled.kernels.iter().enumerate() {
                    let dtype = tessera_ir::pipeline::kernel_dtype(&compiled.graph, &ck.fused);
                    for s in Schedule::space(ck.fused.class, dtype) {
                        let lowered = compiled
                            .lower_with(i, &s)
                            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
                        for arch in Arch::ALL {
                            if ptx::supports(&lowered.kernel, arch).is_err() {
                                continue;
                            }
                            let p = ptx::emit(&lowered.kernel, &s, arch)
                                .unwrap_or_else(|e| panic!("{e}"));
                            let fname =
                                format!("{}__{}__{}.ptx", p.entry, schedule_id(&s), arch.target());
                            let deflated =
                                miniz_oxide::deflate::compress_to_vec(p.text.as_bytes(), 9);
                            write_if_changed(&dir.join(format!("{fname}.deflate")), &deflated);
                            count += 1;
                            let _ = writeln!(
                                index,
                                "    Precompiled {{ kernel: {:?}, fused: {:?}, schedule: {:?}, arch: {:?}, file: {:?}, threads: {}, dyn_smem: {}, launch: {:?}, deflated: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/ptx/{}.deflate\")) }},",
                                kname,
                                ck.fused.name,
                                s.to_string(),
                                arch.target(),
                                fname,
                                p.threads,
                                p.dyn_smem,
                                ptx::print_launch(&p),
                                fname
                            );
                        }
                    }
                }
            }
        }
    }
    // A static array (not a slice literal): kernels refer to it through `PRECOMPILED`, a
    // reference to this one symbol, so no codegen unit gets its own copy of the table.
    let table = format!("static TABLE: [Precompiled; {count}] = [\n{index}];\n");
    write_if_changed(&out.join("precompiled.rs"), table.as_bytes());
}

/// `128x128x64_w8_s3_v8`.
fn schedule_id(s: &Schedule) -> String {
    let t: Vec<String> = s.tile.iter().map(|x| x.to_string()).collect();
    format!("{}_w{}_s{}_v{}", t.join("x"), s.warps, s.stages, s.vector)
}

fn write_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).ok().as_deref() != Some(bytes) {
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// `(attribute arguments, item tokens)` of every `#[tessera::kernel]` / `#[kernel]` item.
fn kernel_items(ts: TokenStream) -> Vec<(TokenStream, TokenStream)> {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if let (TokenTree::Punct(p), Some(TokenTree::Group(g))) = (&toks[i], toks.get(i + 1))
            && p.as_char() == '#'
            && g.delimiter() == Delimiter::Bracket
            && let Some(args) = kernel_attr(g.stream())
        {
            // The item runs to the first brace group (the fn body).
            let mut j = i + 2;
            let mut item = TokenStream::new();
            while j < toks.len() {
                item.extend([toks[j].clone()]);
                if matches!(&toks[j], TokenTree::Group(b) if b.delimiter() == Delimiter::Brace) {
                    break;
                }
                j += 1;
            }
            out.push((args, item));
            i = j + 1;
            continue;
        }
        i += 1;
    }
    out
}

/// The arguments of a `tessera::kernel(...)` / `kernel(...)` attribute, or `None`.
fn kernel_attr(ts: TokenStream) -> Option<TokenStream> {
    let path: String = ts
        .clone()
        .into_iter()
        .take_while(|t| !matches!(t, TokenTree::Group(_)))
        .map(|t| t.to_string())
        .collect();
    if path != "tessera::kernel" && path != "kernel" {
        return None;
    }
    Some(
        ts.into_iter()
            .find_map(|t| match t {
                TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis => Some(g.stream()),
                _ => None,
            })
            .unwrap_or_default(),
    )
}
