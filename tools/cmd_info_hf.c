/* deepinfer info DIR for an HF checkpoint folder (DeepSeek-V4; the llama
 * family: info_llama): config
 * summary, per-layer attention / MoE kinds, tensor bytes per dtype, then the
 * full load as validation. Same exit convention as the GGUF branch: 0 when
 * the checkpoint loads, else 1 with a one-line reason on stderr. */
#include "tools.h"

#include "format/safetensors.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v41.h"
#include "model/llama_hf.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static int fail(const di_error *err) {
    fprintf(stderr, "deepinfer info: %s\n", err->msg);
    return 1;
}

static void print_hparams(const di_dsv4_hparams *hp) {
    printf("hyper-parameters:\n");
    printf("  %-16s %d\n", "layers:", (int)hp->n_layers);
    printf("  %-16s %d\n", "hidden:", (int)hp->n_embd);
    printf("  %-16s %d\n", "heads:", (int)hp->n_heads);
    printf("  %-16s %d (rotary %d)\n", "head dim:", (int)hp->head_dim, (int)hp->n_rot);
    printf("  %-16s %d\n", "q lora rank:", (int)hp->q_lora);
    printf("  %-16s %d x %d\n", "output groups:", (int)hp->o_groups, (int)hp->o_lora);
    printf("  %-16s %d\n", "vocab:", (int)hp->n_vocab);
    printf("  %-16s %d\n", "context:", (int)hp->n_ctx_train);
    printf("  %-16s %d\n", "window:", (int)hp->window);
    printf("  %-16s csa %d, hca %d\n", "compression:", (int)hp->ratio_csa, (int)hp->ratio_hca);
    printf("  %-16s %d heads x %d, top %d\n", "indexer:", (int)hp->index_heads, (int)hp->index_dim,
           (int)hp->index_topk);
    printf("  %-16s %d routed (top %d) + 1 shared, width %d\n", "experts:", (int)hp->n_experts,
           (int)hp->n_experts_used, (int)hp->moe_ff);
    printf("  %-16s %d copies, %d Sinkhorn iterations\n", "mHC:", (int)hp->hc_mult, (int)hp->hc_iters);
    printf("  %-16s main %g, compressed %g%s\n", "rope theta:", hp->rope_theta, hp->compress_rope_theta,
           hp->yarn ? " (yarn)" : "");
    if (hp->yarn)
        printf("  %-16s x%g over %g (beta %g/%g)\n", "yarn:", hp->yarn_factor, hp->yarn_orig_ctx,
               hp->yarn_beta_fast, hp->yarn_beta_slow);
    printf("  %-16s %g\n", "rms eps:", (double)hp->rms_eps);
    printf("  %-16s %g\n", "swiglu limit:", (double)hp->swiglu_limit);
    if (hp->fp8_block) printf("  %-16s fp8 e4m3, %dx%d blocks\n", "quantization:", (int)hp->fp8_block, (int)hp->fp8_block);
    printf("layers:\n");
    for (int32_t i = 0; i < hp->n_layers; i++)
        printf("  %3d  %-30s %s\n", (int)i, di_dsv4_attn_kind_name((di_dsv4_attn_kind)hp->attn_kind[i]),
               hp->hash_moe[i] ? "hash_moe" : "moe");
}

static void print_tensors(const di_safetensors_checkpoint *ck) {
    uint64_t count[DI_DTYPE_COUNT] = {0}, bytes[DI_DTYPE_COUNT] = {0}, total = 0;
    uint64_t n = di_safetensors_checkpoint_tensor_count(ck);
    for (uint64_t i = 0; i < n; i++) {
        const di_safetensors_tensor *t = di_safetensors_checkpoint_tensor_at(ck, i);
        count[t->dtype]++;
        bytes[t->dtype] += t->n_bytes;
        total += t->n_bytes;
    }
    printf("tensors: %" PRIu64 " in %u shard(s) (%.2f MiB)\n", n, di_safetensors_checkpoint_shard_count(ck),
           (double)total / MIB);
    for (int d = 0; d < DI_DTYPE_COUNT; d++)
        if (count[d])
            printf("  %-8s %6" PRIu64 " tensors %12" PRIu64 " bytes (%.2f MiB)\n", di_dtype_traits_of((di_dtype)d)->name,
                   count[d], bytes[d], (double)bytes[d] / MIB);
}

