/* Llama-family forward. Reads top to bottom like the math:
 *
 *   x = embed(tokens)                                        (n_rows, n_embd)
 *   per layer:
 *     h = rmsnorm(x) ; q,k,v = h Wq, h Wk, h Wv ; rope(q, k)
 *     cache[k, v] <- k, v  (every row of the batch first)
 *     x += attention(q, cache) Wo
 *     h = rmsnorm(x) ; x += (silu(h Wg) * (h Wu)) Wd
 *   logits = rmsnorm(x[want]) Wout                          (n_want, n_vocab)
 *
 * The Gemma 3 variant (hp.arch, llama_hparams.h) is the same loop with:
 *   x = embed(tokens) * sqrt(n_embd);
 *   q, k RMS-normalized per head before RoPE (neox halves), RoPE base and
 *   a sliding window per layer kind (local / global);
 *   x += rmsnorm(attention(..) Wo, post_attention_norm);
 *   x += rmsnorm((gelu_tanh(h Wg) * (h Wu)) Wd, post_ffw_norm);
 *   logits soft-capped when the file says so.
 *
 * The other variants switch on pieces of the same loop (llama_hparams.h):
 *   qwen2: q, k, v += their biases before RoPE;
 *   qwen3 / qwen3moe: q, k RMS-normalized per head (as Gemma, without the
 *   rest of Gemma);
 *   qwen3moe, llama with experts (Mixtral): the FFN is llama_moe.c's routed
 *   experts;
 *   phi3: q/k/v and gate/up are row ranges of one fused matrix each, bound
 *   as separate weights (no copies, the same loop); LongRoPE's short
 *   factors divide the frequencies (as rope_freqs does for llama 3) and its
 *   attention factor is in hp.attn_scale. The long factors are validated
 *   but not used: transformers switches to them for a sequence past
 *   rope.scaling.original_context_length, llama.cpp for a context larger
 *   than it, and this forward does not know either, so positions past the
 *   original context (4096 on Phi-3-mini-128k) keep the short ones.
 * Every variant but llama rotates halves (NEOX).
 *
 * Weights are pointers into the GGUF mapping (no copies) except norm vectors
 * stored in a type other than F32, which are widened once at load. */
#include "model/llama.h"

#include "base/alloc.h"
#include "base/mapped_file.h"
#include "kernels/backend.h"
#include "model/llama_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEAD_DIM 1024   /* di_rope keeps n_rot/2 angles on the stack */
#define MAX_BATCH_ROWS (1 << 20) /* rows per forward; beyond is a caller bug */
#define MAX_SEQ_SLOTS (1 << 20)  /* sequence slots; seq_last costs 4 bytes each */

/* (n_out, n_in) rows of row_bytes, in the mapping */
typedef di_backend_weight llama_weight;

typedef struct llama_layer {
    const float *attn_norm; /* (n_embd) */
    const float *q_norm, *k_norm; /* (head_dim) gemma3, else NULL */
    const float *post_attn_norm, *post_ffw_norm; /* (n_embd) gemma3, else NULL */
    int local;              /* sliding-window layer (gemma3): own RoPE base and window */
    llama_weight wq;        /* (n_head*head_dim, n_embd) */
    llama_weight wk, wv;    /* (n_head_kv*head_dim, n_embd) */
    llama_weight wo;        /* (n_embd, n_head*head_dim) */
    const float *bq, *bk, *bv; /* (q_dim), (kv_dim) qwen2's q/k/v biases, else NULL */
    const float *ffn_norm;  /* (n_embd) */
    llama_weight w_gate, w_up; /* (n_ff, n_embd) */
    llama_weight w_down;    /* (n_embd, n_ff) */
    int moe;                /* the FFN is routed experts: w_gate/up/down unused */
    di_llama_moe experts;   /* moe only */
} llama_layer;

struct di_llama_model {
    di_llama_hparams hp;    /* validated by model/llama_hparams.c */
    int rope_neox;          /* 0: adjacent pairs (llama GGUF), 1: halves */
    int tied_output;
    di_backend be;          /* every op of the forward runs through it (kernels/backend.h) */
    llama_weight tok_embd;  /* (n_vocab, n_embd) */
    const float *output_norm; /* (n_embd) */
    llama_weight output;    /* (n_vocab, n_embd); == tok_embd when tied */
    llama_layer *layers;    /* (n_layer) */
    float *inv_freq;        /* (n_rot/2) rotary frequencies, scaling applied */
    float *inv_freq_swa;    /* (n_rot/2) the local layers' (gemma3), else NULL */
    int gemma;              /* hp.arch == DI_LLAMA_ARCH_GEMMA3 */
    /* the same rotation as ggml computes it (ggml kernels only) */
    float rope_theta_scale, rope_freq_scale, rope_theta_scale_swa;
    const float *rope_factors; /* (n_rot/2) rope_freqs divisors, or NULL */
    di_rope_table rope, rope_swa; /* the two tables as the backend takes them */
    float **owned;          /* (n_owned) norm vectors widened to f32 */
    int32_t n_owned;
    int64_t n_uploaded;     /* matrix(m, 0 ..) that went through upload_weight */
};

struct di_llama_kv {
    int32_t n_layer, n_blocks, block_size, row_elems; /* row_elems = n_head_kv*head_dim */
    di_dtype dtype;
    void **k, **v; /* (n_layer) -> (n_blocks, block_size, n_head_kv, head_dim), the backend's memory */
    di_backend be; /* the model's (a copy: the ops and context, for buf_free) */
};

