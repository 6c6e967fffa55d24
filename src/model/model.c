/* The architecture-agnostic model: a GGUF file (llama family) or an HF
 * checkpoint folder (llama family: llama_hf.c; DeepSeek-V4 / V4.1) behind one table of operations per
 * architecture, so the engine never switches on the architecture and adding
 * one is a table, not a new branch in every function. */
#include "model/model.h"

#include "base/alloc.h"
#include "base/mapped_file.h"
#include "format/gguf.h"
#include "kernels/backend.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_vision.h"
#include "model/llama.h"
#include "model/llama_hf.h"
#include "model/model_cp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One architecture. impl/kv/ctx are that architecture's own handles. */
typedef struct arch_ops {
    const char *name;
    void (*free)(void *impl);
    void (*facts)(const void *impl, di_model_facts *out);
    uint64_t (*kv_bytes_per_token)(const void *impl, di_dtype dtype);
    di_status (*kv_create)(const void *impl, int32_t n_blocks, int32_t block_size, di_dtype dtype, void **out,
                           di_error *err);
    void (*kv_free)(void *kv);
    di_status (*ctx_create)(const void *impl, void **out, di_error *err);
    void (*ctx_free)(void *ctx);
    di_status (*forward)(void *ctx, void *kv, const di_batch *b, float *logits, di_threadpool *pool,
                         di_error *err);
    bool (*kv_region)(void *kv, int32_t i, uint8_t **base, size_t *slot_bytes);
    /* Speculative rollback: positions >= n_keep of slot are forgotten.
     * NULL = the architecture cannot roll back (DI_ERR_UNSUPPORTED). */
    di_status (*kv_truncate)(void *kv, int32_t seq_slot, int32_t n_keep, di_error *err);
} arch_ops;

struct di_model {
    const arch_ops *ops;
    void *impl;
    di_gguf *gguf; /* llama: the mapping the weights point into */
    di_llama_hf *llama_hf; /* llama from an HF folder: the same, and the copies */
    di_tokenizer *tok;
};

struct di_model_kv {
    const arch_ops *ops;
    void *impl;
    int32_t n_blocks, block_size;
};

struct di_model_ctx {
    const arch_ops *ops;
    void *impl;
    di_dsv4_ep *ep; /* deepseek_v4 / v41 expert parallelism, owned */
    di_dist *cp;    /* context parallel group (not owned), NULL = none */
    int32_t cp_min_rows;
    int32_t n_vocab;
};

/* ---- llama (GGUF) ---------------------------------------------------------- */

static void llama_free_(void *m) { di_llama_free(m); }
static void llama_facts(const void *impl, di_model_facts *out) {
    const di_llama_hparams *hp = di_llama_hparams_of(impl);
    out->arch = di_llama_arch_name(hp->arch);
    out->n_vocab = (int32_t)hp->n_vocab;
    out->n_ctx_train = (int32_t)hp->n_ctx_train;
    out->n_layers = (int32_t)hp->n_layers;
    out->n_embd = (int32_t)hp->n_embd;
    out->kernels = di_llama_kernels(impl)->name;
    out->device = di_llama_backend(impl)->ops->name;
}
static uint64_t llama_kv_bytes(const void *impl, di_dtype dtype) {
    const di_llama_hparams *hp = di_llama_hparams_of(impl);
    uint64_t elem = dtype == DI_DTYPE_F32 ? 4 : 2;
    return 2ull * hp->n_layers * hp->n_heads_kv * hp->head_dim * elem;
}
static di_status llama_kv_create_(const void *impl, int32_t nb, int32_t bs, di_dtype dt, void **out, di_error *err) {
    return di_llama_kv_create(impl, nb, bs, dt, (di_llama_kv **)out, err);
}
static void llama_kv_free_(void *kv) { di_llama_kv_free(kv); }
static di_status llama_ctx_create_(const void *impl, void **out, di_error *err) {
    return di_llama_ctx_create(impl, (di_llama_ctx **)out, err);
}
static void llama_ctx_free_(void *c) { di_llama_ctx_free(c); }
static di_status llama_forward_(void *c, void *kv, const di_batch *b, float *lg, di_threadpool *p, di_error *err) {
    return di_llama_forward(c, kv, b, lg, p, err);
}
static bool llama_kv_region_(void *kv, int32_t i, uint8_t **base, size_t *sb) {
    return di_llama_kv_region(kv, i, base, sb);
}
/* Paged per-position K/V: a rewritten position replaces the old one, and
 * no row reads positions past its own. */
