#!/usr/bin/env python3
"""Independent Python Philox4x32-10 for src/sample/rng.c's tests.

Written from the SC11 paper (Salmon et al., "Parallel Random Numbers: As Easy
as 1, 2, 3"). It first checks itself against the three Random123 known-answer
vectors (kat_vectors, "philox4x32 10" lines), then prints the words that
di_rng_u32(seed, domain, position, draw) must return under the counter layout
documented in src/sample/rng.h; tests/sample/test_rng.c embeds that output.
Usage: python3 scripts/gen_rng_vectors.py
"""
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    x = list(ctr)
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * x[0], M1 * x[2]
        x = [(p1 >> 32) ^ x[1] ^ k0, p1 & MASK, (p0 >> 32) ^ x[3] ^ k1, p0 & MASK]
    return x


KAT = [  # Random123 kat_vectors: ctr[4] key[2] -> out[4]
    ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
    ([MASK] * 4, [MASK] * 2, [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
    ([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0],
     [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]),
]


def rng_u32(seed, domain, position, draw):
    ctr = [position & MASK, position >> 32, draw // 4, domain]
    return philox4x32_10(ctr, [seed & MASK, seed >> 32])[draw % 4]


def main():
    for ctr, key, want in KAT:
        assert philox4x32_10(ctr, key) == want, (ctr, key)
    cases = [(0, 0, 0, 0), (42, 0, 7, 0), (42, 0, 7, 3), (42, 0, 7, 5),
             (0x0123456789abcdef, 1, 0xfedcba9876543210, 9), (42, 2, 1 << 40, 0)]
    for seed, domain, pos, draw in cases:
        print("{0x%016xull, %uu, 0x%016xull, %uu, 0x%08xu}," %
              (seed, domain, pos, draw, rng_u32(seed, domain, pos, draw)))


if __name__ == "__main__":
    main()
