/* Binds a V4 checkpoint's tensors (the released checkpoints' original names,
 * e.g. layers.3.attn.wq_a.weight, layers.3.ffn.experts.7.w1.weight) to
 * dsv4_layer fields, checking every shape and dtype against the validated
 * hyper-parameters:
 *
 *   linear  F32/F16/BF16 [out, in]
 *           F8_E4M3 [out, in] + `.scale` F32/BF16/F8_E8M0
 *                   [ceil(out/B), ceil(in/B)], B from quantization_config
 *           (routed experts only) I8/U8 [out, in/2] packed e2m1 pairs +
 *                   `.scale` F8_E8M0/U8 [out, in/32]  (MXFP4)
 *   vector  F32/F16/BF16 [n]   (widened to an owned f32 copy unless F32)
 *   tid2eid I32/I64 [vocab, experts_per_tok], every entry in [0, experts)
 *
 * Weights stay in the mapping; only scales, vectors that are not F32, and
 * weights whose data is misaligned for their element type (safetensors does
 * not align tensors) are copied.
 *
 * MTP modules (`mtp.<i>.`, the V4 base release's next-token predictor, the
 * MTPBlock of DeepSeek's inference code; transformers ignores them): when
 * any mtp.* tensor is present, every module i < num_nextn_predict_layers
 * must be complete --
 *   a full block under mtp.<i>. with the names and shapes of layers.<N>.
 *     (attention kind from compress_ratios[n_layers + i] when the config
 *     lists it, else from the tensors: an indexer means CSA, a compressor
 *     HCA, neither window-only; hash routing when ffn.gate.tid2eid exists)
 *   e_proj, h_proj  linear [n_embd, n_embd] (FP8 in the release)
 *   enorm, hnorm, norm  .weight [n_embd]
 *   hc_head_fn [hc_mult, hc_mult*n_embd], hc_head_base [hc_mult],
 *   hc_head_scale [1]
 * -- and no other mtp.* tensor may exist (an unknown name or a module index
 * past the config is an error, not silently ignored). No mtp.* tensors at
 * all is fine: checkpoints re-saved by transformers drop them. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"
#include "tensor/fp8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 256

di_status dsv4_own(di_dsv4_model *m, void *p, di_error *err) {
    void **list = p ? di_realloc_array(m->owned, (size_t)m->n_owned + 1, sizeof *list) : NULL;
    if (!list) {
        free(p);
        return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4: out of memory");
    }
    m->owned = list;
    m->owned[m->n_owned++] = p;
    return DI_OK;
}

/* Looks a tensor up; mtp.* hits are remembered (see check_mtp_leftovers). */
static const di_safetensors_tensor *find(di_dsv4_model *m, const char *name) {
    const di_safetensors_tensor *t = di_safetensors_checkpoint_find(m->ck, name);
    if (t && !strncmp(name, "mtp.", 4) && m->n_mtp_bound < m->mtp_bound_cap) {
        for (int64_t j = 0; j < m->n_mtp_bound; j++)
            if (m->mtp_bound[j] == (const void *)t) return t;
        m->mtp_bound[m->n_mtp_bound++] = t;
    }
    return t;
}

static di_status missing(const char *name, di_error *err) {
    return di_error_set(err, DI_ERR_FORMAT, "missing tensor '%s'", name);
}

static di_status check_shape(const di_safetensors_tensor *t, int32_t n_dims, int64_t d0, int64_t d1,
                             di_error *err) {
    if (t->n_dims != n_dims || t->shape[0] != d0 || (n_dims > 1 && t->shape[1] != d1)) {
        if (n_dims == 1)
            return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': shape must be [%lld]", t->name, (long long)d0);
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': shape must be [%lld, %lld]", t->name,
                            (long long)d0, (long long)d1);
    }
    return DI_OK;
}

/* A float tensor of n elements as f32: the mapping when it is aligned F32,
 * else an owned copy. */
