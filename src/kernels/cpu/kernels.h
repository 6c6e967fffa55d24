/* CPU kernels for the model forwards: matmul over every weight dtype,
 * RMSNorm, RoPE, SwiGLU, softmax and attention over the paged KV cache.
 *
 * Contract (DESIGN.md section 3):
 *  - Batch-invariant: a row's result depends only on that row's inputs, never
 *    on the batch size, which other rows are present, or the thread count.
 *    Work is split over output rows only, and every (output, row) pair is
 *    computed by one fixed sequence of float operations.
 *  - Reference beside optimized: di_matmul_ref is the plain C oracle (trait
 *    to_float + double accumulation); the dispatch tables below are the fast
 *    paths, chosen once from cpuid (di_cpu_kernels_best) and compared with
 *    the reference by tests/kernels on random data.
 *
 * Tables, one file per ISA: "c" (dot_c.c, gemm_q8_c.c), "avx2"
 * (dot_avx2.c, gemm_q8_avx2.c) and "avx512" (gemm_f32_avx512.c,
 * gemm_q8_avx512.c; needs AVX-512 F/BW/VL + VNNI). Each comes in two
 * numerics:
 *  - exact: f32 activations; weights dequantized in registers (few rows)
 *    or into an L1 tile (many rows), then f32 FMA. Logits stay within ~1e-4
 *    of transformers on SmolLM2. The default for f16/f32/bf16 weights and
 *    a flag away for the rest (engine param "kernels" = "exact").
 *  - "-q8": activations quantized to int8 per row and block of 32 (as
 *    llama.cpp's Q8_0/Q8_1), integer dots (maddubs, vpdpbusd or AMX tiles).
 *    Cheaper per byte of activation; its rounding noise compounds through
 *    the layers (max logit error ~1 on SmolLM2-135M; tests/model/
 *    test_llama.c), as llama.cpp's does. The default for quantized GGUF
 *    models (model.c, default_gguf_kernels).
 * A third, opt-in numerics reproduces llama.cpp's CPU backend instead of
 * exact math: the "ggml" table (di_cpu_kernels_ggml, engine param "kernels"
 * = "ggml") is the best exact table with a di_ggml_kernels attached
 * (ggml_compat.h): Q4_0/Q4_1/Q8_0 matmuls quantize activations to ggml's
 * Q8_0/Q8_1 blocks (f16 scales) and accumulate in ggml's lane order, and
 * the model forwards switch RMSNorm, RoPE, SiLU and attention to ggml's
 * formulas (f16 Q/K/V and probabilities). Its teacher-forced argmaxes equal
 * llama.cpp's at every position of tests/cli/perplexity.sh's text.
 * "avx512-amx" (CPUs with AMX-INT8 whose OS grants the tile state) is the
 * avx512 table whose int8 twin "avx512-amx-q8" runs its gemms on AMX tiles
 * (gemm_q8_amx.c): per-block integer sums scaled in a fixed block order,
 * batch-invariant, within the same error bound but not bit-identical to
 * avx512-q8; batches too small to fill a tile (decode) run the same
 * numerics on AVX-512 VNNI (gemm_q8_amx_few.c).
 *
 * Matrix convention: W is (n_out, n_in) row-major with rows of
 * di_dtype_row_bytes(dtype, n_in) bytes (ggml order: ne[0] = n_in). */
#ifndef DI_KERNELS_CPU_KERNELS_H
#define DI_KERNELS_CPU_KERNELS_H

#include "base/status.h"
#include "base/threadpool.h"
#include "tensor/dtype.h"

#include <stdint.h>

/* ---- dispatch table ---------------------------------------------------- */

/* w: one weight row (n elements of the row's dtype) -> dst (n) floats. */
typedef void (*di_row_dequant_fn)(const void *w, float *dst, int64_t n);
/* w: one weight row, x (n) -> dot. MUST equal dot_f32(dequant(w), x, n) bit
 * for bit: the matmul uses the fused form for few rows and the dequantized
 * form for many, and batch invariance needs both to agree. */
