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
    case DI_DTYPE_Q4_0: return sizeof(di_block_q4_0_x16);
    case DI_DTYPE_Q4_1: return sizeof(di_block_q4_1_x16);
    case DI_DTYPE_Q5_0: return sizeof(di_block_q5_0_x16);
    case DI_DTYPE_Q8_0: return sizeof(di_block_q8_0_x16);
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

static void pack_q4_K(const di_block_q4_K *rows[DI_X16_ROWS], int n, int64_t s, di_block_q4_K_x16 *out) {
    memset(out, 0, sizeof *out);
    for (int r = 0; r < n; r++) {
        const di_block_q4_K *b = rows[r] + s;
        out->d[r] = b->d;
        out->dmin[r] = b->dmin;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            di_q4_K_scale_min(b->scales, j, &sc, &mn);
            out->sc[j][r] = (uint8_t)sc;
            out->mn[j][r] = (uint8_t)mn;
        }
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 8; c++) memcpy(out->qs[p][c][r], b->qs + 32 * p + 4 * c, 4);
    }
}

static void pack_q6_K(const di_block_q6_K *rows[DI_X16_ROWS], int n, int64_t s, di_block_q6_K_x16 *out) {
    memset(out, 0, sizeof *out);
    for (int r = 0; r < n; r++) {
        const di_block_q6_K *b = rows[r] + s;
        out->d[r] = b->d;
        for (int j = 0; j < 16; j++) out->sc[j][r] = b->scales[j];
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 8; c++) {
                for (int k = 0; k < 2; k++) memcpy(out->q[h][c][k][r], b->ql + 64 * h + 32 * k + 4 * c, 4);
                memcpy(out->q[h][c][2][r], b->qh + 32 * h + 4 * c, 4);
            }
    }
}

/* One 32-element block b of up to 16 rows of a 32-element kind. */
static void pack_32(di_dtype dtype, const uint8_t *rows[DI_X16_ROWS], int n, int64_t b, uint8_t *out) {
    memset(out, 0, block_bytes(dtype, &(int64_t){0}));
    for (int r = 0; r < n; r++) {
        if (dtype == DI_DTYPE_Q8_0) {
            const di_block_q8_0 *bl = (const di_block_q8_0 *)(const void *)rows[r] + b;
            di_block_q8_0_x16 *o = (di_block_q8_0_x16 *)(void *)out;
            o->d[r] = bl->d;
            for (int e = 0; e < 32; e++) o->qs[e / 4][r][e % 4] = (uint8_t)(bl->qs[e] + 128);
            continue;
        }
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
            uint32_t qh;
            memcpy(&qh, bl->qh, sizeof qh);
            for (int e = 0; e < 32; e++)
                if (qh >> e & 1) o->qh[e / 16][(e % 16) / 4] |= 1ull << (4 * r + e % 4);
            o->d[r] = bl->d, qs = bl->qs, oqs = o->qs;
        }
        for (int c = 0; c < 4; c++) memcpy(oqs[c][r], qs + 4 * c, 4);
    }
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
            if (dtype == DI_DTYPE_Q4_K) pack_q4_K((const di_block_q4_K **)rows, n, s, (di_block_q4_K_x16 *)(void *)out);
            else if (dtype == DI_DTYPE_Q6_K) pack_q6_K((const di_block_q6_K **)rows, n, s, (di_block_q6_K_x16 *)(void *)out);
            else pack_32(dtype, (const uint8_t **)rows, n, s, out);
            out += bb;
        }
    }
}
