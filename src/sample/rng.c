/* Philox4x32-10, written from the SC11 paper's description: each round
 * multiplies words 0 and 2 by fixed 32-bit constants, producing 64-bit
 * products whose high halves are XORed with the other words and the key;
 * the key is bumped by the Weyl constants between rounds. */
#include "sample/rng.h"

/* Round multipliers and key increments from the paper (section 3.3). The
 * increments are the golden ratio and sqrt(3) - 1 in 0.32 fixed point. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

static inline void philox_round(uint32_t x[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * x[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * x[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t y0 = hi1 ^ x[1] ^ k[0];
    uint32_t y2 = hi0 ^ x[3] ^ k[1];
    x[0] = y0;
    x[1] = lo1;
    x[2] = y2;
    x[3] = lo0;
}

void di_rng_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(x, k);
    }
    out[0] = x[0];
    out[1] = x[1];
    out[2] = x[2];
    out[3] = x[3];
}

uint32_t di_rng_u32(uint64_t seed, uint32_t domain, uint64_t position, uint32_t draw) {
    const uint32_t ctr[4] = {(uint32_t)position, (uint32_t)(position >> 32), draw / 4u, domain};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    di_rng_philox4x32_10(ctr, key, out);
    return out[draw % 4u];
}

float di_rng_uniform(uint64_t seed, uint32_t domain, uint64_t position, uint32_t draw) {
    return di_rng_unit_float(di_rng_u32(seed, domain, position, draw));
}
