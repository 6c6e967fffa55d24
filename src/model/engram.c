/* Engram layout, n-gram ids, hash, gate and table rows (contracts in
 * engram.h). Each function follows one DeepInfer 0.1.0 / tile-kernels 2.1.0
 * function, cited above it; the numpy RNG the multipliers come from is in
 * engram_rng.c, the compressed vocabulary in engram_vocab.c. */
#include "model/engram.h"

#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- layout --------------------------------------------------------------- */

/* Deterministic Miller-Rabin: bases 2, 7, 61 decide every n < 4,759,123,141,
 * which covers the int32 primes tile-kernels can index. */
static uint64_t pow_mod(uint64_t b, uint64_t e, uint64_t m) {
    uint64_t r = 1;
    b %= m;
    for (; e; e >>= 1) {
        if (e & 1) r = r * b % m;
        b = b * b % m;
    }
    return r;
}

static bool is_prime_u32(uint64_t n) {
    if (n < 2) return false;
    static const uint64_t small[] = {2, 3, 5, 7, 11, 13, 61};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
        if (n % small[i] == 0) return n == small[i];
    uint64_t d = n - 1;
    int s = 0;
    while (!(d & 1)) d >>= 1, s++;
    static const uint64_t bases[] = {2, 7, 61};
    for (size_t i = 0; i < 3; i++) {
        uint64_t x = pow_mod(bases[i], d, n);
        if (x == 1 || x == n - 1) continue;
        int r = 1;
        for (; r < s; r++) {
            x = x * x % n;
            if (x == n - 1) break;
        }
        if (r == s) return false;
    }
    return true;
}

/* sympy.nextprime(n): the smallest prime > n (2 for n < 2). */
static int64_t next_prime(int64_t n) {
    if (n < 2) return 2;
    int64_t p = n + 1;
    while (!is_prime_u32((uint64_t)p)) p++;
    return p;
}

static bool seen_prime(const di_engram_layout *l, int32_t n_done, const di_engram_layer *cur, int32_t n_cur,
                       int64_t p) {
    for (int32_t i = 0; i < n_done; i++)
        for (int32_t c = 0; c < l->layers[i].n_cols; c++)
            if (l->layers[i].primes[c] == p) return true;
    for (int32_t c = 0; c < n_cur; c++)
        if (cur->primes[c] == p) return true;
    return false;
}

static di_status check_config(const di_engram_config *cfg, di_error *err) {
    if (!cfg->layer_ids || cfg->n_layers <= 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram layout: no engram_layer_ids");
    if (cfg->max_ngram < 2 || cfg->max_ngram > DI_ENGRAM_MAX_NGRAM)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "engram layout: engram_max_ngram_size %d not in [2, %d]",
                            cfg->max_ngram, DI_ENGRAM_MAX_NGRAM);
    if (cfg->n_heads <= 0 || cfg->n_heads > DI_ENGRAM_MAX_HEADS)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "engram layout: engram_n_heads %d not in [1, %d]",
                            cfg->n_heads, DI_ENGRAM_MAX_HEADS);
    if (cfg->compressed_vocab <= 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram layout: compressed vocab size %lld <= 0",
                            (long long)cfg->compressed_vocab);
    if (cfg->vocab_size > INT32_MAX)
        return di_error_set(err, DI_ERR_RANGE, "engram layout: engram_vocab_size %lld past int32",
                            (long long)cfg->vocab_size);
    for (int32_t i = 0; i < cfg->n_layers; i++) {
        int32_t id = cfg->layer_ids[i];
        if (id < 0) return di_error_set(err, DI_ERR_INVALID_ARG, "engram layout: layer id %d < 0", id);
        /* numpy takes any non-negative int seed; this port takes one uint64 */
        if ((uint64_t)id > (UINT64_MAX - cfg->seed) / DI_ENGRAM_LAYER_SEED_STRIDE)
            return di_error_set(err, DI_ERR_UNSUPPORTED, "engram layout: seed + 10007 * %d past 64 bits", id);
        for (int32_t j = 0; j < i; j++)
            if (cfg->layer_ids[j] == id)
                return di_error_set(err, DI_ERR_INVALID_ARG, "engram layout: layer id %d listed twice", id);
    }
    return DI_OK;
}

/* EngramLayout.from_cfg (primes, unique across all layers and heads, in
 * config order), NgramHashMapping (multipliers), make_offsets (offsets). */
