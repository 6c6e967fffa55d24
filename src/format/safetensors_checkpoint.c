/* An HF checkpoint: one or more safetensors shards behind one lookup.
 *
 * The index (model.safetensors.index.json) and the shards must agree
 * exactly. A loader that trusted the index alone could bind a tensor to the
 * wrong shard's bytes, and one that trusted the shards alone could silently
 * pick one of two copies; so both directions are checked at open:
 *  - every shard the index names exists and is itself a valid file;
 *  - every tensor the index lists is in the shard it names;
 *  - no tensor is in two shards, and no shard holds an unlisted tensor. */
#include "format/safetensors.h"
#include "format/safetensors_internal.h"

#include "base/alloc.h"
#include "base/mapped_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_FILE "model.safetensors.index.json"
#define SINGLE_FILE "model.safetensors"

struct di_safetensors_checkpoint {
    di_safetensors **shards;         /* (n_shards) owned */
    uint32_t n_shards;
    di_safetensors_tensor *tensors;  /* (n_tensors) copies; names point into shards */
    uint64_t n_tensors;
    di_st_name_table table;
};

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* "<dir>/<name>" in a fresh allocation; NULL on no memory. */
static char *join_path(const char *dir, size_t dir_len, const char *name) {
    size_t n = strlen(name), total;
    if (__builtin_add_overflow(dir_len, n + 2, &total)) return NULL;
    char *p = malloc(total);
    if (!p) return NULL;
    memcpy(p, dir, dir_len);
    p[dir_len] = '/';
    memcpy(p + dir_len + 1, name, n + 1);
    return p;
}

/* Copies every shard's tensors into one array and indexes it by name,
 * rejecting a name that two shards both hold. */
static di_status merge_shards(di_safetensors_checkpoint *ck, const char *what, di_error *err) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < ck->n_shards; i++)
        if (di_add_overflow_u64(total, di_safetensors_tensor_count(ck->shards[i]), &total))
            return di_error_set(err, DI_ERR_FORMAT, "%s: too many tensors", what);
    if (total > SIZE_MAX / sizeof *ck->tensors)
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", what);
    ck->tensors = di_calloc(total ? (size_t)total : 1, sizeof *ck->tensors);
    if (!ck->tensors || di_st_table_init(&ck->table, total) != DI_OK)
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory for %llu tensors", what,
                            (unsigned long long)total);
    for (uint32_t s = 0; s < ck->n_shards; s++) {
        uint64_t n = di_safetensors_tensor_count(ck->shards[s]);
        for (uint64_t i = 0; i < n; i++) {
            di_safetensors_tensor *t = &ck->tensors[ck->n_tensors];
            *t = *di_safetensors_tensor_at(ck->shards[s], i);
            t->shard = s;
            uint64_t prev;
            if (!di_st_table_insert(&ck->table, ck->tensors, ck->n_tensors, &prev)) {
                char shown[96];
                return di_error_set(err, DI_ERR_FORMAT, "%s: tensor '%s' is in both %s and %s",
                                    what, di_st_short_name(shown, sizeof shown, t->name),
                                    di_safetensors_name(ck->shards[ck->tensors[prev].shard]),
                                    di_safetensors_name(ck->shards[s]));
            }
            ck->n_tensors++;
        }
    }
    return DI_OK;
}

/* The index and the shards name the same tensors in the same places. */
static di_status check_against_index(const di_safetensors_checkpoint *ck,
                                     const di_safetensors_index *idx, const char *index_path,
                                     di_error *err) {
    char shown[96];
    uint64_t n = di_safetensors_index_entry_count(idx);
    for (uint64_t i = 0; i < n; i++) {
        const char *name;
        uint32_t shard;
        di_safetensors_index_entry_at(idx, i, &name, &shard);
        const di_safetensors_tensor *t = di_safetensors_checkpoint_find(ck, name);
        if (!t)
            return di_error_set(err, DI_ERR_FORMAT,
                                "%s: weight_map lists tensor '%s' in %s, but that shard does "
                                "not hold it",
                                index_path, di_st_short_name(shown, sizeof shown, name),
                                di_safetensors_index_shard_name(idx, shard));
        if (t->shard != shard)
            return di_error_set(err, DI_ERR_FORMAT,
                                "%s: weight_map lists tensor '%s' in %s, but it is in %s",
                                index_path, di_st_short_name(shown, sizeof shown, name),
                                di_safetensors_index_shard_name(idx, shard),
                                di_safetensors_name(ck->shards[t->shard]));
    }
    if (ck->n_tensors == n) return DI_OK;
    /* Some shard holds a tensor the index does not list: name it. Entries
     * are sorted by name, so a binary search finds listed ones. */
    for (uint64_t i = 0; i < ck->n_tensors; i++) {
        uint64_t lo = 0, hi = n;
        bool found = false;
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            const char *name;
            uint32_t shard;
            di_safetensors_index_entry_at(idx, mid, &name, &shard);
            int c = strcmp(name, ck->tensors[i].name);
            if (c == 0) { found = true; break; }
            if (c < 0) lo = mid + 1; else hi = mid;
        }
        if (!found)
            return di_error_set(err, DI_ERR_FORMAT,
                                "%s: shard %s holds tensor '%s', which weight_map does not list",
                                index_path, di_safetensors_name(ck->shards[ck->tensors[i].shard]),
                                di_st_short_name(shown, sizeof shown, ck->tensors[i].name));
    }
    return di_error_set(err, DI_ERR_INTERNAL, "%s: tensor counts disagree", index_path);
}