/* The row buffers and the backend's scratch are the backend's memory
 * (buf_alloc: host for the CPU, device for CUDA); row_blocks and seq_last
 * are host tables the forward fills and reads itself. */
struct di_llama_ctx {
    const di_llama_model *m;
    di_backend be; /* the model's (a copy, for buf_free) */
    int64_t cap_rows, cap_tasks, cap_seqs, cap_attn_floats, cap_mm_floats;
    float *x;      /* (rows, n_embd) residual stream */
    float *h;      /* (rows, max(n_embd, q_dim)) normed input / gathered rows */
    float *q;      /* (rows, n_head*head_dim) */
    float *kx, *vx; /* (rows, n_head_kv*head_dim) */
    float *att;    /* (rows, n_head*head_dim) attention output */
    float *gate, *up; /* (rows, n_ff) */
    float *mm_scratch;   /* di_matmul_scratch_floats(rows, max n_in, tasks) */
    float *attn_scratch; /* (tasks, attention scratch floats) */
    float *rope_cs;      /* (rows, n_rot) cos then sin of each row's angles, for every layer */
    float *rope_cs_swa;  /* (rows, n_rot) the same for the local layers (gemma3) */
    const int32_t **row_blocks; /* (rows) */
    int32_t *seq_last;   /* (seqs) last position seen per slot during validation */
    di_llama_moe_scratch *moe; /* the expert FFN's buffers (NULL until a moe layer runs) */
};

/* ---- loading ------------------------------------------------------------ */

/* A validated matrix tensor (ne = [n_in, n_out]) as a kernel operand. */
static di_status bind_weight(const di_llama_model *m, const di_gguf_tensor *t, llama_weight *w,
                             di_error *err) {
    const di_dtype_traits *tr = di_dtype_traits_of(t->dtype);
    if (!tr || !m->be.ops->supports(&m->be, t->dtype)) {
        char name[96];
        m->be.ops->describe(&m->be, name, sizeof name);
        return di_error_set(err, DI_ERR_UNSUPPORTED, "tensor '%s': dtype %s not supported by the %s backend",
                            t->name, tr ? tr->name : "?", name);
    }
    uint64_t rb, total;
    if (di_dtype_row_bytes(t->dtype, t->ne[0], &rb) != DI_OK ||
        di_mul_overflow_u64(rb, (uint64_t)t->ne[1], &total) || total > t->n_bytes)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': %lld x %lld %s does not fit its %llu bytes",
                            t->name, (long long)t->ne[1], (long long)t->ne[0], tr->name,
                            (unsigned long long)t->n_bytes);
    /* block structs hold f16 scales: 2-byte alignment; f32 rows want 4 */
    if ((uintptr_t)t->data % 4 != 0)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': data not 4-byte aligned", t->name);
    w->dtype = t->dtype;
    w->data = t->data;
    w->row_bytes = rb;
    w->n_in = t->ne[0];
    w->n_out = t->ne[1];
    return DI_OK;
}

/* A validated vector as f32: points into the mapping when already F32, else
 * is widened into a buffer the model owns. */
static di_status bind_vector(di_llama_model *m, const di_gguf_tensor *t, const float **out, di_error *err) {
    llama_weight w = {0};
    di_status s = bind_weight(m, t, &w, err);
    if (s != DI_OK) return s;
    if (w.dtype == DI_DTYPE_F32) {
        *out = w.data;
        return DI_OK;
    }
    int64_t n = w.n_in * w.n_out;
    float *buf = di_malloc_array((size_t)n, sizeof(float));
    float **list = buf ? di_realloc_array(m->owned, (size_t)m->n_owned + 1, sizeof *list) : NULL;
    if (!list) {
        free(buf);
        return di_error_set(err, DI_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    }
    m->owned = list;
    m->owned[m->n_owned++] = buf;
    m->be.ops->dequant(&m->be, w.dtype, w.data, buf, n);
    *out = buf;
    return DI_OK;
}

/* Rows [row0, row0 + n_out) of a fused matrix as a weight of their own
 * (phi3's attn_qkv and gate-up ffn_up): rows are independent, so a row
 * range of any dtype is a valid operand. */
static di_status bind_rows(const di_llama_model *m, const di_gguf_tensor *t, int64_t row0, int64_t n_out,
                           llama_weight *w, di_error *err) {
    di_status s = bind_weight(m, t, w, err);
    if (s != DI_OK) return s;
    if (row0 < 0 || n_out < 1 || row0 + n_out > w->n_out || (w->row_bytes * (uint64_t)row0) % 4 != 0)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': rows %lld..%lld do not split it", t->name,
                            (long long)row0, (long long)(row0 + n_out));
    w->data = (const uint8_t *)w->data + w->row_bytes * (uint64_t)row0;
    w->n_out = n_out;
    return DI_OK;
}

