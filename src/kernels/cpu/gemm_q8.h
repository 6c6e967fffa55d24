/* Internal to kernels/cpu: the int8-activation gemm entry points of each
 * table (gemm_q8_c.c, gemm_q8_avx2.c, gemm_q8_avx512.c). */
#ifndef DI_KERNELS_CPU_GEMM_Q8_H
#define DI_KERNELS_CPU_GEMM_Q8_H

#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant_blocks.h"

#define DI_GEMM_Q8_DECL(isa)                                                                      \
    void di_quantize_q8_##isa(const float *x, int8_t *q, float *d, float *s, int64_t n);        \
    void di_gemm_q8_q4_0_##isa(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,         \
                               const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,       \
                               int64_t ldy, float *scratch);                                      \
    void di_gemm_q8_q4_1_##isa(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,         \
                               const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,       \
                               int64_t ldy, float *scratch);                                      \
    void di_gemm_q8_q5_0_##isa(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,         \
                               const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,       \
                               int64_t ldy, float *scratch);                                      \
    void di_gemm_q8_q8_0_##isa(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,         \
                               const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,       \
                               int64_t ldy, float *scratch);                                      \
    void di_gemm_q8_q4_K_##isa(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,         \
                               const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,       \
                               int64_t ldy, float *scratch);

#define DI_GEMM_F32_DECL(isa, name)                                                               \
    void di_gemm_f32_##name##_##isa(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,      \
                                    const float *x, int64_t ldx, int64_t n_rows, int64_t n_in,      \
                                    float *y, int64_t ldy, float *scratch);
DI_GEMM_F32_DECL(avx512, f32)
DI_GEMM_F32_DECL(avx512, f16)
DI_GEMM_F32_DECL(avx512, bf16)
DI_GEMM_F32_DECL(avx512, q4_0)
DI_GEMM_F32_DECL(avx512, q4_1)
DI_GEMM_F32_DECL(avx512, q8_0)
DI_GEMM_F32_DECL(avx512, q4_K)
DI_GEMM_F32_DECL(avx512, q6_K)
DI_GEMM_F32_DECL(avx512, q5_0)

#define DI_GEMM_F32_ENTRIES(isa)                                                                  \
    .gemm_f32 = {                                                                                 \
        [DI_DTYPE_F32] = di_gemm_f32_f32_##isa,                                                   \
        [DI_DTYPE_F16] = di_gemm_f32_f16_##isa,                                                   \
        [DI_DTYPE_BF16] = di_gemm_f32_bf16_##isa,                                                 \
        [DI_DTYPE_Q4_0] = di_gemm_f32_q4_0_##isa,                                                 \
        [DI_DTYPE_Q4_1] = di_gemm_f32_q4_1_##isa,                                                 \
        [DI_DTYPE_Q8_0] = di_gemm_f32_q8_0_##isa,                                                 \
        [DI_DTYPE_Q4_K] = di_gemm_f32_q4_K_##isa,                                                 \
        [DI_DTYPE_Q6_K] = di_gemm_f32_q6_K_##isa,                                                 \
        [DI_DTYPE_Q5_0] = di_gemm_f32_q5_0_##isa,                                                 \
    }

DI_GEMM_Q8_DECL(c)
DI_GEMM_Q8_DECL(avx2)
DI_GEMM_Q8_DECL(avx512)
DI_GEMM_Q8_DECL(amx)

void di_pack_q8_amx(const di_q8_rows *x, int64_t n_rows, int64_t n_in, int64_t t0, int64_t t1, int8_t *tiles,
                    float *td, float *ts);

/* The AMX table's path for small batches (gemm_q8_amx_few.c): AVX-512
 * VNNI with the tiles' numerics, bit for bit. Taken below
 * DI_GEMM_Q8_AMX_FEW_ROWS rows (Q8_0: below DI_GEMM_Q8_AMX_FEW_ROWS_Q8_0,
 * whose tiles load straight from the weight rows and win sooner; bench
 * README), where one tile product would waste most of its 16 rows. One group of 16 outputs o .. o+nc-1 (nc <= 16) x rows 0 .. n_rows-1
 * -> y[i * ldy + j]; dw, mw (nb, 16) the group's block scales and offsets
 * (gemm_q8_amx.c's prep_scales), qsum (n_rows, nb) from
 * di_gemm_q8_amx_few_qsum (read by Q4_0 and Q8_0). */
#define DI_GEMM_Q8_AMX_FEW_ROWS 11
#define DI_GEMM_Q8_AMX_FEW_ROWS_Q8_0 5
#define DI_GEMM_Q8_AMX_FEW_DECL(name)                                                                  \
    void di_gemm_q8_amx_few_##name(const void *w, uint64_t row_bytes, int64_t o, int nc, const float *dw, \
                                   const float *mw, const di_q8_rows *x, const int32_t *qsum, int n_rows, \
                                   int64_t nb, float *y, int64_t ldy);
DI_GEMM_Q8_AMX_FEW_DECL(q4_0)
DI_GEMM_Q8_AMX_FEW_DECL(q4_1)
DI_GEMM_Q8_AMX_FEW_DECL(q5_0)
DI_GEMM_Q8_AMX_FEW_DECL(q8_0)
DI_GEMM_Q8_AMX_FEW_DECL(q4_K)
void di_gemm_q8_amx_few_qsum(const di_q8_rows *x, int64_t n_rows, int64_t nb, int32_t *qsum);

