/* Tensor validation of the llama-family GGUFs (llama_hparams.h,
 * di_llama_validate_tensors): which tensors each variant has, with which
 * shapes, derived from the validated hyper-parameters.
 *
 * Names are llama.cpp's ("blk.<N>.<part>"). One table lists every per-layer
 * part any variant has; part_shape says, for the file's variant, whether a
 * part belongs to it and its shape in ggml order (ne[0] = input dimension).
 * A tensor the variant does not have is refused, not ignored: a weight we
 * would skip means wrong output. */
#include "model/llama_hparams.h"

#include "base/alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 96

static const char *gname(const di_gguf *g) { return di_gguf_name(g); }

typedef enum part_kind {
    PK_NORM, /* 1-D float vector (norm weight or bias) */
    PK_MAT,  /* 2-D matrix, float or quantized */
    PK_EXPS, /* 3-D stack of per-expert matrices on ne[2] */
} part_kind;

/* Per-layer parts, in one order for the table, the slots and the checks. */
enum {
    P_ATTN_NORM, P_Q, P_K, P_V, P_O, P_FFN_NORM, P_GATE, P_UP, P_DOWN,
    P_Q_NORM, P_K_NORM, P_POST_ATTN, P_POST_FFW,    /* gemma3 (q/k norms also qwen3) */
    P_Q_B, P_K_B, P_V_B,                            /* qwen2 */
    P_QKV,                                          /* phi3 */
    P_GATE_INP, P_GATE_EXPS, P_UP_EXPS, P_DOWN_EXPS, /* routed experts */
    N_PARTS
};

static const char *const PART_NAMES[N_PARTS] = {
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    "attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight", "post_ffw_norm.weight",
    "attn_q.bias", "attn_k.bias", "attn_v.bias",
    "attn_qkv.weight",
    "ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
};

static const di_gguf_tensor **layer_slot(di_llama_layer_tensors *l, int part) {
    const di_gguf_tensor **slots[N_PARTS] = {
        &l->attn_norm, &l->attn_q, &l->attn_k, &l->attn_v, &l->attn_output,
        &l->ffn_norm, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
        &l->attn_q_norm, &l->attn_k_norm, &l->post_attention_norm, &l->post_ffw_norm,
        &l->attn_q_b, &l->attn_k_b, &l->attn_v_b,
        &l->attn_qkv,
        &l->ffn_gate_inp, &l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps,
    };
    return slots[part];
}

/* Whether the file's variant has this part; if so its kind and shape. */
static bool part_shape(const di_llama_hparams *hp, int part, part_kind *kind, int64_t ne[3]) {
    const di_llama_arch a = hp->arch;
    const int64_t E = hp->n_embd, F = hp->n_ff, hd = hp->head_dim;
    const int64_t q_dim = (int64_t)hp->n_heads * hd, kv_dim = (int64_t)hp->n_heads_kv * hd;
    const bool fused = a == DI_LLAMA_ARCH_PHI3;
    const bool moe = hp->n_expert > 0;
    const bool qk_norm = a == DI_LLAMA_ARCH_GEMMA3 || a == DI_LLAMA_ARCH_QWEN3 || a == DI_LLAMA_ARCH_QWEN3MOE;
    const int64_t X = hp->n_expert, FX = hp->n_ff_exp;
    bool has;
    *kind = PK_MAT;
    ne[0] = E;
    ne[1] = 1;
    ne[2] = 1;
    switch (part) {
    case P_ATTN_NORM: case P_FFN_NORM: *kind = PK_NORM; has = true; break;
    case P_Q: has = !fused; ne[1] = q_dim; break;
    case P_K: case P_V: has = !fused; ne[1] = kv_dim; break;
    case P_O: has = true; ne[0] = q_dim; ne[1] = E; break;
    case P_GATE: has = !fused && !moe; ne[1] = F; break;
    case P_UP: has = !moe; ne[1] = fused ? 2 * F : F; break; /* phi3: gate rows, then up rows */
    case P_DOWN: has = !moe; ne[0] = F; ne[1] = E; break;
    case P_Q_NORM: case P_K_NORM: *kind = PK_NORM; has = qk_norm; ne[0] = hd; break;
    case P_POST_ATTN: case P_POST_FFW: *kind = PK_NORM; has = a == DI_LLAMA_ARCH_GEMMA3; break;
    case P_Q_B: *kind = PK_NORM; has = a == DI_LLAMA_ARCH_QWEN2; ne[0] = q_dim; break;
    case P_K_B: case P_V_B: *kind = PK_NORM; has = a == DI_LLAMA_ARCH_QWEN2; ne[0] = kv_dim; break;
    case P_QKV: has = fused; ne[1] = q_dim + 2 * kv_dim; break;
    case P_GATE_INP: has = moe; ne[1] = X; break;
    case P_GATE_EXPS: case P_UP_EXPS: *kind = PK_EXPS; has = moe; ne[1] = FX; ne[2] = X; break;
    case P_DOWN_EXPS: *kind = PK_EXPS; has = moe; ne[0] = FX; ne[1] = E; ne[2] = X; break;
    default: has = false; break;
    }
    return has;
}

