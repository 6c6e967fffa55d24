/* HF folders of the llama family (llama_hf.h). Three steps:
 *   1. config.json -> di_llama_hparams (read_hparams), the keys mapped as
 *      llama.cpp's convert_hf_to_gguf.py maps them to GGUF keys;
 *   2. every checkpoint tensor named by the family's HF name -> the GGUF
 *      part of llama_tensors.c's table it is (classify), unknown ones refused;
 *   3. every part the variant has checked present, shaped and typed
 *      (check_layer), wrapped as a di_gguf_tensor over the mapping, and the
 *      whole bound by di_llama_load_parts. */
#include "model/llama_hf.h"

#include "base/alloc.h"
#include "format/hf_config.h"
#include "format/safetensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_LEN 192 /* an HF tensor name with "model.layers.N." in front */
#define MAX_EOS_IDS 64 /* eos_token_id lists (Llama 3.1 has 3) */

typedef enum family {
    F_LLAMA, F_MISTRAL, F_MIXTRAL, F_QWEN2, F_QWEN3, F_QWEN3MOE, F_PHI3, F_GEMMA3, N_FAMILIES
} family;

static const struct {
    const char *cls;
    di_llama_arch arch;
} FAMILY[N_FAMILIES] = {
    [F_LLAMA] = {"LlamaForCausalLM", DI_LLAMA_ARCH_LLAMA},     [F_MISTRAL] = {"MistralForCausalLM", DI_LLAMA_ARCH_LLAMA},
    [F_MIXTRAL] = {"MixtralForCausalLM", DI_LLAMA_ARCH_LLAMA}, [F_QWEN2] = {"Qwen2ForCausalLM", DI_LLAMA_ARCH_QWEN2},
    [F_QWEN3] = {"Qwen3ForCausalLM", DI_LLAMA_ARCH_QWEN3},     [F_QWEN3MOE] = {"Qwen3MoeForCausalLM", DI_LLAMA_ARCH_QWEN3MOE},
    [F_PHI3] = {"Phi3ForCausalLM", DI_LLAMA_ARCH_PHI3},        [F_GEMMA3] = {"Gemma3ForCausalLM", DI_LLAMA_ARCH_GEMMA3},
};

const char *di_llama_hf_arch_list(void) {
    return "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "Qwen3MoeForCausalLM, Phi3ForCausalLM, Gemma3ForCausalLM";
}

/* Per-layer HF names (after "model.layers.<N>.") of the GGUF parts, by
 * family; "%u" is the expert. A part the variant does not have (phi3's
 * q_proj, qwen3's biases) is not looked up even if listed. */
#define ALL ((1u << N_FAMILIES) - 1)
#define FAM(f) (1u << (f))
static const struct {
    const char *part, *hf;
    unsigned families;
} LAYER_NAMES[] = {
    {"attn_norm.weight", "input_layernorm.weight", ALL},
    {"attn_q.weight", "self_attn.q_proj.weight", ALL},
    {"attn_k.weight", "self_attn.k_proj.weight", ALL},
    {"attn_v.weight", "self_attn.v_proj.weight", ALL},
    {"attn_output.weight", "self_attn.o_proj.weight", ALL},
    {"attn_q.bias", "self_attn.q_proj.bias", ALL},
    {"attn_k.bias", "self_attn.k_proj.bias", ALL},
    {"attn_v.bias", "self_attn.v_proj.bias", ALL},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", ALL},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", ALL},
    {"attn_qkv.weight", "self_attn.qkv_proj.weight", ALL},
    {"ffn_norm.weight", "post_attention_layernorm.weight", ALL & ~FAM(F_GEMMA3)},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", FAM(F_GEMMA3)},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", FAM(F_GEMMA3)},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", FAM(F_GEMMA3)},
    {"ffn_gate.weight", "mlp.gate_proj.weight", ALL},
    {"ffn_up.weight", "mlp.up_proj.weight", ALL & ~FAM(F_PHI3)},
    {"ffn_up.weight", "mlp.gate_up_proj.weight", FAM(F_PHI3)},
    {"ffn_down.weight", "mlp.down_proj.weight", ALL},
    {"ffn_gate_inp.weight", "mlp.gate.weight", FAM(F_QWEN3MOE)},
    {"ffn_gate_exps.weight", "mlp.experts.%u.gate_proj.weight", FAM(F_QWEN3MOE)},
    {"ffn_up_exps.weight", "mlp.experts.%u.up_proj.weight", FAM(F_QWEN3MOE)},
    {"ffn_down_exps.weight", "mlp.experts.%u.down_proj.weight", FAM(F_QWEN3MOE)},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", FAM(F_MIXTRAL)},
    {"ffn_gate_exps.weight", "block_sparse_moe.experts.%u.w1.weight", FAM(F_MIXTRAL)},
    {"ffn_up_exps.weight", "block_sparse_moe.experts.%u.w3.weight", FAM(F_MIXTRAL)},
    {"ffn_down_exps.weight", "block_sparse_moe.experts.%u.w2.weight", FAM(F_MIXTRAL)},
};
#define N_LAYER_NAMES (sizeof LAYER_NAMES / sizeof LAYER_NAMES[0])

struct di_llama_hf {
    di_safetensors_checkpoint *ck;
    void **owned; /* (n_owned) buffers and tensor structs the weights point into */
    size_t n_owned;
};

