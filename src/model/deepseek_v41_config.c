/* config.json -> di_dsv41_hparams for DeepSeek-V4.1-Flash, and the layer
 * role table.
 *
 * Follows DeepInfer 0.1.0 hugging_face/config.py:load_hf_model_config: the
 * same rejections (architecture, model_type, dtype, silu, one KV head, the
 * quantization_config of the release), text_config keys with its defaults
 * (hc_shifted, use_fp4_sparse_kv, index_k_source_layer_ids), and the layer
 * maps of _shared_layer_cfg (each layer from the first source on maps to the
 * nearest source at or before it), checked the way
 * v4_modules/cross_layer.py:SharedLayerTopology checks them (segments nest
 * index-topk within index-K within KV; consumers share their source's
 * compression ratio; KV sharing does not cross n_prefill_layer), plus the
 * shape rules the forward relies on. Every value is range checked here so
 * the loader and the forward can trust them. */
#include "model/deepseek_v41_internal.h"

#include "format/hf_config.h"

#include <stdio.h>
#include <string.h>

#define MAX_VOCAB (1 << 24)
#define MAX_EMBD 65536
#define MAX_HEADS 1024
#define MAX_RANK 65536
#define MAX_EXPERTS 65536
#define MAX_FF (1 << 20)

#define MAX_WINDOW (1 << 20)
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

/* _source_map: layers from the first source on map to the nearest source at
 * or before them; earlier layers to themselves (map[l] == l). */
static void source_map(const int32_t *src, int32_t n_src, int32_t n_layers, int32_t *map) {
    for (int32_t l = 0; l < n_layers; l++) {
        map[l] = l;
        for (int32_t i = 0; i < n_src; i++)
            if (src[i] <= l) map[l] = src[i];
    }
}