/* Asks Linux for the AMX tile data state (gemm_q8_amx.c); 1 when granted. */
int di_amx_request_permission(void);

/* The gemm_q8 entries of a table for isa, as designated initializers. */
#define DI_GEMM_Q8_ENTRIES(isa)                                                                   \
    .quantize_q8 = di_quantize_q8_##isa,                                                          \
    .gemm_q8 = {                                                                                  \
        [DI_DTYPE_Q4_0] = di_gemm_q8_q4_0_##isa,                                                  \
        [DI_DTYPE_Q4_1] = di_gemm_q8_q4_1_##isa,                                                  \
        [DI_DTYPE_Q5_0] = di_gemm_q8_q5_0_##isa,                                                  \
        [DI_DTYPE_Q8_0] = di_gemm_q8_q8_0_##isa,                                                  \
        [DI_DTYPE_Q4_K] = di_gemm_q8_q4_K_##isa,                                                  \
    }

/* The AVX-512 table also has Q6_K (gemm_q8_avx512.c: -32 folded into the
 * integer dot, one scale per 16 elements), and every int8 kind over x16-packed
 * weights (gemm_q8_x16_avx512.c). */
void di_gemm_q8_q6_K_avx512(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1, const di_q8_rows *x,
                            int64_t n_rows, int64_t n_in, float *y, int64_t ldy, float *scratch);
#define DI_GEMM_Q8_X16_DECL(name)                                                                      \
    void di_gemm_q8_x16_##name##_avx512(const void *w, uint64_t row_bytes, const void *packed, int64_t o0,  \
                                        int64_t o1, const di_q8_rows *x, int64_t n_rows, int64_t n_in,      \
                                        float *y, int64_t ldy, float *scratch);                             \
    void di_gemm_q8_x16_##name##_amx(const void *w, uint64_t row_bytes, const void *packed, int64_t o0,     \
                                     int64_t o1, const di_q8_rows *x, int64_t n_rows, int64_t n_in,         \
                                     float *y, int64_t ldy, float *scratch);
DI_GEMM_Q8_X16_DECL(q4_0)
DI_GEMM_Q8_X16_DECL(q4_1)
DI_GEMM_Q8_X16_DECL(q5_0)
DI_GEMM_Q8_X16_DECL(q8_0)
DI_GEMM_Q8_X16_DECL(q4_K)
void di_gemm_q8_x16_q6_K_avx512(const void *w, uint64_t row_bytes, const void *packed, int64_t o0, int64_t o1,
                                const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                float *scratch);

/* The AMX table's x16 entries (gemm_q8_amx_few.c): batches below its tile
 * limits on the packed copy with the tiles' numerics, bigger ones on the
 * tiles from the rows; the same bits either way. Q6_K, which has no tile
 * kernel, runs the AVX-512 table's x16 gemm at every batch size. */
#define DI_GEMM_Q8_X16_ENTRIES_AMX                                                                \
    .gemm_q8_x16 = {                                                                              \
        [DI_DTYPE_Q4_0] = di_gemm_q8_x16_q4_0_amx,                                                \
        [DI_DTYPE_Q4_1] = di_gemm_q8_x16_q4_1_amx,                                                \
        [DI_DTYPE_Q5_0] = di_gemm_q8_x16_q5_0_amx,                                                \
        [DI_DTYPE_Q8_0] = di_gemm_q8_x16_q8_0_amx,                                                \
        [DI_DTYPE_Q4_K] = di_gemm_q8_x16_q4_K_amx,                                                \
        [DI_DTYPE_Q6_K] = di_gemm_q8_x16_q6_K_avx512,                                             \
    },                                                                                            \
    .x16_reads_rows = 1
#define DI_GEMM_Q8_ENTRIES_AVX512                                                                 \
    .quantize_q8 = di_quantize_q8_avx512,                                                         \
    .gemm_q8_x16 = {                                                                              \
        [DI_DTYPE_Q4_0] = di_gemm_q8_x16_q4_0_avx512,                                             \
        [DI_DTYPE_Q4_1] = di_gemm_q8_x16_q4_1_avx512,                                             \
        [DI_DTYPE_Q5_0] = di_gemm_q8_x16_q5_0_avx512,                                             \
        [DI_DTYPE_Q8_0] = di_gemm_q8_x16_q8_0_avx512,                                             \
        [DI_DTYPE_Q4_K] = di_gemm_q8_x16_q4_K_avx512,                                             \
        [DI_DTYPE_Q6_K] = di_gemm_q8_x16_q6_K_avx512,                                             \
    },                                                                                            \
    .gemm_q8 = {                                                                                  \
        [DI_DTYPE_Q4_0] = di_gemm_q8_q4_0_avx512,                                                 \
        [DI_DTYPE_Q4_1] = di_gemm_q8_q4_1_avx512,                                                 \
        [DI_DTYPE_Q5_0] = di_gemm_q8_q5_0_avx512,                                                 \
        [DI_DTYPE_Q8_0] = di_gemm_q8_q8_0_avx512,                                                 \
        [DI_DTYPE_Q4_K] = di_gemm_q8_q4_K_avx512,                                                 \
        [DI_DTYPE_Q6_K] = di_gemm_q8_q6_K_avx512,                                                 \
    }

#endif
