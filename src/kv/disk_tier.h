/* Disk tier of the prefix cache: KV blocks that leave RAM are kept as record
 * files (kv/kv_record.h) in one directory, found again by the key of their
 * prefix, so they survive a restart and are shared by every engine of the
 * machine that uses the same directory and model.
 *
 * Files: DIR/<model id>-<key>.kvr, one record each. Writers write a temp
 * file in DIR and rename it into place, so a reader sees a whole record or
 * none; every read is checked (checksum, model, geometry, every prefix
 * token), and a record that fails is ignored and removed. The directory is
 * kept under max_bytes: when a write would pass it, the writer takes an
 * exclusive flock on DIR/.lock, lists the records and removes the least
 * recently used (mtime; a hit touches its file) down to 90% of the cap. A
 * write that fails (disk full, quota, file size limit) turns writing off for
 * this tier: the engine goes on with RAM only; reads continue.
 *
 * Ownership: di_kv_disk_open allocates, di_kv_disk_free releases (files
 * stay). Not thread-safe: one engine thread uses one tier; processes share
 * the directory safely. */
#ifndef DI_KV_DISK_TIER_H
#define DI_KV_DISK_TIER_H

#include "base/status.h"
#include "kv/kv_record.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct di_kv_disk di_kv_disk;

typedef struct di_kv_disk_stats {
    int64_t n_writes;        /* records written */
    int64_t n_write_errors;  /* failed writes (the first one disables writing) */
    int64_t n_hits;          /* records read and accepted */
    int64_t n_misses;        /* lookups with no file */
    int64_t n_rejected;      /* files refused: corrupt, truncated, foreign, other prefix */
    int64_t n_removed;       /* files removed to stay under the cap */
    uint64_t bytes_used;     /* record bytes in the directory at the last scan + writes since */
    uint64_t max_bytes;
    bool writes_disabled;
} di_kv_disk_stats;

/* Opens (creating if needed, mode 0700) the directory for records of
 * model_id whose blocks have block_size tokens and payload_bytes of KV.
 * max_bytes >= 1. */
di_status di_kv_disk_open(const char *dir, uint64_t max_bytes, di_kv_key model_id,
                          int32_t block_size, uint64_t payload_bytes, di_kv_disk **out,
                          di_error *err);
void di_kv_disk_free(di_kv_disk *d);

/* Whether a record file for this prefix exists (not validated). */
bool di_kv_disk_has(const di_kv_disk *d, const int32_t *prefix, int32_t n_prefix);

/* Stores the KV block that ends the prefix (n_prefix tokens, whole blocks).
 * A record already on disk is left alone. Errors are counted, never fatal:
 * DI_ERR_IO when the write failed (writing is then off). */
di_status di_kv_disk_put(di_kv_disk *d, const int32_t *prefix, int32_t n_prefix,
                         const void *payload, di_error *err);

/* Looks up the block ending the prefix: true and *payload (payload_bytes,
 * valid until the next call on d) when a record exists and passes every
 * check; false otherwise (a bad file is counted and removed). */
bool di_kv_disk_get(di_kv_disk *d, const int32_t *prefix, int32_t n_prefix, const uint8_t **payload);

void di_kv_disk_get_stats(const di_kv_disk *d, di_kv_disk_stats *out);

/* Path of the record file for a prefix (for tests that damage records);
 * returns snprintf's count. */
int di_kv_disk_record_path(const di_kv_disk *d, const int32_t *prefix, int32_t n_prefix, char *buf,
                           size_t cap);

#endif
