/* safetensors single-file reader and shard-index parser.
 *
 * Checklist, all enforced before a handle is returned:
 *  - at least 8 bytes; header length <= DI_SAFETENSORS_MAX_HEADER_BYTES and
 *    inside the file; header non-empty and starting with '{';
 *  - header is JSON (jansson, duplicate keys rejected) and an object;
 *  - "__metadata__", when present, is an object of string values;
 *  - every other key is a non-empty, valid UTF-8 tensor name whose value is
 *    an object with exactly "dtype" (known string), "shape" (array of at
 *    most DI_SAFETENSORS_MAX_DIMS non-negative integers whose product and
 *    byte size fit in 64 bits) and "data_offsets" ([begin, end] integers,
 *    begin <= end <= data size, end - begin == bytes implied by the shape);
 *  - sorted by offset, the tensors tile the data section exactly: the first
 *    starts at 0, each starts where the previous ended, the last ends at the
 *    end of the file. Key order in the JSON is free, as in the reference
 *    implementation; gaps, overlaps and trailing bytes are not. */
#include "format/safetensors.h"
#include "format/safetensors_internal.h"

#include "base/alloc.h"
#include "base/mapped_file.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct di_safetensors {
    char *name;                      /* owned: path or memory name */
    di_mapped_file file;             /* zeroed for memory images */
    const uint8_t *base;             /* (size) whole image */
    uint64_t size;
    uint64_t data_size;              /* bytes after the header */
    di_safetensors_tensor *tensors;  /* (n_tensors) sorted by offset; names owned */
    uint64_t n_tensors;
    di_st_name_table table;
    char **meta_keys;                /* (n_meta) sorted; owned */
    char **meta_values;              /* (n_meta) owned */
    uint64_t n_meta;
};

/* ---- shared helpers ---------------------------------------------------- */

/* FNV-1a: simple, and good enough for tensor names (not attacker-facing in
 * a way that matters: a hostile file can only slow its own load). */
static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

di_status di_st_table_init(di_st_name_table *t, uint64_t n) {
    t->slots = NULL;
    t->cap = 16;
    while (t->cap < 2 * n) {
        if (t->cap > (UINT64_MAX >> 2)) return DI_ERR_NOMEM;
        t->cap <<= 1;
    }
    if (t->cap > SIZE_MAX / sizeof(uint64_t)) return DI_ERR_NOMEM;
    t->slots = di_calloc((size_t)t->cap, sizeof(uint64_t));
    return t->slots ? DI_OK : DI_ERR_NOMEM;
}

void di_st_table_free(di_st_name_table *t) {
    free(t->slots);
    t->slots = NULL;
    t->cap = 0;
}

bool di_st_table_insert(di_st_name_table *t, const di_safetensors_tensor *items, uint64_t i,
                        uint64_t *existing) {
    uint64_t mask = t->cap - 1;
    for (uint64_t h = hash_name(items[i].name) & mask;; h = (h + 1) & mask) {
        if (t->slots[h] == 0) {
            t->slots[h] = i + 1;
            return true;
        }
        if (strcmp(items[t->slots[h] - 1].name, items[i].name) == 0) {
            *existing = t->slots[h] - 1;
            return false;
        }
    }
}

uint64_t di_st_table_find(const di_st_name_table *t, const di_safetensors_tensor *items,
                          const char *name) {
    if (!t->slots) return UINT64_MAX;
    uint64_t mask = t->cap - 1;
    for (uint64_t h = hash_name(name) & mask; t->slots[h] != 0; h = (h + 1) & mask)
        if (strcmp(items[t->slots[h] - 1].name, name) == 0) return t->slots[h] - 1;
    return UINT64_MAX;
}

/* Names in messages are cut at 80 bytes on a UTF-8 boundary and control
 * characters replaced, so a hostile name cannot flood or garble a log. */