typedef float (*di_row_dot_fn)(const void *w, const float *x, int64_t n);

/* ---- int8 activation path ------------------------------------------------
 * Activations quantized per row in blocks of DI_Q8_ACT_BLOCK: for block b of
 * row r, x ~= d[b] * q[32b .. 32b+31] with d = amax / 127 and q rounded to
 * nearest-even (so every table quantizes to the same bits), and
 * s[b] = d[b] * sum(q) folds offsets (Q4_0's -8, Q4_1/Q4_K minimums) into
 * one float per block. A row's quantization depends on that row only, so the
 * integer path is as batch-invariant as the float one. */
#define DI_Q8_ACT_BLOCK 32

typedef struct di_q8_rows {
    const int8_t *q; /* (n_rows, ldq) */
    const float *d;  /* (n_rows, ldb) block scales */
    const float *s;  /* (n_rows, ldb) d * sum(q) per block */
    int64_t ldq, ldb;
    /* Optional, for tables with pack_q8 (NULL: the gemm packs by itself):
     * the same rows packed once per call, shared by every task. */
    const int8_t *tiles; /* (ceil(n_rows/16), n_in/32, 512 bytes) */
    const float *td, *ts; /* (ceil(n_rows/16), n_in/32, 16) d and s */
} di_q8_rows;

/* Bytes of a di_q8_rows packing of n_rows rows (tiles, td and ts). */
static inline int64_t di_q8_pack_bytes(int64_t n_rows, int64_t n_in) {
    int64_t rows16 = (n_rows + 15) / 16 * 16;
    return rows16 * n_in + 2 * rows16 * (n_in / DI_Q8_ACT_BLOCK) * (int64_t)sizeof(float);
}

/* x (n), n a multiple of 32 -> q (n), d (n/32), s (n/32). */
typedef void (*di_quantize_q8_fn)(const float *x, int8_t *q, float *d, float *s, int64_t n);
/* Row tiles [t0, t1) of x's n_rows rows (16 rows each, rows past n_rows
 * are 0) -> tiles, td, ts laid out as di_q8_rows' packing. A table may
 * leave them unwritten for batches its gemm runs without them (the AMX
 * table below DI_GEMM_Q8_AMX_FEW_ROWS rows, gemm_q8.h). */
typedef void (*di_pack_q8_fn)(const di_q8_rows *x, int64_t n_rows, int64_t n_in, int64_t t0, int64_t t1,
                              int8_t *tiles, float *td, float *ts);
/* Output rows [o0, o1) of W (rows of row_bytes) against every one of the
 * n_rows activation rows: y[r*ldy + o]. Each (r, o) is computed by the same
 * instruction sequence whatever n_rows, o0 and o1 are (register tiles of
 * several outputs x several rows only share loads). scratch holds
 * di_gemm_q8_scratch_floats(n_in) floats. */
typedef void (*di_gemm_q8_fn)(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                              const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                              float *scratch);
/* The same over a matrix packed by di_x16_pack (pack_x16.h) from the rows
 * w: output rows [o0, o1) with o0 a multiple of 16; per-pair contract as
 * above. A table may read the rows too (the AMX one, for batches big
 * enough for its tiles; di_cpu_kernels.x16_reads_rows). */
typedef void (*di_gemm_q8_x16_fn)(const void *w, uint64_t row_bytes, const void *packed, int64_t o0, int64_t o1,
                                  const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                  float *scratch);
typedef void (*di_gemm_f32_fn)(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1, const float *x,
                               int64_t ldx, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                               float *scratch);
/* Floats of gemm scratch: per-block weight scales (up to 8 copies each,
 * for vector loads) and offsets of a tile of up to DI_GEMM_Q8_MAX_TILE
 * outputs, or the AMX gemm's packed activations (up to
 * DI_GEMM_Q8_AMX_ROWS rows: n_in bytes and 2 floats per block each) plus
 * one group of 16 weight rows in tile layout (512 bytes per block) and
 * their 16 scales and offsets per block, 64-byte aligned. */
