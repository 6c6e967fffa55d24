/* GGUF v2/v3 reader.
 *
 * Layout (little-endian throughout):
 *   header   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   kv[n_kv] str key | u32 type | value       (str = u64 len + bytes)
 *   ti[n_t]  str name | u32 n_dims | i64 ne[n_dims] | u32 ggml_type | u64 offset
 *   padding  to general.alignment (default 32)
 *   data     tensor bytes at data_start + offset
 *
 * Everything is validated at open, before any accessor runs:
 *   - truncation anywhere (every read is bounds-checked against the image);
 *   - magic, version (v1 and big-endian files rejected with a reason);
 *   - kv/tensor counts against the bytes left (each entry has a minimum size),
 *     so allocations are bounded by the file size;
 *   - keys and tensor names: non-empty, no NUL, valid UTF-8, unique;
 *   - value types, array element types (no nested arrays), string and array
 *     lengths against the bytes left, bool bytes 0/1;
 *   - general.alignment: UINT32, nonzero power of two;
 *   - tensor infos: 1 <= n_dims <= 4, every dim > 0, element count and byte
 *     size without overflow, known ggml type, ne[0] a multiple of the block
 *     size, offset aligned, offset + bytes inside the data section (no
 *     wrapping), tensors pairwise non-overlapping.
 * String *values* are not UTF-8 checked: real vocabularies contain byte
 * tokens that are not valid UTF-8 on their own. */
#include "format/gguf.h"

#include "base/alloc.h"
#include "base/mapped_file.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Smallest encodings, used to bound counts by the bytes left before anything
 * is allocated: kv = key len (8) + 1 key byte + type (4) + 1 value byte;
 * tensor info = name len (8) + 1 name byte + n_dims (4) + one dim (8) +
 * type (4) + offset (8). */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_INFO_BYTES 33u
/* Keys and tensor names are identifiers, not payloads; a longer one is a
 * corrupt length, and capping it keeps messages and copies small. */
#define GGUF_MAX_NAME_BYTES 4096u

struct di_gguf {
    char *name;               /* owned: path or memory name, for messages */
    di_mapped_file file;      /* mapping when opened from a path */
    const uint8_t *data;      /* (size) bytes: the whole image */
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start;      /* byte offset of the data section */
    uint64_t n_kv;
    di_gguf_kv *kv;           /* (n_kv) owned */
    uint64_t *kv_sorted;      /* (n_kv) indices sorted by key, for lookup */
    uint64_t n_tensors;
    di_gguf_tensor *tensors;  /* (n_tensors) owned */
    uint64_t *t_sorted;       /* (n_tensors) indices sorted by name */
};

/* ---- cursor: every read is bounds-checked ---------------------------- */

typedef struct cursor {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *name; /* file name for messages */
    char ctx[160];    /* what is being read ("kv 'x'", "tensor #3"), for messages */
    di_error *err;
} cursor;

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

static di_status truncated(cursor *c, const char *what, uint64_t need) {
    return di_error_set(c->err, DI_ERR_FORMAT,
                        "%s: %s%struncated at byte %" PRIu64 " while reading %s (need %" PRIu64
                        " bytes, %" PRIu64 " left)",
                        c->name, c->ctx, c->ctx[0] ? ": " : "", c->pos, what, need, cur_left(c));
}

static di_status rd_bytes(cursor *c, uint64_t n, const uint8_t **out, const char *what) {
    if (n > cur_left(c)) return truncated(c, what, n);
    *out = c->p + c->pos;
    c->pos += n;
    return DI_OK;
}

static uint64_t le_load(const uint8_t *b, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static di_status rd_le(cursor *c, unsigned n, uint64_t *out, const char *what) {
    const uint8_t *b = NULL;
    di_status s = rd_bytes(c, n, &b, what);
    if (s) return s;
    *out = le_load(b, n);
    return DI_OK;
}

static di_status rd_u32(cursor *c, uint32_t *out, const char *what) {
    uint64_t v;
    di_status s = rd_le(c, 4, &v, what);
    if (!s) *out = (uint32_t)v;
    return s;
}

static di_status rd_u64(cursor *c, uint64_t *out, const char *what) {
    return rd_le(c, 8, out, what);
}

/* A length-prefixed string; the bytes stay in the image. */
static di_status rd_str(cursor *c, di_gguf_str *out, const char *what) {
    uint64_t len;
    di_status s = rd_u64(c, &len, what);
    if (s) return s;
    if (len > cur_left(c))
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: %s%s%s at byte %" PRIu64 " has length %" PRIu64
                            " but only %" PRIu64 " bytes are left in the file",
                            c->name, c->ctx, c->ctx[0] ? ": " : "", what, c->pos - 8, len,
                            cur_left(c));
    const uint8_t *b = NULL;
    rd_bytes(c, len, &b, what);
    out->ptr = (const char *)b;
    out->len = len;
    return DI_OK;
}

