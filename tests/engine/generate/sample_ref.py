#!/usr/bin/env python3
"""An independent implementation of ENGINE.md §8 (sampling), written from the spec text alone,
used by tests/generate_sample.rs to check the engine's sampler.

Input (stdin), one case per line, space-separated hex:
    T P M (f64 bit patterns, 16 hex digits) K S n (integers, hex) z_0 … z_{V-1} (f32 bit patterns)
Output (stdout): the chosen id per line.
Python floats are IEEE binary64 and CPython never fuses a multiply-add, so every operation below
is the single IEEE operation the spec names.
"""
import math
import struct
import sys

MASK = (1 << 64) - 1


def f64(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# MODEL.md §5.4 exp64.
LN2_HI = f64(0x3FE62E42FEE00000)
LN2_LO = f64(0x3DEA39EF35793C76)
COEF = [1.0 / float(math.factorial(j)) for j in range(14)]


def exp64(x):
    if x != x:
        return x
    if x > 709.0:
        return math.inf
    if x < -708.0:
        return 0.0
    kk = math.floor(x * 1.4426950408889634 + 0.5)
    k = float(kk)
    r = (x - k * LN2_HI) - k * LN2_LO
    p = COEF[13]
    for j in range(12, -1, -1):
        p = p * r + COEF[j]
    return p * f64((kk + 1023) << 52)


def seqsum(xs):
    s = 0.0
    for x in xs:
        s += x
    return s


def choose(z, T, K, P, M, S, n):
    V = len(z)
    if T == 0.0:
        top = max(z)
        return min(i for i in range(V) if z[i] == top)
    # -0.0 and 0.0 compare equal in Python, so the tuple falls through to the id.
    cand = sorted(range(V), key=lambda i: (-z[i], i))
    if K > 0:
        cand = cand[: min(K, V)]
    z0 = z[cand[0]]
    w = [exp64((z[i] - z0) / T) for i in cand]
    W = seqsum(w)
    kept = list(range(len(cand)))
    if P < 1.0:
        t = P * W
        acc = 0.0
        for j, x in enumerate(w):
            acc += x
            if acc >= t:
                kept = kept[: j + 1]
                break
    if M > 0.0:
        kept = [i for i in kept if not (w[i] < M)]
    Wk = seqsum(w[i] for i in kept)
    x = (S + (n + 1) * 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    x = x ^ (x >> 31)
    u = float(x >> 11) * (2.0 ** -53)
    r = u * Wk
    acc = 0.0
    for i in kept:
        acc += w[i]
        if acc > r:
            return cand[i]
    return cand[kept[-1]]


def main():
    out = []
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        T, P, M = (f64(int(v, 16)) for v in f[0:3])
        K, S, n = (int(v, 16) for v in f[3:6])
        z = [f32(int(v, 16)) for v in f[6:]]
        out.append(str(choose(z, T, K, P, M, S, n)))
    sys.stdout.write("\n".join(out) + "\n")


main()