static di_status floats_of(di_dsv4_model *m, const di_safetensors_tensor *t, int64_t n, const float **out,
                           di_error *err) {
    if (t->dtype != DI_DTYPE_F32 && t->dtype != DI_DTYPE_BF16 && t->dtype != DI_DTYPE_F16)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': dtype %s (F32, BF16 or F16 expected)", t->name,
                            di_dtype_traits_of(t->dtype)->name);
    if (t->dtype == DI_DTYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        *out = t->data;
        return DI_OK;
    }
    float *buf = di_malloc_array((size_t)n, sizeof(float));
    di_status s = dsv4_own(m, buf, err);
    if (s) return s;
    if ((s = di_dtype_row_to_float(t->dtype, t->data, buf, n, err))) return s;
    *out = buf;
    return DI_OK;
}

static di_status bind_vec(di_dsv4_model *m, const char *name, int64_t n, const float **out, di_error *err) {
    const di_safetensors_tensor *t = find(m, name);
    if (!t) return missing(name, err);
    di_status s = check_shape(t, 1, n, 0, err);
    if (s) return s;
    if ((s = floats_of(m, t, n, out, err))) return s;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite((*out)[i])) return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': element %lld is not finite",
                                                      name, (long long)i);
    return DI_OK;
}

/* The scale tensor next to weight `base`.weight: `base`.scale (the released
 * checkpoints), or the transformers spellings `base`.weight_scale_inv and
 * `base`.scale_inv. */
static const di_safetensors_tensor *find_scale(di_dsv4_model *m, const char *base) {
    static const char *const suffix[] = {".scale", ".weight_scale_inv", ".scale_inv"};
    char name[NAME_MAX_LEN];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", base, suffix[i]);
        const di_safetensors_tensor *t = find(m, name);
        if (t) return t;
    }
    return NULL;
}

static di_status bind_fp8(di_dsv4_model *m, const char *base, const di_safetensors_tensor *t, dsv4_linear *w,
                          di_error *err) {
    int32_t B = m->hp.fp8_block;
    if (B <= 0)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': FP8 weight but config.json has no quantization_config",
                            t->name);
    const di_safetensors_tensor *sc = find_scale(m, base);
    if (!sc) return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': FP8 weight without a '%s.scale' tensor", t->name, base);
    int64_t sr = (w->n_out + B - 1) / B, scols = (w->n_in + B - 1) / B;
    di_status s = check_shape(sc, 2, sr, scols, err);
    if (s) return s;
    if (sc->dtype != DI_DTYPE_F32 && sc->dtype != DI_DTYPE_BF16 && sc->dtype != DI_DTYPE_F8_E8M0)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': scale dtype %s (F32, BF16 or F8_E8M0 expected)",
                            sc->name, di_dtype_traits_of(sc->dtype)->name);
    float *f = di_malloc_array((size_t)(sr * scols), sizeof(float));
    if ((s = dsv4_own(m, f, err))) return s;
    if ((s = di_dtype_row_to_float(sc->dtype, sc->data, f, sr * scols, err))) return s;
    for (int64_t i = 0; i < sr * scols; i++)
        if (!isfinite(f[i]))
            return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': scale %lld is not finite", sc->name, (long long)i);
    w->kind = DSV4_W_FP8;
    w->data = t->data; /* bytes: no alignment needed */
    w->row_bytes = (uint64_t)w->n_in;
    w->scale = f;
    w->scale_cols = scols;
    w->block = B;
    return DI_OK;
}

static di_status bind_mxfp4(di_dsv4_model *m, const char *base, const di_safetensors_tensor *t, dsv4_linear *w,
                            di_error *err) {
    if (w->n_in % 32)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': MXFP4 needs a multiple of 32 inputs", t->name);
    di_status s = check_shape(t, 2, w->n_out, w->n_in / 2, err);
    if (s) return s;
    const di_safetensors_tensor *sc = find_scale(m, base);
    if (!sc) return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': MXFP4 weight without a '%s.scale' tensor", t->name, base);
    if ((s = check_shape(sc, 2, w->n_out, w->n_in / 32, err))) return s;
    if (sc->dtype != DI_DTYPE_F8_E8M0 && sc->dtype != DI_DTYPE_U8)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': MXFP4 scale dtype %s (F8_E8M0 or U8 expected)",
                            sc->name, di_dtype_traits_of(sc->dtype)->name);
    const uint8_t *b = sc->data;
    for (uint64_t i = 0; i < sc->n_bytes; i++)
        if (b[i] == 255) return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': scale byte %llu is NaN (255)",
                                             sc->name, (unsigned long long)i);
    w->kind = DSV4_W_MXFP4;
    w->data = t->data;
    w->row_bytes = (uint64_t)(w->n_in / 2);
    w->mx_scale = b;
    return DI_OK;
}