/* What the config says beyond di_llama_hparams: the RoPE tables to build. */
typedef struct rope_extra {
    bool llama3;
    double factor, low_freq_factor, high_freq_factor, orig_ctx;
    bool longrope;
    double *short_factor, *long_factor; /* (n_rot / 2) each, owned by the caller */
} rope_extra;

/* ---- holder ---------------------------------------------------------------- */

static void *own(di_llama_hf *h, void *p) {
    if (!p) return NULL;
    void **list = di_realloc_array(h->owned, h->n_owned + 1, sizeof *list);
    if (!list) {
        free(p);
        return NULL;
    }
    h->owned = list;
    h->owned[h->n_owned++] = p;
    return p;
}

void di_llama_hf_free(di_llama_hf *h) {
    if (!h) return;
    for (size_t i = 0; i < h->n_owned; i++) free(h->owned[i]);
    free(h->owned);
    di_safetensors_checkpoint_close(h->ck);
    free(h);
}

/* A tensor of the model as the llama binder takes it: ne in ggml order over
 * data (copied into an aligned buffer of the holder when copy or when data is
 * not 4-byte aligned). */
static di_status wrap(di_llama_hf *h, const char *name, di_dtype dt, int64_t ne0, int64_t ne1, int64_t ne2,
                      const void *data, uint64_t n_bytes, bool copy, const di_gguf_tensor **out, di_error *err) {
    di_gguf_tensor *t = own(h, di_calloc(1, sizeof *t));
    char *nm = t ? own(h, di_strdup(name)) : NULL;
    if (!nm) return di_error_set(err, DI_ERR_NOMEM, "tensor '%s': out of memory", name);
    if (copy || (uintptr_t)data % 4 != 0) {
        void *buf = own(h, malloc(n_bytes ? (size_t)n_bytes : 1));
        if (!buf) return di_error_set(err, DI_ERR_NOMEM, "tensor '%s': out of memory for %" PRIu64 " bytes", name, n_bytes);
        if (data) memcpy(buf, data, (size_t)n_bytes);
        data = buf;
    }
    t->name = nm;
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->dtype = dt;
    t->n_elems = (uint64_t)ne0 * (uint64_t)ne1 * (uint64_t)ne2;
    t->n_bytes = n_bytes;
    t->data = data;
    *out = t;
    return DI_OK;
}

/* n floats as an f32 tensor of the holder (norms + 1, RoPE tables) */
static di_status wrap_f32(di_llama_hf *h, const char *name, const float *v, int64_t n, const di_gguf_tensor **out,
                          di_error *err) {
    return wrap(h, name, DI_DTYPE_F32, n, 1, 1, v, (uint64_t)n * sizeof(float), true, out, err);
}

/* ---- config ---------------------------------------------------------------- */

#define GET_U32(key, lo, hi, dst)                                                      \
    do {                                                                               \
        int64_t v_;                                                                    \
        if ((s = di_hf_config_get_int(c, key, lo, hi, &v_, err))) return s;            \
        (dst) = (uint32_t)v_;                                                          \
    } while (0)
#define GET_U32_OR(key, lo, hi, def, dst)                                              \
    do {                                                                               \
        int64_t v_;                                                                    \
        if ((s = di_hf_config_get_int_or(c, key, lo, hi, def, &v_, err))) return s;    \
        (dst) = (uint32_t)v_;                                                          \
    } while (0)
#define GET_F32_OR(cfg, key, lo, hi, def, dst)                                         \
    do {                                                                               \
        double v_;                                                                     \
        if ((s = di_hf_config_get_float_or(cfg, key, lo, hi, def, &v_, err))) return s; \
        (dst) = (float)v_;                                                             \
    } while (0)

static di_status unsupported(const di_hf_config *c, const char *what, di_error *err) {
    return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: %s is not supported", di_hf_config_name(c), what);
}

static di_status token_id(const di_hf_config *c, const char *key, uint32_t n_vocab, int32_t *out, di_error *err) {
    int64_t ids[MAX_EOS_IDS];
    size_t n = 0;
    *out = -1;
    if (!di_hf_config_has(c, key)) return DI_OK;
    di_status s = di_hf_config_get_token_ids(c, key, 0, (int64_t)n_vocab - 1, ids, MAX_EOS_IDS, &n, err);
    if (s == DI_OK && n > 0) *out = (int32_t)ids[0];
    return s;
}

/* the RoPE dimensions' factor list of a rope_scaling section */
static di_status factor_list(const di_hf_config *rs, const char *key, uint32_t n_pairs, double **out, di_error *err) {
    *out = di_malloc_array(n_pairs ? n_pairs : 1, sizeof(double));
    if (!*out) return di_error_set(err, DI_ERR_NOMEM, "config: out of memory");
    size_t n = 0;
    di_status s = di_hf_config_get_float_array(rs, key, 1e-3, 1e6, *out, n_pairs, &n, err);
    if (s == DI_OK && n != n_pairs)
        s = di_error_set(err, DI_ERR_FORMAT, "%s: rope_scaling.%s has %zu entries, expected %u (rotary dims / 2)",
                         di_hf_config_name(rs), key, n, n_pairs);
    return s;
}

