/* DeepSeek-V4.1-Flash's column of the family's config reader
 * (deepseek_v4_config.c reads the keys both variants name and builds the
 * layer role table).
 *
 * Follows DeepInfer 0.1.0 hugging_face/config.py:load_hf_model_config: the
 * same rejections (architecture, model_type, dtype, silu, one KV head, the
 * quantization_config of the release), text_config keys with its defaults
 * (hc_shifted, use_fp4_sparse_kv, index_k_source_layer_ids), and the source
 * lists of _shared_layer_cfg the topology builder maps and checks the way
 * v4_modules/cross_layer.py:SharedLayerTopology does, plus the shape rules
 * the forward relies on. Every value is range checked here so the loader
 * and the forward can trust them. */
#include "model/deepseek_v41_internal.h"

#include "format/hf_config.h"

#include <stdio.h>
#include <string.h>

#define MAX_VOCAB (1 << 24)
#define MAX_RANK 65536
#define MAX_EXPERTS 65536
#define MAX_TOPK (1 << 20)

const char *di_dsv41_numerics_name(di_dsv41_numerics n) {
    return n == DI_DSV41_NUMERICS_IDEAL ? "ideal" : "deepinfer";
}

int di_dsv41_numerics_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "deepinfer")) return DI_DSV41_NUMERICS_DEEPINFER;
    if (!strcmp(name, "ideal")) return DI_DSV41_NUMERICS_IDEAL;
    return -1;
}

int di_dsv41_is_config(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) return 0;
    di_hf_config *c = NULL;
    di_error err;
    if (di_hf_config_open(path, &c, &err)) return 0;
    const char *mt = NULL;
    int yes = di_hf_config_get_string(c, "model_type", &mt, &err) == DI_OK && !strcmp(mt, "deepseek_v41");
    di_hf_config_close(c);
    return yes;
}

#define GET_INT(cfg, key, lo, hi, dst) DSV4_CFG_INT(cfg, key, lo, hi, dst)
#define GET_INT_OR(cfg, key, lo, hi, def, dst) DSV4_CFG_INT_OR(cfg, key, lo, hi, def, dst)
#define GET_FLOAT(cfg, key, lo, hi, dst)                                              \
    do {                                                                              \
        if ((s = di_hf_config_get_float(cfg, key, lo, hi, &(dst), err))) goto done;   \
    } while (0)
#define FAIL(...)                                                                     \
    do {                                                                              \
        s = di_error_set(err, DI_ERR_FORMAT, __VA_ARGS__);                            \
        goto done;                                                                    \
    } while (0)

static di_status expect_string(const di_hf_config *c, const char *key, const char *want, di_error *err) {
    const char *v = NULL;
    di_status s = di_hf_config_get_string(c, key, &v, err);
    if (s) return s;
    if (strcmp(v, want))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "config.json: %s is '%.64s', DeepSeek-V4.1 needs '%s'", key, v,
                            want);
    return DI_OK;
}

/* The root-level checks of _assert_supported and the quantization_config. */
static di_status check_root(const di_hf_config *root, di_error *err) {
    const char *arch[2];
    size_t n = 0;
    di_status s = di_hf_config_get_string_array(root, "architectures", arch, 2, &n, err);
    if (s) return s;
    if (n != 1 || strcmp(arch[0], "DeepseekV41ForCausalLM"))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "config.json: architectures must be [\"DeepseekV41ForCausalLM\"]");
    if ((s = expect_string(root, "model_type", "deepseek_v41", err))) return s;
    if ((s = expect_string(root, "dtype", "bfloat16", err))) return s;
    di_hf_config *q = NULL;
    if ((s = di_hf_config_section(root, "quantization_config", &q, err))) return s;
    if (!(s = expect_string(q, "quant_method", "fp8", err)) && !(s = expect_string(q, "expert_dtype", "fp4", err)) &&
        !(s = expect_string(q, "activation_scheme", "dynamic", err)) && !(s = expect_string(q, "scale_fmt", "ue8m0", err))) {
        int64_t blk[2];
        size_t nb = 0;
        s = di_hf_config_get_int_array(q, "weight_block_size", 1, 4096, blk, 2, &nb, err);
        if (!s && (nb != 2 || blk[0] != DSV41_FP8_BLOCK || blk[1] != DSV41_FP8_BLOCK))
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "config.json: weight_block_size must be [32, 32]");
    }
    di_hf_config_close(q);
    return s;
}

