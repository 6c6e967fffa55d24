/* llama hyper-parameters and tensor validation (see llama_hparams.h).
 * Key names follow the GGUF spec / llama.cpp conventions ("llama.<key>"). */
#include "model/llama_hparams.h"

#include "base/alloc.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROPE_FREQ_BASE_DEFAULT 10000.0f
#define KEY_MAX 96

/* ---- key helpers: the file name and key appear in every message -------- */

static const char *gname(const di_gguf *g) { return di_gguf_name(g); }

/* Keys are written "llama.<key>" in this file; a Gemma 3 file stores the
 * same keys as "gemma3.<key>" (llama.cpp's convention: the architecture
 * name is the prefix). akey rewrites the prefix to the file's own. */
static const char *akey(const di_gguf *g, const char *key, char buf[KEY_MAX]) {
    di_gguf_str arch;
    if (strncmp(key, "llama.", 6) != 0 || di_gguf_get_str(g, "general.architecture", &arch, NULL) != DI_OK ||
        arch.len == 0 || arch.len > 32 || (arch.len == 5 && !memcmp(arch.ptr, "llama", 5)))
        return key;
    snprintf(buf, KEY_MAX, "%.*s.%s", (int)arch.len, arch.ptr, key + 6);
    return buf;
}

static const di_gguf_kv *kv_find(const di_gguf *g, const char *key) {
    char b[KEY_MAX];
    return di_gguf_find_kv(g, akey(g, key, b));
}
static di_status kv_get_u32(const di_gguf *g, const char *key, uint32_t *out, di_error *err) {
    char b[KEY_MAX];
    return di_gguf_get_u32(g, akey(g, key, b), out, err);
}
static di_status kv_get_f32(const di_gguf *g, const char *key, float *out, di_error *err) {
    char b[KEY_MAX];
    return di_gguf_get_f32(g, akey(g, key, b), out, err);
}
static di_status kv_get_str(const di_gguf *g, const char *key, di_gguf_str *out, di_error *err) {
    char b[KEY_MAX];
    return di_gguf_get_str(g, akey(g, key, b), out, err);
}

/* A required integer key: absent is a format error, not "not found". */
static di_status req_u32(const di_gguf *g, const char *key, uint32_t *out, di_error *err) {
    di_status s = kv_get_u32(g, key, out, err);
    if (s == DI_ERR_NOT_FOUND)
        return di_error_set(err, DI_ERR_FORMAT, "%s: required kv '%s' is missing", gname(g), key);
    return s;
}

/* An optional integer key: *out keeps def when absent. */
static di_status opt_u32(const di_gguf *g, const char *key, uint32_t def, uint32_t *out,
                         di_error *err) {
    *out = def;
    if (!kv_find(g, key)) return DI_OK;
    return kv_get_u32(g, key, out, err);
}

static di_status opt_f32(const di_gguf *g, const char *key, float def, float *out, di_error *err) {
    *out = def;
    if (!kv_find(g, key)) return DI_OK;
    return kv_get_f32(g, key, out, err);
}

static di_status in_range(const di_gguf *g, const char *key, uint64_t v, uint64_t lo, uint64_t hi,
                          di_error *err) {
    if (v < lo || v > hi)
        return di_error_set(err, DI_ERR_RANGE, "%s: kv '%s' is %" PRIu64 ", expected %" PRIu64
                            "..%" PRIu64, gname(g), key, v, lo, hi);
    return DI_OK;
}

