/* Prefix affinity for the router: what each engine probably holds in its
 * prefix cache, learned from the prompts the router sent it. A prompt's
 * text (chat messages rendered as role + content, or the completion
 * prompt) is cut into DI_AFF_CHUNK-byte chunks with a chained hash, so a
 * chunk's hash stands for the whole text up to it; each engine keeps a
 * bounded set of those hashes (cleared when full: a forgotten prefix only
 * costs a worse choice). The engine whose set holds the longest run of the
 * prompt's leading chunks has its prefix cached, as far as the router knows.
 *
 * Not thread-safe: the router holds its lock around these calls. */
#ifndef DI_ROUTER_AFFINITY_H
#define DI_ROUTER_AFFINITY_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

#define DI_AFF_CHUNK 64      /* bytes of text per chunk: ~16 tokens, one KV block */
#define DI_AFF_MAX_CHUNKS 4096

typedef struct di_aff_set di_aff_set;

di_status di_aff_set_create(uint32_t capacity, di_aff_set **out, di_error *err);
void di_aff_set_free(di_aff_set *s);

/* Chained hashes of the full chunks of text (n bytes): writes up to max to
 * out, returns how many. */
int32_t di_aff_chunks(const char *text, size_t n, uint64_t *out, int32_t max);
/* Leading chunks of the list present in the set. */
int32_t di_aff_match(const di_aff_set *s, const uint64_t *chunks, int32_t n);
/* Remembers the chunks (the engine now holds that prefix). */
void di_aff_insert(di_aff_set *s, const uint64_t *chunks, int32_t n);

#endif
