/* config.json -> di_dsv4_hparams for the DeepSeek-V4 family: one reader,
 * one topology.
 *
 *   dsv4_read_config(dir, variant)
 *     1. the variant's opening: the text section, the model type and the
 *        root-level checks (VARIANTS below);
 *     2. the keys both variants name, from one table (KEYS) with a column
 *        per variant: its range and its default (V4: transformers'
 *        DeepseekV4Config defaults; V4.1: DeepInfer requires the key);
 *     3. the variant's own keys and shape checks;
 *     4. the layer role table from the sources those keys name, built and
 *        checked by one builder (build_topology).
 *
 * Where V4 and V4.1 truly differ is the variant table: V4 is the V4.1
 * topology with no CED decoders (n_prefill_layer = n_layers), no Engram,
 * no sharing between layers, hash routing and hc_head on.
 *
 * V4 (this file) follows transformers' DeepseekV4Config, including the
 * legacy spellings the released checkpoints ship (compress_ratios,
 * compress_rate_csa/hca, num_hash_layers, qk_rope_head_dim, rope_scaling)
 * and the modern ones (layer_types, compress_rates, mlp_layer_types,
 * partial_rotary_factor, rope_parameters flat or nested {main, compress}).
 * V4.1's keys are deepseek_v41_config.c's. Every index-like value is range
 * checked, so the loaders and forwards can trust them. */
#include "model/deepseek_v4_internal.h"
#include "model/deepseek_v41.h"

#include "format/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_VOCAB (1 << 24)
#define MAX_EMBD 65536
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 4096
#define MAX_RANK 65536
#define MAX_EXPERTS 65536
#define MAX_FF (1 << 20)
#define MAX_HC 16
#define MAX_SINKHORN 1000
#define MAX_WINDOW (1 << 20)
#define MAX_RATIO 65536
#define MAX_TOPK (1 << 20)
#define MAX_FP8_BLOCK 4096

static const char *const LAYER_TYPE_NAMES[] = {"sliding_attention", "compressed_sparse_attention",
                                               "heavily_compressed_attention"};
static const char *const MLP_TYPE_NAMES[] = {"moe", "hash_moe"};

const char *di_dsv4_attn_kind_name(di_dsv4_attn_kind k) {
    return (unsigned)k < 3 ? LAYER_TYPE_NAMES[k] : "?";
}

#define GET_INT(key, lo, hi, def, dst) DSV4_CFG_INT_OR(c, key, lo, hi, def, dst)
#define GET_FLOAT(key, lo, hi, def, dst) DSV4_CFG_FLOAT_OR(c, key, lo, hi, def, dst)

/* A per-layer list of names (layer_types, mlp_layer_types): one of the
 * n_names names for each of the n layers, its index into out; `bad` ends
 * the message for a name not in the list. */
static di_status read_name_list(const di_hf_config *c, const char *key, const char *const *names, int n_names,
                                int32_t n, uint8_t *out, const char *bad, di_error *err) {
    const char *v[DI_DSV4_MAX_LAYERS];
    size_t len;
    di_status s = di_hf_config_get_string_array(c, key, v, DI_DSV4_MAX_LAYERS, &len, err);
    if (s) return s;
    if ((int32_t)len != n)
        return di_error_set(err, DI_ERR_FORMAT, "%s: %s has %zu entries for %d layers", di_hf_config_name(c), key, len,
                            (int)n);
    for (int32_t i = 0; i < n; i++) {
        int k = -1;
        for (int j = 0; j < n_names; j++)
            if (!strcmp(v[i], names[j])) k = j;
        if (k < 0)
            return di_error_set(err, DI_ERR_FORMAT, "%s: %s[%d] = '%.64s' %s", di_hf_config_name(c), key, (int)i, v[i],
                                bad);
        out[i] = (uint8_t)k;
    }
    return DI_OK;
}

/* layer_types, else legacy compress_ratios (0/4/128 per layer, possibly
 * longer than n_layers: the MTP layer's entry is dropped as transformers
 * does), else the V4 default (2 HCA, then alternating HCA/CSA). */
