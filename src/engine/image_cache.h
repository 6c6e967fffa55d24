/* Encoded images: the vision tower's output rows (and the placeholder ids
 * they stand for) of images already seen, so a repeated image is not
 * re-encoded even when the prefix cache misses (another system prompt,
 * the image in a later turn, an evicted prefix).
 *
 *   c = di_image_cache_create(max_bytes)
 *   di_image_cache_get(c, cfg, bytes, n, &ids, &rows, &n_tokens)   copies on a hit
 *   di_image_cache_put(c, cfg, bytes, n, ids, rows, n_tokens, row_floats)
 *
 * An entry is keyed by the image's bytes (compared in full on a hit, so a
 * hash collision can never hand back another image's rows) and cfg, a
 * fingerprint of the preprocessing settings that shaped the rows. Entries
 * cost their bytes + ids + rows; the least recently used go first when
 * max_bytes would be passed, and one larger than max_bytes is not kept.
 * Thread-safe (its own lock). */
#ifndef DI_ENGINE_IMAGE_CACHE_H
#define DI_ENGINE_IMAGE_CACHE_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct di_image_cache di_image_cache;

typedef struct di_image_cache_stats {
    int64_t hits, misses, evictions;
    int64_t entries;
    uint64_t bytes;
} di_image_cache_stats;

di_status di_image_cache_create(uint64_t max_bytes, di_image_cache **out, di_error *err);
void di_image_cache_free(di_image_cache *c);
/* true on a hit: *ids (n_tokens) and *rows (n_tokens * row_floats) are new
 * copies the caller frees; false (a miss) leaves them NULL. A failed copy
 * counts as a miss. */
bool di_image_cache_get(di_image_cache *c, uint64_t cfg, const uint8_t *bytes, size_t n_bytes, int32_t **ids,
                        float **rows, int32_t *n_tokens);
/* Keeps copies of one encoded image (no-op when it does not fit or memory
 * runs out: a cache may forget). */
void di_image_cache_put(di_image_cache *c, uint64_t cfg, const uint8_t *bytes, size_t n_bytes, const int32_t *ids,
                        const float *rows, int32_t n_tokens, int64_t row_floats);
void di_image_cache_get_stats(di_image_cache *c, di_image_cache_stats *out);

#endif