/* ---- small helpers ---------------------------------------------------- */

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const uint8_t *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        unsigned len;
        uint32_t cp, min;
        if ((b & 0xE0) == 0xC0) { len = 2; cp = b & 0x1F; min = 0x80; }
        else if ((b & 0xF0) == 0xE0) { len = 3; cp = b & 0x0F; min = 0x800; }
        else if ((b & 0xF8) == 0xF0) { len = 4; cp = b & 0x07; min = 0x10000; }
        else return false;
        if (n - i < len) return false;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

/* Validates an identifier (key or tensor name) and returns an owned,
 * NUL-terminated copy. what/index name the field in messages. */
static di_status copy_name(cursor *c, const di_gguf_str *s, const char *what, uint64_t index,
                           char **out) {
    if (s->len == 0)
        return di_error_set(c->err, DI_ERR_FORMAT, "%s: %s #%" PRIu64 " is empty", c->name, what,
                            index);
    if (s->len > GGUF_MAX_NAME_BYTES)
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: %s #%" PRIu64 " is %" PRIu64 " bytes long (limit %u)", c->name,
                            what, index, s->len, GGUF_MAX_NAME_BYTES);
    if (memchr(s->ptr, '\0', s->len))
        return di_error_set(c->err, DI_ERR_FORMAT, "%s: %s #%" PRIu64 " contains a NUL byte",
                            c->name, what, index);
    if (!utf8_valid((const uint8_t *)s->ptr, s->len))
        return di_error_set(c->err, DI_ERR_FORMAT, "%s: %s #%" PRIu64 " is not valid UTF-8",
                            c->name, what, index);
    *out = di_strndup(s->ptr, s->len);
    if (!*out) return di_error_set(c->err, DI_ERR_NOMEM, "%s: out of memory", c->name);
    return DI_OK;
}