static di_status read_layer_types(const di_hf_config *c, di_dsv4_hparams *hp, di_error *err) {
    int32_t n = hp->n_layers;
    size_t len;
    di_status s;
    if (di_hf_config_has(c, "layer_types"))
        return read_name_list(c, "layer_types", LAYER_TYPE_NAMES, 3, n, hp->attn_kind, "is not a V4 layer type", err);
    if (di_hf_config_has(c, "compress_ratios")) {
        int64_t r[DI_DSV4_MAX_LAYERS + 8];
        if ((s = di_hf_config_get_int_array(c, "compress_ratios", 0, 128, r, DI_DSV4_MAX_LAYERS + 8, &len, err)))
            return s;
        if ((int32_t)len < n)
            return di_error_set(err, DI_ERR_FORMAT, "%s: compress_ratios has %zu entries for %d layers",
                                di_hf_config_name(c), len, (int)n);
        if ((int32_t)len > n + hp->n_mtp)
            return di_error_set(err, DI_ERR_FORMAT,
                                "%s: compress_ratios has %zu entries for %d layers + %d MTP modules",
                                di_hf_config_name(c), len, (int)n, (int)hp->n_mtp);
        /* entries past the main layers belong to the MTP modules, in order */
        for (int32_t i = 0; i < (int32_t)len; i++) {
            uint8_t *kind = i < n ? &hp->attn_kind[i] : &hp->mtp_attn_kind[i - n];
            /* transformers maps exactly these three values to layer types */
            if (r[i] == 0) *kind = DI_DSV4_ATTN_WINDOW;
            else if (r[i] == 4) *kind = DI_DSV4_ATTN_CSA;
            else if (r[i] == 128) *kind = DI_DSV4_ATTN_HCA;
            else
                return di_error_set(err, DI_ERR_FORMAT, "%s: compress_ratios[%d] = %lld (must be 0, 4 or 128)",
                                    di_hf_config_name(c), (int)i, (long long)r[i]);
        }
        return DI_OK;
    }
    for (int32_t i = 0; i < n; i++)
        hp->attn_kind[i] = i < 2 ? DI_DSV4_ATTN_HCA : ((i - 2) % 2 ? DI_DSV4_ATTN_CSA : DI_DSV4_ATTN_HCA);
    return DI_OK;
}

static di_status read_mlp_types(const di_hf_config *c, di_dsv4_hparams *hp, di_error *err) {
    int32_t n = hp->n_layers;
    di_status s;
    if (di_hf_config_has(c, "mlp_layer_types"))
        return read_name_list(c, "mlp_layer_types", MLP_TYPE_NAMES, 2, n, hp->hash_moe, "(must be moe or hash_moe)",
                              err);
    int64_t n_hash;
    if ((s = di_hf_config_get_int_or(c, "num_hash_layers", 0, DI_DSV4_MAX_LAYERS, 3, &n_hash, err))) return s;
    for (int32_t i = 0; i < n; i++) hp->hash_moe[i] = i < n_hash;
    return DI_OK;
}

/* The compressed layers' rotary: plain or YaRN. `pre` is the key prefix of
 * the parameter object ("rope_parameters.compress.", "rope_scaling.", ...).
 * nested: transformers derives a YaRN attention factor other than 1 when
 * the nested form omits it; that scaling of cos/sin is not implemented. */
