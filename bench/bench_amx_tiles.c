/* What one AMX tile product of the int8 gemm's shape costs with what the
 * gemm does around it (src/kernels/cpu/gemm_q8_amx.c), one thread, per
 * CPU-second. A product is 16 x 16 outputs x one 32-byte block (K = 32,
 * 8192 multiply-adds); four products per step, on four C tiles:
 *
 *   dp          TDPBSSD only, accumulating (the tile unit's rate)
 *   load+dp     an A and a B tile load per product, then TDPBSSD
 *   dp+store    zero, TDPBSSD, and the C tile stored to L1 (one block's
 *               exact sums, as the gemm needs per block)
 *   store       the four C stores alone
 *   gemm step   load+dp+store, then the float epilogue of a stored C tile
 *               (16 rows: convert, scale product, FMA) -- the gemm's loop
 *
 * plus amx_peak.h's K = 32 probe. Prints ns and multiply-adds per product
 * (GMAC/s). Nothing is asserted.
 *
 *   bench_amx_tiles [-n steps] */
#include "amx_peak.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { DP, LOAD_DP, DP_STORE, STORE, STEP, N_MODES };
static const char *const mode_names[N_MODES] = {"dp", "load+dp", "dp+store", "store", "gemm step"};

#if defined(__x86_64__)
#define AMX_TGT __attribute__((target("amx-tile,amx-int8,avx512f")))

static _Alignas(64) int8_t a_rows[64 * 1024]; /* 16 rows of 1 KiB: the A tiles, stride 1024 */
static _Alignas(64) int8_t b_tiles[32 * 512];
static _Alignas(64) int32_t c_slots[4 * 256];
static _Alignas(64) float scales[32 * 16];

/* One step: four products on C tiles 4-7 (A tiles 0-1, B tiles 2-3). */
AMX_TGT static double run(int mode, long steps) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int rows[8] = {16, 16, 8, 8, 16, 16, 16, 16}, cols[8] = {32, 32, 64, 64, 64, 64, 64, 64};
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = (uint8_t)rows[t];
        cfg.colsb[t] = (uint16_t)cols[t];
    }
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* _tile_loadconfig names 8 bytes only */
    _tile_loadconfig(&cfg);
    _tile_loadd(0, a_rows, 1024);
    _tile_loadd(1, a_rows, 1024);
    _tile_loadd(2, b_tiles, 64);
    _tile_loadd(3, b_tiles, 64);
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    double t0 = cpu_s();
    for (long s = 0; s < steps; s++) {
        const int blk = (int)(s & 31);
        if (mode == LOAD_DP || mode == STEP) {
            _tile_loadd(0, a_rows + 32 * blk, 1024);
            _tile_loadd(2, b_tiles + 512 * blk, 64);
            _tile_loadd(1, a_rows + 16384 + 32 * blk, 1024);
            _tile_loadd(3, b_tiles + 512 * ((blk + 1) & 31), 64);
        }
        if (mode == DP_STORE || mode == STEP) {
            _tile_zero(4);
            _tile_zero(5);
            _tile_zero(6);
            _tile_zero(7);
        }
        if (mode != STORE) {
            _tile_dpbssd(4, 0, 2);
            _tile_dpbssd(5, 0, 3);
            _tile_dpbssd(6, 1, 2);
            _tile_dpbssd(7, 1, 3);
        }
        if (mode == DP_STORE || mode == STORE || mode == STEP) {
            _tile_stored(4, c_slots, 64);
            _tile_stored(5, c_slots + 256, 64);
            _tile_stored(6, c_slots + 512, 64);
            _tile_stored(7, c_slots + 768, 64);
        }
        if (mode == STEP) /* four products' epilogues, as the gemm's */
            for (int c = 0; c < 4; c++) {
                const __m512 dw = _mm512_load_ps(scales + 16 * blk);
                for (int i = 0; i < 16; i++)
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c_slots + 256 * c + 16 * i)),
                                             _mm512_mul_ps(dw, _mm512_set1_ps(scales[16 * blk + i])), acc[i]);
            }
    }
    double t = cpu_s() - t0;
    _tile_stored(4, c_slots, 64);
    _tile_release();
    float sink = 0.0f;
    for (int i = 0; i < 16; i++) sink += _mm512_reduce_add_ps(acc[i]);
    if (sink == 1234.5f) printf(" ");
    return t;
}
#else
static double run(int mode, long steps) {
    (void)mode;
    (void)steps;
    return 0.0;
}
#endif

int main(int argc, char **argv) {
    long steps = 2000000;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "-n")) steps = atol(argv[i + 1]);
    if (steps < 1 || !amx_peak_available()) {
        fprintf(stderr, steps < 1 ? "bad arguments\n" : "no AMX-INT8 here\n");
        return steps < 1 ? 2 : 0;
    }
    for (int i = 0; i < (int)sizeof a_rows; i++) a_rows[i] = (int8_t)(i % 7 - 3);
    for (int i = 0; i < (int)sizeof b_tiles; i++) b_tiles[i] = (int8_t)(i % 5 - 2);
    for (int i = 0; i < 32 * 16; i++) scales[i] = 1e-3f;
    { /* amx_peak.h's probe at K = 32: the same as "dp", as a cross-check */
        double t0 = cpu_s();
        (void)amx_peak_run(steps, 32);
        double ns = (cpu_s() - t0) / (double)steps / 4.0 * 1e9;
        printf("  %-10s %6.2f ns per product  %7.1f GMAC/s\n", "peak k32", ns, 8192.0 / ns);
    }
    for (int m = 0; m < N_MODES; m++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t = run(m, steps);
            best = t < best ? t : best;
        }
        double ns = best / (double)steps / 4.0 * 1e9;
        printf("  %-10s %6.2f ns per product  %7.1f GMAC/s\n", mode_names[m], ns, 8192.0 / ns);
    }
    return 0;
}