static int in_list(const int32_t *v, int32_t n, int32_t x) {
    for (int32_t i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

/* The role table and the checks SharedLayerTopology makes. */
static di_status build_roles(di_dsv41_hparams *hp, const int32_t *ratios, const int32_t *kv_src, int32_t n_kv,
                             const int32_t *idx_src, int32_t n_idx, const int32_t *idxk_src, int32_t n_idxk,
                             int32_t cand, di_error *err) {
    const int32_t L = hp->n_layers;
    int32_t kv_map[DI_DSV41_MAX_LAYERS], idx_map[DI_DSV41_MAX_LAYERS], idxk_map[DI_DSV41_MAX_LAYERS];
    source_map(kv_src, n_kv, L, kv_map);
    source_map(idx_src, n_idx, L, idx_map);
    source_map(idxk_src, n_idxk, L, idxk_map);
    for (int32_t i = 0; i < n_kv; i++)
        if (!in_list(idxk_src, n_idxk, kv_src[i]))
            return di_error_set(err, DI_ERR_FORMAT, "config.json: kv source layer %d is not an index-K source",
                                (int)kv_src[i]);
    for (int32_t i = 0; i < n_idxk; i++)
        if (!in_list(idx_src, n_idx, idxk_src[i]))
            return di_error_set(err, DI_ERR_FORMAT, "config.json: index-K source layer %d is not an index source",
                                (int)idxk_src[i]);
    for (int32_t l = 0; l < L; l++) {
        int32_t maps[3] = {kv_map[l], idx_map[l], idxk_map[l]};
        static const char *const names[3] = {"kv", "index", "index-K"};
        for (int k = 0; k < 3; k++) {
            int32_t src = maps[k];
            if (src == l && !(k == 0 ? in_list(kv_src, n_kv, l) : k == 1 ? in_list(idx_src, n_idx, l)
                                                                         : in_list(idxk_src, n_idxk, l)))
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
    if (cand >= 0 && !in_list(idx_src, n_idx, cand))
        return di_error_set(err, DI_ERR_FORMAT, "config.json: candidate_source_layer_id %d is not an index source",
                            (int)cand);
    for (int32_t l = 0; l < L; l++) {
        di_dsv41_role *r = &hp->role[l];
        r->ratio = ratios[l];
        r->kv_src = r->idx_src = r->idxk_src = r->cand_src = -1;
        r->engram = -1;
        r->decoder = l > hp->n_prefill_layer;
        if (ratios[l] == 0) continue;
        r->kv_src = kv_map[l];
        r->idx_src = idx_map[l];
        if (r->idx_src == l) r->idxk_src = idxk_map[l];
        r->cand_producer = cand == l;
        if (cand >= 0 && l > cand && r->idx_src == l) r->cand_src = cand;
    }
    for (int32_t i = 0; i < hp->n_engram; i++) hp->role[hp->engram_layers[i]].engram = i;
    return DI_OK;
}

static di_status read_rope(const di_hf_config *t, di_dsv41_hparams *hp, di_error *err) {
    di_status s;
    GET_FLOAT(t, "rope_theta", 1.0, 1e12, hp->rope_theta);
    GET_FLOAT(t, "compress_rope_theta", 1.0, 1e12, hp->compress_rope_theta);
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
done:
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
    int32_t kvh;
    GET_INT(t, "num_key_value_heads", 1, 1, kvh);
    (void)kvh;
    GET_INT(t, "vocab_size", 3, MAX_VOCAB, hp->n_vocab);
    GET_INT(t, "hidden_size", 128, MAX_EMBD, hp->n_embd);
    GET_INT(t, "num_hidden_layers", 1, DI_DSV41_MAX_LAYERS, hp->n_layers);
    GET_INT(t, "num_attention_heads", 1, MAX_HEADS, hp->n_heads);
    GET_INT(t, "head_dim", 64, 4096, hp->head_dim);
    GET_INT(t, "qk_rope_head_dim", 2, 4096, hp->n_rot);
    GET_INT(t, "q_lora_rank", 1, MAX_RANK, hp->q_lora);
    GET_INT(t, "o_groups", 1, MAX_HEADS, hp->o_groups);
    GET_INT(t, "o_lora_rank", 1, MAX_RANK, hp->o_lora);
    GET_INT(t, "sliding_window", 1, MAX_WINDOW, hp->window);
    int64_t mp;
    if ((s = di_hf_config_get_int(t, "max_position_embeddings", 1, INT64_MAX, &mp, err))) goto done;
    hp->n_ctx_train = mp > INT32_MAX ? INT32_MAX : (int32_t)mp;
    GET_FLOAT(t, "rms_norm_eps", 0.0, 1.0, hp->rms_eps);
    GET_FLOAT(t, "swiglu_limit", 0.0, 1e9, hp->swiglu_limit);
    if ((s = di_hf_config_get_bool_or(t, "tie_word_embeddings", false, &b, err))) goto done;
    hp->tied = b;
    GET_INT(t, "hc_mult", 1, DSV41_MAX_HC, hp->hc_mult);
    GET_INT(t, "hc_sinkhorn_iters", 1, 1000, hp->hc_iters);
    GET_FLOAT(t, "hc_eps", 0.0, 1.0, hp->hc_eps);
    if ((s = di_hf_config_get_bool_or(t, "hc_shifted", true, &b, err))) goto done;
    if (!b) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "config.json: hc_shifted false (V4-style mHC) is not a V4.1 model");
        goto done;
    }
    if ((s = di_hf_config_get_bool_or(t, "use_fp4_sparse_kv", true, &b, err))) goto done;
    hp->use_fp4_kv = b;
    if ((s = read_rope(t, hp, err))) goto done;
    GET_INT(t, "index_topk", 1, MAX_TOPK, hp->index_topk);
    GET_INT(t, "index_n_heads", 1, MAX_HEADS, hp->index_heads);
    GET_INT(t, "index_head_dim", 2, 4096, hp->index_dim);
    GET_INT(t, "moe_intermediate_size", 1, MAX_FF, hp->moe_ff);
    GET_INT(t, "n_routed_experts", 1, MAX_EXPERTS, hp->n_experts);
    GET_INT(t, "n_shared_experts", 1, 1, hp->n_shared);
    GET_INT(t, "num_experts_per_tok", 1, MAX_EXPERTS, hp->n_experts_used);
    GET_FLOAT(t, "routed_scaling_factor", 0.0, 1e6, hp->routed_scale);
    const char *sf = NULL;
    if ((s = di_hf_config_get_string(t, "scoring_func", &sf, err))) goto done;
    if (strcmp(sf, "sqrtsoftplus"))
        FAIL("config.json: scoring_func '%.32s' (sqrtsoftplus expected)", sf);
    if ((s = di_hf_config_get_bool_or(t, "norm_topk_prob", true, &b, err))) goto done;
    if (!b) FAIL("config.json: norm_topk_prob false is not supported");
    /* DSpark and Engram */
    GET_INT_OR(t, "num_nextn_predict_layers", 0, 64, 0, hp->n_mtp);
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

static di_status read_all(const di_hf_config *root, const di_hf_config *t, di_dsv41_hparams *hp, di_error *err) {
    di_status s;
    if ((s = check_root(root, err)) || (s = read_text(t, hp, err))) return s;
    int64_t r64[DI_DSV41_MAX_LAYERS + 64];
    size_t nr = 0;
    if ((s = di_hf_config_get_int_array(t, "compress_ratios", 0, 2, r64, DI_DSV41_MAX_LAYERS + 64, &nr, err))) return s;
    if ((int64_t)nr != (int64_t)hp->n_layers + hp->n_mtp)
        return di_error_set(err, DI_ERR_FORMAT, "config.json: compress_ratios has %zu entries, %d layers + %d nextn", nr,
                            (int)hp->n_layers, (int)hp->n_mtp);
    int32_t ratios[DI_DSV41_MAX_LAYERS];
    hp->n_prefill_layer = hp->n_layers;
    for (int32_t l = 0; l < hp->n_layers; l++) {
        ratios[l] = (int32_t)r64[l];
        if (ratios[l] == 1 && hp->n_prefill_layer == hp->n_layers) hp->n_prefill_layer = l;
    }
    for (size_t i = (size_t)hp->n_layers; i < nr; i++)
        if (r64[i] != 0) return di_error_set(err, DI_ERR_FORMAT, "config.json: compress_ratios of DSpark layer %zu is not 0",
                                             i - (size_t)hp->n_layers);
    int32_t kv[DI_DSV41_MAX_LAYERS], idx[DI_DSV41_MAX_LAYERS], idxk[DI_DSV41_MAX_LAYERS];
    int32_t n_kv = 0, n_idx = 0, n_idxk = 0, cand = -1;
    if ((s = layer_list(t, "kv_source_layer_ids", hp->n_layers, kv, DI_DSV41_MAX_LAYERS, &n_kv, err)) ||
        (s = layer_list(t, "index_source_layer_ids", hp->n_layers, idx, DI_DSV41_MAX_LAYERS, &n_idx, err)))
        return s;
    if (di_hf_config_has(t, "index_k_source_layer_ids")) {
        if ((s = layer_list(t, "index_k_source_layer_ids", hp->n_layers, idxk, DI_DSV41_MAX_LAYERS, &n_idxk, err)))
            return s;
    } else {
        memcpy(idxk, kv, sizeof(int32_t) * (size_t)n_kv);
        n_idxk = n_kv;
    }
    if (di_hf_config_has(t, "candidate_source_layer_id")) {
        int64_t v;
        if ((s = di_hf_config_get_int(t, "candidate_source_layer_id", 0, hp->n_layers - 1, &v, err))) return s;
        cand = (int32_t)v;
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
    if ((s = check_shapes(hp, err))) return s;
    return build_roles(hp, ratios, kv, n_kv, idx, n_idx, idxk, n_idxk, cand, err);
done:
    return s;
}

di_status di_dsv41_read_config(const char *dir, di_dsv41_hparams *hp, di_error *err) {
    memset(hp, 0, sizeof *hp);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return di_error_set(err, DI_ERR_INVALID_ARG, "path too long");
    di_hf_config *root = NULL, *text = NULL;
    di_status s = di_hf_config_open(path, &root, err);
    if (s) return s;
    if (!di_hf_config_has(root, "text_config"))
        s = di_error_set(err, DI_ERR_FORMAT, "config.json: no text_config (the V4.1 release nests it)");
    else if (!(s = di_hf_config_section(root, "text_config", &text, err)))
        s = read_all(root, text, hp, err);
    di_hf_config_close(text);
    di_hf_config_close(root);
    if (s) di_error_prefix(err, "%s: ", dir);
    return s;
}

const char *di_dsv41_describe_layer(const di_dsv41_hparams *hp, int32_t il, char *buf, size_t cap) {
    const di_dsv41_role *r = &hp->role[il];
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
        } else {
            ADD(", L%d's top-k", (int)r->idx_src);
        }
    }
    if (r->engram >= 0) ADD(", Engram");
#undef ADD
    return buf;
}