static bool str_eq(di_gguf_str s, const char *lit) {
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* ---- hyper-parameters --------------------------------------------------- */

/* The GGUF architecture names this forward runs (llama.cpp's names, which
 * are also the key prefix) and how each rotates: llama.cpp's converter
 * permutes llama's q/k rows for adjacent pairs and leaves every other
 * family's as HF has them (rotate halves, LLAMA_ROPE_TYPE_NEOX). */
static const struct {
    const char *name;
    bool neox;
} ARCHS[DI_LLAMA_ARCH_COUNT] = {
    [DI_LLAMA_ARCH_LLAMA] = {"llama", false},      [DI_LLAMA_ARCH_GEMMA3] = {"gemma3", true},
    [DI_LLAMA_ARCH_QWEN2] = {"qwen2", true},       [DI_LLAMA_ARCH_QWEN3] = {"qwen3", true},
    [DI_LLAMA_ARCH_QWEN3MOE] = {"qwen3moe", true}, [DI_LLAMA_ARCH_PHI3] = {"phi3", true},
};

const char *di_llama_arch_name(di_llama_arch a) {
    return (unsigned)a < DI_LLAMA_ARCH_COUNT ? ARCHS[a].name : "unknown";
}
bool di_llama_arch_rope_neox(di_llama_arch a) { return (unsigned)a < DI_LLAMA_ARCH_COUNT && ARCHS[a].neox; }
const char *di_llama_arch_list(void) { return "llama, gemma3, qwen2, qwen3, qwen3moe, phi3"; }

bool di_llama_arch_from_name(const char *name, size_t len, di_llama_arch *out) {
    for (int a = 0; a < DI_LLAMA_ARCH_COUNT; a++)
        if (strlen(ARCHS[a].name) == len && !memcmp(ARCHS[a].name, name, len)) {
            *out = (di_llama_arch)a;
            return true;
        }
    return false;
}

static di_status read_arch(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    di_gguf_str arch;
    di_status s = di_gguf_get_str(g, "general.architecture", &arch, err);
    if (s == DI_ERR_NOT_FOUND)
        return di_error_set(err, DI_ERR_FORMAT, "%s: required kv 'general.architecture' is missing",
                            gname(g));
    if (s) return s;
    if (!di_llama_arch_from_name(arch.ptr, arch.len, &hp->arch)) {
        int n = arch.len > 64 ? 64 : (int)arch.len;
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "%s: kv 'general.architecture' is '%.*s', supported: %s",
                            gname(g), n, arch.ptr, di_llama_arch_list());
    }
    return DI_OK;
}

/* Routed experts (llama.cpp's names): llama.expert_count experts, the top
 * llama.expert_used_count of a softmax over the router's logits per token,
 * their weights renormalized to sum 1: llama.cpp's llama (Mixtral) and
 * qwen3moe graphs always do (HF Mixtral: softmax over the top-k logits, the
 * same numbers; Qwen3-MoE: norm_topk_prob, true in every released config);
 * a file whose llama.expert_weights_norm says false is followed.
 * An expert's width is llama.expert_feed_forward_length (qwen3moe), else
 * the dense llama.feed_forward_length (Mixtral). No shared expert: a file
 * with expert_shared_count > 0 is another architecture. */
static di_status read_expert_params(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    di_status s;
    hp->n_expert = hp->n_expert_used = 0;
    hp->n_ff_exp = hp->n_ff;
    hp->expert_weights_norm = false;
    if ((s = opt_u32(g, "llama.expert_count", 0, &hp->n_expert, err)) ||
        (s = in_range(g, "llama.expert_count", hp->n_expert, 0, DI_LLAMA_MAX_EXPERTS, err)))
        return s;
    bool moe_arch = hp->arch == DI_LLAMA_ARCH_QWEN3MOE;
    if (hp->n_expert == 0) {
        if (moe_arch)
            return di_error_set(err, DI_ERR_FORMAT, "%s: required kv 'llama.expert_count' is missing", gname(g));
        return DI_OK;
    }
    if (hp->arch != DI_LLAMA_ARCH_LLAMA && !moe_arch)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: kv 'llama.expert_count': experts on %s are not supported",
                            gname(g), di_llama_arch_name(hp->arch));
    uint32_t shared = 0;
    if ((s = req_u32(g, "llama.expert_used_count", &hp->n_expert_used, err)) ||
        (s = in_range(g, "llama.expert_used_count", hp->n_expert_used, 1, hp->n_expert, err)) ||
        (s = opt_u32(g, "llama.expert_shared_count", 0, &shared, err)) ||
        (s = opt_u32(g, "llama.expert_feed_forward_length", hp->n_ff, &hp->n_ff_exp, err)) ||
        (s = in_range(g, "llama.expert_feed_forward_length", hp->n_ff_exp, 1, DI_LLAMA_MAX_FF, err)))
        return s;
    if (shared > 0)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: kv 'llama.expert_shared_count' is %" PRIu32
                            ": shared experts are not supported", gname(g), shared);
    hp->expert_weights_norm = true;
    const di_gguf_kv *norm = kv_find(g, "llama.expert_weights_norm");
    if (norm) {
        if (norm->type != DI_GGUF_BOOL)
            return di_error_set(err, DI_ERR_FORMAT, "%s: kv 'llama.expert_weights_norm' is not a bool", gname(g));
        hp->expert_weights_norm = norm->val.b;
    }
    return DI_OK;
}