const char *di_st_short_name(char *buf, size_t size, const char *name) {
    enum { MAX_SHOWN = 80 };
    size_t n = strlen(name), limit = size - 4;
    if (limit > MAX_SHOWN) limit = MAX_SHOWN;
    bool cut = n > limit;
    if (cut) {
        n = limit;
        while (n > 0 && ((uint8_t)name[n] & 0xC0) == 0x80) n--;
    }
    for (size_t i = 0; i < n; i++) buf[i] = ((uint8_t)name[i] < 0x20) ? '?' : name[i];
    if (cut) memcpy(buf + n, "...", 3), n += 3;
    buf[n] = '\0';
    return buf;
}

/* Strict UTF-8: rejects overlong forms, surrogates and code points past
 * U+10FFFF. jansson already validates its input; this guards names that
 * reach us through any other path and documents the requirement. */
static bool utf8_valid(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
        else return false;
        if (n - i < len) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

/* A non-negative JSON integer; *out unchanged otherwise. */
static bool json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* ---- tensor entries ---------------------------------------------------- */

typedef struct parse_ctx {
    const char *file;   /* for messages */
    uint64_t data_size; /* bytes in the data section */
    di_error *err;
} parse_ctx;

static di_status tensor_error(const parse_ctx *ctx, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static di_status tensor_error(const parse_ctx *ctx, const char *key, const char *fmt, ...) {
    char what[384], shown[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return di_error_set(ctx->err, DI_ERR_FORMAT, "%s: tensor '%s': %s", ctx->file,
                        di_st_short_name(shown, sizeof shown, key), what);
}

static di_status parse_shape(const parse_ctx *ctx, const char *key, const json_t *shape,
                             di_safetensors_tensor *t) {
    if (!json_is_array(shape))
        return tensor_error(ctx, key, "shape: expected an array, got %s", json_kind(shape));
    size_t n = json_array_size(shape);
    if (n > DI_SAFETENSORS_MAX_DIMS)
        return tensor_error(ctx, key, "shape: %zu dimensions, at most %d supported", n,
                            DI_SAFETENSORS_MAX_DIMS);
    uint64_t elems = 1;
    for (size_t d = 0; d < n; d++) {
        const json_t *v = json_array_get(shape, d);
        uint64_t dim;
        if (!json_u64(v, &dim)) {
            if (json_is_integer(v))
                return tensor_error(ctx, key, "shape[%zu]: negative dimension %lld", d,
                                    (long long)json_integer_value(v));
            return tensor_error(ctx, key, "shape[%zu]: expected an integer, got %s", d,
                                json_kind(v));
        }
        if (di_mul_overflow_u64(elems, dim, &elems))
            return tensor_error(ctx, key, "shape: element count overflows 64 bits at shape[%zu]",
                                d);
        t->shape[d] = (int64_t)dim;
    }
    t->n_dims = (int32_t)n;
    t->n_elems = elems;
    const di_dtype_traits *tr = di_dtype_traits_of(t->dtype);
    /* Every dtype safetensors names is one element per block; a table that
     * said otherwise would be a bug in src/tensor, not in the file. */
    if (!tr || tr->block_size != 1)
        return di_error_set(ctx->err, DI_ERR_INTERNAL, "%s: dtype %d is not a plain type",
                            ctx->file, (int)t->dtype);
    if (di_mul_overflow_u64(elems, (uint64_t)tr->block_bytes, &t->n_bytes))
        return tensor_error(ctx, key, "shape: byte size (%llu elements x %d bytes) overflows 64 bits",
                            (unsigned long long)elems, tr->block_bytes);
    return DI_OK;
}

static di_status parse_offsets(const parse_ctx *ctx, const char *key, const json_t *offs,
                               di_safetensors_tensor *t) {
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return tensor_error(ctx, key, "data_offsets: expected [begin, end], got %s%s",
                            json_is_array(offs) ? "an array of length " : json_kind(offs),
                            json_is_array(offs) ? (json_array_size(offs) < 2 ? "< 2" : "> 2") : "");
    uint64_t begin, end;
    for (int k = 0; k < 2; k++) {
        const json_t *v = json_array_get(offs, (size_t)k);
        if (!json_u64(v, k == 0 ? &begin : &end)) {
            if (json_is_integer(v))
                return tensor_error(ctx, key, "data_offsets[%d]: negative offset %lld", k,
                                    (long long)json_integer_value(v));
            return tensor_error(ctx, key, "data_offsets[%d]: expected an integer, got %s", k,
                                json_kind(v));
        }
    }
    if (begin > end)
        return tensor_error(ctx, key, "data_offsets: begin %llu is after end %llu",
                            (unsigned long long)begin, (unsigned long long)end);
    if (end > ctx->data_size)
        return tensor_error(ctx, key, "data_offsets: end %llu is past the data section (%llu bytes)",
                            (unsigned long long)end, (unsigned long long)ctx->data_size);
    if (end - begin != t->n_bytes)
        return tensor_error(ctx, key,
                            "data_offsets: span of %llu bytes does not match shape x dtype "
                            "(%llu bytes)",
                            (unsigned long long)(end - begin), (unsigned long long)t->n_bytes);
    t->offset = begin;
    return DI_OK;
}

static di_status parse_tensor(const parse_ctx *ctx, const char *key, const json_t *entry,
                              di_safetensors_tensor *t) {
    size_t klen = strlen(key);
    if (klen == 0)
        return di_error_set(ctx->err, DI_ERR_FORMAT, "%s: a tensor has an empty name", ctx->file);
    if (!utf8_valid(key, klen))
        return di_error_set(ctx->err, DI_ERR_FORMAT, "%s: a tensor name is not valid UTF-8",
                            ctx->file);
    if (!json_is_object(entry))
        return tensor_error(ctx, key, "expected an object, got %s", json_kind(entry));
    const char *field;
    const json_t *v;
    json_object_foreach((json_t *)entry, field, v) {
        if (strcmp(field, "dtype") != 0 && strcmp(field, "shape") != 0 &&
            strcmp(field, "data_offsets") != 0) {
            char shown[96];
            return tensor_error(ctx, key, "unexpected field '%s'",
                                di_st_short_name(shown, sizeof shown, field));
        }
    }
    const json_t *dtype = json_object_get(entry, "dtype");
    const json_t *shape = json_object_get(entry, "shape");
    const json_t *offs = json_object_get(entry, "data_offsets");
    if (!dtype) return tensor_error(ctx, key, "missing field 'dtype'");
    if (!shape) return tensor_error(ctx, key, "missing field 'shape'");
    if (!offs) return tensor_error(ctx, key, "missing field 'data_offsets'");
    if (!json_is_string(dtype))
        return tensor_error(ctx, key, "dtype: expected a string, got %s", json_kind(dtype));
    if (di_dtype_from_safetensors(json_string_value(dtype), &t->dtype) != DI_OK) {
        char shown[96];
        return tensor_error(ctx, key, "dtype: unknown or unsupported dtype '%s'",
                            di_st_short_name(shown, sizeof shown, json_string_value(dtype)));
    }
    di_status s = parse_shape(ctx, key, shape, t);
    if (s != DI_OK) return s;
    return parse_offsets(ctx, key, offs, t);
}

static di_status parse_metadata(const parse_ctx *ctx, const json_t *meta, di_safetensors *st) {
    if (!json_is_object(meta))
        return di_error_set(ctx->err, DI_ERR_FORMAT, "%s: __metadata__: expected an object, got %s",
                            ctx->file, json_kind(meta));
    size_t n = json_object_size(meta);
    st->meta_keys = di_calloc(n ? n : 1, sizeof(char *));
    st->meta_values = di_calloc(n ? n : 1, sizeof(char *));
    if (!st->meta_keys || !st->meta_values)
        return di_error_set(ctx->err, DI_ERR_NOMEM, "%s: out of memory", ctx->file);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)meta, k, v) {
        char shown[96];
        if (!json_is_string(v))
            return di_error_set(ctx->err, DI_ERR_FORMAT,
                                "%s: __metadata__.%s: expected a string, got %s", ctx->file,
                                di_st_short_name(shown, sizeof shown, k), json_kind(v));
        char *kc = di_strdup(k), *vc = di_strdup(json_string_value(v));
        if (!kc || !vc) {
            free(kc);
            free(vc);
            return di_error_set(ctx->err, DI_ERR_NOMEM, "%s: out of memory", ctx->file);
        }
        st->meta_keys[st->n_meta] = kc;
        st->meta_values[st->n_meta] = vc;
        st->n_meta++;
    }
    /* Sort (key, value) pairs by key: insertion sort is fine for the handful
     * of entries real files carry, and quadratic only in a file's own size. */
    for (uint64_t i = 1; i < st->n_meta; i++) {
        char *kk = st->meta_keys[i], *vv = st->meta_values[i];
        uint64_t j = i;
        for (; j > 0 && strcmp(st->meta_keys[j - 1], kk) > 0; j--) {
            st->meta_keys[j] = st->meta_keys[j - 1];
            st->meta_values[j] = st->meta_values[j - 1];
        }
        st->meta_keys[j] = kk;
        st->meta_values[j] = vv;
    }
    return DI_OK;
}

/* Data order; zero-byte tensors sort before a non-empty one at the same
 * offset, and names break the remaining ties so the order is total. */
static int cmp_offset(const void *a, const void *b) {
    const di_safetensors_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->n_bytes != y->n_bytes) return x->n_bytes < y->n_bytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static di_status check_tiling(const parse_ctx *ctx, const di_safetensors *st) {
    uint64_t expected = 0;
    char a[96], b[96];
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        const di_safetensors_tensor *t = &st->tensors[i];
        if (t->offset < expected)
            return di_error_set(ctx->err, DI_ERR_FORMAT,
                                "%s: tensor '%s' at data_offsets [%llu, %llu) overlaps tensor "
                                "'%s', which ends at %llu",
                                ctx->file, di_st_short_name(a, sizeof a, t->name),
                                (unsigned long long)t->offset,
                                (unsigned long long)(t->offset + t->n_bytes),
                                di_st_short_name(b, sizeof b, st->tensors[i - 1].name),
                                (unsigned long long)expected);
        if (t->offset > expected)
            return di_error_set(ctx->err, DI_ERR_FORMAT,
                                "%s: data section bytes [%llu, %llu) belong to no tensor (gap "
                                "before tensor '%s')",
                                ctx->file, (unsigned long long)expected,
                                (unsigned long long)t->offset,
                                di_st_short_name(a, sizeof a, t->name));
        expected = t->offset + t->n_bytes;
    }
    if (expected != ctx->data_size)
        return di_error_set(ctx->err, DI_ERR_FORMAT,
                            "%s: data section bytes [%llu, %llu) belong to no tensor (trailing "
                            "bytes)",
                            ctx->file, (unsigned long long)expected,
                            (unsigned long long)ctx->data_size);
    return DI_OK;
}

