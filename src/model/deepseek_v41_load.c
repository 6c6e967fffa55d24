/* Binds a V4.1 checkpoint's tensors (the release's names, the table of
 * notes/v41_forward_and_oracle.md section 3, DeepInfer hugging_face/names.py)
 * to dsv41_layer fields through V4's binders, checking every shape and
 * dtype against the validated hyper-parameters and the role table: a layer
 * binds a compressor only when it is a kv source, an indexer only when it is
 * an index source, index keys (wk, k_norm) only when it is an index-K
 * source, Engram tensors only on Engram layers. A tensor the role says must
 * exist and does not is an error naming it; so is a wrong dtype or shape.
 *
 *   linear   FP8 e4m3 [out, in] + F8_E8M0 `.scale` [out/32, in/32]; BF16
 *   experts  I8 packed e2m1 [out, in/2] + F8_E8M0 `.scale` [out, in/32]
 *   mHC      hc_{attn,ffn}_fn F32 [(2+N)*N, N*D], _base [(2+N)*N], _scale [3]
 *   Engram   engram.embed.weight F8_E4M3 [rows, head_dim] + F8_E8M0 .scale
 *            [rows, head_dim/32] (memory-mapped, never copied), wkv FP8,
 *            q_weight / k_weight [N, D]
 *
 * mtp.* (DSpark): bind_dspark below, when the checkpoint carries them. */
#include "model/deepseek_v41_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <string.h>

#define NAME_LEN 256

#define LIN(...) DSV4_BIND_LIN(B, pfx, __VA_ARGS__)
#define VEC(...) DSV4_BIND_VEC(B, pfx, __VA_ARGS__)

static di_status expect_kind(const dsv4_linear *w, dsv4_wkind kind, const char *name, const char *what,
                             di_error *err) {
    if (w->kind != kind)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s.weight': must be %s", name, what);
    return DI_OK;
}

static di_status bind_engram(di_dsv41_model *m, int32_t il, dsv41_engram_w *e, di_error *err) {
    di_dsv4_model *B = &m->base;
    const di_dsv41_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult, hd = hp->engram_head_dim;
    const int64_t cols = (int64_t)(hp->engram_max_ngram - 1) * hp->engram_heads;
    char name[NAME_LEN], pfx[64];
    di_status s;
    snprintf(pfx, sizeof pfx, "layers.%d", (int)il);
    dsv4_linear qw, kw; /* [N, D] float matrices, widened to f32 */
    snprintf(name, sizeof name, "layers.%d.engram.q_weight", (int)il);
    if ((s = dsv4_bind_float_matrix(B, name, N, D, &qw, err))) return s;
    snprintf(name, sizeof name, "layers.%d.engram.k_weight", (int)il);
    if ((s = dsv4_bind_float_matrix(B, name, N, D, &kw, err))) return s;
    e->q_weight = qw.data;
    e->k_weight = kw.data;
    LIN("engram.wkv", (N + 1) * D, cols * hd, 0, &e->wkv);
    if ((s = expect_kind(&e->wkv, DSV4_W_FP8, name, "FP8 e4m3 with .scale", err))) return s;
    snprintf(name, sizeof name, "layers.%d.engram.embed.weight", (int)il);
    const di_safetensors_tensor *t = di_safetensors_checkpoint_find(B->ck, name);
    if (!t) return di_error_set(err, DI_ERR_FORMAT, "missing tensor '%s'", name);
    if (t->dtype != DI_DTYPE_F8_E4M3 || t->n_dims != 2 || t->shape[1] != hd)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': must be F8_E4M3 [rows, %lld]", name, (long long)hd);
    e->rows = t->shape[0];
    e->table = t->data;
    snprintf(name, sizeof name, "layers.%d.engram.embed.scale", (int)il);
    const di_safetensors_tensor *sc = di_safetensors_checkpoint_find(B->ck, name);
    if (!sc) return di_error_set(err, DI_ERR_FORMAT, "missing tensor '%s'", name);
    if ((sc->dtype != DI_DTYPE_F8_E8M0 && sc->dtype != DI_DTYPE_U8) || sc->n_dims != 2 || sc->shape[0] != e->rows ||
        sc->shape[1] != hd / 32)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': must be F8_E8M0 [%lld, %lld]", name, (long long)e->rows,
                            (long long)(hd / 32));
    e->table_scale = sc->data;
    /* the hashed rows must fit the table: the primes' sum is its row count */
    int64_t need = e->hash->n_rows;
    if (need > e->rows)
        return di_error_set(err, DI_ERR_FORMAT,
                            "tensor 'layers.%d.engram.embed.weight': %lld rows, the hash needs %lld (truncated table?)",
                            (int)il, (long long)e->rows, (long long)need);
    return DI_OK;
}

