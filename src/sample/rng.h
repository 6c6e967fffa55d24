/* Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
 * Random Numbers: As Easy as 1, 2, 3", SC11).
 *
 * A counter-based generator has no state that advances: each block of four
 * 32-bit words is a pure function of (key, counter). DeepInfer keys it with
 * the request seed and builds the counter from where the number is used
 * (the sequence position being sampled, a draw index within that position,
 * and a domain tag naming the consumer). So a seeded request's random
 * numbers depend only on its seed and positions: never on which other
 * requests share the batch, on the thread count, or on the order in which
 * rows are processed, and a request that is preempted and recomputed draws
 * the same numbers again.
 *
 * Counter layout (4 x 32-bit words, word 0 least significant):
 *   ctr[0] = position bits 0..31
 *   ctr[1] = position bits 32..63
 *   ctr[2] = draw / 4          (the block holding draw index `draw`)
 *   ctr[3] = domain            (DI_RNG_DOMAIN_*)
 *   key[0] = seed bits 0..31, key[1] = seed bits 32..63
 * Draw `d` is word d % 4 of the block at ctr[2] = d / 4. */
#ifndef DI_SAMPLE_RNG_H
#define DI_SAMPLE_RNG_H

#include <stdint.h>

/* Domain tags keep independent consumers of one request's randomness from
 * ever reading the same numbers. New consumers add a tag here. */
enum {
    DI_RNG_DOMAIN_SAMPLE = 0,      /* the sampler's token draw */
    DI_RNG_DOMAIN_SPEC_ACCEPT = 1, /* speculative decoding accept/reject */
    DI_RNG_DOMAIN_SPEC_RESAMPLE = 2, /* speculative decoding residual draw */
};

/* The raw block function: 10 Philox rounds of ctr under key. out may alias
 * ctr. Matches Random123's philox4x32_R(10, ctr, key). */
void di_rng_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Word `draw` of the stream (seed, domain, position), laid out as above. */
uint32_t di_rng_u32(uint64_t seed, uint32_t domain, uint64_t position, uint32_t draw);

/* The top 24 bits of x as a float in [0, 1): every value is exactly
 * representable, so 1.0f is never produced (a plain x * 2^-32 can round
 * up to 1.0f). */
static inline float di_rng_unit_float(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Uniform float in [0, 1) with 24 random bits: di_rng_unit_float of
 * di_rng_u32(seed, domain, position, draw). */
float di_rng_uniform(uint64_t seed, uint32_t domain, uint64_t position, uint32_t draw);

#endif