static di_status parse_header(di_safetensors *st, di_error *err) {
    const char *file = st->name;
    if (st->size < 8)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: %llu bytes, too short for the 8-byte header length", file,
                            (unsigned long long)st->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | st->base[i];
    if (hlen > DI_SAFETENSORS_MAX_HEADER_BYTES)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: header length %llu exceeds the limit of %u bytes", file,
                            (unsigned long long)hlen, DI_SAFETENSORS_MAX_HEADER_BYTES);
    if (hlen > st->size - 8)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: header length %llu runs past the end of the file (%llu bytes "
                            "follow the length field)",
                            file, (unsigned long long)hlen, (unsigned long long)(st->size - 8));
    if (hlen == 0) return di_error_set(err, DI_ERR_FORMAT, "%s: header length is 0", file);
    const char *header = (const char *)st->base + 8;
    if (header[0] != '{')
        return di_error_set(err, DI_ERR_FORMAT, "%s: header does not start with '{'", file);
    st->data_size = st->size - 8 - hlen;

    json_error_t jerr;
    json_t *root = json_loadb(header, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: header is not valid JSON: %s (line %d, column %d)", file,
                            jerr.text, jerr.line, jerr.column);
    di_status s = DI_OK;
    parse_ctx ctx = {file, st->data_size, err};
    if (!json_is_object(root)) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: header: expected a JSON object, got %s", file,
                         json_kind(root));
        goto done;
    }
    const json_t *meta = json_object_get(root, "__metadata__");
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    st->tensors = di_calloc(n ? n : 1, sizeof *st->tensors);
    if (!st->tensors) {
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory for %zu tensors", file, n);
        goto done;
    }
    if (meta && (s = parse_metadata(&ctx, meta, st)) != DI_OK) goto done;
    const char *key;
    const json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        di_safetensors_tensor *t = &st->tensors[st->n_tensors];
        if ((s = parse_tensor(&ctx, key, v, t)) != DI_OK) goto done;
        if (!(t->name = di_strdup(key))) {
            s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
            goto done;
        }
        st->n_tensors++;
    }
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_offset);
    if ((s = check_tiling(&ctx, st)) != DI_OK) goto done;

    const uint8_t *data = st->base + 8 + hlen;
    for (uint64_t i = 0; i < st->n_tensors; i++) st->tensors[i].data = data + st->tensors[i].offset;
    if (di_st_table_init(&st->table, st->n_tensors) != DI_OK) {
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        uint64_t prev;
        /* JSON_REJECT_DUPLICATES makes this impossible; keep the check so a
         * jansson change cannot silently shadow a tensor. */
        if (!di_st_table_insert(&st->table, st->tensors, i, &prev)) {
            s = di_error_set(err, DI_ERR_FORMAT, "%s: duplicate tensor name", file);
            goto done;
        }
    }
