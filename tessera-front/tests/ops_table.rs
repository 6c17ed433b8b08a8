//! `KERNEL_OPS` (what the `#[kernel]` docs list) is exactly what the lowering accepts.

use tessera_front::lower::kernel::KERNEL_OPS;
use tessera_ir::graph::UnaryOp;

/// The bare call name of a table entry (`cast::<T>` → `cast`).
fn bare(op: &str) -> &str {
    op.split("::").next().unwrap()
}

#[test]
fn every_listed_op_is_known_to_the_lowering() {
    for op in KERNEL_OPS {
        let call = op.replace("::<T>", "::<f32>");
        let item = format!("fn k(x: Tensor<f32, (M, M)>) -> Tensor<f32, (M, M)> {{ {call}(x) }}");
        let r = tessera_front::compile_kernel(quote::quote!(), item.parse().unwrap());
        if let Err(e) = r {
            // Wrong operands are fine here; an unknown name is not.
            assert!(!e.to_string().contains("unknown op"), "`{op}`: {e}");
        }
    }
    let item = "fn k(x: Tensor<f32, (M, M)>) -> Tensor<f32, (M, M)> { frobnicate(x) }";
    let e = tessera_front::compile_kernel(quote::quote!(), item.parse().unwrap())
        .err()
        .expect("an unknown op is an error");
    assert!(e.to_string().contains("unknown op `frobnicate`"), "{e}");
}

#[test]
fn every_op_the_lowering_accepts_is_listed() {
    let mut accepted: Vec<String> = UnaryOp::ALL
        .iter()
        .filter(|u| **u != UnaryOp::Neg)
        .map(|u| u.name().to_string())
        .collect();
    // The dispatcher's match arms: lines `"a" | "b" => ...` of the lowering.
    let src = include_str!("../src/lower/kernel.rs");
    for line in src.lines().map(str::trim) {
        let Some((pats, _)) = line.split_once("=>") else {
            continue;
        };
        if !pats.starts_with('"') {
            continue;
        }
        for p in pats.split('|') {
            accepted.push(p.trim().trim_matches('"').to_string());
        }
    }
    for r in ["sum", "mean", "amax"] {
        accepted.push(format!("{r}_keepdim"));
    }
    let listed: Vec<&str> = KERNEL_OPS.iter().map(|o| bare(o)).collect();
    for a in &accepted {
        assert!(
            listed.contains(&a.as_str()),
            "`{a}` is accepted but not in KERNEL_OPS"
        );
    }
    for l in &listed {
        assert!(
            accepted.iter().any(|a| a == l),
            "`{l}` is listed but not accepted"
        );
    }
}
