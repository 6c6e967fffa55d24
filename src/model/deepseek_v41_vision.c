/* The V4.1 vision tower, projector and placeholder merge (see
 * deepseek_v41_vision.h for the shapes; DeepInfer 0.1.0 vision_encoder/vit.py,
 * mlp_projector.py, vl_aligner.py, tilelang_ops/image_embed_ops.py). Oracle:
 * scripts/gen_goldens_vision_tower.py runs DeepInfer's own modules on CPU. */
#include "model/deepseek_v41_vision.h"

#include "base/alloc.h"
#include "format/hf_config.h"
#include "model/deepseek_v41_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIT_EPS 1e-6f          /* vit.py NORM_EPS */
#define VIT_ROPE_THETA 10000.0 /* VisionRotaryEmbedding default */
#define VIT_MAX_GRID 4096      /* vit.py MAX_GRID_SIZE: the rotary table's side */
#define VIT_MAX_HEAD_DIM 256
#define NAME_LEN 160

typedef struct vit_block {
    const float *norm1, *norm2;      /* (E) */
    dsv4_linear wqkv, wo, w1, w2;    /* (3E, E) (E, E) (2F, E) (E, F) */
    const float *bqkv, *bo;          /* (3E) (E) */
} vit_block;

struct dsv41_vision {
    int32_t E, depth, heads, hd, F, D, image_token_id;
    di_image_cfg geo;
    dsv4_linear patch_w;             /* (E, 3*p*p) */
    const float *patch_b;            /* (E) */
    vit_block *blocks;               /* (depth) */
    const float *norm;               /* (E) fc_norm */
    dsv4_linear a1, a2;              /* (D, E*r*r) (D, D) */
    const float *a1b, *a2b;          /* (D) */
    const float *img_start, *img_end, *img_newline; /* (D) */
    float inv_freq[VIT_MAX_HEAD_DIM / 4];
};

int di_dsv41_has_vision(const di_dsv41_model *m) { return m->vision != NULL; }
const di_image_cfg *di_dsv41_image_cfg(const di_dsv41_model *m) { return m->vision ? &m->vision->geo : NULL; }
int32_t di_dsv41_image_token_id(const di_dsv41_model *m) { return m->vision ? m->vision->image_token_id : -1; }