static di_status read_shape_params(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    di_status s;
    if ((s = req_u32(g, "llama.block_count", &hp->n_layers, err)) ||
        (s = in_range(g, "llama.block_count", hp->n_layers, 1, DI_LLAMA_MAX_LAYERS, err)) ||
        (s = req_u32(g, "llama.embedding_length", &hp->n_embd, err)) ||
        (s = in_range(g, "llama.embedding_length", hp->n_embd, 1, DI_LLAMA_MAX_EMBD, err)) ||
        (s = req_u32(g, "llama.attention.head_count", &hp->n_heads, err)) ||
        (s = in_range(g, "llama.attention.head_count", hp->n_heads, 1, DI_LLAMA_MAX_HEADS, err)) ||
        (s = opt_u32(g, "llama.attention.head_count_kv", hp->n_heads, &hp->n_heads_kv, err)) ||
        (s = in_range(g, "llama.attention.head_count_kv", hp->n_heads_kv, 1, hp->n_heads, err)) ||
        (s = req_u32(g, "llama.feed_forward_length", &hp->n_ff, err)) ||
        (s = in_range(g, "llama.feed_forward_length", hp->n_ff, 1, DI_LLAMA_MAX_FF, err)) ||
        (s = req_u32(g, "llama.context_length", &hp->n_ctx_train, err)) ||
        (s = in_range(g, "llama.context_length", hp->n_ctx_train, 1, DI_LLAMA_MAX_CTX, err)))
        return s;
    if (hp->n_heads % hp->n_heads_kv != 0)
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: kv 'llama.attention.head_count_kv' (%" PRIu32
                            ") does not divide head_count (%" PRIu32 ")",
                            gname(g), hp->n_heads_kv, hp->n_heads);

    /* Head width: explicit key_length (then value_length must match; the
     * attention kernels assume one width), else hidden / heads. */
    if (kv_find(g, "llama.attention.key_length")) {
        uint32_t vlen;
        if ((s = req_u32(g, "llama.attention.key_length", &hp->head_dim, err)) ||
            (s = opt_u32(g, "llama.attention.value_length", hp->head_dim, &vlen, err)))
            return s;
        if (vlen != hp->head_dim)
            return di_error_set(err, DI_ERR_UNSUPPORTED,
                                "%s: kv 'llama.attention.value_length' (%" PRIu32
                                ") differs from key_length (%" PRIu32 ")",
                                gname(g), vlen, hp->head_dim);
    } else {
        if (hp->n_embd % hp->n_heads != 0)
            return di_error_set(err, DI_ERR_RANGE,
                                "%s: kv 'llama.attention.head_count' (%" PRIu32
                                ") does not divide embedding_length (%" PRIu32 ")",
                                gname(g), hp->n_heads, hp->n_embd);
        hp->head_dim = hp->n_embd / hp->n_heads;
    }
    if (hp->head_dim == 0 || hp->head_dim > DI_LLAMA_MAX_HEAD_DIM || hp->head_dim % 2 != 0)
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: head dimension is %" PRIu32 ", expected an even number in 2..%u "
                            "(rotary pairs)",
                            gname(g), hp->head_dim, DI_LLAMA_MAX_HEAD_DIM);
    if ((s = opt_u32(g, "llama.rope.dimension_count", hp->head_dim, &hp->n_rot, err))) return s;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: kv 'llama.rope.dimension_count' is %" PRIu32
                            ", expected an even number in 2..%" PRIu32 " (head dimension)",
                            gname(g), hp->n_rot, hp->head_dim);
    return DI_OK;
}