/* Reads a list of layer ids, each in [0, n_layers), strictly increasing. */
static di_status layer_list(const di_hf_config *t, const char *key, int32_t n_layers, int32_t *out, int32_t cap,
                            int32_t *n_out, di_error *err) {
    int64_t v[DI_DSV41_MAX_LAYERS];
    size_t n = 0;
    di_status s = di_hf_config_get_int_array(t, key, 0, n_layers - 1, v, DI_DSV41_MAX_LAYERS, &n, err);
    if (s) return s;
    if ((int32_t)n > cap) return di_error_set(err, DI_ERR_RANGE, "config.json: %s has more than %d entries", key, (int)cap);
    for (size_t i = 0; i < n; i++) {
        if (i && v[i] <= v[i - 1])
            return di_error_set(err, DI_ERR_FORMAT, "config.json: %s must be increasing layer ids", key);
        out[i] = (int32_t)v[i];
    }
    *n_out = (int32_t)n;
    return DI_OK;
}

/* rope_theta and compress_rope_theta are the shared keys; YaRN when
 * rope_scaling is there (all four of its values required). */
static di_status read_rope(const di_hf_config *t, di_dsv41_hparams *hp, di_error *err) {
    di_status s = DI_OK;
    hp->yarn = di_hf_config_has(t, "rope_scaling");
    if (hp->yarn) {
        di_hf_config *r = NULL;
        if ((s = di_hf_config_section(t, "rope_scaling", &r, err))) return s;
        if (!(s = di_hf_config_get_float(r, "factor", 1.0, 1e6, &hp->yarn_factor, err)) &&
            !(s = di_hf_config_get_float(r, "original_max_position_embeddings", 1.0, 1e12, &hp->yarn_orig_ctx, err)) &&
            !(s = di_hf_config_get_float(r, "beta_fast", 0.0, 1e6, &hp->yarn_beta_fast, err)))
            s = di_hf_config_get_float(r, "beta_slow", 0.0, 1e6, &hp->yarn_beta_slow, err);
        di_hf_config_close(r);
    }
    return s;
}

