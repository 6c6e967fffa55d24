/* The int8-activation gemm for AVX-512 VNNI (vpdpbusd on 256-bit vectors,
 * AVX512VL): one instruction per u8 x s8 block dot instead of two, and 32
 * vector registers allow a 4 rows x 4 outputs tile (16 accumulators). The
 * lane grouping (4 consecutive bytes per int32) equals the AVX2 one, and
 * integer sums are exact, so this table computes the same bits as the AVX2
 * one for equal tiles of float work. Entered only after cpuid reports
 * AVX512F/BW/VL/VNNI and the OS saves ZMM state. */
#if defined(__x86_64__) || defined(__i386__)

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ISA avx512
#define GEMM_NR 4
#define GEMM_NC 4
#define DOT8(u, q) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (q))

#include "kernels/cpu/gemm_q8_simd.h"

#endif