#define DI_GEMM_Q8_MAX_TILE 8
#define DI_GEMM_Q8_AMX_ROWS 128 /* activation rows packed at once: 8 row tiles per unpacked group */
static inline int64_t di_gemm_q8_scratch_floats(int64_t n_in) {
    int64_t nb = n_in / DI_Q8_ACT_BLOCK, vnni = 9 * DI_GEMM_Q8_MAX_TILE * nb + 16;
    int64_t amx = DI_GEMM_Q8_AMX_ROWS * (8 + 2) * nb + 160 * nb + 16;
    return vnni > amx ? vnni : amx;
}

/* Attention over one work unit of di_attention (rows r0..r0+n-1 of one
 * sequence, n <= DI_ATTN_ROW_CHUNK, and KV head kvh); scratch as for
 * di_attention (one thread's region). Returns 0, touching nothing, when it
 * does not handle the shape (a property of head_dim/block_size only, so a
 * row never switches paths with the batch); attention.c then runs its
 * portable reference. */
struct di_attn_args;
typedef int (*di_attn_run_fn)(const struct di_attn_args *a, int32_t r0, int32_t n, int32_t kvh, float *scratch);

/* Fused forms of fp8_row / mxfp4_row followed by dot_f32 with x
 * (dot_fp8_fused.c): each MUST equal dot_f32(dequantized row, x, n) of its
 * table bit for bit. */
typedef struct di_fused_fp8_kernels {
    float (*fp8_dot)(const uint8_t *w, const float *scale, int32_t block, const float *x, int64_t n);
    float (*mxfp4_dot)(const uint8_t *w, const uint8_t *e8m0, const float *x, int64_t n);
    /* optional: four rows at once (rows row_bytes apart, their scale rows
     * sstride elements apart); out[j] equals the single-row form bit for bit */
    void (*fp8_dot4)(const uint8_t *w, uint64_t row_bytes, const float *scale, int64_t sstride, int32_t block,
                     const float *x, int64_t n, float out[4]);
    void (*mxfp4_dot4)(const uint8_t *w, uint64_t row_bytes, const uint8_t *e8m0, int64_t sstride, const float *x,
                       int64_t n, float out[4]);
} di_fused_fp8_kernels;