void di_dsv41_image_rows_free(di_dsv41_image_rows *r) {
    if (!r) return;
    free(r->token);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

/* ---- load -------------------------------------------------------------------- */

static di_status read_geometry(const di_hf_config *root, const di_hf_config *v, struct dsv41_vision *vi,
                               di_error *err) {
    int64_t x;
    double f;
    di_status s;
#define INT(key, lo, hi, dst)                                                       \
    do {                                                                            \
        if ((s = di_hf_config_get_int(v, key, lo, hi, &x, err))) return s;          \
        dst = (int32_t)x;                                                           \
    } while (0)
#define INT_OR(key, lo, hi, def, dst)                                               \
    do {                                                                            \
        if ((s = di_hf_config_get_int_or(v, key, lo, hi, def, &x, err))) return s;  \
        dst = (int32_t)x;                                                           \
    } while (0)
    INT("patch_size", 1, 64, vi->geo.patch_size);
    INT("downsample_ratio", 1, 8, vi->geo.downsample_ratio);
    INT("max_image_tokens", 5, 1 << 20, vi->geo.max_tokens);
    INT("hidden_size", 8, 16384, vi->E);
    INT_OR("depth", 1, 256, 32, vi->depth);
    INT_OR("num_heads", 1, 256, 16, vi->heads);
    INT_OR("multiple_of", 1, 4096, 128, x);
    const int32_t mult = (int32_t)x;
    if ((s = di_hf_config_get_int(v, "min_pixels", 0, (int64_t)1 << 40, &x, err))) return s;
    vi->geo.min_pixels = x;
    vi->geo.max_wh_ratio = 0;
    if (di_hf_config_has(v, "max_wh_ratio")) {
        if (di_hf_config_get_float(v, "max_wh_ratio", 1.0, 1e6, &f, err) == DI_OK) vi->geo.max_wh_ratio = f;
        else di_error_clear(err); /* null: no limit (DeepInfer's None) */
    }
    if ((s = di_hf_config_get_float_or(v, "mlp_ratio", 0.01, 64.0, 2.7, &f, err))) return s;
    if ((s = di_hf_config_get_int(root, "image_token_id", 0, INT32_MAX, &x, err))) return s;
    vi->image_token_id = (int32_t)x;
#undef INT
#undef INT_OR
    vi->geo.mean = 0.5f; /* hugging_face/processor.py: the processor's constants, no HF key */
    vi->geo.std = 0.5f;
    if (vi->E % vi->heads)
        return di_error_set(err, DI_ERR_FORMAT, "vision_config: hidden_size %d not a multiple of num_heads %d", vi->E,
                            vi->heads);
    vi->hd = vi->E / vi->heads;
    if (vi->hd % 4 || vi->hd > VIT_MAX_HEAD_DIM)
        return di_error_set(err, DI_ERR_FORMAT, "vision_config: head dim %d (a multiple of 4, at most %d)", vi->hd,
                            VIT_MAX_HEAD_DIM);
    const int32_t hidden = (int32_t)(vi->E * f); /* SwiGLU(dim, int(dim * mlp_ratio), multiple_of) */
    vi->F = mult * ((hidden + mult - 1) / mult);
    return DI_OK;
}

static di_status bind_block(di_dsv4_model *B, struct dsv41_vision *vi, int32_t i, vit_block *b, di_error *err) {
    char n[NAME_LEN];
    di_status s;
    const int64_t E = vi->E;
#define VEC(suffix, len, dst)                                                        \
    do {                                                                             \
        snprintf(n, sizeof n, "vision.blocks.%d.%s", (int)i, suffix);                \
        if ((s = dsv4_bind_vec(B, n, len, dst, err))) return s;                      \
    } while (0)
#define LIN(suffix, o, in, dst)                                                      \
    do {                                                                             \
        snprintf(n, sizeof n, "vision.blocks.%d.%s", (int)i, suffix);                \
        if ((s = dsv4_bind_linear(B, n, o, in, 0, dst, err))) return s;              \
        if ((dst)->kind != DSV4_W_PLAIN)                                             \
            return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': the vision tower is bf16", n); \
    } while (0)
    VEC("norm1.weight", E, &b->norm1);
    VEC("norm2.weight", E, &b->norm2);
    LIN("attn.wqkv", 3 * E, E, &b->wqkv);
    VEC("attn.wqkv.bias", 3 * E, &b->bqkv);
    LIN("attn.wo", E, E, &b->wo);
    VEC("attn.wo.bias", E, &b->bo);
    LIN("mlp.w1", 2 * (int64_t)vi->F, E, &b->w1);
    LIN("mlp.w2", E, vi->F, &b->w2);
#undef VEC
#undef LIN
    return DI_OK;
}

di_status dsv41_vision_load(di_dsv41_model *m, const char *dir, di_error *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return di_error_set(err, DI_ERR_INVALID_ARG, "path too long");
    di_hf_config *root = NULL, *v = NULL;
    di_status s = di_hf_config_open(path, &root, err);
    if (s) return s;
    if (!di_hf_config_has(root, "vision_config") || !di_hf_config_has(root, "image_token_id")) {
        di_hf_config_close(root);
        return DI_OK; /* text only */
    }
    if ((s = di_hf_config_section(root, "vision_config", &v, err))) {
        di_hf_config_close(root);
        return s;
    }
    if (!di_hf_config_has(v, "patch_size") || !di_hf_config_has(v, "max_image_tokens")) {
        di_hf_config_close(v);
        di_hf_config_close(root);
        return DI_OK; /* a vision_config without the processor's geometry: no image input */
    }
    di_dsv4_model *B = &m->base;
    /* A folder whose tower was stripped (vision_config kept, no vision.* /
     * aligner.* tensors) is refused as DeepInfer 0.1.0 refuses it: its
     * HFModelParameters always builds the VisionTransformer and MlpProjector,
     * and model_loader.py:load_hf_checkpoint fails when the checkpoint does
     * not cover every model parameter. */
    if (!di_safetensors_checkpoint_find(B->ck, "vision.patch_embed.proj.weight") &&
        !di_safetensors_checkpoint_find(B->ck, "aligner.w1.weight")) {
        di_hf_config_close(v);
        di_hf_config_close(root);
        return di_error_set(err, DI_ERR_FORMAT,
                            "config.json has a vision_config and an image_token_id but the checkpoint holds no "
                            "vision tower (no vision.* / aligner.* tensors): DeepInfer 0.1.0 refuses it too (the "
                            "checkpoint must cover every parameter of the tower); add the tower's tensors, or "
                            "remove image_token_id for a text-only model");
    }
    struct dsv41_vision *vi = di_calloc(1, sizeof *vi);
    if ((s = dsv4_own(B, vi, err))) goto done;
    if ((s = read_geometry(root, v, vi, err))) goto done;
    vi->D = m->hp.n_embd;
    if (vi->image_token_id >= m->hp.n_vocab) {
        s = di_error_set(err, DI_ERR_FORMAT, "config.json: image_token_id %d past the vocabulary %d", vi->image_token_id,
                         (int)m->hp.n_vocab);
        goto done;
    }
    const int64_t E = vi->E, D = vi->D, p = vi->geo.patch_size, r = vi->geo.downsample_ratio;
    if ((s = dsv4_bind_linear(B, "vision.patch_embed.proj", E, 3 * p * p, 0, &vi->patch_w, err)) ||
        (s = dsv4_bind_vec(B, "vision.patch_embed.proj.bias", E, &vi->patch_b, err)) ||
        (s = dsv4_bind_vec(B, "vision.norm.weight", E, &vi->norm, err)) ||
        (s = dsv4_bind_linear(B, "aligner.w1", D, E * r * r, 0, &vi->a1, err)) ||
        (s = dsv4_bind_vec(B, "aligner.w1.bias", D, &vi->a1b, err)) ||
        (s = dsv4_bind_linear(B, "aligner.w2", D, D, 0, &vi->a2, err)) ||
        (s = dsv4_bind_vec(B, "aligner.w2.bias", D, &vi->a2b, err)) ||
        (s = dsv4_bind_vec(B, "image_start", D, &vi->img_start, err)) ||
        (s = dsv4_bind_vec(B, "image_end", D, &vi->img_end, err)) ||
        (s = dsv4_bind_vec(B, "image_newline", D, &vi->img_newline, err)))
        goto done;
    if (vi->patch_w.kind != DSV4_W_PLAIN || vi->a1.kind != DSV4_W_PLAIN || vi->a2.kind != DSV4_W_PLAIN) {
        s = di_error_set(err, DI_ERR_FORMAT, "vision tensors: bf16 / f32 expected");
        goto done;
    }
    vi->blocks = di_calloc((size_t)vi->depth, sizeof *vi->blocks);
    if ((s = dsv4_own(B, vi->blocks, err))) goto done;
    for (int32_t i = 0; i < vi->depth; i++)
        if ((s = bind_block(B, vi, i, &vi->blocks[i], err))) goto done;
    /* a block past depth means the config and the checkpoint disagree */
    char extra[NAME_LEN];
    snprintf(extra, sizeof extra, "vision.blocks.%d.norm1.weight", (int)vi->depth);
    const float *probe;
    if (dsv4_bind_vec(B, extra, E, &probe, err) == DI_OK) {
        s = di_error_set(err, DI_ERR_FORMAT, "checkpoint has more vision blocks than vision_config depth %d",
                         (int)vi->depth);
        goto done;
    }
    di_error_clear(err);
    for (int32_t il = 0; il < m->hp.n_layers; il++) {
        snprintf(extra, sizeof extra, "layers.%d.ffn.gate.bias_vl", (int)il);
        if ((s = dsv4_bind_vec(B, extra, m->hp.n_experts, &m->layers[il].gate_bias_vl, err))) goto done;
    }
    /* VisionRotaryEmbedding(hd / 2): inv_freq = theta^-(2i / (hd/2)), hd/4 of them, f32 as torch */
    const int32_t dim = vi->hd / 2;
    for (int32_t i = 0; i < dim / 2; i++)
        vi->inv_freq[i] = (float)(1.0 / pow(VIT_ROPE_THETA, (double)(float)(2 * i) / dim));
    m->vision = vi;
done:
    di_hf_config_close(v);
    di_hf_config_close(root);
    if (s) di_error_prefix(err, "vision tower: ");
    return s;
}

/* ---- forward ------------------------------------------------------------------- */

/* norm_ref: x * rsqrt(mean(x^2) + eps) * w in f32 */
static void rms(const float *x, const float *w, float *y, int64_t n) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)n + VIT_EPS);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