static di_status llama_kv_truncate_(void *kv, int32_t seq_slot, int32_t n_keep, di_error *err) {
    (void)kv;
    if (seq_slot < 0 || n_keep < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "KV truncate: slot %d, keep %d", (int)seq_slot, (int)n_keep);
    return DI_OK;
}

static const arch_ops LLAMA_OPS = {"llama", llama_free_, llama_facts, llama_kv_bytes, llama_kv_create_,
                                   llama_kv_free_, llama_ctx_create_, llama_ctx_free_, llama_forward_,
                                   llama_kv_region_,
                                   llama_kv_truncate_};

/* ---- DeepSeek-V4 (HF folder) --------------------------------------------------- */

static void dsv4_free_(void *m) { di_dsv4_free(m); }
static void dsv4_facts(const void *impl, di_model_facts *out) {
    const di_dsv4_hparams *hp = di_dsv4_hparams_of(impl);
    out->arch = "deepseek_v4";
    out->n_vocab = hp->n_vocab;
    out->n_ctx_train = hp->n_ctx_train;
    out->n_layers = hp->n_layers;
    out->n_embd = hp->n_embd;
    out->kernels = di_dsv4_kernels(impl)->name;
    out->device = "cpu";
}
static uint64_t dsv4_kv_bytes(const void *impl, di_dtype dtype) { return di_dsv4_kv_bytes_per_token(impl, dtype); }
static di_status dsv4_kv_create_(const void *impl, int32_t nb, int32_t bs, di_dtype dt, void **out, di_error *err) {
    return di_dsv4_kv_create(impl, nb, bs, dt, (di_dsv4_kv **)out, err);
}
static void dsv4_kv_free_(void *kv) { di_dsv4_kv_free(kv); }
static di_status dsv4_ctx_create_(const void *impl, void **out, di_error *err) {
    return di_dsv4_ctx_create(impl, (di_dsv4_ctx **)out, err);
}
static void dsv4_ctx_free_(void *c) { di_dsv4_ctx_free(c); }
static di_status dsv4_forward_(void *c, void *kv, const di_batch *b, float *lg, di_threadpool *p, di_error *err) {
    return di_dsv4_forward(c, kv, b, lg, p, err);
}
static bool dsv4_kv_region_(void *kv, int32_t i, uint8_t **base, size_t *sb) {
    return di_dsv4_kv_region(kv, i, base, sb);
}
static di_status dsv4_kv_truncate_(void *kv, int32_t seq_slot, int32_t n_keep, di_error *err) {
    return di_dsv4_kv_truncate(kv, seq_slot, n_keep, err);
}
static const arch_ops DSV4_OPS = {"deepseek_v4", dsv4_free_, dsv4_facts, dsv4_kv_bytes, dsv4_kv_create_,
                                  dsv4_kv_free_, dsv4_ctx_create_, dsv4_ctx_free_, dsv4_forward_,
                                  dsv4_kv_region_, dsv4_kv_truncate_};