static di_status read_text(const di_hf_config *t, di_dsv41_hparams *hp, di_error *err) {
    di_status s = DI_OK;
    const char *act = NULL;
    bool b;
    if ((s = di_hf_config_get_string(t, "hidden_act", &act, err))) goto done;
    if (strcmp(act, "silu")) FAIL("config.json: hidden_act '%.32s' (silu expected)", act);
    if ((s = di_hf_config_get_bool_or(t, "attention_bias", false, &b, err))) goto done;
    if (b) FAIL("config.json: attention_bias must be false");
    GET_INT(t, "qk_rope_head_dim", 2, 4096, hp->n_rot);
    if ((s = di_hf_config_get_bool_or(t, "hc_shifted", true, &b, err))) goto done;
    if (!b) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "config.json: hc_shifted false (V4-style mHC) is not a V4.1 model");
        goto done;
    }
    if ((s = di_hf_config_get_bool_or(t, "use_fp4_sparse_kv", true, &b, err))) goto done;
    hp->use_fp4_kv = b;
    if ((s = read_rope(t, hp, err))) goto done;
    const char *sf = NULL;
    if ((s = di_hf_config_get_string(t, "scoring_func", &sf, err))) goto done;
    if (strcmp(sf, "sqrtsoftplus"))
        FAIL("config.json: scoring_func '%.32s' (sqrtsoftplus expected)", sf);
    if ((s = di_hf_config_get_bool_or(t, "norm_topk_prob", true, &b, err))) goto done;
    if (!b) FAIL("config.json: norm_topk_prob false is not supported");
    /* DSpark and Engram */
    if (hp->n_mtp) {
        GET_INT(t, "dspark_block_size", 1, 64, hp->dspark_block);
        GET_INT(t, "dspark_markov_rank", 1, MAX_RANK, hp->dspark_markov_rank);
        GET_INT(t, "dspark_noise_token_id", 0, hp->n_vocab - 1, hp->dspark_noise_token);
        GET_INT(t, "dspark_n_routed_experts", 1, MAX_EXPERTS, hp->dspark_n_experts);
        GET_INT(t, "dspark_num_experts_per_tok", 1, MAX_EXPERTS, hp->dspark_n_experts_used);
        if ((s = layer_list(t, "dspark_target_layer_ids", hp->n_layers, hp->dspark_targets, 8, &hp->n_dspark_targets,
                            err)))
            goto done;
    }
    if (di_hf_config_has(t, "engram_layer_ids")) {
        if ((s = layer_list(t, "engram_layer_ids", hp->n_layers, hp->engram_layers, DI_DSV41_MAX_ENGRAM, &hp->n_engram,
                            err)))
            goto done;
    }
    if (hp->n_engram) {
        GET_INT(t, "engram_max_ngram_size", 2, 8, hp->engram_max_ngram);
        GET_INT(t, "engram_n_heads", 1, 64, hp->engram_heads);
        GET_INT(t, "engram_head_dim", 32, 4096, hp->engram_head_dim);
        int64_t v;
        if ((s = di_hf_config_get_int(t, "engram_vocab_size", 2, (int64_t)1 << 40, &v, err))) goto done;
        hp->engram_vocab = v;
        GET_INT_OR(t, "engram_compressed_vocab_size", 0, MAX_VOCAB, 0, hp->engram_compressed_vocab);
        if (hp->engram_head_dim % 32) FAIL("config.json: engram_head_dim %d is not a multiple of 32", (int)hp->engram_head_dim);
    }
done:
    return s;
}

/* Shape rules the forward needs (a subset of DeepInfer's asserts, notes 5.3,
 * plus what our kernels assume). */
static di_status check_shapes(const di_dsv41_hparams *hp, di_error *err) {
    if (hp->n_rot % 2 || hp->n_rot > hp->head_dim || hp->n_rot > hp->index_dim || hp->n_rot / 2 > DSV41_MAX_ROPE_PAIRS)
        return di_error_set(err, DI_ERR_FORMAT, "config.json: qk_rope_head_dim %d does not fit head_dim %d / index_head_dim %d",
                            (int)hp->n_rot, (int)hp->head_dim, (int)hp->index_dim);
    if (hp->head_dim % 32 || hp->index_dim % 32 || hp->n_embd % 32 || hp->q_lora % 32 || hp->moe_ff % 32 ||
        hp->o_lora % 32)
        return di_error_set(err, DI_ERR_FORMAT,
                            "config.json: hidden, head, index, q/o lora and expert widths must be multiples of 32");
    if (hp->n_heads % hp->o_groups)
        return di_error_set(err, DI_ERR_FORMAT, "config.json: %d heads do not split into %d output groups",
                            (int)hp->n_heads, (int)hp->o_groups);
    if (hp->n_experts_used > hp->n_experts || hp->n_experts_used > DSV41_MAX_TOPK_EXPERTS)
        return di_error_set(err, DI_ERR_FORMAT, "config.json: num_experts_per_tok %d of %d experts",
                            (int)hp->n_experts_used, (int)hp->n_experts);
    if (hp->n_mtp && (hp->dspark_n_experts_used > hp->dspark_n_experts))
        return di_error_set(err, DI_ERR_FORMAT, "config.json: dspark_num_experts_per_tok > dspark_n_routed_experts");
    if (hp->cand_topk_blocks && (hp->cand_block < 1 || hp->cand_topk_blocks < 1))
        return di_error_set(err, DI_ERR_FORMAT, "config.json: bad candidate block settings");
    return DI_OK;
}