#define ATTN_BQ 32  /* queries per attention task: one (BQ, n) score tile */
#define ATTN_PAD 32 /* P V's inner length padded with zeros to the gemm's block */

typedef struct attn_job {
    const struct dsv41_vision *vi;
    const di_backend *be;
    const float *qkv;   /* (n, 3E), q and k rotated */
    const float *kt;    /* (H, n, hd) each head's keys, contiguous */
    const float *vtt;   /* (H, hd, np) each head's values, transposed, zero past n */
    float *out;         /* (n, E) */
    float *scores;      /* (threads, ATTN_BQ * np) */
    float *scratch;     /* (threads, scratch_per) matmul scratch */
    int64_t n, np, scratch_per, n_blocks; /* np: n rounded up to ATTN_PAD */
} attn_job;

/* Full attention of one (head, block of ATTN_BQ queries):
 * softmax(q k^T / sqrt(hd)) v as two small GEMMs on the kernel table's f32
 * path (scores = Q K^T with K as the weight rows, out = P V with V^T as
 * the weight rows), run inline on the calling thread. The key axis is
 * zero-padded to np so the P V gemm takes the blocked path: the padding adds
 * exact zeros. */
static void attn_task(void *arg, int64_t task, int thread) {
    const attn_job *j = arg;
    const int32_t E = j->vi->E, hd = j->vi->hd;
    const int64_t h = task / j->n_blocks, i0 = (task % j->n_blocks) * ATTN_BQ, n = j->n, np = j->np;
    const int64_t bq = n - i0 < ATTN_BQ ? n - i0 : ATTN_BQ;
    float *sc = j->scores + (int64_t)thread * ATTN_BQ * np, *scr = j->scratch + (int64_t)thread * j->scratch_per;
    const float scale = 1.0f / sqrtf((float)hd);
    di_matmul_args qk = {DI_DTYPE_F32, j->kt + h * n * hd, (uint64_t)hd * sizeof(float), j->qkv + i0 * 3 * E + h * hd,
                         3 * E, sc, np, bq, hd, n, NULL};
    j->be->ops->linear(j->be, &qk, 1, scr, NULL);
    for (int64_t r = 0; r < bq; r++) {
        float *row = sc + r * np, mx = -INFINITY, sum = 0.0f;
        for (int64_t c = 0; c < n; c++) {
            row[c] *= scale;
            mx = row[c] > mx ? row[c] : mx;
        }
        for (int64_t c = 0; c < n; c++) {
            row[c] = expf(row[c] - mx);
            sum += row[c];
        }
        const float inv = 1.0f / sum;
        for (int64_t c = 0; c < n; c++) row[c] *= inv;
        for (int64_t c = n; c < np; c++) row[c] = 0.0f;
    }
    di_matmul_args pv = {DI_DTYPE_F32, j->vtt + h * hd * np, (uint64_t)np * sizeof(float), sc, np,
                         j->out + i0 * E + h * hd, E, bq, np, hd, NULL};
    j->be->ops->linear(j->be, &pv, 1, scr, NULL);
}