/* Parses "blk.<N>.<part>" (N decimal without leading zeros).
 * Returns false when name has another form. */
static bool parse_layer_name(const char *name, uint64_t *layer, int *part) {
    if (strncmp(name, "blk.", 4) != 0) return false;
    const char *p = name + 4;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9')) return false;
    uint64_t n = 0;
    while (*p >= '0' && *p <= '9') {
        if (n > UINT32_MAX) return false;
        n = n * 10 + (uint64_t)(*p++ - '0');
    }
    if (*p++ != '.') return false;
    for (int k = 0; k < N_PARTS; k++)
        if (!strcmp(p, PART_NAMES[k])) {
            *layer = n;
            *part = k;
            return true;
        }
    return false;
}

static bool is_float_dtype(di_dtype d) {
    return d == DI_DTYPE_F32 || d == DI_DTYPE_F16 || d == DI_DTYPE_BF16;
}

/* ne must be [d0, d1, d2, 1]; a 1-D tensor passes d1 = d2 = 1. Norms must
 * be a float type; matrices any float or quantized type (not integers). */
static di_status check_tensor3(const di_gguf *g, const char *name, const di_gguf_tensor *t, int64_t d0,
                               int64_t d1, int64_t d2, bool is_norm, di_error *err) {
    if (!t)
        return di_error_set(err, DI_ERR_FORMAT, "%s: required tensor '%s' is missing", gname(g), name);
    if (t->ne[0] != d0 || t->ne[1] != d1 || t->ne[2] != d2 || t->ne[3] != 1) {
        if (d2 == 1)
            return di_error_set(err, DI_ERR_FORMAT,
                                "%s: tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                                "], expected [%" PRId64 ", %" PRId64 "]",
                                gname(g), name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], d0, d1);
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                            "], expected [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                            gname(g), name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], d0, d1, d2);
    }
    const di_dtype_traits *tr = di_dtype_traits_of(t->dtype);
    bool ok = is_norm ? is_float_dtype(t->dtype) : (is_float_dtype(t->dtype) || tr->is_quantized);
    if (!ok)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, expected %s", gname(g), name,
                            tr->name, is_norm ? "f32, f16 or bf16" : "a float or quantized type");
    return DI_OK;
}

static di_status check_tensor(const di_gguf *g, const char *name, const di_gguf_tensor *t, int64_t d0,
                              int64_t d1, bool is_norm, di_error *err) {
    return check_tensor3(g, name, t, d0, d1, 1, is_norm, err);
}

/* Assigns every tensor in the file to its slot; unknown names fail. */
static di_status classify_tensors(const di_gguf *g, const di_llama_hparams *hp, di_llama_tensors *out,
                                  di_error *err) {
    const char *arch = di_llama_arch_name(hp->arch);
    for (uint64_t i = 0; i < di_gguf_tensor_count(g); i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        uint64_t layer;
        int part;
        part_kind kind;
        int64_t ne[3];
        if (!strcmp(t->name, "token_embd.weight")) out->token_embd = t;
        else if (!strcmp(t->name, "output_norm.weight")) out->output_norm = t;
        else if (!strcmp(t->name, "output.weight")) out->output = t;
        else if (!strcmp(t->name, "rope_freqs.weight")) out->rope_freqs = t;
        else if (hp->arch == DI_LLAMA_ARCH_PHI3 && !strcmp(t->name, "rope_factors_short.weight")) out->rope_short = t;
        else if (hp->arch == DI_LLAMA_ARCH_PHI3 && !strcmp(t->name, "rope_factors_long.weight")) out->rope_long = t;
        else if (parse_layer_name(t->name, &layer, &part)) {
            if (layer >= hp->n_layers)
                return di_error_set(err, DI_ERR_FORMAT,
                                    "%s: tensor '%s' belongs to layer %" PRIu64 " but %s.block_count is %" PRIu32,
                                    gname(g), t->name, layer, arch, hp->n_layers);
            if (!part_shape(hp, part, &kind, ne))
                return di_error_set(err, DI_ERR_UNSUPPORTED,
                                    "%s: tensor '%s' is not part of the %s architecture%s as supported here",
                                    gname(g), t->name, arch, hp->n_expert ? " with experts" : "");
            *layer_slot(&out->layers[layer], part) = t;
        } else {
            return di_error_set(err, DI_ERR_UNSUPPORTED,
                                "%s: tensor '%s' is not part of the %s architecture as supported here", gname(g),
                                t->name, arch);
        }
    }
    return DI_OK;
}

