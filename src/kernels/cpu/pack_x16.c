/* The x16 interleaved layouts (pack_x16.h): portable C, run once per weight
 * at load. */
#include "kernels/cpu/pack_x16.h"

#include "base/alloc.h"
#include "kernels/cpu/quant_blocks.h"

#include <string.h>

int di_x16_packable(di_dtype dtype, int64_t n_in) {
    return (dtype == DI_DTYPE_Q4_K || dtype == DI_DTYPE_Q6_K) && n_in > 0 && n_in % DI_QK_K == 0;
}

uint64_t di_x16_group_bytes(di_dtype dtype, int64_t n_in) {
    if (!di_x16_packable(dtype, n_in)) return 0;
    uint64_t per = dtype == DI_DTYPE_Q4_K ? sizeof(di_block_q4_K_x16) : sizeof(di_block_q6_K_x16);
    return per * (uint64_t)(n_in / DI_QK_K);
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

void di_x16_pack(di_dtype dtype, const void *w, uint64_t row_bytes, int64_t n_out, int64_t n_in, void *dst) {
    const int64_t nsb = n_in / DI_QK_K;
    uint8_t *out = dst;
    for (int64_t o = 0; o < n_out; o += DI_X16_ROWS) {
        const int n = n_out - o < DI_X16_ROWS ? (int)(n_out - o) : DI_X16_ROWS;
        const void *rows[DI_X16_ROWS] = {0};
        for (int r = 0; r < n; r++) rows[r] = (const uint8_t *)w + (uint64_t)(o + r) * row_bytes;
        for (int64_t s = 0; s < nsb; s++) {
            if (dtype == DI_DTYPE_Q4_K) {
                pack_q4_K((const di_block_q4_K **)rows, n, s, (di_block_q4_K_x16 *)(void *)out);
                out += sizeof(di_block_q4_K_x16);
            } else {
                pack_q6_K((const di_block_q6_K **)rows, n, s, (di_block_q6_K_x16 *)(void *)out);
                out += sizeof(di_block_q6_K_x16);
            }
        }
    }
}