/* rope_scaling: none / default, linear, llama3, longrope (phi3). */
static di_status read_rope_scaling(const di_hf_config *c, family f, di_llama_hparams *hp, rope_extra *x,
                                   di_error *err) {
    di_status s;
    hp->rope_scaling = DI_LLAMA_ROPE_SCALING_NONE;
    hp->rope_scaling_factor = 1.0f;
    hp->rope_scaling_orig_ctx = hp->n_ctx_train;
    hp->rope_attn_factor = 1.0f;
    if (!di_hf_config_has(c, "rope_scaling")) return DI_OK;
    di_hf_config *rs = NULL;
    if ((s = di_hf_config_section(c, "rope_scaling", &rs, err))) return s;
    static const char *const KINDS[] = {"default", "linear", "llama3", "longrope"};
    int kind = 0;
    const char *key = di_hf_config_has(rs, "rope_type") ? "rope_type" : "type";
    s = di_hf_config_get_enum(rs, key, KINDS, 4, &kind, err);
    if (s == DI_ERR_FORMAT || s == DI_ERR_RANGE) {
        di_error_set(err, DI_ERR_UNSUPPORTED, "%s: rope_scaling.%s: supported: default, linear, llama3, longrope (phi3)",
                     di_hf_config_name(c), key);
        s = DI_ERR_UNSUPPORTED;
    }
    if (s == DI_OK && kind != 0 && f == F_GEMMA3)
        s = unsupported(c, "rope_scaling on Gemma3ForCausalLM (global layers only)", err);
    if (s == DI_OK && kind == 3 && f != F_PHI3) s = unsupported(c, "rope_scaling longrope outside Phi3ForCausalLM", err);
    double d = 1.0;
    if (s == DI_OK && (kind == 1 || kind == 2)) {
        s = di_hf_config_get_float(rs, "factor", 1.0, 1024.0, &d, err);
        hp->rope_scaling_factor = (float)d;
    }
    if (s == DI_OK && kind == 1) hp->rope_scaling = DI_LLAMA_ROPE_SCALING_LINEAR;
    if (s == DI_OK && kind == 2) { /* llama3: per-dimension divisors, a rope_freqs table (build_tables) */
        x->llama3 = true;
        x->factor = d;
        hp->rope_scaling_factor = 1.0f;
        if (!(s = di_hf_config_get_float(rs, "low_freq_factor", 1e-3, 1e3, &x->low_freq_factor, err)) &&
            !(s = di_hf_config_get_float(rs, "high_freq_factor", 1e-3, 1e3, &x->high_freq_factor, err)) &&
            !(s = di_hf_config_get_float(rs, "original_max_position_embeddings", 1, DI_LLAMA_MAX_CTX, &x->orig_ctx, err)) &&
            !(x->high_freq_factor > x->low_freq_factor))
            s = di_error_set(err, DI_ERR_RANGE, "%s: rope_scaling: high_freq_factor must exceed low_freq_factor",
                             di_hf_config_name(c));
    }
    if (s == DI_OK && kind == 3) {
        /* transformers' LongRoPE: factor = max positions / original ones,
         * attention factor sqrt(1 + ln(factor) / ln(original)) unless given;
         * both as llama.cpp's converter writes them for phi3 */
        x->longrope = true;
        uint32_t n_pairs = hp->n_rot / 2;
        double orig = hp->n_ctx_train, af = 1.0;
        if (di_hf_config_has(c, "original_max_position_embeddings"))
            s = di_hf_config_get_float(c, "original_max_position_embeddings", 1, DI_LLAMA_MAX_CTX, &orig, err);
        else if (di_hf_config_has(rs, "original_max_position_embeddings"))
            s = di_hf_config_get_float(rs, "original_max_position_embeddings", 1, DI_LLAMA_MAX_CTX, &orig, err);
        double factor = (double)hp->n_ctx_train / orig;
        if (s == DI_OK)
            s = di_hf_config_get_float_or(rs, "attention_factor", 1.0, 4.0,
                                          factor > 1.0 ? sqrt(1.0 + log(factor) / log(orig)) : 1.0, &af, err);
        if (s == DI_OK && !(s = factor_list(rs, "short_factor", n_pairs, &x->short_factor, err)))
            s = factor_list(rs, "long_factor", n_pairs, &x->long_factor, err);
        hp->rope_scaling_orig_ctx = (uint32_t)orig;
        hp->rope_attn_factor = (float)af;
    }
    di_hf_config_close(rs);
    return s;
}

/* Gemma 3: which layers are local (layer_types, else sliding_window_pattern),
 * their window and RoPE base, the query scale, the embedding scale. */