/* `base`.weight as a (n_out, n_in) linear. allow_mx: routed experts may be
 * MXFP4. */
static di_status bind_linear(di_dsv4_model *m, const char *base, int64_t n_out, int64_t n_in, int allow_mx,
                             dsv4_linear *w, di_error *err) {
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s.weight", base);
    const di_safetensors_tensor *t = find(m, name);
    if (!t) return missing(name, err);
    memset(w, 0, sizeof *w);
    w->n_out = n_out;
    w->n_in = n_in;
    if ((t->dtype == DI_DTYPE_I8 || t->dtype == DI_DTYPE_U8) && allow_mx) return bind_mxfp4(m, base, t, w, err);
    di_status s = check_shape(t, 2, n_out, n_in, err);
    if (s) return s;
    if (t->dtype == DI_DTYPE_F8_E4M3) return bind_fp8(m, base, t, w, err);
    if (t->dtype != DI_DTYPE_F32 && t->dtype != DI_DTYPE_BF16 && t->dtype != DI_DTYPE_F16)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': dtype %s not supported for a linear weight", name,
                            di_dtype_traits_of(t->dtype)->name);
    w->kind = DSV4_W_PLAIN;
    w->dtype = t->dtype;
    w->row_bytes = t->n_bytes / (uint64_t)n_out;
    w->data = t->data;
    size_t esize = t->dtype == DI_DTYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % 4 != 0 || (w->row_bytes % 4 != 0 && esize == 4)) {
        /* the kernels load f32/f16 lanes directly: give them an aligned copy */
        void *copy = di_malloc_array((size_t)t->n_bytes, 1);
        if ((s = dsv4_own(m, copy, err))) return s;
        memcpy(copy, t->data, (size_t)t->n_bytes);
        w->data = copy;
    }
    return DI_OK;
}

static di_status bind_tid2eid(di_dsv4_model *m, const char *name, dsv4_layer *L, di_error *err) {
    const di_dsv4_hparams *hp = &m->hp;
    const di_safetensors_tensor *t = find(m, name);
    if (!t) return missing(name, err);
    di_status s = check_shape(t, 2, hp->n_vocab, hp->n_experts_used, err);
    if (s) return s;
    if (t->dtype != DI_DTYPE_I32 && t->dtype != DI_DTYPE_I64)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': dtype %s (I32 or I64 expected)", name,
                            di_dtype_traits_of(t->dtype)->name);
    uint64_t n = (uint64_t)hp->n_vocab * (uint64_t)hp->n_experts_used;
    int32_t *ids = di_malloc_array((size_t)n, sizeof(int32_t));
    if ((s = dsv4_own(m, ids, err))) return s;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if (t->dtype == DI_DTYPE_I32) {
            int32_t v32;
            memcpy(&v32, (const uint8_t *)t->data + 4 * i, 4);
            v = v32;
        } else {
            memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
        }
        if (v < 0 || v >= hp->n_experts)
            return di_error_set(err, DI_ERR_RANGE, "tensor '%s': token %llu routes to expert %lld, not in [0, %d)",
                                name, (unsigned long long)(i / (uint64_t)hp->n_experts_used), (long long)v,
                                (int)hp->n_experts);
        ids[i] = (int32_t)v;
    }
    L->tid2eid = ids;
    return DI_OK;
}

/* A float matrix stored without the .weight suffix (the mHC projections) as
 * an F32 linear. */
static di_status bind_float_matrix(di_dsv4_model *m, const char *name, int64_t rows, int64_t cols,
                                   dsv4_linear *w, di_error *err) {
    const di_safetensors_tensor *t = find(m, name);
    if (!t) return missing(name, err);
    const float *f;
    di_status s = check_shape(t, 2, rows, cols, err);
    if (s || (s = floats_of(m, t, rows * cols, &f, err))) return s;
    *w = (dsv4_linear){.kind = DSV4_W_PLAIN, .dtype = DI_DTYPE_F32, .data = f,
                       .row_bytes = (uint64_t)cols * 4, .n_in = cols, .n_out = rows};
    return DI_OK;
}