/* Byte size of one scalar of type t; 0 for STRING/ARRAY/unknown. */
static unsigned scalar_bytes(uint32_t t) {
    switch (t) {
    case DI_GGUF_UINT8: case DI_GGUF_INT8: case DI_GGUF_BOOL: return 1;
    case DI_GGUF_UINT16: case DI_GGUF_INT16: return 2;
    case DI_GGUF_UINT32: case DI_GGUF_INT32: case DI_GGUF_FLOAT32: return 4;
    case DI_GGUF_UINT64: case DI_GGUF_INT64: case DI_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static bool type_is_signed(uint32_t t) {
    return t == DI_GGUF_INT8 || t == DI_GGUF_INT16 || t == DI_GGUF_INT32 || t == DI_GGUF_INT64;
}

static bool type_is_unsigned(uint32_t t) {
    return t == DI_GGUF_UINT8 || t == DI_GGUF_UINT16 || t == DI_GGUF_UINT32 ||
           t == DI_GGUF_UINT64;
}

/* Decodes one little-endian scalar of type t from b into the widened union. */
static void decode_scalar(uint32_t t, const uint8_t *b, di_gguf_kv *kv) {
    unsigned n = scalar_bytes(t);
    uint64_t raw = le_load(b, n);
    if (type_is_unsigned(t)) {
        kv->val.u64 = raw;
    } else if (type_is_signed(t)) {
        unsigned shift = 64 - 8 * n; /* sign-extend through the top bits */
        kv->val.i64 = (int64_t)(raw << shift) >> shift;
    } else if (t == DI_GGUF_FLOAT32) {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, sizeof f);
        kv->val.f64 = f;
    } else if (t == DI_GGUF_FLOAT64) {
        double d;
        memcpy(&d, &raw, sizeof d);
        kv->val.f64 = d;
    } else if (t == DI_GGUF_BOOL) {
        kv->val.b = raw != 0;
    }
}

/* ---- kv section --------------------------------------------------------- */

static di_status read_kv_value(cursor *c, di_gguf_kv *kv) {
    uint32_t t;
    di_status s = rd_u32(c, &t, "value type");
    if (s) return s;
    if (t >= DI_GGUF_TYPE_COUNT)
        return di_error_set(c->err, DI_ERR_FORMAT, "%s: kv '%s': unknown value type %" PRIu32,
                            c->name, kv->key, t);
    kv->type = (di_gguf_type)t;
    if (t == DI_GGUF_STRING) return rd_str(c, &kv->str, "string value");
    if (t != DI_GGUF_ARRAY) {
        const uint8_t *b = NULL;
        s = rd_bytes(c, scalar_bytes(t), &b, "scalar value");
        if (s) return s;
        if (t == DI_GGUF_BOOL && *b > 1)
            return di_error_set(c->err, DI_ERR_FORMAT, "%s: kv '%s': bool byte is %u, not 0 or 1",
                                c->name, kv->key, *b);
        decode_scalar(t, b, kv);
        return DI_OK;
    }

    uint32_t et;
    uint64_t n;
    if ((s = rd_u32(c, &et, "array element type")) || (s = rd_u64(c, &n, "array length")))
        return s;
    if (et == DI_GGUF_ARRAY)
        return di_error_set(c->err, DI_ERR_FORMAT, "%s: kv '%s': nested arrays are not supported",
                            c->name, kv->key);
    if (et >= DI_GGUF_TYPE_COUNT)
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: kv '%s': unknown array element type %" PRIu32, c->name, kv->key,
                            et);
    kv->arr_type = (di_gguf_type)et;
    kv->arr_len = n;
    if (et != DI_GGUF_STRING) {
        uint64_t bytes;
        if (di_mul_overflow_u64(n, scalar_bytes(et), &bytes) || bytes > cur_left(c))
            return di_error_set(c->err, DI_ERR_FORMAT,
                                "%s: kv '%s': array of %" PRIu64 " %s elements does not fit in the "
                                "%" PRIu64 " bytes left",
                                c->name, kv->key, n, di_gguf_type_name(et), cur_left(c));
        const uint8_t *b = NULL;
        rd_bytes(c, bytes, &b, "array data");
        if (et == DI_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (b[i] > 1)
                    return di_error_set(c->err, DI_ERR_FORMAT,
                                        "%s: kv '%s': bool element %" PRIu64 " is %u, not 0 or 1",
                                        c->name, kv->key, i, b[i]);
        kv->arr_data = b;
        return DI_OK;
    }
    /* Every string takes at least its 8-byte length: bound n before allocating. */
    if (n > cur_left(c) / 8)
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: kv '%s': array of %" PRIu64 " strings does not fit in the %" PRIu64
                            " bytes left",
                            c->name, kv->key, n, cur_left(c));
    kv->arr_str = di_calloc(n ? n : 1, sizeof *kv->arr_str);
    if (!kv->arr_str) return di_error_set(c->err, DI_ERR_NOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < n; i++) {
        if ((s = rd_str(c, &kv->arr_str[i], "array string"))) return s;
    }
    return DI_OK;
}

/* Sorts idx[0..n) by names[idx[i]] with a heap sort: no allocation, no
 * global state (qsort has no context argument), O(n log n) on any input. */
static int name_cmp(const char *const *names, uint64_t a, uint64_t b) {
    return strcmp(names[a], names[b]);
}

static void sift_down(const char *const *names, uint64_t *idx, uint64_t root, uint64_t n) {
    for (;;) {
        uint64_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && name_cmp(names, idx[child], idx[child + 1]) < 0) child++;
        if (name_cmp(names, idx[root], idx[child]) >= 0) return;
        uint64_t t = idx[root];
        idx[root] = idx[child];
        idx[child] = t;
        root = child;
    }
}

static void sort_by_name(const char *const *names, uint64_t *idx, uint64_t n) {
    if (n < 2) return;
    for (uint64_t start = n / 2; start-- > 0;) sift_down(names, idx, start, n);
    for (uint64_t end = n - 1; end > 0; end--) {
        uint64_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        sift_down(names, idx, 0, end);
    }
}