/* The llama family (model/llama_hf.h): the hyper-parameters the config maps
 * to, the tensors, then the load as validation. */
static int info_llama(const char *dir) {
    di_error err = {0};
    printf("folder:          %s\n", dir);
    printf("format:          HF safetensors checkpoint\n");
    di_safetensors_checkpoint *ck = NULL;
    di_status s = di_safetensors_checkpoint_open(dir, &ck, &err);
    if (s) return fail(&err);
    print_tensors(ck);
    di_safetensors_checkpoint_close(ck);
    di_llama_hf *h = NULL;
    di_llama_model *m = NULL;
    if ((s = di_llama_hf_load(dir, NULL, &h, &m, &err))) {
        printf("validation:      FAILED (%s)\n", di_status_name(s));
        return fail(&err);
    }
    const di_llama_hparams *hp = di_llama_hparams_of(m);
    printf("architecture:    %s\n", di_llama_arch_name(hp->arch));
    printf("hyper-parameters:\n");
    printf("  %-16s %u\n", "layers:", hp->n_layers);
    printf("  %-16s %u\n", "hidden:", hp->n_embd);
    printf("  %-16s %u (kv %u), head dim %u, rotary %u\n", "heads:", hp->n_heads, hp->n_heads_kv, hp->head_dim,
           hp->n_rot);
    printf("  %-16s %u\n", "feed-forward:", hp->n_ff);
    if (hp->n_expert)
        printf("  %-16s %u (top %u), width %u\n", "experts:", hp->n_expert, hp->n_expert_used, hp->n_ff_exp);
    printf("  %-16s %u\n", "vocab:", hp->n_vocab);
    printf("  %-16s %u\n", "context:", hp->n_ctx_train);
    printf("  %-16s %g\n", "rope theta:", (double)hp->rope_freq_base);
    if (hp->sliding_window) printf("  %-16s %u\n", "sliding window:", hp->sliding_window);
    di_llama_free(m);
    di_llama_hf_free(h);
    char tok[4200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    printf("tokenizer:       %s\n", access(tok, R_OK) == 0 ? "tokenizer.json" : "- (none)");
    printf("validation:      ok\n");
    return 0;
}

int di_info_hf(const char *dir) {
    di_error err = {0};
    bool llama = false;
    if (di_llama_hf_probe(dir, &llama, &err)) return fail(&err);
    if (llama) return info_llama(dir);
    if (di_dsv41_is_config(dir)) return di_info_hf_v41(dir);
    di_dsv4_hparams hp;
    printf("folder:          %s\n", dir);
    printf("format:          HF safetensors checkpoint\n");
    di_status s = di_dsv4_read_config(dir, &hp, &err);
    if (s) return fail(&err);
    printf("architecture:    deepseek_v4\n");
    print_hparams(&hp);
    di_safetensors_checkpoint *ck = NULL;
    if ((s = di_safetensors_checkpoint_open(dir, &ck, &err))) return fail(&err);
    print_tensors(ck);
    di_safetensors_checkpoint_close(ck);
    char tok[4200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    printf("tokenizer:       %s\n", access(tok, R_OK) == 0 ? "tokenizer.json" : "- (none: use --prompt-ids)");
    di_dsv4_model *m = NULL;
    s = di_dsv4_load(dir, NULL, &m, &err);
    if (s) {
        printf("validation:      FAILED (%s)\n", di_status_name(s));
        return fail(&err);
    }
    int32_t n_mtp = di_dsv4_mtp_modules(m);
    di_dsv4_free(m);
    if (n_mtp)
        printf("mtp:             %d module(s) validated (not run: drafting is not implemented)\n", (int)n_mtp);
    else
        printf("mtp:             none in the checkpoint (num_nextn_predict_layers %d)\n", (int)hp.n_mtp);
    printf("validation:      ok\n");
    return 0;
}