/* 2D rotary of one head vector: cos/sin columns (row freqs | column freqs),
 * NeoX pairing (c, c + hd/2), TK apply_rotary's fma form. */
static void rope2d(const struct dsv41_vision *vi, float *x, int32_t py, int32_t px) {
    const int32_t half = vi->hd / 2, q = vi->hd / 4;
    for (int32_t c = 0; c < half; c++) {
        const float ang = (float)(c < q ? py : px) * vi->inv_freq[c < q ? c : c - q];
        const float co = cosf(ang), si = sinf(ang), a = x[c], b = x[c + half];
        x[c] = fmaf(a, co, -(b * si));
        x[c + half] = fmaf(a, si, b * co);
    }
}

static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

di_status di_dsv41_vision_forward(const di_dsv41_model *m, const di_image_layout *lay, const float *patches,
                                  float *vit_out, float *rows, di_threadpool *pool, di_error *err) {
    const struct dsv41_vision *vi = m->vision;
    if (!vi) return di_error_set(err, DI_ERR_UNSUPPORTED, "this model has no vision tower");
    const int32_t nw = lay->n_vit_w, nh = lay->n_vit_h, r = vi->geo.downsample_ratio;
    if (nw < 1 || nh < 1 || nw > VIT_MAX_GRID || nh > VIT_MAX_GRID)
        return di_error_set(err, DI_ERR_RANGE, "image: patch grid %dx%d outside the tower's 1..%d", nw, nh,
                            VIT_MAX_GRID);
    const int64_t n = (int64_t)nw * nh, E = vi->E, F = vi->F, D = vi->D, p = vi->geo.patch_size;
    const int64_t lw = lay->n_llm_w, lh = lay->n_llm_h, nl = lw * lh, ER = E * r * r;
    const int threads = di_threadpool_n_threads(pool);
    const int64_t max_in = 3 * p * p > ER ? (3 * p * p > F ? 3 * p * p : F) : (ER > F ? ER : F);
    const int64_t n_tasks = (int64_t)threads * 4;
    const int64_t scratch_n = dsv4_lin_scratch(m->be, n > nl ? n : nl, max_in > D ? max_in : D, n_tasks, threads);
    float *x = di_malloc_array((size_t)(n * E), sizeof(float));
    float *h = di_malloc_array((size_t)(n * E), sizeof(float));
    float *big = di_malloc_array((size_t)(n * (3 * E > 2 * F ? 3 * E : 2 * F)), sizeof(float));
    float *o = di_malloc_array((size_t)(n * (E > F ? E : F)), sizeof(float));
    float *scr = di_malloc_array((size_t)scratch_n, sizeof(float));
    const int64_t np = (n + ATTN_PAD - 1) / ATTN_PAD * ATTN_PAD;
    const int64_t attn_scr = m->be->ops->linear_scratch_floats(m->be, ATTN_BQ, np > vi->hd ? np : vi->hd, 1);
    float *sc = di_malloc_array((size_t)((int64_t)threads * ATTN_BQ * np), sizeof(float));
    float *asc = di_malloc_array((size_t)((int64_t)threads * attn_scr), sizeof(float));
    float *ds = di_malloc_array((size_t)(nl * ER), sizeof(float));
    float *kt = di_malloc_array((size_t)(n * E), sizeof(float));
    float *vt = di_calloc((size_t)(np * E), sizeof(float)); /* the padding stays zero */
    float *a1 = di_malloc_array((size_t)(nl * D), sizeof(float));
    float *a2 = di_malloc_array((size_t)(nl * D), sizeof(float));
    di_status s = DI_OK;
    if (!x || !h || !big || !o || !scr || !sc || !asc || !ds || !a1 || !a2 || !kt || !vt) {
        s = di_error_set(err, DI_ERR_NOMEM, "vision tower: out of memory for %lld patches", (long long)n);
        goto done;
    }
    const di_backend *be = m->be;
    /* patch embed */
    dsv4_lin(be, &vi->patch_w, patches, 3 * p * p, x, E, n, scr, pool);
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < E; c++) x[i * E + c] += vi->patch_b[c];
    for (int32_t bi = 0; bi < vi->depth; bi++) {
        const vit_block *b = &vi->blocks[bi];
        for (int64_t i = 0; i < n; i++) rms(x + i * E, b->norm1, h + i * E, E);
        dsv4_lin(be, &b->wqkv, h, E, big, 3 * E, n, scr, pool);
        for (int64_t i = 0; i < n; i++) {
            float *row = big + i * 3 * E;
            for (int64_t c = 0; c < 3 * E; c++) row[c] += b->bqkv[c];
            for (int32_t hh = 0; hh < vi->heads; hh++) {
                rope2d(vi, row + hh * vi->hd, (int32_t)(i / nw), (int32_t)(i % nw));
                rope2d(vi, row + E + hh * vi->hd, (int32_t)(i / nw), (int32_t)(i % nw));
            }
        }
        for (int64_t i = 0; i < n; i++)
            for (int32_t hh = 0; hh < vi->heads; hh++) {
                const float *kv = big + i * 3 * E + E + hh * vi->hd;
                memcpy(kt + ((int64_t)hh * n + i) * vi->hd, kv, (size_t)vi->hd * sizeof(float));
                for (int32_t c = 0; c < vi->hd; c++) vt[((int64_t)hh * vi->hd + c) * np + i] = kv[E + c];
            }
        attn_job j = {.vi = vi, .be = be, .qkv = big, .kt = kt, .vtt = vt, .out = o, .scores = sc, .scratch = asc,
                      .n = n, .np = np, .scratch_per = attn_scr, .n_blocks = (n + ATTN_BQ - 1) / ATTN_BQ};
        di_threadpool_run(pool, j.n_blocks * vi->heads, attn_task, &j);
        dsv4_lin(be, &b->wo, o, E, h, E, n, scr, pool);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < E; c++) x[i * E + c] += h[i * E + c] + b->bo[c];
        for (int64_t i = 0; i < n; i++) rms(x + i * E, b->norm2, h + i * E, E);
        dsv4_lin(be, &b->w1, h, E, big, 2 * F, n, scr, pool);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < F; c++) {
                const float g = big[i * 2 * F + c], u = big[i * 2 * F + F + c];
                o[i * F + c] = g / (1.0f + expf(-g)) * u; /* TK swiglu_forward: silu(left) * right */
            }
        dsv4_lin(be, &b->w2, o, F, h, E, n, scr, pool);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < E; c++) x[i * E + c] += h[i * E + c];
    }
    for (int64_t i = 0; i < n; i++) rms(x + i * E, vi->norm, h + i * E, E);
    if (vit_out) memcpy(vit_out, h, (size_t)(n * E) * sizeof(float));
    /* batch_downsample (downsample_mlp_gelu): block (by, bx) -> [c * r*r + ky * r + kx] */
    for (int64_t by = 0; by < lh; by++)
        for (int64_t bx = 0; bx < lw; bx++) {
            float *dst = ds + (by * lw + bx) * ER;
            for (int64_t ky = 0; ky < r; ky++)
                for (int64_t kx = 0; kx < r; kx++) {
                    const int64_t yy = by * r + ky, xx = bx * r + kx;
                    const float *src = yy < nh && xx < nw ? h + (yy * nw + xx) * E : NULL;
                    for (int64_t c = 0; c < E; c++) dst[c * r * r + ky * r + kx] = src ? src[c] : 0.0f;
                }
        }
    dsv4_lin(be, &vi->a1, ds, ER, a1, D, nl, scr, pool);
    for (int64_t i = 0; i < nl * D; i++) a1[i] = gelu(a1[i] + vi->a1b[i % D]);
    dsv4_lin(be, &vi->a2, a1, D, a2, D, nl, scr, pool);
    /* replace_input_embeds: image rows in order, the special rows by type */
    int64_t t = 0, img = 0;
    memcpy(rows + t++ * D, vi->img_start, (size_t)D * sizeof(float));
    for (int64_t y = 0; y < lh; y++) {
        for (int64_t xq = 0; xq < lw; xq++, img++, t++)
            for (int64_t c = 0; c < D; c++) rows[t * D + c] = a2[img * D + c] + vi->a2b[c];
        memcpy(rows + t++ * D, vi->img_newline, (size_t)D * sizeof(float));
    }
    memcpy(rows + t++ * D, vi->img_end, (size_t)D * sizeof(float));