di_status di_engram_layout_create(const di_engram_config *cfg, di_engram_layout *out, di_error *err) {
    if (!cfg || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "engram layout: NULL argument");
    memset(out, 0, sizeof *out);
    di_status st = check_config(cfg, err);
    if (st) return st;
    out->layers = calloc((size_t)cfg->n_layers, sizeof *out->layers);
    if (!out->layers) return di_error_set(err, DI_ERR_NOMEM, "engram layout: out of memory");
    int64_t bound = INT64_MAX / cfg->compressed_vocab / 2;
    if (bound < 1) bound = 1;
    for (int32_t i = 0; i < cfg->n_layers; i++) {
        di_engram_layer *L = &out->layers[i];
        L->layer_id = cfg->layer_ids[i];
        L->max_ngram = cfg->max_ngram;
        L->n_heads = cfg->n_heads;
        L->n_cols = (cfg->max_ngram - 1) * cfg->n_heads;
        L->compressed_vocab = cfg->compressed_vocab;

        di_engram_np_rng rng;
        di_engram_np_rng_seed(&rng, cfg->seed + DI_ENGRAM_LAYER_SEED_STRIDE * (uint64_t)L->layer_id);
        if ((st = di_engram_np_rng_integers(&rng, 0, bound, (size_t)L->max_ngram, L->multipliers, err)))
            goto fail;
        for (int32_t n = 0; n < L->max_ngram; n++) L->multipliers[n] = L->multipliers[n] * 2 + 1;

        int32_t c = 0;
        for (int32_t n = 0; n < L->max_ngram - 1; n++) {
            int64_t start = cfg->vocab_size - 1; /* every order's chain restarts here */
            for (int32_t h = 0; h < L->n_heads; h++, c++) {
                int64_t p = next_prime(start);
                while (seen_prime(out, i, L, c, p)) p = next_prime(p);
                L->primes[c] = p;
                L->offsets[c] = L->n_rows;
                L->n_rows += p;
                start = p;
                if (L->n_rows > INT32_MAX) {
                    st = di_error_set(err, DI_ERR_RANGE, "engram layout: layer %d has more than 2^31-1 table rows",
                                      L->layer_id);
                    goto fail;
                }
            }
        }
        out->n_layers = i + 1;
    }
    return DI_OK;
fail:
    di_engram_layout_free(out);
    return st;
}

void di_engram_layout_free(di_engram_layout *l) {
    if (!l) return;
    free(l->layers);
    memset(l, 0, sizeof *l);
}

const di_engram_layer *di_engram_layout_find(const di_engram_layout *l, int32_t layer_id) {
    for (int32_t i = 0; l && i < l->n_layers; i++)
        if (l->layers[i].layer_id == layer_id) return &l->layers[i];
    return NULL;
}

/* ---- n-gram ids and hash ------------------------------------------------------ */

/* csrc/engine/input_metadata/prepare_tensor_input_base.cpp:fill_engram_row,
 * less its tail of MTP draft tokens past the committed sequence. */
di_status di_engram_ngram_row(const int32_t *comp, int64_t n_comp, int64_t pos, int32_t max_ngram,
                              int32_t pad, int32_t *out, di_error *err) {
    if (!out || (!comp && n_comp)) return di_error_set(err, DI_ERR_INVALID_ARG, "engram ngram: NULL argument");
    if (pos < 0 || pos >= n_comp)
        return di_error_set(err, DI_ERR_RANGE, "engram ngram: position %lld outside [0, %lld)", (long long)pos,
                            (long long)n_comp);
    if (max_ngram < 1 || max_ngram > DI_ENGRAM_MAX_NGRAM)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram ngram: max_ngram %d", max_ngram);
    bool hit_image = false;
    for (int32_t r = 0; r < max_ngram; r++) {
        int64_t s = pos - r;
        int32_t v = hit_image || s < 0 ? pad : comp[s];
        if (v == DI_ENGRAM_IMAGE_SENTINEL) {
            hit_image = true;
            v = pad;
        }
        out[r] = v;
    }
    return DI_OK;
}

/* tile_kernels torch/engram.py:engram_hash_ref for one token of one layer. */
di_status di_engram_hash_row(const di_engram_layer *L, const int32_t *ngram_ids, int64_t *out, di_error *err) {
    if (!L || !ngram_ids || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "engram hash: NULL argument");
    for (int32_t n = 0; n < L->max_ngram; n++)
        if (ngram_ids[n] < 0 || ngram_ids[n] >= L->compressed_vocab)
            return di_error_set(err, DI_ERR_RANGE, "engram hash: id %d at lookback %d outside [0, %lld)",
                                ngram_ids[n], n, (long long)L->compressed_vocab);
    /* ids < V and multipliers < INT64_MAX / V: products and xors stay >= 0 */
    int64_t acc = ngram_ids[0] * L->multipliers[0];
    for (int32_t n = 1; n < L->max_ngram; n++) {
        acc ^= ngram_ids[n] * L->multipliers[n];
        for (int32_t h = 0; h < L->n_heads; h++) {
            int32_t c = (n - 1) * L->n_heads + h;
            out[c] = acc % L->primes[c] + L->offsets[c];
        }
    }
    return DI_OK;
}