static di_status read_gemma(const di_hf_config *c, di_llama_hparams *hp, di_error *err) {
    di_status s;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    GET_F32_OR(c, "query_pre_attn_scalar", 1.0, 1e6, hp->head_dim, hp->attn_scale);
    hp->attn_scale = 1.0f / sqrtf(hp->attn_scale);
    GET_F32_OR(c, "final_logit_softcapping", 0.0, 1e6, 0.0, hp->final_softcap);
    GET_F32_OR(c, "rope_local_base_freq", 1.0, 1e12, 10000.0, hp->rope_freq_base_swa);
    GET_U32_OR("sliding_window", 0, DI_LLAMA_MAX_CTX, 0, hp->sliding_window);
    if (di_hf_config_has(c, "attn_logit_softcapping")) return unsupported(c, "attn_logit_softcapping", err);
    GET_U32_OR("sliding_window_pattern", 1, DI_LLAMA_MAX_LAYERS, 6, hp->swa_period);
    if (!di_hf_config_has(c, "layer_types")) return DI_OK;
    const char **types = di_malloc_array(hp->n_layers, sizeof *types);
    if (!types) return di_error_set(err, DI_ERR_NOMEM, "config: out of memory");
    size_t n = 0;
    s = di_hf_config_get_string_array(c, "layer_types", types, hp->n_layers, &n, err);
    if (s == DI_OK && n != hp->n_layers)
        s = di_error_set(err, DI_ERR_FORMAT, "%s: layer_types has %zu entries, num_hidden_layers is %u",
                         di_hf_config_name(c), n, hp->n_layers);
    /* the period is the first global layer's index + 1; 0 = every layer local */
    hp->swa_period = 0;
    for (size_t i = 0; s == DI_OK && i < n && !hp->swa_period; i++)
        if (!strcmp(types[i], "full_attention")) hp->swa_period = (uint32_t)i + 1;
    for (uint32_t il = 0; s == DI_OK && il < n; il++) {
        bool full = !strcmp(types[il], "full_attention");
        if (!full && strcmp(types[il], "sliding_attention"))
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: layer_types[%u] is '%.32s' (full_attention or sliding_attention)",
                             di_hf_config_name(c), il, types[il]);
        else if (full == di_llama_layer_is_local(hp, il) && hp->sliding_window > 0)
            s = unsupported(c, "layer_types other than every N-th layer global", err);
    }
    free(types);
    return s;
}

static di_status read_experts(const di_hf_config *c, family f, di_llama_hparams *hp, di_error *err) {
    di_status s;
    hp->n_ff_exp = hp->n_ff;
    if (f == F_QWEN3MOE) {
        uint32_t step;
        size_t n_dense = 0;
        GET_U32("num_experts", 1, DI_LLAMA_MAX_EXPERTS, hp->n_expert);
        GET_U32("num_experts_per_tok", 1, hp->n_expert, hp->n_expert_used);
        GET_U32("moe_intermediate_size", 1, DI_LLAMA_MAX_FF, hp->n_ff_exp);
        GET_U32_OR("decoder_sparse_step", 1, DI_LLAMA_MAX_LAYERS, 1, step);
        if ((s = di_hf_config_get_bool_or(c, "norm_topk_prob", false, &hp->expert_weights_norm, err))) return s;
        if (di_hf_config_has(c, "mlp_only_layers") && (s = di_hf_config_array_len(c, "mlp_only_layers", &n_dense, err)))
            return s;
        if (step != 1 || n_dense > 0) return unsupported(c, "dense layers among the MoE ones (decoder_sparse_step, mlp_only_layers)", err);
    } else if (f == F_MIXTRAL) {
        GET_U32("num_local_experts", 1, DI_LLAMA_MAX_EXPERTS, hp->n_expert);
        GET_U32("num_experts_per_tok", 1, hp->n_expert, hp->n_expert_used);
        hp->expert_weights_norm = true; /* Mixtral: softmax over the chosen experts' logits */
    }
    return DI_OK;
}