static di_status read_compress_rope(const di_hf_config *c, const char *pre, int nested,
                                    di_dsv4_hparams *hp, di_error *err) {
    char key[128];
    const char *type = "default";
    di_status s;
    snprintf(key, sizeof key, "%srope_type", pre);
    if (di_hf_config_has(c, key)) {
        if ((s = di_hf_config_get_string(c, key, &type, err))) return s;
    } else {
        snprintf(key, sizeof key, "%stype", pre);
        if ((s = di_hf_config_get_string_or(c, key, "default", &type, err))) return s;
    }
    if (nested) {
        snprintf(key, sizeof key, "%srope_theta", pre);
        if ((s = di_hf_config_get_float_or(c, key, 1e-3, 1e12, hp->compress_rope_theta, &hp->compress_rope_theta, err)))
            return s;
    }
    if (!strcmp(type, "default")) {
        hp->yarn = 0;
        return DI_OK;
    }
    if (strcmp(type, "yarn"))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: compressed-layer rope type '%.32s' (default or yarn only)",
                            di_hf_config_name(c), type);
    hp->yarn = 1;
    snprintf(key, sizeof key, "%soriginal_max_position_embeddings", pre);
    if ((s = di_hf_config_get_float(c, key, 1.0, 1e12, &hp->yarn_orig_ctx, err))) return s;
    snprintf(key, sizeof key, "%sfactor", pre);
    if ((s = di_hf_config_get_float_or(c, key, 1.0, 1e6, (double)hp->n_ctx_train / hp->yarn_orig_ctx,
                                       &hp->yarn_factor, err)))
        return s;
    if (!(hp->yarn_factor >= 1.0))
        return di_error_set(err, DI_ERR_FORMAT, "%s: yarn factor %g < 1", di_hf_config_name(c), hp->yarn_factor);
    snprintf(key, sizeof key, "%sbeta_fast", pre);
    if ((s = di_hf_config_get_float_or(c, key, 1e-6, 1e6, 32.0, &hp->yarn_beta_fast, err))) return s;
    snprintf(key, sizeof key, "%sbeta_slow", pre);
    if ((s = di_hf_config_get_float_or(c, key, 1e-6, 1e6, 1.0, &hp->yarn_beta_slow, err))) return s;
    snprintf(key, sizeof key, "%sattention_factor", pre);
    if (!di_hf_config_has(c, key) && nested)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: yarn without attention_factor (cos/sin scaling not implemented)",
                            di_hf_config_name(c));
    double af;
    if ((s = di_hf_config_get_float_or(c, key, 0.0, 1e6, 1.0, &af, err))) return s;
    if (af != 1.0)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: yarn attention_factor %g (only 1.0, as V4 ships)",
                            di_hf_config_name(c), af);
    return DI_OK;
}

static di_status read_rope(const di_hf_config *c, di_dsv4_hparams *hp, di_error *err) {
    di_status s;
    if (di_hf_config_has(c, "rope_parameters.main") && di_hf_config_has(c, "rope_parameters.compress")) {
        const char *mt;
        if ((s = di_hf_config_get_string_or(c, "rope_parameters.main.rope_type", "default", &mt, err))) return s;
        if (strcmp(mt, "default"))
            return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: rope_parameters.main.rope_type '%.32s' (default only)",
                                di_hf_config_name(c), mt);
        if ((s = di_hf_config_get_float_or(c, "rope_parameters.main.rope_theta", 1e-3, 1e12, hp->rope_theta,
                                           &hp->rope_theta, err)))
            return s;
        return read_compress_rope(c, "rope_parameters.compress.", 1, hp, err);
    }
    if (di_hf_config_has(c, "rope_parameters")) return read_compress_rope(c, "rope_parameters.", 0, hp, err);
    if (di_hf_config_has(c, "rope_scaling")) return read_compress_rope(c, "rope_scaling.", 0, hp, err);
    hp->yarn = 0;
    return DI_OK;
}

/* ---- V4's column --------------------------------------------------------- */

/* The text section (text_config when present, else the root) and the
 * model type: V4.1 configs are deepseek_v41.h's. */
static di_status v4_open(const di_hf_config *root, di_hf_config **text, di_error *err) {
    di_status s;
    if ((s = di_hf_config_text_section(root, text, err))) return s;
    const di_hf_config *c = *text;
    const char *mt, *root_mt = "";
    if ((s = di_hf_config_get_string_or(root, "model_type", "", &root_mt, err))) return s;
    if ((s = di_hf_config_get_string(c, "model_type", &mt, err))) return s;
    /* V4.1 keeps its text model under text_config; either spelling counts */
    if (!strncmp(mt, "deepseek_v41", 12) || !strncmp(root_mt, "deepseek_v41", 12))
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "%s: a DeepSeek-V4.1 (deepseek_v41) config: the V4.1 loader (di_dsv41_load) reads it",
                            di_hf_config_name(c));
    if (strcmp(mt, "deepseek_v4"))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not deepseek_v4", di_hf_config_name(c), mt);
    return DI_OK;
}

/* V4's own keys after the shared ones, its shape checks, and its sources:
 * every compressed layer owns its compressor, CSA layers their indexer. */