/* Builds idx sorted by name and rejects duplicates. names is (n) pointers. */
static di_status build_index(const char *const *names, uint64_t n, uint64_t **out,
                             const char *gname, const char *what, di_error *err) {
    uint64_t *idx = di_malloc_array(n ? n : 1, sizeof *idx);
    if (!idx) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", gname);
    for (uint64_t i = 0; i < n; i++) idx[i] = i;
    sort_by_name(names, idx, n);
    for (uint64_t i = 1; i < n; i++) {
        if (strcmp(names[idx[i - 1]], names[idx[i]]) == 0) {
            di_status s = di_error_set(err, DI_ERR_FORMAT, "%s: duplicate %s '%s'", gname, what,
                                       names[idx[i]]);
            free(idx);
            return s;
        }
    }
    *out = idx;
    return DI_OK;
}

static di_status read_kvs(cursor *c, di_gguf *g) {
    g->kv = di_calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    if (!g->kv) return di_error_set(c->err, DI_ERR_NOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        di_gguf_kv *kv = &g->kv[i];
        di_gguf_str key;
        snprintf(c->ctx, sizeof c->ctx, "kv #%" PRIu64, i);
        di_status s = rd_str(c, &key, "kv key");
        if (s || (s = copy_name(c, &key, "kv key", i, &kv->key))) return s;
        snprintf(c->ctx, sizeof c->ctx, "kv '%.120s'", kv->key);
        if ((s = read_kv_value(c, kv))) return s;
    }
    const char **names = di_malloc_array(g->n_kv ? g->n_kv : 1, sizeof *names);
    if (!names) return di_error_set(c->err, DI_ERR_NOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    di_status s = build_index(names, g->n_kv, &g->kv_sorted, c->name, "kv key", c->err);
    free(names);
    return s;
}

/* general.alignment, when present, must be a UINT32 nonzero power of two. */
static di_status read_alignment(di_gguf *g, di_error *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const di_gguf_kv *kv = di_gguf_find_kv(g, "general.alignment");
    if (!kv) return DI_OK;
    if (kv->type != DI_GGUF_UINT32)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: kv 'general.alignment' has type %s, expected uint32", g->name,
                            di_gguf_type_name(kv->type));
    uint64_t a = kv->val.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: kv 'general.alignment' is %" PRIu64
                            ", expected a nonzero power of two",
                            g->name, a);
    g->alignment = a;
    return DI_OK;
}

/* ---- tensor infos ------------------------------------------------------- */

static di_status read_tensor_info(cursor *c, uint64_t i, di_gguf_tensor *t) {
    di_gguf_str name;
    snprintf(c->ctx, sizeof c->ctx, "tensor #%" PRIu64, i);
    di_status s = rd_str(c, &name, "tensor name");
    if (s || (s = copy_name(c, &name, "tensor name", i, &t->name))) return s;
    snprintf(c->ctx, sizeof c->ctx, "tensor '%.120s'", t->name);
    if ((s = rd_u32(c, &t->n_dims, "tensor n_dims"))) goto trunc;
    if (t->n_dims == 0 || t->n_dims > DI_GGUF_MAX_DIMS)
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: tensor '%s': n_dims is %" PRIu32 ", expected 1..%d", c->name,
                            t->name, t->n_dims, DI_GGUF_MAX_DIMS);
    for (int d = 0; d < DI_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        if ((s = rd_u64(c, &v, "tensor dimension"))) goto trunc;
        t->ne[d] = (int64_t)v;
        if (t->ne[d] <= 0)
            return di_error_set(c->err, DI_ERR_FORMAT,
                                "%s: tensor '%s': dimension %" PRIu32 " is %" PRId64
                                ", expected > 0",
                                c->name, t->name, d, t->ne[d]);
    }
    if ((s = rd_u32(c, &t->ggml_type, "tensor type"))) goto trunc;
    if ((s = rd_u64(c, &t->offset, "tensor offset"))) goto trunc;

    /* Element count and byte size, every product overflow-checked. */
    uint64_t n = 1;
    for (int d = 0; d < DI_GGUF_MAX_DIMS; d++) {
        if (di_mul_overflow_u64(n, (uint64_t)t->ne[d], &n) || n > (uint64_t)INT64_MAX)
            return di_error_set(c->err, DI_ERR_FORMAT,
                                "%s: tensor '%s': element count overflows (%" PRId64 " x %" PRId64
                                " x %" PRId64 " x %" PRId64 ")",
                                c->name, t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    }
    t->n_elems = n;
    if (di_dtype_from_ggml(t->ggml_type, &t->dtype) != DI_OK)
        return di_error_set(c->err, DI_ERR_UNSUPPORTED,
                            "%s: tensor '%s': ggml type %" PRIu32 " is unknown or not supported",
                            c->name, t->name, t->ggml_type);
    const di_dtype_traits *tr = di_dtype_traits_of(t->dtype);
    uint64_t row;
    if (t->ne[0] % tr->block_size != 0)
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: tensor '%s': row length ne[0]=%" PRId64
                            " is not a multiple of the %s block size %" PRId32,
                            c->name, t->name, t->ne[0], tr->name, tr->block_size);
    if (di_dtype_row_bytes(t->dtype, t->ne[0], &row) != DI_OK ||
        di_mul_overflow_u64(row, n / (uint64_t)t->ne[0], &t->n_bytes))
        return di_error_set(c->err, DI_ERR_FORMAT, "%s: tensor '%s': byte size overflows",
                            c->name, t->name);
    return DI_OK;