static di_status read_hparams(const di_hf_config *c, family f, di_llama_hparams *hp, rope_extra *x, di_error *err) {
    di_status s;
    memset(hp, 0, sizeof *hp);
    hp->arch = FAMILY[f].arch;
    GET_U32("num_hidden_layers", 1, DI_LLAMA_MAX_LAYERS, hp->n_layers);
    GET_U32("hidden_size", 1, DI_LLAMA_MAX_EMBD, hp->n_embd);
    GET_U32("num_attention_heads", 1, DI_LLAMA_MAX_HEADS, hp->n_heads);
    GET_U32_OR("num_key_value_heads", 1, hp->n_heads, hp->n_heads, hp->n_heads_kv);
    if (hp->n_heads % hp->n_heads_kv)
        return di_error_set(err, DI_ERR_RANGE, "%s: num_key_value_heads (%u) does not divide num_attention_heads (%u)",
                            di_hf_config_name(c), hp->n_heads_kv, hp->n_heads);
    if (!di_hf_config_has(c, "head_dim") && hp->n_embd % hp->n_heads)
        return di_error_set(err, DI_ERR_RANGE, "%s: num_attention_heads (%u) does not divide hidden_size (%u)",
                            di_hf_config_name(c), hp->n_heads, hp->n_embd);
    GET_U32_OR("head_dim", 2, DI_LLAMA_MAX_HEAD_DIM, hp->n_embd / hp->n_heads, hp->head_dim);
    GET_U32("intermediate_size", 1, DI_LLAMA_MAX_FF, hp->n_ff);
    GET_U32("max_position_embeddings", 1, DI_LLAMA_MAX_CTX, hp->n_ctx_train);
    GET_U32("vocab_size", 1, DI_LLAMA_MAX_VOCAB, hp->n_vocab);
    float rot;
    GET_F32_OR(c, "partial_rotary_factor", 0.01, 1.0, 1.0, rot);
    hp->n_rot = (uint32_t)((float)hp->head_dim * rot);
    if (hp->head_dim % 2 || hp->n_rot < 2 || hp->n_rot % 2)
        return di_error_set(err, DI_ERR_RANGE, "%s: head_dim %u with partial_rotary_factor %g: rotary dims must be even",
                            di_hf_config_name(c), hp->head_dim, (double)rot);
    GET_F32_OR(c, "rope_theta", 1.0, 1e12, 10000.0, hp->rope_freq_base);
    if (!(hp->rope_freq_base > 1.0f)) return di_error_set(err, DI_ERR_RANGE, "%s: rope_theta must exceed 1", di_hf_config_name(c));
    double eps;
    if ((s = di_hf_config_get_float(c, "rms_norm_eps", 1e-12, 0.5, &eps, err))) return s;
    hp->rms_eps = (float)eps;

    const char *act = NULL;
    const char *act_key = f == F_GEMMA3 ? "hidden_activation" : "hidden_act";
    if ((s = di_hf_config_get_string_or(c, act_key, f == F_GEMMA3 ? "gelu_pytorch_tanh" : "silu", &act, err))) return s;
    if (strcmp(act, f == F_GEMMA3 ? "gelu_pytorch_tanh" : "silu"))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: %s '%.32s' is not supported (%s)", di_hf_config_name(c), act_key,
                            act, f == F_GEMMA3 ? "gelu_pytorch_tanh" : "silu");
    bool b = false;
    if ((s = di_hf_config_get_bool_or(c, "attention_bias", false, &b, err))) return s;
    if (b && f != F_QWEN2) return unsupported(c, "attention_bias true", err);
    if ((s = di_hf_config_get_bool_or(c, "mlp_bias", false, &b, err))) return s;
    if (b) return unsupported(c, "mlp_bias true", err);

    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if ((s = read_rope_scaling(c, f, hp, x, err))) return s;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    if (f == F_GEMMA3 && (s = read_gemma(c, hp, err))) return s;
    if (f == F_MISTRAL || f == F_MIXTRAL || f == F_PHI3) {
        /* every layer sees the last sliding_window keys; a window as long as
         * the context is none (Phi-3-mini-128k's 262144) */
        GET_U32_OR("sliding_window", 0, INT32_MAX, 0, hp->sliding_window);
        if (hp->sliding_window >= hp->n_ctx_train) hp->sliding_window = 0;
    }
    if (f == F_QWEN2 || f == F_QWEN3 || f == F_QWEN3MOE) {
        if ((s = di_hf_config_get_bool_or(c, "use_sliding_window", false, &b, err))) return s;
        if (b) return unsupported(c, "use_sliding_window true", err);
    }
    hp->attn_scale *= hp->rope_attn_factor * hp->rope_attn_factor; /* LongRoPE, as llama_hparams.c */
    if ((s = read_experts(c, f, hp, err))) return s;
    if ((s = token_id(c, "bos_token_id", hp->n_vocab, &hp->tok.bos, err)) ||
        (s = token_id(c, "eos_token_id", hp->n_vocab, &hp->tok.eos, err)) ||
        (s = token_id(c, "pad_token_id", hp->n_vocab, &hp->tok.pad, err)))
        return s;
    hp->tok.unk = hp->tok.sep = hp->tok.eot = hp->tok.eom = -1;
    return DI_OK;
}

static int family_of(const char *cls) {
    for (int f = 0; f < N_FAMILIES; f++)
        if (!strcmp(cls, FAMILY[f].cls)) return f;
    return -1;
}

/* architectures[0] of an open config, or NULL */
static const char *first_arch(const di_hf_config *c) {
    const char *names[8];
    size_t n = 0;
    if (di_hf_config_get_string_array(c, "architectures", names, 8, &n, NULL) != DI_OK || n == 0) return NULL;
    return names[0];
}

di_status di_llama_hf_probe(const char *dir, bool *is_llama, di_error *err) {
    *is_llama = false;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) return DI_OK;
    di_hf_config *c = NULL;
    if (di_hf_config_open(path, &c, NULL)) return DI_OK;
    const char *arch = first_arch(c), *mt = NULL;
    di_hf_config_get_string(c, "model_type", &mt, NULL);
    di_status s = DI_OK;
    if (arch && family_of(arch) >= 0) *is_llama = true;
    else if (arch && strncmp(arch, "Deepseek", 8) && strncmp(arch, "DeepSeek", 8) && !(mt && !strncmp(mt, "deepseek", 8)))
        s = di_error_set(err, DI_ERR_UNSUPPORTED,
                         "%s: architecture '%.64s' is not supported; supported: %s, DeepseekV4ForCausalLM "
                         "(model_type deepseek_v4 or deepseek_v41)",
                         path, arch, di_llama_hf_arch_list());
    di_hf_config_close(c);
    return s;
}

/* ---- tensors --------------------------------------------------------------- */

typedef struct loader {
    di_llama_hf *h;
    const char *dir;
    family f;
    const di_llama_hparams *hp;
    int n_parts;
    const di_safetensors_tensor **slot;  /* (n_layers, n_parts) the tensor of each part */
    const di_safetensors_tensor **exps;  /* (n_layers, n_parts, n_expert) experts of stacked parts */
    const di_safetensors_tensor *embd, *norm, *head;
} loader;

static bool is_float(di_dtype d) { return d == DI_DTYPE_F32 || d == DI_DTYPE_F16 || d == DI_DTYPE_BF16; }