static di_status v4_read(const di_hf_config *root, const di_hf_config *c, di_dsv4_hparams *hp, dsv4_sources *src,
                         di_error *err) {
    di_status s = DI_OK;
    double d;
    memset(hp->mtp_attn_kind, DI_DSV4_KIND_UNKNOWN, sizeof hp->mtp_attn_kind);
    GET_INT("compress_rates.compressed_sparse_attention", 1, MAX_RATIO, 4, hp->ratio_csa);
    GET_INT("compress_rates.heavily_compressed_attention", 1, MAX_RATIO, 128, hp->ratio_hca);
    GET_INT("compress_rate_csa", 1, MAX_RATIO, hp->ratio_csa, hp->ratio_csa);
    GET_INT("compress_rate_hca", 1, MAX_RATIO, hp->ratio_hca, hp->ratio_hca);
    GET_INT("bos_token_id", 0, hp->n_vocab - 1, -1, hp->bos);
    int64_t eos[16];
    size_t n_eos = 0;
    hp->eos = hp->pad = -1;
    if (di_hf_config_has(c, "eos_token_id")) {
        if ((s = di_hf_config_get_token_ids(c, "eos_token_id", 0, hp->n_vocab - 1, eos, 16, &n_eos, err))) goto done;
        if (n_eos) hp->eos = (int32_t)eos[0];
    }
    bool bias;
    if ((s = di_hf_config_get_bool_or(c, "attention_bias", false, &bias, err))) goto done;
    if (!bias && (s = di_hf_config_get_bool_or(c, "mlp_bias", false, &bias, err))) goto done;
    if (bias) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: attention_bias / mlp_bias are not used by V4", di_hf_config_name(c));
        goto done;
    }
    static const char *const score_names[] = {"sqrtsoftplus"};
    static const char *const act_names[] = {"silu"};
    int which;
    if ((s = di_hf_config_get_enum_or(c, "scoring_func", score_names, 1, 0, &which, err))) goto done;
    if ((s = di_hf_config_get_enum_or(c, "hidden_act", act_names, 1, 0, &which, err))) goto done;

    /* rotary width: partial_rotary_factor wins over legacy qk_rope_head_dim */
    if (di_hf_config_has(c, "partial_rotary_factor")) {
        GET_FLOAT("partial_rotary_factor", 1e-9, 1.0, 0.125, d);
        hp->n_rot = (int32_t)(hp->head_dim * d);
    } else {
        GET_INT("qk_rope_head_dim", 2, hp->head_dim, hp->head_dim / 8, hp->n_rot);
    }
    if ((s = read_layer_types(c, hp, err)) || (s = read_mlp_types(c, hp, err)) || (s = read_rope(c, hp, err)))
        goto done;

    /* cross-field checks the forward relies on */
    const char *nm = di_hf_config_name(c);
    if (hp->n_rot < 2 || hp->n_rot % 2 || hp->n_rot / 2 > DSV4_MAX_ROPE_PAIRS || hp->n_rot > hp->index_dim) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: rotary dims %d must be even, in [2, %d] and <= index_head_dim %d",
                         nm, (int)hp->n_rot, 2 * DSV4_MAX_ROPE_PAIRS, (int)hp->index_dim);
        goto done;
    }
    if (hp->n_heads % hp->o_groups) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: num_attention_heads %d not a multiple of o_groups %d", nm,
                         (int)hp->n_heads, (int)hp->o_groups);
        goto done;
    }
    if (hp->n_embd % 32 || hp->moe_ff % 32) {
        /* MXFP4 experts pack 32 inputs per scale; BF16 ones do not need it,
         * but no V4 shape breaks it, so keep one rule */
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: hidden_size %d and moe_intermediate_size %d must be multiples of 32",
                         nm, (int)hp->n_embd, (int)hp->moe_ff);
        goto done;
    }
    if (di_hf_config_has(root, "quantization_config")) {
        const char *qm;
        if ((s = di_hf_config_get_string(root, "quantization_config.quant_method", &qm, err))) goto done;
        if (strcmp(qm, "fp8")) {
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: quant_method '%.32s' (fp8 only)", nm, qm);
            goto done;
        }
        int64_t blk[2];
        size_t nb;
        if ((s = di_hf_config_get_int_array(root, "quantization_config.weight_block_size", 1, MAX_FP8_BLOCK, blk, 2,
                                            &nb, err)))
            goto done;
        if (nb != 2 || blk[0] != blk[1]) {
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: weight_block_size must be [B, B]", nm);
            goto done;
        }
        hp->fp8_block = (int32_t)blk[0];
    }
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const di_dsv4_attn_kind k = (di_dsv4_attn_kind)hp->attn_kind[l];
        src->ratio[l] = k == DI_DSV4_ATTN_CSA ? hp->ratio_csa : k == DI_DSV4_ATTN_HCA ? hp->ratio_hca : 0;
        if (src->ratio[l]) src->kv[src->n_kv++] = l;
        if (k == DI_DSV4_ATTN_CSA) src->idx[src->n_idx++] = src->idxk[src->n_idxk++] = l;
    }