trunc:
    return s;
}

typedef struct span {
    uint64_t begin, end;
    uint64_t tensor;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Offsets: aligned, inside the data section, pairwise disjoint. */
static di_status place_tensors(di_gguf *g, di_error *err) {
    uint64_t data_bytes = g->size > g->data_start ? g->size - g->data_start : 0;
    if (g->n_tensors == 0) return DI_OK;
    if (g->data_start > g->size)
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s: truncated: data section starts at byte %" PRIu64
                            " but the file has %" PRIu64 " bytes",
                            g->name, g->data_start, g->size);
    span *sp = di_malloc_array(g->n_tensors, sizeof *sp);
    if (!sp) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", g->name);
    di_status s = DI_OK;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        di_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (t->offset % g->alignment != 0) {
            s = di_error_set(err, DI_ERR_FORMAT,
                             "%s: tensor '%s': offset %" PRIu64 " is not a multiple of the "
                             "alignment %" PRIu64,
                             g->name, t->name, t->offset, g->alignment);
            goto out;
        }
        if (di_add_overflow_u64(t->offset, t->n_bytes, &end) || end > data_bytes) {
            s = di_error_set(err, DI_ERR_FORMAT,
                             "%s: tensor '%s': data [%" PRIu64 ", +%" PRIu64
                             ") runs past the end of the data section (%" PRIu64 " bytes)",
                             g->name, t->name, t->offset, t->n_bytes, data_bytes);
            goto out;
        }
        t->data = g->data + g->data_start + t->offset;
        sp[i] = (span){t->offset, end, i};
    }
    qsort(sp, g->n_tensors, sizeof *sp, cmp_span);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        if (sp[i].begin < sp[i - 1].end) {
            s = di_error_set(err, DI_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section",
                             g->name, g->tensors[sp[i - 1].tensor].name,
                             g->tensors[sp[i].tensor].name);
            goto out;
        }
    }
out:
    free(sp);
    return s;
}

static di_status read_tensors(cursor *c, di_gguf *g) {
    g->tensors = di_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors) return di_error_set(c->err, DI_ERR_NOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        di_status s = read_tensor_info(c, i, &g->tensors[i]);
        if (s) return s;
    }
    const char **names = di_malloc_array(g->n_tensors ? g->n_tensors : 1, sizeof *names);
    if (!names) return di_error_set(c->err, DI_ERR_NOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_tensors; i++) names[i] = g->tensors[i].name;
    di_status s = build_index(names, g->n_tensors, &g->t_sorted, c->name, "tensor name", c->err);
    free(names);
    return s;
}

/* ---- header and top level --------------------------------------------- */