/* HF tensor t must be row-major [ne1, ne0] ([ne0] for a vector) of a float dtype */
static di_status check_shape(const loader *L, const char *name, const di_safetensors_tensor *t, int64_t ne0,
                             int64_t ne1, bool vector, di_error *err) {
    if (!t) return di_error_set(err, DI_ERR_FORMAT, "%s: required tensor '%s' is missing", L->dir, name);
    bool ok = vector ? t->n_dims == 1 && t->shape[0] == ne0
                     : t->n_dims == 2 && t->shape[0] == ne1 && t->shape[1] == ne0;
    if (!ok) {
        char got[96] = "";
        size_t o = 0;
        for (int32_t i = 0; i < t->n_dims && o < sizeof got - 24; i++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
        if (vector)
            return di_error_set(err, DI_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%" PRId64 "]", L->dir,
                                name, got, ne0);
        return di_error_set(err, DI_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%" PRId64 ", %" PRId64 "]",
                            L->dir, name, got, ne1, ne0);
    }
    if (!is_float(t->dtype)) {
        const di_dtype_traits *tr = di_dtype_traits_of(t->dtype);
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, expected f32, f16 or bf16", L->dir,
                            name, tr ? tr->name : "?");
    }
    return DI_OK;
}

/* "model.layers.<N>.<rest>" -> N and rest (N decimal, no leading zeros) */
static bool parse_layer(const char *name, uint32_t *layer, const char **rest) {
    static const char PRE[] = "model.layers.";
    if (strncmp(name, PRE, sizeof PRE - 1)) return false;
    const char *p = name + sizeof PRE - 1;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9')) return false;
    uint64_t n = 0;
    while (*p >= '0' && *p <= '9' && n <= UINT32_MAX) n = n * 10 + (uint64_t)(*p++ - '0');
    if (*p != '.' || n > UINT32_MAX) return false;
    *layer = (uint32_t)n;
    *rest = p + 1;
    return true;
}

/* rest against pattern ("...%u..." for an expert); *expert the number */
static bool match_name(const char *rest, const char *pattern, uint32_t *expert) {
    const char *pct = strstr(pattern, "%u");
    if (!pct) return !strcmp(rest, pattern);
    size_t pre = (size_t)(pct - pattern);
    if (strncmp(rest, pattern, pre)) return false;
    const char *p = rest + pre;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9')) return false;
    uint64_t n = 0;
    while (*p >= '0' && *p <= '9' && n <= UINT32_MAX) n = n * 10 + (uint64_t)(*p++ - '0');
    if (n > UINT32_MAX || strcmp(p, pct + 2)) return false;
    *expert = (uint32_t)n;
    return true;
}

static int part_index(const char *name) {
    for (int p = 0; p < di_llama_part_count(); p++)
        if (!strcmp(di_llama_part_name(p), name)) return p;
    return -1;
}

/* One checkpoint tensor into its slot; unknown names, layers or experts fail. */
static di_status classify(loader *L, const di_safetensors_tensor *t, di_error *err) {
    const di_llama_hparams *hp = L->hp;
    const char *cls = FAMILY[L->f].cls;
    uint32_t layer, expert = 0;
    const char *rest;
    if (!strcmp(t->name, "model.embed_tokens.weight")) L->embd = t;
    else if (!strcmp(t->name, "model.norm.weight")) L->norm = t;
    else if (!strcmp(t->name, "lm_head.weight")) L->head = t;
    else if (parse_layer(t->name, &layer, &rest)) {
        if (!strcmp(rest, "self_attn.rotary_emb.inv_freq")) return DI_OK; /* a buffer old checkpoints saved */
        if (layer >= hp->n_layers)
            return di_error_set(err, DI_ERR_FORMAT, "%s: tensor '%s' belongs to layer %u but num_hidden_layers is %u",
                                L->dir, t->name, layer, hp->n_layers);
        for (size_t i = 0; i < N_LAYER_NAMES; i++) {
            if (!(LAYER_NAMES[i].families & FAM(L->f)) || !match_name(rest, LAYER_NAMES[i].hf, &expert)) continue;
            int p = part_index(LAYER_NAMES[i].part);
            int64_t ne[3];
            bool norm, stacked;
            if (p < 0 || !di_llama_part_shape(hp, p, ne, &norm, &stacked)) break; /* not this variant's */
            size_t at = (size_t)layer * (size_t)L->n_parts + (size_t)p;
            if (stacked) {
                if (expert >= hp->n_expert)
                    return di_error_set(err, DI_ERR_FORMAT, "%s: tensor '%s': expert %u but there are %u", L->dir,
                                        t->name, expert, hp->n_expert);
                L->exps[at * hp->n_expert + expert] = t;
            } else {
                L->slot[at] = t;
            }
            return DI_OK;
        }
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of %s as supported here", L->dir,
                            t->name, cls);
    } else {
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of %s as supported here", L->dir,
                            t->name, cls);
    }
    return DI_OK;
}