static di_status bind_compressor(di_dsv4_model *m, const char *base, int32_t dim, int32_t coff, int32_t ratio,
                                 dsv4_compressor *c, di_error *err) {
    char name[NAME_MAX_LEN];
    const int64_t D = m->hp.n_embd, W = (int64_t)coff * dim;
    di_status s;
    c->dim = dim;
    c->coff = coff;
    snprintf(name, sizeof name, "%s.wkv", base);
    if ((s = bind_linear(m, name, W, D, 0, &c->wkv, err))) return s;
    snprintf(name, sizeof name, "%s.wgate", base);
    if ((s = bind_linear(m, name, W, D, 0, &c->wgate, err))) return s;
    snprintf(name, sizeof name, "%s.ape", base);
    const di_safetensors_tensor *t = find(m, name);
    if (!t) return missing(name, err);
    if ((s = check_shape(t, 2, ratio, W, err)) || (s = floats_of(m, t, ratio * W, &c->ape, err))) return s;
    snprintf(name, sizeof name, "%s.norm.weight", base);
    return bind_vec(m, name, dim, &c->norm, err);
}

/* ---- the family's core weights (both loaders) ---------------------------------- */

#define CORE_LIN(...) DSV4_BIND_LIN(m, pfx, __VA_ARGS__)
#define CORE_VEC(...) DSV4_BIND_VEC(m, pfx, __VA_ARGS__)

di_status dsv4_bind_core_attn(di_dsv4_model *m, const char *pfx, const dsv4_core_dims *d, dsv4_core_w *w,
                              di_error *err) {
    const int64_t D = d->n_embd, N = d->hc_mult, M = (2 + N) * N, HD = d->n_heads * d->head_dim;
    char name[NAME_MAX_LEN];
    di_status s;
    /* mHC projections are plain 2-D float tensors without a .weight suffix */
    snprintf(name, sizeof name, "%s.hc_attn_fn", pfx);
    if ((s = bind_float_matrix(m, name, M, N * D, &w->hc_attn_fn, err))) return s;
    snprintf(name, sizeof name, "%s.hc_ffn_fn", pfx);
    if ((s = bind_float_matrix(m, name, M, N * D, &w->hc_ffn_fn, err))) return s;
    CORE_VEC("hc_attn_base", M, &w->hc_attn_base);
    CORE_VEC("hc_attn_scale", 3, &w->hc_attn_scale);
    CORE_VEC("hc_ffn_base", M, &w->hc_ffn_base);
    CORE_VEC("hc_ffn_scale", 3, &w->hc_ffn_scale);
    CORE_VEC("attn_norm.weight", D, &w->attn_norm);
    CORE_VEC("ffn_norm.weight", D, &w->ffn_norm);
    CORE_LIN("attn.wq_a", d->q_lora, D, 0, &w->wq_a);
    CORE_VEC("attn.q_norm.weight", d->q_lora, &w->q_norm);
    CORE_LIN("attn.wq_b", HD, d->q_lora, 0, &w->wq_b);
    CORE_LIN("attn.wkv", d->head_dim, D, 0, &w->wkv);
    CORE_VEC("attn.kv_norm.weight", d->head_dim, &w->kv_norm);
    CORE_LIN("attn.wo_a", d->o_groups * d->o_lora, HD / d->o_groups, 0, &w->wo_a);
    CORE_LIN("attn.wo_b", D, d->o_groups * d->o_lora, 0, &w->wo_b);
    CORE_VEC("attn.attn_sink", d->n_heads, &w->sink);
    return DI_OK;
}

