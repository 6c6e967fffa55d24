/* The x16 interleaved layouts (pack_x16.h): portable C, run once per weight
 * at load. */
#include "kernels/cpu/pack_x16.h"

#include "base/alloc.h"
#include "kernels/cpu/quant_blocks.h"

#include <string.h>

/* Bytes and elements of one packed block of a group; 0 for no layout. */
static uint64_t block_bytes(di_dtype dtype, int64_t *elems) {
    *elems = DI_QK;
    switch (dtype) {
    case DI_DTYPE_Q4_0:
    case DI_DTYPE_Q4_1:
    case DI_DTYPE_Q5_0:
    case DI_DTYPE_Q8_0: return di_x16_block32_bytes(dtype);
    case DI_DTYPE_Q4_K: *elems = DI_QK_K; return sizeof(di_block_q4_K_x16);
    case DI_DTYPE_Q6_K: *elems = DI_QK_K; return sizeof(di_block_q6_K_x16);
    default: return 0;
    }
}

int di_x16_packable(di_dtype dtype, int64_t n_in) {
    int64_t elems;
    return block_bytes(dtype, &elems) && n_in > 0 && n_in % elems == 0;
}

uint64_t di_x16_group_bytes(di_dtype dtype, int64_t n_in) {
    int64_t elems;
    uint64_t per = block_bytes(dtype, &elems);
    if (!di_x16_packable(dtype, n_in)) return 0;
    return per * (uint64_t)(n_in / elems);
}

uint64_t di_x16_packed_bytes(di_dtype dtype, int64_t n_out, int64_t n_in) {
    uint64_t g = di_x16_group_bytes(dtype, n_in), total;
    if (!g || n_out < 1) return 0;
    if (di_mul_overflow_u64(g, (uint64_t)((n_out + DI_X16_ROWS - 1) / DI_X16_ROWS), &total)) return 0;
    return total;
}

/* 4 bytes, as a word (the packers move words: one load and one store each). */
static inline uint32_t load4(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store4(uint8_t *p, uint32_t v) { memcpy(p, &v, sizeof v); }

/* Each packer writes every byte of its block for rows 0 .. n-1; the caller
 * zeroes the block first when n < 16 (the padding rows). */
static void pack_q4_K(const di_block_q4_K *rows[DI_X16_ROWS], int n, int64_t s, di_block_q4_K_x16 *out) {
    for (int r = 0; r < n; r++) {
        const di_block_q4_K *b = rows[r] + s;
        out->d[r] = b->d;
        out->dmin[r] = b->dmin;
        uint64_t sc, mn;
        di_q4_K_scales_mins(b->scales, &sc, &mn);
        for (int j = 0; j < 8; j++) {
            out->sc[j][r] = (uint8_t)(sc >> (8 * j));
            out->mn[j][r] = (uint8_t)(mn >> (8 * j));
        }
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 8; c++) store4(out->qs[p][c][r], load4(b->qs + 32 * p + 4 * c));
    }
}

static void pack_q6_K(const di_block_q6_K *rows[DI_X16_ROWS], int n, int64_t s, di_block_q6_K_x16 *out) {
    for (int r = 0; r < n; r++) {
        const di_block_q6_K *b = rows[r] + s;
        out->d[r] = b->d;
        for (int j = 0; j < 16; j++) out->sc[j][r] = b->scales[j];
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 8; c++) {
                store4(out->q[h][c][0][r], load4(b->ql + 64 * h + 4 * c));
                store4(out->q[h][c][1][r], load4(b->ql + 64 * h + 32 + 4 * c));
                store4(out->q[h][c][2][r], load4(b->qh + 32 * h + 4 * c));
            }
    }
}

/* One 32-element block b of up to 16 rows of a 32-element kind. */
static void pack_32(di_dtype dtype, const uint8_t *rows[DI_X16_ROWS], int n, int64_t b, uint8_t *out) {
    if (dtype == DI_DTYPE_Q8_0) {
        di_block_q8_0_x16 *o = (di_block_q8_0_x16 *)(void *)out;
        for (int r = 0; r < n; r++) {
            const di_block_q8_0 *bl = (const di_block_q8_0 *)(const void *)rows[r] + b;
            o->d[r] = bl->d;
            for (int c = 0; c < 8; c++) /* q + 128 as unsigned: flip each byte's sign bit */
                store4(o->qs[c][r], load4((const uint8_t *)bl->qs + 4 * c) ^ 0x80808080u);
        }
        return;
    }
    uint64_t qhm[2][4] = {{0}};
    for (int r = 0; r < n; r++) {
        const uint8_t *qs;
        uint8_t(*oqs)[16][4];
        if (dtype == DI_DTYPE_Q4_0) {
            const di_block_q4_0 *bl = (const di_block_q4_0 *)(const void *)rows[r] + b;
            di_block_q4_0_x16 *o = (di_block_q4_0_x16 *)(void *)out;
            o->d[r] = bl->d, qs = bl->qs, oqs = o->qs;
        } else if (dtype == DI_DTYPE_Q4_1) {
            const di_block_q4_1 *bl = (const di_block_q4_1 *)(const void *)rows[r] + b;
            di_block_q4_1_x16 *o = (di_block_q4_1_x16 *)(void *)out;
            o->d[r] = bl->d, o->m[r] = bl->m, qs = bl->qs, oqs = o->qs;
        } else {
            const di_block_q5_0 *bl = (const di_block_q5_0 *)(const void *)rows[r] + b;
            di_block_q5_0_x16 *o = (di_block_q5_0_x16 *)(void *)out;
            const uint32_t qh = load4(bl->qh);
            for (int h = 0; h < 2; h++) /* elements 16h + 4c .. + 3 -> lane bits 4r .. 4r + 3 */
                for (int c = 0; c < 4; c++) qhm[h][c] |= (uint64_t)((qh >> (16 * h + 4 * c)) & 15u) << (4 * r);
            o->d[r] = bl->d, qs = bl->qs, oqs = o->qs;
        }
        for (int c = 0; c < 4; c++) store4(oqs[c][r], load4(qs + 4 * c));
    }
    if (dtype == DI_DTYPE_Q5_0) memcpy(((di_block_q5_0_x16 *)(void *)out)->qh, qhm, sizeof qhm);
}

void di_x16_pack(di_dtype dtype, const void *w, uint64_t row_bytes, int64_t n_out, int64_t n_in, void *dst) {
    int64_t elems;
    const uint64_t bb = block_bytes(dtype, &elems);
    const int64_t nsb = n_in / elems;
    uint8_t *out = dst;
    for (int64_t o = 0; o < n_out; o += DI_X16_ROWS) {
        const int n = n_out - o < DI_X16_ROWS ? (int)(n_out - o) : DI_X16_ROWS;
        const void *rows[DI_X16_ROWS] = {0};
        for (int r = 0; r < n; r++) rows[r] = (const uint8_t *)w + (uint64_t)(o + r) * row_bytes;
        for (int64_t s = 0; s < nsb; s++) {
            if (n < DI_X16_ROWS) memset(out, 0, bb); /* the padding rows */
            if (dtype == DI_DTYPE_Q4_K) pack_q4_K((const di_block_q4_K **)rows, n, s, (di_block_q4_K_x16 *)(void *)out);
            else if (dtype == DI_DTYPE_Q6_K) pack_q6_K((const di_block_q6_K **)rows, n, s, (di_block_q6_K_x16 *)(void *)out);
            else pack_32(dtype, (const uint8_t **)rows, n, s, out);
            out += bb;
        }
    }
}