typedef struct di_cpu_kernels {
    const char *name; /* "c", "avx2" */
    /* a (n), b (n) -> sum a[i]*b[i] in this table's fixed order */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    /* w (4 rows, stride ldw floats), x (n) -> out[4]; out[j] equals
     * dot_f32(w + j*ldw, x, n) bit for bit (4 rows share the loads of x). */
    void (*dot_f32_x4)(const float *w, int64_t ldw, const float *x, int64_t n, float out[4]);
    /* Per weight dtype; NULL entries fall back to the dtype trait's to_float
     * followed by dot_f32 (then dot == dot_f32(dequant) trivially). */
    di_row_dequant_fn dequant[DI_DTYPE_COUNT];
    di_row_dot_fn dot[DI_DTYPE_COUNT];
    /* DeepSeek block-scaled FP8 row: dst[i] = e4m3(w[i]) * scale[i / block]
     * for n elements (scale: this row's line of the block-scale grid; the
     * last block may be partial). Both factors convert exactly and the
     * product is one f32 multiply, so every table gives the same bits as
     * di_e4m3_to_f32(w[i]) * scale[i / block]. */
    void (*fp8_row)(const uint8_t *w, const float *scale, int32_t block, float *dst, int64_t n);
    /* MXFP4 row in the HF split layout: byte j holds element 2j (low
     * nibble) and 2j+1 (high nibble), e2m1 codes; element i is scaled by
     * 2^(e8m0[i / 32] - 127). n a multiple of 32; no scale byte is 255 (the
     * loader rejects NaN scales). Exact, so every table agrees bit for bit
     * (including -0 for the negative zero code). */
    void (*mxfp4_row)(const uint8_t *w, const uint8_t *e8m0, float *dst, int64_t n);
    /* fused row dots for the few-rows (decode) path; NULL: dequantize then dot */
    const di_fused_fp8_kernels *fused_fp8;
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    /* Whole-tile f32 gemm per dtype (NULL: matmul.c's generic dequant +
     * dot_f32 shapes). Same per-pair contract as di_gemm_q8_fn, with f32
     * activations x (n_rows, ldx). */
    di_gemm_f32_fn gemm_f32[DI_DTYPE_COUNT];
    /* int8 activation path: when quantize_q8 is set and gemm_q8[dtype]
     * exists, di_matmul quantizes activations per row and multiplies in
     * integers (error vs the f32 path: at most sum |w| * d/2 per block,
     * tested). Only the "-q8" tables have it: faster, with rounding noise
     * that compounds through a model's layers (tests/model/test_llama.c);
     * quantized GGUF models use it by default (model.c). */
    di_quantize_q8_fn quantize_q8;
    di_gemm_q8_fn gemm_q8[DI_DTYPE_COUNT];
    /* optional, per dtype: the int8 gemm over x16-packed weights
     * (pack_x16.h), taken when a matmul's packed is set; a table that has
     * it gives different bits from its gemm_q8 for the same weights, so a
     * weight is either always packed for the table or never (the loader
     * packs at load, backend_cpu.c) */
    di_gemm_q8_x16_fn gemm_q8_x16[DI_DTYPE_COUNT];
    /* 1 when gemm_q8_x16 may read the rows w as well as the packed copy
     * (for the dtypes that also have a gemm_q8: the AMX tiles) */
    int x16_reads_rows;
    /* optional: packs the quantized rows once per call for gemm_q8 */
    di_pack_q8_fn pack_q8;
    /* the exact and the int8 twin of this table (either may be itself) */
    const struct di_cpu_kernels *exact, *q8;
    /* Non-NULL only in the "ggml" table: llama.cpp CPU numerics
     * (ggml_compat.h). di_matmul then quantizes activations as ggml does for
     * Q4_0/Q4_1/Q8_0 weights, and the model forwards switch RMSNorm, RoPE,
     * SiLU and attention to the di_ggml_* versions. */
    const struct di_ggml_kernels *ggml;
    /* di_attention's unit (NULL: attention.c's portable reference);
     * attention_avx512.c in the AVX-512 tables */
    di_attn_run_fn attn_run;
} di_cpu_kernels;

typedef enum di_cpu_isa {
    DI_CPU_ISA_C = 0, /* portable C, always available */
    DI_CPU_ISA_AVX2,  /* AVX2 + FMA + F16C */
    DI_CPU_ISA_AVX512_VNNI, /* + AVX-512 F/BW/VL + VNNI */
    DI_CPU_ISA_AVX512_AMX,  /* + AMX-TILE/INT8 and the OS tile state */
    DI_CPU_ISA_COUNT
} di_cpu_isa;

/* The table for isa, or NULL when this CPU (or build) cannot run it. */
const di_cpu_kernels *di_cpu_kernels_get(di_cpu_isa isa);
/* The fastest exact (f32 activation) table this CPU runs. Never NULL. */
const di_cpu_kernels *di_cpu_kernels_best(void);
/* Its int8 activation twin (di_cpu_kernels_best()->q8). */
const di_cpu_kernels *di_cpu_kernels_best_q8(void);
/* The fastest exact table with llama.cpp's CPU numerics switched on (name
 * "ggml"; ggml_compat.h). Never NULL. */
const di_cpu_kernels *di_cpu_kernels_ggml(void);
/* The table called name ("avx512", "avx2-q8", ...) if this CPU runs it,
 * "exact" for di_cpu_kernels_best(), "q8" for di_cpu_kernels_best_q8(),
 * "ggml" for di_cpu_kernels_ggml(), else
 * NULL. */
const di_cpu_kernels *di_cpu_kernels_by_name(const char *name);

/* True when matmul supports dtype: the table or the dtype trait can
 * dequantize it. */
int di_cpu_kernels_supports(const di_cpu_kernels *k, di_dtype dtype);

/* ---- matmul ------------------------------------------------------------ */

