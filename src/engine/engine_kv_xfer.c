/* Prefill -> decode KV transfer (di_engine_export_kv / di_engine_import_kv):
 * the cached full blocks of a prompt as KV records (src/kv/kv_record.h),
 * and records from another engine cached block by block through
 * di_scheduler_import_block, both under the engine lock. Cached blocks are
 * never written by a forward, so neither races one. */
#include "engine/engine_internal.h"

#include "base/alloc.h"
#include "base/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The model id stamped on (and checked in) every record, and the one-block
 * scratch buffer: made at the first transfer. Lock held. */
static di_status ensure_kv_id(di_engine *e, di_error *err) {
    if (e->have_kv_id) return DI_OK;
    if (e->tier) {
        e->kv_id = di_engine_tier_model_id(e->tier);
    } else {
        char flavor[256];
        eng_kv_flavor(e, e->params.block_size, flavor, sizeof flavor);
        di_status s = di_kv_model_id(e->params.model_path, flavor, &e->kv_id, err);
        if (s) return s;
    }
    if (!e->xfer_block && !(e->xfer_block = malloc((size_t)di_model_kv_block_bytes(e->kv))))
        return di_error_set(err, DI_ERR_NOMEM, "kv transfer: out of memory");
    e->have_kv_id = true;
    return DI_OK;
}

di_status di_engine_export_kv(di_engine *e, const int32_t *tokens, size_t n_tokens, uint8_t **out,
                              size_t *n_out, int32_t *n_blocks, di_error *err) {
    *out = NULL;
    *n_out = 0;
    *n_blocks = 0;
    if (!e || (!tokens && n_tokens)) return di_error_set(err, DI_ERR_INVALID_ARG, "kv export: NULL argument");
    if (n_tokens > (size_t)e->n_ctx) n_tokens = (size_t)e->n_ctx;
    pthread_mutex_lock(&e->mu);
    di_status s = ensure_kv_id(e, err);
    int32_t bs = e->params.block_size, max_blocks = (int32_t)(n_tokens / (size_t)bs);
    int32_t *blocks = s ? NULL : di_malloc_array(max_blocks ? (size_t)max_blocks : 1, sizeof *blocks);
    if (!s && !blocks) s = di_error_set(err, DI_ERR_NOMEM, "kv export: out of memory");
    int32_t m = s ? 0 : di_scheduler_match_cached(e->sched, tokens, (int32_t)n_tokens, blocks, max_blocks);
    uint64_t pay = di_model_kv_block_bytes(e->kv);
    size_t total = 0;
    for (int32_t i = 0; i < m && !s; i++) {
        size_t r = di_kv_record_size((i + 1) * bs, pay);
        if (!r || total > SIZE_MAX - r) s = di_error_set(err, DI_ERR_RANGE, "kv export: too large");
        total += r;
    }
    uint8_t *buf = (!s && m) ? malloc(total) : NULL;
    if (!s && m && !buf) s = di_error_set(err, DI_ERR_NOMEM, "kv export: out of memory for %zu bytes", total);
    /* Cached blocks are never written by a forward, so reading them while
     * one runs (the lock is dropped during forwards) is safe. */
    size_t at = 0;
    for (int32_t i = 0; i < m && !s; i++) {
        s = di_model_kv_block_read(e->kv, blocks[i], e->xfer_block, err);
        if (s) break;
        di_kv_record_write(buf + at, e->kv_id, tokens, (i + 1) * bs, bs, e->xfer_block, pay);
        at += di_kv_record_size((i + 1) * bs, pay);
    }
    pthread_mutex_unlock(&e->mu);
    free(blocks);
    if (s) {
        free(buf);
        return s;
    }
    *out = buf;
    *n_out = at;
    *n_blocks = m;
    return DI_OK;
}

typedef struct import_fill {
    di_engine *e;
    const uint8_t *payload;
} import_fill;

static bool fill_block(void *user, int32_t block) {
    import_fill *f = user;
    return di_model_kv_block_write(f->e->kv, block, f->payload, NULL) == DI_OK;
}

di_status di_engine_import_kv(di_engine *e, const uint8_t *buf, size_t n, int32_t *n_imported,
                              int32_t *n_present, di_error *err) {
    *n_imported = *n_present = 0;
    if (!e || (!buf && n)) return di_error_set(err, DI_ERR_INVALID_ARG, "kv import: NULL argument");
    /* Records are parsed from an aligned copy: the view's tokens are int32. */
    uint8_t *copy = NULL;
    size_t copy_cap = 0;
    pthread_mutex_lock(&e->mu);
    di_status s = ensure_kv_id(e, err);
    uint64_t pay = di_model_kv_block_bytes(e->kv);
    size_t at = 0;
    for (int i = 0; !s && at < n; i++) {
        size_t len = di_kv_record_peek_size(buf + at, n - at);
        if (len == 0 || len > n - at) {
            s = di_error_set(err, DI_ERR_FORMAT, "kv import: record %d at byte %zu is malformed or truncated", i, at);
            break;
        }
        if (len > copy_cap) {
            uint8_t *nc = realloc(copy, len);
            if (!nc) { s = di_error_set(err, DI_ERR_NOMEM, "kv import: out of memory"); break; }
            copy = nc;
            copy_cap = len;
        }
        memcpy(copy, buf + at, len);
        di_kv_record_view v;
        s = di_kv_record_parse(copy, len, e->kv_id, e->params.block_size, pay, &v, err);
        if (s) {
            di_error_prefix(err, "kv import: record %d: ", i);
            break;
        }
        if (v.n_prefix_tokens > e->n_ctx) {
            s = di_error_set(err, DI_ERR_RANGE, "kv import: record %d: prefix of %d tokens exceeds the context %d",
                             i, (int)v.n_prefix_tokens, (int)e->n_ctx);
            break;
        }
        int32_t nv = di_tok_vocab_size(e->tok);
        for (int32_t k = 0; k < v.n_prefix_tokens && !s; k++)
            if (v.tokens[k] < 0 || v.tokens[k] >= nv)
                s = di_error_set(err, DI_ERR_FORMAT, "kv import: record %d: token %d outside the vocabulary", i,
                                 (int)v.tokens[k]);
        if (s) break;
        import_fill f = {e, v.payload};
        bool present = false;
        s = di_scheduler_import_block(e->sched, v.tokens, v.n_prefix_tokens, fill_block, &f, &present, err);
        if (s) {
            di_error_prefix(err, "record %d: ", i);
            break;
        }
        if (present) (*n_present)++;
        else (*n_imported)++;
        at += len;
    }
    pthread_mutex_unlock(&e->mu);
    free(copy);
    return s;
}