static di_status read_float_params(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    di_status s = kv_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps, err);
    if (s == DI_ERR_NOT_FOUND)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: required kv 'llama.attention.layer_norm_rms_epsilon' is missing",
                            gname(g));
    if (s) return s;
    /* eps must keep 1/sqrt(mean + eps) finite and must not swamp the mean. */
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: kv 'llama.attention.layer_norm_rms_epsilon' is %g, expected "
                            "0 < eps < 1",
                            gname(g), (double)hp->rms_eps);
    if ((s = opt_f32(g, "llama.rope.freq_base", ROPE_FREQ_BASE_DEFAULT, &hp->rope_freq_base, err)))
        return s;
    if (!(hp->rope_freq_base > 1.0f && isfinite(hp->rope_freq_base)))
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: kv 'llama.rope.freq_base' is %g, expected a finite value > 1",
                            gname(g), (double)hp->rope_freq_base);

    /* Rope scaling: the current keys, or the older scale_linear. */
    hp->rope_scaling = DI_LLAMA_ROPE_SCALING_NONE;
    hp->rope_scaling_factor = 1.0f;
    hp->rope_scaling_orig_ctx = hp->n_ctx_train;
    di_gguf_str type;
    if (kv_find(g, "llama.rope.scaling.type")) {
        if ((s = kv_get_str(g, "llama.rope.scaling.type", &type, err))) return s;
        if (str_eq(type, "linear")) hp->rope_scaling = DI_LLAMA_ROPE_SCALING_LINEAR;
        else if (str_eq(type, "yarn")) hp->rope_scaling = DI_LLAMA_ROPE_SCALING_YARN;
        else if (!str_eq(type, "none")) {
            int n = type.len > 32 ? 32 : (int)type.len;
            return di_error_set(err, DI_ERR_UNSUPPORTED,
                                "%s: kv 'llama.rope.scaling.type' is '%.*s', supported: none, "
                                "linear, yarn",
                                gname(g), n, type.ptr);
        }
        if ((s = opt_f32(g, "llama.rope.scaling.factor", 1.0f, &hp->rope_scaling_factor, err)))
            return s;
    } else if (kv_find(g, "llama.rope.scale_linear")) {
        hp->rope_scaling = DI_LLAMA_ROPE_SCALING_LINEAR;
        if ((s = kv_get_f32(g, "llama.rope.scale_linear", &hp->rope_scaling_factor, err)))
            return s;
    }
    if (!(hp->rope_scaling_factor >= 1.0f && hp->rope_scaling_factor <= 1024.0f))
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: rope scaling factor is %g, expected 1..1024", gname(g),
                            (double)hp->rope_scaling_factor);
    if ((s = opt_u32(g, "llama.rope.scaling.original_context_length", hp->n_ctx_train,
                     &hp->rope_scaling_orig_ctx, err)) ||
        (s = in_range(g, "llama.rope.scaling.original_context_length", hp->rope_scaling_orig_ctx,
                      1, DI_LLAMA_MAX_CTX, err)))
        return s;
    return DI_OK;
}

/* Array kv that, when present, must hold n elements of the given type. */
static di_status check_token_array(const di_gguf *g, const char *key, int want_type, uint64_t n,
                                   di_error *err) {
    const di_gguf_kv *kv = di_gguf_find_kv(g, key);
    if (!kv) return DI_OK;
    if (kv->type != DI_GGUF_ARRAY || (want_type >= 0 && kv->arr_type != (di_gguf_type)want_type))
        return di_error_set(err, DI_ERR_FORMAT, "%s: kv '%s' is not an array of %s", gname(g), key,
                            want_type >= 0 ? di_gguf_type_name((di_gguf_type)want_type) : "values");
    if (n != UINT64_MAX && kv->arr_len != n)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: kv '%s' has %" PRIu64 " entries, tokenizer.ggml.tokens has %" PRIu64,
                            gname(g), key, kv->arr_len, n);
    return DI_OK;
}