done:
    return s;
}

#undef GET_INT
#undef GET_FLOAT

/* ---- the keys both variants read ------------------------------------------ */

#define REQUIRED NAN           /* no default: the variant requires the key */
#define HI_N_EXPERTS (-1.0)    /* upper bound: the n_routed_experts just read */
#define NO_FIELD SIZE_MAX      /* read and range checked, not kept */

typedef enum key_kind { KEY_I32, KEY_F32, KEY_F64 } key_kind;

/* One variant's reading of a key: range [lo, hi] and default. */
typedef struct key_col {
    double lo, hi, def;
} key_col;

typedef struct family_key {
    const char *key;
    key_kind kind;
    size_t off;                /* field of di_dsv4_hparams, or NO_FIELD */
    key_col col[2];            /* DI_DSV4_V4, DI_DSV4_V41 */
} family_key;

#define F(field) offsetof(di_dsv4_hparams, field)
static const family_key KEYS[] = {
    {"vocab_size", KEY_I32, F(n_vocab), {{1, MAX_VOCAB, 129280}, {3, MAX_VOCAB, REQUIRED}}},
    {"hidden_size", KEY_I32, F(n_embd), {{1, MAX_EMBD, 4096}, {128, MAX_EMBD, REQUIRED}}},
    {"num_hidden_layers", KEY_I32, F(n_layers), {{1, DI_DSV4_MAX_LAYERS, 43}, {1, DI_DSV4_MAX_LAYERS, REQUIRED}}},
    /* transformers' default is 1 (the V4 base release ships one MTP module);
     * DeepInfer's 0 (no DSpark drafter) */
    {"num_nextn_predict_layers", KEY_I32, F(n_mtp), {{0, DI_DSV4_MAX_MTP, 1}, {0, 64, 0}}},
    {"num_attention_heads", KEY_I32, F(n_heads), {{1, MAX_HEADS, 64}, {1, MAX_HEADS, REQUIRED}}},
    {"num_key_value_heads", KEY_I32, NO_FIELD, {{1, 1, 1}, {1, 1, REQUIRED}}}, /* one shared K=V head */
    {"head_dim", KEY_I32, F(head_dim), {{2, MAX_HEAD_DIM, 512}, {64, MAX_HEAD_DIM, REQUIRED}}},
    {"q_lora_rank", KEY_I32, F(q_lora), {{1, MAX_RANK, 1024}, {1, MAX_RANK, REQUIRED}}},
    {"o_groups", KEY_I32, F(o_groups), {{1, MAX_HEADS, 8}, {1, MAX_HEADS, REQUIRED}}},
    {"o_lora_rank", KEY_I32, F(o_lora), {{1, MAX_RANK, 1024}, {1, MAX_RANK, REQUIRED}}},
    {"n_routed_experts", KEY_I32, F(n_experts), {{1, MAX_EXPERTS, 256}, {1, MAX_EXPERTS, REQUIRED}}},
    {"num_experts_per_tok", KEY_I32, F(n_experts_used), {{1, HI_N_EXPERTS, 6}, {1, MAX_EXPERTS, REQUIRED}}},
    {"moe_intermediate_size", KEY_I32, F(moe_ff), {{1, MAX_FF, 2048}, {1, MAX_FF, REQUIRED}}},
    /* transformers builds exactly one shared expert whatever this says;
     * accept only the value that agrees with it */
    {"n_shared_experts", KEY_I32, F(n_shared), {{1, 1, 1}, {1, 1, REQUIRED}}},
    {"hc_mult", KEY_I32, F(hc_mult), {{1, MAX_HC, 4}, {1, MAX_HC, REQUIRED}}},
    {"hc_sinkhorn_iters", KEY_I32, F(hc_iters), {{1, MAX_SINKHORN, 20}, {1, MAX_SINKHORN, REQUIRED}}},
    {"hc_eps", KEY_F32, F(hc_eps), {{0.0, 1.0, 1e-6}, {0.0, 1.0, REQUIRED}}},
    {"sliding_window", KEY_I32, F(window), {{1, MAX_WINDOW, 128}, {1, MAX_WINDOW, REQUIRED}}},
    {"index_n_heads", KEY_I32, F(index_heads), {{1, MAX_HEADS, 64}, {1, MAX_HEADS, REQUIRED}}},
    {"index_head_dim", KEY_I32, F(index_dim), {{2, MAX_HEAD_DIM, 128}, {2, MAX_HEAD_DIM, REQUIRED}}},
    {"index_topk", KEY_I32, F(index_topk), {{1, MAX_TOPK, 512}, {1, MAX_TOPK, REQUIRED}}},
    {"rms_norm_eps", KEY_F32, F(rms_eps), {{1e-30, 1.0, 1e-6}, {0.0, 1.0, REQUIRED}}},
    {"swiglu_limit", KEY_F32, F(swiglu_limit), {{1e-6, 1e9, 10.0}, {0.0, 1e9, REQUIRED}}},
    {"routed_scaling_factor", KEY_F32, F(routed_scale), {{0.0, 1e6, 1.5}, {0.0, 1e6, REQUIRED}}},
    {"rope_theta", KEY_F64, F(rope_theta), {{1e-3, 1e12, 10000.0}, {1.0, 1e12, REQUIRED}}},
    {"compress_rope_theta", KEY_F64, F(compress_rope_theta), {{1e-3, 1e12, 160000.0}, {1.0, 1e12, REQUIRED}}},
};
#undef F