static di_status bind_layer(di_llama_model *m, const di_llama_layer_tensors *t, llama_layer *L,
                            di_error *err) {
    const di_llama_hparams *hp = &m->hp;
    di_status s;
    if ((s = bind_vector(m, t->attn_norm, &L->attn_norm, err)) || (s = bind_weight(m, t->attn_output, &L->wo, err)) ||
        (s = bind_vector(m, t->ffn_norm, &L->ffn_norm, err)))
        return s;
    if (t->attn_qkv) { /* phi3: rows q, then k, then v */
        const int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = (int64_t)hp->n_heads_kv * hp->head_dim;
        if ((s = bind_rows(m, t->attn_qkv, 0, q_dim, &L->wq, err)) ||
            (s = bind_rows(m, t->attn_qkv, q_dim, kv_dim, &L->wk, err)) ||
            (s = bind_rows(m, t->attn_qkv, q_dim + kv_dim, kv_dim, &L->wv, err)))
            return s;
    } else if ((s = bind_weight(m, t->attn_q, &L->wq, err)) || (s = bind_weight(m, t->attn_k, &L->wk, err)) ||
               (s = bind_weight(m, t->attn_v, &L->wv, err))) {
        return s;
    }
    if (t->ffn_gate_exps) {
        L->moe = 1;
        if ((s = di_llama_moe_bind(hp, t, &m->be, &L->experts, err))) return s;
    } else if (!t->ffn_gate) { /* phi3: ffn_up holds the gate rows, then the up rows */
        if ((s = bind_rows(m, t->ffn_up, 0, hp->n_ff, &L->w_gate, err)) ||
            (s = bind_rows(m, t->ffn_up, hp->n_ff, hp->n_ff, &L->w_up, err)) ||
            (s = bind_weight(m, t->ffn_down, &L->w_down, err)))
            return s;
    } else if ((s = bind_weight(m, t->ffn_gate, &L->w_gate, err)) || (s = bind_weight(m, t->ffn_up, &L->w_up, err)) ||
               (s = bind_weight(m, t->ffn_down, &L->w_down, err))) {
        return s;
    }
    if (t->attn_q_norm && /* gemma3, qwen3 */
        ((s = bind_vector(m, t->attn_q_norm, &L->q_norm, err)) || (s = bind_vector(m, t->attn_k_norm, &L->k_norm, err))))
        return s;
    if (t->attn_q_b && /* qwen2 */
        ((s = bind_vector(m, t->attn_q_b, &L->bq, err)) || (s = bind_vector(m, t->attn_k_b, &L->bk, err)) ||
         (s = bind_vector(m, t->attn_v_b, &L->bv, err))))
        return s;
    if (m->gemma &&
        ((s = bind_vector(m, t->post_attention_norm, &L->post_attn_norm, err)) ||
         (s = bind_vector(m, t->post_ffw_norm, &L->post_ffw_norm, err))))
        return s;
    return DI_OK;
}

/* Matrix i of those a linear reads (the output, then per layer q, k, v,
 * o and, dense, gate, up, down), or NULL past the last: upload_weight /
 * release_weight walk them in this order. */
static llama_weight *matrix(di_llama_model *m, int64_t i) {
    if (i == 0) return &m->output;
    i--;
    for (uint32_t il = 0; il < m->hp.n_layers; il++) {
        llama_layer *L = &m->layers[il];
        llama_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        const int64_t n = L->moe ? 4 : 7; /* the experts are llama_moe.c's */
        if (i < n) return w[i];
        i -= n;
    }
    return NULL;
}

/* The backend's copy of each matrix (the CPU's: an x16-packed one where
 * its table has the gemm for it; the rows stay for the embedding lookup). */
static di_status upload_matrices(di_llama_model *m, di_error *err) {
    di_status s = DI_OK;
    const uint8_t *e0 = m->tok_embd.data, *e1 = e0 + m->tok_embd.row_bytes * (uint64_t)m->tok_embd.n_out;
    llama_weight *w;
    for (int64_t i = 0; s == DI_OK && (w = matrix(m, i)); i++) {
        llama_weight up;
        if ((s = m->be.ops->upload_weight(&m->be, w, &up, err)) != DI_OK) break;
        /* rows the backend copied are not read again, except the tied
         * output's (the embedding lookup reads them) */
        const uint8_t *r0 = w->data, *r1 = r0 + w->row_bytes * (uint64_t)w->n_out;
        if (up.rows_unread && (r1 <= e0 || r0 >= e1)) di_memory_release_hint(r0, (size_t)(r1 - r0));
        *w = up, m->n_uploaded++;
    }
    for (uint32_t il = 0; il < m->hp.n_layers && s == DI_OK; il++)
        if (m->layers[il].moe) s = di_llama_moe_upload(&m->layers[il].experts, &m->be, err);
    return s;
}

static void release_matrices(di_llama_model *m) {
    if (!m->layers) return;
    for (int64_t i = 0; i < m->n_uploaded; i++) m->be.ops->release_weight(&m->be, matrix(m, i));
    for (uint32_t il = 0; il < m->hp.n_layers; il++)
        if (m->layers[il].moe) di_llama_moe_release(&m->layers[il].experts, &m->be);
}

/* inv_freq[i] = freq_scale / theta^(2i/n_rot), divided by the per-pair
 * factors of a llama-3 style rope_freqs tensor when the file has one.
 * Computed in double, rounded once to f32 (the reference's f32 table differs
 * by at most an ulp). */