static di_status read_vocab(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    di_status s;
    const di_gguf_kv *tokens = di_gguf_find_kv(g, "tokenizer.ggml.tokens");
    hp->n_tokens = 0;
    if (tokens) {
        if ((s = check_token_array(g, "tokenizer.ggml.tokens", DI_GGUF_STRING, UINT64_MAX, err)))
            return s;
        if ((s = in_range(g, "tokenizer.ggml.tokens (length)", tokens->arr_len, 1,
                          DI_LLAMA_MAX_VOCAB, err)))
            return s;
        hp->n_tokens = (uint32_t)tokens->arr_len;
        if ((s = check_token_array(g, "tokenizer.ggml.token_type", -1, hp->n_tokens, err)) ||
            (s = check_token_array(g, "tokenizer.ggml.scores", -1, hp->n_tokens, err)) ||
            (s = check_token_array(g, "tokenizer.ggml.merges", DI_GGUF_STRING, UINT64_MAX, err)))
            return s;
    }
    if (kv_find(g, "llama.vocab_size")) {
        if ((s = kv_get_u32(g, "llama.vocab_size", &hp->n_vocab, err)) ||
            (s = in_range(g, "llama.vocab_size", hp->n_vocab, 1, DI_LLAMA_MAX_VOCAB, err)))
            return s;
        /* The embedding may be padded past the token list, never shorter. */
        if (hp->n_tokens > hp->n_vocab)
            return di_error_set(err, DI_ERR_RANGE,
                                "%s: tokenizer.ggml.tokens has %" PRIu32
                                " entries, more than llama.vocab_size (%" PRIu32 ")",
                                gname(g), hp->n_tokens, hp->n_vocab);
    } else if (hp->n_tokens > 0) {
        hp->n_vocab = hp->n_tokens;
    } else {
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: no vocabulary size: neither 'tokenizer.ggml.tokens' nor "
                            "'llama.vocab_size' is present",
                            gname(g));
    }
    return DI_OK;
}

/* Reads one special token id. Every tokenizer.ggml.*_token_id key is range
 * checked by check_all_token_ids; this only stores the named ones. */
