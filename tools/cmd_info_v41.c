/* deepinfer info DIR for a DeepSeek-V4.1 checkpoint folder: the
 * hyper-parameters, the layer topology (the role table DeepInfer's
 * cross_layer.py derives: who owns compressed KV, index keys and top-k,
 * who reuses whose), what a token of KV costs in each numerics mode, then
 * the full load as validation (exit 0 when it loads, else 1 and a reason). */
#include "tools.h"

#include "model/deepseek_v41.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <unistd.h>

static int fail(const di_error *err) {
    fprintf(stderr, "deepinfer info: %s\n", err->msg);
    return 1;
}

static void print_hparams(const di_dsv41_hparams *hp) {
    printf("architecture:    deepseek_v41 (causal encoder-decoder)\n");
    printf("hyper-parameters:\n");
    printf("  %-16s %d (first ratio-1 layer %d)\n", "layers:", (int)hp->n_layers, (int)hp->n_prefill_layer);
    printf("  %-16s %d, vocab %d, context %d\n", "hidden:", (int)hp->n_embd, (int)hp->n_vocab, (int)hp->n_ctx_train);
    printf("  %-16s %d x %d (rotary %d), q lora %d, output %d x %d\n", "attention:", (int)hp->n_heads,
           (int)hp->head_dim, (int)hp->n_rot, (int)hp->q_lora, (int)hp->o_groups, (int)hp->o_lora);
    printf("  %-16s %d\n", "window:", (int)hp->window);
    printf("  %-16s %d heads x %d, top %d", "indexer:", (int)hp->index_heads, (int)hp->index_dim, (int)hp->index_topk);
    if (hp->cand_topk_blocks) printf(", candidates %d blocks of %d", (int)hp->cand_topk_blocks, (int)hp->cand_block);
    printf("\n  %-16s %d routed (top %d) + %d shared, width %d\n", "experts:", (int)hp->n_experts,
           (int)hp->n_experts_used, (int)hp->n_shared, (int)hp->moe_ff);
    printf("  %-16s %d copies, shifted, %d Sinkhorn iterations\n", "mHC:", (int)hp->hc_mult, (int)hp->hc_iters);
    printf("  %-16s window %g, compressed %g%s\n", "rope theta:", hp->rope_theta, hp->compress_rope_theta,
           hp->yarn ? " (yarn)" : "");
    printf("  %-16s %g\n", "rms eps:", hp->rms_eps);
    if (hp->n_engram)
        printf("  %-16s %d layer(s), %d-grams, %d heads x %d, vocab %lld (compressed %d)\n", "engram:",
               (int)hp->n_engram, (int)hp->engram_max_ngram, (int)hp->engram_heads, (int)hp->engram_head_dim,
               (long long)hp->engram_vocab, (int)hp->engram_compressed_vocab);
    if (hp->n_mtp)
        printf("  %-16s %d DSpark stage(s), block %d, %d experts top %d (not run yet)\n", "dspark:", (int)hp->n_mtp,
               (int)hp->dspark_block, (int)hp->dspark_n_experts, (int)hp->dspark_n_experts_used);
    printf("layers:\n");
    char line[256];
    for (int32_t i = 0; i < hp->n_layers; i++) printf("  %s\n", di_dsv41_describe_layer(hp, i, line, sizeof line));
}

int di_info_hf_v41(const char *dir) {
    di_error err = {0};
    di_dsv41_hparams hp;
    printf("folder:          %s\n", dir);
    printf("format:          HF safetensors checkpoint\n");
    di_status s = di_dsv41_read_config(dir, &hp, &err);
    if (s) return fail(&err);
    print_hparams(&hp);
    di_tokenizer *tok = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (access(path, R_OK) == 0 && (s = di_tok_load_json(dir, &tok, &err))) return fail(&err);
    for (int n = 0; n < 2; n++) {
        di_dsv41_model *m = NULL;
        s = di_dsv41_load(dir, NULL, (di_dsv41_numerics)n, tok, &m, &err);
        if (s) {
            printf("validation:      FAILED (%s)\n", di_status_name(s));
            di_tok_free(tok);
            return fail(&err);
        }
        printf("kv per token:    %llu bytes with --numerics %s\n", (unsigned long long)di_dsv41_kv_bytes_per_token(m),
               di_dsv41_numerics_name((di_dsv41_numerics)n));
        di_dsv41_free(m);
    }
    di_tok_free(tok);
    printf("validation:      ok\n");
    return 0;
}