/* Scratch floats di_matmul needs in all for n_rows rows of n_in inputs on
 * n_threads threads: the rows' quantized activations (shared) followed by
 * one region per thread. */
int64_t di_matmul_scratch_floats(int64_t n_rows, int64_t n_in, int n_threads);

typedef struct di_matmul_args {
    di_dtype dtype;
    const void *w;      /* (n_out, n_in) rows of row_bytes */
    uint64_t row_bytes;
    const float *x;     /* (n_rows, ldx) */
    int64_t ldx;
    float *y;           /* (n_rows, ldy) */
    int64_t ldy;
    int64_t n_rows, n_in, n_out;
    /* optional: w packed by di_x16_pack, read instead of w by a table with
     * gemm_q8_x16[dtype] (the others read w) */
    const void *packed;
} di_matmul_args;

/* y[r][o] = sum_i W[o][i] * x[r][i]. Tasks are contiguous ranges of output
 * rows (di_threadpool_split_aligned); scratch holds
 * di_matmul_scratch_floats(n_rows, n_in, n_threads of pool) floats.
 * pool NULL runs inline. The dtype must be supported. */
void di_matmul(const di_cpu_kernels *k, const di_matmul_args *a, float *scratch,
               di_threadpool *pool);

/* Several matmuls over the same activation rows in ONE dispatch (a layer's
 * Q, K and V projections; its gate and up): every part shares x, ldx,
 * n_rows and n_in with parts[0] and has its own weights, dtype and output.
 * The parts' output rows are split over the tasks as one concatenated
 * range, and the int8 path quantizes the rows once for all parts. Each
 * (row, output) gets the same bits as di_matmul of its part alone. scratch
 * as for di_matmul. */
#define DI_MATMUL_MAX_PARTS 4
void di_matmul_multi(const di_cpu_kernels *k, const di_matmul_args *parts, int n_parts, float *scratch,
                     di_threadpool *pool);

/* The oracle: trait to_float per row chunk, double accumulation, one thread.
 * F32 and F16 are read directly. DI_ERR_UNSUPPORTED when dtype has no
 * to_float. */
di_status di_matmul_ref(const di_matmul_args *a, di_error *err);

/* ---- elementwise and per-row ops (plain C, fixed order) ------------------ */

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; x, out (n_rows, n), w (n).
 * out may alias x. */
void di_rmsnorm(const float *x, const float *w, float *out, int64_t n_rows, int64_t n, float eps);

/* Rotary position embedding in place on x (n_rows, n_heads * head_dim), the
 * first n_rot dims of every head. inv_freq (n_rot / 2): angle of pair i at
 * position p is p * inv_freq[i].
 *   neox = 0: pairs (2i, 2i+1)            (llama GGUFs: q/k rows permuted)
 *   neox = 1: pairs (i, i + n_rot/2)      (HF rotate_half, qwen2 GGUFs) */
void di_rope(float *x, const int32_t *pos, int64_t n_rows, int32_t n_heads, int32_t head_dim,
             int32_t n_rot, const float *inv_freq, int neox);

/* di_rope in two halves, so a caller that rotates many vectors at one
 * position (every layer's q and k of a row) computes the angles once:
 * di_rope_angles fills cs (n_rot) with cos then sin of the n_rot / 2
 * angles at pos; di_rope_apply rotates x (n_heads * head_dim) with them.
 * Together they give di_rope's bits. */
void di_rope_angles(int32_t pos, int32_t n_rot, const float *inv_freq, float *cs);
void di_rope_apply(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot, const float *cs, int neox);

/* DeepSeek V4's RMSNorm: out = x / sqrt(mean(x^2) + eps) (* w when w is
 * set), the squares summed in double (as the reference's float64 mean),
 * n elements; out may be x. */
void di_rmsnorm_f64(const float *x, const float *w, float *out, int64_t n, float eps);

/* DeepSeek V4's rotary on the tail of each head: x (n_heads * dim), the
 * last n_rot values of every head in adjacent pairs, rotated by
 * (float)pos * inv_freq[i] (cosf / sinf in f32, as the reference), sign -1
 * giving the inverse rotation. n_rot <= 512. */
