/* The int8-activation gemm for AVX2: integer dots by maddubs + madd (u8 x s8
 * pairs summed to int16 -- at most 2 * 128 * 127 < 2^15, no saturation --
 * then pairs of those to int32). Register tile 4 rows x 2 outputs: 8
 * accumulators + 2 weight vectors (+2 |w| for Q8_0) + 1 activation vector
 * fit the 16 ymm registers. Entered only after cpuid says AVX2+FMA+F16C. */
#if defined(__x86_64__) || defined(__i386__)

#define TGT __attribute__((target("avx2,fma,f16c")))
#define ISA avx2
#define GEMM_NR 4
#define GEMM_NC 2
#define DOT8(u, q) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (q)), _mm256_set1_epi16(1))

#include "kernels/cpu/gemm_q8_simd.h"

#endif