static di_status read_header(cursor *c, di_gguf *g) {
    const uint8_t *magic = NULL;
    di_status s = rd_bytes(c, 4, &magic, "magic");
    if (s) return s;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: bad magic %02x %02x %02x %02x, not a GGUF file", c->name,
                            magic[0], magic[1], magic[2], magic[3]);
    if ((s = rd_u32(c, &g->version, "version"))) return s;
    if (g->version == 1)
        return di_error_set(c->err, DI_ERR_UNSUPPORTED,
                            "%s: GGUF version 1 is not supported (32-bit counts); convert the "
                            "file to version 3",
                            c->name);
    if (g->version != 2 && g->version != 3) {
        /* A byte-swapped small number is a big-endian file. */
        uint32_t sw = __builtin_bswap32(g->version);
        if (sw >= 1 && sw <= 3)
            return di_error_set(c->err, DI_ERR_UNSUPPORTED,
                                "%s: big-endian GGUF (version %" PRIu32 ") is not supported",
                                c->name, sw);
        return di_error_set(c->err, DI_ERR_UNSUPPORTED,
                            "%s: GGUF version %" PRIu32 " is not supported (expected 2 or 3)",
                            c->name, g->version);
    }
    if ((s = rd_u64(c, &g->n_tensors, "tensor count")) || (s = rd_u64(c, &g->n_kv, "kv count")))
        return s;
    /* Counts against the bytes left: bounds every allocation by the file size. */
    uint64_t need_kv, need_t, need;
    if (di_mul_overflow_u64(g->n_kv, GGUF_MIN_KV_BYTES, &need_kv) ||
        di_mul_overflow_u64(g->n_tensors, GGUF_MIN_TENSOR_INFO_BYTES, &need_t) ||
        di_add_overflow_u64(need_kv, need_t, &need) || need > cur_left(c))
        return di_error_set(c->err, DI_ERR_FORMAT,
                            "%s: header declares %" PRIu64 " kvs and %" PRIu64
                            " tensors, more than the %" PRIu64 " bytes left can hold",
                            c->name, g->n_kv, g->n_tensors, cur_left(c));
    return DI_OK;
}

static di_status parse(di_gguf *g, di_error *err) {
    cursor c = {.p = g->data, .size = g->size, .name = g->name, .err = err};
    di_status s;
    if ((s = read_header(&c, g))) return s;
    if ((s = read_kvs(&c, g))) return s;
    if ((s = read_alignment(g, err))) return s;
    if ((s = read_tensors(&c, g))) return s;
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (di_add_overflow_u64(c.pos, pad, &g->data_start))
        return di_error_set(err, DI_ERR_FORMAT, "%s: data section offset overflows", g->name);
    return place_tensors(g, err);
}

static di_status open_image(di_gguf *g, di_gguf **out, di_error *err) {
    di_status s = parse(g, err);
    if (s) {
        if (err && err->msg[0] == '\0') di_error_set(err, s, "%s: invalid GGUF", g->name);
        di_gguf_close(g);
        return s;
    }
    *out = g;
    return DI_OK;
}

di_status di_gguf_open_memory(const void *data, uint64_t size, const char *name, di_gguf **out,
                              di_error *err) {
    if (!out) return di_error_set(err, DI_ERR_INVALID_ARG, "gguf: out is NULL");
    *out = NULL;
    if (!data && size)
        return di_error_set(err, DI_ERR_INVALID_ARG, "gguf: data is NULL");
    di_gguf *g = di_calloc(1, sizeof *g);
    if (!g) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    g->name = di_strdup(name ? name : "<memory>");
    if (!g->name) {
        free(g);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    g->data = data;
    g->size = size;
    return open_image(g, out, err);
}

di_status di_gguf_open(const char *path, di_gguf **out, di_error *err) {
    if (!out || !path) return di_error_set(err, DI_ERR_INVALID_ARG, "gguf: NULL argument");
    *out = NULL;
    di_gguf *g = di_calloc(1, sizeof *g);
    if (!g) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    di_status s = di_mapped_file_open(path, &g->file, err);
    if (s) {
        free(g);
        return s;
    }
    g->name = di_strdup(path);
    if (!g->name) {
        di_mapped_file_close(&g->file);
        free(g);
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    }
    g->data = g->file.data;
    g->size = g->file.size;
    return open_image(g, out, err);
}

void di_gguf_close(di_gguf *g) {
    if (!g) return;
    if (g->kv) {
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].arr_str);
        }
    }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    di_mapped_file_close(&g->file);
    free(g->name);
    free(g);
}

/* ---- accessors ---------------------------------------------------------- */