static di_status build_rope(di_llama_model *m, const di_gguf_tensor *rope_freqs, di_error *err) {
    const di_llama_hparams *hp = &m->hp;
    if (hp->rope_scaling == DI_LLAMA_ROPE_SCALING_YARN)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "rope scaling 'yarn' is not implemented");
    float freq_scale = 1.0f;
    if (hp->rope_scaling == DI_LLAMA_ROPE_SCALING_LINEAR) {
        if (!(hp->rope_scaling_factor > 0.0f) || !isfinite(hp->rope_scaling_factor))
            return di_error_set(err, DI_ERR_FORMAT, "rope scaling factor %g invalid",
                                (double)hp->rope_scaling_factor);
        freq_scale = 1.0f / hp->rope_scaling_factor;
    }
    if (!(hp->rope_freq_base > 0.0f) || !isfinite(hp->rope_freq_base))
        return di_error_set(err, DI_ERR_FORMAT, "rope freq_base %g invalid", (double)hp->rope_freq_base);
    uint32_t n_pairs = hp->n_rot / 2;
    m->inv_freq = di_calloc(n_pairs > 0 ? n_pairs : 1, sizeof(float));
    if (!m->inv_freq) return di_error_set(err, DI_ERR_NOMEM, "rope table: out of memory");
    const float *factors = NULL;
    if (rope_freqs) {
        di_status s = bind_vector(m, rope_freqs, &factors, err);
        if (s != DI_OK) return s;
    }
    m->rope_theta_scale = powf(hp->rope_freq_base, -2.0f / (float)hp->n_rot);
    m->rope_freq_scale = freq_scale;
    m->rope_factors = factors;
    for (uint32_t i = 0; i < n_pairs; i++) {
        float f = (float)(1.0 / pow((double)hp->rope_freq_base, (double)(2 * i) / (double)hp->n_rot));
        if (factors) {
            if (!(factors[i] > 0.0f) || !isfinite(factors[i]))
                return di_error_set(err, DI_ERR_FORMAT, "rope_freqs[%u] = %g invalid", i, (double)factors[i]);
            f /= factors[i];
        }
        m->inv_freq[i] = f * freq_scale;
    }
    if (hp->sliding_window > 0 && !m->gemma) {
        /* llama with a window (Mistral): every layer local, rotating as the
         * global table does; the local path applies no scaling or factors */
        if (freq_scale != 1.0f || factors)
            return di_error_set(err, DI_ERR_UNSUPPORTED, "a sliding window with rope scaling is not supported");
        m->inv_freq_swa = di_malloc_array(n_pairs > 0 ? n_pairs : 1, sizeof(float));
        if (!m->inv_freq_swa) return di_error_set(err, DI_ERR_NOMEM, "rope table: out of memory");
        memcpy(m->inv_freq_swa, m->inv_freq, n_pairs * sizeof(float));
        m->rope_theta_scale_swa = m->rope_theta_scale;
    } else if (hp->sliding_window > 0) { /* the local layers' table: their own base, no scaling */
        if (!(hp->rope_freq_base_swa > 1.0f) || !isfinite(hp->rope_freq_base_swa))
            return di_error_set(err, DI_ERR_FORMAT, "local rope base %g invalid", (double)hp->rope_freq_base_swa);
        m->inv_freq_swa = di_calloc(n_pairs > 0 ? n_pairs : 1, sizeof(float));
        if (!m->inv_freq_swa) return di_error_set(err, DI_ERR_NOMEM, "rope table: out of memory");
        for (uint32_t i = 0; i < n_pairs; i++)
            m->inv_freq_swa[i] =
                (float)(1.0 / pow((double)hp->rope_freq_base_swa, (double)(2 * i) / (double)hp->n_rot));
        m->rope_theta_scale_swa = powf(hp->rope_freq_base_swa, -2.0f / (float)hp->n_rot);
    }
    return DI_OK;
}

di_status di_llama_load(const di_gguf *g, const di_cpu_kernels *kernels, di_llama_model **out,
                        di_error *err) {
    *out = NULL;
    di_llama_hparams hp;
    di_llama_tensors t = {0};
    di_status s = di_llama_hparams_from_gguf(g, &hp, err);
    if (s == DI_OK) s = di_llama_validate_tensors(g, &hp, &t, err);
    /* llama GGUFs store q/k rows permuted for adjacent pairs; llama.cpp's
     * converter leaves the other families' unpermuted (rotate halves, as HF) */
    if (s == DI_OK) s = di_llama_load_parts(&hp, &t, di_llama_arch_rope_neox(hp.arch), kernels, out, err);
    di_llama_tensors_free(&t);
    return s;
}

di_status di_llama_load_parts(const di_llama_hparams *hp, const di_llama_tensors *tensors, bool rope_neox,
                              const di_cpu_kernels *kernels, di_llama_model **out, di_error *err) {
    *out = NULL;
    di_llama_model *m = di_calloc(1, sizeof *m);
    if (!m) return di_error_set(err, DI_ERR_NOMEM, "llama: out of memory");
    di_backend_cpu(kernels, &m->be);
    m->hp = *hp;
    const di_llama_tensors t = *tensors;
    di_status s = DI_OK;
    if (m->hp.head_dim > MAX_HEAD_DIM || m->hp.n_rot > m->hp.head_dim || m->hp.n_rot % 2 != 0) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "head_dim %u / n_rot %u unsupported", m->hp.head_dim,
                         m->hp.n_rot);
        goto done;
    }
    m->gemma = m->hp.arch == DI_LLAMA_ARCH_GEMMA3;
    m->rope_neox = rope_neox;
    m->tied_output = t.tied_output;
    if ((s = bind_weight(m, t.token_embd, &m->tok_embd, err)) ||
        (s = bind_vector(m, t.output_norm, &m->output_norm, err)) ||
        (s = bind_weight(m, t.output, &m->output, err)))
        goto done;
    m->layers = di_calloc(m->hp.n_layers, sizeof *m->layers);
    if (!m->layers) {
        s = di_error_set(err, DI_ERR_NOMEM, "llama: out of memory");
        goto done;
    }
    for (uint32_t il = 0; il < m->hp.n_layers; il++) {
        if ((s = bind_layer(m, &t.layers[il], &m->layers[il], err))) goto done;
        m->layers[il].local = di_llama_layer_is_local(&m->hp, il);
    }
    /* phi3 LongRoPE: the short factors, what both references use for a
     * sequence within the original context (see the header) */
    s = build_rope(m, t.rope_freqs ? t.rope_freqs : t.rope_short, err);
    if (s == DI_OK) s = upload_matrices(m, err);
    /* local layers: their base, no scaling or factors (gemma3 has neither) */
    m->rope = (di_rope_table){m->inv_freq, m->rope_theta_scale, m->rope_freq_scale, m->rope_factors};
    m->rope_swa = (di_rope_table){m->inv_freq_swa, m->rope_theta_scale_swa, 1.0f, NULL};