static void dsv41_free_(void *m) { di_dsv41_free(m); }
static void dsv41_facts(const void *impl, di_model_facts *out) {
    const di_dsv41_hparams *hp = di_dsv41_hparams_of(impl);
    out->arch = "deepseek_v41";
    out->n_vocab = hp->n_vocab;
    out->n_ctx_train = hp->n_ctx_train;
    out->n_layers = hp->n_layers;
    out->n_embd = hp->n_embd;
    out->kernels = di_dsv41_kernels(impl)->name;
    out->device = "cpu";
}
/* V4.1's KV formats follow its numerics policy, not the engine's f16/f32 choice */
static uint64_t dsv41_kv_bytes(const void *impl, di_dtype dtype) {
    (void)dtype;
    return di_dsv41_kv_bytes_per_token(impl);
}
static di_status dsv41_kv_create_(const void *impl, int32_t nb, int32_t bs, di_dtype dt, void **out, di_error *err) {
    (void)dt;
    return di_dsv41_kv_create(impl, nb, bs, (di_dsv41_kv **)out, err);
}
static void dsv41_kv_free_(void *kv) { di_dsv41_kv_free(kv); }
static di_status dsv41_ctx_create_(const void *impl, void **out, di_error *err) {
    return di_dsv41_ctx_create(impl, (di_dsv41_ctx **)out, err);
}
static void dsv41_ctx_free_(void *c) { di_dsv41_ctx_free(c); }
static di_status dsv41_forward_(void *c, void *kv, const di_batch *b, float *lg, di_threadpool *p, di_error *err) {
    return di_dsv41_forward(c, kv, b, lg, p, err);
}
static bool dsv41_kv_region_(void *kv, int32_t i, uint8_t **base, size_t *sb) {
    return di_dsv41_kv_region(kv, i, base, sb);
}
static di_status dsv41_kv_truncate_(void *kv, int32_t seq_slot, int32_t n_keep, di_error *err) {
    return di_dsv41_kv_truncate(kv, seq_slot, n_keep, err);
}

static const arch_ops DSV41_OPS = {"deepseek_v41", dsv41_free_, dsv41_facts, dsv41_kv_bytes, dsv41_kv_create_,
                                   dsv41_kv_free_, dsv41_ctx_create_, dsv41_ctx_free_, dsv41_forward_,
                                   dsv41_kv_region_,
                                   dsv41_kv_truncate_};

/* ---- opening ------------------------------------------------------------------- */

/* The default table of a GGUF model (no kernels named): the int8-activation
 * twin of the best table when most weight bytes are in dtypes it multiplies
 * in integers (a quantized GGUF: prefill 3-5x and decode 1.1-1.4x faster,
 * bench/results/compare-*.md; logits within the int8 error bound of
 * tests/model/test_llama.c, batch-invariant like every table), the exact
 * one otherwise (f32/f16/bf16 weights). "exact" selects the exact table. */
static const di_cpu_kernels *default_gguf_kernels(const di_gguf *g) {
    const di_cpu_kernels *q8 = di_cpu_kernels_best_q8();
    uint64_t int8_bytes = 0, all = 0;
    for (uint64_t i = 0; i < di_gguf_tensor_count(g); i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        all += t->n_bytes;
        if ((int)t->dtype >= 0 && t->dtype < DI_DTYPE_COUNT && q8->gemm_q8[t->dtype]) int8_bytes += t->n_bytes;
    }
    return q8->quantize_q8 && int8_bytes > all / 2 ? q8 : di_cpu_kernels_best();
}

static di_status open_gguf(di_model *m, const char *path, const di_cpu_kernels *k, di_error *err) {
    di_status s = di_gguf_open(path, &m->gguf, err);
    if (s) return s;
    if (!k) k = default_gguf_kernels(m->gguf);
    di_gguf_str arch;
    if ((s = di_gguf_get_str(m->gguf, "general.architecture", &arch, err))) return s;
    di_llama_arch which;
    if (!di_llama_arch_from_name(arch.ptr, arch.len, &which))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "architecture '%.*s' is not supported in GGUF (%s)",
                            (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, di_llama_arch_list());
    m->ops = &LLAMA_OPS;
    if ((s = di_llama_load(m->gguf, k, (di_llama_model **)&m->impl, err))) return s;
    return di_tok_load_gguf(m->gguf, &m->tok, err);
}

/* The whole of a small text file (NUL-terminated, malloc'd), or NULL. */
#define SMALL_FILE_MAX (1u << 20) /* chat templates are a few KB */
static char *read_small_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(SMALL_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, SMALL_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf || n > SMALL_FILE_MAX) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* An HF checkpoint folder: config.json says the architecture
 * (deepseek_v41 or deepseek_v4), tokenizer.json next to it. V4.1 reads the
 * tokenizer first: its Engram layers compress the vocabulary through it. */