uint32_t di_gguf_version(const di_gguf *g) { return g->version; }
uint64_t di_gguf_alignment(const di_gguf *g) { return g->alignment; }
uint64_t di_gguf_file_size(const di_gguf *g) { return g->size; }
uint64_t di_gguf_data_offset(const di_gguf *g) { return g->data_start; }
const char *di_gguf_name(const di_gguf *g) { return g->name; }
uint64_t di_gguf_kv_count(const di_gguf *g) { return g->n_kv; }
uint64_t di_gguf_tensor_count(const di_gguf *g) { return g->n_tensors; }

const di_gguf_kv *di_gguf_kv_at(const di_gguf *g, uint64_t i) {
    return i < g->n_kv ? &g->kv[i] : NULL;
}

const di_gguf_tensor *di_gguf_tensor_at(const di_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

/* Binary search over an index sorted by name; the index may be absent while
 * the file is still being parsed (read_alignment runs before it matters). */
static const char *kv_name(const void *base, uint64_t i) { return ((const di_gguf_kv *)base)[i].key; }
static const char *t_name(const void *base, uint64_t i) {
    return ((const di_gguf_tensor *)base)[i].name;
}

static int64_t bsearch_name(const void *base, const uint64_t *idx, uint64_t n,
                            const char *(*name_of)(const void *, uint64_t), const char *key) {
    if (!idx || !key) return -1;
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name_of(base, idx[mid]), key);
        if (c == 0) return (int64_t)idx[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const di_gguf_kv *di_gguf_find_kv(const di_gguf *g, const char *key) {
    int64_t i = bsearch_name(g->kv, g->kv_sorted, g->n_kv, kv_name, key);
    return i < 0 ? NULL : &g->kv[i];
}

const di_gguf_tensor *di_gguf_find_tensor(const di_gguf *g, const char *name) {
    int64_t i = bsearch_name(g->tensors, g->t_sorted, g->n_tensors, t_name, name);
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- typed getters ------------------------------------------------------ */

static di_status find_typed(const di_gguf *g, const char *key, const di_gguf_kv **kv,
                            di_error *err) {
    *kv = di_gguf_find_kv(g, key);
    if (!*kv) return di_error_set(err, DI_ERR_NOT_FOUND, "%s: kv '%s' is missing", g->name, key);
    return DI_OK;
}

static di_status wrong_type(const di_gguf *g, const di_gguf_kv *kv, const char *want,
                            di_error *err) {
    return di_error_set(err, DI_ERR_FORMAT, "%s: kv '%s' has type %s, expected %s", g->name,
                        kv->key, di_gguf_type_name(kv->type), want);
}

/* Integer value widened to a sign flag + magnitude so both getters can range
 * check without losing either end. */
static di_status int_value(const di_gguf *g, const di_gguf_kv *kv, bool *neg, uint64_t *mag,
                           di_error *err) {
    if (type_is_unsigned(kv->type)) {
        *neg = false;
        *mag = kv->val.u64;
    } else if (type_is_signed(kv->type)) {
        *neg = kv->val.i64 < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)kv->val.i64 : (uint64_t)kv->val.i64;
    } else {
        return wrong_type(g, kv, "an integer", err);
    }
    return DI_OK;
}

static di_status get_unsigned(const di_gguf *g, const char *key, uint64_t max, uint64_t *out,
                              di_error *err) {
    const di_gguf_kv *kv;
    bool neg;
    uint64_t mag;
    di_status s = find_typed(g, key, &kv, err);
    if (s || (s = int_value(g, kv, &neg, &mag, err))) return s;
    if (neg || mag > max)
        return di_error_set(err, DI_ERR_RANGE, "%s: kv '%s' is %s%" PRIu64 ", outside 0..%" PRIu64,
                            g->name, key, neg ? "-" : "", mag, max);
    *out = mag;
    return DI_OK;
}

di_status di_gguf_get_u32(const di_gguf *g, const char *key, uint32_t *out, di_error *err) {
    uint64_t v;
    di_status s = get_unsigned(g, key, UINT32_MAX, &v, err);
    if (!s) *out = (uint32_t)v;
    return s;
}

di_status di_gguf_get_u64(const di_gguf *g, const char *key, uint64_t *out, di_error *err) {
    return get_unsigned(g, key, UINT64_MAX, out, err);
}

di_status di_gguf_get_i64(const di_gguf *g, const char *key, int64_t *out, di_error *err) {
    const di_gguf_kv *kv;
    bool neg;
    uint64_t mag;
    di_status s = find_typed(g, key, &kv, err);
    if (s || (s = int_value(g, kv, &neg, &mag, err))) return s;
    if (neg) {
        *out = kv->val.i64;
        return DI_OK;
    }
    if (mag > (uint64_t)INT64_MAX)
        return di_error_set(err, DI_ERR_RANGE, "%s: kv '%s' is %" PRIu64 ", too large for int64",
                            g->name, key, mag);
    *out = (int64_t)mag;
    return DI_OK;
}

di_status di_gguf_get_f32(const di_gguf *g, const char *key, float *out, di_error *err) {
    const di_gguf_kv *kv;
    di_status s = find_typed(g, key, &kv, err);
    if (s) return s;
    if (kv->type != DI_GGUF_FLOAT32 && kv->type != DI_GGUF_FLOAT64)
        return wrong_type(g, kv, "float32 or float64", err);
    *out = (float)kv->val.f64;
    return DI_OK;
}

di_status di_gguf_get_bool(const di_gguf *g, const char *key, bool *out, di_error *err) {
    const di_gguf_kv *kv;
    di_status s = find_typed(g, key, &kv, err);
    if (s) return s;
    if (kv->type != DI_GGUF_BOOL) return wrong_type(g, kv, "bool", err);
    *out = kv->val.b;
    return DI_OK;
}

di_status di_gguf_get_str(const di_gguf *g, const char *key, di_gguf_str *out, di_error *err) {
    const di_gguf_kv *kv;
    di_status s = find_typed(g, key, &kv, err);
    if (s) return s;
    if (kv->type != DI_GGUF_STRING) return wrong_type(g, kv, "string", err);
    *out = kv->str;
    return DI_OK;
}

/* ---- arrays ------------------------------------------------------------- */

static di_status arr_elem(const di_gguf_kv *kv, uint64_t i, di_gguf_kv *tmp) {
    if (!kv || kv->type != DI_GGUF_ARRAY) return DI_ERR_INVALID_ARG;
    if (i >= kv->arr_len) return DI_ERR_RANGE;
    unsigned n = scalar_bytes(kv->arr_type);
    if (n == 0) return DI_ERR_FORMAT; /* string elements: use di_gguf_arr_get_str */
    decode_scalar(kv->arr_type, kv->arr_data + i * n, tmp);
    return DI_OK;
}

di_status di_gguf_arr_get_i64(const di_gguf_kv *kv, uint64_t i, int64_t *out) {
    di_gguf_kv tmp;
    di_status s = arr_elem(kv, i, &tmp);
    if (s) return s;
    if (type_is_signed(kv->arr_type)) *out = tmp.val.i64;
    else if (type_is_unsigned(kv->arr_type)) {
        if (tmp.val.u64 > (uint64_t)INT64_MAX) return DI_ERR_RANGE;
        *out = (int64_t)tmp.val.u64;
    } else if (kv->arr_type == DI_GGUF_BOOL) *out = tmp.val.b;
    else return DI_ERR_FORMAT;
    return DI_OK;
}

di_status di_gguf_arr_get_f64(const di_gguf_kv *kv, uint64_t i, double *out) {
    di_gguf_kv tmp;
    di_status s = arr_elem(kv, i, &tmp);
    if (s) return s;
    if (kv->arr_type == DI_GGUF_FLOAT32 || kv->arr_type == DI_GGUF_FLOAT64) *out = tmp.val.f64;
    else if (type_is_signed(kv->arr_type)) *out = (double)tmp.val.i64;
    else if (type_is_unsigned(kv->arr_type)) *out = (double)tmp.val.u64;
    else if (kv->arr_type == DI_GGUF_BOOL) *out = tmp.val.b;
    else return DI_ERR_FORMAT;
    return DI_OK;
}

di_status di_gguf_arr_get_str(const di_gguf_kv *kv, uint64_t i, di_gguf_str *out) {
    if (!kv || kv->type != DI_GGUF_ARRAY) return DI_ERR_INVALID_ARG;
    if (kv->arr_type != DI_GGUF_STRING) return DI_ERR_FORMAT;
    if (i >= kv->arr_len) return DI_ERR_RANGE;
    *out = kv->arr_str[i];
    return DI_OK;
}

const char *di_gguf_type_name(di_gguf_type t) {
    static const char *const NAMES[DI_GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < DI_GGUF_TYPE_COUNT ? NAMES[t] : "unknown";
}