/* One layer under prefix pfx ("layers.<il>" or a DSpark stage "mtp.<i>",
 * whose role is window-only and whose MoE has n_exp experts, top n_used). */
static di_status bind_layer(di_dsv41_model *m, int32_t il, const char *pfx, const di_dsv41_role *r,
                            int32_t n_exp, int32_t n_used, dsv41_layer *L, di_error *err) {
    di_dsv4_model *B = &m->base;
    const di_dsv41_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult, hd = hp->head_dim;
    const int64_t IH = hp->index_heads, ihd = hp->index_dim;
    char name[NAME_LEN];
    di_status s;
    L->n_experts = n_exp;
    L->n_used = n_used;
    const dsv4_core_dims dims = {D, N, hp->q_lora, hp->n_heads, hd, hp->o_groups, hp->o_lora, hp->moe_ff};
    if ((s = dsv4_bind_core_attn(B, pfx, &dims, &L->core, err))) return s;
    if (r->ratio && r->kv_src == il) {
        LIN("attn.compressor.wkv", hd, D, 0, &L->c_wkv);
        if (r->ratio == 2) LIN("attn.compressor.wgate", hd, D, 0, &L->c_wgate);
        VEC("attn.compressor.norm.weight", hd, &L->c_norm);
    }
    if (r->ratio && r->idx_src == il) {
        LIN("attn.indexer.wq_b", IH * ihd, hp->q_lora, 0, &L->i_wq_b);
        LIN("attn.indexer.weights_proj", IH, D, 0, &L->i_wproj);
        if (r->idxk_src == il) {
            LIN("attn.indexer.wk", ihd, hd, 0, &L->i_wk);
            VEC("attn.indexer.k_norm.weight", ihd, &L->i_knorm);
        }
    }
    LIN("ffn.gate", n_exp, D, 0, &L->gate);
    VEC("ffn.gate.bias", n_exp, &L->gate_bias);
    if ((s = dsv4_bind_core_moe(B, pfx, &dims, n_exp, &L->core, err))) return s;
    if (r->engram >= 0 && il >= 0) {
        L->engram = &m->engram[r->engram];
        if ((s = bind_engram(m, il, L->engram, err))) return s;
    }
    return DI_OK;
}

/* The DSpark drafter (mtp.0 .. mtp.<n_mtp-1>), when the checkpoint carries
 * it (mtp.0.main_proj present; a checkpoint without it still loads, and
 * drafting is then DI_ERR_UNSUPPORTED): each stage is a window-only layer
 * with its own MoE; mtp.0 adds the target-feature projection, the last
 * stage the final norm, the Markov head and the confidence head. */
