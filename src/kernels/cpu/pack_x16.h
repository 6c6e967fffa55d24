/* Interleaved weight layouts for the int8 gemm of the AVX-512 table
 * (gemm_q8_x16_avx512.c): 16 weight rows side by side, so one 64-byte
 * vector holds 4 consecutive quantized bytes of each of the 16 rows and one
 * vpdpbusd against a broadcast 4-byte piece of an activation row advances
 * 16 output dots at once. Each vector lane is one output row: the
 * sub-block scales multiply lane-wise and no horizontal sum is needed.
 *
 * A packed matrix is ceil(n_out / 16) groups of 16 rows (the rows past
 * n_out are zero: scale 0, so they add 0), each group its n_in / 256
 * super-blocks in order. Made once when a weight is loaded
 * (backend_cpu.c's upload_weight), read-only after; the same bytes as the
 * GGUF rows hold, moved:
 *
 *   Q4_K, 2368 bytes per group and super-block (16 x 144 + 64):
 *     d[16], dmin[16]    the rows' f16 super-block scales
 *     sc[8][16], mn[8][16]  6-bit scale and min of sub-block j of row r
 *     qs[4][8][16][4]    pair p (sub-blocks 2p in the low nibbles, 2p+1
 *                        in the high ones, as the GGUF stores them),
 *                        chunk c: row r's qs bytes 32p + 4c .. 32p + 4c + 3
 *   Q6_K, 3360 bytes (16 x 210):
 *     d[16]              f16
 *     sc[16][16]         int8 scale of 16-element sub-block j of row r
 *     q[2][8][3][16][4]  half h, chunk c, in the order the gemm reads
 *                        them: row r's ql bytes 64h + 4c .. + 3, its ql
 *                        bytes 64h + 32 + 4c .. + 3, its qh bytes
 *                        32h + 4c .. + 3 (one sequential stream)
 *
 *   the 32-element kinds, per group and 32-element block:
 *   Q4_0, 288 bytes (16 x 18):  d[16]; qs[4][16][4]: chunk c, row r's qs
 *         bytes 4c .. 4c + 3 (low nibbles: elements 4c .., high: 16 + 4c ..)
 *   Q4_1, 320 bytes (16 x 20):  d[16], m[16]; qs as Q4_0
 *   Q5_0, 352 bytes (16 x 22):  d[16]; qh[2][4] 64-bit lane masks: bit
 *         4r + t of qh[h][c] is the fifth bit of row r's element
 *         16h + 4c + t (one byte mask per chunk half); qs as Q4_0
 *   Q8_0, 544 bytes (16 x 34):  d[16]; qs[8][16][4]: chunk c, row r's
 *         values 4c .. 4c + 3 plus 128 (unsigned, for vpdpbusd)
 *
 * The numerics of the packed gemm are defined in gemm_q8_x16_avx512.c. */
#ifndef DI_KERNELS_CPU_PACK_X16_H
#define DI_KERNELS_CPU_PACK_X16_H

#include "tensor/dtype.h"

#include <stddef.h>
#include <stdint.h>

#define DI_X16_ROWS 16

typedef struct di_block_q4_K_x16 {
    uint16_t d[16], dmin[16];
    uint8_t sc[8][16], mn[8][16];
    uint8_t qs[4][8][16][4];
} di_block_q4_K_x16;

typedef struct di_block_q6_K_x16 {
    uint16_t d[16];
    int8_t sc[16][16];
    uint8_t q[2][8][3][16][4];
} di_block_q6_K_x16;

typedef struct di_block_q4_0_x16 {
    uint16_t d[16];
    uint8_t qs[4][16][4];
} di_block_q4_0_x16;

typedef struct di_block_q4_1_x16 {
    uint16_t d[16], m[16];
    uint8_t qs[4][16][4];
} di_block_q4_1_x16;

typedef struct di_block_q5_0_x16 {
    uint16_t d[16];
    uint64_t qh[2][4];
    uint8_t qs[4][16][4];
} di_block_q5_0_x16;

typedef struct di_block_q8_0_x16 {
    uint16_t d[16];
    uint8_t qs[8][16][4];
} di_block_q8_0_x16;

_Static_assert(sizeof(di_block_q4_0_x16) == 288, "q4_0 x16 block");
_Static_assert(sizeof(di_block_q4_1_x16) == 320, "q4_1 x16 block");
_Static_assert(sizeof(di_block_q5_0_x16) == 352, "q5_0 x16 block");
_Static_assert(sizeof(di_block_q8_0_x16) == 544, "q8_0 x16 block");
_Static_assert(sizeof(di_block_q4_K_x16) == 2368, "q4_K x16 block");
_Static_assert(sizeof(di_block_q6_K_x16) == 3360, "q6_K x16 block");

/* A 32-element kind's packed block (Q4_0, Q4_1, Q5_0, Q8_0): its bytes,
 * and where its qs start. */
static inline uint64_t di_x16_block32_bytes(di_dtype t) {
    return t == DI_DTYPE_Q4_0   ? sizeof(di_block_q4_0_x16)
           : t == DI_DTYPE_Q4_1 ? sizeof(di_block_q4_1_x16)
           : t == DI_DTYPE_Q5_0 ? sizeof(di_block_q5_0_x16)
                                : sizeof(di_block_q8_0_x16);
}

static inline uint64_t di_x16_block32_qs(di_dtype t) {
    return t == DI_DTYPE_Q4_0   ? offsetof(di_block_q4_0_x16, qs)
           : t == DI_DTYPE_Q4_1 ? offsetof(di_block_q4_1_x16, qs)
           : t == DI_DTYPE_Q5_0 ? offsetof(di_block_q5_0_x16, qs)
                                : offsetof(di_block_q8_0_x16, qs);
}

/* True when dtype has an x16 layout for rows of n_in (a multiple of its
 * block: 256 for the K kinds, 32 for the others). */
int di_x16_packable(di_dtype dtype, int64_t n_in);

/* Bytes of the packed form of an (n_out, n_in) matrix; 0 when not packable
 * or on overflow. */
uint64_t di_x16_packed_bytes(di_dtype dtype, int64_t n_out, int64_t n_in);

/* Bytes of one group of 16 packed rows. */
uint64_t di_x16_group_bytes(di_dtype dtype, int64_t n_in);

/* (n_out, n_in) rows of row_bytes -> dst (di_x16_packed_bytes bytes). */
void di_x16_pack(di_dtype dtype, const void *w, uint64_t row_bytes, int64_t n_out, int64_t n_in, void *dst);

#endif