di_status dsv4_bind_core_moe(di_dsv4_model *m, const char *pfx, const dsv4_core_dims *d, int32_t n_exp,
                             dsv4_core_w *w, di_error *err) {
    const int64_t D = d->n_embd, F = d->moe_ff;
    char name[NAME_MAX_LEN];
    di_status s;
    dsv4_linear *ws = di_calloc((size_t)n_exp * 3, sizeof *ws);
    if ((s = dsv4_own(m, ws, err))) return s;
    w->w1 = ws;
    w->w2 = ws + n_exp;
    w->w3 = ws + 2 * (int64_t)n_exp;
    for (int32_t e = 0; e < n_exp; e++) {
        char ex[64];
        snprintf(ex, sizeof ex, "ffn.experts.%d.w1", (int)e);
        CORE_LIN(ex, F, D, 1, &w->w1[e]);
        snprintf(ex, sizeof ex, "ffn.experts.%d.w2", (int)e);
        CORE_LIN(ex, D, F, 1, &w->w2[e]);
        snprintf(ex, sizeof ex, "ffn.experts.%d.w3", (int)e);
        CORE_LIN(ex, F, D, 1, &w->w3[e]);
    }
    CORE_LIN("ffn.shared_experts.w1", F, D, 0, &w->sh_w1);
    CORE_LIN("ffn.shared_experts.w2", D, F, 0, &w->sh_w2);
    CORE_LIN("ffn.shared_experts.w3", F, D, 0, &w->sh_w3);
    return DI_OK;
}
#undef CORE_LIN
#undef CORE_VEC

/* One block (attention + MoE + its mHC) under prefix p ("layers.3",
 * "mtp.0"). */
static di_status bind_block(di_dsv4_model *m, const char *p, di_dsv4_attn_kind kind, int hash_moe, dsv4_layer *L,
                            di_error *err) {
    const di_dsv4_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult;
    char name[NAME_MAX_LEN];
    di_status s;
    L->kind = kind;
    L->ratio = L->kind == DI_DSV4_ATTN_CSA ? hp->ratio_csa : L->kind == DI_DSV4_ATTN_HCA ? hp->ratio_hca : 0;
    L->hash_moe = hash_moe;

#define LIN(...) DSV4_BIND_LIN(m, p, __VA_ARGS__)
#define VEC(...) DSV4_BIND_VEC(m, p, __VA_ARGS__)

    const dsv4_core_dims dims = {D, N, hp->q_lora, hp->n_heads, hp->head_dim, hp->o_groups, hp->o_lora, hp->moe_ff};
    if ((s = dsv4_bind_core_attn(m, p, &dims, &L->core, err))) return s;
    if (L->kind != DI_DSV4_ATTN_WINDOW) {
        int32_t coff = L->kind == DI_DSV4_ATTN_CSA ? 2 : 1;
        snprintf(name, sizeof name, "%s.attn.compressor", p);
        if ((s = bind_compressor(m, name, hp->head_dim, coff, L->ratio, &L->comp, err))) return s;
    }
    if (L->kind == DI_DSV4_ATTN_CSA) {
        snprintf(name, sizeof name, "%s.attn.indexer.compressor", p);
        if ((s = bind_compressor(m, name, hp->index_dim, 2, L->ratio, &L->icomp, err))) return s;
        LIN("attn.indexer.wq_b", (int64_t)hp->index_heads * hp->index_dim, hp->q_lora, 0, &L->idx_wq_b);
        LIN("attn.indexer.weights_proj", hp->index_heads, D, 0, &L->idx_wproj);
    }

    LIN("ffn.gate", hp->n_experts, D, 0, &L->gate);
    if (L->hash_moe) {
        snprintf(name, sizeof name, "%s.ffn.gate.tid2eid", p);
        if ((s = bind_tid2eid(m, name, L, err))) return s;
    } else {
        VEC("ffn.gate.bias", hp->n_experts, &L->gate_bias);
    }
    if ((s = dsv4_bind_core_moe(m, p, &dims, hp->n_experts, &L->core, err))) return s;
#undef LIN
#undef VEC
    return DI_OK;
}

static di_status bind_layer(di_dsv4_model *m, int32_t il, dsv4_layer *L, di_error *err) {
    char p[64];
    snprintf(p, sizeof p, "layers.%d", (int)il);
    return bind_block(m, p, (di_dsv4_attn_kind)m->hp.attn_kind[il], m->hp.hash_moe[il], L, err);
}

/* ---- MTP modules -------------------------------------------------------------- */

static int has_tensor(const di_dsv4_model *m, const char *name) {
    return di_safetensors_checkpoint_find(m->ck, name) != NULL;
}

