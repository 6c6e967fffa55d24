#include "model/model.h"

#include "base/alloc.h"
#include "format/gguf.h"
#include "model/llama.h"

#include <stdlib.h>
#include <string.h>

typedef enum { ARCH_LLAMA } arch_kind;

struct di_model {
    arch_kind arch;
    di_gguf *gguf;
    di_tokenizer *tok;
    di_llama_model *llama;
};

struct di_model_kv {
    arch_kind arch;
    di_llama_kv *llama;
};

struct di_model_ctx {
    arch_kind arch;
    di_llama_ctx *llama;
};

di_status di_model_open(const char *path, const char *kernels, di_model **out, di_error *err) {
    *out = NULL;
    di_model *m = calloc(1, sizeof *m);
    if (!m) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    di_status s = di_gguf_open(path, &m->gguf, err);
    if (s) goto fail;
    di_gguf_str arch;
    s = di_gguf_get_str(m->gguf, "general.architecture", &arch, err);
    if (s) goto fail_prefix;
    if (arch.len == 5 && !memcmp(arch.ptr, "llama", 5)) {
        m->arch = ARCH_LLAMA;
        const di_cpu_kernels *k = NULL;
        if (kernels && !(k = di_cpu_kernels_by_name(kernels)))
            s = di_error_set(err, DI_ERR_INVALID_ARG, "kernel table '%s' unknown or not runnable on this CPU",
                             kernels);
        else s = di_llama_load(m->gguf, k, &m->llama, err);
    } else {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "architecture '%.*s' is not supported (llama only)",
                         (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    }
    if (s) goto fail_prefix;
    s = di_tok_load_gguf(m->gguf, &m->tok, err);
    if (s) goto fail_prefix;
    if (di_tok_vocab_size(m->tok) > (int32_t)di_llama_hparams_of(m->llama)->n_vocab) {
        s = di_error_set(err, DI_ERR_FORMAT, "tokenizer has %d tokens but the model only %u logits",
                         di_tok_vocab_size(m->tok), di_llama_hparams_of(m->llama)->n_vocab);
        goto fail_prefix;
    }
    *out = m;
    return DI_OK;
fail_prefix:
    di_error_prefix(err, "%s: ", path);
fail:
    di_model_free(m);
    return s;
}

void di_model_free(di_model *m) {
    if (!m) return;
    di_tok_free(m->tok);
    di_llama_free(m->llama);
    di_gguf_close(m->gguf);
    free(m);
}

void di_model_get_facts(const di_model *m, di_model_facts *out) {
    memset(out, 0, sizeof *out);
    const di_llama_hparams *hp = di_llama_hparams_of(m->llama);
    out->arch = "llama";
    out->n_vocab = (int32_t)hp->n_vocab;
    out->n_ctx_train = (int32_t)hp->n_ctx_train;
    out->n_layers = (int32_t)hp->n_layers;
    out->n_embd = (int32_t)hp->n_embd;
    out->kernels = di_llama_kernels(m->llama)->name;
}

const di_tokenizer *di_model_tokenizer(const di_model *m) { return m->tok; }

uint64_t di_model_kv_bytes_per_token(const di_model *m, di_dtype dtype) {
    const di_llama_hparams *hp = di_llama_hparams_of(m->llama);
    uint64_t elem = dtype == DI_DTYPE_F32 ? 4 : 2;
    return 2ull * hp->n_layers * hp->n_heads_kv * hp->head_dim * elem;
}

di_status di_model_kv_create(const di_model *m, int32_t n_blocks, int32_t block_size, di_dtype dtype,
                             di_model_kv **out, di_error *err) {
    *out = NULL;
    di_model_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return di_error_set(err, DI_ERR_NOMEM, "KV cache: out of memory");
    kv->arch = m->arch;
    di_status s = di_llama_kv_create(m->llama, n_blocks, block_size, dtype, &kv->llama, err);
    if (s) {
        free(kv);
        return s;
    }
    *out = kv;
    return DI_OK;
}

void di_model_kv_free(di_model_kv *kv) {
    if (!kv) return;
    di_llama_kv_free(kv->llama);
    free(kv);
}

di_status di_model_ctx_create(const di_model *m, di_model_ctx **out, di_error *err) {
    *out = NULL;
    di_model_ctx *c = calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "forward context: out of memory");
    c->arch = m->arch;
    di_status s = di_llama_ctx_create(m->llama, &c->llama, err);
    if (s) {
        free(c);
        return s;
    }
    *out = c;
    return DI_OK;
}

void di_model_ctx_free(di_model_ctx *ctx) {
    if (!ctx) return;
    di_llama_ctx_free(ctx->llama);
    free(ctx);
}

di_status di_model_forward(di_model_ctx *ctx, di_model_kv *kv, const di_batch *b,
                           float *logits_out, di_threadpool *pool, di_error *err) {
    return di_llama_forward(ctx->llama, kv->llama, b, logits_out, pool, err);
}
