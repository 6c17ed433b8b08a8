//! A tiny PTX text builder: typed virtual registers, instructions, labels and comments.
//!
//! Registers are never reused by the builder; ptxas allocates physical registers. The declared
//! counts are printed by [`Asm::decls`] once the body is complete.

use std::fmt::Write;

/// A register or operand name as it appears in the text (`%r12`, `%f3`, `0f3F800000`).
pub(super) type Reg = String;

/// Register classes, in declaration order.
const CLASSES: [(&str, &str); 5] = [("pred", "p"), ("b32", "r"), ("b64", "rd"), ("f32", "f"), ("b16", "h")];

/// Accumulates the body of one entry.
#[derive(Default)]
pub(super) struct Asm {
    body: String,
    counts: [u32; 5],
    labels: u32,
}

impl Asm {
    fn fresh(&mut self, class: usize) -> Reg {
        let n = self.counts[class];
        self.counts[class] += 1;
        format!("%{}{}", CLASSES[class].1, n)
    }
    /// A fresh predicate register.
    pub fn p(&mut self) -> Reg {
        self.fresh(0)
    }
    /// A fresh 32-bit register (`.b32`, used for u32/s32/packed halves).
    pub fn r(&mut self) -> Reg {
        self.fresh(1)
    }
    /// A fresh 64-bit register.
    pub fn rd(&mut self) -> Reg {
        self.fresh(2)
    }
    /// A fresh f32 register.
    pub fn f(&mut self) -> Reg {
        self.fresh(3)
    }
    /// A fresh 16-bit register.
    pub fn h(&mut self) -> Reg {
        self.fresh(4)
    }

    /// One instruction (the `;` is added).
    pub fn ins(&mut self, s: impl AsRef<str>) {
        let _ = writeln!(self.body, "    {};", s.as_ref());
    }

    /// A comment line.
    pub fn comment(&mut self, s: impl AsRef<str>) {
        let _ = writeln!(self.body, "    // {}", s.as_ref());
    }

    /// A phase banner: a blank line and a comment.
    pub fn phase(&mut self, s: impl AsRef<str>) {
        let _ = writeln!(self.body, "\n    // ---- {} ----", s.as_ref());
    }

    /// A fresh label name with `prefix`.
    pub fn label(&mut self, prefix: &str) -> String {
        self.labels += 1;
        format!("{prefix}_{}", self.labels)
    }

    /// Places a label here.
    pub fn place(&mut self, l: &str) {
        let _ = writeln!(self.body, "{l}:");
    }

    /// `d = a op imm`, returning a fresh b32 register: a small helper for index arithmetic.
    pub fn r_op(&mut self, op: &str, a: &str, b: impl std::fmt::Display) -> Reg {
        let d = self.r();
        self.ins(format!("{op} {d}, {a}, {b}"));
        d
    }

    /// `.reg` declarations for every class used.
    pub fn decls(&self) -> String {
        let mut s = String::new();
        for (i, (ty, pre)) in CLASSES.iter().enumerate() {
            if self.counts[i] > 0 {
                let _ = writeln!(s, "    .reg .{ty} %{pre}<{}>;", self.counts[i]);
            }
        }
        s
    }

    /// The body text.
    pub fn body(&self) -> &str {
        &self.body
    }
}

/// An f32 immediate in PTX hex form (`0f3F800000` for 1.0).
pub(super) fn f32_imm(x: f64) -> String {
    format!("0f{:08X}", (x as f32).to_bits())
}