done:
    json_decref(root);
    return s;
}

static di_status open_image(const uint8_t *data, uint64_t size, const char *name,
                            di_mapped_file *file, di_safetensors **out, di_error *err) {
    *out = NULL;
    di_safetensors *st = di_calloc(1, sizeof *st);
    char *nm = di_strdup(name ? name : "<memory>");
    if (!st || !nm) {
        free(st);
        free(nm);
        if (file) di_mapped_file_close(file);
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", name ? name : "<memory>");
    }
    st->name = nm;
    if (file) st->file = *file;
    st->base = data;
    st->size = size;
    di_status s = parse_header(st, err);
    if (s != DI_OK) {
        di_safetensors_close(st);
        return s;
    }
    *out = st;
    return DI_OK;
}

di_status di_safetensors_open(const char *path, di_safetensors **out, di_error *err) {
    *out = NULL;
    di_mapped_file f;
    di_status s = di_mapped_file_open(path, &f, err);
    if (s != DI_OK) return s;
    return open_image(f.data, f.size, path, &f, out, err);
}

di_status di_safetensors_open_memory(const void *data, uint64_t size, const char *name,
                                     di_safetensors **out, di_error *err) {
    if (!out) return di_error_set(err, DI_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    if (!data && size > 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "%s: NULL data of %llu bytes",
                            name ? name : "<memory>", (unsigned long long)size);
    return open_image(data, size, name, NULL, out, err);
}

void di_safetensors_close(di_safetensors *st) {
    if (!st) return;
    for (uint64_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    for (uint64_t i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    di_st_table_free(&st->table);
    di_mapped_file_close(&st->file);
    free(st->name);
    free(st);
}

const char *di_safetensors_name(const di_safetensors *st) { return st->name; }
uint64_t di_safetensors_tensor_count(const di_safetensors *st) { return st->n_tensors; }

const di_safetensors_tensor *di_safetensors_tensor_at(const di_safetensors *st, uint64_t i) {
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}

const di_safetensors_tensor *di_safetensors_find(const di_safetensors *st, const char *name) {
    uint64_t i = di_st_table_find(&st->table, st->tensors, name);
    return i == UINT64_MAX ? NULL : &st->tensors[i];
}

uint64_t di_safetensors_metadata_count(const di_safetensors *st) { return st->n_meta; }

di_status di_safetensors_metadata_at(const di_safetensors *st, uint64_t i, const char **key,
                                     const char **value) {
    if (i >= st->n_meta) return DI_ERR_RANGE;
    *key = st->meta_keys[i];
    *value = st->meta_values[i];
    return DI_OK;
}

const char *di_safetensors_metadata_get(const di_safetensors *st, const char *key) {
    for (uint64_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

/* ---- shard index ------------------------------------------------------- */

struct di_safetensors_index {
    char **shards;      /* (n_shards) sorted, distinct; owned */
    uint32_t n_shards;
    char **tensors;     /* (n_entries) sorted by name; owned */
    uint32_t *shard_of; /* (n_entries) index into shards */
    uint64_t n_entries;
};

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct entry_pair {
    char *tensor;      /* owned by the index */
    const char *shard; /* borrowed from the JSON */
} entry_pair;

static int cmp_pair(const void *a, const void *b) {
    return strcmp(((const entry_pair *)a)->tensor, ((const entry_pair *)b)->tensor);
}

/* A shard must be a plain file name beside the index: a path separator or a
 * dot entry would let a downloaded index read any file on the machine. */
static bool shard_name_ok(const char *s) {
    enum { MAX_FILE_NAME = 255 };
    size_t n = strlen(s);
    if (n == 0 || n > MAX_FILE_NAME) return false;
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    if (strchr(s, '/') || strchr(s, '\\')) return false;
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)s[i] < 0x20) return false;
    return utf8_valid(s, n);
}

di_status di_safetensors_index_parse(const void *json, uint64_t size, const char *name,
                                     di_safetensors_index **out, di_error *err) {
    *out = NULL;
    const char *file = name ? name : "<memory>";
    if (size > DI_SAFETENSORS_MAX_INDEX_BYTES)
        return di_error_set(err, DI_ERR_FORMAT, "%s: %llu bytes, over the %u-byte limit for an index",
                            file, (unsigned long long)size, DI_SAFETENSORS_MAX_INDEX_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(size ? json : "", (size_t)size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return di_error_set(err, DI_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)",
                            file, jerr.text, jerr.line, jerr.column);
    di_status s = DI_OK;
    di_safetensors_index *idx = di_calloc(1, sizeof *idx);
    const char **names = NULL;
    if (!idx) {
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    if (!json_is_object(root)) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: expected a JSON object, got %s", file,
                         json_kind(root));
        goto done;
    }
    const json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta)) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: metadata: expected an object, got %s", file,
                         json_kind(meta));
        goto done;
    }
    const json_t *wm = json_object_get(root, "weight_map");
    if (!wm) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: missing 'weight_map'", file);
        goto done;
    }
    if (!json_is_object(wm)) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: weight_map: expected an object, got %s", file,
                         json_kind(wm));
        goto done;
    }
    size_t n = json_object_size(wm);
    if (n == 0) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: weight_map is empty", file);
        goto done;
    }
    if (n > UINT32_MAX) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s: weight_map has too many entries", file);
        goto done;
    }
    idx->tensors = di_calloc(n, sizeof(char *));
    idx->shard_of = di_calloc(n, sizeof(uint32_t));
    names = di_calloc(n, sizeof(char *)); /* borrowed shard names, for dedup */
    if (!idx->tensors || !idx->shard_of || !names) {
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
        char shown[96];
        if (key[0] == '\0' || !utf8_valid(key, strlen(key))) {
            s = di_error_set(err, DI_ERR_FORMAT, "%s: weight_map: empty or invalid tensor name",
                             file);
            goto done;
        }
        if (!json_is_string(v)) {
            s = di_error_set(err, DI_ERR_FORMAT, "%s: weight_map.%s: expected a string, got %s",
                             file, di_st_short_name(shown, sizeof shown, key), json_kind(v));
            goto done;
        }
        if (!shard_name_ok(json_string_value(v))) {
            char shown2[96];
            s = di_error_set(err, DI_ERR_FORMAT,
                             "%s: weight_map.%s: '%s' is not a plain shard file name", file,
                             di_st_short_name(shown, sizeof shown, key),
                             di_st_short_name(shown2, sizeof shown2, json_string_value(v)));
            goto done;
        }
        if (!(idx->tensors[idx->n_entries] = di_strdup(key))) {
            s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
            goto done;
        }
        names[idx->n_entries] = json_string_value(v);
        idx->n_entries++;
    }
    /* Distinct shard names, sorted. */
    const char **sorted = di_malloc_array(n, sizeof(char *));
    if (!sorted) {
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    memcpy(sorted, names, n * sizeof(char *));
    qsort(sorted, n, sizeof(char *), cmp_str_ptr);
    idx->shards = di_calloc(n, sizeof(char *));
    if (!idx->shards) {
        free(sorted);
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (idx->n_shards > 0 && strcmp(idx->shards[idx->n_shards - 1], sorted[i]) == 0) continue;
        if (!(idx->shards[idx->n_shards] = di_strdup(sorted[i]))) {
            free(sorted);
            s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
            goto done;
        }
        idx->n_shards++;
    }
    free(sorted);
    /* Sort entries by tensor name (names are distinct: duplicate keys were
     * rejected), then resolve each shard name to its index. */
    entry_pair *pairs = di_malloc_array(n, sizeof *pairs);
    if (!pairs) {
        s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) pairs[i] = (entry_pair){idx->tensors[i], names[i]};
    qsort(pairs, n, sizeof *pairs, cmp_pair);
    for (uint64_t i = 0; i < n; i++) {
        char **hit = bsearch(&pairs[i].shard, idx->shards, idx->n_shards, sizeof(char *),
                             cmp_str_ptr);
        idx->tensors[i] = pairs[i].tensor;
        idx->shard_of[i] = (uint32_t)(hit - idx->shards);
    }
    free(pairs);
done:
    free((void *)names);
    json_decref(root);
    if (s != DI_OK) {
        di_safetensors_index_free(idx);
        return s;
    }
    *out = idx;
    return DI_OK;
}

void di_safetensors_index_free(di_safetensors_index *idx) {
    if (!idx) return;
    for (uint64_t i = 0; i < idx->n_entries; i++) free(idx->tensors ? idx->tensors[i] : NULL);
    free(idx->tensors);
    free(idx->shard_of);
    for (uint32_t i = 0; i < idx->n_shards; i++) free(idx->shards[i]);
    free(idx->shards);
    free(idx);
}

uint32_t di_safetensors_index_shard_count(const di_safetensors_index *idx) {
    return idx->n_shards;
}

const char *di_safetensors_index_shard_name(const di_safetensors_index *idx, uint32_t i) {
    return i < idx->n_shards ? idx->shards[i] : NULL;
}

uint64_t di_safetensors_index_entry_count(const di_safetensors_index *idx) {
    return idx->n_entries;
}

di_status di_safetensors_index_entry_at(const di_safetensors_index *idx, uint64_t i,
                                        const char **tensor, uint32_t *shard) {
    if (i >= idx->n_entries) return DI_ERR_RANGE;
    *tensor = idx->tensors[i];
    *shard = idx->shard_of[i];
    return DI_OK;
}