static di_status bind_dspark(di_dsv41_model *m, di_error *err) {
    di_dsv4_model *B = &m->base;
    const di_dsv41_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, V = hp->n_vocab, rk = hp->dspark_markov_rank;
    char name[NAME_LEN];
    di_status s;
    m->n_draft = 0;
    if (hp->n_mtp < 1 || !di_safetensors_checkpoint_find(B->ck, "mtp.0.main_proj.weight")) return DI_OK;
    if (hp->n_dspark_targets < 1)
        return di_error_set(err, DI_ERR_FORMAT, "DSpark: mtp.* tensors but no dspark_target_layer_ids");
    if (hp->dspark_n_experts > hp->n_experts || hp->dspark_n_experts_used > hp->n_experts_used)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "DSpark: %d experts top %d exceed the main MoE's %d top %d",
                            (int)hp->dspark_n_experts, (int)hp->dspark_n_experts_used, (int)hp->n_experts,
                            (int)hp->n_experts_used);
    m->mtp = di_calloc((size_t)hp->n_mtp, sizeof *m->mtp);
    if ((s = dsv4_own(B, m->mtp, err))) return s;
    static const di_dsv41_role window_only = {.ratio = 0, .kv_src = -1, .idx_src = -1, .idxk_src = -1,
                                              .cand_src = -1, .engram = -1};
    for (int32_t i = 0; i < hp->n_mtp; i++) {
        char pfx[32];
        snprintf(pfx, sizeof pfx, "mtp.%d", (int)i);
        if ((s = bind_layer(m, -1, pfx, &window_only, hp->dspark_n_experts, hp->dspark_n_experts_used, &m->mtp[i],
                            err)))
            return s;
    }
    const char *pfx = "mtp.0";
    if ((s = dsv4_bind_linear(B, "mtp.0.main_proj", D, D * hp->n_dspark_targets, 0, &m->main_proj, err)) ||
        (s = dsv4_bind_vec(B, "mtp.0.main_norm.weight", D, &m->main_norm, err)))
        return s;
    (void)pfx;
    snprintf(name, sizeof name, "mtp.%d.norm.weight", (int)(hp->n_mtp - 1));
    if ((s = dsv4_bind_vec(B, name, D, &m->mtp_norm, err))) return s;
    if (rk > 0) {
        snprintf(name, sizeof name, "mtp.%d.markov_head.embed", (int)(hp->n_mtp - 1));
        if ((s = dsv4_bind_linear(B, name, V, rk, 0, &m->markov_embed, err))) return s;
        snprintf(name, sizeof name, "mtp.%d.markov_head.head", (int)(hp->n_mtp - 1));
        if ((s = dsv4_bind_linear(B, name, V, rk, 0, &m->markov_head, err))) return s;
    }
    dsv4_linear cw;
    snprintf(name, sizeof name, "mtp.%d.confidence_head.proj", (int)(hp->n_mtp - 1));
    if ((s = dsv4_bind_linear(B, name, 1, D + rk, 0, &cw, err))) return s;
    m->conf_w = di_malloc_array((size_t)(D + rk), sizeof(float));
    if ((s = dsv4_own(B, m->conf_w, err))) return s;
    dsv4_lin_rows(m->be, &cw, &(int32_t){0}, 1, m->conf_w, 0);
    m->n_draft = hp->n_mtp;
    return DI_OK;
}

di_status dsv41_bind_weights(di_dsv41_model *m, di_error *err) {
    di_dsv4_model *B = &m->base;
    const di_dsv41_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd;
    di_status s;
    if ((s = dsv4_bind_linear(B, "embed", hp->n_vocab, D, 0, &m->embed, err))) return s;
    if ((s = dsv4_bind_linear(B, hp->tied ? "embed" : "head", hp->n_vocab, D, 0, &m->head, err))) return s;
    if ((s = dsv4_bind_vec(B, "norm.weight", D, &m->norm, err))) return s;
    m->layers = di_calloc((size_t)hp->n_layers, sizeof *m->layers);
    if ((s = dsv4_own(B, m->layers, err))) return s;
    for (int32_t il = 0; il < hp->n_layers; il++) {
        char pfx[64];
        snprintf(pfx, sizeof pfx, "layers.%d", (int)il);
        if ((s = bind_layer(m, il, pfx, &hp->role[il], hp->n_experts, hp->n_experts_used, &m->layers[il], err)))
            return s;
    }
    return bind_dspark(m, err);
}