done:
    if (s != DI_OK) {
        di_llama_free(m);
        return s;
    }
    *out = m;
    return DI_OK;
}

void di_llama_free(di_llama_model *m) {
    if (!m) return;
    release_matrices(m);
    for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->inv_freq);
    free(m->inv_freq_swa);
    di_backend_release(&m->be);
    free(m);
}

const di_llama_hparams *di_llama_hparams_of(const di_llama_model *m) { return &m->hp; }
const di_cpu_kernels *di_llama_kernels(const di_llama_model *m) { return di_backend_cpu_kernels(&m->be); }
const di_backend *di_llama_backend(const di_llama_model *m) { return &m->be; }

/* ---- KV cache ------------------------------------------------------------ */

di_status di_llama_kv_create(const di_llama_model *m, int32_t n_blocks, int32_t block_size,
                             di_dtype dtype, di_llama_kv **out, di_error *err) {
    *out = NULL;
    if (n_blocks < 1 || block_size < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "kv cache: %d blocks of %d tokens", (int)n_blocks,
                            (int)block_size);
    if (dtype != DI_DTYPE_F32 && dtype != DI_DTYPE_F16)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "kv cache: dtype must be f32 or f16");
    di_llama_kv *kv = di_calloc(1, sizeof *kv);
    if (!kv) return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory");
    kv->be = m->be;
    kv->n_layer = (int32_t)m->hp.n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->row_elems = (int32_t)(m->hp.n_heads_kv * m->hp.head_dim);
    kv->dtype = dtype;
    uint64_t elems, bytes;
    size_t esize = dtype == DI_DTYPE_F32 ? 4 : 2;
    if (di_mul_overflow_u64((uint64_t)n_blocks * (uint64_t)block_size, (uint64_t)kv->row_elems, &elems) ||
        di_mul_overflow_u64(elems, esize, &bytes) || bytes > SIZE_MAX / 2) {
        free(kv);
        return di_error_set(err, DI_ERR_RANGE, "kv cache: size overflows");
    }
    kv->k = di_calloc((size_t)kv->n_layer, sizeof *kv->k);
    kv->v = di_calloc((size_t)kv->n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v) goto nomem;
    for (int32_t il = 0; il < kv->n_layer; il++) { /* zero-filled, as the header promises */
        kv->k[il] = kv->be.ops->buf_alloc(&kv->be, (size_t)bytes);
        kv->v[il] = kv->be.ops->buf_alloc(&kv->be, (size_t)bytes);
        if (!kv->k[il] || !kv->v[il]) goto nomem;
    }
    *out = kv;
    return DI_OK;
nomem:
    di_llama_kv_free(kv);
    return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory for %d layers x %llu bytes x 2",
                        (int)m->hp.n_layers, (unsigned long long)bytes);
}

void di_llama_kv_free(di_llama_kv *kv) {
    if (!kv) return;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        if (kv->k) kv->be.ops->buf_free(&kv->be, kv->k[il]);
        if (kv->v) kv->be.ops->buf_free(&kv->be, kv->v[il]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

int32_t di_llama_kv_n_blocks(const di_llama_kv *kv) { return kv->n_blocks; }
int32_t di_llama_kv_block_size(const di_llama_kv *kv) { return kv->block_size; }

/* ---- forward context -------------------------------------------------- */

di_status di_llama_ctx_create(const di_llama_model *m, di_llama_ctx **out, di_error *err) {
    *out = NULL;
    di_llama_ctx *c = di_calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "llama ctx: out of memory");
    c->m = m;
    c->be = m->be;
    *out = c;
    return DI_OK;
}

void di_llama_ctx_free(di_llama_ctx *c) {
    if (!c) return;
    float *bufs[] = {c->x,    c->h,  c->q,          c->kx,           c->vx,      c->att,
                     c->gate, c->up, c->mm_scratch, c->attn_scratch, c->rope_cs, c->rope_cs_swa};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) c->be.ops->buf_free(&c->be, bufs[i]);
    free(c->row_blocks);
    free(c->seq_last);
    di_llama_moe_scratch_free(c->moe);
    free(c);
}

/* Replaces the host table *p by an uninitialized array of n elements of size bytes. */
static int regrow(void *pp, int64_t n, size_t size) {
    void **p = pp;
    void *q = di_malloc_array((size_t)(n > 0 ? n : 1), size);
    if (!q) return 0;
    free(*p);
    *p = q;
    return 1;
}