static di_status bind_mtp(di_dsv4_model *m, int32_t i, dsv4_mtp *t, di_error *err) {
    const di_dsv4_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult;
    char p[32], name[NAME_MAX_LEN];
    di_status s;
    snprintf(p, sizeof p, "mtp.%d", (int)i);
    di_dsv4_attn_kind kind = (di_dsv4_attn_kind)hp->mtp_attn_kind[i];
    if (hp->mtp_attn_kind[i] == DI_DSV4_KIND_UNKNOWN) {
        snprintf(name, sizeof name, "%s.attn.indexer.wq_b.weight", p);
        int csa = has_tensor(m, name);
        snprintf(name, sizeof name, "%s.attn.compressor.wkv.weight", p);
        kind = csa ? DI_DSV4_ATTN_CSA : has_tensor(m, name) ? DI_DSV4_ATTN_HCA : DI_DSV4_ATTN_WINDOW;
    }
    snprintf(name, sizeof name, "%s.ffn.gate.tid2eid", p);
    if ((s = bind_block(m, p, kind, has_tensor(m, name), &t->block, err))) return s;
#define MTP_NAME(suffix) snprintf(name, sizeof name, "%s.%s", p, suffix)
    MTP_NAME("e_proj");
    if ((s = bind_linear(m, name, D, D, 0, &t->e_proj, err))) return s;
    MTP_NAME("h_proj");
    if ((s = bind_linear(m, name, D, D, 0, &t->h_proj, err))) return s;
    MTP_NAME("enorm.weight");
    if ((s = bind_vec(m, name, D, &t->enorm, err))) return s;
    MTP_NAME("hnorm.weight");
    if ((s = bind_vec(m, name, D, &t->hnorm, err))) return s;
    MTP_NAME("norm.weight");
    if ((s = bind_vec(m, name, D, &t->norm, err))) return s;
    MTP_NAME("hc_head_fn");
    if ((s = bind_float_matrix(m, name, N, N * D, &t->hc_head_fn, err))) return s;
    MTP_NAME("hc_head_base");
    if ((s = bind_vec(m, name, N, &t->hc_head_base, err))) return s;
    MTP_NAME("hc_head_scale");
    if ((s = bind_vec(m, name, 1, &t->hc_head_scale, err))) return s;
#undef MTP_NAME
    return DI_OK;
}

/* Validates the mtp.* tensors (see the top of this file). */
static di_status bind_mtp_modules(di_dsv4_model *m, di_error *err) {
    const di_dsv4_hparams *hp = &m->hp;
    uint64_t n_tensors = di_safetensors_checkpoint_tensor_count(m->ck), n_mtp_tensors = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        const char *name = di_safetensors_checkpoint_tensor_at(m->ck, i)->name;
        if (strncmp(name, "mtp.", 4)) continue;
        n_mtp_tensors++;
        /* the module index first: a name past the config is the likely mistake */
        char *end;
        long idx = strtol(name + 4, &end, 10);
        if (end == name + 4 || *end != '.' || idx < 0)
            return di_error_set(err, DI_ERR_FORMAT, "unexpected tensor '%.200s' (mtp.<module>.<name> expected)", name);
        if (idx >= hp->n_mtp)
            return di_error_set(err, DI_ERR_FORMAT,
                                "tensor '%.200s': MTP module %ld but num_nextn_predict_layers is %d", name, idx,
                                (int)hp->n_mtp);
    }
    if (n_mtp_tensors == 0) return DI_OK; /* a checkpoint without MTP weights */
    m->mtp_bound = di_calloc((size_t)n_mtp_tensors, sizeof *m->mtp_bound);
    m->mtp = di_calloc((size_t)hp->n_mtp, sizeof *m->mtp);
    di_status s = dsv4_own(m, (void *)m->mtp_bound, err);
    if (s || (s = dsv4_own(m, m->mtp, err))) return s;
    m->mtp_bound_cap = (int64_t)n_mtp_tensors;
    for (int32_t i = 0; i < hp->n_mtp; i++)
        if ((s = bind_mtp(m, i, &m->mtp[i], err))) return s;
    m->n_mtp = hp->n_mtp;
    if ((uint64_t)m->n_mtp_bound == n_mtp_tensors) return DI_OK;
    /* some mtp.* tensor was never asked for: name the first one */
    for (uint64_t i = 0; i < n_tensors; i++) {
        const di_safetensors_tensor *t = di_safetensors_checkpoint_tensor_at(m->ck, i);
        if (strncmp(t->name, "mtp.", 4)) continue;
        int seen = 0;
        for (int64_t j = 0; j < m->n_mtp_bound && !seen; j++) seen = m->mtp_bound[j] == (const void *)t;
        if (!seen) return di_error_set(err, DI_ERR_FORMAT, "unexpected tensor '%.200s' in an MTP module", t->name);
    }
    return di_error_set(err, DI_ERR_FORMAT, "MTP tensor bookkeeping is inconsistent"); /* not reached */
}

