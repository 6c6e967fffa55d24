/* numpy's np.random.default_rng(seed).integers(low, high, n, dtype=np.int64)
 * in C, bit for bit, because DeepInfer's NgramHashMapping draws the Engram
 * hash multipliers with it (engram_metadata.py: "Keep NumPy's per-layer RNG
 * and bound: changing either changes table IDs").
 *
 * Three numpy pieces, written from their documented algorithms:
 *  - SeedSequence (bit_generator.pyx): the seed's 32-bit words are hash-mixed
 *    into a pool of 4 words, and generate_state(4, uint64) hashes the pool
 *    out into 8 words read as 4 little-endian uint64.
 *  - PCG64 (pcg64.c): 128-bit LCG, state = state * MULT + inc, output XSL-RR
 *    of the new state; seeded with pcg_setseq_128_srandom_r(state words 0-1,
 *    increment words 2-3, high word first). next_uint32 hands out the low
 *    half of a 64-bit draw and keeps the high half for the next call.
 *  - random_bounded_uint64_fill (distributions.c) with use_masked = false:
 *    Lemire's nearly-divisionless rejection on 32-bit draws when the range
 *    fits 32 bits, on 64-bit draws otherwise; rng = high - low - 1 = 0 gives
 *    low, and the full 32/64-bit ranges take raw draws. */
#include "model/engram.h"

/* 128-bit integers (gcc and clang on every 64-bit target we build). */
__extension__ typedef unsigned __int128 u128;

/* SeedSequence constants (numpy/random/bit_generator.pyx). */
#define SS_POOL_WORDS 4
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16 /* 4 bytes * 8 / 2 */

/* PCG_DEFAULT_MULTIPLIER_128. */
#define PCG_MULT_HI 0x2360ED051FC65DA4ull
#define PCG_MULT_LO 0x4385DF649FCCF645ull

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    return r ^ (r >> SS_XSHIFT);
}

/* SeedSequence(seed).generate_state(4, np.uint64) into words[8] (uint32). */
static void seed_sequence_state(uint64_t seed, uint32_t words[8]) {
    /* _int_to_uint32_array gives the seed's little-endian 32-bit words (one
     * or two); the pool pads them with zeros, so a zero high word is the
     * same as none. */
    const uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};

    uint32_t pool[SS_POOL_WORDS];
    uint32_t hc = SS_INIT_A;
    for (int i = 0; i < SS_POOL_WORDS; i++) pool[i] = hashmix(i < 2 ? entropy[i] : 0, &hc);
    for (int src = 0; src < SS_POOL_WORDS; src++)
        for (int dst = 0; dst < SS_POOL_WORDS; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hc));
    /* entropy longer than the pool would be mixed in here; 2 words never is. */

    uint32_t hb = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL_WORDS];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        words[i] = v;
    }
}

static u128 get_state(const di_engram_np_rng *r) { return ((u128)r->state_hi << 64) | r->state_lo; }

static void step(di_engram_np_rng *r) {
    u128 mult = ((u128)PCG_MULT_HI << 64) | PCG_MULT_LO;
    u128 inc = ((u128)r->inc_hi << 64) | r->inc_lo;
    u128 s = get_state(r) * mult + inc;
    r->state_hi = (uint64_t)(s >> 64);
    r->state_lo = (uint64_t)s;
}

void di_engram_np_rng_seed(di_engram_np_rng *r, uint64_t seed) {
    uint32_t w[8];
    seed_sequence_state(seed, w);
    uint64_t v[4];
    for (int i = 0; i < 4; i++) v[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
    /* pcg64_set_seed: initstate = v[0]:v[1], initseq = v[2]:v[3] (high first). */
    u128 initstate = ((u128)v[0] << 64) | v[1];
    u128 inc = ((((u128)v[2] << 64) | v[3]) << 1) | 1u;
    r->inc_hi = (uint64_t)(inc >> 64);
    r->inc_lo = (uint64_t)inc;
    r->state_hi = r->state_lo = 0;
    step(r);
    u128 s = get_state(r) + initstate;
    r->state_hi = (uint64_t)(s >> 64);
    r->state_lo = (uint64_t)s;
    step(r);
    r->has_u32 = false;
    r->u32 = 0;
}

uint64_t di_engram_np_rng_next_u64(di_engram_np_rng *r) {
    step(r);
    uint64_t x = r->state_hi ^ r->state_lo;
    unsigned rot = (unsigned)(r->state_hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

static uint32_t next_u32(di_engram_np_rng *r) {
    if (r->has_u32) {
        r->has_u32 = false;
        return r->u32;
    }
    uint64_t x = di_engram_np_rng_next_u64(r);
    r->has_u32 = true;
    r->u32 = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

/* buffered_bounded_lemire_uint32: a value in [0, rng], rng < 2^32 - 1. */
static uint32_t lemire32(di_engram_np_rng *r, uint32_t rng) {
    uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)next_u32(r) * excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < excl) {
        uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (leftover < threshold) {
            m = (uint64_t)next_u32(r) * excl;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* bounded_lemire_uint64: a value in [0, rng], rng < 2^64 - 1. */
static uint64_t lemire64(di_engram_np_rng *r, uint64_t rng) {
    uint64_t excl = rng + 1;
    u128 m = (u128)di_engram_np_rng_next_u64(r) * excl;
    uint64_t leftover = (uint64_t)m;
    if (leftover < excl) {
        uint64_t threshold = (UINT64_MAX - rng) % excl;
        while (leftover < threshold) {
            m = (u128)di_engram_np_rng_next_u64(r) * excl;
            leftover = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

di_status di_engram_np_rng_integers(di_engram_np_rng *r, int64_t low, int64_t high, size_t n,
                                    int64_t *out, di_error *err) {
    if (!r || (!out && n)) return di_error_set(err, DI_ERR_INVALID_ARG, "engram rng: NULL argument");
    if (low >= high)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram rng: integers(%lld, %lld): low >= high",
                            (long long)low, (long long)high);
    uint64_t off = (uint64_t)low;
    uint64_t rng = (uint64_t)high - (uint64_t)low - 1u; /* inclusive range, wraps like numpy's */
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        if (rng == 0) u = 0;
        else if (rng < UINT32_MAX) u = lemire32(r, (uint32_t)rng);
        else if (rng == UINT32_MAX) u = next_u32(r);
        else if (rng == UINT64_MAX) u = di_engram_np_rng_next_u64(r);
        else u = lemire64(r, rng);
        out[i] = (int64_t)(off + u); /* two's-complement wrap, as numpy's uint64 -> int64 view */
    }
    return DI_OK;
}