static di_status read_token_id(const di_gguf *g, const char *key, int32_t *out, di_error *err) {
    *out = -1;
    if (!di_gguf_find_kv(g, key)) return DI_OK;
    int64_t v;
    di_status s = di_gguf_get_i64(g, key, &v, err);
    if (s) return s;
    *out = (int32_t)v; /* in range: checked before */
    return DI_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static di_status check_all_token_ids(const di_gguf *g, const di_llama_hparams *hp, di_error *err) {
    uint64_t limit = hp->n_tokens ? hp->n_tokens : hp->n_vocab;
    for (uint64_t i = 0; i < di_gguf_kv_count(g); i++) {
        const char *key = di_gguf_kv_at(g, i)->key;
        if (strncmp(key, "tokenizer.ggml.", 15) != 0 || !ends_with(key, "_token_id")) continue;
        int64_t v;
        di_status s = di_gguf_get_i64(g, key, &v, err);
        if (s) return s;
        if (v < 0 || (uint64_t)v >= limit)
            return di_error_set(err, DI_ERR_RANGE,
                                "%s: kv '%s' is %" PRId64 ", outside the vocabulary (0..%" PRIu64 ")",
                                gname(g), key, v, limit - 1);
    }
    return DI_OK;
}

static di_status read_special_tokens(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    di_status s = check_all_token_ids(g, hp, err);
    if (s) return s;
    di_llama_special_tokens *t = &hp->tok;
    int32_t sep2;
    if ((s = read_token_id(g, "tokenizer.ggml.bos_token_id", &t->bos, err)) ||
        (s = read_token_id(g, "tokenizer.ggml.eos_token_id", &t->eos, err)) ||
        (s = read_token_id(g, "tokenizer.ggml.unknown_token_id", &t->unk, err)) ||
        (s = read_token_id(g, "tokenizer.ggml.padding_token_id", &t->pad, err)) ||
        /* llama.cpp writes the misspelled key; accept both. */
        (s = read_token_id(g, "tokenizer.ggml.seperator_token_id", &t->sep, err)) ||
        (s = read_token_id(g, "tokenizer.ggml.separator_token_id", &sep2, err)) ||
        (s = read_token_id(g, "tokenizer.ggml.eot_token_id", &t->eot, err)) ||
        (s = read_token_id(g, "tokenizer.ggml.eom_token_id", &t->eom, err)))
        return s;
    if (t->sep < 0) t->sep = sep2;
    return DI_OK;
}

/* Gemma 3 (llama.cpp's gemma3 graph, HF Gemma3TextModel): the same block
 * with extra pieces, each read here or fixed by the architecture:
 *   - local (sliding-window) layers and global ones: layer il is global when
 *     (il + 1) % swa_period == 0 (gemma3.attention.sliding_window_pattern
 *     when the file has it, else 6, as llama.cpp and the HF config use);
 *     local layers see the last sliding_window positions (itself included)
 *     and rotate with base 10000 (HF rope_local_base_freq; llama.cpp fixes
 *     it too), global ones with gemma3.rope.freq_base;
 *   - queries scaled by 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim
 *     for every released size but 27B, whose GGUF sets key_length so the
 *     same rule holds through attention.scale when present);
 *   - embeddings scaled by sqrt(n_embd); final logit soft-capping when
 *     gemma3.final_logit_softcapping is present.
 * Attention logit soft-capping (Gemma 2) is refused: not implemented. */
#define GEMMA3_SWA_PERIOD_DEFAULT 6u
#define GEMMA3_ROPE_BASE_LOCAL 10000.0f

static di_status read_gemma_params(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->final_softcap = 0.0f;
    hp->sliding_window = 0;
    hp->swa_period = 0;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    di_status s;
    if (hp->arch == DI_LLAMA_ARCH_LLAMA) {
        /* Mistral 7B v0.1's window (HF sliding_window: every layer sees the
         * last N keys, itself included) under llama.cpp's key name; llama.cpp's
         * converter does not write it and its llama graph ignores it, so only
         * files that carry the key get it. swa_period 0 = every layer local. */
        return (s = opt_u32(g, "llama.attention.sliding_window", 0, &hp->sliding_window, err)) ? s
               : in_range(g, "llama.attention.sliding_window", hp->sliding_window, 0, DI_LLAMA_MAX_CTX, err);
    }
    if (hp->arch != DI_LLAMA_ARCH_GEMMA3) return DI_OK;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->rope_freq_base_swa = GEMMA3_ROPE_BASE_LOCAL;
    if ((s = opt_u32(g, "llama.attention.sliding_window", 0, &hp->sliding_window, err)) ||
        (s = in_range(g, "llama.attention.sliding_window", hp->sliding_window, 0, DI_LLAMA_MAX_CTX, err)) ||
        (s = opt_u32(g, "llama.attention.sliding_window_pattern", GEMMA3_SWA_PERIOD_DEFAULT, &hp->swa_period,
                     err)) ||
        (s = in_range(g, "llama.attention.sliding_window_pattern", hp->swa_period, 1, DI_LLAMA_MAX_LAYERS, err)) ||
        (s = opt_f32(g, "llama.attention.scale", hp->attn_scale, &hp->attn_scale, err)) ||
        (s = opt_f32(g, "llama.final_logit_softcapping", 0.0f, &hp->final_softcap, err)))
        return s;
    if (kv_find(g, "llama.attn_logit_softcapping"))
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "%s: kv 'llama.attn_logit_softcapping': attention soft-capping is not supported",
                            gname(g));
    if (!(hp->attn_scale > 0.0f && hp->attn_scale <= 1.0f))
        return di_error_set(err, DI_ERR_RANGE, "%s: kv 'llama.attention.scale' is %g, expected 0 < scale <= 1",
                            gname(g), (double)hp->attn_scale);
    if (!(hp->final_softcap >= 0.0f && hp->final_softcap < 1e6f))
        return di_error_set(err, DI_ERR_RANGE,
                            "%s: kv 'llama.final_logit_softcapping' is %g, expected 0 (none) .. 1e6", gname(g),
                            (double)hp->final_softcap);
    if (hp->rope_scaling != DI_LLAMA_ROPE_SCALING_NONE)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "%s: rope scaling on gemma3 (global layers only) is not supported", gname(g));
    return DI_OK;
}