static di_status read_keys(const di_hf_config *c, di_dsv4_variant v, di_dsv4_hparams *hp, di_error *err) {
    di_status s;
    for (size_t i = 0; i < sizeof KEYS / sizeof *KEYS; i++) {
        const family_key *k = &KEYS[i];
        const key_col *col = &k->col[v];
        const int req = isnan(col->def);
        double d = 0;
        int64_t n = 0;
        if (k->kind == KEY_I32) {
            const int64_t hi = col->hi == HI_N_EXPERTS ? hp->n_experts : (int64_t)col->hi;
            s = req ? di_hf_config_get_int(c, k->key, (int64_t)col->lo, hi, &n, err)
                    : di_hf_config_get_int_or(c, k->key, (int64_t)col->lo, hi, (int64_t)col->def, &n, err);
        } else {
            s = req ? di_hf_config_get_float(c, k->key, col->lo, col->hi, &d, err)
                    : di_hf_config_get_float_or(c, k->key, col->lo, col->hi, col->def, &d, err);
        }
        if (s) return s;
        if (k->off == NO_FIELD) continue;
        void *dst = (char *)hp + k->off;
        if (k->kind == KEY_I32) *(int32_t *)dst = (int32_t)n;
        else if (k->kind == KEY_F32) *(float *)dst = (float)d;
        else *(double *)dst = d;
    }
    /* max_position_embeddings: any positive int64, kept capped to int32 */
    int64_t max_pos;
    s = v == DI_DSV4_V41 ? di_hf_config_get_int(c, "max_position_embeddings", 1, INT64_MAX, &max_pos, err)
                         : di_hf_config_get_int_or(c, "max_position_embeddings", 1, INT64_MAX, 1048576, &max_pos, err);
    if (s) return s;
    hp->n_ctx_train = max_pos > INT32_MAX ? INT32_MAX : (int32_t)max_pos;
    bool tied;
    if ((s = di_hf_config_get_bool_or(c, "tie_word_embeddings", false, &tied, err))) return s;
    hp->tied = tied;
    return DI_OK;
}

/* ---- the topology ------------------------------------------------------------ */

/* A source map: shared (V4.1's _source_map), layers from the first source
 * on map to the nearest source at or before them and earlier layers to
 * themselves; not shared (V4), a source maps to itself, any other layer
 * to -1. */
static void source_map(const int32_t *src, int32_t n_src, int32_t n_layers, int shared, int32_t *map) {
    for (int32_t l = 0; l < n_layers; l++) {
        map[l] = shared ? l : -1;
        for (int32_t i = 0; i < n_src; i++)
            if (shared ? src[i] <= l : src[i] == l) map[l] = src[i];
    }
}