di_status dsv41_config_read(const di_hf_config *root, const di_hf_config *t, di_dsv41_hparams *hp, dsv4_sources *src,
                            di_error *err) {
    di_status s;
    hp->fp8_block = DSV41_FP8_BLOCK;
    if ((s = read_text(t, hp, err))) return s;
    int64_t r64[DI_DSV41_MAX_LAYERS + 64];
    size_t nr = 0;
    if ((s = di_hf_config_get_int_array(t, "compress_ratios", 0, 2, r64, DI_DSV41_MAX_LAYERS + 64, &nr, err))) return s;
    if ((int64_t)nr != (int64_t)hp->n_layers + hp->n_mtp)
        return di_error_set(err, DI_ERR_FORMAT, "config.json: compress_ratios has %zu entries, %d layers + %d nextn", nr,
                            (int)hp->n_layers, (int)hp->n_mtp);
    hp->n_prefill_layer = hp->n_layers;
    for (int32_t l = 0; l < hp->n_layers; l++) {
        src->ratio[l] = (int32_t)r64[l];
        if (src->ratio[l] == 1 && hp->n_prefill_layer == hp->n_layers) hp->n_prefill_layer = l;
    }
    for (size_t i = (size_t)hp->n_layers; i < nr; i++)
        if (r64[i] != 0) return di_error_set(err, DI_ERR_FORMAT, "config.json: compress_ratios of DSpark layer %zu is not 0",
                                             i - (size_t)hp->n_layers);
    if ((s = layer_list(t, "kv_source_layer_ids", hp->n_layers, src->kv, DI_DSV41_MAX_LAYERS, &src->n_kv, err)) ||
        (s = layer_list(t, "index_source_layer_ids", hp->n_layers, src->idx, DI_DSV41_MAX_LAYERS, &src->n_idx, err)))
        return s;
    if (di_hf_config_has(t, "index_k_source_layer_ids")) {
        if ((s = layer_list(t, "index_k_source_layer_ids", hp->n_layers, src->idxk, DI_DSV41_MAX_LAYERS, &src->n_idxk,
                            err)))
            return s;
    } else {
        memcpy(src->idxk, src->kv, sizeof(int32_t) * (size_t)src->n_kv);
        src->n_idxk = src->n_kv;
    }
    if (di_hf_config_has(t, "candidate_source_layer_id")) {
        int64_t v;
        if ((s = di_hf_config_get_int(t, "candidate_source_layer_id", 0, hp->n_layers - 1, &v, err))) return s;
        src->cand = (int32_t)v;
        int32_t tb, bs;
        GET_INT(t, "candidate_topk_blocks", 1, MAX_TOPK, tb);
        GET_INT(t, "candidate_block_size", 1, 4096, bs);
        hp->cand_topk_blocks = tb;
        hp->cand_block = bs;
    }
    int64_t id;
    if ((s = di_hf_config_get_int_or(root, "bos_token_id", 0, hp->n_vocab - 1, -1, &id, err))) return s;
    hp->bos = (int32_t)id;
    if ((s = di_hf_config_get_int_or(root, "eos_token_id", 0, hp->n_vocab - 1, -1, &id, err))) return s;
    hp->eos = (int32_t)id;
    if ((s = di_hf_config_get_int_or(root, "pad_token_id", 0, hp->n_vocab - 1, -1, &id, err))) return s;
    hp->pad = (int32_t)id;
    return check_shapes(hp, err);
done:
    return s;
}

/* The release nests its text model under text_config; the root holds the
 * architecture, dtype and quantization_config. */
di_status dsv41_config_open(const di_hf_config *root, di_hf_config **text, di_error *err) {
    if (!di_hf_config_has(root, "text_config"))
        return di_error_set(err, DI_ERR_FORMAT, "config.json: no text_config (the V4.1 release nests it)");
    di_status s = di_hf_config_section(root, "text_config", text, err);
    return s ? s : check_root(root, err);
}

di_status di_dsv41_read_config(const char *dir, di_dsv41_hparams *hp, di_error *err) {
    return dsv4_read_config(dir, DI_DSV4_V41, hp, err);
}
