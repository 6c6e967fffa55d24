/* The engine's disk tier (contract in kv_tier.h). */
#include "engine/kv_tier.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

struct di_engine_tier {
    di_kv_disk *disk;
    di_model_kv *kv;          /* borrowed */
    di_kv_key model_id;
    uint64_t block_bytes;
    uint8_t *block;           /* (block_bytes) one block read from the pool */
};

di_status di_engine_tier_open(const char *dir, uint64_t max_bytes, const char *model_path,
                              const char *flavor, di_model_kv *kv, int32_t block_size,
                              di_engine_tier **out, di_error *err) {
    *out = NULL;
    di_engine_tier *t = di_calloc(1, sizeof *t);
    if (!t) return di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory");
    t->kv = kv;
    t->block_bytes = di_model_kv_block_bytes(kv);
    di_status s = di_kv_model_id(model_path, flavor, &t->model_id, err);
    if (!s) s = di_kv_disk_open(dir, max_bytes, t->model_id, block_size, t->block_bytes, &t->disk, err);
    if (!s && !(t->block = malloc((size_t)t->block_bytes)))
        s = di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory for a block of %llu bytes",
                         (unsigned long long)t->block_bytes);
    if (s) {
        di_engine_tier_free(t);
        return s;
    }
    *out = t;
    return DI_OK;
}

void di_engine_tier_free(di_engine_tier *t) {
    if (!t) return;
    di_kv_disk_free(t->disk);
    free(t->block);
    free(t);
}

/* A block leaves RAM: keep it unless the directory already has it (another
 * engine, or an earlier eviction of the same prefix). Failures only show in
 * the stats: the block is simply not kept. */
static void spill(void *user, int32_t block, const int32_t *prefix, int32_t n_prefix) {
    di_engine_tier *t = user;
    if (di_kv_disk_has(t->disk, prefix, n_prefix)) return;
    if (di_model_kv_block_read(t->kv, block, t->block, NULL)) return;
    (void)di_kv_disk_put(t->disk, prefix, n_prefix, t->block, NULL);
}

static bool fetch(void *user, int32_t block, const int32_t *prefix, int32_t n_prefix) {
    di_engine_tier *t = user;
    const uint8_t *payload;
    if (!di_kv_disk_get(t->disk, prefix, n_prefix, &payload)) return false;
    return di_model_kv_block_write(t->kv, block, payload, NULL) == DI_OK;
}

di_kv_tier di_engine_tier_hooks(di_engine_tier *t) {
    di_kv_tier h = {t, spill, fetch};
    return h;
}

void di_engine_tier_get_stats(const di_engine_tier *t, di_kv_disk_stats *out) { di_kv_disk_get_stats(t->disk, out); }
di_kv_key di_engine_tier_model_id(const di_engine_tier *t) { return t->model_id; }
