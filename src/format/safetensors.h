/* safetensors reader: one file, or an HF checkpoint of several shards.
 *
 * File layout (huggingface/safetensors): 8-byte little-endian header length
 * N, N bytes of JSON, then the data section. The JSON is an object mapping
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} plus an
 * optional "__metadata__" string->string map. Offsets are relative to the
 * data section and the tensors must tile it exactly (no gaps, no overlap,
 * nothing left over), in any key order, as the reference implementation
 * requires.
 *
 * Everything is validated at open (see safetensors.c for the checklist);
 * afterwards accessors can trust what they return. Tensor data points into
 * the read-only mapping and is NOT necessarily aligned (the data section
 * starts at 8 + N); kernels that need alignment must check or copy.
 * Shapes are row-major as safetensors stores them: shape[n_dims - 1] is the
 * contiguous dimension (the reverse of ggml's ne[] order). */
#ifndef DI_FORMAT_SAFETENSORS_H
#define DI_FORMAT_SAFETENSORS_H

#include "base/status.h"
#include "tensor/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The format has no rank limit; real checkpoints stay at <= 5 dims. */
#define DI_SAFETENSORS_MAX_DIMS 8
/* A header beyond this is treated as hostile rather than parsed (the
 * reference implementation caps it at 100 MB as well). */
#define DI_SAFETENSORS_MAX_HEADER_BYTES (100u * 1000u * 1000u)
/* Index files name every tensor once; 64 MB is far beyond any real one. */
#define DI_SAFETENSORS_MAX_INDEX_BYTES (64u * 1024u * 1024u)

typedef struct di_safetensors_tensor {
    const char *name;                      /* owned by the handle; valid UTF-8, non-empty */
    di_dtype dtype;
    int32_t n_dims;                        /* 0 for a scalar */
    int64_t shape[DI_SAFETENSORS_MAX_DIMS]; /* row-major; unused entries are 0 */
    uint64_t n_elems;                      /* product of shape (1 for a scalar) */
    uint64_t n_bytes;                      /* n_elems * element size */
    uint64_t offset;                       /* begin, relative to the data section */
    const void *data;                      /* (n_bytes) into the mapping; may be unaligned */
    uint32_t shard;                        /* index of the shard file (0 for one file) */
} di_safetensors_tensor;

/* ---- one file ---------------------------------------------------------- */

typedef struct di_safetensors di_safetensors;

/* Maps and validates path. On success the caller owns *out
 * (di_safetensors_close). */
di_status di_safetensors_open(const char *path, di_safetensors **out, di_error *err);
/* Parses an in-memory image; data is not copied and must outlive the handle.
 * name is used in messages. Used by the fuzzer and tests. */
di_status di_safetensors_open_memory(const void *data, uint64_t size, const char *name,
                                     di_safetensors **out, di_error *err);
void di_safetensors_close(di_safetensors *st);

const char *di_safetensors_name(const di_safetensors *st); /* path or memory name */
/* Tensors in data-section order (ascending offset). */
uint64_t di_safetensors_tensor_count(const di_safetensors *st);
const di_safetensors_tensor *di_safetensors_tensor_at(const di_safetensors *st, uint64_t i);
/* NULL when absent. */
const di_safetensors_tensor *di_safetensors_find(const di_safetensors *st, const char *name);

/* __metadata__ entries, in key order. *key and *value stay valid while the
 * handle is open. */
uint64_t di_safetensors_metadata_count(const di_safetensors *st);
di_status di_safetensors_metadata_at(const di_safetensors *st, uint64_t i,
                                     const char **key, const char **value);
/* NULL when absent. */
const char *di_safetensors_metadata_get(const di_safetensors *st, const char *key);

/* ---- shard index (model.safetensors.index.json) ------------------------ */

/* A parsed index: which shard file holds each tensor. Only "weight_map" is
 * interpreted; "metadata" is checked to be an object when present. Shard
 * file names must be plain names in the same folder (no '/', '.' or '..'),
 * so a hostile index cannot point outside the checkpoint. */
typedef struct di_safetensors_index di_safetensors_index;

di_status di_safetensors_index_parse(const void *json, uint64_t size, const char *name,
                                     di_safetensors_index **out, di_error *err);
void di_safetensors_index_free(di_safetensors_index *idx);
/* Distinct shard file names, sorted by name. */
uint32_t di_safetensors_index_shard_count(const di_safetensors_index *idx);
const char *di_safetensors_index_shard_name(const di_safetensors_index *idx, uint32_t i);
/* Entries sorted by tensor name; *shard indexes the sorted shard names. */
uint64_t di_safetensors_index_entry_count(const di_safetensors_index *idx);
di_status di_safetensors_index_entry_at(const di_safetensors_index *idx, uint64_t i,
                                        const char **tensor, uint32_t *shard);

/* ---- a checkpoint: one lookup over all shards --------------------------- */

typedef struct di_safetensors_checkpoint di_safetensors_checkpoint;

/* path is one of:
 *  - a folder holding model.safetensors.index.json (sharded) or, failing
 *    that, a single model.safetensors;
 *  - an index .json file (shards are looked up next to it);
 *  - a single .safetensors file.
 * Every shard is mapped and validated, and the index must agree with the
 * shards exactly: each listed tensor is in the shard the index names, no
 * shard holds an unlisted tensor, and no tensor appears in two shards.
 * On success the caller owns *out (di_safetensors_checkpoint_close). */
di_status di_safetensors_checkpoint_open(const char *path, di_safetensors_checkpoint **out,
                                         di_error *err);
void di_safetensors_checkpoint_close(di_safetensors_checkpoint *ck);

uint32_t di_safetensors_checkpoint_shard_count(const di_safetensors_checkpoint *ck);
const di_safetensors *di_safetensors_checkpoint_shard(const di_safetensors_checkpoint *ck,
                                                      uint32_t i);
/* All tensors: shard by shard, each in data order. */
uint64_t di_safetensors_checkpoint_tensor_count(const di_safetensors_checkpoint *ck);
const di_safetensors_tensor *di_safetensors_checkpoint_tensor_at(
    const di_safetensors_checkpoint *ck, uint64_t i);
/* NULL when absent. */
const di_safetensors_tensor *di_safetensors_checkpoint_find(const di_safetensors_checkpoint *ck,
                                                            const char *name);

#endif