/* The HF name of part p of layer il (expert e; UINT32_MAX: "*", the stack) */
static void hf_name(const loader *L, int p, uint32_t il, uint32_t e, char out[NAME_LEN]) {
    for (size_t i = 0; i < N_LAYER_NAMES; i++)
        if ((LAYER_NAMES[i].families & FAM(L->f)) && !strcmp(LAYER_NAMES[i].part, di_llama_part_name(p))) {
            char rest[NAME_LEN - 32];
            const char *pct = strstr(LAYER_NAMES[i].hf, "%u");
            if (pct && e == UINT32_MAX) /* the stack: experts.*. */
                snprintf(rest, sizeof rest, "%.*s*%s", (int)(pct - LAYER_NAMES[i].hf), LAYER_NAMES[i].hf, pct + 2);
            else if (pct) snprintf(rest, sizeof rest, LAYER_NAMES[i].hf, e);
            else snprintf(rest, sizeof rest, "%s", LAYER_NAMES[i].hf);
            snprintf(out, NAME_LEN, "model.layers.%u.%s", il, rest);
            return;
        }
    snprintf(out, NAME_LEN, "model.layers.%u.(%s)", il, di_llama_part_name(p));
}

/* A float vector as the model's: Gemma's norms are 1 + w, in f32. */
static di_status wrap_vector(loader *L, const char *name, const di_safetensors_tensor *t, bool plus_one,
                             const di_gguf_tensor **out, di_error *err) {
    if (!plus_one) return wrap(L->h, name, t->dtype, t->shape[0], 1, 1, t->data, t->n_bytes, false, out, err);
    int64_t n = t->shape[0];
    float *v = di_malloc_array((size_t)n, sizeof(float));
    if (!v) return di_error_set(err, DI_ERR_NOMEM, "tensor '%s': out of memory", name);
    di_status s = di_dtype_row_to_float(t->dtype, t->data, v, n, err);
    for (int64_t i = 0; s == DI_OK && i < n; i++) v[i] += 1.0f;
    if (s == DI_OK) s = wrap_f32(L->h, name, v, n, out, err);
    free(v);
    return s;
}

/* Experts [0, n_expert) of a stacked part, copied into one stack. */
static di_status stack_experts(loader *L, int p, uint32_t il, const int64_t ne[3], const di_gguf_tensor **out,
                               di_error *err) {
    const di_llama_hparams *hp = L->hp;
    const di_safetensors_tensor **e = L->exps + ((size_t)il * (size_t)L->n_parts + (size_t)p) * hp->n_expert;
    char name[NAME_LEN];
    di_status s;
    for (uint32_t x = 0; x < hp->n_expert; x++) {
        hf_name(L, p, il, x, name);
        if ((s = check_shape(L, name, e[x], ne[0], ne[1], false, err))) return s;
        if (e[x]->dtype != e[0]->dtype)
            return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: tensor '%s': experts of one layer in different dtypes",
                                L->dir, name);
    }
    uint64_t per = e[0]->n_bytes, total;
    if (di_mul_overflow_u64(per, hp->n_expert, &total))
        return di_error_set(err, DI_ERR_RANGE, "%s: layer %u: experts overflow", L->dir, il);
    hf_name(L, p, il, UINT32_MAX, name);
    const di_gguf_tensor *t;
    if ((s = wrap(L->h, name, e[0]->dtype, ne[0], ne[1], hp->n_expert, NULL, total, true, &t, err))) return s;
    uint8_t *dst = (uint8_t *)(uintptr_t)t->data;
    for (uint32_t x = 0; x < hp->n_expert; x++) memcpy(dst + (size_t)x * per, e[x]->data, (size_t)per);
    *out = t;
    return DI_OK;
}

static di_status check_layer(loader *L, uint32_t il, di_llama_layer_tensors *lt, di_error *err) {
    for (int p = 0; p < L->n_parts; p++) {
        int64_t ne[3];
        bool norm, stacked;
        if (!di_llama_part_shape(L->hp, p, ne, &norm, &stacked)) continue;
        const di_gguf_tensor **slot = di_llama_layer_slot(lt, p);
        di_status s;
        if (stacked) {
            if ((s = stack_experts(L, p, il, ne, slot, err))) return s;
            continue;
        }
        char name[NAME_LEN];
        hf_name(L, p, il, 0, name);
        const di_safetensors_tensor *t = L->slot[(size_t)il * (size_t)L->n_parts + (size_t)p];
        if ((s = check_shape(L, name, t, ne[0], ne[1], norm, err))) return s;
        bool gemma_norm = L->f == F_GEMMA3 && norm; /* every Gemma vector is a norm weight */
        s = norm ? wrap_vector(L, name, t, gemma_norm, slot, err)
                 : wrap(L->h, name, t->dtype, ne[0], ne[1], 1, t->data, t->n_bytes, false, slot, err);
        if (s) return s;
    }
    return DI_OK;
}

/* llama3 rope_scaling as per-pair divisors (what llama.cpp's converter
 * writes as rope_freqs): wavelengths shorter than original / high_freq_factor
 * keep their frequency, longer than original / low_freq_factor are divided by
 * factor, the band between is interpolated. */
static void llama3_factors(const di_llama_hparams *hp, const rope_extra *x, float *out) {
    const double lo_wl = x->orig_ctx / x->low_freq_factor, hi_wl = x->orig_ctx / x->high_freq_factor;
    for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
        double freq = 1.0 / pow((double)hp->rope_freq_base, (double)(2 * i) / (double)hp->n_rot);
        double wl = 2.0 * M_PI / freq, f;
        if (wl < hi_wl) f = 1.0;
        else if (wl > lo_wl) f = x->factor;
        else {
            double smooth = (x->orig_ctx / wl - x->low_freq_factor) / (x->high_freq_factor - x->low_freq_factor);
            f = 1.0 / ((1.0 - smooth) / x->factor + smooth);
        }
        out[i] = (float)f;
    }
}