static di_status open_folder(di_model *m, const char *dir, const di_cpu_kernels *k, const char *numerics,
                             di_error *err) {
    bool llama = false;
    di_status ps = di_llama_hf_probe(dir, &llama, err);
    if (ps) return ps;
    if (llama) { /* the llama family (model/llama_hf.h): the GGUF path's forward */
        if (numerics)
            return di_error_set(err, DI_ERR_INVALID_ARG, "--numerics applies to DeepSeek-V4.1 checkpoints only");
        m->ops = &LLAMA_OPS;
        if ((ps = di_llama_hf_load(dir, k, &m->llama_hf, (di_llama_model **)&m->impl, err)) ||
            (ps = di_tok_load_json(dir, &m->tok, err)))
            return ps;
        /* newer transformers save the template beside the tokenizer files */
        char tmpl_path[4096];
        char *tmpl = NULL;
        if (di_tok_chat_kind(m->tok) == DI_CHAT_UNKNOWN &&
            snprintf(tmpl_path, sizeof tmpl_path, "%s/chat_template.jinja", dir) < (int)sizeof tmpl_path &&
            (tmpl = read_small_file(tmpl_path)))
            di_tok_set_chat_kind(m->tok, di_tok_chat_detect(tmpl));
        free(tmpl);
        di_llama_arch a = di_llama_hparams_of(m->impl)->arch;
        if (di_tok_chat_kind(m->tok) == DI_CHAT_UNKNOWN && (a == DI_LLAMA_ARCH_PHI3 || a == DI_LLAMA_ARCH_GEMMA3))
            di_tok_set_chat_kind(m->tok, a == DI_LLAMA_ARCH_PHI3 ? DI_CHAT_PHI3 : DI_CHAT_GEMMA);
        return DI_OK;
    }
    if (di_dsv41_is_config(dir)) {
        int num = numerics ? di_dsv41_numerics_from_name(numerics) : DI_DSV41_NUMERICS_DEEPINFER;
        if (num < 0)
            return di_error_set(err, DI_ERR_INVALID_ARG, "numerics '%.32s' unknown (deepinfer or ideal)", numerics);
        m->ops = &DSV41_OPS;
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        di_status s = DI_OK;
        if (access(path, R_OK) == 0 && (s = di_tok_load_json(dir, &m->tok, err))) return s;
        if ((s = di_dsv41_load(dir, k, (di_dsv41_numerics)num, m->tok, (di_dsv41_model **)&m->impl, err))) return s;
        if (!m->tok) return di_error_set(err, DI_ERR_FORMAT, "%s: no tokenizer.json", dir);
        if (di_tok_chat_kind(m->tok) == DI_CHAT_UNKNOWN || di_tok_chat_kind(m->tok) == DI_CHAT_DEEPSEEK3)
            di_tok_set_chat_kind(m->tok, DI_CHAT_DEEPSEEK41);
        return DI_OK;
    }
    if (numerics)
        return di_error_set(err, DI_ERR_INVALID_ARG, "--numerics applies to DeepSeek-V4.1 checkpoints only");
    m->ops = &DSV4_OPS;
    di_status s = di_dsv4_load(dir, k, (di_dsv4_model **)&m->impl, err);
    if (s) return s;
    return di_tok_load_json(dir, &m->tok, err);
}

di_status di_model_open(const char *path, const char *kernels, const char *numerics, di_model **out,
                        di_error *err) {
    return di_model_open_on(path, kernels, numerics, NULL, out, err);
}

