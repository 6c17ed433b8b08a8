//! `tessera_ir::fp8` against the independent reference generated from `ml_dtypes` by
//! `scripts/gen-fp8-table.py`: all 256 decodes of each format, and the encodes (non-saturating
//! and saturating) of every f32 input in the table (every rounding boundary, specials, random).

use tessera_ir::fp8::Fp8;

fn table(name: &str) -> Vec<Vec<u32>> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .map(|h| u32::from_str_radix(h, 16).unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn decode_all_codes_bit_exact() {
    let rows = table("fp8_decode.txt");
    assert_eq!(rows.len(), 256);
    for r in rows {
        let code = r[0] as u8;
        for (f, want) in [(Fp8::E4M3, r[1]), (Fp8::E5M2, r[2])] {
            let got = f.decode(code).to_bits();
            assert_eq!(
                got, want,
                "{f:?} decode {code:#04x}: {got:#010x} vs {want:#010x}"
            );
        }
    }
}

#[test]
fn encode_every_boundary_bit_exact() {
    let rows = table("fp8_encode.txt");
    assert!(rows.len() > 10_000, "table too small: {}", rows.len());
    let mut checked = 0;
    for r in &rows {
        let x = f32::from_bits(r[0]) as f64;
        let cases = [
            (Fp8::E4M3, false, r[1]),
            (Fp8::E4M3, true, r[2]),
            (Fp8::E5M2, false, r[3]),
            (Fp8::E5M2, true, r[4]),
        ];
        for (f, sat, want) in cases {
            let got = f.encode(x, sat) as u32;
            assert_eq!(
                got, want,
                "{f:?} encode {x:e} ({:#010x}) saturate={sat}: {got:#04x} vs {want:#04x}",
                r[0]
            );
            checked += 1;
        }
    }
    println!("{checked} encodes checked against ml_dtypes");
}
