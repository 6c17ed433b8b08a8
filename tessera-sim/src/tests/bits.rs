//! Bit-manipulation instructions (`prmt`, `bfe`, `bfi`, `brev`, `lop3`, `shf`) on random
//! operands, against references written from the PTX ISA's definitions bit by bit.

use super::rand_u32;
use super::units::clean;

/// `prmt.b32` default mode: byte `i` of the result is byte `c[4i+2..4i]` of `{b, a}`, or its
/// sign replicated when `c[4i+3]` is set.
fn prmt(a: u32, b: u32, c: u32) -> u32 {
    let bytes = ((b as u64) << 32 | a as u64).to_le_bytes();
    let mut d = 0u32;
    for i in 0..4 {
        let sel = (c >> (4 * i)) & 0xf;
        let byte = bytes[(sel & 7) as usize];
        let v = if sel & 8 != 0 {
            if byte & 0x80 != 0 { 0xff } else { 0 }
        } else {
            byte
        };
        d |= (v as u32) << (8 * i);
    }
    d
}

/// `bfe.u32` / `bfe.s32`, bit by bit (pos and len are the low bytes of their operands).
fn bfe(a: u32, pos: u32, len: u32, signed: bool) -> u32 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let bit = |i: u32| (a >> i) & 1;
    let sbit = if signed && len > 0 {
        bit((pos + len - 1).min(31))
    } else {
        0
    };
    let mut d = 0;
    for i in 0..32 {
        let v = if i < len && pos + i <= 31 {
            bit(pos + i)
        } else {
            sbit
        };
        d |= v << i;
    }
    d
}

/// `bfi.b32 d, f, b, pos, len`: `len` bits of `f` inserted into `b` at `pos`.
fn bfi(f: u32, b: u32, pos: u32, len: u32) -> u32 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let mut d = b;
    let mut i = 0;
    while i < len && pos + i <= 31 {
        d = (d & !(1 << (pos + i))) | (((f >> i) & 1) << (pos + i));
        i += 1;
    }
    d
}

fn lop3(a: u32, b: u32, c: u32, lut: u32) -> u32 {
    let mut d = 0;
    for i in 0..32 {
        let idx = ((a >> i) & 1) << 2 | ((b >> i) & 1) << 1 | ((c >> i) & 1);
        d |= ((lut >> idx) & 1) << i;
    }
    d
}

/// `shf.l` / `shf.r` on the 64-bit `{b, a}`; `.wrap` takes the shift mod 32, `.clamp` caps it
/// at 32.
fn shf(a: u32, b: u32, c: u32, left: bool, wrap: bool) -> u32 {
    let n = if wrap { c & 31 } else { c.min(32) } as u64;
    let v = (b as u64) << 32 | a as u64;
    if left {
        ((v << n) >> 32) as u32
    } else {
        (v >> n) as u32
    }
}

#[test]
fn bit_instructions_match_their_definitions() {
    let r = rand_u32(8 * 6, 91);
    let mut body = String::new();
    let mut want = Vec::new();
    for j in 0..8 {
        let (a, b, c) = (r[6 * j], r[6 * j + 1], r[6 * j + 2]);
        // positions and lengths up to 40 (beyond 31 exercises the clamping rules)
        let (pos, len) = (r[6 * j + 3] % 41, r[6 * j + 4] % 41);
        let lut = r[6 * j + 5] & 0xff;
        let prmt_c = c & 0xffff;
        let ops: [(String, u32); 12] = [
            (
                format!("prmt.b32 %r5, %r2, %r3, {prmt_c};"),
                prmt(a, b, prmt_c),
            ),
            (
                format!("bfe.u32 %r5, %r2, {pos}, {len};"),
                bfe(a, pos, len, false),
            ),
            (
                format!("bfe.s32 %r5, %r2, {pos}, {len};"),
                bfe(a, pos, len, true),
            ),
            (
                format!("bfi.b32 %r5, %r2, %r3, {pos}, {len};"),
                bfi(a, b, pos, len),
            ),
            ("brev.b32 %r5, %r2;".into(), a.reverse_bits()),
            (
                format!("lop3.b32 %r5, %r2, %r3, %r4, {lut};"),
                lop3(a, b, c, lut),
            ),
            (
                "shf.l.wrap.b32 %r5, %r2, %r3, %r6;".into(),
                shf(a, b, pos, true, true),
            ),
            (
                "shf.l.clamp.b32 %r5, %r2, %r3, %r6;".into(),
                shf(a, b, pos, true, false),
            ),
            (
                "shf.r.wrap.b32 %r5, %r2, %r3, %r6;".into(),
                shf(a, b, pos, false, true),
            ),
            (
                "shf.r.clamp.b32 %r5, %r2, %r3, %r6;".into(),
                shf(a, b, pos, false, false),
            ),
            (
                "bfe.u32 %r5, %r2, %r6, %r7;".into(),
                bfe(a, pos, len, false),
            ),
            (
                "bfi.b32 %r5, %r2, %r3, %r6, %r7;".into(),
                bfi(a, b, pos, len),
            ),
        ];
        body += &format!(
            "    mov.u32 %r2, {a};\n    mov.u32 %r3, {b};\n    mov.u32 %r4, {c};\n    mov.u32 %r6, {pos};\n    mov.u32 %r7, {len};\n"
        );
        for (k, (inst, w)) in ops.iter().enumerate() {
            let off = 4 * (want.len() + k);
            body += &format!("    {inst}\n    st.global.u32 [%rd2+{off}], %r5;\n");
            let _ = w;
        }
        want.extend(ops.iter().map(|o| (o.0.clone(), o.1)));
    }
    let got = clean(&body, 1, want.len());
    for ((inst, w), g) in want.iter().zip(&got) {
        assert_eq!(*g, *w, "{inst}: got {g:#010x}, want {w:#010x}");
    }
}