void di_rope_tail(float *x, int32_t n_heads, int32_t dim, int32_t n_rot, const float *inv_freq, int32_t pos,
                  float sign);

/* gate[i] = silu(gate[i]) * up[i]; gate, up (n). */
void di_swiglu(float *gate, const float *up, int64_t n);
/* In place gate[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU; the tanh
 * approximation PyTorch calls gelu(approximate="tanh")), elementwise. */
void di_geglu(float *gate, const float *up, int64_t n);

/* In place softmax over x (n). */
void di_softmax(float *x, int64_t n);

/* ---- attention over the paged KV cache ----------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
/* attention_avx512.c: handles head_dim a multiple of 16 and block_size up
 * to 256 */
int di_attn_run_avx512(const struct di_attn_args *a, int32_t r0, int32_t n, int32_t kvh, float *scratch);
#endif

typedef struct di_attn_args {
    /* queries after RoPE: (n_rows, n_heads * head_dim) */
    const float *q;
    int32_t n_rows, n_heads, n_kv_heads, head_dim;
    float scale;                 /* usually 1/sqrt(head_dim) */
    /* cache of one layer: (n_blocks, block_size, n_kv_heads, head_dim),
     * f32 or f16 (kv_f16) */
    const void *k_cache, *v_cache;
    int kv_f16;
    int32_t block_size;
    /* per row: the sequence's block table and the last position to attend */
    const int32_t *const *row_blocks; /* (n_rows) -> block ids of that row's sequence */
    const int32_t *pos;          /* (n_rows) attends over positions 0..pos[r] */
    float *out;                  /* (n_rows, n_heads * head_dim) */
    /* sliding window (Gemma 3 local layers): 0 = all of 0..pos[r], else
     * only pos[r] - window + 1 .. pos[r] (window keys, the row's own included) */
    int32_t window;
} di_attn_args;

/* First position row r attends to under a's window. */
static inline int32_t di_attn_first_pos(const di_attn_args *a, int32_t r) {
    return a->window > 0 && a->pos[r] >= a->window ? a->pos[r] - a->window + 1 : 0;
}

/* In place x[i] = e^x[i] for x[i] <= 0 (softmax after the max is
 * subtracted): polynomial, elementwise, relative error under 2^-22 vs exp,
 * 0 below -87 (see attention.c). */
void di_exp_nonpos(float *x, int64_t n);

#define DI_ATTN_ROW_CHUNK 16 /* rows per work unit: they share each K/V widening (AVX-512: +10% over 8) */

/* Keys per online-softmax step of attention_avx512.c: whole KV blocks, at
 * least 64 keys (so the per-step max, exp of the correction and sums are
 * spread over 64 keys), a function of block_size only. */
static inline int32_t di_attention_step_keys(int32_t block_size) {
    return block_size >= 64 ? block_size : (64 + block_size - 1) / block_size * block_size;
}

/* Scratch floats per pool thread for di_attention (either path). */
int64_t di_attention_scratch_floats(int32_t n_heads, int32_t head_dim, int32_t block_size);

/* Causal attention with an online softmax over KV blocks, GQA (query head h
 * reads KV head h / (n_heads / n_kv_heads)). Work units are (up to
 * DI_ATTN_ROW_CHUNK consecutive rows, KV head): the heads of a group and
 * the rows of one sequence share one read (and f16 widening) of K/V; every
 * (row, head) accumulates over positions 0..pos[r] in order, one block (the
 * AVX-512 path: one step of di_attention_step_keys) at a time, so the
 * result depends on that row, the cache contents, block_size and the table
 * only. A table's attn_run (AVX-512: attention_avx512.c) replaces the
 * portable per-unit code of attention.c where it takes the shape.
 * The caller has validated every block id. scratch: (n_threads,
 * di_attention_scratch_floats) floats. */
void di_attention(const di_cpu_kernels *k, const di_attn_args *a, float *scratch,
                  di_threadpool *pool);

#endif
