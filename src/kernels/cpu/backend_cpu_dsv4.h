/* The CPU backend's DeepSeek V4 / V4.1 stages (backend_cpu_dsv4.c), for
 * the CPU table in backend_cpu.c. Not a public header. */
#ifndef DI_KERNELS_CPU_BACKEND_CPU_DSV4_H
#define DI_KERNELS_CPU_BACKEND_CPU_DSV4_H

#include "kernels/backend.h"

int64_t di_cpu_scaled_linear_scratch(const di_backend *be, int64_t n_rows, int64_t n_in, int64_t n_tasks,
                                     int n_threads);
void di_cpu_scaled_linear(const di_backend *be, const di_scaled_weight *w, const float *x, int64_t ldx, float *y,
                          int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool);
void di_cpu_scaled_rows(const di_backend *be, const di_scaled_weight *w, const int32_t *ids, int64_t n, float *dst,
                        int64_t ldd);
void di_cpu_scaled_dot_rows(const di_backend *be, const di_scaled_weight *w, const float *x, float *y,
                            float *scratch);
int64_t di_cpu_sparse_attention_scratch(const di_backend *be, int64_t max_idx);
void di_cpu_sparse_attention(const di_backend *be, const di_sparse_attn_args *a, float *scratch, di_threadpool *pool);
void di_cpu_index_scores(const di_backend *be, const di_index_score_args *a, di_threadpool *pool);
void di_cpu_mhc_pre(const di_backend *be, const di_mhc_pre_args *a, di_threadpool *pool);
void di_cpu_mhc_post(const di_backend *be, const float *X, const float *y, const float *post, const float *comb,
                     int32_t N, int32_t D, int64_t n_rows, int round_bf16, float *Xn, di_threadpool *pool);
void di_cpu_mhc_head(const di_backend *be, const float *X, const float *mix, const float *base, float scale, float eps,
                     int32_t N, int32_t D, int64_t n_rows, float *h, di_threadpool *pool);
void di_cpu_rms_norm(const di_backend *be, const float *x, const float *w, float *out, int64_t n_rows, int64_t n,
                     float eps, int round_bf16, di_threadpool *pool);
void di_cpu_rope_rows(const di_backend *be, float *x, int64_t n_rows, int32_t n_heads, int32_t dim, int32_t n_rot,
                      const float *inv_freq, const int32_t *pos, float sign, int round_bf16, di_threadpool *pool);
void di_cpu_clamped_glu(const di_backend *be, float *gate, float *up, int64_t n_rows, int64_t n, float limit,
                        int round_bf16, const float *row_w, di_threadpool *pool);
void di_cpu_compress_pool(const di_backend *be, const di_compress_pool_args *a, di_threadpool *pool);
void di_cpu_ds_route(const di_backend *be, const di_route_args *a, di_threadpool *pool);
void di_cpu_moe_sum(const di_backend *be, int64_t n_rows, int32_t K, int32_t D, const float *ysel, const float *selw,
                    const int32_t *plen, const float *partial, const float *shared, float *y, di_threadpool *pool);
void di_cpu_round_rows(const di_backend *be, di_round_kind kind, float *x, int64_t n_rows, int64_t ldx, int64_t n,
                       di_threadpool *pool);

#endif
