/* The serialized form of one KV block, shared by the disk tier (kv/disk_tier.h)
 * and the prefill -> decode transfer (server /kv routes).
 *
 * A record holds the KV of the LAST block of a prefix: every token of the
 * prefix (so a reader compares them all: a hash collision can cost a miss,
 * never a wrong reuse), the block's KV bytes as the model stores them
 * (di_model_kv_block_read), and a header naming the model it belongs to:
 *
 *   offset  size  field
 *   0       8     magic "DIKVREC\0"
 *   8       4     version (DI_KV_RECORD_VERSION), host byte order
 *   12      4     header bytes (DI_KV_RECORD_HEADER_BYTES)
 *   16      16    model id (di_kv_model_id: file hash + numerics + KV dtype)
 *   32      16    key: di_kv_key of the prefix tokens
 *   48      4     n_prefix_tokens (a multiple of block_size, >= block_size)
 *   52      4     block_size
 *   56      8     payload bytes (the KV block)
 *   64      8     checksum of the whole record with this field zero
 *   72            int32 tokens[n_prefix_tokens], then the payload
 *
 * A reader trusts nothing: di_kv_record_parse checks every field against
 * what the caller expects and the checksum over every byte. */
#ifndef DI_KV_KV_RECORD_H
#define DI_KV_KV_RECORD_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

#define DI_KV_RECORD_VERSION 1u
#define DI_KV_RECORD_HEADER_BYTES 72u

/* 128 bits, as two words. */
typedef struct di_kv_key {
    uint64_t lo, hi;
} di_kv_key;

/* The key of the empty prefix. */
di_kv_key di_kv_key_root(void);
/* The key of a prefix extended by n tokens: a chain, so the keys of every
 * block boundary of a prompt cost one pass. Two independent 64-bit chains. */
di_kv_key di_kv_key_next(di_kv_key parent, const int32_t *tokens, int32_t n);
/* 64-bit hash of bytes, seeded (the record checksum; also model ids). */
uint64_t di_kv_hash_bytes(uint64_t seed, const void *data, size_t n);

/* What a record says, pointing into the parsed buffer. */
typedef struct di_kv_record_view {
    di_kv_key model_id, key;
    int32_t n_prefix_tokens, block_size;
    const int32_t *tokens;   /* (n_prefix_tokens) */
    const uint8_t *payload;  /* (payload_bytes) */
    uint64_t payload_bytes;
} di_kv_record_view;

/* Bytes of a record with n_prefix_tokens tokens and a payload of
 * payload_bytes; 0 on overflow. */
size_t di_kv_record_size(int32_t n_prefix_tokens, uint64_t payload_bytes);

/* Writes a record into out (di_kv_record_size bytes). The payload is copied
 * from payload (may alias out + header + tokens: memmove). */
void di_kv_record_write(uint8_t *out, di_kv_key model_id, const int32_t *tokens,
                        int32_t n_prefix_tokens, int32_t block_size, const void *payload,
                        uint64_t payload_bytes);

/* Validates the n bytes at buf as one record of model_id with the given
 * block_size and payload_bytes: DI_ERR_FORMAT for anything malformed,
 * truncated or failing the checksum, DI_ERR_UNSUPPORTED for another model,
 * version or geometry. On success *view points into buf (buf must be
 * 4-byte aligned and outlive the view). */
di_status di_kv_record_parse(const uint8_t *buf, size_t n, di_kv_key model_id, int32_t block_size,
                             uint64_t payload_bytes, di_kv_record_view *view, di_error *err);

/* The length of the record starting at buf (from its header), so a stream
 * of concatenated records can be split; 0 when fewer than a header's bytes
 * remain or the header is not a record's. Validates nothing else. */
size_t di_kv_record_peek_size(const uint8_t *buf, size_t n);

/* The identity of a model's KV: a hash of the model file (or of every file of
 * a checkpoint folder; files over 256 MiB are hashed by size plus 64 evenly
 * spaced 64 KiB samples) together with `flavor`, a string naming what else
 * changes the KV bits (kernels, numerics, KV dtype, block size). */
di_status di_kv_model_id(const char *path, const char *flavor, di_kv_key *out, di_error *err);

#endif
