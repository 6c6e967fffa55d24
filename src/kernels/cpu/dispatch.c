/* Picks a dispatch table from cpuid. The tables are const data; choosing
 * one has no side effects, so there is no global "current ISA" state. */
#include "kernels/cpu/gemm_q8.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ggml_compat.h"

#include <pthread.h>
#include <string.h>

extern const di_cpu_kernels di_cpu_kernels_c;
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
extern const di_cpu_kernels di_cpu_kernels_avx2;
extern const di_cpu_kernels di_cpu_kernels_avx512;
extern const di_cpu_kernels di_cpu_kernels_avx512_amx;

/* AVX2 + FMA + F16C, and the OS saves YMM state (XCR0 bits 1-2). */
static int cpu_has_avx2_fma_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!(fma && osxsave && f16c && avx)) return 0;
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 6u) != 6u) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 5) & 1;
}

/* AVX-512 F, BW, VL and VNNI, and the OS saves opmask and ZMM state (XCR0
 * bits 5-7) besides YMM. */
static int cpu_has_avx512_vnni(void) {
    if (!cpu_has_avx2_fma_f16c()) return 0;
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    int f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    if (!(f && bw && vl && vnni)) return 0;
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    return (xcr0_lo & 0xE6u) == 0xE6u;
}

/* AMX-TILE and AMX-INT8, XCR0 bits 17-18 (tile config and data), and Linux
 * granted this process the tile data state (needed before the first tile
 * instruction; without it that instruction faults). Checked once: the
 * grant is per process and idempotent. */
static int cpu_has_amx_int8_uncached(void) {
    if (!cpu_has_avx512_vnni()) return 0;
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return 0;
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 0x60000u) != 0x60000u) return 0;
    return di_amx_request_permission();
}

static int cpu_has_amx_int8(void) {
    static int cached = -1; /* -1 unknown; racing first calls compute the same answer */
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v < 0) {
        v = cpu_has_amx_int8_uncached();
        __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    }
    return v;
}
#endif

const di_cpu_kernels *di_cpu_kernels_get(di_cpu_isa isa) {
    switch (isa) {
    case DI_CPU_ISA_C:
        return &di_cpu_kernels_c;
    case DI_CPU_ISA_AVX2:
#if defined(__x86_64__) || defined(__i386__)
        if (cpu_has_avx2_fma_f16c()) return &di_cpu_kernels_avx2;
#endif
        return NULL;
    case DI_CPU_ISA_AVX512_VNNI:
#if defined(__x86_64__) || defined(__i386__)
        if (cpu_has_avx512_vnni()) return &di_cpu_kernels_avx512;
#endif
        return NULL;
    case DI_CPU_ISA_AVX512_AMX:
#if defined(__x86_64__)
        if (cpu_has_amx_int8()) return &di_cpu_kernels_avx512_amx;
#endif
        return NULL;
    case DI_CPU_ISA_COUNT:
        break;
    }
    return NULL;
}

const di_cpu_kernels *di_cpu_kernels_best(void) {
    for (int isa = DI_CPU_ISA_COUNT - 1; isa > DI_CPU_ISA_C; isa--) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (k) return k;
    }
    return &di_cpu_kernels_c;
}

const di_cpu_kernels *di_cpu_kernels_best_q8(void) { return di_cpu_kernels_best()->q8; }

/* The ggml table is the best exact table with the ggml numerics on: built
 * once (its function pointers depend on cpuid), constant afterwards. */
static di_cpu_kernels ggml_table;
static pthread_once_t ggml_once = PTHREAD_ONCE_INIT;

static void ggml_table_init(void) {
    const di_cpu_kernels *best = di_cpu_kernels_best();
    ggml_table = *best;
    ggml_table.name = "ggml";
    ggml_table.quantize_q8 = NULL; /* the ggml quantizer replaces the int8 path */
    memset(ggml_table.gemm_q8, 0, sizeof ggml_table.gemm_q8);
    ggml_table.exact = best;
    ggml_table.q8 = best->q8;
    const di_ggml_kernels *g = best != &di_cpu_kernels_c ? di_ggml_kernels_avx2() : NULL;
    ggml_table.ggml = g ? g : &di_ggml_kernels_c;
}

const di_cpu_kernels *di_cpu_kernels_ggml(void) {
    pthread_once(&ggml_once, ggml_table_init);
    return &ggml_table;
}

const di_cpu_kernels *di_cpu_kernels_by_name(const char *name) {
    if (!name) return NULL;
    if (!strcmp(name, "exact")) return di_cpu_kernels_best();
    if (!strcmp(name, "q8")) return di_cpu_kernels_best_q8();
    if (!strcmp(name, "ggml")) return di_cpu_kernels_ggml();
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (k && !strcmp(k->name, name)) return k;
        if (k && !strcmp(k->q8->name, name)) return k->q8;
    }
    return NULL;
}

int di_cpu_kernels_supports(const di_cpu_kernels *k, di_dtype dtype) {
    const di_dtype_traits *tr = di_dtype_traits_of(dtype);
    if (!tr) return 0;
    return k->dequant[dtype] != NULL || tr->to_float != NULL;
}