di_status di_model_open_on(const char *path, const char *kernels, const char *numerics, const char *device,
                           di_model **out, di_error *err) {
    *out = NULL;
    /* every architecture runs on the CPU backend; any other device is
     * refused here, with its reason, before the file is read */
    di_status ds = di_device_check(device, NULL, err);
    if (ds != DI_OK) return ds;
    di_model *m = calloc(1, sizeof *m);
    if (!m) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    const di_cpu_kernels *k = NULL; /* NULL: the model's default table (open_gguf) */
    di_status s = DI_OK;
    if (kernels && !(k = di_cpu_kernels_by_name(kernels)))
        s = di_error_set(err, DI_ERR_INVALID_ARG, "kernel table '%s' unknown or not runnable on this CPU", kernels);
    if (!s && numerics && !is_dir)
        s = di_error_set(err, DI_ERR_INVALID_ARG, "--numerics applies to DeepSeek-V4.1 checkpoints only");
    if (!s) s = is_dir ? open_folder(m, path, k, numerics, err) : open_gguf(m, path, k, err);
    di_model_facts f;
    /* A GGUF's tokenizer and logits come from one file and must agree. An HF
     * folder may pair a larger tokenizer.json with a small vocab (random-weight
     * test checkpoints keep the real tokenizer, which Engram's compressed
     * vocabulary needs): DeepInfer loads it and drops a request whose prompt
     * holds an id outside [0, vocab) (engine/llm_engine.py:add_request), so
     * the engine refuses such a prompt (di_engine_submit), not the load.
     * A llama-family folder is held to the GGUF rule. */
    if (s == DI_OK && (!is_dir || m->llama_hf)) {
        di_model_get_facts(m, &f);
        if (di_tok_vocab_size(m->tok) > f.n_vocab)
            s = di_error_set(err, DI_ERR_FORMAT, "tokenizer has %d tokens but the model only %d logits",
                             di_tok_vocab_size(m->tok), f.n_vocab);
    }
    if (s) {
        if (err && !strstr(err->msg, path)) di_error_prefix(err, "%s: ", path);
        di_model_free(m);
        return s;
    }
    *out = m;
    return DI_OK;
}

void di_model_free(di_model *m) {
    if (!m) return;
    di_tok_free(m->tok);
    if (m->impl) m->ops->free(m->impl);
    di_llama_hf_free(m->llama_hf); /* after the model: its weights point into it */
    di_gguf_close(m->gguf);
    free(m);
}

void di_model_get_facts(const di_model *m, di_model_facts *out) {
    memset(out, 0, sizeof *out);
    m->ops->facts(m->impl, out);
}

const di_tokenizer *di_model_tokenizer(const di_model *m) { return m->tok; }

bool di_model_pretouch(const di_model *m, di_load_progress_fn fn, void *user) {
    if (!m || !m->gguf) return false;
    /* the span of every tensor's bytes: the file's data section (the
     * header and metadata were read while opening) */
    const uint8_t *lo = NULL, *hi = NULL;
    for (uint64_t i = 0; i < di_gguf_tensor_count(m->gguf); i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(m->gguf, i);
        const uint8_t *a = t->data, *b = a + t->n_bytes;
        if (t->n_bytes == 0) continue;
        if (!lo || a < lo) lo = a;
        if (!hi || b > hi) hi = b;
    }
    return lo && di_mapped_pretouch(lo, (size_t)(hi - lo), fn, user);
}

uint64_t di_model_kv_bytes_per_token(const di_model *m, di_dtype dtype) {
    return m->ops->kv_bytes_per_token(m->impl, dtype);
}

di_status di_model_kv_create(const di_model *m, int32_t n_blocks, int32_t block_size, di_dtype dtype,
                             di_model_kv **out, di_error *err) {
    *out = NULL;
    di_model_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return di_error_set(err, DI_ERR_NOMEM, "KV cache: out of memory");
    kv->ops = m->ops;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    di_status s = m->ops->kv_create(m->impl, n_blocks, block_size, dtype, &kv->impl, err);
    if (s) {
        free(kv);
        return s;
    }
    *out = kv;
    return DI_OK;
}

di_status di_model_kv_truncate(di_model_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err) {
    if (!kv) return di_error_set(err, DI_ERR_INVALID_ARG, "kv_truncate: no cache");
    if (seq_slot < 0 || n_keep < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "kv_truncate: slot %d, n_keep %d must be >= 0", (int)seq_slot,
                            (int)n_keep);
    if (!kv->ops->kv_truncate)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "%s cannot roll back its KV cache (speculative decoding)",
                            kv->ops->name);
    return kv->ops->kv_truncate(kv->impl, seq_slot, n_keep, err);
}

void di_model_kv_free(di_model_kv *kv) {
    if (!kv) return;
    kv->ops->kv_free(kv->impl);
    free(kv);
}