/* Replaces the backend buffer *p by one of n floats (zero-filled). */
static int regrow_buf(di_llama_ctx *c, float **p, int64_t n) {
    uint64_t bytes;
    if (n < 0 || di_mul_overflow_u64((uint64_t)(n > 0 ? n : 1), sizeof(float), &bytes) || bytes > SIZE_MAX)
        return 0;
    float *q = c->be.ops->buf_alloc(&c->be, (size_t)bytes);
    if (!q) return 0;
    c->be.ops->buf_free(&c->be, *p);
    *p = q;
    return 1;
}

/* Makes every scratch buffer big enough for n_rows rows, n_tasks threads,
 * n_seqs slots, the cache's block size and rows attending over up to n_pos
 * positions. */
static di_status ctx_reserve(di_llama_ctx *c, int64_t n_rows, int64_t n_tasks, int64_t n_seqs,
                             int32_t block_size, int32_t n_pos, di_error *err) {
    const di_llama_hparams *hp = &c->m->hp;
    int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = (int64_t)hp->n_heads_kv * hp->head_dim;
    int64_t wide = q_dim > (int64_t)hp->n_embd ? q_dim : (int64_t)hp->n_embd;
    if (n_rows > c->cap_rows) {
        int64_t n = n_rows;
        if (!regrow_buf(c, &c->x, n * hp->n_embd) || !regrow_buf(c, &c->h, n * wide) ||
            !regrow_buf(c, &c->q, n * q_dim) || !regrow_buf(c, &c->kx, n * kv_dim) ||
            !regrow_buf(c, &c->vx, n * kv_dim) || !regrow_buf(c, &c->att, n * q_dim) ||
            !regrow_buf(c, &c->gate, n * hp->n_ff) || !regrow_buf(c, &c->up, n * hp->n_ff) ||
            !regrow_buf(c, &c->rope_cs, n * hp->n_rot) || !regrow_buf(c, &c->rope_cs_swa, n * hp->n_rot) ||
            !regrow(&c->row_blocks, n, sizeof(*c->row_blocks))) {
            c->cap_rows = 0; /* some buffers may be smaller now */
            return di_error_set(err, DI_ERR_NOMEM, "llama ctx: out of memory for %lld rows", (long long)n);
        }
        c->cap_rows = n;
    }
    if (n_tasks > c->cap_tasks) {
        c->cap_tasks = n_tasks;
        c->cap_attn_floats = 0; /* resize below for the new task count */
    }
    int64_t max_in = (int64_t)hp->n_ff > wide ? (int64_t)hp->n_ff : wide;
    const di_backend *be = &c->m->be;
    int64_t mm = be->ops->linear_scratch_floats(be, c->cap_rows, max_in, (int)c->cap_tasks);
    if (mm > c->cap_mm_floats) {
        if (!regrow_buf(c, &c->mm_scratch, mm)) {
            c->cap_mm_floats = 0;
            return di_error_set(err, DI_ERR_NOMEM, "llama ctx: out of memory for matmul scratch");
        }
        c->cap_mm_floats = mm;
    }
    /* n_pos grows with the context (the ggml attention scores whole rows) */
    int64_t attn = c->cap_tasks * be->ops->attention_scratch_floats(be, (int32_t)hp->n_heads, (int32_t)hp->n_heads_kv,
                                                                    (int32_t)hp->head_dim, block_size, n_pos);
    if (attn > c->cap_attn_floats) {
        if (!regrow_buf(c, &c->attn_scratch, attn))
            return di_error_set(err, DI_ERR_NOMEM, "llama ctx: out of memory for attention scratch");
        c->cap_attn_floats = attn;
    }
    if (n_seqs > c->cap_seqs) {
        if (!regrow(&c->seq_last, n_seqs, sizeof(int32_t)))
            return di_error_set(err, DI_ERR_NOMEM, "llama ctx: out of memory for %lld slots", (long long)n_seqs);
        c->cap_seqs = n_seqs;
    }
    return DI_OK;
}

/* ---- forward ----------------------------------------------------------- */

int32_t di_llama_batch_n_logits(const di_batch *b) {
    int32_t n = 0;
    if (!b || !b->want_logits || b->n_rows <= 0) return 0;
    for (int32_t i = 0; i < b->n_rows; i++) n += b->want_logits[i] != 0;
    return n;
}