/* ---- gate ---------------------------------------------------------------------- */

/* rsqrt(mean(a^2) + eps) in f32, the sum kept in double. */
static float rstd(const float *a, int32_t d, float eps) {
    double s = 0;
    for (int32_t c = 0; c < d; c++) s += (double)a[c] * a[c];
    return 1.0f / sqrtf((float)(s / d) + eps);
}

/* tile_kernels torch/engram.py:engram_gate_ref for one token (no image mask:
 * an image token is left unchanged there, so the caller skips the call). */
di_status di_engram_gate(const float *x, const float *k, const float *v, const float *wh, const float *we,
                         int32_t hc, int32_t d, float eps, bool round_bf16, float *out, float *gate,
                         di_error *err) {
    if (!x || !k || !v || !wh || !we || !out)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram gate: NULL argument");
    if (hc <= 0 || d <= 0) return di_error_set(err, DI_ERR_INVALID_ARG, "engram gate: hc %d, d %d", hc, d);
    const float scalar = (float)(1.0 / sqrt((double)d)); /* hidden_size ** -0.5 */
    for (int32_t j = 0; j < hc; j++) {
        const float *xj = x + (size_t)j * d, *kj = k + (size_t)j * d;
        const float *whj = wh + (size_t)j * d, *wej = we + (size_t)j * d;
        float rx = rstd(xj, d, eps), rk = rstd(kj, d, eps);
        double raw = 0; /* sum(x * wh * k * we): einsum of the two f32 products */
        for (int32_t c = 0; c < d; c++) raw += (double)(xj[c] * whj[c]) * (double)(kj[c] * wej[c]);
        float dot = (float)raw * rx * rk * scalar;
        float mag = sqrtf(fmaxf(fabsf(dot), DI_ENGRAM_GATE_CLAMP));
        float sgn = dot > 0 ? 1.0f : dot < 0 ? -1.0f : 0.0f; /* torch.sign: 0 stays 0 */
        float g = 1.0f / (1.0f + expf(-(mag * sgn)));
        if (gate) gate[j] = g;
        float *oj = out + (size_t)j * d;
        for (int32_t c = 0; c < d; c++) {
            float y = xj[c] + g * v[c];
            oj[c] = round_bf16 ? di_bf16_to_f32(di_f32_to_bf16(y)) : y;
        }
    }
    return DI_OK;
}

/* ---- table rows ------------------------------------------------------------------- */

di_status di_engram_gather_rows(const uint8_t *table, const uint8_t *scales, int64_t n_rows, int32_t head_dim,
                                const int64_t *idx, int32_t n_idx, float *out, di_error *err) {
    if (!table || !scales || (!idx && n_idx) || (!out && n_idx))
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram rows: NULL argument");
    if (head_dim <= 0 || head_dim % DI_ENGRAM_SCALE_BLOCK || n_idx < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engram rows: head_dim %d not a positive multiple of %d",
                            head_dim, DI_ENGRAM_SCALE_BLOCK);
    for (int32_t i = 0; i < n_idx; i++)
        if (idx[i] < 0 || idx[i] >= n_rows)
            return di_error_set(err, DI_ERR_RANGE, "engram rows: index %lld (entry %d) outside the table's %lld rows",
                                (long long)idx[i], i, (long long)n_rows);
    const int32_t n_blocks = head_dim / DI_ENGRAM_SCALE_BLOCK;
    for (int32_t i = 0; i < n_idx; i++) {
        const uint8_t *row = table + (size_t)idx[i] * (size_t)head_dim;
        const uint8_t *sc = scales + (size_t)idx[i] * (size_t)n_blocks;
        float *o = out + (size_t)i * (size_t)head_dim;
        for (int32_t b = 0; b < n_blocks; b++) {
            float s = di_e8m0_to_f32(sc[b]);
            for (int32_t c = b * DI_ENGRAM_SCALE_BLOCK; c < (b + 1) * DI_ENGRAM_SCALE_BLOCK; c++)
                o[c] = di_e4m3_to_f32(row[c]) * s;
        }
    }
    return DI_OK;
}
