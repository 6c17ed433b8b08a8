#!/usr/bin/env python3
"""Coefficients of the bf16 gelu polynomial (tessera/src/backend/cpu/fused/gelubf16.rs, `CT`).

On each interval round(4x) = j, -16 <= j < 16, fits p(u) = sum c_k u^k, u = 4x - j in
[-1/2, 1/2], to gelu(j/4 + u/4) = x Phi(x) (in f64), minimising the largest relative error
on 401 points by iteratively reweighted least squares (Lawson), rounds the coefficients to
f32 and sets the constant term of j = 0 to -0.0 (so that gelu(+-0) = +-0). Prints the Rust
array (`CT[k][j mod 32]`) on stdout and, on stderr, each interval's largest distance in f32
units in the last place between p (evaluated in f32 with fused multiply-adds, as the kernel
does) and gelu rounded to f32, over the bf16 inputs of the interval. Standard library only.

    python3 scripts/gen-gelu-bf16-coefs.py > /tmp/ct.rs
"""
import math
import struct
import sys

DEG = 4
S = 4.0  # intervals per unit of x
M = 12582912.0  # 1.5 * 2^23: x*4 + M rounds 4x to an integer


def f32(v):
    return struct.unpack('<f', struct.pack('<f', v))[0]


def bits(v):
    return struct.unpack('<I', struct.pack('<f', v))[0]


def gelu(x):
    return 0.5 * x * math.erfc(-x / math.sqrt(2))


def solve(a, y):
    """Least squares a c = y through the normal equations (small, well scaled)."""
    n = len(a[0])
    nm = [[sum(r[i] * r[k] for r in a) for k in range(n)] for i in range(n)]
    v = [sum(r[i] * yy for r, yy in zip(a, y)) for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(nm[r][i]))
        nm[i], nm[p] = nm[p], nm[i]
        v[i], v[p] = v[p], v[i]
        for r in range(i + 1, n):
            f = nm[r][i] / nm[i][i]
            for k in range(i, n):
                nm[r][k] -= f * nm[i][k]
            v[r] -= f * v[i]
    c = [0.0] * n
    for i in reversed(range(n)):
        c[i] = (v[i] - sum(nm[i][k] * c[k] for k in range(i + 1, n))) / nm[i][i]
    return c


def fit(j):
    us = [-0.5 + k / 400 for k in range(401) if k != 200 or j != 0]
    w = [1.0] * len(us)
    for _ in range(30):
        a = [[math.sqrt(wi) * u**k / gelu((j + u) / S) for k in range(DEG + 1)]
             for wi, u in zip(w, us)]
        c = solve(a, [math.sqrt(wi) for wi in w])
        e = [abs(sum(c[k] * u**k for k in range(DEG + 1)) / gelu((j + u) / S) - 1) for u in us]
        s = sum(wi * ei for wi, ei in zip(w, e))
        w = [wi * ei / s * len(us) + 1e-12 for wi, ei in zip(w, e)]
    c = [f32(v) for v in c]
    if j == 0:
        c[0] = -0.0
    return c


def main():
    coef = {j: fit(j) for j in range(-16, 16)}
    worst = {}
    for b in range(65536):
        x = struct.unpack('<f', struct.pack('<I', b << 16))[0]
        if math.isnan(x) or not (-16.5 / S <= x < 15.5 / S):
            continue
        j = int(f32(x * S + M) - M)
        c = coef[j]
        u = f32(x * S - j)
        p = c[DEG]
        for k in reversed(range(DEG)):
            p = f32(p * u + c[k])
        g = f32(gelu(x))
        d = abs((bits(g) & 0x7FFFFFFF) - (bits(p) & 0x7FFFFFFF))
        worst[j] = max(worst.get(j, 0), d)
    print('worst f32 ulps per interval j:', worst, file=sys.stderr)
    print('pub(crate) const CT: [[f32; 32]; %d] = [' % (DEG + 1))
    for k in range(DEG + 1):
        print('    [')
        for i in range(32):
            print('        %r,' % coef[i if i < 16 else i - 32][k])
        print('    ],')
    print('];')


if __name__ == '__main__':
    main()