/* Checks everything forward reads or writes through b; uses ctx->seq_last. */
static di_status validate_batch(di_llama_ctx *c, const di_llama_kv *kv, const di_batch *b, di_error *err) {
    const di_llama_hparams *hp = &c->m->hp;
    if (b->n_rows < 0 || b->n_rows > MAX_BATCH_ROWS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: n_rows %d not in [0, %d]", (int)b->n_rows,
                            MAX_BATCH_ROWS);
    if (b->n_rows == 0) return DI_OK;
    if (!b->token || !b->seq || !b->pos || !b->want_logits || !b->block_tables || !b->n_blocks)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: missing array");
    if (b->n_seq_slots < 1 || b->n_seq_slots > MAX_SEQ_SLOTS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: n_seq_slots %d not in [1, %d]",
                            (int)b->n_seq_slots, MAX_SEQ_SLOTS);
    if (b->block_size != kv->block_size)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: block_size %d but the cache has %d",
                            (int)b->block_size, (int)kv->block_size);
    for (int32_t s = 0; s < b->n_seq_slots; s++) c->seq_last[s] = -1;
    for (int32_t i = 0; i < b->n_rows; i++) {
        int32_t tok = b->token[i], s = b->seq[i], p = b->pos[i];
        if (tok < 0 || (uint32_t)tok >= hp->n_vocab)
            return di_error_set(err, DI_ERR_RANGE, "batch row %d: token %d not in [0, %d)", (int)i, (int)tok,
                                (int)hp->n_vocab);
        if (s < 0 || s >= b->n_seq_slots)
            return di_error_set(err, DI_ERR_RANGE, "batch row %d: seq %d not in [0, %d)", (int)i, (int)s,
                                (int)b->n_seq_slots);
        if (p < 0)
            return di_error_set(err, DI_ERR_RANGE, "batch row %d: negative position %d", (int)i, (int)p);
        if (p <= c->seq_last[s])
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "batch row %d: seq %d position %d after position %d (must increase)", (int)i,
                                (int)s, (int)p, (int)c->seq_last[s]);
        c->seq_last[s] = p;
    }
    /* The last position of each slot needs the most blocks; checking its
     * table prefix covers every row of that slot. */
    for (int32_t s = 0; s < b->n_seq_slots; s++) {
        if (c->seq_last[s] < 0) continue;
        int32_t need = c->seq_last[s] / b->block_size + 1;
        if (b->n_blocks[s] < need || !b->block_tables[s])
            return di_error_set(err, DI_ERR_RANGE, "batch seq %d: position %d needs %d blocks, table has %d",
                                (int)s, (int)c->seq_last[s], (int)need, (int)b->n_blocks[s]);
        for (int32_t j = 0; j < need; j++) {
            int32_t blk = b->block_tables[s][j];
            if (blk < 0 || blk >= kv->n_blocks)
                return di_error_set(err, DI_ERR_RANGE, "batch seq %d: block table entry %d = %d not in [0, %d)",
                                    (int)s, (int)j, (int)blk, (int)kv->n_blocks);
        }
    }
    return DI_OK;
}

static di_matmul_args mm_args(const llama_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                              int64_t n_rows) {
    return (di_matmul_args){w->dtype, w->data, w->row_bytes, x, ldx, y, ldy, n_rows, w->n_in, w->n_out, w->packed};
}

static void matmul(const di_llama_ctx *c, const llama_weight *w, const float *x, int64_t ldx, float *y,
                   int64_t ldy, int64_t n_rows, di_threadpool *pool) {
    const di_backend *be = &c->m->be;
    di_matmul_args a = mm_args(w, x, ldx, y, ldy, n_rows);
    be->ops->linear(be, &a, 1, c->mm_scratch, pool);
}

/* Everything between the matmuls and the attention is per row; the
 * backend runs each stage over the whole batch (the CPU: as row ranges on
 * the pool, one dispatch per stage, the fused steps touching a row once),
 * so a row's result depends on that row alone (batch invariance). */