static di_status open_indexed(di_safetensors_checkpoint *ck, const char *index_path,
                              di_error *err) {
    di_mapped_file f;
    di_status s = di_mapped_file_open(index_path, &f, err);
    if (s != DI_OK) return s;
    di_safetensors_index *idx = NULL;
    s = di_safetensors_index_parse(f.data, f.size, index_path, &idx, err);
    di_mapped_file_close(&f);
    if (s != DI_OK) return s;

    const char *slash = strrchr(index_path, '/');
    const char *dir = slash ? index_path : ".";
    size_t dir_len = slash ? (size_t)(slash - index_path) : 1;
    if (slash && dir_len == 0) dir_len = 1; /* index in "/" */
    uint32_t n = di_safetensors_index_shard_count(idx);
    ck->shards = di_calloc(n, sizeof *ck->shards);
    if (!ck->shards) {
        di_safetensors_index_free(idx);
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", index_path);
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *shard_name = di_safetensors_index_shard_name(idx, i);
        char *p = join_path(dir, dir_len, shard_name);
        if (!p) {
            s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", index_path);
            break;
        }
        if (!exists(p)) {
            s = di_error_set(err, DI_ERR_NOT_FOUND,
                             "%s: weight_map names shard '%s', but %s does not exist", index_path,
                             shard_name, p);
            free(p);
            break;
        }
        s = di_safetensors_open(p, &ck->shards[i], err);
        free(p);
        if (s != DI_OK) break;
        ck->n_shards++;
    }
    if (s == DI_OK) s = merge_shards(ck, index_path, err);
    if (s == DI_OK) s = check_against_index(ck, idx, index_path, err);
    di_safetensors_index_free(idx);
    return s;
}

static di_status open_single(di_safetensors_checkpoint *ck, const char *path, di_error *err) {
    ck->shards = di_calloc(1, sizeof *ck->shards);
    if (!ck->shards) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    di_status s = di_safetensors_open(path, &ck->shards[0], err);
    if (s != DI_OK) return s;
    ck->n_shards = 1;
    return merge_shards(ck, path, err);
}

di_status di_safetensors_checkpoint_open(const char *path, di_safetensors_checkpoint **out,
                                         di_error *err) {
    *out = NULL;
    di_safetensors_checkpoint *ck = di_calloc(1, sizeof *ck);
    if (!ck) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    di_status s;
    if (is_dir(path)) {
        char *index = join_path(path, strlen(path), INDEX_FILE);
        char *single = join_path(path, strlen(path), SINGLE_FILE);
        if (!index || !single)
            s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
        else if (exists(index))
            s = open_indexed(ck, index, err);
        else if (exists(single))
            s = open_single(ck, single, err);
        else
            s = di_error_set(err, DI_ERR_NOT_FOUND, "%s: no %s or %s in this folder", path,
                             INDEX_FILE, SINGLE_FILE);
        free(index);
        free(single);
    } else if (ends_with(path, ".json")) {
        s = open_indexed(ck, path, err);
    } else {
        s = open_single(ck, path, err);
    }
    if (s != DI_OK) {
        di_safetensors_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return DI_OK;
}

void di_safetensors_checkpoint_close(di_safetensors_checkpoint *ck) {
    if (!ck) return;
    for (uint32_t i = 0; i < ck->n_shards; i++) di_safetensors_close(ck->shards[i]);
    free(ck->shards);
    free(ck->tensors);
    di_st_table_free(&ck->table);
    free(ck);
}

uint32_t di_safetensors_checkpoint_shard_count(const di_safetensors_checkpoint *ck) {
    return ck->n_shards;
}

const di_safetensors *di_safetensors_checkpoint_shard(const di_safetensors_checkpoint *ck,
                                                      uint32_t i) {
    return i < ck->n_shards ? ck->shards[i] : NULL;
}

uint64_t di_safetensors_checkpoint_tensor_count(const di_safetensors_checkpoint *ck) {
    return ck->n_tensors;
}

const di_safetensors_tensor *di_safetensors_checkpoint_tensor_at(
    const di_safetensors_checkpoint *ck, uint64_t i) {
    return i < ck->n_tensors ? &ck->tensors[i] : NULL;
}

const di_safetensors_tensor *di_safetensors_checkpoint_find(const di_safetensors_checkpoint *ck,
                                                            const char *name) {
    uint64_t i = di_st_table_find(&ck->table, ck->tensors, name);
    return i == UINT64_MAX ? NULL : &ck->tensors[i];
}