/* A block is block_size consecutive slots of every region, so its bytes are
 * the regions' slices one after the other. */
uint64_t di_model_kv_block_bytes(const di_model_kv *kv) {
    uint64_t total = 0;
    uint8_t *base;
    size_t sb;
    for (int32_t i = 0; kv->ops->kv_region(kv->impl, i, &base, &sb); i++) total += (uint64_t)sb * (uint64_t)kv->block_size;
    return total;
}

static di_status block_copy(di_model_kv *kv, int32_t block, uint8_t *buf, bool to_cache, di_error *err) {
    if (block < 0 || block >= kv->n_blocks)
        return di_error_set(err, DI_ERR_INVALID_ARG, "KV cache: block %d of %d", (int)block, (int)kv->n_blocks);
    uint8_t *base;
    size_t sb;
    for (int32_t i = 0; kv->ops->kv_region(kv->impl, i, &base, &sb); i++) {
        size_t n = sb * (size_t)kv->block_size;
        uint8_t *at = base + (size_t)block * n;
        if (to_cache) memcpy(at, buf, n);
        else memcpy(buf, at, n);
        buf += n;
    }
    return DI_OK;
}

di_status di_model_kv_block_read(di_model_kv *kv, int32_t block, void *out, di_error *err) {
    return block_copy(kv, block, out, false, err);
}

di_status di_model_kv_block_write(di_model_kv *kv, int32_t block, const void *in, di_error *err) {
    return block_copy(kv, block, (uint8_t *)(uintptr_t)in, true, err);
}

di_status di_model_ctx_create(const di_model *m, di_model_ctx **out, di_error *err) {
    *out = NULL;
    di_model_ctx *c = calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "forward context: out of memory");
    c->ops = m->ops;
    di_status s = m->ops->ctx_create(m->impl, &c->impl, err);
    if (s) {
        free(c);
        return s;
    }
    *out = c;
    return DI_OK;
}

void di_model_ctx_free(di_model_ctx *ctx) {
    if (!ctx) return;
    ctx->ops->ctx_free(ctx->impl);
    di_dsv4_ep_free(ctx->ep);
    free(ctx);
}

di_status di_model_ctx_set_ep(const di_model *m, di_model_ctx *ctx, struct di_dist *d, const di_ep_params *p,
                              di_error *err) {
    if (m->ops != &DSV4_OPS && m->ops != &DSV41_OPS)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "expert parallelism needs a MoE model (deepseek_v4 or deepseek_v41), not %s", m->ops->name);
    if (ctx->ep) return di_error_set(err, DI_ERR_INVALID_ARG, "forward context is already expert parallel");
    di_dsv4_ep_params ep = {.n_extra = p->n_extra_experts, .window = p->eplb_window, .interval = p->eplb_interval,
                            .force_imbalance = p->force_imbalance, .log = p->log};
    if (m->ops == &DSV41_OPS) {
        di_status s = di_dsv41_ep_create(m->impl, d, &ep, &ctx->ep, err);
        if (s) return s;
        di_dsv41_ctx_set_ep(ctx->impl, ctx->ep);
        return DI_OK;
    }
    di_status s = di_dsv4_ep_create(m->impl, d, &ep, &ctx->ep, err);
    if (s) return s;
    di_dsv4_ctx_set_ep(ctx->impl, ctx->ep);
    return DI_OK;
}

int32_t di_model_image_token(const di_model *m) {
    return m->ops == &DSV41_OPS ? di_dsv41_image_token_id(m->impl) : -1;
}

di_status di_model_encode_image(const di_model *m, const void *bytes, size_t n_bytes, int32_t **ids, float **rows,
                                int32_t *n_tokens, di_threadpool *pool, di_error *err) {
    *ids = NULL;
    *rows = NULL;
    *n_tokens = 0;
    if (di_model_image_token(m) < 0)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "this model takes no images (%s without a vision tower)",
                            m->ops->name);
    di_dsv41_image_rows r;
    di_status s = di_dsv41_encode_image(m->impl, bytes, n_bytes, NULL, &r, pool, err);
    if (s) return s;
    *ids = r.token;
    *rows = r.rows;
    *n_tokens = r.n_tokens;
    return DI_OK;
}

