/* deepinfer info MODEL: what a model file holds and whether we can run it.
 * Prints the format, architecture, hyper-parameters, tokenizer summary and
 * tensor bytes per dtype to stdout, then the validation result. Exit 0 when
 * the model is valid and supported; otherwise 1 with a one-line reason on
 * stderr (whatever could be read is still printed first). */
#include "tools.h"

#include "format/gguf.h"
#include "kernels/backend.h"
#include "model/llama_hparams.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define MIB (1024.0 * 1024.0)

static int fail(const di_error *err) {
    fprintf(stderr, "deepinfer info: %s\n", err->msg);
    return 1;
}

/* Prints a string kv (shortened, first line only) or "-" when absent. */
static void print_str(const di_gguf *g, const char *label, const char *key) {
    di_gguf_str s;
    if (di_gguf_get_str(g, key, &s, NULL) != DI_OK) {
        printf("  %-16s -\n", label);
        return;
    }
    int n = 0;
    while ((uint64_t)n < s.len && n < 60 && s.ptr[n] != '\n') n++;
    printf("  %-16s %.*s%s\n", label, n, s.ptr, (uint64_t)n < s.len ? "..." : "");
}

static void print_token_id(const char *label, int32_t id) {
    if (id < 0) printf("  %-16s -\n", label);
    else printf("  %-16s %" PRId32 "\n", label, id);
}

static void print_tokenizer(const di_gguf *g, const di_llama_hparams *hp) {
    printf("tokenizer:\n");
    print_str(g, "model", "tokenizer.ggml.model");
    print_str(g, "pre-tokenizer", "tokenizer.ggml.pre");
    const di_gguf_kv *tokens = di_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const di_gguf_kv *merges = di_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (tokens && tokens->type == DI_GGUF_ARRAY) printf("  %-16s %" PRIu64 "\n", "tokens", tokens->arr_len);
    else printf("  %-16s -\n", "tokens");
    if (merges && merges->type == DI_GGUF_ARRAY) printf("  %-16s %" PRIu64 "\n", "merges", merges->arr_len);
    if (hp) {
        print_token_id("bos id", hp->tok.bos);
        print_token_id("eos id", hp->tok.eos);
        if (hp->tok.eot >= 0) print_token_id("eot id", hp->tok.eot);
    }
    di_gguf_str tmpl;
    if (di_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == DI_OK)
        printf("  %-16s %" PRIu64 " bytes\n", "chat template", tmpl.len);
}

static void print_hparams(const di_llama_hparams *hp) {
    printf("hyper-parameters:\n");
    printf("  %-16s %" PRIu32 "\n", "layers:", hp->n_layers);
    printf("  %-16s %" PRIu32 "\n", "hidden:", hp->n_embd);
    printf("  %-16s %" PRIu32 "\n", "heads:", hp->n_heads);
    printf("  %-16s %" PRIu32 "\n", "kv heads:", hp->n_heads_kv);
    printf("  %-16s %" PRIu32 "\n", "head dim:", hp->head_dim);
    printf("  %-16s %" PRIu32 "\n", "ffn:", hp->n_ff);
    printf("  %-16s %" PRIu32 "\n", "vocab:", hp->n_vocab);
    printf("  %-16s %" PRIu32 "\n", "context:", hp->n_ctx_train);
    printf("  %-16s %" PRIu32 "\n", "rope dims:", hp->n_rot);
    printf("  %-16s %g\n", "rope freq base:", (double)hp->rope_freq_base);
    printf("  %-16s %s", "rope scaling:", di_llama_rope_scaling_name(hp->rope_scaling));
    if (hp->rope_scaling != DI_LLAMA_ROPE_SCALING_NONE)
        printf(" x%g (original context %" PRIu32 ")", (double)hp->rope_scaling_factor,
               hp->rope_scaling_orig_ctx);
    printf("\n  %-16s %g\n", "rms eps:", (double)hp->rms_eps);
    if (hp->n_expert)
        printf("  %-16s %" PRIu32 " routed, top %" PRIu32 " (%s), width %" PRIu32 "\n", "experts:", hp->n_expert,
               hp->n_expert_used, hp->expert_weights_norm ? "weights renormalized" : "softmax weights", hp->n_ff_exp);
    if (hp->arch == DI_LLAMA_ARCH_LLAMA && hp->sliding_window)
        printf("  %-16s %" PRIu32 " keys on every layer\n", "sliding window:", hp->sliding_window);
    if (hp->rope_attn_factor != 1.0f) printf("  %-16s %g (LongRoPE)\n", "rope attn factor:", (double)hp->rope_attn_factor);
    if (hp->arch != DI_LLAMA_ARCH_GEMMA3) return;
    /* the Gemma 3 pieces (llama_hparams.h): which layers are local, their
     * window and RoPE base, the scales */
    printf("  %-16s %" PRIu32 " keys on local layers, every %" PRIu32 "th layer global (", "sliding window:",
           hp->sliding_window, hp->swa_period);
    const char *sep = "";
    for (uint32_t il = 0; il < hp->n_layers; il++)
        if (!di_llama_layer_is_local(hp, il)) {
            printf("%s%" PRIu32, sep, il);
            sep = " ";
        }
    printf(")\n  %-16s %g\n", "local rope base:", (double)hp->rope_freq_base_swa);
    printf("  %-16s embeddings x%g, queries x%g, ", "scales:", (double)hp->embd_scale, (double)hp->attn_scale);
    if (hp->final_softcap > 0) printf("final logits soft-capped at %g\n", (double)hp->final_softcap);
    else printf("no final soft-cap\n");
}

