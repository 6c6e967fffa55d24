/* AMX int8 peak probe shared by bench_peak.c and bench_bandwidth.c (bench
 * programs only). amx_peak_available() asks Linux for the tile data state
 * (arch_prctl ARCH_REQ_XCOMP_PERM, per process) after cpuid and XCR0 say
 * AMX-TILE/INT8 are there; amx_peak_run() then runs 4 independent 16x16
 * int32 accumulator tiles fed by TDPBSSD with k bytes per row (64: the full
 * rate; 32: one 32-element block per product, the shape of
 * src/kernels/cpu/gemm_q8_amx.c), 4 * 16 * 16 * k multiply-adds per
 * iteration. */
#ifndef DI_BENCH_AMX_PEAK_H
#define DI_BENCH_AMX_PEAK_H

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int amx_peak_available(void) {
    unsigned a, b, c, d, lo, hi;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1)) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000u) != 0x60000u) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

__attribute__((target("amx-tile,amx-int8"))) static int64_t amx_peak_run(int64_t iters, int k) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) { /* tiles 0-3: C */
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    cfg.rows[4] = cfg.rows[5] = 16; /* A */
    cfg.colsb[4] = cfg.colsb[5] = (uint16_t)k;
    cfg.rows[6] = cfg.rows[7] = (uint8_t)(k / 4); /* B */
    cfg.colsb[6] = cfg.colsb[7] = 64;
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* _tile_loadconfig names 8 bytes only */
    _tile_loadconfig(&cfg);
    static int8_t ab[16 * 64];
    static int32_t out[16 * 16];
    for (int i = 0; i < 16 * 64; i++) ab[i] = (int8_t)(i % 7 - 3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t i = 0; i < iters; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}
#else
static int amx_peak_available(void) { return 0; }
static int64_t amx_peak_run(int64_t iters, int k) {
    (void)iters;
    (void)k;
    return 0;
}
#endif

#endif
