//! A PTX text builder: virtual registers by class, instructions, labels, and the register
//! declarations that go at the top of the entry.

use std::fmt::Write;

/// Register classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `.f32` — every float value (bf16/f16 are widened).
    F,
    /// `.b32` used as `.s32`/`.u32`.
    R,
    /// `.pred`.
    P,
    /// `.b64` addresses.
    D,
    /// `.b16` for bf16/f16 bit patterns.
    H,
}

/// A virtual register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg(pub Class, pub u32);

impl std::fmt::Display for Reg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = match self.0 {
            Class::F => "%f",
            Class::R => "%r",
            Class::P => "%p",
            Class::D => "%rd",
            Class::H => "%h",
        };
        write!(f, "{p}{}", self.1)
    }
}

/// Instruction text with fresh registers.
#[derive(Default)]
pub struct Asm {
    body: String,
    counts: [u32; 5],
    labels: u32,
}

impl Asm {
    /// A fresh register of class `c`.
    pub fn reg(&mut self, c: Class) -> Reg {
        let i = c as usize;
        self.counts[i] += 1;
        Reg(c, self.counts[i])
    }

    pub fn f(&mut self) -> Reg {
        self.reg(Class::F)
    }

    pub fn r(&mut self) -> Reg {
        self.reg(Class::R)
    }

    pub fn p(&mut self) -> Reg {
        self.reg(Class::P)
    }

    pub fn d(&mut self) -> Reg {
        self.reg(Class::D)
    }

    /// A fresh `.b16` register (a bf16/f16 bit pattern).
    pub fn h(&mut self) -> Reg {
        self.reg(Class::H)
    }

    /// A fresh label name.
    pub fn label(&mut self, stem: &str) -> String {
        self.labels += 1;
        format!("L_{stem}_{}", self.labels)
    }

    /// Appends one instruction (a `;` is added).
    pub fn i(&mut self, s: impl AsRef<str>) {
        let _ = writeln!(self.body, "    {};", s.as_ref());
    }

    /// Appends a label line.
    pub fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// Appends a comment line.
    pub fn comment(&mut self, s: impl AsRef<str>) {
        let _ = writeln!(self.body, "    // {}", s.as_ref());
    }

    /// Appends a phase banner: a blank line and a `// ---- s ----` comment, to split a long
    /// body into readable sections.
    pub fn phase(&mut self, s: impl AsRef<str>) {
        let _ = writeln!(self.body, "\n    // ---- {} ----", s.as_ref());
    }

    /// `op d, a, b` into a fresh `.b32` register `d`, returned: shorthand for index arithmetic
    /// (`b` is a register or an immediate).
    pub fn r_op(&mut self, op: &str, a: impl std::fmt::Display, b: impl std::fmt::Display) -> Reg {
        let d = self.r();
        self.i(format!("{op} {d}, {a}, {b}"));
        d
    }

    /// The register declarations for everything allocated.
    pub fn decls(&self) -> String {
        let names = [
            (".f32", "%f"),
            (".b32", "%r"),
            (".pred", "%p"),
            (".b64", "%rd"),
            (".b16", "%h"),
        ];
        let mut s = String::new();
        for (i, (t, n)) in names.iter().enumerate() {
            if self.counts[i] > 0 {
                let _ = writeln!(s, "    .reg {t} {n}<{}>;", self.counts[i] + 1);
            }
        }
        s
    }

    /// The instruction text.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// A fresh f32 register holding the constant `x`.
    pub fn fconst(&mut self, x: f32) -> Reg {
        let r = self.f();
        self.i(format!("mov.f32 {r}, {}", flit(x)));
        r
    }

    /// A fresh s32 register holding `x`.
    pub fn rconst(&mut self, x: i32) -> Reg {
        let r = self.r();
        self.i(format!("mov.s32 {r}, {x}"));
        r
    }
}

/// Registers as a comma-separated list, for vector operands: `{{{}}}` around it gives
/// `{%r1, %r2}`.
pub fn list(regs: &[Reg]) -> String {
    regs.iter()
        .map(Reg::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An f32 literal in PTX's exact hex form.
pub fn flit(x: f32) -> String {
    format!("0f{:08X}", x.to_bits())
}