/* Phi-3's LongRoPE (Phi-3-mini-128k, Phi-3.5): llama.cpp's converter
 * writes the two factor tensors (llama_tensors.c) and
 * phi3.rope.scaling.attn_factor = sqrt(1 + ln(s) / ln(original context))
 * for s = context / original context; both RoPE implementations multiply
 * cos and sin by it, i.e. q.k by its square, which is where it goes here. */
static di_status read_phi3_params(const di_gguf *g, di_llama_hparams *hp, di_error *err) {
    hp->rope_attn_factor = 1.0f;
    if (hp->arch != DI_LLAMA_ARCH_PHI3) return DI_OK;
    di_status s = opt_f32(g, "llama.rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor, err);
    if (s) return s;
    if (!(hp->rope_attn_factor >= 1.0f && hp->rope_attn_factor <= 4.0f))
        return di_error_set(err, DI_ERR_RANGE, "%s: kv 'llama.rope.scaling.attn_factor' is %g, expected 1..4", gname(g),
                            (double)hp->rope_attn_factor);
    hp->attn_scale *= hp->rope_attn_factor * hp->rope_attn_factor;
    return DI_OK;
}

/* Messages name keys as "llama.<key>"; for another architecture the
 * prefix the file really uses is put back (one place instead of a format
 * argument in every message). */
static void name_keys_for_arch(const di_llama_hparams *hp, di_error *err) {
    if (!err) return;
    const char *pre = di_llama_arch_name(hp->arch);
    char out[sizeof err->msg];
    size_t o = 0;
    for (const char *p = err->msg; *p && o + 1 < sizeof out;) {
        if (!strncmp(p, "'llama.", 7)) {
            int n = snprintf(out + o, sizeof out - o, "'%s.", pre);
            if (n < 0 || (size_t)n >= sizeof out - o) break;
            o += (size_t)n;
            p += 7;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = 0;
    memcpy(err->msg, out, o + 1);
}

bool di_llama_layer_is_local(const di_llama_hparams *hp, uint32_t il) {
    return hp->sliding_window > 0 && (hp->swa_period == 0 || (il + 1) % hp->swa_period != 0);
}

di_status di_llama_hparams_from_gguf(const di_gguf *g, di_llama_hparams *out, di_error *err) {
    di_llama_hparams hp;
    memset(&hp, 0, sizeof hp);
    di_status s;
    if ((s = read_arch(g, &hp, err)) || (s = read_shape_params(g, &hp, err)) ||
        (s = read_float_params(g, &hp, err)) || (s = read_gemma_params(g, &hp, err)) ||
        (s = read_expert_params(g, &hp, err)) || (s = read_phi3_params(g, &hp, err)) ||
        (s = read_vocab(g, &hp, err)) || (s = read_special_tokens(g, &hp, err))) {
        if (hp.arch != DI_LLAMA_ARCH_LLAMA) name_keys_for_arch(&hp, err);
        return s;
    }
    *out = hp;
    return DI_OK;
}

const char *di_llama_rope_scaling_name(di_llama_rope_scaling s) {
    switch (s) {
    case DI_LLAMA_ROPE_SCALING_NONE: return "none";
    case DI_LLAMA_ROPE_SCALING_LINEAR: return "linear";
    case DI_LLAMA_ROPE_SCALING_YARN: return "yarn";
    }
    return "unknown";
}