di_status di_llama_forward(di_llama_ctx *c, di_llama_kv *kv, const di_batch *b, float *logits_out,
                           di_threadpool *pool, di_error *err) {
    if (!c || !kv || !b) return di_error_set(err, DI_ERR_INVALID_ARG, "forward: NULL argument");
    const di_llama_model *m = c->m;
    const di_llama_hparams *hp = &m->hp;
    const di_backend *be = &m->be;
    const di_backend_ops *op = be->ops;
    if ((uint32_t)kv->n_layer != hp->n_layers || (uint32_t)kv->row_elems != hp->n_heads_kv * hp->head_dim)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: kv cache was made for another model");
    if (b->n_rows <= 0) {
        if (b->n_rows < 0) return di_error_set(err, DI_ERR_INVALID_ARG, "batch: negative n_rows");
        return DI_OK;
    }
    /* Validation needs only the per-slot table; the row-sized buffers are
     * grown after it, so a hostile n_rows cannot trigger a huge allocation. */
    int32_t n_threads = di_threadpool_n_threads(pool);
    di_status s = ctx_reserve(c, 0, 0, b->n_seq_slots > 0 && b->n_seq_slots <= MAX_SEQ_SLOTS ? b->n_seq_slots : 1,
                              kv->block_size, 0, err);
    if (s != DI_OK) return s;
    if ((s = validate_batch(c, kv, b, err))) return s;
    int32_t n_pos = 0; /* positions the longest row attends over */
    for (int32_t i = 0; i < b->n_rows; i++) n_pos = b->pos[i] + 1 > n_pos ? b->pos[i] + 1 : n_pos;
    if ((s = ctx_reserve(c, b->n_rows, n_threads, 0, kv->block_size, n_pos, err))) return s;
    int32_t n_want = di_llama_batch_n_logits(b);
    if (n_want > 0 && !logits_out)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: %d rows want logits but logits_out is NULL",
                            (int)n_want);

    const int64_t n = b->n_rows, E = hp->n_embd, F = hp->n_ff;
    const int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = (int64_t)hp->n_heads_kv * hp->head_dim;
    const float eps = hp->rms_eps;
    for (int32_t i = 0; i < b->n_rows; i++) c->row_blocks[i] = b->block_tables[b->seq[i]];

    /* x = embed(tokens) (gemma3: * sqrt(n_embd)); h = rmsnorm(x); the rows'
     * RoPE angles, shared by every layer */
    const di_embed_norm_args en = {
        .emb = &m->tok_embd, .tokens = b->token, .pos = b->pos, .n_rows = n, .n_embd = E,
        .scale = m->gemma ? hp->embd_scale : 0.0f, .norm = m->layers[0].attn_norm, .eps = eps, .x = c->x, .h = c->h,
        .n_rot = (int32_t)hp->n_rot, .rope = {&m->rope, m->inv_freq_swa ? &m->rope_swa : NULL},
        .cs = {c->rope_cs, c->rope_cs_swa},
    };
    op->embed_norm(be, &en, pool);
    for (uint32_t il = 0; il < hp->n_layers; il++) {
        const llama_layer *L = &m->layers[il];
        /* attention block; h = rmsnorm(x) from the previous stage */
        /* q, k, v in one dispatch (the rows of h quantized once on the
         * int8 path); likewise gate and up below */
        const di_matmul_args qkv[3] = {mm_args(&L->wq, c->h, E, c->q, q_dim, n),
                                       mm_args(&L->wk, c->h, E, c->kx, kv_dim, n),
                                       mm_args(&L->wv, c->h, E, c->vx, kv_dim, n)};
        op->linear(be, qkv, 3, c->mm_scratch, pool);
        const di_rope_store_args rs = {
            .q = c->q, .k = c->kx, .v = c->vx, .pos = b->pos, .n_rows = n, .n_heads = (int32_t)hp->n_heads,
            .n_heads_kv = (int32_t)hp->n_heads_kv, .head_dim = (int32_t)hp->head_dim, .n_rot = (int32_t)hp->n_rot,
            .neox = m->rope_neox, .bq = L->bq, .bk = L->bk, .bv = L->bv, .q_norm = L->q_norm, .k_norm = L->k_norm,
            .eps = eps, .rope = L->local ? &m->rope_swa : &m->rope, .cs = L->local ? c->rope_cs_swa : c->rope_cs,
            .k_cache = kv->k[il], .v_cache = kv->v[il], .kv_dtype = kv->dtype, .block_size = kv->block_size,
            .row_blocks = c->row_blocks,
        };
        op->rope_store(be, &rs, pool);
        di_attn_args aa = {
            .q = c->q, .n_rows = b->n_rows, .n_heads = (int32_t)hp->n_heads, .n_kv_heads = (int32_t)hp->n_heads_kv,
            .head_dim = (int32_t)hp->head_dim, .scale = hp->attn_scale,
            .k_cache = kv->k[il], .v_cache = kv->v[il], .kv_f16 = kv->dtype == DI_DTYPE_F16,
            .block_size = kv->block_size, .row_blocks = c->row_blocks, .pos = b->pos, .out = c->att,
            .window = L->local ? (int32_t)hp->sliding_window : 0,
        };
        op->attention(be, &aa, n_pos, c->attn_scratch, pool);
        matmul(c, &L->wo, c->att, q_dim, c->h, E, n, pool);
        /* feed-forward block: x += h (gemma3: its post norm first); h = rmsnorm(x) */
        op->add_norm(be, c->x, c->h, m->gemma ? L->post_attn_norm : NULL, L->ffn_norm, n, E, eps, pool);
        if (L->moe) {
            if ((s = di_llama_moe_forward(&L->experts, be, c->h, E, n, c->h, E, &c->moe, pool, err))) return s;
        } else {
            const di_matmul_args gate_up[2] = {mm_args(&L->w_gate, c->h, E, c->gate, F, n),
                                               mm_args(&L->w_up, c->h, E, c->up, F, n)};
            op->linear(be, gate_up, 2, c->mm_scratch, pool);
            op->glu(be, m->gemma ? DI_GLU_GEGLU : DI_GLU_SWIGLU, c->gate, c->up, n, F, pool);
            matmul(c, &L->w_down, c->gate, F, c->h, E, n, pool);
        }
        /* x += h (gemma3: its post norm first), fused with the next layer's
         * attention norm (none after the last layer) */
        const float *next_norm = il + 1 < hp->n_layers ? m->layers[il + 1].attn_norm : NULL;
        op->add_norm(be, c->x, c->h, m->gemma ? L->post_ffw_norm : NULL, next_norm, n, E, eps, pool);
    }
    if (n_want == 0) return op->check(be, err);
    /* gather the rows that want logits, normalize, project */
    op->gather_norm(be, c->x, n, E, b->want_logits, m->output_norm, eps, c->h);
    matmul(c, &m->output, c->h, E, logits_out, (int64_t)hp->n_vocab, n_want, pool);
    /* logits = cap tanh(logits / cap) */
    if (hp->final_softcap > 0.0f) op->softcap(be, logits_out, n_want * (int64_t)hp->n_vocab, hp->final_softcap);
    return op->check(be, err);
}

/* Region i of the cache for block copies (model.h, di_model_kv_block_read):
 * K of layer i/2 when i is even, V when odd; *slot_bytes per position. */
bool di_llama_kv_region(di_llama_kv *kv, int32_t i, uint8_t **base, size_t *slot_bytes) {
    if (i < 0 || i >= 2 * kv->n_layer) return false;
    *base = (uint8_t *)(i % 2 ? kv->v[i / 2] : kv->k[i / 2]);
    *slot_bytes = (size_t)kv->row_elems * (kv->dtype == DI_DTYPE_F32 ? 4u : 2u);
    return true;
}