done:
    free(x);
    free(h);
    free(big);
    free(o);
    free(scr);
    free(sc);
    free(asc);
    free(ds);
    free(a1);
    free(a2);
    free(kt);
    free(vt);
    return s;
}

di_status di_dsv41_image_n_tokens(const di_dsv41_model *m, const uint8_t *bytes, size_t n, const di_image_limits *lim,
                                  int32_t *n_tokens, di_error *err) {
    *n_tokens = 0;
    const struct dsv41_vision *vi = m->vision;
    if (!vi) return di_error_set(err, DI_ERR_UNSUPPORTED, "this model takes no images (no vision tower)");
    di_image img = {0};
    di_image_layout lay;
    di_status s = di_image_decode(bytes, n, lim, &img, err);
    if (!s && !(s = di_image_layout_of(img.width, img.height, &vi->geo, &lay, err))) *n_tokens = lay.num_tokens;
    di_image_free(&img);
    return s;
}

di_status di_dsv41_encode_image(const di_dsv41_model *m, const uint8_t *bytes, size_t n, const di_image_limits *lim,
                                di_dsv41_image_rows *out, di_threadpool *pool, di_error *err) {
    memset(out, 0, sizeof *out);
    const struct dsv41_vision *vi = m->vision;
    if (!vi) return di_error_set(err, DI_ERR_UNSUPPORTED, "this model takes no images (no vision tower)");
    di_image img = {0}, rz = {0};
    float *patches = NULL;
    di_status s = di_image_decode(bytes, n, lim, &img, err);
    if (s) return s;
    di_image_layout lay;
    if ((s = di_image_layout_of(img.width, img.height, &vi->geo, &lay, err)) ||
        (s = di_image_prepare(&img, &vi->geo, &lay, &rz, err)))
        goto done;
    const int64_t p = vi->geo.patch_size, np = (int64_t)lay.n_vit_w * lay.n_vit_h;
    if (lay.n_vit_w > VIT_MAX_GRID || lay.n_vit_h > VIT_MAX_GRID) {
        s = di_error_set(err, DI_ERR_RANGE, "image: patch grid %dx%d over the tower's %d a side", lay.n_vit_w,
                         lay.n_vit_h, VIT_MAX_GRID);
        goto done;
    }
    patches = di_malloc_array((size_t)(np * 3 * p * p), sizeof(float));
    out->token = di_malloc_array((size_t)lay.num_tokens, sizeof(int32_t));
    out->rows = di_malloc_array((size_t)lay.num_tokens * (size_t)vi->D, sizeof(float));
    if (!patches || !out->token || !out->rows) {
        s = di_error_set(err, DI_ERR_NOMEM, "image: out of memory");
        goto done;
    }
    if ((s = di_image_patches(&rz, &vi->geo, &lay, patches, err)) ||
        (s = di_dsv41_vision_forward(m, &lay, patches, NULL, out->rows, pool, err)))
        goto done;
    /* DeepInfer's overwrite_prompt: the first position IMAGE, the rest IMAGE_PAD */
    for (int32_t i = 0; i < lay.num_tokens; i++)
        out->token[i] = m->hp.n_vocab + (i == 0 ? DI_IMAGE_TOKEN_IMAGE : DI_IMAGE_TOKEN_PAD);
    out->layout = lay;
    out->n_tokens = lay.num_tokens;
done:
    free(patches);
    di_image_free(&rz);
    di_image_free(&img);
    if (s) di_dsv41_image_rows_free(out);
    return s;
}
