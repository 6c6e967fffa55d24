/* config.json -> di_dsv4_hparams for DeepSeek-V4.
 *
 * Follows transformers' DeepseekV4Config, including the legacy spellings the
 * released checkpoints ship (compress_ratios, compress_rate_csa/hca,
 * num_hash_layers, qk_rope_head_dim, rope_scaling) and the modern ones
 * (layer_types, compress_rates, mlp_layer_types, partial_rotary_factor,
 * rope_parameters flat or nested {main, compress}). Every index-like value is
 * range checked here, so the loader and forward can trust them. */
#include "model/deepseek_v4_internal.h"

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

/* layer_types, else legacy compress_ratios (0/4/128 per layer, possibly
 * longer than n_layers: the MTP layer's entry is dropped as transformers
 * does), else the V4 default (2 HCA, then alternating HCA/CSA). */
static di_status read_layer_types(const di_hf_config *c, di_dsv4_hparams *hp, di_error *err) {
    int32_t n = hp->n_layers;
    size_t len;
    di_status s;
    if (di_hf_config_has(c, "layer_types")) {
        const char *names[DI_DSV4_MAX_LAYERS];
        if ((s = di_hf_config_get_string_array(c, "layer_types", names, DI_DSV4_MAX_LAYERS, &len, err)))
            return s;
        if ((int32_t)len != n)
            return di_error_set(err, DI_ERR_FORMAT, "%s: layer_types has %zu entries for %d layers",
                                di_hf_config_name(c), len, (int)n);
        for (int32_t i = 0; i < n; i++) {
            int k = -1;
            for (int j = 0; j < 3; j++)
                if (!strcmp(names[i], LAYER_TYPE_NAMES[j])) k = j;
            if (k < 0)
                return di_error_set(err, DI_ERR_FORMAT, "%s: layer_types[%d] = '%.64s' is not a V4 layer type",
                                    di_hf_config_name(c), (int)i, names[i]);
            hp->attn_kind[i] = (uint8_t)k;
        }
        return DI_OK;
    }
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
    if (di_hf_config_has(c, "mlp_layer_types")) {
        const char *names[DI_DSV4_MAX_LAYERS];
        size_t len;
        if ((s = di_hf_config_get_string_array(c, "mlp_layer_types", names, DI_DSV4_MAX_LAYERS, &len, err)))
            return s;
        if ((int32_t)len != n)
            return di_error_set(err, DI_ERR_FORMAT, "%s: mlp_layer_types has %zu entries for %d layers",
                                di_hf_config_name(c), len, (int)n);
        for (int32_t i = 0; i < n; i++) {
            if (!strcmp(names[i], MLP_TYPE_NAMES[0])) hp->hash_moe[i] = 0;
            else if (!strcmp(names[i], MLP_TYPE_NAMES[1])) hp->hash_moe[i] = 1;
            else
                return di_error_set(err, DI_ERR_FORMAT, "%s: mlp_layer_types[%d] = '%.64s' (must be moe or hash_moe)",
                                    di_hf_config_name(c), (int)i, names[i]);
        }
        return DI_OK;
    }
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

di_status dsv4_hparams_from_config(const char *path, di_dsv4_hparams *hp, di_error *err) {
    memset(hp, 0, sizeof *hp);
    di_hf_config *root = NULL, *c = NULL;
    di_status s = di_hf_config_open(path, &root, err);
    if (s) return s;
    if ((s = di_hf_config_text_section(root, &c, err))) goto done;
    const char *mt, *root_mt = "";
    if ((s = di_hf_config_get_string_or(root, "model_type", "", &root_mt, err))) goto done;
    if ((s = di_hf_config_get_string(c, "model_type", &mt, err))) goto done;
    /* V4.1 keeps its text model under text_config; either spelling counts */
    if (!strncmp(mt, "deepseek_v41", 12) || !strncmp(root_mt, "deepseek_v41", 12)) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED,
                         "%s: DeepSeek-V4.1 (deepseek_v41) is not implemented: no reference implementation "
                         "to verify it against yet", di_hf_config_name(c));
        goto done;
    }
    if (strcmp(mt, "deepseek_v4")) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not deepseek_v4", di_hf_config_name(c), mt);
        goto done;
    }
    GET_INT("vocab_size", 1, MAX_VOCAB, 129280, hp->n_vocab);
    GET_INT("hidden_size", 1, MAX_EMBD, 4096, hp->n_embd);
    GET_INT("num_hidden_layers", 1, DI_DSV4_MAX_LAYERS, 43, hp->n_layers);
    /* transformers' default is 1 (the V4 base release ships one MTP module) */
    GET_INT("num_nextn_predict_layers", 0, DI_DSV4_MAX_MTP, 1, hp->n_mtp);
    memset(hp->mtp_attn_kind, DI_DSV4_KIND_UNKNOWN, sizeof hp->mtp_attn_kind);
    GET_INT("num_attention_heads", 1, MAX_HEADS, 64, hp->n_heads);
    int32_t n_kv;
    GET_INT("num_key_value_heads", 1, 1, 1, n_kv);
    (void)n_kv;
    GET_INT("head_dim", 2, MAX_HEAD_DIM, 512, hp->head_dim);
    GET_INT("q_lora_rank", 1, MAX_RANK, 1024, hp->q_lora);
    GET_INT("o_groups", 1, MAX_HEADS, 8, hp->o_groups);
    GET_INT("o_lora_rank", 1, MAX_RANK, 1024, hp->o_lora);
    GET_INT("n_routed_experts", 1, MAX_EXPERTS, 256, hp->n_experts);
    GET_INT("num_experts_per_tok", 1, hp->n_experts, 6, hp->n_experts_used);
    GET_INT("moe_intermediate_size", 1, MAX_FF, 2048, hp->moe_ff);
    int32_t n_shared;
    /* transformers builds exactly one shared expert whatever this says;
     * accept only the value that agrees with it */
    GET_INT("n_shared_experts", 1, 1, 1, n_shared);
    (void)n_shared;
    GET_INT("hc_mult", 1, MAX_HC, 4, hp->hc_mult);
    GET_INT("hc_sinkhorn_iters", 1, MAX_SINKHORN, 20, hp->hc_iters);
    double d;
    GET_FLOAT("hc_eps", 0.0, 1.0, 1e-6, d);
    hp->hc_eps = (float)d;
    GET_INT("sliding_window", 1, MAX_WINDOW, 128, hp->window);
    GET_INT("compress_rates.compressed_sparse_attention", 1, MAX_RATIO, 4, hp->ratio_csa);
    GET_INT("compress_rates.heavily_compressed_attention", 1, MAX_RATIO, 128, hp->ratio_hca);
    GET_INT("compress_rate_csa", 1, MAX_RATIO, hp->ratio_csa, hp->ratio_csa);
    GET_INT("compress_rate_hca", 1, MAX_RATIO, hp->ratio_hca, hp->ratio_hca);
    GET_INT("index_n_heads", 1, MAX_HEADS, 64, hp->index_heads);
    GET_INT("index_head_dim", 2, MAX_HEAD_DIM, 128, hp->index_dim);
    GET_INT("index_topk", 1, MAX_TOPK, 512, hp->index_topk);
    GET_FLOAT("rms_norm_eps", 1e-30, 1.0, 1e-6, d);
    hp->rms_eps = (float)d;
    GET_FLOAT("swiglu_limit", 1e-6, 1e9, 10.0, d);
    hp->swiglu_limit = (float)d;
    GET_FLOAT("routed_scaling_factor", 0.0, 1e6, 1.5, d);
    hp->routed_scale = (float)d;
    GET_FLOAT("rope_theta", 1e-3, 1e12, 10000.0, hp->rope_theta);
    GET_FLOAT("compress_rope_theta", 1e-3, 1e12, 160000.0, hp->compress_rope_theta);
    int64_t max_pos;
    if ((s = di_hf_config_get_int_or(c, "max_position_embeddings", 1, INT64_MAX, 1048576, &max_pos, err))) goto done;
    hp->n_ctx_train = max_pos > INT32_MAX ? INT32_MAX : (int32_t)max_pos;
    GET_INT("bos_token_id", 0, hp->n_vocab - 1, -1, hp->bos);
    int64_t eos[16];
    size_t n_eos = 0;
    hp->eos = -1;
    if (di_hf_config_has(c, "eos_token_id")) {
        if ((s = di_hf_config_get_token_ids(c, "eos_token_id", 0, hp->n_vocab - 1, eos, 16, &n_eos, err))) goto done;
        if (n_eos) hp->eos = (int32_t)eos[0];
    }
    bool tied, bias;
    if ((s = di_hf_config_get_bool_or(c, "tie_word_embeddings", false, &tied, err))) goto done;
    hp->tied = tied;
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
done:
    di_hf_config_close(c);
    di_hf_config_close(root);
    return s;
}

di_status di_dsv4_read_config(const char *dir, di_dsv4_hparams *hp, di_error *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return di_error_set(err, DI_ERR_INVALID_ARG, "checkpoint path too long");
    return dsv4_hparams_from_config(path, hp, err);
}