static int in_list(const int32_t *v, int32_t n, int32_t x) {
    for (int32_t i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

/* The checks SharedLayerTopology makes on a shared topology: segments nest
 * index-topk within index-K within KV, consumers share their source's
 * compression ratio, KV sharing does not cross n_prefill_layer. */
static di_status check_sharing(const di_dsv4_hparams *hp, const dsv4_sources *sc, const int32_t *kv_map,
                               const int32_t *idx_map, const int32_t *idxk_map, di_error *err) {
    const int32_t L = hp->n_layers;
    const int32_t *ratios = sc->ratio;
    for (int32_t i = 0; i < sc->n_kv; i++)
        if (!in_list(sc->idxk, sc->n_idxk, sc->kv[i]))
            return di_error_set(err, DI_ERR_FORMAT, "config.json: kv source layer %d is not an index-K source",
                                (int)sc->kv[i]);
    for (int32_t i = 0; i < sc->n_idxk; i++)
        if (!in_list(sc->idx, sc->n_idx, sc->idxk[i]))
            return di_error_set(err, DI_ERR_FORMAT, "config.json: index-K source layer %d is not an index source",
                                (int)sc->idxk[i]);
    for (int32_t l = 0; l < L; l++) {
        int32_t maps[3] = {kv_map[l], idx_map[l], idxk_map[l]};
        static const char *const names[3] = {"kv", "index", "index-K"};
        for (int k = 0; k < 3; k++) {
            int32_t src = maps[k];
            if (src == l && !(k == 0 ? in_list(sc->kv, sc->n_kv, l) : k == 1 ? in_list(sc->idx, sc->n_idx, l)
                                                                             : in_list(sc->idxk, sc->n_idxk, l)))
                continue; /* not in the map: not sharing */
            if (ratios[src] == 0)
                return di_error_set(err, DI_ERR_FORMAT, "config.json: %s source layer %d has compress ratio 0",
                                    names[k], (int)src);
            if (ratios[l] != ratios[src])
                return di_error_set(err, DI_ERR_FORMAT,
                                    "config.json: layer %d (ratio %d) shares the %s of layer %d (ratio %d)", (int)l,
                                    (int)ratios[l], names[k], (int)src, (int)ratios[src]);
        }
        /* refinement chain: index-topk segments inside index-K inside KV */
        if (idxk_map[idx_map[l]] != idxk_map[l] || kv_map[idxk_map[l]] != kv_map[l])
            return di_error_set(err, DI_ERR_FORMAT,
                                "config.json: layer %d: index sharing crosses a kv or index-K segment", (int)l);
    }
    if (hp->n_prefill_layer < L && kv_map[hp->n_prefill_layer] != hp->n_prefill_layer)
        return di_error_set(err, DI_ERR_FORMAT, "config.json: kv sharing crosses layer %d (the first ratio-1 layer)",
                            (int)hp->n_prefill_layer);
    if (sc->cand >= 0 && !in_list(sc->idx, sc->n_idx, sc->cand))
        return di_error_set(err, DI_ERR_FORMAT, "config.json: candidate_source_layer_id %d is not an index source",
                            (int)sc->cand);
    return DI_OK;
}

/* The role table of every layer from the variant's sources. */
static di_status build_topology(di_dsv4_hparams *hp, int shared, const dsv4_sources *sc, di_error *err) {
    const int32_t L = hp->n_layers;
    int32_t kv_map[DI_DSV4_MAX_LAYERS], idx_map[DI_DSV4_MAX_LAYERS], idxk_map[DI_DSV4_MAX_LAYERS];
    source_map(sc->kv, sc->n_kv, L, shared, kv_map);
    source_map(sc->idx, sc->n_idx, L, shared, idx_map);
    source_map(sc->idxk, sc->n_idxk, L, shared, idxk_map);
    di_status s;
    if (shared && (s = check_sharing(hp, sc, kv_map, idx_map, idxk_map, err))) return s;
    for (int32_t l = 0; l < L; l++) {
        di_dsv4_role *r = &hp->role[l];
        r->ratio = sc->ratio[l];
        r->kv_src = r->idx_src = r->idxk_src = r->cand_src = -1;
        r->engram = -1;
        r->decoder = l > hp->n_prefill_layer;
        if (r->ratio == 0) continue;
        r->kv_src = kv_map[l];
        r->idx_src = idx_map[l];
        if (r->idx_src == l) r->idxk_src = idxk_map[l];
        r->cand_producer = sc->cand == l;
        if (sc->cand >= 0 && l > sc->cand && r->idx_src == l) r->cand_src = sc->cand;
    }
    for (int32_t i = 0; i < hp->n_engram; i++) hp->role[hp->engram_layers[i]].engram = i;
    return DI_OK;
}

/* ---- the variant table and the reader ----------------------------------------- */

typedef struct dsv4_variant_row {
    const char *name;
    /* the topology's switches */
    int shared;          /* layers share compressed KV / index keys / top-k (V4.1's source lists) */
    int ced_decoders;    /* layers past the first ratio-1 layer are CED decoders */
    int engram;          /* Engram layers */
    int hash_routing;    /* first layers route by tid2eid (mlp_layer_types / num_hash_layers) */
    int hc_head;         /* the residual copies collapse through hc_head before the norm */
    int prefix_dir;      /* errors start with the folder */
    di_status (*open)(const di_hf_config *root, di_hf_config **text, di_error *err);
    di_status (*read)(const di_hf_config *root, const di_hf_config *text, di_dsv4_hparams *hp, dsv4_sources *src,
                      di_error *err);
} dsv4_variant_row;

static const dsv4_variant_row VARIANTS[2] = {
    [DI_DSV4_V4] = {"deepseek_v4", 0, 0, 0, 1, 1, 0, v4_open, v4_read},
    [DI_DSV4_V41] = {"deepseek_v41", 1, 1, 1, 0, 0, 1, dsv41_config_open, dsv41_config_read},
};

di_status dsv4_read_config(const char *dir, di_dsv4_variant v, di_dsv4_hparams *hp, di_error *err) {
    memset(hp, 0, sizeof *hp);
    if ((unsigned)v > DI_DSV4_V41) return di_error_set(err, DI_ERR_INVALID_ARG, "deepseek: unknown variant %d", (int)v);
    const dsv4_variant_row *vt = &VARIANTS[v];
    hp->variant = v;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return di_error_set(err, DI_ERR_INVALID_ARG, "checkpoint path too long");
    di_hf_config *root = NULL, *text = NULL;
    di_status s = di_hf_config_open(path, &root, err);
    if (s) return s;
    static dsv4_sources src0; /* all zero */
    dsv4_sources src = src0;
    src.cand = -1;
    if (!(s = vt->open(root, &text, err)) && !(s = read_keys(text, v, hp, err)) &&
        !(s = vt->read(root, text, hp, &src, err))) {
        if (!vt->ced_decoders) hp->n_prefill_layer = hp->n_layers;
        if (!vt->engram) hp->n_engram = 0;
        if (!vt->hash_routing) memset(hp->hash_moe, 0, sizeof hp->hash_moe);
        s = build_topology(hp, vt->shared, &src, err);
    }
    di_hf_config_close(text);
    di_hf_config_close(root);
    if (s && vt->prefix_dir) di_error_prefix(err, "%s: ", dir);
    return s;
}

di_status di_dsv4_read_config(const char *dir, di_dsv4_hparams *hp, di_error *err) {
    return dsv4_read_config(dir, DI_DSV4_V4, hp, err);
}

const char *di_dsv41_describe_layer(const di_dsv4_hparams *hp, int32_t il, char *buf, size_t cap) {
    const di_dsv4_role *r = &hp->role[il];
    int n = 0;
#define ADD(...) n += snprintf(buf + n, (size_t)n < cap ? cap - (size_t)n : 0, __VA_ARGS__)
    ADD("%-3d %s", (int)il, r->decoder ? "decoder" : "encoder");
    if (r->ratio == 0) {
        ADD("  window only");
    } else {
        ADD("  ratio %d", (int)r->ratio);
        if (r->kv_src == il) ADD(", owns compressed KV");
        else ADD(", reads L%d's compressed KV", (int)r->kv_src);
        if (r->idx_src == il) {
            ADD(", indexer");
            if (r->idxk_src == il) ADD(" with own keys");
            else ADD(" on L%d's keys", (int)r->idxk_src);
            if (r->cand_src >= 0) ADD(" inside L%d's candidate blocks", (int)r->cand_src);
            if (r->cand_producer) ADD(", candidate source");
        } else if (r->idx_src >= 0) {
            ADD(", L%d's top-k", (int)r->idx_src);
        } else {
            ADD(", every compressed entry");
        }
    }
    if (r->engram >= 0) ADD(", Engram");
#undef ADD
    return buf;
}
