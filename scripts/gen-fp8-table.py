#!/usr/bin/env python3
"""Generates the fp8 reference tables tessera-ir's tests check against (the independent reference
for `tessera_ir::fp8`): `tessera-ir/tests/data/fp8_decode.txt` and `fp8_encode.txt`, from
`ml_dtypes` (float8_e4m3fn and float8_e5m2, the OCP FP8 formats).

    pip install ml_dtypes==0.6.0 numpy
    python3 scripts/gen-fp8-table.py

fp8_decode.txt: one line per code `cc e4m3 e5m2`: the code and the f32 bits each format decodes it to.
fp8_encode.txt: one line per f32 input `xxxxxxxx e4 e4s e5 e5s`: the input's bits and its code in each
format, non-saturating (ml_dtypes' astype: overflow is NaN in e4m3, inf in e5m2) and saturating
(finite overflow and inf clamp to the largest finite value of that sign, NaN stays NaN; computed
as np.clip to ±max before astype). The inputs cover every rounding boundary: each code, the
midpoint between every two adjacent codes (positive and negative) and its f32 neighbours ±1 ulp,
the overflow thresholds, subnormals of both fp8 formats and of f32, ±0, ±inf, NaNs, then seeded
random f32 values (random bit patterns and random values in each format's range).
"""
import os
import numpy as np
import ml_dtypes

E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
FORMATS = [(E4, 448.0), (E5, 57344.0)]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tessera-ir", "tests", "data")


def bits32(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def f32(b):
    return np.array([b], dtype=np.uint32).view(np.float32)[0]


def decode(fmt):
    codes = np.arange(256, dtype=np.uint8).view(fmt)
    return codes.astype(np.float32).view(np.uint32)


def encode(xs, fmt, mx, saturate):
    xs = np.asarray(xs, dtype=np.float32)
    if saturate:
        with np.errstate(invalid="ignore"):
            xs = np.where(np.isnan(xs), xs, np.clip(xs, -mx, mx)).astype(np.float32)
    return xs.astype(fmt).view(np.uint8)


def next_up(x):
    return np.nextafter(np.float32(x), np.float32(np.inf), dtype=np.float32)


def next_down(x):
    return np.nextafter(np.float32(x), np.float32(-np.inf), dtype=np.float32)


def inputs():
    xs = set()

    def add(x):
        x = np.float32(x)
        for y in (x, next_up(x), next_down(x)):
            xs.add(bits32(y))

    for fmt, mx in FORMATS:
        vals = sorted({float(v) for v in decode(fmt).view(np.float32) if np.isfinite(v)})
        for v in vals:
            add(v)
        for a, b in zip(vals, vals[1:]):
            add((a + b) / 2.0)  # exact in f32: fp8 neighbours have at most 4 significant bits
        # beyond the largest finite value: the midpoint to the next (missing) code, and far out
        step = {448.0: 32.0, 57344.0: 8192.0}[mx]
        for s in (1.0, -1.0):
            for v in (mx + step / 2, mx + step, mx + 3 * step / 2, 2 * mx, 1e30, 3.0e38):
                add(s * v)
            # half the smallest subnormal and around it
            tiny = min(v for v in vals if v > 0)
            for v in (tiny / 2, tiny / 4, 3 * tiny / 4, tiny * 1.5):
                add(s * v)
    for b in (0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
              0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
              0x7F7FFFFF, 0xFF7FFFFF):
        xs.add(b)
    rng = np.random.default_rng(20261123)
    for b in rng.integers(0, 2**32, size=4000, dtype=np.uint64):
        xs.add(int(b))
    for mx in (448.0, 57344.0):
        for v in rng.uniform(-1.2 * mx, 1.2 * mx, size=2000).astype(np.float32):
            xs.add(bits32(v))
        for v in (rng.standard_normal(2000) * rng.choice([1e-4, 1e-2, 1.0, 100.0], 2000)).astype(np.float32):
            xs.add(bits32(v))
    return sorted(xs)


def main():
    os.makedirs(ROOT, exist_ok=True)
    d4, d5 = decode(E4), decode(E5)
    with open(os.path.join(ROOT, "fp8_decode.txt"), "w") as f:
        f.write("# code e4m3 e5m2: f32 bits of each format's decode (ml_dtypes %s)\n" % ml_dtypes.__version__)
        for c in range(256):
            f.write("%02x %08x %08x\n" % (c, d4[c], d5[c]))
    bs = inputs()
    xs = np.array(bs, dtype=np.uint32).view(np.float32)
    cols = [encode(xs, fmt, mx, sat) for fmt, mx in FORMATS for sat in (False, True)]
    with open(os.path.join(ROOT, "fp8_encode.txt"), "w") as f:
        f.write("# f32 e4m3 e4m3-sat e5m2 e5m2-sat (ml_dtypes %s; saturating = clip to +-max first)\n" % ml_dtypes.__version__)
        for i, b in enumerate(bs):
            f.write("%08x %02x %02x %02x %02x\n" % (b, cols[0][i], cols[1][i], cols[2][i], cols[3][i]))
    print("wrote %d decodes per format and %d encode inputs to %s" % (256, len(bs), ROOT))


if __name__ == "__main__":
    main()