static void print_tensor_summary(const di_gguf *g) {
    uint64_t count[DI_DTYPE_COUNT] = {0}, bytes[DI_DTYPE_COUNT] = {0}, total = 0;
    for (uint64_t i = 0; i < di_gguf_tensor_count(g); i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        count[t->dtype]++;
        bytes[t->dtype] += t->n_bytes; /* sum <= file size: no overflow */
        total += t->n_bytes;
    }
    printf("tensors: %" PRIu64 " (%.2f MiB)\n", di_gguf_tensor_count(g), (double)total / MIB);
    for (int d = 0; d < DI_DTYPE_COUNT; d++)
        if (count[d])
            printf("  %-8s %6" PRIu64 " tensors %12" PRIu64 " bytes (%.2f MiB)\n",
                   di_dtype_traits_of((di_dtype)d)->name, count[d], bytes[d],
                   (double)bytes[d] / MIB);
}

/* For a routed-experts model: the weight bytes one decoded token reads,
 * the stacked expert tensors (ffn_*_exps) counted at n_used / n_expert,
 * so decode can be held to the bound of what it must read. */
static void print_active_bytes(const di_gguf *g, const di_llama_hparams *hp) {
    if (!hp->n_expert) return;
    uint64_t experts = 0, total = 0;
    for (uint64_t i = 0; i < di_gguf_tensor_count(g); i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        total += t->n_bytes;
        if (strstr(t->name, "_exps.")) experts += t->n_bytes;
    }
    double active = (double)(total - experts) + (double)experts * hp->n_expert_used / hp->n_expert;
    printf("active per token: %.2f MiB (experts %.2f MiB counted at top %" PRIu32 " of %" PRIu32 ")\n",
           active / MIB, (double)experts / MIB, hp->n_expert_used, hp->n_expert);
}

static int info_gguf(const char *path) {
    di_error err = {0};
    di_gguf *g = NULL;
    if (di_gguf_open(path, &g, &err) != DI_OK) return fail(&err);
    printf("file:            %s\n", path);
    printf("format:          GGUF v%" PRIu32 ", %" PRIu64 " kvs, %" PRIu64
           " tensors, alignment %" PRIu64 ", %" PRIu64 " bytes\n",
           di_gguf_version(g), di_gguf_kv_count(g), di_gguf_tensor_count(g),
           di_gguf_alignment(g), di_gguf_file_size(g));
    di_gguf_str arch;
    if (di_gguf_get_str(g, "general.architecture", &arch, NULL) == DI_OK)
        printf("architecture:    %.*s\n", arch.len > 64 ? 64 : (int)arch.len, arch.ptr);
    else
        printf("architecture:    -\n");
    print_str(g, "name:", "general.name");

    di_llama_hparams hp;
    di_llama_tensors lt = {0};
    di_status s = di_llama_hparams_from_gguf(g, &hp, &err);
    if (s == DI_OK) print_hparams(&hp);
    print_tokenizer(g, s == DI_OK ? &hp : NULL);
    print_tensor_summary(g);
    if (s == DI_OK) print_active_bytes(g, &hp);
    if (s == DI_OK) {
        s = di_llama_validate_tensors(g, &hp, &lt, &err);
        if (s == DI_OK) printf("output:          %s\n", lt.tied_output ? "tied to token_embd" : "separate");
    }
    di_llama_tensors_free(&lt);
    int rc = 0;
    if (s == DI_OK) {
        printf("validation:      ok\n");
    } else {
        printf("validation:      FAILED (%s)\n", di_status_name(s));
        rc = fail(&err);
    }
    di_gguf_close(g);
    return rc;
}

/* The device line: the backend the forward would run on and its CPU
 * kernel tables, or why the named device cannot run it (exit 1). */
static int print_device(const char *device) {
    di_error err = {0};
    if (di_device_check(device, NULL, &err) != DI_OK) {
        printf("device:          %s: unavailable\n", device);
        fprintf(stderr, "deepinfer info: %s\n", err.msg);
        return 1;
    }
    printf("device:          cpu (backend cpu; kernels %s, int8 twin %s)\n", di_cpu_kernels_best()->name,
           di_cpu_kernels_best_q8()->name);
    return 0;
}

int di_cmd_info(int argc, char **argv) {
    const char *device = NULL;
    if (argc == 4 && !strcmp(argv[2], "--device")) device = argv[3];
    else if (argc == 4 && !strcmp(argv[1], "--device")) {
        device = argv[2];
        argv[1] = argv[3];
    }
    if ((argc != 2 && !device) || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr, "usage: deepinfer info MODEL [--device cpu|cuda[:N]]\n"
                "  MODEL: a .gguf file or an HF checkpoint folder (llama family, DeepSeek-V4 / V4.1)\n"
                "  --device: the device to report on (default cpu)\n");
        return argc == 2 ? 0 : 2;
    }
    const char *path = argv[1];
    struct stat st;
    int rc = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? di_info_hf(path) : info_gguf(path);
    if (rc) return rc;
    fflush(stdout);
    return print_device(device);
}