static di_status check_layer(const di_gguf *g, const di_llama_hparams *hp, uint32_t il, di_llama_layer_tensors *l,
                             di_error *err) {
    for (int k = 0; k < N_PARTS; k++) {
        part_kind kind;
        int64_t ne[3];
        if (!part_shape(hp, k, &kind, ne)) continue;
        char name[NAME_MAX_LEN];
        snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", il, PART_NAMES[k]);
        di_status s = check_tensor3(g, name, *layer_slot(l, k), ne[0], ne[1], ne[2], kind == PK_NORM, err);
        if (s) return s;
    }
    return DI_OK;
}

di_status di_llama_validate_tensors(const di_gguf *g, const di_llama_hparams *hp, di_llama_tensors *out,
                                    di_error *err) {
    memset(out, 0, sizeof *out);
    if (hp->n_layers == 0 || hp->n_layers > DI_LLAMA_MAX_LAYERS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "%s: hyper-parameters not validated", gname(g));
    out->layers = di_calloc(hp->n_layers, sizeof *out->layers);
    if (!out->layers) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", gname(g));
    out->n_layers = hp->n_layers;
    di_status s = classify_tensors(g, hp, out, err);
    if (s) return s;
    if ((s = check_tensor(g, "token_embd.weight", out->token_embd, hp->n_embd, hp->n_vocab, false, err)) ||
        (s = check_tensor(g, "output_norm.weight", out->output_norm, hp->n_embd, 1, true, err)))
        return s;
    out->tied_output = out->output == NULL;
    if (out->tied_output) out->output = out->token_embd;
    else if ((s = check_tensor(g, "output.weight", out->output, hp->n_embd, hp->n_vocab, false, err)))
        return s;
    if (out->rope_freqs) {
        if ((s = check_tensor(g, "rope_freqs.weight", out->rope_freqs, hp->n_rot / 2, 1, true, err))) return s;
        if (out->rope_freqs->dtype != DI_DTYPE_F32)
            return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor 'rope_freqs.weight' must be f32", gname(g));
    }
    if (out->rope_short || out->rope_long) { /* phi3 LongRoPE: both, f32, one per rotary pair */
        if (out->rope_freqs)
            return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor 'rope_freqs.weight' beside LongRoPE factors",
                                gname(g));
        const char *names[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
        const di_gguf_tensor *ts[2] = {out->rope_short, out->rope_long};
        for (int i = 0; i < 2; i++) {
            if ((s = check_tensor(g, names[i], ts[i], hp->n_rot / 2, 1, true, err))) return s;
            if (ts[i]->dtype != DI_DTYPE_F32)
                return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor '%s' must be f32", gname(g), names[i]);
        }
    }
    for (uint32_t il = 0; il < hp->n_layers; il++)
        if ((s = check_layer(g, hp, il, &out->layers[il], err))) return s;
    return DI_OK;
}

void di_llama_tensors_free(di_llama_tensors *t) {
    if (!t) return;
    free(t->layers);
    memset(t, 0, sizeof *t);
}

/* ---- the part table for loaders of other layouts (model/llama_hf.c) ---- */

int di_llama_part_count(void) { return N_PARTS; }

const char *di_llama_part_name(int part) { return part >= 0 && part < N_PARTS ? PART_NAMES[part] : NULL; }

bool di_llama_part_shape(const di_llama_hparams *hp, int part, int64_t ne[3], bool *is_norm, bool *is_experts) {
    part_kind kind;
    if (part < 0 || part >= N_PARTS || !part_shape(hp, part, &kind, ne)) return false;
    *is_norm = kind == PK_NORM;
    *is_experts = kind == PK_EXPS;
    return true;
}

const di_gguf_tensor **di_llama_layer_slot(di_llama_layer_tensors *l, int part) {
    return part >= 0 && part < N_PARTS ? layer_slot(l, part) : NULL;
}