static di_status rope_tables(loader *L, const rope_extra *x, di_llama_tensors *t, di_error *err) {
    uint32_t n = L->hp->n_rot / 2;
    float *v = di_malloc_array(n ? n : 1, sizeof(float));
    if (!v) return di_error_set(err, DI_ERR_NOMEM, "rope tables: out of memory");
    di_status s = DI_OK;
    if (x->llama3) {
        llama3_factors(L->hp, x, v);
        s = wrap_f32(L->h, "rope_scaling (llama3)", v, n, &t->rope_freqs, err);
    }
    if (x->longrope) {
        for (uint32_t i = 0; i < n; i++) v[i] = (float)x->short_factor[i];
        s = wrap_f32(L->h, "rope_scaling.short_factor", v, n, &t->rope_short, err);
        for (uint32_t i = 0; s == DI_OK && i < n; i++) v[i] = (float)x->long_factor[i];
        if (s == DI_OK) s = wrap_f32(L->h, "rope_scaling.long_factor", v, n, &t->rope_long, err);
    }
    free(v);
    return s;
}

static di_status bind_all(loader *L, bool tied, const rope_extra *x, di_llama_tensors *t, di_error *err) {
    const di_llama_hparams *hp = L->hp;
    di_status s;
    for (uint64_t i = 0; i < di_safetensors_checkpoint_tensor_count(L->h->ck); i++)
        if ((s = classify(L, di_safetensors_checkpoint_tensor_at(L->h->ck, i), err))) return s;
    if ((s = check_shape(L, "model.embed_tokens.weight", L->embd, hp->n_embd, hp->n_vocab, false, err)) ||
        (s = check_shape(L, "model.norm.weight", L->norm, hp->n_embd, 1, true, err)) ||
        (s = wrap(L->h, "model.embed_tokens.weight", L->embd->dtype, hp->n_embd, hp->n_vocab, 1, L->embd->data,
                  L->embd->n_bytes, false, &t->token_embd, err)) ||
        (s = wrap_vector(L, "model.norm.weight", L->norm, L->f == F_GEMMA3, &t->output_norm, err)))
        return s;
    if (!L->head && !tied)
        return di_error_set(err, DI_ERR_FORMAT, "%s: required tensor 'lm_head.weight' is missing (tie_word_embeddings is false)",
                            L->dir);
    t->tied_output = !L->head;
    if (t->tied_output) t->output = t->token_embd;
    else if ((s = check_shape(L, "lm_head.weight", L->head, hp->n_embd, hp->n_vocab, false, err)) ||
             (s = wrap(L->h, "lm_head.weight", L->head->dtype, hp->n_embd, hp->n_vocab, 1, L->head->data,
                       L->head->n_bytes, false, &t->output, err)))
        return s;
    for (uint32_t il = 0; il < hp->n_layers; il++)
        if ((s = check_layer(L, il, &t->layers[il], err))) return s;
    return rope_tables(L, x, t, err);
}

di_status di_llama_hf_load(const char *dir, const di_cpu_kernels *kernels, di_llama_hf **holder,
                           di_llama_model **model, di_error *err) {
    *holder = NULL;
    *model = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return di_error_set(err, DI_ERR_INVALID_ARG, "%s: path too long", dir);
    di_hf_config *c = NULL;
    di_status s = di_hf_config_open(path, &c, err);
    if (s) return s;
    di_llama_hf *h = di_calloc(1, sizeof *h);
    rope_extra x = {0};
    di_llama_hparams hp;
    di_llama_tensors t = {0};
    loader L = {.h = h, .dir = dir, .hp = &hp, .n_parts = di_llama_part_count()};
    const char *arch = first_arch(c);
    int f = arch ? family_of(arch) : -1;
    bool tied = false;
    if (!h) s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", dir);
    else if (f < 0)
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: architecture '%.64s' is not supported; supported: %s", path,
                         arch ? arch : "(none: config.json has no architectures)", di_llama_hf_arch_list());
    if (s == DI_OK) {
        L.f = (family)f;
        s = read_hparams(c, L.f, &hp, &x, err);
    }
    if (s == DI_OK) s = di_hf_config_get_bool_or(c, "tie_word_embeddings", L.f == F_GEMMA3, &tied, err);
    if (s == DI_OK) s = di_safetensors_checkpoint_open(dir, &h->ck, err);
    if (s == DI_OK) {
        size_t cells = (size_t)hp.n_layers * (size_t)L.n_parts;
        L.slot = di_calloc(cells, sizeof *L.slot);
        L.exps = di_calloc(cells * (hp.n_expert ? hp.n_expert : 1), sizeof *L.exps);
        t.layers = di_calloc(hp.n_layers, sizeof *t.layers);
        t.n_layers = hp.n_layers;
        if (!L.slot || !L.exps || !t.layers) s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", dir);
    }
    if (s == DI_OK) s = bind_all(&L, tied, &x, &t, err);
    if (s == DI_OK) s = di_llama_load_parts(&hp, &t, true, kernels, model, err);
    free(L.slot);
    free(L.exps);
    free(x.short_factor);
    free(x.long_factor);
    di_llama_tensors_free(&t);
    di_hf_config_close(c);
    if (s) {
        di_llama_hf_free(h);
        return s;
    }
    *holder = h;
    return DI_OK;
}