int32_t di_dsv4_mtp_modules(const di_dsv4_model *m) { return m->n_mtp; }

/* inv_freq in float32 the way transformers computes it:
 * 1 / base^(float(2i)/dim), and for YaRN the ramp between the interpolated
 * (divided by factor) and extrapolated frequencies over the correction
 * range [floor(low), ceil(high)] (truncate is always on for V4: the flag is
 * read from the top-level rope_parameters, which V4 nests). */
static void build_inv_freq(const di_dsv4_hparams *hp, double base, int yarn, float *out) {
    int32_t dim = hp->n_rot, half = dim / 2;
    double low = 0, high = 0;
    if (yarn) {
        double two_pi = 2.0 * 3.14159265358979323846;
        low = floor(dim * log(hp->yarn_orig_ctx / (hp->yarn_beta_fast * two_pi)) / (2.0 * log(base)));
        high = ceil(dim * log(hp->yarn_orig_ctx / (hp->yarn_beta_slow * two_pi)) / (2.0 * log(base)));
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001; /* the reference's guard against a zero range */
    }
    for (int32_t i = 0; i < half; i++) {
        float pos_freq = powf((float)base, (float)(2 * i) / (float)dim);
        float extra = 1.0f / pos_freq;
        if (!yarn) {
            out[i] = extra;
            continue;
        }
        float inter = 1.0f / ((float)hp->yarn_factor * pos_freq);
        float ramp = (float)(((double)i - low) / (high - low));
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float keep = 1.0f - ramp; /* share of the extrapolated frequency */
        out[i] = inter * (1.0f - keep) + extra * keep;
    }
}

di_status dsv4_bind_weights(di_dsv4_model *m, di_error *err) {
    const di_dsv4_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult;
    di_status s;
    if ((s = bind_linear(m, "embed", hp->n_vocab, D, 0, &m->embed, err))) return s;
    if (find(m, "head.weight") || !hp->tied) {
        if ((s = bind_linear(m, "head", hp->n_vocab, D, 0, &m->head, err))) return s;
    } else {
        m->head = m->embed;
    }
    if ((s = bind_vec(m, "norm.weight", D, &m->norm, err))) return s;
    if ((s = bind_float_matrix(m, "hc_head_fn", N, N * D, &m->hc_head_fn, err))) return s;
    if ((s = bind_vec(m, "hc_head_base", N, &m->hc_head_base, err)) ||
        (s = bind_vec(m, "hc_head_scale", 1, &m->hc_head_scale, err)))
        return s;
    m->layers = di_calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4: out of memory");
    for (int32_t il = 0; il < hp->n_layers; il++)
        if ((s = bind_layer(m, il, &m->layers[il], err))) return s;
    if ((s = bind_mtp_modules(m, err))) return s;
    build_inv_freq(hp, hp->rope_theta, 0, m->inv_freq_main);
    build_inv_freq(hp, hp->compress_rope_theta, hp->yarn, m->inv_freq_compress);
    return DI_OK;
}

/* ---- binders shared with DeepSeek-V4.1 (deepseek_v41_load.c) ---------------- */

di_status dsv4_bind_linear(di_dsv4_model *m, const char *base, int64_t n_out, int64_t n_in, int allow_mx,
                           dsv4_linear *w, di_error *err) {
    return bind_linear(m, base, n_out, n_in, allow_mx, w, err);
}

di_status dsv4_bind_vec(di_dsv4_model *m, const char *name, int64_t n, const float **out, di_error *err) {
    return bind_vec(m, name, n, out, err);
}

di_status dsv4_bind_float_matrix(di_dsv4_model *m, const char *name, int64_t rows, int64_t cols, dsv4_linear *w,
                                 di_error *err) {
    return bind_float_matrix(m, name, rows, cols, w, err);
}

void dsv4_build_inv_freq(const di_dsv4_hparams *hp, double base, int yarn, float *out) {
    build_inv_freq(hp, base, yarn, out);
}