di_status di_model_image_n_tokens(const di_model *m, const void *bytes, size_t n_bytes, int32_t *n_tokens,
                                  di_error *err) {
    *n_tokens = 0;
    if (di_model_image_token(m) < 0)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "this model takes no images (%s without a vision tower)",
                            m->ops->name);
    return di_dsv41_image_n_tokens(m->impl, bytes, n_bytes, NULL, n_tokens, err);
}

di_status di_model_bounded_replay(const di_model *m, int32_t keep, int32_t *keep_out, di_error *err) {
    *keep_out = 0;
    if (m->ops != &DSV41_OPS)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "--bounded-replay applies to DeepSeek-V4.1 checkpoints only (this model is %s)",
                            m->ops->name);
    if (keep < 0) keep = di_dsv41_replay_default_keep(di_dsv41_hparams_of(m->impl));
    di_status s = di_dsv41_replay_check(m->impl, keep, err);
    if (s) return s;
    *keep_out = keep;
    return DI_OK;
}

di_status di_model_ctx_set_cp(const di_model *m, di_model_ctx *ctx, struct di_dist *d, int32_t min_rows,
                              di_error *err) {
    if (m->ops != &DSV4_OPS && m->ops != &DSV41_OPS)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "context parallelism needs deepseek_v4 or deepseek_v41, not %s", m->ops->name);
    if (min_rows < 1) return di_error_set(err, DI_ERR_RANGE, "cp: min rows %d < 1", (int)min_rows);
    di_model_facts f;
    di_model_get_facts(m, &f);
    ctx->cp = d;
    ctx->cp_min_rows = min_rows;
    ctx->n_vocab = f.n_vocab;
    return DI_OK;
}

typedef struct cp_share {
    di_model_ctx *ctx;
    di_model_kv *kv;
    di_threadpool *pool;
} cp_share;

static di_status dsv4_cp_share(void *user, const di_batch *share, float *logits, di_error *err) {
    cp_share *c = user;
    di_dsv4_ctx_set_cp(c->ctx->impl, c->ctx->cp);
    di_status s = di_dsv4_forward(c->ctx->impl, c->kv->impl, share, logits, c->pool, err);
    di_dsv4_ctx_set_cp(c->ctx->impl, NULL);
    return s;
}

static di_status dsv41_cp_share(void *user, const di_batch *share, float *logits, di_error *err) {
    cp_share *c = user;
    di_dsv41_ctx_set_cp(c->ctx->impl, c->ctx->cp);
    di_status s = di_dsv41_forward(c->ctx->impl, c->kv->impl, share, logits, c->pool, err);
    di_dsv41_ctx_set_cp(c->ctx->impl, NULL);
    return s;
}

di_status di_model_forward(di_model_ctx *ctx, di_model_kv *kv, const di_batch *b, float *logits_out,
                           di_threadpool *pool, di_error *err) {
    if (ctx->ops != kv->ops)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: kv cache and context are of different models");
    if (b->replay_from && ctx->ops != &DSV41_OPS)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "forward: bounded replay on a %s model", ctx->ops->name);
    if (ctx->cp) { /* every rank holds the same batch; big ones are split, small ones run everywhere */
        di_status s = di_cp_agree(ctx->cp, b, err);
        if (s) return s;
        if (b->n_rows >= ctx->cp_min_rows) {
            cp_share sh = {ctx, kv, pool};
            return di_cp_forward(ctx->cp, ctx->n_vocab, b, logits_out,
                                 ctx->ops == &DSV41_OPS ? dsv41_cp_share : dsv4_cp_share, &sh, err);
        }
    }
    return ctx->ops->forward(ctx->impl, kv->impl, b, logits_out, pool, err);
}

const struct di_dsv41_model *di_model_as_dsv41(const di_model *m) {
    return m && m->ops == &DSV41_OPS ? m->impl : NULL;
}

struct di_dsv41_kv *di_model_kv_as_dsv41(di_model_kv *kv) {
    return kv && kv->ops == &DSV41_OPS ? kv->impl : NULL;
}
